"""Job progress metrics (job_metrics) and what a Batch job really cost (ml_platform_constructs.advice.job_cost), on hand-written
records."""

from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ml_platform_constructs import JOB_NAMESPACE
from ml_platform_job.job_metrics import NAMESPACE, JobMetrics, batch_job_id, job_id_from_environment
from ml_platform_constructs.advice import job_cost as jc
from ops import job_cost as app_job_cost

PRICES = {"on_demand_hourly": {"g6e.xlarge": 2.0, "g6e.12xlarge": 10.0, "p4d.24xlarge": 20.0},
          "spot_discount": {"g6e": 0.5, "p4d": 0.6}}
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
ARN_A = "arn:aws:ecs:us-east-1:111111111111:container-instance/batch-spot/aaaa"
ARN_B = "arn:aws:ecs:us-east-1:111111111111:container-instance/batch-spot/bbbb"


def ms(hours: float) -> int:
    return int((T0 + timedelta(hours=hours)).timestamp() * 1000)


def interrupted_job(status="SUCCEEDED", gpus="1"):
    # attempt 1: 2 h on Spot until the host went; attempt 2: 3.5 h to the end
    job = {"jobId": "job-1", "jobName": "resnet", "status": status,
           "container": {"resourceRequirements": [{"type": "GPU", "value": gpus}], "containerInstanceArn": ARN_B},
           "attempts": [
               {"container": {"containerInstanceArn": ARN_A}, "startedAt": ms(0), "stoppedAt": ms(2),
                "statusReason": "Host EC2 (instance i-0abc) terminated."},
               {"container": {"containerInstanceArn": ARN_B}, "startedAt": ms(2.25), "stoppedAt": ms(5.75),
                "statusReason": "Essential container in task exited"}]}
    return job


# --- job_metrics --------------------------------------------------------------------------------------------

class Recorder:
    def __init__(self):
        self.calls = []

    def put_metric_data(self, **kwargs):
        self.calls.append(kwargs)


def test_metrics_use_the_fleet_namespace_its_role_may_write():
    assert NAMESPACE == JOB_NAMESPACE


def test_report_sends_accuracy_and_tokens_with_the_job_id():
    recorder = Recorder()
    JobMetrics("job-1", cloudwatch=recorder).report(validation_accuracy=92.3, tokens=4096, timestamp=T0)
    (call,) = recorder.calls
    assert call["Namespace"] == "MLPlatform/Training"
    assert [(d["MetricName"], d["Value"], d["Unit"]) for d in call["MetricData"]] == [
        ("ValidationAccuracy", 92.3, "None"), ("TokensProcessed", 4096.0, "Count")]
    assert all(d["Dimensions"] == [{"Name": "JobId", "Value": "job-1"}] for d in call["MetricData"])


def test_job_id_from_batch_drops_the_node_suffix_and_falls_back_to_the_platform_variable():
    assert job_id_from_environment({"AWS_BATCH_JOB_ID": "abc#3"}) == "abc"
    assert job_id_from_environment({"ML_PLATFORM_JOB_ID": "fleet-run-7"}) == "fleet-run-7"
    assert job_id_from_environment({"AWS_BATCH_JOB_ID": "abc", "ML_PLATFORM_JOB_ID": "fleet-run-7"}) == "abc"
    assert (batch_job_id({"AWS_BATCH_JOB_ID": "abc#0"}), batch_job_id({"ML_PLATFORM_JOB_ID": "x"})) == ("abc", None)
    with pytest.raises(ValueError, match="neither AWS_BATCH_JOB_ID nor ML_PLATFORM_JOB_ID"):
        JobMetrics(cloudwatch=Recorder(), env={})


