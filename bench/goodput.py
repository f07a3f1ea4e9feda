"""The story's month, replayed: two simulated months of the same training work through the goodput ledger
(ml_platform_job.goodput, the code that also computes real runs), once as the story ran it and once on the platform's
defaults. A benchmark, not part of the suite.

Usage: ./platform bench goodput [--seed N] [--trials N]

Prints the assumptions, then two Markdown tables (docs/BENCHMARKS.md holds the latest): useful GPU-hours over paid
GPU-hours twice, as a measured ledger (``./platform goodput``, ``runs show``) would show them and as the bill does,
dollars per useful GPU-hour, where the ledger's time went, and the paid time no ledger sees, by cause.

What a measured ledger sees, and what this bench therefore records in each simulated attempt (``Attempt``'s fields
as ``passport_attempts`` fills them from a run record):

- ``before_job_seconds``: the instance's boot from the kernel's (``/proc/stat`` btime: ``ml_platform_job.host``) and
  the image pull (the ECS task metadata) to the job's process;
- ``job_seconds`` and the job's phases (``PhaseClock``): startup (the dataset's copy or mount), restore, steps, data
  wait, saves; the steps since the last checkpoint of a reclaimed attempt are lost;
- the idle after the last job on an instance, its scale-in: to the end of the last period with a datapoint of the
  queue's GPU metric (``ops.instance_records``), so to one collection interval;
- ``gpus=GPUS``: the ledger's seconds are GPU-seconds already.

What it cannot see, counted apart as "unseen by the ledger" and added back for the bill's figure:

- before the kernel's boot: EC2 bills from the instance's ``running`` state, a little before its kernel boots
  (UNSEEN_BEFORE_BOOT_SECONDS, assumed);
- after the GPU metric's last datapoint: up to one collection interval (AGENT_INTERVAL_SECONDS) of the scale-in,
  taken as all of it (the bound);
- paid time no job record names: an instance left running with no job on it (the story's idle hours: no record
  names the instance, and an end more than six hours after a job's is not looked for:
  ``ops.instance_records.LOOK_AFTER_SECONDS``), and an attempt reclaimed before its job's process started (the job
  wrote no record).

Exit status: 0 when the platform's defaults reach GOODPUT_TARGET useful / paid by the bill (every paid GPU-second,
seen or not: the stricter of the two figures, so a measured ledger of the same month shows at least as much), else 1.
"""

from __future__ import annotations

import functools
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "constructs"))
from ops.cli import Parser, add_seed, bounded  # noqa: E402
from ops.instance_records import LOOK_AFTER_SECONDS  # noqa: E402
from ml_platform_constructs.advice.advisor import INTERRUPTION_BANDS, interruption_rate  # noqa: E402
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices  # noqa: E402
from ml_platform_job.goodput import BUCKETS, Attempt, Ledger, attempt_ledger  # noqa: E402
from ml_platform_job.prices import hourly_usd  # noqa: E402

GOODPUT_TARGET = 0.9  # the platform's defaults (issue 31), judged by the bill
INSTANCE = "p4d.24xlarge"  # both months: the difference is the platform's mechanisms, not the GPU choice
GPUS = 8
REGION = "us-east-1"
MONTHS = 2
# EC2 bills from the instance's running state; the kernel boots a little later (ml_platform_job.host: "a few
# seconds"; an 8-GPU host's firmware takes longer): assumed, EC2 documents no figure.
UNSEEN_BEFORE_BOOT_SECONDS = 30.0
# The GPU agent's collection interval (instance_bootstrap's agent config: metrics_collection_interval 60), the period
# ops.instance_records reads a month of the last 15 days at: an instance's end is known to this much.
AGENT_INTERVAL_SECONDS = 60.0
UNSEEN = ("before_boot", "after_last_datapoint", "no_job_record")
UNSEEN_TITLES = {"before_boot": "before the kernel's boot", "after_last_datapoint": "after the GPU metric's last "
                 "datapoint", "no_job_record": "no job record names it"}


