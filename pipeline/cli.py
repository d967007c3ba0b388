"""The spark-nightly command line: subcommands, global options, and the error tree mapped to exit codes."""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from pipeline import __version__
from pipeline.commands import (
    bench,
    build,
    doctor,
    engine,
    golden,
    inspect,
    nightly,
    pipeline_failed,
    releases,
    wheelhouse,
)
from pipeline.config.bundle import Config, ConfigPaths, load_config
from pipeline.config.recipes import ImportOptions, give_unique_ids, import_recipe
from pipeline.config.thresholds import Reference
from pipeline.errors import ConfigError, ExitCode, PipelineCrash, SparkNightlyError, UsageError
from pipeline.infra.disk_space import is_disk_full, out_of_space
from pipeline.infra.safe_files import shown
from pipeline.settings import Resolved, Settings, declarations, from_environment
from pipeline.stages.build.base_history import pinned_trees

Handler = Callable[[argparse.Namespace, Resolved], int]


# `--set` before the subcommand and after it: argparse gives a subcommand's options a namespace of their own and
# copies it over the top level's, so one list for both would lose the first place's; the later wins per key
SET_BEFORE, SET_AFTER = "overrides_before", "overrides"


def _common_options(set_dest: str = SET_AFTER) -> argparse.ArgumentParser:
    """Options every subcommand accepts, before or after its name (SUPPRESS keeps either place's value; a flag
    given in both places takes the later)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("settings")
    group.add_argument(
        "--settings",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="settings file (default: ./spark-nightly.yaml if present, or $SPARK_NIGHTLY_SETTINGS)",
    )
    group.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        dest=set_dest,
        default=argparse.SUPPRESS,
        help="override one setting, e.g. --set sources.vllm.prs=12345,12346 (repeatable)",
    )
    for decl in declarations():
        if decl.flag:
            group.add_argument(
                decl.flag,
                dest=f"flag_{decl.name}",
                metavar=decl.name.upper(),
                default=argparse.SUPPRESS,
                choices=decl.choices or None,
                help=f"{decl.help} (setting {decl.key})",
            )
    group.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="spark-nightly",
        parents=[_common_options(SET_BEFORE)],
        description="Nightly regression gate for vLLM + FlashInfer wheels on the DGX Spark.",
        epilog="Exit codes: " + "; ".join(f"{code.value} {code.meaning()}" for code in ExitCode) + ".",
    )
    parser.add_argument("--version", action="version", version=f"spark-nightly {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="check all configuration and list every issue",
        description="Check models.yaml, thresholds/, golden/ and the settings; "
        "print every issue as file:line:column, exit 2 if any.",
    )
    validate.set_defaults(handler=_validate)
    show = commands.add_parser(
        "show",
        parents=[common],
        help="print effective settings (with sources) and the matrix",
        description="Print every setting with the place its value came from, then the matrix "
        "entries of the selected profile.",
    )
    show.add_argument("--all", action="store_true", help="show the entries of every profile")
    show.set_defaults(handler=_show)
    recipe = commands.add_parser(
        "import-recipe",
        parents=[common],
        help="convert recipes into models.yaml entries",
        description="Convert spark-vllm-docker (v1) and sparkrun (v2) recipes into models.yaml "
        "entries on stdout; what could not be carried over is reported on stderr.",
    )
    recipe.add_argument("files", nargs="+", metavar="FILE", help="recipe YAML files")
    recipe.add_argument(
        "--golden", default="spark-general", help="golden set for the new entries (default: %(default)s)"
    )
    recipe.set_defaults(handler=_import_recipe)
    for module, name in (
        (engine, "engine"),
        (golden, "golden"),
        (bench, "bench"),
        (build, "build"),
        (inspect, "inspect"),
        (nightly, "nightly"),
        (doctor, "doctor"),
        (wheelhouse, "wheelhouse"),
    ):
        module.add_parser(commands, common)
        commands.choices[name].set_defaults(handler=_with_config(module.run))
    pipeline_failed.add_parser(commands, common)  # it must work when the configuration is what broke
    commands.choices["pipeline-failed"].set_defaults(
        handler=lambda args, resolved: pipeline_failed.run(args, resolved.settings)
    )
    for name, runner in releases.add_parsers(commands, common).items():
        commands.choices[name].set_defaults(handler=_with_config(runner))
    return parser


def _with_config(handler: Callable[[argparse.Namespace, Settings, Config], int]) -> Handler:
    """A handler that needs validated configuration: validate first, so a bad file stops everything."""

    def wrapped(args: argparse.Namespace, resolved: Resolved) -> int:
        return handler(args, resolved.settings, load_config(config_paths(resolved)))

    return wrapped


def _cli_values(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    values = []
    for decl in declarations():
        flagged = getattr(args, f"flag_{decl.name}", None)
        if flagged is not None:
            values.append((decl.key, flagged, f"{decl.flag} {flagged}"))
    for override in [*getattr(args, SET_BEFORE, []), *getattr(args, SET_AFTER, [])]:
        key, sep, value = override.partition("=")
        if not sep:
            raise UsageError(f"--set {override!r} needs KEY=VALUE")
        values.append((key.strip(), value, f"--set {key.strip()}"))
    return values


def config_paths(resolved: Resolved) -> ConfigPaths:
    root = resolved.settings.places.config
    return ConfigPaths(
        models=root / "models.yaml",
        thresholds=root / "thresholds",
        golden=root / "golden",
        cluster=resolved.settings.places.cluster,
    )


def _validate(args: argparse.Namespace, resolved: Resolved) -> int:
    config = load_config(config_paths(resolved))
    entries, profiles = len(config.matrix.entries), len(config.matrix.profiles)
    cells = sum(len(e.bench.cells()) for e in config.matrix.entries)
    print(
        f"ok: {entries} matrix entries on {profiles} profiles, {cells} benchmark cells with references, "
        f"{len(config.golden)} golden sets"
    )
    for profile in config.matrix.profiles.values():
        clustered = [e.id for e in config.matrix.for_profile(profile.name) if e.topology == "cluster"]
        if profile.cluster is not None:
            hosts = ", ".join(n.on_link for n in profile.cluster.nodes)
            print(f"cluster of profile {profile.name}: {hosts}, from {profile.cluster.source}")
        elif clustered:
            print(
                f"note: profile {profile.name}: no cluster file ({resolved.settings.cluster_file}): "
                f"{', '.join(clustered)} skipped on this runner (docs/runbook.md, 'Adding a second Spark')"
            )
    for history in pinned_trees(resolved.settings, config.matrix.profiles[resolved.settings.profile]):
        if history.holds is not True:
            print(f"note: profile {resolved.settings.profile}: {history.line()}")
    return 0


def _show(args: argparse.Namespace, resolved: Resolved) -> int:
    rows = resolved.rows()
    width = max(len(key) for key, _, _ in rows)
    value_width = min(max(len(value) for _, value, _ in rows), 48)
    print("settings (value, then where it came from):")
    for key, value, source in rows:
        print(f"  {key:<{width}}  {value:<{value_width}}  {source}")
    config = load_config(config_paths(resolved))
    _print_matrix(config, None if args.all else resolved.settings.profile)
    return 0


def _print_matrix(config: Config, profile: str | None) -> None:
    entries = config.matrix.entries if profile is None else config.matrix.for_profile(profile)
    print(f"\nmatrix ({'all profiles' if profile is None else 'profile ' + profile}, {len(entries)} entries):")
    for entry in entries:
        hardware = config.matrix.profiles[entry.profile].hardware
        topology = "solo" if entry.topology == "solo" else f"cluster x{entry.nodes}"
        print(f"  {entry.id}  ({'required' if entry.required else 'optional'})")
        print(f"    model    {entry.model}" + (f"@{entry.revision}" if entry.revision else ""))
        print(f"    launch   {entry.launch.target} ({entry.launch.entrypoint}), {topology}, profile {entry.profile}")
        serve = " ".join(f"{k}={v}" for k, v in entry.serve.items())
        print(f"    serve    {serve or '(vLLM defaults)'}")
        print(f"    golden   {entry.golden} ({len(config.golden[entry.golden].prompts)} prompts)")
        refs = config.thresholds[(hardware, entry.id)].cells
        cells = ", ".join(f"{c.name}={_reference_text(refs[c.name])}" for c in entry.bench.cells())
        print(f"    cells    {cells}")


def _reference_text(ref: Reference) -> str:
    if ref.ref is None:
        return "pending"
    return f"{ref.ref:g} {ref.unit}" + (" (xfail)" if ref.xfail else "")


def _import_recipe(args: argparse.Namespace, resolved: Resolved) -> int:
    options = ImportOptions(
        profile=resolved.settings.profile if resolved.sources["profile"] != "default" else "spark", golden=args.golden
    )
    imported, issues = [], []
    for file in args.files:
        try:
            imported.append(import_recipe(Path(file), options))
        except ConfigError as exc:
            issues.extend(exc.issues)
    give_unique_ids(imported, taken=_matrix_ids(resolved))
    for recipe in imported:
        for line in recipe.dropped:
            print(f"{recipe.source}: dropped: {shown(line)}", file=sys.stderr)
        for line in recipe.notes:
            print(f"{recipe.source}: note: {shown(line)}", file=sys.stderr)
    if imported:
        entries = [recipe.entry for recipe in imported]
        sys.stdout.write(yaml.safe_dump({"models": entries}, sort_keys=False, allow_unicode=True, width=100))
    if issues:
        raise ConfigError(issues)
    return 0


def _matrix_ids(resolved: Resolved) -> set[str]:
    """The ids models.yaml already uses (none when there is no valid models.yaml here): imports must not reuse them."""
    try:
        return {entry.id for entry in load_config(config_paths(resolved)).matrix.entries}
    except ConfigError:
        return set()


def _install_signal_handlers() -> tuple[Any, Any]:
    """Ctrl-C and a runner's SIGTERM both end the run cleanly (servers stopped, nothing half-written).

    A process started in the background by a non-interactive shell inherits SIGINT as ignored;
    restore Python's handler so Ctrl-C and `kill -INT` always reach our clean-up code.
    """

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    return signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, terminate)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    previous = _install_signal_handlers()
    try:
        return _run(argv)
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    if not getattr(args, "handler", None):
        parser.print_help()
        return ExitCode.USAGE
    handler: Handler = args.handler
    resolved: Resolved | None = None
    try:
        resolved = from_environment(getattr(args, "settings", None), _cli_values(args))
        for note in resolved.notes:
            print(note, file=sys.stderr)
        return handler(args, resolved)
    except SparkNightlyError as exc:
        if debug:
            traceback.print_exc()
        for line in exc.lines():
            print(line, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # a bug of ours: say so, never blame the wheels (a full disk is the host's)
        places = resolved.settings.places.written() if resolved is not None else []
        crash: SparkNightlyError = (
            out_of_space(exc, places)
            if is_disk_full(exc)
            else PipelineCrash(f"internal error: {type(exc).__name__}: {exc}")
        )
        if debug:
            traceback.print_exc()
        for line in crash.lines():
            print(line, file=sys.stderr)
        return crash.exit_code