@pytest.mark.parametrize("kwargs,message", [
    ({"validation_accuracy": 0.92e3}, "a percentage from 0 to 100"),
    ({"tokens": -1}, "tokens=-1: a count since the previous report"),
    ({}, "needs validation_accuracy, tokens or samples"),
])
def test_report_rejects_values_that_would_mislead(kwargs, message):
    recorder = Recorder()
    with pytest.raises(ValueError, match=message):
        JobMetrics("job-1", cloudwatch=recorder).report(**kwargs)
    assert recorder.calls == []


def test_cloudwatch_accepts_the_report_and_job_cost_reads_it_back():
    with mock_aws():
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        now = datetime.now(timezone.utc).replace(microsecond=0)
        metrics = JobMetrics("job-9", cloudwatch=cloudwatch)
        metrics.report(validation_accuracy=84.7, timestamp=now - timedelta(minutes=50))
        metrics.report(tokens=1_000_000, timestamp=now - timedelta(minutes=30))
        metrics.report(validation_accuracy=92.3, tokens=500_000, timestamp=now - timedelta(minutes=10))
        result = jc.progress(cloudwatch, "job-9", now - timedelta(hours=1), now, now)
    assert result == jc.Progress(accuracy_start=84.7, accuracy_end=92.3, tokens=1_500_000, samples=0)


# --- job_cost -------------------------------------------------------------------------------------------------

def test_every_attempt_is_paid_at_its_instance_and_lifecycle():
    instances = {ARN_A: ("g6e.xlarge", "spot"), ARN_B: ("g6e.xlarge", "on-demand")}
    cost = jc.job_cost(interrupted_job(), instances, PRICES,
                       progress=jc.Progress(accuracy_start=84.7, accuracy_end=92.3, tokens=0))
    first, second = cost.attempts
    assert (first.hours, first.usd_per_hour, first.usd) == (2.0, 1.0, 2.0)  # 2 h x 2.0 x (1 - 0.5)
    assert (second.hours, second.usd_per_hour, second.usd) == (3.5, 2.0, 7.0)
    assert cost.usd == 9.0 and cost.instance_hours == 5.5
    assert cost.accuracy_points == pytest.approx(7.6)
    assert cost.usd_per_accuracy_point == pytest.approx(9.0 / 7.6)  # 1.18 USD per point
    assert cost.usd_per_million_tokens is None
    assert "terminated" in first.status_reason


def test_cost_per_million_tokens_and_gpu_share():
    # the job asked for 2 of g6e.12xlarge's 4 GPUs: half the instance
    job = interrupted_job(gpus="2")
    cost = jc.job_cost(job, {ARN_A: ("g6e.12xlarge", "spot"), ARN_B: ("g6e.12xlarge", "spot")}, PRICES,
                       progress=jc.Progress(tokens=45_000_000))
    assert [a.gpu_share for a in cost.attempts] == [0.5, 0.5]
    assert cost.usd == pytest.approx((2 + 3.5) * 10.0 * 0.5 * 0.5)  # 13.75
    assert cost.usd_per_million_tokens == pytest.approx(13.75 / 45)
    assert cost.usd_per_accuracy_point is None


def test_a_running_job_counts_its_current_attempt_until_now():
    job = interrupted_job(status="RUNNING")
    job["attempts"] = job["attempts"][:1]
    job["startedAt"] = ms(2.25)
    cost = jc.job_cost(job, {ARN_A: ("p4d.24xlarge", "spot"), ARN_B: ("p4d.24xlarge", "spot")}, PRICES,
                       now=T0 + timedelta(hours=3.25))
    assert [a.hours for a in cost.attempts] == [2.0, 1.0]
    assert cost.attempts[1].status_reason == "still running"
    assert cost.usd == pytest.approx(3.0 * 20.0 * 0.4 / 8)  # 1 of p4d's 8 GPUs


def test_no_accuracy_gain_has_no_cost_per_point():
    cost = jc.job_cost(interrupted_job(), {ARN_A: ("g6e.xlarge", "spot"), ARN_B: ("g6e.xlarge", "spot")}, PRICES,
                       progress=jc.Progress(accuracy_start=91.0, accuracy_end=90.5))
    assert cost.accuracy_points == pytest.approx(-0.5) and cost.usd_per_accuracy_point is None
    assert "no accuracy gained" in jc.format_cost(cost)


