"""The builder on a real package: flashinfer-python from its PyPI sdist, built, cached, inspected; and the lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import EngineError
from pipeline.infra.files import sha256_of
from pipeline.infra.pypi import download_sdist
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.wheels import read_metadata
from pipeline.settings import from_environment
from pipeline.stages.build.build_wheels import build_source
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Toolchain
from pipeline.stages.build.inspect import Target, inspect_wheel
from pipeline.stages.build.lock import lock_wheel_set
from tests.shops import online
from tests.wheelfactory import make_wheel

pytestmark = pytest.mark.integration

SDIST = "flashinfer-python==0.7.2.post1"
CPU_TARGET = Target(False, None, None, "2.13.0", None)
TOOLCHAIN = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)


@pytest.fixture(scope="module")
def cache_dir() -> Path:
    return from_environment().settings.places.cache


def test_flashinfer_python_builds_from_its_sdist_and_an_unchanged_second_night_builds_nothing(
    cache_dir: Path, tmp_path: Path
) -> None:
    source = BuildSource.from_sdist("flashinfer", download_sdist(SDIST, cache_dir / "sdists"))
    said: list[str] = []

    def build(night: str) -> tuple[bool, Path]:
        result = build_source(
            BUILDERS["flashinfer"],
            source,
            TOOLCHAIN,
            cache=WheelCache(tmp_path / "wheel-cache"),
            work_dir=tmp_path / night / "work",
            out_dir=tmp_path / night / "wheels",
            shop=online(cache_dir, said.append),
        )
        (wheel,) = result.wheels
        return result.cached, wheel

    first_cached, first = build("night1")
    second_cached, second = build("night2")
    assert (first_cached, second_cached) == (False, True)
    assert first.name == second.name == "flashinfer_python-0.7.2.post1-py3-none-any.whl"
    assert sha256_of(first) == sha256_of(second)
    assert any("cache hit" in line and "nothing to build" in line for line in said), said
    assert not (tmp_path / "night2" / "work" / "src-flashinfer").exists()  # nothing was unpacked for a hit
    meta = read_metadata(second)
    assert (meta.name, meta.version) == ("flashinfer-python", "0.7.2.post1")
    report = inspect_wheel(second, CPU_TARGET, None)
    assert report.status.value == "PASS", report.problems


def test_a_damaged_cache_entry_is_rebuilt_not_served(cache_dir: Path, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo-kernels", "1.0", {"k.py": b"K = 1\n"})
    cache = WheelCache(tmp_path / "cache")
    entry = cache.store("k1", [wheel], {"source": "x"}, 1.0)
    assert cache.lookup("k1") == entry
    entry.paths()[0].write_bytes(b"truncated")
    assert cache.lookup("k1") is None


def test_the_build_command_on_an_sdist_writes_the_wheel_the_build_record_and_the_inspection(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_WHEELS", str(tmp_path / "wheels"))
    # --no-lock: the lock of flashinfer-python would download its CUDA dependencies; the lock has its own test
    argv = ["build", "--sdist", SDIST, "--source", "flashinfer", "--run-id", "n1", "--profile", "cpu", "--no-lock"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    record = json.loads((tmp_path / "runs" / "n1" / "build.json").read_text())
    (built,) = record["builds"]
    assert built["family"] == "flashinfer"
    assert [w["filename"] for w in built["wheels"]] == ["flashinfer_python-0.7.2.post1-py3-none-any.whl"]
    inspection = json.loads((tmp_path / "runs" / "n1" / "inspect.json").read_text())
    assert inspection["status"] == "PASS"
    assert "PASS  flashinfer_python-0.7.2.post1-py3-none-any.whl" in out


@pytest.mark.parametrize("gpu", [False, True])
def test_the_lock_pins_every_file_with_its_hash_and_refuses_a_cpu_torch_on_a_gpu_profile(
    tmp_path: Path, gpu: bool
) -> None:
    wheel = make_wheel(
        tmp_path, "demo-kernels", "1.0+g0123456.d20261121", {"k.py": b"K = 1\n"},
        requires=("six==1.16.0", "torch==2.13.0"), platform="any",
    )  # fmt: skip
    lock = lambda: lock_wheel_set(  # noqa: E731
        [wheel], torch_version="2.13.0", gpu=gpu, index_urls=(), dest=tmp_path / "lock", log_dir=tmp_path
    )
    if gpu:  # this machine's only torch 2.13.0 is its CPU build: what users got when torch was re-resolved
        with pytest.raises(EngineError, match=r"torch 2\.13\.0\+cpu .*a \+cpu torch on a GPU profile"):
            lock()
        assert not (tmp_path / "lock" / "lock.txt").exists()
        return
    locked = lock()
    names = {f.name: f for f in locked.files}
    assert {"demo-kernels", "six", "torch"} <= set(names)
    assert names["demo-kernels"].sha256 == sha256_of(wheel)
    text = locked.path.read_text()
    assert "demo-kernels==1.0+g0123456.d20261121 --hash=sha256:" in text
    assert text.splitlines()  # not empty: an assert over nothing passes
    assert all(" --hash=sha256:" in line for line in text.splitlines())
