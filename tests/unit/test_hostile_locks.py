"""The lock's grammar is ours, and install and dockerfile check the fetched folder against its manifest before pip
sees anything: pip options, URLs, paths and edited files are refused by line, and no process is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import TamperedAsset
from pipeline.infra.files import sha256_of
from pipeline.infra.lock_grammar import LockRefused, parse_lock
from pipeline.infra.runtime import LockedFile, render_lock
from pipeline.stages.release.fetch import install
from pipeline.stages.release.publish import MANIFEST
from pipeline.stages.release.verify import verify_fetched
from tests.published import night_files

DIGEST = "a" * 64
GOOD = f"vllm==0.27.2 --hash=sha256:{DIGEST}"


@pytest.mark.parametrize(
    "line",
    [
        "--index-url https://pypi.example/simple",
        "--extra-index-url http://10.0.0.1/simple",
        "--trusted-host 10.0.0.1",
        "-i https://pypi.example/simple",
        "--find-links /tmp/elsewhere",
        "-r /tmp/other-requirements.txt",
        "-c /tmp/constraints.txt",
        "-e .",
        f"evil @ http://10.0.0.1/evil-1.0-py3-none-any.whl --hash=sha256:{DIGEST}",
        f"file:///tmp/evil-1.0-py3-none-any.whl --hash=sha256:{DIGEST}",
        f"/tmp/evil-1.0-py3-none-any.whl --hash=sha256:{DIGEST}",
        f"{GOOD} --index-url https://pypi.example/simple",
        f"{GOOD} --hash=sha256:{'b' * 64}",
        "vllm==0.27.2",
        "vllm>=0.27 --hash=sha256:" + DIGEST,
        "vllm==0.27.2 --hash=sha256:abc",
        f"vllm==0.27.2 --hash=md5:{DIGEST[:32]}",
        f"vllm[all]==0.27.2 --hash=sha256:{DIGEST}",
        f"vllm==0.27.2; python_version>'3' --hash=sha256:{DIGEST}",
        f"Vllm==0.27.2 --hash=sha256:{DIGEST}",
        f"{GOOD}\r",
        "# a comment",
        "",
        f"  {GOOD}",
    ],
)
def test_anything_but_a_pinned_file_is_refused_with_its_line_number(line: str) -> None:
    text = f"{GOOD.replace('vllm', 'aiohttp')}\n{line}\n"
    with pytest.raises(LockRefused, match=r"^lock\.txt:2: "):
        parse_lock(text, "lock.txt")


def test_the_lock_the_project_writes_is_accepted_line_for_line(tmp_path: Path) -> None:
    built, files = night_files(tmp_path, "2026-11-21", ["vllm-0.27.2-cp38-abi3-linux_aarch64.whl"])
    written = render_lock(
        [
            LockedFile("torch", "2.10.0+cpu", "torch-2.10.0+cpu-cp311-cp311-linux_x86_64.whl", DIGEST),
            LockedFile("flashinfer-python", "0.7.2rc1", "flashinfer_python-0.7.2rc1-py3-none-any.whl", "b" * 64),
        ]
    )
    parsed = parse_lock(written, "lock.txt")
    assert [(p.number, p.name, p.version) for p in parsed] == [
        (1, "torch", "2.10.0+cpu"),
        (2, "flashinfer-python", "0.7.2rc1"),
    ]
    assert [p.sha256 for p in parse_lock(files[-1].read_text(), "lock.txt")] == [
        w["sha256"] for w in built.manifest["wheels"]
    ]


def test_a_file_pinned_twice_or_an_empty_lock_is_refused() -> None:
    with pytest.raises(LockRefused, match=r"lock\.txt:2: vllm is pinned twice \(first on line 1\)"):
        parse_lock(f"{GOOD}\n{GOOD.replace('a' * 64, 'b' * 64)}\n", "lock.txt")
    with pytest.raises(LockRefused, match="empty, or no final newline"):
        parse_lock("", "lock.txt")


def _fetched(tmp_path: Path) -> Path:
    """A folder as fetch leaves it: the manifest, the lock and the wheel, all agreeing."""
    built, files = night_files(tmp_path / "fetched", "2026-11-21", ["vllm-0.27.2-cp38-abi3-linux_aarch64.whl"])
    (tmp_path / "fetched" / MANIFEST).write_text(json.dumps(built.manifest))
    return files[0].parent


def _agreeing_manifest(folder: Path) -> None:
    """Make the manifest vouch for the lock as it is now: what a hostile store that published it would serve."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["lock"]["sha256"] = sha256_of(folder / "lock.txt")
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_install_refuses_an_edited_lock_before_any_process_starts(tmp_path: Path) -> None:
    folder = _fetched(tmp_path)
    assert len(verify_fetched(folder).wheels) == 1
    with (folder / "lock.txt").open("a") as lock:
        lock.write("--extra-index-url http://10.0.0.1/simple\n")
    with pytest.raises(TamperedAsset, match=r"lock\.txt has sha256 .*manifest\.json says"):
        install(folder, tmp_path / "venv", tmp_path)  # unit tests refuse processes: pip never ran
    assert not (tmp_path / "venv").exists()


