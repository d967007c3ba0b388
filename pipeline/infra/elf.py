"""The libraries a shared object needs (its DT_NEEDED entries), read from its program headers.

What a native base was built against shows in what its natives link: `libcudart.so.13` is CUDA 13, `libamdhip64`
is ROCm. Only the ELF header, the program headers and the dynamic segment are read, all near the start of the file,
so a member of a wheel is read as a stream without unpacking hundreds of megabytes; section headers (at the end)
are never needed.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
_MAX_DYNAMIC_BYTES = 1 << 20  # a dynamic segment is a few hundred bytes; a larger one is no ELF we can trust
_MAX_NAME_BYTES = 4096


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF shared object this reader understands."""


def needed_libraries(stream: BinaryIO) -> list[str]:
    """The DT_NEEDED names of a 64-bit little-endian ELF file, in the order it lists them."""
    header = _read_at(stream, 0, 64)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF file")
    phoff, phentsize, phnum = struct.unpack_from("<Q", header, 32)[0], *struct.unpack_from("<HH", header, 54)
    if phentsize < 56 or phnum > 256:
        raise NotElf("implausible program headers")
    loads, dynamic = [], None
    table = _read_at(stream, phoff, phentsize * phnum)
    for index in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", table, index * phentsize)
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []  # statically linked: needs nothing
    if dynamic[1] > _MAX_DYNAMIC_BYTES:
        raise NotElf("implausible dynamic segment")
    entries = _read_at(stream, dynamic[0], dynamic[1])
    needed, strtab = [], None
    for tag, value in struct.iter_unpack("<qQ", entries[: len(entries) - len(entries) % 16]):
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
    if strtab is None:
        return []
    base = _file_offset(strtab, loads)
    return [_name_at(stream, base + offset) for offset in needed]


def _file_offset(address: int, loads: list[tuple[int, int, int]]) -> int:
    for vaddr, offset, filesz in loads:
        if vaddr <= address < vaddr + filesz:
            return offset + address - vaddr
    raise NotElf(f"the string table's address {address:#x} is in no loaded segment")


def _name_at(stream: BinaryIO, offset: int) -> str:
    raw = _read_at(stream, offset, _MAX_NAME_BYTES, exact=False)
    end = raw.find(b"\0")
    if end < 0:
        raise NotElf("a needed library's name has no end")
    return raw[:end].decode("utf-8", "replace")


def _read_at(stream: BinaryIO, offset: int, size: int, *, exact: bool = True) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if exact and len(data) != size:
        raise NotElf("the file ends before its headers do")
    return data
