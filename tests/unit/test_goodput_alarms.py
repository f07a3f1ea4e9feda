"""A queue's goodput alarms as synthesized: their shape (5-minute Maximum, N - 1 of N periods, missing data not
breaching), the fix for each of the queue's instance types in a description under CloudWatch's 1024 characters, the
props' validation, and the job definition's variables that give the jobs the same window and thresholds. Whether
they fire when they must is tests/unit/test_goodput_alarm_replay.py's: it replays the jobs' own lines."""

import json

import pytest

from ml_platform_constructs.errors import ValidationError
from ml_platform_constructs.training.goodput_alarms import (DESCRIPTION_LIMIT, goodput_alarms, goodput_widget,
                                                            input_bound_description)
from ml_platform_constructs.training.queue_jobs import container_environment
from ml_platform_job.goodput import GOODPUT_NAMESPACE
from ml_platform_job.phase_clock import PhaseClock

FIVE_TYPES = ["g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g6e.48xlarge", "p4de.24xlarge"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from aws_cdk import App, Stack
    from aws_cdk import aws_cloudwatch as cloudwatch
    from aws_cdk.assertions import Template

    app = App(outdir=str(tmp_path_factory.mktemp("goodput")))
    stack = Stack(app, "Test")
    goodput_alarms(stack, queue_name="a-queue-name-of-forty-characters-at-most", instance_types=FIVE_TYPES)
    cloudwatch.Dashboard(stack, "Dashboard", widgets=[[goodput_widget("training")]])
    longer = Stack(app, "Longer")
    goodput_alarms(longer, queue_name="training", instance_types=["g5.xlarge"], bound_minutes=30,
                   checkpoint_bound_percent=None)
    return Template.from_stack(stack), Template.from_stack(longer)


def alarm(template, name):
    return next(r["Properties"] for logical, r in template.find_resources("AWS::CloudWatch::Alarm").items()
                if logical.startswith(name))


def test_the_alarms_take_the_largest_jobs_share_in_5_of_6_five_minute_periods(template):
    queue = "a-queue-name-of-forty-characters-at-most"
    for name, metric, threshold in (("InputBoundAlarm", "DataWaitShare", 30), ("CheckpointBoundAlarm",
                                                                                "CheckpointShare", 10)):
        props = alarm(template[0], name)
        assert {k: props[k] for k in ("Namespace", "MetricName", "Statistic", "Period", "Dimensions", "Threshold",
                                      "EvaluationPeriods", "DatapointsToAlarm", "ComparisonOperator",
                                      "TreatMissingData")} == {
            "Namespace": GOODPUT_NAMESPACE, "MetricName": metric, "Statistic": "Maximum", "Period": 300,
            "Dimensions": [{"Name": "Queue", "Value": queue}], "Threshold": threshold, "EvaluationPeriods": 6,
            "DatapointsToAlarm": 5, "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching"}


def test_bound_minutes_sets_the_periods_and_a_threshold_of_none_switches_an_alarm_off(template):
    longer = template[1]
    props = alarm(longer, "InputBoundAlarm")
    assert (props["Period"], props["EvaluationPeriods"], props["DatapointsToAlarm"]) == (300, 6, 5)
    assert "over its trailing 30 minutes, in 5 of 6 5-minute periods" in props["AlarmDescription"]
    assert [p["Properties"]["MetricName"] for p in longer.find_resources("AWS::CloudWatch::Alarm").values()] == [
        "DataWaitShare"]


def test_the_input_bound_alarm_names_each_instance_types_loader_settings_under_1024_characters(template):
    description = alarm(template[0], "InputBoundAlarm")["AlarmDescription"]
    assert len(description) <= DESCRIPTION_LIMIT
    # g5.2xlarge: 8 vCPUs, one GPU, 32 GiB: 70% of 8 is 5 workers; pinned memory off at 32 GiB
    assert "Fix for g5.2xlarge: DataLoader(num_workers=5, prefetch_factor=2, pin_memory=False)" in description
    assert "Fix for g5.xlarge: DataLoader(num_workers=2, prefetch_factor=2, pin_memory=False)" in description
    assert "Fix for p4de.24xlarge: DataLoader(num_workers=8, prefetch_factor=2, pin_memory=True)" in description
    assert all(f"Fix for {t}: DataLoader(" in description for t in FIVE_TYPES)
    assert "persistent_workers=True" in description and "more types" not in description
    checkpoint = alarm(template[0], "CheckpointBoundAlarm")["AlarmDescription"]
    assert "async_save" in checkpoint and len(checkpoint) <= DESCRIPTION_LIMIT


def test_types_past_what_fits_are_named_with_the_call_that_gives_theirs():
    many = FIVE_TYPES + ["g4dn.12xlarge", "g4dn.16xlarge", "g6e.12xlarge", "g6e.24xlarge", "p3dn.24xlarge",
                         "p4d.24xlarge", "p5en.48xlarge", "g6e.16xlarge"]
    text = input_bound_description("a-queue-name-of-forty-characters-at-most", many, 30, 15, 3)
    assert len(text) <= DESCRIPTION_LIMIT
    shown = [t for t in many if f"Fix for {t}: " in text]
    assert shown == many[:len(shown)] and 5 <= len(shown) < len(many)
    assert f"; {len(many) - len(shown)} more types: loader_settings_for(<type>)" in text
    assert "Fix for x9.huge: loader_settings(vcpus, gpus, memory_gib)" in input_bound_description(
        "q", ["x9.huge"], 30, 15, 3)


def test_the_job_definition_gives_the_jobs_the_alarms_window_and_thresholds():
    defaults = container_environment("training", None)
    assert {k: defaults[k] for k in ("ML_PLATFORM_GOODPUT_WINDOW_SECONDS", "ML_PLATFORM_INPUT_BOUND_PERCENT",
                                     "ML_PLATFORM_CHECKPOINT_BOUND_PERCENT")} == {
        "ML_PLATFORM_GOODPUT_WINDOW_SECONDS": "1800", "ML_PLATFORM_INPUT_BOUND_PERCENT": "30",
        "ML_PLATFORM_CHECKPOINT_BOUND_PERCENT": "10"}
    given = container_environment("training", None, 110, input_bound_percent=45.5, checkpoint_bound_percent=None,
                                  bound_minutes=30)
    assert given["ML_PLATFORM_STOP_TIMEOUT_SECONDS"] == "110"
    # the job side reads them back: a 30-minute window (nothing printed before), input-bound past 45.5%, no
    # checkpoint-bound line
    now = [0.0]
    clock = PhaseClock(now=lambda: now[0])
    clock.emit_windows("training", env=given, interval=0)
    assert (clock._window, clock._thresholds) == (1800.0, {"DataWaitShare": 45.5, "CheckpointShare": None})
    now[0] = 1799
    assert clock.publish() is None


@pytest.mark.parametrize("kwargs, message", [
    ({"input_bound_percent": 0}, "input_bound_percent=0 is invalid: a percentage from 1 to 99"),
    ({"checkpoint_bound_percent": 150}, "checkpoint_bound_percent=150 is invalid: a percentage from 1 to 99"),
    ({"bound_minutes": 7}, "bound_minutes=7 is invalid: a multiple of 5 minutes"),
    ({"bound_minutes": 1445}, "bound_minutes=1445 is invalid: a multiple of 5 minutes .*up to 1440"),
])
def test_thresholds_outside_their_range_fail_naming_the_prop(kwargs, message):
    from aws_cdk import App, Stack

    with pytest.raises(ValidationError, match=message):
        goodput_alarms(Stack(App(), "Test"), queue_name="q", instance_types=["g5.xlarge"], **kwargs)


def test_the_dashboard_widget_charts_the_three_shares(template):
    body = json.dumps(template[0].find_resources("AWS::CloudWatch::Dashboard"))
    assert "training: productive, data wait and checkpoint shares" in body
    assert all(name in body for name in ("ProductiveShare", "DataWaitShare", "CheckpointShare"))
