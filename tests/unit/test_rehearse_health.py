"""The rehearsal reports the training-health rules (issue 39): each rule's verdict as the run recorded it ("not judged"
shown as such, never a silent ok), a FAIL that names the rule, the step, the values and the fix when a rule stopped the
run (exit 85), and a warning when the longest time without progress came over half the stall rule's threshold. Fake
records and stand-in jobs of the standard library (the rules read plain floats): no torch."""

import json
import os
import subprocess
import sys

import pytest

from ml_platform_job import rehearse as rehearsal
from ml_platform_job.health import FIXES, RULES, HealthMonitor, HealthRules
from tests.unit.test_rehearsal_checks import RESUMES
from ml_platform_job.rehearse import (Attempt, Check, Rehearsal, _exit_meaning, format_lines, health_lines,
                                      health_report, health_stop_check, rehearse)

STOP = {"rule": "loss_diverging", "action": "stop", "step": 300,
        "values": {"loss": 9.87654, "first_loss": 2.3, "rise": 4.29, "checks_in_a_row": 5},
        "message": "loss 9.877, 4.3x the run's first 2.3, 5 checks in a row", "fix": FIXES["loss_diverging"]}
OK_RULES = {"non_finite": "ok (60 checks)", "exploding_gradients": "ok (60 checks)",
            "vanishing_gradients": "ok (60 checks)", "loss_diverging": "ok (60 checks)",
            "loss_not_decreasing": "ok (60 checks)", "loss_plateau": "not judged: 60 loss checks, fewer than 210",
            "overfit": "off", "stalled": "ok (longest gap 2 s of 1800 s allowed)"}


def record(rules=None, *, stop=None, gap=2.0, attempts=None, health="default", status="FINISHED"):
    """A run record as tracking.TrackedRun writes it: ``health`` the monitor's summary, each attempt's rules."""
    rules = dict(OK_RULES if rules is None else rules)
    summary = {"mode": "stop", "check_every": 10, "rules": rules, "warnings": [], "stop": stop,
               "longest_gap_seconds": gap, "state": {"reference": 2.3}}
    if attempts is None:
        attempts = [{"number": 1, "outcome": "stopped", "health": {"rules": rules, "stop": None}},
                    {"number": 2, "outcome": "health_stopped" if stop else "finished",
                     "health": {"rules": rules, "stop": stop}}]
        if stop:
            attempts[-1].update(health_stop=stop, saved_at_stop=True, stopped_at_step=stop["step"])
    found = {"run_id": "r1", "status": status, "passport": {"attempts": attempts}}
    if health != "absent":
        found["health"] = summary if health == "default" else health
    return found


# --- each rule's verdict ------------------------------------------------------------------------------------------

def test_every_rule_is_listed_with_its_verdict_and_not_judged_stays_a_result():
    report, warnings = health_report(record())
    assert report["recorded"] is True and warnings == []
    assert list(report["rules"]) == list(RULES)
    assert report["rules"]["loss_plateau"] == "not judged: 60 loss checks, fewer than 210"
    assert report["rules"]["overfit"] == "off"
    assert (report["mode"], report["check_every"], report["stop"]) == ("stop", 10, None)
    assert (report["longest_gap_seconds"], report["stall_seconds"]) == (2.0, 1800.0)
    lines = health_lines(report)
    assert lines[0] == "  health rules, as the run recorded them (mode stop; a check every 10 steps; docs/HEALTH.md):"
    assert "          loss_plateau         not judged: 60 loss checks, fewer than 210" in lines
    assert "          overfit              off" in lines
    assert "          non_finite           ok (60 checks)" in lines
    assert all(len(line) <= 100 for line in lines)


