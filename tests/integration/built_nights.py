"""What the built nights' modules share: a night of the `cpu-built` profile as a user runs it, its records, and the
good night a module's days start from (tests/integration/test_cpu_built_*.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from tests.integration.conftest import Place, bench_one_case, golden_for_another_stage, live_in, make_place
from tests.vllm_repo import VllmRepo, make_vllm_repo


def night(place: Place, repo: VllmRepo, *, prs: str = "") -> int:
    """`spark-nightly nightly --profile cpu-built` on `repo`'s main (and `prs`), in the place the settings name."""
    argv = ["nightly", "--profile", "cpu-built", "--set", f"sources.vllm.repo={repo.url}"]
    return main([*argv, "--set", f"sources.vllm.prs={prs}"] if prs else argv)


def last_run(place: Place) -> Path:
    return sorted(p for p in place.runs.iterdir() if p.is_dir())[-1]


def builds(run: Path) -> list[dict[str, Any]]:
    made: list[dict[str, Any]] = json.loads((run / "build.json").read_text())["builds"]
    return made


def bisection(place: Place) -> tuple[Path, dict[str, Any]]:
    """The last run and its bisection's record."""
    run = last_run(place)
    return run, json.loads((run / "culprit" / "bisect.json").read_text())


@dataclass(frozen=True)
class GoodNight:
    """vLLM's repository and a place after one good night on its main, under `root`: the last good night a day starts
    from, its build the cells' A. Each test that uses it gets both back as they were after that night (a day of main
    adds commits to the repository, its nights add runs, history and releases to the place)."""

    root: Path
    place: Place
    repo: VllmRepo

    def save(self) -> None:
        for name in _KEPT:
            shutil.copytree(self.root / name, self.root / "saved" / name, symlinks=True)

    def restore(self) -> None:
        for name in _KEPT:
            shutil.rmtree(self.root / name)
            shutil.copytree(self.root / "saved" / name, self.root / name, symlinks=True)


_KEPT = ("place", "vllm-repo")  # GoodNight's two folders under its root


def start_from(good: GoodNight, monkeypatch: pytest.MonkeyPatch) -> GoodNight:
    """The place and repository as the good night left them, the settings pointed at that place."""
    good.restore()
    live_in(good.place, monkeypatch)
    return good


def make_good_night(root: Path, *, configure: Callable[[Place], None] = lambda _: None) -> GoodNight:
    """One good night on vLLM's main at the release, its place first configured by `configure`; saved, so each test
    can start from it. Restored at the same paths, so whatever a record holds of them still holds."""
    made = GoodNight(root, make_place(root / "place"), make_vllm_repo(root / "vllm-repo"))
    bench_one_case(made.place)
    golden_for_another_stage(made.place)
    configure(made.place)
    with pytest.MonkeyPatch.context() as monkeypatch:
        live_in(made.place, monkeypatch)
        assert night(made.place, made.repo) == 0
    made.save()
    return made
