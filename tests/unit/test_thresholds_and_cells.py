"""Reference levels and benchmark cell names (llama-benchy's naming)."""

from __future__ import annotations

from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import BenchSpec
from pipeline.config.thresholds import MIN_EFFECT, Level, PairRules, Reference, build_thresholds, level_problems
from pipeline.infra.cpu_class import cpu_class
from pipeline.stages.prove.perf.gate import judge_cell


def test_cells_are_named_and_ordered_like_llama_benchy() -> None:
    names = [c.name for c in BenchSpec(pp=(512, 2048), tg=(32,), depth=(0, 4096)).cells()]
    assert names == ["pp512", "tg32", "pp2048", "pp512 @ d4096", "tg32 @ d4096", "pp2048 @ d4096"]


def test_concurrency_suffix_appears_only_when_some_level_exceeds_one() -> None:
    assert [c.name for c in BenchSpec(pp=(128,), tg=(32,), concurrency=(1,)).cells()] == ["pp128", "tg32"]
    cells = BenchSpec(pp=(128,), tg=(32,), concurrency=(1, 4)).cells()
    assert [(c.name, c.concurrency) for c in cells] == [
        ("pp128 (c1)", 1),
        ("tg32 (c1)", 1),
        ("pp128 (c4)", 4),
        ("tg32 (c4)", 4),
    ]


def test_levels_parse_relative_and_absolute() -> None:
    assert Level.parse("-5%").bound(200.0) == 190.0
    assert Level.parse(180).bound(200.0) == 180.0
    assert str(Level.parse("-12.5%")) == "-12.5%"


def _ref(unit: str, warn: str | float, fail: str | float, metric: str = "tg_tps") -> Reference:
    return Reference("c", metric, 100.0, unit, Level.parse(warn), Level.parse(fail))


def test_throughput_levels_must_be_below_and_latency_levels_above_the_reference() -> None:
    assert level_problems(_ref("t/s", "-5%", "-10%")) == []
    assert level_problems(_ref("ms", "+5%", 130, metric="e2e_ttft")) == []
    assert [f for f, _ in level_problems(_ref("ms", "-5%", "+10%", metric="e2e_ttft"))] == ["warn"]


def test_fail_must_be_at_least_as_far_as_warn() -> None:
    assert [f for f, _ in level_problems(_ref("t/s", "-10%", "-5%"))] == ["fail"]
    assert level_problems(_ref("t/s", "-5%", "-5%")) == []


def test_a_pending_reference_takes_only_relative_levels() -> None:
    pending = Reference("c", "tg_tps", None, "t/s", Level.parse("-5%"), Level.parse(40), pending="not measured yet")
    assert [f for f, _ in level_problems(pending)] == ["fail"]


def test_a_cpu_host_class_is_read_from_its_flags() -> None:
    assert cpu_class("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n") == "avx2"
    assert cpu_class("flags\t: avx2 avx512f avx512bw\n") == "avx512"
    assert cpu_class("flags\t: avx2 avx512f amx_tile amx_bf16\n") == "amx"
    assert cpu_class("flags\t: sse2\n") == "baseline"


def test_a_cpu_profile_takes_the_reference_measured_on_its_class_of_host() -> None:
    data = {
        "host_class": "amx",
        "cells": {
            "tg32": {"ref": 18.7, "unit": "t/s", "warn": "-35%", "fail": "-60%", "by_host": {"avx2": {"ref": 14.6}}}
        },
    }
    thresholds = build_thresholds("cpu-x86", "m", data)
    assert thresholds.on_host("avx2").cells["tg32"].ref == 14.6
    assert thresholds.on_host("amx").cells["tg32"].ref == 18.7
    assert thresholds.on_host(None).cells["tg32"].warn == Level(relative=-0.35)


def test_a_class_with_no_reference_takes_the_next_slower_classes_and_says_so() -> None:
    cell = {"ref": 405, "unit": "t/s", "warn": "-35%", "fail": "-60%", "by_host": {"avx2": {"ref": 218}}}
    thresholds = build_thresholds("cpu-x86", "m", {"host_class": "amx", "cells": {"pp128": cell}})
    avx512 = thresholds.on_host("avx512").cells["pp128"]  # the AMX host's 405 would trip a 250 t/s AVX-512 host
    assert (avx512.ref, avx512.origin) == (218, "the avx2 hosts' reference: none measured on avx512 hosts")
    verdict = judge_cell(avx512, [250.6])
    assert verdict.status == "PASS" and "vs 218 (the avx2 hosts' reference" in verdict.reason, verdict.reason
    assert judge_cell(avx512, [80.0]).status == "FAIL"  # gross breakage still fails on the floor


def test_a_class_with_no_slower_reference_is_judged_by_its_history_alone() -> None:
    cell = {"ref": 405, "unit": "t/s", "warn": "-35%", "fail": "-60%", "by_host": {"avx2": {"ref": 218}}}
    baseline = build_thresholds("cpu-x86", "m", {"host_class": "amx", "cells": {"pp128": cell}}).on_host("baseline")
    verdict = judge_cell(baseline.cells["pp128"], [40.0])
    assert verdict.status == "PENDING" and "none measured on baseline hosts or a slower class" in verdict.reason
    assert not verdict.tripped


def test_pair_rules_are_read_from_the_file_and_default_to_the_detectors() -> None:
    cells = {"tg32": {"ref": 18.7, "unit": "t/s", "warn": "-35%", "fail": "-60%"}}
    assert build_thresholds("spark-gb10", "m", {"cells": cells}).pairs == PairRules(MIN_EFFECT, 0.0)
    rules = build_thresholds("cpu-x86", "m", {"cells": cells, "pairs": {"min_effect": 0.06, "boot_sd": 0.02}}).pairs
    assert rules == PairRules(0.06, 0.02, 16) and rules.passable()
    # over the 16 pairs' three boots, the 95 % interval of an unchanged build is at least +-2.6 % wide
    assert not PairRules(0.025, 0.02).passable()
    # averaging more boots narrows it: 64 pairs of 17 boots, +-1.4 %
    more = build_thresholds(
        "cpu-x86", "m", {"cells": cells, "pairs": {"min_effect": 0.025, "boot_sd": 0.02, "max_pairs": 64}}
    )
    assert more.pairs == PairRules(0.025, 0.02, 64) and more.pairs.passable()


def test_every_cpu_class_the_suite_can_land_on_has_a_measured_reference_or_the_stated_fallback() -> None:
    """amx, avx512 and avx2 hosts are measured (thresholds/cpu-x86); a baseline host (no AVX2) is judged by its
    history alone, so no class's first night trips on another class's speed."""
    root = Path(__file__).parents[2]
    config = load_config(ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden"))
    for host in ("amx", "avx512", "avx2"):
        cells = config.thresholds_for("smollm2-135m-instruct", host).cells
        assert cells  # not empty: an assert over nothing passes
        assert all(ref.ref is not None and not ref.origin and not ref.pending for ref in cells.values()), host
    baseline = config.thresholds_for("smollm2-135m-instruct", "baseline").cells
    assert baseline  # not empty: an assert over nothing passes
    assert all(ref.ref is None and "none measured on baseline" in (ref.pending or "") for ref in baseline.values())
