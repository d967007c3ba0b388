"""Which of FlashInfer's kernel wheels a night carries: an earlier build of the same native inputs, relabeled; one
whose version lives where it cannot be relabeled is built again, decided before any build step is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.wheel_cache import WheelCache
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Toolchain
from pipeline.stages.build.kernel_carry import kernel_carry
from tests.gitrepos import Upstream
from tests.wheelfactory import make_wheel

# an architecture: without one FlashInfer yields flashinfer-python alone (no AOT kernels to carry)
TOOLCHAIN = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)
pytestmark = pytest.mark.integration

HOST = {"python": "3.12.3", "machine": "aarch64"}


def _flashinfer_tree(tmp_path: Path) -> tuple[BuildSource, Path]:
    upstream = Upstream(tmp_path / "repo")
    project = '[build-system]\nrequires = ["setuptools"]\n'
    commit = upstream.commit(
        {"pyproject.toml": project, "flashinfer-cubin/pyproject.toml": project, "csrc/k.cu": "// kernel\n"}, "tree"
    )
    tree = upstream.git("rev-parse", "HEAD^{tree}")
    source = BuildSource("flashinfer", f"git-tree:{tree}", f"g{commit[:9]}.d20261101", 0, upstream.work, commit)
    return source, upstream.work


def test_an_earlier_build_that_can_be_relabeled_is_carried_and_one_that_cannot_is_built_again(tmp_path: Path) -> None:
    source, root = _flashinfer_tree(tmp_path)
    cache = WheelCache(tmp_path / "cache")
    builder = BUILDERS["flashinfer"]
    first = kernel_carry(builder, source, TOOLCHAIN, root, cache, HOST)
    assert first is not None and first.families == ("flashinfer-cubin",) and first.earlier is None
    assert first.why() == "kernels (flashinfer-cubin) built: no earlier build of these native inputs"

    meta = {"_build_meta.py": b'__version__ = "0.7.2+g1"\n', "cubins/k.cubin": b"\x7fELF"}
    relabelable = make_wheel(tmp_path, "flashinfer-cubin", "0.7.2+g1", meta)
    cache.store(first.key, [relabelable], {"commit": "a" * 40}, 60.0)
    carried = kernel_carry(builder, source, TOOLCHAIN, root, cache, HOST)
    assert carried is not None and carried.earlier is not None
    assert carried.why() == f"kernels (flashinfer-cubin) carried from {'a' * 12}: native inputs unchanged"

    (tmp_path / "other").mkdir()
    elsewhere = make_wheel(tmp_path / "other", "flashinfer-cubin", "0.7.2+g1", {"version.py": b'V = "0.7.2"\n'})
    cache.store(first.key, [elsewhere], {"commit": "a" * 40}, 60.0)
    rebuilt = kernel_carry(builder, source, TOOLCHAIN, root, cache, HOST)
    assert rebuilt is not None and rebuilt.earlier is None
    assert "built: the earlier build cannot be relabeled (flashinfer_cubin-0.7.2+g1" in rebuilt.why()
    assert "expected one <package>/_build_meta.py, found none" in rebuilt.why()