def test_an_earlier_attempt_that_judged_more_is_shown_beside_the_last_ones_verdict():
    first = {**OK_RULES, "loss_plateau": "fired at step 90 (warn): loss 0.5, not 1% under its best 0.5 for about "
                                         "2000 steps"}
    last = {**OK_RULES, "non_finite": "not judged: no loss observed (observe(loss=...) in the loop)"}
    found = record(last, attempts=[{"number": 1, "outcome": "stopped", "health": {"rules": first, "stop": None}},
                                   {"number": 2, "outcome": "finished", "health": {"rules": last, "stop": None}}])
    report, warnings = health_report(found)
    assert report["rules"]["non_finite"] == ("ok (60 checks) (attempt 1); attempt 2: not judged: no loss observed "
                                             "(observe(loss=...) in the loop)")
    assert report["rules"]["loss_plateau"].startswith("fired at step 90 (warn): loss 0.5") and \
        report["rules"]["loss_plateau"].endswith("(attempt 1); attempt 2: not judged: 60 loss checks, fewer than 210")
    [warned] = warnings  # a warn rule says its fix, and fails nothing
    assert warned.startswith("health rule loss_plateau fired at step 90 (warn)") and FIXES["loss_plateau"] in warned


@pytest.mark.parametrize("health, note", [
    ("absent", "not recorded: the job ran without TrainingJob or a framework callback, which run the rules"),
    ("a string", "unreadable: the record's health is a str, not an object"),
    (["a", "list"], "unreadable: the record's health is a list, not an object"),
    ({"rules": "ok"}, "unreadable: the record's health.rules is a str, not an object"),
    ({"error": "ValueError: boom"}, "unreadable: the job could not record the rules' verdicts (ValueError: boom)"),
])
def test_a_record_without_readable_health_says_so_in_one_line(health, note):
    report, warnings = health_report(record(health=health))
    assert report["recorded"] is False and report["note"].startswith(note) and warnings == []
    lines = health_lines(report)
    assert " ".join(line.strip() for line in lines).startswith(f"----  health rules: {note}"), lines
    assert all(len(line) <= 100 for line in lines)


def test_no_record_is_not_judged():
    report, _ = health_report(None)
    assert (report["recorded"], report["note"]) == (False, "no run record: nothing to judge")


# --- the longest gap without progress ------------------------------------------------------------------------------

@pytest.mark.parametrize("gap, stall, warned", [(901.0, None, True), (900.0, None, False), (20.0, "30", True),
                                                (14.0, "30", False)])
def test_a_gap_over_half_the_stall_threshold_warns(gap, stall, warned):
    rules = {**OK_RULES, "stalled": f"ok (longest gap {gap:.0f} s of {float(stall or 1800):.0f} s allowed)"}
    report, warnings = health_report(record(rules, gap=gap))
    assert report["stall_seconds"] == float(stall or 1800) and report["longest_gap_seconds"] == gap
    assert bool(warnings) is warned
    if warned:
        assert warnings[0].startswith(f"the longest time without progress was {gap:.0f} s, over half the stall "
                                      f"rule's {float(stall or 1800):.0f} s")
        assert "job.progress()" in warnings[0] and "ML_PLATFORM_HEALTH_STALL_SECONDS" in warnings[0]


def test_the_stall_threshold_comes_from_the_environment_when_the_rule_is_off():
    rules = {**OK_RULES, "stalled": "off"}
    report, warnings = health_report(record(rules, gap=40.0), {"ML_PLATFORM_HEALTH_STALL_SECONDS": "60"})
    assert report["stall_seconds"] == 60.0 and len(warnings) == 1
    assert health_report(record(rules, gap=40.0), {})[1] == []  # 40 s of the default 1800 s


def test_a_gap_in_an_earlier_attempt_counts():
    late = {**OK_RULES, "stalled": "ok (longest gap 1200 s of 1800 s allowed)"}
    found = record(OK_RULES, gap=2.0, attempts=[{"number": 1, "outcome": "stopped", "health": {"rules": late}},
                                                {"number": 2, "outcome": "finished", "health": {"rules": OK_RULES}}])
    report, warnings = health_report(found)
    assert report["longest_gap_seconds"] == 1200.0 and len(warnings) == 1


# --- a health stop ----------------------------------------------------------------------------------------------------

def test_exit_85_means_a_health_stop_which_the_queue_does_not_retry():
    assert _exit_meaning(85).startswith("exit 85: a training-health rule stopped it")
    assert "never retries" in _exit_meaning(85)


