"""The scheduled quality check against moto S3 and CloudWatch: which hours it reads, late labels, the sample floor."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from ml_platform_constructs.runtime import quality_handler
from tests.unit.test_quality import label, record

NOW = datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)
ENV = {"CAPTURE_BUCKET": "capture", "CAPTURE_PREFIX": "capture/classifier/", "VARIANT_NAME": "AllTraffic",
       "LABELS_PREFIX": "ground-truth/classifier/", "RESULTS_BUCKET": "datasets",
       "RESULTS_PREFIX": "quality/results/classifier/", "ENDPOINT_NAME": "classifier",
       "METRIC_NAMESPACE": "MLPlatform/Quality", "WINDOW_HOURS": "1", "LATENESS_HOURS": "24", "MAX_RECORDS": "10000",
       "PROBLEM_TYPE": "binary", "BASELINE": "0.92", "PREDICTION_PATH": "", "MIN_LABELLED": "200", "MAX_DROP": "1.5"}


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3, cloudwatch = boto3.client("s3"), boto3.client("cloudwatch")
        for bucket in ("capture", "datasets"):
            s3.create_bucket(Bucket=bucket)
        yield s3, cloudwatch


def put(s3, prefix, hour, name, lines):
    s3.put_object(Bucket="capture", Key=f"{prefix}{hour}/{name}.jsonl", Body="\n".join(lines).encode())


def captured(s3, hour, ids, prediction="1"):
    put(s3, "capture/classifier/AllTraffic/", hour, f"capture-{ids[0]}", [record(prediction, inference_id=i) for i in ids])


def labels(s3, hour, pairs):
    put(s3, "ground-truth/classifier/", hour, f"labels-{pairs[0][0]}", [label(k, v) for k, v in pairs])


def metric(cloudwatch, name):
    stats = cloudwatch.get_metric_statistics(
        Namespace="MLPlatform/Quality", MetricName=name, Dimensions=[{"Name": "EndpointName", "Value": "classifier"}],
        StartTime=datetime(2026, 11, 29, tzinfo=timezone.utc), EndTime=datetime(2026, 11, 30, tzinfo=timezone.utc),
        Period=3600, Statistics=["Maximum"])
    return [p["Maximum"] for p in stats["Datapoints"]]


def test_the_judged_window_ended_the_lateness_ago_and_labels_are_read_until_now():
    first, last, labels_last = quality_handler.windows(ENV, NOW)
    assert (first, last, labels_last) == (datetime(2026, 11, 28, 20, tzinfo=timezone.utc),
                                          datetime(2026, 11, 28, 20, tzinfo=timezone.utc),
                                          datetime(2026, 11, 29, 21, tzinfo=timezone.utc))


def test_late_labels_join_and_a_drop_alarms(aws):
    s3, cloudwatch = aws
    ids = [f"r{i}" for i in range(250)]
    captured(s3, "2026/11/28/20", ids)  # the judged window: 24 hours old
    captured(s3, "2026/11/28/21", ["next-window"])  # judged by the next run
    captured(s3, "2026/11/28/19", ["previous-window"])
    labels(s3, "2026/11/28/20", [(i, 1) for i in ids[:30]])  # labelled within the hour
    labels(s3, "2026/11/29/09", [(i, 1) for i in ids[30:170]] + [(i, 0) for i in ids[170:220]])  # 13 hours late
    labels(s3, "2026/11/29/21", [("next-window", 1), ("unknown", 1)])  # uploaded this hour
    labels(s3, "2026/11/28/19", [("previous-window", 1)])  # before the window: not read
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert (summary["labelled"], summary["matched"], summary["value"]) == (220, 220, pytest.approx(170 / 220))
    assert (summary["unmatched_predictions"], summary["unmatched_labels"]) == (30, 2)
    assert (summary["decision"], summary["shortfall"]) == ("alarm", pytest.approx((0.92 - 170 / 220) * 100))
    assert summary["p_value"] < 1e-9  # 50 wrong of 220 where a 0.92 model gets 18 wrong
    assert metric(cloudwatch, "Accuracy") == [pytest.approx(170 / 220)]
    assert metric(cloudwatch, "LabelledPredictions") == [220.0]
    assert metric(cloudwatch, "QualityShortfall") == [pytest.approx(summary["shortfall"])]
    assert metric(cloudwatch, "SignificantShortfall") == [pytest.approx(summary["shortfall"])]
    stored = s3.list_objects_v2(Bucket="datasets", Prefix="quality/results/classifier/")["Contents"]
    assert json.loads(s3.get_object(Bucket="datasets", Key=stored[0]["Key"])["Body"].read())["decision"] == "alarm"


def test_under_the_sample_floor_the_alarm_sees_no_shortfall(aws):
    s3, cloudwatch = aws
    ids = [f"r{i}" for i in range(150)]
    captured(s3, "2026/11/28/20", ids)
    labels(s3, "2026/11/29/02", [(i, 0) for i in ids])  # every prediction wrong, but only 150 labels
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert (summary["decision"], summary["value"]) == ("too_few_labels", 0.0)
    assert metric(cloudwatch, "Accuracy") == [0.0] and metric(cloudwatch, "LabelledPredictions") == [150.0]
    assert metric(cloudwatch, "QualityShortfall") == [] and metric(cloudwatch, "SignificantShortfall") == []


def test_a_shortfall_that_may_be_noise_publishes_no_significant_shortfall(aws):
    s3, cloudwatch = aws
    ids = [f"r{i}" for i in range(200)]
    captured(s3, "2026/11/28/20", ids)
    # 0.905 on 200 labels: 1.5 points under 0.92, as a model exactly as good as its baseline scores in 1 window of 4
    labels(s3, "2026/11/29/04", [(i, 1) for i in ids[:181]] + [(i, 0) for i in ids[181:]])
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert (summary["decision"], summary["shortfall"]) == ("not_significant", 1.5)
    assert metric(cloudwatch, "QualityShortfall") == [1.5]
    assert metric(cloudwatch, "SignificantShortfall") == [0.0]  # what the quality alarm watches: it stays OK
    assert metric(cloudwatch, "ShortfallPValue") == [pytest.approx(0.2506, abs=1e-4)]


def test_a_healthy_window_publishes_a_shortfall_under_the_threshold(aws):
    s3, cloudwatch = aws
    ids = [f"r{i}" for i in range(300)]
    captured(s3, "2026/11/28/20", ids)
    labels(s3, "2026/11/29/03", [(i, 1) for i in ids[:280]] + [(i, 0) for i in ids[280:]])
    summary = quality_handler.run(ENV, s3, cloudwatch, NOW)
    assert summary["decision"] == "ok" and metric(cloudwatch, "QualityShortfall") == [pytest.approx(-1.333333, abs=1e-5)]


def test_the_sample_bound_skips_whole_capture_files(aws):
    s3, cloudwatch = aws
    for part in range(3):
        captured(s3, "2026/11/28/20", [f"p{part}-{i}" for i in range(10)])
    summary = quality_handler.run({**ENV, "MAX_RECORDS": "15"}, s3, cloudwatch, NOW)
    assert (summary["records_read"], summary["capture_objects_skipped"]) == (20, 1)


def test_handler_reads_its_environment(aws, monkeypatch):
    s3, _ = aws
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    captured(s3, "2026/11/28/20", ["r0"])
    assert quality_handler.handler({}, None)["endpoint"] == "classifier"
