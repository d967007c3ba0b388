"""The class of this host's CPU by its widest matrix and vector instructions: what CPU inference speed follows."""

from __future__ import annotations

from pathlib import Path


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's flags from /proc/cpuinfo (or the text given); none where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def cpu_class(cpuinfo: str | None = None) -> str:
    """amx (Intel AMX tiles), avx512, avx2 or baseline, from /proc/cpuinfo's flags (or the text given)."""
    flags = cpu_flags(cpuinfo)
    if "amx_tile" in flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "baseline"
