"""The scheduled quality check (AWS Lambda, Python standard library and the runtime's boto3 only).

Every label is joined once, whenever it arrives, and no label of a judged prediction is dropped by a read budget:

1. Capture index: each complete capture hour (two hours after it ends, when SageMaker has written its files) is read
   once into a compact index of its predictions by join key (``<STATE_PREFIX>index/yyyy/mm/dd/hh.json``). An hour
   with more than MAX_RECORDS records is indexed from a random sample of its files (counted: CaptureRecordsSkipped);
   a label of a prediction outside the sample is then unmatched, at random, not by how late it came.
2. Labels: every label file uploaded under LABELS_PREFIX (by ``./platform labels upload``, by upload hour) is joined,
   once, against the indexes of the LATENESS_HOURS before its upload hour, as soon as they exist. A run takes at most
   MAX_LABELS label records; files left over wait for the next run (LabelObjectsPending, alarmed when it persists);
   a file still waiting when its hour leaves the two-day horizon is dropped and counted (LabelObjectsExpired).
3. The decision (``quality.Monitor``): the run's labelled outcomes of the current model version (MODEL_VERSION;
   predictions from the hour after a new version was first seen on: only those hours are indexed, so labels of the
   previous version's predictions count as unmatched) go into the current batch; a full batch is judged. The state (``<STATE_PREFIX>monitor.json``) holds the batch, the production reference being built, the last
   judgement, the indexed hours and the label files done, so a run that is retried, or an event delivered twice, does
   each piece of work once.

Every run publishes what it did, the plan (batch size, delay, detectable drop) and the latest judgement, so the
quality alarm keeps the last batch's decision until the next batch is judged.

Environment: CAPTURE_BUCKET, CAPTURE_PREFIX (up to the endpoint, e.g. "capture/classifier/"), VARIANT_NAME,
LABELS_PREFIX (e.g. "ground-truth/classifier/", in the capture bucket), RESULTS_BUCKET, RESULTS_PREFIX, STATE_PREFIX
(in the results bucket), ENDPOINT_NAME, METRIC_NAMESPACE, LATENESS_HOURS, MAX_RECORDS, MAX_LABELS, MODEL_VERSION,
SCHEDULE_HOURS (how often it runs: the interim looks' share of the false-alarm budget),
and the settings (``quality.Settings.from_environment``).
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional

try:
    from . import capture, quality
except ImportError:  # in Lambda the modules sit at the top of the package
    import capture  # type: ignore[no-redef]
    import quality  # type: ignore[no-redef]

INDEX_DELAY_HOURS = 2  # a capture hour is indexed this long after it ends
INDEX_RUNS_PER_CATCH_UP = 3  # a run indexes at most this many hours' worth of MAX_RECORDS
HOUR_FORMAT = "%Y/%m/%d/%H"


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def _read_lines(s3: Any, bucket: str, key: str) -> list[str]:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
    return [line for line in body.splitlines() if line.strip()]


def _read_json(s3: Any, bucket: str, key: str) -> Optional[Any]:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def index_hour(env: dict, s3: Any, settings: quality.Settings, hour: datetime) -> dict:
    """The predictions of one capture hour by join key (a random sample of its files past MAX_RECORDS)."""
    prefix = f"{env['CAPTURE_PREFIX']}{env['VARIANT_NAME']}/{hour:{HOUR_FORMAT}}/"
    keys = _keys(s3, env["CAPTURE_BUCKET"], prefix)
    random.Random(f"{prefix}").shuffle(keys)
    join = quality.Join(settings)
    budget, records, skipped = int(env["MAX_RECORDS"]), 0, 0
    for key in keys:
        lines = _read_lines(s3, env["CAPTURE_BUCKET"], key)
        if records >= budget:
            skipped += len(lines)
            continue
        for line in lines:
            join.add_capture_line(line)
        records += len(lines)
    return {"hour": hour.isoformat(), "predictions": join.predictions, "records": records, "skipped": skipped,
            "malformed": join.malformed_records}


def run(env: dict[str, str], s3: Any, cloudwatch: Any, now: datetime) -> dict:
    settings = quality.Settings.from_environment(env)
    results_bucket, state_prefix = env["RESULTS_BUCKET"], env["STATE_PREFIX"]
    lateness = int(env["LATENESS_HOURS"])
    version = env.get("MODEL_VERSION") or "static"
    state = _read_json(s3, results_bucket, f"{state_prefix}monitor.json") or {}
    if state.get("model_version") != version:
        state = {"model_version": version, "version_since": _hour(now).isoformat(), "indexed": [], "labels_done": {},
                 "monitor": None}
    horizon = _hour(now) - timedelta(hours=lateness + INDEX_DELAY_HOURS + 48)
    this_run = {"records_indexed": 0, "records_skipped": 0, "records_malformed": 0, "labelled": 0,
                "unmatched_labels": 0, "malformed_labels": 0, "unusable_pairs": 0, "label_objects_read": 0,
                "label_objects_expired": 0}

    # 1. Index the capture hours that are complete.
    indexed = {h for h in state["indexed"] if datetime.fromisoformat(h) >= horizon}
    ready = _hour(now) - timedelta(hours=INDEX_DELAY_HOURS)
    # Predictions from the hour after the version was first seen on are its own (a rollout takes minutes).
    since = datetime.fromisoformat(state["version_since"]) + timedelta(hours=1)
    todo, hour = [], ready - timedelta(hours=1)
    while hour >= max(horizon, since):
        if hour.isoformat() not in indexed:
            todo.append(hour)
        hour -= timedelta(hours=1)
    budget = INDEX_RUNS_PER_CATCH_UP * int(env["MAX_RECORDS"])
    todo.sort()  # oldest first: label files unlock in order
    done_hours = 0
    for hour in todo:
        if this_run["records_indexed"] >= budget:
            break  # a first run, or one after an outage, catches up over several runs
        index = index_hour(env, s3, settings, hour)
        done_hours += 1
        s3.put_object(Bucket=results_bucket, Key=f"{state_prefix}index/{hour:{HOUR_FORMAT}}.json",
                      Body=json.dumps(index).encode())
        indexed.add(hour.isoformat())
        this_run["records_indexed"] += index["records"]
        this_run["records_skipped"] += index["skipped"]
        this_run["records_malformed"] += index["malformed"]
    hours_pending = len(todo) - done_hours

    # 2. Join every label file whose candidate capture hours are all indexed.
    loaded: dict[str, dict] = {}

    def predictions_near(upload_hour: datetime) -> Optional[dict]:
        found = {}
        for back in range(lateness + 1):
            hour = upload_hour - timedelta(hours=back)
            if hour < horizon:
                break
            if hour < since:
                break  # the previous version's predictions: not judged (their labels count as unmatched)
            name = hour.isoformat()
            if name not in indexed:
                return None  # not indexed yet: this file waits
            if name not in loaded:
                index = _read_json(s3, results_bucket, f"{state_prefix}index/{hour:{HOUR_FORMAT}}.json") or {}
                loaded[name] = index.get("predictions", {})
            for key, predicted in loaded[name].items():
                found.setdefault(key, (hour, predicted))
        return found

    done = {k: v for k, v in state["labels_done"].items() if datetime.fromisoformat(v) >= horizon}
    # Label files that left the horizon unjoined (waiting on the label budget or on their capture hours for two days:
    # the backlog alarm has fired long before) are lost: counted, never silently.
    previous = datetime.fromisoformat(state["horizon"]) if state.get("horizon") else horizon
    if previous < horizon:
        for hour_prefix in capture.hour_prefixes(env["LABELS_PREFIX"], previous, horizon - timedelta(hours=1)):
            this_run["label_objects_expired"] += sum(1 for k in _keys(s3, env["CAPTURE_BUCKET"], hour_prefix)
                                                     if k not in state["labels_done"])
    label_keys = []
    for hour_prefix in capture.hour_prefixes(env["LABELS_PREFIX"], horizon, _hour(now)):
        label_keys.extend(k for k in _keys(s3, env["CAPTURE_BUCKET"], hour_prefix) if k not in done)
    counts, budget, pending = quality.Counts(), int(env["MAX_LABELS"]), 0
    for key in sorted(label_keys):
        upload_hour = _label_hour(env["LABELS_PREFIX"], key) or _hour(now)
        near = predictions_near(upload_hour) if this_run["labelled"] + this_run["unmatched_labels"] < budget else None
        if near is None:
            pending += 1
            continue
        join = quality.Join(settings)
        for line in _read_lines(s3, env["CAPTURE_BUCKET"], key):
            join.add_label_line(line)
        this_run["malformed_labels"] += join.malformed_labels
        for label_key, labels in join.labels.items():
            hit = near.get(label_key)
            if hit is None:
                this_run["unmatched_labels"] += 1
                continue
            _, predicted = hit
            scores = quality.scores_of(settings, predicted, labels)
            if scores is None:
                this_run["unusable_pairs"] += 1
                continue
            for score in scores:
                counts.add(score)
            this_run["labelled"] += len(scores)
        done[key] = upload_hour.isoformat()
        this_run["label_objects_read"] += 1

    # 3. The decision.
    monitor = quality.Monitor(settings, state.get("monitor"), model_version=version,
                              run_hours=float(env.get("SCHEDULE_HOURS", "1")))
    monitor.add(counts, now)
    decision = monitor.step(now)
    state.update(indexed=sorted(indexed), labels_done=done, monitor=monitor.state, horizon=horizon.isoformat())
    s3.put_object(Bucket=results_bucket, Key=f"{state_prefix}monitor.json", Body=json.dumps(state).encode())
    summary = {"endpoint": env["ENDPOINT_NAME"], "at": now.isoformat(), "model_version": version,
               "metric": settings.metric, **this_run, "label_objects_pending": pending,
               "capture_hours_pending": hours_pending, **decision}
    _publish(cloudwatch, env["METRIC_NAMESPACE"], env["ENDPOINT_NAME"], settings, summary, now)
    s3.put_object(Bucket=results_bucket, Key=f"{env['RESULTS_PREFIX']}{now:%Y/%m/%d/%H%M%S}.json",
                  Body=json.dumps(summary, indent=1, default=str).encode())
    last = decision["last"] or {}
    print(json.dumps({"status": decision["status"], "labelled": this_run["labelled"],
                      "batch": f"{decision['batch_labels']}/{decision['batch_target']}", "last": last.get("decision"),
                      "shortfall": last.get("shortfall"), "z": last.get("z"), "pending": pending}))
    return summary


def _label_hour(prefix: str, key: str) -> Optional[datetime]:
    try:
        return datetime.strptime("/".join(key[len(prefix):].split("/")[:4]), HOUR_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _publish(cloudwatch: Any, namespace: str, endpoint: str, settings: quality.Settings, summary: dict,
             now: datetime) -> None:
    dimensions = [{"Name": "EndpointName", "Value": endpoint}]

    def datum(name: str, value: float, unit: str = "None") -> dict:
        return {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": unit, "Timestamp": now}

    plan = summary["plan"]
    data = [datum(name, summary[key], "Count") for name, key in (
        ("LabelledPredictions", "labelled"), ("UnmatchedLabels", "unmatched_labels"),
        ("LabelsMalformed", "malformed_labels"),
        ("RecordsMalformed", "records_malformed"), ("CaptureRecordsSkipped", "records_skipped"),
        ("LabelObjectsPending", "label_objects_pending"), ("LabelObjectsExpired", "label_objects_expired"),
        ("CaptureHoursPending", "capture_hours_pending"),
        ("BatchLabels", "batch_labels"), ("BatchTarget", "batch_target"))]
    data += [datum("QualityJudged", 1.0 if summary["judged"] else 0.0),
             datum("DetectionDelayHours", summary["detection_delay_hours"]),
             datum("QualityBaseline", summary["reference"]["value"])]
    if plan["detectable_drop"] is not None:
        data.append(datum("DetectableDrop", plan["detectable_drop"]))
    last = summary["last"]
    if summary["judged"] and last:
        data += [datum(settings.metric, last["value"]), datum("QualityShortfall", last["shortfall"]),
                 datum("SignificantShortfall", last["shortfall"] if last["decision"] == "alarm" else 0.0),
                 datum("ShortfallZ", max(-1e6, min(1e6, last["z"])))]
    cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)


def handler(event: dict, context: Any, *, clients: Optional[Callable[[str], Any]] = None) -> dict:
    if clients is None:
        import boto3
        clients = boto3.client
    return run(dict(os.environ), clients("s3"), clients("cloudwatch"), datetime.now(timezone.utc))
