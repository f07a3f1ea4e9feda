"""The goodput ledger wired through the job contract (issue 31 items 1, 2 and 5; issue 38 items 2-4): TrackedRun
times each attempt's phases and records them, prints its shares as embedded-metric lines on AWS Batch, only a
multi-node job's main node writes the record, and a recorded run's ledger adds up to what its attempts paid for: its
host's boot and image pull in startup, a reused host's wait and the scale-in in idle, the job's untimed time in other,
GPU-seconds as weights, Spot as paid from a price history, a month's window, a failed attempt's lost steps."""

import importlib.util
import io
import json
from contextlib import redirect_stdout
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ml_platform_job.goodput import (BUCKETS, METRIC_WINDOW_SECONDS, STARTUP_LOWER_BOUND, WINDOW_NOTE, month_window,
                                     paid_span, run_ledger)
from ml_platform_job.prices import hourly_usd, paid_rate
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
    # A g5.xlarge has one GPU: its GPU-seconds are its paid seconds. No host here: no boot, no idle.
    assert found.paid_seconds == pytest.approx(paid_seconds(attempts), abs=1.0)
    assert found.seconds["lost"] == 0 and found.seconds["idle"] == 0
    assert found.seconds["restore"] > 0 and found.seconds["productive"] > 0
    assert found.paid_usd == pytest.approx(found.paid_seconds / 3600 * hourly_usd(PRICES, "g5.xlarge", "spot"))
    assert notes == [STARTUP_LOWER_BOUND, "attempt(s) 1, 2: Spot at the price table's rule, not the price paid (no "
                     "rate recorded)"]
    shown = local_run.ledger_line({"passport": record(tmp_path)["passport"]})
    assert shown.startswith(f"ledger: {found.paid_seconds:.0f} s, {found.paid_usd:.6f} USD: ")
    assert "lost " not in shown and "restore " in shown
    every = {"passport": {"attempts": [{**attempts[0], "outcome": "stopped", "phases": {
        "startup": 10.0, "restore": 10.0, "step": 100.0, "data_wait": 10.0, "checkpoint_save": 10.0,
        "evaluation": 10.0, "since_checkpoint": 10.0},
        "started_at": "2026-11-30T12:00:00+00:00", "ended_at": "2026-11-30T14:46:39+00:00"}]}}
    assert len(local_run.ledger_line(every)) <= 118  # every bucket, 9999 s: up's summary lines are 120 at most
    # ./platform up's summary carries that line.
    output = f"    attempt 1: x -> exit 143\n    attempt 2: y -> exit 0\n    {shown}\n"
    assert f"  {shown}" in local_run_lines(output)


def test_a_run_of_two_attempts_against_hand_written_records():
    """Attempt 1 on Spot x 2 nodes of a g5.xlarge (1 GPU) vanished 600 s after its last checkpoint (Batch's stoppedAt
    read); attempt 2 on On-Demand finished on half a g5.12xlarge (2 of its 4 GPUs)."""
    phases_1 = {"startup": 100.0, "restore": 0.0, "step": 3000.0, "data_wait": 600.0, "checkpoint_save": 50.0,
                "evaluation": 0.0, "since_checkpoint": 0.0}
    phases_2 = {"startup": 60.0, "restore": 40.0, "step": 2000.0, "data_wait": 500.0, "checkpoint_save": 30.0,
                "evaluation": 70.0, "since_checkpoint": 0.0}
    attempts = [
        {"number": 1, "started_at": "2026-11-30T12:00:00+00:00", "last_seen_at": "2026-11-30T12:53:20+00:00",
         "ended_at": "2026-11-30T13:03:20+00:00", "outcome": "lost", "end_known": True, "instance_type": "g5.xlarge",
         "lifecycle": "spot", "nodes": 2, "gpu_share": 1.0, "phases": phases_1},
        {"number": 2, "started_at": "2026-11-30T14:00:00+00:00", "ended_at": "2026-11-30T14:40:00+00:00",
         "outcome": "finished", "instance_type": "g5.12xlarge", "lifecycle": "on-demand", "nodes": 1,
         "gpu_share": 0.5, "environment": {"gpu": {"count": 2}}, "phases": phases_2}]
    found, notes = run_ledger(attempts, PRICES)
    # Attempt 1: a job of 3800 s x 2 nodes x 1 GPU; the 600 s after its last record are lost steps (3600 s of steps,
    # a sixth lost, taken from productive and data-wait time alike); 3800 - 3750 s of phases: other.
    # Attempt 2: a job of 2400 s x 2 GPUs; 2200 s of phases, 200 s other. No idle: no host, no scale-in recorded.
    assert found.seconds == pytest.approx({
        "productive": 2 * 2500 + 2 * 1500, "data_wait": 2 * 500 + 2 * 500, "startup": 2 * 100 + 2 * 60,
        "restore": 2 * 40, "checkpoint_save": 2 * 50 + 2 * 30, "evaluation": 2 * 70, "tracking": 0, "lost": 2 * 600,
        "other": 2 * 50 + 2 * 200, "idle": 0})
    spot, on_demand = hourly_usd(PRICES, "g5.xlarge", "spot"), hourly_usd(PRICES, "g5.12xlarge", "on-demand")
    assert found.usd["lost"] == pytest.approx(1200 / 3600 * spot)
    assert found.paid_usd == pytest.approx(7600 / 3600 * spot + 2400 / 3600 * on_demand * 0.5)
    assert STARTUP_LOWER_BOUND in notes and found.to_dict()["gpu_hours"] == round(12400 / 3600, 4)


