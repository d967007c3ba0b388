"""The broken engines the golden stage must catch, and the check meant for each: one table for the CPU suite
(tests/integration/variants) and the GPU's benchmark (benchmarks/gpu_golden_variants.py).

Each variant is the good model's folder changed the way a broken build would change what the engine computes
(benchmarks/make_broken_model.py makes it), served in the entry's place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.checks import Verdict

JAPAN = 3085  # " Japan": in the capital-of-japan prompt only


@dataclass(frozen=True)
class Variant:
    """A broken engine: how make_broken_model.py makes it, and the check meant to catch it."""

    mode: str
    scale: float
    checks: tuple[str, ...]  # each must fail
    subject: str | None = None  # the prompt they must fail on; None: any

    def escaped(self, verdicts: Iterable[Verdict]) -> list[str]:
        """The checks meant for this variant that did not FAIL (on its subject, where it has one)."""
        failed = {v.check for v in verdicts if v.status == "FAIL" and self.subject in (None, v.subject)}
        return [check for check in self.checks if check not in failed]


VARIANTS = {
    # every logit times 3 (the final norm feeds only the output head), config.json untouched: greedy answers
    # stay, so drift alone must see it
    "final norm x3": Variant("scale-norm", 3.0, ("drift",)),
    "end-of-turn logit negated": Variant("no-eos", 0.0, ("stop",)),
    "zeroed attention projections": Variant("zero-attention", 0.0, ("garbage",)),
    "layers reversed": Variant("reverse-layers", 0.0, ("answer",)),
    "two layers swapped": Variant("swap-layers", 0.0, ("drift",)),
    "NaN embedding of one prompt's token": Variant("nan-token", float(JAPAN), ("logprobs",), "capital-of-japan"),
    "RoPE theta / 10": Variant("rope-theta", 10.0, ("identity", "drift")),
}
