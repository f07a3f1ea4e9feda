"""The joins of the quality check's label alarms (issue 42): the quality check (runtime/handlers/quality_handler.py) runs on the
variables of its synthesized function, on label streams with a known outcome (a backlog, unreadable labels, a
starving join, late labels, a batch closed unjudged, a run stopped by an overlapping one), and each of
EndpointQuality's label alarms must read exactly what the check published (namespace, name, dimension set; a
metric-math alarm each of its metrics) and breach on that outcome, never on the healthy stream beside it.

No metric name is written here: names come from what the code published and what the template holds."""

from __future__ import annotations

import json
from datetime import timedelta

from bench.cloudwatch_alarms import COMPARISONS
from tests.unit.test_metric_joins import (NOW, QUALITY_BUCKETS, Recording, breaches, built, handler_environment,  # noqa: F401
                                          logical_id, metric_key, metric_math, published_to, read_by, s3)
from tests.unit.test_quality import label, record

from ml_platform_constructs.runtime.handlers import quality_handler


def hour_before(n: int):
    return (NOW - timedelta(hours=n)).replace(minute=0, second=0, microsecond=0)


class Check:
    """The quality check of the synthesized endpoint on emptied moto S3: its variables (``overrides`` on top, where a
    stream needs a smaller limit), the label delays earlier runs measured (an hour), and a deploy's first run."""

    def __init__(self, template, s3, *, deployed_hours_ago: int = 48, **overrides):
        self.s3 = s3
        for bucket in QUALITY_BUCKETS.values():
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    s3.delete_object(Bucket=bucket, Key=obj["Key"])
        self.env = {**handler_environment(template, "quality_handler.handler", QUALITY_BUCKETS), **overrides}
        s3.put_object(Bucket=self.env["RESULTS_BUCKET"], Key=f"{self.env['STATE_PREFIX']}delays.json",
                      Body=json.dumps({"delays": [0, 1000]}).encode())
        self.run(NOW - timedelta(hours=deployed_hours_ago))

    def put(self, prefix: str, hour, name: str, lines: list[str]) -> None:
        self.s3.put_object(Bucket=self.env["CAPTURE_BUCKET"], Key=f"{prefix}{hour:%Y/%m/%d/%H}/{name}.jsonl",
                           Body="\n".join(lines).encode())

    def captured(self, hour, ids: list[str]) -> None:
        self.put(f"{self.env['CAPTURE_PREFIX']}{self.env['VARIANT_NAME']}/", hour, f"capture-{ids[0]}",
                 [record("1", inference_id=i) for i in ids])

    def labelled(self, hour, ids: list[str], *, extra: tuple[str, ...] = ()) -> None:
        self.put(self.env["LABELS_PREFIX"], hour, f"labels-{ids[0]}", [label(i, 1) for i in ids] + list(extra))

    def run(self, now, s3=None) -> tuple[dict, Recording]:
        recording = Recording()
        return quality_handler.run(self.env, s3 or self.s3, recording, now), recording


def alarm_props(template, alarm) -> dict:
    return template.find_resources("AWS::CloudWatch::Alarm")[logical_id(alarm)]["Properties"]


def math_value(props: dict, recording: Recording):
    """A metric-math alarm's value from what was published: each MetricStat's id bound to its metric's published
    value (None when nothing was), the returned expression evaluated on them (``metric_math``)."""
    values = {}
    for metric in props["Metrics"]:
        if "MetricStat" in metric:
            stat = metric["MetricStat"]["Metric"]
            key = metric_key(stat["Namespace"], stat["MetricName"], stat.get("Dimensions", []))
            published = recording.values(key, metric["MetricStat"].get("Unit"))
            values[metric["Id"]] = sum(published) if published else None
    (expression,) = [m["Expression"] for m in props["Metrics"] if m.get("ReturnData", True) and "Expression" in m]
    if any(value is None for value in values.values()):
        return None  # arithmetic on a missing datapoint: none
    return metric_math(expression, values)


