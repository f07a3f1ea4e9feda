"""The elastic controller (runtime/handlers/elastic_controller.py) through its Lambda entry point: a job that exits 86 is
resubmitted once, under its name, at the size it asked for where the queue fits it, never growing while a budget stop
holds (kept pending instead, no queue turned on); every other ending is left alone. DynamoDB, Parameter Store and S3
in moto; AWS Batch in the stateful fake (batch_fake.py)."""

import itertools
import json

import boto3
import pytest
from moto import mock_aws

from batch_fake import FakeBatch
from ml_platform_constructs.runtime.handlers import elastic_controller as controller
from ml_platform_constructs.runtime.handlers.pending_jobs import PendingJobs
from test_retrain import Sns

NOW = 1_796_000_000.0
ROOT = "s3://datasets/checkpoints/training/"


@pytest.fixture(scope="module")
def emulated():
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="testing",
                                        aws_secret_access_key="testing")
        s3 = session.client("s3")
        s3.create_bucket(Bucket="datasets")
        yield session.client("dynamodb"), session.client("ssm"), s3, itertools.count(1)


@pytest.fixture
def world(emulated, monkeypatch):
    """A queue with a single-node (Spot) and a multi-node job queue; the multi-node one fits 1, 2 and 4 nodes."""
    dynamodb, ssm, s3, counter = emulated
    n = next(counter)
    table = f"claims-{n}"
    dynamodb.create_table(TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    batch = FakeBatch()
    tags = {"ml-platform:queue": "training"}
    single = batch.add_queue(f"env{n}-single", tags=tags)
    multi = batch.add_queue(f"env{n}-multi", tags=tags)
    own = (("ML_PLATFORM_ELASTIC_SIZES", "1,2,4"), ("MLFLOW_TRACKING_URI", "arn:mlflow:old"))
    single_definition = batch.register(f"env{n}-single-node", tags=tags, environment=own)
    multi_definition = batch.register(f"env{n}-multi-node", tags=tags, environment=own)
    for key, value in {"JOB_QUEUE": single, "MULTI_NODE_JOB_QUEUE": multi, "SIZES": "1,2,4",
                       "CHECKPOINT_ROOT": ROOT, "CLAIMS_TABLE": table, "TOPIC_ARN": "arn:aws:sns:us-east-1:1:alerts",
                       "RECORD_KEY_ID": ""}.items():
        monkeypatch.setenv(key, value)
    sns = Sns()
    name = f"llm-{n}"
    uri = f"{ROOT}{name}/"

    def start(nodes=1, elastic="1:4"):
        """The job as job submit --nodes 1:4 leaves it, running at ``nodes``."""
        queue, definition = (single, single_definition) if nodes == 1 else (multi, multi_definition)
        job_tags = {**tags, controller.SINGLE_NODE_DEFINITION_TAG: single_definition,
                    controller.MULTI_NODE_DEFINITION_TAG: multi_definition}
        if elastic:
            job_tags[controller.ELASTIC_TAG] = elastic
        overrides = {"command": ["python", "train.py", "--epochs", "90"],
                     "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": uri},
                                     {"name": "ML_PLATFORM_JOB_NAME", "value": name},
                                     {"name": "ML_PLATFORM_ELASTIC", "value": elastic or ""}],
                     "resourceRequirements": [{"type": "GPU", "value": "8"}]}
        request = {"jobName": name, "jobQueue": queue, "jobDefinition": definition, "tags": job_tags,
                   "propagateTags": True}
        if nodes > 1:
            request["nodeOverrides"] = {"numNodes": nodes, "nodePropertyOverrides": [
                {"targetNodes": "0:", "containerOverrides": overrides}]}
        else:
            request["containerOverrides"] = overrides
        job_id = batch.submit_job(**request)["jobId"]
        batch.calls.clear()
        return job_id

    def ask(job_id, to, reason="scale out: a plateau on busy GPUs"):
        s3.put_object(Bucket="datasets", Key=f"checkpoints/training/{name}/{controller.REQUEST_FILE}",
                      Body=json.dumps({"to": to, "reason": reason, "job_id": job_id, "restart_seconds": 600}))

    def fire(job_id, event_id=None, at=NOW):
        event = {"id": event_id or f"event-{job_id}", "time": "2026-12-03T03:00:00Z", "source": "aws.batch",
                 "detail-type": "Batch Job State Change",
                 "detail": {"jobId": job_id, "jobName": name, "status": batch.jobs[job_id]["status"]}}
        return controller.handler(event, None, batch=batch, s3=s3, sns=sns, dynamodb=dynamodb, ssm=ssm, now=at)

    def decision(job_id):
        body = s3.get_object(Bucket="datasets", Key=f"checkpoints/training/{name}/resizes/{job_id}.json")["Body"]
        return json.loads(body.read())

    return {"batch": batch, "single": single, "multi": multi, "start": start, "ask": ask, "fire": fire, "sns": sns,
            "ssm": ssm, "name": name, "uri": uri, "decision": decision, "multi_definition": multi_definition,
            "single_definition": single_definition, "dynamodb": dynamodb, "table": table}


