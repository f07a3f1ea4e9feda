"""The scheduled quality check (AWS Lambda, Python standard library and the runtime's boto3 only).

Every label is joined once, whenever it arrives, and no label of a judged prediction is dropped by a read budget:

1. Capture index: each complete capture hour (two hours after it ends, when SageMaker has written its files) is read
   once into a compact index of its predictions by join key (``<STATE_PREFIX>index/<join digest>/yyyy/mm/dd/hh.json``;
   the digest of the capture prefix, the variant and the prediction path, so that a change of any of them indexes
   afresh instead of joining labels with predictions read the old way). An hour with more than MAX_RECORDS records
   is indexed from a random sample of its files (counted: CaptureRecordsSkipped); a label of a prediction outside the
   sample is then unmatched, at random, not by how late it came.
2. Labels: every label file uploaded under LABELS_PREFIX (by ``./platform labels upload``, by upload hour) is joined,
   once, against the indexes of the LATENESS_HOURS before its upload hour, as soon as they exist, through one map
   from join key to prediction built once per run (hours enter it as label files need them and leave it when no
   later file can). A file waits for its hours' indexes as a matter of course (about three hours after its upload);
   a file held back by the run's budget (MAX_LABELS label records, or the time left) or by capture hours that are
   due but not indexed is pending (LabelObjectsPending, alarmed when it persists); a file still unjoined when its
   hour leaves the two-day horizon is dropped and counted (LabelObjectsExpired).
3. The decision (``quality.Monitor``): the run's labelled outcomes of the live model version (MODEL_VERSION; its
   predictions from the hour after it went live on: only those hours are joined, so labels of the previous
   version's predictions count as unmatched) go into the current batch; a full batch is judged.

State: ``<STATE_PREFIX>live.json`` names the live version and since when; ``<STATE_PREFIX>state/<version>/monitor.json``
holds that version's judgement (batch, production reference, last judgement) and its join (indexed hours, label
files done, the listing floor), so a rollback to an earlier version resumes its evidence, and a run that is retried,
or an event delivered twice, does each piece of work once. Both are written with conditional PutObject (If-Match on
the ETag read, If-None-Match for the first write): of two overlapping runs one saves, the other stops without
publishing what it did not save (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). A
run saves as it goes and stops, saved, a minute before its timeout (``context.get_remaining_time_in_millis()``,
https://docs.aws.amazon.com/lambda/latest/dg/python-context.html); the next run goes on from there. Label files are
never listed below the previous run's horizon (a longer LATENESS_HOURS would list files already joined and pruned).

Every run publishes what it saved, the plan (batch size, delay, detectable drop) and the latest judgement, so the
quality alarm keeps the last batch's decision until the next batch is judged.

Environment: CAPTURE_BUCKET, CAPTURE_PREFIX (up to the endpoint, e.g. "capture/classifier/"), VARIANT_NAME,
LABELS_PREFIX (e.g. "ground-truth/classifier/", in the capture bucket), RESULTS_BUCKET, RESULTS_PREFIX, STATE_PREFIX
(in the results bucket), ENDPOINT_NAME, METRIC_NAMESPACE, LATENESS_HOURS, MAX_RECORDS, MAX_LABELS, MODEL_VERSION,
SCHEDULE_HOURS (how often it runs: the interim looks' share of the false-alarm budget),
and the settings (``quality.Settings.from_environment``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional

try:
    from ..decisions import quality
except ImportError:  # in Lambda the modules sit at the top of the package
    import quality  # type: ignore[no-redef]

INDEX_DELAY_HOURS = 2  # a capture hour is indexed this long after it ends
INDEX_RUNS_PER_CATCH_UP = 3  # a run indexes at most this many hours' worth of MAX_RECORDS
HORIZON_HOURS = 48  # a label file unjoined this long after its window is lost (counted)
STOP_MARGIN_MS = 60_000  # a run starts no new piece of work with less time left: the save and the metrics fit in it
CHECKPOINT_FILES = 100  # label files joined between two saves of the state
HOUR_FORMAT = "%Y/%m/%d/%H"
RUN_COUNTS = ("records_indexed", "records_skipped", "records_malformed", "labelled", "unmatched_labels",
              "malformed_labels", "unusable_pairs", "label_objects_read", "label_objects_expired")
COMPLETE_SHARE = 0.99  # a prediction hour is complete once this share of labels (by the measured delays) has come
MIN_DELAYS = 200  # measured delays before they, not LATENESS_HOURS, say when an hour is complete
LATE_CHECK_RUNS = 6  # every this many runs, a sample of unmatched labels is looked for in older hours
LATE_SAMPLE = 200  # unmatched labels looked for, at most
LATE_LOOKBACK_HOURS = 24  # how far before a label's window they are looked for (the indexes are kept longer)
DELAY_DECAY = 0.995  # the measured delays' weight per prediction hour folded in: a half-life of about 6 days


def release_lag(delays: list, lateness: int) -> int:
    """Hours after a prediction hour that its labels have been uploaded: the COMPLETE_SHARE quantile of the measured
    delays (upload hour minus prediction hour, of the endpoint's joined labels whose prediction hour's window has
    closed: a delay measured on an hour still open would be cut short), once MIN_DELAYS are measured; until then,
    LATENESS_HOURS (every label that can still join)."""
    total = sum(delays)
    if total < MIN_DELAYS:
        return lateness
    running = 0
    for hours, count in enumerate(delays):
        running += count
        if running >= COMPLETE_SHARE * total:
            return min(hours, lateness)
    return lateness


def delay_quantiles(delays: list) -> dict:
    """p50, p95, p99 and the largest of the measured label delays (hours), or None each when none is measured."""
    total, out = sum(delays), {}
    for name, share in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        running, out[name] = 0, None
        for hours, count in enumerate(delays):
            running += count
            if total and running >= share * total:
                out[name] = hours
                break
    out["max"] = max((h for h, c in enumerate(delays) if c), default=None)
    return out


class Conflict(Exception):
    """Another run saved the state after this run read it (overlapping runs)."""


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def _label_files(s3: Any, bucket: str, prefix: str, first: datetime, last: datetime) -> list[tuple[datetime, str]]:
    """``(upload hour, key)`` of the label files of the hours ``first``..``last``, in order, from one listing that
    starts after ``first``'s prefix: S3 lists keys in UTF-8 binary order, which is the hours' order here
    (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html, StartAfter)."""
    files = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix,
                                                              StartAfter=f"{prefix}{first:{HOUR_FORMAT}}/"):
        for obj in page.get("Contents", []):
            hour = _label_hour(prefix, obj["Key"])
            if hour is None:
                continue  # not under an hour's prefix: not a label file the upload command writes
            if hour > last:
                return files
            files.append((hour, obj["Key"]))
    return files


def _read_lines(s3: Any, bucket: str, key: str) -> list[str]:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
    return [line for line in body.splitlines() if line.strip()]


def _read_json(s3: Any, bucket: str, key: str) -> Optional[Any]:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


class _Stored:
    """One JSON state object, read with its ETag and written only over that version of it: If-Match on the ETag read
    (If-None-Match '*' where there was none), so that a run that read it before another run saved it cannot write
    over that run's work. S3 answers 412 (the object changed) or 409 (a conflicting write at the same time)."""

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        try:
            response = s3.get_object(Bucket=bucket, Key=key)
            self.value, self.etag = json.loads(response["Body"].read()), response["ETag"]
        except s3.exceptions.NoSuchKey:
            self.value, self.etag = None, None

    def save(self, value: dict) -> None:
        condition = {"IfMatch": self.etag} if self.etag else {"IfNoneMatch": "*"}
        try:
            response = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(value).encode(),
                                          **condition)
        except self.s3.exceptions.ClientError as error:
            if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                raise Conflict(self.key) from error
            raise
        self.value, self.etag = value, response["ETag"]


