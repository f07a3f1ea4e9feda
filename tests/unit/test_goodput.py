"""The goodput ledger (runtime.goodput): buckets that add up to the paid time in GPU-seconds, the job's phase clock,
the loader settings it advises, Spot as paid from a price history, and the bench that replays the story's month
through the same code."""

import importlib.util
import sys
from datetime import datetime
from pathlib import Path

import pytest

from ml_platform_job.goodput import (BUCKETS, Attempt, PhaseClock, attempt_ledger, ledger,
                                     loader_settings, loader_settings_for)
from ml_platform_job.prices import hourly_usd, load_prices, paid_rate, spot_usd

ROOT = Path(__file__).resolve().parents[2]
PRICES = load_prices("us-east-1")


def test_the_buckets_add_up_to_the_paid_time_in_gpu_seconds_and_its_cost_by_nodes_and_gpu_share():
    # Paid 3600 s a node: 100 s before the job (boot, pull), the job 3450 s (3400 s of phases, 50 s untimed: other),
    # 50 s after it (idle). Two nodes of four GPUs used each: 8 GPU-seconds a second in the job; before and after it
    # the whole instances are paid with no job on them: their eight GPUs each (16 a second) at their whole rate.
    attempt = Attempt(paid_seconds=3600, before_job_seconds=100, startup_seconds=200, restore_seconds=60,
                      step_seconds=3000, data_wait_seconds=600, checkpoint_save_seconds=100, evaluation_seconds=20,
                      tracking_seconds=20, job_seconds=3450, usd_per_hour=10.0, nodes=2, gpu_share=0.5, gpus=4)
    result = attempt_ledger(attempt)
    assert result.seconds == {"productive": 8 * 2400, "data_wait": 8 * 600, "startup": 8 * 200 + 16 * 100,
                              "restore": 8 * 60, "checkpoint_save": 8 * 100, "evaluation": 8 * 20, "tracking": 8 * 20,
                              "lost": 0, "other": 8 * 50, "idle": 16 * 50}
    assert result.paid_seconds == pytest.approx(8 * 3450 + 16 * 150)
    # The job's 3450 s of two nodes at half their GPUs, and the 150 s before and after it at their whole rate.
    assert result.paid_usd == pytest.approx(3450 / 3600 * 2 * 10.0 * 0.5 + 150 / 3600 * 2 * 10.0)
    assert result.goodput == pytest.approx(8 * 2400 / (8 * 3450 + 16 * 150))


def test_time_inside_the_job_that_no_phase_timed_is_other_never_idle():
    # The job ran 100 s and timed 50 of them: 50 s other, 0 idle; 30 s of scale-in after it are idle.
    inside = Attempt.from_clock({"startup": 10.0, "step": 40.0}, paid_seconds=100, job_seconds=100,
                                interrupted=False, usd_per_hour=1.0)
    assert attempt_ledger(inside).seconds["other"] == 50 and attempt_ledger(inside).seconds["idle"] == 0
    after = Attempt.from_clock({"startup": 10.0, "step": 40.0}, paid_seconds=130, job_seconds=100,
                               interrupted=False, usd_per_hour=1.0)
    assert (attempt_ledger(after).seconds["other"], attempt_ledger(after).seconds["idle"]) == (50, 30)
    # The record's own writes are the tracking bucket, whether or not PhaseClock's PHASES names it yet.
    tracked = Attempt.from_clock({"step": 40.0, "tracking": 5.0}, paid_seconds=50, job_seconds=50,
                                 interrupted=False, usd_per_hour=1.0)
    assert attempt_ledger(tracked).seconds["tracking"] == 5 and attempt_ledger(tracked).seconds["other"] == 5
    # Without job_seconds (a simulated attempt) the job is its phases and the rest of the paid time is idle.
    simulated = Attempt(paid_seconds=100, step_seconds=80)
    assert (attempt_ledger(simulated).seconds["other"], attempt_ledger(simulated).seconds["idle"]) == (0, 20)


