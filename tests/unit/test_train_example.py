"""The example training job follows the job contract and trains a real classifier: resume from the newest checkpoint,
stop cleanly (exit 143) and finish (exit 0), one recorded run across attempts; a real SIGTERM mid-run in a process
of its own; a Spot reclaim judged by the queue's rendered retry strategy."""

import importlib.util
import json
import math
import os
import signal
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from ml_platform_job.checkpoints import CheckpointStore
from ml_platform_job.holdout import split
from ml_platform_job.tracking import TrackedRun
from ops.local.run import run_attempt

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_with_checkpoints.py"
spec = importlib.util.spec_from_file_location("train_with_checkpoints", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
PARAMS = {"epochs": 6, "lr": 0.02, "momentum": 0.9, "batch_size": 32, "seed": 1234}


def job_env(tmp_path, samples=600):
    data = tmp_path / "datasets" / "blobs" / "v1"
    if not data.exists():
        data.mkdir(parents=True)
        (data / "data.csv").write_text(example.make_dataset(samples=samples))
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "ML_PLATFORM_DATASETS_URI": str(tmp_path / "datasets"),
            "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop-requested"), "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid"),
            "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "AWS_REGION": "us-east-1"}


def begin(env, tmp_path):
    """The run of a test that drives train() itself; no checkout, so a commit elsewhere cannot change the run."""
    return TrackedRun.start(env=env, code_directory=str(tmp_path))


def record(tmp_path):
    return json.loads((tmp_path / "ckpt" / "passport.json").read_text())


def test_a_fresh_run_learns_checkpoints_every_epoch_and_records_a_finished_run(tmp_path):
    env = job_env(tmp_path)
    assert example.main(["--epochs", "6"], env=env) == 0
    names = sorted(os.listdir(tmp_path / "ckpt"))
    run = record(tmp_path)
    # The code's diff is kept beside the passport when the checkout the example runs from has uncommitted changes.
    diff = ["code.diff"] if run["passport"]["git_commit"]["dirty"] else []
    assert names == ["checkpoints", *diff, "dataset-manifest.txt", "model.tar.gz", "packages.txt", "passport.json"]
    # A checkpoint each epoch, the newest two kept, each complete (its marker names its state file).
    store = CheckpointStore(str(tmp_path / "ckpt"))
    assert [c.step for c in store.complete()] == [run["passport"]["attempts"][0]["checkpoint_step"] * n // 6
                                                  for n in (5, 6)]
    assert run["passport"]["attempts"][0]["checkpoints"] == 6
    assert run["status"] == "FINISHED" and len(run["passport"]["attempts"]) == 1
    # A real model: from the untrained model's score (one class for everything) to well above it, on data it never
    # trained on.
    assert run["metrics"]["holdout_accuracy"] > max(0.75, run["first_holdout"]["holdout_accuracy"] + 0.15)
    assert run["passport"]["dataset"]["name"] == "blobs" and run["passport"]["holdout"]["fraction"] == 0.05
    assert run["model_uri"].endswith("/model.tar.gz") and run["cost_usd"] >= 0


