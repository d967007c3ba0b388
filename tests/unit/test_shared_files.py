"""Runtimes share their identical large files through one store: linked once, freed when no runtime links them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.infra.runtime_cache import DISK_RECORD, disk_size, prune_runtimes, runtime_size
from pipeline.infra.shared_files import MIN_SHARED_BYTES, share_identical_files, sweep_unlinked
from pipeline.places import CacheDir

NATIVE = os.urandom(MIN_SHARED_BYTES + 4096)  # a compiled extension every overlay on one base carries


def runtime(root: Path, *files: tuple[str, bytes]) -> Path:
    for name, content in files:
        path = root / "lib" / "site-packages" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def test_the_same_large_file_in_two_runtimes_is_held_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = runtime(tmp_path / "a", ("vllm/_C.so", NATIVE), ("vllm/small.py", b"x = 1\n"))
    second = runtime(tmp_path / "b", ("vllm/_C.so", NATIVE), ("vllm/small.py", b"x = 1\n"))
    assert share_identical_files(first, store).bytes_saved == 0  # the first adds its copy to the store
    shared = share_identical_files(second, store)
    assert (shared.files, shared.bytes_saved) == (1, len(NATIVE))
    one, two = (r / "lib" / "site-packages" / "vllm" / "_C.so" for r in (first, second))
    assert one.stat().st_ino == two.stat().st_ino and one.stat().st_nlink == 3  # two runtimes and the store
    assert two.read_bytes() == NATIVE
    small = [r / "lib" / "site-packages" / "vllm" / "small.py" for r in (first, second)]
    assert small[0].stat().st_ino != small[1].stat().st_ino  # below the size worth a digest: left alone
    assert len(list(store.iterdir())) == 1


def test_a_file_of_the_same_bytes_but_another_mode_is_not_linked(tmp_path: Path) -> None:
    store = tmp_path / "store"
    plain = runtime(tmp_path / "a", ("tool", NATIVE))
    run = runtime(tmp_path / "b", ("tool", NATIVE))
    (run / "lib" / "site-packages" / "tool").chmod(0o755)
    share_identical_files(plain, store)
    assert share_identical_files(run, store).bytes_saved == 0  # a link would make both executable, or neither
    assert (run / "lib" / "site-packages" / "tool").stat().st_mode & 0o111
    assert not (plain / "lib" / "site-packages" / "tool").stat().st_mode & 0o111
    assert len(list(store.iterdir())) == 2


def test_a_copy_no_runtime_links_is_swept_and_one_still_linked_stays(tmp_path: Path) -> None:
    store = tmp_path / "store"
    other = os.urandom(MIN_SHARED_BYTES)
    gone = runtime(tmp_path / "gone", ("only-here.so", other), ("_C.so", NATIVE))
    kept = runtime(tmp_path / "kept", ("_C.so", NATIVE))
    for root in (gone, kept):
        share_identical_files(root, store)
    shutil.rmtree(gone)
    assert sweep_unlinked(store) >= len(other)
    (left,) = store.iterdir()
    assert left.read_bytes() == NATIVE


def test_pruning_a_runtime_frees_what_only_it_linked_and_counts_a_shared_file_by_its_share(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path / "cache")
    overlays = [runtime(cache.runtimes / f"overlay-{n}", ("_C.so", NATIVE)) for n in range(3)]
    for root in overlays:
        share_identical_files(root, cache.shared_files)
    # each of three runtimes counts a third of the one copy: the three sum to what the disk holds
    sizes = [disk_size(root) for root in overlays]
    held = (cache.shared_files / next(p.name for p in cache.shared_files.iterdir())).stat().st_blocks * 512
    assert abs(sum(sizes) - held) <= 3 and max(sizes) < held
    for root in overlays:
        os.utime(root, (1, 1))  # used long ago: nothing keeps them
    assert sorted(prune_runtimes(cache.root, 1 / 1024**3, now=10 * 24 * 3600.0)) == [r.name for r in overlays]
    assert list(cache.shared_files.iterdir()) == []  # the last link gone, the copy with it


def test_a_complete_runtimes_size_is_read_from_its_record_and_its_shares_from_tonights_links(tmp_path: Path) -> None:
    """A runtime's files never change once it is complete (runtime.json written last): pruning walks it once, then
    reads its own bytes from the record and looks only at the files it shares, whose share moves as runtimes go."""
    cache = CacheDir(tmp_path / "cache")
    private = os.urandom(3 * 4096)
    overlays = [runtime(cache.runtimes / f"overlay-{n}", ("_C.so", NATIVE), ("own.py", private)) for n in range(3)]
    for root in overlays:
        share_identical_files(root, cache.shared_files)
        (root / "runtime.json").write_text("{}\n")
    first = overlays[0]
    walked = disk_size(first)
    assert runtime_size(first) == walked and (first / DISK_RECORD).exists()
    # a file that appears after the record is not walked again: the record is what is read
    (first / "lib" / "site-packages" / "later.bin").write_bytes(os.urandom(8 * 4096))
    assert runtime_size(first) == walked
    # the other two runtimes go: the one left holds the shared copy alone, and its size says so
    shutil.rmtree(overlays[1])
    shutil.rmtree(overlays[2])
    held = (cache.shared_files / next(p.name for p in cache.shared_files.iterdir())).stat().st_blocks * 512
    assert runtime_size(first) == walked - held // 3 + held


def test_a_runtime_still_being_made_is_walked_and_one_made_again_is_recorded_again(tmp_path: Path) -> None:
    root = runtime(tmp_path / "runtimes" / "overlay", ("own.py", os.urandom(2 * 4096)))
    assert runtime_size(root) == disk_size(root) and not (root / DISK_RECORD).exists()  # no runtime.json yet
    (root / "runtime.json").write_text("{}\n")
    before = runtime_size(root)
    (root / "lib" / "site-packages" / "more.py").write_bytes(os.urandom(4 * 4096))
    complete = root / "runtime.json"
    complete.write_text('{"remade": true}\n')  # made again under the same name: runtime.json is written last
    os.utime(complete, ns=(complete.stat().st_atime_ns, complete.stat().st_mtime_ns + 1_000_000))
    assert runtime_size(root) >= before + 4 * 4096


def test_a_runtime_removed_while_it_is_measured_is_counted_as_it_is_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another night's pruning renames a runtime away between this one's look at its runtime.json and its walk:
    never a crash, and no record written where the runtime was."""
    root = runtime(tmp_path / "runtimes" / "overlay", ("own.py", os.urandom(2 * 4096)))
    (root / "runtime.json").write_text("{}\n")  # complete: its first measure walks it and records what it found
    walk = os.walk

    def removed_first(top: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Iterator[Any]:
        shutil.rmtree(top)
        return walk(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", removed_first)
    assert runtime_size(root) == 0 and not root.exists()
