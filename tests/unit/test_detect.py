"""Regression detection on constructed numbers: screen, paired confirmation, the history step test, the t maths."""

from __future__ import annotations

import math

import pytest

from pipeline.config.thresholds import blocked_boots, boot_share
from pipeline.detect import confirm, detect_step, screen
from pipeline.detect.stats import MEDIAN_VARIANCE_FACTOR, regularized_beta, robust_sd, t_cdf, t_quantile
from pipeline.detect.steps import (
    SCREEN_Z,
    SHORT_HISTORY_DROP,
    STEP_BASELINE_NIGHTS,
    STEP_RUN_NIGHTS,
    TARGET_EFFECT,
)

# 14 nightly medians around 100 whose absolute deviations have a median of exactly 1 (so MAD = 1 %).
MEDIANS = (100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 103.0, 97.0, 100.0, 101.0, 99.0, 102.0, 98.0, 100.0)


def night(level: float) -> tuple[float, ...]:
    """Five samples whose median is exactly `level`."""
    return (level * 0.99, level * 0.995, level, level * 1.005, level * 1.01)


HISTORY = [night(m) for m in MEDIANS]


def test_t_distribution_matches_published_table_values() -> None:
    assert t_quantile(0.975, 7) == pytest.approx(2.3646, abs=1e-4)
    assert t_quantile(0.999, 7) == pytest.approx(4.7853, abs=1e-4)
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.025, 15) == pytest.approx(-2.1314, abs=1e-4)
    # df = 1 is the Cauchy distribution, whose CDF has a closed form.
    assert t_cdf(-2.0, 1) == pytest.approx(0.5 - math.atan(2.0) / math.pi, abs=1e-12)
    assert t_cdf(0.0, 4) == 0.5
    assert regularized_beta(0.5, 2, 3) == pytest.approx(11 / 16, abs=1e-12)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_robust_sd_ignores_one_outlier() -> None:
    assert robust_sd([1.0, 2.0, 3.0, 4.0, 100.0], 3.0) == pytest.approx(1.4826)


def test_screen_trips_on_a_clear_drop_and_shows_its_numbers() -> None:
    result = screen(HISTORY, night(95.0))
    assert result.tripped
    assert result.nights_used == 14
    assert result.baseline == pytest.approx(100.0)
    assert result.tonight == pytest.approx(95.0)
    assert result.relative_change == pytest.approx(-0.05)
    assert result.noise == pytest.approx(0.014826)
    assert result.noise_of_change == pytest.approx(0.014826 * math.sqrt(1 + MEDIAN_VARIANCE_FACTOR / 14))
    assert result.threshold == pytest.approx(TARGET_EFFECT - SCREEN_Z * result.noise_of_change)
    assert 0.02 < result.threshold < 0.03  # 5 % less 1.64 noise units of about 1.5 %
    assert "-5.00%" in result.reason
    assert f"-{result.threshold:.2%}" in result.reason


def test_screen_does_not_trip_on_noise_level_changes_or_improvements() -> None:
    for level in (98.5, 100.0, 103.0, 120.0):
        assert not screen(HISTORY, night(level)).tripped, level
    # Just either side of the threshold: the decision is on the number shown, not somewhere near it.
    threshold = screen(HISTORY, night(100.0)).threshold
    assert screen(HISTORY, night(100.0 * (1 - threshold) - 0.01)).tripped
    assert not screen(HISTORY, night(100.0 * (1 - threshold) + 0.01)).tripped


def test_screen_on_a_noisy_host_trips_on_any_drop_but_never_on_an_improvement() -> None:
    noisy = [night(m) for m in (100.0, 110.0, 90.0, 108.0, 92.0, 100.0, 112.0, 88.0)]
    result = screen(noisy, night(99.5))
    assert result.threshold == 0.0
    assert result.tripped
    assert not screen(noisy, night(100.5)).tripped


