"""`spark-nightly golden MODEL_ID [--url URL]`: run the golden checks and print a table with the evidence."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pipeline.checks import Verdict
from pipeline.commands.engine import entry_named, served
from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry
from pipeline.infra.references import ReferenceStore
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.prove.golden_run import GoldenResult, run_golden
from pipeline.stages.prove.judge import transformers_judge
from pipeline.stages.prove.supplies import night_workshop
from pipeline.status import Status


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    golden = commands.add_parser(
        "golden",
        parents=[common],
        help="run the golden checks against an entry",
        description="Ask the entry's golden prompts and canaries greedily and judge them: answers, finite logprobs, "
        "garbage, long decode, determinism, batch invariance, identity, drift from the last good night, "
        "the serving features (tool calls, reasoning, JSON schema, images) and the kernel path. Boots the entry "
        "unless --url names a running server.",
    )
    golden.add_argument("model_id", metavar="MODEL_ID", help="an id from models.yaml")
    golden.add_argument("--url", help="a running OpenAI-compatible server to check instead of booting one")
    golden.add_argument(
        "--record", action="store_true", help="when every check passes, keep tonight's outputs as the drift reference"
    )
    golden.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON")


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    entry = entry_named(config, args.model_id)
    hardware = config.matrix.profiles[entry.profile].hardware
    store = ReferenceStore(settings.places.state.golden)
    references = store.load(hardware, entry.id)
    profile = config.matrix.profiles[entry.profile]
    with served(args.url, settings, config, entry, "golden") as (client, model_ref, server_log):
        judge = None
        if references is None:
            shop = night_workshop(settings, profile, to_stderr)
            judge = transformers_judge(entry, profile, model_ref, shop, settings.places.runs)
        result = run_golden(
            client,
            entry,
            config.golden[entry.golden],
            model_ref=model_ref,
            references=references,
            judge=judge,
            server_log=server_log,
            say=to_stderr,
        )
    print(render_table(result.verdicts))
    print(
        f"\n{len(result.verdicts)} checks, {len(result.failures)} failed; {result.tokens_generated} tokens "
        f"generated in {result.duration_s:.1f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(_as_json(entry, result), indent=2) + "\n")
    if args.record and result.recordable:
        path = store.save(hardware, entry.id, time.strftime("%Y-%m-%d"), result.generations, result.identity_files)
        print(f"recorded tonight's outputs as the drift reference: {path}")
    elif args.record:
        print("not recorded: a reference is kept only when every check passed and every answer was judged")
    return (Status.PASS if result.passed else Status.FAIL).exit_code


def render_table(verdicts: list[Verdict] | tuple[Verdict, ...]) -> str:
    """One row per check; failing rows are followed by their evidence."""
    rows = [(v.check, v.subject, v.status, v.reason) for v in verdicts]
    widths = [max(len(r[i]) for r in [("check", "subject", "status", "reason"), *rows]) for i in range(3)]
    lines = [f"{'check':<{widths[0]}}  {'subject':<{widths[1]}}  {'status':<{widths[2]}}  reason"]
    for verdict, row in zip(verdicts, rows, strict=True):
        lines.append(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}")
        if not verdict.passed:
            for key, value in verdict.evidence.items():
                lines.append(f"{'':<{widths[0]}}    {key}: {value!r}"[:400])
    return "\n".join(lines)


def _as_json(entry: ModelEntry, result: GoldenResult) -> dict[str, object]:
    return {
        "version": 1,
        "entry": entry.id,
        "passed": result.passed,
        "tokens_generated": result.tokens_generated,
        "duration_s": round(result.duration_s, 2),
        "verdicts": [
            {"check": v.check, "subject": v.subject, "status": v.status, "reason": v.reason, "evidence": v.evidence}
            for v in result.verdicts
        ],
    }
