"""EndpointQuality on a MonitoredEndpoint: the scheduled join, its permissions, the quality alarm and the labels'
place next to the captured requests."""

import json
import shutil
import subprocess
import sys
from ml_platform_constructs import runtime

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match

from ml_platform_constructs import DatasetBucket, ModelQuality, MonitoredEndpoint, ValidationError
from ml_platform_constructs.serving.endpoint_quality import FUNCTION_FILES as QUALITY_FILES
from ml_platform_constructs.serving.monitored_endpoint import DRIFT_FUNCTION_FILES as DRIFT_FILES
from tests.unit.endpoint_vpc import endpoint_vpc

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def endpoint(stack, **props):
    datasets = DatasetBucket(stack, "Datasets")
    return MonitoredEndpoint(
        stack, "Classifier", endpoint_name="classifier-dev", image_uri=IMAGE, model_data_bucket=datasets.bucket,
        model_data_key="models/classifier/model.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"),
        baseline_bucket=datasets, vpc=endpoint_vpc(stack), **props)


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        parts["endpoint"] = endpoint(stack, quality=ModelQuality(
            problem_type="binary", baseline=0.92, baseline_examples=5000, prediction_path="predictions.*.score",
            label_lateness=Duration.hours(48), min_labelled=150))
        parts["labeller"] = iam.Role(stack, "Labeller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        parts["endpoint"].quality.grant_label_upload(parts["labeller"])
    return synth_stack(body), parts


def quality_function(template):
    return next(v["Properties"] for v in template.find_resources("AWS::Lambda::Function").values()
                if v["Properties"]["Handler"] == "quality_handler.handler")


def test_the_join_runs_hourly_with_the_settings_the_decision_needs(built):
    template, _ = built
    variables = quality_function(template)["Environment"]["Variables"]
    assert {k: variables[k] for k in ("LATENESS_HOURS", "MIN_LABELLED", "MAX_DROP", "FALSE_ALARMS_PER_90_DAYS",
                                      "POWER", "MAX_BATCH_HOURS", "REFERENCE_LABELS", "BASELINE", "BASELINE_EXAMPLES",
                                      "PROBLEM_TYPE", "PREDICTION_PATH", "LABELS_PREFIX", "STATE_PREFIX",
                                      "METRIC_NAMESPACE", "MODEL_VERSION", "MAX_LABELS")} == {
        "LATENESS_HOURS": "48", "MIN_LABELLED": "150", "MAX_DROP": "1.5", "FALSE_ALARMS_PER_90_DAYS": "0.25",
        "POWER": "0.9", "MAX_BATCH_HOURS": "168", "REFERENCE_LABELS": "10000", "BASELINE": "0.92",
        "BASELINE_EXAMPLES": "5000", "PROBLEM_TYPE": "binary", "PREDICTION_PATH": "predictions.*.score",
        "LABELS_PREFIX": "ground-truth/classifier-dev/", "STATE_PREFIX": "quality/state/classifier-dev/",
        "METRIC_NAMESPACE": "MLPlatform/Quality", "MODEL_VERSION": "static", "MAX_LABELS": "200000"}
    assert "PROBABILITY_THRESHOLD" not in variables and "SIGNIFICANCE" not in variables
    rules = template.find_resources("AWS::Events::Rule", {"Properties": {"ScheduleExpression": "rate(1 hour)"}})
    assert any("QualitySchedule" in k for k in rules)


def test_the_quality_alarm_watches_the_latest_judged_batch(built):
    # SignificantShortfall: the latest judged batch's shortfall when its test alarmed, else 0, republished every run
    built[0].has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Quality", "MetricName": "SignificantShortfall", "Threshold": 0,
        "Statistic": "Maximum", "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1, "Period": 3600,
        "TreatMissingData": "ignore", "Dimensions": [{"Name": "EndpointName", "Value": "classifier-dev"}],
        "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}],
        "AlarmDescription": Match.string_like_regexp("accuracy of a judged batch significantly under the reference "
                                                     "\\(designed to catch a drop of 1.5 points with 90% power\\) "
                                                     "against the baseline 0.92, then pooled with 10000 or more "
                                                     "production labels once the deployment check has passed; a "
                                                     "healthy model alarms about 0.25 times in 90 days")})


