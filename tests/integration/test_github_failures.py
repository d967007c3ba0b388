"""GitHub's real failure modes, injected by the stand-in: every run ends with the night fully published or not at all,
and the next run completes it; the token never shows in anything a person or a log could read."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import SparkNightlyError
from pipeline.infra.files import sha256_of
from pipeline.infra.github import GitHubReleaseStore
from pipeline.infra.releases import Release
from pipeline.stages.release.fetch import fetch_night
from pipeline.stages.release.publish import Night, apply_retention, publish_night
from tests.fakes.github import TOKEN, StandIn
from tests.published import schema_valid_manifest

pytestmark = pytest.mark.integration


class Recorder:
    """Everything the store says and every wait it asks for."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.waits: list[float] = []


def _store(server: StandIn, recorder: Recorder) -> GitHubReleaseStore:
    return GitHubReleaseStore(
        server.repo, TOKEN, api_url=server.url, say=recorder.said.append, sleep=recorder.waits.append
    )


def _night(tmp_path: Path, day: str = "2026-11-21", run_id: str = "run-1") -> tuple[Night, list[Path]]:
    wheel = tmp_path / "flashinfer_python-0.7.2+g0123456.d20261121-py3-none-any.whl"
    wheel.write_bytes(b"tested wheel bytes " * 5000)
    lock = tmp_path / "lock.txt"
    lock.write_text(f"flashinfer-python==0.7.2 --hash=sha256:{sha256_of(wheel)}\n")
    manifest = schema_valid_manifest(day, run_id, [wheel], lock)
    return Night(day, run_id, True, manifest), [wheel, lock]


def _published(server: StandIn) -> list[dict[str, object]]:
    return [r for r in server.state.releases.values() if not r["draft"]]


def _complete(server: StandIn, release: Release) -> bool:
    assets = [a for a in server.state.assets.values() if a["release_id"] == release.id]
    return sorted(a["name"] for a in assets) == sorted(
        ["flashinfer_python-0.7.2+g0123456.d20261121-py3-none-any.whl", "lock.txt", "manifest.json", "index.json"]
    ) and all(a["state"] == "uploaded" for a in assets)


@pytest.mark.parametrize(
    ("fault", "count", "expected_waits"),
    [
        ("secondary_rate_limit", 2, [1.0, 1.0]),  # retry-after: 1, honoured
        ("server_errors", 3, [1.0, 2.0, 4.0]),  # 502: exponential back-off
        ("upload_502_starter", 1, [1.0]),  # the 'starter' asset is deleted, the upload redone
        ("drop_upload", 1, [1.0]),  # connection closed mid-upload
        ("lose_upload_answer", 1, [1.0]),  # stored, answer lost: kept by its digest instead of a 422 duplicate
    ],
)
def test_a_transient_failure_is_retried_and_the_night_is_published_whole(
    stand_in: StandIn, tmp_path: Path, fault: str, count: int, expected_waits: list[float]
) -> None:
    recorder = Recorder()
    store = _store(stand_in, recorder)
    setattr(stand_in.state.faults, fault, count)
    night, files = _night(tmp_path)
    release = publish_night(store, night, files)
    assert recorder.waits == expected_waits, recorder.said
    assert _complete(stand_in, release)
    assert [r["tag_name"] for r in _published(stand_in)] == ["nightly-20261121"]
    assert stand_in.state.releases[release.id]["make_latest"] == "false"


def test_a_primary_rate_limit_waits_for_its_reset(stand_in: StandIn, tmp_path: Path) -> None:
    recorder = Recorder()
    store = _store(stand_in, recorder)
    stand_in.state.faults.primary_rate_limit = 1
    night, files = _night(tmp_path)
    publish_night(store, night, files)
    assert len(recorder.waits) == 1 and 0.5 <= recorder.waits[0] <= 3.0  # x-ratelimit-reset is 1 s ahead, plus 1


