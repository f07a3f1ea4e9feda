"""Training health in the plain loop (issue 39): examples/pytorch_loop.py with its learning rate x100 stops itself
within the stated steps (exit 85, the run's record, the alarm's metric line); NaN injected stops it at once; a stalled
loader is stopped by the job's own timer; the healthy example over several seeds never stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES
from ml_platform_job.checkpoints import CheckpointStore
from ml_platform_job.health import HEALTH_NAMESPACE, HEALTH_STOPPED_EXIT_CODE, HealthRules, STOP_METRIC

CHECK_EVERY = 5  # the test's checks: the stated bound below is (start_windows + 1) x loss_window x CHECK_EVERY steps
RULES = HealthRules(check_every=CHECK_EVERY)
NOT_LEARNING_WITHIN = (RULES.start_windows + 1) * RULES.loss_window * CHECK_EVERY  # 550 optimizer steps
# A run that injects a fault into the example's data, from outside the example (which stays as users read it).
FAULTY = """
import os, sys, time, torch
sys.path.insert(0, {examples!r})
import pytorch_loop

FAULT, AT = os.environ["FAULT"], int(os.environ["FAULT_AT"])
original = pytorch_loop.Digits.__getitem__
calls = [0]

def faulty(self, index):
    image, label = original(self, index)
    if self.train:
        calls[0] += 1
        if calls[0] > AT:
            if FAULT == "nan":
                image = torch.full_like(image, float("nan"))
            elif FAULT == "stall":
                time.sleep(3600)  # a loader that stopped answering
    return image, label

