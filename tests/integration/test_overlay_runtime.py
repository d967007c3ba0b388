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

    overlay = overlay_runtime("gpu-built-overlay", companion, [overlay_pkg], tmp_path / "cache", tmp_path)
    probe = "import basetorch, companiondep, tonight; print(basetorch.WHERE, companiondep.WHERE, tonight.WHERE)"
    found = subprocess.run(
        [str(overlay.root / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["base", "companion", "overlay"]