def test_a_reclaim_loses_the_steps_since_the_checkpoint_from_productive_and_data_wait_alike():
    interrupted = Attempt.from_clock({"startup": 100, "step": 1000, "data_wait": 200, "since_checkpoint": 250},
                                     paid_seconds=1150, before_job_seconds=50, job_seconds=1100, interrupted=True,
                                     usd_per_hour=3.6)
    result = attempt_ledger(interrupted)
    assert (result.seconds["lost"], result.seconds["productive"], result.seconds["data_wait"]) == (250, 600, 150)
    assert result.seconds["startup"] == 150 and result.seconds["idle"] == 0 and result.seconds["other"] == 0
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
    hours = round(20 / 3600, 4)
    assert total.to_dict()["buckets"]["idle"] == {"gpu_hours": hours, "usd": 0.2,
                                                  "share": round(20 / 150, 4)}
    assert total.to_dict()["gpu_hours"] == round(150 / 3600, 4) and "paid_hours" not in total.to_dict()  # gone in 0.13
    assert set(total.to_dict()["buckets"]) == set(BUCKETS)


def test_gpu_seconds_weigh_an_8_gpu_job_eight_times_a_1_gpu_job():
    """An hour of a 1-GPU job on a p4d.24xlarge (its eighth) and an hour of an 8-GPU job: shares 1:8 of the GPU-hours;
    dollars by GPU share (an eighth of the instance's rate, and all of it)."""
    rate = PRICES["on_demand_hourly"]["p4d.24xlarge"]
    one = Attempt(paid_seconds=3600, step_seconds=3600, usd_per_hour=rate, gpu_share=1 / 8, gpus=1)
    eight = Attempt(paid_seconds=3600, step_seconds=3600, usd_per_hour=rate, gpu_share=1.0, gpus=8)
    both = ledger([one, eight])
    assert both.paid_seconds == 9 * 3600 and both.gpu_hours == 9
    assert attempt_ledger(one).paid_seconds / both.paid_seconds == pytest.approx(1 / 9)
    assert attempt_ledger(eight).paid_seconds / both.paid_seconds == pytest.approx(8 / 9)
    assert (attempt_ledger(one).paid_usd, attempt_ledger(eight).paid_usd) == pytest.approx((rate / 8, rate))
    # The 1-GPU job idle for its hour: goodput 8/9 of the GPU-hours, not the half that instance-hours would say.
    idle_one = Attempt(paid_seconds=3600, job_seconds=3600, usd_per_hour=rate, gpu_share=1 / 8, gpus=1)
    assert ledger([idle_one, eight]).goodput == pytest.approx(8 / 9)


@pytest.mark.parametrize("kwargs, message", [
    ({"paid_seconds": 100, "step_seconds": 200},
     "paid_seconds=100: less than the time before the job and the job's own (200 s)"),
    ({"paid_seconds": 100, "before_job_seconds": 50, "job_seconds": 80},
     "paid_seconds=100: less than the time before the job and the job's own (130 s)"),
    ({"paid_seconds": 100, "step_seconds": 60, "job_seconds": 50}, "job_seconds=50: less than the job's own phases"),
    ({"paid_seconds": 100, "step_seconds": 10, "data_wait_seconds": 20}, "each at most step_seconds=10"),
    ({"paid_seconds": -1}, "paid_seconds=-1: a finite number of 0 or more"),
    ({"paid_seconds": 1, "tracking_seconds": float("nan")}, "tracking_seconds=nan: a finite number of 0 or more"),
    ({"paid_seconds": 1, "nodes": 0}, "nodes=0: a whole number of 1 or more"),
    ({"paid_seconds": 1, "gpu_share": 0}, "gpu_share=0: more than 0 and at most 1"),
    ({"paid_seconds": 1, "gpus": 0}, "gpus=0: more than 0"),
])
def test_an_attempt_whose_times_cannot_be_refuses_with_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Attempt(**kwargs)


def test_unknown_or_bad_phases_are_refused_with_their_name():
    with pytest.raises(ValueError, match=r"phases: unknown \['stepping'\]"):
        Attempt.from_clock({"stepping": 1.0}, paid_seconds=10, interrupted=False, usd_per_hour=1.0)
    with pytest.raises(ValueError, match=r"phases.step='a': a finite number of 0 or more"):
        Attempt.from_clock({"step": "a"}, paid_seconds=10, interrupted=False, usd_per_hour=1.0)


