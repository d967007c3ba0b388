"""The class of this host's CPU by its widest matrix and vector instructions: what CPU inference speed follows."""

from __future__ import annotations

from pathlib import Path


def cpu_class(cpuinfo: str | None = None) -> str:
    """amx (Intel AMX tiles), avx512, avx2 or baseline, from /proc/cpuinfo's flags (or the text given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "baseline"
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    if "amx_tile" in flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "baseline"
