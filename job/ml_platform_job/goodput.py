"""Where every paid GPU second went: a goodput ledger per attempt, job, queue or month. Standard library only.

An attempt's paid instance time is split into buckets that add up to it exactly. Paid time runs from the instance's
boot (the first job on it) or its previous job's end (a reused instance) to this job's end, plus the instance's
scale-in after it; the job's process runs from its own start to its end:

- ``startup``: before the job's process, the instance's boot (first job on it) and the image pull, then the job's own
  startup phase (process start to first step: imports, dataset mount or copy);
- ``restore``: loading the checkpoint;
- ``productive``: inside training steps, not waiting on data, and not thrown away later;
- ``data_wait``: inside steps, blocked on the input pipeline (time in ``next(loader)``: no GPU counter says why a
  GPU idles, so the job times it itself, as profilers do);
- ``checkpoint_save`` and ``evaluation``: the job's own phases;
- ``tracking``: the run record's own writes (MLflow, the record next to the checkpoints);
- ``lost``: step time since the last checkpoint of an attempt that a reclaim, a stop or a failure ended (redone);
- ``other``: time inside the job's process that no phase timed (the "other" of Google's goodput taxonomy);
- ``idle``: paid instance time with no job of the run on it: a reused instance waiting before this job's image pull,
  the scale-in after it. Never time inside the job.

Weights: the ledger's seconds are GPU-seconds: an attempt's seconds x its nodes x the GPUs the job used per node (the
GPUs visible to it, else its share of the instance's GPUs, else 1 for a CPU-only or unknown job), so an hour of an
8-GPU job weighs eight of a 1-GPU job's. Its dollars are each attempt's own rate (Spot as paid where the record has
a rate, else the list price; per node) x its GPU share x its nodes x its paid time: what the attempt cost.

Anchors: Google's ML Productivity Goodput (badput by initialization, data loading, checkpointing, disruption, other)
and Meta's Effective Training Time. The job times its phases with ``PhaseClock`` (a counter per phase, no I/O per
step); the platform adds what the job cannot see (the instance's boot, its scale-in) in ``Attempt.from_clock`` and
``passport_attempts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

BUCKETS = ("productive", "data_wait", "startup", "restore", "checkpoint_save", "evaluation", "tracking", "lost",
           "other", "idle")
# Clocks of the instance and of the job differ by a little: a job's phases may exceed its span by this much.
CLOCK_SLACK_SECONDS = 1.0

from .phase_clock import (GOODPUT_NAMESPACE, METRIC_WINDOW_SECONDS, PHASES,  # noqa: E402,F401 (re-exported)
                          WINDOW_METRICS, PhaseClock)

# The phases an attempt's record may carry: PhaseClock's, and "tracking" (the record's own writes) whether or not
# this release's PhaseClock times it yet.
RECORDED_PHASES = tuple(PHASES) + tuple(name for name in ("tracking",) if name not in PHASES)
_TIMES = ("paid_seconds", "startup_seconds", "restore_seconds", "step_seconds", "data_wait_seconds",
          "checkpoint_save_seconds", "evaluation_seconds", "tracking_seconds", "lost_seconds", "before_job_seconds",
          "usd_per_hour")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Attempt:
    """One attempt's times in seconds of one node's wall clock, and its weights.

    ``paid_seconds`` = ``before_job_seconds`` (boot and image pull: startup) + the job's process (``job_seconds``,
    its start to its end) + idle (the rest: paid, no job of the run on the instance). Inside the job: the phases
    (``startup_seconds`` the job's own startup phase, restore, step, checkpoint_save, evaluation, tracking) and
    ``other``, the job's time no phase timed. ``step_seconds`` includes ``data_wait_seconds`` and, when the attempt
    was interrupted or failed, ``lost_seconds`` (step time since its last checkpoint). ``job_seconds=None``: the
    job's span is its timed phases (no ``other``; a simulated attempt), the rest of the paid time idle; a recorded
    attempt gives it. ``gpus``: the GPUs the job used per node, the ledger's weight (1 for a CPU-only or unknown
    job); ``usd_per_hour``: one node's rate, x ``gpu_share`` x ``nodes`` for the attempt's dollars."""

    paid_seconds: float
    startup_seconds: float = 0.0
    restore_seconds: float = 0.0
    step_seconds: float = 0.0
    data_wait_seconds: float = 0.0
    checkpoint_save_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    tracking_seconds: float = 0.0
    lost_seconds: float = 0.0
    before_job_seconds: float = 0.0
    job_seconds: Optional[float] = None
    usd_per_hour: float = 0.0  # per node, the attempt's own rate (Spot as paid, or the list price)
    nodes: int = 1
    gpu_share: float = 1.0
    gpus: float = 1.0

    def __post_init__(self) -> None:
        for name in _TIMES + (("job_seconds",) if self.job_seconds is not None else ()):
            value = getattr(self, name)
            if not (_finite(value) and value >= 0):
                raise ValueError(f"{name}={value!r}: a finite number of 0 or more")
        if not (isinstance(self.nodes, int) and not isinstance(self.nodes, bool) and self.nodes >= 1):
            raise ValueError(f"nodes={self.nodes!r}: a whole number of 1 or more")
        if not (_finite(self.gpu_share) and 0 < self.gpu_share <= 1):
            raise ValueError(f"gpu_share={self.gpu_share!r}: more than 0 and at most 1")
        if not (_finite(self.gpus) and self.gpus > 0):
            raise ValueError(f"gpus={self.gpus!r}: more than 0 (the GPUs the job used per node; 1 for a CPU job)")
        if self.data_wait_seconds > self.step_seconds or self.lost_seconds > self.step_seconds:
            raise ValueError(f"data_wait_seconds={self.data_wait_seconds:g} and lost_seconds={self.lost_seconds:g}: "
                             f"each at most step_seconds={self.step_seconds:g} (both are parts of the step time)")
        phases = self.phase_seconds
        if self.job_seconds is not None and phases > self.job_seconds + CLOCK_SLACK_SECONDS:
            raise ValueError(f"job_seconds={self.job_seconds:g}: less than the job's own phases ({phases:g} s); the "
                             "job's recorded start and end must span its phases: check which clock each came from")
        spanned = self.before_job_seconds + max(phases, self.job_seconds or 0.0)
        if spanned > self.paid_seconds + CLOCK_SLACK_SECONDS:
            raise ValueError(f"paid_seconds={self.paid_seconds:g}: less than the time before the job and the job's "
                             f"own ({spanned:g} s); the instance's paid time must span the job's: check which clock "
                             "each came from")

    @property
    def phase_seconds(self) -> float:
        """The job's timed phases (step time includes the data wait and the lost steps)."""
        return (self.startup_seconds + self.restore_seconds + self.step_seconds + self.checkpoint_save_seconds
                + self.evaluation_seconds + self.tracking_seconds)

    @property
    def other_seconds(self) -> float:
        """Time inside the job's process no phase timed (0 without ``job_seconds``)."""
        return 0.0 if self.job_seconds is None else max(0.0, self.job_seconds - self.phase_seconds)

    @property
    def idle_seconds(self) -> float:
        """Paid time outside the job and before it, never negative: the instance with no job of the run on it."""
        return max(0.0, self.paid_seconds - self.before_job_seconds - max(self.phase_seconds, self.job_seconds or 0.0))

    @property
    def weight(self) -> float:
        """GPU-seconds per second of this attempt: its nodes x the GPUs the job used per node."""
        return self.nodes * self.gpus

    @classmethod
    def from_clock(cls, timings: Mapping[str, float], *, paid_seconds: float, before_job_seconds: float = 0.0,
                   interrupted: bool, usd_per_hour: float, nodes: int = 1, gpu_share: float = 1.0,
                   job_seconds: Optional[float] = None, gpus: float = 1.0) -> "Attempt":
        """An attempt from the job's ``PhaseClock.summary()`` (``RECORDED_PHASES``) and the platform's records:
        ``paid_seconds`` the instance's paid time for it, ``before_job_seconds`` the part of it before the job's
        process spent starting it (boot, image pull: startup), ``job_seconds`` the process's start to its end (None:
        its phases; see ``Attempt``), ``interrupted`` when a reclaim, a stop or a failure ended it (its step time since
        the last checkpoint is then lost)."""
        unknown = set(timings) - set(RECORDED_PHASES)
        if unknown:
            raise ValueError(f"phases: unknown {sorted(unknown)}; known: {list(RECORDED_PHASES)}")
        values = {}
        for name in RECORDED_PHASES:
            value = timings.get(name, 0.0)
            if not (_finite(value) and value >= 0):
                raise ValueError(f"phases.{name}={value!r}: a finite number of 0 or more (seconds)")
            values[name] = float(value)
        step = values["step"]
        return cls(paid_seconds=paid_seconds, startup_seconds=values["startup"], restore_seconds=values["restore"],
                   step_seconds=step, data_wait_seconds=values["data_wait"],
                   checkpoint_save_seconds=values["checkpoint_save"], evaluation_seconds=values["evaluation"],
                   tracking_seconds=values["tracking"],
                   lost_seconds=min(step, values["since_checkpoint"]) if interrupted else 0.0,
                   before_job_seconds=before_job_seconds, job_seconds=job_seconds, usd_per_hour=usd_per_hour,
                   nodes=nodes, gpu_share=gpu_share, gpus=gpus)


