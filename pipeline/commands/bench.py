"""`spark-nightly bench MODEL_ID [--url URL]`: measure an entry's cells like llama-benchy and judge each one."""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.commands.engine import dry_candidate, dry_model_ref, entry_named, ready_to_boot, served
from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import UsageError
from pipeline.infra.confirmed import BuildRef, ConfirmedBook
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.image import image_tag
from pipeline.infra.openai_client import OpenAIClient
from pipeline.infra.runtime import load_runtime
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.prove.boot import Candidate, plan_launch, restartable
from pipeline.stages.prove.health import judge_health, read_host_facts
from pipeline.stages.prove.last_good import candidate_of, runtime_build
from pipeline.stages.prove.perf import CaseResult, CellOutcome, PerfContext, Turns, measure_and_judge, render_turns
from pipeline.status import worst

# docker's reference grammar, simplified: registry/name components, then an optional :tag
_IMAGE_TAG = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?$")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    bench = commands.add_parser(
        "bench",
        parents=[common],
        help="measure an entry's benchmark cells and judge them against the references",
        description="Measure every benchmark cell of the entry the way llama-benchy does (warm-up, then runs; "
        "ttfr, est_ppt, e2e_ttft, pp/tg/peak t/s) and judge each against thresholds/. Boots the entry "
        "unless --url names a running server.",
    )
    bench.add_argument("model_id", metavar="MODEL_ID", help="an id from models.yaml")
    bench.add_argument("--url", help="a running OpenAI-compatible server to measure instead of booting one")
    bench.add_argument("--runs", type=int, help="measured runs per case (default: the entry's bench.runs)")
    bench.add_argument("--json", metavar="FILE", help="also write every raw sample and verdict as JSON")
    bench.add_argument("--record", action="store_true", help="keep healthy samples in the history (paths.state)")
    bench.add_argument(
        "--pair-with",
        metavar="last-good|TAG|RUNTIME",
        help="judge every cell by interleaved A B / B A pairs against this build, served beside the one measured: "
        "`last-good` (each cell's last confirmed build), a runtime image TAG, or a RUNTIME folder; on a profile "
        "that holds one server (servers_at_once: 1), served in turns with the entry booted here instead",
    )
    bench.add_argument(
        "--dry-run",
        action="store_true",
        help="print every boot a cell that trips would cost (in turns on a profile that holds one server), run nothing",
    )


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    entry = entry_named(config, args.model_id)
    profile = config.matrix.profiles[entry.profile]
    spec = replace(entry.bench, runs=args.runs) if args.runs else entry.bench
    pair_with = pair_target(args.pair_with, profile) if args.pair_with else None
    if args.pair_with and args.url and profile.servers_at_once < 2:
        # a running server cannot step aside, and a second one beside it does not fit: side by side, one boot of each
        # could never tell the build from the boot spread (no PASS within the profile's rules)
        raise UsageError(
            f"--pair-with with --url: profile {profile.name} holds one server at a time, so the paired build cannot be "
            "served beside the running one; drop --url and bench boots the entry and pairs it in turns"
        )
    if args.dry_run:
        print(_dry_run(entry, config, settings, pair_with))
        return 0
    before = judge_health(profile, read_host_facts())
    ctx = replace(
        PerfContext.on_host(
            settings.places.state,
            hardware=profile.hardware,
            entry=entry.id,
            run_id=time.strftime("bench-%Y%m%d-%H%M%S"),
            night=time.strftime("%Y-%m-%d"),
        ),
        record=args.record,
        pair_with=pair_with,
        pair_always=args.pair_with is not None,
    )
    log_dir = settings.places.runs / time.strftime("bench-%Y%m%d-%H%M%S") / entry.id
    if profile.accelerator == "cpu":  # the class a reference measured here is for (thresholds/: host_class, by_host)
        to_stderr(f"bench: this host's CPU class is {cpu_class()}")
    with _tonight(args.url, settings, config, entry, log_dir) as client:
        judged = measure_and_judge(
            client,
            entry,
            ctx,
            profile=profile,
            spec=spec,
            thresholds=config.thresholds_for(entry.id, cpu_class()),
            before=before,
            cache_dir=settings.places.cache,
            log_dir=log_dir,
            say=to_stderr,
        )
    results, outcomes = judged.results, judged.outcomes
    by_cell = {o.cell: o for o in outcomes}
    print(render_table(entry.served_model_name, results, by_cell))
    if args.json:
        Path(args.json).write_text(json.dumps(as_json(entry, results, by_cell), indent=1, default=str) + "\n")
    return worst(o.status for o in outcomes).exit_code


@contextmanager
def _tonight(
    url: str | None, settings: Settings, config: Config, entry: ModelEntry, log_dir: Path
) -> Iterator[OpenAIClient | Turns]:
    """The server measured: booted here and held as Turns (a build paired with it is served in turns where the
    profile holds one server, beside it where two fit, tonight's booted again between blocks of pairs), or the
    running server at `url` (which cannot step aside nor be booted again: pairs are served beside it)."""
    profile = config.matrix.profiles[entry.profile]
    if url is not None:
        if url is not None and profile.servers_at_once < 2:
            to_stderr("bench: --url: a running server cannot step aside; a paired build is served beside it")
        with served(url, settings, config, entry, "bench") as (client, _, _):
            yield client
        return
    cache_dir = settings.places.cache
    candidate = ready_to_boot(entry, profile, settings, log_dir)
    with restartable(entry, candidate, cache_dir=cache_dir, log_dir=log_dir, say=to_stderr) as serving:
        yield Turns(entry, profile, serving, cache_dir, log_dir, to_stderr, budget=profile.boot_budget.suspected)


