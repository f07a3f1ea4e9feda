"""The scheduled quality check against moto S3 and CloudWatch: every label joined once whenever it comes, by the hour of
its prediction; the batch judged when full; the state that makes a repeated run do nothing twice."""

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from moto import mock_aws

from ml_platform_constructs.runtime.handlers import quality_handler
from tests.unit.test_quality import label, record

NOW = datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)
ENV = {"CAPTURE_BUCKET": "capture", "CAPTURE_PREFIX": "capture/classifier/", "VARIANT_NAME": "AllTraffic",
       "LABELS_PREFIX": "ground-truth/classifier/", "RESULTS_BUCKET": "datasets",
       "RESULTS_PREFIX": "quality/results/classifier/", "STATE_PREFIX": "quality/state/classifier/",
       "ENDPOINT_NAME": "classifier", "METRIC_NAMESPACE": "MLPlatform/Quality", "LATENESS_HOURS": "24",
       "MAX_RECORDS": "10000", "MAX_LABELS": "100000", "PROBLEM_TYPE": "binary", "BASELINE": "0.92",
       "BASELINE_EXAMPLES": "10000", "PREDICTION_PATH": "", "MIN_LABELLED": "200", "MAX_DROP": "1.5",
       "REFERENCE_LABELS": "0", "MODEL_VERSION": "v1"}


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3, cloudwatch = boto3.client("s3"), boto3.client("cloudwatch")
        for bucket in ("capture", "datasets"):
            s3.create_bucket(Bucket=bucket)
        measured_delays(s3, [0, 1000])
        yield s3, cloudwatch


def measured_delays(s3, histogram):
    """The endpoint's label delays as earlier runs measured them (labels by whole hours late): most tests' endpoint
    has its labels an hour after their predictions, so an hour is complete 4 hours after it ends."""
    s3.put_object(Bucket="datasets", Key="quality/state/classifier/delays.json",
                  Body=json.dumps({"delays": histogram}).encode())


def put(s3, prefix, hour, name, lines):
    s3.put_object(Bucket="capture", Key=f"{prefix}{hour:%Y/%m/%d/%H}/{name}.jsonl", Body="\n".join(lines).encode())


def captured(s3, hour, ids, prediction="1"):
    put(s3, "capture/classifier/AllTraffic/", hour, f"capture-{ids[0]}", [record(prediction, inference_id=i) for i in ids])


def labels(s3, hour, pairs):
    put(s3, "ground-truth/classifier/", hour, f"labels-{pairs[0][0]}", [label(k, v) for k, v in pairs])


def metric(cloudwatch, name, statistic="Maximum"):
    stats = cloudwatch.get_metric_statistics(
        Namespace="MLPlatform/Quality", MetricName=name, Dimensions=[{"Name": "EndpointName", "Value": "classifier"}],
        StartTime=NOW - timedelta(days=10), EndTime=NOW + timedelta(days=10), Period=3600, Statistics=[statistic])
    return [p[statistic] for p in sorted(stats["Datapoints"], key=lambda p: p["Timestamp"])]


def hours_before(n):
    return (NOW - timedelta(hours=n)).replace(minute=0, second=0, microsecond=0)


def first_run(s3, cloudwatch, env=ENV):
    """The first run after a deploy: it learns the model version from here on, two days before NOW."""
    return quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=48))


def test_labels_join_by_the_hour_of_their_prediction_and_none_is_dropped(aws):
    """1,000 predictions an hour, labels 1-24 h late: every label of a judged prediction joins (the read budget of
    0.4.0 joined 428 of 1,000 and dropped the slow-to-label ones)."""
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    for h in range(3, 13):
        ids = [f"h{h}-{i}" for i in range(1000)]
        captured(s3, hours_before(h), ids)
        for lateness in (1, 2):  # half labelled an hour later, half two hours later
            labels(s3, hours_before(h - lateness), [(i, 1) for i in ids[(lateness - 1) * 500:lateness * 500]])
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    # files uploaded in the last two hours wait for their own hour's index (two hours after it ends): the normal
    # course, not a backlog
    assert (summary["labelled"], summary["label_objects_waiting"], summary["unmatched_labels"]) == (8500, 3, 0)
    assert summary["label_objects_pending"] == 0
    later = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=2))
    assert (later["labelled"], later["label_objects_waiting"], later["label_objects_pending"]) == (1500, 0, 0)
    assert metric(cloudwatch, "LabelledPredictions", "Sum")[-2:] == [8500, 1500]


