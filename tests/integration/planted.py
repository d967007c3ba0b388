"""A candidate runtime with a real code change planted in the installed engine: a sleep in every engine step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

STEP_ANCHOR = "        scheduler_output = self.scheduler.schedule(self._should_throttle_prefills())\n"


def plant_slowdown(source: Path, target: Path, delay_s: float, *, key: str | None = None) -> Path:
    """A copy of the runtime at `source` whose engine sleeps `delay_s` in every step; `key` renames its content key.

    Hard links make the copy instant; the one file changed gets a new inode, so the original stays untouched.
    """
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)
    core = next(target.glob("lib/python3*/site-packages/vllm/v1/engine/core.py"))
    text = core.read_text()
    assert STEP_ANCHOR in text, f"{core} changed: the planted slowdown needs a new anchor"
    patched = text.replace(STEP_ANCHOR, STEP_ANCHOR + f"        time.sleep({delay_s})  # planted slowdown\n", 1)
    fresh = core.with_suffix(".new")
    fresh.write_text(patched)
    os.replace(fresh, core)
    for cached in core.parent.glob("__pycache__/core.*.pyc"):
        cached.unlink()
    if key is not None:
        meta_path = target / "runtime.json"
        meta = json.loads(meta_path.read_text())
        meta["key"] = key
        meta_path.unlink()  # a hard link too: write a new file, never through the shared one
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return target