@dataclass(frozen=True)
class Scenario:
    name: str
    spot: bool
    jobs_per_month: int
    useful_hours_per_job: float  # the training work: step time not waiting on data
    data_wait_share: float  # of step time
    boot_seconds: float  # paid: EC2's running state to the container's start (the kernel's boot, the image pull)
    data_seconds: float  # getting the dataset onto the instance at each start (the job's startup phase)
    restore_seconds: float  # loading a checkpoint at a restart
    checkpoint_every_hours: float
    checkpoint_blocking_seconds: float  # per save, the steps wait
    idle_after_job_hours: float  # the instance's scale-in after the job (a measured ledger's idle, but its end)
    idle_between_jobs_hours: float  # instance left running with no job on it (the story's bill says how much)
    source: str


def story() -> Scenario:
    """The story (../shared/seed): p4d.24xlarge On-Demand, a 2,400 USD month; 18-minute epochs, 37 of them; the
    GPUs waited on single-threaded loading 52% of the time; data copied from S3 on every start (the 100 Gbps link
    under 5% used: 5 Gbps); a p4d took 210 s from launch to usable (counted as paid: the part before EC2's running
    state is unknown); full checkpoints, assumed 60 s a save each epoch. Four jobs a month (assumed); the instance
    hours the bill paid beyond the jobs were idle, left running with no job on the instance (unseen by a ledger)."""
    epochs, epoch_hours, wait = 37, 18 / 60, 0.52
    step_hours = epochs * epoch_hours
    dataset_gb = 200  # assumed: an ImageNet-sized dataset with its preprocessed copies
    jobs = 4
    boot, data = 210, dataset_gb * 8 / 5
    busy = jobs * (step_hours + (boot + data) / 3600 + epochs * 60 / 3600)
    paid_hours = 2400 / on_demand_hourly()
    return Scenario("the story's month", False, jobs, step_hours * (1 - wait), wait, boot, data, 0.0, epoch_hours,
                    60, 0.0, max(0.0, paid_hours - busy) / jobs,
                    "story: 2,400 USD, 52% data wait, 18 min x 37 epochs, 210 s launch to usable, S3 at 5 Gbps; "
                    "assumed: 4 jobs, a 200 GB dataset, 60 s a save; the bill's hours beyond the jobs left running")


def platform(useful_hours: float, jobs: int) -> Scenario:
    """The platform's defaults on the same work: Spot with reclaims at the type's Spot Advisor band and resume from
    the last checkpoint; the same 210 s boot and image pull as the story's start (assumed); the dataset from an EBS
    snapshot (DatasetSnapshotBuilder, lazily loaded: assumed 60 s to first batch); loader_settings() (data wait
    assumed 5% of step time: the job's own ledger measures it); a restore assumed 30 s; a checkpoint assumed every 20
    minutes (the job's own default saves every 30, ml_platform_job.job.DEFAULT_SAVE_EVERY_MINUTES, and at each
    epoch's end), asynchronous (assumed 5 s blocking); the instance leaves when the queue is empty (Batch scale-in,
    assumed 5 minutes: AWS documents no figure; a measured ledger sees it to its last GPU datapoint)."""
    return Scenario("the platform's defaults", True, jobs, useful_hours, 0.05, 210, 60, 30, 1 / 3, 5, 5 / 60, 0.0,
                    "assumed: 210 s boot and pull (the story's start), 60 s to first batch, 5% data wait, 30 s "
                    "restore, a save every 20 min (5 s blocking), 5 min scale-in; reclaims at the Spot Advisor band")


@functools.cache
def prices() -> dict:
    """The Region's price table, read once (every simulated job prices its attempts with it)."""
    return load_prices(REGION)


def on_demand_hourly() -> float:
    return prices()["on_demand_hourly"][INSTANCE]


def spot_hourly() -> float:
    """The one Spot price every command uses (``ml_platform_job.prices.hourly_usd``)."""
    return hourly_usd(prices(), INSTANCE, "spot")


def spot_band() -> int:
    """The type's interruption band (the Spot Instance Advisor's data: only the band, never the price)."""
    return int(prices()["spot_by_type"][INSTANCE]["band"])


