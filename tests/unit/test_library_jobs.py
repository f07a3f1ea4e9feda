"""Training jobs with the library alone: `python -m ml_platform_constructs job ...` and `jobs.submit_job` find a
TrainingQueue by its name from the tags the construct sets, check a submission before calling AWS, and submit with
the job contract's environment (ML_PLATFORM_CHECKPOINT_URI, ML_PLATFORM_JOB_NAME); `budget what-if` runs the
guard's decision with no AWS at all."""

import json
from datetime import datetime, timezone

import pytest

from ml_platform_constructs.operations import jobs
from ml_platform_constructs.operations import cli as operations

ACCOUNT, REGION = "111122223333", "eu-west-1"
ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/resnet:1"
ROOT = "s3://team-data/checkpoints/training/"


class Paginator:
    def __init__(self, pages):
        self.pages = pages

    def paginate(self, **kwargs):
        return self.pages(**kwargs)


class FakeBatch:
    """The Batch API as a deployed TrainingQueue "training" (single- and multi-node) and another team's queue show
    it: job queues tagged with their queue, compute environments, the queue's own job definitions."""

    def __init__(self, jobs_=()):
        self.submitted, self.registered, self.terminated, self.cancelled = [], [], [], []
        self.jobs = {j["jobId"]: j for j in jobs_}
        self.queues = [
            {"jobQueueArn": f"{ARN}:job-queue/q1", "tags": {"ml-platform:queue": "training"},
             "computeEnvironmentOrder": [{"computeEnvironment": f"{ARN}:compute-environment/spot"}]},
            {"jobQueueArn": f"{ARN}:job-queue/q2", "tags": {"ml-platform:queue": "training"},
             "computeEnvironmentOrder": [{"computeEnvironment": f"{ARN}:compute-environment/mnp"}]},
            {"jobQueueArn": f"{ARN}:job-queue/other", "tags": {"ml-platform:queue": "vision"},
             "computeEnvironmentOrder": []},
            {"jobQueueArn": f"{ARN}:job-queue/untagged", "computeEnvironmentOrder": []}]
        self.environments = [
            {"computeEnvironmentArn": f"{ARN}:compute-environment/spot", "computeResources": {
                "instanceTypes": ["g5.xlarge", "g5.2xlarge"], "maxvCpus": 64}},
            {"computeEnvironmentArn": f"{ARN}:compute-environment/mnp", "computeResources": {
                "instanceTypes": ["g5.12xlarge"], "maxvCpus": 192, "placementGroup": "pg"}}]
        tags = {"ml-platform:queue": "training", "ml-platform:checkpoint-root": ROOT}
        container = {"image": IMAGE, "environment": []}
        self.definitions = [
            {"jobDefinitionArn": f"{ARN}:job-definition/train:1", "jobDefinitionName": "train", "revision": 1,
             "type": "container", "containerProperties": dict(container),
             "tags": {**tags, "ml-platform:job-definition": "single-node"}},
            {"jobDefinitionArn": f"{ARN}:job-definition/train:2", "jobDefinitionName": "train", "revision": 2,
             "type": "container", "containerProperties": dict(container),
             "tags": {**tags, "ml-platform:job-definition": "single-node"}},
            {"jobDefinitionArn": f"{ARN}:job-definition/mnp:1", "jobDefinitionName": "mnp", "revision": 1,
             "type": "multinode", "nodeProperties": {"nodeRangeProperties": [{"container": dict(container)}]},
             "tags": {**tags, "ml-platform:job-definition": "multi-node"}},
            {"jobDefinitionArn": f"{ARN}:job-definition/retrain:5", "jobDefinitionName": "retrain", "revision": 5,
             "type": "container", "containerProperties": dict(container), "tags": {"ml-platform:queue": "training"}}]

    def get_paginator(self, operation):
        if operation == "describe_job_queues":
            return Paginator(lambda: [{"jobQueues": self.queues}])
        if operation == "describe_job_definitions":
            return Paginator(lambda status: [{"jobDefinitions": self.definitions}])
        return Paginator(lambda jobQueue, jobStatus: [{"jobSummaryList": [
            {"jobName": j["jobName"], "jobId": j["jobId"]} for j in self.jobs.values()
            if j["jobQueue"] == jobQueue and j["status"] == jobStatus]}])

    def describe_compute_environments(self, computeEnvironments):  # noqa: N803 (boto3 names)
        return {"computeEnvironments": [e for e in self.environments if e["computeEnvironmentArn"] in computeEnvironments]}

    def describe_job_definitions(self, jobDefinitions):  # noqa: N803
        return {"jobDefinitions": [json.loads(json.dumps(d)) for d in self.definitions
                                   if d["jobDefinitionArn"] in jobDefinitions]}

    def register_job_definition(self, **request):
        self.registered.append(request)
        return {"jobDefinitionArn": f"{ARN}:job-definition/{request['jobDefinitionName']}:1"}

    def submit_job(self, **request):
        self.submitted.append(request)
        return {"jobId": "job-1", "jobName": request["jobName"]}

    def describe_jobs(self, jobs):
        return {"jobs": [self.jobs[j] for j in jobs if j in self.jobs]}

    def terminate_job(self, jobId, reason):  # noqa: N803
        self.terminated.append((jobId, reason))

    def cancel_job(self, jobId, reason):  # noqa: N803
        self.cancelled.append((jobId, reason))


