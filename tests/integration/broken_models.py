"""Broken copies of the CPU entry's model, made by make_broken_model.py in the pinned converter runtime."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pipeline.checks import Verdict
from pipeline.config.matrix import Weights
from pipeline.infra import procs
from pipeline.infra.references import References
from pipeline.infra.runtime import ensure_pip_runtime
from pipeline.infra.weights import CONVERTER_REQUIREMENTS, package_folder
from pipeline.stages.prove.boot import boot
from pipeline.stages.prove.golden_run import GoldenResult, run_golden
from tests.integration.conftest import CpuEngine

MAKER = Path(__file__).with_name("make_broken_model.py")


def make_broken(engine: CpuEngine, work: Path, mode: str, scale: float = 0.0) -> Path:
    """A model folder under `work`: the good weights broken as `mode` says (random, nan, perturb)."""
    converter = ensure_pip_runtime("gguf-convert", CONVERTER_REQUIREMENTS, (), engine.cache_dir, work)
    target = work / f"broken-{mode}"
    source = package_folder(engine.entry, engine.cache_dir)
    argv = [str(converter.python), str(MAKER), str(source), str(target), mode, str(scale)]
    procs.run(argv, work / f"make-{mode}.log", timeout_s=600)
    return target


def golden_on(engine: CpuEngine, folder: Path, log_dir: Path, references: References | None) -> GoldenResult:
    """The golden set run on a real server of the CPU entry serving `folder`."""
    entry = replace(engine.entry, weights=Weights("path", path=str(folder)))
    with boot(entry, engine.candidate, cache_dir=engine.cache_dir, log_dir=log_dir) as server:
        return run_golden(
            server.client, entry, engine.config.golden[entry.golden], model_ref=str(folder), references=references
        )


def verdict(result: GoldenResult, check: str, subject: str) -> Verdict:
    return next(v for v in result.verdicts if v.check == check and v.subject == subject)
