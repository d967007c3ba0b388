"""Pipeline settings, each declared once, layered default < file < SPARK_NIGHTLY_* env < command line.

Every effective value keeps its source ("default", "spark-nightly.yaml:4", "env SPARK_NIGHTLY_X",
"--set x=y"), so `spark-nightly show` can say where each value came from.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config.load import Document, display_name, parse_yaml, read_text, schema_issues, suggest
from pipeline.errors import ConfigError, ConfigIssue
from pipeline.infra.procs import OWNER_ENV  # marks spark-nightly's own processes; not a setting
from pipeline.infra.safe_files import shown
from pipeline.places import Places, StateDir

ENV_PREFIX = "SPARK_NIGHTLY_"
SETTINGS_FILE_ENV = "SPARK_NIGHTLY_SETTINGS"
NOT_SETTINGS = frozenset({SETTINGS_FILE_ENV, OWNER_ENV})
DEFAULT_SETTINGS_FILE = "spark-nightly.yaml"


# Values that reach an argv position, a Dockerfile line or a URL: no leading '-' (it would be read as an option), no
# whitespace or control character (it would split an argument or start a new Dockerfile line).
ARGUMENT = r"^[A-Za-z0-9_./~+@:=%^][^\s]*$"
IMAGE = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"
REPOSITORY = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"
PULL_REQUEST = r"^(#?[1-9][0-9]*|https?://[^\s/]+/[^\s/]+/[^\s/]+/pull/[1-9][0-9]*/?)(@[0-9a-fA-F]{40})?$"
ENV_NAME = r"^[A-Z_][A-Z0-9_]*$"
# where a GitHub token may be sent without an explicit opt-in, and the variables it may be read from
PUBLIC_API = "https://api.github.com"
TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN", "SPARK_NIGHTLY_TOKEN")
RUNNER_API_ENV = "GITHUB_API_URL"  # set by Actions to the runner's own GitHub (github.com or an Enterprise server)


def _setting(
    default: Any,
    help: str,
    *,
    key: str,
    choices: tuple[str, ...] = (),
    flag: str | None = None,
    secret: bool = False,
    pattern: str | None = None,
    minimum: int | None = None,
) -> Any:
    metadata = {"key": key, "help": help, "choices": choices, "flag": flag, "secret": secret}
    return field(default=default, metadata=metadata | {"pattern": pattern, "minimum": minimum})


@dataclass(frozen=True)
class Settings:
    """The effective settings of one run."""

    profile: str = _setting(
        "cpu",
        "hardware profile of models.yaml to run",
        key="profile",
        choices=("cpu", "cpu-built", "spark", "gpu", "gpu-built"),
        flag="--profile",
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
    wheelhouse_dir: str = _setting(
        "",
        "a wheelhouse (`spark-nightly wheelhouse`) the night's runtimes and package weights are installed from;"
        " empty: none",
        key="paths.wheelhouse",
    )
    offline: bool = _setting(
        False,
        "the runner has no network: runtimes, the judge's environment and package weights come from paths.wheelhouse"
        " alone and Hub weights from the cache; what is missing is one error before anything boots",
        key="network.offline",
    )
    base_python: str = _setting(
        "",
        "the interpreter whose packages (torch, CUDA) the night's runtimes are layered over, a path or a command;"
        " empty: the profile's candidate.base, if any",
        key="candidate.base_python",
        pattern=ARGUMENT,
    )
    cluster_file: str = _setting(
        "~/.config/spark-nightly/cluster.yaml",
        "this runner's hosts for cluster entries (cluster.yaml); without the file, cluster entries are skipped",
        key="paths.cluster",
    )
    vllm_repo: str = _setting(
        "https://github.com/vllm-project/vllm.git",
        "vLLM repository to build",
        key="sources.vllm.repo",
        pattern=ARGUMENT,
    )
    vllm_ref: str = _setting("main", "vLLM branch or commit to build", key="sources.vllm.ref", pattern=ARGUMENT)
    vllm_prs: tuple[str, ...] = _setting(
        (),
        "unmerged vLLM PRs to graft (numbers or URLs, #N@SHA pins a head)",
        key="sources.vllm.prs",
        pattern=PULL_REQUEST,
    )
    flashinfer_repo: str = _setting(
        "https://github.com/flashinfer-ai/flashinfer.git",
        "FlashInfer repository to build",
        key="sources.flashinfer.repo",
        pattern=ARGUMENT,
    )
    flashinfer_ref: str = _setting(
        "main", "FlashInfer branch or commit to build", key="sources.flashinfer.ref", pattern=ARGUMENT
    )
    flashinfer_prs: tuple[str, ...] = _setting(
        (), "unmerged FlashInfer PRs to graft", key="sources.flashinfer.prs", pattern=PULL_REQUEST
    )
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
        minimum=0,
    )
    build_ccache_size: str = _setting(
        "50G",
        "ccache's size (compressed), as the community's Spark builds keep it",
        key="build.ccache_size",
        pattern=r"^\d+(\.\d+)?[KMGT]?$",
    )
    build_min_free_gib: int = _setting(
        80,
        "free disk (GiB) a CUDA build needs before it starts (the source, objects, wheels and the compiler cache)",
        key="build.min_free_gib",
        minimum=0,
    )
    cache_runtimes_max_gib: int = _setting(
        200,
        "disk (GiB) the cached runtimes may take; past it a night's end removes the least recently used, never one"
        " used within a day (0: keep every one)",
        key="cache.runtimes_max_gib",
        minimum=0,
    )
    cache_wheels_max_gib: int = _setting(
        100,
        "disk (GiB) the cached wheels may take; past it a night's end removes the least recently used, never one"
        " used within a day nor a native build later nights overlay on (0: keep every one)",
        key="cache.wheels_max_gib",
        minimum=0,
    )
    build_image: str = _setting(
        "nvidia/cuda:13.0.1-devel-ubuntu24.04",
        "base of the build image (docker mode)",
        key="build.image",
        pattern=IMAGE,
    )
    publish_target: str = _setting(
        "local", "where passing nights are published", key="publish.target", choices=("local", "github")
    )
    publish_local_dir: str = _setting("releases", "the local release store", key="publish.local_dir")
    publish_repo: str = _setting(
        "", "GitHub repository (owner/name) for releases", key="publish.repo", pattern=REPOSITORY
    )
    publish_keep_nights: int = _setting(
        30, "nights kept by retention (plus those marked to keep)", key="publish.keep_nights", minimum=1
    )
    culprit_max_builds: int = _setting(
        6,
        "extra builds a failing night with grafted PRs may spend finding the PR that broke it (0: no search)",
        key="culprit.max_builds",
        minimum=0,
    )
    culprit_bisect_steps: int = _setting(
        8,
        "builds a failing night whose main alone fails may spend bisecting main since the last good night (0: none)",
        key="culprit.bisect_steps",
        minimum=0,
    )
    culprit_step_boots: int = _setting(
        3,
        "boots a trial or bisection step may make of its build for a perf cell, where one server fits, before it is "
        "left undecided as neither like tonight's last confirmed build nor like tonight's build",
        key="culprit.step_boots",
        minimum=1,
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
    alert_repo: str = _setting(
        "", "GitHub repository (owner/name) for alert issues", key="alert.repo", pattern=REPOSITORY
    )
    alert_webhook_url: str = _setting(
        "", "Slack- or Discord-compatible webhook URL", key="alert.webhook_url", secret=True
    )
    github_api_url: str = _setting(
        PUBLIC_API,
        "GitHub API base URL: https://api.github.com or the runner's own $GITHUB_API_URL, unless"
        " github.allow_custom_api",
        key="github.api_url",
        pattern=r"^https?://[^\s/@]+(/[^\s]*)?$",
    )
    github_token_env: str = _setting(
        "GITHUB_TOKEN",
        "name of the environment variable holding the GitHub token: GITHUB_TOKEN, GH_TOKEN or SPARK_NIGHTLY_TOKEN,"
        " unless github.allow_custom_api",
        key="github.token_env",
        pattern=ENV_NAME,
    )
    github_allow_custom_api: bool = _setting(
        False,
        "send the token to another github.api_url (plain http included) or read it from another variable; never"
        " taken from a spark-nightly.yaml found in the working folder",
        key="github.allow_custom_api",
    )

    @property
    def places(self) -> Places:
        """The folders and files the path settings name, `~` expanded: the only way code reaches them."""
        return Places(
            config=Path(self.config_dir).expanduser(),
            runs=Path(self.runs_dir).expanduser(),
            wheels=Path(self.wheels_dir).expanduser(),
            cache=Path(self.cache_dir).expanduser(),
            releases=Path(self.publish_local_dir).expanduser(),
            cluster=Path(self.cluster_file).expanduser(),
            state=StateDir(Path(self.state_dir).expanduser()),
            wheelhouse=Path(self.wheelhouse_dir).expanduser() if self.wheelhouse_dir else None,
        )


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
    pattern: str | None = None
    minimum: int | None = None

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
            Declared(
                f.name,
                meta["key"],
                meta["help"],
                f.default,
                kind,
                meta["choices"],
                meta["flag"],
                meta["secret"],
                meta["pattern"],
                meta["minimum"],
            )
        )
    return out


@dataclass(frozen=True)
class Resolved:
    """The effective settings and where each value came from."""

    settings: Settings
    sources: Mapping[str, str]
    notes: tuple[str, ...] = ()  # warnings to show once, before the command runs

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
            items: dict[str, Any] = {"type": ["string", "integer"]}
            leaf_schema |= {"type": "array", "items": items | ({"pattern": decl.pattern} if decl.pattern else {})}
        else:
            leaf_schema["type"] = decl.kind
        if decl.choices:
            leaf_schema["enum"] = list(decl.choices)
        if decl.pattern and decl.kind == "string":
            # an empty string is 'not set' (publish.repo, alert.repo); anything else must be a safe value
            leaf_schema["pattern"] = f"(^$)|({decl.pattern})"
        if decl.minimum is not None:
            leaf_schema["minimum"] = decl.minimum
        node["properties"][leaf] = leaf_schema
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "spark-nightly settings file"} | root


def _coerce(decl: Declared, raw: Any, origin: str) -> Any:
    """Turn a value from a file, env var or --set into the declared type, or raise ConfigError."""

    def bad(message: str) -> ConfigError:
        return ConfigError([ConfigIssue(origin, 0, 0, "", message)])  # the origin already names the key

    if decl.kind == "list":
        items = raw if isinstance(raw, list) else [part.strip() for part in str(raw).split(",")]
        values = tuple(str(item) for item in items if str(item))
        for value in values:
            if decl.pattern and not re.fullmatch(decl.pattern, value):
                raise bad(f"'{shown(value)}' is not a valid item ({decl.help})")
        return values
    if decl.kind == "boolean":
        if isinstance(raw, bool):
            return raw
        if str(raw).lower() in {"1", "true", "yes"}:
            return True
        if str(raw).lower() in {"0", "false", "no", ""}:
            return False
        raise bad(f"expected true or false, got '{shown(str(raw))}'")
    if decl.kind == "integer":
        try:
            number = int(raw)
        except (TypeError, ValueError):
            raise bad(f"expected an integer, got '{shown(str(raw))}'") from None
        if decl.minimum is not None and number < decl.minimum:
            raise bad(f"{number} is less than the minimum of {decl.minimum}")
        return number
    value = str(raw)
    if decl.choices and value not in decl.choices:
        raise bad(f"'{shown(value)}' is not allowed; {suggest(value, list(decl.choices))}")
    if decl.pattern and value and not re.fullmatch(decl.pattern, value):
        raise bad(f"'{shown(value)}' is not valid: no leading '-', spaces or control characters ({decl.help})")
    return value


def resolve(*, settings_file: str | None, environ: Mapping[str, str], cli: Sequence[tuple[str, str, str]]) -> Resolved:
    """Layer defaults, the settings file, SPARK_NIGHTLY_* variables and CLI values (key, value, origin)."""
    decls = {d.key: d for d in declarations()}
    values: dict[str, Any] = {d.name: d.default for d in decls.values()}
    sources: dict[str, str] = {d.name: "default" for d in decls.values()}
    issues: list[ConfigIssue] = []

    def apply(key: str, raw: Any, origin: str, doc: Document | None = None) -> None:
        try:
            values[decls[key].name] = _coerce(decls[key], raw, origin)
            sources[decls[key].name] = origin
        except ConfigError as exc:
            if doc is None:
                issues.extend(exc.issues)
            else:  # located in the file, with its path, like every other issue of a file
                issues.extend(doc.issue(key.split("."), i.message) for i in exc.issues)

    explicit = settings_file or environ.get(SETTINGS_FILE_ENV)
    doc = _settings_document(settings_file, environ)
    notes: list[str] = []
    if doc is not None:
        if not explicit:
            notes.append(
                f"settings: using {doc.file} found in the working folder; name it with --settings (or "
                f"{SETTINGS_FILE_ENV}) to make that explicit"
            )
        for key in decls:
            found = _lookup(doc.data, key.split("."))
            if found is not None:
                line, _ = doc.locate(key.split("."))
                apply(key, found, f"{doc.file}:{line}", doc)
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
    if not issues:
        implicit = doc if doc is not None and not explicit else None
        issues.extend(_rule_issues(values, sources, environ, doc, implicit))
    if issues:
        raise ConfigError(issues)
    return Resolved(Settings(**values), sources, tuple(notes))


def _rule_issues(
    values: Mapping[str, Any],
    sources: Mapping[str, str],
    environ: Mapping[str, str],
    doc: Document | None,
    implicit: Document | None,
) -> list[ConfigIssue]:
    """Rules across settings: a GitHub target needs its repository, and where a token may be sent."""
    keys = {d.name: d.key for d in declarations()}

    def issue(name: str, message: str) -> ConfigIssue:
        origin = sources[name]
        if doc is not None and origin.startswith(f"{doc.file}:"):
            return doc.issue(keys[name].split("."), message)
        return ConfigIssue(origin, 0, 0, keys[name] if origin == "default" else "", message)

    found = []
    for target, repo in (("publish_target", "publish_repo"), ("alert_target", "alert_repo")):
        if values[target] == "github" and not values[repo]:
            found.append(issue(target, f"{keys[target]} is github but {keys[repo]} is not set; set it to owner/name"))
    hook = values["alert_webhook_url"]
    if values["alert_target"] == "webhook" and not hook:
        found.append(issue("alert_target", "alert.target is webhook but alert.webhook_url is not set"))
    if hook and not re.match(r"^https?://[^\s/]+", hook):  # the URL is a secret: never quoted
        found.append(issue("alert_webhook_url", "alert.webhook_url is not an http(s) URL (https://hooks...)"))
    for name in ("vllm_repo", "vllm_ref", "flashinfer_repo", "flashinfer_ref"):
        if not values[name]:
            found.append(issue(name, f"{keys[name]} is empty: name the repository URL or the branch/commit to build"))
    from_implicit = implicit is not None and sources["github_allow_custom_api"].startswith(f"{implicit.file}:")
    if implicit is not None and from_implicit and values["github_allow_custom_api"]:
        found.append(
            implicit.issue(
                ["github", "allow_custom_api"],
                "not taken from a settings file found in the working folder: name the file with --settings, or set "
                "SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API=1",
            )
        )
    elif not values["github_allow_custom_api"]:
        runner = environ.get(RUNNER_API_ENV, "").rstrip("/")
        # the runner's own GitHub: its API URL, or (as github3 takes it) the Enterprise server's base URL
        trusted = {PUBLIC_API} | ({runner, runner.removesuffix("/api/v3")} if runner.startswith("https://") else set())
        if values["github_api_url"].rstrip("/") not in trusted:
            found.append(
                issue(
                    "github_api_url",
                    f"'{shown(values['github_api_url'])}' is not {' or '.join(sorted(trusted))}: the GitHub token would"
                    " be sent there; set github.allow_custom_api (not from the working folder's file) if you mean it",
                )
            )
        if values["github_token_env"] not in TOKEN_VARIABLES:
            found.append(
                issue(
                    "github_token_env",
                    f"{values['github_token_env']!r} is not one of {', '.join(TOKEN_VARIABLES)}: set"
                    " github.allow_custom_api (not from the working folder's file) to read the token from another"
                    " variable",
                )
            )
    return found


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
