"""Elastic jobs from the platform app: ./platform job submit ENV QUEUE --nodes MIN:MAX (checked against config's
elastic_max_nodes before any AWS call), ./platform job show ENV JOB (the run's attempts at their sizes, each resize
with its restart and cost, the controller's decisions), and runs show's resizes."""

import json

import boto3
import pytest
from moto import mock_aws

from ops import job as job_ops
from ops.runs import resize_lines
from test_job_ops_commands import ARN, IMAGE, Batch, CloudFormation, Logs, job, run


def test_an_elastic_submit_starts_at_min_with_its_range_and_each_kinds_definition(capsys):
    batch = Batch()
    lines = run(["submit", "staging", "training", "--image", IMAGE, "--name", "llm", "--nodes", "1:2", "--",
                 "python", "train.py"], batch, capsys)
    (request,) = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/single" and "nodeOverrides" not in request
    assert {"name": "ML_PLATFORM_ELASTIC", "value": "1:2"} in request["containerOverrides"]["environment"]
    assert request["tags"]["ml-platform:elastic"] == "1:2"
    assert request["tags"]["ml-platform:elastic-single-node"] == f"{ARN}:job-definition/single:1"
    assert request["tags"]["ml-platform:elastic-multi-node"] == f"{ARN}:job-definition/multi:1"
    assert "elastic 1:2, starting at 1 node(s)" in lines[1]


@pytest.mark.parametrize("queue, nodes, message", [
    ("training", "1:4", "fits at most 2 nodes"),  # staging's multi-node environment: 64 vCPUs of 32-vCPU nodes
])
def test_a_range_config_cannot_run_is_refused_before_any_aws_call(capsys, queue, nodes, message):
    with pytest.raises(SystemExit) as ended:
        job_ops.main(["submit", "staging", queue, "--image", IMAGE, "--name", "llm", "--nodes", nodes, "--", "python"],
                     session_factory=lambda env: pytest.fail("no AWS"))
    assert message in str(ended.value.code)


def test_an_environment_without_elastic_jobs_says_how_to_get_them(capsys):
    with pytest.raises(SystemExit) as ended:
        job_ops.main(["submit", "dev", "training", "--image", IMAGE.replace("222222222222", "111111111111"),
                      "--name", "llm", "--nodes", "1:2", "--", "python"], session_factory=lambda env: pytest.fail("AWS"))
    assert "has no elastic jobs" in str(ended.value.code) and "elastic_max_nodes" in str(ended.value.code)


def attempt(number, nodes, started, ended, outcome, **more):
    return {"number": number, "nodes": nodes, "instance_type": "g5.8xlarge", "lifecycle": "on-demand" if nodes > 1
            else "spot", "started_at": started, "ended_at": ended, "last_seen_at": ended, "outcome": outcome, **more}


RECORD = {"run_id": "run-1", "status": "FINISHED", "cost_usd": 12.5, "passport": {"attempts": [
    attempt(1, 1, "2026-12-03T00:00:00Z", "2026-12-03T02:00:00Z", "resized",
            resize={"to": 2, "step": 400, "reason": "scale out: validation loss not 1% better in 3 evaluations",
                    "restart_seconds": 600.0, "saved_seconds": 3000.0, "saved_usd": 4.0}),
    attempt(2, 2, "2026-12-03T02:10:00Z", "2026-12-03T03:00:00Z", "resized",
            resize={"to": 1, "step": 900, "reason": "scale in: GPU utilization under 40% for 3 periods",
                    "restart_seconds": 600.0}),
    attempt(3, 1, "2026-12-03T03:05:00Z", "2026-12-03T04:00:00Z", "finished")]}}


def test_the_runs_resizes_say_from_to_the_restart_and_its_cost():
    lines = resize_lines(RECORD)
    assert lines[0] == "  resizes (2):"
    assert lines[1].startswith("    attempt 1, step 400: 1 -> 2 node(s), restart 600 s, ")
    assert "USD (expected 600 s; saves 3000 s, 4.00 USD): scale out" in lines[1]
    assert lines[2].startswith("    attempt 2, step 900: 2 -> 1 node(s), restart 300 s, ")


def test_a_run_without_resizes_shows_none():
    assert resize_lines({"passport": {"attempts": [attempt(1, 1, "a", "b", "finished")]}}) == []


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        client.create_bucket(Bucket="staging-datasets")
        yield client


def test_job_show_lists_the_runs_sizes_resizes_and_the_controllers_decisions(s3, capsys):
    uri = "s3://staging-datasets/checkpoints/training/llm/"
    s3.put_object(Bucket="staging-datasets", Key="checkpoints/training/llm/passport.json", Body=json.dumps(RECORD))
    s3.put_object(Bucket="staging-datasets", Key="checkpoints/training/llm/resizes/job-1.json", Body=json.dumps(
        {"job_id": "job-1", "new_job_id": "job-2", "from": 1, "to": 2, "asked": 2, "why": "as asked"}))
    batch = Batch([job("job-3", "single", "SUCCEEDED", tags={"ml-platform:elastic": "1:2"},
                       container={"environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": uri}]})])
    clients = {"batch": batch, "cloudformation": CloudFormation(), "logs": Logs(), "s3": s3}
    session = type("Session", (), {"client": lambda self, name: clients[name]})()
    assert job_ops.main(["show", "staging", "job-3"], session_factory=lambda env: session) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "name-job-3 job-3: SUCCEEDED" and out[1] == "  1 node(s), elastic 1:2"
    assert out[2] == "  run run-1: FINISHED, 3 attempt(s) at 1, 2, 1 node(s); cost 12.5 USD"
    assert out[3] == "  resizes (2):"
    assert out[-1] == "  controller: job-1 -> job-2, 1 -> 2 node(s) (asked 2; as asked)"