def test_a_job_that_asks_for_two_nodes_is_resubmitted_once_on_the_multi_node_queue_under_its_name(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    result = world["fire"](job)
    (request,) = world["batch"].submitted()
    assert result["submitted"] and (result["from"], result["to"]) == (1, 2)
    assert request["jobName"] == world["name"] and request["jobQueue"] == world["multi"]
    assert request["jobDefinition"] == world["multi_definition"]
    assert request["nodeOverrides"]["numNodes"] == 2
    overrides = request["nodeOverrides"]["nodePropertyOverrides"][0]
    assert overrides["targetNodes"] == "0:"
    assert overrides["containerOverrides"]["command"] == ["python", "train.py", "--epochs", "90"]
    names = [e["name"] for e in overrides["containerOverrides"]["environment"]]
    assert "ML_PLATFORM_CHECKPOINT_URI" in names and not [n for n in names if n.startswith("AWS_BATCH")]
    assert overrides["containerOverrides"]["resourceRequirements"] == [{"type": "GPU", "value": "8"}]
    assert request["tags"][controller.ELASTIC_TAG] == "1:4"
    recorded = world["decision"](job)
    assert (recorded["from"], recorded["asked"], recorded["to"], recorded["new_job_id"]) == (1, 2, 2,
                                                                                             result["newJobId"])
    assert recorded["estimate"]["restart_seconds"] == 600
    assert len(world["sns"].messages) == 1 and "resized from 1 to 2 node(s)" in world["sns"].messages[0]


def test_an_event_delivered_twice_resubmits_once_and_alerts_once(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    first = world["fire"](job, event_id="e1")
    again = world["fire"](job, event_id="e1", at=NOW + 5)
    other = world["fire"](job, event_id="e2", at=NOW + 10)  # another event of the same ending
    assert len(world["batch"].submitted()) == 1 and first["submitted"]
    assert again["redelivered"] and other["redelivered"] and other["newJobId"] == first["newJobId"]
    assert len(world["sns"].messages) == 1


def test_a_multi_node_job_that_asks_for_one_node_goes_back_to_the_single_node_queue(world):
    job = world["start"](nodes=2)
    world["ask"](job, 1, reason="scale in: GPU utilization under 40% for 3 periods")
    world["batch"].end(job, 86)
    result = world["fire"](job)
    (request,) = world["batch"].submitted()
    assert result["to"] == 1 and request["jobQueue"] == world["single"]
    assert request["jobDefinition"] == world["single_definition"] and "nodeOverrides" not in request
    assert request["containerOverrides"]["command"][:2] == ["python", "train.py"]


@pytest.mark.parametrize("code", [0, 1, 85, 143])
def test_any_other_ending_is_left_alone(world, code):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, code)
    result = world["fire"](job)
    assert not result["submitted"] and world["batch"].submitted() == [] and world["sns"].messages == []


@pytest.mark.parametrize("asked, elastic, expected", [
    (8, "1:8", 4),  # the queue's max vCPUs fit 4 nodes at most (SIZES)
    (4, "1:2", 2),  # the job's own range ends at 2
    (3, "1:8", 2),  # not an allowed size: the nearest on the way
])
def test_a_size_the_queue_or_the_range_cannot_hold_becomes_the_nearest_allowed(world, asked, elastic, expected):
    job = world["start"](elastic=elastic)
    world["ask"](job, asked)
    world["batch"].end(job, 86)
    result = world["fire"](job)
    assert result["to"] == expected
    assert world["batch"].submitted()[0]["nodeOverrides"]["numNodes"] == expected


def test_a_budget_stop_keeps_the_job_pending_at_its_size_and_turns_no_queue_on(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    for queue in (world["single"], world["multi"]):
        world["batch"].queues[queue]["state"] = "DISABLED"
    result = world["fire"](job)
    assert not result["submitted"] and result["to"] == 1 and world["batch"].submitted() == []
    assert not [c for c in world["batch"].calls if c[0] in ("queue", "environment")]
    (kept,) = PendingJobs(world["ssm"]).of_queue(world["single"])
    assert kept["request"]["jobName"] == world["name"] and kept["source"] == "elastic-resize"
    assert "containerOverrides" in kept["request"] and "budget stop" in world["sns"].messages[0]
    assert world["decision"](job)["held"] == "budget stop"
    assert world["fire"](job)["redelivered"]  # and only once


def test_a_job_without_its_request_goes_on_at_its_own_size(world):
    job = world["start"](nodes=2)
    world["ask"]("job-999", 4)  # the request names another job
    world["batch"].end(job, 86)
    result = world["fire"](job)
    assert result["submitted"] and result["to"] == 2
    assert "missing or another job's" in world["sns"].messages[0]


def test_a_job_not_submitted_elastic_is_not_resubmitted_and_the_alert_says_how(world):
    job = world["start"](elastic=None)
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    result = world["fire"](job)
    assert result["skipped"] == "not elastic" and world["batch"].submitted() == []
    assert "--nodes MIN:MAX" in world["sns"].messages[0]


def test_a_failed_submission_gives_the_claim_back_and_the_retry_submits(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)

    def refuse(request):
        world["batch"].before_submit = None
        raise RuntimeError("throttled")
    world["batch"].before_submit = refuse
    with pytest.raises(RuntimeError):
        world["fire"](job, event_id="e1")
    result = world["fire"](job, event_id="e1", at=NOW + 30)
    assert result["submitted"] and len(world["batch"].submitted()) == 1


def test_a_claim_whose_function_died_is_taken_over_after_its_lease_without_a_second_job(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    # The first function claimed, submitted, and died before recording it: its claim still reads 'claimed'.
    first = world["fire"](job, event_id="e1")
    assert first["submitted"]
    claims = controller.Claims(world["dynamodb"], world["table"])
    claims.update(f"resize#{job}", "e1", state="claimed")
    held = world["fire"](job, event_id="e2", at=NOW + 30)  # inside the first one's lease: it is still at work
    assert held["in_flight"] and not held["submitted"]
    taken = world["fire"](job, event_id="e3", at=NOW + controller.STALE_CLAIM_SECONDS + 1)
    assert taken["submitted"] and taken["newJobId"] == first["newJobId"]  # the job of that name is already there
    assert len(world["batch"].submitted()) == 1


@pytest.mark.parametrize("asked, current, low, high, sizes, expected", [
    (2, 1, 1, 8, [1, 2, 4, 8], 2), (16, 4, 1, 8, [1, 2, 4, 8], 8), (1, 4, 2, 8, [1, 2, 4, 8], 2),
    (None, 4, 1, 8, [1, 2, 4, 8], 4), (2, 1, 1, 8, [1], 1), (5, 4, 1, 8, [1, 2, 4, 8], 4),
])
def test_choose(asked, current, low, high, sizes, expected):
    assert controller.choose(asked, current, low, high, sizes)[0] == expected


def test_choose_says_when_no_size_fits_the_range():
    size, why = controller.choose(8, 1, 8, 8, [1, 2, 4])
    assert size is None and "no size the queue fits (1, 2, 4) is in the job's range 8:8" in why


def test_the_job_side_the_submission_and_the_controller_agree_on_the_contract(world):
    """The request ml_platform_job writes is the one the controller reads; the codes, files and tags are one set."""
    from ml_platform_job import elastic as job_side
    from ml_platform_constructs.operations import jobs

    assert (controller.RESIZE_EXIT_CODE, controller.REQUEST_FILE, controller.DECISION_PREFIX) == (
        job_side.RESIZE_EXIT_CODE, job_side.REQUEST_FILE, job_side.DECISION_PREFIX)
    assert (controller.ELASTIC_TAG, controller.SINGLE_NODE_DEFINITION_TAG, controller.MULTI_NODE_DEFINITION_TAG) == (
        jobs.ELASTIC_TAG, jobs.ELASTIC_DEFINITION_TAGS[jobs.SINGLE_NODE], jobs.ELASTIC_DEFINITION_TAGS[jobs.MULTI_NODE])
    assert (jobs.ELASTIC_VARIABLE, jobs.ELASTIC_SIZES_VARIABLE) == (job_side.ELASTIC_VARIABLE, job_side.SIZES_VARIABLE)
    job = world["start"]()
    decision = job_side.Decision(2, "scale out: a plateau on busy GPUs", restart_seconds=600.0, restart_usd=1.5,
                                 saved_seconds=3000.0, saved_usd=4.0)
    text = job_side.request_text(decision, step=400, samples_seen=51200, job_id=job)
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket="datasets", Key=f"checkpoints/training/{world['name']}/{controller.REQUEST_FILE}", Body=text)
    world["batch"].end(job, job_side.RESIZE_EXIT_CODE)
    result = world["fire"](job)
    assert result["to"] == 2 and world["decision"](job)["estimate"]["saved_usd"] == 4.0


def test_a_deploy_that_deregistered_the_jobs_definition_resubmits_with_the_familys_active_revision(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    deployed = world["batch"].register(world["multi_definition"].rsplit("/", 1)[-1].split(":")[0],
                                       tags={"ml-platform:queue": "training"},
                                       environment=(("ML_PLATFORM_ELASTIC_SIZES", "1,2"),))
    result = world["fire"](job)
    (request,) = world["batch"].submitted()
    assert result["submitted"] and request["jobDefinition"] == deployed
    assert "was deregistered (a deploy): resubmitted with" in world["sns"].messages[0]


def test_the_resubmission_carries_the_submissions_variables_not_the_definitions(world):
    """DescribeJobs merges the definition's variables with the submission's: copying them all would freeze a
    deploy's new sizes or tracking URI for every later resize."""
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    world["fire"](job)
    (request,) = world["batch"].submitted()
    names = [e["name"] for e in request["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"][
        "environment"]]
    assert names == ["ML_PLATFORM_CHECKPOINT_URI", "ML_PLATFORM_JOB_NAME", "ML_PLATFORM_ELASTIC",
                     "ML_PLATFORM_ELASTIC_SIZES"]


def test_two_deliveries_of_one_event_running_together_submit_once(world):
    """The first claimed it and is submitting: the second returns (no error, no alarm); the first's lease expires
    with its invocation, and Lambda's retry of it then finds the job submitted."""
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    claims = controller.Claims(world["dynamodb"], world["table"])
    claims.put({"pk": f"resize#{job}", "event": "same", "owner": "the-first", "state": "claimed", "at": NOW},
               "attribute_not_exists(#pk)", {})
    second = world["fire"](job, event_id="same")
    assert second["in_flight"] and world["batch"].submitted() == [] and world["sns"].messages == []
    retried = world["fire"](job, event_id="same", at=NOW + controller.STALE_CLAIM_SECONDS + 60)
    assert retried["submitted"] and len(world["batch"].submitted()) == 1


def test_a_deploy_of_another_image_is_not_followed_the_run_would_refuse_it(world):
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    family = world["multi_definition"].rsplit("/", 1)[-1].split(":")[0]
    world["batch"].register(family, image="img:2", tags={"ml-platform:queue": "training"})
    result = world["fire"](job)
    assert not result["submitted"] and world["batch"].submitted() == []
    assert "of another image (img:2; the run's is img:1)" in world["sns"].messages[0]


def test_the_resubmission_tells_the_queues_sizes_now(world, monkeypatch):
    """A job on a definition copy of its own image keeps the sizes of its submission: the controller's are passed."""
    monkeypatch.setenv("SIZES", "1,2")
    job = world["start"]()
    world["ask"](job, 2)
    world["batch"].end(job, 86)
    world["fire"](job)
    (request,) = world["batch"].submitted()
    environment = request["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]["environment"]
    assert {"name": "ML_PLATFORM_ELASTIC_SIZES", "value": "1,2"} in environment
