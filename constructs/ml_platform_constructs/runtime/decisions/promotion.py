"""The promotion gate and the names a promotion changes (standard library only).

The gate (``judge_outcomes``): a model version reaches an endpoint only when it is shown, on the same held-out
examples as the live model, not to be worse than it by more than a tolerance. The error it guards against is
promoting a worse model: a candidate truly worse than the live model by the tolerance or more is promoted in at
most ``alpha`` (5%) of judgements, at every number of examples the gate judges (``MIN_EXAMPLES`` and up), whatever
the two models' disagreement (exact enumeration in tests/unit/test_promotion_gate.py, simulation in
``./platform bench decisions``). The price: on few examples even an equally good candidate is refused; the refusal
says the smallest difference the examples can resolve and how many examples would do.

- Evidence: per-example outcomes, JSON Lines, one ``{"id": ..., "correct": true|false}`` (classifiers) or
  ``{"id": ..., "error": x}`` (regressors: the example's absolute error) per held-out example, for the candidate and
  for the live model on the same ids (``read_outcomes``).
- Classifiers: Tango's paired score test of "candidate accuracy - live accuracy <= -tolerance points"
  (``stats.paired_noninferiority``): promote when it is rejected at ``alpha``. McNemar's test alone asks "any
  difference", not "worse by more than the tolerance".
- Regressors: the paired mean of (candidate error - (1 + tolerance%) x live error), a one-sided normal test at half
  the level (absolute errors are often heavy-tailed), from 300 examples.
- No live model (the first promotion, ``model_version = "initial"``): the candidate against the configured
  baseline score and the number of examples it was measured on (Farrington-Manning for accuracy), the same way;
  never "nothing to compare". A baseline without its sample size is taken as exact (a fixed requirement).

The version is declared by CloudFormation: a ``MonitoredEndpoint`` with a declared ``model_version``
gets a stack parameter (``model_version_parameter(endpoint name)``), its artifact is at
``model_key(model_data_key, version)``, and a promotion updates that parameter (the template stays as deployed), so
the next ``cdk deploy`` (which keeps a parameter's previous value) never undoes it. An endpoint with a quality check
also gets ``quality_baseline_parameter(endpoint name)``, empty until a promotion sets it to the promoted run's
held-out score corrected for the gate's selection (``Judgement.selection_adjusted``, ``baseline_value``): the live
model's score is what its production quality is held to.

The winner's curse: the score that got a candidate promoted overstates it (an equally good candidate promoted on
2,000 paired examples scores 0.5 points above its truth on average: it passed because it drew well), and a healthy
model held to that score alarms more often. The gate decides on the difference d between the candidate's and the
reference's scores; the two models' mean (paired) or the size-weighted mean of candidate and baseline (against a
baseline) is independent of d, and the candidate's score is that mean plus a known share of d. So the baseline is
that mean plus the share of d's median-unbiased estimate given that d cleared the gate (a normal truncated at the
gate's threshold: ``selected_median``). A candidate far above the threshold keeps its score; one that barely passed
is pulled towards what it would score again. Simulated in ``./platform bench decisions``: a healthy model's quality
false alarms after a promotion and without one agree within Monte Carlo error.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional

from ml_platform_job.outcomes import EvidenceError, Outcomes, read_outcomes, write_outcomes

from . import stats

VERSION_PLACEHOLDER = "{version}"
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The quality baseline parameter: empty (no promotion yet: the configured baseline applies), or a decimal number and,
# after a colon, the number of held-out examples it was measured on ("0.92:5000").
BASELINE = re.compile(r"^$|^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?(:[0-9]+)?$")


def _pascal(endpoint_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", endpoint_name) if part)


def model_version_parameter(endpoint_name: str) -> str:
    """The stack parameter that declares an endpoint's model version: ``classifier-prod`` -> ClassifierProdModelVersion."""
    return _pascal(endpoint_name) + "ModelVersion"


def quality_baseline_parameter(endpoint_name: str) -> str:
    """The stack parameter that holds the promoted model's held-out score, the baseline of the endpoint's quality
    check: ``classifier-prod`` -> ClassifierProdQualityBaseline."""
    return _pascal(endpoint_name) + "QualityBaseline"