@dataclass(frozen=True)
class Ledger:
    """GPU-seconds and dollars per bucket; ``seconds`` add up to the paid instance time x nodes x GPUs used."""

    seconds: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    usd: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    attempts: int = 0

    @property
    def paid_seconds(self) -> float:
        """Paid GPU-seconds (the buckets' sum)."""
        return sum(self.seconds.values())

    @property
    def gpu_hours(self) -> float:
        return self.paid_seconds / 3600

    @property
    def paid_usd(self) -> float:
        return sum(self.usd.values())

    @property
    def goodput(self) -> Optional[float]:
        """Productive GPU-seconds over paid GPU-seconds; None when nothing was paid."""
        return self.seconds["productive"] / self.paid_seconds if self.paid_seconds else None

    def share(self, bucket: str) -> Optional[float]:
        return self.seconds[bucket] / self.paid_seconds if self.paid_seconds else None

    def __add__(self, other: "Ledger") -> "Ledger":
        return Ledger({b: self.seconds[b] + other.seconds[b] for b in BUCKETS},
                      {b: self.usd[b] + other.usd[b] for b in BUCKETS}, self.attempts + other.attempts)

    def to_dict(self) -> dict:
        """``attempts``, ``gpu_hours``, ``paid_usd``, ``goodput`` and per bucket ``gpu_hours``, ``usd`` and ``share``
        (0.13.0 removed the deprecated ``paid_hours`` and per-bucket ``hours``: read ``gpu_hours``)."""
        gpu_hours = round(self.paid_seconds / 3600, 4)
        buckets = {}
        for b in BUCKETS:
            hours = round(self.seconds[b] / 3600, 4)
            buckets[b] = {"gpu_hours": hours, "usd": round(self.usd[b], 4),
                          "share": None if self.share(b) is None else round(self.share(b), 4)}
        return {"attempts": self.attempts, "gpu_hours": gpu_hours,
                "paid_usd": round(self.paid_usd, 4),
                "goodput": None if self.goodput is None else round(self.goodput, 4), "buckets": buckets}


