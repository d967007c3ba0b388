"""Identity: the server serves the configured model, with the configured length, from the configured weights.

Beyond names and paths (which any folder under the right name passes), the served folder's config and
tokenizer files are hashed and compared with what models.yaml pins or what the first good night recorded.
"""

from __future__ import annotations

import hashlib
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


# What decides how a model reads its input and what it computes, short of the weights themselves.
IDENTITY_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def identity_files(folder: Path | None) -> dict[str, str]:
    """sha256 of each identity file present in a served model folder; empty when the folder is not readable here."""
    if folder is None or not folder.is_dir():
        return {}
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in IDENTITY_FILES
        if (folder / name).is_file()
    }


def config_value(config: Mapping[str, Any], key: str) -> Any:
    """A config.json value by its key, or by a dotted path into nested objects ("rope_parameters.rope_theta")."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def check_identity(  # noqa: PLR0913 -- every identity fact checked comes in by keyword, one check
    served: Sequence[ServedModel],
    *,
    name: str,
    max_model_len: int | None,
    model_ref: str,
    config: Mapping[str, Any] | None,
    expected: Mapping[str, Any],
    files: Mapping[str, str] | None = None,
    expected_files: Mapping[str, str] | None = None,
    files_from: str = "models.yaml",
) -> Verdict:
    """/v1/models id, max_model_len and root, the model's config and its files' hashes against what is expected.

    `model_ref` is what the entry configures (never what the server reports); `files` are the hashes of the
    folder the server loaded, `expected_files` those pinned in models.yaml or recorded on the first good night.
    """
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
            have = config_value(config, key)
            ok = want in have if isinstance(have, list) and not isinstance(want, list) else have == want
            evidence[f"config.{key}"] = have
            if not ok:
                problems.append(f"config.json {key} is {have!r}, models.yaml expects {want!r}")
    if files:
        evidence["files"] = dict(files)
    for file, digest in (expected_files or {}).items():
        have = (files or {}).get(file)
        if have is None:
            problems.append(f"{file} is not in the served folder, {files_from} pins sha256 {digest[:12]}")
        elif have != digest:
            problems.append(f"{file} has sha256 {have[:12]}, {files_from} pins {digest[:12]}")
    if problems:
        return failed("identity", name, "; ".join(problems), **evidence)
    pinned = f"; {len(expected_files)} files as {files_from} pins" if expected_files else ""
    return passed("identity", name, f"the configured model, length and weights{pinned}", **evidence)
