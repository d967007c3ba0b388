"""FlashInfer's AOT kernels carried across nights whose FlashInfer changed only Python, rebuilt when its kernel sources
changed. The tree is FlashInfer's real one (the flashinfer-python sdist from PyPI as a git repository, built by its
own backend every night) with AOT projects laid out as upstream's (`flashinfer-cubin/`, `flashinfer-jit-cache/`: a
package whose `_build_meta.py` holds the version FlashInfer compares with its own); their "kernels" are a digest of
the tree's `csrc/`, since compiling real ones needs a GPU toolchain, which is what carrying them saves. What the carry
does to a kernel wheel is tried on the one FlashInfer publishes (flashinfer-cubin 0.6.13, pinned by sha256)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from pipeline.infra.pypi import download_sdist
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.wheels import check_archive, read_metadata
from pipeline.settings import from_environment
from pipeline.stages.build.build_wheels import BuildResult, build_source
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Toolchain
from pipeline.stages.build.overlay import relabel_kernels, relabel_problem
from tests.gitrepos import Upstream
from tests.shops import online
from tests.upstream import FLASHINFER_CUBIN

pytestmark = pytest.mark.integration

SDIST = "flashinfer-python==0.7.2.post1"
# an architecture: without one FlashInfer yields flashinfer-python alone (no AOT kernels to carry). The AOT projects
# here compile nothing, so the preflight's nvcc is a stand-in on a host without CUDA (see _no_compiler_needed)
TOOLCHAIN = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)

_AOT_PYPROJECT = """\
[build-system]
requires = ["setuptools>=77", "packaging>=24"]
build-backend = "setuptools.build_meta"
"""
# as upstream's AOT backends do: the version FlashInfer's own build has (with FLASHINFER_LOCAL_VERSION), written to
# _build_meta.py; the kernels compiled from the tree's kernel sources
_AOT_SETUP = """\
import hashlib, os, pathlib
from setuptools import setup

package = "{package}"
label = os.environ.get("FLASHINFER_LOCAL_VERSION")
version = pathlib.Path("..", "version.txt").read_text().strip() + ("+" + label if label else "")
pathlib.Path(package).mkdir(exist_ok=True)
pathlib.Path(package, "__init__.py").write_text("from ._build_meta import __version__\\n")
pathlib.Path(package, "_build_meta.py").write_text('__version__ = "' + version + '"\\n')
sources = sorted(p for p in pathlib.Path("..", "csrc").rglob("*") if p.is_file())
kernels = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).digest() * 1024
pathlib.Path(package, "kernels.cubin").write_bytes(kernels)
setup(name="{name}", version=version, packages=[package], package_data={{package: ["kernels.cubin"]}})
"""


def _flashinfer_repo(root: Path, sdist: Path) -> Upstream:
    upstream = Upstream(root)
    with tarfile.open(sdist) as archive:
        archive.extractall(root / "unpacked", filter="data")
    (unpacked,) = (root / "unpacked").iterdir()
    for path in sorted(unpacked.iterdir()):
        if path.name not in ("PKG-INFO", "flashinfer_python.egg-info"):
            path.rename(upstream.work / path.name)
    (upstream.work / "version.txt").write_text("0.7.2.post1\n")  # upstream's tree has it; its sdist has PKG-INFO
    for name, package in (("flashinfer-cubin", "flashinfer_cubin"), ("flashinfer-jit-cache", "flashinfer_jit_cache")):
        (upstream.work / name).mkdir()
        (upstream.work / name / "pyproject.toml").write_text(_AOT_PYPROJECT)
        (upstream.work / name / "setup.py").write_text(_AOT_SETUP.format(package=package, name=name))
    upstream.git("add", "-A")
    upstream.git("commit", "--quiet", "-m", "FlashInfer 0.7.2.post1 with its AOT projects")
    return upstream


def _source(upstream: Upstream) -> BuildSource:
    commit = upstream.git("rev-parse", "HEAD")
    tree = upstream.git("rev-parse", "HEAD^{tree}")
    epoch = int(upstream.git("log", "-1", "--format=%ct"))
    return BuildSource("flashinfer", f"git-tree:{tree}", f"g{commit[:9]}.d20261101", epoch, upstream.work, commit)


def _kernels(wheel: Path) -> dict[str, bytes]:
    """Every member but the version's places: what a carried wheel keeps byte for byte."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            n: archive.read(n)
            for n in archive.namelist()
            if ".dist-info/" not in n and not n.endswith("_build_meta.py")
        }


def _build_meta(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("/_build_meta.py")]
        return archive.read(name).decode()


