"""The scheduled drift check (AWS Lambda, Python standard library and the runtime's boto3 only).

Each run reads a bounded sample of the last window of captured requests, judges each feature against the baseline
and runs the feature watch (``drift.decide``: what alarms and what was too small to judge), publishes the scores,
the decisions and what it read, skipped and could not parse, and stores the result.

Environment: CAPTURE_BUCKET, CAPTURE_PREFIX (up to the endpoint, e.g. "capture/classifier/"), VARIANT_NAME,
BASELINE_BUCKET, BASELINE_KEY, RESULTS_PREFIX, ENDPOINT_NAME, METRIC_NAMESPACE, WINDOW_HOURS, MAX_RECORDS, and the
thresholds (``drift.Thresholds.from_environment``: PSI_THRESHOLD, SIGNIFICANCE, SPREAD_RATIO_LOW, SPREAD_RATIO_HIGH,
EXPLAINED_VARIANCE_CHANGE).
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Optional

try:
    from . import capture, drift
except ImportError:  # in Lambda the modules sit at the top of the package
    import capture  # type: ignore[no-redef]
    import drift  # type: ignore[no-redef]

METRIC_BATCH = 20


def capture_prefixes(prefix: str, variant: str, now: datetime, hours: int) -> list[str]:
    """The hourly S3 prefixes SageMaker writes capture files under (<prefix><variant>/yyyy/mm/dd/hh/), for the
    last complete hours: the current hour is still being written."""
    return capture.hour_prefixes(f"{prefix}{variant}/", now - timedelta(hours=hours), now - timedelta(hours=1))


def check(baseline: dict, bodies: Iterable[str], thresholds: drift.Thresholds, budget: Optional[int] = None) -> tuple[drift.Window, dict, int]:
    """The check's own code on capture files' text, up to ``budget`` records: ``(window, decision, files read)``."""
    window = drift.Window(baseline)
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
    keys = []
    for prefix in capture_prefixes(env["CAPTURE_PREFIX"], env["VARIANT_NAME"], now, int(env["WINDOW_HOURS"])):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=env["CAPTURE_BUCKET"], Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
    # A random sample of whole files, so 100% capture on a busy endpoint cannot push the run past its timeout.
    random.Random(now.isoformat()).shuffle(keys)
    bodies = (s3.get_object(Bucket=env["CAPTURE_BUCKET"], Key=key)["Body"].read().decode("utf-8") for key in keys)
    window, decision, read_objects = check(baseline, bodies, drift.Thresholds.from_environment(env),
                                           int(env["MAX_RECORDS"]))
    summary = {
        "endpoint": endpoint, "window_end": now.isoformat(), "window_hours": int(env["WINDOW_HOURS"]),
        "objects_found": len(keys), "objects_read": read_objects, "objects_skipped": len(keys) - read_objects,
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
