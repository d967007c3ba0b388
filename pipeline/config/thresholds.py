"""Reference values per benchmark cell: a reference, a warn level and a fail level, and an xfail escape."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

HIGHER_IS_BETTER_UNITS = frozenset({"t/s"})
# The classes of CPU host that `pipeline.infra.cpu_class` tells apart, fastest first: CPU hosts differ up to 2x, so a
# CPU profile's references are measured per class, and a class with none takes the next slower class's as a floor.
CPU_CLASSES = ("amx", "avx512", "avx2", "baseline")
METRIC_UNITS = {
    "pp_tps": ("t/s",),
    "tg_tps": ("t/s",),
    "peak_tps": ("t/s",),
    "ttfr": ("ms", "s"),
    "est_ppt": ("ms", "s"),
    "e2e_ttft": ("ms", "s"),
}


@dataclass(frozen=True)
class Level:
    """A warn or fail level: relative to the reference (-0.05 for '-5%') or an absolute bound."""

    relative: float | None = None
    absolute: float | None = None

    @classmethod
    def parse(cls, raw: float | int | str) -> Level:
        if isinstance(raw, str):
            return cls(relative=float(raw.rstrip("%")) / 100)
        return cls(absolute=float(raw))

    def bound(self, ref: float) -> float:
        """The value at which this level trips."""
        if self.relative is not None:
            return ref * (1 + self.relative)
        assert self.absolute is not None
        return self.absolute

    def __str__(self) -> str:
        if self.relative is not None:
            return f"{self.relative * 100:+g}%"
        return f"{self.absolute:g}"


@dataclass(frozen=True)
class Reference:
    """The reference for one cell, with the direction its unit implies."""

    cell: str
    metric: str
    ref: float | None
    unit: str
    warn: Level
    fail: Level
    xfail: str | None = None
    pending: str | None = None
    by_host: Mapping[str, float] = field(default_factory=dict)  # CPU class -> the reference measured on one
    origin: str = ""  # where the reference comes from when it was not measured on this class of host

    @property
    def higher_is_better(self) -> bool:
        return self.unit in HIGHER_IS_BETTER_UNITS

    def on_host(self, host: str | None, measured_on: str | None) -> Reference:
        """The reference for a class of CPU host (`ref` was measured on `measured_on`, the rest on `by_host`).

        A class with no reference of its own takes the next slower class's: a host at least as fast clears it, so a
        first night on an unmeasured class never trips on another class's speed, and gross breakage still does. A
        class with no slower one measured has no reference: the cell is judged by its history alone.
        """
        if host is None or measured_on is None or host not in CPU_CLASSES:
            return self
        measured = {measured_on: self.ref} | dict(self.by_host)
        if host in measured:
            return replace(self, ref=measured[host], by_host={})
        slower = [c for c in CPU_CLASSES[CPU_CLASSES.index(host) + 1 :] if measured.get(c) is not None]
        if slower:
            origin = f"the {slower[0]} hosts' reference: none measured on {host} hosts"
            return replace(self, ref=measured[slower[0]], by_host={}, origin=origin)
        pending = f"none measured on {host} hosts or a slower class"
        return replace(self, ref=None, by_host={}, pending=self.pending or pending)


# A paired regression smaller than this is not blocked (unless a hardware's thresholds say otherwise): below it B/A
# ratios are within what a build change that nobody would revert (and residual within-night drift) produces.
MIN_EFFECT = 0.02
# Side by side, pairs stop here unless the hardware's thresholds say otherwise: 8, then once 8 more.
MAX_SIDE_BY_SIDE_PAIRS = 16
# Side by side, a case's pairs come in blocks of this many; before each block after the first, the server booted
# earlier is booted again (stages/prove/perf/pairs.py), B first: A1 B1, A1 B2, A2 B2, A2 B3, ...
PAIRS_PER_BLOCK = 4
# Two-sided confidence level of the interval on B/A that must lie above 1 - min_effect for a PASS.
CI_LEVEL = 0.95

# Degrees of freedom the shipped boot spread is worth against the night's own boot pairs (docs/verdict.md, "Where
# the constants come from").
PRIOR_DF = 8.0
# Once this host's own boot pairs carry this many degrees of freedom and spread wider than the pool, their spread is
# taken alone (detect/boots.py; docs/verdict.md, "Where the constants come from").
OWN_SPREAD_DF = 8
# Boot pairs in turns are asked one at a time and decided by a sequential test (detect/sequential.py) from the
# MIN_BOOT_PAIRS-th on, at most MAX_BOOT_PAIRS a cell a night: docs/verdict.md, "The operating point".
MIN_BOOT_PAIRS = 1
MAX_BOOT_PAIRS = 8
# The sequential test's error rates: alpha, an unchanged build FAILed (it blocks a release and pages someone); beta,
# a build slower by the full shift PASSed (docs/verdict.md, "The operating point").
SEQUENTIAL_ALPHA = 0.001
SEQUENTIAL_BETA = 0.10
# beta where a PASS would close an open regression's alert (detect/sequential.py CLOSE_AT)
CLOSE_BETA = 0.01
# The slowdown the sequential test is built to catch (its alternative), unless the hardware's min_effect is larger
# (docs/verdict.md, "The operating point").
SEQUENTIAL_SHIFT = 0.04
# The floor under the prior's boot spread, for hardware whose shipped value is lower or 0 (never measured): two boots
# of one build are never assumed closer than this (the CPU profile measured 0.7 % on tg32, 2 % on pp128).
MIN_PRIOR_BOOT_SD = 0.01


@dataclass(frozen=True)
class PairRules:
    """How paired A/B runs are judged on this hardware: the smallest slowdown they block, and how far two boots of
    one build measure apart (log ratio SD), which no number of pairs from the same two boots can average away."""

    min_effect: float = MIN_EFFECT
    boot_sd: float = 0.0
    # Side by side, the most pairs a cell is measured with, in steps of 8 while undecided: past 16 only where boots
    # spread so far that more boots must be averaged (each block of 4 pairs boots one side again).
    max_pairs: int = MAX_SIDE_BY_SIDE_PAIRS
    # The sequential test's alternative as a log ratio, where a trial asks about tonight's own slowdown
    # (against_tonight); None: the one min_effect makes
    alternative: float | None = None

    def shift(self) -> float:
        """The sequential test's alternative, as a log ratio: SEQUENTIAL_SHIFT, or min_effect where larger (or
        tonight's slowdown, in a trial)."""
        if self.alternative is not None:
            return self.alternative
        return -math.log1p(-max(self.min_effect, SEQUENTIAL_SHIFT))

    def against_tonight(self, b_over_a: float) -> PairRules:
        """The rules of a culprit trial or bisection step for a cell whose pairs FAILed tonight at `b_over_a`: its
        question is not "is this build slower by the smallest slowdown we block?" but "does it carry tonight's
        slowdown?", so half of tonight's (in log) is the line between the answers. Side by side, a PASS rules out a
        slowdown of half tonight's and a FAIL is one significantly beyond it; in turns, the sequential test weighs
        tonight's slowdown against none (half of it is where its evidence neither grows nor shrinks). Each boot pair
        then weighs effect^2 / (2 var): at the gpu profile's boot spread (6.5 %) a 20 % slowdown brings about 6 a
        pair against the bounds' -4.6 and +6.8, a boot pair or two where the usual rules ask several, and a boot pair
        is two boots: minutes on a GPU, half an hour for a Spark's large model. The smallest slowdown and the
        alternative are never below the usual ones."""
        if not 0 < b_over_a < 1:
            return self
        effect = -math.log(b_over_a)
        min_effect = max(self.min_effect, -math.expm1(-effect / 2))  # B/A at half tonight's log slowdown
        return replace(self, min_effect=min_effect, alternative=max(self.shift(), effect))

    def passable_in_turns(self) -> bool:
        """Whether boot pairs in turns can PASS an unchanged build within MAX_BOOT_PAIRS: the evidence an unchanged
        build's pairs bring on average (shift^2 / (2 var) a pair, var the prior's boot spread, at least
        MIN_PRIOR_BOOT_SD) must reach the sequential PASS bound."""
        variance = max(self.boot_sd, MIN_PRIOR_BOOT_SD) ** 2
        pass_at = math.log(SEQUENTIAL_BETA / (1 - SEQUENTIAL_ALPHA))
        return -MAX_BOOT_PAIRS * self.shift() ** 2 / (2 * variance) <= pass_at

    def passable(self) -> bool:
        """Whether an unchanged build can PASS at all side by side: its CI, at least as wide as the boot spread's
        over the boots of max_pairs, must fit above 1 - min_effect (the normal quantile is the narrowest the t
        interval gets)."""
        return self.min_effect > NormalDist().inv_cdf(0.5 + CI_LEVEL / 2) * self.narrowest_boot_sd()

    def narrowest_boot_sd(self) -> float:
        """The boot term of max_pairs side-by-side pairs, the most boots a cell averages."""
        return self.boot_sd * math.sqrt(boot_share(blocked_boots(self.max_pairs)))


