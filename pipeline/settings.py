"""Pipeline settings, each declared once, layered default < file < SPARK_NIGHTLY_* env < command line.

Every effective value keeps its source ("default", "spark-nightly.yaml:4", "env SPARK_NIGHTLY_X",
"--set x=y"), so `spark-nightly show` can say where each value came from.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config.load import Document, display_name, parse_yaml, read_text, schema_issues, suggest
from pipeline.errors import ConfigError, ConfigIssue
from pipeline.infra.procs import OWNER_ENV  # marks spark-nightly's own processes; not a setting

ENV_PREFIX = "SPARK_NIGHTLY_"
SETTINGS_FILE_ENV = "SPARK_NIGHTLY_SETTINGS"
NOT_SETTINGS = frozenset({SETTINGS_FILE_ENV, OWNER_ENV})
DEFAULT_SETTINGS_FILE = "spark-nightly.yaml"


def _setting(
    default: Any, help: str, *, key: str, choices: tuple[str, ...] = (), flag: str | None = None, secret: bool = False
) -> Any:
    return field(
        default=default, metadata={"key": key, "help": help, "choices": choices, "flag": flag, "secret": secret}
    )


@dataclass(frozen=True)
class Settings:
    """The effective settings of one run."""

    profile: str = _setting(
        "cpu", "hardware profile of models.yaml to run", key="profile", choices=("cpu", "spark"), flag="--profile"
    )
    config_dir: str = _setting(".", "directory holding models.yaml, thresholds/ and golden/", key="paths.config")
    runs_dir: str = _setting("runs", "where each run keeps its plan, logs, results and reports", key="paths.runs")
    wheels_dir: str = _setting("wheels", "where built wheels are written", key="paths.wheels")
    state_dir: str = _setting(
        "~/.local/state/spark-nightly",
        "what nights remember, outside any checkout: the performance history, drift references, alerts, the last"
        " good night and each cell's last confirmed build",
        key="paths.state",
    )
    cache_dir: str = _setting("~/.cache/spark-nightly", "mirrors, runtimes, converted models", key="paths.cache")
    vllm_repo: str = _setting(
        "https://github.com/vllm-project/vllm.git", "vLLM repository to build", key="sources.vllm.repo"
    )
    vllm_ref: str = _setting("main", "vLLM branch or commit to build", key="sources.vllm.ref")
    vllm_prs: tuple[str, ...] = _setting(
        (), "unmerged vLLM PRs to graft (numbers or URLs, #N@SHA pins a head)", key="sources.vllm.prs"
    )
    flashinfer_repo: str = _setting(
        "https://github.com/flashinfer-ai/flashinfer.git",
        "FlashInfer repository to build",
        key="sources.flashinfer.repo",
    )
    flashinfer_ref: str = _setting("main", "FlashInfer branch or commit to build", key="sources.flashinfer.ref")
    flashinfer_prs: tuple[str, ...] = _setting((), "unmerged FlashInfer PRs to graft", key="sources.flashinfer.prs")
    build_mode: str = _setting(
        "host",
        "build on the host or inside the rendered build image",
        key="build.mode",
        choices=("host", "docker"),
    )
    build_max_jobs: int = _setting(
        0,
        "parallel compile jobs (0: half the cores, as a full vLLM build runs out of memory with more)",
        key="build.max_jobs",
    )
    build_image: str = _setting(
        "nvidia/cuda:13.0.1-devel-ubuntu24.04", "base of the build image (docker mode)", key="build.image"
    )
    publish_target: str = _setting(
        "local", "where passing nights are published", key="publish.target", choices=("local", "github")
    )
    publish_local_dir: str = _setting("releases", "the local release store", key="publish.local_dir")
    publish_repo: str = _setting("", "GitHub repository (owner/name) for releases", key="publish.repo")
    publish_keep_nights: int = _setting(
        30, "nights kept by retention (plus those marked to keep)", key="publish.keep_nights"
    )
    culprit_max_builds: int = _setting(
        6,
        "extra builds a failing night with grafted PRs may spend finding the PR that broke it (0: no search)",
        key="culprit.max_builds",
    )
    culprit_publish: str = _setting(
        "nothing",
        "what a failing night whose culprit PRs were found publishes: nothing, or main plus the PRs that passed",
        key="culprit.publish",
        choices=("nothing", "without-culprits"),
    )
    alert_target: str = _setting(
        "local", "where regressions are raised", key="alert.target", choices=("local", "github", "webhook")
    )
    alert_repo: str = _setting("", "GitHub repository (owner/name) for alert issues", key="alert.repo")
    alert_webhook_url: str = _setting(
        "", "Slack- or Discord-compatible webhook URL", key="alert.webhook_url", secret=True
    )
    github_api_url: str = _setting("https://api.github.com", "GitHub API base URL", key="github.api_url")
    github_token_env: str = _setting(
        "GITHUB_TOKEN", "name of the environment variable holding the GitHub token", key="github.token_env"
    )

    def path(self, name: str) -> Path:
        """A path setting, with `~` expanded."""
        return Path(str(getattr(self, name))).expanduser()


@dataclass(frozen=True)
class Declared:
    """One setting's declaration, read from the Settings field."""

    name: str
    key: str
    help: str
    default: Any
    kind: str
    choices: tuple[str, ...]
    flag: str | None
    secret: bool

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.upper().replace(".", "_")