def test_a_queue_is_found_by_its_name_from_the_constructs_tags():
    target = jobs.find_queue(FakeBatch(), "training")
    assert (target.job_queue, target.job_definition) == (f"{ARN}:job-queue/q1", f"{ARN}:job-definition/train:2")
    assert (target.multi_node_job_queue, target.multi_node_job_definition) == (f"{ARN}:job-queue/q2",
                                                                                f"{ARN}:job-definition/mnp:1")
    assert target.instance_types == ("g5.2xlarge", "g5.xlarge") and target.checkpoint_root == ROOT


def test_a_multi_node_only_queue_is_found_and_takes_only_multi_node_jobs():
    batch = FakeBatch()
    batch.queues = [q for q in batch.queues if not q["jobQueueArn"].endswith("/q1")]
    batch.definitions = [d for d in batch.definitions if d["jobDefinitionName"] != "train"]
    target = jobs.find_queue(batch, "training")
    assert (target.job_queue, target.job_definition, target.instance_types) == ("", "", ())
    assert target.multi_node_job_queue == f"{ARN}:job-queue/q2" and target.checkpoint_root == ROOT
    assert target.capacity == "multi-node only; multi-node up to 192 vCPUs"
    with pytest.raises(SystemExit, match=r"--nodes 1: queue training is multi-node only"):
        jobs.check_submission(target, IMAGE, ["python", "train.py"], name="run-1")
    submission = jobs.check_submission(target, IMAGE, ["python", "train.py"], name="run-1", nodes=2)
    jobs.submit(batch, submission)
    assert batch.submitted[-1]["jobQueue"] == f"{ARN}:job-queue/q2"


def test_an_unknown_queue_names_the_training_queues_there():
    with pytest.raises(SystemExit, match=r"^error: no training queue 'trainig' in this account and Region \(training "
                                         r"queues there: training, vision\): pass TrainingQueue.queue_name"):
        jobs.find_queue(FakeBatch(), "trainig")


def test_submit_job_sets_the_job_contract():
    batch = FakeBatch()
    job = jobs.submit_job(batch, queue="training", name="resnet-1", image=IMAGE, command=["python", "train.py"],
                          tags={"team": "b"})
    assert job == {"job_id": "job-1", "job_name": "resnet-1", "checkpoint_uri": f"{ROOT}resnet-1/"}
    [request] = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/q1" and request["jobDefinition"] == f"{ARN}:job-definition/train:2"
    assert request["containerOverrides"]["environment"] == [
        {"name": "ML_PLATFORM_CHECKPOINT_URI", "value": f"{ROOT}resnet-1/"},
        {"name": "ML_PLATFORM_JOB_NAME", "value": "resnet-1"}]
    assert request["tags"] == {"ml-platform:queue": "training", "team": "b"} and batch.registered == []


def test_a_multi_node_job_goes_to_the_multi_node_queue_with_another_image_as_a_revision():
    batch = FakeBatch()
    other = IMAGE.replace(":1", ":2")
    jobs.submit_job(batch, queue="training", name="llm-1", image=other, command=["bash", "run.sh"], nodes=2)
    [request] = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/q2" and request["nodeOverrides"]["numNodes"] == 2
    assert batch.registered[0]["jobDefinitionName"] == "mnp-submitted"
    assert batch.registered[0]["nodeProperties"]["nodeRangeProperties"][0]["container"]["image"] == other


class StrictBatch(FakeBatch):
    """Batch as it is: CloudFormation puts its own aws:cloudformation:* tags on the definitions it deploys, and a
    request may not set a tag with AWS's reserved prefix, in any case, in its key or value
    (https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html)."""

    def __init__(self):
        super().__init__()
        for definition in self.definitions:
            definition["tags"].update({"aws:cloudformation:stack-name": "team-Training",
                                       "AWS:CloudFormation:logical-id": "QueueJobDefinition", "owner": "aws:ops"})

    def register_job_definition(self, **request):
        reserved = [k for k, v in request.get("tags", {}).items()
                    if k.lower().startswith("aws:") or v.lower().startswith("aws:")]
        if reserved:
            raise RuntimeError(f"ClientException: tags {reserved} use the reserved prefix aws:")
        return super().register_job_definition(**request)


