"""MonitoredEndpoint's declared model version (a stack parameter a promotion changes) and its blue/green updates that
roll back on the endpoint's own latency and error alarms."""

import json
from pathlib import Path

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match

from ml_platform_constructs import DatasetBucket, EndpointAutoScaling, MonitoredEndpoint, ValidationError
from ml_platform_constructs.runtime.decisions.promotion import model_version_parameter
from endpoint_vpc import endpoint_vpc

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def endpoint(stack, **kwargs):
    datasets = DatasetBucket(stack, "Datasets")
    options = {"endpoint_name": "classifier-dev", "image_uri": IMAGE, "model_data_bucket": datasets.bucket,
               "model_data_key": "models/classifier/{version}/model.tar.gz", "model_version": "initial",
               "instance_type": "ml.m5.large", "alerts": sns.Topic(stack, "Alerts"), "baseline_bucket": datasets,
               "vpc": endpoint_vpc(stack), **kwargs}
    return MonitoredEndpoint(stack, "Classifier", **options)


@pytest.fixture(scope="module")
def versioned(synth_stack):
    parts = {}
    template = synth_stack(lambda stack: parts.setdefault("endpoint", endpoint(stack)))
    return template, parts["endpoint"]


def props(template, resource_type):
    return next(iter(template.find_resources(resource_type).values()))["Properties"]


def test_the_model_version_is_a_stack_parameter_that_fills_the_artifact_key(versioned):
    template, built = versioned
    name = model_version_parameter("classifier-dev")
    assert name == "ClassifierDevModelVersion"
    assert template.to_json()["Parameters"][name]["Default"] == "initial"
    assert Stack.of(built).resolve(built.model_version_parameter.logical_id) == name
    url = props(template, "AWS::SageMaker::Model")["PrimaryContainer"]["ModelDataUrl"]["Fn::Join"][1]
    assert url[-3:] == ["/models/classifier/", {"Ref": name}, "/model.tar.gz"]


def test_the_model_role_reads_every_version_and_the_rollback_alarms(versioned):
    template, _ = versioned
    statements = [s for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("ClassifierModelRole")
                  for s in v["Properties"]["PolicyDocument"]["Statement"]]
    reads = json.dumps([s["Resource"] for s in statements if "s3:GetObject*" in s["Action"]])
    assert "/models/classifier/*/model.tar.gz" in reads
    describe = next(s for s in statements if s["Action"] == "cloudwatch:DescribeAlarms")
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    latency = next(v for k, v in alarms.items() if k.startswith("ClassifierP99LatencyAlarm"))
    errors = next(v for k, v in alarms.items() if k.startswith("ClassifierErrorRateAlarm"))
    assert sorted(describe["Resource"]) == sorted(
        ["arn:aws:cloudwatch:us-east-1:123456789012:alarm:" + a["Properties"]["AlarmName"] for a in (latency, errors)])


