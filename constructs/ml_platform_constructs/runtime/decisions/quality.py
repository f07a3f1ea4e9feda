"""Production quality: captured predictions joined with ground-truth labels, and the decision against a reference
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

The decision (``Monitor``): labelled predictions are pooled into batches, each judged once against the reference
with a two-sample test that counts the reference's own noise (a baseline measured on few examples is itself
uncertain). The error it guards against is a false alarm on a healthy model: the batch size and each batch's
critical value are planned (``plan``) from the observed label rate so that a healthy model alarms about
``false_alarms_per_90_days`` times in 90 days (0.25 by default; simulated in ``./platform bench decisions``), and a
drop of ``max_drop`` is detected by one batch with ``power`` (0.9), where the reference allows it. Where it does not
(too few labels, or a reference of too few examples), the plan says the drop it can detect and the delay, and a batch
that closes after ``max_batch_hours`` with fewer than ``min_labelled`` labels is "not judged", published as such.

The reference: the promoted run's held-out score and the number of held-out examples behind it (or the configured
baseline and ``baseline_examples``; without them, an exact requirement that stays the reference). Once the deployment
check (below) has passed and at least ``reference_labels`` labelled predictions of the version have arrived, the
reference becomes the held-out examples and those production labels pooled (their counts added: the
inverse-variance weighted mean). Pooled, not production alone: every decision before it (the deployment check's
looks, and any "not worse" test) is a function of the difference between production and held-out, and the pooled
mean is independent of that difference, so choosing when to adopt does not bias the reference (production alone,
adopted because it looked good enough, was biased upward, and a healthy model then alarmed against it). A version
the deployment check found worse keeps the held-out reference: it never becomes its own standard.

The deployment check (``Monitor``, from the first label): every labelled prediction of the version since it went
live, pooled, against the held-out score, at labels doubling from ``min_labelled`` (200, 400, ...) until a look
detects ``max_drop`` with 95% power, at most eight times the held-out examples, where more production labels no longer
narrow the comparison (``deployment_looks``); from the second look on, the labels since the previous look alone too
(a drop after deployment, diluted in the pooled labels). Error guarded against: a model worse by ``max_drop`` from
the moment it went live, or one that drops while the reference is being built, never being judged against what it was
promoted on. Its false alarms: ``DEPLOYMENT_SHARE`` (25%) of ``false_alarms_per_90_days`` per deployment for the
pooled looks and ``RECENT_SHARE`` (10%) for the recent ones, each spent over its looks in proportion to the square of their labels
(the last look, planned for ``max_drop``, gets about three quarters; the levels add up to the share: Bonferroni, whatever the
looks' correlation); the batches spend the remaining 65% per 90 days. A version it finds worse stays in alarm (one
episode) until another version goes live. The smallest drop it can detect with ``power`` and the held-out size that
would detect ``max_drop`` are stated from the first run (``deployment`` in every result), so a held-out set too small
to resolve the allowed drop is said at deployment, not found out later.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

try:
    from . import capture, stats
except ImportError:  # in Lambda the modules sit at the top of the package
    import capture  # type: ignore[no-redef]
    import stats  # type: ignore[no-redef]

PROBLEM_TYPES = ("binary", "multiclass", "regression")
DECISIONS = ("ok", "alarm", "filling", "not_judged")
HOURS_90_DAYS = 90 * 24
# Where ground-truth labels arrive, in the capture bucket: ground-truth/<endpoint>/yyyy/mm/dd/hh/ (EndpointQuality's
# GROUND_TRUTH_PREFIX; here so that the operator's label upload needs no CDK).
GROUND_TRUTH_PREFIX = "ground-truth/"
DEFAULT_FALSE_ALARMS = 0.25  # a healthy model's expected alarms in 90 days
DEFAULT_POWER = 0.9
DEFAULT_MAX_BATCH_HOURS = 168
DEFAULT_REFERENCE_LABELS = 10_000
BASELINE_SOURCES = ("config", "promotion")


def holdout_metric(problem_type: str) -> str:
    """The held-out score a run logs (``TrackedRun.log_holdout``) that this problem type's quality is judged
    against: ``holdout_accuracy`` (a share) or ``holdout_mae``."""
    return "holdout_mae" if problem_type == "regression" else "holdout_accuracy"


def parse_baseline(text: str) -> tuple[Optional[float], Optional[int]]:
    """A quality baseline parameter's value: "" (none), "0.92" or "0.92:5000" (the score and its held-out examples)."""
    text = (text or "").strip()
    if not text:
        return None, None
    value, _, examples = text.partition(":")
    return float(value), (int(examples) if examples else None)


