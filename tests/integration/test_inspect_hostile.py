"""A library that cuobjdump cannot read (a corrupt ELF) is refused by its member name and the run goes on: no exit 3
naming a temporary file. cuobjdump's failure is played by a real executable that fails the way it does."""

from __future__ import annotations

import platform
import struct
from pathlib import Path

import pytest

from pipeline.infra.fatbin import Cuobjdump
from pipeline.stages.build.inspect import Target, inspect_wheels
from tests.wheelfactory import make_wheel

pytestmark = pytest.mark.integration

HOST_PLATFORM = f"linux_{platform.machine()}"
MACHINES = {"x86_64": 62, "aarch64": 183}


def _elf() -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    return ident + struct.pack("<HHI", 3, MACHINES[platform.machine()], 1) + bytes(40) + b"\x90" * 64


def test_a_library_cuobjdump_cannot_read_is_refused_by_member_and_the_next_wheel_is_still_inspected(
    tmp_path: Path,
) -> None:
    failing = tmp_path / "cuobjdump"
    failing.write_text("#!/bin/sh\necho 'cuobjdump fatal   : Could not open input file' >&2\nexit 1\n")
    failing.chmod(0o755)
    target = Target(gpu=True, arch="sm_121a", driver_cuda=(13, 0),
                    torch_version="2.13.0", platform=HOST_PLATFORM)  # fmt: skip
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    corrupt = make_wheel(tmp_path / "a", "vllm", "0.27.2", {"_C.so": _elf()}, platform=HOST_PLATFORM)
    other = make_wheel(tmp_path / "b", "flashinfer-python", "0.7.2", {"x.py": b"pass\n"}, platform="any")
    report = inspect_wheels([corrupt, other], target, Cuobjdump(failing))
    assert [w.status.value for w in report.wheels] == ["FAIL", "PASS"]
    (problem,) = report.wheels[0].problems
    assert problem == "vllm/_C.so: cuobjdump cannot read it: cuobjdump fatal   : Could not open input file"
    assert "member-" not in problem and "inspect-" not in problem