def test_a_repeated_run_joins_nothing_twice(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"r{i}" for i in range(300)]
    captured(s3, hours_before(5), ids)
    labels(s3, hours_before(4), [(i, 1) for i in ids])
    assert quality_handler.run(ENV, s3, cloudwatch, NOW)["labelled"] == 300
    again = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert again["labelled"] == 0 and again["batch_labels"] == 300


def test_a_label_waits_until_its_prediction_hour_is_indexed(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"r{i}" for i in range(10)]
    captured(s3, hours_before(0), ids)  # predictions of this hour: indexed two hours after it ends
    labels(s3, hours_before(0), [(i, 1) for i in ids])
    waiting = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert (waiting["labelled"], waiting["label_objects_waiting"], waiting["label_objects_pending"]) == (0, 1, 0)
    later = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=3))
    assert (later["labelled"], later["label_objects_waiting"]) == (10, 0)


def test_labels_beyond_the_run_limit_wait_and_are_counted(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    for h in (5, 6):
        ids = [f"h{h}-{i}" for i in range(100)]
        captured(s3, hours_before(h), ids)
        labels(s3, hours_before(h - 1), [(i, 1) for i in ids])
    summary = quality_handler.run({**ENV, "MAX_LABELS": "100"}, s3, cloudwatch, NOW)
    assert (summary["labelled"], summary["label_objects_pending"]) == (100, 1)
    assert metric(cloudwatch, "LabelObjectsPending") == [0.0, 1.0]
    assert quality_handler.run({**ENV, "MAX_LABELS": "100"}, s3, cloudwatch, NOW)["labelled"] == 100


def test_a_label_file_that_waits_past_the_horizon_is_counted_as_lost_not_silently_dropped(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"late{i}" for i in range(20)]
    captured(s3, hours_before(6), ids)
    labels(s3, hours_before(5), [(i, 1) for i in ids])
    starved = {**ENV, "MAX_LABELS": "0"}
    assert quality_handler.run(starved, s3, cloudwatch, NOW)["label_objects_pending"] == 1
    gone = quality_handler.run(starved, s3, cloudwatch, NOW + timedelta(hours=80))
    assert (gone["label_objects_expired"], gone["label_objects_pending"]) == (1, 0)
    assert metric(cloudwatch, "LabelObjectsExpired", "Sum")[-1] == 1
    assert quality_handler.run(starved, s3, cloudwatch, NOW + timedelta(hours=81))["label_objects_expired"] == 0


def test_predictions_of_the_previous_model_version_are_not_judged(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    old = [f"old{i}" for i in range(50)]
    captured(s3, hours_before(10), old)
    new_env = {**ENV, "MODEL_VERSION": "v2"}
    quality_handler.run(new_env, s3, cloudwatch, NOW - timedelta(hours=8))  # v2 seen from 8 hours ago
    labels(s3, hours_before(7), [(i, 0) for i in old])
    fresh = [f"new{i}" for i in range(40)]
    captured(s3, hours_before(6), fresh)
    labels(s3, hours_before(5), [(i, 1) for i in fresh])
    summary = quality_handler.run(new_env, s3, cloudwatch, NOW)
    assert summary["labelled"] == 40  # the old version's hours are not indexed: its labels are unmatched
    assert summary["unmatched_labels"] == 50


def test_a_full_batch_with_a_drop_alarms_and_the_alarm_state_is_republished(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"r{i}" for i in range(12_000)]
    captured(s3, hours_before(5), ids)
    labels(s3, hours_before(4), [(i, 1 if n % 100 >= 12 else 0) for n, i in enumerate(ids)])  # 0.88 against 0.92
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert summary["status"] == "alarm" and summary["last"]["shortfall"] == pytest.approx(4.0)
    assert summary["judged"] is True
    assert metric(cloudwatch, "SignificantShortfall") == [0.0, pytest.approx(4.0)]  # the deploy's run: 0
    later = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=1))
    assert later["status"] == "filling" and later["last"]["decision"] == "alarm"
    assert metric(cloudwatch, "SignificantShortfall")[1:] == [pytest.approx(4.0)] * 2  # the alarm keeps its state
    stored = s3.list_objects_v2(Bucket="datasets", Prefix="quality/results/classifier/")["Contents"]
    assert any(json.loads(s3.get_object(Bucket="datasets", Key=o["Key"])["Body"].read())["status"] == "alarm"
               for o in stored)


