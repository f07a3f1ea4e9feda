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
from ml_platform_constructs.runtime.decisions import drift
from ml_platform_constructs.runtime.handlers import drift_handler

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


def test_the_baseline_keeps_fewer_components_than_features_and_measures_its_share_on_held_back_rows(baseline):
    assert baseline["version"] == 3
    pca = baseline["pca"]
    assert pca["features"] == ["x", "y"] and len(pca["components"]) == 1  # categorical color is left out; k < d
    assert pca["explained"] > 0.99 and pca["held_back_rows"] == 600 and pca["variance_target"] == 0.8
    assert set(pca["explained_noise"]) >= {"50", "100", "300"}
    assert baseline["features"]["x"]["q75"] - baseline["features"]["x"]["q25"] == pytest.approx(1.349, abs=0.01)


def test_with_as_many_components_as_features_the_share_would_be_1_whatever_happens():
    """Five weakly correlated features: 0.4.0 kept all five components, so the share was identically 1 and a broken
    join moved nothing. Now at most four are kept."""
    rng = random.Random(5)
    names = [f"f{i}" for i in range(5)]
    rows = [{n: rng.gauss(0, 1) for n in names} for _ in range(3000)]
    weak = drift.build_baseline(rows, names)
    assert len(weak["pca"]["components"]) == 4 and weak["pca"]["explained"] < 0.9
    window = drift.Window(weak)
    for _ in range(500):
        row = {n: rng.gauss(0, 1) for n in names}
        row["f1"] = row["f0"]  # the join broke: f1 is a copy of f0
        window.add_row(row)
    decision = drift.decide(window)
    assert decision["feature_watch_alarm"] and list(decision["feature_watch"]["correlation_changes"]) == ["f0~f1"]
    assert not decision["alarm"]  # each feature's own distribution is unchanged: no drift, no retraining


def test_a_window_like_training_is_calm(baseline):
    decision = drift.decide(watched_window(baseline, correlated()[::4]))
    watch = decision["feature_watch"]
    assert watch["spread_ratio"]["x"] == pytest.approx(1.0, abs=0.05) and not any(watch["spread_significant"].values())
    assert abs(watch["explained_variance_drop"]) < 1 and not decision["feature_watch_alarm"]


def watched_window(baseline, rows):
    window = drift.Window(baseline)
    for row in rows:
        window.add_record(capture_line(row))
    return window


def test_a_feature_whose_spread_grows_leaves_its_band_significantly(baseline):
    decision = drift.decide(watched_window(baseline, correlated(x_scale=2.5)[::4]))
    watch = decision["feature_watch"]
    assert watch["spread_ratio"]["x"] == pytest.approx(2.5, rel=0.05) and watch["spread_significant"]["x"]
    assert decision["spread_out_of_band"] == ["x"] and decision["feature_watch_alarm"]


def test_features_that_stop_moving_together_change_the_relations(baseline):
    """Same spreads as in training, but y no longer follows x: the baseline's component explains about half."""
    independent = [{"x": x, "y": y, "color": "red"} for x, y in zip(QUANTILES, shuffled(2))][::4]
    decision = drift.decide(watched_window(baseline, independent))
    watch = decision["feature_watch"]
    assert watch["explained_variance"] == pytest.approx(0.5, abs=0.1) and watch["explained_variance_drop"] > 40
    assert decision["relations_changed"] and decision["explained_variance_shift"] > 40


def test_skewed_features_without_drift_rarely_leave_their_band():
    """A log-normal feature's standard deviation from 30 values left a 0.5-2.0 band in 78% of windows in 0.4.0; the
    interquartile range, judged against the noise of that many values, alarms in at most 1%."""
    rng = random.Random(11)
    training = [{"s": rng.lognormvariate(0, 1.2)} for _ in range(5000)]
    skewed = drift.build_baseline(training, ["s"])
    alarms = 0
    for _ in range(300):
        window = drift.Window(skewed)
        for _ in range(60):
            window.add_row({"s": rng.lognormvariate(0, 1.2)})
        alarms += bool(drift.decide(window)["spread_out_of_band"])
    assert alarms <= 6


@pytest.mark.parametrize("value", ["inf", "-inf", "1e999", "nan"])
def test_a_non_finite_input_is_a_missing_value_not_an_infinite_spread(baseline, value):
    window = drift.Window(baseline)
    rows = correlated()[::4]
    window.add_record(capture_line({**rows[0], "x": value}))
    for row in rows[1:]:
        window.add_record(capture_line(row))
    watch = window.feature_watch()
    assert watch["spread_ratio"]["x"] == pytest.approx(1.0, abs=0.05)
    assert window.missing_values == 1 and sum(window.counts["x"]) == len(rows) - 1