def attempt_ledger(attempt: Attempt) -> Ledger:
    """One attempt's buckets in GPU-seconds and dollars. Inside the job: its seconds x ``Attempt.weight`` (its nodes x
    the GPUs it used) and x its rate x its GPU share x its nodes. Before the job (boot, image pull: in startup) and
    idle (the wait for it on a reused instance, the scale-in after it): the whole instance is paid then with no other
    job on it, so all its GPUs and its whole rate (a 1-GPU job first on a 4-GPU instance pays the boot of all four).
    The lost step time is taken from productive and data-wait time in their proportion (the redone steps waited on
    data as the others did); other is the job's untimed time."""
    step, lost = attempt.step_seconds, attempt.lost_seconds
    kept = 1 - lost / step if step else 0.0
    inside = {"productive": (step - attempt.data_wait_seconds) * kept, "data_wait": attempt.data_wait_seconds * kept,
              "startup": attempt.startup_seconds, "restore": attempt.restore_seconds,
              "checkpoint_save": attempt.checkpoint_save_seconds, "evaluation": attempt.evaluation_seconds,
              "tracking": attempt.tracking_seconds, "lost": lost, "other": attempt.other_seconds, "idle": 0.0}
    instance = dict.fromkeys(BUCKETS, 0.0)
    instance.update(startup=attempt.before_job_seconds, idle=attempt.idle_seconds)
    job_rate = attempt.usd_per_hour * attempt.gpu_share * attempt.nodes / 3600
    instance_rate = attempt.usd_per_hour * attempt.nodes / 3600
    instance_weight = attempt.weight / attempt.gpu_share
    return Ledger({b: inside[b] * attempt.weight + instance[b] * instance_weight for b in BUCKETS},
                  {b: inside[b] * job_rate + instance[b] * instance_rate for b in BUCKETS}, 1)