def test_before_the_first_batch_nothing_is_judged_and_nothing_alarms(aws):
    """A deploy is not a failure to judge: QualityJudged is not published while the first batch fills (0.5.0 published
    0, and the not-judged alarm fired after every deploy and promotion); the quality alarm reads 0."""
    s3, cloudwatch = aws
    summary = first_run(s3, cloudwatch)
    assert (summary["status"], summary["judged"]) == ("filling", False)
    assert metric(cloudwatch, "QualityJudged", "Minimum") == []
    assert metric(cloudwatch, "SignificantShortfall") == [0.0]
    # a drop lands mid-batch: the batch that holds it is judged about two batch lengths later
    assert metric(cloudwatch, "DetectionDelayHours")[0] == 2 * ENV_MAX_BATCH_HOURS


ENV_MAX_BATCH_HOURS = 168.0  # no labels yet: the plan is the longest batch


def test_the_capture_sample_bound_skips_records_and_counts_them(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    for part in range(3):
        captured(s3, hours_before(5), [f"p{part}-{i}" for i in range(10)])
    reads = []

    class Counting:  # the capture files the check downloads
        def __getattr__(self, name):
            return getattr(s3, name)

        def get_object(self, **kwargs):
            reads.append(kwargs["Key"])
            return s3.get_object(**kwargs)

    summary = quality_handler.run({**ENV, "MAX_RECORDS": "15"}, Counting(), cloudwatch, NOW)
    assert (summary["records_indexed"], summary["records_skipped"]) == (20, 10)
    # past the sample no capture file is downloaded: an hour of any size costs the sample's reads, not the hour's
    assert len([key for key in reads if "/capture/" in key or key.endswith(".jsonl")]) == 2, reads


def test_handler_reads_its_environment(aws, monkeypatch):
    s3, cloudwatch = aws
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert quality_handler.handler({}, None, clients=lambda name: {"s3": s3, "cloudwatch": cloudwatch}[name])[
        "endpoint"] == "classifier"


def state_of(s3, version="v1"):
    return json.loads(s3.get_object(Bucket="datasets", Key=f"quality/state/classifier/state/{version}/monitor.json")[
        "Body"].read())


# --- the label backlog: only what is held back or overdue is pending (review finding 4) -----------------------------

def test_a_healthy_stream_waits_for_its_indexes_without_a_backlog(aws):
    """Labels 1-2 h late every hour: each run has files waiting the ~3 h for their hours' index (0.5.0 counted them
    as pending, so LabelObjectsPending >= 1 in every run and the backlog alarm, 6 runs, fired in normal operation)."""
    s3, cloudwatch = aws
    quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=12))
    for h in range(2, 12):
        ids = [f"h{h}-{i}" for i in range(20)]
        captured(s3, hours_before(h), ids)
        labels(s3, hours_before(h - 1), [(i, 1) for i in ids])
    runs = [quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=back)) for back in range(6, -1, -1)]
    assert metric(cloudwatch, "LabelObjectsPending", "Minimum")[-7:] == [0.0] * 7
    assert all(r["label_objects_waiting"] > 0 for r in runs)
    assert sum(r["labelled"] for r in runs) == 20 * 8  # captures of hours 11..4: their labels' hours are indexed


def test_label_files_whose_hours_are_due_but_not_indexed_are_pending(aws):
    """The index falls behind (each capture hour fills a run's indexing budget): label files whose hours are due
    wait, and that is a backlog."""
    s3, cloudwatch = aws
    env = {**ENV, "MAX_RECORDS": "5"}  # a run indexes 15 records: three hours of 5
    quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=12))
    for h in range(3, 12):
        ids = [f"h{h}-{i}" for i in range(5)]
        captured(s3, hours_before(h), ids)
        labels(s3, hours_before(h), [(i, 1) for i in ids])
    summary = quality_handler.run(env, s3, cloudwatch, NOW)
    assert summary["capture_hours_pending"] == 6
    assert summary["label_objects_pending"] == 6 and summary["labelled"] == 15


# --- not judged only when a batch closes unjudged (finding 5) --------------------------------------------------------