def test_a_health_stop_fails_with_the_rule_the_step_the_values_and_the_fix(tmp_path):
    check = health_stop_check(record(stop=STOP, status="FAILED"), Attempt(2, 85, 30.0, tmp_path / "attempt-2.log"))
    assert (check.name, check.passed, check.docs) == ("no health rule stopped the run", False, "docs/HEALTH.md")
    assert check.detail == ("attempt 2: the rule loss_diverging stopped it at step 300 (exit 85, which the queue never "
                            "retries): loss 9.877, 4.3x the run's first 2.3, 5 checks in a row; values: loss 9.877, "
                            "first_loss 2.3, rise 4.29, checks_in_a_row 5; the checkpoint of that step is written (for "
                            "inspection: a resume starts from the good one before it)")
    assert check.fix == f"{FIXES['loss_diverging']} (docs/HEALTH.md)"
    result = Rehearsal(["python", "train.py"], str(tmp_path), [Check("exited 143", True, "1 s after SIGTERM"), check])
    result.health, result.warnings = health_report(record({**OK_RULES, "loss_diverging": "fired at step 300 (stop): "
                                                            + STOP["message"]}, stop=STOP, status="FAILED"))
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: FAIL: no health rule stopped the run (read docs/HEALTH.md)"
    assert not any("it failed before the stop" in line for line in lines)
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    assert result.to_dict()["health"]["stop"]["rule"] == "loss_diverging"
    assert result.to_dict()["checks"][1]["docs"] == "docs/HEALTH.md"


def test_a_stop_without_a_checkpoint_says_so(tmp_path):
    nan = {**STOP, "rule": "non_finite"}
    found = record(stop=nan, status="FAILED")
    found["passport"]["attempts"][-1]["saved_at_stop"] = False
    check = health_stop_check(found, Attempt(2, 85, 3.0, tmp_path / "log"))
    assert check.detail.endswith("; no checkpoint of that step (a NaN state or a stuck loop is never saved: the newest "
                                 "complete one is the last good one)")


def test_exit_85_without_a_recorded_stop_is_not_blamed_on_a_rule(tmp_path):
    (tmp_path / "log").write_text("bye\n")
    check = health_stop_check(record(), Attempt(1, 85, 3.0, tmp_path / "log"))
    assert check.passed is False and check.detail.startswith("attempt 1: exit 85, the health rules' exit code, but the "
                                                             "run records no health stop")


# --- rehearsed stand-in jobs (the job side's own run record and rules, plain floats) -----------------------------------

STAND_IN = """
import os, signal, sys, time
from ml_platform_job.checkpoints import CheckpointStore
from ml_platform_job.health import HealthMonitor, HealthRules
from ml_platform_job.tracking import TrackedRun

MODE = {mode!r}
run = TrackedRun.start(params={{"mode": MODE}}, env=dict(os.environ), code_directory=os.path.dirname(__file__))
if run.finished:
    sys.exit(0)
health = HealthMonitor(HealthRules.from_env(check_every=1, loss_patience=3, grad_warmup=3, loss_window=2))
if isinstance((run.record.get("health") or {{}}).get("state"), dict):
    health.load_state_dict(run.record["health"]["state"])
run.health = health
""" + RESUMES + """while step < 60:
    if stopping:
        store.save(step, {{"state": str(step).encode()}})
        run.stop("SIGTERM", step=step, saved=True)
        sys.exit(143)
    step += 1
    diverges = MODE == "diverges" or (MODE == "diverges on the retry" and latest is not None and step > latest.step + 5)
    health.loss(50.0 if diverges and step > 3 else 2.0 if step <= 3 else 2.0 / step)
    health.gradients(1.0)
    health.progress()
    verdict = health.check(step)
    if verdict is not None:
        store.save(step, {{"state": str(step).encode()}})
        run.health_stop(verdict.to_dict(), saved=True)
        sys.exit(85)
    if step % 10 == 0:
        store.save(step, {{"state": str(step).encode()}})
        run.checkpointed(step)
    time.sleep(0.02)
run.finish()
"""


def rehearsed(tmp_path, mode, **env):
    job = tmp_path / "job.py"
    job.write_text(STAND_IN.format(mode=mode))
    return rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"), signal_delay=0.2,
                    env={**os.environ, **env})