@dataclass(frozen=True)
class Settings:
    """An endpoint's quality settings (the same on AWS and on a laptop)."""
    problem_type: str
    baseline: float
    baseline_examples: Optional[int] = None  # the held-out examples behind the baseline; None: taken as exact
    prediction_path: str = ""
    probability_threshold: Optional[float] = None  # binary only: 0.5 when None
    min_labelled: int = 200
    max_drop: float = 1.5
    baseline_source: str = "config"  # or "promotion": the promoted run's held-out score
    false_alarms_per_90_days: float = DEFAULT_FALSE_ALARMS
    power: float = DEFAULT_POWER
    max_batch_hours: int = DEFAULT_MAX_BATCH_HOURS
    reference_labels: int = DEFAULT_REFERENCE_LABELS  # 0: judge against the baseline only

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
        if self.baseline_examples is not None and self.baseline_examples < 1:
            raise ValueError(f"baseline_examples={self.baseline_examples}: the held-out examples behind the baseline")
        if self.min_labelled < 1 or not self.max_drop > 0:
            raise ValueError("min_labelled must be at least 1 and max_drop above 0")
        if not 0 < self.false_alarms_per_90_days <= 10:
            raise ValueError(f"false_alarms_per_90_days={self.false_alarms_per_90_days}: above 0 and at most 10")
        if not 0.5 <= self.power < 1:
            raise ValueError(f"power={self.power}: from 0.5 to under 1, e.g. 0.9")
        if not 1 <= self.max_batch_hours <= 24 * 31:
            raise ValueError(f"max_batch_hours={self.max_batch_hours}: 1 to 744 hours")
        if self.reference_labels < 0:
            raise ValueError(f"reference_labels={self.reference_labels}: 0 (none) or more labelled predictions")

    @property
    def metric(self) -> str:
        return "MAE" if self.problem_type == "regression" else "Accuracy"

    @classmethod
    def from_environment(cls, env: dict) -> "Settings":
        """The function's settings; the promoted baseline when a promotion has set one (an empty
        ``PROMOTED_BASELINE`` is the stack parameter's default), else the configured ``BASELINE``."""
        threshold = env.get("PROBABILITY_THRESHOLD")
        promoted, promoted_examples = parse_baseline(env.get("PROMOTED_BASELINE", ""))
        configured_examples = env.get("BASELINE_EXAMPLES")
        return cls(problem_type=env["PROBLEM_TYPE"],
                   baseline=promoted if promoted is not None else float(env["BASELINE"]),
                   baseline_examples=(promoted_examples if promoted is not None else
                                      int(configured_examples) if configured_examples else None),
                   baseline_source="promotion" if promoted is not None else "config",
                   prediction_path=env.get("PREDICTION_PATH", ""),
                   probability_threshold=float(threshold) if threshold else None,
                   min_labelled=int(env["MIN_LABELLED"]), max_drop=float(env["MAX_DROP"]),
                   false_alarms_per_90_days=float(env.get("FALSE_ALARMS_PER_90_DAYS") or DEFAULT_FALSE_ALARMS),
                   power=float(env.get("POWER") or DEFAULT_POWER),
                   max_batch_hours=int(env.get("MAX_BATCH_HOURS") or DEFAULT_MAX_BATCH_HOURS),
                   reference_labels=int(env.get("REFERENCE_LABELS") or DEFAULT_REFERENCE_LABELS))


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
    scores: list = field(default_factory=list)  # of the labelled predictions, after result()

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
            scores = scores_of(settings, predicted, labels)
            if scores is None:
                unusable += 1
            else:
                errors.extend(scores)
        self.scores = errors
        return {"metric": settings.metric, "value": Counts.of(errors).value(settings.problem_type),
                "labelled": len(errors), "matched": matched,
                "unmatched_labels": len(self.labels) - matched,
                "unmatched_predictions": sum(1 for key in self.predictions if key not in self.labels),
                "unusable_pairs": unusable, "malformed_records": self.malformed_records,
                "malformed_labels": self.malformed_labels, "duplicate_predictions": self.duplicate_predictions,
                "duplicate_labels": self.duplicate_labels, "baseline": settings.baseline,
                "baseline_source": settings.baseline_source, "baseline_examples": settings.baseline_examples,
                "max_drop": settings.max_drop, "min_labelled": settings.min_labelled,
                "false_alarms_per_90_days": settings.false_alarms_per_90_days}


