"""The changes the GPU's built nights plant in vLLM 0.26.0's real tree (tests/vllm_repo.py, GPU_PLANTED) change what
a GPU runs: read from the sdist on PyPI, each applies where it says, and the day's slower commit sits on the path of
every engine step, including the asynchronous scheduling's `step_with_batch_queue` that vLLM takes on a GPU.

A GPU sitting found the need: its day of main, with a 2 ms sleep planted in `step`, measured the same as the night
before it over 5 boot pairs (B/A 0.94 on tg32), since a GPU engine never calls `step`."""

from __future__ import annotations

import tarfile

import pytest

from tests.engine_steps import step_paths, steps_reaching_change
from tests.vllm_repo import GPU_PLANTED, PLANTED, VLLM_026_SDIST

pytestmark = pytest.mark.integration

CORE = "vllm/v1/engine/core.py"


def _source(path: str) -> str:
    with tarfile.open(VLLM_026_SDIST.fetch()) as archive:
        member = archive.extractfile(f"vllm-{VLLM_026_SDIST.version}/{path}")
        assert member is not None, f"{path} is not in vLLM {VLLM_026_SDIST.version}'s sdist"
        return member.read().decode()


def test_every_gpu_plant_changes_its_file_of_the_real_tree_exactly_once() -> None:
    for name, (path, old, new, _title) in GPU_PLANTED.items():
        if path.endswith(".py") and path.startswith("vllm/"):
            source = _source(path)
            assert source.count(old) == 1, f"{name}: {path} holds the text to change {source.count(old)} times"
            compile(source.replace(old, new, 1), path, "exec")  # the planted tree still imports


@pytest.mark.parametrize("plant", ["slower", "moderate"])
def test_the_days_slower_commit_is_reached_by_every_step_whichever_way_the_engine_schedules(plant: str) -> None:
    core = _source(CORE)
    path, old, new, _title = GPU_PLANTED[plant]
    assert path == CORE
    assert steps_reaching_change(core, core.replace(old, new, 1)) == {"step": True, "step_with_batch_queue": True}


def test_a_sleep_in_step_alone_is_never_reached_where_the_engine_schedules_asynchronously() -> None:
    """What the first plant did: the analysis tells it apart from the plant that works."""
    core = _source(CORE)
    _path, start_of_step, cpu_slower_step, _title = PLANTED["slower"]  # the CPU's plant, where the GPU's first was
    slower_step = core.replace(start_of_step, cpu_slower_step, 1)
    assert steps_reaching_change(core, slower_step) == {"step": True, "step_with_batch_queue": False}
    paths = step_paths(core)
    assert "step" not in paths["step_with_batch_queue"]
    assert "_process_engine_step" in paths["step"] & paths["step_with_batch_queue"]
