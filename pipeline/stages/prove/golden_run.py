"""Golden: ask a server the golden prompts and canaries, greedily, and judge the outputs with every check."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.checks import Verdict, skipped
from pipeline.checks.agreement import (
    DRIFT_LOGPROB_TOLERANCE,
    check_batch_invariance,
    check_determinism,
    check_drift,
    check_judged,
    unjudged,
)
from pipeline.checks.answers import check_answer, check_corrupted_counter, check_finite_logprobs
from pipeline.checks.garbage import check_garbage, check_long_decode, text_stats
from pipeline.checks.identity import check_identity, identity_files, model_config
from pipeline.checks.kernels import KernelEvidence, cache_dtype, check_kernels, read_log
from pipeline.checks.stops import check_stop
from pipeline.config import canaries
from pipeline.config.golden_sets import GoldenPrompt, GoldenSet
from pipeline.config.matrix import ModelEntry
from pipeline.errors import NonFiniteLogprobsError
from pipeline.infra.openai_client import Completion, Generation, OpenAIClient, ServedModel, metric_total
from pipeline.infra.references import References
from pipeline.progress import Say, quiet
from pipeline.stages.prove.features import feature_checks
from pipeline.stages.prove.judge import Judge, rescore, scorable, score_or_why

TOP_LOGPROBS = 5
CORRUPTED_METRIC = "vllm:corrupted_requests_total"


@dataclass(frozen=True)
class GoldenResult:
    """Every verdict, the outputs (to record as tomorrow's reference), and what it cost."""

    verdicts: tuple[Verdict, ...]
    generations: tuple[Generation, ...]
    tokens_generated: int
    duration_s: float
    identity_files: Mapping[str, str] = field(default_factory=dict)  # the served folder's, recorded with the outputs

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.passed]

    @property
    def unjudged(self) -> list[str]:
        """Answers neither a reference nor a judge could judge (drift INCONCLUSIVE)."""
        return [v.subject for v in self.verdicts if v.status == "INCONCLUSIVE"]

    @property
    def recordable(self) -> bool:
        """Passed, and every answer was judged (by a reference or a judge): only then may it become the reference."""
        return self.passed and not self.unjudged


def all_prompts(golden: GoldenSet) -> tuple[GoldenPrompt, ...]:
    """The set's own prompts, then its generated canaries."""
    return golden.prompts + canaries.generate(dict(golden.canaries), golden.canary_seed, golden.canary_max_tokens)


def ask(client: OpenAIClient, model: str, prompt: GoldenPrompt, **extra: Any) -> Generation:
    """One greedy request with top logprobs, chat or completion as the prompt says.

    When the server cannot serialise its logprobs (NaN or infinity), the answer is asked again
    without them and the generation carries the server's refusal as evidence for the logprobs check.
    """
    try:
        return Generation.from_completion(prompt.id, _request(client, model, prompt, with_logprobs=True, **extra))
    except NonFiniteLogprobsError as exc:
        completion = _request(client, model, prompt, with_logprobs=False, **extra)
        return replace(Generation.from_completion(prompt.id, completion), logprob_error=str(exc))


def _request(
    client: OpenAIClient, model: str, prompt: GoldenPrompt, *, with_logprobs: bool, **extra: Any
) -> Completion:
    top = TOP_LOGPROBS if with_logprobs else None
    extra = {"return_token_ids": True, **extra}  # the ids a judge or tomorrow's build scores again
    if prompt.api == "completion":
        return client.complete(model, prompt.prompt, max_tokens=prompt.max_tokens, logprobs=top, **extra)
    messages = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [
        {"role": "user", "content": prompt.prompt}
    ]
    return client.chat(model, messages, max_tokens=prompt.max_tokens, top_logprobs=top, **extra)


