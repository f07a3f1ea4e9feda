"""The training-health rules' error rates and power, Monte Carlo with the real HealthMonitor: a small seeded run of
``./platform bench health`` (bench/health.py; the bench's own runs, 2,000 to 50,000 steps a run and several hundred
runs a shape, are in docs/BENCHMARKS.md). Runs here are short (1,500 to 3,000 steps) so that several hundred fit the
suite's time: they judge every rule a run's start meets (the warmups, the first windows, the non-finite and jump
rules) and catch a change that multiplies a rate; the whole-run rate is the bench's.

- Healthy runs of the pooled shapes at the defaults: no more than the target's share stopped, at 95% (0 stops in
  300 runs bound the rate under 1/100: the rule of three).
- Sick runs: each shape the rules must stop is stopped within its stated steps in at least 97% of runs.
- Power: deliberately too tight rules (a jump of 2x, one non-finite check, a vanishing bar of 1e-2, a learning bar of
  30%) DO stop healthy runs, so the first test would see a bad default.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest

from bench import health as bench
from ml_platform_job.health import HealthRules

SEED = 2026
HEALTHY_RUNS = 25  # per pooled shape: 12 shapes, 300 runs
HEALTHY_STEPS = 3_000
SICK_RUNS = 35  # 97%: at most one miss
SICK_STEPS = 3_000  # faults from step 150 on: after the jump rule's warmup (10 checks)
INDEX = {shape.name: i for i, shape in enumerate(bench.SHAPES)}
POOL = [i for i, shape in enumerate(bench.SHAPES) if shape.kind == "healthy"]
STOPPED = [i for i, shape in enumerate(bench.SHAPES) if shape.kind == "stop"]


@functools.lru_cache(maxsize=None)
def traces(index: int, runs: int, steps: int) -> tuple:
    return tuple(bench.make_trace(index, SEED, trial, steps) for trial in range(runs))


def outcomes(indices, runs: int, steps: int, rules: HealthRules) -> dict:
    return {bench.SHAPES[i].name: [bench.simulate_run(trace, rules, bench.SHAPES[i].name, trial)
                                   for trial, trace in enumerate(traces(i, runs, steps))] for i in indices}


def pooled_stops(rules: HealthRules, indices=POOL, runs: int = HEALTHY_RUNS) -> tuple[int, int, dict]:
    results = outcomes(indices, runs, HEALTHY_STEPS, rules)
    stops = {name: [(o.stop_rule, o.stop_step) for o in found if o.stop_rule] for name, found in results.items()}
    return sum(len(s) for s in stops.values()), sum(len(found) for found in results.values()), \
        {name: s for name, s in stops.items() if s}


def test_the_pooled_false_stop_rate_at_the_defaults_is_under_1_in_100_at_95_percent():
    stops, runs, where = pooled_stops(HealthRules())
    assert runs >= 300
    assert bench.upper_bound(stops, runs) < bench.TARGET_FALSE_STOP, \
        f"{stops} false stops in {runs} healthy runs (upper bound {bench.upper_bound(stops, runs):.2%}): {where}"


@pytest.mark.parametrize("index", STOPPED, ids=[bench.SHAPES[i].name for i in STOPPED])
def test_each_sick_shape_is_stopped_within_its_stated_steps(index):
    shape = bench.SHAPES[index]
    # A dead network is caught by loss_not_decreasing, a warning by default: judged here as stop, as from scratch
    rules = HealthRules(actions={"loss_not_decreasing": "stop"}) if shape.expects else HealthRules()
    [row] = bench.sick_rows(outcomes([index], SICK_RUNS, SICK_STEPS, rules), price=1.0, settings=rules)
    assert row["stopped_before_fault"] == 0, row
    assert row["share"] >= bench.POWER, (f"{shape.name}: {row['detected_in_time']} of {row['runs']} stopped within "
                                         f"{row['within']} {shape.unit}; rules {row['rules']}, max {row['max']}")


@pytest.mark.parametrize("settings, shapes", [
    ({"grad_jump": 2.0}, ["heavy-tailed grad norms", "LLM loss spikes", "step LR drops"]),
    ({"non_finite_checks": 1}, ["fp16 GradScaler"]),
    ({"vanishing_threshold": 1e-2}, ["converging to ~0 loss"]),
    ({"learn_delta": 0.3, "actions": {"loss_not_decreasing": "stop"}},
     ["exp decay, noise 2-20%", "fine-tune, noise 30-80%"]),
], ids=["grad_jump=2", "non_finite_checks=1", "vanishing_threshold=1e-2", "learn_delta=0.3"])
def test_a_rule_set_too_tight_does_stop_healthy_runs(settings, shapes):
    """The check above has power: a bad default's false stops are over the target at 95%."""
    if any(name not in {f.name for f in dataclasses.fields(HealthRules)} for name in settings):
        pytest.skip(f"HealthRules has no {settings}")
    stops, runs, _ = pooled_stops(HealthRules(**settings), [INDEX[name] for name in shapes], runs=12)
    assert bench.lower_bound(stops, runs) > bench.TARGET_FALSE_STOP, f"{stops} stops in {runs} runs"