@dataclass(frozen=True)
class Paid:
    """One simulated attempt's paid time: ``recorded``, the attempt as its run record gives it to a measured ledger
    (None: no record, all of it unseen), and ``unseen``, the seconds of one node's paid time outside it, by cause
    (UNSEEN), at ``usd_per_hour``."""

    recorded: Optional[Attempt]
    unseen: Mapping[str, float]
    usd_per_hour: float

    @property
    def paid_seconds(self) -> float:
        """One node's paid seconds by the bill: the recorded attempt's and the unseen."""
        return (self.recorded.paid_seconds if self.recorded else 0.0) + sum(self.unseen.values())


def _unseen(**seconds: float) -> dict[str, float]:
    return {cause: float(seconds.get(cause, 0.0)) for cause in UNSEEN}


def job_attempts(scenario: Scenario, rng: random.Random) -> list[Paid]:
    """One job's attempts. Reclaims arrive as a Poisson process in paid time; a reclaimed attempt paid until the
    reclaim (its instance ends with it: no scale-in), its steps since the last completed checkpoint are lost, and the
    next attempt starts over (boot, data, restore) from that checkpoint. An attempt runs: boot and image pull (the
    first UNSEEN_BEFORE_BOOT_SECONDS of it before the kernel's boot, unseen), the job's startup (the dataset) and
    restore, then cycles of steps and a blocking save; after the last attempt the scale-in (its last
    AGENT_INTERVAL_SECONDS unseen) and the hours left running (unseen)."""
    band = spot_band()
    rate = spot_hourly() if scenario.spot else on_demand_hourly()
    per_hour = interruption_rate(band) if scenario.spot else 0.0
    interval = scenario.checkpoint_every_hours * 3600
    block = scenario.checkpoint_blocking_seconds
    remaining = scenario.useful_hours_per_job / (1 - scenario.data_wait_share) * 3600  # step seconds still to do
    before_boot = min(UNSEEN_BEFORE_BOOT_SECONDS, scenario.boot_seconds)
    before_job = scenario.boot_seconds - before_boot  # the kernel's boot to the container's start: seen
    attempts: list[Paid] = []
    first = True
    while True:
        startup = scenario.data_seconds
        restore = 0.0 if first else scenario.restore_seconds
        saves = int(remaining // interval)
        job = startup + restore + remaining + saves * block
        span = scenario.boot_seconds + job
        reclaim = rng.expovariate(per_hour) * 3600 if per_hour else float("inf")
        if reclaim >= span:  # the job finishes in this attempt
            scale_in = scenario.idle_after_job_hours * 3600
            tail = min(AGENT_INTERVAL_SECONDS, scale_in)
            recorded = Attempt(paid_seconds=before_job + job + scale_in - tail, startup_seconds=startup,
                               restore_seconds=restore, step_seconds=remaining,
                               data_wait_seconds=remaining * scenario.data_wait_share,
                               checkpoint_save_seconds=saves * block, before_job_seconds=before_job, job_seconds=job,
                               usd_per_hour=rate, gpus=GPUS)
            attempts.append(Paid(recorded, _unseen(before_boot=before_boot, after_last_datapoint=tail,
                                                   no_job_record=scenario.idle_between_jobs_hours * 3600), rate))
            return attempts
        if reclaim <= scenario.boot_seconds:  # reclaimed before the job's process started: no record of it
            attempts.append(Paid(None, _unseen(no_job_record=reclaim), rate))
            continue  # no step ran: the next attempt starts as this one did
        ran_job = reclaim - scenario.boot_seconds
        ran = max(0.0, ran_job - startup - restore)
        cycles, rest = divmod(ran, interval + block)
        steps = cycles * interval + min(rest, interval)
        recorded = Attempt(paid_seconds=reclaim - before_boot, startup_seconds=min(startup, ran_job),
                           restore_seconds=min(restore, max(0.0, ran_job - startup)), step_seconds=steps,
                           data_wait_seconds=steps * scenario.data_wait_share,
                           checkpoint_save_seconds=cycles * block + max(0.0, rest - interval),
                           lost_seconds=min(rest, interval), before_job_seconds=before_job, job_seconds=ran_job,
                           usd_per_hour=rate, gpus=GPUS)
        attempts.append(Paid(recorded, _unseen(before_boot=before_boot), rate))
        remaining -= cycles * interval
        first = False


@dataclass(frozen=True)
class Month:
    """A simulated stretch's paid time: ``measured``, the ledger of the recorded attempts (what ``./platform goodput``
    would show: GPU-seconds and dollars per bucket), and the paid time it cannot see, in GPU-seconds and dollars per
    cause (UNSEEN). The bill is the two together."""

    measured: Ledger = field(default_factory=Ledger)
    unseen_seconds: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(UNSEEN, 0.0))
    unseen_usd: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(UNSEEN, 0.0))

    @property
    def unseen_paid_seconds(self) -> float:
        return sum(self.unseen_seconds.values())

    @property
    def paid_seconds(self) -> float:
        """Paid GPU-seconds by the bill: the measured ledger's and the unseen."""
        return self.measured.paid_seconds + self.unseen_paid_seconds

    @property
    def paid_usd(self) -> float:
        return self.measured.paid_usd + sum(self.unseen_usd.values())

    @property
    def goodput(self) -> Optional[float]:
        """Useful over paid GPU-seconds by the bill (the exit status judges this one)."""
        return self.measured.seconds["productive"] / self.paid_seconds if self.paid_seconds else None

    def __add__(self, other: "Month") -> "Month":
        return Month(self.measured + other.measured,
                     {c: self.unseen_seconds[c] + other.unseen_seconds[c] for c in UNSEEN},
                     {c: self.unseen_usd[c] + other.unseen_usd[c] for c in UNSEEN})

    def scaled(self, factor: float) -> "Month":
        m = self.measured
        return Month(Ledger({b: v * factor for b, v in m.seconds.items()}, {b: v * factor for b, v in m.usd.items()},
                            round(m.attempts * factor)),
                     {c: v * factor for c, v in self.unseen_seconds.items()},
                     {c: v * factor for c, v in self.unseen_usd.items()})