class _Clock:
    """The run's time left (the Lambda context's); without a context (a laptop, a test) there is no limit."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def out_of_time(self) -> bool:
        return self.context is not None and self.context.get_remaining_time_in_millis() < STOP_MARGIN_MS


class PredictionMap:
    """The indexed predictions of the hours this run's label files join against: one map from join key to its
    ``(hour, prediction)`` (a list of them for a key seen in several hours), built once per run. Hours enter as label
    files need them and leave (``release``) when no later file's window reaches them, so at most LATENESS_HOURS + 1
    hours are held at once."""

    def __init__(self, load: Callable[[datetime], dict]) -> None:
        self.load = load
        self.by_key: dict[str, Any] = {}
        self.keys_of: dict[datetime, list[str]] = {}
        self.loads = 0

    def add(self, hour: datetime) -> None:
        if hour in self.keys_of:
            return
        predictions = self.load(hour)
        self.loads += 1
        for key, predicted in predictions.items():
            seen = self.by_key.get(key)
            if seen is None:
                self.by_key[key] = (hour, predicted)
            elif isinstance(seen, list):
                seen.append((hour, predicted))
            else:
                self.by_key[key] = [seen, (hour, predicted)]
        self.keys_of[hour] = list(predictions)

    def release(self, before: datetime) -> None:
        for hour in [h for h in self.keys_of if h < before]:
            for key in self.keys_of.pop(hour):
                seen = self.by_key.get(key)
                if isinstance(seen, list):
                    rest = [entry for entry in seen if entry[0] != hour]
                    self.by_key[key] = rest[0] if len(rest) == 1 else rest
                elif seen is not None and seen[0] == hour:
                    del self.by_key[key]

    def find(self, key: str, first: datetime, last: datetime) -> Optional[tuple[datetime, list]]:
        """``(hour, prediction)`` of ``key`` from the latest hour in ``first``..``last``, or None."""
        seen = self.by_key.get(key)
        if seen is None:
            return None
        entries = seen if isinstance(seen, list) else [seen]
        inside = [entry for entry in entries if first <= entry[0] <= last]
        return max(inside, key=lambda entry: entry[0]) if inside else None


def join_digest(env: dict, settings: quality.Settings) -> str:
    """What an index depends on: where the predictions are captured and how they are read from a response."""
    text = json.dumps([env["CAPTURE_PREFIX"], env["VARIANT_NAME"], settings.prediction_path])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def index_hour(env: dict, s3: Any, settings: quality.Settings, hour: datetime) -> dict:
    """The predictions of one capture hour by join key (a random sample of its files past MAX_RECORDS)."""
    prefix = f"{env['CAPTURE_PREFIX']}{env['VARIANT_NAME']}/{hour:{HOUR_FORMAT}}/"
    keys = _keys(s3, env["CAPTURE_BUCKET"], prefix)
    random.Random(f"{prefix}").shuffle(keys)
    join = quality.Join(settings)
    budget, records, read = int(env["MAX_RECORDS"]), 0, 0
    for key in keys:
        if records >= budget:
            break  # past the sample: the files left are not read (reading them would cost the time saved)
        lines = _read_lines(s3, env["CAPTURE_BUCKET"], key)
        for line in lines:
            join.add_capture_line(line)
        records += len(lines)
        read += 1
    # The records left out, estimated from the files read (a file holds the records of one capture flush).
    skipped = round((len(keys) - read) * records / read) if read else 0
    return {"hour": hour.isoformat(), "predictions": join.predictions, "records": records, "skipped": skipped,
            "malformed": join.malformed_records}


def run(env: dict[str, str], s3: Any, cloudwatch: Any, now: datetime, context: Any = None) -> dict:
    settings = quality.Settings.from_environment(env)
    results_bucket, state_prefix = env["RESULTS_BUCKET"], env["STATE_PREFIX"]
    lateness = int(env["LATENESS_HOURS"])
    version = env.get("MODEL_VERSION") or "static"
    clock = _Clock(context)
    digest = join_digest(env, settings)
    index_prefix = f"{state_prefix}index/{digest}/"
    this_run = dict.fromkeys(RUN_COUNTS, 0)
    saved_run = dict(this_run)  # what the saved state holds of this run: all that is published
    try:
        live = _Stored(s3, results_bucket, f"{state_prefix}live.json")
        delay_store = _Stored(s3, results_bucket, f"{state_prefix}delays.json")  # the endpoint's, across versions
        if (live.value or {}).get("version") != version:
            # A new version goes live (a first deploy, a promotion, a rollback): its predictions from the next hour.
            live.save({"version": version, "since": _hour(now).isoformat()})
        stored = _Stored(s3, results_bucket, f"{state_prefix}state/{version}/monitor.json")
    except Conflict as conflict:
        return _stopped_by(conflict, env, now, version, this_run)
    state = stored.value or {}
    monitor = quality.Monitor(settings, state.get("monitor"), model_version=version,
                              run_hours=float(env.get("SCHEDULE_HOURS", "1")))
    restarted = state.get("since") != live.value["since"]
    if restarted:
        # This version's live period starts: its join starts at the switch, its judgement is resumed (a rollback),
        # paused for the hours it was not live.
        if state.get("last_run"):
            monitor.resume(now - datetime.fromisoformat(state["last_run"]))
        # Outcomes held from its earlier live period (their hours long complete) are released, not dropped.
        state = {"since": live.value["since"], "floor": live.value["since"], "indexed": [], "labels_done": {},
                 "held": state.get("held") or {}, "released_through": state.get("released_through"),
                 "hour_delays": state.get("hour_delays") or {}}
    if state.get("join") != digest:
        state.update(join=digest, indexed=[])  # predictions read another way: index afresh (labels done stay done)
    # Label delays measured (a histogram by whole hours), outcomes held by prediction hour until it is complete, and
    # the latest hour released (labels of an hour released before come straight in).
    measured = list((delay_store.value or {}).get("delays") or [])
    delays = measured[:lateness] + [sum(measured[lateness:])] + [0] * (lateness - len(measured))
    hour_delays = {h: list(v) for h, v in (state.get("hour_delays") or {}).items()}  # hours whose window is open
    held = {h: quality.Counts(**c) for h, c in (state.get("held") or {}).items()}
    released_through = state.get("released_through")
    since = datetime.fromisoformat(state["since"]) + timedelta(hours=1)  # a rollout takes minutes
    # Never below the previous floor: a longer lateness would list label files that were joined and pruned.
    previous_floor = datetime.fromisoformat(state["floor"])
    floor = max(previous_floor, _hour(now) - timedelta(hours=lateness + INDEX_DELAY_HOURS + HORIZON_HOURS))
    indexed = {h for h in state["indexed"] if datetime.fromisoformat(h) >= floor}
    done_before = state["labels_done"]
    done = {k: v for k, v in done_before.items() if datetime.fromisoformat(v) >= floor}
    stopped = None

    def checkpoint() -> None:
        state.update(indexed=sorted(indexed), labels_done=done, monitor=monitor.state, floor=floor.isoformat(),
                     last_run=now.isoformat(), hour_delays=hour_delays,
                     held={h: asdict(c) for h, c in held.items()}, released_through=released_through)
        stored.save(state)
        saved_run.update(this_run)

    try:
        # Label files that left the horizon unjoined (waiting on the label budget or on their capture hours for two
        # days: the backlog alarm has fired long before) are lost: counted, never silently.
        if previous_floor < floor:
            this_run["label_objects_expired"] += sum(1 for _, k in _label_files(
                s3, env["CAPTURE_BUCKET"], env["LABELS_PREFIX"], previous_floor, floor - timedelta(hours=1))
                if k not in done_before)

        # 1. Index the capture hours that are complete, oldest first (label files unlock in order).
        ready = _hour(now) - timedelta(hours=INDEX_DELAY_HOURS)  # hours before this one are due
        todo, hour = [], ready - timedelta(hours=1)
        while hour >= max(floor, since):
            if hour.isoformat() not in indexed:
                todo.append(hour)
            hour -= timedelta(hours=1)
        todo.sort()
        budget = INDEX_RUNS_PER_CATCH_UP * int(env["MAX_RECORDS"])
        for hour in todo:
            if this_run["records_indexed"] >= budget:
                break  # a first run, or one after an outage, catches up over several runs
            if clock.out_of_time():
                stopped = "time"
                break
            index = index_hour(env, s3, settings, hour)
            indexed.add(hour.isoformat())
            if not (index["records"] or index["skipped"]):
                continue  # an hour without captures: no index to write (reading one finds none), nothing to save
            s3.put_object(Bucket=results_bucket, Key=f"{index_prefix}{hour:{HOUR_FORMAT}}.json",
                          Body=json.dumps(index).encode())
            this_run["records_indexed"] += index["records"]
            this_run["records_skipped"] += index["skipped"]
            this_run["records_malformed"] += index["malformed"]
            checkpoint()
        hours_pending = sum(1 for hour in todo if hour.isoformat() not in indexed)

        # 2. Join every label file whose candidate capture hours are all indexed, through one map of predictions.
        predictions = PredictionMap(lambda hour: (_read_json(s3, results_bucket,
                                                             f"{index_prefix}{hour:{HOUR_FORMAT}}.json")
                                                  or {}).get("predictions", {}))
        label_files = [(hour, key) for hour, key in _label_files(s3, env["CAPTURE_BUCKET"], env["LABELS_PREFIX"],
                                                                 floor, _hour(now)) if key not in done]
        counts, label_budget = quality.Counts(), int(env["MAX_LABELS"])
        pending = waiting = since_checkpoint = 0
        unmatched_sample: list[tuple[str, datetime, datetime]] = []  # (key, window's first hour, upload hour)
        unjoined: Optional[datetime] = None  # the oldest upload hour of a label file left for a later run
        sampler = random.Random(now.isoformat())
        seen_unmatched = 0
        for upload_hour, key in label_files:
            first = max(upload_hour - timedelta(hours=lateness), floor, since)
            hours = []
            hour = upload_hour
            while hour >= first:
                hours.append(hour)
                hour -= timedelta(hours=1)
            missing = [h for h in hours if h.isoformat() not in indexed]
            # Left for a later run (below): no hour its labels may be for is released before it joins.
            later = upload_hour if unjoined is None else min(unjoined, upload_hour)
            if missing:
                # Waiting for an hour that is not due yet is the normal course; for one that is due, the index is
                # behind.
                if any(h < ready for h in missing):
                    pending += 1
                else:
                    waiting += 1
                unjoined = later
                continue
            if stopped or this_run["labelled"] + this_run["unmatched_labels"] >= label_budget:
                pending, unjoined = pending + 1, later
                continue
            if clock.out_of_time():
                stopped, pending, unjoined = "time", pending + 1, later
                continue
            predictions.release(first)
            for hour in hours:
                predictions.add(hour)
            join = quality.Join(settings)
            for line in _read_lines(s3, env["CAPTURE_BUCKET"], key):
                join.add_label_line(line)
            this_run["malformed_labels"] += join.malformed_labels
            for label_key, labels in join.labels.items():
                found = predictions.find(label_key, first, upload_hour) if hours else None
                if found is None:
                    this_run["unmatched_labels"] += 1
                    seen_unmatched += 1  # a reservoir sample of them, looked for in older hours below
                    if len(unmatched_sample) < LATE_SAMPLE:
                        unmatched_sample.append((label_key, first, upload_hour))
                    elif sampler.random() < LATE_SAMPLE / seen_unmatched:
                        unmatched_sample[sampler.randrange(LATE_SAMPLE)] = (label_key, first, upload_hour)
                    continue
                predicted_hour, predicted = found
                scores = quality.scores_of(settings, predicted, labels)
                if scores is None:
                    this_run["unusable_pairs"] += 1
                    continue
                delay = int((upload_hour - predicted_hour).total_seconds() // 3600)
                histogram = hour_delays.setdefault(predicted_hour.isoformat(), [0] * (lateness + 1))
                histogram[min(max(delay, 0), len(histogram) - 1)] += len(scores)
                # Held by the prediction's hour until that hour's labels are complete (release_lag), unless it was
                # released already: an hour judged on its early labels alone is biased when late labels differ.
                if released_through is not None and predicted_hour.isoformat() <= released_through:
                    target = counts
                else:
                    target = held.setdefault(predicted_hour.isoformat(), quality.Counts())
                for score, label in zip(scores, labels):
                    target.add(score, quality.class_of(settings, label))
                this_run["labelled"] += len(scores)
            done[key] = upload_hour.isoformat()
            this_run["label_objects_read"] += 1
            since_checkpoint += 1
            if since_checkpoint >= CHECKPOINT_FILES:
                monitor.add(counts, now)
                counts, since_checkpoint = quality.Counts(), 0
                checkpoint()

        # 3. Hours whose labels are complete go to the decision; a sample of the labels that joined nothing is looked
        # for in the hours before their window (too late to join: counted and alarmed, never silently unmatched).
        closed = (_hour(now) - timedelta(hours=lateness + INDEX_DELAY_HOURS + 1)).isoformat()
        folded = sorted(h for h in hour_delays if h <= closed and (unjoined is None or h < (
            unjoined - timedelta(hours=lateness)).isoformat()))  # no label of it can join any more
        if folded:
            delays = [count * DELAY_DECAY ** len(folded) for count in delays]  # recent hours weigh more
            for hour in folded:
                for delay, count in enumerate(hour_delays.pop(hour)):
                    delays[min(delay, lateness)] += count
        lag = release_lag(delays, lateness)
        # A label uploaded ``lag`` hours after its prediction joins once its upload hour is indexed (INDEX_DELAY_HOURS
        # after it ends): the hour is complete then, unless a label file that may hold its labels is still unjoined.
        complete = _hour(now) - timedelta(hours=lag + INDEX_DELAY_HOURS + 1)
        if unjoined is not None:
            complete = min(complete, unjoined - timedelta(hours=lag + 1))
        complete_through = complete.isoformat()
        for hour in sorted(h for h in held if h <= complete_through):
            counts.merge(held.pop(hour))
        if released_through is None or complete_through > released_through:
            released_through = complete_through
        monitor.add(counts, now)
        decision = monitor.step(now)
        checkpoint()
        if folded:  # after the state that no longer holds them: a conflict above folds nothing twice
            try:
                delay_store.save({"delays": delays})
            except Conflict:
                pass  # another run measured meanwhile: these hours' delays are not counted (never twice)
        predictions = None  # the join's map, before the look loads older hours
        late = _too_late(state, unmatched_sample, lambda hour: (_read_json(
            s3, results_bucket, f"{index_prefix}{hour:{HOUR_FORMAT}}.json") or {}).get("predictions", {}), clock,
            since=since, lateness=lateness, save=checkpoint)
        checkpoint()  # the next look's schedule
    except Conflict as conflict:
        return _stopped_by(conflict, env, now, version, saved_run, cloudwatch)
    quantiles = delay_quantiles(delays)
    summary = {"endpoint": env["ENDPOINT_NAME"], "at": now.isoformat(), "model_version": version,
               "metric": settings.metric, **this_run, "label_objects_pending": pending,
               "label_delay_hours": quantiles, "release_lag_hours": lag,
               "labels_held": sum(c.n for c in held.values()), "too_late": late,
               "label_objects_waiting": waiting, "capture_hours_pending": hours_pending, "stopped": stopped,
               "version_restarted": restarted, "labelled_per_batch": _labelled_per_batch(settings, decision, lateness),
               **decision}
    _publish(cloudwatch, env["METRIC_NAMESPACE"], env["ENDPOINT_NAME"], settings, summary, now)
    s3.put_object(Bucket=results_bucket, Key=f"{env['RESULTS_PREFIX']}{now:%Y/%m/%d/%H%M%S}.json",
                  Body=json.dumps(summary, indent=1, default=str).encode())
    last = decision["last"] or {}
    print(json.dumps({"status": decision["status"], "labelled": this_run["labelled"],
                      "batch": f"{decision['batch_labels']}/{decision['batch_target']}", "last": last.get("decision"),
                      "shortfall": last.get("shortfall"), "z": last.get("z"), "pending": pending,
                      "stopped": stopped}))
    return summary


def _too_late(state: dict, sample: list, load: Callable[[datetime], dict], clock: "_Clock", *, since: datetime,
              lateness: int, save: Callable[[], None]) -> Optional[dict]:
    """Every LATE_CHECK_RUNS runs: the sampled unmatched labels looked for among this version's predictions of the
    LATE_LOOKBACK_HOURS before the earliest hour they could join (upload hour - LATENESS_HOURS). One found there was
    predicted, and labelled after LATENESS_HOURS: too late to join (a label of the previous version's predictions, or
    one a floor cut off, is not). Only the sampled keys of each older hour are kept, one hour at a time, and the
    next look is scheduled (saved) before the first load, so a run that dies looking costs one run. ``{"sampled",
    "too_late", "share", "hours_late"}`` (the largest delay found), or None on a run that does not look."""
    state["late_check_in"] = state.get("late_check_in", 0) - 1
    if state["late_check_in"] > 0 or not sample or clock.out_of_time():
        return None
    state["late_check_in"] = LATE_CHECK_RUNS
    save()
    windows = {key: (max(since, upload - timedelta(hours=lateness + LATE_LOOKBACK_HOURS)),
                     upload - timedelta(hours=lateness + 1), upload) for key, _, upload in sample}
    hours = sorted({first + timedelta(hours=k) for first, last, _ in windows.values()
                    for k in range(int((last - first).total_seconds() // 3600) + 1)})[-2 * LATE_LOOKBACK_HOURS:]
    wanted = set(windows)
    older = PredictionMap(lambda hour: {k: v for k, v in load(hour).items() if k in wanted})
    for hour in hours:
        if clock.out_of_time():
            return None
        older.add(hour)
    late = []
    for key, (first, last, upload) in windows.items():
        entry = older.find(key, first, last) if first <= last else None
        if entry is not None:
            late.append((upload - entry[0]).total_seconds() / 3600)
    return {"sampled": len(sample), "too_late": len(late), "share": len(late) / len(sample),
            "hours_late": max(late, default=None)}


def _too_late_share(summary: dict) -> Optional[float]:
    """The share of this run's labels that came too late to join (estimated from the sample), or None."""
    late, total = summary.get("too_late"), summary["labelled"] + summary["unmatched_labels"]
    if not late or not total:
        return None
    return late["share"] * summary["unmatched_labels"] / total


