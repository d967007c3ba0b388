"""Golden checks on the real CPU engine: the good model passes; real broken models are each caught by their check."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from pipeline.checks import Verdict
from pipeline.cli import main
from pipeline.config.matrix import Weights
from pipeline.infra import procs
from pipeline.infra.references import References, ReferenceStore
from pipeline.infra.runtime import ensure_pip_runtime
from pipeline.infra.server import Server
from pipeline.infra.weights import CONVERTER_REQUIREMENTS, package_folder
from pipeline.stages.prove.boot import boot
from pipeline.stages.prove.golden_run import GoldenResult, run_golden
from tests.integration.conftest import CPU_ENTRY, CpuEngine

pytestmark = pytest.mark.integration

MAKER = Path(__file__).parents[1] / "make_broken_model.py"
PERTURBATION = 0.02  # relative weight noise: small enough to keep the France answer, large enough to move logprobs


@dataclass(frozen=True)
class GoodRuns:
    """Two golden runs of the good model: the CLI's (recording references) and one judged against them."""

    cli_report: dict[str, object]
    judged: GoldenResult
    references: References


def _verdict(result: GoldenResult, check: str, subject: str) -> Verdict:
    return next(v for v in result.verdicts if v.check == check and v.subject == subject)


@pytest.fixture(scope="module")
def good_runs(cpu_engine: CpuEngine, cpu_server: Server, tmp_path_factory: pytest.TempPathFactory) -> GoodRuns:
    history = tmp_path_factory.mktemp("history")
    report = history / "golden.json"
    argv = ["golden", CPU_ENTRY, "--url", cpu_server.base_url, "--record", "--json", str(report)]
    code = main([*argv, "--set", f"paths.history={history}"])
    assert code == 0, report.read_text() if report.exists() else "no report"
    hardware = cpu_engine.config.matrix.profiles[cpu_engine.entry.profile].hardware
    references = ReferenceStore(history).load(hardware, CPU_ENTRY)
    assert references is not None
    judged = run_golden(
        cpu_server.client,
        cpu_engine.entry,
        cpu_engine.config.golden[cpu_engine.entry.golden],
        model_ref=str(package_folder(cpu_engine.entry, cpu_engine.cache_dir)),
        references=references,
    )
    return GoodRuns(json.loads(report.read_text()), judged, references)


def _broken(cpu_engine: CpuEngine, tmp_path: Path, mode: str, scale: float = 0.0) -> Path:
    converter = ensure_pip_runtime("gguf-convert", CONVERTER_REQUIREMENTS, (), cpu_engine.cache_dir, tmp_path)
    target = tmp_path / f"broken-{mode}"
    procs.run(
        [
            str(converter.python),
            str(MAKER),
            str(package_folder(cpu_engine.entry, cpu_engine.cache_dir)),
            str(target),
            mode,
            str(scale),
        ],
        tmp_path / f"make-{mode}.log",
        timeout_s=600,
    )
    return target


def _golden_on(cpu_engine: CpuEngine, folder: Path, tmp_path: Path, references: References | None) -> GoldenResult:
    entry = replace(cpu_engine.entry, weights=Weights("path", path=str(folder)))
    with boot(entry, cpu_engine.candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path) as server:
        return run_golden(
            server.client, entry, cpu_engine.config.golden[entry.golden], model_ref=str(folder), references=references
        )


def test_the_good_model_passes_every_check(good_runs: GoodRuns) -> None:
    report = good_runs.cli_report
    assert report["passed"] is True
    statuses = {(v["check"], v["status"]) for v in report["verdicts"]}  # type: ignore[attr-defined]
    assert ("answer", "PASS") in statuses and ("long decode", "PASS") in statuses
    assert not [v for v in report["verdicts"] if v["status"] == "FAIL"]  # type: ignore[attr-defined]


def test_the_good_model_does_not_drift_from_its_own_reference(good_runs: GoodRuns) -> None:
    assert good_runs.judged.passed, [v for v in good_runs.judged.failures]
    drift = [v for v in good_runs.judged.verdicts if v.check == "drift"]
    assert drift and all(v.reason.startswith("tokens identical") for v in drift)


def test_random_weights_are_caught_as_garbage(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    result = _golden_on(cpu_engine, _broken(cpu_engine, tmp_path, "random"), tmp_path, None)
    garbage = _verdict(result, "garbage", "capital-of-france")
    assert garbage.status == "FAIL", garbage
    assert "mean token logprob" in garbage.reason
    assert _verdict(result, "answer", "capital-of-france").status == "FAIL"


def test_nan_weights_are_caught_on_logprobs(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    result = _golden_on(cpu_engine, _broken(cpu_engine, tmp_path, "nan"), tmp_path, None)
    logprobs = _verdict(result, "logprobs", "capital-of-france")
    assert logprobs.status == "FAIL", logprobs
    assert "not finite (NaN or inf)" in logprobs.reason
    assert "Out of range float values" in str(logprobs.evidence["server_said"])
    counter = _verdict(result, "nan counter", "vllm:corrupted_requests")
    assert counter.status in ("FAIL", "SKIPPED"), counter  # exported only by builds that count NaN requests


def test_small_perturbations_keep_the_answer_but_are_caught_by_drift(
    cpu_engine: CpuEngine, tmp_path: Path, good_runs: GoodRuns
) -> None:
    folder = _broken(cpu_engine, tmp_path, "perturb", PERTURBATION)
    result = _golden_on(cpu_engine, folder, tmp_path, good_runs.references)
    assert _verdict(result, "answer", "capital-of-france").status == "PASS"
    drift = _verdict(result, "drift", "capital-of-france")
    assert drift.status == "FAIL", drift
    assert drift.evidence["reference_night"] == good_runs.references.night
