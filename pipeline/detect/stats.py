"""Small robust statistics and Student's t distribution in the standard library only (the gate ships no numpy)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import lru_cache

# 1 / Phi^-1(3/4): turns a median absolute deviation into a standard deviation for normal data.
MAD_TO_SD = 1.4826
# Variance of a sample median relative to a sample mean for normal data (pi / 2), used to widen a baseline's noise.
MEDIAN_VARIANCE_FACTOR = math.pi / 2

_BETA_ITERATIONS = 300
_BETA_EPSILON = 3e-16
_TINY = 1e-300
_QUANTILE_ITERATIONS = 200
# Past this many degrees of freedom Student's t is the normal to within 1e-3 of a quantile (and math.inf, a variance
# known exactly, is the normal itself); the continued fraction would only spend iterations to say the same.
NORMAL_DF = 1e4


def median(values: Sequence[float]) -> float:
    """The median; raises ValueError on an empty sequence, as a baseline of nothing is a bug upstream."""
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def robust_sd(values: Sequence[float], centre: float) -> float:
    """SD estimated as 1.4826 x the median absolute deviation from centre, so that one outlier cannot move it."""
    return MAD_TO_SD * median([abs(v - centre) for v in values])


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """Continued fraction of the regularized incomplete beta function, by the modified Lentz method."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _BETA_ITERATIONS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
            last = d * c
        if abs(last - 1.0) < _BETA_EPSILON:
            break
    return h


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the CDF of a Beta(a, b) variable at x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    # The continued fraction converges fast only on this side of the mean; the other side uses the symmetry.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(x, a, b) / a
    return 1.0 - front * _beta_continued_fraction(1.0 - x, b, a) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if df > NORMAL_DF:
        return statistics.NormalDist().cdf(t)
    tail = 0.5 * regularized_beta(df / (df + t * t), df / 2.0, 0.5)
    return 1.0 - tail if t > 0 else tail


# A gate asks for the same few (level, pairs) quantiles all the time, and bisection costs a few hundred CDFs.
@lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, by bisection on t_cdf (monotone, so bisection cannot go wrong)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df > NORMAL_DF:
        return statistics.NormalDist().inv_cdf(p)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(_QUANTILE_ITERATIONS):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0
