"""Drift between an endpoint's captured inputs and a training baseline, and the feature watch (standard library only:
it runs in Lambda without packaging, and ``./platform drift check`` runs the same code on local files).

Definitions (README, "Drift"):

- A baseline holds, per feature, the bins of a training sample: numeric features in quantile bins (edges from the
  sample, open-ended first and last bins), categorical features as their most frequent categories plus one
  ``__other__`` bin that also receives categories never seen in training. A column is numeric when at least
  ``NUMERIC_SHARE`` (99%) of its non-empty values parse as finite numbers; non-finite and unparsable values of a
  numeric column are missing values, in the baseline and in every window alike.
- PSI = sum_i (a_i - b_i) * ln(a_i / b_i) over additively smoothed shares (ALPHA = 0.5 per bin), a the window's, b the
  baseline's. KL(a || b) is published beside it but alarms on nothing: PSI = KL(a||b) + KL(b||a), and for a symmetric
  shift KL is about PSI / 2, so a KL alarm at 0.3 fired only after the PSI alarm at 0.25 had (docs: DECISIONS.md).

The drift decision (``Window.scores``, ``decide``): a feature drifted when its shift is both real and large, and the
error it guards against is a false drift alarm (each one a retraining episode on GPUs), budgeted per endpoint per 90
days, not per check (``per_check_significance``: 0.25 false alarms in 90 days of hourly checks is 0.25 / 2,160 per
check; Bonferroni over the checks holds whatever overlaps their windows share). Real: Pearson's chi-square test of
the window's bin counts against the baseline's rejects "one distribution" at ``significance`` divided over the
features judged (Bonferroni). Large: the PSI's lower confidence bound at that same level is at least the alarm's
threshold (0.25, the seed's): the PSI of a window is biased upward, by about (bins - 1)(1/n + 1/m) under no drift
("The Population Resemblance Statistic", arXiv:2307.11878), so the estimate is first corrected for its bias (the
delta method's second-order term, both samples counted) and then must clear the threshold by its own sampling noise
(first-order term, both samples). The threshold then means the same at every window size: a shift under it (true
PSI 0.24, a 0.5-SD mean shift) alarms no more often than the budget at any size, and a shift well above it is caught
once the window resolves it (0.4, 0.65 SD: from about 4,000 values against a 5,000-row baseline; the baseline's own
noise caps what any window can resolve, ``detectable_psi``). A feature with fewer than ``MIN_PER_BIN`` (10) values
expected in its smallest bin (100 for 10 quantile bins) is not judged (published as such).

Feature watch (README, "Feature watch"), each with a band that depends on the window's size:

- Spread: per numeric feature, the ratio of the window's interquartile range to the baseline's (robust: a standard
  deviation from 30 values of a skewed feature halves or doubles by chance). It alarms outside the configured band
  only when its log is also beyond the sampling noise the baseline measured for that many values (resampled at build
  time: ``iqr_log_sd``), at a third of ``significance`` over the features (the watch's three questions share it).
- Relations: the share of the window's (standardized) variance that the baseline's top principal components explain.
  The components explain 80% of the baseline's variance and are at most d - 1 of the d numeric features (with all d
  the share is identically 1 and sees nothing); the baseline's own share is measured on held-back rows it was not fit
  on, with its sampling noise per window size; a change either way beyond the threshold and the noise alarms (a
  broken join, one feature replaced by a copy of another, moves it). Fewer than 2 numeric features: inactive.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

try:
    from . import capture, stats
except ImportError:  # in Lambda the modules sit at the top of the package
    import capture  # type: ignore[no-redef]
    import stats  # type: ignore[no-redef]

ALPHA = 0.5
OTHER = "__other__"
BASELINE_VERSION = 3  # 3: robust spreads and their noise, held-back explained share, components < features
NUMERIC_SHARE = 0.99
MIN_PER_BIN = 10  # a feature is judged from this many expected window values in its smallest bin
HOURS_90_DAYS = 90 * 24
DEFAULT_FALSE_ALARMS = 0.25  # false drift alarms per endpoint per 90 days


def per_check_significance(false_alarms_per_90_days: float = DEFAULT_FALSE_ALARMS,
                           schedule_minutes: float = 60) -> float:
    """The level of one check, over the features judged, that keeps a drift check running every
    ``schedule_minutes`` to ``false_alarms_per_90_days`` expected false alarms in 90 days (Bonferroni over the
    checks: it holds whatever their windows share)."""
    return min(0.2, false_alarms_per_90_days * schedule_minutes / (HOURS_90_DAYS * 60))


DEFAULT_SIGNIFICANCE = per_check_significance()  # per hourly check, over the features judged
POWER_Z = 1.2815515655446004  # the detectable PSI: caught with 90% power
MIN_SPREAD_VALUES = 50  # a spread ratio from fewer values is not judged
MIN_DISTINCT = 20  # a feature with fewer distinct training values has no interquartile "spread" to judge
MIN_BIN_SHARE = 0.01  # bins (and categories) rarer than this in training are pooled for the test
SCORE_GRID = 199  # the quantiles a baseline keeps per numeric feature for its normal scores
MIN_RELATION_ROWS = 300  # the explained share and the correlations are judged from this many complete rows
MIN_CORRELATION_CHANGE = 0.3  # a pair's correlation must move this much (and beyond its noise) to count
PCA_MAX_FEATURES = 50  # the window's cost grows with features x components per record
VARIANCE_TARGET = 0.8
HELD_BACK = 0.3  # of the complete baseline rows: the explained share is measured there
NOISE_SIZES = (50, 100, 300, 1000, 3000)  # window sizes at which the baseline measures its sampling noise
NOISE_RESAMPLES = 60


# --- baseline ---------------------------------------------------------------------------------------------------

def parse_number(value: Any) -> Optional[float]:
    """A finite number, or None (empty, unparsable, NaN or infinite)."""
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def is_numeric(values: Sequence[Any]) -> bool:
    """At least NUMERIC_SHARE of the non-empty values parse as finite numbers (NaN and inf count as missing)."""
    present = [v for v in values if v not in (None, "")]
    if not present:
        return False
    missing_words = {"nan", "-nan", "inf", "-inf", "+inf", "infinity", "-infinity"}
    usable = [v for v in present if not (isinstance(v, str) and v.strip().lower() in missing_words)
              and not (isinstance(v, float) and not math.isfinite(v))]
    if not usable:
        return False
    return sum(1 for v in usable if parse_number(v) is not None) >= NUMERIC_SHARE * len(usable)


def build_baseline(rows: Iterable[Mapping[str, Any]], feature_order: Sequence[str], *, bins: int = 10,
                   max_categories: int = 20, variance_target: float = VARIANCE_TARGET, seed: int = 0) -> dict:
    """A baseline from training rows (dicts): bins per feature, and for the feature watch each numeric feature's
    quartiles with their sampling noise, and the principal components of the numeric features."""
    if bins < 2:
        raise ValueError(f"bins={bins}: at least 2 bins are needed")
    if not 0 < variance_target < 1:
        raise ValueError(f"variance_target={variance_target}: a share between 0 and 1, e.g. 0.8")
    values: dict[str, list] = {name: [] for name in feature_order}
    table = []
    for row in rows:
        table.append([row.get(name) for name in feature_order])
        for name in feature_order:
            value = row.get(name)
            if value not in (None, ""):
                values[name].append(value)
    if not table:
        raise ValueError("the training sample is empty")
    rng = random.Random(seed)
    features = {}
    for name in feature_order:
        if is_numeric(values[name]):
            numbers = [n for n in (parse_number(v) for v in values[name]) if n is not None]
            ordered = sorted(numbers)
            edges = _quantile_edges(ordered, bins)
            mean, std = _mean_std(numbers)
            q25, q75 = quantile(ordered, 0.25), quantile(ordered, 0.75)
            distinct = len(set(numbers))
            features[name] = {"type": "numeric", "edges": edges, "counts": _numeric_counts(numbers, edges),
                              "mean": mean, "std": std, "q25": q25, "q75": q75, "distinct": distinct,
                              "iqr_log_sd": _iqr_noise(numbers, rng) if q75 > q25 and distinct >= MIN_DISTINCT else {},
                              "grid": [quantile(ordered, (i + 1) / (SCORE_GRID + 1)) for i in range(SCORE_GRID)]}
        else:
            counts = Counter(str(v) for v in values[name])
            # A category rarer than MIN_BIN_SHARE goes to __other__: its bin would need thousands of values to test.
            floor = MIN_BIN_SHARE * sum(counts.values())
            top = [category for category, n in counts.most_common(max_categories) if n >= floor]
            other = sum(n for category, n in counts.items() if category not in top)
            features[name] = {"type": "categorical", "categories": top,
                              "counts": [counts[c] for c in top] + [other]}
    baseline = {"version": BASELINE_VERSION, "feature_order": list(feature_order), "sample_size": len(table),
                "bins": bins, "features": features}
    pca = _principal_components(table, list(feature_order), features, variance_target, rng)
    baseline["pca"] = pca if isinstance(pca, dict) else None
    if not isinstance(pca, dict):
        baseline["pca_inactive"] = pca
    return baseline


def watch_inactive(baseline: Mapping[str, Any]) -> Optional[str]:
    """Why the feature watch can judge nothing on this baseline, or None where it can judge something (a window may
    still be too small, which it says per window): a baseline built before the watch (version < 3) has neither the
    quartiles nor the held-back components it reads, and one whose numeric features have neither a spread to judge
    nor components leaves it nothing to see. In every run's result; the first is alarmed (FeatureWatchActive 0)."""
    version = baseline.get("version", 1)
    if version < 3:
        return (f"the baseline is version {version}, built before the feature watch (version 3): rebuild it "
                "(./platform drift-baseline ENV ENDPOINT SAMPLE.csv)")
    if baseline.get("pca") or any(spec.get("iqr_log_sd") for spec in baseline["features"].values()):
        return None
    return (f"no numeric feature with {MIN_DISTINCT} or more distinct training values (a spread to judge), and no "
            f"principal components ({baseline.get('pca_inactive') or 'none'}): the watch cannot see these inputs")


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linearly interpolated (numpy's default)."""
    if not ordered:
        raise ValueError("no values")
    position = q * (len(ordered) - 1)
    low = int(math.floor(position))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _iqr(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return quantile(ordered, 0.75) - quantile(ordered, 0.25)


def _iqr_noise(numbers: Sequence[float], rng: random.Random) -> dict[str, float]:
    """The SD of log(IQR) of resamples of ``size`` values, per size up to the sample's: the spread ratio's noise."""
    noise = {}
    for size in NOISE_SIZES:
        if size > len(numbers):
            break
        logs = []
        for _ in range(NOISE_RESAMPLES):
            iqr = _iqr(rng.choices(numbers, k=size))
            if iqr > 0:
                logs.append(math.log(iqr))
        if len(logs) >= NOISE_RESAMPLES // 2:
            noise[str(size)] = _mean_std(logs)[1]
    return noise


def noise_at(table: Mapping[str, float], n: int) -> Optional[float]:
    """A noise table's value at ``n`` values: interpolated in log-log between measured sizes, scaled by 1/sqrt(n)
    beyond the largest, None below the smallest (too few values to judge)."""
    sizes = sorted((int(k), v) for k, v in table.items())
    if not sizes or n < sizes[0][0]:
        return None
    for (s0, v0), (s1, v1) in zip(sizes, sizes[1:]):
        if s0 <= n <= s1:
            if v0 <= 0 or v1 <= 0:
                return max(v0, v1)
            t = (math.log(n) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return math.exp(math.log(v0) + t * (math.log(v1) - math.log(v0)))
    last, value = sizes[-1]
    return value * math.sqrt(last / n)


def _quantile_edges(ordered: list[float], bins: int) -> list[float]:
    """Interior edges at the 1/bins .. (bins-1)/bins quantiles, duplicates removed (ties collapse bins)."""
    edges = []
    for i in range(1, bins):
        edge = ordered[min(len(ordered) - 1, int(i * len(ordered) / bins))]
        if not edges or edge > edges[-1]:
            edges.append(edge)
    return edges



def _numeric_counts(numbers: Iterable[float], edges: list[float]) -> list[int]:
    counts = [0] * (len(edges) + 1)
    for number in numbers:
        counts[bisect.bisect_left(edges, number)] += 1
    return counts


def _mean_std(numbers: Sequence[float]) -> tuple[float, float]:
    mean = math.fsum(numbers) / len(numbers)
    if len(numbers) < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in numbers) / (len(numbers) - 1))


def _principal_components(table: list[list], order: list[str], features: dict, variance_target: float,
                          rng: random.Random):
    """The baseline's top principal components of its standardized numeric features (at most d - 1, enough for
    ``variance_target``), fit on most complete rows; the share they explain on the held-back rest, and its noise per
    window size. A string saying why the watch is inactive where that is impossible."""
    names = [n for n in order if features[n]["type"] == "numeric" and features[n]["std"] > 0][:PCA_MAX_FEATURES]
    if len(names) < 2:
        return "fewer than 2 numeric features that vary"
    columns = [order.index(n) for n in names]
    grids = [features[n]["grid"] for n in names]
    vectors = [z for z in (normal_scores([row[c] if c < len(row) else None for c in columns], grids) for row in table)
               if z is not None]
    if len(vectors) < max(100, 10 * len(names)):
        return f"{len(vectors)} complete rows of {len(names)} numeric features, needs {max(100, 10 * len(names))}"
    rng.shuffle(vectors)
    held = max(MIN_SPREAD_VALUES, int(len(vectors) * HELD_BACK))
    fit, held_back = vectors[held:], vectors[:held]
    covariance = _covariance(fit)
    eigenvalues, eigenvectors = symmetric_eigen(covariance)
    total = sum(covariance[i][i] for i in range(len(names)))
    if total <= 0:
        return "no variance in the numeric features"
    explained, k = 0.0, 0
    while k < len(names) - 1 and explained < variance_target * total:
        explained += max(eigenvalues[k], 0.0)
        k += 1
    components = eigenvectors[:k]
    share = explained_share(held_back, components)
    noise = {}
    for size in NOISE_SIZES:
        if size > len(held_back):
            break
        shares = [explained_share(rng.choices(held_back, k=size), components) for _ in range(NOISE_RESAMPLES)]
        noise[str(size)] = _mean_std(shares)[1]
    scale = [math.sqrt(covariance[i][i]) or 1.0 for i in range(len(names))]
    correlations = [[covariance[i][j] / (scale[i] * scale[j]) for j in range(len(names))] for i in range(len(names))]
    return {"features": names, "components": components, "correlations": correlations,
            "explained": share, "explained_fit": explained / total, "explained_noise": noise,
            "variance_target": variance_target, "rows": len(vectors), "held_back_rows": len(held_back)}


def explained_share(vectors: Sequence[Sequence[float]], components: Sequence[Sequence[float]]) -> float:
    """The share of the vectors' variance along ``components`` (orthonormal): projected variance / total variance."""
    n = len(vectors)
    if n < 2:
        return 0.0
    d = len(vectors[0])
    means = [math.fsum(v[j] for v in vectors) / n for j in range(d)]
    total = math.fsum(math.fsum((v[j] - means[j]) ** 2 for v in vectors) for j in range(d))
    if total <= 0:
        return 0.0
    projected = 0.0
    for component in components:
        center = math.fsum(c * m for c, m in zip(component, means))
        projected += math.fsum((math.fsum(c * x for c, x in zip(component, v)) - center) ** 2 for v in vectors)
    return min(1.0, projected / total)


def normal_scores(values: Sequence[Any], grids: Sequence[Sequence[float]]) -> Optional[list[float]]:
    """Each value as the normal quantile of its place among the baseline's (its ``grid`` of quantiles), or None if one
    is missing or not a finite number. Ranks, not raw values, so that heavy tails and skew do not make the
    covariance (and so the components and correlations) noisy: the watch compares how features move together."""
    scores = []
    for value, grid in zip(values, grids):
        number = parse_number(value)
        if number is None:
            return None
        low, high = bisect.bisect_left(grid, number), bisect.bisect_right(grid, number)
        if low == high:  # between two quantiles: its place, linearly
            if low == 0:
                place = 0.0
            elif low == len(grid):
                place = len(grid) + 1.0
            else:
                span = grid[low] - grid[low - 1]
                place = low + ((number - grid[low - 1]) / span if span > 0 else 0.5)
        else:  # on a run of tied quantiles: the middle of the run
            place = (low + high + 1) / 2
        share = min(max(place, 0.5), len(grid) + 0.5) / (len(grid) + 1)
        scores.append(stats.z_quantile(share))
    return scores


def _covariance(vectors: Sequence[Sequence[float]]) -> list[list[float]]:
    n, d = len(vectors), len(vectors[0])
    means = [math.fsum(v[j] for v in vectors) / n for j in range(d)]
    covariance = [[0.0] * d for _ in range(d)]
    for i in range(d):
        for j in range(i, d):
            value = math.fsum((v[i] - means[i]) * (v[j] - means[j]) for v in vectors) / (n - 1)
            covariance[i][j] = covariance[j][i] = value
    return covariance


def symmetric_eigen(matrix: Sequence[Sequence[float]], *, sweeps: int = 100) -> tuple[list[float], list[list[float]]]:
    """Eigenvalues (largest first) and unit eigenvectors (one per row, same order) of a symmetric matrix, by cyclic
    Jacobi rotations (standard library only; fine for the tens of features a baseline holds)."""
    n = len(matrix)
    a = [list(map(float, row)) for row in matrix]
    v = [[float(i == j) for j in range(n)] for i in range(n)]
    scale = sum(a[i][i] ** 2 for i in range(n)) or 1.0
    for _ in range(sweeps):
        if sum(a[i][j] ** 2 for i in range(n) for j in range(i + 1, n)) <= 1e-24 * scale:
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                if a[p][q] == 0.0:
                    continue
                theta = (a[q][q] - a[p][p]) / (2 * a[p][q])
                t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):  # A J
                    a[k][p], a[k][q] = c * a[k][p] - s * a[k][q], s * a[k][p] + c * a[k][q]
                for k in range(n):  # J' (A J)
                    a[p][k], a[q][k] = c * a[p][k] - s * a[q][k], s * a[p][k] + c * a[q][k]
                for k in range(n):  # V J
                    v[k][p], v[k][q] = c * v[k][p] - s * v[k][q], s * v[k][p] + c * v[k][q]
    order = sorted(range(n), key=lambda i: -a[i][i])
    return [a[i][i] for i in order], [[v[k][i] for k in range(n)] for i in order]


