"""Nights for release-store tests: real wheel-like files, a lock and a manifest the real builder checks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.infra.files import sha256_of
from pipeline.stages.release.publish import Night, build_manifest


def night_files(
    folder: Path, night: str, wheel_names: Sequence[str], *, run_id: str = "run-1"
) -> tuple[Night, list[Path]]:
    """A passing night of the named wheels (bytes of their own) and a lock pinning them, as publish takes it."""
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name in wheel_names:
        wheel = folder / name
        wheel.write_bytes(f"{name} of {night}".encode() * 1000)
        wheels.append(wheel)
    lock = folder / "lock.txt"
    lock.write_text("".join(f"{w.name.split('-')[0]}==1.0 --hash=sha256:{sha256_of(w)}\n" for w in wheels))
    manifest = schema_valid_manifest(night, run_id, wheels, lock)
    return Night(night, run_id, True, manifest), [*wheels, lock]


def schema_valid_manifest(night: str, run_id: str, wheels: Sequence[Path], lock: Path) -> dict[str, Any]:
    return build_manifest(
        night=night,
        run_id=run_id,
        profile="cpu",
        wheels=wheels,
        lock=lock,
        plan={"sources": [{"name": "vllm", "commit": "c" * 40}]},
        host={"hostname": "test-host"},
        health=None,
        entries=[{"id": "smollm2-135m-instruct", "status": "PASS"}],
    )