def test_not_judged_is_published_when_a_batch_closes_without_enough_labels_only(aws):
    s3, cloudwatch = aws
    env = {**ENV, "MAX_BATCH_HOURS": "6", "LATENESS_HOURS": "1"}  # 20 labels: complete after LATENESS_HOURS
    first_run(s3, cloudwatch, env)
    ids = [f"few{i}" for i in range(20)]
    captured(s3, hours_before(45), ids)
    labels(s3, hours_before(44), [(i, 1) for i in ids])
    filling = quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=44))
    assert filling["status"] == "filling" and metric(cloudwatch, "QualityJudged", "Minimum") == []
    closed = quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=40))
    assert closed["status"] == "not_judged" and "20 labelled predictions in 9 h, needs 200" in closed["last"]["reason"]
    assert metric(cloudwatch, "QualityJudged", "Minimum") == [0.0]
    quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=39))  # the next batch fills: still not judged
    assert metric(cloudwatch, "QualityJudged", "Minimum") == [0.0, 0.0]


def test_a_judged_batch_publishes_judged(aws):
    s3, cloudwatch = aws
    env = {**ENV, "MAX_BATCH_HOURS": "2"}  # the batch closes by its hours
    first_run(s3, cloudwatch, env)
    ids = [f"j{i}" for i in range(300)]
    captured(s3, hours_before(5), ids)
    labels(s3, hours_before(4), [(i, 1 if n % 100 >= 8 else 0) for n, i in enumerate(ids)])  # 0.92: healthy
    assert quality_handler.run(env, s3, cloudwatch, NOW)["status"] == "ok"
    assert metric(cloudwatch, "QualityJudged", "Minimum") == [1.0]


# --- a version change: the alarm is released, each version keeps its evidence (finding 6) ---------------------------

def test_a_new_version_releases_the_quality_alarm_and_a_rollback_resumes_the_old_versions_evidence(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"bad{i}" for i in range(300)]
    captured(s3, hours_before(40), ids)
    labels(s3, hours_before(39), [(i, 0) for i in ids])  # every prediction wrong: the interim look alarms
    assert quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=30))["status"] == "alarm"
    assert metric(cloudwatch, "SignificantShortfall")[-1] == pytest.approx(92.0)
    promoted = quality_handler.run({**ENV, "MODEL_VERSION": "v2"}, s3, cloudwatch, NOW - timedelta(hours=20))
    # 0.5.0 published nothing here, and the alarm (missing data ignored) stayed in ALARM for the new version
    assert metric(cloudwatch, "SignificantShortfall")[-1] == 0.0
    assert promoted["version_restarted"] and promoted["last"] is None
    assert quality_handler.run({**ENV, "MODEL_VERSION": "v2"}, s3, cloudwatch, NOW - timedelta(hours=19))[
        "version_restarted"] is False
    rolled_back = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert rolled_back["version_restarted"] and rolled_back["last"]["decision"] == "alarm"
    assert rolled_back["judged"] is True  # its judgement aged only while v1 was live
    assert metric(cloudwatch, "SignificantShortfall")[-1] == pytest.approx(92.0)
    assert state_of(s3, "v1")["monitor"]["last"]["shortfall"] == pytest.approx(92.0)
    assert state_of(s3, "v2")["monitor"]["last"] is None


# --- settings changes (finding 7) ----------------------------------------------------------------------------------

def test_a_new_prediction_path_indexes_afresh_instead_of_joining_predictions_read_the_old_way(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    first, second = [f"a{i}" for i in range(300)], [f"b{i}" for i in range(300)]
    captured(s3, hours_before(8), first + second, prediction="1,0")  # column 0 says 1, column 1 says 0
    labels(s3, hours_before(7), [(i, 1) for i in first])
    assert quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=4))["labelled"] == 300
    labels(s3, hours_before(3), [(i, 1) for i in second])
    moved = quality_handler.run({**ENV, "PREDICTION_PATH": "1"}, s3, cloudwatch, NOW)
    # read by column 1, every prediction of the second labels is wrong: 0.5.0 joined them with column 0's from the
    # index it had built, and saw a perfect model
    assert moved["labelled"] == 300 and moved["status"] == "alarm" and moved["last"]["value"] == 0.0


def test_a_longer_label_lateness_never_lists_label_files_below_the_previous_horizon(aws):
    s3, cloudwatch = aws
    quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=100))
    ids = [f"old{i}" for i in range(300)]
    captured(s3, hours_before(90), ids)
    labels(s3, hours_before(89), [(i, 1) for i in ids])
    assert quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=80))["labelled"] == 300
    assert quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=10))["label_objects_expired"] == 0
    longer = quality_handler.run({**ENV, "LATENESS_HOURS": "48"}, s3, cloudwatch, NOW)
    # 0.5.0 listed from the new, earlier horizon, re-indexed the hours and joined the 300 labels a second time
    assert (longer["labelled"], longer["label_objects_expired"]) == (0, 0)
    assert sum(metric(cloudwatch, "LabelledPredictions", "Sum")) == 300