def declarations() -> list[Declared]:
    """Every setting, in declaration order."""
    out = []
    for f in dataclasses.fields(Settings):
        kind = {"str": "string", "int": "integer", "bool": "boolean"}.get(str(f.type), "list")
        meta = f.metadata
        out.append(
            Declared(f.name, meta["key"], meta["help"], f.default, kind, meta["choices"], meta["flag"], meta["secret"])
        )
    return out


@dataclass(frozen=True)
class Resolved:
    """The effective settings and where each value came from."""

    settings: Settings
    sources: Mapping[str, str]

    def rows(self) -> list[tuple[str, str, str]]:
        """(key, shown value, source) for every setting; secrets are never shown."""
        rows = []
        for decl in declarations():
            value = getattr(self.settings, decl.name)
            shown = ("(set)" if value else "(empty)") if decl.secret else _show(value)
            rows.append((decl.key, shown, self.sources[decl.name]))
        return rows


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(value) if value else "(none)"
    return str(value) if value != "" else "(empty)"


def settings_schema() -> dict[str, Any]:
    """The JSON Schema of the settings file, derived from the declarations."""
    root: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {"version": {"const": 1}}}
    for decl in declarations():
        node = root
        *parents, leaf = decl.key.split(".")
        for part in parents:
            node = node["properties"].setdefault(
                part, {"type": "object", "additionalProperties": False, "properties": {}}
            )
        leaf_schema: dict[str, Any] = {"description": decl.help}
        if decl.kind == "list":
            leaf_schema |= {"type": "array", "items": {"type": ["string", "integer"]}}
        else:
            leaf_schema["type"] = decl.kind
        if decl.choices:
            leaf_schema["enum"] = list(decl.choices)
        node["properties"][leaf] = leaf_schema
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "spark-nightly settings file"} | root


def _coerce(decl: Declared, raw: Any, origin: str) -> Any:
    """Turn a value from a file, env var or --set into the declared type, or raise ConfigError."""

    def bad(message: str) -> ConfigError:
        return ConfigError([ConfigIssue(origin, 0, 0, "", message)])  # the origin already names the key

    if decl.kind == "list":
        items = raw if isinstance(raw, list) else [part.strip() for part in str(raw).split(",")]
        return tuple(str(item) for item in items if str(item))
    if decl.kind == "integer":
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise bad(f"expected an integer, got {raw!r}") from None
    value = str(raw)
    if decl.choices and value not in decl.choices:
        raise bad(f"{value!r} is not allowed; {suggest(value, list(decl.choices))}")
    return value


def resolve(*, settings_file: str | None, environ: Mapping[str, str], cli: Sequence[tuple[str, str, str]]) -> Resolved:
    """Layer defaults, the settings file, SPARK_NIGHTLY_* variables and CLI values (key, value, origin)."""
    decls = {d.key: d for d in declarations()}
    values: dict[str, Any] = {d.name: d.default for d in decls.values()}
    sources: dict[str, str] = {d.name: "default" for d in decls.values()}
    issues: list[ConfigIssue] = []

    def apply(key: str, raw: Any, origin: str) -> None:
        try:
            values[decls[key].name] = _coerce(decls[key], raw, origin)
            sources[decls[key].name] = origin
        except ConfigError as exc:
            issues.extend(exc.issues)

    doc = _settings_document(settings_file, environ)
    if doc is not None:
        for key in decls:
            found = _lookup(doc.data, key.split("."))
            if found is not None:
                line, _ = doc.locate(key.split("."))
                apply(key, found, f"{doc.file}:{line}")
    by_env = {d.env: d.key for d in decls.values()}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name in NOT_SETTINGS:
            continue
        if name in by_env:
            apply(by_env[name], raw, f"env {name}")
        else:
            issues.append(ConfigIssue(f"env {name}", 0, 0, "", f"unknown setting; {suggest(name, sorted(by_env))}"))
    for key, raw, origin in cli:
        if key in decls:
            apply(key, raw, origin)
        else:
            issues.append(ConfigIssue(origin, 0, 0, "", f"unknown setting '{key}'; {suggest(key, sorted(decls))}"))
    if issues:
        raise ConfigError(issues)
    return Resolved(Settings(**values), sources)


def _settings_document(settings_file: str | None, environ: Mapping[str, str]) -> Document | None:
    """The parsed settings file: the given one (which must exist), else ./spark-nightly.yaml if present."""
    chosen = settings_file or environ.get(SETTINGS_FILE_ENV)
    path = Path(chosen) if chosen else Path(DEFAULT_SETTINGS_FILE)
    if not chosen and not path.exists():
        return None
    name = display_name(path)
    doc = parse_yaml(read_text(path, name), name)
    issues = schema_issues(doc, settings_schema())
    if issues:
        raise ConfigError(issues)
    return doc


def _lookup(data: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def from_environment(settings_file: str | None = None, cli: Sequence[tuple[str, str, str]] = ()) -> Resolved:
    """Settings for this process: its environment plus the given CLI values."""
    return resolve(settings_file=settings_file, environ=os.environ, cli=cli)