class _Serving:
    """The server the golden prompts go to, restarted after a request poisons it with NaN (when it can be)."""

    def __init__(self, client: OpenAIClient, restart: Callable[[], OpenAIClient] | None, say: Say) -> None:
        self.client, self._restart, self._say = client, restart, say
        self.poisoned_by: str | None = None  # the NaN prompt after which nothing more was asked (no restart left)
        self.corrupted = 0.0
        self._corrupted_before = metric_total(client.metrics(), CORRUPTED_METRIC)
        self.counted = self._corrupted_before is not None

    def after(self, generation: Generation) -> None:
        """A request whose logprobs are not finite is the cause; the server it ran on is not trusted after it.

        One restart: a second NaN on the fresh server says the model is broken for more than one prompt, and
        more restarts would only spend boots.
        """
        if check_finite_logprobs(generation).passed:
            return
        self._count()
        restart = self._restart
        if restart is None:
            self.poisoned_by = generation.prompt_id
            return
        self._restart = None
        self._say(f"golden: {generation.prompt_id} gave non-finite logprobs; restarting the server for the rest")
        self.client = restart()
        self._corrupted_before = metric_total(self.client.metrics(), CORRUPTED_METRIC)

    def _count(self) -> None:
        after = metric_total(self.client.metrics(), CORRUPTED_METRIC)
        if after is not None and self._corrupted_before is not None:
            self.corrupted += after - self._corrupted_before
            self._corrupted_before = after

    def corrupted_counter(self) -> Verdict:
        self._count()
        return check_corrupted_counter(0.0, self.corrupted) if self.counted else check_corrupted_counter(None, None)


@dataclass(frozen=True)
class GoldenAnswers:
    """What a server answered to a golden set, before any judgement (a set can be judged more than one way)."""

    prompts: tuple[GoldenPrompt, ...]
    alone: tuple[Generation, ...]  # each prompt asked alone, up to the one that poisoned a server for good
    causes: frozenset[str]  # prompts whose logprobs were not finite: the first such request on its server
    poisoned_by: str | None  # the cause after which no more was asked (a server that cannot be restarted)
    repeat: Generation | None  # the first clean prompt asked again (determinism)
    batched: tuple[tuple[Generation, Generation], ...]  # (alone, in the batch) for each clean prompt
    long: Generation | None
    served: tuple[ServedModel, ...]
    parser_verdicts: tuple[Verdict, ...]
    corrupted: Verdict
    duration_s: float
    kernels: KernelEvidence | None = None  # what the server's log and /metrics said it selected

    @property
    def tokens(self) -> int:
        extra = [self.repeat, self.long, *(b for _, b in self.batched)]
        return sum(len(g.tokens) for g in [*self.alone, *extra] if g is not None)


def ask_golden(
    client: OpenAIClient,
    entry: ModelEntry,
    golden: GoldenSet,
    *,
    restart: Callable[[], OpenAIClient] | None = None,
    server_log: ServerLog | None = None,
    say: Say = quiet,
) -> tuple[GoldenAnswers, OpenAIClient]:
    """Every request of the golden stage; the client after it, which is a new server's after a NaN restart."""
    started = time.monotonic()
    model = entry.served_model_name
    prompts = all_prompts(golden)
    served = tuple(client.models())
    kernels = kernel_evidence(client, server_log) if entry.kernels and server_log is not None else None
    serving = _Serving(client, restart, say)
    say(f"golden: {len(prompts)} prompts, one at a time")
    alone: list[Generation] = []
    for prompt in prompts:
        if serving.poisoned_by is not None:
            break
        alone.append(ask(serving.client, model, prompt))
        serving.after(alone[-1])
    causes = frozenset(g.prompt_id for g in alone if not check_finite_logprobs(g).passed)
    clean = [g for g in alone if g.prompt_id not in causes]
    repeat: Generation | None = None
    batched: tuple[tuple[Generation, Generation], ...] = ()
    long: Generation | None = None
    if serving.poisoned_by is None and clean:
        say("golden: determinism and batch invariance")
        repeat = ask(serving.client, model, _prompt(prompts, clean[0]))
        batched = _batched(serving.client, model, prompts, clean)
        if golden.long_decode is not None:
            say(f"golden: long decode of {golden.long_decode.max_tokens} tokens")
            long_prompt = GoldenPrompt("long-decode", golden.long_decode.prompt, golden.long_decode.max_tokens)
            long = ask(serving.client, model, long_prompt, ignore_eos=True)  # run to the length asked, past any stop
    say("golden: the serving features the entry enables")
    parsers = tuple(feature_checks(serving.client, entry))
    answers = GoldenAnswers(
        prompts,
        tuple(alone),
        causes,
        serving.poisoned_by,
        repeat,
        batched,
        long,
        served,
        parsers,
        serving.corrupted_counter(),
        time.monotonic() - started,
        kernels,
    )
    return answers, serving.client