def test_a_second_of_clock_difference_is_tolerated_and_never_makes_idle_negative():
    result = attempt_ledger(Attempt(paid_seconds=100, step_seconds=100.6))
    assert result.seconds["idle"] == 0
    inside = attempt_ledger(Attempt(paid_seconds=100, step_seconds=100.6, job_seconds=100))
    assert inside.seconds["idle"] == 0 and inside.seconds["other"] == 0


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


def bench_table(out: str) -> dict:
    """The bench's first table (its header starts "| month |") as {row's month: {column: cell}}."""
    block = out[out.index("| month |"):].split("\n\n")[0].splitlines()
    head = [cell.strip() for cell in block[0].strip("|").split("|")]
    return {row[0]: dict(zip(head, row)) for row in
            ([cell.strip() for cell in line.strip("|").split("|")] for line in block[2:])}


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%"))


def test_the_bench_replays_the_story_near_its_own_20_percent_and_the_defaults_above_the_target(capsys):
    bench = load_bench()
    assert bench.main(["--trials", "20", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    rows = bench_table(out)
    told, defaults = rows["the story's month (2 months)"], rows["the platform's defaults (2 months)"]
    # By the bill the story lands near its own 20%; a measured ledger of it cannot see the hours its instances were
    # left running with no job on them (no record names them), so it would show more than twice as much.
    assert 0.15 <= number(told["useful / paid, bill"]) <= 0.25
    assert number(told["useful / paid, ledger"]) >= 2 * number(told["useful / paid, bill"])
    # The defaults: the target judged by the bill; the ledger's figure (what ./platform goodput shows) a little above.
    assert number(defaults["useful / paid, bill"]) >= bench.GOODPUT_TARGET
    assert number(defaults["useful / paid, bill"]) <= number(defaults["useful / paid, ledger"]) \
        <= number(defaults["useful / paid, bill"]) + 0.01
    for row in (told, defaults):  # the bill's paid GPU-hours: the ledger's and the unseen (to the table's rounding)
        assert number(row["paid GPU-h"]) == pytest.approx(
            number(row["ledger's paid GPU-h"]) + number(row["unseen by the ledger, GPU-h"]), abs=1)
        # The buckets: shares of the ledger's paid time, each rounded.
        assert sum(number(row[b]) for b in BUCKETS) == pytest.approx(100, abs=0.5)
    assert out.startswith("Assumptions: p4d.24xlarge")
    assert "target: the platform's defaults >= 0.9 useful / paid by the bill" in out
    assert "| month: unseen by the ledger, GPU-h | before the kernel's boot |" in out


def test_the_story_month_costs_the_story_bill():
    bench = load_bench()
    import random

    story = bench.story()
    result = bench.simulate(story, random.Random(1), 1)
    assert result.paid_usd == pytest.approx(2 * 2400, rel=0.01)  # two months of the story's 2,400 USD bill
    # The hours the bill paid beyond the jobs are in no job's record: all of them unseen by a measured ledger, which
    # has no idle at all (the story's instances had no scale-in: they were left running).
    left_running = story.idle_between_jobs_hours * 3600 * story.jobs_per_month * bench.MONTHS * bench.GPUS
    assert result.unseen_seconds["no_job_record"] == pytest.approx(left_running)
    assert result.measured.seconds["idle"] == 0


class Reclaims(__import__("random").Random):
    """The bench's reclaims in the order given (hours of paid time), then none."""

    def __init__(self, hours):
        super().__init__(0)
        self.hours = list(hours)

    def expovariate(self, lambd):
        return self.hours.pop(0) if self.hours else float("inf")


def test_the_unseen_and_the_ledgers_paid_time_are_the_bill_and_the_ledger_reads_the_attempts_as_recorded():
    """One job on the defaults: reclaimed 100 s into its first start (before its job's process: no record, all
    unseen), again 2 h into its second, then finished. Each recorded attempt is what its run record gives a measured
    ledger: its buckets are its fields x 8 GPUs; the paid time outside it is unseen, by cause; together the bill."""
    bench = load_bench()
    from ml_platform_job.goodput import run_ledger

    defaults = bench.platform(bench.story().useful_hours_per_job, 4)
    attempts = bench.job_attempts(defaults, Reclaims([100 / 3600, 2.0]))
    assert [a.recorded is None for a in attempts] == [True, False, False]
    assert attempts[0].unseen == {"before_boot": 0, "after_last_datapoint": 0, "no_job_record": 100}
    before_boot, tail = bench.UNSEEN_BEFORE_BOOT_SECONDS, bench.AGENT_INTERVAL_SECONDS
    reclaimed, finished = attempts[1].recorded, attempts[2].recorded
    assert reclaimed.paid_seconds == pytest.approx(2 * 3600 - before_boot)
    assert reclaimed.before_job_seconds == finished.before_job_seconds == defaults.boot_seconds - before_boot
    assert reclaimed.job_seconds == pytest.approx(2 * 3600 - defaults.boot_seconds) and reclaimed.lost_seconds > 0
    assert reclaimed.restore_seconds == 0 and finished.restore_seconds == defaults.restore_seconds
    assert attempts[1].unseen == {"before_boot": before_boot, "after_last_datapoint": 0, "no_job_record": 0}
    assert attempts[2].unseen == {"before_boot": before_boot, "after_last_datapoint": tail, "no_job_record": 0}
    assert finished.idle_seconds == pytest.approx(defaults.idle_after_job_hours * 3600 - tail)
    for attempt in (reclaimed, finished):
        assert attempt.gpus == bench.GPUS and attempt.other_seconds == 0
        buckets = attempt_ledger(attempt).seconds
        g = bench.GPUS
        assert buckets["startup"] == pytest.approx(g * (attempt.before_job_seconds + attempt.startup_seconds))
        assert buckets["idle"] == pytest.approx(
            g * (attempt.paid_seconds - attempt.before_job_seconds - attempt.job_seconds))
        assert buckets["lost"] == pytest.approx(g * attempt.lost_seconds)
        assert buckets["productive"] + buckets["data_wait"] + buckets["lost"] == pytest.approx(g * attempt.step_seconds)
        assert buckets["checkpoint_save"] == pytest.approx(g * attempt.checkpoint_save_seconds)
    month = bench.month_of(attempts)
    bill = sum(a.paid_seconds for a in attempts)
    assert month.measured.paid_seconds + month.unseen_paid_seconds == pytest.approx(month.paid_seconds)
    assert month.paid_seconds == pytest.approx(bench.GPUS * bill)
    assert month.unseen_paid_seconds == pytest.approx(bench.GPUS * (100 + 2 * before_boot + tail))
    assert month.paid_usd == pytest.approx(bill * bench.spot_hourly() / 3600)
    assert month.measured.seconds["productive"] / month.paid_seconds == pytest.approx(month.goodput)
    # The same attempts as run records (the kernel's boot, the job's start and end, its phases, the scale-in from
    # the GPU metric, 8 GPUs visible, the rate recorded) through the ledger ./platform goodput uses: the same buckets.
    records, t = [], 1_800_000_000.0
    for number, (attempt, outcome) in enumerate(((reclaimed, "lost"), (finished, "finished")), start=1):
        started = t + attempt.before_job_seconds
        ended = started + attempt.job_seconds
        records.append({
            "number": number, "outcome": outcome, "started_at": iso(started), "ended_at": iso(ended),
            "last_seen_at": iso(ended), "host": {"booted_at": iso(t), "first_on_instance": True},
            "phases": {"startup": attempt.startup_seconds, "restore": attempt.restore_seconds,
                       "step": attempt.step_seconds, "data_wait": attempt.data_wait_seconds,
                       "checkpoint_save": attempt.checkpoint_save_seconds,
                       "since_checkpoint": attempt.lost_seconds},
            "scale_in_seconds": attempt.idle_seconds, "instance_type": bench.INSTANCE, "lifecycle": "spot",
            "rate": {"usd_per_hour": attempt.usd_per_hour, "source": "the bench"},
            "environment": {"gpu": {"count": bench.GPUS}}})
        t = ended + attempt.idle_seconds + 3600
    measured, _ = run_ledger(records, PRICES)
    for b in BUCKETS:
        assert measured.seconds[b] == pytest.approx(month.measured.seconds[b], abs=0.01), b
        assert measured.usd[b] == pytest.approx(month.measured.usd[b], abs=1e-4), b


def iso(epoch: float) -> str:
    from datetime import timezone

    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


# --- Spot as paid: a hand-written price history ---------------------------------------------------------------------

def at(hhmm: str) -> float:
    return datetime.fromisoformat(f"2026-11-30T{hhmm}:00+00:00").timestamp()


# One type's history in one Availability Zone: 0.90 USD/h from 09:58, 1.20 from 10:45, 0.80 from 12:10. In any order,
# as pairs or as DescribeSpotPriceHistory's items (boto3 gives Timestamp as a datetime, SpotPrice as a string).
HISTORY = [{"Timestamp": "2026-11-30T12:10:00Z", "SpotPrice": "0.800000"}, (at("09:58"), 0.90),
           {"Timestamp": datetime.fromisoformat("2026-11-30T10:45:00+00:00"), "SpotPrice": "1.200000"}]


def test_spot_usd_prices_each_moment_at_the_price_in_effect_then():
    # 10:00-11:30: 0.90 until 10:45 (0.75 h = 0.675 USD), then 1.20 (0.75 h = 0.900 USD): 1.575 USD.
    assert spot_usd(HISTORY, at("10:00"), at("11:30")) == pytest.approx(0.675 + 0.9)
    # 12:00-13:00: 1.20 until 12:10 (1/6 h = 0.2 USD), then 0.80 (5/6 h = 0.6667 USD).
    assert spot_usd(HISTORY, at("12:00"), at("13:00")) == pytest.approx(0.2 + 0.8 * 5 / 6)
    assert spot_usd(HISTORY, at("10:45"), at("11:45")) == pytest.approx(1.2)  # an entry at the start is in effect
    usd, source = paid_rate(PRICES, "g5.xlarge", "spot", history=HISTORY, start=at("10:00"), end=at("11:30"))
    assert usd == pytest.approx(1.575 / 1.5) and source == "the Spot price history (EC2 DescribeSpotPriceHistory)"
    assert paid_rate(PRICES, "g5.xlarge", "spot", history=HISTORY, start=at("10:50"), end=at("10:50"))[0] == 1.2
    listed, why = paid_rate(PRICES, "g5.xlarge", "spot")
    assert listed == hourly_usd(PRICES, "g5.xlarge", "spot") and "not the price paid" in why
    assert paid_rate(PRICES, "g5.xlarge", "on-demand", history=HISTORY, start=0, end=1)[0] == \
        hourly_usd(PRICES, "g5.xlarge", "on-demand")  # a Spot history never prices On-Demand


def test_spot_usd_refuses_a_span_whose_price_it_cannot_know():
    with pytest.raises(ValueError, match=r"no Spot price at or before start=\S+ \(2026-11-30T09:00:00\+00:00\) in the "
                                         r"history \(its first entry is at 2026-11-30T09:58:00\+00:00\)"):
        spot_usd(HISTORY, at("09:00"), at("10:00"))
    with pytest.raises(ValueError, match="it is empty"):
        spot_usd([], at("10:00"), at("11:00"))
    with pytest.raises(ValueError, match=r"two prices at 2026-11-30T10:45:00\+00:00 \(1.2 and 1.5 USD/h\): give the "
                                         "history of one Availability Zone"):
        spot_usd(HISTORY + [(at("10:45"), 1.5)], at("10:00"), at("11:00"))
    with pytest.raises(ValueError, match=r"end=\S+ \(2026-11-30T10:00:00\+00:00\): before start"):
        spot_usd(HISTORY, at("11:00"), at("10:00"))
    with pytest.raises(ValueError, match=r"history\[0\] price='free': a finite number of 0 or more"):
        spot_usd([(at("10:00"), "free")], at("10:00"), at("11:00"))
    with pytest.raises(ValueError, match="give start and end"):
        paid_rate(PRICES, "g5.xlarge", "spot", history=HISTORY)