# --- at volume: one map, saved as it goes, stopped before the timeout (finding 8) --------------------------------

class Context:
    """A Lambda context whose time runs out after ``checks`` looks at it."""

    def __init__(self, checks):
        self.checks = checks

    def get_remaining_time_in_millis(self):
        self.checks -= 1
        return 240_000 if self.checks >= 0 else 50_000


def test_a_run_stops_saved_before_its_timeout_and_the_next_goes_on(aws):
    s3, cloudwatch = aws
    quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=12))
    for h in range(6, 11):
        ids = [f"h{h}-{i}" for i in range(50)]
        captured(s3, hours_before(h), ids)
        labels(s3, hours_before(h - 1), [(i, 1) for i in ids])
    context = Context(9 + 2)  # the 9 capture hours due, then 2 label files
    short = quality_handler.run(ENV, s3, cloudwatch, NOW, context)
    assert (short["stopped"], short["labelled"], short["label_objects_pending"]) == ("time", 100, 3)
    assert joined(state_of(s3)) == 100  # saved (held by prediction hour until its labels are complete)
    rest = quality_handler.run(ENV, s3, cloudwatch, NOW, Context(100))
    assert (rest["stopped"], rest["labelled"], rest["label_objects_pending"]) == (None, 150, 0)
    assert joined(state_of(s3)) == 250


def joined(state):
    """The labelled outcomes a saved state holds: in the batch, and held until their prediction hour is complete."""
    batch = state["monitor"]["batch"]
    return (batch["counts"]["n"] if batch else 0) + sum(c["n"] for c in state.get("held", {}).values())


def test_the_handler_gives_the_run_its_context(aws, monkeypatch):
    s3, cloudwatch = aws
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    times = iter([NOW - timedelta(hours=6), NOW])

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):
            return next(times)
    monkeypatch.setattr(quality_handler, "datetime", Clock)
    clients = {"s3": s3, "cloudwatch": cloudwatch}.__getitem__
    quality_handler.handler({}, Context(100), clients=clients)
    assert quality_handler.handler({}, Context(0), clients=clients)["stopped"] == "time"


def test_one_map_per_run_holds_only_the_hours_later_label_files_can_reach(aws, monkeypatch):
    s3, cloudwatch = aws
    env = {**ENV, "LATENESS_HOURS": "3"}
    quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=30))
    for h in range(4, 28):
        ids = [f"h{h}-{i}" for i in range(10)]
        captured(s3, hours_before(h), ids)
        labels(s3, hours_before(h - 1), [(i, 1) for i in ids])
    maps, held = [], []
    original = quality_handler.PredictionMap.add

    def add(self, hour):
        original(self, hour)
        maps.append(self) if self not in maps else None
        held.append(len(self.keys_of))
    monkeypatch.setattr(quality_handler.PredictionMap, "add", add)
    summary = quality_handler.run(env, s3, cloudwatch, NOW)
    assert summary["labelled"] == 10 * 24
    assert len(maps) == 1 and maps[0].loads == 27  # each capture hour of the version read once in the run
    assert max(held) <= 4  # the lateness's 3 hours and the upload hour


# --- overlapping runs (finding 13) ---------------------------------------------------------------------------------

class Overlapped:
    """An S3 client on which another run completes right after this run has read its state."""

    def __init__(self, s3, other):
        self.s3, self.other = s3, other

    def __getattr__(self, name):
        return getattr(self.s3, name)

    def get_object(self, **kwargs):
        response = self.s3.get_object(**kwargs)
        if self.other and kwargs["Key"].endswith("monitor.json"):
            other, self.other = self.other, None
            other()
        return response