def _stopped_by(conflict: Conflict, env: dict, now: datetime, version: str, saved_run: dict,
                cloudwatch: Any = None) -> dict:
    """Another run saved the state first: this run's unsaved work is left to the next run (whatever it joined and did
    not save is joined again there, once), and it publishes only the counts it saved."""
    if cloudwatch is not None and any(saved_run.values()):
        dimensions = [{"Name": "EndpointName", "Value": env["ENDPOINT_NAME"]}]
        cloudwatch.put_metric_data(Namespace=env["METRIC_NAMESPACE"], MetricData=[
            {"MetricName": name, "Dimensions": dimensions, "Value": float(saved_run[key]), "Unit": "Count",
             "Timestamp": now} for name, key in _COUNT_METRICS if key in saved_run])
    print(json.dumps({"status": "conflict", "state": str(conflict), "saved": saved_run}))
    return {"endpoint": env["ENDPOINT_NAME"], "at": now.isoformat(), "model_version": version, "status": "conflict",
            "conflict": str(conflict), **saved_run}


def _labelled_per_batch(settings: quality.Settings, decision: dict, lateness: int) -> Optional[float]:
    """The labelled predictions the longest batch (``max_batch_hours``) collects at the observed label rate: under
    ``min_labelled``, no batch can be judged (the join starves). Over the last closed batch; over the first batch only
    once labels have flowed for as long as they may take to come (LATENESS_HOURS, and the index's delay), counting
    the hours from then (else None: nothing published, as right after a deploy)."""
    rate, lag = decision["rate"], lateness + INDEX_DELAY_HOURS + 1
    if rate["measured_on"] == "previous batch":
        per_hour = rate["labels_per_hour"]
    elif rate["hours"] >= 2 * lag:
        per_hour = rate["labelled"] / (rate["hours"] - lag)
    else:
        return None
    return per_hour * settings.max_batch_hours


