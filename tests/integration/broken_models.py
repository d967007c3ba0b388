"""Broken copies of the CPU entry's model, made by benchmarks/make_broken_model.py in the pinned converter runtime."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.checks import Verdict
from pipeline.config.golden_sets import GoldenSet
from pipeline.config.matrix import Weights
from pipeline.infra import procs
from pipeline.infra.references import References
from pipeline.infra.runtime import ensure_pip_runtime
from pipeline.infra.weights import CONVERTER_REQUIREMENTS, package_folder
from pipeline.stages.prove.boot import boot, restartable
from pipeline.stages.prove.golden_run import GoldenResult, ask_golden, judge_golden, run_golden
from pipeline.stages.prove.judge import Judge, transformers_judge
from tests.integration.conftest import CpuEngine
from tests.shops import online

MAKER = Path(__file__).parents[2] / "benchmarks" / "make_broken_model.py"


def make_broken(engine: CpuEngine, work: Path, mode: str, scale: float = 0.0) -> Path:
    """A model folder under `work`: the good weights broken as `mode` says (make_broken_model.py lists the modes)."""
    converter = ensure_pip_runtime("gguf-convert", CONVERTER_REQUIREMENTS, (), online(engine.cache_dir), work)
    target = work / f"broken-{mode}-{scale:g}"
    source = package_folder(engine.entry, engine.cache_dir)
    argv = [str(converter.python), str(MAKER), str(source), str(target), mode, str(scale)]
    procs.run(argv, work / f"make-{mode}.log", timeout_s=600)
    return target


def short_golden(engine: CpuEngine) -> GoldenSet:
    """The CPU entry's golden set less its long decode, for engines broken for another check to catch.

    The long decode is a third of a golden run on the CPU engine and is no variant's subject; the good model
    runs it in full (served/test_golden_real.py).
    """
    return replace(engine.config.golden[engine.entry.golden], long_decode=None)


def golden_on(engine: CpuEngine, folder: Path, log_dir: Path, references: References | None) -> GoldenResult:
    """The golden set run on a real server of the CPU entry serving `folder`."""
    entry = replace(engine.entry, weights=Weights("path", path=str(folder)))
    with boot(entry, engine.candidate, cache_dir=engine.cache_dir, log_dir=log_dir) as server:
        return run_golden(server.client, entry, short_golden(engine), model_ref=str(folder), references=references)


@dataclass(frozen=True)
class BothWays:
    """One boot's answers judged as a night without a reference (by the judge) and as one with `references`."""

    unreferenced: GoldenResult
    referenced: GoldenResult


def good_judge(engine: CpuEngine, log_dir: Path) -> Judge:
    """The CPU profile's judge on the entry's own (good) weights: what a broken engine is measured against."""
    profile = engine.config.matrix.profiles[engine.entry.profile]
    good = str(package_folder(engine.entry, engine.cache_dir))
    judge = transformers_judge(engine.entry, profile, good, online(engine.cache_dir), log_dir)
    assert judge is not None
    return judge


def golden_both_ways(engine: CpuEngine, folder: Path, log_dir: Path, references: References) -> BothWays:
    """Serve `folder` in the entry's place (an engine that computes something else from the entry's weights).

    The answers are asked once, through the same restartable server the nightly uses, and judged twice.
    """
    entry = replace(engine.entry, weights=Weights("path", path=str(folder)))
    golden = short_golden(engine)
    with restartable(entry, engine.candidate, cache_dir=engine.cache_dir, log_dir=log_dir) as serving:
        answers, client = ask_golden(serving.server.client, entry, golden, restart=serving.restart)
        judged = {
            name: judge_golden(answers, client, entry, golden, model_ref=str(folder), references=refs, judge=judge)
            for name, refs, judge in (("none", None, good_judge(engine, log_dir)), ("ref", references, None))
        }
    return BothWays(judged["none"], judged["ref"])


def verdict(result: GoldenResult, check: str, subject: str) -> Verdict:
    return next(v for v in result.verdicts if v.check == check and v.subject == subject)
