"""Golden checks on the real CPU engine: the good model passes and does not drift from its own reference; a
slightly perturbed copy keeps its answer but is caught by drift against that reference."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.infra.references import References, ReferenceStore
from pipeline.infra.server import Server
from pipeline.infra.weights import package_folder
from pipeline.stages.prove.golden_run import GoldenResult, ServerLog, run_golden
from tests.integration.broken_models import golden_on, make_broken, verdict
from tests.integration.conftest import CPU_ENTRY, CpuEngine

pytestmark = pytest.mark.integration

PERTURBATION = 0.02  # relative weight noise: small enough to keep the France answer, large enough to move logprobs


@dataclass(frozen=True)
class GoodRuns:
    """Two golden runs of the good model: the CLI's (recording references) and one judged against them."""

    cli_report: dict[str, object]
    judged: GoldenResult
    references: References


@pytest.fixture(scope="module")
def good_runs(cpu_engine: CpuEngine, cpu_server: Server, tmp_path_factory: pytest.TempPathFactory) -> GoodRuns:
    history = tmp_path_factory.mktemp("history")
    report = history / "golden.json"
    argv = ["golden", CPU_ENTRY, "--url", cpu_server.base_url, "--record", "--json", str(report)]
    code = main([*argv, "--set", f"paths.state={history}"])
    assert code == 0, report.read_text() if report.exists() else "no report"
    hardware = cpu_engine.config.matrix.profiles[cpu_engine.entry.profile].hardware
    references = ReferenceStore(history / "golden").load(hardware, CPU_ENTRY)
    assert references is not None
    judged = run_golden(
        cpu_server.client,
        cpu_engine.entry,
        cpu_engine.config.golden[cpu_engine.entry.golden],
        model_ref=str(package_folder(cpu_engine.entry, cpu_engine.cache_dir)),
        references=references,
        server_log=ServerLog(cpu_server.log_path, "cpu"),  # as the nightly passes the server it booted
    )
    return GoodRuns(json.loads(report.read_text()), judged, references)


def test_the_good_model_passes_every_check(good_runs: GoodRuns) -> None:
    report = good_runs.cli_report
    assert report["passed"] is True
    statuses = {(v["check"], v["status"]) for v in report["verdicts"]}  # type: ignore[attr-defined]
    assert ("answer", "PASS") in statuses and ("long decode", "PASS") in statuses
    # the serving features the entry enables, on the real engine: a tool call forced by the grammar (required and
    # named), an optional one, a JSON-schema answer; no reasoning parser, so no reasoning check
    features = [(v["check"], v["subject"], v["status"]) for v in report["verdicts"]]  # type: ignore[attr-defined]
    assert ("forced tool call", "get_weather (required)", "PASS") in features
    assert ("forced tool call", "get_weather (named)", "PASS") in features
    assert ("optional tool call", "get_weather (auto)", "PASS") in features
    assert ("JSON schema", "capital", "PASS") in features
    assert ("reasoning", "SKIPPED") in statuses
    # --url names a server this command did not start: its log is not ours to read
    assert ("kernel path", "attention", "SKIPPED") in features
    assert not [v for v in report["verdicts"] if v["status"] == "FAIL"]  # type: ignore[attr-defined]


def test_the_good_model_does_not_drift_from_its_own_reference(good_runs: GoodRuns) -> None:
    assert good_runs.judged.passed, [v for v in good_runs.judged.failures]
    drift = [v for v in good_runs.judged.verdicts if v.check == "drift"]
    assert drift and all(v.reason.startswith("tokens identical") for v in drift)


def test_the_good_build_runs_the_kernels_the_entry_declares(good_runs: GoodRuns) -> None:
    kernels = {v.subject: v for v in good_runs.judged.verdicts if v.check == "kernel path"}
    assert set(kernels) == {"attention", "kv_cache_dtype"}
    assert all(v.status == "PASS" for v in kernels.values()), kernels
    assert "/metrics" in kernels["kv_cache_dtype"].reason


def test_small_perturbations_keep_the_answer_but_are_caught_by_drift(
    cpu_engine: CpuEngine, tmp_path: Path, good_runs: GoodRuns
) -> None:
    folder = make_broken(cpu_engine, tmp_path, "perturb", PERTURBATION)
    result = golden_on(cpu_engine, folder, tmp_path, good_runs.references)
    assert verdict(result, "answer", "capital-of-france").status == "PASS"
    drift = verdict(result, "drift", "capital-of-france")
    assert drift.status == "FAIL", drift
    assert drift.evidence["reference_night"] == good_runs.references.night
