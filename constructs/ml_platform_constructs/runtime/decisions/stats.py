"""The tests behind the platform's automatic decisions (standard library only: it runs in Lambda beside its callers).

Each function returns what a decision needs (a statistic, a p-value, a bound) and nothing else; the decisions
themselves (promotion.py, quality.py, drift.py) say which error they guard against and at what rate, and
``bench/decisions.py`` measures those rates by simulation. Sources: ../../../../shared/DECISIONS.md.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_NORMAL = NormalDist()


def z_quantile(p: float) -> float:
    """The standard normal quantile: ``z_quantile(0.95)`` is 1.645."""
    return _NORMAL.inv_cdf(p)


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return _NORMAL.cdf(-z)


# --- chi-square -------------------------------------------------------------------------------------------------

def _upper_gamma(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x): a series below a + 1, Lentz's continued fraction
    above (Numerical Recipes, 6.2)."""
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        denominator = a
        for _ in range(100_000):
            denominator += 1
            term *= x / denominator
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return min(1.0, math.exp(log_prefix) * h)


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"df={df}: at least 1 degree of freedom")
    return _upper_gamma(df / 2, x / 2)


def chi2_isf(p: float, df: int) -> float:
    """The ``x`` with ``chi2_sf(x, df) == p`` (bisection: monotone, and fast enough for a handful of features)."""
    if not 0 < p < 1:
        raise ValueError(f"p={p}: a probability between 0 and 1")
    low, high = 0.0, max(10.0, 10.0 * df)
    while chi2_sf(high, df) > p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if chi2_sf(middle, df) > p:
            low = middle
        else:
            high = middle
        if high - low < 1e-10 * high:
            break
    return (low + high) / 2


def homogeneity(window: list[float], baseline: list[float]) -> tuple[float, int]:
    """Pearson's chi-square test that two binned samples come from one distribution: ``(statistic, degrees of
    freedom)``; bins empty in both are dropped. Approximately chi-square with ``df`` under no drift when each bin
    expects about 5 or more (drift.py asks for that many values before it judges a feature)."""
    n, m = math.fsum(window), math.fsum(baseline)
    statistic, bins = 0.0, 0
    for a, b in zip(window, baseline):
        total = a + b
        if total == 0:
            continue
        bins += 1
        expected_a, expected_b = n * total / (n + m), m * total / (n + m)
        statistic += (a - expected_a) ** 2 / expected_a + (b - expected_b) ** 2 / expected_b
    return statistic, max(1, bins - 1)


# --- two models on the same examples: paired non-inferiority -----------------------------------------------------

def skew_corrected(t: float, skewness: float) -> float:
    """Hall's (1992) monotone skewness correction of a standardised mean ``t`` whose sampling distribution has
    ``skewness`` (the data's skewness over sqrt(n)): error distributions are right-skewed, and a plain z on their mean
    comes out too low too often, promoting models whose MAE is in fact too high."""
    return t + skewness / 6 + skewness * t * t / 3 + skewness * skewness * t ** 3 / 27


def paired_noninferiority(better: int, worse: int, n: int, margin: float) -> float:
    """The score statistic (Tango 1998, Statistics in Medicine 17:891-908) for H0: p_candidate - p_live <= -margin
    on ``n`` paired examples, ``better`` of which only the candidate got right and ``worse`` only the live model.
    Large values reject H0. A continuity correction of half an example keeps the exact size at or under the level
    for 30 to 5,000 examples and 1-40% disagreement (checked by enumeration in tests/unit/test_decision_stats.py).

    The nuisance parameter (how often the models disagree) is fitted under H0: q_better - q_worse = -margin, by the
    closed-form root of the restricted likelihood equation."""
    if n <= 0:
        raise ValueError("n: at least one paired example")
    delta = -margin
    b = (better + worse) * (1 - delta) - 2 * delta * (n - better)
    q_worse = (b + math.sqrt(b * b + 8 * n * worse * delta * (1 - delta))) / (4 * n)
    q_better = q_worse + delta
    variance = (q_better + q_worse - delta * delta) / n
    difference = (better - worse - 0.5) / n
    if variance <= 0:
        return math.inf if difference > delta else -math.inf
    return (difference - delta) / math.sqrt(variance)


# --- one model against a baseline measured on other examples -----------------------------------------------------