def test_the_bounds_are_clopper_pearson():
    assert bench.upper_bound(0, 300) == pytest.approx(1 - 0.05 ** (1 / 300), rel=1e-6)
    assert bench.upper_bound(0, 300) < 0.01 < bench.upper_bound(0, 290)
    assert bench.upper_bound(3, 1000) == pytest.approx(0.00775, abs=5e-5)  # exact, tables
    assert bench.lower_bound(3, 20) == pytest.approx(0.0422, abs=5e-4)
    assert bench.rate_verdict(0, 300) == "yes" and bench.rate_verdict(0, 100) == "not shown"
    assert bench.rate_verdict(5, 100) == "**no**"


def test_the_stall_is_stopped_half_an_hour_and_a_tick_after_the_last_step_and_priced():
    [row] = bench.sick_rows(outcomes([INDEX["stalled loader"]], 5, SICK_STEPS, HealthRules()), price=10.0)
    assert row["rules"] == {"stalled": 5}
    assert 1800 <= row["median"] <= row["max"] <= 1800 + 60
    # the stop is a little after the fault; the 24-h limit is what the hung job would have run to
    assert row["usd_saved_to_limit_median"] == pytest.approx(row["usd_saved_to_end_median"])
    assert 10.0 * (bench.JOB_TIMEOUT_SECONDS / 3600 - 2.2) < row["usd_saved_to_limit_median"] < 10.0 * 24


def test_the_job_timeout_and_the_price_are_the_platforms():
    assert bench.job_timeout_hours() == 24
    assert 5 < bench.hourly_price() < 100


def test_a_missed_target_fails_the_bench(capsys):
    assert bench.main(["--only", "sick", "--runs", "2", "--max-steps", "1000", "--workers", "1",
                       "--set", "non_finite_checks=1000"]) == 1
    out = capsys.readouterr().out
    assert "| NaN from a step | 2 | 0 |" in out and "targets: NOT met" in out
    assert all(len(line) <= 100 for line in out.splitlines() if not line.startswith("|")), out


def test_a_dead_network_is_a_warn_row_at_the_defaults_and_a_stop_row_with_its_rule_a_stop():
    dead = bench.SHAPES[INDEX["dead from step 1"]]
    assert dead.kind_under(HealthRules()) == "warn"
    assert dead.kind_under(HealthRules(actions={"loss_not_decreasing": "stop"})) == "stop"


def test_the_examples_verdicts():
    healthy = {"case": "healthy", "exit": 0, "rule": None}
    assert bench.example_met(healthy) and not bench.example_met({**healthy, "exit": 85, "rule": "non_finite"})
    assert bench.example_met({"case": "NaN input", "exit": 85, "rule": "non_finite"})
    # lr x100 at the defaults: the dead network warns and finishes; with loss_not_decreasing=stop, it stops
    assert bench.example_met({"case": "lr x100, 20 epochs", "exit": 0, "rule": None,
                              "warned": [("loss_not_decreasing", 1100)]})
    assert not bench.example_met({"case": "lr x100, 20 epochs", "exit": 0, "rule": None, "warned": []})
    stop_case = "lr x100, 20 epochs, not learning a stop"
    assert bench.example_met({"case": stop_case, "exit": 85, "rule": "loss_not_decreasing"})
    assert not bench.example_met({"case": stop_case, "exit": 0, "rule": None, "warned": [("loss_not_decreasing", 9)]})
    assert not bench.example_met({"case": "stalled loader", "exit": 85, "rule": "loss_diverging"})
    assert math.isfinite(bench.STEP_SECONDS)