# --- divergences ------------------------------------------------------------------------------------------------

def smoothed(counts: Sequence[float]) -> list[float]:
    total = sum(counts) + ALPHA * len(counts)
    return [(c + ALPHA) / total for c in counts]


def psi(actual_counts: Sequence[float], baseline_counts: Sequence[float]) -> float:
    a, b = smoothed(actual_counts), smoothed(baseline_counts)
    return sum((ai - bi) * math.log(ai / bi) for ai, bi in zip(a, b))


def psi_bound(actual_counts: Sequence[float], baseline_counts: Sequence[float], z: float) -> tuple[float, float, float]:
    """``(corrected, se, lower)``: the PSI corrected for its small-sample bias, its standard error, and its lower
    confidence bound ``corrected - z * se``. Both by the delta method on the smoothed shares a (window, n values) and
    b (baseline, m values), each multinomial: the bias is the second-order term, 1/2 sum((1 + b/a)(1 - a)/n +
    (1 + a/b)(1 - b)/m), which is (bins - 1)(1/n + 1/m) under no drift; the variance the first-order one, with
    gradients ln(a/b) + 1 - b/a and -ln(a/b) + 1 - a/b."""
    n, m = sum(actual_counts), sum(baseline_counts)
    a, b = smoothed(actual_counts), smoothed(baseline_counts)
    raw = sum((ai - bi) * math.log(ai / bi) for ai, bi in zip(a, b))
    bias = 0.5 * math.fsum((1 + bi / ai) * (1 - ai) / n + (1 + ai / bi) * (1 - bi) / m for ai, bi in zip(a, b))
    ga = [math.log(ai / bi) + 1 - bi / ai for ai, bi in zip(a, b)]
    gb = [-math.log(ai / bi) + 1 - ai / bi for ai, bi in zip(a, b)]

    def variance(shares: list[float], gradient: list[float], size: float) -> float:
        mean = math.fsum(p * g for p, g in zip(shares, gradient))
        return max(0.0, math.fsum(p * g * g for p, g in zip(shares, gradient)) - mean * mean) / size

    se = math.sqrt(variance(a, ga, n) + variance(b, gb, m))
    corrected = raw - bias
    return corrected, se, corrected - z * se


