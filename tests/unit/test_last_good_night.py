"""The last good night's record (`paths.state/last_good.json`): one writer and one reader, and a damaged record said
with its file and the way out, never a crash of the night that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import ExitCode, HistoryError
from pipeline.stages.aftermath.suspects import GoodCommits, LastGoodNight, record_last_good
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan

MAIN, GRAFT, FI = "a" * 40, "b" * 40, "c" * 40


def _plan() -> BuildPlan:
    vllm = SourcePlan(
        "vllm", "https://github.com/vllm-project/vllm", "main", MAIN, "2026-11-29T00:00:00Z", GRAFT, "", ()
    )
    flashinfer = SourcePlan("flashinfer", "https://github.com/flashinfer-ai/flashinfer", "main", FI, "", FI, "", ())
    return BuildPlan("2026-11-29T01:00:00Z", (vllm, flashinfer))


def test_a_passing_built_night_is_read_back_as_it_was_written(tmp_path: Path) -> None:
    path = tmp_path / "state" / "last_good.json"
    assert LastGoodNight.read(path) is None  # no built night has passed yet
    record_last_good(path, _plan(), "2026-11-29")
    last = LastGoodNight.read(path)
    assert last == LastGoodNight(
        "2026-11-29",
        {
            "vllm": GoodCommits("https://github.com/vllm-project/vllm", MAIN, GRAFT),
            "flashinfer": GoodCommits("https://github.com/flashinfer-ai/flashinfer", FI, FI),
        },
    )
    assert json.loads(path.read_text())["version"] == 1


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "JSONDecodeError"),
        ('{"version": 2, "night": "2026-11-29", "sources": {}}', "version 2, this spark-nightly reads 1"),
        ('{"version": 1, "night": "2026-11-29"}', "KeyError: 'sources'"),
        ('{"version": 1, "night": "2026-11-29", "sources": {"vllm": {"repo": "r"}}}', "KeyError: 'main_commit'"),
        ('{"version": 1, "night": "2026-11-29", "sources": ["vllm"]}', "AttributeError"),
        ("[]", "ValueError: version None, this spark-nightly reads 1"),
    ],
)
def test_a_damaged_record_is_said_with_its_file_and_the_way_out(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "last_good.json"
    path.write_text(text)
    with pytest.raises(HistoryError) as caught:
        LastGoodNight.read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a last good night's record (") and said in message, message
    assert "remove it and the next built night that passes writes it again" in message
    assert caught.value.exit_code == ExitCode.USAGE