def test_two_overlapping_runs_count_each_label_once(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"o{i}" for i in range(300)]
    captured(s3, hours_before(5), ids)
    labels(s3, hours_before(4), [(i, 1) for i in ids])
    results = {}
    overlapped = Overlapped(s3, lambda: results.setdefault("other", quality_handler.run(ENV, s3, cloudwatch, NOW)))
    late = quality_handler.run(ENV, overlapped, cloudwatch, NOW)
    assert results["other"]["labelled"] == 300
    assert late["status"] == "conflict" and late["labelled"] == 0
    # 0.5.0 wrote over the other run's state and both published 300
    assert sum(metric(cloudwatch, "LabelledPredictions", "Sum")) == 300
    assert state_of(s3)["monitor"]["batch"]["counts"]["n"] == 300


def test_a_state_write_conflict_is_told_apart_from_other_errors():
    class Refusing:
        class exceptions:
            from botocore.exceptions import ClientError
            NoSuchKey = KeyError

        def __init__(self, status):
            self.status = status

        def get_object(self, **kwargs):
            raise KeyError(kwargs["Key"])

        def put_object(self, **kwargs):
            assert kwargs["IfNoneMatch"] == "*"  # nothing was read: only a first write may succeed
            raise self.exceptions.ClientError({"Error": {"Code": "x"}, "ResponseMetadata": {
                "HTTPStatusCode": self.status}}, "PutObject")

    for status in (409, 412):
        with pytest.raises(quality_handler.Conflict):
            quality_handler._Stored(Refusing(status), "b", "k").save({})
    with pytest.raises(Exception, match="PutObject"):
        quality_handler._Stored(Refusing(403), "b", "k").save({})


# --- the join starves (issue 28, item 9) ---------------------------------------------------------------------------

def stream(s3, cloudwatch, per_hour):
    env = {**ENV, "LATENESS_HOURS": "2"}  # labels join 5 hours after a version goes live at most
    quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=12))
    for h in range(1, 12):
        ids = [f"s{h}-{i}" for i in range(per_hour)]
        captured(s3, hours_before(h), ids)
        labels(s3, hours_before(h - 1), [(i, 1) for i in ids])
    return [quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=back))["labelled_per_batch"]
            for back in (6, 2, 1, 0)]


def test_a_starving_join_publishes_fewer_labelled_predictions_per_batch_than_the_check_needs(aws):
    s3, cloudwatch = aws
    early, *late = stream(s3, cloudwatch, per_hour=1)
    assert early is None  # the rate is not known before labels had time to come: nothing published after a deploy
    assert late[-1] == pytest.approx(168.0)  # 1 an hour over the longest batch, under min_labelled (200)
    assert all(v < 200 for v in metric(cloudwatch, "LabelledPerBatch", "Minimum")[-3:])
    assert len(metric(cloudwatch, "LabelledPerBatch", "Minimum")) == 3


def test_a_healthy_join_publishes_enough_labelled_predictions_per_batch(aws):
    s3, cloudwatch = aws
    stream(s3, cloudwatch, per_hour=5)
    values = metric(cloudwatch, "LabelledPerBatch", "Minimum")
    assert len(values) == 3 and all(v >= 200 for v in values)


# --- labels that come late (issue 36 item 5) ----------------------------------------------------------------------

def test_the_measured_delays_say_when_an_hour_is_complete():
    assert quality_handler.release_lag([0, 1000], 24) == 1
    assert quality_handler.release_lag([0, 100], 24) == 24  # too few measured: every label that can still join
    assert quality_handler.release_lag([0, 920, 0, 0, 0, 0, 80], 24) == 6  # the wrong ones come 6 hours later
    assert quality_handler.delay_quantiles([0, 920, 0, 0, 0, 0, 80]) == {"p50": 1, "p95": 6, "p99": 6, "max": 6}
    assert quality_handler.delay_quantiles([0, 0]) == {"p50": None, "p95": None, "p99": None, "max": None}