def kl_divergence(actual_counts: Sequence[float], baseline_counts: Sequence[float]) -> float:
    a, b = smoothed(actual_counts), smoothed(baseline_counts)
    return sum(ai * math.log(ai / bi) for ai, bi in zip(a, b))


# --- captured records -------------------------------------------------------------------------------------------

@dataclass
class Window:
    """What one run read: per-feature bin counts and numeric values, and what it could not use (counted, never
    silently dropped)."""
    baseline: dict
    counts: dict[str, list[int]] = field(default_factory=dict)
    records: int = 0
    malformed: int = 0
    missing_values: int = 0
    other_category_values: int = 0  # values in a feature's __other__ bin: rare in training, or never seen there

    def __post_init__(self) -> None:
        features = self.baseline["features"]
        self.counts = {name: [0] * len(spec["counts"]) for name, spec in features.items()}
        self._values = {name: [] for name, spec in features.items() if spec["type"] == "numeric"}
        pca = self.baseline.get("pca")
        self._pca_features = pca["features"] if pca and "grid" in features.get(pca["features"][0], {}) else []
        self._grids = [features[n]["grid"] for n in self._pca_features]
        self._vectors: list[list[float]] = []

    def add_record(self, line: str) -> None:
        """One JSON Lines record of SageMaker data capture."""
        try:
            captured = json.loads(line)["captureData"]["endpointInput"]
            rows = decode_input(captured["data"], captured.get("encoding", "CSV"),
                                captured.get("observedContentType", ""), self.baseline["feature_order"])
        except (KeyError, TypeError, ValueError, json.JSONDecodeError, UnicodeDecodeError):
            self.malformed += 1
            return
        for row in rows:
            self.add_row(row)

    def add_row(self, row: Mapping[str, Any]) -> None:
        self.records += 1
        for name, spec in self.baseline["features"].items():
            value = row.get(name)
            if spec["type"] == "numeric":
                number = parse_number(value)
                if number is None:  # empty, unparsable or not finite: missing, as in the baseline
                    self.missing_values += 1
                    continue
                self.counts[name][bisect.bisect_left(spec["edges"], number)] += 1
                self._values[name].append(number)
            elif value in (None, ""):
                self.missing_values += 1
            else:
                category = str(value)
                if category in spec["categories"]:
                    self.counts[name][spec["categories"].index(category)] += 1
                else:
                    self.other_category_values += 1
                    self.counts[name][-1] += 1
        if self._pca_features:
            z = normal_scores([row.get(n) for n in self._pca_features], self._grids)
            if z is not None:
                self._vectors.append(z)

    def scores(self, significance: float = DEFAULT_SIGNIFICANCE, psi_threshold: float = 0.25) -> dict[str, dict]:
        """Per feature with values in this window: its count, PSI, KL, and, from ``MIN_PER_BIN`` expected values in its
        smallest bin on, the chi-square test (``p_value``), whether it is significant at ``significance`` over the
        judged features, and the PSI corrected for its bias with its lower bound at that level (``psi_corrected``,
        ``psi_se``, ``psi_lower``) and the PSI this window would catch with 90% power at ``psi_threshold``
        (``detectable_psi``); below that, ``judged`` False and why."""
        out, judged = {}, []
        for name, counts in self.counts.items():
            n = sum(counts)
            if not n:
                continue
            base = self.baseline["features"][name]["counts"]
            score = {"n": n, "psi": psi(counts, base), "kl": kl_divergence(counts, base)}
            pooled_window, pooled_base = pooled_bins(counts, base)
            needed = values_needed(pooled_base)
            if n < needed:
                score.update(judged=False, reason=f"{n} values, needs {needed} ({MIN_PER_BIN} expected in its "
                                                  "smallest bin)")
            else:
                statistic, df = stats.homogeneity(pooled_window, pooled_base)
                score.update(judged=True, chi2=statistic, df=df, p_value=stats.chi2_sf(statistic, df))
                judged.append(name)
            out[name] = score
        level = significance / max(1, len(judged))
        z = stats.z_quantile(1 - level)
        for name in judged:
            score = out[name]
            score["significant"] = score["p_value"] <= level
            corrected, se, lower = psi_bound(self.counts[name], self.baseline["features"][name]["counts"], z)
            score.update(psi_corrected=corrected, psi_se=se, psi_lower=lower,
                         detectable_psi=psi_threshold + (z + POWER_Z) * se)
        return out

    def feature_watch(self, significance: float = DEFAULT_SIGNIFICANCE) -> dict:
        """Each numeric feature's spread ratio (window IQR / baseline IQR) with the noise of that many values and
        whether it is significant; the explained share of the baseline's components on the window, its change from
        the baseline's held-back share in points, and whether that is significant; or why not judged."""
        features = self.baseline["features"]
        ratios, noise, inactive = {}, {}, {}
        for name, values in self._values.items():
            spec = features[name]
            table = spec.get("iqr_log_sd")
            if not table:
                inactive[name] = ("a baseline without quartiles (version < 3): rebuild it" if "q25" not in spec else
                                  f"{spec.get('distinct', 0)} distinct training values: no interquartile spread to "
                                  "judge" if spec.get("distinct", MIN_DISTINCT) < MIN_DISTINCT else
                                  "no spread in the baseline")
                continue
            sd = noise_at(table, len(values)) if len(values) >= MIN_SPREAD_VALUES else None
            if sd is None:
                inactive[name] = f"{len(values)} values, needs {max(MIN_SPREAD_VALUES, min(int(k) for k in table))}"
                continue
            window_iqr = _iqr(values)
            if window_iqr <= 0:
                ratios[name], noise[name] = 0.0, sd
                continue
            ratios[name] = window_iqr / (spec["q75"] - spec["q25"])
            noise[name] = sd
        # The watch asks three questions (spreads, explained share, correlations): each gets a third of the level.
        part = significance / 3
        z = stats.z_quantile(1 - part / (2 * max(1, len(ratios))))
        significant = {name: ratio <= 0 or abs(math.log(ratio)) > z * noise[name] for name, ratio in ratios.items()}
        watch = {"spread_ratio": ratios, "spread_significant": significant, "spread_not_judged": inactive,
                 "explained_variance": None, "explained_variance_drop": None, "explained_significant": False,
                 "pca_rows": len(self._vectors), "pca_inactive": None, "correlation_changes": {},
                 "max_correlation_change": None}
        pca = self.baseline.get("pca")
        if not pca or self.baseline.get("version", 1) < 3 or not self._pca_features:
            watch["pca_inactive"] = self.baseline.get("pca_inactive") or "a baseline without held-back components " \
                                                                            "(version < 3): rebuild it"
            return watch
        needed = max(MIN_RELATION_ROWS, 5 * len(pca["features"]))
        sd = noise_at(pca["explained_noise"], len(self._vectors)) if len(self._vectors) >= needed else None
        if sd is None:
            watch["pca_inactive"] = f"{len(self._vectors)} complete rows, needs {needed}"
            return watch
        share = explained_share(self._vectors, pca["components"])
        drop = (pca["explained"] - share) * 100
        # The baseline's own share was measured on held-back rows: its noise counts too.
        own = noise_at(pca["explained_noise"], pca["held_back_rows"]) or 0.0
        noise = math.sqrt(sd * sd + own * own)
        watch.update(explained_variance=share, explained_variance_drop=drop,
                     explained_significant=abs(drop) > stats.z_quantile(1 - part / 2) * noise * 100)
        watch.update(self._correlation_changes(pca, part))
        return watch

    def _correlation_changes(self, pca: dict, significance: float) -> dict:
        """Pairs of numeric features whose correlation moved by at least MIN_CORRELATION_CHANGE and beyond its noise
        (Fisher's z, both samples counted, Bonferroni over the pairs): a join that replaced a feature by a copy of
        another makes their correlation 1, whatever the explained share does."""
        if "correlations" not in pca:
            return {"correlation_changes": {}, "max_correlation_change": None}
        window = _correlation_matrix(self._vectors)
        names, base = pca["features"], pca["correlations"]
        pairs = len(names) * (len(names) - 1) // 2
        z = stats.z_quantile(1 - significance / (2 * max(1, pairs)))
        noise = math.sqrt(1 / max(1, len(self._vectors) - 3) + 1 / max(1, pca["rows"] - HELD_BACK * pca["rows"] - 3))
        changes, largest = {}, 0.0
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                change = window[i][j] - base[i][j]
                largest = max(largest, abs(change))
                fisher = math.atanh(_clamp(window[i][j])) - math.atanh(_clamp(base[i][j]))
                if abs(change) >= MIN_CORRELATION_CHANGE and abs(fisher) > z * noise:
                    changes[f"{names[i]}~{names[j]}"] = {"baseline": base[i][j], "window": window[i][j]}
        return {"correlation_changes": changes, "max_correlation_change": largest}


