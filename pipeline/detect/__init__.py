"""Performance-regression detection: pure functions from benchmark numbers to decisions that show every number."""

from __future__ import annotations

from pipeline.detect.steps import Confirmation, Screen, StepCheck, confirm, detect_step, screen

__all__ = ["Confirmation", "Screen", "StepCheck", "confirm", "detect_step", "screen"]
