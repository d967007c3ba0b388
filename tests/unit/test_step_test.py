"""A bisection step's two hypotheses (detect/step_test.py): like tonight's A, like tonight's build, or between."""

from __future__ import annotations

import math

import pytest

from pipeline.detect.step_test import TwoBuilds, boot_log, two_builds


def test_one_boot_at_either_end_decides_when_the_gap_is_several_boot_sds() -> None:
    """Tonight 25 % slower, boots spreading 2 %: a step at A's figure is A, one at B's is B, each on its one boot."""
    builds = TwoBuilds((0.0, 0.01, -0.01), -math.log(0.75), 0.02**2)
    assert builds.answer([0.0], max_boots=3) == "A"
    assert builds.answer([math.log(0.75)], max_boots=3) == "B"
    assert builds.weigh([math.log(0.75)]) == pytest.approx(-builds.weigh([0.0]))  # symmetric around halfway


def test_halfway_buys_another_boot_until_the_bound_then_says_between() -> None:
    builds = TwoBuilds((0.0,), -math.log(0.75), 0.05**2)
    halfway = math.log(0.75) / 2
    assert builds.weigh([halfway]) == pytest.approx(0.0)
    assert builds.answer([halfway], max_boots=3) == "more"
    assert builds.answer([halfway, halfway], max_boots=3) == "more"
    assert builds.answer([halfway] * 3, max_boots=3) == "between"
    assert builds.answer([halfway], max_boots=1) == "between"


def test_more_boots_of_the_step_narrow_its_variance_but_never_below_as_boots_of_a() -> None:
    builds = TwoBuilds((0.0, 0.0), 0.2, 0.01)
    assert builds.variance(1) == pytest.approx(0.01 * 1.5)
    assert builds.variance(4) == pytest.approx(0.01 * 0.75)
    assert builds.variance(1000) > 0.01 / 2  # A's two boots bound how sure a step can be


def test_tonights_boots_of_a_spreading_wider_than_the_host_widen_a_boot() -> None:
    """One boot's variance is half a boot pair's, or the spread of tonight's boots of A where that is wider."""
    narrow = two_builds([(100.0, 100.0), (100.0, 100.0)], 0.8, pair_variance=0.02**2)
    assert narrow.boot_variance == pytest.approx(0.02**2 / 2)
    wide = two_builds([(100.0,), (120.0,)], 0.8, pair_variance=0.02**2)
    assert wide.boot_variance == pytest.approx((math.log(120.0) - math.log(100.0)) ** 2 / 2)
    assert wide.slowdown == pytest.approx(-math.log(0.8))


def test_a_boot_is_the_mean_log_of_its_runs_and_nonsense_is_refused() -> None:
    assert boot_log([math.e, math.e**3]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="two builds need"):
        TwoBuilds((), 0.2, 0.01)
    with pytest.raises(ValueError, match="two builds need"):
        TwoBuilds((0.0,), 0.0, 0.01)