def month_of(paid: list[Paid]) -> Month:
    """The attempts' measured ledger (the recorded ones, through ``attempt_ledger``) and their unseen time, weighted
    as the ledger weighs (x GPUS GPU-seconds, the attempt's rate per node)."""
    total = Month()
    for attempt in paid:
        measured = attempt_ledger(attempt.recorded) if attempt.recorded else Ledger()
        total = total + Month(measured, {c: s * GPUS for c, s in attempt.unseen.items()},
                              {c: s * attempt.usd_per_hour / 3600 for c, s in attempt.unseen.items()})
    return total


def simulate(scenario: Scenario, rng: random.Random, trials: int) -> Month:
    """The mean of ``trials`` simulated stretches of MONTHS months."""
    total = Month()
    for _ in range(trials):
        jobs = range(scenario.jobs_per_month * MONTHS)
        total = total + month_of([a for _ in jobs for a in job_attempts(scenario, rng)])
    return total.scaled(1 / trials)


def table(results: list[tuple[Scenario, Month]]) -> str:
    """The figures, and the measured ledger's buckets as shares of its own paid time (as ``./platform goodput``
    prints them)."""
    heads = ["month", "paid GPU-h", "unseen by the ledger, GPU-h", "ledger's paid GPU-h", "useful GPU-h",
             "useful / paid, ledger", "useful / paid, bill", "paid USD", "unseen USD", "USD per useful GPU-h"]
    lines = ["| " + " | ".join(heads + list(BUCKETS)) + " |", "|---" * (len(heads) + len(BUCKETS)) + "|"]
    for scenario, result in results:
        measured = result.measured
        useful_gpu_h = measured.seconds["productive"] / 3600
        lines.append(f"| {scenario.name} ({MONTHS} months) | {result.paid_seconds / 3600:,.0f} | "
                     f"{result.unseen_paid_seconds / 3600:,.0f} | {measured.gpu_hours:,.0f} | {useful_gpu_h:,.0f} | "
                     f"{measured.goodput:.3f} | {result.goodput:.3f} | {result.paid_usd:,.0f} | "
                     f"{sum(result.unseen_usd.values()):,.0f} | {result.paid_usd / useful_gpu_h:,.2f} | "
                     + " | ".join(f"{measured.share(b):.1%}" for b in BUCKETS) + " |")
    return "\n".join(lines)


