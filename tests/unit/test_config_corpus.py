"""Every malformed configuration in tests/data/malformed gives exit 2, file:line messages, and starts nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.corpus import BASE, case_names, expected_lines, materialize

LOCATED = re.compile(r"^[\w./-]+:\d+:\d+: ")  # file:line:column (a stray file is named, whatever it is)


def test_the_corpus_is_large_enough() -> None:
    assert len(case_names()) >= 30


@pytest.mark.parametrize("case", case_names())
def test_malformed_config_is_refused_with_its_exact_message(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    materialize(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CLUSTER", "cluster.yaml")  # the runner's cluster, where a case has one

    def no_processes(*args: object, **kwargs: object) -> None:
        raise AssertionError("validation must start no process")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_processes)
    code = main(["validate"])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2
    assert out == ""
    assert lines == expected_lines(case)
    assert lines[-1].startswith("error: ")
    assert lines[:-1]  # not empty: an assert over nothing passes
    assert all(LOCATED.match(line) for line in lines[:-1]), lines


def test_the_base_of_the_corpus_is_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(BASE, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0
    assert capsys.readouterr().out.startswith("ok: 2 matrix entries")


def test_the_shipped_configuration_is_valid(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).parents[2])
    assert main(["validate"]) == 0
    assert "matrix entries" in capsys.readouterr().out
