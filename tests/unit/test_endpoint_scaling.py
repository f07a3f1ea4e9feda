"""Endpoint scaling: target tracking beside a scale-out-only step policy on the p99 latency alarm (one threshold for
both), the high-resolution concurrency metric, and percentile target tracking refused at synth."""

import json
from pathlib import Path

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match

from ml_platform_constructs import DatasetBucket, EndpointAutoScaling, MonitoredEndpoint, ValidationError
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
        parts["endpoint"] = endpoint(stack, p99_latency_threshold=Duration.millis(800), auto_scaling=EndpointAutoScaling(
            max_capacity=6, invocations_per_instance=200, concurrent_requests_per_model=4,
            latency_scale_out_instances=2, latency_scale_out_cooldown=Duration.minutes(15)))
    return synth_stack(body), parts


def policies(template, policy_type):
    return [p["Properties"] for p in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
            if p["Properties"]["PolicyType"] == policy_type]


def test_target_tracking_on_invocations_and_high_resolution_concurrency(built):
    configs = {json.dumps(p["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]):
               p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] for p in policies(built[0], "TargetTrackingScaling")}
    assert configs == {
        json.dumps({"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}): 200,
        json.dumps({"PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"}): 4}


def test_latency_scales_out_only_with_a_cooldown(built):
    [step] = policies(built[0], "StepScaling")
    assert step["StepScalingPolicyConfiguration"] == {
        "AdjustmentType": "ChangeInCapacity", "Cooldown": 900, "MetricAggregationType": "Maximum",
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 2}]}


def latency_alarm(template):
    [(_, alarm)] = template.find_resources("AWS::CloudWatch::Alarm", {"Properties": {
        "AlarmName": "classifier-dev-p99-latency"}}).items()
    return alarm


def test_the_p99_alarm_drives_the_step_policy_at_its_one_threshold(built):
    template, _ = built
    alarm = latency_alarm(template)
    assert alarm["Properties"]["Threshold"] == 800000  # 800 ms in microseconds
    assert "p99" in json.dumps(alarm["Properties"]["Metrics"])
    actions = json.dumps(alarm["Properties"]["AlarmActions"])
    [step_id] = [k for k, v in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").items()
                 if v["Properties"]["PolicyType"] == "StepScaling"]
    assert step_id in actions and "Alerts" in actions  # one alarm: it notifies and it scales out


def test_one_p99_alarm_scales_out_and_rolls_back_updates_without_a_dependency_cycle(built):
    template, parts = built
    alarm = latency_alarm(template)
    rollback = next(iter(template.find_resources("AWS::SageMaker::Endpoint").values()))["Properties"][
        "DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    # The endpoint names its rollback alarms (no Ref): the p99 alarm's scale-out reaches back to the endpoint, and a
    # Ref would be a dependency cycle (Template.from_stack, in the fixture, refuses one as undeployable).
    assert alarm["Properties"]["AlarmName"] == "classifier-dev-p99-latency"
    assert {"AlarmName": "classifier-dev-p99-latency"} in rollback
    assert parts["endpoint"].rollback_alarms[0] is parts["endpoint"].alarms["latency"]


def test_scalable_target_keeps_its_id_and_waits_for_the_endpoint(built):
    template, parts = built
    [(logical_id, target)] = template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").items()
    assert logical_id.startswith("ClassifierScalableTarget")  # as before: a new id would replace the target
    assert target["DependsOn"] == [next(iter(template.find_resources("AWS::SageMaker::Endpoint")))]
    assert parts["endpoint"].scalable_target.node.id == "ScalableTarget"


def test_scale_out_on_latency_can_be_left_off(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, auto_scaling=EndpointAutoScaling(
        max_capacity=3, invocations_per_instance=100, scale_out_on_latency=False)))
    assert policies(template, "StepScaling") == []
    assert "ScalingPolicy" not in json.dumps(latency_alarm(template)["Properties"]["AlarmActions"])


def make(**props):
    return endpoint(Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"}), **props)


def latency(statistic):
    return cloudwatch.Metric(namespace="AWS/SageMaker", metric_name="ModelLatency", statistic=statistic,
                             dimensions_map={"EndpointName": "classifier-dev", "VariantName": "AllTraffic"})


@pytest.mark.parametrize("statistic", ["p99", "p90", "tm99", "TM(10%:90%)"])
def test_percentile_target_tracking_is_refused_at_synth_with_the_fix(statistic):
    with pytest.raises(ValidationError) as error:
        make(auto_scaling=EndpointAutoScaling(max_capacity=3, target_metric=latency(statistic), target_value=500000))
    message = str(error.value)
    assert "auto_scaling.target_metric='ModelLatency statistic" in message
    assert "Average, Minimum, Maximum, SampleCount, Sum" in message and "Fix: scale out on P99 latency" in message


def test_an_average_target_metric_is_tracked():
    stack_endpoint = make(auto_scaling=EndpointAutoScaling(max_capacity=3, target_metric=latency("Average"),
                                                           target_value=300000))
    from aws_cdk.assertions import Template

    Template.from_stack(Stack.of(stack_endpoint)).has_resource_properties("AWS::ApplicationAutoScaling::ScalingPolicy", {
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({
            "TargetValue": 300000, "CustomizedMetricSpecification": Match.object_like({
                "MetricName": "ModelLatency", "Statistic": "Average"})})})


def test_an_escape_hatch_percentile_policy_on_the_target_fails_the_synth():
    """The emulator accepts Statistic p99 in target tracking and AWS refuses it only at deploy: synth refuses it."""
    built_endpoint = make(auto_scaling=EndpointAutoScaling(max_capacity=3, invocations_per_instance=100))
    stack = Stack.of(built_endpoint)
    appscaling.CfnScalingPolicy(
        stack, "P99Tracking", policy_name="p99", policy_type="TargetTrackingScaling",
        scaling_target_id=built_endpoint.scalable_target.scalable_target_id,
        target_tracking_scaling_policy_configuration=appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
            target_value=500000, customized_metric_specification=appscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                metric_name="ModelLatency", namespace="AWS/SageMaker", statistic="p99")))
    with pytest.raises(Exception, match="P99Tracking: target tracking on ModelLatency with statistic p99"):
        App.of(stack).synth()