def blocked_boots(pairs: int) -> list[tuple[int, int]]:
    """Each side-by-side pair's (A boot, B boot), counted from 0, for `pairs` pairs in blocks of PAIRS_PER_BLOCK,
    one side booted again before each block after the first, B first."""
    boots, a, b = [], 0, 0
    for index in range(pairs):
        block = index // PAIRS_PER_BLOCK
        if block and index % PAIRS_PER_BLOCK == 0:
            a, b = (a, b + 1) if block % 2 else (a + 1, b)
        boots.append((a, b))
    return boots


def boot_share(boots: Sequence[tuple[int, int]]) -> float:
    """The variance of the pairs' mean boot offset, in units of one boot pair's (boot_sd squared), given each pair's
    (A boot, B boot). A boot's offset enters the mean with the share of pairs measured on it, each side's offset
    carrying half a boot pair's variance: one boot pair gives 1, k boot pairs of new boots 1/k, and blocks that
    boot one side again each time (A1 B1, A1 B2, A2 B2, ...) a little more than 1/k, as neighbours share a boot."""
    n = len(boots)
    shares = Counter(("a", a) for a, _ in boots) + Counter(("b", b) for _, b in boots)
    return sum((count / n) ** 2 for count in shares.values()) / 2


@dataclass(frozen=True)
class Thresholds:
    """All references for one model on one hardware profile."""

    hardware: str
    model_id: str
    cells: Mapping[str, Reference]
    source: str = ""
    pairs: PairRules = field(default_factory=PairRules)
    host_class: str | None = None  # CPU profiles: the class of host the cells' `ref` values were measured on
    # The build the references were measured on, when it is not one of this pipeline's nights (a community image,
    # a report): until a cell has a confirmed night of its own, a difference to it is a gap between two builds,
    # reported with this provenance, never a regression blamed on tonight's wheels.
    another_build: str | None = None

    def on_host(self, host: str | None) -> Thresholds:
        """Every cell's reference for this class of CPU host (see Reference.on_host)."""
        return replace(self, cells={name: ref.on_host(host, self.host_class) for name, ref in self.cells.items()})


