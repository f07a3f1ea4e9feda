"""The goodput ledger (runtime.goodput): buckets that add up to the paid time, the job's phase clock, the loader
settings it advises, and the bench that replays the story's month through the same code."""

import importlib.util
import sys
from pathlib import Path

import pytest

from ml_platform_job.goodput import (BUCKETS, Attempt, PhaseClock, attempt_ledger, ledger,
                                                     loader_settings, loader_settings_for)

ROOT = Path(__file__).resolve().parents[2]


def test_the_buckets_add_up_to_the_paid_time_and_its_cost_by_nodes_and_gpu_share():
    attempt = Attempt(paid_seconds=3600, startup_seconds=300, restore_seconds=60, step_seconds=3000,
                      data_wait_seconds=600, checkpoint_save_seconds=100, evaluation_seconds=40, usd_per_hour=10.0,
                      nodes=2, gpu_share=0.5)
    result = attempt_ledger(attempt)
    assert result.seconds == {"productive": 4800, "data_wait": 1200, "startup": 600, "restore": 120,
                              "checkpoint_save": 200, "evaluation": 80, "lost": 0, "idle": 200}
    assert result.paid_seconds == pytest.approx(2 * 3600)
    assert result.paid_usd == pytest.approx(2 * 10.0 * 0.5)  # an hour of two nodes, half their GPUs
    assert result.goodput == pytest.approx(4800 / 7200)


def test_a_reclaim_loses_the_steps_since_the_checkpoint_from_productive_and_data_wait_alike():
    interrupted = Attempt.from_clock({"startup": 100, "step": 1000, "data_wait": 200, "since_checkpoint": 250},
                                     paid_seconds=1150, before_job_seconds=50, interrupted=True, usd_per_hour=3.6)
    result = attempt_ledger(interrupted)
    assert (result.seconds["lost"], result.seconds["productive"], result.seconds["data_wait"]) == (250, 600, 150)
    assert result.seconds["startup"] == 150 and result.seconds["idle"] == 0
    assert sum(result.seconds.values()) == pytest.approx(1150)
    finished = Attempt.from_clock({"step": 1000, "since_checkpoint": 250}, paid_seconds=1000, interrupted=False,
                                  usd_per_hour=3.6)
    assert attempt_ledger(finished).seconds["lost"] == 0


def test_a_run_or_a_month_is_the_sum_of_its_attempts():
    attempts = [Attempt(paid_seconds=100, step_seconds=80, usd_per_hour=36.0),
                Attempt(paid_seconds=50, startup_seconds=50, usd_per_hour=72.0)]
    total = ledger(attempts)
    assert total.attempts == 2 and total.paid_seconds == 150
    assert total.paid_usd == pytest.approx(1.0 + 1.0)
    assert total.to_dict()["buckets"]["idle"] == {"hours": round(20 / 3600, 4), "usd": 0.2, "share": round(20 / 150, 4)}
    assert set(total.to_dict()["buckets"]) == set(BUCKETS)


@pytest.mark.parametrize("kwargs, message", [
    ({"paid_seconds": 100, "step_seconds": 200}, "paid_seconds=100: less than the job's own phases (200 s)"),
    ({"paid_seconds": 100, "step_seconds": 10, "data_wait_seconds": 20}, "each at most step_seconds=10"),
    ({"paid_seconds": -1}, "paid_seconds=-1: a finite number of 0 or more"),
    ({"paid_seconds": 1, "nodes": 0}, "nodes=0: a whole number of 1 or more"),
    ({"paid_seconds": 1, "gpu_share": 0}, "gpu_share=0: more than 0 and at most 1"),
])
def test_an_attempt_whose_times_cannot_be_refuses_with_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Attempt(**kwargs)


def test_a_second_of_clock_difference_is_tolerated_and_never_makes_idle_negative():
    result = attempt_ledger(Attempt(paid_seconds=100, step_seconds=100.6))
    assert result.seconds["idle"] == 0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_phase_clock_times_startup_restore_steps_data_wait_and_saves():
    clock = FakeClock()
    phases = PhaseClock(now=clock)
    clock.now = 20  # imports, building the model
    with phases.phase("restore"):
        clock.now += 5

    def loader():
        for batch in range(3):
            clock.now += 2  # blocked on the input pipeline
            yield batch

    for index, _ in enumerate(phases.batches(loader())):
        with phases.step():
            clock.now += 10
        if index == 1:
            with phases.phase("checkpoint_save"):
                clock.now += 4
            phases.checkpoint_saved()
    assert phases.summary() == {"startup": 20, "restore": 5, "step": 36, "data_wait": 6, "checkpoint_save": 4,
                                "evaluation": 0, "since_checkpoint": 12}
    attempt = Attempt.from_clock(phases.summary(), paid_seconds=clock.now + 30, before_job_seconds=30,
                                 interrupted=True, usd_per_hour=1.0)
    assert attempt_ledger(attempt).paid_seconds == pytest.approx(clock.now + 30)
    with pytest.raises(ValueError, match="phase 'steps': one of restore, checkpoint_save, evaluation"):
        with phases.phase("steps"):
            pass


def test_loader_settings_follow_the_instance_and_the_dataset():
    p4d = loader_settings_for("p4d.24xlarge", dataset_gb=200)  # 96 vCPUs, 8 GPUs, 1152 GiB
    assert (p4d.num_workers, p4d.prefetch_factor, p4d.pin_memory, p4d.ebs_preload) == (8, 2, True, True)
    small = loader_settings(vcpus=4, gpus=1, memory_gib=16, dataset_gb=10, decodes_images_on_cpu=True)
    assert (small.num_workers, small.pin_memory, small.ebs_preload) == (2, False, False)
    assert any("DALI" in note for note in small.notes) and any("pin_memory off" in note for note in small.notes)
    assert small.dataloader_kwargs() == {"num_workers": 2, "prefetch_factor": 2, "pin_memory": False,
                                         "persistent_workers": True}
    with pytest.raises(ValueError, match="instance_type='m5.large': not a GPU type of the catalog"):
        loader_settings_for("m5.large")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_goodput", ROOT / "bench" / "goodput.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_bench_replays_the_story_near_its_own_20_percent_and_the_defaults_above_the_target(capsys):
    bench = load_bench()
    assert bench.main(["--trials", "20", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines()
            if line.startswith("| the ")}
    assert 0.15 <= float(rows["the story's month (2 months)"][3]) <= 0.25
    assert float(rows["the platform's defaults (2 months)"][3]) >= bench.GOODPUT_TARGET
    assert out.startswith("Assumptions: p4d.24xlarge") and "target: the platform's defaults >= 0.9" in out


def test_the_story_month_costs_the_story_bill():
    bench = load_bench()
    import random

    story = bench.story()
    result = bench.simulate(story, random.Random(1), 1)
    assert result.paid_usd == pytest.approx(2 * 2400, rel=0.01)  # two months of the story's 2,400 USD bill
