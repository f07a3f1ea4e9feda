"""EndpointQuality on a MonitoredEndpoint: the scheduled join, its permissions, the quality alarm and the labels'
place next to the captured requests."""

import json
import shutil
import subprocess
import sys
from importlib import resources

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match

from ml_platform_constructs import DatasetBucket, ModelQuality, MonitoredEndpoint, ValidationError
from ml_platform_constructs.serving.endpoint_quality import FUNCTION_FILES as QUALITY_FILES
from ml_platform_constructs.serving.monitored_endpoint import DRIFT_FUNCTION_FILES as DRIFT_FILES
from tests.conftest import isolated_vpc

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def endpoint(stack, **props):
    datasets = DatasetBucket(stack, "Datasets")
    return MonitoredEndpoint(
        stack, "Classifier", endpoint_name="classifier-dev", image_uri=IMAGE, model_data_bucket=datasets.bucket,
        model_data_key="models/classifier/model.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"),
        baseline_bucket=datasets, vpc=isolated_vpc(stack), **props)


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        parts["endpoint"] = endpoint(stack, quality=ModelQuality(
            problem_type="binary", baseline=0.92, prediction_path="predictions.*.score", label_lateness=Duration.hours(48)))
        parts["labeller"] = iam.Role(stack, "Labeller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        parts["endpoint"].quality.grant_label_upload(parts["labeller"])
    return synth_stack(body), parts


def quality_function(template):
    return next(v["Properties"] for v in template.find_resources("AWS::Lambda::Function").values()
                if v["Properties"]["Handler"] == "quality_handler.handler")


def test_the_join_runs_hourly_on_a_window_that_waited_for_its_labels(built):
    template, _ = built
    variables = quality_function(template)["Environment"]["Variables"]
    assert {k: variables[k] for k in ("WINDOW_HOURS", "LATENESS_HOURS", "MIN_LABELLED", "MAX_DROP", "SIGNIFICANCE",
                                      "BASELINE", "PROBLEM_TYPE", "PREDICTION_PATH", "LABELS_PREFIX",
                                      "METRIC_NAMESPACE")} == {
        "WINDOW_HOURS": "1", "LATENESS_HOURS": "48", "MIN_LABELLED": "200", "MAX_DROP": "1.5",
        "SIGNIFICANCE": "0.001", "BASELINE": "0.92",
        "PROBLEM_TYPE": "binary", "PREDICTION_PATH": "predictions.*.score",
        "LABELS_PREFIX": "ground-truth/classifier-dev/", "METRIC_NAMESPACE": "MLPlatform/Quality"}
    assert "PROBABILITY_THRESHOLD" not in variables
    rules = template.find_resources("AWS::Events::Rule", {"Properties": {"ScheduleExpression": "rate(1 hour)"}})
    assert any("QualitySchedule" in k for k in rules)


def test_the_quality_alarm_judges_only_significant_shortfalls_and_keeps_its_state_without_them(built):
    # SignificantShortfall: the shortfall of a window whose test is significant, else 0 (QualityShortfall would alarm
    # on a healthy model's noise)
    built[0].has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Quality", "MetricName": "SignificantShortfall", "Threshold": 1.5,
        "Statistic": "Maximum",
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "EvaluationPeriods": 1, "Period": 3600,
        "TreatMissingData": "ignore", "Dimensions": [{"Name": "EndpointName", "Value": "classifier-dev"}],
        "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}],
        "AlarmDescription": Match.string_like_regexp("accuracy 1.5 percentage points under the baseline 0.92, "
                                                     "significant at 0.001 \\(one-sided\\), from at least 200 "
                                                     "labelled")})


def test_the_endpoint_lists_the_quality_alarms(built):
    alarms = built[1]["endpoint"].alarms
    assert alarms["quality"] is built[1]["endpoint"].quality.alarm
    assert alarms["quality_check"] is built[1]["endpoint"].quality.check_failing_alarm