def ledger(attempts: Iterable[Attempt]) -> Ledger:
    """The sum of the attempts' ledgers: a run, a queue's month, any grouping the caller chooses."""
    total = Ledger()
    for attempt in attempts:
        total = total + attempt_ledger(attempt)
    return total


# --- what to change when a job is input-bound -------------------------------------------------------------------

# PyTorch DataLoader: prefetch_factor batches loaded in advance by each worker (default 2 with workers), pin_memory
# for faster host-to-GPU copies. https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader
PREFETCH_FACTOR = 2
# The story's heuristics (../shared/seed), labelled as such: workers about 70% of the vCPUs; pinned memory caused
# out-of-memory errors on a 32 GB host; datasets over 50 GB preloaded onto EBS rather than read from S3.
WORKER_SHARE_OF_VCPUS = 0.7
PIN_MEMORY_MIN_GIB = 32
EBS_PRELOAD_MIN_GB = 50


@dataclass(frozen=True)
class LoaderSettings:
    num_workers: int  # per training process (one process per GPU)
    prefetch_factor: int
    pin_memory: bool
    persistent_workers: bool
    ebs_preload: Optional[bool]  # None: the dataset's size is unknown
    notes: tuple[str, ...]

    def dataloader_kwargs(self) -> dict:
        """The keyword arguments for ``torch.utils.data.DataLoader``."""
        return {"num_workers": self.num_workers, "prefetch_factor": self.prefetch_factor if self.num_workers else None,
                "pin_memory": self.pin_memory, "persistent_workers": self.persistent_workers and self.num_workers > 0}


def loader_settings(*, vcpus: int, gpus: int, memory_gib: float, dataset_gb: Optional[float] = None,
                    decodes_images_on_cpu: bool = False) -> LoaderSettings:
    """Data-loader settings for an instance: workers about 70% of its vCPUs shared by its training processes,
    prefetch 2, pinned memory except on hosts of 32 GiB or less, EBS preload for datasets over 50 GB."""
    for name, value in (("vcpus", vcpus), ("gpus", gpus)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}={value!r}: a whole number of 1 or more")
    if not memory_gib > 0:
        raise ValueError(f"memory_gib={memory_gib!r}: more than 0")
    workers = max(1, math.floor(vcpus * WORKER_SHARE_OF_VCPUS / gpus))
    pin = memory_gib > PIN_MEMORY_MIN_GIB
    notes = [f"num_workers {workers}: about {WORKER_SHARE_OF_VCPUS:.0%} of {vcpus} vCPUs over {gpus} training "
             "process(es) (the story's heuristic; more workers than cores contend)",
             f"prefetch_factor {PREFETCH_FACTOR} (PyTorch's default with workers)"]
    notes.append("pin_memory on: faster host-to-GPU copies" if pin else
                 f"pin_memory off: {memory_gib:g} GiB host (pinned memory ran out of memory on a 32 GB host)")
    preload = None if dataset_gb is None else dataset_gb > EBS_PRELOAD_MIN_GB
    if preload:
        notes.append(f"{dataset_gb:g} GB dataset: preload it onto EBS (a DatasetSnapshotBuilder snapshot) rather "
                     "than read it from S3 on every start")
    if decodes_images_on_cpu:
        notes.append("images decoded on the CPU: decode on the GPU (NVIDIA DALI) if the workers cannot keep up")
    return LoaderSettings(workers, PREFETCH_FACTOR, pin, True, preload, tuple(notes))


