"""Drift between an endpoint's captured inputs and a training baseline: PSI and KL divergence per feature, and a
feature watch (each numeric feature's spread, and how much of the window's variance the baseline's principal
components still explain).

Standard library only (runs in Lambda without packaging). Definitions (README, "Drift"):

- A baseline holds, per feature, the bins of a training sample: numeric features in quantile bins (edges from
  the sample, open-ended first and last bins), categorical features as their most frequent categories plus
  one ``__other__`` bin that also receives categories never seen in training.
- Both distributions are smoothed additively: p_i = (count_i + ALPHA) / (total + ALPHA * bins), ALPHA = 0.5,
  so an empty bin never makes a logarithm infinite.
- PSI = sum_i (a_i - b_i) * ln(a_i / b_i); KL = sum_i a_i * ln(a_i / b_i) = KL(actual || baseline), with a the
  window's distribution and b the baseline's.
- Feature watch (README, "Feature watch"): per numeric feature, std ratio = the window's standard deviation / the
  baseline's (sample standard deviations, from at least MIN_SPREAD_VALUES values); and, with the numeric
  features standardized by the baseline's means and deviations, explained share = sum_k v_k' C v_k / trace(C), where
  C is the window's covariance and v_k the baseline's top principal components (as many as explain
  ``variance_target`` of the baseline's variance, 0.95 by default: scikit-learn's ``PCA(n_components=0.95)``).
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

try:
    from . import capture
except ImportError:  # in Lambda the module sits at the top of the package
    import capture  # type: ignore[no-redef]

ALPHA = 0.5
OTHER = "__other__"
BASELINE_VERSION = 2  # 2: numeric features carry mean and std, and the baseline its principal components
MIN_SPREAD_VALUES = 30  # a standard deviation from fewer values is noise
PCA_MAX_FEATURES = 50  # the window's cost grows with features x components per record


# --- baseline ---------------------------------------------------------------------------------------------------

def build_baseline(rows: Iterable[Mapping[str, Any]], feature_order: Sequence[str], *, bins: int = 10,
                   max_categories: int = 20, variance_target: float = 0.95) -> dict:
    """A baseline from training rows (dicts). A feature whose every non-empty value parses as a number is numeric;
    its mean and standard deviation, and the principal components of the numeric features that explain
    ``variance_target`` of their (standardized) variance, are what the feature watch compares with."""
    if bins < 2:
        raise ValueError(f"bins={bins}: at least 2 bins are needed")
    if not 0 < variance_target < 1:
        raise ValueError(f"variance_target={variance_target}: a share between 0 and 1, e.g. 0.95")
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
    features = {}
    for name in feature_order:
        numbers = _as_numbers(values[name])
        if numbers is not None and numbers:
            edges = _quantile_edges(sorted(numbers), bins)
            mean, std = _mean_std(numbers)
            features[name] = {"type": "numeric", "edges": edges, "counts": _numeric_counts(numbers, edges),
                              "mean": mean, "std": std}
        else:
            counts = Counter(str(v) for v in values[name])
            top = [category for category, _ in counts.most_common(max_categories)]
            other = sum(n for category, n in counts.items() if category not in top)
            features[name] = {"type": "categorical", "categories": top,
                              "counts": [counts[c] for c in top] + [other]}
    baseline = {"version": BASELINE_VERSION, "feature_order": list(feature_order), "sample_size": len(table),
                "features": features}
    pca = _principal_components(table, list(feature_order), features, variance_target)
    if pca:
        baseline["pca"] = pca
    return baseline


def _as_numbers(raw: list) -> Optional[list[float]]:
    numbers = []
    for value in raw:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        if math.isnan(number) or math.isinf(number):
            return None
        numbers.append(number)
    return numbers


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


def _principal_components(table: list[list], order: list[str], features: dict, variance_target: float) -> Optional[dict]:
    """The baseline's top principal components of its standardized numeric features (None with fewer than two
    features that vary, or too few complete rows to estimate them)."""
    names = [n for n in order if features[n]["type"] == "numeric" and features[n]["std"] > 0][:PCA_MAX_FEATURES]
    if len(names) < 2:
        return None
    columns = [order.index(n) for n in names]
    means, stds = [features[n]["mean"] for n in names], [features[n]["std"] for n in names]
    vectors = [z for z in (_standardized(row, columns, means, stds) for row in table) if z is not None]
    if len(vectors) < max(10, 2 * len(names)):
        return None
    covariance = _covariance(vectors)
    eigenvalues, eigenvectors = symmetric_eigen(covariance)
    total = sum(covariance[i][i] for i in range(len(names)))
    if total <= 0:
        return None
    explained, k = 0.0, 0
    while k < len(names) and explained < variance_target * total:
        explained += max(eigenvalues[k], 0.0)
        k += 1
    return {"features": names, "mean": means, "std": stds, "components": eigenvectors[:k],
            "explained": explained / total, "variance_target": variance_target, "rows": len(vectors)}


def _standardized(row: Sequence[Any], columns: Sequence[int], means: Sequence[float],
                  stds: Sequence[float]) -> Optional[list[float]]:
    """A row's values at ``columns`` as z-scores, or None if one is missing or not a finite number."""
    z = []
    for column, mean, std in zip(columns, means, stds):
        try:
            number = float(row[column])
        except (TypeError, ValueError, IndexError):
            return None
        if math.isnan(number) or math.isinf(number):
            return None
        z.append((number - mean) / std)
    return z


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


