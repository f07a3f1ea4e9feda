"""Scaling of a MonitoredEndpoint's variant: target tracking (invocations per instance, or SageMaker's high-resolution
concurrency metric) to follow traffic, a step policy that adds instances while requests are slow, and, with that step
policy, one scale-in policy that removes an instance only when traffic and latency both allow it.

Application Auto Scaling's target tracking takes only Average, Minimum, Maximum, SampleCount or Sum in its
CustomizedMetricSpecification (https://docs.aws.amazon.com/autoscaling/application/APIReference/API_CustomizedMetricSpecification.html),
so a percentile is refused at synth here; the emulator accepts one, and AWS would refuse it only at deploy.

The step policies are driven by metric alarms of their own (metric math), apart from the endpoint's rollback alarms:
a metric alarm can invoke an Application Auto Scaling policy, a composite alarm cannot
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/US_AlarmAutoScalingAction.html), and CloudWatch
repeats an Auto Scaling action every period its alarm stays in ALARM
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import jsii
from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IValidation

from ..errors import ValidationError

TARGET_TRACKING_STATISTICS = ("Average", "Minimum", "Maximum", "SampleCount", "Sum")


# The scaling alarms read 5-minute periods, as the endpoint's p99 alarm does, and act after 3 of them (15 minutes).
SCALING_PERIOD = Duration.minutes(5)
SCALING_ALARM_PERIODS = 3
# Latency does not fall in proportion to the instances added, so an instance is removed only while the judged p99 is
# under this share of p99_latency_threshold: far enough below it that one instance fewer does not cross it again.
SCALE_IN_LATENCY_SHARE = 0.5


@dataclass(frozen=True)
class EndpointAutoScaling:
    """Instances of the endpoint's variant between ``min_capacity`` and ``max_capacity``.

    :param max_capacity: the most instances.
    :param min_capacity: the fewest instances, also while nothing is served (e.g. 2 for availability). Default: 1.

    Target tracking follows traffic; give at least one of:

    :param invocations_per_instance: on ``SageMakerVariantInvocationsPerInstance`` (per minute).
    :param concurrent_requests_per_model: on SageMaker's high-resolution ``ConcurrentRequestsPerModel`` (requests in
        flight per model container, published every 10 seconds), which scales out faster than the per-minute
        invocations metric for real-time endpoint variants like this one
        (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html).
    :param target_metric: a metric of your own (with ``target_value``), statistic Average, Minimum, Maximum,
        SampleCount or Sum: a percentile (``p99``) is refused at synth, since target tracking does not take one.

    Slow requests do not raise the invocations per instance, so P99 latency adds instances too:

    :param scale_out_on_latency: a step-scaling policy on an alarm of its own (the endpoint's judged p99 above its
        ``p99_latency_threshold`` for 3 periods of 5 minutes: one setting for scaling and rollback, two alarms) adds
        ``latency_scale_out_instances`` while that alarm is in ALARM, at most once per ``latency_scale_out_cooldown``.
        Target tracking would remove those instances again, since traffic did not rise: so with this policy the
        target-tracking policies only scale out, and one step policy scales in, an instance at a time at most once per
        ``scale_in_cooldown``, when for 15 minutes every tracked metric would stay under its target with one instance
        fewer and the judged p99 is under half its threshold (or nothing is served). Default: True. False: target
        tracking scales in and out, and latency adds nothing.
    :param latency_scale_out_instances: Default: 1.
    :param latency_scale_out_cooldown: Default: 10 minutes.
    :param scale_in_cooldown: with ``scale_out_on_latency``, the least time between two scale-ins. Default: 10 minutes.
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
    scale_in_cooldown: Duration = Duration.minutes(10)

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
        for prop in ("latency_scale_out_cooldown", "scale_in_cooldown"):
            cooldown = getattr(self, prop)
            if not 60 <= cooldown.to_seconds() <= 86400:
                fail(prop, cooldown.to_human_string(), "1 minute to 1 day",
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
                   config: EndpointAutoScaling, metric: Callable[[str, str], cloudwatch.Metric],
                   judged_p99: cloudwatch.MathExpression, p99_threshold: float) -> appscaling.ScalableTarget:
    """The variant's scalable target (id ``ScalableTarget`` in ``scope``: a changed id would replace it, and the old
    one's deletion would deregister the new one), its target tracking and, with ``scale_out_on_latency``, the latency
    scale-out and the combined scale-in, each on an alarm of its own. ``metric(name, statistic)`` is the variant's
    ``AWS/SageMaker`` metric in 5-minute periods, ``judged_p99`` the endpoint's p99 alarm's expression (microseconds),
    ``p99_threshold`` that alarm's threshold."""
    target = appscaling.ScalableTarget(
        scope, "ScalableTarget", service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
        resource_id=f"endpoint/{endpoint.endpoint_name}/variant/{variant_name}",
        scalable_dimension="sagemaker:variant:DesiredInstanceCount",
        min_capacity=config.min_capacity, max_capacity=config.max_capacity)
    target.node.add_dependency(endpoint)
    # With the latency step policy, target tracking must not remove what it added: one policy scales in (below).
    tracking_scales_in = not config.scale_out_on_latency
    tracked: list[tuple[cloudwatch.IMetric, float]] = []  # (the tracked value in 5-minute periods, its target)
    if config.invocations_per_instance is not None:
        target.scale_to_track_metric(
            "InvocationsPerInstance", target_value=config.invocations_per_instance,
            disable_scale_in=not tracking_scales_in,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE)
        # Per minute, as the target is: the 5-minute sum over 5.
        tracked.append((cloudwatch.MathExpression(expression="ipi / 5", period=SCALING_PERIOD, using_metrics={
            "ipi": metric("InvocationsPerInstance", "Sum")}), config.invocations_per_instance))
    if config.concurrent_requests_per_model is not None:
        target.scale_to_track_metric(
            "ConcurrentRequestsPerModel", target_value=config.concurrent_requests_per_model,
            disable_scale_in=not tracking_scales_in,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION)
        tracked.append((metric("ConcurrentRequestsPerModel", "Average"), config.concurrent_requests_per_model))
    if config.target_metric is not None:
        target.scale_to_track_metric("TargetMetric", target_value=config.target_value, custom_metric=config.target_metric,
                                     disable_scale_in=not tracking_scales_in)
        tracked.append((config.target_metric.with_(period=SCALING_PERIOD), config.target_value))
    if config.scale_out_on_latency:
        _latency_scale_out(scope, endpoint.endpoint_name, target, config, judged_p99, p99_threshold)
        _scale_in(scope, endpoint.endpoint_name, target, config, metric, judged_p99, p99_threshold, tracked)
    target.node.add_validation(_NoPercentileTargetTracking(target))
    return target


