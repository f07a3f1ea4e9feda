"""Feature watch: each numeric feature's spread against the baseline's, and the variance the baseline's principal
components explain on the window (runtime), and the alarms on them (construct)."""

import json
import random
from datetime import datetime, timezone
from statistics import NormalDist

import boto3
import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template
from moto import mock_aws

from ml_platform_constructs import DatasetBucket, FeatureWatch, MonitoredEndpoint, ValidationError
from ml_platform_constructs.runtime import drift, drift_handler

N = 2000
QUANTILES = [NormalDist().inv_cdf((i + 0.5) / N) for i in range(N)]


def shuffled(seed):
    values = list(QUANTILES)
    random.Random(seed).shuffle(values)
    return values


def correlated(x_scale=1.0):
    """x standard normal, y = x plus a little independent noise: one principal component carries ~99%."""
    noise = shuffled(1)
    return [{"x": x * x_scale, "y": x + 0.1 * e, "color": "red"} for x, e in zip(QUANTILES, noise)]


def capture_line(row):
    data = f"{row['x']},{row['y']},{row['color']}"
    return json.dumps({"captureData": {"endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                                                         "data": data, "encoding": "CSV"}}})


def watched(baseline, rows):
    window = drift.Window(baseline)
    for row in rows:
        window.add_record(capture_line(row))
    return window.feature_watch()


@pytest.fixture(scope="module")
def baseline():
    return drift.build_baseline(correlated(), ["x", "y", "color"])


def test_symmetric_eigen_decomposition():
    matrix = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 1.0]]
    values, vectors = drift.symmetric_eigen(matrix)
    assert values == sorted(values, reverse=True) and sum(values) == pytest.approx(8.0)
    for value, vector in zip(values, vectors):
        product = [sum(matrix[i][j] * vector[j] for j in range(3)) for i in range(3)]
        assert product == pytest.approx([value * v for v in vector], abs=1e-9)
        assert sum(v * v for v in vector) == pytest.approx(1.0)
    assert sum(a * b for a, b in zip(vectors[0], vectors[1])) == pytest.approx(0.0, abs=1e-9)


def test_baseline_keeps_spread_and_the_components_for_95_percent(baseline):
    assert baseline["version"] == 2
    assert baseline["features"]["x"]["std"] == pytest.approx(1.0, rel=0.01)
    pca = baseline["pca"]
    assert pca["features"] == ["x", "y"] and len(pca["components"]) == 1  # categorical color is left out
    assert pca["explained"] > 0.99 and pca["variance_target"] == 0.95


def test_a_window_like_training_is_calm(baseline):
    watch = watched(baseline, correlated()[::4])
    assert watch["std_ratio"]["x"] == pytest.approx(1.0, abs=0.05)
    assert abs(watch["explained_variance_drop"]) < 1


def test_a_feature_whose_spread_doubles_has_ratio_two(baseline):
    watch = watched(baseline, correlated(x_scale=2.0)[::4])
    assert watch["std_ratio"]["x"] == pytest.approx(2.0, rel=0.05)
    assert watch["std_ratio"]["y"] == pytest.approx(1.0, rel=0.05)


def test_features_that_stop_moving_together_drop_the_explained_share(baseline):
    """Same spreads as in training (ratios near 1, little PSI), but y no longer follows x: the baseline's component
    explains about half of the window's variance."""
    independent = [{"x": x, "y": y, "color": "red"} for x, y in zip(QUANTILES, shuffled(2))][::4]
    watch = watched(baseline, independent)
    assert watch["std_ratio"]["x"] == pytest.approx(1.0, abs=0.05) and watch["std_ratio"]["y"] == pytest.approx(1.0, abs=0.1)
    assert watch["explained_variance"] == pytest.approx(0.5, abs=0.1)
    assert watch["explained_variance_drop"] > 40


@pytest.mark.parametrize("value", ["inf", "-inf", "1e999"])
def test_an_infinite_input_is_a_missing_value_not_an_infinite_spread(baseline, value):
    """A caller can send anything: one infinite value made a feature's spread NaN, and CloudWatch refuses a NaN or
    infinite datum, so the whole window's drift metrics were lost."""
    window = drift.Window(baseline)
    rows = correlated()[::4]
    window.add_record(capture_line({**rows[0], "x": value}))
    for row in rows[1:]:
        window.add_record(capture_line(row))
    watch = window.feature_watch()
    assert watch["std_ratio"]["x"] == pytest.approx(1.0, abs=0.05)
    assert window.missing_values == 1 and sum(window.counts["x"]) == len(rows) - 1


def test_too_few_values_give_no_ratio_and_no_share(baseline):
    watch = watched(baseline, correlated()[:drift.MIN_SPREAD_VALUES - 1])
    assert (watch["std_ratio"], watch["explained_variance"], watch["explained_variance_drop"]) == ({}, None, None)


def test_a_baseline_of_version_1_still_works_without_the_watch(baseline):
    old = json.loads(json.dumps(baseline))
    del old["pca"]
    for spec in old["features"].values():
        spec.pop("mean", None)
        spec.pop("std", None)
    window = drift.Window(old)
    for row in correlated()[:100]:
        window.add_record(capture_line(row))
    assert window.scores() and window.feature_watch()["std_ratio"] == {}


def test_drift_check_publishes_the_feature_watch(monkeypatch, baseline):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    now = datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)
    env = {"CAPTURE_BUCKET": "capture", "CAPTURE_PREFIX": "capture/classifier/", "VARIANT_NAME": "AllTraffic",
           "BASELINE_BUCKET": "datasets", "BASELINE_KEY": "drift/baselines/classifier/baseline.json",
           "RESULTS_PREFIX": "drift/results/classifier/", "ENDPOINT_NAME": "classifier",
           "METRIC_NAMESPACE": "MLPlatform/Drift", "WINDOW_HOURS": "1", "MAX_RECORDS": "10000"}
    with mock_aws():
        s3, cloudwatch = boto3.client("s3"), boto3.client("cloudwatch")
        for bucket in ("capture", "datasets"):
            s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket="datasets", Key=env["BASELINE_KEY"], Body=json.dumps(baseline).encode())
        rows = correlated(x_scale=2.0)[::4]
        s3.put_object(Bucket="capture", Key="capture/classifier/AllTraffic/2026/11/29/20/a.jsonl",
                      Body="\n".join(capture_line(r) for r in rows).encode())
        summary = drift_handler.run(env, s3, cloudwatch, now)

        def values(name, feature=None):
            dimensions = [{"Name": "EndpointName", "Value": "classifier"}] + (
                [{"Name": "Feature", "Value": feature}] if feature else [])
            return [p["Maximum"] for p in cloudwatch.get_metric_statistics(
                Namespace="MLPlatform/Drift", MetricName=name, Dimensions=dimensions, StartTime=now.replace(hour=0),
                EndTime=now.replace(hour=23), Period=3600, Statistics=["Maximum"])["Datapoints"]]

        ratios = summary["feature_watch"]["std_ratio"]
        assert values("MaxStdRatio") == [pytest.approx(max(ratios.values()))]
        assert values("MinStdRatio") == [pytest.approx(min(ratios.values()))]
        assert values("StdRatio", "x") == [pytest.approx(ratios["x"])]
        assert values("ExplainedVarianceDrop") == [pytest.approx(summary["feature_watch"]["explained_variance_drop"])]