def test_a_stopped_run_resumes_to_exactly_the_model_an_uninterrupted_one_trains(tmp_path):
    rows = example.load_rows(example.make_dataset(samples=600))
    straight_env = job_env(tmp_path / "straight")
    straight, _ = example.train(example.Job(straight_env), begin(straight_env, tmp_path), rows, PARAMS)

    env = job_env(tmp_path / "stopped")
    first = example.Job(env)
    armed = []  # after epoch 2: the stop comes before the third epoch's 8th batch (the watcher's stop file)

    def stop_mid_epoch():
        if armed:
            armed.append(None)
        return len(armed) > 9  # the epoch's own check, then one before each batch
    first.should_stop = stop_mid_epoch
    state, code = example.train(first, begin(env, tmp_path), rows, PARAMS,
                                on_epoch=lambda state: armed.append(None) if state["epoch"] == 2 else None)
    assert (state["epoch"], state["batch"], code) == (2, 7, 143)
    resumed, code = example.train(example.Job(env), begin(env, tmp_path), rows, PARAMS)
    assert code == 0 and resumed["weights"] == straight["weights"] and resumed["bias"] == straight["bias"]
    attempts = record(tmp_path / "stopped")["passport"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["stopped", "finished"]
    per_epoch = math.ceil(len(split(rows, key=lambda row: row[0])[0]) / PARAMS["batch_size"])
    assert attempts[1]["restored_from"]["step"] == 2 * per_epoch + 7  # the very batch it stopped at: nothing redone
    assert record(tmp_path / "stopped")["final_state_sha256"] == example.digest(straight)


def test_sigterm_sets_the_stop_flag_and_the_pid_file_names_the_job(tmp_path):
    job = example.Job(job_env(tmp_path))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        job.install()
        assert int(open(job.pid_file).read()) == os.getpid()
        os.kill(os.getpid(), signal.SIGTERM)
        assert job.should_stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_without_a_checkpoint_uri_the_job_says_how_to_get_one():
    with pytest.raises(SystemExit, match="ML_PLATFORM_CHECKPOINT_URI is not set: submit with ./platform job submit"):
        example.Job({}, s3=object())


def test_a_real_sigterm_mid_run_exits_143_and_the_next_attempt_resumes_and_finishes(tmp_path):
    env = {**os.environ, **job_env(tmp_path, samples=3000)}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, str(EXAMPLE), "--epochs", "30"]
    code, lines = run_attempt(command, {**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, sigterm_after_epoch=2)
    assert code == 143, lines
    stopped_at = record(tmp_path)["passport"]["attempts"][0]
    assert stopped_at["outcome"] == "stopped"
    code, lines = run_attempt(command, {**env, "AWS_BATCH_JOB_ATTEMPT": "2"})
    assert code == 0, lines
    assert any(line.startswith("resuming from the checkpoint of epoch") for line in lines), lines
    run = record(tmp_path)
    assert [a["outcome"] for a in run["passport"]["attempts"]] == ["stopped", "finished"]
    assert run["status"] == "FINISHED" and run["spot_interruptions"] == 1


# --- a Spot reclaim on a TrainingQueue, end to end: attempt 1 is stopped, Batch retries, attempt 2 finishes ------

@pytest.fixture(scope="module")
def queue_retry_strategy(synth_stack):
    from tests.conftest import training_queue

    template = synth_stack(training_queue)
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
    env = {**job_env(tmp_path), "ML_PLATFORM_CHECKPOINT_URI": "s3://datasets/checkpoints/training/resnet-run-1/"}
    rows = example.load_rows(example.make_dataset(samples=600))
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="datasets")
        first = example.Job({**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, s3=s3)
        run = TrackedRun.start(params=PARAMS, env={**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, s3=s3,
                               code_directory=str(tmp_path))

        def reclaimed_at_epoch_2(state):
            # The interruption watcher's SIGTERM arrives after epoch 2 (the flag the signal handler sets).
            if state["epoch"] == 2:
                first.stop_signalled = True
        stopped, code = example.train(first, run, rows, PARAMS, on_epoch=reclaimed_at_epoch_2)
        assert (stopped["epoch"], code) == (2, 143)
        assert batch_decision(queue_retry_strategy, {"exitCode": code, "reason": "",
                                                     "statusReason": "Essential container in task exited"}) == "RETRY"

        second = example.Job({**env, "AWS_BATCH_JOB_ATTEMPT": "2"}, s3=s3)
        assert (second.resume()["epoch"], second.resume()["batch"]) == (2, 0)
        again = TrackedRun.start(env={**env, "AWS_BATCH_JOB_ATTEMPT": "2"}, s3=s3, code_directory=str(tmp_path))
        finished, code = example.train(second, again, rows, PARAMS)
        assert (finished["epoch"], code, again.run_id) == (PARAMS["epochs"], 0, run.run_id)
        prefix = "checkpoints/training/resnet-run-1/"
        keys = [o["Key"][len(prefix):] for o in s3.list_objects_v2(Bucket="datasets")["Contents"]]
        diff = ["code.diff"] if again.record["passport"]["git_commit"]["dirty"] else []
        per_epoch = math.ceil(len(split(rows, key=lambda row: row[0])[0]) / PARAMS["batch_size"])
        steps = [f"checkpoints/step-{s:012d}/{name}" for s in (5 * per_epoch, 6 * per_epoch)
                 for name in ("COMPLETE.json", "state.json")]
        assert keys == [*steps, *diff, "model.tar.gz", "packages.txt", "passport.json"]


def test_the_evaluation_job_scores_both_models_on_the_candidates_held_out_examples(tmp_path):
    """What ./platform model evaluate runs: per-example outcomes of the candidate and the live model on the same ids,
    the evidence the promotion gate judges."""
    from ml_platform_constructs.runtime.decisions import promotion
    from ml_platform_job import evaluation

    env = job_env(tmp_path)
    assert example.main(["--epochs", "6"], env=env) == 0  # the candidate
    live = tmp_path / "live"
    live_env = {**job_env(tmp_path), "ML_PLATFORM_CHECKPOINT_URI": str(live)}
    assert example.main(["--epochs", "1", "--seed", "7"], env=live_env) == 0  # a weaker live model
    out = tmp_path / "evaluations" / "training" / "run" / "live-version"
    evaluate_env = {"ML_PLATFORM_DATASETS_URI": env["ML_PLATFORM_DATASETS_URI"],
                    evaluation.CANDIDATE_MODEL: str(tmp_path / "ckpt" / "model.tar.gz"),
                    evaluation.LIVE_MODEL: str(live / "model.tar.gz"), evaluation.OUTPUT: str(out)}
    assert example.main(["--evaluate"], env=evaluate_env) == 0
    candidate, live_outcomes, manifest = evaluation.read_evidence(str(out))
    assert set(candidate.values) == set(live_outcomes.values) and manifest["candidate"]["examples"] == len(candidate.values)
    assert manifest["candidate"]["score"] == pytest.approx(record(tmp_path)["metrics"]["holdout_accuracy"])
    assert promotion.judge_outcomes(candidate, live_outcomes, min_examples=10).judged
    assert not (tmp_path / "ckpt" / "evaluations").exists()  # nothing written beside the run's checkpoints


def test_an_evaluation_without_its_contract_says_what_starts_it(tmp_path):
    with pytest.raises(SystemExit, match="ML_PLATFORM_CANDIDATE_MODEL_URI, ML_PLATFORM_EVALUATION_URI not set: an "
                                         "evaluation job is started by ./platform model evaluate"):
        example.main(["--evaluate"], env={"ML_PLATFORM_DATASETS_URI": str(job_env(tmp_path)["ML_PLATFORM_DATASETS_URI"])})


def test_run_by_hand_without_an_instance_type_the_job_says_why_its_cost_is_unknown(tmp_path, capsys):
    """docs/TRAINING.md's by-hand run: without the variables the platform's boot provides, no "cost None USD"."""
    env = {k: v for k, v in job_env(tmp_path).items() if k not in ("ML_PLATFORM_INSTANCE_TYPE", "ML_PLATFORM_LIFECYCLE")}
    assert example.main(["--epochs", "1"], env=env) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.endswith("1 attempt(s), cost unknown: attempt 1: instance type or lifecycle unknown (set "
                         "ML_PLATFORM_INSTANCE_TYPE and ML_PLATFORM_LIFECYCLE where the platform's boot files are absent)")
