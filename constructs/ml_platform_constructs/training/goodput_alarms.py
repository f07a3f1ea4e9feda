"""A training queue's goodput alarms: a job that waits on its input pipeline, or on its checkpoint saves, for
longer than it should. The metrics are the ones the job-contract helper prints (ml_platform_job.goodput.PhaseClock,
embedded metric format, dimension Queue): every minute, the shares of the job's trailing ``bound_minutes`` window,
a phase still in progress counted up to then (a stalled loader reads as 100% data wait, not as silence). The
input-bound alarm's description carries the DataLoader settings of each of the queue's instance types.

The alarms' shape, replayed against the job's own lines in tests/unit/test_goodput_alarm_replay.py:

- Period 5 minutes, statistic Maximum: the largest job's share in each period (one input-bound job among
  compute-bound ones is not averaged away). A job's own lines are smooth already: its data wait is over the
  trailing window, its checkpoint share over whole save intervals (saves of d seconds every C read d/C at any
  moment, never the one-save-or-two of a bare window), so the peak of its five lines is its level.
- ``bound_minutes`` / 5 periods (N), of which N - 1 must breach (M, at least 1): one period whose lines came late
  or not at all does not hold the alarm back. CloudWatch's EMF alarm page suggests M of N for such data:
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Alarms.html
- Missing data not breaching: no line is no job running (a job prints from its first full window on, while it is
  blocked too). How CloudWatch fills missing points, and M of N:
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html
"""

from __future__ import annotations

from typing import Optional, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from ..errors import ValidationError
from ml_platform_job.goodput import GOODPUT_NAMESPACE, loader_settings_for
from ml_platform_job.phase_clock import CHECKPOINT_BOUND_ENV, INPUT_BOUND_ENV, WINDOW_ENV

# The defaults: data wait over 30% of step time, or checkpoint saves over 10% of wall time, over 30 minutes: at 15
# minutes healthy jobs (restarts, long evaluations, varying saves) raised 0.086 false alarms per job-day, about 10
# a month for a queue of 4 jobs; at 30, none in 500 simulated job-days, for twice the detection time
# (./platform bench goodput-alarms; docs/BENCHMARKS.md).
INPUT_BOUND_PERCENT = 30
CHECKPOINT_BOUND_PERCENT = 10
BOUND_MINUTES = 30
ALARM_PERIOD_MINUTES = 5
# An alarm's description: at most 1024 characters (PutMetricAlarm's AlarmDescription length constraint):
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
DESCRIPTION_LIMIT = 1024


def goodput_metric(queue_name: str, name: str) -> cloudwatch.Metric:
    """A share the queue's jobs print, the largest of its jobs' lines in each 5-minute period."""
    return cloudwatch.Metric(namespace=GOODPUT_NAMESPACE, metric_name=name, dimensions_map={"Queue": queue_name},
                             statistic="Maximum", period=Duration.minutes(ALARM_PERIOD_MINUTES), unit=None)


def datapoints_to_alarm(periods: int) -> int:
    """M of N: all periods but one (at least one) must breach."""
    return max(1, periods - 1)


def goodput_environment(*, input_bound_percent: Optional[float] = INPUT_BOUND_PERCENT,
                        checkpoint_bound_percent: Optional[float] = CHECKPOINT_BOUND_PERCENT,
                        bound_minutes: int = BOUND_MINUTES) -> dict[str, str]:
    """The variables that tell a job its window and the alarms' thresholds (a threshold of None: "off", the job says
    no fix for that alarm either)."""
    def percent(value: Optional[float]) -> str:
        return "off" if value is None else f"{value:g}"

    return {WINDOW_ENV: str(bound_minutes * 60), INPUT_BOUND_ENV: percent(input_bound_percent),
            CHECKPOINT_BOUND_ENV: percent(checkpoint_bound_percent)}


def _loader_fix(instance_type: str) -> str:
    try:
        settings = loader_settings_for(instance_type)
    except ValueError:
        return f"Fix for {instance_type}: loader_settings(vcpus, gpus, memory_gib) of its shape"
    return (f"Fix for {instance_type}: DataLoader(num_workers={settings.num_workers}, prefetch_factor="
            f"{settings.prefetch_factor}, pin_memory={settings.pin_memory})")