def baseline_value(score: float, examples: Optional[int] = None) -> str:
    """A held-out score (and its number of examples) as the quality baseline parameter holds it (``BASELINE``):
    ``0.9`` -> "0.9", ``(0.9, 5000)`` -> "0.9:5000"."""
    text = repr(float(score)) + (f":{int(examples)}" if examples is not None else "")
    if not BASELINE.match(text):
        raise ValueError(f"score={score!r}: a finite number of at least 0")
    return text


def model_key(model_data_key: str, version: str) -> str:
    """Where a version's artifact is: ``models/classifier/{version}/model.tar.gz`` with the version filled in."""
    if model_data_key.count(VERSION_PLACEHOLDER) != 1:
        raise ValueError(f"model_data_key={model_data_key!r}: one {VERSION_PLACEHOLDER} where the version goes")
    if not VERSION.match(version):
        raise ValueError(f"version={version!r}: 1-64 letters, digits, '.', '_' or '-'")
    return model_data_key.replace(VERSION_PLACEHOLDER, version)


# --- the gate -------------------------------------------------------------------------------------------------

DEFAULT_TOLERANCE = 0.5  # accuracy points (classifiers) or percent of the live model's MAE (regressors)
DEFAULT_ALPHA = 0.05  # the largest chance of promoting a candidate worse by the tolerance or more
MIN_EXAMPLES = 100  # fewer paired examples: not judged
MIN_EXAMPLES_MAE = 300  # regressors: heavy-tailed errors need more
# Regressors' absolute errors are often heavy-tailed, where a normal test of their mean promotes more often than its
# level (|t3| errors: 7% at 5%); the MAE gate tests at half the level, which holds 5% for such tails (simulated in
# tests/unit/test_promotion_gate.py). No test sees a candidate whose extra errors fall on fewer than 1 in n examples.
MAE_LEVEL_SHARE = 0.5
# Against a baseline, the skew-corrected test keeps its rate for errors as skewed as a lognormal of sigma 1 (skewness
# 6: 4.2% at 300 examples, 2-3% at 1000-3000; bench/decisions.py); at sigma 1.5 (the largest 1% of errors carrying
# a fifth of the total) it is 5-7%. Past 25% a few examples carry the MAE and no sample of this size bounds it: not
# judged. A sample that misses the tail looks benign, so this catches only part of it: judge such models paired.
MAX_TAIL_SHARE = 0.25
_POWER = 0.8  # for "examples needed": the chance an equally good candidate would then be promoted
GUARDS = ("promoting a candidate truly worse than the live model (or the baseline) by the tolerance or more: at "
          "most alpha of judgements, at every number of examples from MIN_EXAMPLES")


@dataclass(frozen=True)
class Judgement:
    """The gate's answer and its evidence. Differences and bounds are in accuracy points (classifiers) or percent of
    the reference MAE (regressors); positive is better for the candidate."""
    promote: bool
    judged: bool
    reason: str
    metric: str
    test: str
    examples: int
    candidate: Optional[float]
    reference: Optional[float]  # the live model's score on the same examples, or the baseline
    reference_kind: str  # "live" or "baseline"
    tolerance: float
    alpha: float
    difference: Optional[float] = None
    bound: Optional[float] = None  # the one-sided (1 - alpha) lower bound of the difference (None: beyond the range searched)
    resolvable: Optional[float] = None  # the bound's half-width: the advantage these examples can resolve
    examples_needed: Optional[int] = None  # for an equally good candidate to be promoted 80% of the time
    baseline_examples: Optional[int] = None
    # The candidate's score corrected for the gate's own selection (the winner's curse): what a promotion makes the
    # quality check's baseline. None unless promoted.
    selection_adjusted: Optional[float] = None
    disagreements: Optional[dict] = None
    ids_sha256: Optional[str] = None
    guards: str = GUARDS
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def _not_judged(reason: str, metric: str, test: str, examples: int, tolerance: float, alpha: float,
                reference_kind: str, **extra: Any) -> Judgement:
    return Judgement(promote=False, judged=False, reason=f"not judged: {reason}", metric=metric, test=test,
                     examples=examples, candidate=None, reference=None, reference_kind=reference_kind,
                     tolerance=tolerance, alpha=alpha, **extra)


def _bisect(function, low: float, high: float, steps: int = 80) -> Optional[float]:
    """The root of an increasing ``function`` on [low, high], or None when it lies beyond either end (the caller says
    so rather than printing an end of the search as if it were the bound)."""
    if function(low) >= 0 or function(high) <= 0:
        return None
    for _ in range(steps):
        middle = (low + high) / 2
        if function(middle) > 0:
            high = middle
        else:
            low = middle
    return (low + high) / 2


