"""Settings and configuration a careless or hostile file could hold: where the GitHub token is sent and from which
variable, opt-ins a working folder's file cannot give, values that would become options or new lines, and YAML
that used to crash validate. Each is refused with its location, exit 2, never 70."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import ConfigError
from pipeline.infra import procs
from pipeline.settings import resolve

ROOT = Path(__file__).parents[2]


def _issues(tmp_path: Path, text: str | None = None, environ: dict[str, str] | None = None) -> list[str]:
    settings = None
    if text is not None:
        (tmp_path / "settings.yaml").write_text(text)
        settings = str(tmp_path / "settings.yaml")
    with pytest.raises(ConfigError) as caught:
        resolve(settings_file=settings, environ=environ or {}, cli=[])
    return [str(issue) for issue in caught.value.issues]


def test_the_token_goes_only_to_github_over_https_unless_an_explicit_opt_in_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (issue,) = _issues(tmp_path, "version: 1\ngithub:\n  api_url: http://collector.example/api\n")
    assert issue.startswith("settings.yaml:3:12: github.api_url: 'http://collector.example/api' is not")
    assert "the GitHub token would be sent there" in issue
    (issue,) = _issues(tmp_path, environ={"SPARK_NIGHTLY_GITHUB_TOKEN_ENV": "AWS_SECRET_ACCESS_KEY"})
    assert issue.startswith("env SPARK_NIGHTLY_GITHUB_TOKEN_ENV: 'AWS_SECRET_ACCESS_KEY' is not one of GITHUB_TOKEN")
    runner = {"GITHUB_API_URL": "https://github.example.com/api/v3"}  # an Enterprise runner's own API
    allowed = resolve(
        settings_file=None, environ=runner | {"SPARK_NIGHTLY_GITHUB_API_URL": runner["GITHUB_API_URL"]}, cli=[]
    )
    assert allowed.settings.github_api_url == "https://github.example.com/api/v3"
    opted = {"SPARK_NIGHTLY_GITHUB_API_URL": "http://127.0.0.1:8080", "SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API": "1"}
    assert resolve(settings_file=None, environ=opted, cli=[]).settings.github_api_url == "http://127.0.0.1:8080"


def test_a_settings_file_found_in_the_working_folder_cannot_opt_in_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spark-nightly.yaml").write_text(
        "version: 1\ngithub:\n  api_url: http://collector.example\n  allow_custom_api: true\n"
    )
    with pytest.raises(ConfigError) as caught:
        resolve(settings_file=None, environ={}, cli=[])
    (issue,) = [str(i) for i in caught.value.issues]
    assert issue.startswith("spark-nightly.yaml:4:21: github.allow_custom_api: not taken from a settings file found")
    explicit = resolve(settings_file="spark-nightly.yaml", environ={}, cli=[])  # named by the user: trusted
    assert explicit.settings.github_api_url == "http://collector.example" and explicit.notes == ()
    (tmp_path / "spark-nightly.yaml").write_text("version: 1\nprofile: spark\n")
    implicit = resolve(settings_file=None, environ={}, cli=[])
    assert implicit.notes == (
        "settings: using spark-nightly.yaml found in the working folder; name it with --settings (or "
        "SPARK_NIGHTLY_SETTINGS) to make that explicit",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "publish:\n  target: github\n",
            "settings.yaml:3:11: publish.target: publish.target is github but publish.repo",
        ),
        ("alert:\n  target: github\n", "settings.yaml:3:11: alert.target: alert.target is github but alert.repo"),
        ("publish:\n  keep_nights: 0\n", "settings.yaml:3:16: publish.keep_nights: 0 is less than the minimum of 1"),
        ("sources:\n  vllm:\n    prs: [abc]\n", "settings.yaml:4:11: sources.vllm.prs[0]: 'abc' is not valid"),
        ("sources:\n  vllm:\n    prs: ['-5']\n", "settings.yaml:4:11: sources.vllm.prs[0]: '-5' is not valid"),
        (
            "sources:\n  vllm:\n    ref: --upload-pack=x\n",
            "settings.yaml:4:10: sources.vllm.ref: '--upload-pack=x' is not",
        ),
        ("build:\n  image: --privileged\n", "settings.yaml:3:10: build.image: '--privileged' is not valid"),
    ],
)
def test_settings_that_would_break_a_night_or_an_argv_are_refused_by_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    issues = _issues(tmp_path, "version: 1\n" + text)
    assert any(issue.startswith(expected) for issue in issues), issues


def test_the_same_values_from_the_environment_are_refused_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    issues = _issues(
        tmp_path,
        environ={
            "SPARK_NIGHTLY_PUBLISH_KEEP_NIGHTS": "-3",
            "SPARK_NIGHTLY_SOURCES_FLASHINFER_PRS": "12,-5",
            "SPARK_NIGHTLY_BUILD_IMAGE": "ubuntu\nRUN curl evil",
        },
    )
    assert sorted(i.split(":")[0] for i in issues) == [
        "env SPARK_NIGHTLY_BUILD_IMAGE",
        "env SPARK_NIGHTLY_PUBLISH_KEEP_NIGHTS",
        "env SPARK_NIGHTLY_SOURCES_FLASHINFER_PRS",
    ]
    assert issues  # not empty: an assert over nothing passes
    assert not any("\n" in issue for issue in issues)  # the newline is shown escaped


def test_build_dry_run_quotes_what_it_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    argv = ["build", "--dry-run", "--profile", "spark", "--set", "sources.vllm.ref=feat;touch$HOME"]
    assert main(argv) == 0
    assert "ls-remote origin 'refs/heads/feat;touch$HOME'" in capsys.readouterr().out
    assert main([*argv[:-1], "sources.vllm.ref=--upload-pack=touch"]) == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "version: 1\nprofiles: !env SPARK\n",
            "models.yaml:2:11: profiles: unknown tag '!env': configuration is plain YAML",
        ),
        (
            "version: 1\nprofiles: {}\nmo\x00dels: []\n",
            "models.yaml:3:3: (root): character 0x0000 is not allowed in YAML",
        ),
        ("version: 1\ndeep: " + "[" * 600 + "]" * 600 + "\n", "models.yaml:1:1: (root): nested deeper than 64 levels"),
        ("version: .nan\n", "models.yaml:1:10: version: .nan is not a finite number; write a number"),
        ("version: " + "9" * 5000 + "\n", "models.yaml:1:10: version: not a usable value"),
        ("version: 1\nprofiles: !env {}\n", "models.yaml:2:11: profiles: unknown tag '!env'"),
    ],
)
def test_yaml_that_crashed_validate_is_refused_at_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.yaml").write_text(text)
    assert main(["validate"]) == 2
    assert any(line.startswith(expected) for line in capsys.readouterr().err.splitlines())


def test_a_trailing_newline_does_not_slip_past_a_pattern(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (issue,) = _issues(tmp_path, environ={"SPARK_NIGHTLY_BUILD_IMAGE": "nvidia/cuda:13.0\n"})
    assert issue.startswith("env SPARK_NIGHTLY_BUILD_IMAGE: 'nvidia/cuda:13.0\\n' is not valid")
    shutil.copytree(ROOT / "thresholds", tmp_path / "thresholds")
    shutil.copytree(ROOT / "golden", tmp_path / "golden")
    models = (ROOT / "models.yaml").read_text()
    (tmp_path / "models.yaml").write_text(
        models.replace("launch: {target: docker}", 'launch: {target: docker, image: "vllm-node\\n"}', 1)
    )
    assert main(["validate"]) == 2
    assert "models[0].launch.image: 'vllm-node\\n' is not valid" in capsys.readouterr().err


def test_an_enterprise_runners_own_api_is_trusted_in_both_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = {"GITHUB_API_URL": "https://ghe.example/api/v3"}
    for url in ("https://ghe.example/api/v3", "https://ghe.example"):
        resolved = resolve(settings_file=None, environ=runner | {"SPARK_NIGHTLY_GITHUB_API_URL": url}, cli=[])
        assert resolved.settings.github_api_url == url


def test_a_working_folder_file_saying_false_or_overridden_by_the_environment_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spark-nightly.yaml").write_text("version: 1\ngithub:\n  allow_custom_api: false\n")
    assert resolve(settings_file=None, environ={}, cli=[]).settings.github_allow_custom_api is False
    (tmp_path / "spark-nightly.yaml").write_text("version: 1\ngithub:\n  allow_custom_api: true\n")
    opted = resolve(settings_file=None, environ={"SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API": "1"}, cli=[])
    assert opted.settings.github_allow_custom_api is True


def test_the_nights_tokens_never_reach_the_code_under_test() -> None:
    """Servers, the smoke probe and the canary run tonight's wheels, which log their environment as they please."""
    env = {"HF_TOKEN": "hf_x", "GITHUB_TOKEN": "ghs_x", "GH_TOKEN": "x", "SPARK_NIGHTLY_TOKEN": "x", "PATH": "/bin"}
    assert procs.without_secrets(env | {"HUGGING_FACE_HUB_TOKEN": "hf_y"}) == {"PATH": "/bin"}