def test_not_judged_and_a_label_backlog_have_their_own_alarms(built):
    template = built[0]
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "QualityJudged", "Statistic": "Minimum", "Threshold": 1, "ComparisonOperator": "LessThanThreshold",
        "AlarmDescription": Match.string_like_regexp("quality not judged: a batch closed after 168 hours with fewer "
                                                     "than 150 labelled predictions .a deploy or a promotion is not"),
        "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "LabelObjectsPending", "Threshold": 1, "EvaluationPeriods": 6,
        "AlarmDescription": Match.string_like_regexp("Files waiting the ~3 hours for their hours' index are not "
                                                     "counted"),
        "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})


def test_a_starving_join_alarms_below_the_checks_minimum(built):
    # the threshold is min_labelled (150 here): below it no batch can be judged
    built[0].has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "LabelledPerBatch", "Statistic": "Minimum", "Threshold": 150,
        "ComparisonOperator": "LessThanThreshold", "EvaluationPeriods": 3, "TreatMissingData": "notBreaching",
        "AlarmDescription": Match.string_like_regexp("a batch of 168 hours holds fewer than min_labelled .150."),
        "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})
    assert built[1]["endpoint"].quality.labels_starved_alarm is not None


def test_a_baseline_without_its_examples_warns_that_it_is_taken_as_exact():
    stack = Stack(App(), "W", env={"account": "123456789012", "region": "us-east-1"})
    endpoint(stack, quality=ModelQuality(problem_type="binary", baseline=0.92, significance=0.001))
    # the warnings as the constructs recorded them (no synth: Annotations.from_stack synthesized the app, 12 s)
    quality = stack.node.find_child("Classifier").node.find_child("Quality")
    warnings = " ".join(str(m.data) for m in quality.node.metadata if m.type == "aws:cdk:warning")
    assert "no baseline_examples, so the baseline 0.92 is taken as exact" in warnings
    assert "significance=0.001) has no effect since 0.5.0" in warnings


def test_the_endpoint_lists_the_quality_alarms(built):
    alarms, quality = built[1]["endpoint"].alarms, built[1]["endpoint"].quality
    assert alarms["quality"] is quality.alarm and alarms["quality_check"] is quality.check_failing_alarm
    assert alarms["quality_not_judged"] is quality.not_judged_alarm
    assert alarms["quality_labels_backlog"] is quality.labels_backlog_alarm
    assert alarms["quality_labels_lost"] is quality.labels_lost_alarm
    assert alarms["quality_labels_starved"] is quality.labels_starved_alarm


def test_a_label_that_cannot_be_used_alarms_malformed_or_expired(built):
    template, _ = built
    alarm = next(v["Properties"] for k, v in template.find_resources("AWS::CloudWatch::Alarm").items()
                 if "LabelsLostAlarm" in k)
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    metrics = {m["Id"]: m for m in alarm["Metrics"]}
    assert any(m.get("Expression") == "malformed + expired" for m in metrics.values())
    published = {m["MetricStat"]["Metric"]["MetricName"]: m["MetricStat"]["Stat"] for m in metrics.values()
                 if "MetricStat" in m}
    assert published == {"LabelsMalformed": "Sum", "LabelObjectsExpired": "Sum"}


def test_the_function_reads_capture_and_labels_and_writes_only_its_results_and_state(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("ClassifierQuality"))
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    reads = json.dumps([s["Resource"] for s in statements if "s3:GetObject*" in s["Action"]])
    assert "/capture/classifier-dev/*" in reads and "/ground-truth/classifier-dev/*" in reads
    assert "/quality/state/classifier-dev/*" in reads
    puts = json.dumps([s["Resource"] for s in statements if "s3:PutObject" in s["Action"]])
    assert "quality/results/classifier-dev/*" in puts and "quality/state/classifier-dev/*" in puts
    assert "capture/" not in puts and "ground-truth" not in puts
    metrics = next(s for s in statements if s["Action"] == "cloudwatch:PutMetricData")
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "MLPlatform/Quality"}}