def test_unknown_instance_fails_with_the_fix():
    with pytest.raises(KeyError, match="pass --instance-type and --lifecycle"):
        jc.job_cost(interrupted_job(), {ARN_A: ("g6e.xlarge", "spot")}, PRICES)


def test_progress_from_metric_data_orders_by_time():
    results = [{"Id": "accuracy", "Timestamps": [T0 + timedelta(hours=2), T0], "Values": [92.0, 80.0]},
               {"Id": "tokens", "Timestamps": [T0, T0], "Values": [10.0, 5.0]}]
    assert jc.progress_from_metric_data(results) == jc.Progress(80.0, 92.0, 15.0, 0)


@pytest.mark.parametrize("days,period", [(1, 60), (20, 300), (100, 3600)])
def test_metric_period_follows_cloudwatch_retention(days, period):
    assert jc.metric_period(T0, T0 + timedelta(days=days)) == period


def test_gather_makes_the_documented_calls_and_prices_the_job():
    batch = boto3.client("batch", region_name="us-east-1")
    ecs = boto3.client("ecs", region_name="us-east-1")
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    now = T0 + timedelta(hours=6)
    with Stubber(batch) as b, Stubber(ecs) as e, Stubber(cloudwatch) as c:
        b.add_response("describe_jobs", {"jobs": [{**interrupted_job(), "jobQueue": "q", "jobDefinition": "d",
                                                   "startedAt": ms(0)}]}, {"jobs": ["job-1"]})
        b.add_response("describe_compute_environments", {"computeEnvironments": [
            {"computeEnvironmentName": "spot", "computeEnvironmentArn": "arn:ce/spot",
             "ecsClusterArn": "arn:aws:ecs:us-east-1:111111111111:cluster/batch-spot",
             "computeResources": {"type": "SPOT", "maxvCpus": 256, "subnets": []}}]}, {})
        for arn, kind in ((ARN_A, "g6e.xlarge"), (ARN_B, "g6e.12xlarge")):
            e.add_response("describe_container_instances", {"containerInstances": [
                {"containerInstanceArn": arn, "attributes": [{"name": "ecs.instance-type", "value": kind}]}]},
                {"cluster": "arn:aws:ecs:us-east-1:111111111111:cluster/batch-spot", "containerInstances": [arn]})
        c.add_response("get_metric_data", {"MetricDataResults": [
            {"Id": "accuracy", "Timestamps": [T0, T0 + timedelta(hours=5)], "Values": [84.7, 92.3]},
            {"Id": "tokens", "Timestamps": [], "Values": []}, {"Id": "samples", "Timestamps": [], "Values": []}]})
        cost = jc.gather("job-1", {"batch": batch, "ecs": ecs, "cloudwatch": cloudwatch}, now)
    assert [(a.instance_type, a.lifecycle) for a in cost.attempts] == [("g6e.xlarge", "spot"), ("g6e.12xlarge", "spot")]
    # shipped price table: g6e.xlarge 1.861, g6e.12xlarge 10.49264, both at the g6e discount 0.31; 1 of 4 GPUs on the second
    expected = 2 * 1.861 * 0.69 + 3.5 * 10.49264 * 0.69 * 0.25
    assert cost.usd == pytest.approx(expected)
    assert cost.usd_per_accuracy_point == pytest.approx(expected / 7.6)


def test_main_rejects_half_an_override(capsys):
    with pytest.raises(SystemExit) as done:
        app_job_cost.main(["dev", "job-1", "--instance-type", "g6e.xlarge"])
    assert done.value.code == 2  # a bad argument
    assert "--instance-type and --lifecycle go together" in capsys.readouterr().err