@pytest.mark.parametrize("nodes", [1, 2])
def test_another_image_registers_a_revision_without_awss_own_tags(nodes):
    batch = StrictBatch()
    jobs.submit_job(batch, queue="training", name="resnet-2", image=IMAGE.replace(":1", ":2"), command=["x"],
                    nodes=nodes)
    [registered] = batch.registered
    assert registered["tags"] == {"ml-platform:queue": "training", "ml-platform:checkpoint-root": ROOT,
                                  "ml-platform:job-definition": "multi-node" if nodes > 1 else "single-node"}
    assert len(batch.submitted) == 1


@pytest.mark.parametrize("image, message", [
    ("docker.io/library/pytorch:2", "not an Amazon ECR image"),
    (f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/resnet", "no tag or digest: name the image's version, "
                                                         f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/resnet:TAG or "),
], ids=["not-ecr", "no-tag"])
def test_an_image_is_refused_saying_what_is_missing(image, message):
    batch = FakeBatch()
    with pytest.raises(SystemExit, match="^error: --image .*" + message):
        jobs.submit_job(batch, queue="training", name="x", image=image, command=["python"])
    assert batch.submitted == []


@pytest.mark.parametrize("kwargs, message", [
    ({"gpus": 2}, r"--gpus 2: the queue's types \(g5.2xlarge, g5.xlarge\) have 1 GPU\(s\) per instance"),
    ({"nodes": 9}, r"--nodes 9: multi-node jobs take 2-8 nodes"),
    ({"name": "bad name"}, r"--name 'bad name': 1-128 letters"),
    ({"name": None}, r"--name is required: it is the job's identity"),
])
def test_a_submission_that_cannot_run_is_refused_before_aws(kwargs, message):
    batch = FakeBatch()
    with pytest.raises(SystemExit, match=message):
        jobs.submit_job(batch, **{"queue": "training", "name": "ok", "image": IMAGE, "command": ["python"], **kwargs})
    assert batch.submitted == []


class FakeSession:
    def __init__(self, clients, region_name=None):
        self.region_name, self._clients = region_name or REGION, clients

    def get_credentials(self):
        return object()

    def client(self, name, region_name=None):
        return self._clients[name]


def cli(argv, **clients):
    return operations.main(argv, session_factory=lambda region_name=None: FakeSession(clients, region_name))


def test_the_cli_submits_with_the_command_after_the_double_dash(capsys):
    batch = FakeBatch()
    assert cli(["job", "submit", "training", "--image", IMAGE, "--name", "resnet-1", "--region", REGION, "--",
                "python", "train.py", "--epochs", "90"], batch=batch) == 0
    assert batch.submitted[0]["containerOverrides"]["command"] == ["python", "train.py", "--epochs", "90"]
    out = capsys.readouterr().out
    assert f"checkpoints: {ROOT}resnet-1/ (every attempt resumes from the newest)" in out


def test_the_cli_cancels_only_a_job_of_the_named_queue(capsys):
    running = {"jobId": "j-1", "jobName": "resnet-1", "status": "RUNNING", "jobQueue": f"{ARN}:job-queue/q1"}
    foreign = {"jobId": "j-2", "jobName": "other", "status": "RUNNING", "jobQueue": f"{ARN}:job-queue/other"}
    batch = FakeBatch([running, foreign])
    assert cli(["job", "cancel", "training", "j-1"], batch=batch) == 0
    assert batch.terminated == [("j-1", "cancelled with python -m ml_platform_constructs job cancel")]
    with pytest.raises(SystemExit, match=r"^error: job j-2 is on .*job-queue/other, not on training queue training"):
        cli(["job", "cancel", "training", "j-2"], batch=batch)
    assert cli(["job", "list", "training"], batch=batch) == 0
    assert "training: resnet-1 j-1 RUNNING" in capsys.readouterr().out


def test_budget_what_if_needs_no_aws_and_prices_the_guards_region(capsys):
    assert cli(["budget", "what-if", "--region", "eu-west-1", "--monthly-limit", "4000", "--on-demand",
                "g5.12xlarge=2", "--now", "2026-12-01T06:00:00+00:00", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["region_priced"] == "eu-west-1" and result["decision"] == "warn"
    assert result["hourly_cost"] == pytest.approx(2 * 6.33167, abs=0.01)  # eu-west-1's g5.12xlarge, not 5.672


def test_budget_what_if_with_a_teams_price_table(tmp_path, capsys):
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"regions": {"mx-central-1": {"on_demand_hourly": {"g5.xlarge": 2.0},
                                                              "spot_discount": {"g5": 0.5}}}}))
    assert cli(["--region", "mx-central-1", "budget", "what-if", "--monthly-limit", "100", "--price-table", str(table),
                "--running", "g5.xlarge=1", "--now", datetime(2026, 12, 1, tzinfo=timezone.utc).isoformat(),
                "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hourly_cost"] == pytest.approx(1.0)


class FakeCloudWatch:
    def get_metric_data(self, **kwargs):
        return {"MetricDataResults": []}


def test_the_cli_prices_a_job_at_its_regions_rates(capsys):
    hour = 3600 * 1000
    finished = {"jobId": "j-1", "jobName": "resnet-1", "status": "SUCCEEDED", "jobQueue": f"{ARN}:job-queue/q1",
                "container": {"resourceRequirements": [{"type": "GPU", "value": "1"}]},
                "attempts": [{"startedAt": 0, "stoppedAt": 2 * hour, "container": {"containerInstanceArn": "ci-1"}}]}
    assert cli(["job", "cost", "j-1", "--instance-type", "g5.xlarge", "--lifecycle", "on-demand", "--json"],
               batch=FakeBatch([finished]), ecs=None, cloudwatch=FakeCloudWatch()) == 0
    cost = json.loads(capsys.readouterr().out)
    assert cost["usd"] == pytest.approx(2 * 1.123)  # two hours of an On-Demand g5.xlarge in eu-west-1


def test_the_examples_own_tooling_submits_through_the_library(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    import boto3

    batch = FakeBatch()
    monkeypatch.setattr(boto3, "client", lambda service, region_name=None: batch)
    monkeypatch.setattr(sys, "argv", ["submit_job.py", "resnet50-run1", IMAGE, "python", "train.py", "--epochs", "90"])
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "team_stack" / "submit_job.py"))
    assert batch.submitted[0]["containerOverrides"]["command"] == ["python", "train.py", "--epochs", "90"]
    assert capsys.readouterr().out == f"resnet50-run1: job id job-1, checkpoints under {ROOT}resnet50-run1/\n"