def loader_settings_for(instance_type: str, *, dataset_gb: Optional[float] = None,
                        decodes_images_on_cpu: bool = False) -> LoaderSettings:
    """``loader_settings`` for a GPU type of the catalog."""
    from .instances import INSTANCE_SHAPES

    entry = INSTANCE_SHAPES.get(instance_type)
    if entry is None:
        raise ValueError(f"instance_type={instance_type!r}: not a GPU type of the catalog; give vcpus, gpus and "
                         "memory_gib to loader_settings()")
    return loader_settings(vcpus=entry.vcpus, gpus=entry.gpus, memory_gib=entry.memory_gib,
                           dataset_gb=dataset_gb, decodes_images_on_cpu=decodes_images_on_cpu)


# --- a recorded run's ledger ---------------------------------------------------------------------------------------

OUTCOMES = ("running", "stopped", "lost", "finished", "failed", "health_stopped")
# Outcomes whose steps since the last checkpoint are redone by the next attempt (or by nobody: a failed run's, a run a
# health rule stopped: its steps since the last checkpoint made a NaN or stalled state, or nothing that is kept).
INTERRUPTED = ("stopped", "lost", "failed", "health_stopped")
STARTUP_LOWER_BOUND = ("startup is a lower bound: an attempt without its host's boot (host.booted_at) or its previous "
                       "job's end on the host has the instance's time before the job (boot, image pull) in no "
                       "attempt's paid time")
WINDOW_NOTE = ("the job's phases carry no timestamps: an attempt the window cuts gets its job's buckets in "
               "proportion to the job's time inside the window (its boot, waits and scale-in clipped by their times)")


def _ids(numbers: list) -> str:
    return ", ".join(str(n) for n in numbers)


def _when(value: object, where: str) -> Optional[float]:
    """Epoch seconds of a record's ISO 8601 time (UTC when it names no zone); None when absent."""
    from datetime import datetime, timezone

    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}={value!r}: not an ISO 8601 time")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{where}={value!r}: not an ISO 8601 time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def _required(record: Mapping, name: str) -> float:
    if record.get(name) is None:
        raise ValueError(f"{name}: missing")
    return _when(record[name], name)  # type: ignore[return-value]


@dataclass(frozen=True)
class _Spans:
    """An attempt's paid time as spans (epoch seconds): idle before the job, startup before it, the job, scale-in."""

    paid_start: float
    startup_start: float
    job_start: float
    job_end: float
    paid_end: float
    boot_known: bool
    pull_known: bool


# The phases that lie inside the job's span, one after another (data_wait is part of step; since_checkpoint too).
JOB_PHASES = ("startup", "restore", "step", "checkpoint_save", "evaluation", "tracking")
# The first job on an instance pays its boot only when it began within this long of the boot: later, the instance ran
# something no record names (a job without the tracking helper, a fleet's long-lived host), and the boot is not this
# job's. Boot, the ECS agent's registration and Batch's placement take minutes, not half an hour.
BOOT_TO_FIRST_JOB_SECONDS = 30 * 60


