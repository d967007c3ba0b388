"""Whether a boot the engine refused blames the host: a refusal for instruction sets this CPU has none of.

vLLM's CPU engine refuses a setting whose kernels need instructions the CPU lacks, and says which (0.32.0:
"NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."). On a host with none of the named sets
that refusal says nothing of tonight's build: the same entry would be refused with any build. On a host that has one
of them the build refused what it should run, and the failure is the build's, as is a refusal that names no
instruction set. The smoke draws the same line for a native the host cannot execute (checks/natives.py).
"""

from __future__ import annotations

import re

from pipeline.checks.natives import ISA_NAMES, HostIsa

# The instruction sets a refusal may name, by the flag /proc/cpuinfo gives each; AVX-512 matched whole (not inside
# "AVX512_BF16", a narrower need this rule does not judge)
_NAMED = (
    ("avx512f", re.compile(r"\bAVX-?512\b(?!_)", re.IGNORECASE)),
    ("amx_tile", re.compile(r"\bAMX\b")),
    ("avx2", re.compile(r"\bAVX2\b", re.IGNORECASE)),
)
# The clause that says what the engine needs, up to the end of its line
_NEEDS = re.compile(r"\b(?:requires?|needs?|only supported (?:on|with))\b[^\n]*", re.IGNORECASE)


def host_lacks_for_refusal(detail: str, isa: HostIsa) -> str | None:
    """What this host lacks, where a boot's evidence (`detail`) refuses for instruction sets it has none of; None
    where the evidence names no instruction set it needs, or the host has one of those it names (the build's)."""
    needs = _NEEDS.search(detail)
    if needs is None:
        return None
    named = [flag for flag, pattern in _NAMED if pattern.search(needs.group(0))]
    if not named or any(flag in isa.flags for flag in named):
        return None
    return f"the engine requires {' or '.join(ISA_NAMES[flag] for flag in named)}; this host is {isa.describe()}"
