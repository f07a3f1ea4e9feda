"""The scheduled drift check against moto S3 and CloudWatch."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from ml_platform_constructs.runtime.decisions import drift
from ml_platform_constructs.runtime.handlers import drift_handler

NOW = datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)
ENV = {"CAPTURE_BUCKET": "capture", "CAPTURE_PREFIX": "capture/classifier/", "VARIANT_NAME": "AllTraffic",
       "BASELINE_BUCKET": "datasets", "BASELINE_KEY": "drift/baselines/classifier/baseline.json",
       "RESULTS_PREFIX": "drift/results/classifier/", "ENDPOINT_NAME": "classifier",
       "METRIC_NAMESPACE": "MLPlatform/Drift", "WINDOW_HOURS": "2", "MAX_RECORDS": "1000"}


def line(age, color):
    return json.dumps({"captureData": {"endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                                                         "data": f"{age},{color}", "encoding": "CSV"}}})


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3, cloudwatch = boto3.client("s3"), boto3.client("cloudwatch")
        for bucket in ("capture", "datasets"):
            s3.create_bucket(Bucket=bucket)
        rows = [{"age": str(a % 100), "color": "red" if a % 2 else "blue"} for a in range(1000)]
        s3.put_object(Bucket="datasets", Key=ENV["BASELINE_KEY"],
                      Body=json.dumps(drift.build_baseline(rows, ["age", "color"], bins=5)).encode())
        yield s3, cloudwatch


def put_capture(s3, hour_path, name, lines):
    s3.put_object(Bucket="capture", Key=f"capture/classifier/AllTraffic/{hour_path}/{name}.jsonl",
                  Body="\n".join(lines).encode())


def metric_values(cloudwatch, name, feature=None):
    dimensions = [{"Name": "EndpointName", "Value": "classifier"}] + (
        [{"Name": "Feature", "Value": feature}] if feature else [])
    stats = cloudwatch.get_metric_statistics(Namespace="MLPlatform/Drift", MetricName=name, Dimensions=dimensions,
                                             StartTime=datetime(2026, 11, 29, tzinfo=timezone.utc),
                                             EndTime=datetime(2026, 11, 30, tzinfo=timezone.utc), Period=3600,
                                             Statistics=["Maximum"])
    return [p["Maximum"] for p in stats["Datapoints"]]


def test_capture_prefixes_cover_the_last_complete_hours():
    # At 21:30 the 21:00 hour is still being written: a 2-hour window reads 20:00 and 19:00.
    assert drift_handler.capture_prefixes("capture/classifier/", "AllTraffic", NOW, 2) == [
        "capture/classifier/AllTraffic/2026/11/29/20/", "capture/classifier/AllTraffic/2026/11/29/19/"]


def test_drifted_window_publishes_scores_and_counts_and_stores_the_result(aws):
    s3, cloudwatch = aws
    put_capture(s3, "2026/11/29/20", "a", [line(95, "green")] * 50 + ["garbage"])
    put_capture(s3, "2026/11/29/18", "old", [line(1, "red")] * 10)  # outside the 2-hour window
    put_capture(s3, "2026/11/29/21", "now", [line(1, "red")] * 10)  # the hour still being written
    summary = drift_handler.run(ENV, s3, cloudwatch, NOW)
    assert (summary["records_read"], summary["records_malformed"], summary["other_category_values"]) == (50, 1, 50)
    assert summary["scores"]["age"]["psi"] > 0.25 and summary["scores"]["color"]["kl"] > 0.3
    assert metric_values(cloudwatch, "MaxPSI") == [max(s["psi"] for s in summary["scores"].values())]
    assert metric_values(cloudwatch, "PSI", "age") == [summary["scores"]["age"]["psi"]]
    assert metric_values(cloudwatch, "RecordsMalformed") == [1.0]
    stored = s3.list_objects_v2(Bucket="datasets", Prefix="drift/results/classifier/")["Contents"]
    assert json.loads(s3.get_object(Bucket="datasets", Key=stored[0]["Key"])["Body"].read())["records_read"] == 50


def test_empty_window_publishes_counts_but_no_score(aws):
    s3, cloudwatch = aws
    summary = drift_handler.run(ENV, s3, cloudwatch, NOW)
    assert summary["records_read"] == 0 and summary["scores"] == {}
    assert metric_values(cloudwatch, "RecordsRead") == [0.0]
    assert metric_values(cloudwatch, "MaxPSI") == []


def test_sample_is_bounded_and_what_was_skipped_is_reported(aws):
    s3, cloudwatch = aws
    for i in range(10):
        put_capture(s3, "2026/11/29/20", f"f{i}", [line(i, "red")] * 300)
    summary = drift_handler.run({**ENV, "MAX_RECORDS": "1000"}, s3, cloudwatch, NOW)
    assert summary["objects_read"] == 4 and summary["objects_skipped"] == 6
    assert summary["records_read"] == 1200
    assert metric_values(cloudwatch, "ObjectsSkipped") == [6.0]


def test_the_feature_watch_says_every_run_whether_its_baseline_lets_it_judge_anything(aws):
    """A baseline built before the feature watch (version 2) left it silently inactive: its alarms saw missing data."""
    s3, cloudwatch = aws
    put_capture(s3, "2026/11/29/20", "a", [line(a % 100, "red") for a in range(200)])
    active = drift_handler.run(ENV, s3, cloudwatch, NOW)
    assert active["feature_watch_inactive"] is None and metric_values(cloudwatch, "FeatureWatchActive") == [1.0]
    old = json.loads(s3.get_object(Bucket="datasets", Key=ENV["BASELINE_KEY"])["Body"].read())
    old["version"] = 2
    s3.put_object(Bucket="datasets", Key=ENV["BASELINE_KEY"], Body=json.dumps(old).encode())
    stale = drift_handler.run(ENV, s3, cloudwatch, NOW.replace(hour=22))
    assert "version 2, built before the feature watch" in stale["feature_watch_inactive"]
    assert "./platform drift-baseline ENV ENDPOINT SAMPLE.csv" in stale["feature_watch_inactive"]
    assert sorted(metric_values(cloudwatch, "FeatureWatchActive")) == [0.0, 1.0]


def test_inputs_that_give_the_watch_nothing_to_see_say_so_without_an_alarm_a_rebuild_would_not_clear(aws):
    s3, cloudwatch = aws
    categorical = drift.build_baseline([{"age": str(a % 3), "color": "red" if a % 2 else "blue"} for a in range(300)],
                                       ["age", "color"])
    assert categorical["version"] == 3
    s3.put_object(Bucket="datasets", Key=ENV["BASELINE_KEY"], Body=json.dumps(categorical).encode())
    put_capture(s3, "2026/11/29/20", "a", [line(a % 3, "red") for a in range(200)])
    summary = drift_handler.run(ENV, s3, cloudwatch, NOW)
    assert "no numeric feature with 20 or more distinct training values" in summary["feature_watch_inactive"]
    assert metric_values(cloudwatch, "FeatureWatchActive") == []


def test_a_busy_endpoint_is_judged_on_its_newest_hour_and_a_quiet_one_pools_its_window(aws):
    """Newest hour first, until MAX_RECORDS: a busy hour fills the window and older hours are not even listed; a
    quiet endpoint pools every hour of WINDOW_HOURS, so the decision sees enough values to resolve its threshold."""
    s3, cloudwatch = aws
    for hour in ("18", "19", "20"):
        for part in range(3):
            put_capture(s3, f"2026/11/29/{hour}", f"{hour}-{part}", [line(int(hour), "red")] * 200)
    busy = drift_handler.run({**ENV, "WINDOW_HOURS": "3", "MAX_RECORDS": "500"}, s3, cloudwatch, NOW)
    assert (busy["hours_read"], busy["records_read"], busy["objects_read"]) == (1, 600, 3)
    assert busy["objects_found"] == 3 and busy["objects_skipped"] == 0
    quiet = drift_handler.run({**ENV, "WINDOW_HOURS": "3", "MAX_RECORDS": "10000"}, s3, cloudwatch, NOW)
    assert (quiet["hours_read"], quiet["records_read"], quiet["objects_found"]) == (3, 1800, 9)


def test_the_alarmed_metric_is_the_decision(aws):
    """PSILowerBound (what the drift alarm reads) reaches the threshold exactly when a feature drifted; the raw PSI of
    a small window does not decide."""
    s3, cloudwatch = aws
    put_capture(s3, "2026/11/29/20", "a", [line(95, "green")] * 500)
    drifted = drift_handler.run(ENV, s3, cloudwatch, NOW)
    assert drifted["alarm"] and metric_values(cloudwatch, "PSILowerBound") == [drifted["psi_lower_bound"]]
    assert drifted["psi_lower_bound"] >= float(drifted["thresholds"]["psi"])
    assert drifted["false_alarms_per_90_days"] == 0.25 and drifted["schedule_minutes"] == 60
