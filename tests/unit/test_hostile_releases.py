"""A hostile or broken release store: names that climb out of the destination, links, malformed JSON. Fetch and the
local store refuse each with a clear error (exit 1, never a crash) and write nothing outside the night's folder."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import SparkNightlyError, StoreContentError, TamperedAsset
from pipeline.infra.files import sha256_of
from pipeline.infra.releases import Asset, LocalReleaseStore, Release
from pipeline.stages.release.fetch import fetch_night
from pipeline.stages.release.publish import INDEX, MANIFEST, publish_night
from tests.published import night_files

WHEEL = "vllm-0.27.2-cp38-abi3-linux_aarch64.whl"


def _store(tmp_path: Path, *nights: str) -> LocalReleaseStore:
    store = LocalReleaseStore(tmp_path / "releases")
    for number, night in enumerate(nights):
        built, files = night_files(tmp_path / f"built-{night}", night, [WHEEL], run_id=f"run-{number}")
        publish_night(store, built, files)
    return store


class RenamingStore(LocalReleaseStore):
    """A store that serves one asset under another name (a GitHub asset may be named anything a client sends)."""

    def __init__(self, root: Path, real: str, served: str) -> None:
        super().__init__(root)
        self.real, self.served = real, served

    def releases(self) -> list[Release]:
        renamed = []
        for release in super().releases():
            assets = tuple(replace(a, name=self.served) if a.name == self.real else a for a in release.assets)
            renamed.append(replace(release, assets=assets))
        return renamed

    def download(self, release: Release, asset: Asset, dest: Path) -> None:
        super().download(release, replace(asset, name=self.real if asset.name == self.served else asset.name), dest)


def _rewrite_manifest(store: LocalReleaseStore, tag: str, change: dict[str, object]) -> None:
    """Change the night's manifest and keep its index agreeing, as a store's owner could."""
    assets = store.root / tag / "assets"
    manifest = json.loads((assets / MANIFEST).read_text()) | change
    (assets / MANIFEST).write_text(json.dumps(manifest))
    index = json.loads((assets / INDEX).read_text())
    for night in index["nights"]:
        if night["tag"] == tag:
            night["manifest_sha256"] = sha256_of(assets / MANIFEST)
    (assets / INDEX).write_text(json.dumps(index))


def test_an_asset_name_that_climbs_out_of_the_destination_is_refused(tmp_path: Path) -> None:
    _store(tmp_path, "2026-11-21")
    climbing = "../../climbed.whl"
    assets = tmp_path / "releases" / "nightly-20261121" / "assets"
    wheel = json.loads((assets / MANIFEST).read_text())["wheels"][0]
    _rewrite_manifest(
        LocalReleaseStore(tmp_path / "releases"), "nightly-20261121", {"wheels": [wheel | {"name": climbing}]}
    )
    store = RenamingStore(tmp_path / "releases", WHEEL, climbing)
    with pytest.raises(StoreContentError, match=r"'\.\./\.\./climbed\.whl' is not a single path component"):
        fetch_night(store, "latest", tmp_path / "dest" / "inner")
    assert not list(tmp_path.rglob("climbed.whl"))


def test_a_link_planted_in_the_destination_is_replaced_never_written_through(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-21")
    outside = tmp_path / "outside.txt"
    outside.write_text("a file the user owns")
    folder = tmp_path / "dest" / "nightly-20261121"
    folder.mkdir(parents=True)
    (folder / WHEEL).symlink_to(outside)
    fetched = fetch_night(store, "latest", tmp_path / "dest")
    assert outside.read_text() == "a file the user owns"
    assert not (folder / WHEEL).is_symlink() and sha256_of(folder / WHEEL) == fetched.manifest["wheels"][0]["sha256"]


def test_a_night_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-21")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "nightly-20261121").symlink_to(elsewhere)
    with pytest.raises(StoreContentError, match="is a symbolic link"):
        fetch_night(store, "latest", tmp_path / "dest")
    assert list(elsewhere.iterdir()) == []


def test_the_local_store_never_follows_a_link_among_its_assets(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-21")
    secret = tmp_path / "secret.txt"
    secret.write_text("not a release asset")
    asset = tmp_path / "releases" / "nightly-20261121" / "assets" / WHEEL
    asset.unlink()
    asset.symlink_to(secret)
    with pytest.raises(StoreContentError, match="is not a regular file"):
        store.releases()
    with pytest.raises(StoreContentError):
        fetch_night(store, "latest", tmp_path / "dest")
    fetched = [path for path in (tmp_path / "dest").rglob("*") if path.is_file()]
    assert [path for path in fetched if path.read_bytes() == secret.read_bytes()] == []  # whatever was fetched


def test_a_release_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-21")
    shutil.copytree(tmp_path / "releases" / "nightly-20261121", tmp_path / "kept")
    (tmp_path / "releases" / "nightly-20261122").symlink_to(tmp_path / "kept")
    with pytest.raises(StoreContentError, match="is a symbolic link"):
        store.releases()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("manifest-json", r"manifest\.json of nightly-20261121 is not valid JSON"),
        ("manifest-schema", r"manifest\.json of nightly-20261121 breaks its schema at wheels/0/sha256"),
        ("index-json", r"index\.json of nightly-20261121 is not valid JSON"),
        ("index-schema", r"index\.json of nightly-20261121 breaks its schema at latest"),
        ("index-absent", r"no published release carries index\.json"),
        ("index-names-another-night", r"index\.json of nightly-20261121 does not list nightly-20261121 itself"),
        ("release-json", r"release\.json is not valid JSON"),
        ("release-fields", r"release\.json does not hold the fields this store writes"),
    ],
)
def test_malformed_store_files_are_refused_by_name(tmp_path: Path, damage: str, message: str) -> None:
    store = _store(tmp_path, "2026-11-21")
    folder = tmp_path / "releases" / "nightly-20261121"
    assets = folder / "assets"
    index = json.loads((assets / INDEX).read_text())
    if damage == "manifest-json":
        (assets / MANIFEST).write_text("{not json")
        index["nights"][0]["manifest_sha256"] = sha256_of(assets / MANIFEST)
        (assets / INDEX).write_text(json.dumps(index))
    elif damage == "manifest-schema":
        wheel = json.loads((assets / MANIFEST).read_text())["wheels"][0]
        _rewrite_manifest(store, "nightly-20261121", {"wheels": [wheel | {"sha256": "not-a-digest"}]})
    elif damage == "index-json":
        (assets / INDEX).write_bytes(b"\xff\xfe")
    elif damage == "index-schema":
        (assets / INDEX).write_text(json.dumps(index | {"latest": "../../x"}))
    elif damage == "index-absent":
        (assets / INDEX).unlink()
    elif damage == "index-names-another-night":
        other = index["nights"][0] | {"tag": "nightly-20991231", "night": "2099-12-31"}
        (assets / INDEX).write_text(json.dumps(index | {"latest": other["tag"], "nights": [other]}))
    elif damage == "release-json":
        (folder / "release.json").write_text("[")
    else:
        data = json.loads((folder / "release.json").read_text())
        (folder / "release.json").write_text(json.dumps(data | {"id": "7", "extra": 1}))
    night = "latest" if damage in {"index-names-another-night", "index-absent"} else "2026-11-21"
    with pytest.raises(StoreContentError, match=message):
        fetch_night(store, night, tmp_path / "dest")


def test_a_night_the_newest_index_omits_is_refused_not_fetched_unchecked(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-20", "2026-11-21")
    newest = tmp_path / "releases" / "nightly-20261121" / "assets" / INDEX
    index = json.loads(newest.read_text())
    newest.write_text(json.dumps(index | {"nights": index["nights"][1:]}))
    with pytest.raises(StoreContentError, match="nightly-20261120 is published but the newest index does not list it"):
        fetch_night(store, "2026-11-20", tmp_path / "dest")


def test_a_mismatching_manifest_is_refused_even_when_an_older_night_is_fetched(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-20", "2026-11-21")
    (tmp_path / "releases" / "nightly-20261120" / "assets" / MANIFEST).write_text("{}")
    with pytest.raises(TamperedAsset, match=r"manifest\.json of nightly-20261120 .* the index says"):
        fetch_night(store, "2026-11-20", tmp_path / "dest")


def test_the_cli_refuses_a_broken_store_with_exit_1_and_escapes_what_it_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(tmp_path, "2026-11-21")
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(tmp_path / "releases"))
    assert main(["fetch", "--night", "nightly-1\x1b[31m\nx", "--dest", str(tmp_path / "dest")]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "nightly-1\\x1b[31m\\nx" in err
    (tmp_path / "releases" / "nightly-20261121" / "release.json").write_text("[")
    for command in (["list"], ["fetch", "--dest", str(tmp_path / "dest")], ["retain", "--dry-run"]):
        assert main(command) == 1, command
        assert "release.json is not valid JSON" in capsys.readouterr().err


def test_a_destination_that_is_a_file_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(tmp_path, "2026-11-21")
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(tmp_path / "releases"))
    (tmp_path / "a-file").write_text("")
    assert main(["fetch", "--dest", str(tmp_path / "a-file")]) == 2
    assert "name a folder you can write" in capsys.readouterr().err


def test_an_empty_or_missing_store_is_a_clear_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(tmp_path / "no-store"))
    assert main(["fetch", "--dest", str(tmp_path / "dest")]) == 1
    assert "the release store has no published night" in capsys.readouterr().err
    with pytest.raises(SparkNightlyError):
        fetch_night(LocalReleaseStore(tmp_path / "no-store"), "2026-11-21", tmp_path / "dest")


def test_a_run_id_with_any_printable_text_publishes_a_night_fetch_accepts(tmp_path: Path) -> None:
    store = LocalReleaseStore(tmp_path / "releases")
    built, files = night_files(tmp_path / "built", "2026-11-21", [WHEEL], run_id="2026-11-21T01:00:00+00:00")
    publish_night(store, built, files)
    assert fetch_night(store, "latest", tmp_path / "dest").tag == "nightly-20261121"


def test_the_local_store_neither_reads_nor_writes_through_a_linked_folder(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-21")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(tmp_path / "releases" / "nightly-20261121" / "assets", elsewhere)
    (tmp_path / "releases" / "nightly-20261121" / "assets").symlink_to(elsewhere)
    with pytest.raises(StoreContentError, match="assets is a symbolic link"):
        store.releases()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "releases" / "nightly-20261122").symlink_to(outside)
    with pytest.raises(StoreContentError, match="nightly-20261122 is a symbolic link"):
        LocalReleaseStore(tmp_path / "releases").create_draft("nightly-20261122", "n", "b")
    assert list(outside.iterdir()) == []


def test_a_fifo_in_place_of_a_store_file_is_refused_without_hanging(tmp_path: Path) -> None:
    store = _store(tmp_path, "2026-11-21")
    release_json = tmp_path / "releases" / "nightly-20261121" / "release.json"
    release_json.unlink()
    os.mkfifo(release_json)
    with pytest.raises(StoreContentError, match="is not a regular file"):
        store.releases()
