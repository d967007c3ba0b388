"""What boot pairs in turns have taught about one cell, as the verdict reasons over it: the boot spread so far (and
how a night's boot pair differences join it), and the evidence of undecided nights carried against one A. The perf
stage keeps them per host and series (stages/prove/perf/pair_book.py); here they are plain records and a rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Carried:
    """The boot pairs of undecided nights against one A: their differences and the nights they span."""

    a: str
    differences: tuple[float, ...] = ()
    nights: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpreadSoFar:
    """This host's boot pair differences for a cell: squared deviations around each night's mean, their df."""

    squares: float = 0.0
    df: int = 0
    nights: int = 0

    @property
    def variance(self) -> float:
        return self.squares / self.df if self.df else math.nan

    def plus(self, differences: Sequence[float]) -> SpreadSoFar:
        if len(differences) < 2:
            return self
        centre = statistics.fmean(differences)
        squares = math.fsum((d - centre) ** 2 for d in differences)
        return SpreadSoFar(self.squares + squares, self.df + len(differences) - 1, self.nights + 1)