def default_metric(cell_name: str) -> str:
    """pp cells are judged on prompt throughput, tg cells on generation throughput."""
    return "pp_tps" if cell_name.startswith("pp") else "tg_tps"


def build_thresholds(hardware: str, model_id: str, data: Mapping[str, Any]) -> Thresholds:
    """Thresholds from schema-valid data."""
    cells = {
        name: Reference(
            name,
            raw.get("metric", default_metric(name)),
            None if raw["ref"] is None else float(raw["ref"]),
            raw["unit"],
            Level.parse(raw["warn"]),
            Level.parse(raw["fail"]),
            raw.get("xfail"),
            raw.get("pending"),
            {host: float(other["ref"]) for host, other in raw.get("by_host", {}).items()},
        )
        for name, raw in data["cells"].items()
    }
    raw_pairs = data.get("pairs", {})
    pairs = PairRules(
        float(raw_pairs.get("min_effect", MIN_EFFECT)),
        float(raw_pairs.get("boot_sd", 0.0)),
        int(raw_pairs.get("max_pairs", MAX_SIDE_BY_SIDE_PAIRS)),
    )
    return Thresholds(
        hardware,
        model_id,
        cells,
        data.get("source", ""),
        pairs,
        data.get("host_class"),
        data.get("another_build"),
    )


def level_problems(ref: Reference) -> list[tuple[str, str]]:
    """(field, message) for levels that point the wrong way or are in the wrong order."""
    problems: list[tuple[str, str]] = []
    allowed = METRIC_UNITS[ref.metric]
    if ref.unit not in allowed:
        problems.append(("unit", f"'{ref.unit}' does not fit metric {ref.metric}; use {' or '.join(allowed)}"))
        return problems
    if (ref.ref is None) != (ref.pending is not None):
        problems.append(("ref", "give a reference value, or ref: null with 'pending' saying why there is none yet"))
        return problems
    if ref.ref is None:
        for name, level in (("warn", ref.warn), ("fail", ref.fail)):
            if level.relative is None:
                problems.append((name, "without a reference, levels must be relative (such as '-5%')"))
        return problems
    worse = -1 if ref.higher_is_better else 1
    for name, level in (("warn", ref.warn), ("fail", ref.fail)):
        if ref.higher_is_better and level.bound(ref.ref) <= 0:
            problems.append((name, f"{level} puts the bound at {level.bound(ref.ref):g} {ref.unit}, which no "
                             f"measurement falls below: it never trips; use a level between 0 and -100%"))  # fmt: skip
            continue
        delta = level.bound(ref.ref) - ref.ref
        if delta * worse <= 0:
            direction = "below" if ref.higher_is_better else "above"
            problems.append(
                (
                    name,
                    f"{level} is not {direction} the reference {ref.ref:g} {ref.unit}; "
                    f"a {ref.unit} regression is a {'lower' if ref.higher_is_better else 'higher'} value",
                )
            )
    if not problems and (ref.fail.bound(ref.ref) - ref.warn.bound(ref.ref)) * worse < 0:
        problems.append(
            ("fail", f"fail level {ref.fail} is milder than warn level {ref.warn}; fail must be at least as far")
        )
    return problems