def test_a_batch_closed_unjudged_breaches_the_not_judged_alarm(built, s3):
    """quality_handler's QualityJudged -> EndpointQuality's not-judged alarm: 20 labelled predictions (150 needed)
    when the batch closes publish the value the alarm reads, and it breaches (a judged batch's value does not: in
    test_metric_joins)."""
    template, monitored = built
    check = Check(template, s3, LATENESS_HOURS="1")  # 20 labels: complete an hour after they came
    ids = [f"few{i}" for i in range(20)]
    check.captured(hour_before(45), ids)
    check.labelled(hour_before(44), ids)
    summary, recording = check.run(NOW - timedelta(hours=36))
    assert summary["last"]["decision"] == "not_judged", summary["last"]
    alarm = logical_id(monitored.quality.not_judged_alarm)
    (value,) = published_to(template, alarm, recording)
    assert breaches(template, alarm, value)


def test_the_backlog_alarm_reads_the_label_files_a_run_held_back_and_breaches_only_then(built, s3):
    """quality_handler's LabelObjectsPending -> the labels-backlog alarm: a run whose label limit holds a file back
    publishes what the alarm reads, breaching; the same stream within the limit publishes a value that does not."""
    template, monitored = built
    alarm = logical_id(monitored.quality.labels_backlog_alarm)
    outcomes = {}
    for limit in ("100", None):
        check = Check(template, s3, **({"MAX_LABELS": limit} if limit else {}))
        for h in (5, 6):
            ids = [f"b{limit}-{h}-{i}" for i in range(100)]
            check.captured(hour_before(h), ids)
            check.labelled(hour_before(h - 1), ids)
        summary, recording = check.run(NOW)
        (value,) = published_to(template, alarm, recording)
        outcomes[limit] = summary["label_objects_pending"], breaches(template, alarm, value)
    assert outcomes == {"100": (1, True), None: (0, False)}


def test_the_labels_lost_alarm_reads_unreadable_and_expired_labels_and_breaches_only_then(built, s3):
    """quality_handler's LabelsMalformed and LabelObjectsExpired -> the labels-lost alarm (metric math over both):
    every metric of its expression is one the check published, and its value breaches with one unreadable label
    line, and with a label file that waited past the two-day horizon (held back by the label limit), not without."""
    template, monitored = built
    props = alarm_props(template, monitored.quality.labels_lost_alarm)

    def lost(recording):
        value = math_value(props, recording)
        assert value is not None, read_by(props)
        return COMPARISONS[props["ComparisonOperator"]](value, props["Threshold"])

    outcomes = {}
    for broken in (True, False):
        check = Check(template, s3)
        ids = [f"l{broken}-{i}" for i in range(50)]
        check.captured(hour_before(5), ids)
        check.labelled(hour_before(4), ids, extra=("not a label",) if broken else ())
        summary, recording = check.run(NOW)
        outcomes[broken] = summary["malformed_labels"], lost(recording)
    check = Check(template, s3, MAX_LABELS="0")  # every label file waits, until it leaves the horizon
    ids = [f"e{i}" for i in range(20)]
    check.captured(hour_before(6), ids)
    check.labelled(hour_before(5), ids)
    waiting, recording = check.run(NOW)
    outcomes["waiting"] = waiting["label_objects_expired"], lost(recording)
    expired, recording = check.run(NOW + timedelta(hours=80))
    outcomes["expired"] = expired["label_objects_expired"], lost(recording)
    assert outcomes == {True: (1, True), False: (0, False), "waiting": (0, False), "expired": (1, True)}


def test_the_starved_alarm_reads_the_labelled_predictions_per_batch_and_breaches_only_when_starving(built, s3):
    """quality_handler's LabelledPerBatch -> the labels-starved alarm: a label an hour (a 2-hour batch holds a few, 150
    needed) breaches it, 100 an hour does not."""
    template, monitored = built
    alarm = logical_id(monitored.quality.labels_starved_alarm)
    outcomes = {}
    for per_hour in (1, 100):
        # Labels join 5 hours after a version goes live at most; the labels flow from the deploy on.
        check = Check(template, s3, deployed_hours_ago=12, LATENESS_HOURS="2")
        for h in range(1, 12):
            ids = [f"s{per_hour}-{h}-{i}" for i in range(per_hour)]
            check.captured(hour_before(h), ids)
            check.labelled(hour_before(h - 1), ids)
        for back in (6, 2, 1):  # hourly runs: the rate is measured on the previous batch
            check.run(NOW - timedelta(hours=back))
        summary, recording = check.run(NOW)
        (value,) = published_to(template, alarm, recording)
        outcomes[per_hour] = breaches(template, alarm, value)
    assert outcomes == {1: True, 100: False}


