"""`spark-nightly engine up|check`: serve one matrix entry through the harness, or prove it boots and answers."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError, HostCannotRun, UsageError
from pipeline.infra.openai_client import OpenAIClient
from pipeline.infra.runtime import Runtime, runtime_root
from pipeline.infra.weights import model_reference, package_folder
from pipeline.places import CacheDir
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.prove.boot import (
    Candidate,
    boot,
    placeholder_candidate,
    plan_launch,
    prepare_candidate,
)
from pipeline.stages.prove.golden_run import ServerLog
from pipeline.stages.prove.smoke import smoke
from pipeline.stages.prove.supplies import night_workshop


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    engine = commands.add_parser(
        "engine",
        parents=[common],
        help="serve or check one matrix entry",
        description="Run one models.yaml entry through the engine harness.",
    )
    actions = engine.add_subparsers(dest="engine_action", metavar="ACTION", required=True)
    for name, text in (
        ("up", "boot the entry and print its URL until Ctrl-C"),
        ("check", "set up, smoke-check, boot, answer one greedy prompt, stop"),
    ):
        action = actions.add_parser(name, parents=[common], help=text, description=text)
        action.add_argument("model_id", metavar="MODEL_ID", help="an id from models.yaml")
        action.add_argument("--port", type=int, default=None, help="port to serve on (default: a free one)")
        action.add_argument("--dry-run", action="store_true", help="print the exact commands, run nothing")


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    entry = entry_named(config, args.model_id)
    profile = config.matrix.profiles[entry.profile]
    cache_dir = settings.places.cache
    if args.dry_run:
        print(
            plan_launch(
                entry,
                dry_candidate(entry, config, cache_dir),
                model_ref=dry_model_ref(entry, cache_dir),
                port=args.port or 8000,
                cache_dir=cache_dir,
            ).render()
        )
        return 0
    log_dir = settings.places.runs / time.strftime("engine-%Y%m%d-%H%M%S") / entry.id
    candidate = ready_to_boot(entry, profile, settings, log_dir)
    if candidate.runtime is not None:
        needed, kept = entry.launch.entrypoint == "cli", CacheDir(cache_dir).natives_checked
        report = smoke(candidate.runtime, profile, log_dir, entry_point_needed=needed, kept=kept)
        for check in report.checks:
            mark = "ok  " if check.ok else ("FAIL" if check.blocking else "warn")
            print(f"smoke {mark} {check.name}: {check.detail}")
        if not report.passed and report.reason:
            raise EngineError(f"smoke failed for {entry.id}: {report.reason}")
        if report.host_lack:
            raise HostCannotRun(f"this host cannot run {entry.id}'s candidate: {report.host_lack}")
    with boot(entry, candidate, cache_dir=cache_dir, log_dir=log_dir, port=args.port, say=to_stderr) as server:
        print(f"ready: {server.base_url} serving {server.model} (boot {server.boot_s:.1f} s, log {server.log_path})")
        if args.engine_action == "check":
            return _first_answer(entry, config, server.client, server.model)
        print("serving until Ctrl-C", flush=True)
        while True:
            time.sleep(3600)  # Ctrl-C raises KeyboardInterrupt here; boot() stops the server on the way out


def _first_answer(entry: ModelEntry, config: Config, client: OpenAIClient, model: str) -> int:
    prompt = config.golden[entry.golden].prompts[0]
    started = time.perf_counter()
    answer = client.chat(
        model, [{"role": "user", "content": prompt.prompt}], max_tokens=prompt.max_tokens, top_logprobs=1
    )
    elapsed = time.perf_counter() - started
    print(f"first answer ({answer.completion_tokens} tokens in {elapsed:.2f} s): {prompt.prompt!r} -> {answer.text!r}")
    return 0


def entry_named(config: Config, model_id: str) -> ModelEntry:
    try:
        return config.matrix.entry(model_id)
    except KeyError:
        ids = ", ".join(e.id for e in config.matrix.entries)
        raise UsageError(f"no entry '{model_id}' in models.yaml (entries: {ids})") from None


def dry_candidate(entry: ModelEntry, config: Config, cache_dir: Path) -> Candidate:
    profile = config.matrix.profiles[entry.profile]
    if profile.candidate_from != "pip":
        return placeholder_candidate(profile)
    root = runtime_root(profile.name, profile.candidate_requirements, profile.candidate_remove, cache_dir)
    return Candidate(profile, runtime=Runtime(root, root.name, profile.candidate_requirements, ()))


def ready_to_boot(entry: ModelEntry, profile: Profile, settings: Settings, log_dir: Path) -> Candidate:
    """The entry's weights and its candidate, made from the runner's supply (its wheelhouse, offline setting and
    base) as a night makes them: a boot makes neither."""
    shop = night_workshop(settings, profile, to_stderr)
    model_reference(entry, shop, log_dir)
    return prepare_candidate(profile, shop, log_dir)


def dry_model_ref(entry: ModelEntry, cache_dir: Path) -> str:
    if entry.weights.source == "path" and entry.weights.path:
        return entry.weights.path
    return entry.model if entry.weights.source == "hub" else str(package_folder(entry, cache_dir))


@contextmanager
def served(
    url: str | None, settings: Settings, config: Config, entry: ModelEntry, label: str
) -> Iterator[tuple[OpenAIClient, str, ServerLog | None]]:
    """A client, the model reference and the server's log: for a running server at `url` (whose log is not ours),
    or for the entry booted here."""
    cache_dir = settings.places.cache
    log_dir = settings.places.runs / time.strftime(f"{label}-%Y%m%d-%H%M%S") / entry.id
    profile = config.matrix.profiles[entry.profile]
    shop = night_workshop(settings, profile, to_stderr)  # a runner's wheelhouse, offline setting and base, as a night's
    model_ref = model_reference(entry, shop, log_dir)  # what the entry configures
    if url:
        with OpenAIClient(url) as client:
            yield client, model_ref, None
        return
    candidate = prepare_candidate(profile, shop, log_dir)
    with boot(entry, candidate, cache_dir=cache_dir, log_dir=log_dir, say=to_stderr) as server:
        yield server.client, model_ref, ServerLog(server.log_path, profile.accelerator)
