"""Changes planted in an installed engine: a copy of a runtime with one source file edited, the way the suite's and
the GPU nights' slower, biased or broken builds are made from a good one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path


def plant(source: Path, target: Path, module: str, anchor: str, addition: str, *, key: str | None = None) -> Path:
    """A copy of the runtime at `source` with `addition` after `anchor` in the installed `module`; `key` renames its
    content key. Hard links make the copy instant; the one file changed gets a new inode, so the original stays
    untouched."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)
    edit(target, module, anchor, addition)
    if key is not None:
        meta_path = target / "runtime.json"
        meta = json.loads(meta_path.read_text())
        meta["key"] = key
        meta_path.unlink()  # a hard link too: write a new file, never through the shared one
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return target


def edit(runtime: Path, module: str, anchor: str, addition: str) -> None:
    """Put `addition` after `anchor` in the installed `module` of a planted copy, as a new file (never through a hard
    link the good runtime shares), its cached bytecode dropped."""
    changed = next(runtime.glob(f"lib/python3*/site-packages/{module}"), None)
    assert changed is not None, f"{runtime} has no {module}: the planted change needs another module"
    text = changed.read_text()
    assert anchor in text, f"{changed} changed: the planted change needs a new anchor"
    fresh = changed.with_suffix(".new")
    fresh.write_text(text.replace(anchor, anchor + addition, 1))
    os.replace(fresh, changed)
    for cached in changed.parent.glob(f"__pycache__/{changed.stem}.*.pyc"):
        cached.unlink()


# vLLM 0.32's engine core: each step schedules here
STEP_ANCHOR = "        scheduler_output = self.scheduler.schedule(self._should_throttle_prefills())\n"


def plant_slowdown(source: Path, target: Path, delay_s: float, *, key: str | None = None) -> Path:
    """A copy of the runtime at `source` whose engine sleeps `delay_s` in every step; `key` renames its content key."""
    addition = f"        time.sleep({delay_s})  # planted slowdown\n"
    return plant(source, target, "vllm/v1/engine/core.py", STEP_ANCHOR, addition, key=key)


# vLLM's structured output, 0.26 to 0.32: the engine applies the grammar's mask to the logits here
GRAMMAR_MODULE = "vllm/v1/structured_output/utils.py"
GRAMMAR_ANCHOR = "    grammar_bitmask = grammar_output.grammar_bitmask\n"
# ... and in the second model runner's worker (0.26 and 0.32 checked), through which a GPU serves
GPU_GRAMMAR_MODULE = "vllm/v1/worker/gpu/structured_outputs.py"
GPU_GRAMMAR_ANCHOR = "        if not grammar_req_ids:\n            return\n"


def plant_grammar_ignored(source: Path, target: Path, *, key: str | None = None) -> Path:
    """A copy of the runtime whose engine never applies the grammar's mask: guided decoding asks, nothing obeys."""
    ignored = "return  # planted: the grammar is ignored\n"
    plant(source, target, GRAMMAR_MODULE, GRAMMAR_ANCHOR, " " * 4 + ignored, key=key)
    # A GPU serves through the second model runner, which masks in a worker of its own (an H100 night with the first
    # change alone PASSed every structured check)
    edit(target, GPU_GRAMMAR_MODULE, GPU_GRAMMAR_ANCHOR, " " * 8 + ignored)
    return target
