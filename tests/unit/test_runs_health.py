"""./platform runs and training health (issue 39): ``runs show`` prints a health stop (the rule, the step, the message,
the values, the fix, whether the checkpoint of that step was written) and each rule's verdict; ``runs list`` tells a
health-stopped run from another failure; everything within 100 columns, ``--json`` with the raw fields; a record from
before the rules, or one whose ``health`` is malformed, still shows (one line saying so, no traceback)."""

import json

import pytest

from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ml_platform_job.health import FIXES, RULES, HealthMonitor, HealthRules
from ml_platform_job.tracking import TAG_PREFIX, TrackedRun
from ops import runs as runs_ops
from tests.unit.test_runs_ops import fits



def tracked(tmp_path, name, uri=None):
    env = {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / name), "AWS_REGION": "us-east-1",
           "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "ML_PLATFORM_JOB_NAME": name}
    clock = iter(range(1_800_000_000, 1_800_500_000, 60)).__next__
    return TrackedRun.start(params={"lr": 100.0}, seed=7, env=env, tracking_uri=uri, clock=clock,
                            prices=load_prices("us-east-1"))


def health_stopped(tmp_path, name, rule="loss_diverging", uri=None):
    """A run a health rule stopped, as TrainingJob records it: the monitor fed plain floats, a checkpoint at step 2,
    then the stop (a checkpoint of its step unless the state is NaN)."""
    run = tracked(tmp_path, name, uri)
    monitor = HealthMonitor(HealthRules(check_every=1, loss_patience=3, loss_window=2))
    run.health = monitor
    verdict, step = None, 0
    while verdict is None and step < 1000:
        step += 1
        monitor.loss(2.0 if step < 3 else 50.0 if rule == "loss_diverging" else float("nan"))
        monitor.progress()
        verdict = monitor.check(step)
        if step == 2:
            run.checkpointed(2)
    assert verdict.rule == rule
    run.health_stop(verdict.to_dict(), saved=rule != "non_finite")
    return run, verdict


def shown(capsys, directory, *extra):
    assert runs_ops.main(["show", "--record", str(directory), *extra]) == 0
    return capsys.readouterr().out


def test_runs_show_prints_the_stop_its_values_its_fix_and_every_rules_verdict(tmp_path, capsys):
    run, verdict = health_stopped(tmp_path, "diverged")
    text = shown(capsys, tmp_path / "diverged")
    lines = text.splitlines()
    assert fits(text), text
    assert any(line.startswith(f"  health stop: the rule loss_diverging stopped attempt 1 at step {verdict.step} (exit "
                               "85, which the queue") for line in lines), text
    unfolded = " ".join(line.strip() for line in lines)
    assert verdict.message in unfolded and "which the queue does not retry; docs/HEALTH.md)" in unfolded
    assert "values: checks_in_a_row 3, first_loss 2, loss 50, rise 25" in unfolded
    assert f"checkpoint: the checkpoint of step {verdict.step} was written under {tmp_path / 'diverged'}/" in unfolded
    assert f"fix: {FIXES['loss_diverging']}" in unfolded
    assert "  health rules (mode stop, a check every 1 steps):" in lines
    rule_lines = [line for line in lines if line.startswith("    ") and line.split()[0] in RULES]
    assert [line.split()[0] for line in rule_lines] == list(RULES)  # the module's order, every rule
    assert f"    loss_diverging       fired at step {verdict.step} (stop): " in text
    assert "    overfit              not judged: 0 validation losses" in text  # a result, never a silent ok
    assert "Traceback" not in text
    record = json.loads(shown(capsys, tmp_path / "diverged", "--json"))
    assert record["health"]["stop"]["rule"] == "loss_diverging" and set(record["health"]["rules"]) == set(RULES)
    [attempt] = record["passport"]["attempts"]
    assert (attempt["outcome"], attempt["health_stop"]["step"], attempt["saved_at_stop"]) == \
        ("health_stopped", verdict.step, True)


def test_a_nan_stop_says_no_checkpoint_of_its_step_was_written(tmp_path, capsys):
    run, verdict = health_stopped(tmp_path, "nan", rule="non_finite")
    unfolded = " ".join(line.strip() for line in shown(capsys, tmp_path / "nan").splitlines())
    assert (f"checkpoint: no checkpoint of step {verdict.step} (a NaN state or a stuck loop is never saved); the newest "
            "is step 2") in unfolded
    assert f"fix: {FIXES['non_finite']}" in unfolded