def _clamp(r: float) -> float:
    return max(-0.9999, min(0.9999, r))


def _correlation_matrix(vectors: Sequence[Sequence[float]]) -> list[list[float]]:
    covariance = _covariance(vectors)
    scale = [math.sqrt(covariance[i][i]) for i in range(len(covariance))]
    return [[covariance[i][j] / (scale[i] * scale[j]) if scale[i] > 0 and scale[j] > 0 else 0.0
             for j in range(len(covariance))] for i in range(len(covariance))]


def pooled_bins(window: Sequence[float], baseline: Sequence[float]) -> tuple[list[float], list[float]]:
    """The bins as the chi-square test sees them: bins rarer than MIN_BIN_SHARE in the baseline pooled together
    (rarest first) until each pool holds that share, so that one rare category does not make a feature unjudgeable."""
    total = sum(baseline)
    order = sorted(range(len(baseline)), key=lambda i: baseline[i])
    pools: list[list[int]] = []
    current: list[int] = []
    for i in order:
        current.append(i)
        if sum(baseline[j] for j in current) >= MIN_BIN_SHARE * total:
            pools.append(current)
            current = []
    if current:
        if pools:
            pools[0].extend(current)  # what is left joins the rarest pool
        else:
            pools.append(current)
    return ([math.fsum(window[i] for i in pool) for pool in pools],
            [math.fsum(baseline[i] for i in pool) for pool in pools])