def _spans(record: Mapping) -> _Spans:
    outcome = record.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r}: one of {OUTCOMES}")
    job_start = _required(record, "started_at")
    job_end = _required(record, "last_seen_at" if outcome == "running" else "ended_at")
    if job_end < job_start - CLOCK_SLACK_SECONDS:
        raise ValueError(f"{'last_seen_at' if outcome == 'running' else 'ended_at'}: before started_at")
    job_end = max(job_end, job_start)
    host = record.get("host") or {}
    if not isinstance(host, Mapping):
        raise ValueError(f"host={host!r}: a mapping of the instance's times")
    booted = _when(host.get("booted_at"), "host.booted_at")
    previous = _when(host.get("previous_job_ended_at"), "host.previous_job_ended_at")
    pull = _when(host.get("image_pull_started_at"), "host.image_pull_started_at")
    container = _when(host.get("container_started_at"), "host.container_started_at")
    launch = pull if pull is not None else container
    launch = None if launch is None else min(launch, job_start)
    first = job_start if launch is None else launch  # this job's first moment on the instance
    if previous is not None:  # a reused instance: idle since its previous job, startup from this job's image pull
        # (busy until now with another job: the image pull is still this job's)
        startup_start = first
        paid_start = min(previous, first)
        boot_known = True  # the boot was the first job's
    elif (booted is not None and host.get("first_on_instance") is not False
          and first - booted <= BOOT_TO_FIRST_JOB_SECONDS):  # the first job on it pays its boot
        paid_start = startup_start = min(booted, job_start)
        boot_known = True
    else:  # the boot is unknown: from the image pull (or the container's start, or the job's)
        paid_start = startup_start = job_start if launch is None else launch
        boot_known = False
    scale_in = record.get("scale_in_seconds") or 0.0
    if not (_finite(scale_in) and scale_in >= 0):
        raise ValueError(f"scale_in_seconds={scale_in!r}: a finite number of 0 or more")
    return _Spans(paid_start, startup_start, job_start, job_end, job_end + scale_in, boot_known,
                  previous is None or launch is not None)


def paid_span(record: Mapping) -> tuple[float, float]:
    """An attempt's paid span (epoch seconds): from its instance's boot (the first job on it), the previous job's end
    (a reused instance) or, when the record has neither, its image pull's start (else its container's, else the
    job's); to the job's end (its last record while it runs) plus the instance's scale-in after it. The span the
    ledger bills: price a Spot attempt over it (``prices.paid_rate``) and record the result as its ``rate``.
    ValueError naming the attempt and the field for a record missing a time or with one that does not parse."""
    try:
        spans = _spans(record)
    except ValueError as error:
        number = record.get("number") if isinstance(record, Mapping) else None
        raise ValueError(f"attempt {'?' if number is None else number}: {error}") from None
    return spans.paid_start, spans.paid_end


def _overlap(start: float, end: float, window: Optional[tuple[float, float]]) -> float:
    if window is None:
        return end - start
    return max(0.0, min(end, window[1]) - max(start, window[0]))


def _window(window: object) -> Optional[tuple[float, float]]:
    if window is None:
        return None
    try:
        start, end = window  # type: ignore[misc]
    except (TypeError, ValueError):
        start = end = None
    if not (_finite(start) and _finite(end) and start < end):
        raise ValueError(f"window={window!r}: (start, end) in epoch seconds, start before end")
    return float(start), float(end)  # type: ignore[arg-type]


def month_window(month: str) -> tuple[float, float]:
    """A calendar month (``YYYY-MM``, UTC) as a ``window``: its first second to the next month's."""
    from datetime import datetime, timezone

    try:
        first = datetime.strptime(month, "%Y-%m").replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        raise ValueError(f"month={month!r}: a month as YYYY-MM, e.g. 2026-11") from None
    following = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    return first.timestamp(), following.timestamp()


def _gpus(record: Mapping, instance_type: Optional[str], gpu_share: float) -> Optional[float]:
    """The GPUs the job used per node: those visible to it, else its share of the instance type's; None unknown."""
    from .instances import INSTANCE_SHAPES

    gpu = (record.get("environment") or {}).get("gpu") if isinstance(record.get("environment"), Mapping) else None
    count = gpu.get("count") if isinstance(gpu, Mapping) else None
    if _finite(count) and count > 0:
        return float(count)
    shape = INSTANCE_SHAPES.get(instance_type or "")
    return gpu_share * shape.gpus if shape else None