def test_runs_show_prints_the_runs_ledger_and_its_json_carries_it():
    passport = {"environment": {"AWS_REGION": "us-east-1"}, "attempts": [
        {"number": 1, "started_at": "2026-11-30T12:00:00+00:00", "ended_at": "2026-11-30T13:00:00+00:00",
         "outcome": "finished", "instance_type": "g5.xlarge", "lifecycle": "spot", "nodes": 1, "gpu_share": 1.0,
         "phases": {"startup": 360.0, "step": 3000.0, "data_wait": 900.0}}]}
    found = runs.ledger_json(passport)
    assert found["buckets"]["productive"]["share"] == pytest.approx(2100 / 3600, abs=1e-4)
    assert found["buckets"]["other"]["gpu_hours"] == pytest.approx(240 / 3600, abs=1e-4)  # inside the job: not idle
    assert found["buckets"]["idle"]["gpu_hours"] == 0
    lines = runs.ledger_lines(*runs.record_ledger(passport))
    usd = 2100 / 3600 * hourly_usd(PRICES, "g5.xlarge", "spot")
    assert lines[0].split() == ["productive", "0.583333", "GPU-h", f"{usd:.6f}", "USD", "58.3%"]
    assert [line.split()[0] for line in lines[:4]] == ["productive", "data_wait", "startup", "other"]
    assert runs.ledger_json({"attempts": []}) is None


# --- what the job cannot see: the host's boot, a reused host's wait, scale-in ----------------------------------------

def attempt_record(number=1, start="2026-11-30T10:00:00+00:00", end="2026-11-30T11:00:00+00:00", outcome="finished",
                   phases=None, **extra):
    """An attempt as tracking.py records it: a g5.xlarge (1 GPU) On-Demand, one node."""
    return {"number": number, "started_at": start, "last_seen_at": end, "ended_at": end, "outcome": outcome,
            "instance_type": "g5.xlarge", "lifecycle": "on-demand", "nodes": 1, "gpu_share": 1.0,
            "environment": {"gpu": {"count": 1}},
            "phases": {"startup": 60.0, "step": 3300.0} if phases is None else phases, **extra}


def test_the_first_job_on_a_host_pays_its_boot_and_image_pull_as_startup():
    # Booted 09:55, image pull from 09:58, the job 10:00-11:00 (60 s startup phase, 3300 s of steps): 300 s before
    # the job + 60 s startup; 240 s of the job untimed: other; no idle. Paid 09:55-11:00.
    host = {"instance_id": "i-1", "booted_at": "2026-11-30T09:55:00+00:00", "first_on_instance": True,
            "previous_job_ended_at": None, "image_pull_started_at": "2026-11-30T09:58:00+00:00",
            "container_started_at": "2026-11-30T09:59:30+00:00"}
    record = attempt_record(host=host)
    found, notes = run_ledger([record], PRICES)
    assert found.seconds == pytest.approx({**dict.fromkeys(BUCKETS, 0.0), "startup": 360, "productive": 3300,
                                           "other": 240})
    assert found.paid_usd == pytest.approx(3900 / 3600 * hourly_usd(PRICES, "g5.xlarge", "on-demand"))
    assert STARTUP_LOWER_BOUND not in notes  # the boot is known
    assert paid_span(record) == (datetime(2026, 11, 30, 9, 55, tzinfo=timezone.utc).timestamp(),
                                 datetime(2026, 11, 30, 11, 0, tzinfo=timezone.utc).timestamp())