def values_needed(baseline_counts: Sequence[float]) -> int:
    """Window values a feature needs before its chi-square test means what it says: MIN_PER_BIN expected in each bin
    the baseline has values in (the textbook rule; below it the test alarms more often than its level), to the
    nearest value: 100 for 10 quantile bins, also when a sample not divisible by 10 leaves its smallest bin a value
    short of a tenth (which would otherwise ask for 101)."""
    total = sum(baseline_counts)
    smallest = min((c for c in baseline_counts if c > 0), default=0)
    return max(1, round(MIN_PER_BIN * total / smallest)) if smallest else MIN_PER_BIN * len(baseline_counts)


@dataclass(frozen=True)
class Thresholds:
    """When the drift check and the feature watch alarm (the MonitoredEndpoint's props)."""
    psi: float = 0.25
    significance: float = DEFAULT_SIGNIFICANCE
    spread_low: float = 0.5
    spread_high: float = 2.0
    explained_change: float = 5.0  # points

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> "Thresholds":
        defaults = cls()
        return cls(**{name: float(env[key]) if env.get(key) else getattr(defaults, name) for name, key in (
            ("psi", "PSI_THRESHOLD"), ("significance", "SIGNIFICANCE"), ("spread_low", "SPREAD_RATIO_LOW"),
            ("spread_high", "SPREAD_RATIO_HIGH"), ("explained_change", "EXPLAINED_VARIANCE_CHANGE"))})


