"""A health stop in the run's record (issue 39): the attempt ends health_stopped and the run FAILED with the rule, the
step, the values and the fix; the rules' verdicts and their state reach the record at checkpoints, and the next
attempt continues from that state (its first loss, the gradients' history), so a resumed job is judged as one run."""

import json

from ml_platform_job.health import HealthMonitor, HealthRules
from ml_platform_job.tracking import TrackedRun


def env_for(tmp_path):
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "AWS_REGION": "us-east-1"}


def _fed(monitor: HealthMonitor, losses, step: int = 0) -> int:
    for loss in losses:
        step += 1
        monitor.loss(loss)
        monitor.progress()
        if monitor.due(step):
            monitor.gradients(1.0)
            verdict = monitor.check(step)
            if verdict is not None:
                return step
    return step


def test_a_health_stop_is_recorded_with_rule_step_values_and_fix(tmp_path):
    run = TrackedRun.start(params={"lr": 1.0}, env=env_for(tmp_path), code_directory=str(tmp_path))
    monitor = run.health = HealthMonitor(HealthRules())
    step = _fed(monitor, [2.3] * 20 + [float("nan")] * 40)
    assert step == 40 and monitor.stop_verdict.rule == "non_finite"  # NaN from step 21: the checks at 30 and 40
    record = run.health_stop(monitor.stop_verdict.to_dict(), saved=False)
    attempt = record["passport"]["attempts"][-1]
    assert (record["status"], attempt["outcome"], attempt["saved_at_stop"]) == ("FAILED", "health_stopped", False)
    assert attempt["health_stop"]["rule"] == "non_finite" and attempt["stopped_at_step"] == 40
    assert attempt["reason"].startswith("health rule non_finite at step 40: the loss was NaN or inf on every step")
    assert "learning rate" in attempt["health_stop"]["fix"]
    written = json.loads((tmp_path / "ckpt" / "passport.json").read_text())
    assert written["health"]["stop"]["rule"] == "non_finite"
    assert written["health"]["rules"]["non_finite"].startswith("fired at step 40 (stop)")
    assert written["health"]["rules"]["overfit"].startswith("not judged: 0 validation losses")


def test_the_next_attempt_continues_from_the_recorded_state(tmp_path):
    first = TrackedRun.start(params={"lr": 1.0}, env=env_for(tmp_path), code_directory=str(tmp_path))
    monitor = first.health = HealthMonitor(HealthRules())
    _fed(monitor, [2.0 - i / 1000 for i in range(200)])
    first.checkpointed(step=200)
    state = json.loads((tmp_path / "ckpt" / "passport.json").read_text())["health"]["state"]
    assert 1.9 < state["reference"] < 2.0 and len(state["grad_history"]) == 20  # the first window's median
    resumed = HealthMonitor(HealthRules())
    resumed.load_state_dict(state)
    # At 1.9 the loss is not 1.5x the run's first window (1.95): no divergence
    assert _fed(resumed, [1.9] * 100, step=200) == 300 and resumed.stop_verdict is None
    assert resumed.reference == state["reference"]
    # A rise to 3.1 (over 1.5 x 1.95) for five checks stops it
    assert _fed(resumed, [3.1] * 60, step=300) == 350 and resumed.stop_verdict.rule == "loss_diverging"


def test_a_monitor_that_fails_to_summarize_never_blocks_the_record(tmp_path):
    class Broken:
        def summary(self):
            raise RuntimeError("boom")

        def close(self):
            pass

    run = TrackedRun.start(params={"lr": 1.0}, env=env_for(tmp_path), code_directory=str(tmp_path))
    run.health = Broken()
    record = run.finish()
    assert record["status"] == "FINISHED" and record["health"] == {"error": "RuntimeError: boom"}