def _number(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def class_of(settings: Settings, label: Any) -> Optional[str]:
    """A classifier's true class as the per-class recall counts it (a number as its shortest form: 1, 1.0 and "1" are
    one class); None for regression."""
    if settings.problem_type == "regression":
        return None
    number = _number(label)
    if number is not None:
        return str(int(number)) if number == int(number) else repr(number)
    return str(label).strip()


def scores_of(settings: Settings, predicted: list, labels: list) -> Optional[list[float]]:
    """The scores of one labelled request (one per row), or None when its labels cannot be compared with its
    predictions (a request of n rows needs n labels; a number against a class name)."""
    if len(predicted) != len(labels):
        return None
    scores = [_score(settings, prediction, label) for prediction, label in zip(predicted, labels)]
    return None if any(score is None for score in scores) else scores


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


# --- the decision ------------------------------------------------------------------------------------------------

@dataclass
class Counts:
    """Labelled outcomes, summed: ``n`` labels, ``total`` of their scores (wrong predictions, or absolute errors),
    ``squares`` of the scores (regression's spread), and for classifiers ``classes``: per true class, ``[labels,
    wrong]`` (its recall's evidence)."""
    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    classes: dict = field(default_factory=dict)

    def add(self, score: float, label_class: Optional[str] = None) -> None:
        self.n += 1
        self.total += score
        self.squares += score * score
        if label_class is not None:
            counts = self.classes.setdefault(label_class, [0, 0.0])
            counts[0] += 1
            counts[1] += score

    def merge(self, other: "Counts") -> None:
        self.n += other.n
        self.total += other.total
        self.squares += other.squares
        for label_class, (n, wrong) in other.classes.items():
            counts = self.classes.setdefault(label_class, [0, 0.0])
            counts[0] += n
            counts[1] += wrong

    def value(self, problem_type: str) -> Optional[float]:
        """Accuracy (a share) or MAE."""
        if not self.n:
            return None
        mean = self.total / self.n
        return mean if problem_type == "regression" else 1 - mean

    def variance(self) -> float:
        """The scores' sample variance."""
        if self.n < 2:
            return 0.0
        return max(0.0, (self.squares - self.total * self.total / self.n) / (self.n - 1))

    @classmethod
    def of(cls, scores: Iterable[float]) -> "Counts":
        counts = cls()
        for score in scores:
            counts.add(score)
        return counts


@dataclass(frozen=True)
class Reference:
    """What production quality is judged against: ``value`` (accuracy share or MAE) from ``examples`` examples
    (None: exact, a fixed requirement), ``spread`` the SD of absolute errors (regression), and where it came from."""
    value: float
    examples: Optional[int]
    source: str  # "config", "promotion" (held-out), "production" (held-out and production labels, pooled) or
    # "acknowledged" (the level an operator kept a version at: ./platform quality acknowledge)
    spread: Optional[float] = None

    @classmethod
    def of(cls, settings: Settings) -> "Reference":
        return cls(settings.baseline, settings.baseline_examples, settings.baseline_source)


def _label_variance(problem_type: str, reference: Reference, fallback: float) -> float:
    if problem_type == "regression":
        return (reference.spread if reference.spread is not None else fallback) ** 2
    return reference.value * (1 - reference.value)


def _drop(settings: Settings, reference: Reference) -> float:
    """``max_drop`` in the metric's units: accuracy points as a share, or percent of the reference MAE."""
    return settings.max_drop / 100 * (reference.value if settings.problem_type == "regression" else 1.0)


@dataclass(frozen=True)
class Plan:
    """The batch one decision needs: ``labels`` in about ``hours`` at the observed rate, judged at ``critical_z``;
    ``power`` to detect a drop of max_drop, and the drop it detects with the settings' power (``detectable_drop``, in
    points or percent); ``false_alarms_per_90_days`` is the design rate."""
    labels: int
    hours: int
    critical_z: float
    power: float
    detectable_drop: Optional[float]
    false_alarms_per_90_days: float
    labels_per_hour: float


INTERIM_SHARE = 0.1  # of the batches' budget, spent on looks at the batch still filling (big drops, early)
DEPLOYMENT_SHARE = 0.25  # of the false-alarm budget, spent per deployment by the deployment check's pooled looks
RECENT_SHARE = 0.1  # ... and by its looks at the labels since the previous look (a drop after deployment)
DEPLOYMENT_POWER = 0.95  # the last look is planned to catch max_drop this often (the looks before it add to it)
DEPLOYMENT_LAST_LOOK = 8  # the deployment check's last look: this many times the held-out examples


def batches_budget(settings: Settings) -> float:
    """The batches' expected false alarms in 90 days: what the deployment check does not spend."""
    return (1 - DEPLOYMENT_SHARE - RECENT_SHARE) * settings.false_alarms_per_90_days


def batch_level(settings: Settings, hours: float) -> float:
    """The one-sided level of a full batch of ``hours``: about HOURS_90_DAYS / hours batches in 90 days share
    (1 - INTERIM_SHARE) of the batches' budget."""
    return min(0.5, (1 - INTERIM_SHARE) * batches_budget(settings) * max(1.0, hours) / HOURS_90_DAYS)


def interim_level(settings: Settings, run_hours: float) -> float:
    """The level of each run's look at the batch still filling: INTERIM_SHARE of the batches' budget over every
    run."""
    return INTERIM_SHARE * batches_budget(settings) * max(1.0, run_hours) / HOURS_90_DAYS


@functools.lru_cache(maxsize=256)
def deployment_looks(settings: Settings) -> tuple[int, ...]:
    """The production label counts at which the deployment check looks: doubling from ``min_labelled`` until the
    last look detects ``max_drop`` with DEPLOYMENT_POWER (or ``power`` if higher) at its level (a bigger held-out set needs fewer labels; looking
    further would alarm on drops much smaller than the allowed one), at most DEPLOYMENT_LAST_LOOK times the held-out
    examples (10,000 for an exact baseline), where more production labels no longer narrow the comparison."""
    reference = Reference.of(settings)
    variance = _label_variance(settings.problem_type, reference, settings.baseline)
    held = 0.0 if reference.examples is None else variance / reference.examples
    drop = _drop(settings, reference)
    cap = DEPLOYMENT_LAST_LOOK * reference.examples if reference.examples else DEFAULT_REFERENCE_LABELS
    looks, n = [], settings.min_labelled
    while True:
        looks.append(n)
        level = _spent(DEPLOYMENT_SHARE * settings.false_alarms_per_90_days, n, looks)
        z = stats.z_quantile(1 - level) + stats.z_quantile(max(settings.power, DEPLOYMENT_POWER))
        if n >= cap or drop / math.sqrt(variance / n + held) >= z:
            break
        n = min(2 * n, max(cap, settings.min_labelled))
    return tuple(looks)


def deployment_level(settings: Settings, look: Optional[int] = None) -> float:
    """The level of the pooled look at ``look`` labels (default: the last): DEPLOYMENT_SHARE of the budget spent over
    the looks in proportion to the square of their labels (the last, the one planned to detect ``max_drop``, gets
    about three quarters; the first, where only a collapse is visible, almost nothing, and a collapse needs little).
    The levels add up to the share: Bonferroni, whatever the looks' correlation."""
    looks = deployment_looks(settings)
    return _spent(DEPLOYMENT_SHARE * settings.false_alarms_per_90_days, look or looks[-1], looks)


def recent_level(settings: Settings, look: Optional[int] = None) -> float:
    """The level of a look at the labels since the previous look (from the second look on; ``look``: its labels,
    default the last look's), RECENT_SHARE of the budget spent as the pooled looks spend theirs."""
    looks = deployment_looks(settings)
    return _spent(RECENT_SHARE * settings.false_alarms_per_90_days, look or looks[-1], looks[1:])


def _spent(budget: float, n: int, looks: Sequence[int]) -> float:
    """The share of ``budget`` a look at ``n`` labels spends among ``looks``: in proportion to the square of the
    labels, so the levels of the looks add up to the budget."""
    return budget * n * n / max(1, sum(k * k for k in looks))


def deployment_reach(settings: Settings, reference: "Reference") -> dict:
    """What the deployment check can detect at its last look with ``power``: the drop (points, or percent of the MAE),
    and the held-out examples that would detect ``max_drop`` (None where none would, or where the baseline is
    exact)."""
    variance = _label_variance(settings.problem_type, reference, reference.spread or reference.value)
    last = deployment_looks(settings)[-1]
    z = stats.z_quantile(1 - deployment_level(settings)) + stats.z_quantile(settings.power)
    held = 0.0 if reference.examples is None else variance / reference.examples
    unit = 100 / (reference.value if settings.problem_type == "regression" else 1.0)
    detectable = z * math.sqrt(variance / last + held) * unit
    room = (_drop(settings, reference) / z) ** 2 - variance / last
    needed = None if reference.examples is None or room <= 0 else math.ceil(variance / room)
    return {"detectable_drop": detectable, "resolves_max_drop": detectable <= settings.max_drop,
            "held_out_needed": needed, "looks": len(deployment_looks(settings)), "last_look_labels": last}


def pooled_reference(settings: Settings, held_out: "Reference", production: "Counts") -> "Reference":
    """The held-out examples and the production labels as one reference: their counts added (accuracy), or their
    means weighted by their sizes (MAE, with the production spread); independent of the difference between the two,
    so of every decision taken on it. An exact held-out baseline (no examples) stays as it is."""
    if held_out.examples is None:
        return held_out
    n, m = production.n, held_out.examples
    value = (production.value(settings.problem_type) * n + held_out.value * m) / (n + m)
    spread = math.sqrt(production.variance()) if settings.problem_type == "regression" else None
    return Reference(value, n + m, "production", spread)


@functools.lru_cache(maxsize=4096)
def critical_z(settings: Settings, hours: float) -> float:
    """The normal critical value of a full batch of ``hours`` (the plan's; the decision itself is exact)."""
    return stats.z_quantile(1 - batch_level(settings, hours))


@functools.lru_cache(maxsize=1024)  # a pure function of hashable values, asked every run with the same ones
def plan(settings: Settings, reference: Reference, labels_per_hour: float, spread: float = 1.0) -> Plan:
    """The shortest batch (in whole hours, up to ``max_batch_hours``) that detects a drop of ``max_drop`` with
    ``power`` at the false-alarm budget; where none does, the one that comes closest."""
    variance = _label_variance(settings.problem_type, reference, spread)
    reference_variance = 0.0 if reference.examples is None else variance / reference.examples
    drop = _drop(settings, reference)
    z_power = stats.z_quantile(settings.power)
    unit = 100 / (reference.value if settings.problem_type == "regression" else 1.0)
    if labels_per_hour <= 0:  # no labels yet: nothing is detected before the longest batch closes
        return Plan(settings.min_labelled, settings.max_batch_hours, critical_z(settings, settings.max_batch_hours),
                    0.0, None, settings.false_alarms_per_90_days, 0.0)
    best = None
    for hours in range(1, settings.max_batch_hours + 1):
        labels = max(settings.min_labelled, math.ceil(hours * labels_per_hour))
        z = critical_z(settings, hours)
        error = math.sqrt(variance / labels + reference_variance)
        power = stats._NORMAL.cdf(drop / error - z) if error > 0 else 1.0
        candidate = Plan(labels, hours, z, power, (z + z_power) * error * unit,
                         settings.false_alarms_per_90_days, labels_per_hour)
        if power >= settings.power:
            return candidate
        if best is None or power > best.power:
            best = candidate
    return best


def judge_batch(settings: Settings, reference: Reference, batch: Counts, hours: float,
                level: Optional[float] = None) -> dict:
    """One batch against the reference: a one-sided test of "worse than the reference" at the batch's level
    (``batch_level``, or ``level``), the reference's own sample counted. Accuracy: exact (the binomial tail against a
    reference taken as exact, Fisher's exact test against a measured one: a normal approximation alarms far more than
    its level at accuracies near 1); MAE: a z-test of the mean absolute errors with each sample's spread."""
    level = batch_level(settings, hours) if level is None else level
    value = batch.value(settings.problem_type)
    if settings.problem_type == "regression":
        spread = reference.spread if reference.spread is not None else math.sqrt(batch.variance())
        reference_variance = 0.0 if reference.examples is None else spread ** 2 / reference.examples
        error = math.sqrt(batch.variance() / batch.n + reference_variance)
        shortfall = (value - reference.value) / reference.value * 100
        z = (value - reference.value) / error if error > 0 else (math.inf if value > reference.value else 0.0)
        p_value = stats.normal_sf(z)
    else:
        correct = round(batch.n - batch.total)
        if reference.examples is None:
            pooled, reference_share = reference.value, 0.0
            p_value = stats.binomial_cdf(correct, batch.n, reference.value)
        else:
            reference_correct = round(reference.value * reference.examples)
            pooled = (correct + reference_correct) / (batch.n + reference.examples)
            reference_share = 1 / reference.examples
            p_value = stats.fisher_lower(correct, batch.n, reference_correct, reference.examples)
        error = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / batch.n + reference_share))
        shortfall = (reference.value - value) * 100
        z = (reference.value - value) / error
    decision = "alarm" if p_value <= level else "ok"
    return {"decision": decision, "value": value, "labelled": batch.n, "shortfall": round(shortfall, 9), "z": z,
            "p_value": p_value, "level": level, "critical_z": stats.z_quantile(1 - level), "batch_hours": hours,
            "reference": reference.value, "reference_examples": reference.examples,
            "reference_source": reference.source}