@dataclass(frozen=True)
class ServerLog:
    """The log of the server the golden stage asks, and the platform it runs on (which kernels it picks silently)."""

    path: Path
    platform: str


def kernel_evidence(client: OpenAIClient, server_log: ServerLog) -> KernelEvidence:
    """What the server said it selected, read once: its kernels are chosen at boot and never change after."""
    text = server_log.path.read_text(errors="replace") if server_log.path.is_file() else ""
    return KernelEvidence(read_log(text), cache_dtype(client.metrics()), server_log.path.name, server_log.platform)


def judge_golden(  # noqa: PLR0913 -- the golden set's inputs, by keyword
    answers: GoldenAnswers,
    client: OpenAIClient,
    entry: ModelEntry,
    golden: GoldenSet,
    *,
    model_ref: str,
    references: References | None,
    judge: Judge | None = None,
    files_at: Path | None = None,
    say: Say = quiet,
) -> GoldenResult:
    """Every check over the answers: against the reference night when there is one, else against the judge."""
    started = time.monotonic()
    identity, files = _identity(answers.served, entry, model_ref, references, files_at)
    verdicts: list[Verdict] = [identity]
    drift = _drift_verdicts(
        client, entry.served_model_name, answers.alone, references=references, judge=judge, golden=golden, say=say
    )
    for prompt, generation, drift_verdict in zip(answers.prompts, answers.alone, drift, strict=False):
        cause = generation.prompt_id in answers.causes
        verdicts += _prompt_verdicts(prompt, generation, entry, references, drift_verdict, cause=cause)
    poisoned = f"not judged: asked after {answers.poisoned_by}'s non-finite logprobs poisoned the server"
    verdicts += [skipped("answer", p.id, poisoned) for p in answers.prompts[len(answers.alone) :]]
    clean = [g for g in answers.alone if g.prompt_id not in answers.causes]
    if answers.repeat is not None:
        verdicts.append(check_determinism(clean[0], answers.repeat))
    verdicts += [check_batch_invariance(alone, batched) for alone, batched in answers.batched]
    if answers.long is not None and golden.long_decode is not None:
        verdicts += [check_long_decode(answers.long, golden.long_decode.window), check_finite_logprobs(answers.long)]
    verdicts += [*answers.parser_verdicts, answers.corrupted]
    verdicts += check_kernels(entry.kernels, answers.kernels)
    duration = answers.duration_s + time.monotonic() - started
    return GoldenResult(tuple(verdicts), answers.alone, answers.tokens, duration, files)


def run_golden(  # noqa: PLR0913 -- the golden set's inputs, by keyword
    client: OpenAIClient,
    entry: ModelEntry,
    golden: GoldenSet,
    *,
    model_ref: str,
    references: References | None,
    judge: Judge | None = None,
    restart: Callable[[], OpenAIClient] | None = None,
    files_at: Path | None = None,
    server_log: ServerLog | None = None,
    say: Say = quiet,
) -> GoldenResult:
    """The golden stage against one running server (restarted after a NaN when `restart` can): ask, then judge."""
    answers, client = ask_golden(client, entry, golden, restart=restart, server_log=server_log, say=say)
    return judge_golden(
        answers,
        client,
        entry,
        golden,
        model_ref=model_ref,
        references=references,
        judge=judge,
        files_at=files_at,
        say=say,
    )


