"""The budget guard stops and resumes training queues (AWS Batch): a stub Batch API with the calls the guard makes."""

from datetime import datetime, timezone

from ml_platform_constructs.runtime import budget_guard
from ml_platform_constructs.runtime.budget_guard import ON_DEMAND, SPOT

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc)
QUEUE_ARN = "arn:aws:batch:us-east-1:111111111111:job-queue/training"
OTHER_ARN = "arn:aws:batch:us-east-1:111111111111:job-queue/other-team"
SPOT_CE, OD_CE = ("arn:aws:batch:us-east-1:111111111111:compute-environment/spot",
                  "arn:aws:batch:us-east-1:111111111111:compute-environment/od")


class Paginator:
    def __init__(self, pages):
        self.pages = pages

    def paginate(self, **kwargs):
        return self.pages(**kwargs)


class Batch:
    """Two queues: this scope's (two environments, jobs in every state) and another scope's."""

    def __init__(self):
        self.calls = []
        self.queues = {
            QUEUE_ARN: {"jobQueueArn": QUEUE_ARN, "jobQueueName": "dev-training", "state": "ENABLED",
                        "tags": {"ml-platform:queue": "training", "ml-platform:budget-scope": "dev"},
                        "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": SPOT_CE},
                                                    {"order": 2, "computeEnvironment": OD_CE}]},
            OTHER_ARN: {"jobQueueArn": OTHER_ARN, "jobQueueName": "other", "state": "ENABLED",
                        "tags": {"ml-platform:queue": "x", "ml-platform:budget-scope": "staging"},
                        "computeEnvironmentOrder": []}}
        self.jobs = {"j-run": {"jobId": "j-run", "jobName": "resnet", "status": "RUNNING", "jobQueue": QUEUE_ARN},
                     "j-start": {"jobId": "j-start", "jobName": "bert", "status": "STARTING", "jobQueue": QUEUE_ARN},
                     "j-wait": {"jobId": "j-wait", "jobName": "llm", "status": "RUNNABLE", "jobQueue": QUEUE_ARN},
                     "j-crash": {"jobId": "j-crash", "jobName": "bad", "status": "FAILED", "jobQueue": QUEUE_ARN,
                                 "statusReason": "Essential container in task exited"}}

    def get_paginator(self, name):
        if name == "describe_job_queues":
            return Paginator(lambda: [{"jobQueues": list(self.queues.values())}])
        return Paginator(lambda jobQueue, jobStatus: [{"jobSummaryList": [
            j for j in self.jobs.values() if j["jobQueue"] == jobQueue and j["status"] == jobStatus]}])

    def update_job_queue(self, jobQueue, state):  # noqa: N803 (boto3 names)
        self.calls.append(("queue", jobQueue, state))
        self.queues[jobQueue]["state"] = state

    def update_compute_environment(self, computeEnvironment, state):  # noqa: N803
        self.calls.append(("environment", computeEnvironment, state))

    def terminate_job(self, jobId, reason):  # noqa: N803
        self.calls.append(("terminate", jobId))
        self.jobs[jobId].update(status="FAILED", statusReason=reason)

    def tag_resource(self, resourceArn, tags):  # noqa: N803
        self.calls.append(("tag", resourceArn, tags))
        target = self.queues.get(resourceArn) or next(j for j in self.jobs.values() if j.get("jobArn") == resourceArn)
        target.setdefault("tags", {}).update(tags)

    def untag_resource(self, resourceArn, tagKeys):  # noqa: N803
        for key in tagKeys:
            self.queues[resourceArn]["tags"].pop(key, None)

    def describe_jobs(self, jobs):
        found = []
        for job_id in jobs:
            job = self.jobs[job_id]
            job.setdefault("jobArn", f"arn:aws:batch:us-east-1:111111111111:job/{job_id}")
            found.append({**job, "jobDefinition": "arn:def:1", "propagateTags": True,
                          "container": {"command": ["python", "train.py"], "environment": [
                              {"name": "ML_PLATFORM_CHECKPOINT_URI", "value": f"s3://b/checkpoints/training/{job['jobName']}/"},
                              {"name": "AWS_BATCH_JOB_ATTEMPT", "value": "1"}],
                              "resourceRequirements": [{"type": "GPU", "value": "1"}], "image": "not-overridable"}})
        return {"jobs": found}

    def submit_job(self, **kwargs):
        self.calls.append(("submit", kwargs))
        job_id = f"new-{len(self.jobs)}"
        self.jobs[job_id] = {"jobId": job_id, "jobName": kwargs["jobName"], "status": "RUNNING",
                             "jobQueue": kwargs["jobQueue"], "tags": kwargs.get("tags", {})}
        return {"jobId": job_id}


def test_stop_disables_the_queue_and_its_environments_then_ends_running_jobs_with_their_checkpoint_signal():
    batch = Batch()
    report = budget_guard.stop_queues(batch, "dev", "estimated spend reached the line", NOW)
    assert batch.calls[:3] == [("queue", QUEUE_ARN, "DISABLED"), ("environment", SPOT_CE, "DISABLED"),
                               ("environment", OD_CE, "DISABLED")]
    assert {c[1] for c in batch.calls if c[0] == "terminate"} == {"j-run", "j-start"}  # waiting jobs just wait
    assert report["queues_stopped"] == [{"queue": "training", "job_queue": "dev-training", "jobs_ended": 2,
                                         "jobs_waiting": 1}]
    assert batch.jobs["j-run"]["statusReason"].startswith("ml-platform budget stop 2026-11-29T20:00Z")


