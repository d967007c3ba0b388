"""`inspect --profile spark` on what upstream really ships (vLLM 0.33.0 for aarch64, flashinfer-cubin 0.6.13,
flashinfer-python 0.7.2.post1, all from PyPI): what a Spark gets, what it lacks by design, and what is wrong."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.upstream import FLASHINFER_CUBIN, FLASHINFER_PYTHON, VLLM_AARCH64

pytestmark = pytest.mark.integration

ABSENT_BY_DESIGN = {
    "vllm/_deepselect_C.abi3.so",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_flashmla_extension_C.abi3.so",
    "vllm/_qutlass_C.abi3.so",
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
}


def _inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str], *wheels: Path) -> tuple[int, dict[str, object], str]:
    code = main(["inspect", "--profile", "spark", "--json", str(tmp_path / "inspect.json"), *map(str, wheels)])
    out = capsys.readouterr().out
    print(out)
    return code, json.loads((tmp_path / "inspect.json").read_text()), out


def test_the_real_vllm_wheel_fails_only_on_its_torch_pin_and_names_what_is_absent_by_design(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, out = _inspect(tmp_path, capsys, VLLM_AARCH64.fetch())
    (wheel,) = report["wheels"]  # type: ignore[misc]
    assert (code, wheel["status"]) == (6, "FAIL")  # exit 6: the wheels were refused
    # right: vLLM 0.33.0 wants torch 2.14.0 and the Spark profile pins 2.13.0; nothing else is wrong
    assert wheel["problems"] == ["requires torch==2.14.0, which the pinned torch 2.13.0 does not satisfy"]
    libraries = {lib["member"]: lib for lib in wheel["libraries"]}
    assert {m for m, lib in libraries.items() if lib["status"] == "absent"} == ABSENT_BY_DESIGN
    for needed in ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so"):
        assert libraries[needed]["status"] == "ok" and "sm_120" in libraries[needed]["reason"], libraries[needed]
    assert libraries["vllm/_flashkda_C.abi3.so"]["reason"] == "cubins for sm_120f"  # a family cubin loads on sm_121
    assert libraries["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]["status"] == "flagged"  # sm_80 PTX, JIT at load
    assert "Rust frontend built (vllm/vllm-rs)" in wheel["notes"]
    assert "absent   vllm/_flashmla_C.abi3.so: absent on sm_121a by design (FlashMLA" in out


def test_flashinfers_cubin_wheel_is_judged_as_what_it_is_in_one_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cubin, python = FLASHINFER_CUBIN.fetch(), FLASHINFER_PYTHON.fetch()
    started = time.monotonic()
    code, report, out = _inspect(tmp_path, capsys, cubin, python)
    seconds = time.monotonic() - started
    print(f"inspected {cubin.name} and {python.name} in {seconds:.1f} s")
    assert code == 0 and report["status"] == "PASS", out
    cubins = report["wheels"][0]["cubins"]  # type: ignore[index]
    # all SM100-family: none loads on sm_121, and none is refused for it: FlashInfer compiles those kernels itself
    assert cubins["usable"] == 0 and cubins["total"] == sum(cubins["by_arch"].values()) > 15000
    assert set(cubins["by_arch"]) == {"sm_100", "sm_100a", "sm_103a"}
    assert report["notes"] == [
        "flashinfer-cubin 0.6.13 beside flashinfer-python 0.7.2.post1: FlashInfer ignores a companion of another "
        "version, so these kernels are JIT-compiled at first use"
    ]