def selected_median(observed: float, threshold: float, se: float) -> float:
    """The median-unbiased estimate of a normal mean from one observation (standard error ``se``) that was kept only
    because it exceeded ``threshold``: the mean at which half the draws kept would exceed ``observed``,
    P(X > observed | X > threshold) = 1/2 (Lee, Sun, Sun and Taylor 2016, "Exact post-selection inference", for one
    truncation). Far above the threshold it is the observation itself."""
    if not se > 0 or not observed > threshold:
        return observed

    def excess(mean: float) -> float:
        kept = stats.normal_sf((threshold - mean) / se)
        return stats.normal_sf((observed - mean) / se) / kept - 0.5 if kept > 0 else -0.5

    root = _bisect(excess, threshold - 8 * se, observed + 8 * se)
    return observed if root is None else root


def _selection_adjusted(mean: float, share: float, difference: float, threshold: Optional[float],
                        se: float) -> float:
    """``mean + share * d*``: the candidate's score from the selection-free mean and the median-unbiased difference
    (``difference`` kept because it exceeded ``threshold``; None: no threshold, nothing to correct)."""
    if threshold is None:
        return mean + share * difference
    return mean + share * selected_median(difference, threshold, se)


def _negated(root: Optional[float]) -> Optional[float]:
    return None if root is None else -root


def _shown(bound: Optional[float]) -> str:
    return "beyond the range searched" if bound is None else f"{bound:+.2f}"


def _check_settings(tolerance: float, alpha: float) -> None:
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and 0 <= tolerance < 100):
        raise ValueError(f"tolerance={tolerance!r}: points (or percent) from 0 to under 100, e.g. 0.5")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 0.5):
        raise ValueError(f"alpha={alpha!r}: a one-sided error rate between 0 and 0.5, e.g. 0.05")


def judge_outcomes(candidate: Outcomes, live: Optional[Outcomes] = None, *, baseline: Optional[float] = None,
                   baseline_examples: Optional[int] = None, tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA, min_examples: int = MIN_EXAMPLES) -> Judgement:
    """The gate: the candidate against the live model's outcomes on the same examples (paired), or, without a live
    model, against ``baseline`` (an accuracy share or an MAE) measured on ``baseline_examples`` examples."""
    _check_settings(tolerance, alpha)
    if live is not None:
        return _judge_paired(candidate, live, tolerance, alpha, min_examples)
    if baseline is None:
        raise ValueError("judge against the live model's outcomes or a baseline (with its number of examples)")
    return _judge_baseline(candidate, baseline, baseline_examples, tolerance, alpha, min_examples)