def test_a_reused_hosts_wait_is_idle_and_its_scale_in_too():
    # The host's previous job ended 09:50; this job's image pull began 09:58: 480 s idle, 120 s startup before the job.
    # The instance then stayed 300 s before it scaled in: idle too. Paid 09:50-11:05.
    host = {"instance_id": "i-1", "booted_at": "2026-11-30T08:00:00+00:00", "first_on_instance": False,
            "previous_job_ended_at": "2026-11-30T09:50:00+00:00", "image_pull_started_at": "2026-11-30T09:58:00+00:00"}
    found, notes = run_ledger([attempt_record(host=host, scale_in_seconds=300)], PRICES)
    assert found.seconds == pytest.approx({**dict.fromkeys(BUCKETS, 0.0), "idle": 480 + 300, "startup": 120 + 60,
                                           "productive": 3300, "other": 240})
    assert found.paid_seconds == 4500 and STARTUP_LOWER_BOUND not in notes
    # Without the image pull's time, the whole wait since the previous job is idle (noted).
    unpulled = {**host, "image_pull_started_at": None}
    found, notes = run_ledger([attempt_record(host=unpulled)], PRICES)
    assert (found.seconds["idle"], found.seconds["startup"]) == (600, 60)
    assert any("a reused instance without the image pull's time" in note for note in notes)


def test_a_failed_attempt_loses_its_steps_since_the_checkpoint_and_a_running_one_is_billed_to_its_last_record():
    # Failed: 3300 s of steps, 500 since the last checkpoint: lost (a crash is paid time too).
    failed = attempt_record(outcome="failed", phases={"startup": 60.0, "step": 3300.0, "since_checkpoint": 500.0})
    found, _ = run_ledger([failed], PRICES)
    assert (found.seconds["lost"], found.seconds["productive"], found.seconds["other"]) == (500, 2800, 240)
    # Running: billed 10:00 to its last record, 10:30; its steps since the checkpoint are not lost (yet).
    running = attempt_record(outcome="running", end=None, last_seen_at="2026-11-30T10:30:00+00:00",
                             phases={"startup": 60.0, "step": 1700.0, "since_checkpoint": 500.0})
    found, notes = run_ledger([running], PRICES)
    assert found.paid_seconds == 1800 and found.seconds["lost"] == 0 and found.seconds["other"] == 40
    assert "attempt(s) 1 still running: billed to the last record (last_seen_at)" in notes


def test_gpu_seconds_weigh_a_1_gpu_and_an_8_gpu_job_1_to_8():
    # An hour each on a p4d.24xlarge (8 GPUs): one job saw 1 GPU (gpu_share 1/8), the other all 8.
    one = {**attempt_record(number=1, phases={"step": 3600.0}), "instance_type": "p4d.24xlarge", "gpu_share": 0.125,
           "environment": {"gpu": {"count": 1}}}
    eight = {**attempt_record(number=2, phases={"step": 3600.0}), "instance_type": "p4d.24xlarge",
             "environment": {"gpu": {"count": 8}}}
    small, _ = run_ledger([one], PRICES)
    large, _ = run_ledger([eight], PRICES)
    assert (small.paid_seconds, large.paid_seconds) == (3600, 8 * 3600)
    rate = hourly_usd(PRICES, "p4d.24xlarge", "on-demand")
    assert (small.paid_usd, large.paid_usd) == pytest.approx((rate / 8, rate))
    # Without the visible count: gpu_share x the type's GPUs; a type not in the catalog (a CPU job): 1, noted.
    unseen, _ = run_ledger([{**one, "environment": {"gpu": {"count": 0}}}], PRICES)
    assert unseen.paid_seconds == 3600
    cpu, notes = run_ledger([{**one, "instance_type": "m5.large", "environment": {}}], PRICES)
    assert cpu.paid_seconds == 3600 and any("weighted as 1 GPU per node" in note for note in notes)


def test_a_two_attempt_run_priced_from_a_hand_written_spot_history_matches_by_hand():
    """Spot price history of g5.xlarge in one AZ: 0.90 USD/h from 09:58, 1.20 from 10:45, 0.80 from 12:10. The
    operator side prices each attempt over its paid span (``paid_span``) and records the rate; the ledger's dollars
    are then what was paid."""
    history = [(datetime.fromisoformat(f"2026-11-30T{t}:00+00:00").timestamp(), usd)
               for t, usd in (("12:10", 0.80), ("09:58", 0.90), ("10:45", 1.20))]
    first = {**attempt_record(number=1, end="2026-11-30T11:30:00+00:00", outcome="stopped",
                              phases={"step": 5400.0, "since_checkpoint": 0.0}), "lifecycle": "spot"}
    # Attempt 2 on a fresh instance booted 11:55, its job 12:00-13:00.
    second = {**attempt_record(number=2, start="2026-11-30T12:00:00+00:00", end="2026-11-30T13:00:00+00:00",
                               phases={"step": 3600.0}, host={"booted_at": "2026-11-30T11:55:00+00:00"}),
              "lifecycle": "spot"}
    for record in (first, second):
        usd, source = paid_rate(PRICES, "g5.xlarge", "spot", history=history, start=paid_span(record)[0],
                                end=paid_span(record)[1])
        record["rate"] = {"usd_per_hour": usd, "source": source}
    found, notes = run_ledger([first, second], PRICES)
    # By hand: attempt 1, 10:00-11:30: 0.75 h x 0.90 + 0.75 h x 1.20 = 0.675 + 0.900 = 1.575 USD.
    # Attempt 2, 11:55-13:00: 0.25 h x 1.20 (to 12:10) + 50/60 h x 0.80 = 0.300 + 0.6667 = 0.9667 USD.
    assert found.paid_usd == pytest.approx(1.575 + 0.3 + 0.8 * 50 / 60)
    assert found.paid_seconds == 5400 + 3900 and found.seconds["startup"] == 300
    assert "attempt(s) 1, 2: priced at the recorded rate (the Spot price history (EC2 DescribeSpotPriceHistory))" \
        in notes
    assert not any("price table's rule" in note for note in notes)


