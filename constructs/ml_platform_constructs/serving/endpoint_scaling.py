"""Scaling of a MonitoredEndpoint's variant: target tracking (invocations per instance, or SageMaker's high-resolution
concurrency metric) to follow traffic, and a scale-out-only step policy on the endpoint's p99 latency alarm, so slow
requests add instances too.

Application Auto Scaling's target tracking takes only Average, Minimum, Maximum, SampleCount or Sum in its
CustomizedMetricSpecification (https://docs.aws.amazon.com/autoscaling/application/APIReference/API_CustomizedMetricSpecification.html),
so a percentile is refused at synth here; the emulator accepts one, and AWS would refuse it only at deploy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import jsii
from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IValidation

from ..errors import ValidationError

TARGET_TRACKING_STATISTICS = ("Average", "Minimum", "Maximum", "SampleCount", "Sum")


@dataclass(frozen=True)
class EndpointAutoScaling:
    """Instances of the endpoint's variant between ``min_capacity`` and ``max_capacity``.

    Target tracking follows traffic and is what scales in; give at least one of:

    :param invocations_per_instance: on ``SageMakerVariantInvocationsPerInstance`` (per minute).
    :param concurrent_requests_per_model: on SageMaker's high-resolution ``ConcurrentRequestsPerModel`` (requests in
        flight per model container, published every 10 seconds), which scales out faster than the per-minute
        invocations metric for real-time endpoint variants like this one
        (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html).
    :param target_metric: a metric of your own (with ``target_value``), statistic Average, Minimum, Maximum,
        SampleCount or Sum: a percentile (``p99``) is refused at synth, since target tracking does not take one.

    Slow requests do not raise the invocations per instance, so P99 latency adds instances too:

    :param scale_out_on_latency: a step-scaling policy on the endpoint's p99 latency alarm (its
        ``p99_latency_threshold``: one setting for both) adds ``latency_scale_out_instances`` while the alarm is
        in ALARM, at most once per ``latency_scale_out_cooldown``. It never scales in. Default: True.
    :param latency_scale_out_instances: Default: 1.
    :param latency_scale_out_cooldown: Default: 10 minutes.
    """
    max_capacity: int
    invocations_per_instance: Optional[float] = None
    min_capacity: int = 1
    concurrent_requests_per_model: Optional[float] = None
    target_metric: Optional[cloudwatch.Metric] = None
    target_value: Optional[float] = None
    scale_out_on_latency: bool = True
    latency_scale_out_instances: int = 1
    latency_scale_out_cooldown: Duration = Duration.minutes(10)

    def validate(self) -> None:
        def fail(prop: str, value, allowed: str, fix: str) -> None:
            raise ValidationError("MonitoredEndpoint", f"auto_scaling.{prop}", value, allowed, fix)

        if (self.invocations_per_instance, self.concurrent_requests_per_model, self.target_metric) == (None, None, None):
            fail("invocations_per_instance", None, "at least one target-tracking policy (invocations_per_instance, "
                 "concurrent_requests_per_model or target_metric): the latency policy only scales out",
                 "e.g. EndpointAutoScaling(max_capacity=4, invocations_per_instance=100)")
        for prop in ("invocations_per_instance", "concurrent_requests_per_model", "target_value"):
            value = getattr(self, prop)
            if value is not None and not value > 0:
                fail(prop, value, "a positive number", "e.g. 100")
        if (self.target_metric is None) != (self.target_value is None):
            fail("target_value", self.target_value, "given together with target_metric", "set both or neither")
        if self.target_metric is not None:
            refuse_percentile(self.target_metric.statistic, self.target_metric.metric_name, "auto_scaling.target_metric")
        if not 1 <= self.latency_scale_out_instances <= 100:
            fail("latency_scale_out_instances", self.latency_scale_out_instances, "1 to 100 instances per step", "e.g. 1")
        seconds = self.latency_scale_out_cooldown.to_seconds()
        if not 60 <= seconds <= 86400:
            fail("latency_scale_out_cooldown", self.latency_scale_out_cooldown.to_human_string(), "1 minute to 1 day",
                 "e.g. Duration.minutes(10), enough for a new instance to take traffic")


def refuse_percentile(statistic: str, metric_name: str, prop: str) -> None:
    """A ValidationError for a statistic target tracking cannot use (p99, tm90, ...)."""
    if Token.is_unresolved(statistic) or statistic in TARGET_TRACKING_STATISTICS:
        return
    raise ValidationError(
        "MonitoredEndpoint", prop, f"{metric_name} statistic {statistic}",
        f"one of {', '.join(TARGET_TRACKING_STATISTICS)}: Application Auto Scaling target tracking takes no percentile "
        "(CustomizedMetricSpecification.Statistic), and the emulator would not tell you",
        "scale out on P99 latency with the step-scaling policy (EndpointAutoScaling.scale_out_on_latency, at the "
        "endpoint's p99_latency_threshold), or track the metric's Average")


def scale_endpoint(scope: Construct, *, endpoint: sagemaker.CfnEndpoint, variant_name: str,
                   config: EndpointAutoScaling, latency_alarm: cloudwatch.Alarm) -> appscaling.ScalableTarget:
    """The variant's scalable target (id ``ScalableTarget`` in ``scope``: a changed id would replace it, and the old
    one's deletion would deregister the new one), its target tracking and the latency step policy."""
    target = appscaling.ScalableTarget(
        scope, "ScalableTarget", service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
        resource_id=f"endpoint/{endpoint.endpoint_name}/variant/{variant_name}",
        scalable_dimension="sagemaker:variant:DesiredInstanceCount",
        min_capacity=config.min_capacity, max_capacity=config.max_capacity)
    target.node.add_dependency(endpoint)
    if config.invocations_per_instance is not None:
        target.scale_to_track_metric(
            "InvocationsPerInstance", target_value=config.invocations_per_instance,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE)
    if config.concurrent_requests_per_model is not None:
        target.scale_to_track_metric(
            "ConcurrentRequestsPerModel", target_value=config.concurrent_requests_per_model,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION)
    if config.target_metric is not None:
        target.scale_to_track_metric("TargetMetric", target_value=config.target_value, custom_metric=config.target_metric)
    if config.scale_out_on_latency:
        # Bounds are relative to the alarm's threshold: from the threshold up, add instances.
        step = appscaling.StepScalingAction(
            target, "LatencyScaleOut", scaling_target=target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=config.latency_scale_out_cooldown, metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM)
        step.add_adjustment(adjustment=config.latency_scale_out_instances, lower_bound=0)
        latency_alarm.add_alarm_action(cw_actions.ApplicationScalingAction(step))
    target.node.add_validation(_NoPercentileTargetTracking(target))
    return target