def test_too_few_values_are_not_judged_and_say_why(baseline):
    watch = drift.Window(baseline).feature_watch()
    window = watched_window(baseline, correlated()[:20])
    watch = window.feature_watch()
    assert watch["spread_ratio"] == {} and watch["spread_not_judged"]["x"] == "20 values, needs 50"
    assert (watch["explained_variance"], watch["pca_inactive"]) == (None, "20 complete rows, needs 300")


def test_an_older_baseline_still_scores_drift_and_asks_to_be_rebuilt_for_the_watch(baseline):
    old = json.loads(json.dumps(baseline))
    old["version"] = 2
    for spec in old["features"].values():
        for key in ("q25", "q75", "iqr_log_sd"):
            spec.pop(key, None)
    window = watched_window(old, correlated()[:200])
    assert window.scores()["x"]["judged"]
    watch = window.feature_watch()
    assert watch["spread_not_judged"]["x"].endswith("rebuild it") and watch["pca_inactive"].endswith("rebuild it")


def test_one_numeric_feature_leaves_the_relations_watch_inactive():
    single = drift.build_baseline([{"x": v} for v in QUANTILES], ["x"])
    assert single["pca"] is None and single["pca_inactive"] == "fewer than 2 numeric features that vary"
    assert drift.Window(single).feature_watch()["pca_inactive"] == "fewer than 2 numeric features that vary"


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
        rows = correlated(x_scale=2.5)[::4]
        s3.put_object(Bucket="capture", Key="capture/classifier/AllTraffic/2026/11/29/20/a.jsonl",
                      Body="\n".join(capture_line(r) for r in rows).encode())
        summary = drift_handler.run(env, s3, cloudwatch, now)

        def values(name, feature=None):
            dimensions = [{"Name": "EndpointName", "Value": "classifier"}] + (
                [{"Name": "Feature", "Value": feature}] if feature else [])
            return [p["Maximum"] for p in cloudwatch.get_metric_statistics(
                Namespace="MLPlatform/Drift", MetricName=name, Dimensions=dimensions, StartTime=now.replace(hour=0),
                EndTime=now.replace(hour=23), Period=3600, Statistics=["Maximum"])["Datapoints"]]

        ratios = summary["feature_watch"]["spread_ratio"]
        assert values("MaxSpreadRatio") == [pytest.approx(max(ratios.values()))]
        assert values("MinSpreadRatio") == [pytest.approx(min(ratios.values()))]
        assert values("SpreadRatio", "x") == [pytest.approx(ratios["x"])]
        assert values("SpreadOutOfBand") == [1.0]  # x, at 2.5 times its training spread
        assert values("ExplainedVarianceDrop") == [pytest.approx(summary["feature_watch"]["explained_variance_drop"])]
        assert values("RelationsChanged") == [1.0 if summary["relations_changed"] else 0.0]


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


def test_spread_alarm_fires_when_a_feature_leaves_its_band_significantly(custom):
    custom.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Drift", "MetricName": "SpreadOutOfBand", "Threshold": 1, "Statistic": "Maximum",
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "TreatMissingData": "notBreaching",
        "AlarmDescription": Match.string_like_regexp("left 0.7-1.5 times the baseline's beyond its sampling noise")})


def test_relations_alarm_and_the_function_reads_the_band_and_the_points(custom):
    custom.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Drift", "MetricName": "RelationsChanged", "Threshold": 1,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "AlarmActions": [{"Ref": Match.string_like_regexp("^T")}],
        "AlarmDescription": Match.string_like_regexp("explain 3 points more or less")})
    variables = next(f["Properties"]["Environment"]["Variables"] for f in
                     custom.find_resources("AWS::Lambda::Function").values()
                     if f["Properties"]["Handler"] == "drift_handler.handler")
    assert (variables["SPREAD_RATIO_LOW"], variables["SPREAD_RATIO_HIGH"], variables["EXPLAINED_VARIANCE_CHANGE"]) == (
        "0.7", "1.5", "3.0")


def test_a_feature_watch_its_baseline_leaves_inactive_alarms_with_the_rebuild(custom):
    custom.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Drift", "MetricName": "FeatureWatchActive", "Threshold": 1, "Statistic": "Minimum",
        "ComparisonOperator": "LessThanThreshold", "EvaluationPeriods": 1, "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": Match.string_like_regexp("^T")}],
        "AlarmDescription": Match.string_like_regexp("the feature watch judges nothing: the drift baseline was built "
                                                     "before it .* ./platform drift-baseline ENV ENDPOINT SAMPLE.csv")})


def test_default_change_is_five_points():
    endpoint_template().has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "RelationsChanged", "AlarmDescription": Match.string_like_regexp("explain 5 points")})


@pytest.mark.parametrize("watch,message", [
    (FeatureWatch(std_ratio_low=1.2), "feature_watch="),
    (FeatureWatch(explained_variance_drop=0), "feature_watch.explained_variance_drop=0"),
])
def test_a_band_that_is_not_a_band_is_refused(watch, message):
    with pytest.raises(ValidationError, match=message):
        endpoint_template(feature_watch=watch)