def unseen_table(results: list[tuple[Scenario, Month]]) -> str:
    """The unseen paid time by cause, GPU-hours."""
    lines = ["| month: unseen by the ledger, GPU-h | " + " | ".join(UNSEEN_TITLES[c] for c in UNSEEN) + " | all |",
             "|---" * (len(UNSEEN) + 2) + "|"]
    for scenario, result in results:
        lines.append(f"| {scenario.name} ({MONTHS} months) | "
                     + " | ".join(f"{result.unseen_seconds[c] / 3600:,.1f}" for c in UNSEEN)
                     + f" | {result.unseen_paid_seconds / 3600:,.1f} |")
    return "\n".join(lines)


def parser() -> Parser:
    bench = Parser("./platform bench goodput", description=__doc__.split("\n\n")[0])
    add_seed(bench)
    bench.add_argument("--trials", type=bounded(1, 10_000, "simulated stretches of two months", example="--trials 200",
                                                integer=True), default=200, help="simulated stretches (default 200)")
    return bench


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    rng = random.Random(args.seed)
    told = story()
    defaults = platform(told.useful_hours_per_job, told.jobs_per_month)
    band = spot_band()
    print(f"Assumptions: {INSTANCE} ({GPUS} GPUs) in {REGION} for both, On-Demand {on_demand_hourly():.2f} USD/h "
          f"(the Region's price table); "
          f"Spot {spot_hourly():.2f} USD/h (the table's conservative family discount), Spot Advisor band "
          f"{INTERRUPTION_BANDS[band][0]} "
          f"({interruption_rate(band):.4f} reclaims per instance-hour, advice.advisor's reading of the band).")
    print(f"Seen by a measured ledger (./platform goodput): the boot from the kernel's (/proc/stat btime), the image "
          f"pull (ECS task metadata), the job's phases, the scale-in to the GPU metric's last datapoint "
          f"(ops.instance_records). Unseen, counted apart: {UNSEEN_BEFORE_BOOT_SECONDS:g} s of each start before the "
          f"kernel's boot (EC2 bills from the running state; assumed), the scale-in's last "
          f"{AGENT_INTERVAL_SECONDS:g} s (one collection interval of the GPU agent: instance_bootstrap; taken as the "
          f"bound), paid time no job record names (an instance left running with no job on it: no record names it, "
          f"and an end over {LOOK_AFTER_SECONDS / 3600:g} h after a job's is not looked for; an attempt reclaimed "
          f"before its job started).")
    for scenario in (told, defaults):
        unseen_boot = min(UNSEEN_BEFORE_BOOT_SECONDS, scenario.boot_seconds)
        print(f"- {scenario.name}: {scenario.jobs_per_month} jobs a month of {scenario.useful_hours_per_job:.2f} "
              f"useful hours; data wait {scenario.data_wait_share:.0%} of step time; boot and pull "
              f"{scenario.boot_seconds:g} s (unseen: its first {unseen_boot:g} s) + data {scenario.data_seconds:g} s; "
              f"restore {scenario.restore_seconds:g} s; checkpoint every "
              f"{scenario.checkpoint_every_hours * 60:g} min ({scenario.checkpoint_blocking_seconds:g} s blocking); "
              f"scale-in {scenario.idle_after_job_hours * 60:g} min after a job + "
              f"{scenario.idle_between_jobs_hours:.1f} h left running with no job (unseen). Source: {scenario.source}.")
    results = [(scenario, simulate(scenario, rng, args.trials)) for scenario in (told, defaults)]
    print()
    print(table(results))
    print()
    print(unseen_table(results))
    platform_result = results[1][1]
    met = platform_result.goodput >= GOODPUT_TARGET
    print(f"\nseed {args.seed}, {args.trials} trials; target: the platform's defaults >= {GOODPUT_TARGET} useful / "
          f"paid by the bill (seen or not): " + ("met" if met else "NOT met") + f" ({platform_result.goodput:.3f}; "
          f"as a measured ledger shows it: {platform_result.measured.goodput:.3f})")
    return 0 if met else 1


if __name__ == "__main__":
    from ops import terminal

    terminal.entry_point(main)
