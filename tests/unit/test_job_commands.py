"""The job commands (ml_platform_constructs.operations.jobs, behind ./platform job and python -m ml_platform_constructs job):
every check a submission passes before AWS, the node and GPU counts a multi-node job is submitted with, list, logs,
cancel, and a job definition revision for another image."""

import pytest

from ml_platform_constructs.operations import jobs
from test_library_jobs import ARN, IMAGE, ROOT, FakeBatch

OTHER_IMAGE = IMAGE.replace("resnet:1", "resnet:2")


@pytest.fixture
def batch():
    return FakeBatch()


@pytest.fixture
def target(batch):
    return jobs.find_queue(batch, "training")


def refused(target, message, *, image=IMAGE, command=("python", "train.py"), **kwargs):
    with pytest.raises(jobs.JobError) as error:
        jobs.check_submission(target, image, list(command), **{"name": "resnet-1", **kwargs})
    assert str(error.value) == f"error: {message}"


def test_the_queue_as_its_tags_and_environments_describe_it(target):
    assert (target.job_queue, target.job_definition) == (f"{ARN}:job-queue/q1", f"{ARN}:job-definition/train:2")
    assert target.instance_types == ("g5.2xlarge", "g5.xlarge") and target.checkpoint_root == ROOT
    assert (target.multi_node_job_queue, target.multi_node_job_definition) == (f"{ARN}:job-queue/q2",
                                                                               f"{ARN}:job-definition/mnp:1")
    assert target.multi_node_instance_types == ("g5.12xlarge",)
    assert target.capacity == "up to 64 vCPUs; multi-node up to 192 vCPUs"
    assert target.job_queues() == [("training", f"{ARN}:job-queue/q1"),
                                   ("training (multi-node)", f"{ARN}:job-queue/q2")]


def test_every_check_a_submission_passes_before_aws(target):
    refused(target, "--gpus 0: the queue's types (g5.2xlarge, g5.xlarge) have 1 GPU(s) per instance; ask for 1-1 "
                    "(more GPUs: --nodes, or a queue of larger types)", gpus=0)
    refused(target, "--gpus 2: the queue's types (g5.2xlarge, g5.xlarge) have 1 GPU(s) per instance; ask for 1-1 "
                    "(more GPUs: --nodes, or a queue of larger types)", gpus=2)
    refused(target, "--gpus 5: the queue's multi-node types (g5.12xlarge) have 4 GPU(s) per instance; ask for 1-4 "
                    "(more GPUs: --nodes, or a queue of larger types)", gpus=5, nodes=2)
    refused(target, "--nodes 9: multi-node jobs take 2-8 nodes", nodes=9)
    refused(target, "--nodes 0: multi-node jobs take 2-8 nodes", nodes=0)
    refused(target, "no command: put it after --, e.g. -- python train.py --epochs 90", command=())
    refused(target, "--name is required: it is the job's identity (checkpoints under checkpoints/training/NAME/), so a "
                    "resubmission under the same name resumes and a new name starts fresh", name="")
    refused(target, "--name '-resnet': 1-128 letters, digits, '-' or '_', starting with a letter or digit",
            name="-resnet")
    refused(target, f"--name {'r' * 129!r}: 1-128 letters, digits, '-' or '_', starting with a letter or digit",
            name="r" * 129)
    assert jobs.check_submission(target, IMAGE, ["python"], name="r" * 128).name == "r" * 128


def test_multi_node_needs_a_multi_node_queue_and_catalog_types(target):
    single = jobs.QueueTarget(name="small", job_queue="q", job_definition="d", instance_types=("g5.xlarge",))
    refused(single, "--nodes 2: queue small has no multi-node environment (TrainingQueue's multi_node_instance_types "
                    "and multi_node_max_vcpus); submit with --nodes 1", nodes=2)
    unknown = jobs.QueueTarget(name="cpu", job_queue="q", job_definition="d", instance_types=("m5.large", "c5.xlarge"))
    refused(unknown, "queue cpu: none of its types (m5.large, c5.xlarge) is a catalog GPU type")


def test_gpus_default_to_a_whole_instance_of_the_smallest_type(target):
    assert jobs.check_submission(target, IMAGE, ["python"], name="a").gpus == 1
    multi = jobs.check_submission(target, IMAGE, ["torchrun"], name="a", nodes=8)
    assert (multi.gpus, multi.nodes, multi.multi_node) == (4, 8, True)


