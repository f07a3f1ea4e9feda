"""The example training script follows the job contract: resume from the newest checkpoint, stop cleanly."""

import importlib.util
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_with_checkpoints.py"
spec = importlib.util.spec_from_file_location("train_with_checkpoints", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="datasets")
        yield example.Job({"ML_PLATFORM_CHECKPOINT_URI": "s3://datasets/checkpoints/training/",
                           "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop-requested"),
                           "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid")}, s3=s3)


def keys(job):
    return sorted(o["Key"] for o in job.s3.list_objects_v2(Bucket="datasets").get("Contents", []))


def test_fresh_start_checkpoints_every_n_steps_under_the_fleet_prefix(job):
    assert example.run(job, total_steps=250, checkpoint_every=100) == {"step": 250}
    assert keys(job) == [f"checkpoints/training/step-{n:012d}.json" for n in (100, 200, 250)]


def test_restart_resumes_from_the_newest_checkpoint(job):
    job.save({"step": 300})
    job.save({"step": 700})
    assert job.resume() == {"step": 700}
    assert example.run(job, total_steps=750, checkpoint_every=100) == {"step": 750}


def test_stop_file_makes_the_job_checkpoint_and_return(job):
    job.save({"step": 40})
    open(job.stop_file, "w").close()
    assert example.run(job, total_steps=1000, checkpoint_every=100) == {"step": 40}
    assert keys(job)[-1] == "checkpoints/training/step-000000000040.json"


def test_sigterm_sets_the_stop_flag_and_the_pid_file_names_the_job(job):
    import os
    import signal

    previous = signal.getsignal(signal.SIGTERM)
    try:
        job.install()
        assert int(open(job.pid_file).read()) == os.getpid()
        os.kill(os.getpid(), signal.SIGTERM)
        assert job.should_stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_job_stopped_early_exits_143_and_a_finished_one_0():
    assert example.exit_code({"step": 40}, 1000) == 143
    assert example.exit_code({"step": 1000}, 1000) == 0


def test_without_a_checkpoint_uri_the_job_says_how_to_get_one():
    with pytest.raises(SystemExit, match="ML_PLATFORM_CHECKPOINT_URI is not set: submit with ./platform job submit"):
        example.Job({}, s3=object())


# --- a Spot reclaim on a TrainingQueue, end to end: attempt 1 is stopped, Batch retries, attempt 2 finishes ------

@pytest.fixture(scope="module")
def queue_retry_strategy(synth_stack):
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sns as sns

    from ml_platform_constructs import TrainingQueue
    from tests.conftest import queue_vpc

    def body(stack):
        TrainingQueue(stack, "Queue", vpc=queue_vpc(stack), alerts=sns.Topic(stack, "Alerts"), key=kms.Key(stack, "Key"),
                      image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
                      instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")])
    template = synth_stack(body)
    return next(iter(template.find_resources("AWS::Batch::JobDefinition").values()))["Properties"]["RetryStrategy"]


def batch_decision(strategy: dict, attempt: dict) -> str:
    """AWS Batch's rule: the first evaluateOnExit entry whose patterns all match decides; with none, retry.
    Patterns may end in * (https://docs.aws.amazon.com/batch/latest/APIReference/API_EvaluateOnExit.html)."""
    import fnmatch

    fields = {"OnExitCode": str(attempt.get("exitCode", "")), "OnReason": attempt.get("reason", ""),
              "OnStatusReason": attempt.get("statusReason", "")}
    for entry in strategy["EvaluateOnExit"]:
        patterns = {k: v for k, v in entry.items() if k != "Action"}
        if all(fnmatch.fnmatchcase(fields[k], v) for k, v in patterns.items()):
            return entry["Action"]
    return "RETRY"


def test_the_queue_retries_a_reclaim_and_the_stop_signal_but_not_a_crash(queue_retry_strategy):
    assert batch_decision(queue_retry_strategy, {"statusReason": "Host EC2 (instance i-0abc) terminated."}) == "RETRY"
    assert batch_decision(queue_retry_strategy, {"exitCode": 143, "reason": "",
                                                 "statusReason": "Essential container in task exited"}) == "RETRY"
    assert batch_decision(queue_retry_strategy, {"exitCode": 1, "reason": "",
                                                 "statusReason": "Essential container in task exited"}) == "EXIT"
    assert batch_decision(queue_retry_strategy, {"exitCode": 137, "reason": "OutOfMemoryError: Container killed",
                                                 "statusReason": "Essential container in task exited"}) == "EXIT"


def test_simulated_reclaim_mid_run_resumes_from_the_checkpoint_and_finishes(tmp_path, monkeypatch, queue_retry_strategy):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    env = {"ML_PLATFORM_CHECKPOINT_URI": "s3://datasets/checkpoints/training/resnet-run-1/",
           "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop-requested"), "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid")}
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="datasets")
        first = example.Job({**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, s3=s3)

        def reclaimed_at_130(state):
            # The interruption watcher's SIGTERM arrives at step 130 (the flag the signal handler sets).
            if state["step"] == 130:
                first.stop_signalled = True
            return example.train_step(state)
        stopped = example.run(first, total_steps=500, checkpoint_every=100, step=reclaimed_at_130)
        code = example.exit_code(stopped, 500)
        assert (stopped, code) == ({"step": 131}, 143)
        assert batch_decision(queue_retry_strategy, {"exitCode": code, "reason": "",
                                                     "statusReason": "Essential container in task exited"}) == "RETRY"

        second = example.Job({**env, "AWS_BATCH_JOB_ATTEMPT": "2"}, s3=s3)
        assert second.resume() == {"step": 131}
        finished = example.run(second, total_steps=500, checkpoint_every=100)
        assert (finished, example.exit_code(finished, 500)) == ({"step": 500}, 0)
        steps = [k.rsplit("-", 1)[1] for k in (o["Key"] for o in s3.list_objects_v2(Bucket="datasets")["Contents"])]
        assert steps == [f"{n:012d}.json" for n in (100, 131, 200, 300, 400, 500)]
