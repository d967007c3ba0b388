"""The transformers judge's scores, kept: the same tokens on the same weights, runtime and host are scored once."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.infra.openai_client import Generation
from pipeline.infra.runtime import Runtime
from pipeline.infra.weights import MANIFEST
from pipeline.stages.prove.judge import TransformersJudge

pytestmark = pytest.mark.integration

# Stands in for the converter runtime's python running infra/hf_score.py: scores each token -0.5, notes each run
SCORER = """
import json, sys
weights, request, output = sys.argv[1:]
items = json.load(open(request))["items"]
with open(sys.argv[0] + ".runs", "a") as runs:
    runs.write("scored\\n")
json.dump({"items": [{"id": i["id"], "logprobs": [-0.5] * len(i["token_ids"]), "best": i["token_ids"]}
                     for i in items]}, open(output, "w"))
"""


def _judge(tmp_path: Path, weights_hashes: dict[str, str]) -> tuple[TransformersJudge, Path]:
    root = tmp_path / "runtime"
    (root / "bin").mkdir(parents=True)
    scorer = root / "scorer.py"
    scorer.write_text(SCORER)
    python = root / "bin" / "python"
    python.write_text(f'#!/bin/sh\nshift\nexec {sys.executable} {scorer} "$@"\n')  # the scorer's path, not hf_score's
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    judged = tmp_path / "cache" / "judged"
    weights = _weights(tmp_path / "weights", weights_hashes)
    return TransformersJudge(Runtime(root, "converter-key", (), ()), weights, tmp_path / "logs", judged=judged), scorer


def _weights(folder: Path, hashes: dict[str, str]) -> Path:
    """A weights folder as the weights stage leaves one: its manifest of each file's sha256."""
    folder.mkdir()
    (folder / MANIFEST).write_text(json.dumps({"files": hashes}))
    return folder


def _answer(prompt_id: str, tokens: tuple[int, ...]) -> Generation:
    return Generation(prompt_id, "text", logprobs=(-0.1,) * len(tokens), token_ids=tokens, prompt_token_ids=(1, 2))


def test_the_same_tokens_are_scored_once_and_other_tokens_or_weights_again(tmp_path: Path) -> None:
    judge, scorer = _judge(tmp_path, {"model.safetensors": "a" * 64})
    runs = Path(f"{scorer}.runs")
    first = judge.score([_answer("france", (5, 6, 7))])
    again = judge.score([_answer("france", (5, 6, 7))])
    assert first == again and first["france"].logprobs == (-0.5, -0.5, -0.5)
    assert runs.read_text().splitlines() == ["scored"]  # the second read back from the cache's judged/
    judge.score([_answer("france", (5, 6, 8))])  # tonight's answer is another: scored
    assert runs.read_text().splitlines() == ["scored"] * 2
    other = replace(judge, weights=_weights(tmp_path / "other", {"model.safetensors": "b" * 64}))
    other.score([_answer("france", (5, 6, 7))])  # other weights: scored
    assert runs.read_text().splitlines() == ["scored"] * 3


def test_weights_without_a_manifest_are_scored_every_time(tmp_path: Path) -> None:
    judge, scorer = _judge(tmp_path, {})
    for _ in range(2):
        judge.score([_answer("france", (5, 6, 7))])
    assert Path(f"{scorer}.runs").read_text().splitlines() == ["scored"] * 2
