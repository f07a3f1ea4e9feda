"""The elastic policy (issue 40, in progress: ml_platform_job.elastic): scale out on a plateau with busy GPUs, in on
idle ones, never within the snooze, only when the restart pays; its settings' errors; and its error rates simulated
(a busy job is not scaled in on noise; an idle one is; no more than one resize per snooze, whatever the metrics)."""

from __future__ import annotations

import math
import random

import pytest

from ml_platform_job.elastic import (DEFAULT_RESTART_SECONDS, RESIZE_EXIT_CODE, ElasticConfigError, ElasticPolicy,
                                     Observation, decide, plateaued, throughput)
from ml_platform_job.health import HEALTH_STOPPED_EXIT_CODE

POLICY = ElasticPolicy()
HOUR = 3600.0
# A job with 10 hours of work left at 2 nodes, 30 USD a node-hour, busy GPUs and a plateau of 3 evaluations.
BUSY_PLATEAU = Observation(nodes=2, val_losses=[1.0, 0.8, 0.7, 0.699, 0.70, 0.698], utilization=[92, 95, 90],
                           remaining_samples=10 * HOUR * 1000, samples_per_second=1000.0, node_price_per_hour=30.0,
                           restart_seconds=300.0)
IDLE = Observation(nodes=4, val_losses=[1.0, 0.9], utilization=[20, 25, 30], remaining_samples=5 * HOUR * 2000,
                   samples_per_second=2000.0, node_price_per_hour=30.0, restart_seconds=300.0)


def test_the_resize_exit_code_is_reserved_next_to_the_health_stop():
    assert (RESIZE_EXIT_CODE, HEALTH_STOPPED_EXIT_CODE) == (86, 85)
    assert RESIZE_EXIT_CODE < 126 and not 64 <= RESIZE_EXIT_CODE <= 78 and RESIZE_EXIT_CODE not in (1, 2)


def test_a_plateau_on_busy_gpus_scales_out_to_the_next_size_when_it_saves_time():
    decision = decide(POLICY, BUSY_PLATEAU)
    assert decision.size == 4 and decision.reason.startswith("scale out: validation loss not 1% better")
    then = 10 * HOUR / (2 * 0.9)  # twice the nodes at 90% efficiency a doubling
    assert decision.saved_seconds == pytest.approx(10 * HOUR - then - 300.0)
    assert decision.restart_usd == pytest.approx(300.0 / 3600 * 4 * 30.0)


def test_idle_gpus_scale_in_when_the_money_saved_exceeds_the_restart():
    decision = decide(POLICY, IDLE)
    assert decision.size == 2 and decision.reason.startswith("scale in: GPU utilization under 40% for 3 periods")
    assert decision.saved_usd > decision.restart_usd > 0


@pytest.mark.parametrize("change, reason", [
    ({"seconds_since_resize": 600.0}, "hold: 600 s since the last resize, snooze 1800 s"),
    ({"utilization": [95, 95]}, "not judged: 2 utilization periods, fewer than 3"),
    ({"samples_per_second": 0.0}, "not judged: no measured throughput or no work left"),
    ({"utilization": [95, 60, 95]}, "hold: neither idle nor a plateau on busy GPUs"),
    ({"val_losses": [1.0, 0.8, 0.7, 0.6]}, "hold: neither idle nor a plateau on busy GPUs"),
    ({"nodes": 8}, "hold: plateau on busy GPUs, but 8 node(s) is the largest size allowed"),
    ({"remaining_samples": 200 * 1000.0}, "hold: scaling out to 4 would save 89 s of 200 s left, less than its 300 s "
                                          "restart"),
])
def test_it_holds_within_the_snooze_without_data_within_the_band_at_the_cap_and_when_it_does_not_pay(change, reason):
    assert decide(POLICY, Observation(**{**BUSY_PLATEAU.__dict__, **change})).reason == reason


