"""An overlay's runtime over a companion that is itself layered over a base environment (the `gpu-built` profile: the
base holds torch and CUDA, the companion vLLM's other dependencies, the overlay tonight's vLLM): real venvs, real pip,
and the overlay's interpreter imports from all three."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.infra.base_env import layer, read_base
from pipeline.infra.runtime import Runtime, create_venv, overlay_runtime
from tests.shops import online
from tests.wheelfactory import make_wheel

pytestmark = pytest.mark.integration


def _install(python: Path, wheel: Path, log: Path) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr


def test_an_overlay_over_a_layered_companion_sees_the_base_the_companion_and_itself(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    platform = "any"
    base_pkg = make_wheel(wheels, "basetorch", "2.11.0", {"__init__.py": b"WHERE = 'base'\n"}, platform=platform)
    companion_pkg = make_wheel(
        wheels, "companiondep", "1.0", {"__init__.py": b"WHERE = 'companion'\n"}, platform=platform
    )
    overlay_pkg = make_wheel(wheels, "tonight", "0.26.0", {"__init__.py": b"WHERE = 'overlay'\n"}, platform=platform)

    base_python = create_venv(tmp_path / "base", sys.executable, tmp_path)
    _install(base_python, base_pkg, tmp_path / "base.log")
    companion_python = create_venv(tmp_path / "companion", sys.executable, tmp_path)
    layer(tmp_path / "companion", read_base(str(base_python)))
    _install(companion_python, companion_pkg, tmp_path / "companion.log")
    companion = Runtime(tmp_path / "companion", "companion-key", (), ())

    overlay = overlay_runtime("gpu-built-overlay", companion, [overlay_pkg], online(tmp_path / "cache"), tmp_path)
    probe = "import basetorch, companiondep, tonight; print(basetorch.WHERE, companiondep.WHERE, tonight.WHERE)"
    found = subprocess.run(
        [str(overlay.root / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["base", "companion", "overlay"]


def test_two_vllms_over_one_flashinfer_layer_import_flashinfer_from_one_place(tmp_path: Path) -> None:
    # gpu-built: tonight's FlashInfer in a layer of its own under each night's or trial's vLLM, so the kernel sources
    # its JIT modules were compiled against keep one path whichever vLLM boots
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    companion_pkg = make_wheel(wheels, "companiondep", "1.0", {"__init__.py": b"WHERE = 'c'\n"}, platform="any")
    kernels_pkg = make_wheel(wheels, "fakeinfer", "0.6.14", {"__init__.py": b"WHERE = 't'\n"}, platform="any")
    main_pkg = make_wheel(wheels, "tonight", "0.26.0", {"__init__.py": b"WHERE = 'main'\n"}, platform="any")
    (wheels / "trial").mkdir()
    trial_pkg = make_wheel(
        wheels / "trial", "tonight", "0.26.0+trial", {"__init__.py": b"WHERE = 'trial'\n"}, platform="any"
    )
    companion_python = create_venv(tmp_path / "companion", sys.executable, tmp_path)
    _install(companion_python, companion_pkg, tmp_path / "companion.log")
    companion = Runtime(tmp_path / "companion", "companion-key", (), ())

    trees = overlay_runtime("gpu-built-trees", companion, [kernels_pkg], online(tmp_path / "cache"), tmp_path)
    found = []
    for tonight in (main_pkg, trial_pkg):
        overlay = overlay_runtime("gpu-built-overlay", trees, [tonight], online(tmp_path / "cache"), tmp_path)
        probe = "import companiondep, fakeinfer, tonight; print(companiondep.WHERE, tonight.WHERE, fakeinfer.__file__)"
        done = subprocess.run(
            [str(overlay.root / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        found.append(done.stdout.split())
        assert [f.name for f in overlay.lock] == ["fakeinfer", "tonight"]  # the whole environment, every layer
    (main, trial) = found
    assert main[:2] == ["c", "main"] and trial[:2] == ["c", "trial"]
    assert main[2] == trial[2] and main[2].startswith(str(trees.root))  # one FlashInfer, one path
