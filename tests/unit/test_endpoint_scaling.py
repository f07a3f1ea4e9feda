"""Endpoint scaling: target tracking beside a latency scale-out step policy on an alarm of its own (the rollback
alarm's threshold) and one scale-in that agrees with both, the high-resolution concurrency metric, and percentile
target tracking refused at synth."""

import json
from pathlib import Path

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match

from ml_platform_constructs import DatasetBucket, EndpointAutoScaling, MonitoredEndpoint, ValidationError
from endpoint_vpc import endpoint_vpc

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
        parts["endpoint"] = endpoint(stack, p99_latency_threshold=Duration.millis(800), auto_scaling=EndpointAutoScaling(
            max_capacity=6, invocations_per_instance=200, concurrent_requests_per_model=4,
            latency_scale_out_instances=2, latency_scale_out_cooldown=Duration.minutes(15)))
    return synth_stack(body), parts


def policies(template, policy_type):
    return [p["Properties"] for p in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
            if p["Properties"]["PolicyType"] == policy_type]


def trackers(template):
    return {p["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]["PredefinedMetricType"]:
            p["TargetTrackingScalingPolicyConfiguration"] for p in policies(template, "TargetTrackingScaling")}


def test_target_tracking_on_invocations_and_high_resolution_concurrency_only_scales_out(built):
    configs = trackers(built[0])
    assert {k: v["TargetValue"] for k, v in configs.items()} == {
        "SageMakerVariantInvocationsPerInstance": 200, "SageMakerVariantConcurrentRequestsPerModelHighResolution": 4}
    # It would remove what the latency policy added (traffic did not rise): the scale-in policy below does that.
    assert all(v["DisableScaleIn"] is True for v in configs.values())


def steps(template):
    """The step policies by their one adjustment: {+instances: (logical id, configuration), -1: ...}."""
    found = {}
    for key, policy in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").items():
        config = policy["Properties"].get("StepScalingPolicyConfiguration")
        if config:
            [adjustment] = config["StepAdjustments"]
            found[adjustment["ScalingAdjustment"]] = (key, config)
    return found


def test_latency_scales_out_and_one_policy_scales_in_each_with_its_cooldown(built):
    found = steps(built[0])
    assert found[2][1] == {
        "AdjustmentType": "ChangeInCapacity", "Cooldown": 900, "MetricAggregationType": "Maximum",
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 2}]}
    assert found[-1][1] == {
        "AdjustmentType": "ChangeInCapacity", "Cooldown": 600, "MetricAggregationType": "Maximum",
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": -1}]}
    assert sorted(found) == [-1, 2]


def latency_alarm(template):
    [(_, alarm)] = template.find_resources("AWS::CloudWatch::Alarm", {"Properties": {
        "AlarmName": "classifier-dev-p99-latency"}}).items()
    return alarm


def alarm_acting_on(template, policy_id):
    [alarm] = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()
               if {"Ref": policy_id} in a["Properties"].get("AlarmActions", [])]
    return alarm


def test_latency_scale_out_has_its_own_alarm_at_the_rollback_alarms_threshold(built):
    template, _ = built
    rollback = latency_alarm(template)["Properties"]
    scale_out = alarm_acting_on(template, steps(template)[2][0])
    assert scale_out is not rollback and "AlarmName" not in scale_out
    assert (scale_out["Threshold"], scale_out["EvaluationPeriods"]) == (800000, 3)  # 800 ms in microseconds
    assert scale_out["Metrics"] == rollback["Metrics"]  # the same judged p99
    assert scale_out["AlarmActions"] == [{"Ref": steps(template)[2][0]}]  # it scales; the rollback alarm notifies
    assert [a["Ref"].startswith("Alerts") for a in rollback["AlarmActions"]] == [True]