def test_a_record_from_before_the_rules_still_shows(tmp_path, capsys):
    run = tracked(tmp_path, "old")
    run.finish()
    text = shown(capsys, tmp_path / "old")
    assert "Traceback" not in text and fits(text)
    [line] = [line for line in text.splitlines() if line.startswith("  health")]
    assert line.startswith("  health rules: not recorded (a run from before them, or a job without TrainingJob")
    assert json.loads(shown(capsys, tmp_path / "old", "--json"))["health"] is None


@pytest.mark.parametrize("health, said", [
    ("ok", "  health rules: unreadable in the record (a str, not an object)"),
    (["ok", "ok"], "  health rules: unreadable in the record (a list, not an object)"),
    ({"rules": ["ok"]}, "  health rules: unreadable in the record (its rules are a list, not an object)"),
    ({"mode": "stop"}, "  health rules: unreadable in the record (its rules are a NoneType, not an object)"),
    ({"error": "KeyError: 'x'"}, "  health rules: not recorded: the job could not record them (KeyError: 'x')"),
])
def test_a_malformed_health_shows_one_line_saying_so(tmp_path, capsys, health, said):
    run = tracked(tmp_path, "odd")
    run.finish()
    path = tmp_path / "odd" / "passport.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "health": health}))
    text = shown(capsys, tmp_path / "odd")
    assert [line for line in text.splitlines() if line.startswith("  health")] == [said], text
    assert json.loads(shown(capsys, tmp_path / "odd", "--json"))["health"] == health  # raw, as recorded


def test_a_malformed_stop_in_an_attempt_shows_one_line(tmp_path, capsys):
    health_stopped(tmp_path, "odd-stop")
    path = tmp_path / "odd-stop" / "passport.json"
    record = json.loads(path.read_text())
    record["passport"]["attempts"][0]["health_stop"] = "loss_diverging"
    path.write_text(json.dumps(record))
    text = shown(capsys, tmp_path / "odd-stop")
    assert "  health stop: attempt 1's verdict is unreadable in the record (a str, not an object)" in text
    assert "Traceback" not in text and fits(text)


def test_runs_list_tells_a_health_stop_from_another_failure(tmp_path, mlflow_store, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    stopped, verdict = health_stopped(tmp_path, "diverged", uri=mlflow_store)
    # The tags TrackedRun.health_stop records (set here as they are named: tracking's _tags writes them).
    client = MlflowClient(mlflow_store)
    client.set_tag(stopped.run_id, f"{TAG_PREFIX}health_stop", "loss_diverging")
    client.set_tag(stopped.run_id, f"{TAG_PREFIX}health_stop_step", str(verdict.step))
    failed = tracked(tmp_path, "crashed", mlflow_store)
    failed.fail("the process ended in ValueError")
    monkeypatch.setattr(runs_ops, "LOCAL_STORE", tmp_path / "store")
    for wide in ([], ["--wide"]):
        assert runs_ops.main(["list", "--local", *wide]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert not wide or max(map(len, lines)) > 100  # --wide is the wide one; the default fits 100 columns
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {stopped.run_id}  "))
        assert "FAILED" in lines[at]
        assert lines[at + 1] == (f"      stopped by the health rule loss_diverging at step {verdict.step} (exit 85, not "
                                 "retried; runs show: the fix)")
        other = next(i for i, line in enumerate(lines) if line.startswith(f"  {failed.run_id}  "))
        assert "FAILED" in lines[other] and "health" not in " ".join(lines[other:other + 2])
        if not wide:
            assert fits("\n".join(lines))
    assert runs_ops.main(["list", "--local", "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[stopped.run_id]["health_stop"] == {"rule": "loss_diverging", "step": verdict.step}
    assert listed[failed.run_id]["health_stop"] is None and listed[failed.run_id]["status"] == "FAILED"
    # runs show through MLflow: the record artifact the stop logged.
    assert runs_ops.main(["show", "--local", stopped.run_id]) == 0
    text = capsys.readouterr().out
    assert fits(text) and "  health stop: the rule loss_diverging stopped attempt 1" in text
    assert runs_ops.main(["show", "--local", stopped.run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["health"]["stop"]["step"] == verdict.step