@pytest.fixture
def _no_compiler_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_HOME with an nvcc that says its version and compiles nothing: these AOT stand-ins never call it, and the
    preflight of a build for an architecture asks for one (a CI host has no CUDA toolkit)."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.0 (stand-in: compiles nothing)'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(nvcc.parent.parent))


# three real FlashInfer builds, about 2.3 minutes: no engine, so in .ci/run's parallel phase
@pytest.mark.usefixtures("_no_compiler_needed")
def test_a_python_only_change_carries_the_kernels_under_tonights_version_and_a_kernel_change_rebuilds_them(
    tmp_path: Path,
) -> None:
    cache_dir = from_environment().settings.places.cache
    upstream = _flashinfer_repo(tmp_path / "repo", download_sdist(SDIST, cache_dir / "sdists"))
    wheel_cache = WheelCache(tmp_path / "wheel-cache")
    said: list[str] = []

    def night(name: str) -> tuple[BuildResult, dict[str, Path]]:
        result = build_source(
            BUILDERS["flashinfer"],
            _source(upstream),
            TOOLCHAIN,
            cache=wheel_cache,
            work_dir=tmp_path / name / "work",
            out_dir=tmp_path / name / "wheels",
            shop=online(cache_dir, said.append),
        )
        return result, {read_metadata(w).name: w for w in result.wheels}

    first, first_wheels = night("night1")
    assert "kernels (flashinfer-cubin, flashinfer-jit-cache) built: no earlier build" in first.why
    a = upstream.git("rev-parse", "HEAD")

    upstream.commit({"flashinfer/__init__.py": (upstream.work / "flashinfer/__init__.py").read_text() + "\n# b\n"}, "b")
    said.clear()
    second, second_wheels = night("night2")
    b = upstream.git("rev-parse", "HEAD")
    assert f"kernels (flashinfer-cubin, flashinfer-jit-cache) carried from {a[:12]}: native inputs unchanged" in (
        second.why
    )
    assert said  # not empty: an assert over nothing passes
    assert not any("flashinfer-cubin: " in line or "flashinfer-jit-cache: " in line for line in said), said
    python_version = read_metadata(second_wheels["flashinfer-python"]).version
    assert python_version.endswith(f"+g{b[:9]}.d20261101")
    for family in ("flashinfer-cubin", "flashinfer-jit-cache"):
        carried = second_wheels[family]
        # FlashInfer imports AOT wheels of its own version alone: the carried ones name tonight's, inside and out
        assert read_metadata(carried).version == python_version
        assert _build_meta(carried) == f'__version__ = "{python_version}"\n'
        assert _kernels(carried) == _kernels(first_wheels[family])  # the earlier build's kernels, byte for byte

    upstream.commit({"csrc/carry_probe.cu": "// a kernel source changed\n"}, "c")
    third, third_wheels = night("night3")
    assert "kernels (flashinfer-cubin, flashinfer-jit-cache) built: no earlier build" in third.why
    assert _kernels(third_wheels["flashinfer-cubin"]) != _kernels(first_wheels["flashinfer-cubin"])


def test_upstreams_cubin_wheel_relabels_to_tonights_version_with_every_kernel_byte_for_byte(tmp_path: Path) -> None:
    """What the carry does to the wheel FlashInfer publishes (flashinfer-cubin 0.6.13, about 16,000 cubins): its own
    package then reports tonight's version, which FlashInfer compares with its own at import; nothing else moves."""
    upstream = FLASHINFER_CUBIN.fetch()
    version = "0.6.13+g0123456789.d20261127"
    assert relabel_problem(upstream) is None
    carried = relabel_kernels(upstream, version, tmp_path / "out", epoch=1764201600)
    assert carried.name == f"flashinfer_cubin-{version}-py3-none-any.whl"
    assert read_metadata(carried).version == version and check_archive(carried).problems == ()
    before, after = _kernels(upstream), _kernels(carried)
    assert len(after) > 15000 and after == before
    package = tmp_path / "site" / "flashinfer_cubin"
    package.mkdir(parents=True)
    with zipfile.ZipFile(carried) as archive:
        for name in ("__init__.py", "_build_meta.py"):
            (package / name).write_bytes(archive.read(f"flashinfer_cubin/{name}"))
    reported = subprocess.run(
        [sys.executable, "-c", "import flashinfer_cubin as c; print(c.__version__, c.__git_version__)"],
        cwd=tmp_path / "site",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert reported == [version, "57ba7eeb7ea3003a2d6ad5d9a057c4f952709bac"]  # the commit its kernels came from
