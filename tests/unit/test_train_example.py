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
