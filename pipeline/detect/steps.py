"""Regression detection for one benchmark cell: a cheap screen on history, a paired A/B confirmation, a step test.

The nightly flow is screen -> (only if it trips) paired confirmation on the same night. Night-to-night noise
(about 2 % on a shared host) is larger than within-night noise (about 1 % a sample), so history alone can only
tell a 5 % regression from a bad night slowly; interleaving A B A B on one night cancels the night effect. The
screen is therefore tuned to miss almost nothing and the confirmation to accuse almost never. `detect_step` is
the fallback when no last-good build can be run for the confirmation.

"Last good" (A) must be the last build a confirmation PASSed, not merely the last one published: a regression
the screen lets through on its first night would otherwise become its own reference and never FAIL (measured:
88-92.5 % of 5 % steps ever caught that way, 99-100 % by the second night after with A kept at the last
confirmed build). Every default below was chosen with benchmarks/detector_simulation.py (2 % night noise, 1 %
sample noise, 5 samples, optional -10 % one-night dips on 5 % of nights); its --sweep prints the trade-offs
quoted in the comments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pipeline.config.thresholds import CI_LEVEL, MIN_EFFECT, boot_share
from pipeline.detect.stats import MEDIAN_VARIANCE_FACTOR, median, robust_sd, t_cdf, t_quantile

# Figures below: benchmarks/detector_simulation.py --sweep, 200 series a case, -5 % step with dips, month of 30.

# The regression size the gate exists to catch: the screen trips whenever tonight is consistent with it.
TARGET_EFFECT = 0.05
# Nightly medians the screen's baseline looks back over. 7, 14 and 21 measured within 2 points of each other; two
# weeks keeps the median and MAD steady (one dip or one slipped regressed night cannot move them) and still
# follows slow host drift.
BASELINE_NIGHTS = 14
# Fewer healthy nights than this and the screen has no noise estimate: it trips only on a drop past
# SHORT_HISTORY_DROP against the median of the nights it has (with none, it has no baseline and says so).
MIN_BASELINE_NIGHTS = 5
# The drop that trips a screen of 1 to MIN_BASELINE_NIGHTS - 1 nights, whose noise is unknown. Past any host's
# measured night-to-night spread (the CPU profile 2-5 %; a GPU's boots 2.4-6.9 % SD of log, one 14 % fast boot in
# six): a host's first nights catch gross steps (a -30 % build on its 2nd night) without pairing every noisy one.
SHORT_HISTORY_DROP = 0.15
# z in `threshold = TARGET_EFFECT - SCREEN_Z x noise`: tonight trips the screen unless z noise units above a 5 % drop
# (docs/verdict.md, "Where the constants come from").
SCREEN_Z = 1.64
# Where a night is one boot (one server at a time), the screen never trips on a drop smaller than this share of the
# effect (1.5 %): the "catching" operating point, chosen and measured in docs/verdict.md ("The operating point").
SCREEN_FLOOR = 0.3

Decision = Literal["FAIL", "PASS", "INCONCLUSIVE"]
# One-sided level at which the paired test must exclude "no regression" before a FAIL. Stringent, because a FAIL
# blocks a release and pages someone; 8 pairs still fail a true -5 % every time (20000 simulated sets).
FAIL_ALPHA = 0.001
# Pairs per confirmation, and the pairs added once when the first set is INCONCLUSIVE. Measured on 20000 sets
# with 1 % per-sample noise: a true -5 % FAILs 71 % with 5 pairs (t with 4 degrees of freedom is wide), 94 % with
# 6 and 100 % with 8; no change PASSes 67 % with 5, 93 % with 8 (the rest INCONCLUSIVE, settled by the extension).
CONFIRM_PAIRS = 8
# The paired statistic: "mean" (Student's t on the mean log ratio) or "trimmed" (Yuen's t on the 20 % trimmed mean,
# which one outlier run cannot drag). Chosen with benchmarks/detector_simulation.py's outlier scenarios.
PAIRED_STATISTIC: Literal["mean", "trimmed"] = "trimmed"
TRIM = 0.2

# detect_step is a one-sided CUSUM of nightly drops against a baseline, each night's drop clipped so that one bad
# night can add only a bounded amount. Nights it accumulates over (a week), and the baseline nights before them.
STEP_RUN_NIGHTS = 7
STEP_BASELINE_NIGHTS = 21
# Clip and alarm level, in units of the baseline's noise (robust SD of one nightly median). Measured (caught
# within 4 / 7 nights; months falsely alarmed with dips, never without): clip 3, level 5: 53 % / 85 %, 1.5 %;
# level 4.5: 62 % / 90 %, 2.5 %; level 4: 72 % / 93 %, 5 %; clip 4 lets dips through (10-23 %); clip 2.5,
# level 4: 56 % / 86 %, 1 %, but then no regression, however large, can fire before its 4th night (3 with clip 3).
STEP_CLIP = 3.0
STEP_LEVEL = 5.0
# Noise is never taken below this: a suspiciously quiet history must not make every wobble (or none) count.
MIN_NOISE = 0.005


def _nightly_medians(nights: Sequence[Sequence[float]]) -> list[float]:
    return [median(night) for night in nights]


def _check_positive(values: Sequence[float], what: str) -> None:
    # Throughput is positive and finite; anything else is a broken measurement, not a regression.
    bad = [v for v in values if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"{what} must be positive finite numbers, got {bad[:3]}")


@dataclass(frozen=True)
class Screen:
    """Tonight against recent history: every number the trip decision used."""

    nights_used: int
    baseline: float  # median of the last nights' medians (nan without enough history)
    tonight: float  # median of tonight's samples
    relative_change: float  # tonight / baseline - 1 (nan without enough history)
    noise: float  # robust relative SD of one nightly median (1.4826 x MAD)
    noise_of_change: float  # noise widened by the baseline's own uncertainty
    threshold: float  # trips when relative_change < -threshold
    tripped: bool
    reason: str


def screen(
    history_nights: Sequence[Sequence[float]],
    tonight: Sequence[float],
    *,
    window: int = BASELINE_NIGHTS,
    effect: float = TARGET_EFFECT,
    z: float | None = None,
    min_nights: int = MIN_BASELINE_NIGHTS,
    floor: float = 0.0,
) -> Screen:
    """Trip when tonight's median is lower than the recent baseline by more than `effect - z x noise`.

    history_nights holds the samples of past accepted nights, oldest first; only the last `window` are used.
    The threshold is tied to the effect to catch rather than to the noise alone, so a noisier host trips more
    often (more confirmations) instead of missing more regressions; it never goes below `floor` x effect (0 side
    by side: an improvement never trips; SCREEN_FLOOR where each night is one boot and a confirmation costs boots).
    """
    if not tonight:
        raise ValueError("tonight has no samples")
    _check_positive(tonight, "tonight's samples")
    recent = [night for night in history_nights[-window:] if night]
    for night in recent:
        _check_positive(night, "history samples")
    tonight_median = median(tonight)
    if not recent:
        return Screen(
            0, math.nan, tonight_median, math.nan, math.nan, math.nan, 0.0, True,
            f"no healthy night of history yet (the screen needs {min_nights} for its noise)",
        )  # fmt: skip
    medians = _nightly_medians(recent)
    baseline = median(medians)
    change = tonight_median / baseline - 1.0
    if len(medians) < min_nights:  # no noise estimate yet: only a drop past SHORT_HISTORY_DROP trips
        noise = noise_of_change = math.nan
        threshold = SHORT_HISTORY_DROP
        why = f"fewer than {min_nights} nights: no noise estimate yet, so only a gross drop trips"
    else:
        noise = robust_sd([m / baseline - 1.0 for m in medians], 0.0)
        noise_of_change = noise * math.sqrt(1.0 + MEDIAN_VARIANCE_FACTOR / len(medians))
        z = SCREEN_Z if z is None else z  # read now, so a benchmark can change the module's default
        threshold = max(effect * floor, effect - z * noise_of_change)
        least = f"{floor:g} x {effect:.0%}" if floor else "0"
        why = f"= max({least}, {effect:.0%} - {z:g} x noise {noise_of_change:.2%})"
    tripped = change < -threshold
    verdict = "below" if tripped else "not below"
    nights = f"{len(medians)} night{'s' if len(medians) > 1 else ''}"
    reason = f"tonight {change:+.2%} vs median of {nights}, {verdict} -{threshold:.2%} ({why})"
    return Screen(len(medians), baseline, tonight_median, change, noise, noise_of_change, threshold, tripped, reason)


@dataclass(frozen=True)
class Confirmation:
    """A paired A/B decision on log(B/A): every number it used. Ratios are B/A, below 1 means B is slower."""

    decision: Decision
    reason: str
    pairs: int
    mean_ratio: float  # exp(mean log ratio)
    mean_log_ratio: float
    sd_log_ratio: float
    ci_low: float  # two-sided CI on the ratio at ci_level
    ci_high: float
    ci_level: float
    fail_bound: float  # one-sided upper bound on the ratio at 1 - fail_alpha: below 1 means a significant slowdown
    fail_alpha: float
    t_statistic: float  # mean log ratio / its standard error; -inf/+inf when every pair agrees exactly
    p_value: float  # one-sided, alternative "B slower than A"
    min_effect: float
    boot_sd: float = 0.0  # SD of log(B/A) between two boots of one build, counted into the error (see confirm)


def _location(logs: Sequence[float], statistic: Literal["mean", "trimmed"]) -> tuple[float, float, int]:
    """(estimate, its standard error, degrees of freedom) of the centre of the log ratios.

    "trimmed" is Yuen's: the mean of the middle values after cutting TRIM of each end, its error from the
    winsorized variance; with too few pairs to cut any, it is the plain mean.
    """
    n = len(logs)
    cut = int(TRIM * n) if statistic == "trimmed" else 0
    ordered = sorted(logs)
    kept = ordered[cut : n - cut]
    estimate = math.fsum(kept) / len(kept)
    winsorized = [ordered[cut]] * cut + kept + [ordered[n - cut - 1]] * cut
    centre = math.fsum(winsorized) / n
    # Identical values must give a spread of exactly 0, which rounding in the mean would otherwise spoil.
    variance = 0.0 if min(kept) == max(kept) else math.fsum((x - centre) ** 2 for x in winsorized) / (n - 1)
    h = len(kept)
    return estimate, math.sqrt((n - 1) * variance / (h * (h - 1))), h - 1


def confirm(
    pairs: Sequence[tuple[float, float]],
    *,
    min_effect: float = MIN_EFFECT,
    fail_alpha: float = FAIL_ALPHA,
    ci_level: float = CI_LEVEL,
    boot_sd: float = 0.0,
    statistic: Literal["mean", "trimmed"] | None = None,
    boots: Sequence[tuple[int, int]] | None = None,
) -> Confirmation:
    """Decide on interleaved (A, B) pairs measured on the same night, A the last good build and B the candidate.

    FAIL: the mean log ratio is significantly below 0 (one-sided t at fail_alpha) and below log(1 - min_effect).
    PASS: the ci_level interval on B/A lies above 1 - min_effect, so a regression of min_effect is ruled out.
    INCONCLUSIVE: neither, the interval being too wide or straddling 1 - min_effect; measure more pairs.
    Log ratios make a slowdown and the matching speedup symmetric, and a night's shared factor cancels in each.
    Pairs measure two server processes, and two boots of one build can differ by more than the pairs' spread shows
    (memory layout, kernel choices made at start-up): boot_sd, the SD of log(B/A) between such boots as measured on
    the hardware, is added to the error of the mean, so that a boot's own offset is never taken for the build's.
    `boots` names each pair's (A boot, B boot) where the pairs span several boots (side by side, one server booted
    again between blocks): the boot term then shrinks as boot_share says; without it, all pairs share one boot pair.
    """
    for a, b in pairs:
        _check_positive((a, b), "paired measurements")
    n = len(pairs)
    if n < 2:
        return Confirmation(
            "INCONCLUSIVE", f"{n} pair(s): need at least 2 for a spread", n, math.nan, math.nan, math.nan,
            math.nan, math.nan, ci_level, math.nan, fail_alpha, math.nan, math.nan, min_effect,
        )  # fmt: skip
    logs = [math.log(b / a) for a, b in pairs]
    mean, se_pairs, pairs_df = _location(logs, statistic or PAIRED_STATISTIC)
    sd = se_pairs * math.sqrt(n)
    boots = boots or [(0, 0)] * n
    share = boot_share(boots)
    se = math.hypot(se_pairs, boot_sd * math.sqrt(share))
    df = float(pairs_df)
    if boot_sd > 0:
        # Welch-Satterthwaite: the boot spread is a known variance (infinite degrees of freedom), so the error's
        # degrees of freedom grow as it dominates; all of them when the pairs themselves agree exactly.
        df = math.inf if se_pairs == 0 else df * (se / se_pairs) ** 4
    unit = f"{n} pairs"
    a_boots, b_boots = len({a for a, _ in boots}), len({b for _, b in boots})
    over = f" over {a_boots} boot{'s' * (a_boots > 1)} of A and {b_boots} of B" if share < 1 else ""
    extra = f" (counting a boot-to-boot SD of {boot_sd:.1%}{over})" if boot_sd > 0 else ""
    return decide(mean, se, df, n=n, unit=unit, sd=sd, min_effect=min_effect, fail_alpha=fail_alpha,
                  ci_level=ci_level, boot_sd=boot_sd, note=extra)  # fmt: skip


def decide(  # noqa: PLR0913 -- a pure decision: every number it uses is shown
    mean: float,
    se: float,
    df: float,
    *,
    n: int,
    unit: str,
    sd: float,
    min_effect: float,
    fail_alpha: float,
    ci_level: float,
    boot_sd: float,
    note: str = "",
) -> Confirmation:
    """The decision on a mean log ratio with its standard error and degrees of freedom (see confirm): FAIL when
    significantly below 1 and below 1 - min_effect, PASS when the interval rules min_effect out, else INCONCLUSIVE.
    `unit` names what was averaged ("8 pairs", "3 boot pairs"), `note` is added to the reason."""
    limit = math.log1p(-min_effect)
    if se > 0:
        t = mean / se
        p_value = t_cdf(t, df)
    else:
        # Identical ratios in every pair and no boot spread: the mean is the answer with certainty.
        t = math.copysign(math.inf, mean) if mean else 0.0
        p_value = 0.0 if mean < 0 else (0.5 if mean == 0 else 1.0)
    fail_bound_log = mean + t_quantile(1.0 - fail_alpha, df) * se
    half = t_quantile(0.5 + ci_level / 2.0, df) * se
    low, high = mean - half, mean + half
    if fail_bound_log < 0 and mean < limit:
        decision: Decision = "FAIL"
        reason = (
            f"B/A {math.exp(mean):.4f} over {unit} is below {1 - min_effect:.2f} and significant: "
            f"upper {1 - fail_alpha:.1%} bound {math.exp(fail_bound_log):.4f} < 1 (p={p_value:.2g})"
        )
    elif low > limit:
        decision = "PASS"
        reason = (
            f"B/A {math.exp(mean):.4f} over {unit}; its {ci_level:.0%} CI "
            f"[{math.exp(low):.4f}, {math.exp(high):.4f}] rules out a slowdown of {min_effect:.0%}"
        )
    else:
        decision = "INCONCLUSIVE"
        reason = (
            f"B/A {math.exp(mean):.4f} over {unit}; its {ci_level:.0%} CI [{math.exp(low):.4f}, "
            f"{math.exp(high):.4f}] neither excludes a {min_effect:.0%} slowdown nor shows one significantly"
        )
    return Confirmation(
        decision, reason + note, n, math.exp(mean), mean, sd, math.exp(low), math.exp(high), ci_level,
        math.exp(fail_bound_log), fail_alpha, t, p_value, min_effect, boot_sd,
    )  # fmt: skip


@dataclass(frozen=True)
class StepCheck:
    """The history-only step test: every number it used. Drops are relative to the baseline, positive = slower."""

    baseline_nights: int
    baseline: float  # median of the nightly medians before the run (nan without enough history)
    noise: float  # robust relative SD of one nightly median in the baseline, at least MIN_NOISE
    run: tuple[float, ...]  # the last nightly medians the CUSUM runs over, oldest first
    drops: tuple[float, ...]  # 1 - median / baseline for each, before clipping
    clip: float  # each night adds at most this drop (clip x noise)
    allowance: float  # subtracted every night: half the effect to detect, so an unchanged build drifts to 0
    cusum: tuple[float, ...]  # S after each night: max(0, S + min(drop, clip) - allowance)
    level: float  # fires when the last S exceeds this (level x noise)
    since: int | None  # nights ago the current excursion of S began (where the step likely started)
    fired: bool
    reason: str


def detect_step(
    nightly_medians: Sequence[float],
    *,
    run_nights: int = STEP_RUN_NIGHTS,
    window: int = STEP_BASELINE_NIGHTS,
    effect: float = TARGET_EFFECT,
    clip: float = STEP_CLIP,
    level: float = STEP_LEVEL,
    min_nights: int = MIN_BASELINE_NIGHTS,
) -> StepCheck:
    """One-sided CUSUM over the last `run_nights` nightly medians against the median of the `window` nights before.

    For when no last-good build can be run tonight, so the night effect cannot be cancelled and only persistence
    tells a regression from a bad night. Each night adds its drop beyond half the effect (clipped at `clip`
    noise units); it fires when the sum exceeds `level` noise units. Properties with 2 % night noise: a 5 %
    step accumulates ~1.2 noise units a night, so it fires typically on its 3rd-5th night; because of the clip
    even a crash needs ceil(level / (clip - allowance)) nights (3 with the defaults); one dip cannot fire it and
    two in a row cannot either; `since` points at the night the drop began. Run it every night: once the step
    is older than `run_nights`, the baseline starts to include regressed nights and the evidence fades.
    """
    _check_positive(nightly_medians, "nightly medians")
    if run_nights < 1:
        raise ValueError(f"run_nights must be at least 1, got {run_nights}")
    run = tuple(nightly_medians[-run_nights:])
    base = list(nightly_medians[:-run_nights][-window:])
    if len(run) < run_nights or len(base) < min_nights:
        return StepCheck(
            len(base), math.nan, math.nan, run, (), math.nan, effect / 2, (), math.nan, None, False,
            f"{len(nightly_medians)} nights: need {run_nights} after at least {min_nights} baseline nights",
        )  # fmt: skip
    baseline = median(base)
    noise = max(MIN_NOISE, robust_sd([m / baseline - 1.0 for m in base], 0.0))
    drops = tuple(1.0 - m / baseline for m in run)
    allowance = effect / 2.0
    cap, alarm = clip * noise, level * noise
    path: list[float] = []
    total, since = 0.0, None
    for night, drop in enumerate(drops):
        total = max(0.0, total + min(drop, cap) - allowance)
        path.append(total)
        if total == 0.0:
            since = None
        elif since is None:
            since = len(drops) - 1 - night  # 0 is tonight
    fired = total > alarm
    verdict = "above" if fired else "not above"
    began = f", rising since {since} night(s) ago" if since is not None else ""
    reason = (
        f"CUSUM of drops beyond {allowance:.1%} over the last {len(run)} nights is {total:.2%}{began}, {verdict} "
        f"{alarm:.2%} (= {level:g} x noise {noise:.2%} of {len(base)} baseline nights)"
    )
    return StepCheck(len(base), baseline, noise, run, drops, cap, allowance, tuple(path), alarm, since, fired, reason)
