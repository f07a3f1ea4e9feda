"""./platform job list, logs and a multi-node submit through the command's entry point (main) with stub clients: the
job queues it reads from the Compute stack's outputs, the multi-node queue's, and what it prints."""

import dataclasses

import pytest

from ops import job as job_ops
from stacks.compute_stack import queue_output_key

ARN = "arn:aws:batch:us-east-1:222222222222"
IMAGE = "222222222222.dkr.ecr.us-east-1.amazonaws.com/train:1"


class CloudFormation:
    def describe_stacks(self, StackName):  # noqa: N803 (boto3 names)
        outputs = {"staging-Data": {"DatasetBucketName": "staging-datasets"}, "staging-Compute": {
            queue_output_key("training", "JobQueue"): f"{ARN}:job-queue/single",
            queue_output_key("training", "JobDefinition"): f"{ARN}:job-definition/single:1",
            queue_output_key("training", "MultiNodeJobQueue"): f"{ARN}:job-queue/multi",
            queue_output_key("training", "MultiNodeJobDefinition"): f"{ARN}:job-definition/multi:1",
            queue_output_key("vision", "JobQueue"): f"{ARN}:job-queue/vision",
            queue_output_key("vision", "JobDefinition"): f"{ARN}:job-definition/vision:1"}}[StackName]
        return {"Stacks": [{"Outputs": [{"OutputKey": k + "X1", "OutputValue": v} for k, v in outputs.items()]}]}


class Batch:
    def __init__(self, jobs=()):
        self.jobs, self.submitted = list(jobs), []

    def get_paginator(self, operation):
        assert operation == "list_jobs"
        jobs = self.jobs
        return type("Pages", (), {"paginate": lambda self, jobQueue, jobStatus: [{"jobSummaryList": [  # noqa: N803
            {"jobName": j["jobName"], "jobId": j["jobId"]} for j in jobs
            if j["jobQueue"] == jobQueue and j["status"] == jobStatus]}]})()

    def describe_jobs(self, jobs):
        return {"jobs": [j for j in self.jobs if j["jobId"] in jobs]}

    def describe_job_definitions(self, jobDefinitions):  # noqa: N803
        return {"jobDefinitions": [{"jobDefinitionName": "multi", "type": "multinode", "nodeProperties": {
            "nodeRangeProperties": [{"container": {"image": IMAGE}}]}}]}

    def submit_job(self, **request):
        self.submitted.append(request)
        return {"jobId": "job-9"}


class Logs:
    def get_log_events(self, logGroupName, logStreamName, startFromHead):  # noqa: N803
        return {"events": [{"message": f"{logStreamName}: epoch 1"}]}


def run(argv, batch, capsys):
    clients = {"batch": batch, "cloudformation": CloudFormation(), "logs": Logs()}
    session = type("Session", (), {"client": lambda self, name: clients[name]})()
    assert job_ops.main(argv, session_factory=lambda env: session) == 0
    return capsys.readouterr().out.splitlines()


def job(job_id, queue, status, **more):
    return {"jobId": job_id, "jobName": f"name-{job_id}", "jobQueue": f"{ARN}:job-queue/{queue}", "status": status,
            **more}


def test_list_reads_every_job_queue_of_the_environment_from_its_outputs(capsys):
    batch = Batch([job("a", "single", "RUNNING"), job("b", "multi", "RUNNABLE"), job("c", "elsewhere", "RUNNING")])
    assert run(["list", "staging"], batch, capsys) == ["training: name-a a RUNNING",
                                                       "training (multi-node): name-b b RUNNABLE"]
    assert run(["list", "staging", "training"], batch, capsys)[0] == "training: name-a a RUNNING"
    assert run(["list", "staging"], Batch(), capsys) == ["staging: no jobs on training, training (multi-node)"]