def passport_attempts(attempts: Iterable[Mapping], prices: Mapping, *,
                      window: Optional[tuple[float, float]] = None) -> tuple[list[Attempt], list[str]]:
    """The ledger's attempts from a run passport's (``ml_platform_job.tracking``), and notes on what is estimated.

    Paid time: ``paid_span`` (the boot of the first job on an instance and the image pull are startup, a reused
    instance's wait since its previous job and the scale-in after the job are idle; without the boot, startup is a
    lower bound, noted); a running attempt is billed to its last record (noted). Inside the job (``started_at``, the
    process's start, to ``ended_at``) the ``phases`` fill the buckets and the untimed rest is ``other``. An attempt
    that ended ``stopped``, ``lost`` or ``failed`` loses its steps since its last checkpoint, and a lost one also the
    time from its last record to its recorded end (AWS Batch's: the job was stepping when it vanished). Weights:
    ``environment.gpu.count`` GPUs per node, else ``gpu_share`` x the type's GPUs, else 1 (noted). Rate: the
    attempt's ``rate`` (the operator side's, e.g. Spot as paid from the price history) where recorded, else the list
    price (``prices.paid_rate``; noted for Spot); x ``gpu_share`` x ``nodes``.

    ``window``: (start, end) epoch seconds (``month_window``): only the part of each attempt inside it, attempts
    wholly outside left out. ValueError naming the attempt and the field for a record missing a field or with a time
    that does not parse."""
    from .prices import paid_rate

    window = _window(window)
    found: list[Attempt] = []
    unbooted, running, no_phases, no_gpus, cut, unpulled, list_spot = [], [], [], [], [], [], []
    overlapped: list[str] = []
    rated: dict[str, list] = {}
    unpriced: list[str] = []
    for index, record in enumerate(attempts):
        number = record.get("number") if isinstance(record, Mapping) else None
        if number is None:
            raise ValueError(f"attempt at position {index + 1}: number: missing (a run record's attempt)")
        try:
            attempt = _recorded_attempt(record, prices, window, paid_rate)
        except ValueError as error:
            raise ValueError(f"attempt {number}: {error}") from None
        if attempt is None:
            continue
        built, facts = attempt
        found.append(built)
        for flag, bucket in (("unbooted", unbooted), ("running", running), ("no_phases", no_phases),
                             ("no_gpus", no_gpus), ("cut", cut), ("unpulled", unpulled), ("list_spot", list_spot)):
            if facts.get(flag):
                bucket.append(number)
        if facts.get("rate_source"):
            rated.setdefault(facts["rate_source"], []).append(number)
        if facts.get("overlapped"):
            overlapped.append(f"attempt {number}: its phases add up to {facts['overlapped']:.0f} s more than its job's "
                              "span (time counted in two phases): scaled to the span")
        if facts.get("unpriced"):
            unpriced.append(f"attempt {number}: {facts['unpriced']} unpriced: its dollars are 0")
    notes = [STARTUP_LOWER_BOUND] if unbooted else []
    notes += [f"attempt(s) {_ids(n)}: priced at the recorded rate ({source})" for source, n in rated.items()]
    if list_spot:
        notes.append(f"attempt(s) {_ids(list_spot)}: Spot at the price table's rule, not the price paid (no rate "
                     "recorded)")
    notes += unpriced
    if running:
        notes.append(f"attempt(s) {_ids(running)} still running: billed to the last record (last_seen_at)")
    if no_phases:
        notes.append(f"attempt(s) {_ids(no_phases)}: no phases recorded (a job without the helper's clock): the "
                     "job's time is other")
    if unpulled:
        notes.append(f"attempt(s) {_ids(unpulled)}: a reused instance without the image pull's time: the wait since "
                     "its previous job is idle (the pull in it)")
    if no_gpus:
        notes.append(f"attempt(s) {_ids(no_gpus)}: GPUs unknown (a CPU job, or a type not in the catalog): weighted "
                     "as 1 GPU per node")
    if cut:
        notes.append(f"attempt(s) {_ids(cut)}: {WINDOW_NOTE}")
    return found, notes + overlapped