class _Spread:
    """Running mean and variance (Welford), so large values lose no precision."""

    def __init__(self) -> None:
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    @property
    def variance(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0


# --- divergences ------------------------------------------------------------------------------------------------

def smoothed(counts: Sequence[float]) -> list[float]:
    total = sum(counts) + ALPHA * len(counts)
    return [(c + ALPHA) / total for c in counts]


def psi(actual_counts: Sequence[float], baseline_counts: Sequence[float]) -> float:
    a, b = smoothed(actual_counts), smoothed(baseline_counts)
    return sum((ai - bi) * math.log(ai / bi) for ai, bi in zip(a, b))


def kl_divergence(actual_counts: Sequence[float], baseline_counts: Sequence[float]) -> float:
    a, b = smoothed(actual_counts), smoothed(baseline_counts)
    return sum(ai * math.log(ai / bi) for ai, bi in zip(a, b))


# --- captured records -------------------------------------------------------------------------------------------

@dataclass
class Window:
    """What one run read: per-feature bin counts, and what it could not use (counted, never silently dropped)."""
    baseline: dict
    counts: dict[str, list[int]] = field(default_factory=dict)
    records: int = 0
    malformed: int = 0
    missing_values: int = 0
    other_category_values: int = 0  # values in a feature's __other__ bin: rare in training, or never seen there

    def __post_init__(self) -> None:
        self.counts = {name: [0] * len(spec["counts"]) for name, spec in self.baseline["features"].items()}
        self._spreads = {name: _Spread() for name, spec in self.baseline["features"].items()
                         if spec["type"] == "numeric" and spec.get("std")}
        pca = self.baseline.get("pca")
        self._pca_features = pca["features"] if pca else []
        self._projections = [_Spread() for _ in pca["components"]] if pca else []
        self._standardized = [_Spread() for _ in self._pca_features]

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
            self.records += 1
            for name, spec in self.baseline["features"].items():
                value = row.get(name)
                if value in (None, ""):
                    self.missing_values += 1
                    continue
                index = self._bin(spec, value)
                if index is None:
                    self.missing_values += 1
                else:
                    self.counts[name][index] += 1
                    if name in self._spreads:
                        self._spreads[name].add(float(value))
            self._add_to_components(row)

    def _add_to_components(self, row: Mapping[str, Any]) -> None:
        if not self._pca_features:
            return
        pca = self.baseline["pca"]
        z = _standardized([row.get(n) for n in self._pca_features], range(len(self._pca_features)), pca["mean"],
                          pca["std"])
        if z is None:
            return
        for spread, value in zip(self._standardized, z):
            spread.add(value)
        for spread, component in zip(self._projections, pca["components"]):
            spread.add(math.fsum(c * x for c, x in zip(component, z)))

    def _bin(self, spec: dict, value: Any) -> Optional[int]:
        if spec["type"] == "numeric":
            try:
                number = float(value)
            except (TypeError, ValueError):
                return None
            # Not finite: a missing value (as in the baseline), never a spread of NaN that PutMetricData refuses.
            return None if not math.isfinite(number) else bisect.bisect_left(spec["edges"], number)
        category = str(value)
        if category in spec["categories"]:
            return spec["categories"].index(category)
        self.other_category_values += 1
        return len(spec["categories"])

    def scores(self) -> dict[str, dict[str, float]]:
        """PSI and KL per feature that received values in this window."""
        return {name: {"psi": psi(counts, self.baseline["features"][name]["counts"]),
                       "kl": kl_divergence(counts, self.baseline["features"][name]["counts"])}
                for name, counts in self.counts.items() if sum(counts)}

    def feature_watch(self) -> dict:
        """Each numeric feature's std ratio (window / baseline, from at least MIN_SPREAD_VALUES values), and the
        share of the window's variance the baseline's principal components explain, with its drop from the
        baseline's share in percentage points (None without components in the baseline or enough complete rows)."""
        features = self.baseline["features"]
        ratios = {name: math.sqrt(spread.variance) / features[name]["std"]
                  for name, spread in self._spreads.items() if spread.n >= MIN_SPREAD_VALUES}
        watch = {"std_ratio": ratios, "explained_variance": None, "explained_variance_drop": None,
                 "pca_rows": self._standardized[0].n if self._standardized else 0}
        total = math.fsum(s.variance for s in self._standardized)
        if self._standardized and watch["pca_rows"] >= max(MIN_SPREAD_VALUES, 2 * len(self._standardized)) and total > 0:
            share = min(1.0, math.fsum(p.variance for p in self._projections) / total)
            watch["explained_variance"] = share
            watch["explained_variance_drop"] = (self.baseline["pca"]["explained"] - share) * 100
        return watch


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