def _judge_paired(candidate: Outcomes, live: Outcomes, tolerance: float, alpha: float, min_examples: int) -> Judgement:
    metric = candidate.metric
    test = "paired score test (Tango)" if metric == "accuracy" else "paired normal test of error differences"
    if candidate.kind != live.kind:
        raise EvidenceError(f"the candidate's outcomes are {candidate.kind!r}, the live model's {live.kind!r}: "
                            "score both models the same way")
    ids = set(candidate.values)
    if ids != set(live.values):
        only_candidate, only_live = len(ids - set(live.values)), len(set(live.values) - ids)
        return _not_judged(
            f"the two models were scored on different examples ({only_candidate} only the candidate's, {only_live} "
            f"only the live model's; ids sha256 {candidate.digest()[:12]} and {live.digest()[:12]}): score the live "
            "model on the candidate's held-out examples", metric, test, len(ids & set(live.values)), tolerance, alpha,
            "live")
    n = len(ids)
    minimum = min_examples if metric == "accuracy" else max(min_examples, MIN_EXAMPLES_MAE)
    if n < minimum:
        return _not_judged(f"{n} paired examples, needs {minimum}", metric, test, n, tolerance, alpha, "live",
                           ids_sha256=candidate.digest())
    z_alpha = stats.z_quantile(1 - alpha)
    digest = candidate.digest()
    if metric == "accuracy":
        better = sum(1 for i in ids if candidate.values[i] > live.values[i])
        worse = sum(1 for i in ids if candidate.values[i] < live.values[i])
        c_score, l_score = candidate.score(), live.score()
        difference = (better - worse) / n * 100
        # The lower bound: the margin at which the test just rejects.
        bound = _negated(_bisect(lambda m: stats.paired_noninferiority(better, worse, n, m / 100) - z_alpha,
                                 -99.9, 99.9))
        disagreement = max(better + worse, 1) / n
        resolvable = z_alpha * math.sqrt(disagreement / n) * 100
        z = stats.paired_noninferiority(better, worse, n, tolerance / 100)
        promote = z > z_alpha
        needed = (math.ceil((z_alpha + stats.z_quantile(_POWER)) ** 2 * disagreement / (tolerance / 100) ** 2)
                  if tolerance > 0 else None)
        details = {"z": z, "critical_z": z_alpha}
        disagreements = {"candidate_only_right": better, "live_only_right": worse}
        # The gate's threshold on the difference (shares) at this many disagreements, and the difference's noise.
        discordant = better + worse
        threshold = _bisect(lambda d: stats.paired_noninferiority((discordant + d * n) / 2, (discordant - d * n) / 2,
                                                                  n, tolerance / 100) - z_alpha,
                            -discordant / n, discordant / n) if discordant else None
        noise = math.sqrt(max(discordant / n - (difference / 100) ** 2, 1e-12) / n)
        adjusted = _selection_adjusted((c_score + l_score) / 2, 0.5, difference / 100, threshold, noise)
    else:
        c_score, l_score = candidate.score(), live.score()
        if l_score <= 0:
            return _not_judged(f"the live model's MAE is 0 on these {n} examples, so a tolerance in percent of it "
                               "allows nothing: check the live model's outcomes (are they its errors?)", metric, test,
                               n, tolerance, alpha, "live", ids_sha256=digest)
        pairs = [(candidate.values[i], live.values[i]) for i in ids]

        z_alpha = stats.z_quantile(1 - alpha * MAE_LEVEL_SHARE)

        # d = c - k*l for each k from the pairs' moments, once: the bisection below evaluates dozens of k.
        c_mean, l_mean = math.fsum(c for c, _ in pairs) / n, math.fsum(l for _, l in pairs) / n
        c_var = math.fsum((c - c_mean) ** 2 for c, _ in pairs) / (n - 1)
        l_var = math.fsum((l - l_mean) ** 2 for _, l in pairs) / (n - 1)
        covariance = math.fsum((c - c_mean) * (l - l_mean) for c, l in pairs) / (n - 1)
        # Third co-moments: a candidate that is slightly better on most examples and much worse on a few has
        # right-skewed differences, where a plain z promotes it far above its level (bench/decisions.py).
        ccc, ccl, cll, lll = (math.fsum((c - c_mean) ** (3 - j) * (l - l_mean) ** j for c, l in pairs) / n
                              for j in range(4))

        def z_at(percent: float) -> float:
            k = 1 + percent / 100
            mean = c_mean - k * l_mean
            spread = math.sqrt(max(c_var + k * k * l_var - 2 * k * covariance, 0.0))
            if spread <= 1e-12 * max(c_mean, l_mean, 1e-300):
                return math.inf if mean < 0 else -math.inf
            third = ccc - 3 * k * ccl + 3 * k * k * cll - k ** 3 * lll
            return -stats.skew_corrected(mean / (spread / math.sqrt(n)), third / spread ** 3 / math.sqrt(n))

        z = z_at(tolerance)
        promote = z > z_alpha
        # In percent of the live MAE: the candidate is at most (1 + excess%) x the live MAE, at 1 - alpha.
        bound = _negated(_bisect(lambda r: z_at(r) - z_alpha, -100, 1000))
        difference = (1 - c_score / l_score) * 100
        relative_sd = math.sqrt(max(c_var + l_var - 2 * covariance, 0.0)) / l_score
        resolvable = z_alpha * relative_sd / math.sqrt(n) * 100
        needed = (math.ceil(((z_alpha + stats.z_quantile(_POWER)) * relative_sd / (tolerance / 100)) ** 2)
                  if tolerance > 0 and relative_sd > 0 else None)
        details = {"z": z, "critical_z": z_alpha}
        disagreements = None
        # In MAE units, positive better: d = live - candidate; the gate's threshold on it as a normal test (its skew
        # correction left out: the correction only moves how far the baseline is pulled).
        noise = math.sqrt(max(c_var + l_var - 2 * covariance, 0.0) / n)
        adjusted = _selection_adjusted((c_score + l_score) / 2, -0.5, l_score - c_score,
                                       -tolerance / 100 * l_score + z_alpha * noise, noise)
    if metric == "accuracy":
        kept, within = (f"not worse than the live model by {tolerance:g} points or more",
                        f"within {tolerance:g} points of the live model")
    else:
        kept, within = (f"an MAE not {tolerance:g}% or more above the live model's",
                        f"within {tolerance:g}% of the live model's MAE")
    if promote:
        reason = (f"{kept}: on {n} paired examples the difference is {difference:+.2f}, its {1 - alpha:.0%} lower "
                  f"bound {_shown(bound)} (above -{tolerance:g})")
    else:
        hint = (f"these examples resolve about {resolvable:.2f}: a candidate must be about {resolvable - tolerance:.2f}"
                f" better to pass" if resolvable > tolerance else "the candidate is worse than the tolerance allows")
        more = (f"; about {needed} paired examples would let an equally good candidate pass {_POWER:.0%} of the "
                "time" if needed and needed > n else "")
        reason = (f"not shown to be {within}: on {n} paired examples the difference is {difference:+.2f}, its "
                  f"{1 - alpha:.0%} lower bound {_shown(bound)} (needs above -{tolerance:g}); {hint}{more}")
    return Judgement(promote=promote, judged=True, reason=reason, metric=metric, test=test, examples=n,
                     candidate=c_score, reference=l_score, reference_kind="live", tolerance=tolerance, alpha=alpha,
                     difference=difference, bound=bound, resolvable=resolvable, examples_needed=needed,
                     selection_adjusted=adjusted if promote else None,
                     disagreements=disagreements, ids_sha256=digest, details=details)


