"""The promotion gate and the names a promotion changes (standard library only).

A model version reaches an endpoint only when its run's held-out score is no worse than the live model's (within a
tolerance). The version is declared by CloudFormation: a ``MonitoredEndpoint`` with a declared ``model_version``
gets a stack parameter (``model_version_parameter(endpoint name)``), its artifact is at
``model_key(model_data_key, version)``, and a promotion updates that parameter (the template stays as deployed), so
the next ``cdk deploy`` (which keeps a parameter's previous value) never undoes it. An endpoint with a quality check
also gets ``quality_baseline_parameter(endpoint name)``, empty until a promotion sets it to the promoted run's
held-out score (``baseline_value``): the live model's score is what its production quality is held to.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Optional

VERSION_PLACEHOLDER = "{version}"
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The quality baseline parameter: empty (no promotion yet: the configured baseline applies) or a decimal number.
BASELINE = re.compile(r"^$|^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")


def _pascal(endpoint_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", endpoint_name) if part)


def model_version_parameter(endpoint_name: str) -> str:
    """The stack parameter that declares an endpoint's model version: ``classifier-prod`` -> ClassifierProdModelVersion."""
    return _pascal(endpoint_name) + "ModelVersion"


def quality_baseline_parameter(endpoint_name: str) -> str:
    """The stack parameter that holds the promoted model's held-out score, the baseline of the endpoint's quality
    check: ``classifier-prod`` -> ClassifierProdQualityBaseline."""
    return _pascal(endpoint_name) + "QualityBaseline"


def baseline_value(score: float) -> str:
    """A held-out score as the quality baseline parameter holds it (``BASELINE``): ``0.9`` -> "0.9"."""
    text = repr(float(score))
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
    """Promote unless the candidate's score is worse than the live model's by more than ``tolerance``. A candidate
    without the score, with a score that is not a finite number (NaN compares as never worse), or with a
    ``holdout_accuracy`` outside 0-1 (a percentage against a fraction) is refused; a live model without a usable
    score (never promoted through this gate) is not compared."""
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
