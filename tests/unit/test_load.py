"""The position-aware YAML loader: positions, duplicate keys, merges, limits, schema wording."""

from __future__ import annotations

import pytest

from pipeline.config.load import format_path, parse_yaml, schema_issues, suggest
from pipeline.errors import ConfigError


def test_every_value_and_key_keeps_its_line_and_column() -> None:
    doc = parse_yaml("a:\n  b: [1, 2]\n  c:\n    - x: 3\n", "f.yaml")
    assert doc.data == {"a": {"b": [1, 2], "c": [{"x": 3}]}}
    assert doc.locate(("a", "b", 1)) == (2, 10)
    assert doc.locate(("a", "c", 0, "x")) == (4, 10)
    assert doc.locate(("a", "c", 0, "x"), key=True) == (4, 7)
    assert doc.locate(("a", "missing", "deeper")) == (2, 3)  # nearest known parent


def test_a_duplicate_key_is_an_error_not_a_silent_overwrite() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert [str(i) for i in caught.value.issues] == ["f.yaml:3:1: a: duplicate key (first defined on line 1)"]


def test_merge_keys_fill_in_without_overriding() -> None:
    doc = parse_yaml("base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 5\n", "f.yaml")
    assert doc.data["child"] == {"x": 1, "y": 5}


def test_dates_stay_the_text_the_maintainer_wrote() -> None:
    assert parse_yaml("when: 2026-03-31\n", "f.yaml").data == {"when": "2026-03-31"}


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml("1: one\n", "f.yaml")
    assert "keys must be plain strings" in str(caught.value.issues[0])


def test_several_documents_in_one_file_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml("a: 1\n---\nb: 2\n", "f.yaml")
    assert "invalid YAML" in str(caught.value.issues[0])


def test_paths_render_like_python_attribute_and_index_access() -> None:
    assert format_path(("models", 2, "serve", "max_model_len")) == "models[2].serve.max_model_len"
    assert format_path(()) == ""


def test_suggestions_name_the_nearest_choice_or_list_them() -> None:
    assert suggest("max_model_lenn", ["max_model_len", "dtype"]) == "did you mean 'max_model_len'?"
    assert suggest("zzz", ["a", "b"]) == "expected one of 'a', 'b'"
    assert suggest("zzz", []) == "none is defined yet"


def test_schema_issues_are_all_reported_and_located() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
        "required": ["name"],
    }
    doc = parse_yaml("count: 0\nnmae: x\n", "f.yaml")
    messages = sorted(str(i) for i in schema_issues(doc, schema))
    assert messages == [
        "f.yaml:1:1: (root): missing required key 'name'",
        "f.yaml:1:8: count: 0 is less than the minimum of 1",
        "f.yaml:2:1: nmae: unknown key; did you mean 'name'?",
    ]