def decide(window: "Window", thresholds: Thresholds = Thresholds()) -> dict:
    """The drift decision and the feature watch's, from one window: ``alarm`` (a feature drifted: significant, and
    the PSI's bias-corrected lower bound >= the threshold), ``judged`` (at least one feature had enough values), and the feature watch's."""
    scores = window.scores(thresholds.significance, thresholds.psi)
    watch = window.feature_watch(thresholds.significance)
    judged = sorted(name for name, score in scores.items() if score["judged"])
    significant = [name for name in judged if scores[name]["significant"]]
    # Large: the bias-corrected PSI clears the threshold by its own noise (the same level as the test).
    drifted = sorted(name for name in significant if scores[name]["psi_lower"] >= thresholds.psi)
    not_judged = {name: score["reason"] for name, score in scores.items() if not score["judged"]}
    unseen = [name for name in window.baseline["features"] if name not in scores]
    not_judged.update({name: "no values in this window" for name in unseen})
    spread_out = sorted(name for name, ratio in watch["spread_ratio"].items()
                        if watch["spread_significant"][name] and not thresholds.spread_low <= ratio <= thresholds.spread_high)
    drop = watch["explained_variance_drop"]
    shift = abs(drop) if drop is not None and watch["explained_significant"] and \
        abs(drop) >= thresholds.explained_change else 0.0
    if not judged:
        reason = (f"not judged: {window.records} records; every feature needs {MIN_PER_BIN} expected values in its smallest "
                  f"bin ({min((values_needed(pooled_bins(s['counts'], s['counts'])[1]) for s in window.baseline['features'].values()), default=0)}"
                  " or more)")
    elif drifted:
        reason = "drift: " + ", ".join(f"{name} (PSI {scores[name]['psi']:.3f}, at least "
                                       f"{scores[name]['psi_lower']:.3f}, p {scores[name]['p_value']:.2g})"
                                       for name in drifted)
    else:
        reason = f"no drift in {len(judged)} judged feature(s)" + (
            f"; {len(not_judged)} not judged" if not_judged else "")
    return {"alarm": bool(drifted), "judged": bool(judged), "reason": reason, "drifted": drifted,
            "significant_psi": max((scores[name]["psi"] for name in significant), default=0.0),
            # What the drift alarm reads: at least the threshold exactly when a feature drifted.
            "psi_lower_bound": max([0.0] + [scores[name]["psi_lower"] for name in significant]),
            "detectable_psi": min((scores[name]["detectable_psi"] for name in judged), default=None),
            "features_judged": len(judged), "features_not_judged": not_judged, "scores": scores,
            "feature_watch": watch, "spread_out_of_band": spread_out, "explained_variance_shift": shift,
            "relations_changed": shift > 0 or bool(watch["correlation_changes"]),
            "feature_watch_inactive": watch_inactive(window.baseline),
            "feature_watch_alarm": bool(spread_out) or shift > 0 or bool(watch["correlation_changes"]),
            "thresholds": asdict(thresholds)}


def decode_input(data: str, encoding: str, content_type: str, feature_order: Sequence[str]) -> list[dict]:
    """Rows of features from a captured request body (CSV rows by position, or JSON objects/instances)."""
    kind, body = capture.decode_body(data, encoding, content_type)
    if kind == "json":
        if isinstance(body, dict) and "instances" in body:
            body = body["instances"]
        items = body if isinstance(body, list) else [body]
        rows = []
        for item in items:
            if isinstance(item, dict):
                rows.append(item)
            elif isinstance(item, list) and len(item) == len(feature_order):
                rows.append(dict(zip(feature_order, item)))
            else:
                raise ValueError("a JSON instance is neither an object nor a list of every feature")
        return rows
    rows = []
    for values in body:
        if len(values) != len(feature_order):
            raise ValueError(f"a CSV row has {len(values)} values, the baseline {len(feature_order)} features")
        rows.append(dict(zip(feature_order, values)))
    return rows