CLASS_SHARE = 0.2  # of the batches' budget, spent by the recall windows (over their hours and the classes seen)
MIN_CLASS_LABELS = 20  # a class's recall is judged from this many labels of it in the batch
MIN_CLASS_REFERENCE = 50  # ... and this many before it


def judge_classes(settings: Settings, window: Counts, classes: dict[str, tuple[list, list]], level: float,
                  hours: float) -> dict:
    """Each class's recall in a window against its recall before it (Fisher's exact one-sided test, at ``level``
    each): accuracy hides a class that stops being found (a 2% class whose recall falls from 0.75 to 0 moves accuracy
    by 1.5 points at most). The judgement, in the batches' form: ``shortfall`` the largest recall shortfall (points)
    of an alarming class (else of any), ``z`` from the smallest p-value, ``classes`` each one's evidence."""
    judged, worst = {}, (None, -math.inf, 1.0)
    for label_class, ((n, wrong), (m, wrong_before)) in classes.items():
        recall, before = 1 - wrong / n, 1 - wrong_before / m
        p_value = stats.fisher_lower(round(n - wrong), n, round(m - wrong_before), m)
        judged[label_class] = {"recall": recall, "reference_recall": before, "labelled": n, "reference_labelled": m,
                               "p_value": p_value, "decision": "alarm" if p_value <= level else "ok"}
        shortfall = round((before - recall) * 100, 9)
        if (p_value <= level, shortfall) > (worst[2] <= level, worst[1]):
            worst = (label_class, shortfall, p_value)
    alarmed = sorted(c for c, j in judged.items() if j["decision"] == "alarm")
    return {"decision": "alarm" if alarmed else "ok", "check": "class recall", "value": window.value(
                settings.problem_type), "labelled": window.n, "shortfall": worst[1], "p_value": worst[2],
            "z": stats.z_quantile(1 - min(max(worst[2], 1e-300), 1 - 1e-16)) if worst[2] < 1 else -8.0,
            "level": level, "batch_hours": hours, "classes": judged,
            "alarmed_by": [f"recall of class {c}" for c in alarmed], "reference_source": "production"}


