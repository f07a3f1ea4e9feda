"""The scheduled drift check (AWS Lambda, Python standard library and the runtime's boto3 only).

Each run reads a bounded sample of the last window of captured requests, compares each feature with the
baseline, publishes the scores, the feature watch (std ratios, explained variance) and what it read, skipped and
could not parse, and stores the result.

Environment: CAPTURE_BUCKET, CAPTURE_PREFIX (up to the endpoint, e.g. "capture/classifier/"), VARIANT_NAME,
BASELINE_BUCKET, BASELINE_KEY, RESULTS_PREFIX, ENDPOINT_NAME, METRIC_NAMESPACE, WINDOW_HOURS, MAX_RECORDS.
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any

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


def run(env: dict[str, str], s3: Any, cloudwatch: Any, now: datetime) -> dict:
    endpoint = env["ENDPOINT_NAME"]
    baseline = json.loads(s3.get_object(Bucket=env["BASELINE_BUCKET"], Key=env["BASELINE_KEY"])["Body"].read())
    window = drift.Window(baseline)
    keys = []
    for prefix in capture_prefixes(env["CAPTURE_PREFIX"], env["VARIANT_NAME"], now, int(env["WINDOW_HOURS"])):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=env["CAPTURE_BUCKET"], Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
    # A random sample of whole files, so 100% capture on a busy endpoint cannot push the run past its timeout.
    random.Random(now.isoformat()).shuffle(keys)
    budget, read_objects = int(env["MAX_RECORDS"]), 0
    for key in keys:
        if window.records + window.malformed >= budget:
            break
        body = s3.get_object(Bucket=env["CAPTURE_BUCKET"], Key=key)["Body"].read().decode("utf-8")
        for line in body.splitlines():
            if line.strip():
                window.add_record(line)
        read_objects += 1
    scores = window.scores()
    watch = window.feature_watch()
    summary = {
        "endpoint": endpoint, "window_end": now.isoformat(), "window_hours": int(env["WINDOW_HOURS"]),
        "objects_found": len(keys), "objects_read": read_objects, "objects_skipped": len(keys) - read_objects,
        "records_read": window.records, "records_malformed": window.malformed,
        "missing_values": window.missing_values, "other_category_values": window.other_category_values,
        "scores": scores, "feature_watch": watch,
    }
    _publish(cloudwatch, env["METRIC_NAMESPACE"], endpoint, summary, now)
    s3.put_object(Bucket=env["BASELINE_BUCKET"], Key=f"{env['RESULTS_PREFIX']}{now:%Y/%m/%d/%H%M%S}.json",
                  Body=json.dumps(summary, indent=1).encode())
    return summary


def _publish(cloudwatch: Any, namespace: str, endpoint: str, summary: dict, now: datetime) -> None:
    endpoint_dimension = [{"Name": "EndpointName", "Value": endpoint}]
    data = [{"MetricName": name, "Dimensions": endpoint_dimension, "Value": float(summary[key]), "Unit": "Count",
             "Timestamp": now}
            for name, key in (("RecordsRead", "records_read"), ("RecordsMalformed", "records_malformed"),
                              ("ObjectsSkipped", "objects_skipped"), ("MissingValues", "missing_values"),
                              ("OtherCategoryValues", "other_category_values"))]
    scores = summary["scores"]
    if scores:  # an empty window has no score: the drift alarms see missing data, not zero drift
        data.append({"MetricName": "MaxPSI", "Dimensions": endpoint_dimension, "Timestamp": now,
                     "Value": max(s["psi"] for s in scores.values()), "Unit": "None"})
        data.append({"MetricName": "MaxKL", "Dimensions": endpoint_dimension, "Timestamp": now,
                     "Value": max(s["kl"] for s in scores.values()), "Unit": "None"})
        for feature, score in scores.items():
            dimensions = [*endpoint_dimension, {"Name": "Feature", "Value": feature}]
            data.append({"MetricName": "PSI", "Dimensions": dimensions, "Value": score["psi"], "Unit": "None",
                         "Timestamp": now})
            data.append({"MetricName": "KL", "Dimensions": dimensions, "Value": score["kl"], "Unit": "None",
                         "Timestamp": now})
    data += _feature_watch_data(endpoint_dimension, summary["feature_watch"], now)
    for start in range(0, len(data), METRIC_BATCH):
        cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[start:start + METRIC_BATCH])


def _feature_watch_data(endpoint_dimension: list[dict], watch: dict, now: datetime) -> list[dict]:
    """Std ratios (per feature, their maximum and minimum) and the explained variance share and its drop; none of
    them where the window had too few values, so the feature watch alarms see missing data, not a calm window."""
    data = []
    ratios = watch["std_ratio"]
    if ratios:
        data.append({"MetricName": "MaxStdRatio", "Dimensions": endpoint_dimension, "Value": max(ratios.values()),
                     "Unit": "None", "Timestamp": now})
        data.append({"MetricName": "MinStdRatio", "Dimensions": endpoint_dimension, "Value": min(ratios.values()),
                     "Unit": "None", "Timestamp": now})
    for feature, ratio in ratios.items():
        data.append({"MetricName": "StdRatio", "Dimensions": [*endpoint_dimension, {"Name": "Feature", "Value": feature}],
                     "Value": ratio, "Unit": "None", "Timestamp": now})
    if watch["explained_variance"] is not None:
        data.append({"MetricName": "ExplainedVariance", "Dimensions": endpoint_dimension,
                     "Value": watch["explained_variance"], "Unit": "None", "Timestamp": now})
        data.append({"MetricName": "ExplainedVarianceDrop", "Dimensions": endpoint_dimension,
                     "Value": watch["explained_variance_drop"], "Unit": "None", "Timestamp": now})
    return data


def handler(event: dict, context: Any) -> dict:
    import boto3

    return run(dict(os.environ), boto3.client("s3"), boto3.client("cloudwatch"), datetime.now(timezone.utc))