def _identity(
    served: Sequence[ServedModel],
    entry: ModelEntry,
    model_ref: str,
    references: References | None,
    files_at: Path | None = None,
) -> tuple[Verdict, dict[str, str]]:
    """Identity against models.yaml, and the served folder's file hashes against the pinned or recorded ones.

    A Hub entry's server reports the repository id as its root: its files are read where the weights stage
    verified them (`files_at`, the snapshot of the pinned commit)."""
    root = next((m.root for m in served if m.id == entry.served_model_name and m.root), None)
    folder = Path(root) if root and Path(root).is_dir() else files_at
    files = identity_files(folder)
    expected, source = dict(entry.identity_files), "models.yaml"
    if not expected and references is not None and references.identity_files:
        expected, source = dict(references.identity_files), f"the reference night {references.night}"
    verdict = check_identity(
        served,
        name=entry.served_model_name,
        max_model_len=length if isinstance(length := entry.serve.get("max_model_len"), int) else None,
        model_ref=model_ref,
        config=model_config(str(folder)) if folder else None,
        expected=entry.identity,
        files=files,
        expected_files=expected,
        files_from=source,
    )
    return verdict, files


def _prompt(prompts: Sequence[GoldenPrompt], generation: Generation) -> GoldenPrompt:
    return next(p for p in prompts if p.id == generation.prompt_id)


def _batched(
    client: OpenAIClient, model: str, prompts: Sequence[GoldenPrompt], clean: Sequence[Generation]
) -> tuple[tuple[Generation, Generation], ...]:
    """The prompts that gave finite answers alone, sent together (a NaN prompt would poison the batch)."""
    with ThreadPoolExecutor(max_workers=len(clean)) as pool:
        batched = list(pool.map(lambda g: ask(client, model, _prompt(prompts, g)), clean))
    return tuple(zip(clean, batched, strict=True))


def _drift_verdicts(
    client: OpenAIClient,
    model: str,
    generations: Sequence[Generation],
    *,
    references: References | None,
    judge: Judge | None,
    golden: GoldenSet,
    say: Say,
) -> list[Verdict]:
    """Against the reference night's answers scored again tonight; with none, against the judge; else unjudged."""
    tolerance = golden.drift_tolerance or DRIFT_LOGPROB_TOLERANCE
    if references is not None:
        say(f"golden: scoring the reference night's ({references.night}) answers under tonight's build")
        verdicts = []
        for generation in generations:
            reference = references.outputs.get(generation.prompt_id)
            if reference is None:
                verdicts.append(unjudged(generation, f"the reference night {references.night} did not ask this prompt"))
                continue
            rescored = rescore(client, model, reference) if scorable(reference) else None
            verdicts.append(
                check_drift(generation, reference, rescored, tolerance=tolerance, reference_night=references.night)
            )
        return verdicts
    if judge is None:
        return [unjudged(g, "no reference night and no judge for this entry") for g in generations]
    say(f"golden: no reference night; {judge.name} scores tonight's answers")
    scored = score_or_why(judge, generations)
    if isinstance(scored, str):  # the judge could not be served: every answer stays unjudged, saying why
        return [unjudged(g, scored) for g in generations]
    return [
        check_judged(g, scored[g.prompt_id], judge=judge.name, tolerance=judge.tolerance, margin=judge.margin)
        if g.prompt_id in scored
        else unjudged(g, f"{judge.name} cannot score it (the server returned no token ids)")
        for g in generations
    ]


def _prompt_verdicts(
    prompt: GoldenPrompt,
    generation: Generation,
    entry: ModelEntry,
    references: References | None,
    drift: Verdict,
    *,
    cause: bool,
) -> list[Verdict]:
    reference = references.outputs.get(prompt.id) if references else None
    reference_logprob = text_stats(reference.text, reference.logprobs).mean_logprob if reference else None
    logprobs = check_finite_logprobs(generation)
    if cause:
        logprobs = replace(logprobs, reason=logprobs.reason + "; the first such request on its server (the cause)")
    return [
        check_answer(generation, prompt.expectation_for(entry.engine, entry.dtype), prompt.prompt),
        logprobs,
        check_garbage(generation, reference_logprob=reference_logprob),
        check_stop(generation, should_stop=prompt.should_stop, max_tokens=prompt.max_tokens),
        drift,
    ]
