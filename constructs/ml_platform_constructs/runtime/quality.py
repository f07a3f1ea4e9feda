"""Production quality: captured predictions joined with ground-truth labels, and the decision against a baseline
(standard library only: the scheduled function and ``./platform quality check`` run this same code).

- Predictions: SageMaker data capture records (``capture.py``). A record's join key is its ``inferenceId`` (what the
  caller passed to InvokeEndpoint as ``InferenceId``) or, without one, its ``eventId``, as Model Monitor joins
  (https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-model-quality-merge.html).
- Labels: JSON Lines, each ``{"inferenceId": ..., "label": ...}`` (``eventId`` instead of ``inferenceId`` is accepted),
  or Model Monitor's ground-truth form ``{"groundTruthData": {"data": "1", "encoding": "CSV"}, "eventMetadata":
  {"eventId": ...}, "eventVersion": "0"}``, whose ``eventId`` holds the inference id or the event id.
- Where the prediction sits in a response (``prediction_path``), as Model Monitor's InferenceAttribute: for a CSV
  response, a column index (default 0), each line one prediction; for a JSON response, a path of keys and list
  indexes separated by dots, ``*`` for every element of a list (``predictions.*.score``); empty (default) for the
  whole response (a list: each element one prediction). A request of several rows has one prediction per row; its
  label is then a list (or CSV line) of as many labels.
- Metrics: binary and multiclass: accuracy, the share of labelled predictions equal to their label (numbers compare
  as numbers; for binary, a numeric prediction is first thresholded at ``probability_threshold``); regression: MAE.
- Decision: ``too_few_labels`` under ``min_labelled`` labelled predictions. Otherwise the shortfall (accuracy:
  baseline - value, in percentage points; MAE: (value - baseline) / baseline, in percent) alarms only when it is at
  least ``max_drop`` and unlikely to be noise: its one-sided p-value, the chance that a model exactly as good as the
  baseline scores this badly or worse on this many labels, is at most ``significance`` (default 0.001). Accuracy: the
  exact binomial test of the correct predictions against the baseline; MAE: the normal test of the mean absolute
  error against the baseline with the window's own spread of absolute errors. A shortfall of ``max_drop`` or more
  that is not significant is ``not_significant``; anything else is ``ok``. Without the test, a model exactly as good as
  a 0.92 baseline scores 0.905 or less in about a quarter of 200-label windows: an hourly alarm would fire on a healthy
  model several times a day. With it, a healthy model alarms in at most ``significance`` of its windows.
- Baseline: the live model's held-out score. An endpoint with a declared model version gets it from its promotion
  (``PROMOTED_BASELINE``, the promoted run's ``holdout_accuracy`` or ``holdout_mae``: ``holdout_metric``); before any
  promotion, and for an endpoint without one, it is the configured value (``BASELINE``).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

try:
    from . import capture
except ImportError:  # in Lambda the module sits at the top of the package
    import capture  # type: ignore[no-redef]

PROBLEM_TYPES = ("binary", "multiclass", "regression")
DECISIONS = ("ok", "alarm", "not_significant", "too_few_labels")
# A one-sided test per window, every hour: 0.001 (about 3.1 standard errors, a p-chart's 3-sigma limit) keeps a
# healthy model's false alarms to at most 24 x 0.001 = 0.024 a day with hourly windows.
DEFAULT_SIGNIFICANCE = 0.001
BASELINE_SOURCES = ("config", "promotion")


def holdout_metric(problem_type: str) -> str:
    """The held-out score a run logs (``TrackedRun.log_holdout``) that this problem type's quality is judged
    against: ``holdout_accuracy`` (a share) or ``holdout_mae``."""
    return "holdout_mae" if problem_type == "regression" else "holdout_accuracy"


@dataclass(frozen=True)
class Settings:
    """An endpoint's quality settings (the same on AWS and on a laptop)."""
    problem_type: str
    baseline: float
    prediction_path: str = ""
    probability_threshold: Optional[float] = None  # binary only: 0.5 when None
    min_labelled: int = 200
    max_drop: float = 1.5
    baseline_source: str = "config"  # or "promotion": the promoted run's held-out score
    significance: float = DEFAULT_SIGNIFICANCE  # the largest p-value of a shortfall that alarms

    def __post_init__(self) -> None:
        if self.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type={self.problem_type!r}: one of {', '.join(PROBLEM_TYPES)}")
        if self.baseline_source not in BASELINE_SOURCES:
            raise ValueError(f"baseline_source={self.baseline_source!r}: one of {', '.join(BASELINE_SOURCES)}")
        if self.probability_threshold is not None and self.problem_type != "binary":
            raise ValueError("probability_threshold applies to the binary problem type only")
        if self.problem_type == "regression" and not self.baseline > 0:
            raise ValueError(f"baseline={self.baseline}: the live model's MAE, above 0")
        if self.problem_type != "regression" and not 0 < self.baseline <= 1:
            raise ValueError(f"baseline={self.baseline}: the live model's accuracy, a share in (0, 1] such as 0.92")
        if self.min_labelled < 1 or not self.max_drop > 0:
            raise ValueError("min_labelled must be at least 1 and max_drop above 0")
        if not 0 < self.significance <= 0.5:
            raise ValueError(f"significance={self.significance}: a one-sided test level in (0, 0.5] such as 0.001")

    @property
    def metric(self) -> str:
        return "MAE" if self.problem_type == "regression" else "Accuracy"

    @classmethod
    def from_environment(cls, env: dict) -> "Settings":
        """The function's settings; the promoted baseline when a promotion has set one (an empty
        ``PROMOTED_BASELINE`` is the stack parameter's default), else the configured ``BASELINE``."""
        threshold, promoted = env.get("PROBABILITY_THRESHOLD"), env.get("PROMOTED_BASELINE", "").strip()
        return cls(problem_type=env["PROBLEM_TYPE"], baseline=float(promoted or env["BASELINE"]),
                   baseline_source="promotion" if promoted else "config",
                   prediction_path=env.get("PREDICTION_PATH", ""),
                   probability_threshold=float(threshold) if threshold else None,
                   min_labelled=int(env["MIN_LABELLED"]), max_drop=float(env["MAX_DROP"]),
                   significance=float(env.get("SIGNIFICANCE") or DEFAULT_SIGNIFICANCE))


