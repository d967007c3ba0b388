"""What loading a runtime's native modules is a function of, as one key: the answer smoke keeps in the cache for
every runtime of the same natives (stages/prove/smoke.py, `load_natives`).

An overlay is tonight's Python over its base wheel's natives, so each night's and each trial's new runtime on one
base holds the same compiled files beside the same torch. A load reads: the natives' bytes; the packages' `__init__`
files Python runs to reach them (a native in `vllm/` runs tonight's `vllm/__init__.py` first); the interpreter; every
other file of the runtime's lock and the base environment it is layered over (torch and the libraries the natives
link against); this host's C library, driver and loader variables; and the loader itself. A runtime with no lock (one
not made here) has no key, nor one whose natives cannot be read: they are loaded every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.checks.natives import PlannedLoad
from pipeline.infra.base_env import normalize
from pipeline.infra.files import sha256_of
from pipeline.infra.runtime import Runtime
from pipeline.infra.runtime_cache import runtime_record

KEY_FORMAT = 1
_NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
_LOADER_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD")
_LAYERS = 4  # an overlay over FlashInfer's layer over a companion over a base environment


def natives_key(
    runtime: Runtime, facts: Mapping[str, Any], planned: Sequence[PlannedLoad], dist: str, loader: str
) -> str | None:
    """The key of what loading `planned` in `runtime` is a function of, or None where there is none to trust."""
    beside = sorted((f.name, f.sha256) for f in runtime.lock if f.name != normalize(dist))
    if not beside:
        return None
    try:
        natives = sorted((load.module, sha256_of(Path(load.path)), _package_inits(load)) for load in planned)
    except OSError:  # a native its RECORD lists and the runtime lacks: the loads say what is wrong
        return None
    inputs = {
        "format": KEY_FORMAT,
        "loader": hashlib.sha256(loader.encode()).hexdigest(),
        "natives": natives,
        "python": facts.get("python"),
        "torch": facts.get("torch"),
        "beside": beside,
        "base": _base_environment(runtime.root),
        "host": _host_libraries(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]


def _package_inits(load: PlannedLoad) -> list[str]:
    """The digests of the `__init__.py` files importing `load.module` runs, innermost first ('' where a package has
    none)."""
    found = []
    folder = Path(load.path).parent
    for _ in load.module.split(".")[:-1]:
        init = folder / "__init__.py"
        found.append(sha256_of(init) if init.exists() else "")
        folder = folder.parent
    return found


def _base_environment(root: Path) -> object:
    """The base environment the runtime is layered over, as its own runtime.json or a companion's below it records
    it (infra/base_env.py), or None."""
    for _ in range(_LAYERS):
        meta = runtime_record(root)
        if meta.get("base") is not None:
            return meta["base"]
        companion = meta.get("companion")
        if not isinstance(companion, str):
            return None
        root = root.parent / companion
    return None


def _host_libraries() -> dict[str, object]:
    """What of this host a load links against: its C library, its NVIDIA driver (none on a CPU host) and the
    dynamic loader's variables."""
    try:
        driver = _NVIDIA_DRIVER.read_text().splitlines()[0]
    except (OSError, IndexError):
        driver = None
    return {
        "libc": list(platform.libc_ver()),
        "driver": driver,
        "loader": {name: os.environ.get(name) for name in _LOADER_VARIABLES},
    }
