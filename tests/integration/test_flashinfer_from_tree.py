"""FlashInfer's Python built from its real tree, as the `gpu-built` profile builds it on a GPU host with no network:
the source release vLLM 0.26.0 pins (flashinfer-python 0.6.14) as a git repository, its build environment read from
main into a wheelhouse by the wheelhouse command's own function, then built from that wheelhouse alone. The wheel
carries tonight's version and the kernel sources its JIT compiles, and its Python is PyPI's wheel of the same release
byte for byte. No engine boots here: the GPU nights serve it (docs/gpu.md)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import Profile
from pipeline.errors import EngineError
from pipeline.infra.git import mirror_dir
from pipeline.infra.supply import Supply, runtime_folder
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.wheelhouse import make_wheelhouse, open_wheelhouse
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.settings import Settings, from_environment
from pipeline.stages.build.build_wheels import BuildResult, build_set, build_source
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource
from pipeline.stages.build.night_build import sources_from, toolchain_for, tree_build_sets, tree_build_why
from pipeline.stages.build.resolve import resolve_sources
from tests.flashinfer_repo import make_flashinfer_repo
from tests.gitrepos import Upstream as GitUpstream
from tests.upstream import Upstream

pytestmark = pytest.mark.integration  # builds, no engine: in .ci/run's parallel phase
ROOT = Path(__file__).resolve().parents[2]

# PyPI's wheel of the same release, to hold the tree's build against
FLASHINFER_0614_WHEEL = Upstream(
    "flashinfer-python",
    "0.6.14",
    "flashinfer_python-0.6.14-py3-none-any.whl",
    "d124369346a3d48eac67e31c42f7a3c813bcc0abc10e2e36db413b7b3dfd97df",
    14574383,
)


@pytest.fixture(scope="module")
def flashinfer_repo(tmp_path_factory: pytest.TempPathFactory) -> GitUpstream:
    return make_flashinfer_repo(tmp_path_factory.mktemp("flashinfer-repo"))


def _settings(tmp_path: Path, repo: GitUpstream, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("SPARK_NIGHTLY_SOURCES_FLASHINFER_REPO", repo.url)
    monkeypatch.setenv("SPARK_NIGHTLY_SOURCES_FLASHINFER_REF", "main")
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_RUNS", str(tmp_path / "runs"))
    return from_environment().settings


def _gpu_built() -> Profile:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    return config.matrix.profiles["gpu-built"]


def _build(settings: Settings, supply: Supply, work: Path) -> BuildResult:
    profile = _gpu_built()
    plan = resolve_sources(
        [s for s in sources_from(settings, profile) if s.name == "flashinfer"],
        cache_dir=settings.places.cache,
        work_dir=work,
        created="",
    )
    planned = plan.source("flashinfer")
    return build_source(
        BUILDERS["flashinfer"],
        BuildSource.from_plan(planned, mirror_dir(settings.places.cache, planned.repo)),
        toolchain_for(profile, settings),
        cache=WheelCache(work / "wheel-cache"),  # this test's own: a wheel the shared cache holds would not build
        work_dir=work / "build",
        out_dir=work / "out",
        shop=Workshop(CacheDir(settings.places.cache), supply),
        why=tree_build_why("flashinfer", profile),
    )


def test_flashinfer_python_builds_from_its_tree_offline_from_the_wheelhouse_its_tree_asked_for(
    tmp_path: Path, flashinfer_repo: GitUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    pypi = FLASHINFER_0614_WHEEL.fetch()  # into the shared cache, before this test's own
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CACHE", str(tmp_path / "cache"))  # its build environment made here, offline
    settings = _settings(tmp_path, flashinfer_repo, monkeypatch)
    profile = _gpu_built()
    (wanted,) = tree_build_sets(settings, profile)  # vLLM is an overlay on its pinned wheel: no build environment
    # FlashInfer's own [build-system] requires, and uv that builds it: no torch, no compiler for its Python alone
    assert wanted.name == "build-flashinfer" and not wanted.tool  # its pins hold as FlashInfer writes them
    assert wanted.requirements == (
        "setuptools>=77",
        "packaging>=24",
        "apache-tvm-ffi>=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2",
        "uv",
    )
    house = make_wheelhouse(
        [wanted], tmp_path / "wh", resolver_python=sys.executable, base=None, command="test", log_dir=tmp_path
    )
    offline = Supply(open_wheelhouse(house.root), offline=True, profile="gpu-built")

    result = _build(settings, offline, tmp_path / "night")

    (wheel,) = result.wheels
    commit = flashinfer_repo.git("rev-parse", "HEAD")
    assert (result.kind, result.cached) == ("native", False)
    assert result.why == (
        "flashinfer-python from its tree; no AOT kernels on profile gpu-built (no CUDA architecture): its kernels "
        "compile at first use (JIT)"
    )
    assert wheel.name.startswith(f"flashinfer_python-0.6.14+g{commit[:9]}.d")  # tonight's commit in its version
    with zipfile.ZipFile(wheel) as ours, zipfile.ZipFile(pypi) as upstream:
        built = set(ours.namelist())
        meta = ours.read("flashinfer/_build_meta.py").decode()
        assert f'__git_version__ = "{commit}"' in meta and '__version__ = "0.6.14+g' in meta
        # the sources the JIT compiles travel in the wheel: FlashInfer's own and the vendored headers
        for member in ("flashinfer/data/csrc/", "flashinfer/data/include/", "flashinfer/data/cutlass/include/"):
            assert any(name.startswith(member) for name in built), member
        python = [n for n in upstream.namelist() if n.endswith(".py") and n != "flashinfer/_build_meta.py"]
        assert len(python) > 300
        assert [n for n in python if n not in built or ours.read(n) != upstream.read(n)] == []
    locked = runtime_folder(build_set("flashinfer", wanted.requirements), offline, settings.places.cache) / "lock.txt"
    assert "apache-tvm-ffi" in locked.read_text() and "torch" not in locked.read_text()


def test_an_offline_build_whose_wheelhouse_lacks_its_environment_names_the_set_and_the_fix(
    tmp_path: Path, flashinfer_repo: GitUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CACHE", str(tmp_path / "cache"))  # no build environment made before
    settings = _settings(tmp_path, flashinfer_repo, monkeypatch)
    house = make_wheelhouse(
        [], tmp_path / "wh", resolver_python=sys.executable, base=None, command="t", log_dir=tmp_path
    )
    offline = Supply(open_wheelhouse(house.root), offline=True, profile="gpu-built")
    with pytest.raises(
        EngineError, match=r"has no set for build-flashinfer: .*spark-nightly wheelhouse --profile gpu-built"
    ):
        _build(settings, offline, tmp_path / "night")
