"""A queue's goodput alarms, replayed: stand-in jobs run on a fake clock through ml_platform_job's PhaseClock (its
timer ticks driven by hand), their embedded-metric lines (Timestamp and value) go through a small CloudWatch alarm
evaluator that takes the alarm's properties from the synthesized template. The evaluator is tested first, on the
tables of AWS's documentation; then the alarms fire when a job is input- or checkpoint-bound (steady, bursty, a
loader stalled for an hour, lines lost) and never on legitimate work.
"""

from __future__ import annotations

import io
import json
import math
import time
from contextlib import redirect_stderr
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional, Sequence

import pytest

from bench.cloudwatch_alarms import ALARM, INSUFFICIENT, OK, CloudWatchAlarm
from ml_platform_job.phase_clock import EMIT_SECONDS, PhaseClock

# The mechanics are replayed at a 15-minute window (bound_minutes=15: 2 of 3 periods), quick to see by hand; the
# default (30 minutes, 5 of 6) is replayed by test_the_defaults_fire_on_bound_jobs, and its error rates are the
# bench's (./platform bench goodput-alarms, tests/unit/test_goodput_alarm_rates.py).
WINDOW_SECONDS = 900

# --- a CloudWatch metric alarm's evaluation -------------------------------------------------------------------------
# The evaluator and its rules (CloudWatch's user guide) live in bench/cloudwatch_alarms.py, shared with
# ./platform bench goodput-alarms; tested here first.


def row(text: str) -> list[Optional[float]]:
    """A row of the guide's tables: 0 not breaching, X breaching, - missing (threshold 1)."""
    return [{"0": 0.0, "X": 2.0, "-": None}[c] for c in text.split()]


def rule(n: int, m: int, missing: str) -> CloudWatchAlarm:
    return CloudWatchAlarm(60, "Maximum", n, m, 1.0, "GreaterThanThreshold", missing)


RETAIN = "retain"
TREATMENTS = ("missing", "ignore", "breaching", "notBreaching")
# The guide's two tables (Datapoints to Alarm 3 of 3, then 2 of 3; 5 datapoints retrieved), one state per treatment.
GUIDE_TABLES = [(3, 3, "0 - X - X", (OK, OK, OK, OK)), (3, 3, "0 - - - -", (OK, OK, OK, OK)),
                (3, 3, "- - - - -", (INSUFFICIENT, RETAIN, ALARM, OK)), (3, 3, "0 X X - X", (ALARM,) * 4),
                (3, 3, "- - - - X", (INSUFFICIENT, RETAIN, ALARM, OK)), (3, 3, "X - - - -", (ALARM, RETAIN, ALARM, OK)),
                (3, 2, "0 - X - X", (ALARM,) * 4), (3, 2, "0 0 X 0 X", (ALARM,) * 4),
                (3, 2, "0 - X - -", (OK, OK, ALARM, OK)), (3, 2, "- - - - 0", (OK, OK, ALARM, OK)),
                (3, 2, "- - - - X", (INSUFFICIENT, RETAIN, ALARM, OK))]


@pytest.mark.parametrize("n, m, points, expected", GUIDE_TABLES, ids=[f"{m}of{n}: {p}" for n, m, p, _ in GUIDE_TABLES])
def test_the_evaluator_gives_the_guides_states_for_each_missing_data_treatment(n, m, points, expected):
    for missing, want in zip(TREATMENTS, expected):
        for before in (OK, ALARM):
            assert rule(n, m, missing).decide(row(points), before) == (before if want == RETAIN else want), missing