def test_list_of_one_queue_leaves_the_others_out(config):
    staging = config.environments["staging"]
    training = staging.queues[0]
    vision = dataclasses.replace(training, name="vision", multi_node_instance_types=())
    env = dataclasses.replace(staging, queues=(training, vision))
    batch = Batch([job("a", "single", "RUNNING"), job("v", "vision", "RUNNING")])
    assert job_ops.listing(batch, CloudFormation(), env, "vision") == ["vision: name-v v RUNNING"]
    assert job_ops.listing(batch, CloudFormation(), env, None) == ["training: name-a a RUNNING",
                                                                   "vision: name-v v RUNNING"]


def test_an_unknown_queue_is_refused_before_any_aws_call(capsys):
    with pytest.raises(SystemExit) as refused:
        job_ops.main(["list", "staging", "nosuch"], session_factory=lambda env: pytest.fail("no AWS"))
    assert "nosuch" in str(refused.value)


def test_logs_reads_each_attempt_through_the_logs_client(capsys):
    described = job("a", "multi", "RUNNING", container={
        "logConfiguration": {"options": {"awslogs-group": "/aws/batch/job"}}, "logStreamName": "s2"},
        attempts=[{"container": {"logStreamName": "s1"}}])
    assert run(["logs", "staging", "a"], Batch([described]), capsys) == [
        "--- attempt 1: /aws/batch/job s1", "s1: epoch 1", "--- attempt 2: /aws/batch/job s2", "s2: epoch 1"]


def test_a_multi_node_submit_goes_to_the_multi_node_queue_with_its_node_count(capsys):
    batch = Batch()
    lines = run(["submit", "staging", "training", "--image", IMAGE, "--name", "llm", "--nodes", "3", "--",
                 "torchrun", "train.py"], batch, capsys)
    (request,) = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/multi"
    assert request["jobDefinition"] == f"{ARN}:job-definition/multi:1"
    assert request["nodeOverrides"]["numNodes"] == 3
    assert request["tags"] == {"ml-platform:queue": "training", "environment": "staging"}
    assert lines[0] == "submitted llm: job id job-9"
    assert lines[1] == ("  queue training (multi-node, 3 nodes, 1 GPU(s) per instance): Spot up to 32 vCPUs (about 8 x "
                        "g5.xlarge, 1 GPU each), then On-Demand up to 8 vCPUs; multi-node On-Demand up to 64 vCPUs")
    assert lines[2] == ("  checkpoints: s3://staging-datasets/checkpoints/training/llm/ (every attempt resumes from the "
                        "newest)")
    assert lines[3] == "  follow it: ./platform job list staging training; ./platform job logs staging JOB_ID"


def test_submit_needs_an_image(capsys):
    with pytest.raises(SystemExit) as refused:
        job_ops.main(["submit", "staging", "training", "--name", "x", "--", "python"],
                     session_factory=lambda env: pytest.fail("no AWS"))
    assert refused.value.code == 2 and "--image" in capsys.readouterr().err


def test_a_submit_without_nodes_is_one_instance_on_the_single_node_queue(capsys):
    batch = Batch()
    batch.describe_job_definitions = lambda jobDefinitions: {"jobDefinitions": [  # noqa: N803
        {"jobDefinitionName": "single", "type": "container", "containerProperties": {"image": IMAGE}}]}
    run(["submit", "staging", "training", "--image", IMAGE, "--name", "resnet", "--", "python", "train.py"], batch,
        capsys)
    (request,) = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/single" and "nodeOverrides" not in request
    assert request["containerOverrides"]["command"] == ["python", "train.py"]


def test_cancel_tells_batch_who_cancelled(capsys):
    batch = Batch([job("a", "single", "RUNNING")])
    batch.terminate_job = lambda jobId, reason: batch.submitted.append((jobId, reason))  # noqa: N803
    assert run(["cancel", "staging", "a"], batch, capsys) == [
        "name-a (RUNNING): terminated; it gets SIGTERM and writes its checkpoint"]
    assert batch.submitted == [("a", "cancelled with ./platform job cancel")]
