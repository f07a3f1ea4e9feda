"""The scheduled drift check (AWS Lambda, Python standard library and the runtime's boto3 only).

Each run reads the newest captured requests, hour by hour back from the last complete hour, until it holds
MAX_RECORDS records or has read WINDOW_HOURS hours (a busy endpoint is judged on a sample of its last hour, a quiet
one pools up to a day: the drift decision needs a few thousand values to resolve its threshold), judges each feature
against the baseline and runs the feature watch (``drift.decide``: what alarms and what was too small to judge), publishes the scores,
the decisions and what it read, skipped and could not parse, and stores the result.

Environment: CAPTURE_BUCKET, CAPTURE_PREFIX (up to the endpoint, e.g. "capture/classifier/"), VARIANT_NAME,
BASELINE_BUCKET, BASELINE_KEY, RESULTS_PREFIX, ENDPOINT_NAME, METRIC_NAMESPACE, WINDOW_HOURS, MAX_RECORDS,
FALSE_ALARMS_PER_90_DAYS and SCHEDULE_MINUTES (what SIGNIFICANCE was planned from, reported), and the thresholds (``drift.Thresholds.from_environment``: PSI_THRESHOLD, SIGNIFICANCE, SPREAD_RATIO_LOW, SPREAD_RATIO_HIGH,
EXPLAINED_VARIANCE_CHANGE).
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Optional

try:
    from ..decisions import capture, drift
except ImportError:  # in Lambda the modules sit at the top of the package
    import capture  # type: ignore[no-redef]
    import drift  # type: ignore[no-redef]

METRIC_BATCH = 20


def capture_prefixes(prefix: str, variant: str, now: datetime, hours: int) -> list[str]:
    """The hourly S3 prefixes SageMaker writes capture files under (<prefix><variant>/yyyy/mm/dd/hh/), for the
    last complete hours: the current hour is still being written."""
    return capture.hour_prefixes(f"{prefix}{variant}/", now - timedelta(hours=hours), now - timedelta(hours=1))


def check(baseline: dict, bodies: Iterable[str], thresholds: drift.Thresholds, budget: Optional[int] = None,
          holder: Optional[dict] = None) -> tuple[drift.Window, dict, int]:
    """The check's own code on capture files' text, up to ``budget`` records: ``(window, decision, files read)``
    (``holder["window"]`` is the window being filled, for a reader that stops listing when it is full)."""
    window = drift.Window(baseline)
    if holder is not None:
        holder["window"] = window
    read = 0
    for body in bodies:
        if budget is not None and window.records + window.malformed >= budget:
            break
        for line in body.splitlines():
            if line.strip():
                window.add_record(line)
        read += 1
    return window, drift.decide(window, thresholds), read


def run(env: dict[str, str], s3: Any, cloudwatch: Any, now: datetime) -> dict:
    endpoint = env["ENDPOINT_NAME"]
    baseline = json.loads(s3.get_object(Bucket=env["BASELINE_BUCKET"], Key=env["BASELINE_KEY"])["Body"].read())
    hours = capture_prefixes(env["CAPTURE_PREFIX"], env["VARIANT_NAME"], now, int(env["WINDOW_HOURS"]))
    budget = int(env["MAX_RECORDS"])
    listed = {"objects": 0, "hours": 0}
    window_holder: dict = {}

    def newest_first() -> Iterable[str]:
        """Capture files, the newest hour first and each hour's files in random order (a busy hour is sampled, not
        read from its first file on), listed an hour at a time: a window full from its newest hours lists no more."""
        rng = random.Random(now.isoformat())
        for prefix in reversed(hours):
            window = window_holder.get("window")
            if window is not None and window.records + window.malformed >= budget:
                return
            keys = [obj["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket=env["CAPTURE_BUCKET"], Prefix=prefix) for obj in page.get("Contents", [])]
            listed["objects"] += len(keys)
            listed["hours"] += 1
            rng.shuffle(keys)
            for key in keys:
                yield s3.get_object(Bucket=env["CAPTURE_BUCKET"], Key=key)["Body"].read().decode("utf-8")

    window, decision, read_objects = check(baseline, newest_first(), drift.Thresholds.from_environment(env), budget,
                                           window_holder)
    summary = {
        "endpoint": endpoint, "window_end": now.isoformat(), "window_hours": int(env["WINDOW_HOURS"]),
        "hours_read": listed["hours"], "objects_found": listed["objects"], "objects_read": read_objects,
        "objects_skipped": listed["objects"] - read_objects,
        "false_alarms_per_90_days": float(env.get("FALSE_ALARMS_PER_90_DAYS") or drift.DEFAULT_FALSE_ALARMS),
        "schedule_minutes": int(env.get("SCHEDULE_MINUTES") or 60),
        "records_read": window.records, "records_malformed": window.malformed,
        "missing_values": window.missing_values, "other_category_values": window.other_category_values,
        "baseline_version": baseline.get("version", 1), **decision,
    }
    _publish(cloudwatch, env["METRIC_NAMESPACE"], endpoint, summary, now)
    s3.put_object(Bucket=env["BASELINE_BUCKET"], Key=f"{env['RESULTS_PREFIX']}{now:%Y/%m/%d/%H%M%S}.json",
                  Body=json.dumps(summary, indent=1).encode())
    print(json.dumps({"alarm": decision["alarm"], "judged": decision["judged"], "reason": decision["reason"],
                      "records": window.records, "feature_watch_inactive": decision["feature_watch_inactive"]}))
    return summary


def _publish(cloudwatch: Any, namespace: str, endpoint: str, summary: dict, now: datetime) -> None:
    endpoint_dimension = [{"Name": "EndpointName", "Value": endpoint}]

    def datum(name: str, value: float, unit: str = "None", feature: Optional[str] = None) -> dict:
        dimensions = endpoint_dimension + ([{"Name": "Feature", "Value": feature}] if feature else [])
        return {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": unit, "Timestamp": now}

    data = [datum(name, summary[key], "Count") for name, key in (
        ("RecordsRead", "records_read"), ("RecordsMalformed", "records_malformed"), ("ObjectsSkipped", "objects_skipped"),
        ("MissingValues", "missing_values"), ("OtherCategoryValues", "other_category_values"),
        ("FeaturesJudged", "features_judged"))]
    data.append(datum("FeaturesNotJudged", len(summary["features_not_judged"]), "Count"))
    data.append(datum("DriftJudged", 1.0 if summary["judged"] else 0.0))
    scores = summary["scores"]
    if scores:
        data.append(datum("MaxPSI", max(s["psi"] for s in scores.values())))
        data.append(datum("MaxKL", max(s["kl"] for s in scores.values())))
        for feature, score in scores.items():
            data.append(datum("PSI", score["psi"], feature=feature))
            data.append(datum("KL", score["kl"], feature=feature))
    if summary["judged"]:  # an unjudged window publishes nothing the drift alarm reads: missing data, not calm
        data.append(datum("SignificantPSI", summary["significant_psi"]))
        # What the drift alarm reads: at least the threshold exactly when a feature drifted (``drift.decide``).
        data.append(datum("PSILowerBound", summary["psi_lower_bound"]))
        data.append(datum("DriftedFeatures", len(summary["drifted"]), "Count"))
    data += _feature_watch_data(datum, summary)
    for start in range(0, len(data), METRIC_BATCH):
        cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[start:start + METRIC_BATCH])


def _feature_watch_data(datum: Callable[..., dict], summary: dict) -> list[dict]:
    """Whether the baseline lets the watch judge (FeatureWatchActive), spread ratios (per feature, their
    maximum and minimum, and how many left the band significantly) and the explained variance share, its signed drop
    and its significant shift; none of the latter where the window had too few values, so the feature watch alarms
    see missing data, not a calm window."""
    watch, data = summary["feature_watch"], []
    # 1 where the baseline lets the watch judge, 0 where it was built before the watch (a rebuild fixes it), so its
    # alarm says so instead of the watch's alarms staying quiet for want of data. A current baseline whose inputs give
    # the watch nothing (no numeric feature with a spread) publishes neither: nothing a rebuild would change, and
    # the results say why.
    if summary["feature_watch_inactive"] is None:
        data.append(datum("FeatureWatchActive", 1.0))
    elif summary["baseline_version"] < 3:
        data.append(datum("FeatureWatchActive", 0.0))
    ratios = watch["spread_ratio"]
    if ratios:
        data += [datum("MaxSpreadRatio", max(ratios.values())), datum("MinSpreadRatio", min(ratios.values())),
                 datum("SpreadOutOfBand", len(summary["spread_out_of_band"]), "Count")]
        data += [datum("SpreadRatio", ratio, feature=feature) for feature, ratio in ratios.items()]
    if watch["explained_variance"] is not None:
        data += [datum("ExplainedVariance", watch["explained_variance"]),
                 datum("ExplainedVarianceDrop", watch["explained_variance_drop"]),
                 datum("ExplainedVarianceShift", summary["explained_variance_shift"]),
                 datum("RelationsChanged", 1.0 if summary["relations_changed"] else 0.0)]
        if watch["max_correlation_change"] is not None:
            data.append(datum("MaxCorrelationChange", watch["max_correlation_change"]))
    return data


def handler(event: dict, context: Any, *, clients: Optional[Callable[[str], Any]] = None) -> dict:
    if clients is None:
        import boto3
        clients = boto3.client
    return run(dict(os.environ), clients("s3"), clients("cloudwatch"), datetime.now(timezone.utc))