def _judge_baseline(candidate: Outcomes, baseline: float, baseline_examples: Optional[int], tolerance: float,
                    alpha: float, min_examples: int) -> Judgement:
    metric = candidate.metric
    n = len(candidate.values)
    exact = baseline_examples is None
    if metric == "accuracy":
        if not 0 < baseline <= 1:
            raise ValueError(f"baseline={baseline!r}: an accuracy share in (0, 1], such as 0.92")
        test = ("exact binomial test against a fixed requirement" if exact else
                "Farrington-Manning score test against a baseline measured on other examples")
    else:
        if not baseline > 0:
            raise ValueError(f"baseline={baseline!r}: an MAE above 0")
        test = "one-sided normal test of the MAE against the baseline"
    if baseline_examples is not None and (not isinstance(baseline_examples, int) or baseline_examples < 1):
        raise ValueError(f"baseline_examples={baseline_examples!r}: the number of examples the baseline was measured "
                         "on, at least 1")
    minimum = min_examples if metric == "accuracy" else max(min_examples, MIN_EXAMPLES_MAE)
    if n < minimum:
        return _not_judged(f"{n} examples, needs {minimum}", metric, test, n, tolerance, alpha, "baseline",
                           baseline_examples=baseline_examples, ids_sha256=candidate.digest())
    z_alpha = stats.z_quantile(1 - alpha)
    score = candidate.score()
    if metric == "accuracy":
        correct = round(math.fsum(candidate.values.values()))
        difference = (score - baseline) * 100
        if exact:
            def passes(m: float) -> bool:
                required = baseline - m / 100
                return required <= 0 or stats.binomial_sf(correct, n, required) <= alpha
            promote = passes(tolerance)
            bound = _negated(_bisect(lambda m: 1.0 if passes(m) else -1.0, -100, 100))
            resolvable = z_alpha * math.sqrt(baseline * (1 - baseline) / n) * 100
            variance = baseline * (1 - baseline) / n
            required = baseline - tolerance / 100
            lowest = next((k for k in range(max(0, math.floor(required * n) - 1), n + 1)
                           if required <= 0 or stats.binomial_sf(k, n, required) <= alpha), None)
            threshold = None if lowest is None else (lowest - 0.5) / n - baseline
            adjusted = _selection_adjusted(baseline, 1.0, score - baseline, threshold, math.sqrt(variance))
        else:
            base_correct = round(baseline * baseline_examples)
            promote = stats.two_proportion_noninferiority(correct, n, base_correct, baseline_examples,
                                                          tolerance / 100) > z_alpha
            bound = _negated(_bisect(lambda m: stats.two_proportion_noninferiority(
                correct, n, base_correct, baseline_examples, m / 100) - z_alpha, -99.9, 99.9))
            variance = score * (1 - score) / n + baseline * (1 - baseline) / baseline_examples
            resolvable = z_alpha * math.sqrt(variance) * 100
            passing = _bisect(lambda p: stats.two_proportion_noninferiority(
                p * n, n, base_correct, baseline_examples, tolerance / 100) - z_alpha, 1e-9, 1 - 1e-9)
            weight = baseline_examples / (n + baseline_examples)
            adjusted = _selection_adjusted((correct + base_correct) / (n + baseline_examples), weight,
                                           score - baseline, None if passing is None else passing - baseline,
                                           math.sqrt(variance))
        spread = math.sqrt(baseline * (1 - baseline))
        floor = 0.0 if exact else baseline * (1 - baseline) / baseline_examples
    else:
        errors = list(candidate.values.values())
        top = sorted(errors, reverse=True)[:max(3, math.ceil(n / 100))]
        total = math.fsum(errors)
        if total > 0 and math.fsum(top) / total > MAX_TAIL_SHARE:
            return _not_judged(
                f"the largest {len(top)} of {n} errors carry {math.fsum(top) / total:.0%} of the total: an MAE that "
                f"few examples carry cannot be bounded from {n} (the test's error rate would exceed {alpha:g}); judge "
                "against the live model on the same examples, or on more examples", metric, test, n, tolerance, alpha,
                "baseline", baseline_examples=baseline_examples, ids_sha256=candidate.digest())
        spread = statistics.stdev(errors)
        # The baseline's own spread and skew are unknown here: taken as the candidate's.
        base_variance = 0.0 if exact else spread ** 2 / baseline_examples
        third = math.fsum((e - score) ** 3 for e in errors) / n
        se = math.sqrt(spread ** 2 / n + base_variance)
        skewness = (third * (1 / n ** 2 - (0.0 if exact else 1 / baseline_examples ** 2)) / se ** 3
                    if se > 0 else 0.0)

        z_alpha = stats.z_quantile(1 - alpha * MAE_LEVEL_SHARE)

        def z_at(percent: float) -> float:
            margin = baseline * (1 + percent / 100) - score
            if se == 0:
                return math.inf if margin > 0 else -math.inf
            return -stats.skew_corrected(-margin / se, skewness)

        promote = z_at(tolerance) > z_alpha
        bound = _negated(_bisect(lambda r: z_at(r) - z_alpha, -100, 1000))
        difference = (1 - score / baseline) * 100
        # In MAE units, positive better: d = baseline - score, kept above -tolerance x baseline + z se.
        weight = 1.0 if exact else baseline_examples / (n + baseline_examples)
        mean = baseline if exact else (score * n + baseline * baseline_examples) / (n + baseline_examples)
        adjusted = _selection_adjusted(mean, -weight, baseline - score,
                                       -tolerance / 100 * baseline + z_alpha * se, se)
        variance = spread ** 2 / n + base_variance
        resolvable = z_alpha * math.sqrt(variance) / baseline * 100
        spread, floor = spread / baseline, base_variance / baseline ** 2
    per_example = (z_alpha + stats.z_quantile(_POWER)) ** 2
    share = tolerance / 100
    needed = None
    if tolerance > 0 and share ** 2 / per_example > floor:
        needed = math.ceil(spread ** 2 / (share ** 2 / per_example - floor))
    worse_by = "points" if metric == "accuracy" else "% of the baseline MAE"
    against = "the baseline " + (f"{baseline:g}" + (f" (measured on {baseline_examples} examples)" if not exact
                                                    else " (a fixed requirement)"))
    if promote:
        reason = (f"not worse than {against} by {tolerance:g} {worse_by} or more: on {n} examples the difference is "
                  f"{difference:+.2f}, its {1 - alpha:.0%} lower bound {_shown(bound)}")
    else:
        more = (f"; about {needed} examples would let a candidate as good as the baseline pass {_POWER:.0%} of the "
                "time" if needed and needed > n else "; the baseline's own sample is too small for this tolerance: "
                "measure it on more examples" if needed is None and tolerance > 0 else "")
        reason = (f"not shown to be within {tolerance:g} {worse_by} of {against}: on {n} examples the difference is "
                  f"{difference:+.2f}, its {1 - alpha:.0%} lower bound {_shown(bound)} (needs above -{tolerance:g}); "
                  f"these examples resolve about {resolvable:.2f}{more}")
    return Judgement(promote=promote, judged=True, reason=reason, metric=metric, test=test, examples=n,
                     candidate=score, reference=baseline, reference_kind="baseline", tolerance=tolerance, alpha=alpha,
                     difference=difference, bound=bound, resolvable=resolvable, examples_needed=needed,
                     selection_adjusted=adjusted if promote else None,
                     baseline_examples=baseline_examples, ids_sha256=candidate.digest())