def test_the_plateau_rule_can_be_turned_off_and_the_restart_defaults_until_measured():
    assert not decide(ElasticPolicy(scale_out_on_plateau=False), BUSY_PLATEAU).resize
    unmeasured = decide(POLICY, Observation(**{**BUSY_PLATEAU.__dict__, "restart_seconds": None}))
    assert unmeasured.restart_seconds == DEFAULT_RESTART_SECONDS


def test_a_short_job_left_on_idle_gpus_is_not_scaled_in():
    decision = decide(POLICY, Observation(**{**IDLE.__dict__, "remaining_samples": 2000.0 * 120}))
    assert decision.size == 4 and "the restart does not pay" in decision.reason


def test_plateau_and_throughput():
    assert plateaued([1.0, 0.9, 0.9, 0.9, 0.9], 3, 0.01) and not plateaued([1.0, 0.9, 0.9, 0.85], 3, 0.01)
    assert not plateaued([1.0, 0.9], 3, 0.01)  # too few: no plateau
    assert throughput(100.0, 2, 4, 0.9) == pytest.approx(180.0) and throughput(100.0, 4, 2, 0.9) == pytest.approx(
        100.0 / 2 / 0.9)


@pytest.mark.parametrize("settings, message", [
    ({"min_nodes": 0}, "min_nodes=0: a whole number of 1 or more"),
    ({"max_nodes": 2000}, "max_nodes=2000: a whole number from min_nodes (1) to 1,000 (Batch's limit)"),
    ({"sizes": (4, 2)}, "sizes=(4, 2): whole numbers of 1 or more, increasing, without repeats"),
    ({"min_nodes": 3, "max_nodes": 3}, "sizes=(1, 2, 4, 8): at least one size from min_nodes 3 to max_nodes 3"),
    ({"idle_utilization": 90.0}, "idle_utilization=90.0: under busy_utilization (80)"),
    ({"snooze_seconds": -1.0}, "snooze_seconds=-1.0: a number from 0 to 604800"),
])
def test_a_bad_setting_names_itself_its_value_the_range_and_the_fix(settings, message):
    with pytest.raises(ElasticConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        ElasticPolicy(**settings)


# --- the error rates, simulated ---------------------------------------------------------------------------------

def _periods(rng: random.Random, mean: float, spread: float, n: int) -> list[float]:
    return [min(100.0, max(0.0, rng.gauss(mean, spread))) for _ in range(n)]


def test_a_busy_job_is_not_scaled_in_on_noise_and_an_idle_one_is():
    """70% utilization, 10 points of noise a period: 30,000 checks, no scale-in (stated: under 1e-5 a check); 30%:
    scaled in at nearly every check (power)."""
    rng = random.Random(40)
    busy = sum(decide(POLICY, Observation(**{**IDLE.__dict__, "utilization": _periods(rng, 70, 10, 3)})).resize
               for _ in range(30_000))
    idle = sum(decide(POLICY, Observation(**{**IDLE.__dict__, "utilization": _periods(rng, 30, 10, 3)})).resize
               for _ in range(2_000))
    assert busy == 0
    assert idle / 2_000 > 0.5  # each check: all 3 periods under 40% (0.84^3 = 0.59)


def test_no_more_than_one_resize_per_snooze_whatever_the_metrics_do():
    """A day of 5-minute checks with utilization jumping between idle and busy and the loss flat: the policy resizes,
    but never twice within 30 minutes (at most 48 a day)."""
    rng = random.Random(41)
    nodes, since, resizes = 2, math.inf, []
    for check in range(24 * 12):
        level = rng.choice([20.0, 95.0])
        seen = Observation(nodes=nodes, val_losses=[1.0] + [0.9] * 6, utilization=_periods(rng, level, 3, 3),
                           remaining_samples=1e9, samples_per_second=1000.0 * nodes, node_price_per_hour=30.0,
                           seconds_since_resize=since, restart_seconds=300.0)
        decision = decide(POLICY, seen)
        since += 300.0
        if decision.resize:
            resizes.append(check * 300.0)
            nodes, since = decision.size, 0.0
    assert resizes, "the simulation never resized: it shows nothing"
    assert all(b - a >= POLICY.snooze_seconds for a, b in zip(resizes, resizes[1:]))
