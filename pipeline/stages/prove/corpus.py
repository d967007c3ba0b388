"""The benchmark prompt corpus: plain English prose generated from a fixed seed, so nothing is downloaded.

Benchmarks need long, varied, natural-looking text to cut prompts of an exact token count from;
what the words say does not matter, only that the tokenizer sees ordinary prose.
"""

from __future__ import annotations

import random
from functools import cache

SUBJECTS = (
    "The old harbour",
    "A quiet village",
    "The river",
    "Every traveller",
    "The northern road",
    "A young engineer",
    "The market square",
    "An early train",
    "The library",
    "A mountain farmer",
    "The night watchman",
    "The city council",
    "A small workshop",
    "The lighthouse keeper",
    "Each new season",
)
VERBS = (
    "remembers",
    "welcomes",
    "carries",
    "measures",
    "outlasts",
    "describes",
    "follows",
    "shelters",
    "changes",
    "connects",
    "reveals",
    "keeps",
    "tests",
    "rebuilds",
    "watches",
)
OBJECTS = (
    "the long winter",
    "a patient craft",
    "the distant hills",
    "an unfinished bridge",
    "the morning fog",
    "a careful record of the tides",
    "the sound of bells",
    "a map of forgotten streets",
    "the harvest",
    "the first snow",
    "a quiet promise",
    "the weight of old stones",
    "a lantern in the window",
    "the narrow stairs",
    "the smell of fresh bread",
)
TAILS = (
    "before the sun rises.",
    "while the town sleeps.",
    "as it has for a hundred years.",
    "without complaint.",
    "with surprising care.",
    "long after the visitors leave.",
    "in every kind of weather.",
    "when nobody is looking.",
    "and asks for nothing in return.",
    "until the work is done.",
)


@cache
def corpus_text(words: int = 24_000, seed: int = 20261121) -> str:
    """About `words` words of generated prose in paragraphs, identical for the same arguments."""
    rng = random.Random(seed)
    paragraphs, count = [], 0
    while count < words:
        sentences = [
            f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}"
            for _ in range(rng.randint(4, 8))
        ]
        paragraph = " ".join(sentences)
        count += len(paragraph.split())
        paragraphs.append(paragraph)
    return "\n\n".join(paragraphs)