def test_the_rollback_alarms_are_referenced_without_a_dependency_cycle(built):
    template, parts = built
    rollback = next(iter(template.find_resources("AWS::SageMaker::Endpoint").values()))["Properties"][
        "DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    # The scaling alarms reach back to the endpoint through the scalable target; the rollback alarms do not, so the
    # endpoint can reference them (Template.from_stack, in the fixture, refuses a cycle as undeployable).
    [latency_id] = template.find_resources("AWS::CloudWatch::Alarm", {"Properties": {
        "AlarmName": "classifier-dev-p99-latency"}})
    assert {"AlarmName": {"Ref": latency_id}} in rollback
    assert parts["endpoint"].rollback_alarms[0] is parts["endpoint"].alarms["latency"]


def scale_in_alarm(template):
    return alarm_acting_on(template, steps(template)[-1][0])


def test_scale_in_waits_for_traffic_and_latency_to_allow_one_instance_fewer(built):
    alarm = scale_in_alarm(built[0])
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["ComparisonOperator"], alarm["TreatMissingData"]) == (
        1, 3, "GreaterThanOrEqualToThreshold", "breaching")  # no data: nothing was served
    queries = {m["Id"]: m for m in alarm["Metrics"]}
    stats = {k: (m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Stat"], m["MetricStat"]["Period"])
             for k, m in queries.items() if "MetricStat" in m}
    assert stats == {"inv": ("Invocations", "Sum", 300), "ipi": ("InvocationsPerInstance", "Sum", 300),
                     "p99": ("ModelLatency", "p99", 300), "requests": ("ModelLatency", "SampleCount", 300),
                     "m1": ("ConcurrentRequestsPerModel", "Average", 300)}
    assert (queries["m0"]["Expression"], queries["latency"]["Expression"]) == (
        "ipi / 5", "IF(FILL(requests, 0) >= 1000, p99, 0)")


def as_python(expression):
    """A metric-math expression with IF(condition, a, b) as Python's (a if condition else b): IF picks a branch per
    datapoint, so the other branch's division by zero never counts."""
    start = expression.find("IF(")
    if start < 0:
        return expression
    depth, parts, begin = 0, [], start + 3
    for index in range(start + 3, len(expression)):
        char = expression[index]
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif char == "," and not depth:
            parts.append(expression[begin:index])
            begin = index + 1
        elif char == ")":
            parts.append(expression[begin:index])
            condition, true, false = (as_python(part.strip()) for part in parts)
            return f"{expression[:start]}(({true}) if ({condition}) else ({false})){as_python(expression[index + 1:])}"
    raise ValueError(expression)


def cloudwatch_math(expression, **values):
    """The scale-in alarm's expression evaluated for one period as CloudWatch would (IF, FILL, comparisons)."""
    scope = {"FILL": lambda value, fill: fill if value is None else value, **values}
    return eval(as_python(expression), {"__builtins__": {}}, scope)  # noqa: S307 (our own template's expression)


@pytest.mark.parametrize("instances,per_minute,concurrency,p99_ms,expected", [
    (4, 100, 2, 100, 1),   # 3 instances would take 133/min and 2.7 in flight: under 200 and 4
    (4, 160, 2, 100, 0),   # 3 instances would take 213/min: over the invocations target
    (4, 100, 3.5, 100, 0),  # 3 instances would have 4.7 requests in flight: over the concurrency target
    (4, 100, 2, 500, 0),   # p99 500 ms, over half the 800 ms threshold: latency may just have scaled it out
    (2, 90, 1, 100, 1),    # 1 instance would take 180/min
    (1, 10, 1, 100, 0),    # one instance: nothing to remove
    (3, 0, 0, 0, 1),       # nothing served: down to min_capacity
])
def test_the_scale_in_expression_removes_an_instance_only_when_one_fewer_suffices(built, instances, per_minute,
                                                                                   concurrency, p99_ms, expected):
    alarm = scale_in_alarm(built[0])
    [returned] = [m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData", True)]
    invocations = per_minute * 5 * instances
    values = {"inv": invocations, "ipi": per_minute * 5 if invocations else None, "m0": per_minute,
              "m1": concurrency, "latency": p99_ms * 1000}
    assert cloudwatch_math(returned, **values) == expected


def test_scalable_target_keeps_its_id_and_waits_for_the_endpoint(built):
    template, parts = built
    [(logical_id, target)] = template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").items()
    assert logical_id.startswith("ClassifierScalableTarget")  # as before: a new id would replace the target
    assert target["DependsOn"] == [next(iter(template.find_resources("AWS::SageMaker::Endpoint")))]
    assert parts["endpoint"].scalable_target.node.id == "ScalableTarget"


def test_scale_out_on_latency_can_be_left_off_and_target_tracking_scales_in_again(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, auto_scaling=EndpointAutoScaling(
        max_capacity=3, invocations_per_instance=100, scale_out_on_latency=False)))
    assert policies(template, "StepScaling") == []
    assert trackers(template)["SageMakerVariantInvocationsPerInstance"]["DisableScaleIn"] is False
    assert not [a for a in template.find_resources("AWS::CloudWatch::Alarm").values()
                if "ScalingPolicy" in json.dumps(a["Properties"].get("AlarmActions", []))]


def test_a_min_capacity_of_2_reaches_the_scalable_target(synth_stack):
    template = synth_stack(lambda stack: endpoint(stack, auto_scaling=EndpointAutoScaling(
        min_capacity=2, max_capacity=5, invocations_per_instance=100)))
    [target] = template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (2, 5)


def test_an_autoscaled_endpoint_keeps_its_instance_count_through_updates(built, synth_stack):
    properties = next(iter(built[0].find_resources("AWS::SageMaker::Endpoint").values()))["Properties"]
    assert properties["RetainAllVariantProperties"] is True
    # Nothing excluded: DesiredInstanceCount would reset scaling, and DataCaptureConfig is not supported there.
    assert "ExcludeRetainedVariantProperties" not in properties
    fixed = synth_stack(lambda stack: endpoint(stack))  # a fixed count: the declared initial_instance_count applies
    assert "RetainAllVariantProperties" not in next(iter(fixed.find_resources("AWS::SageMaker::Endpoint").values()))[
        "Properties"]


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
    (EndpointAutoScaling(max_capacity=3, invocations_per_instance=10, scale_in_cooldown=Duration.days(2)),
     "scale_in_cooldown='2 days' is invalid: 1 minute to 1 day"),
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
