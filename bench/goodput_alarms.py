"""A training queue's goodput alarms, simulated: jobs of known shape drive the job side's real clock (PhaseClock) on a
fake monotonic clock, and the embedded-metric lines it prints go through CloudWatch's alarm rules with the alarms' own
period, statistic, M of N, threshold and missing-data rule: false alarms per job-day on healthy jobs, the time to
ALARM on input-bound and checkpoint-bound ones. A benchmark, not part of the suite.

The rules are bench/cloudwatch_alarms.py's evaluator, which tests/unit/test_goodput_alarm_replay.py checks against
the tables of AWS's documentation; a line's Timestamp and value are what CloudWatch Logs extracts.

Usage: ./platform bench goodput-alarms [--seed N] [--trials N] [--bound-minutes M] [--min-step-share S]
       [--datapoints-to-alarm M] [--workers W]

Prints the assumptions, then two Markdown tables (docs/BENCHMARKS.md holds the latest):

- healthy jobs (legitimate work: every ALARM on them is a false alarm): ALARM transitions of each alarm per 24 hours
  of job time, with a 95% Poisson interval, against the budget (BUDGET_PER_JOB_DAY), and the highest line seen;
- input-bound and checkpoint-bound jobs (every one must alarm): the share that reached ALARM within the stated time
  (95% Wilson interval), and the median and 95th percentile of the time to ALARM.

The budget: at most one false alarm per queue per 30 days with CONCURRENT_JOBS jobs running at once. An alarm takes
the largest job's share of each period (Maximum), so a queue's false-alarm rate is about the sum of its jobs': per
job-day at most 1 / (30 x 4), both alarms together. A row meets it when its 95% upper bound is under it and misses it
when its lower bound is over it; between the two the trials cannot tell ("not shown": more --trials; zero alarms show
the budget from about 360 job-days). Rows marked "known limit" are shapes the alarm cannot tell from an input-bound
job at its window (one loader stall longer than about a quarter of the window reads as input-bound, as the stalled
hour must): measured and reported, outside the exit status.

--bound-minutes, --min-step-share and --datapoints-to-alarm run the same jobs (the same draws) with another window,
another MIN_STEP_SHARE or another M: what each knob buys against the budget, and what it costs in detection time.

The jobs are driven as a framework's hooks drive the clock (``PhaseClock.switch``: a step, the wait for the next
batch, a restore, an evaluation, a save); the plain loop's blocks (``batches``, ``step``, ``phase``) count into the
same counters (tests/unit/test_goodput_alarm_rates.py checks that both print the same lines). Exit status: 0 when no
healthy row, nor the healthy rows pooled, misses the budget and every bound row reaches its detection target; else 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "constructs", ROOT / "job"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
from bench.cloudwatch_alarms import ALARM, CloudWatchAlarm, transitions  # noqa: E402
from ml_platform_constructs.training.goodput_alarms import (  # noqa: E402
    ALARM_PERIOD_MINUTES, BOUND_MINUTES, CHECKPOINT_BOUND_PERCENT, INPUT_BOUND_PERCENT, datapoints_to_alarm,
    goodput_environment)
from ml_platform_job import phase_clock  # noqa: E402
from ops.cli import Parser, add_seed, bounded  # noqa: E402

CONCURRENT_JOBS = 4
BUDGET_PER_QUEUE_30_DAYS = 1.0
BUDGET_PER_JOB_DAY = BUDGET_PER_QUEUE_30_DAYS / (30 * CONCURRENT_JOBS)
POWER = 0.95  # each bound shape reaches ALARM within its stated time in at least this share of jobs
EPOCH = 1_800_000_000 - 1_800_000_000 % 3600  # each job starts at a random second of the period after it
QUEUE = "training"
BOOT_SECONDS = 300.0  # between two attempts: the reclaimed instance's replacement boots, nothing prints
INPUT, CHECKPOINT = "DataWaitShare", "CheckpointShare"


# --- the alarms -------------------------------------------------------------------------------------------------------

def alarm_rules(bound_minutes: int = BOUND_MINUTES, datapoints: Optional[int] = None) -> dict[str, CloudWatchAlarm]:
    """The queue's two alarms as goodput_alarms() synthesizes them (tests/unit/test_goodput_alarms.py pins the
    template to these values): ``bound_minutes`` / 5 five-minute periods (N), all but one breaching (M; or
    ``datapoints``, at most N), Maximum, over the threshold, missing data not breaching."""
    periods = bound_minutes // ALARM_PERIOD_MINUTES
    m = datapoints_to_alarm(periods) if datapoints is None else min(datapoints, periods)

    def rule(threshold: float) -> CloudWatchAlarm:
        return CloudWatchAlarm(ALARM_PERIOD_MINUTES * 60, "Maximum", periods, m, float(threshold),
                               "GreaterThanThreshold", "notBreaching")
    return {INPUT: rule(INPUT_BOUND_PERCENT), CHECKPOINT: rule(CHECKPOINT_BOUND_PERCENT)}


# --- a job's process: the real PhaseClock on a fake clock ---------------------------------------------------------

class _Lines:
    """The job's stdout: the lines PhaseClock prints (a stream that is never empty: PhaseClock writes to stdout when
    handed a falsy one)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass


