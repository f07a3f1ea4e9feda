"""The training-health rules (job/ml_platform_job/health.py), one at a time: each fires at the exact step its
check_every and patience give, and not on the legitimate case beside it (a single non-finite check, a one-check
gradient spike, a loss spike that recovers, a resumed attempt); the modes, the per-rule actions from the environment,
the configuration errors, the summary's "not judged" texts, the embedded-metric lines, and the stall timer's thread.
Their rates over whole runs are tests/unit/test_health_rates.py's and ./platform bench health's."""

from __future__ import annotations

import io
import json
import math
import threading

import pytest

from ml_platform_job import health
from ml_platform_job.health import HealthConfigError, HealthMonitor, HealthRules, metric_line

NAN, INF = math.nan, math.inf


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def monitor(rules: HealthRules | None = None, **kwargs) -> HealthMonitor:
    return HealthMonitor(rules or HealthRules(), stream=io.StringIO(), **kwargs)


def feed(m: HealthMonitor, losses, grads=None, *, start: int = 1) -> list:
    """Steps ``start``, ``start`` + 1, ...: each loss, and at each check the norm ``grads(step)`` (None: none given);
    the (step, verdict) of every stop returned."""
    stops = []
    for offset, loss in enumerate(losses):
        step = start + offset
        m.loss(loss)
        m.progress()
        if m.due(step):
            if grads is not None:
                m.gradients(grads(step))
            verdict = m.check(step)
            if verdict is not None:
                stops.append((step, verdict))
    return stops


def first_stop(m: HealthMonitor, losses, grads=None, *, start: int = 1):
    stops = feed(m, losses, grads, start=start)
    return (stops[0][0], stops[0][1].rule) if stops else None


# --- non_finite -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("every, stop", [(10, 60), (5, 45)])
def test_a_nan_loss_stops_on_the_second_check_whose_steps_are_all_nan(every, stop):
    """NaN from step 35: the check whose window holds steps 31-34 is not "every step" (no norm given here)."""
    losses = [1.0] * 34 + [NAN] * 100
    assert first_stop(monitor(HealthRules(check_every=every)), losses) == (stop, "non_finite")


def test_a_nan_gradient_norm_counts_at_its_check_so_the_stop_comes_a_check_sooner():
    losses = [1.0] * 34 + [NAN] * 100
    assert first_stop(monitor(), losses, lambda step: NAN if step >= 35 else 1.0) == (50, "non_finite")


def test_one_non_finite_check_is_what_amp_does_and_never_stops():
    """A GradScaler's skipped step: the norm is inf at one check, the loss finite; then training goes on."""
    grads = lambda step: INF if step in (40, 200, 350) else 1.0  # noqa: E731
    m = monitor()
    assert feed(m, [1.0] * 400, grads) == []
    assert "non_finite" not in m.fired
    losses = [1.0] * 400
    losses[100:105] = [NAN] * 5  # half a check's steps NaN: not "every step"
    assert feed(monitor(), losses, lambda step: 1.0) == []


def test_non_finite_checks_one_stops_at_the_first():
    assert first_stop(monitor(HealthRules(non_finite_checks=1)), [1.0] * 30 + [INF] * 20,
                      lambda step: 1.0) == (40, "non_finite")


# --- exploding and vanishing gradients --------------------------------------------------------------------------------

def test_a_gradient_norm_over_100x_its_median_for_3_checks_stops_at_the_third():
    grads = lambda step: 101.0 if step > 110 else 1.0  # noqa: E731 - checks 1-11 at 1.0: the median is 1.0
    assert first_stop(monitor(), [1.0] * 300, grads) == (140, "exploding_gradients")


def test_a_one_check_gradient_spike_never_stops_nor_raises_the_median():
    spikes = {110: 1000.0, 200: 1000.0, 210: 1.0, 300: 5000.0}
    m = monitor()
    assert feed(m, [1.0] * 400, lambda step: spikes.get(step, 1.0)) == []
    assert max(m.state_dict()["grad_history"]) == 1.0


