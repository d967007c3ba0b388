"""The CPU suite's broken engines served on the GPU entry (bf16): each must FAIL the golden check meant for it, judged
as a night without a reference (the fp32 transformers judge on the good weights) and as a night with the good
night's reference, and neither judgement may be recorded.

    python -m benchmarks.gpu_golden_variants WORK [--entry ID] [VARIANT ...]   (default: the GPU entry, every variant)

Runs where a good GPU night ran (benchmarks/gpu_nights.sh sets the environment it reads: paths.config, paths.cache,
paths.state, the base, the wheelhouse, offline): it takes that night's candidate runtime, converted weights and
recorded reference. Each variant's weights are made by benchmarks/make_broken_model.py in the converter's runtime
(the base's torch and transformers); one boot per variant asks the whole golden set once, as the nightly does, and
the answers are judged both ways. Prints each variant's failing checks both ways, writes WORK/golden-variants.json,
and exits 1 when a variant escaped the check meant for it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.golden_variants import VARIANTS, Variant
from pipeline.checks import Verdict
from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import Weights
from pipeline.infra import procs
from pipeline.infra.references import ReferenceStore
from pipeline.infra.supply import ensure_runtime
from pipeline.infra.weights import CONVERTER_SET, package_folder
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import prepare_candidate, restartable
from pipeline.stages.prove.golden_run import GoldenResult, ServerLog, ask_golden, judge_golden
from pipeline.stages.prove.judge import transformers_judge
from pipeline.stages.prove.supplies import night_workshop

ENTRY = "smollm2-135m-instruct-gpu"
MAKER = Path(__file__).with_name("make_broken_model.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--entry", default=ENTRY, help="another entry (the CPU one, to try the script here)")
    parser.add_argument("variants", nargs="*", choices=[[], *VARIANTS], metavar="VARIANT")
    args = parser.parse_intermixed_args()
    work, names = args.work.resolve(), args.variants or list(VARIANTS)
    settings = from_environment().settings
    root = settings.places.config
    config = load_config(ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden"))
    entry = config.matrix.entry(args.entry)
    profile = config.matrix.profiles[entry.profile]
    cache, logs = settings.places.cache, work / "logs"
    shop = night_workshop(settings, profile, quiet)
    candidate = prepare_candidate(profile, shop, logs)
    good = package_folder(entry, cache)
    references = ReferenceStore(settings.places.state.golden).load(profile.hardware, entry.id)
    if references is None:
        raise SystemExit(f"no reference for {entry.id} in {settings.places.state.golden}: run a good night first")
    judge = transformers_judge(entry, profile, str(good), shop, logs)
    converter = ensure_runtime(CONVERTER_SET, shop, logs)
    golden = config.golden[entry.golden]
    found: dict[str, object] = {}
    escaped = []
    for name in names:
        variant = VARIANTS[name]
        started = time.monotonic()
        folder = work / f"broken-{variant.mode}"
        argv = [str(converter.python), str(MAKER), str(good), str(folder), variant.mode, str(variant.scale)]
        procs.run(argv, logs / f"make-{variant.mode}.log", timeout_s=600)
        made_s = time.monotonic() - started
        served = replace(entry, weights=Weights("path", path=str(folder)))
        log_dir = logs / variant.mode
        with restartable(served, candidate, cache_dir=cache, log_dir=log_dir) as serving:
            boot_s = serving.server.boot_s
            server_log = ServerLog(serving.server.log_path, profile.accelerator)
            answers, client = ask_golden(
                serving.server.client, served, golden, restart=serving.restart, server_log=server_log
            )
            judged = {
                way: judge_golden(answers, client, served, golden, model_ref=str(folder), references=refs, judge=j)
                for way, refs, j in (("no reference", None, judge), ("reference", references, None))
            }
        missed = [f"{way}: {check}" for way, result in judged.items() for check in variant.escaped(result.verdicts)]
        missed += [f"{way}: recordable" for way, result in judged.items() if result.recordable]
        if missed:
            escaped.append(name)
        found[name] = {
            "mode": variant.mode,
            "meant": list(variant.checks),
            "caught": not missed,
            "make_s": round(made_s, 1),
            "boot_s": round(boot_s, 1),
            "golden_s": round(answers.duration_s, 1),
            "restarts": serving.restarts,
            **{way: [_row(v) for v in result.failures] for way, result in judged.items()},
        }
        _show(name, variant, judged, missed, time.monotonic() - started)
    (work / "golden-variants.json").write_text(json.dumps(found, indent=2) + "\n")
    print(f"\n{len(names) - len(escaped)} of {len(names)} variants caught by their check")
    return 1 if escaped else 0


def _row(verdict: Verdict) -> str:
    return f"{verdict.check} {verdict.subject}: {verdict.reason[:300]}"


def _show(name: str, variant: Variant, judged: dict[str, GoldenResult], missed: list[str], took_s: float) -> None:
    caught = "caught" if not missed else f"ESCAPED ({', '.join(missed)})"
    print(f"\n{name} ({variant.mode}; meant: {', '.join(variant.checks)}): {caught}, {took_s:.0f} s")
    for way, result in judged.items():
        print(f"  {way}: {len(result.failures)} failing of {len(result.verdicts)} checks")
        for verdict in result.failures:
            print(f"    {_row(verdict)[:240]}")


if __name__ == "__main__":
    sys.exit(main())