def test_an_hour_is_judged_only_once_its_labels_are_complete_even_when_wrong_ones_come_later(aws):
    """Right labels an hour after their prediction, wrong ones six hours after: judged as they came, the first
    hours looked perfect (0.6 measured 0.971 against a true 0.913 and made it the reference). Held until complete, by
    the lateness until the endpoint's delays are measured, every hour the decision sees is whole: 92 of 100."""
    s3, cloudwatch = aws
    s3.delete_object(Bucket="datasets", Key="quality/state/classifier/delays.json")
    env = {**ENV, "LATENESS_HOURS": "8"}
    start = NOW - timedelta(hours=40)
    quality_handler.run(env, s3, cloudwatch, start)
    seen = []
    for h in range(1, 40):
        hour = (start + timedelta(hours=h)).replace(minute=0)
        if h <= 26:
            ids = [f"p{h}-{i}" for i in range(100)]
            captured(s3, hour, ids)
            labels(s3, hour + timedelta(hours=1), [(i, 1) for i in ids[:92]])
            put(s3, "ground-truth/classifier/", hour + timedelta(hours=6), f"late-{h}",
                [label(i, 0) for i in ids[92:]])  # predicted 1, truly 0: wrong, and labelled late
        summary = quality_handler.run(env, s3, cloudwatch, start + timedelta(hours=h))
        batch = state_of(s3)["monitor"]["batch"]
        if batch and batch["counts"]["n"]:
            seen.append((batch["counts"]["n"], batch["counts"]["total"]))
    assert seen and all(total == 0.08 * n for n, total in seen)  # whole hours only: 8 wrong in every 100
    assert summary["release_lag_hours"] == 6 and summary["label_delay_hours"]["p99"] == 6


def test_labels_that_come_after_the_lateness_are_found_counted_and_alarmed(aws):
    """Labels 30 hours after their predictions with label_lateness_hours 24: 0.6 joined none, counted none as lost
    and alarmed on nothing. A sample of the unmatched labels is looked for in the hours before their window."""
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"slow{i}" for i in range(300)]
    captured(s3, hours_before(40), ids)
    labels(s3, hours_before(10), [(i, 1) for i in ids])
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert (summary["labelled"], summary["unmatched_labels"]) == (0, 300)
    assert summary["too_late"] == {"sampled": 200, "too_late": 200, "share": 1.0, "hours_late": 30.0}
    assert metric(cloudwatch, "LabelsTooLateShare") == [1.0]
    quiet = [quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=h))["too_late"] for h in range(1, 6)]
    assert quiet == [None] * 5  # it looks every 6 runs
    never = [f"ghost{i}" for i in range(50)]  # labels of predictions that were never captured are not "late"
    labels(s3, hours_before(-3), [(i, 1) for i in never])
    again = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=6))
    assert again["unmatched_labels"] == 50 and again["too_late"] == {"sampled": 50, "too_late": 0, "share": 0.0,
                                                                      "hours_late": None}


def test_outcomes_held_when_a_version_stops_serving_are_released_when_it_serves_again(aws):
    """Held until their hour is complete, a version's outcomes must survive a promotion and a rollback to it."""
    s3, cloudwatch = aws
    measured_delays(s3, [0, 0, 0, 0, 0, 1000])  # labels 5 hours late: an hour is complete 9 hours after it ends
    first_run(s3, cloudwatch)
    ids = [f"held{i}" for i in range(300)]
    captured(s3, hours_before(44), ids)
    labels(s3, hours_before(43), [(i, 1) for i in ids])
    joined_now = quality_handler.run(ENV, s3, cloudwatch, NOW - timedelta(hours=40))  # hour 44 not complete yet
    assert joined_now["labelled"] == 300 and joined_now["labels_held"] == 300
    quality_handler.run({**ENV, "MODEL_VERSION": "v2"}, s3, cloudwatch, NOW - timedelta(hours=39))
    back = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert back["version_restarted"] and back["labels_held"] == 0
    assert joined(state_of(s3, "v1")) == 300  # in the batch now, not lost


def test_labels_of_the_previous_versions_predictions_are_not_counted_as_late(aws):
    """After a promotion, labels of the old version's predictions join nothing by design: they are not "too late"
    (counting them made the too-late alarm fire after every promotion)."""
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"old{i}" for i in range(100)]
    captured(s3, hours_before(30), ids)
    quality_handler.run({**ENV, "MODEL_VERSION": "v2"}, s3, cloudwatch, NOW - timedelta(hours=20))
    labels(s3, hours_before(10), [(i, 1) for i in ids])  # 20 hours late: within the lateness, for v1
    summary = quality_handler.run({**ENV, "MODEL_VERSION": "v2"}, s3, cloudwatch, NOW)
    assert summary["unmatched_labels"] == 100 and summary["too_late"]["too_late"] == 0


