"""Side-by-side pairs on the real CPU engine: `bench --pair-with` pairs a build with itself, tonight's build booted
again after A's boot between the blocks of pairs so the boots' order cancels, and never blames it. (A slowdown failed
by pairs side by side is test_cpu_built_nights.py's bisection; in turns, test_workflow_nights.py's.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.infra import procs
from tests.integration.conftest import CPU_ENTRY, CpuEngine, Place, bench_one_case

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host]


def test_bench_pairs_a_build_with_itself_booting_tonights_again_and_never_blames_it(
    place: Place, cpu_engine: CpuEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench_one_case(place)  # one case: one set of pairs
    # at most 16 pairs (five boots), as a profile without max_pairs stops: the mechanics are the same as the CPU
    # profile's 64, whose rates benchmarks/pair_power.py measures, and a CI run stays within its time
    thresholds = place.root / "config" / "thresholds" / "cpu-x86" / f"{CPU_ENTRY}.yaml"
    rules = yaml.safe_load(thresholds.read_text())
    rules["pairs"]["max_pairs"] = 16
    thresholds.write_text(yaml.safe_dump(rules, sort_keys=False))
    assert cpu_engine.candidate.runtime is not None
    kept = cpu_engine.candidate.runtime.root
    running = sorted(procs.owned_processes(None))
    report = tmp_path / "bench.json"
    code = main(["bench", CPU_ENTRY, "--pair-with", str(kept), "--json", str(report)])
    said = capsys.readouterr().err
    verdicts = json.loads(report.read_text())["verdicts"]
    print(said, file=sys.stderr)
    print(f"\nbench --pair-with: exit {code}: {json.dumps(verdicts, indent=1)}", file=sys.stderr)
    assert set(verdicts) == {"pp128", "tg32"}
    for cell, verdict in verdicts.items():
        # the same build on both sides: never blamed, and every cell was judged by its pairs against the runtime
        assert verdict["status"] in {"PASS", "INCONCLUSIVE"}, (cell, verdict["reason"])
        assert (
            f"paired with the last confirmed build (runtime runtime-{cpu_engine.candidate.runtime.key}"
            in (verdict["reason"])
        ), verdict["reason"]
        assert "over 8 pairs" in verdict["reason"] or "over 16 pairs" in verdict["reason"], verdict["reason"]
        # the boots the pairs span are counted: 8 pairs over A's first boot and two of B, 16 over 2 and 3
        assert (
            "over 1 boot of A and 2 of B" in verdict["reason"] or "over 2 boots of A and 3 of B" in verdict["reason"]
        ), verdict["reason"]
    assert code in (0, 4)
    # 8 pairs are two blocks: tonight's build was booted again after A's boot for the second
    assert "tonight's build booted again, after A's boot, so the later boot changes sides" in said
    assert sorted(procs.owned_processes(None)) == running  # every server booted for the pairs was stopped
