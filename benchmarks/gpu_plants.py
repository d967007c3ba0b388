"""The GPU nights' planted builds: copies of the good runtime of the `gpu` profile with one change in the installed
engine, each put where another configuration's candidate resolves (one that removes a name nobody installs, so the
night sees a build of its own).

    python benchmarks/gpu_plants.py slower CONFIG_DIR [DELAY_S]   a sleep in every engine step
    python benchmarks/gpu_plants.py nan CONFIG_DIR                 every logit NaN
    python benchmarks/gpu_plants.py grammar CONFIG_DIR             the grammar's mask never applied

The good runtime is the one the settings' configuration resolves (paths.config, paths.cache, the base and the
wheelhouse as a night reads them); it must exist (a good night made it)."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.plants import plant, plant_grammar_ignored
from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra.runtime import load_runtime
from pipeline.infra.supply import runtime_folder
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import candidate_set
from pipeline.stages.prove.supplies import night_supply

PROFILE = "gpu"
# vLLM 0.26.0: the engine core's step, both the plain and the batch-queue one (at their own indentation)
STEP = "scheduler_output = self.scheduler.schedule(self._should_throttle_prefills())\n"
LOGITS = "vllm/model_executor/layers/logits_processor.py"
LOGITS_ANCHOR = "        if logits is not None:\n"
NAN = '            logits = logits * float("nan")  # planted: every logit NaN\n'


def _paths(root: Path) -> ConfigPaths:
    return ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden")


def main() -> None:
    kind, config_dir = sys.argv[1], Path(sys.argv[2])
    settings = from_environment().settings
    good_profile = load_config(_paths(settings.places.config)).matrix.profiles[PROFILE]
    supply = night_supply(settings, good_profile)
    source = runtime_folder(candidate_set(good_profile), supply, settings.places.cache)
    if load_runtime(source) is None:
        raise SystemExit(f"{source}: no good runtime yet (run a good night first)")
    planted_set = candidate_set(load_config(_paths(config_dir)).matrix.profiles[PROFILE])
    target = runtime_folder(planted_set, supply, settings.places.cache)
    key = planted_set.key(supply.base)
    if kind == "slower":
        delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.002
        core = "vllm/v1/engine/core.py"
        plant(source, target, core, "        " + STEP, f"        time.sleep({delay})  # planted slowdown\n", key=key)
        _also(target, core, "            " + STEP, f"            time.sleep({delay})  # planted slowdown\n")
    elif kind == "nan":
        plant(source, target, LOGITS, LOGITS_ANCHOR, NAN, key=key)
    elif kind == "grammar":
        plant_grammar_ignored(source, target, key=key)
    else:
        raise SystemExit(f"unknown plant {kind!r}: slower, nan or grammar")
    print(f"planted {kind} in {target}")


def _also(target: Path, module: str, anchor: str, addition: str) -> None:
    """The same change at a second place of the already planted (own-inode) file."""
    changed = next(target.glob(f"lib/python3*/site-packages/{module}"))
    text = changed.read_text()
    if anchor in text:
        changed.write_text(text.replace(anchor, anchor + addition, 1))


if __name__ == "__main__":
    main()