@pytest.mark.parametrize("scaling,message", [
    (EndpointAutoScaling(max_capacity=3), "auto_scaling.invocations_per_instance=None is invalid: at least one"),
    (EndpointAutoScaling(max_capacity=3, concurrent_requests_per_model=0), "concurrent_requests_per_model=0"),
    (EndpointAutoScaling(max_capacity=3, invocations_per_instance=10, latency_scale_out_instances=0),
     "latency_scale_out_instances=0"),
    (EndpointAutoScaling(max_capacity=3, invocations_per_instance=10, latency_scale_out_cooldown=Duration.seconds(10)),
     "latency_scale_out_cooldown='10 seconds'"),
    (EndpointAutoScaling(max_capacity=3, target_metric=latency("Average")), "target_value=None"),
])
def test_invalid_scaling_is_refused(scaling, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        make(auto_scaling=scaling)



def test_the_library_docs_give_the_two_deploys_that_change_an_autoscaled_instance_type():
    # SageMaker refuses an UpdateEndpoint that changes the instance type of a scaling target, and no synth can see
    # the deployed type: the MonitoredEndpoint page says so and gives AWS's procedure as deploys.
    page = (Path(__file__).resolve().parents[2] / "constructs" / "docs" / "MonitoredEndpoint.md").read_text()
    section = page[page.index("## Changing the instance type of an autoscaled endpoint"):]
    procedure = " ".join(section[:section.index("\n## ", 1)].split())
    for words in ("https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html",
                  "1. Deploy with `auto_scaling=None`", "2. Deploy with the new `instance_type` and `auto_scaling` back",
                  "A synth cannot see the deployed instance type"):
        assert words in procedure, words
