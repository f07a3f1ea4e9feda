"""The scheduled quality check against moto S3 and CloudWatch: every label joined once whenever it comes, by the hour of
its prediction; the batch judged when full; the state that makes a repeated run do nothing twice."""

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from moto import mock_aws

from ml_platform_constructs.runtime import quality_handler
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
        yield s3, cloudwatch


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
    # files uploaded in the last two hours wait for their own hour's index (two hours after it ends)
    assert (summary["labelled"], summary["label_objects_pending"], summary["unmatched_labels"]) == (8500, 3, 0)
    later = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=2))
    assert (later["labelled"], later["label_objects_pending"]) == (1500, 0)
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
    assert (waiting["labelled"], waiting["label_objects_pending"]) == (0, 1)
    later = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=3))
    assert (later["labelled"], later["label_objects_pending"]) == (10, 0)


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
    ids = [f"r{i}" for i in range(20_000)]
    captured(s3, hours_before(5), ids)
    labels(s3, hours_before(4), [(i, 1 if n % 100 >= 12 else 0) for n, i in enumerate(ids)])  # 0.88 against 0.92
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert summary["status"] == "alarm" and summary["last"]["shortfall"] == pytest.approx(4.0)
    assert summary["judged"] is True
    assert metric(cloudwatch, "SignificantShortfall") == [pytest.approx(4.0)]
    later = quality_handler.run(ENV, s3, cloudwatch, NOW + timedelta(hours=1))
    assert later["status"] == "filling" and later["last"]["decision"] == "alarm"
    assert metric(cloudwatch, "SignificantShortfall") == [pytest.approx(4.0)] * 2  # the alarm keeps its state
    stored = s3.list_objects_v2(Bucket="datasets", Prefix="quality/results/classifier/")["Contents"]
    assert any(json.loads(s3.get_object(Bucket="datasets", Key=o["Key"])["Body"].read())["status"] == "alarm"
               for o in stored)


def test_before_the_first_batch_nothing_is_judged_and_that_is_published(aws):
    s3, cloudwatch = aws
    summary = first_run(s3, cloudwatch)
    assert (summary["status"], summary["judged"]) == ("filling", False)
    assert metric(cloudwatch, "QualityJudged", "Minimum") == [0.0]
    assert metric(cloudwatch, "SignificantShortfall") == []
    # a drop lands mid-batch: the batch that holds it is judged about two batch lengths later
    assert metric(cloudwatch, "DetectionDelayHours")[0] == 2 * ENV_MAX_BATCH_HOURS


ENV_MAX_BATCH_HOURS = 168.0  # no labels yet: the plan is the longest batch


def test_the_capture_sample_bound_skips_records_and_counts_them(aws):
    s3, cloudwatch = aws
    first_run(s3, cloudwatch)
    for part in range(3):
        captured(s3, hours_before(5), [f"p{part}-{i}" for i in range(10)])
    summary = quality_handler.run({**ENV, "MAX_RECORDS": "15"}, s3, cloudwatch, NOW)
    assert (summary["records_indexed"], summary["records_skipped"]) == (20, 10)


def test_handler_reads_its_environment(aws, monkeypatch):
    s3, cloudwatch = aws
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert quality_handler.handler({}, None, clients=lambda name: {"s3": s3, "cloudwatch": cloudwatch}[name])[
        "endpoint"] == "classifier"
