"""The job's side of the goodput ledger: ``PhaseClock`` times the job's own phases (a counter per phase, no I/O per
step) and, on a timer, prints its rolling shares as embedded-metric-format lines, the data of a training queue's
goodput alarms. Standard library only. ``ml_platform_job.goodput`` re-exports everything here.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Optional

# The job's phases as PhaseClock times them (step includes the data wait inside it; tracking is the run record's
# own writes, outside any other phase).
PHASES = ("startup", "restore", "step", "data_wait", "checkpoint_save", "evaluation", "since_checkpoint", "tracking")
# The phases ``phase()`` and ``add()`` time (steps: ``step()``, ``batches()``, ``add_step()``).
TIMED_PHASES = ("restore", "checkpoint_save", "evaluation", "tracking")
# The phases a framework's hooks ``switch`` to, and the counters each counts into: a step (as ``step()``), the data
# wait between two steps (as ``batches()`` counts a blocked ``next()``: data wait, and step time), and the timed
# phases but ``tracking`` (the record's writes are blocks: ``phase("tracking")``).
_SWITCHED = {"step": ("step", "since_checkpoint"), "data_wait": ("data_wait", "step", "since_checkpoint"),
             "restore": ("restore",), "checkpoint_save": ("checkpoint_save",), "evaluation": ("evaluation",)}
SWITCH_PHASES = tuple(_SWITCHED)
_AS_BEGUN = object()  # switch()'s default: the phase that ends counts as what it began as
# The live metrics a job prints (embedded metric format: CloudWatch Logs extracts them from the job's log stream,
# so the job needs no cloudwatch:PutMetricData; the metric's timestamp is the document's own):
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
GOODPUT_NAMESPACE = "MLPlatform/Goodput"
WINDOW_METRICS = ("ProductiveShare", "DataWaitShare", "CheckpointShare")
# DataWaitShare is printed only for windows whose steps (data wait included) fill at least this share: a window of a
# restore, an evaluation or a save with a few steps' first fetches in it says nothing of the input pipeline.
MIN_STEP_SHARE = 0.5
# A line every EMIT_SECONDS, each with the shares of the trailing WINDOW_SECONDS (the queue's alarms' bound_minutes:
# the job definition passes it as ML_PLATFORM_GOODPUT_WINDOW_SECONDS).
EMIT_SECONDS = 60
WINDOW_SECONDS = 1800
METRIC_WINDOW_SECONDS = WINDOW_SECONDS  # the window a line's shares cover (the name older callers import)
WINDOW_ENV = "ML_PLATFORM_GOODPUT_WINDOW_SECONDS"
# The alarms' thresholds (percent), passed by the job definition too: the job says the fix itself, once per crossing.
INPUT_BOUND_ENV, INPUT_BOUND_PERCENT = "ML_PLATFORM_INPUT_BOUND_PERCENT", 30.0
CHECKPOINT_BOUND_ENV, CHECKPOINT_BOUND_PERCENT = "ML_PLATFORM_CHECKPOINT_BOUND_PERCENT", 10.0
# A hint is said again only after its share fell to this fraction of the threshold (a share that hovers around the
# threshold, as a checkpoint share does between saves, says it once).
REARM_FRACTION = 0.8
# The checkpoint share's window stretches to whole save intervals, up to a day (an alarm looks back no further).
MAX_WINDOW_SECONDS = 24 * 3600


def _env_window(env: Mapping[str, str]) -> float:
    raw = (env.get(WINDOW_ENV) or "").strip()
    if not raw:
        return float(WINDOW_SECONDS)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= EMIT_SECONDS):
        print(f"ml-platform goodput: {WINDOW_ENV}={raw!r} is not a number of seconds of at least {EMIT_SECONDS}; "
              f"using {WINDOW_SECONDS}", file=sys.stderr, flush=True)
        return float(WINDOW_SECONDS)
    return value


def _env_percent(env: Mapping[str, str], name: str, default: float) -> Optional[float]:
    """The threshold in ``env[name]``: absent, the default; empty or "off", None (no hint)."""
    raw = env.get(name)
    if raw is None:
        return default
    raw = raw.strip()
    if raw.lower() in ("", "off"):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value < 100):
        print(f"ml-platform goodput: {name}={raw!r} is not a percentage between 0 and 100 (or off); using "
              f"{default:g}", file=sys.stderr, flush=True)
        return default
    return value


def input_bound_hint(instance_type: Optional[str], share: float, threshold: float, window: float) -> str:
    """The line a job prints when its data wait crosses the input-bound threshold: its own instance's DataLoader
    settings (``ml_platform_job.goodput.loader_settings_for``), or how to get them for a type outside the catalog."""
    from .goodput import loader_settings_for  # goodput imports this module: looked up when a hint is due

    settings = None
    if instance_type:
        try:
            settings = loader_settings_for(instance_type)
        except ValueError:
            settings = None
    if settings is not None:
        kwargs = ", ".join(f"{k}={v}" for k, v in settings.dataloader_kwargs().items())
        fix = (f"DataLoader({kwargs}) per GPU process "
               f"(ml_platform_job.goodput.loader_settings_for({instance_type!r}))")
    else:
        fix = (f"{instance_type + ' is not in the catalog' if instance_type else 'the instance type is unknown'}: call "
               "ml_platform_job.goodput.loader_settings(vcpus=..., gpus=..., memory_gib=...) with its vCPUs, GPUs "
               "and memory for the DataLoader settings")
    return (f"ml-platform goodput: input-bound on {instance_type or 'this instance'}: data wait was {share:.0f}% "
            f"of step time over the last {window / 60:g} min (threshold {threshold:g}%); fix: {fix}; datasets over "
            "50 GB preloaded onto EBS; images decoded on the GPU (NVIDIA DALI) where the CPU decodes them.")


def checkpoint_bound_hint(instance_type: Optional[str], share: float, threshold: float, window: float) -> str:
    """The line a job prints when its checkpoint saves cross the checkpoint-bound threshold."""
    return (f"ml-platform goodput: checkpoint-bound on {instance_type or 'this instance'}: saves took {share:.0f}% "
            f"of the time over the last save intervals (at least {window / 60:g} min; threshold {threshold:g}%); "
            "save less often (a save under a tenth of the time between saves), or save asynchronously "
            "(torch.distributed.checkpoint.async_save) so steps go on during the write.")


def _write_line(stream, line: str) -> None:
    """One write per line: the timer thread's lines never interleave with another thread's inside a line."""
    stream.write(line + "\n")
    stream.flush()


def _tick(ref: "weakref.ReferenceType[PhaseClock]", stop: threading.Event, interval: float) -> None:
    """The timer thread: ``publish()`` every ``interval`` seconds until ``close()``, or until the clock is gone (a
    clock dropped without ``close()`` stops its thread at the next tick)."""
    while not stop.wait(interval):
        clock = ref()
        if clock is None:
            return
        try:
            clock.publish()
        except Exception as error:  # a closed stream, a broken clock: the job trains on; said once
            clock._publish_failed(error)
        del clock


class PhaseClock:
    """The job's side of the ledger: it times its own phases with a monotonic clock (a lock and a few additions per
    step, no I/O). Use one per attempt, from the process's start::

        clock = PhaseClock()
        with clock.phase("restore"): state = load_checkpoint()
        for batch in clock.batches(loader):      # time blocked in next(loader) is data wait
            with clock.step(): train_step(batch)
        with clock.phase("checkpoint_save"): save(); clock.checkpoint_saved()

    ``summary()`` gives the seconds per phase (``PHASES``) for the attempt's record. A phase still in progress (a
    loader blocked in ``next()``, a step, a save) counts up to now in every reading. ``emit_windows`` starts a
    timer thread that prints the rolling shares every ``EMIT_SECONDS`` (``publish``); ``close()`` stops it.

    A framework's hooks see where its phases begin and end but hold no block around them: they ``switch`` from one
    to the next (the Lightning and Hugging Face adapters do), and each counts while it lasts, as a block does::

        on_step_begin:        clock.switch("step")
        on_step_end:          clock.switch("data_wait")   # until the next step: the framework fetches its batch
        on_evaluation_begin:  clock.switch("evaluation", counted_as=None)   # the time so far was no data wait
        on_evaluation_end:    clock.switch("data_wait")
        on_train_end:         clock.switch(None)

    A loader stalled between two hooks reads as data wait while it is stuck, not once the next hook fires.

    Phases nest: a save inside a step is step time too. ``tracking`` (the run record's own writes) counts only
    outside every other phase: nested in one, it is that phase's time. Time a caller timed itself (``add_step``,
    ``add``) counts when it is added: a wait not reported yet is not seen.
    """

    def __init__(self, now=time.monotonic, wall=time.time, *, window_seconds: float = WINDOW_SECONDS) -> None:
        self._now, self._wall = now, wall
        self._lock = threading.Lock()
        self._started = now()
        self._first_step: Optional[float] = None
        self._seconds = dict.fromkeys(PHASES, 0.0)
        # The phases in progress (name: nesting depth) and when they were last counted.
        self._active: dict[str, int] = {}
        self._accrued_at = self._started
        self._window = float(window_seconds)
        # (time, step, data_wait) at each reading: the trailing window starts at one of them.
        self._snapshots: deque = deque([(self._started, 0.0, 0.0)])
        # The saves' [start, end] (end None: in progress) and the last saves' starts: the checkpoint share's (the last
        # two; three kept, so a save a hook switched to that was none after all leaves the two before it).
        self._saves: deque = deque()
        self._save_starts: deque = deque(maxlen=3)
        self._queue: Optional[str] = None
        self._stream = None
        self._instance_type: Optional[str] = None
        self._thresholds: dict[str, Optional[float]] = {"DataWaitShare": INPUT_BOUND_PERCENT,
                                                         "CheckpointShare": CHECKPOINT_BOUND_PERCENT}
        self._hinted: dict[str, bool] = {}
        self._stop: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None
        self._failed = False
        self._published_at: Optional[float] = None
        # The phase the last switch() began and when (None: none).
        self._switched: Optional[tuple[str, float]] = None

    # --- counting ------------------------------------------------------------------------------------------------
    def _accrue(self, now: float) -> None:
        """Counts the time since the last count to the phases in progress (the caller holds the lock)."""
        elapsed = now - self._accrued_at
        if elapsed <= 0:
            return
        self._accrued_at = now
        names = [name for name in self._active if name != "tracking"]
        if "tracking" in self._active and (not names or "data_wait" in self._active):
            # The record's writes outside every other phase, or in the wait between two steps (a hook's gap): known
            # work, not a wait on data (slow MLflow calls must not read as an input-bound job). Nested in another
            # phase (a step, a save), they are that phase's time.
            names = ["tracking"]
        for name in names:
            self._seconds[name] += elapsed

    def _enter(self, names: tuple[str, ...]) -> None:
        with self._lock:
            now = self._now()
            self._accrue(now)
            self._entered(names, now)

    def _entered(self, names: tuple[str, ...], now: float) -> None:
        """Marks ``names`` in progress from ``now`` (the caller holds the lock and has counted up to ``now``)."""
        for name in names:
            self._active[name] = self._active.get(name, 0) + 1
        if self._active.get("checkpoint_save") == 1 and "checkpoint_save" in names:
            self._save_began(now, None)

    def _exit(self, names: tuple[str, ...]) -> None:
        with self._lock:
            now = self._now()
            self._accrue(now)
            self._exited(names, now)

    def _exited(self, names: tuple[str, ...], now: float) -> None:
        """Marks ``names`` ended at ``now`` (the caller holds the lock and has counted up to ``now``)."""
        for name in names:
            depth = self._active.get(name, 0) - 1
            if depth > 0:
                self._active[name] = depth
            else:
                self._active.pop(name, None)
                if name == "checkpoint_save" and self._saves and self._saves[-1][1] is None:
                    self._saves[-1][1] = now

    def _save_began(self, start: float, end: Optional[float]) -> None:
        """Notes a save (``end`` None: in progress) for the checkpoint share (the caller holds the lock)."""
        if not self._save_starts:  # the first save's interval runs from the first step (or the attempt's start)
            self._save_starts.append(self._first_step if self._first_step is not None else self._started)
        self._save_starts.append(start)
        self._saves.append([start, end])
        while self._saves and self._saves[0][1] is not None and self._saves[0][1] < start - MAX_WINDOW_SECONDS:
            self._saves.popleft()

    def _mark_first_step(self) -> None:
        if self._first_step is None:
            with self._lock:
                if self._first_step is not None:
                    return
                now = self._now()
                self._accrue(now)
                self._first_step = now
                # Startup: from the attempt's start to the first step, less the phases timed in it (a restore).
                self._seconds["startup"] = max(0.0, now - self._started - sum(
                    self._seconds[name] for name in TIMED_PHASES))

    def started_before(self, seconds: float) -> None:
        """The attempt began ``seconds`` before this clock was made: its startup, and its first full window, count
        from there (call it before the first step)."""
        with self._lock:
            shift = max(0.0, float(seconds))
            if self._snapshots and self._snapshots[0][0] == self._started and len(self._snapshots) == 1:
                self._snapshots[0] = (self._started - shift,) + tuple(self._snapshots[0][1:])
            self._started -= shift

    @staticmethod
    def _check_phase(name: str) -> None:
        if name not in TIMED_PHASES:
            raise ValueError(f"phase {name!r}: one of {', '.join(TIMED_PHASES)} (steps: step())")

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times ``name`` (``TIMED_PHASES``) for the duration of the block."""
        self._check_phase(name)
        self._enter((name,))
        try:
            yield
        finally:
            self._exit((name,))

    def add(self, name: str, seconds: float) -> None:
        """Counts ``seconds`` already spent in a phase the caller timed itself (``TIMED_PHASES``)."""
        self._check_phase(name)
        seconds = max(0.0, seconds)
        with self._lock:
            self._seconds[name] += seconds
            if name == "checkpoint_save" and seconds > 0:
                now = self._now()
                self._save_began(now - seconds, now)

    def add_step(self, seconds: float, data_wait: float = 0.0) -> None:
        """Counts a step (or its data wait) a framework's hooks timed: ``seconds`` of step time, ``data_wait`` of it
        blocked on the input pipeline (Hugging Face's Trainer fetches a batch between two of its step hooks)."""
        self._mark_first_step()
        seconds, data_wait = max(0.0, seconds), max(0.0, min(data_wait, seconds))
        with self._lock:
            self._seconds["step"] += seconds
            self._seconds["data_wait"] += data_wait
            self._seconds["since_checkpoint"] += seconds

    def now(self) -> float:
        """The clock's own time (monotonic seconds)."""
        return self._now()

    @contextmanager
    def step(self) -> Iterator[None]:
        """Times a training step (the block)."""
        self._mark_first_step()
        self._enter(_SWITCHED["step"])
        try:
            yield
        finally:
            self._exit(_SWITCHED["step"])

    def batches(self, loader: Iterable) -> Iterator:
        """The loader's batches; the time blocked on each is data wait, counted as step time (the GPU waits), and
        counted while it lasts: a loader stuck in ``next()`` reads as all data wait."""
        iterator = iter(loader)
        names = _SWITCHED["data_wait"]
        while True:
            self._mark_first_step()
            self._enter(names)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                self._exit(names)
            yield batch

    # --- a framework's hooks ---------------------------------------------------------------------------------------
    def switch(self, name: Optional[str], *, counted_as: Any = _AS_BEGUN) -> float:
        """Ends the phase the last ``switch`` began and begins ``name``, both now: for a framework's hooks, which see
        where a phase begins and ends but hold no block around it. ``name``: one of ``SWITCH_PHASES`` (None: none
        begins), counted while it lasts as its block is: ``"step"`` as ``step()`` (the first one ends startup),
        ``"data_wait"`` as ``batches()`` counts a blocked ``next()`` (data wait, and step time), ``"restore"``,
        ``"checkpoint_save"`` and ``"evaluation"`` as ``phase()``; it nests with blocks as they nest.

        ``counted_as``: what the phase that ends was, where a hook learns it only at its end (an evaluation with no
        hook at its start): its time from the last ``switch`` on counts as that phase instead (None: as no phase),
        in the counters and in the trailing window's readings alike (lines already printed stay as they were).
        Returns the seconds of the phase that ended (0 with none)."""
        if name is not None and name not in _SWITCHED:
            raise ValueError(f"switch({name!r}): one of {', '.join(SWITCH_PHASES)}, or None")
        if counted_as is not _AS_BEGUN and counted_as is not None and counted_as not in _SWITCHED:
            raise ValueError(f"counted_as={counted_as!r}: one of {', '.join(SWITCH_PHASES)}, or None")
        if name == "step":
            self._mark_first_step()
        with self._lock:
            now = self._now()
            self._accrue(now)
            seconds = 0.0
            if self._switched is not None:
                began_as, since = self._switched
                seconds = max(0.0, now - since)
                self._exited(_SWITCHED[began_as], now)
                if counted_as is not _AS_BEGUN and counted_as != began_as:
                    self._recount(began_as, counted_as, since, now)
            self._switched = None if name is None else (name, now)
            if name is not None:
                self._entered(_SWITCHED[name], now)
        return seconds

    @property
    def switched(self) -> Optional[str]:
        """The phase the last ``switch`` began, while it lasts (None: none)."""
        switched = self._switched
        return None if switched is None else switched[0]

    def _recount(self, began_as: str, counted_as: Optional[str], since: float, now: float) -> None:
        """Moves the time from ``since`` to ``now``, counted as ``began_as``, to ``counted_as`` (None: to no phase),
        and the window's readings taken meanwhile with it (the caller holds the lock)."""
        seconds = now - since
        before, after = _SWITCHED[began_as], (() if counted_as is None else _SWITCHED[counted_as])
        for name in before:
            if name not in after:  # since_checkpoint may have been reset meanwhile: never below 0
                self._seconds[name] = max(0.0, self._seconds[name] - seconds)
        for name in after:
            if name not in before:
                self._seconds[name] += seconds
        steps = ("step" in after) - ("step" in before)
        waits = ("data_wait" in after) - ("data_wait" in before)
        if steps or waits:
            for index in range(len(self._snapshots) - 1, -1, -1):
                at, step, wait = self._snapshots[index]
                if at <= since:
                    break
                moved = min(at, now) - since
                self._snapshots[index] = (at, step + steps * moved, wait + waits * moved)
        if began_as == "checkpoint_save":  # no save after all
            for index in range(len(self._saves) - 1, -1, -1):
                if self._saves[index][0] == since:
                    del self._saves[index]
                    break
            if self._save_starts and self._save_starts[-1] == since:
                self._save_starts.pop()
        elif counted_as == "checkpoint_save" and seconds > 0:
            self._save_began(since, now)

    def checkpoint_saved(self) -> None:
        """A checkpoint holds every step so far: an interruption from now loses only later steps."""
        with self._lock:
            self._accrue(self._now())
            self._seconds["since_checkpoint"] = 0.0

    def summary(self) -> dict[str, float]:
        """Seconds per phase (``PHASES``), those in progress up to now; ``tracking`` only once it has counted."""
        with self._lock:
            self._accrue(self._now())
            seconds = dict(self._seconds)
        return {name: round(value, 3) for name, value in seconds.items() if name != "tracking" or value}

    # --- the rolling shares ----------------------------------------------------------------------------------------
    def window(self, now: Optional[float] = None) -> Optional[dict[str, float]]:
        """The shares (percent) of the trailing window, phases in progress counted up to ``now`` (the clock's time;
        default: now), or None until the attempt has run one full window (``window_seconds``): a job prints nothing
        before.

        - ``DataWaitShare``: data wait of the step time (absent when steps, their waits included, fill less than
          ``MIN_STEP_SHARE`` of the window: after a restore, in an evaluation, the few steps' first fetches are no
          input-bound job; a stalled loader is step time and fills it), and ``ProductiveShare``:
          steps less their data wait, of the wall time. The window starts at the latest earlier reading (a
          ``window``/``publish`` call, or the attempt's start) at least ``window_seconds`` back: a reading every
          EMIT_SECONDS makes it that long, give or take a reading's lateness.
        - ``CheckpointShare``: checkpoint saves of the wall time, over the window stretched to a whole number of save
          intervals (the last two saves' starts apart; the first save's, from the first step), at most a day: saves
          every C seconds of d seconds read d/C at any moment, where a bare window would read one save or two (90 s
          every 10 minutes: 10% or 20% of 15 minutes, for 13% on average), and a rare long save reads as its share of
          its interval, not of the window after it. Each save's own start and end count, not the readings'.
        """
        with self._lock:
            now = max(self._now() if now is None else now, self._accrued_at)
            self._accrue(now)
            current = (now, self._seconds["step"], self._seconds["data_wait"])
            start = now - self._window
            snapshots = self._snapshots
            while len(snapshots) > 1 and snapshots[1][0] <= start:
                snapshots.popleft()
            base = snapshots[0] if snapshots[0][0] <= start else None
            if now > snapshots[-1][0]:
                snapshots.append(current)
            span = self._window
            if len(self._save_starts) >= 2 and self._save_starts[-1] > self._save_starts[-2]:
                interval = self._save_starts[-1] - self._save_starts[-2]
                span = min(MAX_WINDOW_SECONDS, max(span, math.ceil(self._window / interval) * interval))
            since = max(now - span, self._started)
            saves = sum(max(0.0, min(now, now if end is None else end) - max(begin, since))
                        for begin, end in self._saves)
        if base is None:
            return None
        elapsed = now - base[0]
        step, data_wait = current[1] - base[1], current[2] - base[2]
        shares = {"ProductiveShare": 100 * (step - data_wait) / elapsed,
                  "CheckpointShare": 100 * saves / (now - since)}
        if step >= MIN_STEP_SHARE * elapsed and step > 0:
            shares["DataWaitShare"] = 100 * data_wait / step
        return {name: round(min(100.0, max(0.0, value)), 2) for name, value in shares.items()}

    def emit(self, queue: str, stream=None, now: Optional[float] = None) -> Optional[dict]:
        """Prints the window's shares (``window(now)``) as one embedded-metric-format line (dimension ``Queue``,
        timestamp the wall time of ``now``) to ``stream`` (stdout: the job's log stream); returns the document
        printed, None (nothing printed) before the attempt has run one full window."""
        at = self._now() if now is None else now
        shares = self.window(at)
        if shares is None:
            return None
        wall = self._wall() - (self._now() - at) if now is not None else self._wall()
        document = {"_aws": {"Timestamp": int(wall * 1000), "CloudWatchMetrics": [{
            "Namespace": GOODPUT_NAMESPACE, "Dimensions": [["Queue"]],
            "Metrics": [{"Name": name, "Unit": "Percent"} for name in WINDOW_METRICS if name in shares]}]},
            "Queue": queue, **shares}
        _write_line(stream or sys.stdout, json.dumps(document, separators=(",", ":")))
        return document

    # --- the timer ---------------------------------------------------------------------------------------------------
    def emit_windows(self, queue: str, stream=None, *, instance_type: Optional[str] = None,
                     env: Optional[Mapping[str, str]] = None, interval: float = EMIT_SECONDS) -> None:
        """From now on, ``publish()`` every ``interval`` seconds on a daemon thread: one line per tick with the
        shares of the trailing window (``ML_PLATFORM_GOODPUT_WINDOW_SECONDS`` in ``env``, default WINDOW_SECONDS;
        ``env`` None: the process's), to ``stream`` (stdout). Nothing is printed until the attempt has run one full
        window. ``instance_type`` (else ``ML_PLATFORM_INSTANCE_TYPE``) names the loader settings of the input-bound
        hint. ``interval`` 0 or less: no thread (a test calls ``publish`` itself). Called again, it restarts."""
        env = os.environ if env is None else env
        self.close()
        with self._lock:
            self._queue, self._stream = queue, stream
            self._window = _env_window(env)
            self._instance_type = instance_type or env.get("ML_PLATFORM_INSTANCE_TYPE") or None
            self._thresholds = {"DataWaitShare": _env_percent(env, INPUT_BOUND_ENV, INPUT_BOUND_PERCENT),
                                "CheckpointShare": _env_percent(env, CHECKPOINT_BOUND_ENV, CHECKPOINT_BOUND_PERCENT)}
        if interval > 0:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=_tick, args=(weakref.ref(self), self._stop, float(interval)),
                                            name=f"ml-platform-goodput-{queue}", daemon=True)
            self._thread.start()

    def publish(self, now: Optional[float] = None) -> Optional[dict]:
        """One tick of the timer: after ``emit_windows``, prints the window's line (``emit``) and, when a share
        crosses its threshold, one line to stderr naming the fix (once per crossing: said again only after the
        share fell to REARM_FRACTION of the threshold). Returns the document printed (None: nothing printed)."""
        if self._queue is None:
            return None
        at = self._now() if now is None else now
        if self._published_at is not None and at <= self._published_at:
            return None  # a tick at a time already published (a clock that did not move) prints nothing again
        self._published_at = at
        document = self.emit(self._queue, self._stream, at)
        if document is not None:
            for name, threshold in self._thresholds.items():
                share = document.get(name)
                if threshold is None or share is None:
                    continue
                if share > threshold and not self._hinted.get(name):
                    self._hinted[name] = True
                    hint = (input_bound_hint(self._instance_type, share, threshold, self._window)
                            if name == "DataWaitShare"
                            else checkpoint_bound_hint(self._instance_type, share, threshold, self._window))
                    _write_line(sys.stderr, hint)
                elif share <= threshold * REARM_FRACTION:
                    self._hinted[name] = False
        return document

    def close(self) -> None:
        """Stops the timer thread (idempotent; the counters stay readable)."""
        stop, thread = self._stop, self._thread
        self._stop = self._thread = None
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _publish_failed(self, error: Exception) -> None:
        if not self._failed:
            self._failed = True
            print(f"ml-platform goodput: the metrics line could not be printed ({error}); training goes on",
                  file=sys.stderr, flush=True)