def test_two_checks_over_100x_then_normal_never_stop():
    grads = lambda step: 500.0 if step in (150, 160, 250, 260) else 1.0  # noqa: E731
    assert feed(monitor(), [1.0] * 400, grads) == []


def test_the_jump_is_not_judged_before_grad_warmup_checks():
    grads = lambda step: 1000.0 if 40 <= step <= 90 else 1.0  # noqa: E731 - checks 4-9: under 10 in the history
    assert feed(monitor(), [1.0] * 200, grads) == []


def test_max_grad_norm_stops_from_the_first_checks_without_a_history():
    assert first_stop(monitor(HealthRules(max_grad_norm=5.0)), [1.0] * 100, lambda step: 6.0) == \
        (30, "exploding_gradients")


def test_vanishing_gradients_stop_on_the_fifth_check_under_the_threshold():
    grads = lambda step: 1e-8 if step > 200 else 0.5  # noqa: E731
    assert first_stop(monitor(), [1.0] * 400, grads) == (250, "vanishing_gradients")
    grads = lambda step: 1e-8 if 200 < step <= 240 else 0.5  # noqa: E731 - four checks, then back
    assert feed(monitor(), [1.0 - step * 1e-3 for step in range(400)], grads) == []


# --- the loss rules ---------------------------------------------------------------------------------------------------

def falling(steps: int, start: float = 2.0, end: float = 1.0) -> list:
    return [end + (start - end) * math.exp(-step / 300) for step in range(steps)]


def test_a_loss_over_1_5x_the_first_window_for_5_checks_stops_at_the_fifth():
    losses = [1.0] * 100 + [1.6] * 100  # the reference is the first window's median (its first 10 checks)
    assert first_stop(monitor(), losses) == (150, "loss_diverging")
    # before the first window ends there is no reference: a rise in the first 100 steps is judged from step 110 on
    assert first_stop(monitor(), [1.0] * 10 + [1.6] * 200) is None


def test_a_loss_spike_that_recovers_within_4_checks_never_stops():
    losses = falling(3000)
    for start in (1000, 2000):
        losses[start:start + 40] = [5.0] * 40  # 4 checks at 2.5x the first, then back where it was
    assert feed(monitor(), losses, lambda step: 1.0) == []


def test_a_loss_that_has_not_moved_5_percent_in_1100_steps_warns_and_stops_when_set_to():
    warned = monitor()
    assert first_stop(warned, [1.0] * 2000) is None and warned.fired["loss_not_decreasing"].step == 1100
    assert first_stop(monitor(HealthRules(actions={"loss_not_decreasing": "stop"})), [1.0] * 2000) == \
        (1100, "loss_not_decreasing")
    rules = HealthRules(check_every=5, loss_window=4, start_windows=3, actions={"loss_not_decreasing": "stop"})
    assert first_stop(monitor(rules), [1.0] * 2000) == ((3 + 1) * 4 * 5, "loss_not_decreasing")


def test_a_loss_falling_10_percent_in_its_first_600_steps_learns():
    losses = [1.0 - 0.1 * min(step, 600) / 600 for step in range(3000)]
    m = monitor()
    assert feed(m, losses) == []
    assert "loss_not_decreasing" not in m.fired


def test_a_plateau_after_progress_warns_once_and_never_stops():
    losses = [2.0] * 100 + [1.0] * 5000  # learned at window 2 (step 200), flat from there
    m = monitor()
    assert feed(m, losses) == []
    verdict = m.fired["loss_plateau"]
    assert verdict.action == "warn"
    assert verdict.step == (2 + HealthRules().plateau_windows) * 100
    assert m.stop_verdict is None


def test_overfit_warns_on_the_third_evaluation_10_percent_over_the_best_and_stops_when_set_to():
    values = [1.0, 0.9, 1.0, 0.991, 1.0, 1.0, 1.0]  # 1.0 > 0.9 * 1.1 = 0.99: from the third over
    m = monitor()
    assert [m.validation(value, step=100 * (i + 1)) for i, value in enumerate(values)] == [None] * len(values)
    assert m.fired["overfit"].step == 500 and m.fired["overfit"].action == "warn"
    m = monitor(HealthRules(actions={"overfit": "stop"}))
    verdicts = [m.validation(value, step=100 * (i + 1)) for i, value in enumerate(values)]
    assert [v.step if v else None for v in verdicts][:5] == [None, None, None, None, 500]
    m = monitor(HealthRules(actions={"overfit": "stop"}))
    assert [m.validation(v, step=i) for i, v in enumerate([1.0, 1.2, 1.2, 1.05, 1.2, 1.2, NAN])] == [None] * 7