@pytest.mark.parametrize("nodes", [2, 3, 8])
def test_a_multi_node_job_is_submitted_with_its_node_count_to_the_multi_node_queue(batch, target, nodes):
    submission = jobs.check_submission(target, IMAGE, ["torchrun", "train.py"], name="llm", nodes=nodes, gpus=2)
    job = jobs.submit(batch, submission)
    (request,) = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/q2" and request["jobDefinition"] == f"{ARN}:job-definition/mnp:1"
    assert "containerOverrides" not in request
    assert request["nodeOverrides"] == {"numNodes": nodes, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
        "command": ["torchrun", "train.py"],
        "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": f"{ROOT}llm/"},
                        {"name": "ML_PLATFORM_JOB_NAME", "value": "llm"}],
        "resourceRequirements": [{"type": "GPU", "value": "2"}]}}]}
    assert request["tags"] == {"ml-platform:queue": "training"} and request["propagateTags"] is True
    assert job == {"job_id": "job-1", "job_name": "llm", "checkpoint_uri": f"{ROOT}llm/"}
    lines = jobs.submitted_lines(submission, job, "./platform job logs dev job-1")
    assert lines == ["submitted llm: job id job-1",
                     f"  queue training (multi-node, {nodes} nodes, 2 GPU(s) per instance): up to 64 vCPUs; "
                     "multi-node up to 192 vCPUs",
                     f"  checkpoints: {ROOT}llm/ (every attempt resumes from the newest)",
                     "  follow it: ./platform job logs dev job-1"]


def test_a_single_node_job_and_a_queue_without_checkpoints(batch, target):
    bare = jobs.QueueTarget(**{**target.__dict__, "checkpoint_root": ""})
    submission = jobs.check_submission(bare, IMAGE, ["python"], name="plain", tags={"team": "vision"})
    jobs.submit(batch, submission)
    (request,) = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/q1" and "nodeOverrides" not in request
    assert request["containerOverrides"]["environment"] == [{"name": "ML_PLATFORM_JOB_NAME", "value": "plain"}]
    assert request["tags"] == {"ml-platform:queue": "training", "team": "vision"}
    assert jobs.submitted_lines(submission, {"job_id": "j"}, "f")[1:3] == [
        "  queue training (1 GPU(s) per instance): up to 64 vCPUs; multi-node up to 192 vCPUs",
        "  checkpoints: none (the queue has no dataset bucket)"]


def test_another_image_is_a_revision_of_the_queues_definition_with_everything_else_kept(batch):
    assert jobs.job_definition_for(batch, f"{ARN}:job-definition/train:2", IMAGE) == f"{ARN}:job-definition/train:2"
    assert batch.registered == []  # the queue's own image: its own definition
    batch.definitions[1].update(retryStrategy={"attempts": 3}, timeout={"attemptDurationSeconds": 60},
                                propagateTags=True, platformCapabilities=["EC2"])
    assert jobs.job_definition_for(batch, f"{ARN}:job-definition/train:2", OTHER_IMAGE) == \
        f"{ARN}:job-definition/train-submitted:1"
    (registered,) = batch.registered
    assert registered["jobDefinitionName"] == "train-submitted" and registered["containerProperties"]["image"] == OTHER_IMAGE
    assert {k: registered[k] for k in ("type", "retryStrategy", "timeout", "propagateTags", "platformCapabilities",
                                       "tags")} == {
        "type": "container", "retryStrategy": {"attempts": 3}, "timeout": {"attemptDurationSeconds": 60},
        "propagateTags": True, "platformCapabilities": ["EC2"], "tags": batch.definitions[1]["tags"]}
    batch.definitions[2]["nodeProperties"]["nodeRangeProperties"].append({"container": {"image": IMAGE}})
    jobs.job_definition_for(batch, f"{ARN}:job-definition/mnp:1", OTHER_IMAGE)
    nodes = batch.registered[-1]["nodeProperties"]["nodeRangeProperties"]
    assert [n["container"]["image"] for n in nodes] == [OTHER_IMAGE, OTHER_IMAGE]  # every node range
    batch.definitions[1]["jobDefinitionName"] = "train-submitted"  # a revision of a revision keeps one family
    jobs.job_definition_for(batch, f"{ARN}:job-definition/train:2", OTHER_IMAGE.replace(":2", ":3"))
    assert batch.registered[-1]["jobDefinitionName"] == "train-submitted"


def job(job_id, status, queue="q1", **more):
    return {"jobId": job_id, "jobName": f"name-{job_id}", "status": status, "jobQueue": f"{ARN}:job-queue/{queue}",
            **more}


def test_list_shows_each_queues_jobs_by_state_with_their_reasons(target):
    batch = FakeBatch([job("a", "RUNNING"), job("b", "FAILED", statusReason="Essential container in task exited"),
                       job("c", "RUNNABLE", queue="q2"), job("d", "SUCCEEDED", queue="other")])
    original = batch.get_paginator

    def with_reasons(operation):  # ListJobs returns statusReason in its summaries
        if operation != "list_jobs":
            return original(operation)
        return type("P", (), {"paginate": lambda self, jobQueue, jobStatus: [{"jobSummaryList": [  # noqa: N803
            {k: j[k] for k in ("jobName", "jobId", "statusReason") if k in j} for j in batch.jobs.values()
            if j["jobQueue"] == jobQueue and j["status"] == jobStatus]}]})()
    batch.get_paginator = with_reasons
    assert jobs.list_jobs(batch, target.job_queues()) == [
        "training: name-a a RUNNING", "training: name-b b FAILED (Essential container in task exited)",
        "training (multi-node): name-c c RUNNABLE"]
    assert jobs.list_jobs(FakeBatch(), target.job_queues()) == ["no jobs on training, training (multi-node)"]
    assert jobs.list_jobs(FakeBatch(), []) == ["no jobs on any queue"]


