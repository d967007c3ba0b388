"""The runner's own native builds as bases, by the content of their native inputs, on real git histories.

A Spark grafts PRs most nights, and its native builds were recorded under the graft commit, which no later main
descends from: a main M1 -> M2 with a Python-only graft on each found no base ("native build: no native base on this
runner") and every night compiled for hours. A build is now a base for any tree whose native inputs have its digest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.git import Git
from pipeline.stages.build.native_base import NativeBuilds, decide
from pipeline.stages.build.native_inputs import native_digest
from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration

TOOLCHAIN = {"cuda": "13.0", "arch": "12.1a", "torch": "2.11.0"}


def _graft(repo: Upstream, main: str, files: dict[str, str], name: str) -> str:
    """A night's graft: main plus a PR's change, on a branch no later main descends from."""
    repo.checkout(name, main)
    graft = repo.commit(files, f"graft of {name}")
    repo.checkout("main")
    return graft


@pytest.fixture()
def repo(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path)
    repo.commit({"csrc/ops.cu": "// kernels\n", "vllm/engine.py": "STEP = 1\n"}, "base")
    return repo


def _wheel(tmp_path: Path, name: str) -> Path:
    wheel = tmp_path / "wheels" / f"vllm-0.1+{name}-cp38-abi3-linux_aarch64.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(name.encode())
    return wheel


def test_a_graft_nights_native_build_is_the_base_of_the_next_python_only_night(repo: Upstream, tmp_path: Path) -> None:
    mirror, book = Git(repo.work), NativeBuilds(tmp_path / "native-builds.json")
    m1 = repo.commit({"csrc/ops.cu": "// kernels v2\n"}, "main moves a kernel")
    graft1 = _graft(repo, m1, {"vllm/pr1.py": "PR = 1\n"}, "night1")  # the night's build: main plus a Python PR
    book.add("vllm", wheel=_wheel(tmp_path, "n1"), commit=graft1, digest=native_digest("vllm", mirror, graft1),
             toolchain=TOOLCHAIN)  # fmt: skip
    m2 = repo.commit({"vllm/engine.py": "STEP = 2\n"}, "main moves Python only")
    graft2 = _graft(repo, m2, {"vllm/pr2.py": "PR = 2\n"}, "night2")
    bases = book.bases("vllm", mirror, graft2, TOOLCHAIN)
    assert len(bases) == 1 and bases[0].commit == graft1
    decision = decide("vllm", mirror, graft2, bases)
    assert decision.kind == "overlay" and decision.base is not None and decision.base.commit == graft1, decision.why
    trial = decide("vllm", mirror, m2, book.bases("vllm", mirror, m2, TOOLCHAIN))  # a culprit trial's main alone
    assert trial.kind == "overlay", trial.why
    other_toolchain = book.bases("vllm", mirror, m2, TOOLCHAIN | {"arch": "12.0f"})
    assert other_toolchain == []  # natives compiled otherwise are no base
    changed = repo.commit({"csrc/ops.cu": "// kernels v3\n"}, "main moves a kernel again")
    assert decide("vllm", mirror, changed, book.bases("vllm", mirror, changed, TOOLCHAIN)).kind == "native"


def test_a_weekend_of_unchanged_natives_builds_none_and_a_main_record_is_never_evicted_by_a_graft(
    repo: Upstream, tmp_path: Path
) -> None:
    mirror, book = Git(repo.work), NativeBuilds(tmp_path / "native-builds.json")
    friday = repo.commit({"csrc/ops.cu": "// friday's kernels\n"}, "friday")
    digest = native_digest("vllm", mirror, friday)
    book.add("vllm", wheel=_wheel(tmp_path, "fri"), commit=friday, digest=digest, toolchain=TOOLCHAIN)
    saturday = _graft(repo, friday, {"vllm/pr.py": "PR = 3\n"}, "saturday")  # same natives, grafted
    # the graft's natives are main's: the night records it under main's commit, built from the graft
    book.add("vllm", wheel=_wheel(tmp_path, "sat"), commit=friday, digest=digest, toolchain=TOOLCHAIN,
             built_from=saturday)  # fmt: skip
    records = book._read()["vllm"]
    assert [(r["commit"], r["wheel"]) for r in records] == [(friday, str(_wheel(tmp_path, "fri")))]  # kept
    for day in ("sunday", "monday"):
        tip = repo.commit({f"vllm/{day}.py": "X = 1\n"}, day)
        decision = decide("vllm", mirror, tip, book.bases("vllm", mirror, tip, TOOLCHAIN))
        assert decision.kind == "overlay" and decision.base is not None and decision.base.commit == friday