# --- resumed attempts -------------------------------------------------------------------------------------------------

def learned_state() -> dict:
    m = monitor()
    feed(m, falling(1800), lambda step: 1.0)
    return json.loads(json.dumps(m.state_dict()))  # the record is JSON


def test_a_resumed_attempt_continues_from_the_recorded_state():
    state = learned_state()
    flat = [1.0] * 2000
    stopping = HealthRules(actions={"loss_not_decreasing": "stop"})
    assert first_stop(monitor(stopping), flat) == (1100, "loss_not_decreasing")  # a fresh run that never learned
    resumed = monitor(stopping)
    resumed.load_state_dict(state)
    assert feed(resumed, flat, lambda step: 1.0, start=1801) == []  # the run learned before the reclaim
    resumed = monitor()
    resumed.load_state_dict(state)  # the first loss is the run's, not this attempt's
    assert first_stop(resumed, [state["reference"] * 1.6] * 100, start=1801) == (1850, "loss_diverging")
    resumed = monitor()
    resumed.load_state_dict(state)  # the gradients' history too: no new warmup
    assert first_stop(resumed, falling(100), lambda step: 150.0, start=1801) == (1830, "exploding_gradients")


# --- modes, actions, configuration ------------------------------------------------------------------------------------

def test_warn_mode_never_returns_a_stop_but_says_each_rule_once():
    stream = io.StringIO()
    m = HealthMonitor(HealthRules(mode="warn"), stream=stream)
    assert feed(m, [NAN] * 200, lambda step: NAN) == []
    assert m.fired["non_finite"].action == "warn" and m.stop_verdict is None
    assert stream.getvalue().count("non_finite at step 20") == 1 and "training goes on (warn only)" in stream.getvalue()
    clock = Clock()
    m = HealthMonitor(HealthRules(mode="warn"), now=clock, stream=io.StringIO())
    clock.now = 4000
    assert m.stalled(7) is None and m.fired["stalled"].action == "warn"


def test_off_mode_checks_nothing():
    m = monitor(HealthRules(mode="off"))
    assert feed(m, [NAN] * 200, lambda step: NAN) == []
    assert m.checks == 0 and m.fired == {}
    assert m.validation(5.0, 10) is None
    clock = Clock()
    m = HealthMonitor(HealthRules(mode="off"), now=clock)
    clock.now = 1e6
    assert m.stalled(1) is None
    assert set(m.summary()["rules"].values()) == {"off"}


def test_a_rule_turned_off_or_to_warn_by_the_environment():
    rules = HealthRules.from_env({health.RULES_ENV: "overfit=stop, vanishing_gradients=OFF",
                                  health.STALL_ENV: "600", health.CHECK_EVERY_ENV: "20"})
    assert rules.action("overfit") == "stop" and rules.action("vanishing_gradients") == "off"
    assert rules.action("non_finite") == "stop" and rules.stall_seconds == 600 and rules.check_every == 20
    assert feed(monitor(rules), [1.0 - i * 1e-4 for i in range(400)], lambda step: 1e-9) == []
    assert HealthRules.from_env({health.MODE_ENV: "warn"}).action("non_finite") == "warn"
    assert HealthRules.from_env({health.MODE_ENV: "off"}).action("stalled") == "off"
    # a setting given in code wins over the environment's, rule by rule
    both = HealthRules.from_env({health.RULES_ENV: "overfit=stop,stalled=off"}, actions={"overfit": "warn"})
    assert both.action("overfit") == "warn" and both.action("stalled") == "off"


