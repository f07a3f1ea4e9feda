"""The job-contract helper: the run passport's content, one run across attempts, the secret filter, the held-out split,
cost and its per-point figures, and MLflow as an optional store."""

import argparse
import json
import os
import shutil
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from ml_platform_job import holdout, passport, tracking
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices

PASSPORT_KEYS = {"seed", "git_commit", "image", "python", "packages", "frameworks", "gpu", "instance_type", "lifecycle",
                 "queue", "job_id", "attempts", "dataset", "params", "environment"}
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc).timestamp()


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


def queue_env(tmp_path, attempt="1", **extra):
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "ML_PLATFORM_QUEUE_NAME": "training",
            "AWS_BATCH_JOB_ID": "4f1c-job#0", "AWS_BATCH_JOB_ATTEMPT": attempt, "ML_PLATFORM_JOB_NAME": "resnet-run-1",
            "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "AWS_REGION": "us-east-1",
            "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0", "PYTHONHASHSEED": "0", "HOME": "/root", **extra}


# --- the held-out split -------------------------------------------------------------------------------------------

def test_the_split_keeps_about_five_percent_out_deterministically_by_id():
    ids = [f"sample-{i}" for i in range(20000)]
    train, held = holdout.split(ids, key=str)
    assert 0.045 < len(held) / len(ids) < 0.055
    assert set(train).isdisjoint(held) and len(train) + len(held) == len(ids)
    # Same answer in any order and for a grown dataset: a sample's side depends on its id alone.
    assert holdout.split(list(reversed(ids)), key=str)[1] == list(reversed(held))
    assert set(holdout.split(ids + [f"new-{i}" for i in range(500)], key=str)[1]) >= set(held)
    # A known id, so a change of the hash (and of every held-out set) fails here.
    assert holdout.holdout_position("sample-0") == pytest.approx(0.501284, abs=1e-6)  # sha256(b":sample-0")


def test_the_salt_draws_another_held_out_set_and_the_fraction_is_checked():
    ids = range(5000)
    assert holdout.split(ids, key=str, salt="a")[1] != holdout.split(ids, key=str, salt="b")[1]
    with pytest.raises(ValueError, match="fraction=1.5: a share between 0 and 1"):
        holdout.is_holdout("x", fraction=1.5)
    assert holdout.describe(["b", "a"])["ids_sha256"] == holdout.describe(["a", "b"])["ids_sha256"]


# --- the secret filter --------------------------------------------------------------------------------------------

def test_the_environment_keeps_platform_nccl_cuda_and_seed_variables_only():
    kept = passport.filter_environment({
        "ML_PLATFORM_QUEUE_NAME": "training", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1",
        "PYTHONHASHSEED": "0", "TRAINING_SEED": "7", "AWS_BATCH_JOB_ATTEMPT": "2", "HOME": "/root", "PATH": "/usr/bin",
        "ML_PLATFORM_GIT_COMMIT": "3f2a9c0d1e2b3a4f5e6d7c8b9a0f1e2d3c4b5a69",
        "ML_PLATFORM_DATA": "s3://datasets/blobs/v1/?versionId=3"})
    assert kept == {"AWS_BATCH_JOB_ATTEMPT": "2", "CUDA_VISIBLE_DEVICES": "0,1", "ML_PLATFORM_QUEUE_NAME": "training",
                    "ML_PLATFORM_DATA": "s3://datasets/blobs/v1/?versionId=3",
                    "ML_PLATFORM_GIT_COMMIT": "3f2a9c0d1e2b3a4f5e6d7c8b9a0f1e2d3c4b5a69", "NCCL_DEBUG": "INFO",
                    "PYTHONHASHSEED": "0", "TRAINING_SEED": "7"}