def test_screen_uses_only_the_recent_window_and_a_short_history_trips_only_on_a_gross_drop() -> None:
    old_fast = [night(130.0)] * 20
    assert not screen(old_fast + HISTORY, night(99.0)).tripped  # only the last 14 nights count
    assert screen(old_fast + HISTORY, night(99.0), window=30).tripped
    short = screen(HISTORY[:3], night(90.0))  # 3 nights: no noise estimate, so a 10 % drop is not past it
    assert not short.tripped and short.nights_used == 3 and math.isnan(short.noise)
    assert short.baseline == pytest.approx(100.0, rel=0.02)
    assert "fewer than 5 nights: no noise estimate yet" in short.reason
    gross = screen(HISTORY[:1], night(70.0))  # one night of history: a -30 % night trips
    assert gross.tripped and gross.nights_used == 1 and gross.threshold == SHORT_HISTORY_DROP
    assert "below -15.00%" in gross.reason
    empty = screen([], night(70.0))  # none: nothing to compare with
    assert empty.nights_used == 0 and math.isnan(empty.baseline) and "no healthy night of history" in empty.reason
    with pytest.raises(ValueError):
        screen(HISTORY, [100.0, float("nan"), 100.0])


def pairs_with_log_ratios(*logs: float) -> list[tuple[float, float]]:
    return [(100.0, 100.0 * math.exp(x)) for x in logs]


def test_confirm_fails_a_clear_regression_and_shows_its_numbers() -> None:
    logs = (-0.05, -0.06, -0.045, -0.055, -0.052, -0.048, -0.058, -0.047)
    result = confirm(pairs_with_log_ratios(*logs), statistic="mean")
    assert result.decision == "FAIL"
    assert result.pairs == 8
    mean = (-0.05 - 0.06 - 0.045 - 0.055 - 0.052 - 0.048 - 0.058 - 0.047) / 8
    assert result.mean_log_ratio == pytest.approx(mean)
    assert result.mean_ratio == pytest.approx(math.exp(mean))
    assert result.t_statistic == pytest.approx(mean / (result.sd_log_ratio / math.sqrt(8)))
    assert result.p_value == pytest.approx(t_cdf(result.t_statistic, 7))
    assert result.p_value < 1e-6
    assert result.ci_low < result.mean_ratio < result.ci_high < result.fail_bound < 1.0
    assert "significant" in result.reason
    trimmed = confirm(pairs_with_log_ratios(*logs), statistic="trimmed")  # Yuen: the middle 6 of 8, df 5
    middle = sorted(logs)[1:7]
    assert trimmed.decision == "FAIL" and trimmed.mean_log_ratio == pytest.approx(sum(middle) / 6)
    assert trimmed.p_value == pytest.approx(t_cdf(trimmed.t_statistic, 5))


def test_one_outlier_pair_cannot_drag_the_trimmed_statistic() -> None:
    logs = (-0.001, 0.004, -0.003, 0.002, -0.35, 0.001, -0.002, 0.003)  # one run of A or B hit by a hiccup
    assert confirm(pairs_with_log_ratios(*logs), statistic="trimmed").decision == "PASS"
    assert confirm(pairs_with_log_ratios(*logs), statistic="mean").decision == "INCONCLUSIVE"


def test_confirm_passes_a_ratio_within_noise_and_a_small_slowdown() -> None:
    same = confirm(pairs_with_log_ratios(0.01, -0.01, 0.005, -0.012, 0.008, -0.003, 0.0, 0.004))
    assert same.decision == "PASS"
    assert same.ci_low > 0.98
    assert same.ci_low < 1.0 < same.ci_high
    # 1 % slower and significant, but below MIN_EFFECT: not something to block a release for.
    small = confirm(pairs_with_log_ratios(-0.01, -0.011, -0.009, -0.0105, -0.0095, -0.01))
    assert small.decision == "PASS"
    assert small.ci_high < 1.0


def test_confirm_is_inconclusive_when_too_noisy_or_too_few() -> None:
    noisy = confirm(pairs_with_log_ratios(-0.10, 0.10, -0.05, 0.05, -0.08, 0.02))
    assert noisy.decision == "INCONCLUSIVE"
    assert noisy.ci_low < 0.98
    assert noisy.ci_high > 1.0
    # A large mean drop that three pairs cannot make significant at 0.001 is not a FAIL either.
    unsure = confirm(pairs_with_log_ratios(-0.10, -0.03, -0.01))
    assert unsure.mean_ratio < 0.96
    assert unsure.fail_bound > 1.0
    assert unsure.decision == "INCONCLUSIVE"
    one = confirm(pairs_with_log_ratios(-0.2))
    assert one.decision == "INCONCLUSIVE"
    assert one.pairs == 1