def test_labels_expire_with_the_requests_they_label(built):
    rules = next(r for b in built[0].find_resources("AWS::S3::Bucket").values()
                 for r in [b["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])]
                 if any(x.get("Id") == "expire-ground-truth" for x in r))
    by_id = {r["Id"]: r for r in rules}
    assert by_id["expire-ground-truth"]["Prefix"] == "ground-truth/"
    assert by_id["expire-ground-truth"]["ExpirationInDays"] == by_id["expire-captured-requests"]["ExpirationInDays"]


def test_the_capture_indexes_expire_after_the_joins_horizon(built):
    rules = [r for b in built[0].find_resources("AWS::S3::Bucket").values()
             for r in b["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])]
    [rule] = [r for r in rules if r.get("Id") == "expire-quality-index-classifier-dev"]
    # 48 h of lateness, 2 h of index delay, 48 h a label file may wait: 98 h, 5 days, and a day's margin
    assert (rule["Prefix"], rule["ExpirationInDays"]) == ("quality/state/classifier-dev/index/", 6)


def test_a_labelling_job_can_be_granted_the_upload_only(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("Labeller"))
    text = json.dumps(policy["Properties"]["PolicyDocument"])
    assert "/ground-truth/classifier-dev/*" in text and "s3:GetObject" not in text


def test_the_dashboard_shows_quality_and_the_feature_watch(built):
    body = json.dumps(next(iter(built[0].find_resources("AWS::CloudWatch::Dashboard").values())))
    for fragment in ("Quality: Accuracy against the baseline", "labels joined", "spread ratio per feature",
                     "DetectionDelayHours", "BatchTarget"):
        assert fragment in body


def test_regression_alarm_reads_percent_over_the_baseline_mae(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, quality=ModelQuality(
        problem_type="regression", baseline=3.2, max_drop=5, min_labelled=50, schedule=Duration.hours(6))))
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "SignificantShortfall", "Threshold": 0, "Period": 21600,
        "AlarmDescription": Match.string_like_regexp("MAE of a judged batch significantly over the reference "
                                                     ".designed to catch a rise of 5% with 90% power.")})
    # the check's interim looks take their share of the false-alarm budget per run: it must know how often it runs
    template.has_resource_properties("AWS::Lambda::Function", {
        "Environment": {"Variables": Match.object_like({"SCHEDULE_HOURS": "6"})}})


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
    ({"baseline_examples": 0}, "quality.baseline_examples=0 is invalid: the held-out examples behind the baseline"),
    ({"false_alarms_per_90_days": 0}, "quality.false_alarms_per_90_days=0 is invalid"),
    ({"power": 0.99999, "max_batch_hours": 0}, "quality.max_batch_hours=0 is invalid"),
    ({"power": 1.0}, "quality.power=1.0 is invalid"),
    ({"reference_labels": -1}, "quality.reference_labels=-1 is invalid"),
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
        shutil.copy(runtime.source(name), tmp_path / name)
    subprocess.run([sys.executable, "-c", f"import {module}; {module}.handler; {module}.run"], cwd=tmp_path, check=True)


def test_labels_too_late_to_join_have_their_own_alarm(built):
    """What the handler publishes when its sample of unmatched labels is found in older hours (LabelsTooLateShare,
    only on a run that looked): the alarm keeps its state between looks (missing data ignored)."""
    template = built[0]
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Quality", "MetricName": "LabelsTooLateShare", "Threshold": 0.05,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "TreatMissingData": "ignore", "EvaluationPeriods": 1,
        "AlarmDescription": Match.string_like_regexp("came after label_lateness_hours \\(48\\)")})
    assert built[1]["endpoint"].quality.labels_too_late_alarm.alarm_arn
