"""Every configuration example in the docs is what validate accepts: each ```yaml block of README.md (and docs/)
is checked against the schema of the file it shows, and the settings example through the settings rules too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config.load import parse_yaml, schema, schema_issues
from pipeline.settings import resolve

ROOT = Path(__file__).parents[2]
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _examples() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(f"{page.name}#{n}", text) for page in pages for n, text in enumerate(BLOCK.findall(page.read_text()))]


def _kind(text: str) -> str:
    markers = (("profiles:", "models"), ("cells:", "thresholds"), ("prompts:", "golden"), ("nodes:", "cluster"))
    for marker, kind in markers:
        if re.search(rf"^{marker}", text, re.MULTILINE):
            return kind
    return "settings"


def test_the_docs_show_an_example_of_each_file() -> None:
    assert {_kind(text) for _, text in _examples()} == {"models", "thresholds", "golden", "settings", "cluster"}


@pytest.mark.parametrize(("where", "text"), _examples(), ids=[where for where, _ in _examples()])
def test_each_example_is_valid(where: str, text: str, tmp_path: Path) -> None:
    kind = _kind(text)
    if kind == "settings":
        path = tmp_path / "spark-nightly.yaml"
        path.write_text(text)
        resolve(settings_file=str(path), environ={}, cli=[])  # raises ConfigError naming file:line
        return
    doc = parse_yaml(text, f"{where} ({kind})")
    assert [str(issue) for issue in schema_issues(doc, schema(kind))] == []