@pytest.mark.parametrize("settings, expected", [
    ({"check_every": 0}, ["check_every=0", "from 1 to", "the default is 10"]),
    ({"grad_jump": 1.0}, ["grad_jump=1.0", "over 1", "the default is 100"]),
    ({"stall_seconds": 5}, ["stall_seconds=5", "at least 10", "the default is 1800"]),
    ({"mode": "loud"}, ["mode='loud'", "stop, warn, off", "mode='warn'"]),
    ({"actions": {"nan": "stop"}}, ["actions['nan']", "no such rule", "non_finite"]),
    ({"actions": {"overfit": "halt"}}, ["actions['overfit']='halt'", "stop, warn, off"]),
    ({"grad_warmup": 60}, ["grad_warmup=60", "grad_history (50)"]),
    ({"max_grad_norm": -1.0}, ["max_grad_norm=-1.0", "a positive norm, or None"]),
])
def test_a_setting_out_of_range_names_itself_and_the_fix(settings, expected):
    with pytest.raises(HealthConfigError) as raised:
        HealthRules(**settings)
    for text in expected:
        assert text in str(raised.value)


@pytest.mark.parametrize("env, expected", [
    ({health.RULES_ENV: "overfit"}, [health.RULES_ENV, "rule=action pairs"]),
    ({health.STALL_ENV: "half an hour"}, [health.STALL_ENV, "a number", "the default is 1800"]),
    ({health.CHECK_EVERY_ENV: "1.5"}, [health.CHECK_EVERY_ENV, "the default is 10"]),
])
def test_an_environment_setting_that_does_not_parse_names_the_variable(env, expected):
    with pytest.raises(HealthConfigError) as raised:
        HealthRules.from_env(env)
    for text in expected:
        assert text in str(raised.value)


# --- what the run records ---------------------------------------------------------------------------------------------

def test_the_summary_says_not_judged_and_why_never_a_silent_ok():
    rules = monitor().summary()["rules"]
    assert set(rules) == set(health.RULES)
    # each says what it lacks and where it comes from (the wording of the hint is the module's own)
    assert rules["non_finite"] == rules["loss_diverging"]
    assert rules["non_finite"].startswith("not judged: no loss observed (") and "observe(loss=" in rules["non_finite"]
    assert rules["exploding_gradients"].startswith("not judged: 0 gradient checks, fewer than 10 (")
    assert rules["overfit"].startswith("not judged: 0 validation losses (")
    assert rules["loss_not_decreasing"] == "not judged: 0 loss checks, fewer than 110"
    assert rules["stalled"].startswith("ok (longest gap")
    m = monitor()
    feed(m, falling(300), lambda step: 1.0)  # 30 checks; learned
    rules = m.summary()["rules"]
    assert rules["exploding_gradients"] == "ok (30 checks)" and rules["loss_not_decreasing"] == "ok (30 checks)"
    assert rules["loss_plateau"] == "not judged: 30 loss checks, fewer than 210"
    m = monitor()
    feed(m, [1.0] * 10 + [NAN] * 20)
    summary = m.summary()
    assert summary["rules"]["non_finite"].startswith("fired at step 30 (stop): the loss was NaN or inf on every step")
    assert summary["stop"]["rule"] == "non_finite" and summary["stop"]["fix"] == health.FIXES["non_finite"]
    json.dumps(summary)  # NaN values are strings: the record is JSON
    assert summary["stop"]["values"]["grad_norm"] is None


def test_a_verdict_line_names_the_rule_the_step_and_the_fix():
    [(step, verdict)] = feed(monitor(), [1.0] * 10 + [NAN] * 20)
    line = verdict.line()
    assert line.startswith("ml_platform_job health: non_finite at step 30: ") and "stopping the job" in line
    assert line.endswith("Fix: " + health.FIXES["non_finite"])
    assert set(verdict.to_dict()) == {"rule", "action", "step", "values", "message", "fix"}


