"""A training queue's goodput alarms: a job that waits on its input pipeline, or on its checkpoint saves, for
longer than it should. The metrics are the ones the job-contract helper prints (ml_platform_job.goodput.PhaseClock.emit,
embedded metric format, dimension Queue); each alarm's description carries the fix for the queue's instances."""

from __future__ import annotations

from typing import Optional, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from ..advice import gpu_catalog
from ..errors import ValidationError
from ml_platform_job.goodput import GOODPUT_NAMESPACE, METRIC_WINDOW_SECONDS, loader_settings_for

# The defaults: data wait over 30% of step time, or checkpoint saves over 10% of wall time, for 15 minutes.
INPUT_BOUND_PERCENT = 30
CHECKPOINT_BOUND_PERCENT = 10
BOUND_MINUTES = 15


def goodput_metric(queue_name: str, name: str) -> cloudwatch.Metric:
    """A window share the queue's jobs print, the largest of its jobs in each period (Maximum: one input-bound job
    among compute-bound ones is not averaged away)."""
    return cloudwatch.Metric(namespace=GOODPUT_NAMESPACE, metric_name=name, dimensions_map={"Queue": queue_name},
                             statistic="Maximum", period=Duration.seconds(METRIC_WINDOW_SECONDS), unit=None)


def input_bound_fix(entry: gpu_catalog.GpuInstanceType) -> str:
    settings = loader_settings_for(entry.name)
    return (f"Fix for {entry.name}: DataLoader(num_workers={settings.num_workers}, prefetch_factor="
            f"{settings.prefetch_factor}, pin_memory={settings.pin_memory}, persistent_workers=True) per GPU process "
            "(ml_platform_job.goodput.loader_settings_for); datasets over 50 GB preloaded onto EBS (dataset_volumes); "
            "images decoded on the GPU (NVIDIA DALI) where the CPU decodes them.")


def validate_goodput_props(construct: str, *, input_bound_percent: Optional[float],
                           checkpoint_bound_percent: Optional[float], bound_minutes: int) -> int:
    """ValidationError naming the prop unless the thresholds are percentages (or None: that alarm off) and
    ``bound_minutes`` whole metric windows; returns the number of windows."""
    for prop, value, low, high in (("input_bound_percent", input_bound_percent, 1, 99),
                                   ("checkpoint_bound_percent", checkpoint_bound_percent, 1, 99)):
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                      and low <= value <= high):
            raise ValidationError(construct, prop, value, f"a percentage from {low} to {high}, or None (no alarm)",
                                  f"set {prop} to e.g. {INPUT_BOUND_PERCENT if prop.startswith('input') else CHECKPOINT_BOUND_PERCENT}")
    window_minutes = METRIC_WINDOW_SECONDS // 60
    if not (isinstance(bound_minutes, int) and bound_minutes % window_minutes == 0
            and window_minutes <= bound_minutes <= 24 * 60):
        raise ValidationError(construct, "bound_minutes", bound_minutes,
                              f"a multiple of {window_minutes} minutes (the jobs' metric window), up to 1440",
                              f"set bound_minutes to e.g. {BOUND_MINUTES}")
    return bound_minutes // window_minutes


def goodput_alarms(scope: Construct, *, queue_name: str, instance_types: Sequence[str],
                   input_bound_percent: Optional[float] = INPUT_BOUND_PERCENT,
                   checkpoint_bound_percent: Optional[float] = CHECKPOINT_BOUND_PERCENT,
                   bound_minutes: int = BOUND_MINUTES, construct: str = "TrainingQueue"
                   ) -> tuple[Optional[cloudwatch.Alarm], Optional[cloudwatch.Alarm]]:
    """The input-bound and checkpoint-bound alarms of a queue (None for a threshold of None: that alarm is off);
    both treat missing data as not breaching (no job stepping is no waste of this kind: idle is the GPU alarms')."""
    periods = validate_goodput_props(construct, input_bound_percent=input_bound_percent,
                                     checkpoint_bound_percent=checkpoint_bound_percent, bound_minutes=bound_minutes)
    entry = gpu_catalog.lookup(instance_types[0]) if instance_types else None
    fix = input_bound_fix(entry) if entry else ("Fix: ml_platform_job.goodput.loader_settings_for(<instance type>) gives "
                                                "the loader settings for an instance.")
    def alarm(id: str, metric_name: str, threshold: Optional[float], description: str) -> Optional[cloudwatch.Alarm]:
        if threshold is None:  # that alarm is off
            return None
        return cloudwatch.Alarm(
            scope, id, metric=goodput_metric(queue_name, metric_name), threshold=threshold,
            evaluation_periods=periods, datapoints_to_alarm=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING, alarm_description=description)

    input_bound = alarm("InputBoundAlarm", "DataWaitShare", input_bound_percent, (
        f"Training queue {queue_name}: a job waited on its input pipeline over {input_bound_percent:g}% of its step "
        f"time for {bound_minutes} minutes. {fix}") if input_bound_percent is not None else "")
    checkpoint_bound = alarm("CheckpointBoundAlarm", "CheckpointShare", checkpoint_bound_percent, (
        f"Training queue {queue_name}: a job spent over {checkpoint_bound_percent:g}% of its time saving checkpoints "
        f"for {bound_minutes} minutes. Fix: save less often (the interval should keep saves under a tenth of the time "
        "between them), or save asynchronously (torch.distributed.checkpoint.async_save) so steps go on during the "
        "write.") if checkpoint_bound_percent is not None else "")
    return input_bound, checkpoint_bound


def goodput_widget(queue_name: str) -> cloudwatch.GraphWidget:
    """The dashboard's goodput chart: the largest window share of the queue's jobs."""
    return cloudwatch.GraphWidget(
        title=f"{queue_name}: productive, data wait and checkpoint shares (%, largest job)", width=12,
        left=[goodput_metric(queue_name, name) for name in ("ProductiveShare", "DataWaitShare", "CheckpointShare")],
        left_y_axis=cloudwatch.YAxisProps(min=0, max=100))