def settings_key(settings: Settings) -> str:
    """What the Monitor's state depends on besides the model version: a change restarts it."""
    return json.dumps([settings.problem_type, settings.baseline, settings.baseline_examples, settings.reference_labels,
                       settings.max_drop, settings.prediction_path, settings.probability_threshold])


class Monitor:
    """The decision over time: labelled outcomes in, a judged batch out whenever one is full, and an interim look at
    the batch still filling every run (a collapse is caught within the hour, not when the batch closes). State (a
    dict, JSON) carries the current batch, the production reference being built, and the last judgement; it restarts
    when the model version or the settings change."""

    def __init__(self, settings: Settings, state: Optional[dict] = None, *, model_version: str = "static",
                 run_hours: float = 1.0) -> None:
        self.settings = settings
        self.run_hours = run_hours  # what one run covers: a batch's first run counts its hour
        state = dict(state or {})
        key = settings_key(settings)
        if state.get("model_version") != model_version or state.get("settings") != key:
            state = {"model_version": model_version, "settings": key, "batch": None, "production": asdict(Counts()),
                     "reference": None, "reference_rejected": None, "last": None, "previous_rate": None,
                     "previous_hours": None, "paused_hours": 0.0}
        if "deployment" not in state and (state.get("reference") or {}).get("source") == "production":
            # 0.7 adopted production labels alone, chosen because they looked good enough (biased upward): pooled
            # with the held-out examples, the reference no longer depends on that choice.
            state["reference"] = asdict(pooled_reference(settings, Reference.of(settings),
                                                         Counts(**state["production"])))
        state.setdefault("deployment", {"looks_done": 0, "decision": "filling", "last": None, "started": None})
        self.state = state

    def resume(self, paused: timedelta) -> None:
        """The version is live again after ``paused`` (a rollback to it): its batch and its last judgement age only
        while it is live, so the batch is not closed, nor the judgement taken as overdue, for the time it was not."""
        if self.state["batch"]:
            started = datetime.fromisoformat(self.state["batch"]["started"]) + paused
            self.state["batch"]["started"] = started.isoformat()
        self.state["paused_hours"] = self.state.get("paused_hours", 0.0) + paused.total_seconds() / 3600

    def reference(self) -> Reference:
        if self.state.get("reference"):
            return Reference(**self.state["reference"])
        return Reference.of(self.settings)

    def add(self, counts: Counts, now: datetime) -> None:
        """This run's newly labelled outcomes (of the current model version)."""
        if self.state["batch"] is None:
            self.state["batch"] = {"counts": asdict(Counts()), "started": now.isoformat()}
        batch = Counts(**self.state["batch"]["counts"])
        batch.merge(counts)
        self.state["batch"]["counts"] = asdict(batch)
        if counts.classes:
            if not self.state.get("class_window"):
                self.state["class_window"] = {"counts": asdict(Counts()), "started": now.isoformat()}
            window = Counts(**self.state["class_window"]["counts"])
            window.merge(counts)
            self.state["class_window"]["counts"] = asdict(window)
        deployment = self.state["deployment"]
        if deployment["started"] is None:
            deployment["started"] = now.isoformat()
        adopting = self.state["reference"] is None and self.settings.reference_labels and \
            not self.state["reference_rejected"] and deployment["decision"] != "alarm"
        if deployment["decision"] == "filling" or adopting:  # the looks, and the adoption, need them
            production = Counts(**self.state["production"])
            production.merge(counts)
            self.state["production"] = asdict(production)

    def _deployment_check(self, now: datetime) -> Optional[dict]:
        """The deployment check's look that the pooled production labels have reached (at most one per run: the
        latest), then, once it has passed and ``reference_labels`` have arrived, the pooled reference's adoption.
        Returns the look's judgement when it alarms."""
        settings, deployment = self.settings, self.state["deployment"]
        looks = deployment_looks(settings)
        production = Counts(**self.state["production"])
        reached = sum(1 for n in looks if production.n >= n)
        alarm = None
        if deployment["decision"] == "filling" and reached > deployment["looks_done"]:
            first = deployment["looks_done"] == 0
            deployment["looks_done"] = reached
            live = (now - datetime.fromisoformat(deployment["started"])).total_seconds() / 3600 + self.run_hours
            held_out = Reference.of(settings)
            look = looks[reached - 1]
            result = judge_batch(settings, held_out, production, hours=live, level=deployment_level(settings, look))
            result.update(at=now.isoformat(), look=reached, looks=len(looks), check="deployment",
                          labels="all since it went live")
            if result["decision"] != "alarm" and not first:
                # The labels since the previous look alone: a drop after deployment, diluted in the pooled labels.
                previous = Counts(**deployment["at_look"])
                recent = Counts(production.n - previous.n, production.total - previous.total,
                                production.squares - previous.squares)
                if recent.n >= settings.min_labelled:
                    since = judge_batch(settings, held_out, recent, hours=live, level=recent_level(settings, look))
                    if since["decision"] == "alarm":
                        result = dict(since, at=now.isoformat(), look=reached, looks=len(looks),
                                      check="deployment", labels="since the previous look")
            deployment["at_look"] = asdict(production)
            deployment["last"] = result
            if result["decision"] == "alarm":
                deployment["decision"] = "alarm"
                if (self.state["reference"] or {}).get("source") == "production":
                    self.state["reference"] = None  # a reference pooled before (0.7's, migrated): the held-out's
                self.state["reference_rejected"] = (
                    f"the deployment check found the version worse than its held-out {settings.baseline:g} "
                    f"({result['value']:.4g} on {result['labelled']} labels {result['labels']}, p "
                    f"{result['p_value']:.2g}): the held-out reference stays")
                alarm = result
            elif reached == len(looks):
                deployment["decision"] = "passed"
        if (deployment["decision"] == "passed" and self.state["reference"] is None and settings.reference_labels
                and production.n >= settings.reference_labels and not self.state["reference_rejected"]):
            self._adopt(production)
        return alarm

    def _adopt(self, production: Counts) -> None:
        """The held-out examples and the production labels, pooled, become the reference (``pooled_reference``)."""
        settings = self.settings
        if settings.problem_type == "regression" and not production.value(settings.problem_type) > 0:
            self.state["reference_rejected"] = "an MAE of 0 leaves no percent to measure a rise in"
            return
        self.state["reference"] = asdict(pooled_reference(settings, Reference.of(settings), production))

    def _class_look(self, now: datetime) -> Optional[dict]:
        """The recall window: this version's labels since the last look, judged per class against every label of the
        version before it once each class seen has MIN_CLASS_LABELS in it (or the window has run max_batch_hours),
        then added to that history. Returns the look's judgement when it alarms."""
        settings, window = self.settings, self.state.get("class_window")
        if settings.problem_type == "regression" or not window:
            return None
        counts = Counts(**window["counts"])
        history = Counts(**self.state.get("class_history") or asdict(Counts()))
        hours = (now - datetime.fromisoformat(window["started"])).total_seconds() / 3600 + self.run_hours
        seen = set(counts.classes) | set(history.classes)
        if not seen or (any(counts.classes.get(c, [0])[0] < MIN_CLASS_LABELS for c in seen)
                        and hours < settings.max_batch_hours):
            return None
        eligible = {c: (counts.classes[c], history.classes[c]) for c in sorted(seen)
                    if counts.classes.get(c, [0])[0] >= MIN_CLASS_LABELS
                    and history.classes.get(c, [0])[0] >= MIN_CLASS_REFERENCE}
        history.merge(counts)
        self.state["class_history"], self.state["class_window"] = asdict(history), None
        if not eligible:
            return None
        level = CLASS_SHARE * batches_budget(settings) * max(1.0, hours) / HOURS_90_DAYS / len(seen)
        result = judge_classes(settings, counts, eligible, level, hours)
        result.update(at=now.isoformat())
        self.state["class_last"] = result
        return result if result["decision"] == "alarm" else None

    def _rate(self, batch: Counts, age: float) -> dict:
        """The label rate as measured: over the last closed batch, else over the batch filling (the first since the
        monitor started, whose first hours may precede the first labels' arrival)."""
        if self.state.get("previous_rate") is not None:
            hours, per_hour = self.state.get("previous_hours") or age, self.state["previous_rate"]
            return {"labels_per_hour": per_hour, "labelled": round(per_hour * hours), "hours": hours,
                    "measured_on": "previous batch"}
        return {"labels_per_hour": batch.n / age, "labelled": batch.n, "hours": age, "measured_on": "this batch"}

    def step(self, now: datetime) -> dict:
        """Judges the batch when it is full (or has run ``max_batch_hours``), else looks at it at the interim level;
        returns what to publish: this run's status, the plan, and the latest judgement."""
        settings = self.settings
        deployment_alarm = self._deployment_check(now)
        reference = self.reference()
        batch_state = self.state["batch"]
        batch = Counts(**batch_state["counts"]) if batch_state else Counts()
        started = datetime.fromisoformat(batch_state["started"]) if batch_state else now
        age = (now - started).total_seconds() / 3600 + self.run_hours
        rate = self.state.get("previous_rate") or (batch.n / age)
        spread = math.sqrt(batch.variance()) if settings.problem_type == "regression" and batch.n > 1 else 1.0
        the_plan = plan(settings, reference, rate, spread)
        status = "filling"
        full = bool(batch_state) and (batch.n >= the_plan.labels or age >= settings.max_batch_hours)
        if full and batch.n < settings.min_labelled:
            status = "not_judged"
            self.state["last"] = {"decision": "not_judged", "at": now.isoformat(), "labelled": batch.n,
                                  "batch_hours": age, "reason": f"{batch.n} labelled predictions in {age:.0f} h, "
                                                                f"needs {settings.min_labelled}"}
        elif batch_state and batch.n >= settings.min_labelled:
            level = batch_level(settings, age) if full else interim_level(settings, self.run_hours)
            if self.state.get("class_history", {}).get("classes"):
                level *= 1 - CLASS_SHARE  # the classes' recall windows spend the rest
            result = judge_batch(settings, reference, batch, age, level=level)
            if full or result["decision"] == "alarm":  # an interim look closes the batch only when it alarms
                result.update(at=now.isoformat(), power=the_plan.power, detectable_drop=the_plan.detectable_drop,
                              interim=not full)
                status = result["decision"]
                self.state["last"] = result
                full = True
        class_alarm = self._class_look(now)
        if class_alarm is not None and status != "alarm":
            status, self.state["last"] = "alarm", class_alarm
        if self.state["deployment"]["decision"] == "alarm":
            # The deployment check's verdict stands for this version (until another goes live, or an operator
            # acknowledges it: ./platform quality acknowledge, decision "acknowledged"): a batch judged since
            # restates it, with the batch beside it, so the alarm stays in ALARM as one episode instead of returning
            # to OK and firing again on the next batch against the same held-out score.
            if deployment_alarm is not None or status in ("ok", "alarm", "not_judged"):
                batch_result = None if deployment_alarm is not None and status == "filling" else self.state["last"]
                standing = dict(self.state["deployment"]["last"], at=now.isoformat(), standing=True,
                                latest_batch=batch_result if batch_result is not deployment_alarm else None)
                self.state["last"] = standing
                status = "alarm"
        if full:
            self.state.update(previous_rate=batch.n / age, previous_hours=age, paused_hours=0.0)
            self.state["batch"] = None
        last = self.state.get("last")
        live_hours = (now - datetime.fromisoformat(last["at"])).total_seconds() / 3600 - self.state.get(
            "paused_hours", 0.0) if last else None
        recent = bool(last and last["decision"] in ("ok", "alarm") and live_hours <= settings.max_batch_hours + 2)
        building = None
        if not self.state["reference"] and settings.reference_labels:
            building = {"labels": self.state["production"]["n"], "needs": settings.reference_labels,
                        "rejected": self.state.get("reference_rejected")}
        deployment = self.state["deployment"]
        deployment_view = {"decision": deployment["decision"], "looks_done": deployment["looks_done"],
                           "labels": self.state["production"]["n"],
                           "next_look_labels": next((n for n in deployment_looks(settings)
                                                     if n > self.state["production"]["n"]), None),
                           "level": deployment_level(settings), "last": deployment["last"],
                           **deployment_reach(settings, Reference.of(settings))}
        return {"status": status, "judged": recent, "batch_labels": batch.n if self.state["batch"] else 0,
                "batch_target": the_plan.labels, "plan": asdict(the_plan), "last": last,
                "rate": self._rate(batch, age),
                "reference": asdict(reference), "reference_building": building, "deployment": deployment_view,
                # a drop lands mid-batch: about two batch lengths until the batch that holds it is judged
                "detection_delay_hours": 2 * the_plan.hours}


