"""./platform job: checks that need no AWS call come first; submit, list, logs and cancel against stub clients."""

import pytest

from ops import job as job_ops
from stacks.compute_stack import queue_output_key

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"
QUEUE_ARN = "arn:aws:batch:us-east-1:111111111111:job-queue/q"
DEFINITION_ARN = "arn:aws:batch:us-east-1:111111111111:job-definition/d:1"


@pytest.fixture
def dev(config):
    return config.environments["dev"]


@pytest.fixture
def staging(config):
    return config.environments["staging"]


def check(env, **kwargs):
    options = {"gpus": None, "nodes": 1, "name": "resnet-1"}
    options.update(kwargs)
    return job_ops.check_submission(env, options.pop("queue", "training"), options.pop("image", IMAGE),
                                    options.pop("command", ["python", "train.py"]), **options)


@pytest.mark.parametrize("kwargs,message", [
    ({"queue": "nosuch"}, r"dev has no queue 'nosuch' in config/environments.toml \(known queues: training\)"),
    ({"image": "pytorch/pytorch:2.5"}, r"--image 'pytorch/pytorch:2.5': not an Amazon ECR image"),
    ({"gpus": 4}, r"--gpus 4: the queue's types \(.*\) have 1 GPU\(s\) per instance; ask for 1-1"),
    ({"nodes": 2}, r"--nodes 2: queue training has no multi-node environment"),
    ({"name": "bad name"}, r"--name 'bad name': 1-128 letters"),
    ({"command": []}, r"no command: put it after --"),
])
def test_bad_submissions_fail_before_any_aws_call_naming_value_and_fix(dev, kwargs, message):
    with pytest.raises(SystemExit, match=message):
        check(dev, **kwargs)


def test_multi_node_submissions_are_checked_against_the_multi_node_types(staging):
    assert check(staging, nodes=2).gpus == 1  # g5.8xlarge / g6.8xlarge: 1 GPU per node
    with pytest.raises(SystemExit, match=r"--nodes 9: multi-node jobs take 2-8 nodes"):
        check(staging, nodes=9)
    with pytest.raises(job_ops.JobError, match=r"--gpus 2: the queue's multi-node types"):
        check(staging, nodes=2, gpus=2)


def test_a_submission_without_a_name_is_refused_because_the_name_is_what_a_resubmission_resumes(dev):
    with pytest.raises(SystemExit, match=r"^error: --name is required: it is the job's identity \(checkpoints under "
                       r"checkpoints/training/NAME/\), so a resubmission under the same name resumes"):
        check(dev, name=None)


class CloudFormation:
    def __init__(self, env):
        self.outputs = [
            {"OutputKey": queue_output_key("training", "JobQueue") + "ABC", "OutputValue": QUEUE_ARN},
            {"OutputKey": queue_output_key("training", "JobDefinition") + "DEF", "OutputValue": DEFINITION_ARN},
            {"OutputKey": "DatasetBucketName1", "OutputValue": "datasets-bucket"}]

    def describe_stacks(self, StackName):  # noqa: N803 (boto3 naming)
        return {"Stacks": [{"Outputs": self.outputs}]}


class Batch:
    def __init__(self, image=IMAGE, jobs=()):
        self.calls, self.image, self.jobs = [], image, list(jobs)

    def describe_job_definitions(self, jobDefinitions):  # noqa: N803
        return {"jobDefinitions": [{"jobDefinitionName": "dev-queue-def", "type": "container",
                                    "containerProperties": {"image": self.image, "vcpus": 4},
                                    "retryStrategy": {"attempts": 5}, "timeout": {"attemptDurationSeconds": 60}}]}

    def register_job_definition(self, **kwargs):
        self.calls.append(("register", kwargs))
        return {"jobDefinitionArn": "arn:aws:batch:us-east-1:111111111111:job-definition/dev-queue-def-submitted:1"}

    def submit_job(self, **kwargs):
        self.calls.append(("submit", kwargs))
        return {"jobId": "job-1"}

    def describe_jobs(self, jobs):
        return {"jobs": [j for j in self.jobs if j["jobId"] in jobs]}

    def terminate_job(self, **kwargs):
        self.calls.append(("terminate", kwargs))

    def cancel_job(self, **kwargs):
        self.calls.append(("cancel", kwargs))


def test_submit_sets_the_checkpoint_prefix_per_job_name_and_prints_capacity(dev):
    batch = Batch()
    lines = job_ops.submit(batch, CloudFormation(dev), dev, check(dev))
    kind, request = batch.calls[0]
    assert kind == "submit" and request["jobQueue"] == QUEUE_ARN and request["jobDefinition"] == DEFINITION_ARN
    env = {e["name"]: e["value"] for e in request["containerOverrides"]["environment"]}
    assert env["ML_PLATFORM_CHECKPOINT_URI"] == "s3://datasets-bucket/checkpoints/training/resnet-1/"
    assert request["containerOverrides"]["command"] == ["python", "train.py"]
    assert request["tags"] == {"ml-platform:queue": "training", "environment": "dev"}
    assert lines[0] == "submitted resnet-1: job id job-1"
    assert "Spot up to 32 vCPUs (about 8 x g5.xlarge, 1 GPU each)" in lines[1]
    assert "checkpoints/training/resnet-1/" in lines[2]


def test_another_image_registers_a_revision_because_batch_cannot_override_it(dev):
    batch = Batch(image="123456789012.dkr.ecr.us-east-1.amazonaws.com/other:7")
    job_ops.submit(batch, CloudFormation(dev), dev, check(dev))
    (_, registered), (_, submitted) = batch.calls
    assert registered["jobDefinitionName"] == "dev-queue-def-submitted"
    assert registered["containerProperties"]["image"] == IMAGE and registered["retryStrategy"] == {"attempts": 5}
    assert submitted["jobDefinition"].endswith("dev-queue-def-submitted:1")


def running(status):
    return {"jobId": "job-1", "jobName": "resnet-1", "status": status, "jobQueue": QUEUE_ARN}


@pytest.mark.parametrize("status,call", [("RUNNING", "terminate"), ("STARTING", "terminate"), ("RUNNABLE", "cancel")])
def test_cancel_terminates_running_jobs_so_they_checkpoint_and_cancels_waiting_ones(dev, status, call):
    batch = Batch(jobs=[running(status)])
    job_ops.cancel(batch, CloudFormation(dev), dev, "job-1")
    assert [c[0] for c in batch.calls] == [call]


def test_cancel_refuses_a_job_of_another_environments_queue(dev):
    other = {**running("RUNNING"), "jobQueue": "arn:aws:batch:us-east-1:111111111111:job-queue/other"}
    batch = Batch(jobs=[other])
    with pytest.raises(job_ops.JobError, match="not on a queue of dev: nothing done"):
        job_ops.cancel(batch, CloudFormation(dev), dev, "job-1")
    assert batch.calls == []


def test_main_checks_the_submission_before_it_asks_for_credentials(monkeypatch):
    def no_aws(env):
        raise AssertionError("an AWS session was created before the input was checked")
    with pytest.raises(SystemExit, match="no queue 'nosuch'"):
        job_ops.main(["submit", "dev", "nosuch", "--image", IMAGE, "--", "python", "train.py"], session_factory=no_aws)