# --- the held-out set's ledger --------------------------------------------------------------------------------------

DEFAULT_HOLDOUT_USES = 5
FRESH_OVERLAP = 0.1  # a held-out set sharing less than this share of its ids with the ledger's is a fresh one
LEDGER_VERSION = 1


class Ledger:
    """Every judgement of an endpoint's candidates on its held-out set (one JSON document; ``./platform model promote``
    keeps it in the dataset bucket, written with conditional writes).

    The error it guards against is the gate's own, spent again and again: one held-out set judged for candidate
    after candidate, and a candidate judged again on more examples, each at ``alpha``, promotes a worse model far
    more often than ``alpha`` (five candidates 0.5 points worse: at least one promoted in 18% of trials). So each
    judgement on the set is made at ``alpha / uses`` (Bonferroni over a budget of ``uses`` judgements, 5 by default:
    at most ``alpha`` in all, whatever the candidates), and after ``uses`` judgements the set is spent: the next
    promotion is refused until the set is refreshed (new held-out examples no model trained on, or ``./platform model
    ledger ENV ENDPOINT --refresh`` where the operator vouches for it). The ledger keeps every id judged since it
    started; a set that shares less than FRESH_OVERLAP of the smaller of the two is fresh by itself; a bigger set that
    contains the old one is not (a candidate judged again on more examples is another look), nor is a part of it.

    A chain of promotions each within the tolerance can still lose more than it in all (0.25 points a step: 19-29% of
    chains promoted at n = 10,000). The ledger keeps the outcomes of the model the chain started from (the live
    model at the set's first paired judgement, its ``anchor``) and a candidate must also be shown within
    ``max_chain_drop`` of it, on the same examples, at the same level."""

    def __init__(self, state: Optional[dict] = None) -> None:
        self.state = state or {"version": LEDGER_VERSION, "ids_sha256": None, "ids": [], "uses": [], "anchor": None,
                               "started": None}

    @classmethod
    def parse(cls, text: Optional[str]) -> "Ledger":
        if not text:
            return cls()
        state = json.loads(text)
        if not isinstance(state, dict) or state.get("version") != LEDGER_VERSION:
            raise ValueError("not a held-out ledger of this version")
        return cls(state)

    def to_text(self) -> str:
        return json.dumps(self.state, sort_keys=True)

    @property
    def uses(self) -> list[dict]:
        return self.state["uses"]

    def is_fresh(self, ids: Iterable[str]) -> bool:
        """Whether a held-out set of these ids is a new one for this ledger (or the ledger has none yet): it shares
        less than FRESH_OVERLAP of the smaller of it and the ids judged so far."""
        ids, judged = set(ids), set(self.state["ids"])
        if not judged or not ids:
            return True
        return len(ids & judged) < FRESH_OVERLAP * min(len(ids), len(judged))

    def start(self, ids: Iterable[str], at: str, anchor: Optional[tuple[str, Outcomes]] = None) -> None:
        """A fresh set: no uses, and the model the chain starts from (the live model, where it was scored). The ids
        judged before stay in the ledger (only ``--refresh`` clears them), so a spent set judged again later is not
        fresh."""
        ordered = sorted(ids)
        self.state.update(ids=sorted(set(self.state["ids"]) | set(ordered)),
                          ids_sha256=Outcomes("correct", dict.fromkeys(ordered, 0.0)).digest(),
                          uses=[], anchor=None, started=at)
        if anchor is not None:
            self.set_anchor(*anchor)

    def set_anchor(self, run: str, outcomes: Outcomes) -> None:
        self.state["anchor"] = {"run": run, "kind": outcomes.kind, "outcomes": dict(outcomes.values)}

    def anchor(self) -> Optional[tuple[str, Outcomes]]:
        anchor = self.state.get("anchor")
        return None if not anchor else (anchor["run"], Outcomes(anchor["kind"], anchor["outcomes"]))

    def level(self, alpha: float, uses: int) -> float:
        """Each judgement's level on this set: ``alpha / uses``."""
        return alpha / uses

    def spent(self, uses: int) -> bool:
        return len(self.uses) >= uses

    def record(self, entry: dict, ids: Iterable[str] = ()) -> None:
        """A judgement on the set, and the ids it was made on (kept: every id judged since the ledger started)."""
        self.uses.append(entry)
        self.state["ids"] = sorted(set(self.state["ids"]) | set(ids))