def test_metric_lines_are_embedded_metric_format():
    stop = json.loads(metric_line(health.STOP_METRIC, "training", "non_finite", wall=1_800_000_000.25,
                                  fields={"Step": 30, "Queue": "ignored"}))
    assert stop["_aws"] == {"Timestamp": 1_800_000_000_250, "CloudWatchMetrics": [{
        "Namespace": "MLPlatform/Health", "Dimensions": [["Queue", "Rule"]],
        "Metrics": [{"Name": "HealthStop", "Unit": "Count"}]}]}
    assert (stop["Queue"], stop["Rule"], stop["HealthStop"], stop["Step"]) == ("training", "non_finite", 1, 30)
    beat = json.loads(metric_line(health.HEARTBEAT_METRIC, "training", job_id="job-1", value=42, wall=1.0))
    assert beat["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Queue", "JobId"]]
    assert (beat["JobId"], beat["Progress"], "Rule" in beat) == ("job-1", 42, False)


# --- stalls -----------------------------------------------------------------------------------------------------------

def test_the_stall_rule_fires_at_stall_seconds_without_progress_once():
    clock = Clock()
    m = HealthMonitor(HealthRules(), now=clock, stream=io.StringIO())
    clock.now = 1000.0
    m.progress()
    clock.now = 1000.0 + 1799.9
    assert m.stalled(5) is None
    clock.now = 1000.0 + 1800.0
    verdict = m.stalled(5)
    assert (verdict.rule, verdict.action, verdict.step) == ("stalled", "stop", 5)
    assert verdict.values["seconds_without_progress"] == 1800.0
    assert m.stalled(5) is None  # said once
    assert m.summary()["rules"]["stalled"].startswith("fired at step 5 (stop)")


def test_a_save_or_restore_is_alive_for_twice_the_stall_time_and_a_hung_one_is_stopped_after():
    clock = Clock()
    m = HealthMonitor(HealthRules(), now=clock, stream=io.StringIO())
    busy = [True]
    m.busy = lambda: busy[0]
    assert m.heartbeat() is None  # nothing happened: nothing to send
    for minute in range(0, 60, 5):  # a long restore (a big checkpoint over a slow link): alive, no progress
        clock.now = minute * 60.0
        assert m.stalled(0) is None
    assert m.heartbeat() == 0  # the watcher's "alive" line
    clock.now = 3600.0  # at 2 x 1,800 s it counts as hung: stopped
    verdict = m.stalled(0)
    assert verdict is not None and verdict.rule == "stalled" and m.heartbeat() is None
    # A restore that ends in time restarts the clock: the compile after it gets the allowance anew.
    clock.now, busy[0] = 0.0, True
    m3 = HealthMonitor(HealthRules(), now=clock, stream=io.StringIO())
    m3.busy = lambda: busy[0]
    clock.now = 3000.0
    assert m3.stalled(0) is None
    busy[0] = False
    assert m3.stalled(0) is None
    clock.now = 3000.0 + 3599.0
    assert m3.stalled(0) is None
    clock.now = 3000.0 + 3600.0
    assert m3.stalled(0) is not None
    busy[0] = True
    # A save that ends in time resets the bound for the next one.
    m2 = HealthMonitor(HealthRules(), now=clock, stream=io.StringIO())
    m2.busy = lambda: busy[0]
    clock.now = 0.0
    m2.stalled(0)
    busy[0] = False
    clock.now = 3000.0
    m2.progress()
    busy[0] = True
    clock.now = 3000.0 + 3500.0
    assert m2.stalled(0) is None


def test_the_watch_thread_stops_a_stalled_job_and_sends_the_heartbeat():
    clock = Clock()
    m = HealthMonitor(HealthRules(stall_seconds=60), now=clock, stream=io.StringIO())
    stalled, beats, got = threading.Event(), [], []
    m.on_stall = lambda verdict: (got.append(verdict), stalled.set())
    m.progress(7)
    try:
        m.watch(lambda: 12, interval=0.05, emit=beats.append)
        clock.now = 59.0  # under the threshold: the timer keeps ticking, nothing fires
        assert not stalled.wait(0.3)
        clock.now = 61.0
        assert stalled.wait(10), "the timer thread never called on_stall"
    finally:
        m.close()
    assert [(v.rule, v.step) for v in got] == [("stalled", 12)]
    assert beats and beats[0] == 7  # the progress counted since the last heartbeat
    assert m._thread is None  # close() joined it
