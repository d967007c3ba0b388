"""A run's `build.json`: what each source's build made (its wheels with their sha256, from the cache or built, an
overlay or a native build and why), written once by the build and read back by the candidate stage and the release.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import UsageError
from pipeline.infra.files import read_versioned, sha256_of, write_atomically
from pipeline.infra.wheel_cache import BuiltWheel
from pipeline.stages.build.build_wheels import BuildResult

BUILD_RECORD_VERSION = 1


@dataclass(frozen=True)
class RecordedBuild:
    """One source's build as the record keeps it."""

    family: str
    cache_key: str
    cached: bool
    seconds: float
    build_seconds: float
    kind: str
    why: str
    wheels: tuple[BuiltWheel, ...]
    decision: Mapping[str, Any] = field(default_factory=dict)  # the overlay decision (native_base.BuildDecision)

    @property
    def base_wheel(self) -> Path | None:
        """The native base an overlay was made on, where it was one."""
        base = self.decision.get("base")
        return Path(base["path"]) if base else None

    def to_json(self) -> dict[str, Any]:
        data = {
            "family": self.family,
            "cache_key": self.cache_key,
            "cached": self.cached,
            "seconds": self.seconds,
            "build_seconds": self.build_seconds,
            "kind": self.kind,
            "why": self.why,
            "wheels": [vars(w) for w in self.wheels],
        }
        return data | ({"decision": dict(self.decision)} if self.decision else {})


@dataclass(frozen=True)
class BuildRecord:
    """Every source's build of one run."""

    builds: tuple[RecordedBuild, ...]

    @staticmethod
    def of(results: Sequence[BuildResult]) -> BuildRecord:
        return BuildRecord(
            tuple(
                RecordedBuild(
                    r.family,
                    r.key,
                    r.cached,
                    round(r.seconds, 3),
                    round(r.build_seconds, 3),
                    r.kind,
                    r.why,
                    tuple(BuiltWheel(w.name, sha256_of(w), w.stat().st_size) for w in r.wheels),
                    r.decision.to_json() if r.decision is not None else {},
                )
                for r in results
            )
        )

    def write(self, path: Path) -> None:
        data = {"version": BUILD_RECORD_VERSION, "builds": [b.to_json() for b in self.builds]}
        write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    @staticmethod
    def read(path: Path) -> BuildRecord:
        """The record a build wrote; one that is damaged is said with its file and the way out."""
        try:
            data = read_versioned(path, BUILD_RECORD_VERSION)
            return BuildRecord(tuple(_build(b) for b in data["builds"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(
                f"{path}: not a build record ({type(exc).__name__}: {exc}); run `spark-nightly build --run-id "
                f"{path.parent.name}` again"
            ) from exc

    @property
    def base_wheels(self) -> list[Path]:
        """The native bases tonight's overlays were made on."""
        return [b.base_wheel for b in self.builds if b.base_wheel is not None]


def _build(data: Mapping[str, Any]) -> RecordedBuild:
    wheels = tuple(BuiltWheel(str(w["filename"]), str(w["sha256"]), int(w["size"])) for w in data["wheels"])
    return RecordedBuild(
        str(data["family"]),
        str(data["cache_key"]),
        bool(data["cached"]),
        float(data["seconds"]),
        float(data["build_seconds"]),
        str(data["kind"]),
        str(data["why"]),
        wheels,
        dict(data.get("decision") or {}),
    )