def judge_chain(candidate: Outcomes, ledger: Ledger, live_run: Optional[str], *, max_chain_drop: float,
                alpha: float) -> Optional[Judgement]:
    """The candidate against the chain's first model on the ledger's examples (None: no anchor, or the anchor is the
    live model, which the gate has just judged it against)."""
    anchor = ledger.anchor()
    if anchor is None or anchor[0] == live_run:
        return None
    run, outcomes = anchor
    shared = set(outcomes.values) & set(candidate.values)
    if candidate.kind != outcomes.kind or len(shared) < len(outcomes.values):
        return _not_judged(f"the candidate was not scored on every example the chain's first model ({run}) was: "
                           "refresh the held-out ledger", candidate.metric, "chain", len(shared), max_chain_drop,
                           alpha, "live")
    restricted = Outcomes(candidate.kind, {i: candidate.values[i] for i in outcomes.values})
    return judge_outcomes(restricted, outcomes, tolerance=max_chain_drop, alpha=alpha)


def split_problem(candidate: Optional[Mapping[str, Any]], live: Optional[Mapping[str, Any]]) -> Optional[str]:
    """What makes two runs' held-out splits unfit for a paired judgement, or None. The deterministic split holds an
    id out for every run with the same salt and fraction, so the live model never trained on the candidate's
    held-out examples; with another salt or fraction it may have."""
    if not candidate or not live:
        return "a run without its held-out split in the passport (log it with holdout.describe)"
    for key in ("salt", "fraction"):
        if candidate.get(key) != live.get(key):
            return (f"the held-out splits differ in {key} ({candidate.get(key)!r} against {live.get(key)!r}; ids sha256 "
                    f"{str(candidate.get('ids_sha256'))[:12]} and {str(live.get('ids_sha256'))[:12]}): the live model "
                    "may have trained on the candidate's held-out examples. Split both with the same salt and fraction")
    return None


