"""The budget guard's Lambda entry point with fleets and training queues together: fleets, instances, Parameter Store
and SNS in moto, AWS Batch in a stateful fake (batch_fake.py: moto's Batch needs Docker)."""

import itertools
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from moto import mock_aws

from batch_fake import FakeBatch
from ml_platform_constructs.operations.cli import budget_status
from ml_platform_constructs.runtime.handlers import budget_guard
from ml_platform_constructs.runtime.handlers.budget_guard import ON_DEMAND, SPOT
from ml_platform_constructs.runtime.handlers.pending_jobs import PENDING_PATH, PendingJobs

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc)
PRICES = {"on_demand_hourly": {"g5.xlarge": 1.0, "g6.xlarge": 0.8}, "spot_discount": {"g5": 0.5, "g6": 0.5}}
KEY = "arn:aws:kms:us-east-1:123456789012:key/guard"


class FakeBudgets:
    def __init__(self, actual):
        self.actual = actual

    def describe_budget(self, AccountId, BudgetName):  # noqa: N803 (boto3 names)
        return {"Budget": {"CalculatedSpend": {"ActualSpend": {"Amount": str(self.actual), "Unit": "USD"}}}}


@pytest.fixture(scope="module")
def emulated():
    """One emulator for the module (client set-up and EC2's default VPC are most of the cost); each test gets an
    environment (budget scope) of its own in it."""
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="testing",
                                        aws_secret_access_key="testing")
        clients = {n: session.client(n) for n in ("ec2", "autoscaling", "ssm", "sns", "sqs", "sagemaker", "cloudwatch")}
        clients["ec2"].create_launch_template(LaunchTemplateName="fleet", LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"})
        yield clients, clients["ec2"].describe_subnets()["Subnets"][0]["SubnetId"], itertools.count(1)


@pytest.fixture
def world(emulated):
    """An environment with a fleet of one instance and a training queue (two compute environments; a running, a
    starting, a waiting and a crashed job; one instance); another environment's queue beside it."""
    shared, subnet, counter = emulated
    env = f"env{next(counter)}"
    ec2, autoscaling, ssm, sns, sqs = (shared[n] for n in ("ec2", "autoscaling", "ssm", "sns", "sqs"))
    tags = {"ml-platform:queue": "training", "ml-platform:budget-scope": env}
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=f"{env}-training", MinSize=0, MaxSize=2, DesiredCapacity=1, VPCZoneIdentifier=subnet,
        LaunchTemplate={"LaunchTemplateName": "fleet"},
        Tags=[{"Key": "ml-platform:budget-scope", "Value": env, "PropagateAtLaunch": True},
              {"Key": "ml-platform:fleet", "Value": "training", "PropagateAtLaunch": True}])
    instance = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="g6.xlarge", MinCount=1, MaxCount=1,
                                 SubnetId=subnet, TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                     {"Key": k, "Value": v} for k, v in tags.items()]}])["Instances"][0]
    ssm.put_parameter(Name=f"/guard/{env}/last-warning", Value="never", Type="String")
    topic = sns.create_topic(Name=f"{env}-alerts")["TopicArn"]
    inbox = sqs.create_queue(QueueName=f"{env}-inbox")["QueueUrl"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=sqs.get_queue_attributes(
        QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])

    batch = FakeBatch()
    spot = batch.add_environment(f"{env}-spot", tags=tags, desired_vcpus=4)
    on_demand = batch.add_environment(f"{env}-od", tags=tags)
    queue = batch.add_queue(f"{env}-training", tags=tags, environments=(spot, on_demand))
    other = batch.add_queue(f"{env}-x-training", tags={**tags, "ml-platform:budget-scope": f"{env}-x"})
    definition = batch.register(f"{env}-train", tags=tags)
    jobs = {name: batch.add_job(name, queue, status, definition=definition, environment=(
                ("ML_PLATFORM_CHECKPOINT_URI", f"s3://b/checkpoints/training/{name}/"),))
            for name, status in (("resnet", "RUNNING"), ("bert", "STARTING"), ("llm", "RUNNABLE"), ("bad", "FAILED"))}
    other_job = batch.add_job("other", other, "RUNNING", definition=definition)
    clients = {**shared, "batch": batch, "budgets": FakeBudgets(0)}
    settings = {"ENVIRONMENT": env, "BUDGET_NAME": "b", "ACCOUNT_ID": "123456789012", "MONTHLY_LIMIT": "1000",
                "STOP_AT_PERCENT": "80", "ALERT_TOPIC_ARN": topic, "WARNING_PARAMETER": f"/guard/{env}/last-warning",
                "RECORD_KEY_ID": KEY, "STOPPED_INSTANCE_GRACE_MINUTES": "10"}

    def messages():
        return [json.loads(m["Body"])["Message"]
                for m in sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages", [])]
    return {"name": env, "clients": clients, "env": settings, "batch": batch, "queue": queue, "other": other,
            "jobs": jobs, "other_job": other_job, "spot": spot, "instance": instance["InstanceId"], "tags": tags,
            "messages": messages, "definition": definition}


BUDGETS_NOTIFICATION = {"Records": [{"Sns": {"Message": "AWS Budget Notification: actual 80% of b"}}]}


def records(world):
    return {entry["request"]["jobName"]: entry
            for entry in PendingJobs(world["clients"]["ssm"]).of_queue(world["queue"])}


def stop(world, at=NOW):
    return budget_guard.handle(BUDGETS_NOTIFICATION, world["clients"], world["env"], at, PRICES)


def resume(world, at=NOW + timedelta(days=1)):
    return budget_guard.handle({"action": "resume", "operator": "ops"}, world["clients"], world["env"], at, PRICES)


def announced(report):
    """The alert a stop with this queue report sends."""
    sent = []

    class Sns:
        def publish(self, **kwargs):
            sent.append(kwargs["Message"])
    budget_guard._announce(Sns(), "topic", {"action": "stop", "environment": "dev", "reason": "line",
                                            "time": NOW.isoformat(), "stopped": [], **report})
    return sent[0]


# --- stop --------------------------------------------------------------------------------------------------------

def test_a_budgets_notification_stops_fleets_and_queues_together(world):
    report = stop(world)
    batch = world["batch"]
    assert [e["fleet"] for e in report["stopped"]] == ["training"]
    assert world["clients"]["autoscaling"].describe_auto_scaling_groups()["AutoScalingGroups"][0]["DesiredCapacity"] == 0
    assert batch.queues[world["queue"]]["state"] == "DISABLED"
    assert {e["state"] for e in batch.environments.values()} == {"DISABLED"}
    ended = {job["jobName"] for job in batch.jobs.values() if job["status"] == "FAILED" and
             job.get("statusReason", "").startswith("ml-platform budget stop 2026-11-29T20:00Z")}
    assert ended == {"resnet", "bert"}  # the waiting job waits; the crashed one is left as it is
    assert report["queues_stopped"] == [{"queue": "training", "job_queue": f"{world['name']}-training", "jobs_ended": 2,
                                         "jobs_waiting": 1}]
    message = world["messages"]()[0]
    assert "stopped fleet training" in message and "stopped training queue training: 2 running job(s)" in message


def test_another_scopes_queue_and_jobs_are_left_alone(world):
    stop(world)
    assert world["batch"].queues[world["other"]]["state"] == "ENABLED"
    assert world["batch"].jobs[world["other_job"]]["status"] == "RUNNING"


def test_each_ended_job_is_recorded_encrypted_as_the_submission_that_runs_it_again(world):
    stop(world)
    kept = records(world)
    assert set(kept) == {"resnet", "bert"} and {e["source"] for e in kept.values()} == {"budget-stop"}
    resnet = kept["resnet"]["request"]
    assert resnet["jobQueue"] == world["queue"] and resnet["jobDefinition"] == world["definition"]
    assert resnet["containerOverrides"]["environment"] == [  # AWS_BATCH_* are Batch's own, refused in a submission
        {"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://b/checkpoints/training/resnet/"}]
    assert resnet["tags"]["ml-platform:budget-resubmission-of"] == world["jobs"]["resnet"]
    parameter = world["clients"]["ssm"].describe_parameters(ParameterFilters=[
        {"Key": "Name", "Values": [kept["resnet"]["parameter"]]}])["Parameters"][0]
    assert parameter["Type"] == "SecureString" and parameter["KeyId"] == KEY
    assert kept["resnet"]["parameter"].startswith(f"{PENDING_PATH}{world['name']}-training/job-")


def test_an_evaluation_is_ended_and_not_recorded_since_the_guard_may_not_submit_it_again(world):
    """Its only submitter is an EvaluationSubmitter (the guard's role is denied the evaluation definition): a record
    would fail at every resume. It is ended and the alert says to evaluate again."""
    batch = world["batch"]
    evaluation = batch.add_job("evaluate-abc-def", world["queue"], "RUNNING", definition=world["definition"],
                               tags={"ml-platform:queue": "training", "ml-platform:job-definition": "evaluation"})
    report = budget_guard.stop_queues(batch, PendingJobs(world["clients"]["ssm"], KEY), world["name"], "line", NOW)
    assert report["evaluations_ended"] == [{"queue": "training", "job": "evaluate-abc-def", "id": evaluation}]
    assert batch.jobs[evaluation]["status"] == "FAILED" and set(records(world)) == {"resnet", "bert"}
    assert (f"ended evaluation evaluate-abc-def ({evaluation}) of queue training, not recorded (only its submitter "
            "runs it): ./platform model evaluate it again after the resume") in announced(report)


def test_an_evaluation_is_known_by_its_definitions_tag_too(world):
    """A job submitted without the job tag (0.13's jobs.submit_evaluation) runs the evaluation definition all the
    same: recorded, it would fail at every resume (the guard is denied that definition)."""
    batch = world["batch"]
    definition = batch.register(f"{world['name']}-evaluate", tags={**world["tags"], "ml-platform:job-definition":
                                                                    "evaluation"})
    evaluation = batch.add_job("evaluate-old", world["queue"], "RUNNING", definition=definition)
    report = budget_guard.stop_queues(batch, PendingJobs(world["clients"]["ssm"], KEY), world["name"], "line", NOW)
    assert [e["id"] for e in report["evaluations_ended"]] == [evaluation] and "evaluate-old" not in records(world)


def test_a_job_that_cannot_be_recorded_is_still_ended_and_reported(world):
    class BrokenSsm:
        def put_parameter(self, **kwargs):
            raise RuntimeError("AccessDenied on ssm:PutParameter")
    report = budget_guard.stop_queues(world["batch"], PendingJobs(BrokenSsm(), KEY), world["name"], "line", NOW)
    assert {j["job"] for j in report["jobs_not_recorded"]} == {"resnet", "bert"}
    assert world["batch"].jobs[world["jobs"]["resnet"]]["status"] == "FAILED"
    assert "NOT recorded, so resume will not run it again: resnet" in announced(report)


def test_a_second_stop_changes_nothing_and_records_nothing_new(world):
    stop(world)
    again = budget_guard.stop_queues(world["batch"], PendingJobs(world["clients"]["ssm"], KEY), world["name"], "line", NOW)
    assert again["queues_stopped"] == [] and again["queues_already_stopped"][0]["queue"] == "training"
    assert len(records(world)) == 2


def test_a_queue_resumed_this_month_is_not_stopped_again(world):
    world["batch"].queues[world["queue"]]["tags"]["ml-platform:budget-resumed"] = "2026-11"
    report = stop(world)
    assert report["queues_resumed_by_operator"] and not [c for c in world["batch"].calls if c[0] == "terminate"]


# --- resume ------------------------------------------------------------------------------------------------------

def test_resume_runs_the_ended_jobs_again_from_the_record_after_batch_has_forgotten_them(world):
    batch = world["batch"]
    stop(world)
    batch.forget_finished()  # days later: ListJobs no longer returns the ended jobs
    assert batch.list_jobs(jobQueue=world["queue"], jobStatus="FAILED")["jobSummaryList"] == []
    report = resume(world)
    submitted = {request["jobName"]: request for request in batch.submitted()}
    assert set(submitted) == {"resnet", "bert"}  # under their names: from their checkpoints
    assert submitted["resnet"]["containerOverrides"]["environment"][0]["value"] == "s3://b/checkpoints/training/resnet/"
    assert submitted["resnet"]["jobDefinition"] == world["definition"]
    assert batch.queues[world["queue"]]["state"] == "ENABLED" and batch.environments[world["spot"]]["state"] == "ENABLED"
    assert batch.queues[world["queue"]]["tags"]["ml-platform:budget-resumed"] == "2026-11"
    assert {e["was"] for e in report["jobs_resubmitted"]} == {world["jobs"]["resnet"], world["jobs"]["bert"]}
    assert records(world) == {}  # each once
    message = world["messages"]()[-1]
    assert "resumed training queue training" in message and "resubmitted resnet" in message


def test_a_second_resume_submits_nothing_again(world):
    stop(world)
    resume(world)
    again = resume(world)
    assert again["jobs_resubmitted"] == [] and len(world["batch"].submitted()) == 2


def test_a_record_already_submitted_by_a_resume_that_died_is_not_submitted_twice(world):
    stop(world)
    pending = PendingJobs(world["clients"]["ssm"])
    entry = records(world)["resnet"]
    queue = world["batch"].describe_job_queues()["jobQueues"][0]
    world["batch"].queues[world["queue"]]["state"] = "ENABLED"
    world["batch"].submit_job(**entry["request"])  # the earlier resume submitted it, then ended before the delete
    done, error = budget_guard.submit_pending(world["batch"], pending, queue, entry)
    assert error is None and done["already"] and len(world["batch"].submitted()) == 1
    assert "resnet" not in records(world)


def test_after_a_deploy_deregistered_the_recorded_revision_resume_uses_the_latest(world):
    stop(world)
    latest = world["batch"].register(f"{world['name']}-train", image="img:2", tags=world["tags"])  # a cdk deploy meanwhile
    report = resume(world)
    assert {r["jobDefinition"] for r in world["batch"].submitted()} == {latest}
    assert {e["definition"] for e in report["jobs_resubmitted"]} == {latest}


def test_a_submission_that_fails_keeps_its_record_for_the_next_resume(world):
    stop(world)
    batch = world["batch"]

    def throttled(request):
        if request["jobName"] == "bert":
            raise RuntimeError("TooManyRequestsException")
    batch.before_submit = throttled
    report = resume(world)
    assert [e["job"] for e in report["jobs_not_resubmitted"]] == ["bert"] and set(records(world)) == {"bert"}
    assert "NOT resubmitted: bert" in world["messages"]()[-1]
    batch.before_submit = None
    assert [e["job"] for e in resume(world)["jobs_resubmitted"]] == ["bert"]


def test_resume_from_the_operators_shell_needs_no_key(world):
    stop(world)
    clients = world["clients"]
    report = budget_guard.resume(clients["autoscaling"], world["name"], "ops", NOW, clients["batch"], PendingJobs(clients["ssm"]))
    assert len(report["jobs_resubmitted"]) == 2


# --- the spend check ------------------------------------------------------------------------------------------------

def test_queue_instances_count_towards_the_line(world):
    ec2 = world["clients"]["ec2"]
    launched = ec2.describe_instances(InstanceIds=[world["instance"]])["Reservations"][0]["Instances"][0]["LaunchTime"]
    at = launched + timedelta(hours=10)  # the fleet's g5 (1 USD/h) and the queue's g6 (0.8 USD/h), 10 h each
    world["clients"]["budgets"] = FakeBudgets(783)  # 783 + 10 = 793 without the queue; 801 with it
    report = budget_guard.handle({}, world["clients"], world["env"], at, PRICES)
    assert {(c["owner"], c["instance_type"]) for c in report["capacity"]} == {
        ("fleet training", "g5.xlarge"), ("queue training", "g6.xlarge")}
    assert report["decision"] == "stop" and report["stop"]["queues_stopped"] and report["stop"]["stopped"]


def test_queue_instances_are_priced_spot_and_on_demand_apart():
    class Ec2:
        def get_paginator(self, name):
            class Pages:
                def paginate(self, Filters):  # noqa: N803
                    assert Filters[0] == {"Name": "tag-key", "Values": ["ml-platform:queue"]}
                    tags = [{"Key": "ml-platform:queue", "Value": "training"}]
                    return [{"Reservations": [{"Instances": [
                        {"InstanceType": "g5.xlarge", "LaunchTime": NOW, "Tags": tags},
                        {"InstanceType": "g6.xlarge", "LaunchTime": NOW, "Tags": tags, "InstanceLifecycle": "spot"}]}]}]
            return Pages()
    capacity = budget_guard.queue_capacity(Ec2(), "dev", NOW)
    assert [(c.instance_type, c.lifecycle, c.owner) for c in capacity] == [
        ("g5.xlarge", ON_DEMAND, "queue training"), ("g6.xlarge", SPOT, "queue training")]


def test_instances_a_stopped_queue_still_runs_are_ended_after_the_grace_period(world):
    clients = world["clients"]
    clients["budgets"] = FakeBudgets(900)
    first = budget_guard.handle({}, clients, world["env"], NOW, PRICES)
    assert first["stop"]["queues_stopped"] and "leftovers" not in first  # the jobs get their stop timeout first
    early = budget_guard.handle({}, clients, world["env"], NOW + timedelta(minutes=5), PRICES)
    assert "leftovers" not in early
    world["messages"]()
    later = budget_guard.handle({}, clients, world["env"], NOW + timedelta(minutes=15), PRICES)
    (entry,) = later["leftovers"]
    assert entry["queue"] == "training" and entry["ended"] == [world["instance"]]
    assert entry["wanted_vcpus"] == [{"environment": f"{world['name']}-spot", "desired_vcpus": 4}]
    state = clients["ec2"].describe_instances(InstanceIds=[world["instance"]])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("shutting-down", "terminated")
    message = world["messages"]()[0]
    assert f"ended 1 instance(s) training queue training still ran after its stop: {world['instance']}" in message
    assert f"compute environment {world['name']}-spot still wants 4 vCPUs" in message
    assert "leftovers" not in budget_guard.handle({}, clients, world["env"], NOW + timedelta(minutes=30), PRICES)


def test_instances_that_cannot_be_ended_are_reported_with_the_command_to_end_them(world):
    clients = world["clients"]
    stop(world)
    world["messages"]()

    class DenyingEc2:
        def __init__(self, ec2):
            self.ec2 = ec2

        def __getattr__(self, name):
            return getattr(self.ec2, name)

        def terminate_instances(self, **kwargs):
            raise RuntimeError("UnauthorizedOperation")
    report = budget_guard.handle({}, {**clients, "ec2": DenyingEc2(clients["ec2"])}, world["env"],
                                 NOW + timedelta(minutes=20), PRICES)
    assert report["leftovers"][0]["error"] == "UnauthorizedOperation"
    message = world["messages"]()[0]
    assert "STILL RUNNING after the stop of training queue training" in message
    assert f"aws ec2 terminate-instances --instance-ids {world['instance']}" in message


def test_a_running_queue_instance_is_never_ended(world):
    report = budget_guard.handle({}, world["clients"], world["env"], NOW + timedelta(hours=1), PRICES)
    assert report["decision"] != "stop" and "leftovers" not in report
    state = world["clients"]["ec2"].describe_instances(InstanceIds=[world["instance"]])
    assert state["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def test_status_shows_a_stopped_queue_with_what_still_runs_and_what_waits(world):
    clients = world["clients"]
    stop(world)
    lines = budget_status(clients["autoscaling"], world["name"], clients["batch"], clients["ec2"], PendingJobs(clients["ssm"]))
    text = "\n".join(lines)
    assert f"queue training ({world['name']}-training): STOPPED (2026-11-29T20:00Z AWS Budgets" in text
    assert f"still running: {world['instance']} (g6.xlarge, on-demand" in text
    assert f"compute environment {world['name']}-spot wants 4 vCPUs" in text
    assert "2 submission(s) wait for resume: bert, resnet" in text


# --- pieces ---------------------------------------------------------------------------------------------------------

def test_a_multi_node_job_is_resubmitted_with_its_nodes_command_and_checkpoints():
    job = {"jobId": "mnp-1", "jobName": "llm", "jobQueue": "q", "jobDefinition": "arn:mnp:1",
           "tags": {"aws:batch:x": "no", "team": "a"},
           "nodeProperties": {"numNodes": 4, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:", "container": {
               "command": ["bash", "multinode_torchrun.sh", "train.py"], "image": "x",
               "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://b/checkpoints/training/llm/"},
                               {"name": "AWS_BATCH_JOB_NUM_NODES", "value": "4"}]}}]}}
    request = budget_guard._resubmission(job)
    assert request["nodeOverrides"] == {"numNodes": 4, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
        "command": ["bash", "multinode_torchrun.sh", "train.py"],
        "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://b/checkpoints/training/llm/"}]}}]}
    assert request["tags"] == {"team": "a", "ml-platform:budget-resubmission-of": "mnp-1"}  # aws: tags are AWS's
