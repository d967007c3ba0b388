"""Aftermath phase: culprits of a failing night, alerts, reports and the durations that guide tomorrow's ETA."""
