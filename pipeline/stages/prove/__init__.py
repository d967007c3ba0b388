"""Prove phase: the night's candidate on each matrix entry (health, smoke, boot, golden, perf), one Outcome each."""