@pytest.mark.parametrize("name, value", [
    ("AWS_SECRET_ACCESS_KEY", "x"),
    ("MLFLOW_TRACKING_PASSWORD", "hunter2"),
    ("MLFLOW_TRACKING_TOKEN", "abc"),
    ("ML_PLATFORM_API_KEY", "abc"),
    ("ML_PLATFORM_DB_URL", "postgres://admin:s3cret@db.internal:5432/runs"),
    ("ML_PLATFORM_NOTE", "AKIAIOSFODNN7EXAMPLE"),
    ("ML_PLATFORM_NOTE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("ML_PLATFORM_HF", "hf_abcdefghijklmnopqrstuvwxyz012345"),
    ("ML_PLATFORM_JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig"),
    ("NCCL_CERT", "-----BEGIN RSA PRIVATE KEY-----"),
    ("CUDA_GH", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    # credentials in a URL without a password, or with a '/' in it, and in its query; more token formats and names
    ("ML_PLATFORM_REPO", "https://github_pat_11ABCDEFG0_abcdefghijklmnopqrstuvwxyz0123@github.com/org/repo.git"),
    ("ML_PLATFORM_SENTRY", "https://0123456789abcdef0123456789abcdef@o123.ingest.sentry.io/456"),
    ("ML_PLATFORM_DB", "postgresql://user:pa/ss@db:5432/x"),
    ("ML_PLATFORM_DATA", "https://acct.blob.core.windows.net/c/f?sv=2020-08-04&sig=abcdEFGH1234%2Bxyz%3D"),
    ("ML_PLATFORM_MODEL", "https://b.s3.amazonaws.com/m.tar.gz?X-Amz-Credential=AKIA%2F&X-Amz-Signature=0a1b2c"),
    ("ML_PLATFORM_NOTIFY", "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("ML_PLATFORM_GH", "github_pat_11ABCDEFG0_abcdefghijklmnopqrstuvwxyz0123"),
    ("ML_PLATFORM_DB_PASSPHRASE", "correct horse battery staple"),
    ("ML_PLATFORM_SENTRY_DSN", "whatever"),
])
def test_nothing_that_looks_like_a_secret_reaches_the_passport(name, value):
    assert passport.filter_environment({name: value}) == {}


def test_parameters_that_look_like_secrets_are_kept_by_name_with_their_value_redacted():
    args = argparse.Namespace(lr=0.1, hf_token="hf_abcdefghijklmnopqrstuvwxyz012345", data="s3://datasets/blobs/v1/",
                              db="postgres://admin:s3cret@db.internal:5432/runs", epochs=20, resume=None)
    assert passport.redact_params(vars(args)) == {"lr": 0.1, "hf_token": "<redacted>", "data": "s3://datasets/blobs/v1/",
                                                  "db": "<redacted>", "epochs": 20, "resume": None}


class RecordingSink:
    """An MLflow sink that records what it is sent."""
    tracking_uri = "https://mlflow.example"

    def __init__(self):
        self.logged_params = {}

    def create(self, name, tags):
        return "mlflow-run-1"

    def log(self, run_id, params=None, **kwargs):
        self.logged_params.update(params or {})

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def test_a_token_passed_as_a_job_parameter_reaches_neither_the_passport_nor_mlflow(tmp_path, monkeypatch):
    sink = RecordingSink()
    monkeypatch.setattr(tracking, "mlflow_sink", lambda uri, experiment: sink)
    params = vars(argparse.Namespace(lr=0.1, hf_token="hf_abcdefghijklmnopqrstuvwxyz012345", epochs=20))
    tracking.TrackedRun.start(params=params, seed=1234, env=queue_env(tmp_path), clock=Clock(),
                              tracking_uri=sink.tracking_uri, prices=load_prices("us-east-1"))
    text = (tmp_path / "ckpt" / "passport.json").read_text()
    assert json.loads(text)["passport"]["params"] == {"lr": 0.1, "hf_token": "<redacted>", "epochs": 20}
    assert "hf_abcdef" not in text
    assert sink.logged_params == {"lr": 0.1, "hf_token": "<redacted>", "epochs": 20, "seed": 1234}


# --- one run across two attempts ----------------------------------------------------------------------------------

class UnreadableBatch:
    """A Batch client the job may not call (no batch:DescribeJobs): what a queue job's role gets today."""

    def describe_jobs(self, jobs):
        raise PermissionError("AccessDeniedException")


def start(tmp_path, clock, env, **kwargs):
    kwargs.setdefault("batch", UnreadableBatch())
    kwargs.setdefault("code_directory", str(tmp_path))  # no checkout: a commit elsewhere cannot change the run
    return tracking.TrackedRun.start(params={"lr": 0.1, "epochs": 20}, seed=1234, env=env, clock=clock,
                                     prices=load_prices("us-east-1"), **kwargs)


def test_the_passport_has_every_field_and_the_dataset_digest(tmp_path):
    data = tmp_path / "datasets" / "blobs" / "v1"
    data.mkdir(parents=True)
    (data / "data.csv").write_text("id,label\ns1,0\n")
    run = start(tmp_path, Clock(), queue_env(tmp_path, ML_PLATFORM_GIT_COMMIT="3f2a9c0"),
                dataset=passport.DatasetRef("blobs", "v1", str(data)), holdout=holdout.describe(["s1"]))
    record = json.loads((tmp_path / "ckpt" / "passport.json").read_text())
    p = record["passport"]
    assert PASSPORT_KEYS <= set(p)
    assert (p["seed"], p["git_commit"]["commit"], p["instance_type"], p["lifecycle"], p["queue"], p["job_id"]) == \
        (1234, "3f2a9c0", "g5.xlarge", "spot", "training", "4f1c-job")
    assert p["params"] == {"lr": 0.1, "epochs": 20}
    assert p["dataset"]["objects"] == 1 and p["dataset"]["bytes"] == 14 and len(p["dataset"]["sha256"]) == 64
    assert p["packages"]["count"] > 10 and len(p["packages"]["sha256"]) == 64
    assert p["gpu"]["count"] == 0 and p["frameworks"]["torch"] is None  # no GPU, no torch here: said, not guessed
    assert "HOME" not in p["environment"] and p["environment"]["NCCL_DEBUG"] == "INFO"
    assert p["holdout"]["samples"] == 1
    assert record["run_id"] == run.run_id and record["status"] == "RUNNING"


def test_the_package_list_is_every_installed_distribution_with_its_version():
    from importlib import metadata

    packages = passport.installed_packages()
    assert packages == sorted(packages, key=lambda line: line.split("==")[0].lower())
    assert f"boto3=={metadata.version('boto3')}" in packages
    assert {line.split("==")[0].lower() for line in packages} == {
        d.metadata["Name"].lower() for d in metadata.distributions() if d.metadata["Name"]}


def test_the_package_list_is_read_once_and_again_after_an_install(tmp_path, monkeypatch):
    """A process that starts many runs reads the packages once; a distribution installed, upgraded in place or
    removed since, in any directory of the import path, is in the next run's list."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = passport.installed_packages()
    reads = []
    monkeypatch.setattr(passport, "_name_and_version",
                        lambda distribution, real=passport._name_and_version: reads.append(1) or real(distribution))
    assert passport.installed_packages() == before and reads == []  # nothing installed since: not read again
    info = tmp_path / "just_installed-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: just-installed\nVersion: 1.2.3\n")
    assert "just-installed==1.2.3" in passport.installed_packages() and reads
    reads.clear()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: just-installed\nVersion: 1.2.4\n")
    later = (info / "METADATA").stat().st_mtime_ns + 10**9  # a second later, whatever the file system's clock tick
    os.utime(info / "METADATA", ns=(later, later))
    assert "just-installed==1.2.4" in passport.installed_packages() and reads  # rewritten in place: read again
    shutil.rmtree(info)
    assert passport.installed_packages() == before


def test_two_attempts_continue_one_run_with_cost_and_interruptions(tmp_path):
    clock = Clock()
    first = start(tmp_path, clock, queue_env(tmp_path))
    first.log_holdout(accuracy=0.40, step=0)
    clock.now += 1800
    first.checkpointed()
    first.stop("SIGTERM")
    clock.now += 600  # the job waits in the queue: not paid
    second = start(tmp_path, clock, queue_env(tmp_path, attempt="2", AWS_BATCH_JOB_ATTEMPT="2"))
    assert second.run_id == first.run_id
    clock.now += 1800
    second.log_holdout(accuracy=0.85, step=20)
    record = second.finish()
    attempts = record["passport"]["attempts"]
    assert [(a["number"], a["batch_attempt"], a["outcome"]) for a in attempts] == [(1, 1, "stopped"), (2, 2, "finished")]
    # Two half-hours of a Spot g5.xlarge at the table's price, as ./platform job cost counts.
    prices = load_prices("us-east-1")
    hourly = prices["on_demand_hourly"]["g5.xlarge"] * (1 - prices["spot_discount"]["g5"])
    assert record["cost_usd"] == pytest.approx(hourly, rel=1e-4)
    assert record["spot_interruptions"] == 1
    # No live model given: no cost per accuracy point; the points over chance (the untrained model) apart, labelled.
    assert record["usd_per_accuracy_point"] is None and record["accuracy_points"] is None
    assert record["over_chance"]["accuracy_points"] == pytest.approx(45.0)
    assert record["over_chance"]["usd_per_point"] == pytest.approx(hourly / 45, rel=1e-3)
    assert "the untrained model: chance" in record["over_chance"]["note"]
    assert json.loads((tmp_path / "ckpt" / "passport.json").read_text())["status"] == "FINISHED"


def test_an_attempt_lost_without_a_word_and_unseen_by_batch_is_a_lower_bound(tmp_path):
    clock = Clock()
    first = start(tmp_path, clock, queue_env(tmp_path))
    clock.now += 900
    first.checkpointed()
    clock.now += 3000  # the instance vanished after its checkpoint; nothing more was recorded
    second = start(tmp_path, clock, queue_env(tmp_path, attempt="2"))
    lost = second.record["passport"]["attempts"][0]
    assert (lost["outcome"], lost["ended_at"], lost["end_known"]) == ("lost", lost["last_seen_at"], False)
    clock.now += 900
    record = second.finish(improves_on={"run_id": "live-run", "holdout_accuracy": 0.8})
    assert record["spot_interruptions"] == 1
    prices = load_prices("us-east-1")
    assert record["cost_usd"] == pytest.approx(0.5 * prices["on_demand_hourly"]["g5.xlarge"] *
                                               (1 - prices["spot_discount"]["g5"]), rel=1e-4)
    assert record["cost_lower_bound"] is True and record["cost_note"].startswith("a lower bound: attempt(s) 1 lost")
    assert record["improves_on"] == {"run_id": "live-run", "holdout_accuracy": 0.8}
    assert record["usd_per_accuracy_point"] is None  # no holdout_accuracy logged: no per-point figure


def test_a_retraining_job_records_what_started_it(tmp_path):
    run = start(tmp_path, Clock(), queue_env(tmp_path, ML_PLATFORM_RETRAIN_TRIGGER="drift",
                                             ML_PLATFORM_RETRAIN_ALARM="ml-platform-dev-classifier-drift"))
    assert run.record["passport"]["trigger"] == {"trigger": "drift", "alarm": "ml-platform-dev-classifier-drift"}
    assert run._tags()["ml_platform.trigger"] == "drift"
    assert start(tmp_path / "other", Clock(), queue_env(tmp_path / "other")).record["passport"]["trigger"] is None


def test_a_finished_run_is_not_started_again_and_an_unpriced_instance_says_why(tmp_path):
    clock = Clock()
    run = start(tmp_path, clock, queue_env(tmp_path, ML_PLATFORM_INSTANCE_TYPE="m7i.large"))
    record = run.finish(tokens=2e6)
    assert record["cost_usd"] is None and "no price for m7i.large" in record["cost_note"]
    again = start(tmp_path, clock, queue_env(tmp_path, attempt="2"))
    assert again.finished and len(again.record["passport"]["attempts"]) == 1


def test_accuracy_must_be_a_fraction(tmp_path):
    run = start(tmp_path, Clock(), queue_env(tmp_path))
    with pytest.raises(ValueError, match="accuracy=84.7: a fraction from 0 to 1"):
        run.log_holdout(accuracy=84.7)


def test_without_a_checkpoint_uri_the_helper_says_where_the_record_lives(tmp_path):
    with pytest.raises(SystemExit, match="ML_PLATFORM_CHECKPOINT_URI is not set"):
        tracking.TrackedRun.start(env={})


def test_the_record_goes_next_to_checkpoints_in_s3(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="datasets")
        s3.put_object(Bucket="datasets", Key="datasets/blobs/v1/data.csv", Body=b"id,label\n")
        env = queue_env(tmp_path, ML_PLATFORM_CHECKPOINT_URI="s3://datasets/checkpoints/training/resnet-run-1/")
        run = start(tmp_path, Clock(), env, s3=s3,
                    dataset=passport.DatasetRef("blobs", "v1", "s3://datasets/datasets/blobs/v1/"))
        body = s3.get_object(Bucket="datasets", Key="checkpoints/training/resnet-run-1/passport.json")["Body"].read()
        assert json.loads(body)["run_id"] == run.run_id
        assert json.loads(body)["passport"]["dataset"]["objects"] == 1


# --- MLflow, when installed ---------------------------------------------------------------------------------------

def test_one_mlflow_run_across_attempts_in_a_local_sqlite_store(tmp_path, mlflow_store):
    from mlflow.tracking import MlflowClient

    uri = mlflow_store
    clock = Clock()
    data = tmp_path / "datasets" / "blobs" / "v1"
    data.mkdir(parents=True)
    (data / "data.csv").write_text("id,label\ns1,0\n")
    dataset = passport.DatasetRef("blobs", "v1", str(data))
    first = start(tmp_path, clock, queue_env(tmp_path), tracking_uri=uri, dataset=dataset)
    first.log_holdout(accuracy=0.4, step=0)
    clock.now += 600
    first.stop()
    second = start(tmp_path, clock, queue_env(tmp_path, attempt="2"), tracking_uri=uri)
    clock.now += 600
    second.log_holdout(accuracy=0.9, step=5)
    second.finish()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("training").experiment_id])
    assert [r.info.run_id for r in runs] == [first.run_id]
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.params["seed"] == "1234"
    assert run.data.metrics["holdout_accuracy"] == 0.9 and run.data.metrics["spot_interruptions"] == 1
    assert run.data.tags["ml_platform.attempts"] == "2" and run.data.tags["ml_platform.instance_type"] == "g5.xlarge"
    artifacts = {a.path for a in client.list_artifacts(first.run_id)}
    assert {"passport.json", "packages.txt", "dataset-manifest.txt"} <= artifacts
    # The dataset as MLflow's own run input (log_inputs), its digest the fingerprint's first 32 characters.
    [logged] = run.inputs.dataset_inputs
    assert (logged.dataset.name, logged.dataset.digest, logged.tags[0].key, logged.tags[0].value) == (
        "blobs@v1", first.record["passport"]["dataset"]["sha256"][:32], "mlflow.data.context", "training")
    assert (tmp_path / "store" / "artifacts").is_dir()  # beside the database, not in the working directory


def test_a_failing_tracking_store_never_stops_training(tmp_path, capsys):
    class Broken:
        tracking_uri = "https://example.invalid"

        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise ConnectionError("unreachable")
            return fail

    run = tracking.TrackedRun({"status": "RUNNING", "run_id": "r1", "metrics": {}, "first_holdout": {},
                               "passport": {"attempts": [], "environment": {}, "packages": {"sha256": "x"}}},
                              tracking.Location(str(tmp_path)), Broken(), clock=Clock(),
                              prices=load_prices("us-east-1"))
    run._begin_attempt(queue_env(tmp_path), [])
    run.log_metrics({"loss": 1.0})
    run.log_metrics({"loss": 0.5})
    run.finish()
    assert capsys.readouterr().err.count("MLflow call failed") == 1
    assert json.loads((tmp_path / "passport.json").read_text())["status"] == "FINISHED"


def test_the_boot_writes_the_instance_type_and_lifecycle_where_a_job_container_reads_them(tmp_path, monkeypatch):
    from ml_platform_constructs.training.instance_bootstrap import InstanceBootstrap

    script = "\n".join(InstanceBootstrap(environment={}, dataset_volumes=(), agent_config={}, agent_install="true")
                       .commands())
    assert f"meta-data/instance-type > {passport.INSTANCE_TYPE_FILE}" in script
    assert f"meta-data/instance-life-cycle > {passport.LIFECYCLE_FILE}" in script
    (tmp_path / "instance-type").write_text("g6.xlarge\n")
    (tmp_path / "instance-life-cycle").write_text("spot\n")
    monkeypatch.setattr(passport, "INSTANCE_TYPE_FILE", str(tmp_path / "instance-type"))
    monkeypatch.setattr(passport, "LIFECYCLE_FILE", str(tmp_path / "instance-life-cycle"))
    assert passport.instance({}) == ("g6.xlarge", "spot")