def test_confirm_p_value_against_a_closed_form() -> None:
    # log ratios -0.01 and -0.03: mean -0.02, standard error 0.01, t = -2 with 1 degree of freedom (Cauchy).
    result = confirm(pairs_with_log_ratios(-0.01, -0.03))
    assert result.t_statistic == pytest.approx(-2.0)
    assert result.p_value == pytest.approx(0.5 - math.atan(2.0) / math.pi)


def test_confirm_with_identical_ratios_decides_on_the_mean() -> None:
    slower = confirm([(100.0, 95.0)] * 4)
    assert slower.decision == "FAIL"
    assert slower.t_statistic == -math.inf
    assert slower.p_value == 0.0
    assert confirm([(100.0, 100.0)] * 4).decision == "PASS"


def test_two_boots_of_one_build_a_few_percent_apart_are_not_blamed_once_the_boot_spread_counts() -> None:
    # A same-build pair set as a CI night measured it: every pair of the two processes about 3 % apart (a boot's
    # own offset, fixed for the life of the process), tightly, so the pairs alone call it significant.
    logs = (-0.025, -0.040, -0.030, -0.035, -0.028, -0.038, -0.027, -0.033)
    assert confirm(pairs_with_log_ratios(*logs)).decision == "FAIL"
    counted = confirm(pairs_with_log_ratios(*logs), min_effect=0.05, boot_sd=0.015)
    assert counted.decision == "INCONCLUSIVE"
    assert counted.boot_sd == 0.015 and "boot-to-boot SD of 1.5%" in counted.reason
    assert counted.fail_bound > 1.0 and counted.ci_low < 0.95
    # The spread widens the error, never moves the estimate, and a real slowdown still FAILs through it.
    assert counted.mean_ratio == confirm(pairs_with_log_ratios(*logs)).mean_ratio
    assert counted.sd_log_ratio == confirm(pairs_with_log_ratios(*logs)).sd_log_ratio
    slower = confirm(pairs_with_log_ratios(*(x - 0.12 for x in logs)), min_effect=0.05, boot_sd=0.015)
    assert slower.decision == "FAIL"
    # More pairs of the same two processes cannot average the boots' offset away.
    many = confirm(pairs_with_log_ratios(*logs * 8), min_effect=0.05, boot_sd=0.015)
    assert many.decision == "INCONCLUSIVE" and many.ci_low < 0.95


def test_pairs_over_many_boots_average_the_boots_offsets_and_fail_a_ten_percent_slowdown() -> None:
    # A build 10 % slower, side by side over blocks of 4 pairs, one server booted again before each block: each
    # block's boots add an offset of a few per cent either way (the CPU's boot spread, boot_sd 0.05).
    offsets = (0.03, -0.02, 0.01, -0.035, 0.025, -0.01, 0.02, -0.015)
    logs = [math.log(0.9) + offset + noise for offset in offsets for noise in (0.004, -0.003, 0.002, -0.004)]
    boots = blocked_boots(len(logs))
    spread = confirm(pairs_with_log_ratios(*logs), min_effect=0.07, boot_sd=0.05, boots=boots)
    assert spread.decision == "FAIL" and "over 4 boots of A and 5 of B" in spread.reason
    # the same pairs taken as one boot pair keep the whole boot spread: no number of pairs decides them
    one = confirm(pairs_with_log_ratios(*logs), min_effect=0.07, boot_sd=0.05)
    assert one.decision == "INCONCLUSIVE" and one.mean_ratio == spread.mean_ratio
    # and a build against itself over the same boots PASSes, where one boot pair could not rule out 7 %
    same = [log - math.log(0.9) for log in logs]
    assert confirm(pairs_with_log_ratios(*same), min_effect=0.07, boot_sd=0.05, boots=boots).decision == "PASS"
    assert confirm(pairs_with_log_ratios(*same), min_effect=0.07, boot_sd=0.05).decision == "INCONCLUSIVE"


