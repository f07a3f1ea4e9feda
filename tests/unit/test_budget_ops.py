"""Budget operations: status and resume against moto, tag activation with a stubbed Cost Explorer."""


import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ml_platform_constructs.operations.cli import budget_status
from ml_platform_constructs.runtime.handlers import budget_guard
from ops import budget as budget_ops


@pytest.fixture
def autoscaling(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        ec2 = boto3.client("ec2")
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        ec2.create_launch_template(LaunchTemplateName="fleet-lt", LaunchTemplateData={"ImageId": "ami-12c6146b"})
        client = boto3.client("autoscaling")
        client.create_auto_scaling_group(
            AutoScalingGroupName="dev-training", MinSize=0, MaxSize=2, DesiredCapacity=0, VPCZoneIdentifier=subnet,
            LaunchTemplate={"LaunchTemplateName": "fleet-lt"},
            Tags=[{"Key": "ml-platform:fleet", "Value": "training", "PropagateAtLaunch": True},
                  {"Key": "ml-platform:budget-scope", "Value": "dev", "PropagateAtLaunch": True}])
        yield client


def test_status_shows_running_then_stopped_with_the_reason(autoscaling):
    assert budget_status(autoscaling, "dev") == ["training: running, desired 0"]
    budget_guard.stop(autoscaling, boto3.client("sagemaker"), "dev", "over budget", budget_guard.datetime.now(
        budget_guard.timezone.utc))
    assert budget_status(autoscaling, "dev")[0].startswith("training: STOPPED (")
    assert "over budget" in budget_status(autoscaling, "dev")[0]


def test_status_of_an_environment_without_fleets(autoscaling):
    assert budget_status(autoscaling, "prod") == ["no fleets or queues governed by budget scope 'prod'"]


def test_activate_tags_requests_the_platform_tags():
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    with Stubber(ce) as stub:
        stub.add_response("update_cost_allocation_tags_status", {"Errors": [{"TagKey": "component", "Code": "TagKeysNotFound",
                                                                             "Message": "no such tag yet"}]},
                          {"CostAllocationTagsStatus": [{"TagKey": k, "Status": "Active"} for k in budget_ops.COST_TAGS]})
        lines = budget_ops.activate_tags(ce)
    assert lines[0] == "environment: activation requested"
    assert lines[-1] == "component: FAILED: no such tag yet"


# --- what-if: the guard's own decision, without AWS ---------------------------------------------------------------

def what_if_json(capsys, *args):
    import json

    assert budget_ops.main(["what-if", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_what_if_the_shipped_prod_fleet_runs_at_max_on_day_one_warns_and_does_not_stop(capsys):
    result = what_if_json(capsys, "prod", "--on-demand", "g6e.24xlarge=1", "--running", "g6e.24xlarge=3",
                          "--now", "2026-12-01T00:15:00+00:00")
    assert {"decision", "estimated_to_date", "projected_month", "stop_line"} <= set(result)
    assert result["decision"] == "warn" and result["stop_line"] == 10_800 and result["region_priced"] == "us-west-2"
    assert result["estimated_to_date"] == 0 and result["projected_month"] > 10_800
    assert result["crossing_date"].startswith("2026-12-")


def test_what_if_spend_has_reached_the_line_stops(capsys):
    result = what_if_json(capsys, "prod", "--actual", "10700", "--budget-age-hours", "12",
                          "--running", "g6e.24xlarge=4@12", "--now", "2026-12-20T12:00:00Z")
    assert result["decision"] == "stop" and result["estimated_to_date"] >= 10_800
    assert result["accrued_since_budget"] > 100  # 12 h of 4 Spot g6e.24xlarge since Budgets' figure


def test_what_if_with_nothing_running_decides_nothing_and_reads_as_text(capsys):
    assert budget_ops.main(["what-if", "dev", "--now", "2026-12-10T00:00:00"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dev at 2026-12-10T00:00:00+00:00 (us-east-1 prices): decision NONE")
    assert "stop line" in out and "1,200.00 USD" in out


def test_what_if_refuses_what_it_cannot_price(capsys):
    with pytest.raises(SystemExit) as done:
        budget_ops.main(["what-if", "prod", "--running", "m5.large=2"])
    assert done.value.code == 2  # a bad argument
    assert "'m5.large' has no price in the us-west-2 table" in capsys.readouterr().err


def test_what_if_refuses_a_capacity_it_cannot_read_as_it_parses(capsys):
    with pytest.raises(SystemExit) as done:
        budget_ops.main(["what-if", "prod", "--running", "g6e.24xlarge"])
    assert done.value.code == 2
    assert capsys.readouterr().err == ("error: ./platform budget: argument --running: 'g6e.24xlarge': expected "
                                       "TYPE=COUNT[@HOURS] (e.g. --running g5.xlarge=4@2.5: 4 instances that have run "
                                       "2.5 hours) (usage: ./platform budget --help)\n")


def test_status_lists_governed_queues_running_or_stopped():
    from batch_fake import FakeBatch

    batch = FakeBatch()
    tags = {"ml-platform:queue": "training", "ml-platform:budget-scope": "dev"}
    queue = batch.add_queue("dev-training", tags=tags)
    batch.add_job("resnet", queue, "RUNNING", definition=batch.register("train"))
    pending = budget_guard.PendingJobs(Ssm())

    class NoFleets:
        def get_paginator(self, name):
            return type("P", (), {"paginate": lambda self, **kwargs: [{"AutoScalingGroups": []}]})()
    assert budget_status(NoFleets(), "dev", batch, pending=pending) == ["queue training (dev-training): running"]
    budget_guard.stop_queues(batch, pending, "dev", "over budget", budget_guard.datetime.now(budget_guard.timezone.utc))
    lines = budget_status(NoFleets(), "dev", batch, pending=pending)
    assert lines[0].startswith("queue training (dev-training): STOPPED (") and "over budget" in lines[0]
    assert lines[1] == "  1 submission(s) wait for resume: resnet"


class Ssm:
    """Parameter Store as the record of pending jobs uses it."""

    def __init__(self):
        self.parameters = {}

    def put_parameter(self, Name, Value, **kwargs):  # noqa: N803 (boto3 names)
        self.parameters[Name] = Value

    def get_paginator(self, name):
        parameters = self.parameters
        return type("P", (), {"paginate": lambda self, Path, **kwargs: [{"Parameters": [
            {"Name": k, "Value": v} for k, v in parameters.items() if k.startswith(Path + "/")]}]})()


@pytest.mark.parametrize("command", ["status", "resume"])
def test_status_and_resume_read_the_record_of_pending_jobs(command, monkeypatch, capsys):
    """The operator's commands pass Batch, EC2 and Parameter Store to the guard's code (resume submits from the
    record; status shows it and what a stopped queue still runs)."""
    seen = {}

    class Session:
        def client(self, name):
            seen.setdefault("clients", []).append(name)
            return {"sts": type("S", (), {"get_caller_identity": lambda self: {"Arn": "arn:aws:iam::1:user/ops"}})()}.get(
                name, name)
    monkeypatch.setattr(budget_ops, "session_for", lambda env: Session())
    monkeypatch.setattr(budget_ops, "budget_status", lambda *args, **kwargs: seen.update(status=(args, kwargs)) or [])
    monkeypatch.setattr(budget_guard, "resume", lambda *args, **kwargs: seen.update(resume=(args, kwargs)) or {})
    budget_ops.main([command, "dev"])
    args, kwargs = seen[command]
    pending = [a for a in (*args, *kwargs.values()) if isinstance(a, budget_guard.PendingJobs)]
    assert len(pending) == 1 and pending[0].ssm == "ssm" and "batch" in args
    if command == "status":
        assert "ec2" in args