def input_bound_description(queue_name: str, instance_types: Sequence[str], percent: float, bound_minutes: int,
                            periods: int) -> str:
    """The input-bound alarm's text: the DataLoader settings of each of the queue's instance types, under
    DESCRIPTION_LIMIT characters (types past what fits are named with the call that gives theirs)."""
    head = (f"Training queue {queue_name}: a job waited on its input pipeline over {percent:g}% of its step time "
            f"over its trailing {bound_minutes} minutes, in {datapoints_to_alarm(periods)} of {periods} 5-minute "
            "periods; its log says the fix too. ")
    tail = (". All with persistent_workers=True, per GPU process (ml_platform_job.goodput.loader_settings_for); "
            "datasets over 50 GB preloaded onto EBS (dataset_volumes); images decoded on the GPU (NVIDIA DALI) where "
            "the CPU decodes them.")
    fixes = [_loader_fix(t) for t in instance_types] or [
        "Fix: ml_platform_job.goodput.loader_settings_for(<instance type>) gives the loader settings"]
    for shown in range(len(fixes), 0, -1):
        rest = len(fixes) - shown
        more = f"; {rest} more types: loader_settings_for(<type>)" if rest else ""
        text = head + "; ".join(fixes[:shown]) + more + tail
        if len(text) <= DESCRIPTION_LIMIT:
            return text
    return (head + fixes[0] + tail)[:DESCRIPTION_LIMIT]


def validate_goodput_props(construct: str, *, input_bound_percent: Optional[float],
                           checkpoint_bound_percent: Optional[float], bound_minutes: int) -> int:
    """ValidationError naming the prop unless the thresholds are percentages (or None: that alarm off) and
    ``bound_minutes`` whole alarm periods; returns the number of periods."""
    for prop, value, low, high in (("input_bound_percent", input_bound_percent, 1, 99),
                                   ("checkpoint_bound_percent", checkpoint_bound_percent, 1, 99)):
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                      and low <= value <= high):
            example = INPUT_BOUND_PERCENT if prop.startswith("input") else CHECKPOINT_BOUND_PERCENT
            raise ValidationError(construct, prop, value, f"a percentage from {low} to {high}, or None (no alarm)",
                                  f"set {prop} to e.g. {example}")
    if not (isinstance(bound_minutes, int) and not isinstance(bound_minutes, bool)
            and bound_minutes % ALARM_PERIOD_MINUTES == 0 and ALARM_PERIOD_MINUTES <= bound_minutes <= 24 * 60):
        raise ValidationError(construct, "bound_minutes", bound_minutes,
                              f"a multiple of {ALARM_PERIOD_MINUTES} minutes (the alarms' period), up to 1440",
                              f"set bound_minutes to e.g. {BOUND_MINUTES}")
    return bound_minutes // ALARM_PERIOD_MINUTES


def goodput_alarms(scope: Construct, *, queue_name: str, instance_types: Sequence[str],
                   input_bound_percent: Optional[float] = INPUT_BOUND_PERCENT,
                   checkpoint_bound_percent: Optional[float] = CHECKPOINT_BOUND_PERCENT,
                   bound_minutes: int = BOUND_MINUTES, construct: str = "TrainingQueue"
                   ) -> tuple[Optional[cloudwatch.Alarm], Optional[cloudwatch.Alarm]]:
    """The input-bound and checkpoint-bound alarms of a queue (None for a threshold of None: that alarm is off); see
    the module's docstring for their shape. The jobs must get the same window and thresholds
    (``goodput_environment``, in the queue's job definitions)."""
    periods = validate_goodput_props(construct, input_bound_percent=input_bound_percent,
                                     checkpoint_bound_percent=checkpoint_bound_percent, bound_minutes=bound_minutes)

    def alarm(id: str, metric_name: str, threshold: float, description: str) -> cloudwatch.Alarm:
        return cloudwatch.Alarm(
            scope, id, metric=goodput_metric(queue_name, metric_name), threshold=threshold,
            evaluation_periods=periods, datapoints_to_alarm=datapoints_to_alarm(periods),
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING, alarm_description=description)

    input_bound = checkpoint_bound = None
    if input_bound_percent is not None:
        input_bound = alarm("InputBoundAlarm", "DataWaitShare", input_bound_percent, input_bound_description(
            queue_name, instance_types, input_bound_percent, bound_minutes, periods))
    if checkpoint_bound_percent is not None:
        checkpoint_bound = alarm("CheckpointBoundAlarm", "CheckpointShare", checkpoint_bound_percent, (
            f"Training queue {queue_name}: a job spent over {checkpoint_bound_percent:g}% of its time saving "
            f"checkpoints over its last save intervals (at least {bound_minutes} minutes), in "
            f"{datapoints_to_alarm(periods)} of {periods} 5-minute periods; its log says the fix too. Fix: save less "
            "often (the interval should keep saves under a tenth of the time between them), or save asynchronously "
            "(torch.distributed.checkpoint.async_save) so steps go on during the write."))
    return input_bound, checkpoint_bound


def goodput_widget(queue_name: str) -> cloudwatch.GraphWidget:
    """The dashboard's goodput chart: the largest share of the queue's jobs."""
    return cloudwatch.GraphWidget(
        title=f"{queue_name}: productive, data wait and checkpoint shares (%, largest job)", width=12,
        left=[goodput_metric(queue_name, name) for name in ("ProductiveShare", "DataWaitShare", "CheckpointShare")],
        left_y_axis=cloudwatch.YAxisProps(min=0, max=100))
