"""GPU alarms shared by SpotGpuFleet and TrainingQueue: what an alarm watches is kept apart from what happens
when it fires (the caller passes the actions: a fleet notifies and may stop once, a queue notifies)."""

from __future__ import annotations

from typing import Optional, Sequence

from aws_cdk import Annotations, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ..advice import gpu_catalog
from ..advice.gpu_catalog import MAX_GPU_MEMORY_RATIO, MIN_INSTANCE_TYPES
from ..errors import ValidationError
from .instance_bootstrap import GPU_NAMESPACE


def as_instance_types(construct: str, prop: str, values: Sequence) -> list[ec2.InstanceType]:
    """``values`` as ``ec2.InstanceType``s: names such as ``"g5.xlarge"`` are accepted too."""
    if isinstance(values, (str, ec2.InstanceType)):
        raise ValidationError(construct, prop, values if isinstance(values, str) else values.to_string(),
                              "a list of instance types", f"pass a list, e.g. {prop}=['g5.xlarge', 'g5.2xlarge', ...]")
    types = []
    for value in values:
        if isinstance(value, str):
            value = ec2.InstanceType(value)
        elif not isinstance(value, ec2.InstanceType):
            raise ValidationError(construct, prop, value, "ec2.InstanceType objects or instance type names",
                                  "pass e.g. ec2.InstanceType('g5.xlarge') or 'g5.xlarge'")
        types.append(value)
    return types


def validate_gpu_types(scope: Construct, construct: str, instance_types: Sequence[ec2.InstanceType], *,
                       allow_low_diversity: bool, allow_mixed_gpu_memory: bool, prop: str = "instance_types",
                       min_types: int = MIN_INSTANCE_TYPES,
                       fix_if_empty: str = "list several types of one GPU shape, e.g. g5.xlarge, g5.2xlarge, "
                                           "g6.xlarge, g6.2xlarge") -> list[gpu_catalog.GpuInstanceType]:
    """Catalog types of one GPU shape: one architecture and GPU count, GPU memory within 2x, at least ``min_types``
    (4 for Spot, where diversity is what finds capacity).

    Returns the catalog entries; the two ``allow_*`` overrides turn their rule into a warning.
    """
    names = [t.to_string() for t in instance_types]
    if not names:
        raise ValidationError(construct, prop, [], "at least one GPU instance type", fix_if_empty)
    if len(set(names)) != len(names):
        raise ValidationError(construct, prop, names, "each type once", "remove the duplicate")
    entries = []
    for name in names:
        entry = gpu_catalog.lookup(name)
        if entry is None:
            raise ValidationError(construct, prop, name,
                                  f"a GPU instance type of the catalog (families "
                                  f"{sorted({e.family for e in gpu_catalog.GPU_CATALOG.values()})})",
                                  "pick GPU types from ml_platform_constructs.gpu_catalog.GPU_CATALOG")
        entries.append(entry)
    architectures = sorted({e.architecture for e in entries})
    if len(architectures) > 1:
        raise ValidationError(construct, prop, names, f"one CPU architecture (got {architectures})",
                              "use only x86_64 types or only arm64 (g5g) types: one AMI serves them all")
    counts = sorted({e.gpu_count for e in entries})
    if len(counts) > 1:
        raise ValidationError(construct, prop, names, f"one GPU count per instance (got {counts})",
                              "a job's parallelism is set per GPU count: split the types by GPU count")
    memories = sorted({e.gpu_memory_gib for e in entries})
    if memories[-1] / memories[0] > MAX_GPU_MEMORY_RATIO:
        detail = f"GPU memory within {MAX_GPU_MEMORY_RATIO:g}x across types (got {memories[0]} to {memories[-1]} GiB)"
        if not allow_mixed_gpu_memory:
            raise ValidationError(construct, prop, names, detail,
                                  "keep GPUs of a similar size (e.g. A10G/L4 24 GiB with L40S 48 GiB), or set "
                                  "allow_mixed_gpu_memory=True if the job fits the smallest")
        Annotations.of(scope).add_warning_v2("ml-platform:mixed-gpu-memory", f"{detail}: the job must fit the smallest GPU.")
    if len(entries) < min_types:
        detail = (f"at least {min_types} instance types for Spot to find capacity reliably "
                  f"(got {len(entries)}; AWS's rule of thumb is 10)")
        if not allow_low_diversity:
            raise ValidationError(construct, prop, names, detail,
                                  "add sizes or families of the same GPU shape, or set allow_low_diversity=True")
        Annotations.of(scope).add_warning_v2("ml-platform:low-spot-diversity",
                                            f"{detail}: expect interruptions and unfilled capacity.")
    return entries


