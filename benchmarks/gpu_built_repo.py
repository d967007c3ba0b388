"""The vLLM and FlashInfer repositories the GPU's built nights resolve (the `gpu-built` profile), made where PyPI is
reachable and carried to a GPU host that has no network, as one tarball of two bare repositories laid out as GitHub
serves them. vLLM's (o/upstream.git):

    main                 vLLM 0.26.0's sdist, then the Python its x86-64 wheel carries (the tree the profile pins)
    refs/pull/301/head   a docs change          (harmless)
    refs/pull/302/head   logits shifted by one token before sampling (garbage from every prompt: the guilty PR)
    refs/pull/303/head   a docstring's wording  (harmless)
    day                  16 commits after main: harmless Python across the tree, a C++ change and its revert, and
                         a 2 ms sleep in each engine step as the 11th (`git update-ref refs/heads/main day` makes it
                         tonight's main)
    day-moderate         10 commits after main, numbered from #33001: harmless Python, a C++ change (4th) and its
                         revert, and a 0.6 ms sleep in each engine step as the 7th (about 0.75x decode on an H200)

FlashInfer's (f/upstream.git): main is flashinfer-python 0.6.14's sdist, the release vLLM 0.26.0 pins
(tests/flashinfer_repo.py), built from its tree every night.

    python -m benchmarks.gpu_built_repo DEST.tar.gz     prints the settings lines and the pinned tree
"""

from __future__ import annotations

import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.engine_steps import steps_reaching_change
from tests.flashinfer_repo import make_flashinfer_repo
from tests.vllm_repo import (
    GPU_PLANTED,
    VLLM_026_SDIST,
    VLLM_026_X86,
    VllmRepo,
    make_day_of_main,
    make_vllm_repo,
    plant_pulls,
)

PULLS = {"docs": 301, "garbage": 302, "tidy": 303}
DAY = 16
DAY_GUILTY = 11  # the 2 ms sleep
DAY_NATIVE = 6  # a C++ change, reverted by the next commit
MODERATE_DAY, MODERATE_GUILTY, MODERATE_NATIVE = 10, 7, 4  # the day-moderate branch: its 7th sleeps 0.6 ms a step
REMOTE = "o/upstream.git"  # where the tarball's bare repositories unpack: vLLM's
FLASHINFER_REMOTE = "f/upstream.git"  # and FlashInfer's


def main() -> None:
    dest = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory(prefix="gpu-built-repo-") as scratch:
        repo = make_vllm_repo(Path(scratch), VLLM_026_SDIST, VLLM_026_X86)
        plant_pulls(repo, PULLS, GPU_PLANTED)
        day = make_day_of_main(
            repo, DAY, guilty=DAY_GUILTY, guilty_change="slower", native=DAY_NATIVE, planted=GPU_PLANTED
        )
        _check_reached_by_every_step(repo, day[DAY_GUILTY - 1])
        remote = repo.upstream.remote
        repo.upstream.git("push", "--quiet", "--force", "origin", f"{day[-1]}:refs/heads/day")
        repo.upstream.checkout("main", repo.base)  # the second day starts from main too
        moderate = make_day_of_main(
            repo, MODERATE_DAY, guilty=MODERATE_GUILTY, guilty_change="moderate", native=MODERATE_NATIVE,
            planted=GPU_PLANTED, numbered_from=33000,
        )  # fmt: skip
        _check_reached_by_every_step(repo, moderate[MODERATE_GUILTY - 1])
        repo.upstream.git("push", "--quiet", "--force", "origin", f"{moderate[-1]}:refs/heads/day-moderate")
        repo.upstream.git("push", "--quiet", "--force", "origin", f"{repo.base}:refs/heads/main")
        tree = repo.upstream.git("rev-parse", f"{repo.base}^{{tree}}")
        flashinfer = make_flashinfer_repo(Path(scratch) / "flashinfer")
        flashinfer_main = flashinfer.git("rev-parse", "HEAD")
        with tarfile.open(dest, "w:gz") as archive:
            archive.add(remote, arcname=REMOTE)
            archive.add(flashinfer.remote, arcname=FLASHINFER_REMOTE)
        shutil.rmtree(Path(scratch) / "sdist", ignore_errors=True)
    print(f"main {repo.base} (tree {tree}); day {day[0][:12]}..{day[-1][:12]}, the slower commit {day[DAY_GUILTY - 1]}")
    print(f"day-moderate {moderate[0][:12]}..{moderate[-1][:12]}, the slower commit {moderate[MODERATE_GUILTY - 1]}")
    print(f"FlashInfer's main {flashinfer_main}")
    print(
        f"unpack into DIR, then: --set sources.vllm.repo=file://DIR/{REMOTE} --set sources.vllm.ref=main "
        f"--set sources.flashinfer.repo=file://DIR/{FLASHINFER_REMOTE} --set sources.flashinfer.ref=main"
    )


def _check_reached_by_every_step(repo: VllmRepo, guilty: str) -> None:
    """A slower commit that some engine step never runs makes a night over it measure nothing: refuse to carry it."""
    path = GPU_PLANTED["slower"][0]
    before, after = (repo.upstream.git("show", f"{commit}:{path}") for commit in (f"{guilty}^", guilty))
    reached = steps_reaching_change(before, after)
    if not all(reached.values()):
        missed = ", ".join(step for step, runs in reached.items() if not runs)
        raise SystemExit(f"the day's slower commit {guilty[:12]} changes {path} where {missed} never reaches")


if __name__ == "__main__":
    main()