class Attempt:
    """One process of a job: a PhaseClock whose monotonic clock this object moves; moving it runs the timer's ticks
    that fall inside (each at its own time, as the thread would while the job is blocked)."""

    def __init__(self, wall_start: float, env: dict[str, str]) -> None:
        self.now, self._tick, self.wall_start = 0.0, float(phase_clock.EMIT_SECONDS), wall_start
        self.clock = phase_clock.PhaseClock(now=lambda: self.now, wall=lambda: wall_start + self.now)
        self.out = _Lines()
        self.clock.emit_windows(QUEUE, self.out, env=env, interval=0)
        self._switch = self.clock.switch

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self._tick <= end:
            self.now = self._tick
            self.clock.publish()
            self._tick += phase_clock.EMIT_SECONDS
        self.now = end

    def spend(self, phase: Optional[str], seconds: float) -> None:
        """``seconds`` in ``phase`` (a SWITCH_PHASES name: "data_wait" is the wait for the next batch)."""
        self._switch(phase)
        self.advance(seconds)

    @property
    def wall(self) -> float:
        return self.wall_start + self.now

    def end(self) -> None:
        self._switch(None)


@dataclass
class Run:
    """A simulated job: its attempts (one process each), the onset of the behaviour an alarm must catch (seconds from
    the job's start; None: healthy), and where it started and ended (epoch seconds)."""

    start: float
    env: dict[str, str]
    attempts: list[Attempt]
    onset: Optional[float] = None

    @classmethod
    def begin(cls, rng: random.Random, env: dict[str, str]) -> "Run":
        return cls(EPOCH + rng.uniform(0, ALARM_PERIOD_MINUTES * 60), env, [])

    def attempt(self, at: Optional[float] = None) -> Attempt:
        """A new process from ``at`` (epoch seconds; default: the job's start or the last attempt's end)."""
        if at is None:
            at = self.attempts[-1].wall if self.attempts else self.start
        self.attempts.append(Attempt(at, self.env))
        return self.attempts[-1]

    @property
    def end(self) -> float:
        return self.attempts[-1].wall

    def samples(self, metric: str) -> list[tuple[float, float]]:
        out = []
        for attempt in self.attempts:
            for line in attempt.out.lines:
                document = json.loads(line)
                if metric in document:
                    out.append((document["_aws"]["Timestamp"] / 1000, document[metric]))
        return out

    def summary(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for attempt in self.attempts:
            for name, seconds in attempt.clock.summary().items():
                total[name] = total.get(name, 0.0) + seconds
        return total


# --- the shapes -----------------------------------------------------------------------------------------------------

def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(sigma * rng.gauss(0.0, 1.0))


def compute_seconds(rng: random.Random, mean: float = 4.0) -> float:
    """A step's compute: gamma around ``mean`` (coefficient of variation 25%)."""
    return rng.gammavariate(16.0, mean / 16.0)


def train(attempt: Attempt, rng: random.Random, until: float, *, wait_share: float,
          stalls: Optional[tuple[float, float, float]] = None, step: float = 4.0) -> None:
    """Steps until ``until`` (the attempt's clock): each waits for its batch an exponential time averaging
    ``wait_share`` of the step (the wait included), plus, with ``stalls`` (per hour, median seconds, sigma), a loader
    stall now and then: Poisson in time, log-normal in length, added to the wait of the batch it falls in."""
    mean_wait = wait_share / (1 - wait_share) * step if wait_share > 0 else 0.0
    rate = stalls[0] / 3600 if stalls else 0.0
    next_stall = attempt.now + rng.expovariate(rate) if rate else math.inf
    spend, expo = attempt.spend, rng.expovariate
    while attempt.now < until:
        wait = expo(1 / mean_wait) if mean_wait else 0.0
        if attempt.now >= next_stall:
            wait += lognormal(rng, stalls[1], stalls[2])
            next_stall = attempt.now + expo(rate)
        spend("data_wait", wait)
        spend("step", compute_seconds(rng, step))


def saving(attempt: Attempt, rng: random.Random, until: float, *, every: float, save: float, wait_share: float = 0.05,
           sigma: float = 0.25) -> None:
    """Training with a blocking save after each ``every`` seconds of it (the interval jittered 10%: saves come every
    so many steps), each ``save`` seconds, log-normal with ``sigma``."""
    while attempt.now < until:
        train(attempt, rng, min(until, attempt.now + every * rng.uniform(0.9, 1.1)), wait_share=wait_share)
        if attempt.now < until:
            attempt.spend("checkpoint_save", lognormal(rng, save, sigma))


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "healthy", "known limit", "input-bound", "checkpoint-bound"
    hours: float  # each trial's job time
    drive: Callable[[Run, random.Random, float], None]  # fills the run up to the given seconds
    # A bound shape: ALARM within within(bound_minutes) minutes of its onset (the job's start, or the stall's), as
    # ``target`` says it.
    within: Callable[[int], float] = lambda bound_minutes: 0.0
    target: str = ""
    note: str = ""

    @property
    def alarm(self) -> Optional[str]:
        return {"input-bound": INPUT, "checkpoint-bound": CHECKPOINT}.get(self.kind)


def _plain(wait: Callable[[random.Random], float], stalls: Optional[tuple[float, float, float]] = None):
    def drive(run: Run, rng: random.Random, seconds: float) -> None:
        attempt = run.attempt()
        train(attempt, rng, seconds, wait_share=wait(rng), stalls=stalls)
        attempt.end()
    return drive


def _restarts(every_hours: float, restore: float, first_batch: tuple[float, float]):
    def drive(run: Run, rng: random.Random, seconds: float) -> None:
        at = run.start
        while at - run.start < seconds:
            attempt = run.attempt(at)
            length = min(every_hours * 3600, seconds - (at - run.start))
            attempt.spend("restore", lognormal(rng, restore, 0.1))
            attempt.spend("data_wait", lognormal(rng, *first_batch))  # the workers start, the first shard arrives
            train(attempt, rng, length - BOOT_SECONDS, wait_share=0.05)
            attempt.end()
            at = attempt.wall + BOOT_SECONDS  # reclaimed; the next attempt's instance boots
    return drive


def _evaluations(train_minutes: float, evaluation_minutes: float, restart: tuple[float, float],
                 wait_share: float = 0.05):
    def drive(run: Run, rng: random.Random, seconds: float) -> None:
        attempt = run.attempt()
        first = rng.uniform(0, 1)  # the job starts at a random point of its first training stretch
        while attempt.now < seconds:
            train(attempt, rng, min(seconds, attempt.now + train_minutes * 60 * first), wait_share=wait_share)
            first = 1.0
            attempt.spend("evaluation", lognormal(rng, evaluation_minutes * 60, 0.1))
            attempt.spend("data_wait", lognormal(rng, *restart))  # the training loader's workers start again
        attempt.end()
    return drive


def _saves(every_minutes: float, save_seconds: float, wait_share: float = 0.05):
    def drive(run: Run, rng: random.Random, seconds: float) -> None:
        attempt = run.attempt()
        saving(attempt, rng, seconds, every=every_minutes * 60, save=save_seconds, wait_share=wait_share)
        attempt.end()
    return drive


def _stalled(after_hours: tuple[float, float], stall_seconds: float):
    def drive(run: Run, rng: random.Random, seconds: float) -> None:
        attempt = run.attempt()
        at = rng.uniform(*after_hours) * 3600
        train(attempt, rng, at, wait_share=0.05)
        run.onset = attempt.now
        attempt.spend("data_wait", stall_seconds)  # next(loader) blocks
        train(attempt, rng, seconds, wait_share=0.05)
        attempt.end()
    return drive


def _from_start(drive: Callable[[Run, random.Random, float], None]):
    def with_onset(run: Run, rng: random.Random, seconds: float) -> None:
        run.onset = 0.0
        drive(run, rng, seconds)
    return with_onset


SHORT_STALLS = (60.0, 3.0, 1.0)  # per hour, median seconds, sigma
MINUTE_STALLS = (6.0, 20.0, 1.0)
HEAVY_STALLS = (6.0, 15.0, 1.5)


def windows(count: float) -> Callable[[int], float]:
    return lambda bound_minutes: count * bound_minutes


def after_saves(every_minutes: float) -> Callable[[int], float]:
    """Two save intervals (the share is whole intervals: known from the second save on) and two windows."""
    return lambda bound_minutes: 2 * bound_minutes + 2 * every_minutes


SHAPES: tuple[Shape, ...] = (
    Shape("compute-bound, waits 3-10% (exponential per batch)", "healthy", 24,
          _plain(lambda rng: rng.uniform(0.03, 0.10))),
    Shape("a restart every 3 h: 10-min restore, first batch 60 s (log-normal, sigma 0.5)", "healthy", 24,
          _restarts(3, 600, (60, 0.5))),
    Shape("evaluations: 10 min every 30 min, then the workers restart (30 s, sigma 0.6)", "healthy", 24,
          _evaluations(20, 10, (30, 0.6))),
    Shape("checkpoints: 60 s every 20 min (5%; sigma 0.25, interval +-10%)", "healthy", 24, _saves(20, 60)),
    Shape("bursty loader: 60 stalls/h, 3 s median (sigma 1.0)", "healthy", 24,
          _plain(lambda rng: 0.05, SHORT_STALLS)),
    Shape("bursty loader: 6 stalls/h, 20 s median (sigma 1.0)", "known limit", 24,
          _plain(lambda rng: 0.05, MINUTE_STALLS), note="about 1 stall a day over 4 min"),
    Shape("bursty loader: 6 stalls/h, 15 s median (sigma 1.5)", "known limit", 24,
          _plain(lambda rng: 0.05, HEAVY_STALLS), note="stalls over 8 min daily, over 25 min weekly"),
    Shape("steady 35%", "input-bound", 2, _from_start(_plain(lambda rng: 0.35)), windows(2), "2 windows"),
    Shape("steady 50%", "input-bound", 2, _from_start(_plain(lambda rng: 0.50)), windows(2), "2 windows"),
    Shape("bursty 35%: 5% + 60 stalls/h, 15.5 s median (sigma 0.8)", "input-bound", 3,
          _from_start(_plain(lambda rng: 0.05, (60.0, 15.5, 0.8))), windows(4), "4 windows"),
    Shape("bursty 50%: 5% + 60 stalls/h, 26 s median (sigma 0.8)", "input-bound", 3,
          _from_start(_plain(lambda rng: 0.05, (60.0, 26.0, 0.8))), windows(4), "4 windows"),
    Shape("steady 35%, evaluations 10 min every 30 min", "input-bound", 3,
          _from_start(_evaluations(20, 10, (30, 0.6), wait_share=0.35)), windows(3), "3 windows"),
    Shape("steady 35%, a 60 s save every 10 min", "input-bound", 2,
          _from_start(_saves(10, 60, wait_share=0.35)), windows(2), "2 windows"),
    Shape("loader stalled an hour (from 1-2 h in)", "input-bound", 3.5, _stalled((1, 2), 3600), windows(1.5),
          "1.5 windows of the stall"),
    Shape("checkpoints: 90 s every 10 min (13%)", "checkpoint-bound", 2, _from_start(_saves(10, 90)),
          after_saves(10), "2 windows and 2 intervals"),
    Shape("checkpoints: 3 min every 20 min (13%)", "checkpoint-bound", 3, _from_start(_saves(20, 180)),
          after_saves(20), "2 windows and 2 intervals"),
)


# --- one trial --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trial:
    shape: str
    hours: float
    alarms: dict[str, int]  # ALARM transitions per alarm
    first_alarm: Optional[float]  # a bound shape: seconds from its onset to its alarm's first ALARM (None: none)
    highest: dict[str, float]  # the highest line per metric
    data_wait: float  # the job's data wait over its step time (the clock's own summary)


@contextlib.contextmanager
def min_step_share(value: Optional[float]) -> Iterator[None]:
    """phase_clock.MIN_STEP_SHARE set to ``value`` for the block (None: as it is)."""
    before = phase_clock.MIN_STEP_SHARE
    if value is not None:
        phase_clock.MIN_STEP_SHARE = value
    try:
        yield
    finally:
        phase_clock.MIN_STEP_SHARE = before


def run_trial(shape: Shape, seed: int, trial: int, *, bound_minutes: int = BOUND_MINUTES,
              step_share: Optional[float] = None, datapoints: Optional[int] = None) -> Trial:
    """One job of ``shape`` (its own seeded draws: the same job whatever the knobs), its lines through both
    alarms."""
    rng = random.Random(f"{seed}:{shape.name}:{trial}")
    rules = alarm_rules(bound_minutes, datapoints)
    run = Run.begin(rng, goodput_environment(bound_minutes=bound_minutes))
    hours = shape.hours
    if shape.alarm is not None:  # a longer window: the job runs as much longer as its stated time is
        hours += max(0.0, shape.within(bound_minutes) - shape.within(BOUND_MINUTES)) / 60
    with min_step_share(step_share), contextlib.redirect_stderr(io.StringIO()):  # the job's own hints: not here
        shape.drive(run, rng, hours * 3600)
    alarms, highest, first = {}, {}, None
    for metric, rule in rules.items():
        samples = run.samples(metric)
        timeline = rule.states(samples, run.start, run.end + bound_minutes * 60)
        entered = transitions(timeline)
        alarms[metric] = len(entered)
        highest[metric] = max((value for _, value in samples), default=0.0)
        if metric == shape.alarm and run.onset is not None:
            after = [at for at in entered if at >= run.start + run.onset]
            held = any(state == ALARM for at, state in timeline if at >= run.start + run.onset)
            first = (after[0] if after else (run.start + run.onset if held else None))
            first = None if first is None else first - run.start - run.onset
    summary = run.summary()
    return Trial(shape.name, hours, alarms, first, highest,
                 summary["data_wait"] / summary["step"] if summary.get("step") else 0.0)


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to the command (which ends the pool) and ends quietly when the pool ends it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _task(arguments: tuple) -> Trial:
    index, seed, trial, knobs = arguments
    return run_trial(SHAPES[index], seed, trial, **knobs)


def simulate(shapes: Sequence[int], trials: Callable[[Shape], int], seed: int, *, bound_minutes: int = BOUND_MINUTES,
             step_share: Optional[float] = None, datapoints: Optional[int] = None,
             workers: int = 1) -> dict[str, list[Trial]]:
    """``trials(shape)`` jobs of each of ``SHAPES[i]`` for i in ``shapes``, on ``workers`` processes."""
    knobs = dict(bound_minutes=bound_minutes, step_share=step_share, datapoints=datapoints)
    tasks = [(index, seed, trial, knobs) for index in shapes for trial in range(trials(SHAPES[index]))]
    tasks.sort(key=lambda task: -SHAPES[task[0]].hours)  # the long jobs first: the workers end together
    results: dict[str, list[Trial]] = {SHAPES[index].name: [] for index in shapes}
    if workers > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_signals) as pool:
            for result in pool.imap_unordered(_task, tasks, chunksize=1):
                results[result.shape].append(result)
            pool.close()
            pool.join()
    else:
        for task in tasks:
            result = _task(task)
            results[result.shape].append(result)
    return results