# --- decoding ---------------------------------------------------------------------------------------------------

def predictions_of(output: dict, path: str) -> list:
    """The predictions in a captured ``endpointOutput`` at ``path`` (see the module's docstring)."""
    kind, body = capture.decode_body(output["data"], output.get("encoding", "CSV"), output.get("observedContentType", ""))
    if kind == "csv":
        column = int(path or 0)
        return [row[column].strip() for row in body]
    values = [body]
    for segment in [s for s in path.split(".") if s]:
        selected = []
        for value in values:
            if segment == "*":
                if not isinstance(value, list):
                    raise ValueError(f"'*' in prediction_path {path!r} meets a {type(value).__name__}, not a list")
                selected.extend(value)
            elif isinstance(value, list):
                selected.append(value[int(segment)])
            elif isinstance(value, dict):
                selected.append(value[segment])
            else:
                raise ValueError(f"prediction_path {path!r}: {segment!r} meets a {type(value).__name__}")
        values = selected
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]  # the whole response, or a path to it, is a list of predictions
    if any(isinstance(v, (dict, list)) for v in values):
        raise ValueError(f"prediction_path {path!r} leads to objects or lists, not to predictions")
    return values


def label_of(record: dict) -> tuple[str, list]:
    """``(join key, labels)`` of one ground-truth record, in the simple or in Model Monitor's form."""
    if "groundTruthData" in record:
        truth = record["groundTruthData"]
        key = capture.event_keys(record)
        kind, body = capture.decode_body(truth["data"], truth.get("encoding", "CSV"),
                                         "application/json" if truth.get("encoding") == "JSON" else "text/csv")
        labels = [v.strip() for row in body for v in row] if kind == "csv" else body
        return key[0] or key[1], labels if isinstance(labels, list) else [labels]
    key = record.get("inferenceId") or record.get("eventId")
    if key in (None, "") or "label" not in record:
        raise ValueError('a label record has no "inferenceId" (or "eventId") and "label"')
    label = record["label"]
    return str(key), label if isinstance(label, list) else [label]


# --- the join ---------------------------------------------------------------------------------------------------

@dataclass
class Join:
    """Captured predictions and labels, joined on the record's inference id (else its event id)."""
    settings: Settings
    predictions: dict[str, list] = field(default_factory=dict)
    labels: dict[str, list] = field(default_factory=dict)
    malformed_records: int = 0
    malformed_labels: int = 0
    duplicate_predictions: int = 0  # a key seen again: the later record wins
    duplicate_labels: int = 0  # a label sent again (a correction): the later one wins

    def add_capture_line(self, line: str) -> None:
        try:
            record = json.loads(line)
            inference_id, event_id = capture.event_keys(record)
            values = predictions_of(record["captureData"]["endpointOutput"], self.settings.prediction_path)
        except (KeyError, IndexError, TypeError, ValueError, UnicodeDecodeError):
            self.malformed_records += 1
            return
        key = inference_id or event_id
        if not key:
            self.malformed_records += 1
            return
        self.duplicate_predictions += key in self.predictions
        self.predictions[key] = values

    def add_label_line(self, line: str) -> None:
        try:
            key, values = label_of(json.loads(line))
        except (KeyError, TypeError, ValueError, UnicodeDecodeError, AttributeError):
            self.malformed_labels += 1
            return
        self.duplicate_labels += key in self.labels
        self.labels[key] = values

    def result(self) -> dict:
        """The metric over every labelled prediction, the counts of what did not join, and the decision."""
        settings = self.settings
        matched = unusable = 0
        errors: list[float] = []
        for key, labels in self.labels.items():
            predicted = self.predictions.get(key)
            if predicted is None:
                continue
            matched += 1
            if len(predicted) != len(labels):
                unusable += 1  # a request of n rows needs n labels
                continue
            for prediction, label in zip(predicted, labels):
                score = _score(settings, prediction, label)
                if score is None:
                    unusable += 1
                else:
                    errors.append(score)
        judged = judge(settings, errors)
        return {"metric": settings.metric, **judged, "matched": matched,
                "unmatched_labels": len(self.labels) - matched,
                "unmatched_predictions": sum(1 for key in self.predictions if key not in self.labels),
                "unusable_pairs": unusable, "malformed_records": self.malformed_records,
                "malformed_labels": self.malformed_labels, "duplicate_predictions": self.duplicate_predictions,
                "duplicate_labels": self.duplicate_labels, "baseline": settings.baseline,
                "baseline_source": settings.baseline_source,
                "max_drop": settings.max_drop, "min_labelled": settings.min_labelled,
                "significance": settings.significance}