def test_the_evaluator_aggregates_each_period_by_its_statistic_and_evaluates_the_periods_then_ended():
    samples = [(600, 10.0), (659, 40.0), (660, 5.0), (720, 35.0), (780, 31.0), (841, 50.0)]
    maximum = CloudWatchAlarm(60, "Maximum", 3, 3, 30, "GreaterThanThreshold", "notBreaching")
    assert maximum.datapoints(samples) == {600: 40.0, 660: 5.0, 720: 35.0, 780: 31.0, 840: 50.0}
    assert replace(maximum, statistic="Average").datapoints(samples)[600] == 25.0
    # 3 of 3 over 30: the period at 660 (5) holds it until 720, 780 and 840 all breach, at 900.
    assert maximum.states(samples, 600, 900) == [(660, OK), (720, OK), (780, OK), (840, OK), (900, ALARM)]
    # The same points treating missing as breaching: the empty periods before 600 count against it.
    assert replace(maximum, treat_missing_data="breaching").states(samples, 480, 660)[-1] == (660, ALARM)


# --- the alarms, as synthesized -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def alarms(tmp_path_factory) -> dict[str, CloudWatchAlarm]:
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from ml_platform_constructs.training.goodput_alarms import goodput_alarms

    stack = Stack(App(outdir=str(tmp_path_factory.mktemp("replay"))), "Replay")
    goodput_alarms(stack, queue_name="training", instance_types=["g5.2xlarge"], bound_minutes=15)
    resources = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm").values()
    return {r["Properties"]["MetricName"]: CloudWatchAlarm.from_template(r["Properties"]) for r in resources}


# --- stand-in jobs ------------------------------------------------------------------------------------------------

EPOCH = 1_800_000_000 - 1_800_000_000 % 3600 + 37  # the attempt starts 37 s past an hour: periods are not aligned


class FakeTime:
    """The job's monotonic clock; advancing it runs the timer's ticks that fall inside (the thread would run them
    while the job is blocked), each with the time of the tick."""

    def __init__(self) -> None:
        self.now, self.next_tick, self.clock = 0.0, float(EMIT_SECONDS), None

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self.next_tick <= end:
            self.now = self.next_tick
            self.clock.publish()
            self.next_tick += EMIT_SECONDS
        self.now = end


@dataclass
class Job:
    """A job's lines (the EMF documents, parsed), its stderr, and its clock."""
    documents: list[dict]
    stderr: str
    clock: PhaseClock

    def samples(self, metric: str, lost: Callable[[float], bool] = lambda at: False) -> list[tuple[float, float]]:
        """(timestamp in seconds, value) of each line carrying ``metric``, less those ``lost`` says never arrived."""
        return [(d["_aws"]["Timestamp"] / 1000, d[metric]) for d in self.documents
                if metric in d and not lost(d["_aws"]["Timestamp"] / 1000)]


def run_job(minutes: float, *, wait: Callable[[float], float] = lambda t: 0.1, compute: Callable[[float], float] =
            lambda t: 1.9, save_every: Optional[float] = None, save_seconds: float = 0.0,
            stalls: Sequence[tuple[float, float]] = (), instance_type: Optional[str] = "g5.2xlarge",
            env: Optional[Mapping[str, str]] = None, window: int = WINDOW_SECONDS) -> Job:
    """A training loop for ``minutes``: each batch blocks ``wait(t)`` seconds in the loader and computes
    ``compute(t)``; a save of ``save_seconds`` after each ``save_every`` seconds of training; ``stalls``: (minute,
    seconds) the loader blocks once in ``next()``."""
    fake = FakeTime()
    clock = PhaseClock(now=fake, wall=lambda: EPOCH + fake.now, window_seconds=window)
    fake.clock = clock
    out, err = io.StringIO(), io.StringIO()
    clock.emit_windows("training", out, instance_type=instance_type,
                       env={"ML_PLATFORM_GOODPUT_WINDOW_SECONDS": str(window), **(env or {})}, interval=0)
    pending = sorted(stalls)

    def loader():
        while True:
            if pending and fake.now >= pending[0][0] * 60:
                fake.advance(pending.pop(0)[1])
            fake.advance(wait(fake.now))
            yield None

    saved_at = 0.0
    with redirect_stderr(err):
        for _ in clock.batches(loader()):
            with clock.step():
                fake.advance(compute(fake.now))
            if save_every and fake.now - saved_at >= save_every:
                with clock.phase("checkpoint_save"):
                    fake.advance(save_seconds)
                clock.checkpoint_saved()
                saved_at = fake.now
            if fake.now >= minutes * 60:
                break
    return Job([json.loads(line) for line in out.getvalue().splitlines()], err.getvalue(), clock)