# --- statistics -------------------------------------------------------------------------------------------------------

def poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for X ~ Poisson(mean), each term in logs (no underflow at a mean of thousands)."""
    if k < 0:
        return 0.0
    if mean <= 0:
        return 1.0
    log_mean = math.log(mean)
    return min(1.0, math.fsum(math.exp(i * log_mean - mean - math.lgamma(i + 1)) for i in range(k + 1)))


def poisson_interval(count: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Garwood) interval of a Poisson mean from one ``count``."""
    tail = (1 - level) / 2

    def solve(target: Callable[[float], bool]) -> float:
        low, high = 0.0, 10.0 + 10 * count
        for _ in range(100):
            middle = (low + high) / 2
            low, high = (middle, high) if target(middle) else (low, middle)
        return (low + high) / 2

    lower = 0.0 if count == 0 else solve(lambda mean: 1 - poisson_cdf(count - 1, mean) < tail)
    upper = solve(lambda mean: poisson_cdf(count, mean) > tail)
    return lower, upper


def wilson(hits: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    p = hits / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank; ``inf`` stands for a job that never alarmed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Rate:
    """False alarms per job-day: ``count`` ALARM transitions in ``days`` of job time."""

    count: int
    days: float

    @property
    def per_day(self) -> float:
        return self.count / self.days

    @property
    def interval(self) -> tuple[float, float]:
        low, high = poisson_interval(self.count)
        return low / self.days, high / self.days

    def verdict(self, budget: float) -> str:
        low, high = self.interval
        return "yes" if high <= budget else "**no**" if low > budget else "not shown"


def figure(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.3f}" if value < 0.1 else f"{value:.2f}" if value < 10 else f"{value:.0f}"


def minutes(seconds: float) -> str:
    return "never" if math.isinf(seconds) else f"{seconds / 60:.0f} min"


def healthy_table(results: dict[str, list[Trial]]) -> tuple[str, bool]:
    """The healthy rows, and the healthy shapes (not the known limits) pooled: a queue that runs them in equal
    parts. False when a row, or the pool, misses the budget."""
    heads = ["shape", "kind", "job-days", "data wait, mean", "highest DataWaitShare / CheckpointShare line",
             "input-bound alarms per job-day (95%)", "checkpoint-bound alarms per job-day (95%)",
             f"both, per job-day (budget <= {figure(BUDGET_PER_JOB_DAY)})", "met"]
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    ok, pooled = True, {INPUT: Rate(0, 0.0), CHECKPOINT: Rate(0, 0.0)}

    def cells(rates: dict[str, Rate]) -> tuple[list[str], str]:
        out = []
        for metric in (INPUT, CHECKPOINT):
            low, high = rates[metric].interval
            out.append(f"{figure(rates[metric].per_day)} ({figure(low)}-{figure(high)}; {rates[metric].count} in all)")
        both = Rate(rates[INPUT].count + rates[CHECKPOINT].count, rates[INPUT].days)
        out.append(f"{figure(both.per_day)} (upper {figure(both.interval[1])})")
        return out, both.verdict(BUDGET_PER_JOB_DAY)

    for shape in SHAPES:
        trials = results.get(shape.name)
        if shape.kind not in ("healthy", "known limit") or not trials:
            continue
        days = sum(t.hours for t in trials) / 24
        rates = {metric: Rate(sum(t.alarms[metric] for t in trials), days) for metric in (INPUT, CHECKPOINT)}
        row, verdict = cells(rates)
        if shape.kind == "known limit":
            verdict = f"known limit: reported ({verdict.strip('*')})"
        else:
            ok = ok and verdict != "**no**"
            pooled = {metric: Rate(pooled[metric].count + rates[metric].count, pooled[metric].days + days)
                      for metric in pooled}
        lines.append("| " + " | ".join([shape.name + (f" ({shape.note})" if shape.note else ""), shape.kind,
                                         f"{days:g}", f"{sum(t.data_wait for t in trials) / len(trials):.1%}",
                                         f"{max(t.highest[INPUT] for t in trials):.1f}% / "
                                         f"{max(t.highest[CHECKPOINT] for t in trials):.1f}%"] + row + [verdict]) + " |")
    if pooled[INPUT].days:
        row, verdict = cells(pooled)
        ok = ok and verdict != "**no**"
        lines.append("| " + " | ".join(["the healthy shapes together (a queue running them in equal parts)", "healthy",
                                         f"{pooled[INPUT].days:g}", "", ""] + row + [verdict]) + " |")
    return "\n".join(lines), ok


def detection_table(results: dict[str, list[Trial]], bound_minutes: int) -> tuple[str, bool]:
    heads = ["shape", "alarm", "jobs", "data wait, mean", "reached ALARM in time (95%)", "median", "95th pct",
             f"target: >= {POWER:.0%} within", "met"]
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    ok = True
    for shape in SHAPES:
        trials = results.get(shape.name)
        if shape.alarm is None or not trials:
            continue
        times = [math.inf if t.first_alarm is None else t.first_alarm for t in trials]
        within = shape.within(bound_minutes)
        hits = sum(1 for value in times if value <= within * 60)
        low, high = wilson(hits, len(trials))
        met = hits / len(trials) >= POWER
        ok = ok and met
        onset = "of the stall's start" if "stalled" in shape.name else "of the job's start"
        lines.append(f"| {shape.name} | {'input-bound' if shape.alarm == INPUT else 'checkpoint-bound'} | "
                     f"{len(trials)} | {sum(t.data_wait for t in trials) / len(trials):.1%} | "
                     f"{hits / len(trials):.1%} ({low:.1%}-{high:.1%}) | {minutes(percentile(times, 0.5))} | "
                     f"{minutes(percentile(times, 0.95))} | {within:g} min ({shape.target}) {onset} | "
                     f"{'yes' if met else '**no**'} |")
    return "\n".join(lines), ok


# --- the command ------------------------------------------------------------------------------------------------------

def parser() -> Parser:
    bench = Parser("./platform bench goodput-alarms", description=__doc__.split("\n\n")[0])
    add_seed(bench)
    bench.add_argument("--trials", type=bounded(1, 10_000, "simulated job-days per healthy shape", example="--trials 60",
                                                integer=True), default=40,
                       help="simulated job-days per healthy shape, and jobs of a few hours per bound shape (default "
                            "40: about a minute on two idle cores)")
    bench.add_argument("--bound-minutes", type=bounded(ALARM_PERIOD_MINUTES, 1440, "the alarms' bound_minutes, a "
                                                       "multiple of 5", example="--bound-minutes 30", integer=True),
                       default=BOUND_MINUTES, help=f"the queue's bound_minutes (default {BOUND_MINUTES}): the jobs' "
                       "window, and the alarms' periods")
    bench.add_argument("--min-step-share", type=bounded(0.0, 1.0, "ml_platform_job.phase_clock.MIN_STEP_SHARE",
                                                        example="--min-step-share 0.75"),
                       default=None, help=f"the job side's MIN_STEP_SHARE (default {phase_clock.MIN_STEP_SHARE})")
    bench.add_argument("--datapoints-to-alarm", type=bounded(1, 288, "M of the alarms' M of N", example=
                                                             "--datapoints-to-alarm 3", integer=True),
                       default=None, help="the alarms' M (default: N - 1, datapoints_to_alarm; at most N)")
    bench.add_argument("--workers", type=bounded(1, 64, "processes", example="--workers 2", integer=True),
                       default=os.cpu_count() or 1, help="processes (default: one per core)")
    return bench


def assumptions(args) -> str:
    rules = alarm_rules(args.bound_minutes, args.datapoints_to_alarm)
    rule = rules[INPUT]
    share = phase_clock.MIN_STEP_SHARE if args.min_step_share is None else args.min_step_share
    return (f"Alarms: period {rule.period // 60} min, {rule.statistic}, {rule.datapoints_to_alarm} of "
            f"{rule.evaluation_periods} periods over the threshold ({INPUT} > {rules[INPUT].threshold:g}%, "
            f"{CHECKPOINT} > {rules[CHECKPOINT].threshold:g}%), missing data {rule.treat_missing_data}; the jobs' "
            f"window {args.bound_minutes} min (goodput_environment), a line every {phase_clock.EMIT_SECONDS} s, "
            f"{INPUT} only for windows at least {share:g} full of steps (MIN_STEP_SHARE).\n"
            f"Jobs: steps of 4 s compute (gamma, CV 25%); each batch's wait exponential around the shape's share; "
            f"stalls Poisson in time, log-normal in length, on top of a 5% wait; saves blocking, log-normal "
            f"(sigma 0.25) every interval +-10%; a restart's instance boots {BOOT_SECONDS:g} s with no lines; each "
            f"job's lines start at a random second of the period.\n"
            f"Budget: at most {BUDGET_PER_QUEUE_30_DAYS:g} false alarm per queue per 30 days with "
            f"{CONCURRENT_JOBS} jobs at once (Maximum: a queue's rate is about the sum of its jobs'), so "
            f"{figure(BUDGET_PER_JOB_DAY)} per job-day (both alarms together); a row meets it when its 95% upper bound "
            f"is under it. Detection: at least {POWER:.0%} of bound jobs reach ALARM within the stated time.")


def main(argv: list[str]) -> int:
    bench = parser()
    args = bench.parse_args(argv)
    if args.bound_minutes % ALARM_PERIOD_MINUTES:
        bench.error(f"argument --bound-minutes: {args.bound_minutes} is not a multiple of {ALARM_PERIOD_MINUTES} "
                    f"(the alarms' period), e.g. --bound-minutes 30")
    started = time.monotonic()
    print(assumptions(args))
    print()
    results = simulate(range(len(SHAPES)), lambda shape: args.trials, args.seed,
                       bound_minutes=args.bound_minutes, step_share=args.min_step_share,
                       datapoints=args.datapoints_to_alarm, workers=args.workers)
    healthy, healthy_ok = healthy_table(results)
    detected, detected_ok = detection_table(results, args.bound_minutes)
    print(healthy)
    print()
    print(detected)
    met = healthy_ok and detected_ok
    print(f"\nseed {args.seed}, {args.trials} job-days per healthy shape, bound_minutes {args.bound_minutes}, "
          f"{args.workers} processes, {time.monotonic() - started:.0f} s; budget and detection targets: "
          + ("met" if met else "NOT met"))
    return 0 if met else 1


if __name__ == "__main__":
    from ops import terminal

    terminal.entry_point(main)