def test_a_month_window_clips_an_attempt_across_the_boundary():
    # Booted 22:50 on 31 October (first on the host), the job 23:00-01:00 (7000 s of steps, 1000 waiting on data;
    # 200 s untimed), 600 s of scale-in after it. October: the boot (600 s) and the job's first half; November: the
    # job's second half and the scale-in. The phases carry no timestamps: each half gets half of every job bucket.
    record = attempt_record(start="2026-10-31T23:00:00+00:00", end="2026-11-01T01:00:00+00:00",
                            phases={"step": 7000.0, "data_wait": 1000.0}, scale_in_seconds=600,
                            host={"booted_at": "2026-10-31T22:50:00+00:00"})
    whole, _ = run_ledger([record], PRICES)
    october, _ = run_ledger([record], PRICES, window=month_window("2026-10"))
    november, notes = run_ledger([record], PRICES, window=month_window("2026-11"))
    assert october.seconds == pytest.approx({**dict.fromkeys(BUCKETS, 0.0), "startup": 600, "productive": 3000,
                                             "data_wait": 500, "other": 100})
    assert november.seconds == pytest.approx({**dict.fromkeys(BUCKETS, 0.0), "productive": 3000, "data_wait": 500,
                                              "other": 100, "idle": 600})
    assert {b: october.seconds[b] + november.seconds[b] for b in BUCKETS} == pytest.approx(whole.seconds)
    assert october.paid_usd + november.paid_usd == pytest.approx(whole.paid_usd)
    assert november.attempts == october.attempts == 1 and f"attempt(s) 1: {WINDOW_NOTE}" in notes
    # A month the attempt never touched leaves it out.
    assert run_ledger([record], PRICES, window=month_window("2026-12"))[0].attempts == 0
    # A lost attempt's steps since its checkpoint, cut by the window, are lost in proportion too.
    lost = {**record, "outcome": "lost", "phases": {"step": 7000.0, "since_checkpoint": 1400.0}}
    assert run_ledger([lost], PRICES, window=month_window("2026-11"))[0].seconds["lost"] == pytest.approx(700)


@pytest.mark.parametrize("change, message", [
    ({"started_at": "yesterday"}, "attempt 1: started_at='yesterday': not an ISO 8601 time"),
    ({"started_at": None}, "attempt 1: started_at: missing"),
    ({"ended_at": None}, "attempt 1: ended_at: missing"),
    ({"outcome": "crashed"}, "attempt 1: outcome='crashed': one of"),
    ({"host": {"booted_at": "at boot"}}, "attempt 1: host.booted_at='at boot': not an ISO 8601 time"),
    ({"rate": {"usd_per_hour": "cheap"}}, "attempt 1: rate.usd_per_hour='cheap': a finite number of 0 or more"),
    ({"phases": {"step": "long"}}, "attempt 1: phases.step='long': a finite number of 0 or more"),
    ({"scale_in_seconds": -5}, "attempt 1: scale_in_seconds=-5: a finite number of 0 or more"),
    ({"ended_at": "2026-11-30T09:00:00+00:00"}, "attempt 1: ended_at: before started_at"),
])
def test_a_record_it_cannot_read_raises_naming_the_attempt_and_the_field(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_ledger([{**attempt_record(), **change}], PRICES)
    if not {"rate", "phases"} & set(change):  # the paid span alone (what the operator side prices) says the same
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            paid_span({**attempt_record(), **change})
    with pytest.raises(ValueError, match=r"window=\(2, 1\): \(start, end\) in epoch seconds"):
        run_ledger([attempt_record()], PRICES, window=(2, 1))


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
    run = TrackedRun.start(env=env, code_directory=str(tmp_path), monotonic=ticks, clock=ticks)
    out = io.StringIO()
    with redirect_stdout(out):
        for _ in range(3):  # three steps of a third of a window: one full window by the third
            with run.clock.step():
                ticks.now += METRIC_WINDOW_SECONDS / 3 + 1
        run.clock.publish()  # the timer's tick (every EMIT_SECONDS on its thread)
    run.clock.close()
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
