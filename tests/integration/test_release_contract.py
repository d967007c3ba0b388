"""Publishing, resuming, fetching and retention against every release store, through the same contract."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import TamperedAsset
from pipeline.infra.files import sha256_of
from pipeline.infra.github import GitHubReleaseStore
from pipeline.infra.releases import LocalReleaseStore, ReleaseStore
from pipeline.stages.release.fetch import fetch_night
from pipeline.stages.release.publish import (
    INDEX,
    MANIFEST,
    Night,
    PublishRefused,
    apply_retention,
    nightly_releases,
    publish_night,
    read_index,
)
from tests.fakes.github import TOKEN, StandIn
from tests.published import night_files

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "github"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReleaseStore]:
    if request.param == "local":
        yield LocalReleaseStore(tmp_path / "releases")
        return
    server = request.getfixturevalue("stand_in")
    yield GitHubReleaseStore(server.repo, TOKEN, api_url=server.url, sleep=lambda seconds: None)


def _files(tmp_path: Path, night: str, run_id: str = "run-1") -> tuple[list[Path], Mapping[str, Any]]:
    built, files = night_files(
        tmp_path / f"wheels-{night}",
        night,
        ["vllm-0.27.2.dev1+g0123456.d20261121-cp38-abi3-linux_aarch64.whl"],
        run_id=run_id,
    )
    return files, built.manifest


def _publish(store: ReleaseStore, tmp_path: Path, night: str, run_id: str, *, keep: bool = False) -> str:
    files, manifest = _files(tmp_path, night, run_id)
    return publish_night(store, Night(night, run_id, True, manifest), files, keep=keep).tag


def test_a_passing_night_becomes_a_published_prerelease_with_its_evidence(store: ReleaseStore, tmp_path: Path) -> None:
    tag = _publish(store, tmp_path, "2026-11-21", "run-1")
    (release,) = store.releases()
    assert (release.tag, release.draft, release.prerelease) == ("nightly-20261121", False, True)
    names = sorted(a.name for a in release.assets)
    assert names == sorted(
        [INDEX, MANIFEST, "lock.txt", "vllm-0.27.2.dev1+g0123456.d20261121-cp38-abi3-linux_aarch64.whl"]
    )
    assert release.assets  # not empty: an assert over nothing passes
    assert all(a.state == "uploaded" and a.digest and a.digest.startswith("sha256:") for a in release.assets)
    index = read_index(store)
    assert index["latest"] == tag
    assert index["nights"][0]["commits"] == {"vllm": "c" * 40}


def test_a_night_that_did_not_pass_publishes_nothing(store: ReleaseStore, tmp_path: Path) -> None:
    files, manifest = _files(tmp_path, "2026-11-21")
    with pytest.raises(PublishRefused, match="did not pass: nothing is published"):
        publish_night(store, Night("2026-11-21", "run-1", False, manifest), files)
    assert store.releases() == []


def test_a_file_over_two_gib_is_refused_by_name_before_any_upload(store: ReleaseStore, tmp_path: Path) -> None:
    files, manifest = _files(tmp_path, "2026-11-21")
    huge = tmp_path / "flashinfer_jit_cache-0.7-cp39-abi3-linux_aarch64.whl"
    with huge.open("wb") as handle:
        handle.truncate(2 * 1024**3)  # sparse: no disk used
    with pytest.raises(
        PublishRefused, match=r"flashinfer_jit_cache-0\.7-cp39-abi3-linux_aarch64\.whl is 2147483648 bytes"
    ):
        publish_night(store, Night("2026-11-21", "run-1", True, manifest), [*files, huge])
    assert store.releases() == []


def test_a_crashed_publish_resumes_without_duplicates(store: ReleaseStore, tmp_path: Path) -> None:
    files, manifest = _files(tmp_path, "2026-11-21")
    night = Night("2026-11-21", "run-1", True, manifest)
    draft = store.create_draft("nightly-20261121", "spark-nightly 2026-11-21", "<!-- spark-nightly run run-1 -->")
    store.upload(draft, files[0], files[0].name)  # the crash came after the first asset
    said: list[str] = []
    release = publish_night(store, night, files, say=said.append)
    assert [r.tag for r in store.releases()] == ["nightly-20261121"]
    assert f"  {files[0].name}: already uploaded" in said
    assert not release.draft
    again = publish_night(store, night, files, say=said.append)  # a second rerun changes nothing
    assert again.tag == release.tag and len(store.releases()) == 1
    assert said[-1] == "publish: run run-1 is already published as nightly-20261121"


def test_a_rerun_of_the_same_night_gets_a_new_tag_and_becomes_latest(store: ReleaseStore, tmp_path: Path) -> None:
    first = _publish(store, tmp_path, "2026-11-21", "run-1")
    second = _publish(store, tmp_path, "2026-11-21", "run-2")
    assert (first, second) == ("nightly-20261121", "nightly-20261121.2")
    index = read_index(store)
    assert index["latest"] == second and [n["tag"] for n in index["nights"]] == [first, second]


def test_fetch_verifies_every_file_and_refuses_a_tampered_one(
    store: ReleaseStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _publish(store, tmp_path, "2026-11-20", "run-0")
    tag = _publish(store, tmp_path, "2026-11-21", "run-1")
    fetched = fetch_night(store, "latest", tmp_path / "fetched")
    assert fetched.tag == tag
    manifest = json.loads((fetched.folder / MANIFEST).read_text())
    assert sha256_of(fetched.wheels[0]) == manifest["wheels"][0]["sha256"]
    assert fetch_night(store, "2026-11-20", tmp_path / "old").tag == "nightly-20261120"  # roll back to any night

    _tamper(store, tag, fetched.wheels[0].name, request)
    with pytest.raises(TamperedAsset, match=r"vllm-0\.27.*has sha256 .* the manifest says .* the file was removed"):
        fetch_night(store, "latest", tmp_path / "fetched-again")
    assert not (tmp_path / "fetched-again" / tag / fetched.wheels[0].name).exists()


def _tamper(store: ReleaseStore, tag: str, name: str, request: pytest.FixtureRequest) -> None:
    if isinstance(store, LocalReleaseStore):
        (store.root / tag / "assets" / name).write_bytes(b"not the tested wheel")
        return
    server: StandIn = request.getfixturevalue("stand_in")
    (release_id,) = [r["id"] for r in server.state.releases.values() if r["tag_name"] == tag]
    (asset,) = [a for a in server.state.assets.values() if a["name"] == name and a["release_id"] == release_id]
    asset["data"] = b"not the tested wheel"


def test_retention_keeps_the_last_nights_and_the_marked_ones(store: ReleaseStore, tmp_path: Path) -> None:
    _publish(store, tmp_path, "2026-11-17", "r17", keep=True)
    for day in ("18", "19", "20", "21"):
        _publish(store, tmp_path, f"2026-11-{day}", f"r{day}")
    assert apply_retention(store, 2, dry_run=True) == ["nightly-20261118", "nightly-20261119"]
    assert len(nightly_releases(store.releases())) == 5  # a dry run deletes nothing
    apply_retention(store, 2, dry_run=False)
    assert [r.tag for r in nightly_releases(store.releases())] == [
        "nightly-20261117",
        "nightly-20261120",
        "nightly-20261121",
    ]
    assert [n["tag"] for n in read_index(store)["nights"]] == [
        "nightly-20261117",
        "nightly-20261120",
        "nightly-20261121",
    ]


def test_a_runners_enterprise_api_url_reaches_the_same_server(stand_in: StandIn, tmp_path: Path) -> None:
    """On an Enterprise runner $GITHUB_API_URL ends in /api/v3, which github3 adds itself: it is not added twice."""
    store = GitHubReleaseStore(stand_in.repo, TOKEN, api_url=stand_in.url + "/api/v3", sleep=lambda seconds: None)
    tag = _publish(store, tmp_path, "2026-11-21", "run-1")
    assert [r.tag for r in store.releases()] == [tag]
