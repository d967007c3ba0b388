"""Generated canary prompts with exact answers: arithmetic, reversal, counting, copying. Nothing to download.

The same seed always gives the same prompts, so a canary's answers can be compared night to night.
"""

from __future__ import annotations

import random

from pipeline.config.golden_sets import Expectation, GoldenPrompt

WORDS = (
    "amber",
    "bridge",
    "candle",
    "delta",
    "ember",
    "falcon",
    "garden",
    "harbor",
    "island",
    "jungle",
    "kettle",
    "lantern",
    "meadow",
    "nickel",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saddle",
    "timber",
    "umber",
    "velvet",
    "willow",
    "yonder",
    "zephyr",
)


def _multiply(rng: random.Random, index: int) -> GoldenPrompt:
    a, b = rng.randint(12, 99), rng.randint(12, 99)
    return GoldenPrompt(
        f"canary-multiply-{index}",
        f"What is {a} times {b}? Answer with the number only.",
        64,
        expect=Expectation(number=float(a * b)),
    )


def _reverse(rng: random.Random, index: int) -> GoldenPrompt:
    word = rng.choice(WORDS)
    return GoldenPrompt(
        f"canary-reverse-{index}",
        f"Reverse the letters of the word '{word}'. Answer with the reversed word only.",
        64,
        expect=Expectation(contains=(word[::-1],)),
    )


def _count_words(rng: random.Random, index: int) -> GoldenPrompt:
    words = rng.sample(WORDS, rng.randint(3, 9))
    sentence = " ".join(words)
    return GoldenPrompt(
        f"canary-count-words-{index}",
        f"How many words are in this text: '{sentence}'? Answer with the number only.",
        64,
        expect=Expectation(number=float(len(words))),
    )


def _copy_list(rng: random.Random, index: int) -> GoldenPrompt:
    items = ", ".join(rng.sample(WORDS, 5))
    return GoldenPrompt(
        f"canary-copy-list-{index}",
        f"Copy this list exactly, nothing else: {items}",
        64,
        expect=Expectation(contains=(items,)),
    )


MAKERS = {"multiply": _multiply, "reverse": _reverse, "count_words": _count_words, "copy_list": _copy_list}


def generate(counts: dict[str, int] | None, seed: int, max_tokens: int = 64) -> tuple[GoldenPrompt, ...]:
    """The canaries asked for, in a fixed order, reproducible from the seed."""
    rng = random.Random(seed)
    prompts = []
    for kind, maker in MAKERS.items():
        for index in range((counts or {}).get(kind, 0)):
            made = maker(rng, index + 1)
            prompts.append(GoldenPrompt(made.id, made.prompt, max_tokens, expect=made.expect))
    return tuple(prompts)