def states(alarm: CloudWatchAlarm, job: Job, metric: str, minutes: float, **kwargs) -> list[tuple[float, str]]:
    """The alarm's state at each period's end, in minutes since the job's start."""
    return [((at - EPOCH) / 60, state)
            for at, state in alarm.states(job.samples(metric, **kwargs), EPOCH, EPOCH + minutes * 60)]


def fires(alarm: CloudWatchAlarm, job: Job, metric: str, minutes: float, **kwargs) -> bool:
    return any(state == ALARM for _, state in states(alarm, job, metric, minutes, **kwargs))


def heavy_and_light_minutes(t: float) -> float:
    """Data wait per 2 s batch: 60% of the step in odd minutes, 10% in even ones (35% on average)."""
    return 1.2 if int(t // 60) % 2 else 0.2


# --- input-bound -------------------------------------------------------------------------------------------------

def test_the_job_prints_a_line_a_minute_from_its_first_full_window_on(alarms):
    job = run_job(40, wait=lambda t: 0.7, compute=lambda t: 1.3)
    stamps = [d["_aws"]["Timestamp"] / 1000 - EPOCH for d in job.documents]
    assert stamps[0] == WINDOW_SECONDS and all(b - a == EMIT_SECONDS for a, b in zip(stamps, stamps[1:]))
    assert len(stamps) == (40 * 60 - WINDOW_SECONDS) // EMIT_SECONDS + 1
    assert {d["DataWaitShare"] for d in job.documents} == {35.0}
    assert {d["ProductiveShare"] for d in job.documents} == {65.0}


@pytest.mark.parametrize("wait, compute", [(lambda t: 0.7, lambda t: 1.3),  # 35% of every step
                                           (heavy_and_light_minutes, lambda t: 2 - heavy_and_light_minutes(t))],
                         ids=["steady 35%", "bursty: 60% and 10% minutes"])
def test_the_input_bound_alarm_fires_on_a_job_waiting_35_percent(alarms, wait, compute):
    job = run_job(60, wait=wait, compute=compute)
    assert min(v for _, v in job.samples("DataWaitShare")) > 30
    timeline = states(alarms["DataWaitShare"], job, "DataWaitShare", 60)
    first = next(minute for minute, state in timeline if state == ALARM)
    assert first <= 30  # its first full window, then 2 of 3 five-minute periods
    assert all(state == ALARM for minute, state in timeline if minute >= first)  # and it stays


def test_the_input_bound_alarm_holds_for_a_loader_stalled_an_hour_and_not_before(alarms):
    job = run_job(120, stalls=[(30, 3600)])  # compute-bound (5% wait), then next(loader) blocks from 0:30 to 1:30
    timeline = states(alarms["DataWaitShare"], job, "DataWaitShare", 120)
    assert all(state != ALARM for minute, state in timeline if minute <= 35)
    assert all(state == ALARM for minute, state in timeline if 45 <= minute <= 90), timeline
    assert any(v == 100.0 for _, v in job.samples("DataWaitShare"))  # the blocked next() is all data wait


def test_the_input_bound_alarm_stays_quiet_on_compute_bound_jobs_and_at_25_percent(alarms):
    for wait, compute in ((lambda t: 0.0, lambda t: 2.0), (lambda t: 0.1, lambda t: 1.9),  # 0% and 5%
                          (lambda t: 0.5, lambda t: 1.5)):  # 25%: under the 30% threshold
        job = run_job(90, wait=wait, compute=compute)
        assert job.samples("DataWaitShare") and not fires(alarms["DataWaitShare"], job, "DataWaitShare", 90)
    # the bursty pattern at 25% on average (40% and 10% minutes) is under it too: the window is the average
    bursty = run_job(90, wait=lambda t: 0.8 if int(t // 60) % 2 else 0.2, compute=lambda t: 1.2 if int(t // 60) % 2
                     else 1.8)
    assert max(v for _, v in bursty.samples("DataWaitShare")) < 30
    assert not fires(alarms["DataWaitShare"], bursty, "DataWaitShare", 90)


def test_one_input_bound_job_among_compute_bound_ones_is_not_averaged_away(alarms):
    alarm = alarms["DataWaitShare"]
    jobs = [run_job(60, wait=lambda t: 0.7, compute=lambda t: 1.3)] + [run_job(60) for _ in range(2)]  # 35%, 5%, 5%
    samples = [sample for job in jobs for sample in job.samples("DataWaitShare")]
    assert any(state == ALARM for _, state in alarm.states(samples, EPOCH, EPOCH + 3600))
    averaged = replace(alarm, statistic="Average")  # 15% a period: the input-bound job would go unseen
    assert all(state != ALARM for _, state in averaged.states(samples, EPOCH, EPOCH + 3600))


def test_lost_lines_do_not_hold_the_input_bound_alarm_back(alarms):
    alarm = alarms["DataWaitShare"]
    job = run_job(60, wait=lambda t: 0.7, compute=lambda t: 1.3)
    whole = states(alarm, job, "DataWaitShare", 60)
    # One line lost (a log event that never arrived): the period's other lines carry it (Maximum).
    one = EPOCH + 20 * 60
    assert states(alarm, job, "DataWaitShare", 60, lost=lambda at: at == one) == whole
    # Every other period's lines lost (delivered after the evaluations): M of N still holds ALARM once reached,
    # where N of N would drop to OK whenever the range holds fewer than N real periods.
    every_other = lambda at: int(at // alarm.period) % 2 == 0  # noqa: E731
    lossy = states(alarm, job, "DataWaitShare", 60, lost=every_other)
    first = next(minute for minute, state in lossy if state == ALARM)
    assert all(state == ALARM for minute, state in lossy if minute >= first)
    strict = replace(alarm, datapoints_to_alarm=alarm.evaluation_periods)
    assert any(state == OK for minute, state in states(strict, job, "DataWaitShare", 60, lost=every_other)
               if minute >= first)


# --- checkpoint-bound ------------------------------------------------------------------------------------------------

def test_the_checkpoint_bound_alarm_fires_on_90_second_saves_every_10_minutes(alarms):
    job = run_job(120, save_every=600, save_seconds=90)  # 90 s after every 10 minutes of training: 13%
    shares = [v for _, v in job.samples("CheckpointShare")]
    assert shares[-1] == pytest.approx(100 * 90 / 690, abs=0.01)  # whole save intervals: its average, at any moment
    timeline = states(alarms["CheckpointShare"], job, "CheckpointShare", 120)
    first = next(minute for minute, state in timeline if state == ALARM)
    assert first <= 45 and all(state == ALARM for minute, state in timeline if minute >= first)
    assert "checkpoint-bound" in job.stderr and "torch.distributed.checkpoint.async_save" in job.stderr


@pytest.mark.parametrize("save_seconds", [30, 60], ids=["30 s (5%)", "60 s (9%)"])
def test_the_checkpoint_bound_alarm_stays_quiet_on_saves_under_a_tenth_of_the_time(alarms, save_seconds):
    job = run_job(120, save_every=600, save_seconds=save_seconds)
    assert max(v for _, v in job.samples("CheckpointShare")) <= 10
    assert not fires(alarms["CheckpointShare"], job, "CheckpointShare", 120)
    assert "checkpoint-bound" not in job.stderr


def test_a_rare_long_save_reads_as_its_share_of_its_interval_not_of_the_window_after_it(alarms):
    job = run_job(150, save_every=3600, save_seconds=150)  # 2.5 minutes every hour: 4% (16.7% of a bare window)
    shares = job.samples("CheckpointShare")
    assert max(v for _, v in shares) < 5 and shares[-1][1] == pytest.approx(100 * 150 / 3750, abs=0.01)
    assert not fires(alarms["CheckpointShare"], job, "CheckpointShare", 150)


def test_neither_alarm_fires_on_a_compute_bound_job_that_saves_now_and_then(alarms):
    job = run_job(120, wait=lambda t: 0.05, compute=lambda t: 1.95, save_every=600, save_seconds=30)
    assert not fires(alarms["DataWaitShare"], job, "DataWaitShare", 120)
    assert not fires(alarms["CheckpointShare"], job, "CheckpointShare", 120)
    assert job.stderr == ""


# --- the job's own line on stderr ---------------------------------------------------------------------------------

def test_the_job_names_its_instances_loader_settings_once_per_crossing():
    # stalled 40 minutes, compute-bound for 40 (the share falls under the re-arm mark), stalled again
    job = run_job(150, stalls=[(20, 2400), (100, 1800)])
    lines = [line for line in job.stderr.splitlines() if "input-bound" in line]
    assert len(lines) == 2
    assert lines[0].startswith("ml-platform goodput: input-bound on g5.2xlarge: data wait was ")
    assert ("fix: DataLoader(num_workers=5, prefetch_factor=2, pin_memory=False, persistent_workers=True) per GPU "
            "process (ml_platform_job.goodput.loader_settings_for('g5.2xlarge'))") in lines[0]
    unknown = run_job(40, stalls=[(15, 900)], instance_type="x9.huge")
    assert "fix: x9.huge is not in the catalog: call ml_platform_job.goodput.loader_settings(vcpus=" in unknown.stderr


def test_the_thresholds_and_the_window_come_from_the_job_definitions_variables():
    env = {"ML_PLATFORM_INPUT_BOUND_PERCENT": "off", "ML_PLATFORM_CHECKPOINT_BOUND_PERCENT": "20",
           "ML_PLATFORM_GOODPUT_WINDOW_SECONDS": "600"}
    job = run_job(60, stalls=[(12, 1200)], save_every=600, save_seconds=90, env=env)
    assert job.documents[0]["_aws"]["Timestamp"] / 1000 - EPOCH == 600
    assert "input-bound" not in job.stderr and "checkpoint-bound" not in job.stderr  # off; 13% is under 20%
    stricter = run_job(60, save_every=600, save_seconds=90, env={"ML_PLATFORM_CHECKPOINT_BOUND_PERCENT": "12"})
    assert "threshold 12%" in stricter.stderr and "input-bound" not in stricter.stderr


# --- the clock itself --------------------------------------------------------------------------------------------

def test_phases_in_progress_count_up_to_each_reading():
    fake = FakeTime()
    clock = PhaseClock(now=fake, window_seconds=WINDOW_SECONDS)
    fake.clock = clock  # no emit_windows: publish prints nothing, the readings are window()'s
    with clock.step():
        fake.now = 1000
        assert clock.window() == {"ProductiveShare": 100.0, "CheckpointShare": 0.0, "DataWaitShare": 0.0}
    with clock.phase("checkpoint_save"):
        fake.now = 1900
        # the save's interval runs from the first step: the share is over 1000 s, 900 of them saving so far
        assert clock.window()["CheckpointShare"] == 90.0
        assert clock.publish() is None
    assert clock.summary()["checkpoint_save"] == 900


def test_the_tracking_phase_is_wall_time_outside_other_phases_and_their_time_inside():
    fake = FakeTime()
    clock = PhaseClock(now=fake, window_seconds=WINDOW_SECONDS)
    with clock.step():
        fake.now = 600
        with clock.phase("tracking"):  # a record write inside a step: step time
            fake.now = 660
    with clock.phase("tracking"):  # the record's write alone: wall time, in no share's numerator
        fake.now = 960
    assert clock.summary()["tracking"] == 300 and clock.summary()["step"] == 660
    assert clock.window() == {"ProductiveShare": round(100 * 660 / 960, 2), "CheckpointShare": 0.0,
                              "DataWaitShare": 0.0}
    with pytest.raises(ValueError, match="one of restore, checkpoint_save, evaluation, tracking"):
        clock.add("steps", 1)


def test_started_before_moves_the_attempts_start_back():
    fake = FakeTime()
    clock = PhaseClock(now=fake, window_seconds=WINDOW_SECONDS)
    clock.started_before(100)
    fake.now = WINDOW_SECONDS - 100
    assert clock.window() is not None
    with clock.step():
        pass
    assert clock.summary()["startup"] == WINDOW_SECONDS


def test_the_timer_thread_publishes_until_closed():
    now = [0.0]
    clock = PhaseClock(now=lambda: now[0], window_seconds=WINDOW_SECONDS)
    now[0] = float(WINDOW_SECONDS)
    out = io.StringIO()
    clock.emit_windows("training", out, env={"ML_PLATFORM_GOODPUT_WINDOW_SECONDS": str(WINDOW_SECONDS)}, interval=0.01)
    thread = clock._thread
    deadline = time.monotonic() + 5
    while not out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # more ticks at the same clock time print nothing again
    assert len(out.getvalue().splitlines()) == 1
    clock.close()
    clock.close()  # idempotent
    assert thread is not None and not thread.is_alive() and clock._thread is None
    now[0] += EMIT_SECONDS
    time.sleep(0.05)
    assert len(out.getvalue().splitlines()) == 1
    assert math.isclose(json.loads(out.getvalue())["ProductiveShare"], 0.0)


def test_the_defaults_fire_on_bound_jobs_and_not_on_compute_bound_ones(tmp_path):
    """At the defaults (bound_minutes 30: 5 of 6 five-minute periods over a 30-minute window, the job told so by its
    job definition), a job waiting 35% on its loader, a loader stalled an hour and 90-s saves every 10 minutes alarm;
    a compute-bound job does not. Detection takes about twice the 15-minute replay's: the bench's figures."""
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from ml_platform_constructs.training.goodput_alarms import BOUND_MINUTES, goodput_alarms
    from ml_platform_constructs.training.queue_jobs import container_environment

    stack = Stack(App(outdir=str(tmp_path)), "Defaults")
    goodput_alarms(stack, queue_name="training", instance_types=["g5.2xlarge"])
    resources = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm").values()
    defaults = {r["Properties"]["MetricName"]: CloudWatchAlarm.from_template(r["Properties"]) for r in resources}
    env = {k: v for k, v in container_environment("training", None).items() if k.startswith("ML_PLATFORM_")}
    window = BOUND_MINUTES * 60
    assert env["ML_PLATFORM_GOODPUT_WINDOW_SECONDS"] == str(window) == "1800"

    def first(job, metric, minutes):
        return next((m for m, state in states(defaults[metric], job, metric, minutes) if state == ALARM), None)

    steady = run_job(120, wait=lambda t: 0.7, compute=lambda t: 1.3, env=env, window=window)
    assert first(steady, "DataWaitShare", 120) <= 60
    stalled = run_job(150, stalls=[(40, 3600)], env=env, window=window)
    assert 40 < first(stalled, "DataWaitShare", 150) <= 40 + 40
    saving = run_job(120, save_every=600, save_seconds=90, env=env, window=window)
    assert first(saving, "CheckpointShare", 120) <= 75
    healthy = run_job(180, env=env, window=window)
    assert first(healthy, "DataWaitShare", 180) is None and first(healthy, "CheckpointShare", 180) is None
