"""A blind gate says so: the same INCONCLUSIVE reason two nights running, or a night that measured no entry, raises
the pipeline's own alert naming the reason; a measured night closes it. Nothing is blamed on the wheels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.commands.nightly import report_to_actions
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.stages.aftermath.alert import raise_alerts
from pipeline.stages.aftermath.alert_records import AlertEvent
from pipeline.status import Status

NO_GPU = "host unhealthy: no GPU visible (NVML and nvidia-smi found none)"


def _outcome(entry: str, status: Status, reason: str = "ok", stage: str = "perf") -> Outcome:
    return Outcome(entry, status, stage, reason, True, 1.0)


def _night(state: Path, night: str, *outcomes: Outcome) -> list[AlertEvent]:
    return raise_alerts(list(outcomes), night=night, run_id=f"run-{night}", state_path=state, suspects="-")


def test_an_entry_inconclusive_for_the_same_reason_two_nights_running_raises_the_pipelines_alert(
    tmp_path: Path,
) -> None:
    state = tmp_path / "alerts.json"
    measured = _outcome("qwen3.6", Status.PASS)
    throttled = _outcome("qwen3.5", Status.INCONCLUSIVE, "host unhealthy: GPU 0 runs at 702 MHz under load", "health")
    assert _night(state, "2026-11-20", throttled, measured) == []  # one night: the host's mood
    again = _outcome("qwen3.5", Status.INCONCLUSIVE, "host unhealthy: GPU 0 runs at 698 MHz under load", "health")
    (opened,) = _night(state, "2026-11-21", again, measured)
    assert (opened.key, opened.action, opened.kind) == ("pipeline:blind", "opened", "pipeline-failure")
    assert "qwen3.5: INCONCLUSIVE 2 nights running at health: host unhealthy: GPU 0 runs at 698 MHz" in opened.body
    assert "no wheel is blamed" in opened.body
    (closed,) = _night(state, "2026-11-22", _outcome("qwen3.5", Status.PASS), measured)
    assert (closed.key, closed.action) == ("pipeline:blind", "closed")


def test_different_reasons_on_two_nights_are_not_one_blindness(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    measured = _outcome("other", Status.PASS)
    assert _night(state, "2026-11-20", _outcome("m", Status.INCONCLUSIVE, "too noisy"), measured) == []
    assert _night(state, "2026-11-21", _outcome("m", Status.INCONCLUSIVE, "host unhealthy", "health"), measured) == []


def test_a_night_that_measured_no_entry_raises_it_at_once_and_a_gb10_read_as_no_gpu_stays_open(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    blind = [_outcome(e, Status.INCONCLUSIVE, NO_GPU, "health") for e in ("qwen3.5", "gpt-oss")]
    (opened,) = _night(state, "2026-11-20", *blind)
    assert opened.action == "opened" and "no entry was measured tonight (2 entries" in opened.body
    (updated,) = _night(state, "2026-11-21", *blind)
    assert updated.action == "updated" and "gpt-oss: INCONCLUSIVE 2 nights running at health" in updated.body


def test_on_actions_a_blind_night_fails_its_step_with_an_error_naming_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = tmp_path / "outputs"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    run = {"verdict": "INCONCLUSIVE", "night": "2026-11-21", "publish": "", "blind": ["On 2026-11-21 ...\n- x"]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert report_to_actions(RunDir(tmp_path), shard=False) is True
    assert "::error title=spark-nightly measures nothing::On 2026-11-21 ..." in capsys.readouterr().out
    assert "blind=true" in outputs.read_text()
    (tmp_path / "run.json").write_text(json.dumps(run | {"blind": []}))
    assert report_to_actions(RunDir(tmp_path), shard=False) is False