def test_an_hour_is_not_released_while_a_label_file_that_may_hold_its_labels_waits(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    ids = [f"w{i}" for i in range(200)]
    captured(s3, hours_before(10), ids)
    labels(s3, hours_before(9), [(i, 1) for i in ids[:100]])
    put(s3, "ground-truth/classifier/", hours_before(9), "labels-second", [label(i, 0) for i in ids[100:]])
    env = {**ENV, "MAX_LABELS": "100"}  # the second file waits for the next run
    held = quality_handler.run(env, s3, cloudwatch, NOW)
    assert (held["labelled"], held["label_objects_pending"], held["labels_held"]) == (100, 1, 100)
    released = quality_handler.run(env, s3, cloudwatch, NOW + timedelta(hours=1))
    assert (released["labelled"], released["labels_held"]) == (100, 0)
    last = state_of(s3)["monitor"]["last"]  # the hour judged whole, its wrong labels with its right ones
    assert (released["status"], last["labelled"], last["value"]) == ("alarm", 200, 0.5)


def test_an_operator_acknowledges_a_standing_deployment_verdict_and_the_alarm_returns_to_ok(aws):
    """A version the deployment check found worse stays in alarm until another goes live; an operator who keeps it
    acknowledges the verdict (recorded), the quality alarm's metric returns to 0, and batches go on."""
    from ops import quality as quality_command
    from stacks import config as platform_config

    s3, cloudwatch = aws
    env, alarm = dev_classifier_found_worse(s3, cloudwatch, 219 / 250)  # 87.6% right
    assert alarm["status"] == "alarm" and alarm["last"]["check"] == "deployment"
    config = platform_config.load()
    lines = []
    assert quality_command.acknowledge(config.environments["dev"], "classifier", s3=s3, bucket="datasets",
                                       reason="known: seasonal", caller="arn:aws:iam::111111111111:user/ops",
                                       out=lines.append) == 0
    assert lines[0].startswith("ml-platform-dev-classifier: acknowledged the deployment check's verdict")
    after = quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=29))
    assert after["deployment"]["decision"] == "acknowledged" and after["status"] != "alarm"
    # from now on judged against the level it was kept at (recorded), not the held-out score it is known to miss
    assert after["reference"] == {"value": 0.876, "examples": 1000, "source": "acknowledged", "spread": None}
    points = cloudwatch.get_metric_statistics(
        Namespace="MLPlatform/Quality", MetricName="SignificantShortfall", Statistics=["Maximum"], Period=3600,
        Dimensions=[{"Name": "EndpointName", "Value": "ml-platform-dev-classifier"}],
        StartTime=NOW - timedelta(days=3), EndTime=NOW)["Datapoints"]
    assert [p["Maximum"] for p in sorted(points, key=lambda p: p["Timestamp"])][-2:] == [pytest.approx(4.4), 0.0]
    again = []
    quality_command.acknowledge(config.environments["dev"], "classifier", s3=s3, bucket="datasets", reason="x",
                                caller="me", out=again.append)
    assert "nothing to acknowledge" in again[0]


def test_an_acknowledgement_releases_the_alarm_even_when_the_latest_batch_alarmed_too(aws):
    from ops import quality as quality_command
    from stacks import config as platform_config

    s3, cloudwatch = aws
    env, alarm = dev_classifier_found_worse(s3, cloudwatch, 0.7)  # the latest batch alarms too
    assert alarm["last"]["standing"] and alarm["last"]["latest_batch"]["decision"] == "alarm"
    quality_command.acknowledge(platform_config.load().environments["dev"], "classifier", s3=s3, bucket="datasets",
                                reason="kept", caller="me", out=[].append)
    after = quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=29))
    assert after["status"] != "alarm" and after["last"] is None and after["reference"]["value"] == 0.7


def dev_classifier_found_worse(s3, cloudwatch, right):
    """dev's classifier (as config names it, for ./platform quality acknowledge), live two days, its first 1,000
    labels right on a share ``right`` of them: the check's settings and the run that judged them."""
    env = {**ENV, "ENDPOINT_NAME": "ml-platform-dev-classifier", "STATE_PREFIX":
           "quality/state/ml-platform-dev-classifier/", "REFERENCE_LABELS": "10000", "BASELINE_EXAMPLES": "5000"}
    s3.copy_object(Bucket="datasets", Key="quality/state/ml-platform-dev-classifier/delays.json",
                   CopySource={"Bucket": "datasets", "Key": "quality/state/classifier/delays.json"})
    quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=48))
    ids = [f"worse{i}" for i in range(1000)]
    captured(s3, hours_before(40), ids)
    labels(s3, hours_before(39), [(i, 1 if k < right * 1000 else 0) for k, i in enumerate(ids)])
    return env, quality_handler.run(env, s3, cloudwatch, NOW - timedelta(hours=30))