def _latency_scale_out(scope: Construct, endpoint_name: str, target: appscaling.ScalableTarget,
                       config: EndpointAutoScaling, judged_p99: cloudwatch.MathExpression, p99_threshold: float) -> None:
    # Its own alarm, not the rollback alarm: the rollback alarm watches old and new fleets during an update (when
    # scaling is blocked anyway), and what rolls back should not also be what scales.
    alarm = judged_p99.create_alarm(
        scope, "LatencyScaleOutAlarm", threshold=p99_threshold, evaluation_periods=SCALING_ALARM_PERIODS,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=f"Scales {endpoint_name} out: judged p99 model latency above "
                          f"{p99_threshold / 1000:g} ms for 15 minutes (the p99 alarm notifies)")
    # Bounds are relative to the alarm's threshold: from the threshold up, add instances.
    step = appscaling.StepScalingAction(
        target, "LatencyScaleOut", scaling_target=target, adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
        cooldown=config.latency_scale_out_cooldown, metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM)
    step.add_adjustment(adjustment=config.latency_scale_out_instances, lower_bound=0)
    alarm.add_alarm_action(cw_actions.ApplicationScalingAction(step))


def _scale_in(scope: Construct, endpoint_name: str, target: appscaling.ScalableTarget, config: EndpointAutoScaling,
              metric: Callable[[str, str], cloudwatch.Metric], judged_p99: cloudwatch.MathExpression,
              p99_threshold: float, tracked: list[tuple[cloudwatch.IMetric, float]]) -> None:
    """One instance fewer when, for 15 minutes, nothing is served, or the variant has 2 or more instances, every
    tracked metric v (target t) would stay under its target with one instance fewer (v * n < t * (n - 1), n the
    instances: Invocations / InvocationsPerInstance), and the judged p99 is under SCALE_IN_LATENCY_SHARE of its
    threshold. Nested IFs of comparisons only (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html)."""
    using = {"inv": metric("Invocations", "Sum"), "ipi": metric("InvocationsPerInstance", "Sum"), "latency": judged_p99}
    n = "(inv / ipi)"
    condition = f"IF(latency < {p99_threshold * SCALE_IN_LATENCY_SHARE:g}, 1, 0)"
    for index, (value, target_value) in reversed(list(enumerate(tracked))):
        using[f"m{index}"] = value
        condition = f"IF(m{index} * {n} < {target_value:g} * ({n} - 1), {condition}, 0)"
    alarm = cloudwatch.MathExpression(
        expression=f"IF(FILL(inv, 0) == 0, 1, IF({n} >= 1.5, {condition}, 0))", period=SCALING_PERIOD,
        label="1 when an instance fewer would still meet the targets and the latency", using_metrics=using,
    ).create_alarm(
        scope, "ScaleInAlarm", threshold=1, evaluation_periods=SCALING_ALARM_PERIODS,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        # No data at all is no traffic: SageMaker publishes Invocations only for requests, and an expression over
        # an empty range returns no value rather than FILL's 0 (https://repost.aws/knowledge-center/
        # cloudwatch-alarm-insufficient-data-state). Breaching then, so an idle endpoint scales in to min_capacity
        # (target tracking no longer scales in; never below min_capacity).
        treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        alarm_description=f"Scales {endpoint_name} in: for 15 minutes one instance fewer would keep every "
                          "tracked metric under its target and the judged p99 is under "
                          f"{p99_threshold * SCALE_IN_LATENCY_SHARE / 1000:g} ms (or nothing was served)")
    step = appscaling.StepScalingAction(
        target, "ScaleIn", scaling_target=target, adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
        cooldown=config.scale_in_cooldown, metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM)
    step.add_adjustment(adjustment=-1, lower_bound=0)
    alarm.add_alarm_action(cw_actions.ApplicationScalingAction(step))


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