# --- on a laptop ------------------------------------------------------------------------------------------------

def join_files(settings: Settings, capture_paths: Iterable[Path], label_paths: Iterable[Path]) -> "Join":
    join = Join(settings)
    for path in capture_paths:
        for line in path.read_text().splitlines():
            if line.strip():
                join.add_capture_line(line)
    for path in label_paths:
        for line in path.read_text().splitlines():
            if line.strip():
                join.add_label_line(line)
    return join


def check_files(settings: Settings, capture_paths: Iterable[Path], label_paths: Iterable[Path], *,
                labels_per_hour: Optional[float] = None) -> dict:
    """The join of local capture files (JSON Lines, as SageMaker writes them) and label files, judged as the
    scheduled check judges one batch: against the baseline and its examples, at the critical value of a batch that
    took as long as these labels (``labels_per_hour``; default: all of them in one day)."""
    join = join_files(settings, capture_paths, label_paths)
    result = join.result()
    batch = Counts.of(join.scores)
    reference = Reference.of(settings)
    rate = labels_per_hour if labels_per_hour else batch.n / 24
    the_plan = plan(settings, reference, rate, math.sqrt(batch.variance()) if batch.n > 1 else 1.0)
    hours = batch.n / rate if rate > 0 else settings.max_batch_hours
    if batch.n < settings.min_labelled:
        judged = {"decision": "not_judged", "value": batch.value(settings.problem_type), "shortfall": None, "z": None,
                  "p_value": None, "reason": f"{batch.n} labelled predictions, needs {settings.min_labelled}"}
    else:
        judged = judge_batch(settings, reference, batch, max(1.0, hours))
    return {**result, **judged, "labelled": batch.n, "plan": asdict(the_plan)}


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