def test_the_boot_term_shrinks_with_the_boots_the_pairs_span() -> None:
    assert boot_share([(0, 0)] * 8) == 1.0  # one boot pair: its whole offset
    assert boot_share([(i, i) for i in range(4)]) == pytest.approx(1 / 4)  # four boot pairs of new boots
    # one side booted again before each block: neighbours share a boot, so a little more than 1/blocks
    assert boot_share(blocked_boots(32)) == pytest.approx(0.234, abs=0.001) and boot_share(blocked_boots(32)) > 1 / 8


def test_with_a_boot_spread_identical_pairs_still_leave_an_error() -> None:
    same = confirm([(100.0, 100.0)] * 8, min_effect=0.05, boot_sd=0.015)
    assert same.decision == "PASS" and math.isfinite(same.t_statistic)
    # The error is the boot spread alone, a variance known exactly: the normal's quantile (infinite degrees of freedom).
    assert same.ci_low == pytest.approx(math.exp(-1.959964 * 0.015))
    assert same.p_value == 0.5


def step_series(*run: float) -> list[float]:
    """21 baseline nights (median 100, MAD 1 %) then `run` padded in front with normal nights to a full week."""
    base = [100.0 + d for d in (0.0, 1.0, -1.0, 2.0, -2.0, 1.0, -1.0) * 3]
    normal = (100.0, 101.0, 99.0, 100.0, 101.0, 99.0, 100.0)
    return base + list(normal[: STEP_RUN_NIGHTS - len(run)]) + list(run)


def test_detect_step_fires_on_a_persistent_step_and_shows_its_numbers() -> None:
    # -4 % a night: below the clip (3 x 1.48 %), so each night adds 4 % - 2.5 % allowance = 1.5 %.
    result = detect_step(step_series(96.0, 96.0, 96.0, 96.0, 96.0))
    assert result.fired
    assert result.baseline_nights == STEP_BASELINE_NIGHTS
    assert result.baseline == pytest.approx(100.0)
    assert result.noise == pytest.approx(0.014826)
    assert result.allowance == pytest.approx(0.025)
    assert result.clip == pytest.approx(3.0 * 0.014826)
    assert result.level == pytest.approx(5.0 * 0.014826)
    assert result.drops == pytest.approx((0.0, -0.01, 0.04, 0.04, 0.04, 0.04, 0.04))
    assert result.cusum == pytest.approx((0.0, 0.0, 0.015, 0.03, 0.045, 0.06, 0.075))
    assert result.since == 4  # the step began four nights before tonight
    assert "rising since 4 night(s) ago" in result.reason
    assert "above 7.41%" in result.reason


def test_detect_step_needs_persistence_not_one_or_two_bad_nights() -> None:
    four = detect_step(step_series(96.0, 96.0, 96.0, 96.0))
    assert not four.fired
    assert four.cusum[-1] == pytest.approx(0.06)
    assert not detect_step(step_series(90.0)).fired  # one -10 % host hiccup
    assert not detect_step(step_series(90.0, 90.0)).fired  # two in a row: each clipped at 3 noise units
    assert not detect_step(step_series(90.0, 100.0, 90.0)).fired
    # Even a crash needs ceil(level / (clip - allowance)) nights: 0.0741 / (0.0445 - 0.025) -> 4.
    assert not detect_step(step_series(50.0, 50.0, 50.0)).fired
    assert detect_step(step_series(50.0, 50.0, 50.0, 50.0)).fired


def test_detect_step_never_fires_on_improvements_or_without_history() -> None:
    better = detect_step(step_series(110.0, 110.0, 110.0, 110.0))
    assert not better.fired
    assert better.cusum[-1] == 0.0
    assert better.since is None
    short = detect_step([95.0] * 10)
    assert not short.fired
    assert math.isnan(short.baseline)
    assert "need 7 after at least 5 baseline nights" in short.reason
