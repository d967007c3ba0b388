"""Identity: the server serves the configured model, with the configured length, from the configured weights."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.checks import Verdict, failed, passed
from pipeline.infra.openai_client import ServedModel


def model_config(model_ref: str) -> Mapping[str, Any] | None:
    """The config.json behind a model reference when it is a local folder (hub ids are read by the engine)."""
    path = Path(model_ref) / "config.json"
    try:
        loaded: Mapping[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded


def check_identity(
    served: Sequence[ServedModel],
    *,
    name: str,
    max_model_len: int | None,
    model_ref: str,
    config: Mapping[str, Any] | None,
    expected: Mapping[str, Any],
) -> Verdict:
    """/v1/models id, max_model_len and root, and the model's config against what models.yaml says."""
    evidence: dict[str, Any] = {"served": [m.id for m in served]}
    match = next((m for m in served if m.id == name), None)
    if match is None:
        return failed("identity", name, f"/v1/models serves {[m.id for m in served]}, not '{name}'", **evidence)
    evidence |= {"max_model_len": match.max_model_len, "root": match.root}
    problems = []
    if max_model_len is not None and match.max_model_len != max_model_len:
        problems.append(f"max_model_len {match.max_model_len}, configured {max_model_len}")
    if match.root is not None and match.root != model_ref:
        problems.append(f"serves weights from {match.root}, configured {model_ref}")
    if config is not None:
        for key, want in expected.items():
            have = config.get(key)
            ok = want in have if isinstance(have, list) and not isinstance(want, list) else have == want
            evidence[f"config.{key}"] = have
            if not ok:
                problems.append(f"config.json {key} is {have!r}, models.yaml expects {want!r}")
    if problems:
        return failed("identity", name, "; ".join(problems), **evidence)
    return passed("identity", name, "the configured model, length and weights", **evidence)