class Logs:
    def __init__(self):
        self.read = []

    def get_log_events(self, logGroupName, logStreamName, startFromHead):  # noqa: N803
        self.read.append((logGroupName, logStreamName, startFromHead))
        return {"events": [{"message": f"{logStreamName} line {n}"} for n in (1, 2)]}


def test_logs_show_every_attempt_in_order_once(target):
    logs = Logs()
    described = job("a", "RUNNING", container={"logConfiguration": {"options": {"awslogs-group": "/batch/train"}},
                                               "logStreamName": "s3"},
                    attempts=[{"container": {"logStreamName": "s1"}}, {"container": {}},
                              {"container": {"logStreamName": "s2"}}])
    assert jobs.job_logs(logs, described) == [
        "--- attempt 1: /batch/train s1", "s1 line 1", "s1 line 2", "--- attempt 2: /batch/train s2", "s2 line 1",
        "s2 line 2", "--- attempt 3: /batch/train s3", "s3 line 1", "s3 line 2"]
    assert logs.read == [("/batch/train", s, True) for s in ("s1", "s2", "s3")]
    again = {**described, "attempts": [{"container": {"logStreamName": "s3"}}]}
    assert jobs.job_logs(Logs(), again)[0] == "--- attempt 1: /batch/train s3" and len(jobs.job_logs(Logs(), again)) == 3


@pytest.mark.parametrize("described", [
    job("a", "RUNNABLE"),
    job("a", "STARTING", container={"logStreamName": "s1"}),  # a stream but no group
    job("a", "STARTING", container={"logConfiguration": {"options": {"awslogs-group": "/batch/train"}}}),
])
def test_logs_before_a_stream_exists_say_so(described):
    assert jobs.job_logs(Logs(), described) == [f"name-a ({described['status']}): no log stream yet"]


@pytest.mark.parametrize("status, called, said", [
    ("RUNNING", "terminated", "name-a (RUNNING): terminated; it gets SIGTERM and writes its checkpoint"),
    ("STARTING", "terminated", "name-a (STARTING): terminated; it gets SIGTERM and writes its checkpoint"),
    ("RUNNABLE", "cancelled", "name-a (RUNNABLE): cancelled before it started"),
    ("SUBMITTED", "cancelled", "name-a (SUBMITTED): cancelled before it started"),
    ("SUCCEEDED", None, "name-a is already SUCCEEDED: nothing to cancel"),
])
def test_cancel_ends_a_running_job_and_cancels_a_waiting_one(status, called, said):
    batch = FakeBatch()
    assert jobs.cancel(batch, job("a", status), "by ops") == said
    assert batch.terminated == ([("a", "by ops")] if called == "terminated" else [])
    assert batch.cancelled == ([("a", "by ops")] if called == "cancelled" else [])


def test_a_job_is_described_only_from_the_named_queues():
    batch = FakeBatch([job("a", "RUNNING"), job("b", "RUNNING", queue="other")])
    assert jobs.describe(batch, "a", [f"{ARN}:job-queue/q1"], "training")["jobId"] == "a"
    with pytest.raises(jobs.JobError, match="^error: job 'x' not found in training$"):
        jobs.describe(batch, "x", [f"{ARN}:job-queue/q1"], "training")
    with pytest.raises(jobs.JobError, match=f"^error: job b is on {ARN}:job-queue/other, not on training: nothing done$"):
        jobs.describe(batch, "b", [f"{ARN}:job-queue/q1"], "training")


def test_the_newest_revision_is_taken_whatever_order_batch_lists_them(batch):
    batch.definitions[0], batch.definitions[1] = batch.definitions[1], batch.definitions[0]  # revision 2 first
    assert jobs.find_queue(batch, "training").job_definition == f"{ARN}:job-definition/train:2"


def test_a_queue_without_its_own_definitions_says_to_deploy_it_with_this_version(batch):
    batch.definitions = [d for d in batch.definitions if d["tags"].get("ml-platform:job-definition") != "single-node"]
    with pytest.raises(jobs.JobError) as error:
        jobs.find_queue(batch, "training")
    assert str(error.value) == ("error: training queue 'training' has no job queue or job definition of its own here "
                                "(deployed with an older ml_platform_constructs?): deploy it with this version")
