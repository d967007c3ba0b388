"""A night with no golden reference on a host that holds one server, on the real CPU engine: tonight's build biases
every sampled token (fluent-looking nonsense whose own logprobs, taken before the bias, look normal); the last
confirmed build scores tonight's answers in a boot of its own, after tonight's server stopped, and FAILs the night.

The runner's state holds the good runtime as the entry's last confirmed build, as a good night leaves it. Nothing is
timed, so the test runs beside others: the profile's health allows their load.
"""

from __future__ import annotations

import pytest

from pipeline.cli import main
from pipeline.infra.confirmed import ConfirmedBook, series_key
from pipeline.stages.prove.last_good import runtime_build
from tests.integration.census import census
from tests.integration.conftest import (
    CPU_ENTRY,
    CpuEngine,
    Place,
    beside_other_tests,
    golden_for_another_stage,
    one_server_at_a_time,
)
from tests.integration.planted import plant_bias, planted_runtime, require, slower_requirements

pytestmark = pytest.mark.integration


def test_a_broken_build_with_no_reference_is_caught_by_the_last_confirmed_build_in_its_own_boot(
    place: Place, cpu_engine: CpuEngine
) -> None:
    golden_for_another_stage(place)
    one_server_at_a_time(place, golden_judge="last-confirmed")
    beside_other_tests(place)  # a night that times nothing
    good = cpu_engine.candidate.runtime
    assert good is not None
    a = runtime_build(good, good.root / "lock.txt", night="2026-11-20", commits={})
    book = ConfirmedBook(place.root / "history" / "confirmed.json")
    book.accept(series_key("cpu-x86", CPU_ENTRY, "tg32 (c1)", "tg_tps"), a, night="2026-11-20", run_id="r", how="test")
    requirements = slower_requirements(cpu_engine, "planted-bias")
    with planted_runtime(cpu_engine, requirements, change=plant_bias):
        require(place.root / "config" / "models.yaml", requirements)
        with census() as servers:
            assert main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY]) == 6
    (entry,) = place.last_run()["entries"]  # type: ignore[misc]
    assert (entry["status"], entry["stage"]) == ("FAIL", "golden"), entry["reason"]
    judged = [f for f in entry["failures"] if f["key"].endswith(":golden") and f["subject"].startswith("drift ")]
    assert judged, entry["failures"]
    assert all(f"{a.describe()} (in a boot of its own) would not have chosen" in f["reason"] for f in judged), judged
    assert entry["numbers"]["turns"]["boots"] == 1  # the judge's; tonight's was not needed again
    model = cpu_engine.entry.served_model_name
    assert servers.peak[model] == 1 and not servers.overlaps, servers.overlaps  # never two of the entry at once
    assert len(servers.ports[model]) == 2  # tonight's boot, then the judge's, each on a port of its own
    assert place.store.releases() == []