def validate_alarm_props(construct: str, *, idle_threshold_percent: float, idle_evaluation_periods: int,
                         alarm_period: Duration, memory_pressure_threshold: Optional[float]) -> None:
    def fail(prop, value, allowed, fix):
        raise ValidationError(construct, prop, value, allowed, fix)

    if not 0 < idle_threshold_percent < 100:
        fail("idle_threshold_percent", idle_threshold_percent, "between 0 and 100", "e.g. 40")
    period = alarm_period.to_seconds()
    if period % 60 or period < 60:
        fail("alarm_period", alarm_period.to_human_string(), "a whole number of minutes (the agent publishes "
             "every 60 s)", "e.g. Duration.minutes(5)")
    if not isinstance(idle_evaluation_periods, int) or idle_evaluation_periods < 1 or \
            period * idle_evaluation_periods > 86400:
        fail("idle_evaluation_periods", idle_evaluation_periods, "at least 1, with periods x period up to one day "
             "(CloudWatch's limit for periods under an hour)", "e.g. 3")
    if memory_pressure_threshold is not None and not 0 < memory_pressure_threshold <= 1:
        fail("memory_pressure_threshold", memory_pressure_threshold, "a ratio in (0, 1], or None",
             "e.g. 0.7; None switches the alarm off")


def gpu_metric(name: str, dimension: tuple[str, str], period: Duration, **kwargs) -> cloudwatch.Metric:
    """A ``MLPlatform/GPU`` metric of one group (``AutoScalingGroupName`` of a fleet, ``QueueName`` of a queue)."""
    options = {"period": period, "statistic": "Average", **kwargs}
    return cloudwatch.Metric(namespace=GPU_NAMESPACE, metric_name=name, dimensions_map={dimension[0]: dimension[1]},
                             **options)


def gpu_memory_used_ratio(dimension: tuple[str, str], period: Duration, **kwargs) -> cloudwatch.MathExpression:
    """GPU memory used / total over a group (0-1), from ``nvidia_smi_memory_used`` and ``_total``."""
    return cloudwatch.MathExpression(
        expression="used / total", label="GPU memory used / total", period=kwargs.pop("period", period),
        using_metrics={"used": gpu_metric("nvidia_smi_memory_used", dimension, period, **kwargs),
                       "total": gpu_metric("nvidia_smi_memory_total", dimension, period, **kwargs)})


def gpu_alarms(scope: Construct, *, subject: str, utilization: cloudwatch.IMetric,
               memory_used_ratio: cloudwatch.IMetric, idle_threshold_percent: float, evaluation_periods: int,
               memory_pressure_threshold: Optional[float], actions: Sequence[cloudwatch.IAlarmAction],
               idle_note: str) -> tuple[cloudwatch.Alarm, Optional[cloudwatch.Alarm]]:
    """The idle-GPU alarm (``GpuIdleAlarm``) and, unless the threshold is None, the GPU memory pressure alarm
    (``GpuMemoryPressureAlarm``), both with ``actions``. Missing data never alarms (no instances, no metrics)."""
    idle = utilization.create_alarm(
        scope, "GpuIdleAlarm",
        alarm_description=f"{subject}: average GPU utilization under {idle_threshold_percent:g}% for "
                          f"{evaluation_periods} periods. {idle_note}",
        threshold=idle_threshold_percent, evaluation_periods=evaluation_periods,
        comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
    idle.add_alarm_action(*actions)
    memory = None
    if memory_pressure_threshold is not None:
        memory = memory_used_ratio.create_alarm(
            scope, "GpuMemoryPressureAlarm",
            alarm_description=f"{subject}: GPU memory used/total above {memory_pressure_threshold:g} for "
                              f"{evaluation_periods} periods (frameworks that preallocate memory keep this high: see the SpotGpuFleet page of the "
                              "library docs).",
            threshold=memory_pressure_threshold, evaluation_periods=evaluation_periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
        memory.add_alarm_action(*actions)
    return idle, memory
