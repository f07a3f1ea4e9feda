"""The job's side of the goodput ledger: ``PhaseClock`` times the job's own phases (a counter per phase, no I/O per
step) and prints its live shares as embedded-metric-format lines, the data of a training queue's goodput alarms.
Standard library only. ``ml_platform_job.goodput`` re-exports everything here.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

# The job's phases as PhaseClock times them (step includes the data wait inside it).
PHASES = ("startup", "restore", "step", "data_wait", "checkpoint_save", "evaluation", "since_checkpoint")
# The live metrics a job prints (embedded metric format: CloudWatch Logs extracts them from the job's log stream,
# so the job needs no cloudwatch:PutMetricData). One window every METRIC_WINDOW_SECONDS.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
GOODPUT_NAMESPACE = "MLPlatform/Goodput"
METRIC_WINDOW_SECONDS = 300
WINDOW_METRICS = ("ProductiveShare", "DataWaitShare", "CheckpointShare")


class PhaseClock:
    """The job's side of the ledger: it times its own phases with a monotonic clock (a few additions per step,
    no I/O). Use one per attempt, from the process's start::

        clock = PhaseClock()
        with clock.phase("restore"): state = load_checkpoint()
        for batch in clock.batches(loader):      # time blocked in next(loader) is data wait
            with clock.step(): train_step(batch)
        with clock.phase("checkpoint_save"): save(); clock.checkpoint_saved()

    ``summary()`` gives the seconds per phase (``PHASES``) for the attempt's record.
    """

    def __init__(self, now=time.monotonic, wall=time.time) -> None:
        self._now, self._wall = now, wall
        self._started = now()
        self._first_step: Optional[float] = None
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self._in_step = False
        self._window_started, self._window_seconds = self._started, dict(self._seconds)
        self._queue: Optional[str] = None
        self._stream = None

    def emit_windows(self, queue: str, stream=None) -> None:
        """From now on, ``emit(queue)`` at the end of the first step after each METRIC_WINDOW_SECONDS: checked on
        step boundaries (no thread, no timer; a job that stops stepping prints nothing, and its alarms see no data)."""
        self._queue, self._stream = queue, stream

    def _mark_first_step(self) -> None:
        if self._first_step is None:
            self._first_step = self._now()
            # Startup: from the process's start to the first step, less the phases timed in it (a restore).
            self._seconds["startup"] = max(0.0, self._first_step - self._started - self._seconds["restore"]
                                           - self._seconds["evaluation"] - self._seconds["checkpoint_save"])

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in ("restore", "checkpoint_save", "evaluation"):
            raise ValueError(f"phase {name!r}: one of restore, checkpoint_save, evaluation (steps: step())")
        started = self._now()
        try:
            yield
        finally:
            self._seconds[name] += self._now() - started

    def add(self, name: str, seconds: float) -> None:
        """Counts ``seconds`` already spent in a phase the caller timed itself (restore, checkpoint_save, evaluation)."""
        if name not in ("restore", "checkpoint_save", "evaluation"):
            raise ValueError(f"phase {name!r}: one of restore, checkpoint_save, evaluation (steps: step())")
        self._seconds[name] += max(0.0, seconds)

    def add_step(self, seconds: float, data_wait: float = 0.0) -> None:
        """Counts a step (or its data wait) a framework's hooks timed: ``seconds`` of step time, ``data_wait`` of it
        blocked on the input pipeline (Hugging Face's Trainer fetches a batch between two of its step hooks)."""
        self._mark_first_step()
        seconds, data_wait = max(0.0, seconds), max(0.0, min(data_wait, seconds))
        self._seconds["step"] += seconds
        self._seconds["data_wait"] += data_wait
        self._seconds["since_checkpoint"] += seconds
        if self._queue is not None and self._now() - self._window_started >= METRIC_WINDOW_SECONDS:
            self.emit(self._queue, self._stream)

    def now(self) -> float:
        """The clock's own time (monotonic seconds)."""
        return self._now()

    @contextmanager
    def step(self) -> Iterator[None]:
        self._mark_first_step()
        started = self._now()
        self._in_step = True
        try:
            yield
        finally:
            self._in_step = False
            ended = self._now()
            self._seconds["step"] += ended - started
            self._seconds["since_checkpoint"] += ended - started
            if self._queue is not None and ended - self._window_started >= METRIC_WINDOW_SECONDS:
                self.emit(self._queue, self._stream)

    def batches(self, loader: Iterable) -> Iterator:
        """The loader's batches; the time blocked on each is data wait, counted as step time (the GPU waits)."""
        iterator = iter(loader)
        while True:
            self._mark_first_step()
            started = self._now()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                waited = self._now() - started
                self._seconds["data_wait"] += waited
                self._seconds["step"] += waited
                self._seconds["since_checkpoint"] += waited
            yield batch

    def checkpoint_saved(self) -> None:
        """A checkpoint holds every step so far: an interruption from now loses only later steps."""
        self._seconds["since_checkpoint"] = 0.0

    def summary(self) -> dict[str, float]:
        return {name: round(value, 3) for name, value in self._seconds.items()}

    def window(self) -> Optional[dict[str, float]]:
        """The shares of the time since the last window (percent): productive steps (data wait excluded) and
        checkpoint saves of the wall time, data wait of the step time (None with no step in it). Starts the next."""
        now = self._now()
        elapsed = now - self._window_started
        delta = {name: self._seconds[name] - self._window_seconds[name] for name in PHASES}
        self._window_started, self._window_seconds = now, dict(self._seconds)
        if elapsed <= 0:
            return None
        shares = {"ProductiveShare": 100 * (delta["step"] - delta["data_wait"]) / elapsed,
                  "CheckpointShare": 100 * delta["checkpoint_save"] / elapsed}
        if delta["step"] > 0:
            shares["DataWaitShare"] = 100 * delta["data_wait"] / delta["step"]
        return {name: round(min(100.0, max(0.0, value)), 2) for name, value in shares.items()}

    def emit(self, queue: str, stream=None) -> Optional[dict]:
        """Print the window's shares as one embedded-metric-format line (dimension ``Queue``) to ``stream``
        (stdout: the job's log stream). Call it every METRIC_WINDOW_SECONDS; returns the document printed."""
        shares = self.window()
        if shares is None:
            return None
        document = {"_aws": {"Timestamp": int(self._wall() * 1000), "CloudWatchMetrics": [{
            "Namespace": GOODPUT_NAMESPACE, "Dimensions": [["Queue"]],
            "Metrics": [{"Name": name, "Unit": "Percent"} for name in WINDOW_METRICS if name in shares]}]},
            "Queue": queue, **shares}
        print(json.dumps(document, separators=(",", ":")), file=stream or sys.stdout, flush=True)
        return document