def _number(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _score(settings: Settings, prediction: Any, label: Any) -> Optional[float]:
    """Absolute error (regression) or 1 for a wrong class and 0 for a right one; None when not comparable."""
    predicted, actual = _number(prediction), _number(label)
    if settings.problem_type == "regression":
        return None if predicted is None or actual is None else abs(predicted - actual)
    if settings.problem_type == "binary" and predicted is not None:
        threshold = 0.5 if settings.probability_threshold is None else settings.probability_threshold
        predicted = 1.0 if predicted >= threshold else 0.0
    if predicted is not None and actual is not None:
        return float(predicted != actual)
    if predicted is not None or actual is not None:
        return None  # a number against a class name: not comparable
    return float(str(prediction).strip() != str(label).strip())


def judge(settings: Settings, errors: list[float]) -> dict:
    """``value``, ``labelled``, ``shortfall``, ``p_value`` and ``decision`` of a window's scores (``_score``: absolute
    errors, or 1 per wrong prediction and 0 per right one)."""
    labelled = len(errors)
    value = (math.fsum(errors) / labelled) if labelled else None
    if settings.problem_type != "regression" and value is not None:
        value = 1 - value  # errors holds 1 per wrong prediction: accuracy is the rest
    p = p_value(settings, errors) if labelled >= settings.min_labelled else None
    decision, shortfall = decide(settings, value, labelled, p)
    return {"value": value, "labelled": labelled, "shortfall": shortfall, "p_value": p, "decision": decision}


def p_value(settings: Settings, errors: list[float]) -> Optional[float]:
    """The one-sided p-value of the window's shortfall: the chance that a model exactly as good as the baseline
    scores this badly or worse on this many labelled predictions (None without a sample to test)."""
    n = len(errors)
    if settings.problem_type != "regression":
        if n == 0:
            return None
        correct = n - round(math.fsum(errors))
        return binomial_cdf(correct, n, settings.baseline)
    if n < 2:
        return None
    mean, spread = math.fsum(errors) / n, statistics.stdev(errors)
    if spread == 0:
        return 0.0 if mean > settings.baseline else 1.0
    return 1 - statistics.NormalDist().cdf((mean - settings.baseline) / (spread / math.sqrt(n)))


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


def decide(settings: Settings, value: Optional[float], labelled: int,
           p: Optional[float]) -> tuple[str, Optional[float]]:
    """``(decision, shortfall)``: judged only from ``min_labelled`` labelled predictions on; a shortfall of
    ``max_drop`` or more alarms only with a p-value (``p_value``) of at most ``significance``."""
    if value is None or labelled < settings.min_labelled:
        return "too_few_labels", None
    if settings.problem_type == "regression":
        shortfall = (value - settings.baseline) / settings.baseline * 100
    else:
        shortfall = (settings.baseline - value) * 100
    shortfall = round(shortfall, 9)  # 0.92 - 0.905 is 1.5000000000000013 points: judge the points, not the float noise
    if shortfall < settings.max_drop:
        return "ok", shortfall
    return ("alarm" if p is not None and p <= settings.significance else "not_significant"), shortfall


# --- on a laptop ------------------------------------------------------------------------------------------------

def check_files(settings: Settings, capture_paths: Iterable[Path], label_paths: Iterable[Path]) -> dict:
    """The join of local capture files (JSON Lines, as SageMaker writes them) and label files."""
    join = Join(settings)
    for path in capture_paths:
        for line in path.read_text().splitlines():
            if line.strip():
                join.add_capture_line(line)
    for path in label_paths:
        for line in path.read_text().splitlines():
            if line.strip():
                join.add_label_line(line)
    return join.result()


def validate_labels(text: str) -> tuple[int, list[str]]:
    """``(records, problems)`` of a label file: every line one label record (JSON), each key once."""
    problems, keys, records = [], set(), 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        records += 1
        try:
            key, _ = label_of(json.loads(line))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            problems.append(f"line {number}: {error if isinstance(error, ValueError) else 'not a label record'}")
            continue
        if key in keys:
            problems.append(f"line {number}: {key!r} is labelled twice in this file")
        keys.add(key)
    if records == 0:
        problems.append("the file has no label records")
    return records, problems