@jsii.implements(IValidation)
class _NoPercentileTargetTracking:
    """Fails the synth when a target-tracking policy of the stack (an L1 escape hatch included) tracks a percentile
    on this scalable target: Application Auto Scaling rejects it only at deploy, and the emulator not at all."""

    def __init__(self, target: appscaling.ScalableTarget) -> None:
        self._target = target

    def validate(self) -> list[str]:
        stack = Stack.of(self._target)
        target_id = stack.resolve(self._target.scalable_target_id)
        errors = []
        for construct in stack.node.find_all():
            if not isinstance(construct, appscaling.CfnScalingPolicy):
                continue
            if stack.resolve(construct.scaling_target_id) != target_id:
                continue
            config = stack.resolve(construct.target_tracking_scaling_policy_configuration) or {}
            spec = config.get("customizedMetricSpecification") or {}
            statistic = spec.get("statistic")
            if statistic and statistic not in TARGET_TRACKING_STATISTICS:
                errors.append(
                    f"{construct.node.path}: target tracking on {spec.get('metricName')} with statistic {statistic}: "
                    f"Application Auto Scaling takes only {', '.join(TARGET_TRACKING_STATISTICS)} there. Fix: scale "
                    "out on P99 latency with EndpointAutoScaling.scale_out_on_latency (a step policy on the p99 "
                    "alarm), or track the metric's Average")
        return errors