def test_a_rule_that_stops_attempt_1_before_the_signal_is_the_fail(tmp_path):
    result = rehearsed(tmp_path, "diverges")
    lines = format_lines(result)
    [check] = result.checks  # no "it failed before the stop": the rule is the reason
    assert check.name == "no health rule stopped the run" and check.passed is False, lines
    assert check.detail.startswith("attempt 1: the rule loss_diverging stopped it at step 6 (exit 85, which the queue "
                                   "never retries): loss 50, "), lines
    assert "values: checks_in_a_row 3, first_loss 2, loss 50, rise 25" in check.detail
    assert FIXES["loss_diverging"] in check.fix
    assert result.health["rules"]["loss_diverging"].startswith("fired at step 6 (stop)")
    assert lines[-1] == "rehearsal: FAIL: no health rule stopped the run (read docs/HEALTH.md)"
    assert all(len(line) <= 100 for line in lines)


def test_a_rule_that_stops_the_retry_is_the_fail_and_the_record_is_right(tmp_path):
    result = rehearsed(tmp_path, "diverges on the retry")
    checks = {check.name: check for check in result.checks}
    lines = format_lines(result)
    assert checks["exited 143 within the stop timeout (30 s)"].passed, lines
    assert checks["the retry resumed (did not start over)"].passed, lines
    stop = checks["no health rule stopped the run"]
    assert stop.passed is False and stop.detail.startswith("attempt 2: the rule loss_diverging stopped it at step "), lines
    assert "finished with exit 0" not in checks
    assert checks["one run recorded"].passed and "stopped, health_stopped" in checks["one run recorded"].detail
    assert lines[-1] == "rehearsal: FAIL: no health rule stopped the run (read docs/HEALTH.md)"


def test_a_healthy_job_passes_with_each_rules_verdict(tmp_path):
    result = rehearsed(tmp_path, "healthy")
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: PASS", "\n".join(lines)
    rules = result.health["rules"]
    assert rules["non_finite"].startswith("ok (") and rules["loss_diverging"].startswith("ok (")
    assert rules["overfit"].startswith("not judged: 0 validation losses")  # a result, not a silent ok
    assert any(line.startswith("          overfit              not judged: ") for line in lines)
    assert result.warnings == [] and not any(line.startswith("  WARN") for line in lines)


def test_warn_mode_trains_on_and_the_rehearsal_warns_with_the_fix(tmp_path):
    result = rehearsed(tmp_path, "diverges", ML_PLATFORM_HEALTH="warn")
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: PASS", "\n".join(lines)
    assert any(w.startswith("health rule loss_diverging fired at step") and "warn only" in w for w in result.warnings)
    assert any(line.startswith("  WARN  health rule loss_diverging") for line in lines)


def test_json_has_the_health_and_the_warnings(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(STAND_IN.format(mode="diverges"))
    done = subprocess.run([sys.executable, "-m", "ml_platform_job", "rehearse", "--json", "--workdir",
                           str(tmp_path / "work"), "--", sys.executable, str(job)], capture_output=True, text=True,
                          timeout=120)
    report = json.loads(done.stdout)
    assert done.returncode == 3 and report["passed"] is False
    assert report["verdict"] == "rehearsal: FAIL: no health rule stopped the run (read docs/HEALTH.md)"
    assert report["checks"][0]["docs"] == "docs/HEALTH.md"
    assert report["health"]["stop"]["rule"] == "loss_diverging" and report["health"]["recorded"] is True
    assert set(report["health"]["rules"]) == set(RULES) and report["warnings"] == []


def test_the_monitor_summary_is_what_the_report_reads():
    """The report reads health.HealthMonitor.summary()'s own texts (not a copy of them that could drift)."""
    monitor = HealthMonitor(HealthRules(check_every=1))
    for step in range(1, 4):
        monitor.loss(1.0)
        monitor.progress()
        monitor.check(step)
    report, _ = health_report({"health": monitor.summary(), "passport": {"attempts": []}})
    assert report["rules"]["loss_diverging"] == "ok (3 checks)"
    assert report["rules"]["exploding_gradients"].startswith("not judged: 0 gradient checks")
    assert rehearsal.HEALTH_DOCS == "docs/HEALTH.md"