def test_a_persistent_outage_publishes_nothing_and_the_next_run_completes_the_night(
    stand_in: StandIn, tmp_path: Path
) -> None:
    recorder = Recorder()
    store = _store(stand_in, recorder)
    night, files = _night(tmp_path)
    stand_in.state.faults.server_errors = 1000
    with pytest.raises(SparkNightlyError, match=r"GitHub: cannot .* HTTP 502 Server Error"):
        publish_night(store, night, files)
    assert _published(stand_in) == []  # nothing public: at most a draft
    stand_in.state.faults.server_errors = 0
    release = publish_night(_store(stand_in, recorder), night, files)
    assert _complete(stand_in, release)
    assert len(stand_in.state.releases) == 1  # the draft was resumed, not duplicated


def test_immutable_releases_never_reuse_a_tag_and_retention_deletes_release_and_tag(
    stand_in: StandIn, tmp_path: Path
) -> None:
    stand_in.state.faults.immutable = True
    recorder = Recorder()
    store = _store(stand_in, recorder)
    first, files = _night(tmp_path, run_id="run-1")
    published = publish_night(store, first, files)
    store.delete_release(published)  # gone, but its tag stays spent
    assert "DELETE /repos/spark-nightly/wheels/git/refs/tags/nightly-20261121" in stand_in.state.requests
    again = publish_night(store, Night(first.night, "run-2", True, first.manifest), files)
    assert again.tag == "nightly-20261121.2"
    for day in ("22", "23"):
        night, day_files = _night(tmp_path, day=f"2026-11-{day}", run_id=f"run-{day}")
        publish_night(store, night, day_files)
    assert apply_retention(store, 2, dry_run=False) == ["nightly-20261121.2"]
    assert sorted(r["tag_name"] for r in _published(stand_in)) == ["nightly-20261122", "nightly-20261123"]


def test_the_token_never_appears_in_what_the_store_says_raises_or_writes(
    stand_in: StandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    store = _store(stand_in, recorder)
    night, files = _night(tmp_path)
    stand_in.state.faults.secondary_rate_limit = 1
    stand_in.state.faults.upload_502_starter = 1
    publish_night(store, night, files, say=recorder.said.append)
    fetch_night(store, "latest", tmp_path / "fetched", say=recorder.said.append)
    stand_in.state.faults.server_errors = 1000
    with pytest.raises(SparkNightlyError) as failure:
        publish_night(store, Night("2026-11-22", "run-2", True, night.manifest), files)
    seen = [*recorder.said, str(failure.value), *failure.value.lines(), capsys.readouterr().out, caplog.text]
    seen += [p.read_text(errors="replace") for p in (tmp_path / "fetched").rglob("*") if p.is_file()]
    assert seen  # not empty: an assert over nothing passes
    assert recorder.said and all(TOKEN not in text for text in seen)


def test_the_commands_read_github_through_the_settings_and_never_print_the_token(
    stand_in: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    night, files = _night(tmp_path)
    publish_night(_store(stand_in, Recorder()), night, files)
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_TARGET", "github")
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_REPO", stand_in.repo)
    monkeypatch.setenv("SPARK_NIGHTLY_GITHUB_API_URL", stand_in.url)
    monkeypatch.setenv("SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API", "1")  # plain http, a token variable of our own
    monkeypatch.setenv("NIGHTLY_TOKEN", TOKEN)
    monkeypatch.setenv("SPARK_NIGHTLY_GITHUB_TOKEN_ENV", "NIGHTLY_TOKEN")
    assert main(["list"]) == 0
    assert main(["fetch", "--dest", str(tmp_path / "fetched")]) == 0
    assert main(["show"]) == 0
    out = capsys.readouterr()
    assert "nightly-20261121" in out.out and "all verified" in out.out
    assert TOKEN not in out.out + out.err
    monkeypatch.setenv("NIGHTLY_TOKEN", "")
    assert main(["list"]) == 1
    assert "$NIGHTLY_TOKEN is not set" in capsys.readouterr().err