def _label_hour(prefix: str, key: str) -> Optional[datetime]:
    try:
        return datetime.strptime("/".join(key[len(prefix):].split("/")[:4]), HOUR_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


_COUNT_METRICS = (
    ("LabelledPredictions", "labelled"), ("UnmatchedLabels", "unmatched_labels"),
    ("LabelsMalformed", "malformed_labels"), ("RecordsMalformed", "records_malformed"),
    ("CaptureRecordsSkipped", "records_skipped"), ("LabelObjectsExpired", "label_objects_expired"))


def _publish(cloudwatch: Any, namespace: str, endpoint: str, settings: quality.Settings, summary: dict,
             now: datetime) -> None:
    dimensions = [{"Name": "EndpointName", "Value": endpoint}]

    def datum(name: str, value: float, unit: str = "None") -> dict:
        return {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": unit, "Timestamp": now}

    plan = summary["plan"]
    data = [datum(name, summary[key], "Count") for name, key in _COUNT_METRICS + (
        ("LabelObjectsPending", "label_objects_pending"), ("CaptureHoursPending", "capture_hours_pending"),
        ("BatchLabels", "batch_labels"), ("BatchTarget", "batch_target"))]
    data += [datum("DetectionDelayHours", summary["detection_delay_hours"]),
             datum("QualityBaseline", summary["reference"]["value"])]
    if summary["labelled_per_batch"] is not None:
        data.append(datum("LabelledPerBatch", summary["labelled_per_batch"], "Count"))
    if plan["detectable_drop"] is not None:
        data.append(datum("DetectableDrop", plan["detectable_drop"]))
    if summary["label_delay_hours"]["p95"] is not None:
        data.append(datum("LabelDelayP95Hours", summary["label_delay_hours"]["p95"]))
    late = _too_late_share(summary)
    if late is not None:  # only on a run that looked: the alarm keeps its state in between (missing data ignored)
        data.append(datum("LabelsTooLateShare", late))
    last = summary["last"]
    # QualityJudged: 0 only when a batch closed unjudged (a batch closes at max_batch_hours at the latest); 1 after a
    # recent judgement; nothing while a version's first batch fills (after a deploy or a promotion: not yet due).
    if last and last["decision"] == "not_judged":
        data.append(datum("QualityJudged", 0.0))
    elif summary["judged"]:
        data.append(datum("QualityJudged", 1.0))
    if summary["judged"] and last:
        data += [datum(settings.metric, last["value"]), datum("QualityShortfall", last["shortfall"]),
                 datum("SignificantShortfall", last["shortfall"] if last["decision"] == "alarm" else 0.0),
                 datum("ShortfallZ", max(-1e6, min(1e6, last["z"])))]
    elif last is None or summary["version_restarted"]:
        # Nothing judged for this version (or these settings) yet: the quality alarm (missing data ignored) must
        # not keep the previous version's alarm.
        data.append(datum("SignificantShortfall", 0.0))
    cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)


def handler(event: dict, context: Any, *, clients: Optional[Callable[[str], Any]] = None) -> dict:
    if clients is None:
        import boto3
        clients = boto3.client
    return run(dict(os.environ), clients("s3"), clients("cloudwatch"), datetime.now(timezone.utc), context)