def _recorded_attempt(record: Mapping, prices: Mapping, window: Optional[tuple[float, float]],
                      paid_rate) -> Optional[tuple[Attempt, dict]]:
    """One record's attempt (inside ``window``) and the facts its notes need; None when it lies outside it."""
    spans = _spans(record)
    job = spans.job_end - spans.job_start
    if window is None:
        fraction = 1.0
    elif job > 0:
        fraction = _overlap(spans.job_start, spans.job_end, window) / job
    else:
        fraction = 1.0 if window[0] <= spans.job_start < window[1] else 0.0
    idle_before = _overlap(spans.paid_start, spans.startup_start, window)
    startup_before = _overlap(spans.startup_start, spans.job_start, window)
    scale_in = _overlap(spans.job_end, spans.paid_end, window)
    if window is not None and fraction == 0 and idle_before + startup_before + scale_in == 0:
        return None
    facts: dict = {"unbooted": not spans.boot_known and (window is None or startup_before > 0 or fraction > 0),
                   "running": record["outcome"] == "running", "cut": 0 < fraction < 1,
                   "unpulled": not spans.pull_known and idle_before > 0}
    phases = record.get("phases") or {}
    if not isinstance(phases, Mapping):
        raise ValueError(f"phases={phases!r}: a mapping of seconds per phase")
    phases = dict(phases)
    facts["no_phases"] = not phases
    if record["outcome"] == "lost" and record.get("last_seen_at"):
        unseen = max(0.0, spans.job_end - _required(record, "last_seen_at"))
        for name in ("step", "since_checkpoint"):
            if not (_finite(phases.get(name, 0.0)) and phases.get(name, 0.0) >= 0):
                raise ValueError(f"phases.{name}={phases.get(name)!r}: a finite number of 0 or more (seconds)")
            phases[name] = phases.get(name, 0.0) + unseen
    nodes, share = record.get("nodes") or 1, record.get("gpu_share") or 1.0
    if not (isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1):
        raise ValueError(f"nodes={nodes!r}: a whole number of 1 or more")
    if not (_finite(share) and 0 < share <= 1):
        raise ValueError(f"gpu_share={share!r}: more than 0 and at most 1")
    instance_type, lifecycle = record.get("instance_type"), record.get("lifecycle")
    gpus = _gpus(record, instance_type, share)
    facts["no_gpus"] = gpus is None
    rate = record.get("rate")
    if rate is not None:
        usd = rate.get("usd_per_hour") if isinstance(rate, Mapping) else None
        if not (_finite(usd) and usd >= 0):
            raise ValueError(f"rate.usd_per_hour={usd!r}: a finite number of 0 or more (USD per hour of one node)")
        facts["rate_source"] = str(rate.get("source") or "no source recorded")
    elif instance_type in prices["on_demand_hourly"] and lifecycle:
        usd, _ = paid_rate(prices, instance_type, lifecycle)
        facts["list_spot"] = lifecycle == "spot"
    else:
        usd = 0.0
        facts["unpriced"] = f"{instance_type or 'instance type unknown'} {lifecycle or ''}".strip()
    scaled = {name: value * fraction if _finite(value) else value for name, value in phases.items()}
    # Phases timed twice (a save nested in a step, a framework's hook that counted time another phase had) can add up
    # to more than the job's span: the record is kept, its phases scaled to the span, and a note says by how much.
    timed = sum(scaled.get(name, 0.0) for name in JOB_PHASES if _finite(scaled.get(name, 0.0)))
    span = job * fraction
    if timed > span + CLOCK_SLACK_SECONDS and timed > 0:
        factor = span / timed
        facts["overlapped"] = timed - span
        scaled = {name: value * factor if _finite(value) else value for name, value in scaled.items()}
    built = Attempt.from_clock(scaled, paid_seconds=idle_before + startup_before + job * fraction + scale_in,
                               before_job_seconds=startup_before, job_seconds=job * fraction,
                               interrupted=record["outcome"] in INTERRUPTED, usd_per_hour=float(usd), nodes=nodes,
                               gpu_share=float(share), gpus=1.0 if gpus is None else gpus)
    return built, facts


def run_ledger(attempts: Iterable[Mapping], prices: Mapping, *,
               window: Optional[tuple[float, float]] = None) -> tuple[Ledger, list[str]]:
    """A recorded run's ledger (``passport_attempts``, summed; ``window`` keeps the part inside it) and its notes."""
    found, notes = passport_attempts(attempts, prices, window=window)
    return ledger(found), notes