def test_the_too_late_alarm_reads_the_late_labels_share_and_breaches_only_on_late_labels(built, s3):
    """quality_handler's LabelsTooLateShare -> the labels-too-late alarm: labels 30 hours after their predictions
    (label_lateness_hours 24) breach it; labels of predictions never captured (unmatched, not late) publish a share
    that does not; and 10 late labels among 390 on time (2.5% of the run's labels, under the alarm's 5%) do not,
    though every unmatched label of the sample was late."""
    template, monitored = built
    alarm = logical_id(monitored.quality.labels_too_late_alarm)
    outcomes = {}
    for stream, (late, on_time, ghosts) in {"late": (300, 0, 0), "never captured": (0, 0, 300),
                                            "a few late": (10, 390, 0)}.items():
        check = Check(template, s3)
        late_ids, on_time_ids = [f"t-{i}" for i in range(late)], [f"o-{i}" for i in range(on_time)]
        if late_ids:
            check.captured(hour_before(40), late_ids)
        if on_time_ids:
            check.captured(hour_before(11), on_time_ids)
        check.labelled(hour_before(10), late_ids + on_time_ids + [f"g-{i}" for i in range(ghosts)])
        summary, recording = check.run(NOW)
        assert summary["unmatched_labels"] == late + ghosts and summary["too_late"] is not None, summary
        (value,) = published_to(template, alarm, recording)
        outcomes[stream] = breaches(template, alarm, value)
    assert outcomes == {"late": True, "never captured": False, "a few late": False}


class ConflictOnSave:
    """An S3 client on which another run saves the state between this run's save number ``at`` - 1 and ``at`` (412)."""

    def __init__(self, s3, at: int):
        self.s3, self.at, self.saves = s3, at, 0

    def __getattr__(self, name):
        return getattr(self.s3, name)

    def put_object(self, **kwargs):
        if kwargs["Key"].endswith("monitor.json"):
            self.saves += 1
            if self.saves == self.at:
                from botocore.exceptions import ClientError
                raise ClientError({"Error": {"Code": "PreconditionFailed"},
                                   "ResponseMetadata": {"HTTPStatusCode": 412}}, "PutObject")
        return self.s3.put_object(**kwargs)


def test_a_run_stopped_by_an_overlapping_one_publishes_what_it_saved_where_the_alarms_read(built, s3):
    """quality_handler's conflict path (_stopped_by) publishes the counts its saved state holds, under the same
    namespace, names and dimensions as a whole run's counts, with their values: stopped after it saved its joins
    (an unreadable label among them), its labels-lost alarm breaches; stopped before, it publishes nothing."""
    template, monitored = built
    lost = alarm_props(template, monitored.quality.labels_lost_alarm)
    published = {}
    for at in (1, 3):  # the state's saves: the index's, the judgement's, the look for late labels'
        check = Check(template, s3)
        ids = [f"c{at}-{i}" for i in range(50)]
        check.captured(hour_before(5), ids)
        check.labelled(hour_before(4), ids, extra=("not a label",))
        stopped, recording = check.run(NOW, ConflictOnSave(s3, at))
        assert stopped["status"] == "conflict", stopped
        published[at] = stopped, recording
    assert published[1][1].data == []  # nothing saved: nothing published (the next run joins it all)
    stopped, recording = published[3]
    assert stopped["malformed_labels"] == 1 and stopped["labelled"] == 50
    _, whole = check.run(NOW)  # the next run, whole: its counts are tied to the alarms elsewhere
    assert {key for key, _ in recording.data} <= {key for key, _ in whole.data}
    assert set(read_by(lost)) <= {key for key, _ in recording.data}
    value = math_value(lost, recording)
    assert value == stopped["malformed_labels"] + stopped["label_objects_expired"]
    assert COMPARISONS[lost["ComparisonOperator"]](value, lost["Threshold"])
