"""A queue's goodput alarms: they fire on a job that waits on its input (or its checkpoints) and stay quiet on a
compute-bound one. The job side is runtime.goodput.PhaseClock's embedded-metric lines; the alarm side is the
template; between them, CloudWatch's rule (Maximum per period, N of N periods over the threshold)."""

import io
import json

import pytest
from aws_cdk.assertions import Match

from ml_platform_constructs.errors import ValidationError
from ml_platform_job.goodput import GOODPUT_NAMESPACE, METRIC_WINDOW_SECONDS, PhaseClock
from ml_platform_constructs.training.goodput_alarms import goodput_alarms, goodput_widget


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from aws_cdk import aws_cloudwatch as cloudwatch

    stack = Stack(App(outdir=str(tmp_path_factory.mktemp("goodput"))), "Test")
    goodput_alarms(stack, queue_name="training", instance_types=["g5.2xlarge", "g5.4xlarge"])
    cloudwatch.Dashboard(stack, "Dashboard", widgets=[[goodput_widget("training")]])
    return Template.from_stack(stack)


def alarm(template, name):
    return next(r["Properties"] for logical, r in template.find_resources("AWS::CloudWatch::Alarm").items()
                if logical.startswith(name))


def test_the_alarms_watch_the_largest_job_share_for_15_minutes(template):
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": GOODPUT_NAMESPACE, "MetricName": "DataWaitShare", "Statistic": "Maximum", "Period": 300,
        "Dimensions": [{"Name": "Queue", "Value": "training"}], "Threshold": 30, "EvaluationPeriods": 3,
        "DatapointsToAlarm": 3, "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching"})
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "CheckpointShare", "Threshold": 10, "EvaluationPeriods": 3})


def test_the_input_bound_alarm_says_the_loader_settings_for_the_queues_instances(template):
    description = alarm(template, "InputBoundAlarm")["AlarmDescription"]
    # g5.2xlarge: 8 vCPUs, one GPU, 32 GiB: 70% of 8 is 5 workers; pinned memory off at 32 GiB
    assert "Fix for g5.2xlarge: DataLoader(num_workers=5, prefetch_factor=2, pin_memory=False" in description
    assert "async_save" in alarm(template, "CheckpointBoundAlarm")["AlarmDescription"]


def breaches(template, name, documents):
    """CloudWatch's decision on the emitted windows: ALARM when the last N periods' Maximum exceed the threshold."""
    props = alarm(template, name)
    values = [d[props["MetricName"]] for d in documents if props["MetricName"] in d]
    periods, threshold = props["EvaluationPeriods"], props["Threshold"]
    return any(all(v > threshold for v in values[i:i + periods]) for i in range(len(values) - periods + 1))


def stand_in_job(*, wait_per_batch, compute_per_batch, windows=4, save_every=None, save_seconds=0.0):
    """A job stepping for ``windows`` metric windows with a fake clock; returns the documents it printed."""
    now = [0.0]
    clock = PhaseClock(now=lambda: now[0], wall=lambda: 1_700_000_000 + now[0])
    out = io.StringIO()

    def loader():
        while True:
            now[0] += wait_per_batch
            yield None

    next_window, batches = METRIC_WINDOW_SECONDS, 0
    for _ in clock.batches(loader()):
        with clock.step():
            now[0] += compute_per_batch
        batches += 1
        if save_every and batches % save_every == 0:
            with clock.phase("checkpoint_save"):
                now[0] += save_seconds
            clock.checkpoint_saved()
        if now[0] >= next_window:
            clock.emit("training", stream=out)
            next_window += METRIC_WINDOW_SECONDS
            if next_window > windows * METRIC_WINDOW_SECONDS:
                break
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_it_fires_on_an_input_bound_job_and_not_on_a_compute_bound_one(template):
    input_bound = stand_in_job(wait_per_batch=0.6, compute_per_batch=0.4)  # 60% of step time waiting
    compute_bound = stand_in_job(wait_per_batch=0.02, compute_per_batch=0.4)  # 5%
    assert input_bound[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == GOODPUT_NAMESPACE
    assert input_bound[0]["DataWaitShare"] == pytest.approx(60, abs=1)
    assert breaches(template, "InputBoundAlarm", input_bound)
    assert not breaches(template, "InputBoundAlarm", compute_bound)
    # Under the threshold for one window of three: no alarm (a slow epoch start is not an input-bound job).
    assert not breaches(template, "InputBoundAlarm", [{"DataWaitShare": 60}, {"DataWaitShare": 10},
                                                       {"DataWaitShare": 60}, {"DataWaitShare": 60}])


def test_it_fires_on_a_checkpoint_bound_job_and_not_on_one_that_saves_now_and_then(template):
    heavy = stand_in_job(wait_per_batch=0.01, compute_per_batch=0.5, save_every=100, save_seconds=15)  # 15 s of 65
    light = stand_in_job(wait_per_batch=0.01, compute_per_batch=0.5, save_every=1000, save_seconds=5)
    assert breaches(template, "CheckpointBoundAlarm", heavy)
    assert not breaches(template, "CheckpointBoundAlarm", light)


@pytest.mark.parametrize("kwargs, message", [
    ({"input_bound_percent": 0}, "input_bound_percent=0 is invalid: a percentage from 1 to 99"),
    ({"checkpoint_bound_percent": 150}, "checkpoint_bound_percent=150 is invalid: a percentage from 1 to 99"),
    ({"bound_minutes": 7}, "bound_minutes=7 is invalid: a multiple of 5 minutes"),
])
def test_thresholds_outside_their_range_fail_naming_the_prop(kwargs, message):
    from aws_cdk import App, Stack

    with pytest.raises(ValidationError, match=message):
        goodput_alarms(Stack(App(), "Test"), queue_name="q", instance_types=["g5.xlarge"], **kwargs)


def test_the_dashboard_widget_charts_the_three_shares(template):
    body = json.dumps(template.find_resources("AWS::CloudWatch::Dashboard"))
    assert "training: productive, data wait and checkpoint shares" in body
    assert all(name in body for name in ("ProductiveShare", "DataWaitShare", "CheckpointShare"))