def test_stop_leaves_another_scopes_queue_alone_and_is_idempotent():
    batch = Batch()
    budget_guard.stop_queues(batch, "dev", "line", NOW)
    assert all(c[1] != OTHER_ARN for c in batch.calls if c[0] in ("queue", "tag"))
    again = budget_guard.stop_queues(batch, "dev", "line", NOW)
    assert again["queues_already_stopped"] == [{"queue": "training", "job_queue": "dev-training"}]
    assert again["queues_stopped"] == []


def test_resume_enables_and_resubmits_only_the_jobs_the_stop_ended_under_their_names_once():
    batch = Batch()
    budget_guard.stop_queues(batch, "dev", "line", NOW)
    report = budget_guard.resume_queues(batch, "dev", NOW)
    submitted = {c[1]["jobName"]: c[1] for c in batch.calls if c[0] == "submit"}
    assert set(submitted) == {"resnet", "bert"}  # not the job that crashed on its own, not the waiting one
    resnet = submitted["resnet"]
    assert resnet["jobQueue"] == QUEUE_ARN and resnet["jobDefinition"] == "arn:def:1"
    # The checkpoint prefix comes along; what Batch sets itself (AWS_BATCH_*) and the image cannot be overridden.
    assert resnet["containerOverrides"]["environment"] == [
        {"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://b/checkpoints/training/resnet/"}]
    assert "image" not in resnet["containerOverrides"]
    assert batch.queues[QUEUE_ARN]["state"] == "ENABLED" and ("environment", SPOT_CE, "ENABLED") in batch.calls
    assert batch.queues[QUEUE_ARN]["tags"]["ml-platform:budget-resumed"] == "2026-11"
    assert len(report["jobs_resubmitted"]) == 2
    batch.queues[QUEUE_ARN]["tags"]["ml-platform:budget-stop"] = "again"  # a second resume resubmits nothing new
    assert budget_guard.resume_queues(batch, "dev", NOW)["jobs_resubmitted"] == []


def test_a_queue_resumed_this_month_is_not_stopped_again():
    batch = Batch()
    batch.queues[QUEUE_ARN]["tags"]["ml-platform:budget-resumed"] = "2026-11"
    report = budget_guard.stop_queues(batch, "dev", "line", NOW)
    assert report["queues_resumed_by_operator"] and not [c for c in batch.calls if c[0] == "terminate"]


def test_stop_and_resume_messages_name_the_queues_and_jobs():
    batch = Batch()
    sent = []

    class Sns:
        def publish(self, **kwargs):
            sent.append(kwargs["Message"])
    report = {"action": "stop", "environment": "dev", "reason": "line", "time": NOW.isoformat(), "stopped": [],
              **budget_guard.stop_queues(batch, "dev", "line", NOW)}
    budget_guard._announce(Sns(), "topic", report)
    assert "stopped training queue training: 2 running job(s) ended with their checkpoint signal, 1 waiting" in sent[0]


def test_queue_instances_are_found_by_their_tags_and_priced_spot_and_on_demand_apart():
    calls = []

    class Ec2:
        def get_paginator(self, name):
            def pages(Filters):  # noqa: N803 (boto3 names)
                calls.append((name, Filters))
                tags = [{"Key": "ml-platform:queue", "Value": "training"}]
                return [{"Reservations": [{"Instances": [
                    {"InstanceType": "g5.xlarge", "LaunchTime": NOW, "Tags": tags},
                    {"InstanceType": "g6.xlarge", "LaunchTime": NOW, "Tags": tags, "InstanceLifecycle": "spot"}]}]}]
            return Paginator(pages)
    capacity = budget_guard.queue_capacity(Ec2(), "dev", NOW)
    assert calls == [("describe_instances", [
        {"Name": "tag-key", "Values": ["ml-platform:queue"]}, {"Name": "tag:ml-platform:budget-scope", "Values": ["dev"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]}])]
    assert [(c.instance_type, c.lifecycle, c.owner) for c in capacity] == [
        ("g5.xlarge", ON_DEMAND, "queue training"), ("g6.xlarge", SPOT, "queue training")]


def test_a_resubmitted_job_that_a_later_stop_ends_is_resubmitted_again():
    batch = Batch()
    budget_guard.stop_queues(batch, "dev", "line", NOW)
    first = budget_guard.resume_queues(batch, "dev", NOW)["jobs_resubmitted"]
    batch.queues[QUEUE_ARN]["tags"].pop("ml-platform:budget-resumed")  # next month
    budget_guard.stop_queues(batch, "dev", "line again", NOW)
    second = budget_guard.resume_queues(batch, "dev", NOW)["jobs_resubmitted"]
    assert sorted(e["job"] for e in first) == sorted(e["job"] for e in second) == ["bert", "resnet"]
    assert {e["was"] for e in second} == {e["now"] for e in first}


def test_a_multi_node_job_is_resubmitted_with_its_nodes_command_and_checkpoints():
    job = {"jobId": "mnp-1", "jobName": "llm", "jobQueue": QUEUE_ARN, "jobDefinition": "arn:mnp:1",
           "nodeProperties": {"numNodes": 4, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:", "container": {
               "command": ["bash", "multinode_torchrun.sh", "train.py"], "image": "x",
               "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://b/checkpoints/training/llm/"},
                               {"name": "AWS_BATCH_JOB_NUM_NODES", "value": "4"}]}}]}}
    request = budget_guard._resubmission(job)
    assert request["nodeOverrides"] == {"numNodes": 4, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
        "command": ["bash", "multinode_torchrun.sh", "train.py"],
        "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://b/checkpoints/training/llm/"}]}}]}
    assert request["tags"] == {"ml-platform:budget-resubmission-of": "mnp-1"}