pytorch_loop.Digits.__getitem__ = faulty
pytorch_loop.main(sys.argv[1:])
"""


def _run(tmp_path: Path, name: str, args: list[str], fault: str = "none", at: int = 0,
         **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY.format(examples=str(EXAMPLES)))
    uri = tmp_path / name
    run_env = {**os.environ, "ML_PLATFORM_CHECKPOINT_URI": str(uri), "ML_PLATFORM_STOP_FILE": str(tmp_path / "none"),
               "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid"), "ML_PLATFORM_HEALTH_CHECK_EVERY": str(CHECK_EVERY),
               "FAULT": fault, "FAULT_AT": str(at), "AWS_BATCH_JQ_NAME": "arn-queue", "ML_PLATFORM_QUEUE_NAME": "gpu",
               "AWS_BATCH_JOB_ID": f"job-{name}", **env}
    done = subprocess.run([sys.executable, str(script), "--num-workers", "0", "--log-interval", "1000", *args],
                          env=run_env, capture_output=True, text=True, timeout=300)
    return done, json.loads((uri / "passport.json").read_text())


def _stop_lines(stdout: str) -> list[dict]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"_aws"')]
    return [line for line in lines if STOP_METRIC in line]


def test_the_example_with_its_learning_rate_x100_stops_itself_within_the_stated_steps(tmp_path):
    # Its network blows up at step 2 and dies at chance level: the loss neither rises nor falls, so the rule that sees
    # it is loss_not_decreasing, a warning by default (a fine-tune falls less than 5% too): on for training from scratch
    done, record = _run(tmp_path, "lr100", ["--lr", "100", "--epochs", "10"],
                        ML_PLATFORM_HEALTH_RULES="loss_not_decreasing=stop")
    assert done.returncode == HEALTH_STOPPED_EXIT_CODE, done.stdout[-1500:] + done.stderr[-1500:]
    attempt = record["passport"]["attempts"][-1]
    stop = attempt["health_stop"]
    assert (record["status"], attempt["outcome"], stop["rule"]) == ("FAILED", "health_stopped", "loss_not_decreasing")
    assert stop["step"] <= NOT_LEARNING_WITHIN < 10 * 60, stop  # before the run's 600 steps would have ended
    assert stop["values"]["first_loss"] > 2.0 and "learning rate" in stop["fix"]
    assert attempt["saved_at_stop"] is True and record["health"]["stop"]["rule"] == "loss_not_decreasing"
    # The stop's checkpoint (a state judged bad) is kept for inspection, marked, and never the one a resume loads.
    store = CheckpointStore(str(tmp_path / "lr100"))
    marked = [(c.step, c.health_stop) for c in store.complete() if c.health_stop]
    assert marked == [(stop["step"], "loss_not_decreasing")] and store.latest().step < stop["step"]
    # The queue's alarm reads this line (namespace, metric, dimensions Queue and Rule): tests/unit/test_health_alarms
    [line] = _stop_lines(done.stdout)
    [directive] = line["_aws"]["CloudWatchMetrics"]
    assert (directive["Namespace"], directive["Dimensions"], line["Queue"], line["Rule"], line[STOP_METRIC]) == \
        (HEALTH_NAMESPACE, [["Queue", "Rule"]], "gpu", "loss_not_decreasing", 1)
    assert f"exit {HEALTH_STOPPED_EXIT_CODE} (the queue does not retry it)" in done.stdout


def test_at_the_defaults_the_dead_network_is_a_warning_and_the_run_finishes(tmp_path):
    done, record = _run(tmp_path, "lr100warn", ["--lr", "100", "--epochs", "10"])
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    assert [w["rule"] for w in record["health"]["warnings"]] == ["loss_not_decreasing"]
    assert "ml_platform_job health: loss_not_decreasing at step" in done.stderr


def test_nan_in_the_input_stops_the_job_within_two_checks_without_a_nan_checkpoint(tmp_path):
    done, record = _run(tmp_path, "nan", ["--epochs", "3"], fault="nan", at=30 * 32)  # NaN from step 31
    assert done.returncode == HEALTH_STOPPED_EXIT_CODE, done.stdout[-1500:] + done.stderr[-1500:]
    stop = record["passport"]["attempts"][-1]["health_stop"]
    assert stop["rule"] == "non_finite" and 31 <= stop["step"] <= 30 + 2 * CHECK_EVERY, stop
    assert record["passport"]["attempts"][-1]["saved_at_stop"] is False  # a NaN model is no checkpoint
    assert [line["Rule"] for line in _stop_lines(done.stdout)] == ["non_finite"]


def test_warn_only_reports_the_nan_and_trains_to_the_end(tmp_path):
    done, record = _run(tmp_path, "warn", ["--epochs", "1"], fault="nan", at=30 * 32, ML_PLATFORM_HEALTH="warn")
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    assert record["status"] == "FINISHED" and record["health"]["stop"] is None
    assert [w["rule"] for w in record["health"]["warnings"]] == ["non_finite"]
    assert "ml_platform_job health: non_finite at step" in done.stderr and "warn only" in done.stderr
    assert _stop_lines(done.stdout) == [] and '"HealthWarning":1' in done.stdout


def test_a_stalled_loader_is_stopped_by_the_jobs_own_timer(tmp_path):
    done, record = _run(tmp_path, "stall", ["--epochs", "2"], fault="stall", at=10 * 32,
                        ML_PLATFORM_HEALTH_STALL_SECONDS="10")
    assert done.returncode == HEALTH_STOPPED_EXIT_CODE, done.stdout[-1500:] + done.stderr[-1500:]
    attempt = record["passport"]["attempts"][-1]
    assert attempt["health_stop"]["rule"] == "stalled" and attempt["saved_at_stop"] is False
    assert attempt["health_stop"]["values"]["seconds_without_progress"] >= 10
    assert [line["Rule"] for line in _stop_lines(done.stdout)] == ["stalled"]
    # The helper's first heartbeat, a 0 at its start: the queue's watcher then judges a job hung before a step too
    heartbeats = [json.loads(line) for line in done.stdout.splitlines() if '"Progress"' in line]
    assert heartbeats and (heartbeats[0]["Progress"], heartbeats[0]["JobId"]) == (0, "job-stall")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_healthy_example_never_stops(tmp_path, seed):
    done, record = _run(tmp_path, f"seed{seed}", ["--seed", str(seed), "--epochs", "3"])
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    rules = record["health"]["rules"]
    assert record["health"]["stop"] is None and not any(v.startswith("fired") for v in rules.values()), rules
    for rule in ("non_finite", "exploding_gradients", "vanishing_gradients", "loss_diverging", "loss_not_decreasing"):
        assert rules[rule].startswith("ok ("), (rule, rules[rule])  # judged, not skipped
    assert _stop_lines(done.stdout) == []
    heartbeats = [json.loads(line) for line in done.stdout.splitlines() if '"Progress"' in line]
    assert heartbeats[0]["Progress"] == 0  # the helper's start: the watcher's metric, then each minute it progressed
    assert all(h["JobId"] == f"job-seed{seed}" for h in heartbeats)
