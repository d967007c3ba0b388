"""Settings: default < file < environment < command line, each value with its source, secrets hidden."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import declarations, resolve, settings_schema


def _settings_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_apply_when_nothing_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    resolved = resolve(settings_file=None, environ={}, cli=[])
    assert resolved.settings.profile == "cpu"
    assert set(resolved.sources.values()) == {"default"}


def test_each_layer_overrides_the_one_below_and_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    file = _settings_file(
        tmp_path, "version: 1\nprofile: spark\npublish:\n  keep_nights: 10\n  target: github\n  repo: o/r\n"
    )
    environ = {"SPARK_NIGHTLY_PUBLISH_KEEP_NIGHTS": "20", "SPARK_NIGHTLY_SOURCES_VLLM_PRS": "101, 202"}
    resolved = resolve(
        settings_file=file, environ=environ, cli=[("publish.keep_nights", "40", "--set publish.keep_nights")]
    )
    s, src = resolved.settings, resolved.sources
    assert (s.profile, src["profile"]) == ("spark", "settings.yaml:2")
    assert (s.publish_target, src["publish_target"]) == ("github", "settings.yaml:5")
    assert (s.publish_keep_nights, src["publish_keep_nights"]) == (40, "--set publish.keep_nights")
    assert (s.vllm_prs, src["vllm_prs"]) == (("101", "202"), "env SPARK_NIGHTLY_SOURCES_VLLM_PRS")


def test_a_typo_in_an_environment_variable_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        resolve(settings_file=None, environ={"SPARK_NIGHTLY_PROFLE": "spark"}, cli=[])
    assert (
        str(caught.value.issues[0])
        == "env SPARK_NIGHTLY_PROFLE: unknown setting; did you mean 'SPARK_NIGHTLY_PROFILE'?"
    )


def test_bad_values_from_env_and_cli_are_reported_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        resolve(
            settings_file=None,
            environ={"SPARK_NIGHTLY_PROFILE": "tpu"},
            cli=[("publish.keep_nights", "many", "--set publish.keep_nights"), ("nope", "1", "--set nope")],
        )
    assert sorted(str(i) for i in caught.value.issues) == [
        "--set nope: unknown setting 'nope'; expected one of 'alert.repo', 'alert.target', 'alert.webhook_url', "
        "'build.ccache_size', 'build.image', 'build.max_jobs', 'build.min_free_gib', 'build.mode', "
        "'cache.runtimes_max_gib', 'cache.wheels_max_gib', 'candidate.base_python', 'culprit.bisect_steps', "
        "'culprit.max_builds', "
        "'culprit.publish', 'culprit.step_boots', "
        "'github.allow_custom_api', 'github.api_url', "
        "'github.token_env', 'network.offline', 'paths.cache', 'paths.cluster', "
        "'paths.config', 'paths.runs', 'paths.state', "
        "'paths.wheelhouse', 'paths.wheels', 'profile', 'publish.keep_nights', 'publish.local_dir', 'publish.repo', "
        "'publish.target', "
        "'sources.flashinfer.prs', 'sources.flashinfer.ref', 'sources.flashinfer.repo', 'sources.vllm.prs', "
        "'sources.vllm.ref', 'sources.vllm.repo'",
        "--set publish.keep_nights: expected an integer, got 'many'",
        "env SPARK_NIGHTLY_PROFILE: 'tpu' is not allowed; did you mean 'gpu'?",
    ]


def test_a_named_settings_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(settings_file=str(tmp_path / "missing.yaml"), environ={}, cli=[])
    assert "file not found" in str(caught.value.issues[0])


def test_the_settings_file_is_found_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "spark-nightly.yaml").write_text(
        "version: 1\nalert:\n  target: webhook\n  webhook_url: https://hooks.example.invalid/services/T0/B0/x\n"
    )
    monkeypatch.chdir(tmp_path)
    resolved = resolve(settings_file=None, environ={}, cli=[])
    assert resolved.sources["alert_target"] == "spark-nightly.yaml:3"


def test_secrets_are_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = "https://hooks.example.invalid/services/T000/B000/very-secret-token"
    resolved = resolve(settings_file=None, environ={"SPARK_NIGHTLY_ALERT_WEBHOOK_URL": url}, cli=[])
    rows = {key: (value, source) for key, value, source in resolved.rows()}
    assert rows["alert.webhook_url"] == ("(set)", "env SPARK_NIGHTLY_ALERT_WEBHOOK_URL")
    assert "very-secret-token" not in repr(resolved.rows())


def test_the_shipped_settings_schema_matches_the_declarations() -> None:
    shipped = json.loads(resources.files("pipeline.config").joinpath("schemas", "settings.schema.json").read_text())
    assert shipped == settings_schema()
    assert len(declarations()) == len({d.key for d in declarations()}) == len({d.env for d in declarations()})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alert:\n  target: webhook\n", "alert.target is webhook but alert.webhook_url is not set"),
        ("alert:\n  webhook_url: ftp://hooks.example.invalid/very-secret\n", "alert.webhook_url is not an http(s) URL"),
        ("sources:\n  vllm: {repo: ''}\n", "sources.vllm.repo is empty"),
        ("sources:\n  flashinfer: {ref: ''}\n", "sources.flashinfer.ref is empty"),
    ],
)
def test_what_a_runner_would_trip_on_later_is_refused_now(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "spark-nightly.yaml"
    path.write_text("version: 1\n" + text)
    with pytest.raises(ConfigError) as caught:
        resolve(settings_file=str(path), environ={}, cli=[])
    (issue,) = caught.value.issues
    assert expected in str(issue) and str(issue).startswith(f"{path}:") and "very-secret" not in str(issue)