def test_install_refuses_a_vouched_for_lock_outside_the_grammar_by_line(tmp_path: Path) -> None:
    folder = _fetched(tmp_path)
    with (folder / "lock.txt").open("a") as lock:
        lock.write("-r /etc/outside-requirements.txt\n")
    _agreeing_manifest(folder)
    with pytest.raises(TamperedAsset, match=r"lock\.txt:2: '-r /etc/outside-requirements\.txt' is not a locked file"):
        install(folder, tmp_path / "venv", tmp_path)


def test_install_refuses_a_swapped_or_missing_wheel_and_a_wheel_the_lock_does_not_pin(tmp_path: Path) -> None:
    folder = _fetched(tmp_path)
    wheel = folder / "vllm-0.27.2-cp38-abi3-linux_aarch64.whl"
    good = wheel.read_bytes()
    wheel.write_bytes(b"an outside wheel")
    with pytest.raises(TamperedAsset, match=r"vllm-0\.27\.2-cp38-abi3-linux_aarch64\.whl has sha256"):
        install(folder, tmp_path / "venv", tmp_path)
    wheel.unlink()
    wheel.symlink_to(tmp_path / "elsewhere.whl")
    with pytest.raises(TamperedAsset, match="missing or not a plain file"):
        verify_fetched(folder)
    wheel.unlink()
    wheel.write_bytes(good)
    (folder / "lock.txt").write_text(f"torch==2.10.0 --hash=sha256:{DIGEST}\n")
    _agreeing_manifest(folder)
    with pytest.raises(TamperedAsset, match=r"lock\.txt does not pin vllm-0\.27\.2"):
        verify_fetched(folder)


def test_dockerfile_refuses_a_folder_without_a_manifest_or_with_a_foreign_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["dockerfile", "--from", str(empty), "--out", str(tmp_path / "ctx")]) == 2
    assert "manifest.json is missing (or not a plain file): --from takes the folder" in capsys.readouterr().err
    folder = _fetched(tmp_path)
    (folder / "lock.txt").write_text(f"evil @ file:///tmp/evil.whl --hash=sha256:{DIGEST}\n")
    _agreeing_manifest(folder)
    assert main(["dockerfile", "--from", str(folder), "--out", str(tmp_path / "ctx")]) == 1
    assert "lock.txt:1: 'evil @ file:///tmp/evil.whl" in capsys.readouterr().err
    assert not (tmp_path / "ctx" / "Dockerfile").exists()
    (folder / MANIFEST).write_text("{")
    assert main(["install", "--from", str(folder), "--venv", str(tmp_path / "venv")]) == 1
    assert "manifest.json is not valid JSON" in capsys.readouterr().err
