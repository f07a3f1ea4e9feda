"""The scheduled quality check (AWS Lambda, Python standard library and the runtime's boto3 only).

Each run judges the predictions of one window that is ``LATENESS_HOURS`` old, so that their labels had that long
to arrive: it reads a bounded sample of the capture files of the window's hours, the label files uploaded from the
window's first hour until now, joins them (``quality.py``), publishes the metric, the labelled and unmatched counts
and, when the labelled sample is big enough, the shortfall against the baseline, its p-value and the significant
shortfall (the shortfall when the window alarms, else 0: what the quality alarm watches), and stores the result.

Environment: CAPTURE_BUCKET, CAPTURE_PREFIX (up to the endpoint, e.g. "capture/classifier/"), VARIANT_NAME,
LABELS_PREFIX (e.g. "ground-truth/classifier/", in the capture bucket), RESULTS_BUCKET, RESULTS_PREFIX,
ENDPOINT_NAME, METRIC_NAMESPACE, WINDOW_HOURS, LATENESS_HOURS, MAX_RECORDS, and the settings: PROBLEM_TYPE,
BASELINE, PROMOTED_BASELINE (optional: the promoted run's held-out score, which wins when set), PREDICTION_PATH,
PROBABILITY_THRESHOLD (binary, optional), MIN_LABELLED, MAX_DROP, SIGNIFICANCE (optional: 0.001).
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any

try:
    from . import capture, quality
except ImportError:  # in Lambda the modules sit at the top of the package
    import capture  # type: ignore[no-redef]
    import quality  # type: ignore[no-redef]


def windows(env: dict, now: datetime) -> tuple[datetime, datetime, datetime]:
    """``(first, last)`` hours of the judged predictions and the last hour of labels read: predictions of the
    ``WINDOW_HOURS`` complete hours that ended ``LATENESS_HOURS`` ago, labels from that window's first hour to now."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    lateness, window = int(env["LATENESS_HOURS"]), int(env["WINDOW_HOURS"])
    first = hour - timedelta(hours=lateness + window)
    return first, hour - timedelta(hours=lateness + 1), hour


def _keys(s3: Any, bucket: str, prefixes: list[str]) -> list[str]:
    keys = []
    for prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def _read(s3: Any, bucket: str, keys: list[str], budget: int, add) -> tuple[int, int]:
    """Feeds whole files' lines to ``add`` until ``budget`` lines; ``(files read, lines read)``."""
    lines = files = 0
    for key in keys:
        if lines >= budget:
            break
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
        for line in body.splitlines():
            if line.strip():
                add(line)
                lines += 1
        files += 1
    return files, lines


def run(env: dict[str, str], s3: Any, cloudwatch: Any, now: datetime) -> dict:
    endpoint, bucket = env["ENDPOINT_NAME"], env["CAPTURE_BUCKET"]
    join = quality.Join(quality.Settings.from_environment(env))
    first, last, labels_last = windows(env, now)
    capture_keys = _keys(s3, bucket, capture.hour_prefixes(f"{env['CAPTURE_PREFIX']}{env['VARIANT_NAME']}/", first, last))
    label_keys = _keys(s3, bucket, capture.hour_prefixes(env["LABELS_PREFIX"], first, labels_last))
    # A random sample of whole capture files, so 100% capture on a busy endpoint cannot push the run past its
    # timeout; labels in upload order, bounded alike.
    random.Random(now.isoformat()).shuffle(capture_keys)
    budget = int(env["MAX_RECORDS"])
    capture_read, records = _read(s3, bucket, capture_keys, budget, join.add_capture_line)
    labels_read, label_lines = _read(s3, bucket, sorted(label_keys), budget, join.add_label_line)
    result = join.result()
    summary = {"endpoint": endpoint, "window_start": first.isoformat(),
               "window_end": (last + timedelta(hours=1)).isoformat(), "labels_until": now.isoformat(),
               "capture_objects_found": len(capture_keys), "capture_objects_skipped": len(capture_keys) - capture_read,
               "label_objects_found": len(label_keys), "label_objects_skipped": len(label_keys) - labels_read,
               "records_read": records, "label_records_read": label_lines, **result}
    _publish(cloudwatch, env["METRIC_NAMESPACE"], endpoint, summary, now)
    s3_key = f"{env['RESULTS_PREFIX']}{now:%Y/%m/%d/%H%M%S}.json"
    s3.put_object(Bucket=env["RESULTS_BUCKET"], Key=s3_key, Body=json.dumps(summary, indent=1).encode())
    print(json.dumps({k: summary[k] for k in ("metric", "value", "labelled", "matched", "decision", "shortfall",
                                              "p_value", "baseline", "baseline_source")}))
    return summary


def _publish(cloudwatch: Any, namespace: str, endpoint: str, summary: dict, now: datetime) -> None:
    dimensions = [{"Name": "EndpointName", "Value": endpoint}]
    data = [{"MetricName": name, "Dimensions": dimensions, "Value": float(summary[key]), "Unit": "Count",
             "Timestamp": now}
            for name, key in (("LabelledPredictions", "labelled"), ("MatchedLabels", "matched"),
                              ("UnmatchedLabels", "unmatched_labels"),
                              ("UnmatchedPredictions", "unmatched_predictions"),
                              ("RecordsMalformed", "malformed_records"), ("LabelsMalformed", "malformed_labels"))]
    data.append({"MetricName": "QualityBaseline", "Dimensions": dimensions, "Value": float(summary["baseline"]),
                 "Unit": "None", "Timestamp": now})
    if summary["value"] is not None:
        data.append({"MetricName": summary["metric"], "Dimensions": dimensions, "Value": float(summary["value"]),
                     "Unit": "None", "Timestamp": now})
    if summary["shortfall"] is not None:  # judged: the quality alarm sees nothing from a too small sample
        # The alarm watches SignificantShortfall: a shortfall that is not significant (noise) publishes 0 there.
        significant = summary["shortfall"] if summary["decision"] == "alarm" else 0.0
        p = summary["p_value"]
        if p is not None and p < 1e-100:  # CloudWatch refuses values this small (MetricDatum.Value): 0
            p = 0.0
        for name, value in (("QualityShortfall", summary["shortfall"]), ("SignificantShortfall", significant),
                            ("ShortfallPValue", p)):
            if value is not None:  # no p-value from a single regression error
                data.append({"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": "None",
                             "Timestamp": now})
    cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)


def handler(event: dict, context: Any) -> dict:
    import boto3

    return run(dict(os.environ), boto3.client("s3"), boto3.client("cloudwatch"), datetime.now(timezone.utc))