def _restricted_two_proportions(x1: int, n1: int, x2: int, n2: int, margin: float) -> tuple[float, float]:
    """The maximum-likelihood (p1, p2) with p1 = p2 - margin (bisection on the score equation, which decreases
    in p2 on (margin, 1))."""
    low, high = margin + 1e-12, 1 - 1e-12

    def score(p2: float) -> float:
        p1 = p2 - margin
        return x1 / p1 - (n1 - x1) / (1 - p1) + x2 / p2 - (n2 - x2) / (1 - p2)

    for _ in range(200):
        middle = (low + high) / 2
        if score(middle) > 0:
            low = middle
        else:
            high = middle
        if high - low < 1e-14:
            break
    p2 = (low + high) / 2
    return p2 - margin, p2


def two_proportion_noninferiority(x1: int, n1: int, x2: int, n2: int, margin: float) -> float:
    """Farrington and Manning's score statistic (Statistics in Medicine 9:1447-1454, 1990) for H0: p1 - p2 <= -margin
    with p1 = x1/n1 (the candidate) and p2 = x2/n2 (the baseline, measured on other examples). Large values reject
    H0. A continuity correction of (1/n1 + 1/n2)/2 keeps the exact size under the level (checked by enumeration)."""
    p1, p2 = _restricted_two_proportions(x1, n1, x2, n2, margin)
    variance = p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2
    difference = x1 / n1 - x2 / n2 - (1 / n1 + 1 / n2) / 2
    if variance <= 0:
        return math.inf if difference > -margin else -math.inf
    return (difference + margin) / math.sqrt(variance)


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exact (log-space terms, summed from the tail's start)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    log_terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
                 + (n - i) * math.log1p(-p) for i in range(k, n + 1)]
    top = max(log_terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in log_terms))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), exact: each tail summed from its start outwards, where its terms shrink."""
    if k >= n or p <= 0:
        return 1.0
    if k < 0 or p >= 1:
        return 0.0
    if k < n * p:
        return _binomial_tail(k, n, p, step=-1)
    return max(0.0, 1.0 - _binomial_tail(k + 1, n, p, step=1))


def _binomial_tail(start: int, n: int, p: float, step: int) -> float:
    """P(X <= start) (step -1) or P(X >= start) (step 1), for a start on the far side of the mean."""
    log_first = (math.lgamma(n + 1) - math.lgamma(start + 1) - math.lgamma(n - start + 1)
                 + start * math.log(p) + (n - start) * math.log1p(-p))
    total = term = 1.0
    i = start
    while (i > 0) if step < 0 else (i < n):
        term *= (i / (n - i + 1) * (1 - p) / p) if step < 0 else ((n - i) / (i + 1) * p / (1 - p))
        i += step
        total += term
        if term < 1e-17 * total:
            break
    return min(1.0, math.exp(log_first) * total)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_lower(x: int, n: int, y: int, m: int) -> float:
    """Fisher's exact one-sided p-value that the first sample's rate (x of n) is below the second's (y of m):
    P(X <= x) for X hypergeometric, the successes x + y of n + m drawn n at a time (exact, conditional on the total:
    its size never exceeds the level, where normal approximations do at rates near 0 or 1)."""
    total, successes = n + m, x + y
    low, high = max(0, n - (total - successes)), min(n, successes)
    if x >= high:
        return 1.0
    mean = n * successes / total
    log_norm = _log_choose(total, n)

    def log_pmf(i: int) -> float:
        return _log_choose(successes, i) + _log_choose(total - successes, n - i) - log_norm

    if x < mean:  # the lower tail, summed from x down while its terms matter
        first = log_pmf(x)
        acc, term, i = 1.0, 1.0, x
        while i > low:
            term *= i * (total - successes - n + i) / ((successes - i + 1) * (n - i + 1))
            i -= 1
            acc += term
            if term < 1e-17 * acc:
                break
        return min(1.0, math.exp(first) * acc)
    first = log_pmf(x + 1)  # 1 - the upper tail from x + 1
    acc, term, i = 1.0, 1.0, x + 1
    while i < high:
        term *= (successes - i) * (n - i) / ((i + 1) * (total - successes - n + i + 1))
        i += 1
        acc += term
        if term < 1e-17 * acc:
            break
    return max(0.0, 1.0 - math.exp(first) * acc)
