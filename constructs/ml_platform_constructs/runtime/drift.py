"""Drift between an endpoint's captured inputs and a training baseline: PSI and KL divergence per feature.

Standard library only (runs in Lambda without packaging). Definitions (README, "Drift"):

- A baseline holds, per feature, the bins of a training sample: numeric features in quantile bins (edges from
  the sample, open-ended first and last bins), categorical features as their most frequent categories plus
  one ``__other__`` bin that also receives categories never seen in training.
- Both distributions are smoothed additively: p_i = (count_i + ALPHA) / (total + ALPHA * bins), ALPHA = 0.5,
  so an empty bin never makes a logarithm infinite.
- PSI = sum_i (a_i - b_i) * ln(a_i / b_i); KL = sum_i a_i * ln(a_i / b_i) = KL(actual || baseline), with a the
  window's distribution and b the baseline's.
"""

from __future__ import annotations

import base64
import bisect
import csv
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

ALPHA = 0.5
OTHER = "__other__"
BASELINE_VERSION = 1


# --- baseline ---------------------------------------------------------------------------------------------------

def build_baseline(rows: Iterable[Mapping[str, Any]], feature_order: Sequence[str], *, bins: int = 10,
                   max_categories: int = 20) -> dict:
    """A baseline from training rows (dicts). A feature whose every non-empty value parses as a number is numeric."""
    if bins < 2:
        raise ValueError(f"bins={bins}: at least 2 bins are needed")
    values: dict[str, list] = {name: [] for name in feature_order}
    total = 0
    for row in rows:
        total += 1
        for name in feature_order:
            value = row.get(name)
            if value not in (None, ""):
                values[name].append(value)
    if total == 0:
        raise ValueError("the training sample is empty")
    features = {}
    for name in feature_order:
        numbers = _as_numbers(values[name])
        if numbers is not None and numbers:
            edges = _quantile_edges(sorted(numbers), bins)
            features[name] = {"type": "numeric", "edges": edges, "counts": _numeric_counts(numbers, edges)}
        else:
            counts = Counter(str(v) for v in values[name])
            top = [category for category, _ in counts.most_common(max_categories)]
            other = sum(n for category, n in counts.items() if category not in top)
            features[name] = {"type": "categorical", "categories": top,
                              "counts": [counts[c] for c in top] + [other]}
    return {"version": BASELINE_VERSION, "feature_order": list(feature_order), "sample_size": total,
            "features": features}


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

    def add_record(self, line: str) -> None:
        """One JSON Lines record of SageMaker data capture."""
        try:
            capture = json.loads(line)["captureData"]["endpointInput"]
            rows = decode_input(capture["data"], capture.get("encoding", "CSV"), capture.get("observedContentType", ""),
                                self.baseline["feature_order"])
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

    def _bin(self, spec: dict, value: Any) -> Optional[int]:
        if spec["type"] == "numeric":
            try:
                number = float(value)
            except (TypeError, ValueError):
                return None
            return None if math.isnan(number) else bisect.bisect_left(spec["edges"], number)
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


def decode_input(data: str, encoding: str, content_type: str, feature_order: Sequence[str]) -> list[dict]:
    """Rows of features from a captured request body (CSV rows by position, or JSON objects/instances)."""
    if encoding == "BASE64":
        data = base64.b64decode(data).decode("utf-8")
    if "json" in content_type.lower() or encoding == "JSON":
        body = json.loads(data) if isinstance(data, str) else data
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
    for values in csv.reader(io.StringIO(data)):
        if len(values) != len(feature_order):
            raise ValueError(f"a CSV row has {len(values)} values, the baseline {len(feature_order)} features")
        rows.append(dict(zip(feature_order, values)))
    return rows