# --- the alarms -------------------------------------------------------------------------------------------------

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def endpoint_template(**props):
    stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
    datasets = DatasetBucket(stack, "D")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                      private_subnet_ids=["subnet-0123456789abcdef0"])
    MonitoredEndpoint(stack, "E", endpoint_name="e", image_uri=IMAGE, model_data_bucket=datasets.bucket,
                      model_data_key="models/m.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "T"),
                      baseline_bucket=datasets, vpc=vpc, **props)
    return Template.from_stack(stack)


@pytest.fixture(scope="module")
def custom():
    return endpoint_template(feature_watch=FeatureWatch(std_ratio_low=0.7, std_ratio_high=1.5, explained_variance_drop=3))


def test_spread_alarm_fires_when_a_ratio_leaves_its_band(custom):
    custom.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold", "TreatMissingData": "notBreaching",
        "Metrics": Match.array_with([
            Match.object_like({"Expression": "IF(highest > 1.5 OR lowest < 0.7, 1, 0)"}),
            Match.object_like({"Id": "highest", "MetricStat": Match.object_like({
                "Metric": Match.object_like({"MetricName": "MaxStdRatio", "Namespace": "MLPlatform/Drift"}),
                "Stat": "Maximum"})}),
            Match.object_like({"Id": "lowest", "MetricStat": Match.object_like({
                "Metric": Match.object_like({"MetricName": "MinStdRatio"}), "Stat": "Minimum"})})])})


def test_explained_variance_alarm_on_its_drop_in_points(custom):
    custom.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Drift", "MetricName": "ExplainedVarianceDrop", "Threshold": 3,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "AlarmActions": [{"Ref": Match.string_like_regexp("^T")}]})


def test_default_drop_is_five_points():
    endpoint_template().has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "ExplainedVarianceDrop", "Threshold": 5})


@pytest.mark.parametrize("watch,message", [
    (FeatureWatch(std_ratio_low=1.2), "feature_watch="),
    (FeatureWatch(explained_variance_drop=0), "feature_watch.explained_variance_drop=0"),
])
def test_a_band_that_is_not_a_band_is_refused(watch, message):
    with pytest.raises(ValidationError, match=message):
        endpoint_template(feature_watch=watch)

