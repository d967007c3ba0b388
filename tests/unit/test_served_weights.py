"""A boot serves only weights made before it: it never fetches or converts them, where a runner's supply (its
wheelhouse, offline) is not at hand; `model_reference`, given the supply, makes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.errors import EngineError
from pipeline.infra.weights import MANIFEST, package_folder, served_model_reference

ROOT = Path(__file__).parents[2]


def test_a_package_entry_not_made_yet_is_an_error_saying_what_makes_it_and_a_made_one_is_served(
    tmp_path: Path,
) -> None:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry("smollm2-135m-instruct")
    assert entry.weights.source == "package"
    with pytest.raises(EngineError, match=r"its weights are not made in .*: the night's weights stage makes them"):
        served_model_reference(entry, tmp_path)
    assert not any(tmp_path.iterdir())  # nothing fetched, nothing converted
    folder = package_folder(entry, tmp_path)
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text("{}")
    assert served_model_reference(entry, tmp_path) == str(folder)
