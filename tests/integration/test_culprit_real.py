"""Culprit search on real git: tonight's pinned commits re-resolved with PR subsets, each tried in a real process.

The trial here builds nothing heavy: it exports the resolved tree with `git archive` and runs the
package's own check in a fresh Python process; on a Spark the same subsets go through build,
inspect and the failing entries (pipeline/stages/aftermath/culprit_run.py).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipeline.infra.git import mirror_dir
from pipeline.stages.aftermath.culprit import PullRef, TrialResult, find_culprits
from pipeline.stages.aftermath.suspects import describe_main_suspects, grafted_prs, record_last_good, subset_sources
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.build.resolve import Source, resolve_sources
from pipeline.status import Status
from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration

CREATED = "2026-11-22T02:00:00Z"
GOOD = "def answer():\n    return 42\n"


@pytest.fixture()
def upstream(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path)
    repo.commit({"calc/__init__.py": GOOD, "README.md": "# calc\n"}, "calc")
    repo.publish_main()
    return repo


def _pr(upstream: Upstream, number: int, files: dict[str, str | None]) -> str:
    upstream.checkout(f"pr{number}", "main")
    upstream.commit(files, f"PR {number}")
    head = upstream.publish_pull(number, f"pr{number}")
    upstream.checkout("main")
    return head


def _resolve(upstream: Upstream, cache: Path, work: Path, prs: tuple[str, ...], ref: str = "main") -> BuildPlan:
    work.mkdir(parents=True, exist_ok=True)
    source = Source("vllm", upstream.url, ref, prs, "sources.vllm.prs")
    return resolve_sources([source], cache_dir=cache, work_dir=work, created=CREATED)


class ArchiveTrials:
    """Resolve each subset of tonight's plan again, export its tree and run the package's check in a process."""

    def __init__(self, upstream: Upstream, plan: BuildPlan, root: Path) -> None:
        self.upstream, self.plan, self.root = upstream, plan, root
        self.plans: dict[tuple[PullRef, ...], BuildPlan] = {}

    def __call__(self, subset: tuple[PullRef, ...]) -> TrialResult:
        work = self.root / f"try{len(self.plans) + 1}"
        template = [Source("vllm", self.upstream.url, "main", (), "sources.vllm.prs")]
        plan = resolve_sources(
            subset_sources(self.plan, subset, template), cache_dir=self.root / "cache", work_dir=work, created=CREATED
        )
        self.plans[subset] = plan
        archive = subprocess.run(
            [
                "git",
                "-C",
                str(mirror_dir(self.root / "cache", self.upstream.url)),
                "archive",
                "--format=tar",
                plan.source("vllm").commit,
            ],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(work / "tree", filter="data")
        check = subprocess.run(
            [sys.executable, "-c", "import calc, sys; sys.exit(0 if calc.answer() == 42 else 1)"],
            cwd=work / "tree",
            capture_output=True,
            text=True,
            check=False,
        )
        return TrialResult(Status.PASS if check.returncode == 0 else Status.FAIL, f"exit {check.returncode}")


def test_the_breaking_pr_is_found_on_tonights_pinned_commits_even_after_upstream_moved(
    upstream: Upstream, tmp_path: Path
) -> None:
    _pr(upstream, 11, {"calc/extra.py": "EXTRA = 1\n"})
    bad_head = _pr(upstream, 12, {"calc/__init__.py": GOOD.replace("42", "41")})
    _pr(upstream, 13, {"docs/usage.md": "Call answer().\n"})
    _pr(upstream, 14, {"calc/more.py": "MORE = 2\n"})
    night = _resolve(upstream, tmp_path / "cache", tmp_path / "night", ("11", "12", "13", "14"))
    tonight = night.source("vllm")
    assert tonight.grafted == (11, 12, 13, 14)
    # upstream moves after tonight's resolve: the trials must still test tonight's commits
    upstream.commit({"calc/late.py": "LATE = 3\n"}, "late on main")
    upstream.publish_main()
    upstream.checkout("pr12")
    upstream.commit({"calc/__init__.py": GOOD}, "PR 12: fixed after the night")
    upstream.publish_pull(12, "pr12")
    upstream.checkout("main")

    trials = ArchiveTrials(upstream, night, tmp_path)
    said: list[str] = []
    search = find_culprits(grafted_prs(night), trials, max_builds=6, say=said.append)

    assert search.conclusion == "culprits", search.why
    assert search.culprits == [(PullRef("vllm", 12), "main + vllm#11 passes; adding vllm#12 fails")]
    assert search.passing == (PullRef("vllm", 11), PullRef("vllm", 13), PullRef("vllm", 14))
    assert [t.result.status for t in search.trials] == [
        Status.PASS,
        Status.FAIL,
        Status.PASS,
        Status.PASS,
    ]  # main, +11+12, +11, +11+13+14
    for plan in trials.plans.values():
        source = plan.source("vllm")
        assert source.main_commit == tonight.main_commit  # not the late commit
        assert {pr.number: pr.head for pr in source.pull_requests}.items() <= {
            pr.number: pr.head for pr in tonight.pull_requests
        }.items()
    recommended = trials.plans[search.passing].source("vllm")
    assert recommended.grafted == (11, 13, 14) and bad_head not in {pr.head for pr in recommended.pull_requests}
    assert said[0] == "culprit trial 1/6: main" and "culprit trial 2: FAIL: exit 1" in said


def test_when_main_alone_fails_the_commits_since_the_last_good_night_are_the_suspects(
    upstream: Upstream, tmp_path: Path
) -> None:
    _pr(upstream, 21, {"calc/extra.py": "EXTRA = 1\n"})
    good = _resolve(upstream, tmp_path / "cache", tmp_path / "good", ("21",))
    record_last_good(tmp_path / "history" / "last_good.json", good, "2026-11-20")
    before = good.source("vllm").main_commit
    upstream.commit({"calc/util.py": "U = 1\n"}, "add util")
    upstream.commit({"calc/__init__.py": GOOD.replace("42", "40")}, "refactor answer")
    after = upstream.commit({"README.md": "# calc v2\n"}, "readme")
    upstream.publish_main()
    night = _resolve(upstream, tmp_path / "cache", tmp_path / "night", ("21",))

    search = find_culprits(grafted_prs(night), ArchiveTrials(upstream, night, tmp_path), max_builds=6)
    suspects = describe_main_suspects(tmp_path / "history" / "last_good.json", night, tmp_path / "cache")

    assert search.conclusion == "main-fails" and len(search.trials) == 1
    assert suspects.startswith(f"since the last good night 2026-11-20: vllm main {before[:12]}..{after[:12]} (3 commit")
    assert "refactor answer" in suspects and "add util" in suspects