def _dry_run(entry: ModelEntry, config: Config, settings: Settings, pair_with: BuildRef | None) -> str:
    """Tonight's launch and the paired build's, in the order a cell that trips would boot them."""
    profile = config.matrix.profiles[entry.profile]
    cache_dir = settings.places.cache
    tonight = dry_candidate(entry, config, cache_dir)
    book = ConfirmedBook(settings.places.state.confirmed)
    build = pair_with or book.newest_for_entry(profile.hardware, entry.id)
    other = candidate_of(build, profile) if build is not None else None
    if build is None or other is None:
        other = Candidate(profile, image=image_tag("last-confirmed")) if profile.candidate_from == "build" else tonight
        last_name = "each cell's last confirmed build (none in the state yet: a placeholder is shown)"
    else:
        last_name = build.describe()
    names = ("tonight's build", last_name)
    model_ref = dry_model_ref(entry, cache_dir)
    if profile.servers_at_once < 2:
        return render_turns(entry, tonight, other, names=names, model_ref=model_ref, cache_dir=cache_dir)
    plans = [
        plan_launch(entry, c, model_ref=model_ref, port=p, cache_dir=cache_dir)
        for c, p in ((tonight, 8000), (other, 8001))
    ]
    return "\n\n".join(
        [
            f"# {entry.id}: {profile.servers_at_once} servers at once; A ({last_name}) is served beside B",
            *(p.render() for p in plans),
        ]
    )


def pair_target(text: str, profile: Profile) -> BuildRef | None:
    """--pair-with: None for `last-good` (each cell's A from the book), else the runtime folder or image tag named."""
    if text == "last-good":
        return None
    folder = Path(text)
    if folder.is_dir():
        runtime = load_runtime(folder)
        if runtime is None:
            raise UsageError(f"--pair-with {text}: the folder has no complete runtime (no runtime.json or bin/python)")
        return runtime_build(runtime, folder / "lock.txt", night="", commits={})
    if text.startswith(("/", ".", "~")) or not _IMAGE_TAG.match(text):
        raise UsageError(
            f"--pair-with {text}: neither `last-good`, a runtime folder that exists, nor an image tag "
            "(name[:tag], as `docker images` lists them)"
        )
    if profile.candidate_from == "pip":
        raise UsageError(f"--pair-with {text}: profile {profile.name} serves local runtimes; name a runtime folder")
    return BuildRef(text, "image", text, "")


def _pm(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / len(finite))
    return f"{mean:.2f} ± {std:.2f}"


def render_table(model: str, results: Sequence[CaseResult], verdicts: dict[str, CellOutcome]) -> str:
    """llama-benchy's columns, then the median, the reference and the verdict of each judged cell."""
    header = [
        "model",
        "test",
        "t/s",
        "peak t/s",
        "ttfr (ms)",
        "est_ppt (ms)",
        "e2e_ttft (ms)",
        "median",
        "ref",
        "verdict",
    ]
    rows = []
    for result in results:
        for cell, metric in ((result.pp_cell, "pp_tps"), (result.tg_cell, "tg_tps")):
            verdict = verdicts.get(cell.name)
            latency = (
                [_pm(result.values(m)) for m in ("ttfr", "est_ppt", "e2e_ttft")] if metric == "pp_tps" else [""] * 3
            )
            rows.append(
                [
                    model,
                    cell.name,
                    _pm(result.values(metric)),
                    _pm(result.values("peak_tps")) if metric == "tg_tps" else "",
                    *latency,
                    f"{verdict.gate.value:.2f}" if verdict else "",
                    f"{verdict.gate.ref:g}" if verdict and verdict.gate.ref else "",
                    f"{verdict.status.value}: {verdict.reason}" if verdict else "(judged in its first case)",
                ]
            )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + " | verdict |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|---------|",
    ]
    lines += [
        "| " + " | ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=False)) + f" | {r[-1]} |" for r in rows
    ]
    extra = [
        f"{r.tg_cell.name}: client counted {r.client_generated_tokens} generated tokens, server counted "
        f"{r.server_generated_tokens:g}"
        + (f", speculative acceptance {r.spec_acceptance:.0%}" if r.spec_acceptance is not None else "")
        for r in results
        if r.server_generated_tokens is not None
    ]
    return "\n".join(lines + extra)


def as_json(entry: ModelEntry, results: Sequence[CaseResult], verdicts: dict[str, CellOutcome]) -> dict[str, Any]:
    return {
        "version": 1,
        "entry": entry.id,
        "model": entry.served_model_name,
        "cases": [
            {
                "pp_cell": r.pp_cell.name,
                "tg_cell": r.tg_cell.name,
                "client_generated_tokens": r.client_generated_tokens,
                "server_generated_tokens": r.server_generated_tokens,
                "spec_acceptance": r.spec_acceptance,
                "summary": {m: r.summary(m) for m in ("pp_tps", "tg_tps", "peak_tps", "ttfr", "est_ppt", "e2e_ttft")},
                "runs": [
                    [
                        {
                            "prompt_tokens": q.prompt_tokens,
                            "completion_tokens": q.completion_tokens,
                            "ttfr_s": q.ttfr_s,
                            "est_ppt_s": q.est_ppt_s,
                            "e2e_ttft_s": q.e2e_ttft_s,
                            "pp_tps": q.pp_tps,
                            "tg_tps": q.tg_tps,
                        }
                        for q in run.requests
                    ]
                    for run in r.runs
                ],
            }
            for r in results
        ],
        "verdicts": {
            name: {"status": v.status.value, "reason": v.reason, "median": v.gate.value, "ref": v.gate.ref}
            for name, v in verdicts.items()
        },
    }
