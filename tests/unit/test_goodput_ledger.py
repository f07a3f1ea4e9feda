"""The goodput ledger wired through the job contract (issue 31 items 1, 2 and 5): TrackedRun times each attempt's
phases and records them, prints its shares as embedded-metric lines on AWS Batch, only a multi-node job's main node
writes the record, and a recorded run's ledger adds up to what its attempts paid for."""

import importlib.util
import io
import json
from contextlib import redirect_stdout
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ml_platform_constructs.runtime.budget_guard import load_prices
from ml_platform_job.goodput import BUCKETS, METRIC_WINDOW_SECONDS, STARTUP_LOWER_BOUND, run_ledger
from ml_platform_job.prices import hourly_usd
from ml_platform_job.tracking import TrackedRun
from ops import runs
from ops.local import run as local_run
from ops.local.up import local_run_lines

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_with_checkpoints.py"
spec = importlib.util.spec_from_file_location("train_with_checkpoints_ledger", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
PARAMS = {"epochs": 5, "lr": 0.02, "momentum": 0.9, "batch_size": 32, "seed": 1234}
PRICES = load_prices("us-east-1")


def env_for(tmp_path, **extra):
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"),
            "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid"), "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge",
            "ML_PLATFORM_LIFECYCLE": "spot", "AWS_REGION": "us-east-1", **extra}


def record(tmp_path):
    return json.loads((tmp_path / "ckpt" / "passport.json").read_text())


def paid_seconds(attempts):
    return sum((datetime.fromisoformat(a["ended_at"]) - datetime.fromisoformat(a["started_at"])).total_seconds()
               for a in attempts)


class Ticks:
    """A clock that moves 10 ms at every reading (wall and monotonic alike: the attempt's paid time and its phases
    on one clock, as on an instance)."""

    def __init__(self, step=0.01):
        self.now, self.step = 1_800_000_000.0, step

    def __call__(self):
        self.now += self.step
        return self.now


class StopsMidEpoch(example.Job):
    """The interruption watcher's SIGTERM landing between two batches of the second epoch (as it lands on the local
    run's attempt 1); loading a checkpoint takes 2 s."""

    def __init__(self, env, ticks, after_checks=None):
        super().__init__(env)
        self.ticks, self.checks, self.after = ticks, 0, after_checks

    def should_stop(self):
        self.checks += 1
        return self.after is not None and self.checks > self.after

    def resume(self):
        self.ticks.now += 2
        return super().resume()


