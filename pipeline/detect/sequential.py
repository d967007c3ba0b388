"""Boot pairs decided one at a time, their evidence carried across nights: the fewest boots that decide.

On a host that holds one server every boot pair costs two boots (minutes each on a Spark), so boot pairs are asked
one at a time and the test stops as soon as they decide: Wald's sequential probability ratio test of "B is slower
than A by `shift`" against "B is as fast", on each boot pair's difference d (B's mean log throughput minus A's):

    llr = (shift / var) x (-d - shift / 2)        summed over the pairs,  var = one difference's variance

FAIL when the sum reaches FAIL_AT = log((1 - beta) / alpha), PASS when it falls to PASS_AT = log(beta / (1 - alpha)).
A night whose boot budget runs out first PASSes when the sum leans to no slowdown (at or below 0: cleared, not
confirmed, and forgotten as Page's CUSUM forgets); above 0 it is INCONCLUSIVE and hands its pairs to the next night
against the same A, so a small slowdown that persists builds its case over nights instead of one night paying for
it all. A slowdown of half `shift` is where the evidence neither grows nor shrinks: larger ones FAIL in time,
smaller ones PASS.

The variance is the boot spread (the SD of log(B/A) between a boot of each) plus the runs' share, the spread pooled
from the hardware's prior, this host's past boot pairs and tonight's own (detect/boots.py pooled_spread).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pipeline.config.thresholds import CLOSE_BETA, SEQUENTIAL_ALPHA, SEQUENTIAL_BETA
from pipeline.detect.evidence import Carried

# The bounds, from the error rates the hardware's pair limits set (config/thresholds.py)
FAIL_AT = math.log((1 - SEQUENTIAL_BETA) / SEQUENTIAL_ALPHA)
PASS_AT = math.log(SEQUENTIAL_BETA / (1 - SEQUENTIAL_ALPHA))
# While a regression is open a PASS closes its alert, so it must be surer that tonight is not the regressed build:
# a build still slower by the full shift closes it one time in a hundred, not one in ten (the month's -3 % steps
# closed again in 28 % of months at PASS_AT).
CLOSE_AT = math.log(CLOSE_BETA / (1 - SEQUENTIAL_ALPHA))

Decision = Literal["FAIL", "PASS", "INCONCLUSIVE"]


@dataclass(frozen=True)
class SequentialResult:
    """The decision and every number it used."""

    decision: Decision
    llr: float  # the sum over carried and tonight's pairs
    pairs: int  # tonight's boot pairs
    carried_pairs: int
    spread: float  # the boot spread used (SD of log(B/A) between a boot of each)
    variance: float  # one difference's variance: spread^2 plus the runs' share
    shift: float
    carry: Carried | None  # what the next night against the same A starts from (None: nothing)
    reason: str


def llr_sum(differences: Sequence[float], *, shift: float, variance: float) -> float:
    """The log-likelihood ratio of a slowdown of `shift` against none, over the differences."""
    return (shift / variance) * math.fsum(-d - shift / 2.0 for d in differences)


def decide_sequential(  # noqa: PLR0913 -- a pure decision: every number it uses is shown
    tonight: Sequence[float],
    carried: Carried | None,
    *,
    a: str,
    night: str,
    shift: float,
    variance: float,
    spread: float,
    more: bool,
    clearable: bool = True,
) -> SequentialResult:
    """Decide on tonight's boot pair differences after the carried ones (when they were measured against `a`).

    `more`: whether another boot pair could still be measured tonight; without it, an undecided sum at or below 0
    clears the night and one above ends it INCONCLUSIVE, carried. Not `clearable` (a regression is open): nothing
    clears, and a PASS needs the stricter CLOSE_AT."""
    earlier = carried.differences if carried is not None and carried.a == a else ()
    nights = carried.nights if carried is not None and carried.a == a else ()
    total = llr_sum([*earlier, *tonight], shift=shift, variance=variance)
    pass_at = PASS_AT if clearable else CLOSE_AT
    decision: Decision = "FAIL" if total >= FAIL_AT else "PASS" if total <= pass_at else "INCONCLUSIVE"
    cleared = decision == "INCONCLUSIVE" and not more and total <= 0 and clearable
    if cleared:  # the budget's end with the evidence leaning to no slowdown: nothing to carry, nothing shown
        decision = "PASS"
    keep = decision == "INCONCLUSIVE" and not more and total > 0
    carry = Carried(a, (*earlier, *tonight), (*nights, night)) if keep else None
    mean = math.fsum([*earlier, *tonight]) / max(1, len(earlier) + len(tonight))
    over = f"{len(tonight)} boot pair{'s' if len(tonight) != 1 else ''} tonight"
    if earlier:
        over += f" and {len(earlier)} carried from {', '.join(nights)}"
    slowdown = -math.expm1(-shift)  # the alternative as the share of throughput lost
    reason = (
        f"B/A {math.exp(mean):.4f} over {over}: log-likelihood ratio of a {slowdown:.0%} slowdown {total:+.2f} "
        f"({'FAIL at' if decision == 'FAIL' else 'PASS at' if decision == 'PASS' else 'between'} "
        f"{pass_at:+.2f} and {FAIL_AT:+.2f}; boot-to-boot SD of B/A {spread:.1%})"
    )
    if cleared:
        reason += "; no slowdown shown by the budget's end: cleared, not confirmed"
    if keep:
        reason += "; carried to the next night against the same build"
    return SequentialResult(decision, total, len(tonight), len(earlier), spread, variance, shift, carry, reason)