def test_a_revision_registered_for_another_image_never_becomes_the_queues_own_definition():
    # `job submit --image` registers <family>-submitted revisions with the definition's tags; revisions count per
    # family, so that family's revision 7 must not win over the queue's own revision 2 (a deploy's new role, retry
    # strategy or size would be lost to a copy of an older revision).
    batch = FakeBatch()
    stale = {**batch.definitions[1], "jobDefinitionArn": f"{ARN}:job-definition/train-submitted:7",
             "jobDefinitionName": "train-submitted", "revision": 7}
    stale_mnp = {**batch.definitions[2], "jobDefinitionArn": f"{ARN}:job-definition/mnp-submitted:3",
                 "jobDefinitionName": "mnp-submitted", "revision": 3}
    batch.definitions += [stale, stale_mnp]
    target = jobs.find_queue(batch, "training")
    assert target.job_definition == f"{ARN}:job-definition/train:2"
    assert target.multi_node_job_definition == f"{ARN}:job-definition/mnp:1"


def test_an_evaluation_runs_its_deployed_definition_as_it_is_and_takes_no_image():
    """grant_evaluate allows the deployed evaluation revision only (no registration): submit_evaluation submits it
    as it is; its deprecated image= went in 0.13.0."""
    batch = FakeBatch()
    batch.definitions.append({"jobDefinitionArn": f"{ARN}:job-definition/evaluate:3", "jobDefinitionName": "evaluate",
                              "revision": 3, "type": "container", "containerProperties": {"image": IMAGE},
                              "tags": {"ml-platform:queue": "training", "ml-platform:job-definition": "evaluation"}})
    target = jobs.find_queue(batch, "training")
    jobs.submit_evaluation(batch, target, name="evaluate-1", command=["python", "eval.py"], environment={"A": "1"})
    assert batch.submitted[-1]["jobDefinition"] == f"{ARN}:job-definition/evaluate:3" and batch.registered == []
    with pytest.raises(TypeError, match="image"):
        jobs.submit_evaluation(batch, target, name="evaluate-2", command=["python"], environment={},
                               image=IMAGE.replace(":1", ":9"))
    assert batch.registered == [] and len(batch.submitted) == 1