def test_the_local_runs_ledger_adds_up_to_its_paid_time_and_shows_the_reclaim_as_a_restore_not_lost_work(tmp_path):
    """The example saves the very batch a stop comes at (issue 35): the reclaim costs attempt 2's restore, and no
    step is lost (before, the stopped epoch's steps were)."""
    env, ticks = env_for(tmp_path), Ticks()
    rows = example.load_rows(example.make_dataset(samples=600))

    def attempt(after_checks):
        run = TrackedRun.start(env=env, code_directory=str(tmp_path), clock=ticks, monotonic=ticks)
        return example.train(StopsMidEpoch(env, ticks, after_checks), run, rows, PARAMS)
    # 18 batches an epoch: the 30th check is mid-way through epoch 2.
    state, code = attempt(30)
    assert (state["epoch"], code) == (1, 143) and state["batch"] > 0
    stopped_at = state["step"]
    state, code = attempt(None)
    assert code == 0
    attempts = record(tmp_path)["passport"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["stopped", "finished"]
    first, second = (a["phases"] for a in attempts)
    assert first["since_checkpoint"] == 0 and first["step"] > 0  # epoch 2's steps, saved by the stop
    assert second["restore"] > 0 and second["since_checkpoint"] == 0
    assert attempts[1]["restored_from"]["step"] == stopped_at  # the very batch the stop came at
    found, notes = run_ledger(attempts, PRICES)
    assert found.paid_seconds == pytest.approx(paid_seconds(attempts), abs=1.0)
    assert found.seconds["lost"] == 0
    assert found.seconds["restore"] > 0 and found.seconds["productive"] > 0
    assert found.paid_usd == pytest.approx(found.paid_seconds / 3600 * hourly_usd(PRICES, "g5.xlarge", "spot"))
    assert notes == [STARTUP_LOWER_BOUND]
    shown = local_run.ledger_line({"passport": record(tmp_path)["passport"]})
    assert shown.startswith(f"ledger: {found.paid_seconds:.0f} s, {found.paid_usd:.6f} USD: ")
    assert "lost " not in shown and "restore " in shown
    every = {"passport": {"attempts": [{**attempts[0], "outcome": "stopped", "phases": {
        "startup": 10.0, "restore": 10.0, "step": 100.0, "data_wait": 10.0, "checkpoint_save": 10.0, "evaluation": 10.0,
        "since_checkpoint": 10.0}, "started_at": "2026-11-30T12:00:00+00:00", "ended_at": "2026-11-30T14:46:39+00:00"}]}}
    assert len(local_run.ledger_line(every)) <= 118  # every bucket, 9999 s: up's summary lines are 120 at most
    # ./platform up's summary carries that line.
    output = f"    attempt 1: x -> exit 143\n    attempt 2: y -> exit 0\n    {shown}\n"
    assert f"  {shown}" in local_run_lines(output)


def test_a_run_of_two_attempts_against_hand_written_records():
    """Attempt 1 on Spot x 2 nodes vanished 600 s after its last checkpoint (Batch's stoppedAt read); attempt 2 on
    On-Demand finished."""
    phases_1 = {"startup": 100.0, "restore": 0.0, "step": 3000.0, "data_wait": 600.0, "checkpoint_save": 50.0,
                "evaluation": 0.0, "since_checkpoint": 0.0}
    phases_2 = {"startup": 60.0, "restore": 40.0, "step": 2000.0, "data_wait": 500.0, "checkpoint_save": 30.0,
                "evaluation": 70.0, "since_checkpoint": 0.0}
    attempts = [
        {"number": 1, "started_at": "2026-11-30T12:00:00+00:00", "last_seen_at": "2026-11-30T12:53:20+00:00",
         "ended_at": "2026-11-30T13:03:20+00:00", "outcome": "lost", "end_known": True, "instance_type": "g5.xlarge",
         "lifecycle": "spot", "nodes": 2, "gpu_share": 1.0, "phases": phases_1},
        {"number": 2, "started_at": "2026-11-30T14:00:00+00:00", "ended_at": "2026-11-30T14:40:00+00:00",
         "outcome": "finished", "instance_type": "g5.xlarge", "lifecycle": "on-demand", "nodes": 1, "gpu_share": 0.5,
         "phases": phases_2}]
    found, _ = run_ledger(attempts, PRICES)
    # Attempt 1: 3800 s paid x 2 nodes; the 600 s after its last record are lost steps (3600 s of steps, a sixth
    # lost, taken from productive and data-wait time alike); 3800 - 3750 s idle.
    # Attempt 2: 2400 s paid; 2200 s busy, 200 s idle.
    assert found.seconds == pytest.approx({
        "productive": 2 * 2500 + 1500, "data_wait": 2 * 500 + 500, "startup": 2 * 100 + 60, "restore": 40,
        "checkpoint_save": 2 * 50 + 30, "evaluation": 70, "lost": 2 * 600, "idle": 2 * 50 + 200})
    spot, on_demand = hourly_usd(PRICES, "g5.xlarge", "spot"), hourly_usd(PRICES, "g5.xlarge", "on-demand")
    assert found.usd["lost"] == pytest.approx(1200 / 3600 * spot)
    assert found.paid_usd == pytest.approx(7600 / 3600 * spot + 2400 / 3600 * on_demand * 0.5)


def test_runs_show_prints_the_runs_ledger_and_its_json_carries_it():
    passport = {"environment": {"AWS_REGION": "us-east-1"}, "attempts": [
        {"number": 1, "started_at": "2026-11-30T12:00:00+00:00", "ended_at": "2026-11-30T13:00:00+00:00",
         "outcome": "finished", "instance_type": "g5.xlarge", "lifecycle": "spot", "nodes": 1, "gpu_share": 1.0,
         "phases": {"startup": 360.0, "step": 3000.0, "data_wait": 900.0}}]}
    found = runs.ledger_json(passport)
    assert found["buckets"]["productive"]["share"] == pytest.approx(2100 / 3600, abs=1e-4)
    assert found["buckets"]["idle"]["hours"] == pytest.approx(240 / 3600, abs=1e-4)
    lines = runs.ledger_lines(*runs.record_ledger(passport))
    assert lines[0].split() == ["productive", "0.583333", "h", f"{2100 / 3600 * hourly_usd(PRICES, 'g5.xlarge', 'spot'):.6f}",
                                "USD", "58.3%"]
    assert [line.split()[0] for line in lines[:4]] == ["productive", "data_wait", "startup", "idle"]
    assert runs.ledger_json({"attempts": []}) is None


# --- the job side: phases in the record, EMF windows on AWS Batch, the main node only -----------------------------

def test_each_save_records_the_attempts_phases(tmp_path):
    ticks = Ticks(step=0)
    run = TrackedRun.start(env=env_for(tmp_path), code_directory=str(tmp_path), monotonic=ticks)
    with run.clock.step():
        ticks.now += 42
    run.checkpointed()
    assert record(tmp_path)["passport"]["attempts"][0]["phases"]["step"] == 42


@pytest.mark.parametrize("queue", ["training", None], ids=["on AWS Batch", "by hand"])
def test_the_clock_prints_a_window_line_every_window_on_batch_only(tmp_path, queue):
    ticks = Ticks(step=0)
    env = env_for(tmp_path, **({"AWS_BATCH_JQ_NAME": "training-JobQueue-a1b2", "ML_PLATFORM_QUEUE_NAME": queue}
                               if queue else {}))
    run = TrackedRun.start(env=env, code_directory=str(tmp_path), monotonic=ticks)
    out = io.StringIO()
    with redirect_stdout(out):
        for _ in range(3):  # three steps of a third of a window: one window closes, at the third
            with run.clock.step():
                ticks.now += METRIC_WINDOW_SECONDS / 3 + 1
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    if queue is None:
        assert lines == []
        return
    assert len(lines) == 1 and lines[0]["Queue"] == "training" and lines[0]["ProductiveShare"] == 100.0
    assert lines[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Queue"]]


@pytest.mark.parametrize("node,writes", [("1", False), ("0", True)], ids=["another node", "the main node"])
def test_only_the_main_node_of_a_multi_node_job_writes_the_record(tmp_path, node, writes):
    env = env_for(tmp_path, AWS_BATCH_JOB_NODE_INDEX=node, AWS_BATCH_JOB_MAIN_NODE_INDEX="0",
                  AWS_BATCH_JOB_NUM_NODES="2")
    run = TrackedRun.start(env=env, code_directory=str(tmp_path))
    run.checkpointed()
    run.finish()
    assert (tmp_path / "ckpt" / "passport.json").exists() is writes
    assert (tmp_path / "ckpt" / "packages.txt").exists() is writes
    assert run.attempt["nodes"] == 2 and "phases" in run.attempt


def test_loader_settings_are_the_attempts_instances():
    from ml_platform_job.goodput import loader_settings_for

    assert BUCKETS[0] == "productive"
    assert loader_settings_for("g5.xlarge").num_workers >= 1


def test_the_helper_offers_loader_settings_for_the_attempts_instance(tmp_path):
    from ml_platform_job.goodput import loader_settings_for

    run = TrackedRun.start(env=env_for(tmp_path, ML_PLATFORM_INSTANCE_TYPE="g5.12xlarge"), code_directory=str(tmp_path))
    assert run.loader_settings() == loader_settings_for("g5.12xlarge")
    by_hand = TrackedRun.start(env={**env_for(tmp_path / "hand"), "ML_PLATFORM_INSTANCE_TYPE": "m5.large"},
                               code_directory=str(tmp_path))
    assert by_hand.loader_settings().num_workers >= 1
