"""The key of a native load: the package files Python runs to reach a native, and the base environment found through
the layers of runtimes below an overlay."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.checks.natives import PlannedLoad
from pipeline.infra.files import sha256_of
from pipeline.stages.prove.natives_key import _base_environment, _package_inits


def test_a_native_in_a_subpackage_is_reached_through_each_package_init(tmp_path: Path) -> None:
    inner = tmp_path / "vllm" / "vllm_flash_attn"
    inner.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("TOP = 1\n")
    (inner / "_fa2_C.abi3.so").write_bytes(b"\x7fELF")
    load = PlannedLoad("vllm.vllm_flash_attn._fa2_C", str(inner / "_fa2_C.abi3.so"), (), (), True)
    assert _package_inits(load) == ["", sha256_of(tmp_path / "vllm" / "__init__.py")]  # innermost has none
    (inner / "__init__.py").write_text("INNER = 1\n")
    assert _package_inits(load)[0] == sha256_of(inner / "__init__.py")


def test_the_base_environment_is_found_below_an_overlays_layers(tmp_path: Path) -> None:
    base = {"python": "/opt/base/bin/python", "listing_sha256": "a" * 64}
    layers = {
        "gpu-built-overlay-1": {"companion": "gpu-built-trees-2"},
        "gpu-built-trees-2": {"companion": "gpu-built-companion-3"},
        "gpu-built-companion-3": {"base": base},
        "cpu-built-overlay-4": {"companion": "cpu-built-companion-5"},
        "cpu-built-companion-5": {},
    }
    for name, meta in layers.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "runtime.json").write_text(json.dumps(meta))
    assert _base_environment(tmp_path / "gpu-built-overlay-1") == base
    assert _base_environment(tmp_path / "cpu-built-overlay-4") is None  # a companion with no base: its lock is all
    assert _base_environment(tmp_path / "missing") is None
