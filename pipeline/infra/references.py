"""Golden reference outputs of the last good night, per hardware and entry: what drift is measured against."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.infra.files import write_atomically
from pipeline.infra.openai_client import Generation

# 2: each output carries its prompt and token ids (scored again by the next build), and the served folder's
# identity files. A reference of another format is no reference: that night is judged by the judge instead.
FORMAT = 2


@dataclass(frozen=True)
class References:
    """The outputs a night recorded, keyed by prompt id."""

    night: str
    outputs: Mapping[str, Generation]
    identity_files: Mapping[str, str] = field(default_factory=dict)


class ReferenceStore:
    """JSON files under `root/<hardware>/<entry>.json` (root: the state's golden folder), written atomically,
    versioned."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, hardware: str, entry_id: str) -> Path:
        return self.root / hardware / f"{entry_id}.json"

    def load(self, hardware: str, entry_id: str) -> References | None:
        try:
            raw = json.loads(self._path(hardware, entry_id).read_text())
        except FileNotFoundError:
            return None
        if raw.get("version") != FORMAT:
            return None  # an older format: tonight records a fresh reference
        return References(
            raw["night"],
            {o["prompt_id"]: Generation.from_json(o) for o in raw["outputs"]},
            dict(raw.get("identity_files", {})),
        )

    def save(
        self,
        hardware: str,
        entry_id: str,
        night: str,
        outputs: Sequence[Generation],
        identity_files: Mapping[str, str] | None = None,
    ) -> Path:
        path = self._path(hardware, entry_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "version": FORMAT,
            "night": night,
            "outputs": [o.to_json() for o in outputs],
            "identity_files": dict(identity_files or {}),
        }
        write_atomically(path, json.dumps(body, indent=1, sort_keys=True) + "\n")
        return path