def test_the_function_reads_capture_and_labels_and_writes_only_its_results(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("ClassifierQuality"))
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    reads = json.dumps([s["Resource"] for s in statements if "s3:GetObject*" in s["Action"]])
    assert "/capture/classifier-dev/*" in reads and "/ground-truth/classifier-dev/*" in reads
    puts = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert len(puts) == 1 and "quality/results/classifier-dev/*" in json.dumps(puts[0]["Resource"])
    metrics = next(s for s in statements if s["Action"] == "cloudwatch:PutMetricData")
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "MLPlatform/Quality"}}


def test_labels_expire_with_the_requests_they_label(built):
    rules = next(r for b in built[0].find_resources("AWS::S3::Bucket").values()
                 for r in [b["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])]
                 if any(x.get("Id") == "expire-ground-truth" for x in r))
    by_id = {r["Id"]: r for r in rules}
    assert by_id["expire-ground-truth"]["Prefix"] == "ground-truth/"
    assert by_id["expire-ground-truth"]["ExpirationInDays"] == by_id["expire-captured-requests"]["ExpirationInDays"]


def test_a_labelling_job_can_be_granted_the_upload_only(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("Labeller"))
    text = json.dumps(policy["Properties"]["PolicyDocument"])
    assert "/ground-truth/classifier-dev/*" in text and "s3:GetObject" not in text


def test_the_dashboard_shows_quality_and_the_feature_watch(built):
    body = json.dumps(next(iter(built[0].find_resources("AWS::CloudWatch::Dashboard").values())))
    for fragment in ("Quality: Accuracy against the baseline", "labelled predictions", "std ratio per feature",
                     "ShortfallPValue"):
        assert fragment in body


def test_regression_alarm_reads_percent_over_the_baseline_mae(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, quality=ModelQuality(
        problem_type="regression", baseline=3.2, max_drop=5, min_labelled=50, schedule=Duration.hours(6))))
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "SignificantShortfall", "Threshold": 5, "Period": 21600,
        "AlarmDescription": Match.string_like_regexp("MAE 5% over the baseline 3.2, significant at 0.001 .one-sided., from at least 50")})


def make(**quality):
    stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
    return endpoint(stack, quality=ModelQuality(**{"problem_type": "binary", "baseline": 0.92, **quality}))


@pytest.mark.parametrize("quality,message", [
    ({"problem_type": "ranking"}, "quality.problem_type='ranking' is invalid"),
    ({"baseline": 92}, "quality.baseline=92 is invalid: the live model's held-out accuracy as a share"),
    ({"problem_type": "regression", "baseline": 0}, "quality.baseline=0 is invalid: the live model's MAE"),
    ({"prediction_path": "predictions[0]"}, "quality.prediction_path='predictions[0]' is invalid"),
    ({"problem_type": "multiclass", "probability_threshold": 0.5}, "quality.probability_threshold=0.5 is invalid"),
    ({"min_labelled": 0}, "quality.min_labelled=0 is invalid"),
    ({"max_drop": 0}, "quality.max_drop=0 is invalid"),
    ({"significance": 0.9}, "quality.significance=0.9 is invalid: a one-sided test level"),
    ({"schedule": Duration.minutes(30)}, "quality.schedule='30 minutes' is invalid"),
    ({"label_lateness": Duration.days(8)}, "quality.label_lateness='8 days' is invalid"),
])
def test_invalid_quality_settings_are_refused_with_the_fix(quality, message):
    with pytest.raises(ValidationError) as error:
        make(**quality)
    assert message in str(error.value) and "Fix: " in str(error.value)


@pytest.mark.parametrize("files,module", [(QUALITY_FILES, "quality_handler"), (DRIFT_FILES, "drift_handler")])
def test_the_functions_code_imports_as_lambda_packages_it(tmp_path, files, module):
    for name in files:
        shutil.copy(resources.files("ml_platform_constructs.runtime") / name, tmp_path / name)
    subprocess.run([sys.executable, "-c", f"import {module}; {module}.handler; {module}.run"], cwd=tmp_path, check=True)
