"""Where every paid GPU second went: a goodput ledger per attempt, job, queue or month. Standard library only.

An attempt's paid instance time is split into buckets that add up to it exactly:

- ``startup``: instance and container start to the job's first step (boot, image pull, dataset mount or copy);
- ``restore``: loading the checkpoint;
- ``productive``: inside training steps, not waiting on data, and not thrown away later;
- ``data_wait``: inside steps, blocked on the input pipeline (time in ``next(loader)``: no GPU counter says why a
  GPU idles, so the job times it itself, as profilers do);
- ``checkpoint_save`` and ``evaluation``: the job's own phases;
- ``lost``: step time since the last checkpoint of an attempt that a reclaim or a stop ended (redone later);
- ``idle``: the rest: instance paid, no job stepping (scale-in delay, waits, teardown).

Anchors: Google's ML Productivity Goodput (badput by initialization, data loading, checkpointing, disruption) and
Meta's Effective Training Time. The ledger prices each bucket with the attempt's own rate (Spot or On-Demand per
node, x nodes, x the share of the instance's GPUs the job used), so its dollars add up to what the attempt cost.

The job times its phases with ``PhaseClock`` (a counter per phase, no I/O per step); the platform adds what the job
cannot see (when the instance started and ended) in ``Attempt.from_clock``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

BUCKETS = ("productive", "data_wait", "startup", "restore", "checkpoint_save", "evaluation", "lost", "idle")
# Clocks of the instance and of the job differ by a little: a job's phases may exceed the paid time by this much.
CLOCK_SLACK_SECONDS = 1.0

from .phase_clock import (GOODPUT_NAMESPACE, METRIC_WINDOW_SECONDS, PHASES, WINDOW_METRICS,  # noqa: E402,F401 (re-exported)
                          PhaseClock)


@dataclass(frozen=True)
class Attempt:
    """One attempt's times in seconds. ``step_seconds`` includes ``data_wait_seconds`` and, when the attempt was
    interrupted, ``lost_seconds`` (step time since its last checkpoint)."""

    paid_seconds: float
    startup_seconds: float = 0.0
    restore_seconds: float = 0.0
    step_seconds: float = 0.0
    data_wait_seconds: float = 0.0
    checkpoint_save_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    lost_seconds: float = 0.0
    usd_per_hour: float = 0.0  # per node, the attempt's own rate (Spot or On-Demand)
    nodes: int = 1
    gpu_share: float = 1.0

    def __post_init__(self) -> None:
        for name in ("paid_seconds", "startup_seconds", "restore_seconds", "step_seconds", "data_wait_seconds",
                     "checkpoint_save_seconds", "evaluation_seconds", "lost_seconds", "usd_per_hour"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r}: a finite number of 0 or more")
        if not (isinstance(self.nodes, int) and self.nodes >= 1):
            raise ValueError(f"nodes={self.nodes!r}: a whole number of 1 or more")
        if not 0 < self.gpu_share <= 1:
            raise ValueError(f"gpu_share={self.gpu_share!r}: more than 0 and at most 1")
        if self.data_wait_seconds > self.step_seconds or self.lost_seconds > self.step_seconds:
            raise ValueError(f"data_wait_seconds={self.data_wait_seconds:g} and lost_seconds={self.lost_seconds:g}: "
                             f"each at most step_seconds={self.step_seconds:g} (both are parts of the step time)")
        busy = self.busy_seconds
        if busy > self.paid_seconds + CLOCK_SLACK_SECONDS:
            raise ValueError(f"paid_seconds={self.paid_seconds:g}: less than the job's own phases ({busy:g} s); the "
                             "instance's start and end must span the job's: check which clock each came from")

    @property
    def busy_seconds(self) -> float:
        return (self.startup_seconds + self.restore_seconds + self.step_seconds + self.checkpoint_save_seconds
                + self.evaluation_seconds)

    @classmethod
    def from_clock(cls, timings: Mapping[str, float], *, paid_seconds: float, before_job_seconds: float = 0.0,
                   interrupted: bool, usd_per_hour: float, nodes: int = 1, gpu_share: float = 1.0) -> "Attempt":
        """An attempt from the job's ``PhaseClock.summary()`` and the platform's records: ``paid_seconds`` from the
        instance's start to its end, ``before_job_seconds`` from the instance's start to the job's process start
        (counted as startup), ``interrupted`` when a reclaim or a stop ended it (its step time since the last
        checkpoint is then lost)."""
        unknown = set(timings) - set(PHASES)
        if unknown:
            raise ValueError(f"timings: unknown phases {sorted(unknown)}; known: {list(PHASES)}")
        step = float(timings.get("step", 0.0))
        return cls(paid_seconds=paid_seconds, startup_seconds=before_job_seconds + float(timings.get("startup", 0.0)),
                   restore_seconds=float(timings.get("restore", 0.0)), step_seconds=step,
                   data_wait_seconds=float(timings.get("data_wait", 0.0)),
                   checkpoint_save_seconds=float(timings.get("checkpoint_save", 0.0)),
                   evaluation_seconds=float(timings.get("evaluation", 0.0)),
                   lost_seconds=min(step, float(timings.get("since_checkpoint", 0.0))) if interrupted else 0.0,
                   usd_per_hour=usd_per_hour, nodes=nodes, gpu_share=gpu_share)


@dataclass(frozen=True)
class Ledger:
    """Seconds and dollars per bucket; ``seconds`` add up to the paid instance time (x nodes)."""

    seconds: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    usd: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    attempts: int = 0

    @property
    def paid_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def paid_usd(self) -> float:
        return sum(self.usd.values())

    @property
    def goodput(self) -> Optional[float]:
        """Productive seconds over paid seconds; None when nothing was paid."""
        return self.seconds["productive"] / self.paid_seconds if self.paid_seconds else None

    def share(self, bucket: str) -> Optional[float]:
        return self.seconds[bucket] / self.paid_seconds if self.paid_seconds else None

    def __add__(self, other: "Ledger") -> "Ledger":
        return Ledger({b: self.seconds[b] + other.seconds[b] for b in BUCKETS},
                      {b: self.usd[b] + other.usd[b] for b in BUCKETS}, self.attempts + other.attempts)

    def to_dict(self) -> dict:
        return {"attempts": self.attempts, "paid_hours": round(self.paid_seconds / 3600, 4),
                "paid_usd": round(self.paid_usd, 4),
                "goodput": None if self.goodput is None else round(self.goodput, 4),
                "buckets": {b: {"hours": round(self.seconds[b] / 3600, 4), "usd": round(self.usd[b], 4),
                                "share": None if self.share(b) is None else round(self.share(b), 4)}
                            for b in BUCKETS}}


def attempt_ledger(attempt: Attempt) -> Ledger:
    """One attempt's buckets. The lost step time is taken from productive and data-wait time in their proportion
    (the redone steps waited on data as the others did); idle is what remains of the paid time."""
    step, lost = attempt.step_seconds, attempt.lost_seconds
    kept = 1 - lost / step if step else 0.0
    seconds = {"productive": (step - attempt.data_wait_seconds) * kept, "data_wait": attempt.data_wait_seconds * kept,
               "startup": attempt.startup_seconds, "restore": attempt.restore_seconds,
               "checkpoint_save": attempt.checkpoint_save_seconds, "evaluation": attempt.evaluation_seconds,
               "lost": lost, "idle": max(0.0, attempt.paid_seconds - attempt.busy_seconds)}
    seconds = {b: seconds[b] * attempt.nodes for b in BUCKETS}
    rate = attempt.usd_per_hour * attempt.gpu_share / 3600
    return Ledger(seconds, {b: seconds[b] * rate for b in BUCKETS}, 1)


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

STARTUP_LOWER_BOUND = ("startup is a lower bound: the platform does not see the instance's start before the job's "
                       "attempt began (boot, image pull), so that time is in no attempt's paid time")


def _seconds_between(start: str, end: str) -> float:
    from datetime import datetime

    return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())


def passport_attempts(attempts: Iterable[Mapping], prices: Mapping) -> tuple[list[Attempt], list[str]]:
    """The ledger's attempts from a run passport's (``ml_platform_job.tracking``), and notes on what is estimated. Paid
    time runs from the attempt's recorded start to its recorded end (or its last record while it runs); the job's
    ``phases`` fill the buckets; an attempt that ended ``stopped`` or ``lost`` loses its steps since its last
    checkpoint, and a lost one also the time from its last record to AWS Batch's end of it (the job was stepping
    when it vanished). The rate is the attempt's own price x its GPU share x its nodes, as the run's cost."""
    from .prices import hourly_usd

    found, notes = [], [STARTUP_LOWER_BOUND]
    for record in attempts:
        number = record.get("number")
        start = record["started_at"]
        end = record.get("ended_at") or record.get("last_seen_at") or start
        phases = dict(record.get("phases") or {})
        if not phases:
            notes.append(f"attempt {number}: no phases recorded (a job without the helper's clock): its time is idle")
        lost_unseen = 0.0
        if record.get("outcome") == "lost" and record.get("last_seen_at"):
            lost_unseen = _seconds_between(record["last_seen_at"], end)
            phases["step"] = phases.get("step", 0.0) + lost_unseen
            phases["since_checkpoint"] = phases.get("since_checkpoint", 0.0) + lost_unseen
        instance_type, lifecycle = record.get("instance_type"), record.get("lifecycle")
        if instance_type in prices["on_demand_hourly"] and lifecycle:
            rate = hourly_usd(prices, instance_type, lifecycle)
        else:
            rate = 0.0
            notes.append(f"attempt {number}: {instance_type or 'instance type unknown'} {lifecycle or ''} unpriced: "
                         "its dollars are 0")
        found.append(Attempt.from_clock(phases, paid_seconds=_seconds_between(start, end),
                                        interrupted=record.get("outcome") in ("stopped", "lost"),
                                        usd_per_hour=rate, nodes=int(record.get("nodes") or 1),
                                        gpu_share=float(record.get("gpu_share") or 1.0)))
    return found, notes


def run_ledger(attempts: Iterable[Mapping], prices: Mapping) -> tuple[Ledger, list[str]]:
    """A recorded run's ledger (``passport_attempts``, summed) and its notes."""
    found, notes = passport_attempts(attempts, prices)
    return ledger(found), notes