# --- 0.3's point-estimate gate, deprecated ------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    promote: bool
    metric: str
    candidate: Optional[float]
    live: Optional[float]
    tolerance: float
    higher_is_better: bool
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


def judge(metric: str, candidate: Optional[float], live: Optional[float], *, tolerance: float = 0.0,
          higher_is_better: bool = True) -> Decision:
    """Deprecated (0.5.0; removed in 1.0.0): compares two point estimates, each on its own held-out set, with no error
    rate (a model 1 point worse was promoted in 28-42% of trials). Use ``judge_outcomes``.

    Promote unless the candidate's score is worse than the live model's by more than ``tolerance``. A candidate
    without the score, with a score that is not a finite number (NaN compares as never worse), or with a
    ``holdout_accuracy`` outside 0-1 (a percentage against a fraction) is refused; a live model without a usable
    score (never promoted through this gate) is not compared."""
    warnings.warn("promotion.judge compares point estimates and has no error rate: use promotion.judge_outcomes "
                  "(removed in 1.0.0)", DeprecationWarning, stacklevel=2)

    def decide(promote: bool, reason: str) -> Decision:
        return Decision(promote, metric, candidate, live, tolerance, higher_is_better, reason)

    if candidate is None:
        return decide(False, f"the candidate has no {metric} (log it with TrackedRun.log_holdout)")
    if not math.isfinite(candidate):
        return decide(False, f"the candidate's {metric} is {candidate}, not a number that can be compared")
    if metric == "holdout_accuracy" and not 0 <= candidate <= 1:
        return decide(False, f"the candidate's {metric} is {candidate:g}, not a fraction from 0 to 1 (a percentage? "
                             "TrackedRun.log_holdout takes accuracy as a fraction)")
    if live is None:
        return decide(True, f"the live model has no recorded {metric} (it was not promoted through this gate): "
                            "nothing to compare against")
    if not math.isfinite(live):
        return decide(True, f"the live model's {metric} is {live}, not a number: nothing to compare against")
    worse_by = (live - candidate) if higher_is_better else (candidate - live)
    if worse_by > tolerance:
        return decide(False, f"{metric} {candidate:.6g} is worse than the live model's {live:.6g} "
                             f"(by {worse_by:.6g}; tolerance {tolerance:g})")
    return decide(True, f"{metric} {candidate:.6g} against the live model's {live:.6g} (tolerance {tolerance:g})")