def watched_alarms(template):
    """The rollback alarms' properties, in the order the endpoint lists them (it references them: Ref is the name)."""
    config = props(template, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    return [(a["AlarmName"]["Ref"], alarms[a["AlarmName"]["Ref"]]["Properties"])
            for a in config["AutoRollbackConfiguration"]["Alarms"]]


def test_updates_are_blue_green_and_roll_back_on_latency_or_errors(versioned):
    template, _ = versioned
    config = props(template, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    watched = watched_alarms(template)
    assert [a["AlarmName"] for _, a in watched] == ["classifier-dev-p99-latency", "classifier-dev-5xx-error-rate"]
    assert [k.split("Alarm")[0] for k, _ in watched] == ["ClassifierP99Latency", "ClassifierErrorRate"]
    policy = config["BlueGreenUpdatePolicy"]
    # One instance: no canary is possible (at most half the fleet), so the traffic moves at once and bakes.
    assert policy["TrafficRoutingConfiguration"] == {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 1200}
    assert policy["TerminationWaitInSeconds"] == 1200
    assert 2 * 1200 < policy["MaximumExecutionTimeoutInSeconds"] <= 14400  # more than the waits, as the API asks


def test_the_default_bake_outlasts_the_time_the_rollback_alarms_take_to_fire(versioned):
    template, _ = versioned
    config = props(template, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    alarms = [alarm for _, alarm in watched_alarms(template)]
    assert len(alarms) == 2
    bake = config["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]["WaitIntervalInSeconds"]
    for alarm in alarms:
        [period] = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
        # Its breaching periods, and the period the traffic shift falls in: else a regression cannot roll back
        # before SageMaker ends the bake and terminates the old fleet.
        assert bake >= (alarm["EvaluationPeriods"] + 1) * period, alarm["AlarmName"]
    assert config["BlueGreenUpdatePolicy"]["TerminationWaitInSeconds"] >= bake


def bake_warnings(bake_time):
    stack = Stack(App(), "T", env={"account": "123456789012", "region": "us-east-1"})
    endpoint(stack, **({} if bake_time is None else {"rollout_bake_time": bake_time}))
    return Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("rollout_bake_time="))


def test_the_rollback_alarms_exist_before_the_endpoint_and_do_not_scale(synth_stack):
    """First deploy order: the endpoint references its rollback alarms, so CloudFormation creates them first, and
    whether CreateEndpoint checks they exist (undocumented) cannot matter. They have no scaling actions: those are
    the scaling alarms' (test_endpoint_scaling), else the reference would be a dependency cycle."""
    template = synth_stack(lambda stack: endpoint(stack, auto_scaling=EndpointAutoScaling(
        max_capacity=3, invocations_per_instance=100)))
    watched = watched_alarms(template)
    assert len(watched) == 2
    for _, alarm in watched:
        assert [a["Ref"].startswith("Alerts") for a in alarm["AlarmActions"]] == [True], alarm["AlarmName"]


def test_a_bake_shorter_than_the_rollback_alarms_need_warns_with_the_fix():
    [warning] = bake_warnings(Duration.minutes(10))
    text = warning.entry.data
    assert text.startswith("rollout_bake_time=10 minutes is shorter than the rollback alarms can fire: they need 3 "
                           "breaching periods of 5 minutes (20 minutes with the period a traffic shift starts in)")
    assert "Fix: rollout_bake_time=Duration.minutes(20) (the default)" in text
    assert text.endswith("[ack: ml-platform:rollout-bake-time]")


def test_the_default_and_longer_bakes_do_not_warn():
    assert bake_warnings(None) == [] and bake_warnings(Duration.minutes(30)) == []


def test_two_or_more_instances_take_a_one_instance_canary_first(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, initial_instance_count=2, rollout_bake_time=Duration.minutes(30)))
    routing = props(template, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["BlueGreenUpdatePolicy"][
        "TrafficRoutingConfiguration"]
    assert routing == {"Type": "CANARY", "WaitIntervalInSeconds": 1800,
                       "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1}}


def test_a_fixed_key_has_no_parameter_and_keeps_its_exact_grant(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, model_data_key="models/classifier/model.tar.gz",
                                                  model_version=None))
    assert "Parameters" not in template.to_json() or not any(
        k.endswith("ModelVersion") for k in template.to_json()["Parameters"])
    assert "DeploymentConfig" in props(template, "AWS::SageMaker::Endpoint")


def test_the_dev_classifier_declares_its_version_in_the_serving_stack(templates):
    parameters = templates["dev/Serving"].to_json()["Parameters"]
    assert parameters["MlPlatformDevClassifierModelVersion"]["Default"] == "initial"


@pytest.mark.parametrize("kwargs, message", [
    ({"model_version": None}, r"model_data_key='models/classifier/\{version\}/model.tar.gz' is invalid: a fixed key, "
                              r"or model_version set"),
    ({"model_data_key": "models/classifier/model.tar.gz"}, r"model_data_key=.* is invalid: one \{version\}"),
    ({"model_version": "v 1"}, r"model_version='v 1' is invalid: 1-64 letters"),
    ({"rollout_bake_time": Duration.hours(2)}, r"rollout_bake_time='2 hours' is invalid: 0 to 60 minutes"),
])
def test_bad_version_props_fail_at_synth_with_the_fix(kwargs, message):
    stack = Stack(App(), "T", env={"account": "123456789012", "region": "us-east-1"})
    with pytest.raises(ValidationError, match=message):
        endpoint(stack, **kwargs)


def page_section(heading):
    page = (Path(__file__).resolve().parents[2] / "constructs" / "docs" / "MonitoredEndpoint.md").read_text()
    section = page[page.index(heading):]
    return " ".join(section[:section.index("\n## ", 1)].split())


def test_the_page_says_what_a_capture_change_on_an_autoscaled_endpoint_needs():
    # RetainAllVariantProperties keeps the instance count; DataCaptureConfig cannot be excluded from the retention
    # (VariantProperty: "not currently supported"), and whether a capture change applies is not documented.
    section = page_section("## Autoscaled endpoints and updates")
    for words in ("`RetainAllVariantProperties: true`", "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_VariantProperty.html",
                  "`DataCaptureConfig` is documented there as \"not currently supported\"",
                  "aws sagemaker describe-endpoint --endpoint-name NAME --query DataCaptureConfig",
                  "deploy with `auto_scaling=None` and the capture change",
                  "set `initial_instance_count` to the endpoint's `CurrentInstanceCount`"):
        assert words in section, words


def test_the_page_gives_the_deploy_that_renames_the_variant():
    # Blue/green updates need the same variant name and a synth cannot see the deployed one: documented, not refused.
    section = page_section("## Renaming the variant")
    for words in ("https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-exclusions.html",
                  "A synth cannot see the deployed variant, so this is not refused at synth",
                  "Change `variant_name` together with a new `endpoint_name`, in one deploy",
                  "copy the drift baseline to the new name's key"):
        assert words in section, words
