"""The culprit stage of a failing Spark night, on real git: tonight's plan re-resolved per subset, each trial's
build fed the resolved tree, the failing entries judged, suspects written and main plus the passing PRs chosen.

Building vLLM and booting on a Spark cannot run here, so the trial's build, runtime image and entry run
are replaced by small functions that read the resolved source; everything around them is the real stage.
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra.supply import ONLINE
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.settings import Settings
from pipeline.stages.aftermath import trial_bench
from pipeline.stages.aftermath.culprit_run import NightRef, find_culprit
from pipeline.stages.build.inspect import ArtifactReport
from pipeline.stages.build.night_build import BuiltNight
from pipeline.stages.build.resolve import Source, resolve_sources
from pipeline.stages.prove.boot import Candidate
from pipeline.stages.prove.candidate import NightCandidate
from pipeline.status import Status
from tests.gitrepos import Upstream
from tests.integration.conftest import ROOT
from tests.wheelfactory import make_wheel

pytestmark = pytest.mark.integration

GOOD = "ANSWER = 42\n"


@pytest.fixture()
def night(tmp_path: Path) -> tuple[Upstream, Path]:
    upstream = Upstream(tmp_path)
    upstream.commit({"vllm/answer.py": GOOD}, "base")
    upstream.publish_main()
    for number, files in ((31, {"vllm/a.py": "A = 1\n"}), (32, {"vllm/answer.py": "ANSWER = 0\n"}),
                          (33, {"vllm/b.py": "B = 1\n"})):  # fmt: skip
        upstream.checkout(f"pr{number}", "main")
        upstream.commit(files, f"PR {number}")
        upstream.publish_pull(number, f"pr{number}")
        upstream.checkout("main")
    run_dir = tmp_path / "runs" / "20261122-020000"
    run_dir.mkdir(parents=True)
    source = Source("vllm", upstream.url, "main", ("31", "32", "33"), "sources.vllm.prs")
    plan = resolve_sources([source], cache_dir=tmp_path / "cache", work_dir=run_dir, created="2026-11-22T02:00:00Z")
    plan.save(run_dir / "plan.json")
    return upstream, run_dir


def _fake_spark(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A build that packs the resolved tree's answer into a wheel, and an entry that fails a wrong answer."""
    built: list[str] = []
    images: dict[str, Path] = {}  # image tag -> the wheel it was made of

    def build(sources: Any, profile: Any, toolchain: Any, *, run: RunDir, out_dir: Path, **_: Any) -> BuiltNight:
        (source,) = sources
        tree = source.materialize(run.root / "src")  # the real resolved commit, exported from the mirror
        answer = (tree / "vllm" / "answer.py").read_bytes()
        out_dir.mkdir(parents=True, exist_ok=True)
        wheel = make_wheel(out_dir, "vllm", f"0.1+{source.commit[:9]}", {"answer.py": answer})
        run.lock.write_text(f"./{wheel.name}\n")
        built.append(source.commit)
        return BuiltNight((wheel,), ArtifactReport(Status.PASS, (), ()), run.lock)

    def candidate(profile: Any, shop: Any, *, run: RunDir, wheels_dir: Path, **_: Any) -> NightCandidate:
        (wheel,) = (wheels_dir / run.id).glob("*.whl")
        images[f"trial:{run.id}"] = wheel
        plan = json.loads(run.plan.read_text())
        return NightCandidate(Candidate(profile, image=f"trial:{run.id}"), run.lock, (wheel,), plan)

    def run_entry(entry: Any, ctx: Any) -> Outcome:
        assert ctx.record is False  # a trial never writes the history
        assert ctx.stop_after == "golden"  # the entry failed at golden tonight: a trial needs no perf
        with zipfile.ZipFile(images[ctx.candidate.image]) as archive:
            good = archive.read("vllm/answer.py") == GOOD.encode()
        status = Status.PASS if good else Status.FAIL
        return Outcome(entry.id, status, "golden", "answers" if good else "wrong answer", True, 1.0)

    monkeypatch.setattr(trial_bench, "build_inspect_lock", build)
    monkeypatch.setattr(trial_bench, "prepare_night_candidate", candidate)
    monkeypatch.setattr(trial_bench, "run_entry", run_entry)
    return built


def test_a_failing_spark_night_names_its_culprit_and_offers_main_plus_the_passing_prs(
    night: tuple[Upstream, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, run_dir = night
    built = _fake_spark(monkeypatch)
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = next(e for e in config.matrix.entries if e.profile == "spark")
    settings = dataclasses.replace(
        Settings(),
        profile="spark",
        vllm_repo=upstream.url,
        cache_dir=str(tmp_path / "cache"),
        wheels_dir=str(tmp_path / "wheels"),
        state_dir=str(tmp_path / "history"),
        culprit_publish="without-culprits",
    )
    failed = [Outcome(entry.id, Status.FAIL, "golden", "wrong answer", True, 1.0)]
    said: list[str] = []

    findings = find_culprit(
        settings,
        config,
        config.matrix.profiles["spark"],
        NightRef(run_dir.name, "2026-11-22", RunDir(run_dir)),
        failed,
        supply=ONLINE,
        say=said.append,
    )

    assert findings.search is not None and findings.search.conclusion == "culprits"
    assert findings.suspects.startswith("vllm#32 (main + vllm#31 passes; adding vllm#32 fails)")
    assert len(built) == len(findings.search.trials) == 4  # main, +31, +31+32, +31+33
    assert findings.replacement is not None and findings.replacement_outcomes[0].status == Status.PASS
    replacement_plan = findings.replacement.plan
    assert replacement_plan is not None
    grafted = [pr["number"] for pr in replacement_plan["sources"][0]["pull_requests"] if pr["status"] == "grafted"]
    assert grafted == [31, 33]
    saved = json.loads((run_dir / "culprit" / "search.json").read_text())
    assert saved["culprits"][0]["pr"] == "vllm#32" and saved["passing"] == ["vllm#31", "vllm#33"]
    assert said[0] == "culprit search: 3 grafted PR(s), at most 6 extra build(s)"
    assert not (tmp_path / "history" / "history.sqlite").exists()


def test_without_the_setting_nothing_is_offered_for_publishing_and_no_search_without_prs(
    night: tuple[Upstream, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, run_dir = night
    _fake_spark(monkeypatch)
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = next(e for e in config.matrix.entries if e.profile == "spark")
    settings = dataclasses.replace(
        Settings(), profile="spark", vllm_repo=upstream.url, cache_dir=str(tmp_path / "cache"),
        wheels_dir=str(tmp_path / "wheels"), state_dir=str(tmp_path / "history"),
    )  # fmt: skip
    failed = [Outcome(entry.id, Status.FAIL, "golden", "wrong answer", True, 1.0)]
    ref = NightRef(run_dir.name, "2026-11-22", RunDir(run_dir))
    findings = find_culprit(
        settings, config, config.matrix.profiles["spark"], ref, failed, supply=ONLINE, say=lambda _: None
    )
    assert findings.search is not None and findings.replacement is None

    no_search = dataclasses.replace(settings, culprit_max_builds=0)
    findings = find_culprit(
        no_search, config, config.matrix.profiles["spark"], ref, failed, supply=ONLINE, say=lambda _: None
    )
    assert findings.search is None
    assert findings.suspects == "main's commits since the last good night (no good night recorded yet)"
