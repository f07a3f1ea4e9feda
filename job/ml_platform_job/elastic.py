"""Elastic jobs: the resize policy, stated and tested, and the job's side of a resize, in plain Python (no CDK, no
torch).

A running AWS Batch job cannot change its node count (there is no UpdateJob); ``SubmitJob.nodeOverrides.numNodes``
can, at submission, for a job definition with an open node range
(https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeOverrides.html). So a resize, as in torchrun's
``--nnodes=MIN:MAX``, Ray Train's ``ScalingConfig(num_workers=(min, max))`` and SageMaker HyperPod's elastic training,
is a restart from a checkpoint: the job saves, exits ``RESIZE_EXIT_CODE`` (86), and the queue's controller resubmits it
at the new size under the same run.

The decision (``decide``), with the story's rules as defaults:

- **scale out** (to the next allowed size) when the validation loss has not improved by ``min_delta`` (relative) for
  ``plateau_evaluations`` evaluations and the GPUs are busy (utilization at or over ``busy_utilization`` in each of
  the last ``idle_periods`` periods): the job is compute-bound, so more nodes finish it sooner;
- **scale in** (to the next smaller size) when utilization stays under ``idle_utilization`` (40%, the idle alarm's
  threshold) for ``idle_periods`` periods (3): the GPUs wait, and fewer nodes do the same work for less;
- never within ``snooze_seconds`` of the last resize (or of the attempt's start);
- and only when it pays: a resize costs ``restart_seconds`` (from the asking attempt's end to the next one's start:
  queue wait, instance start, image pull; measured from the run's own resizes, ``DEFAULT_RESTART_SECONDS`` until
  measured; the restore is in the goodput ledger's restore phase) at the new size's price. Out is taken when the time
  saved on the remaining work exceeds the restart time; in when the money saved on it exceeds the restart's cost.
  Throughput at another size is the measured one scaled by ``scaling_efficiency`` per doubling.

The errors it guards against, and their rates (``tests/unit/test_elastic_policy.py`` simulates each):

- **Scaling out a job that is still learning** (a false plateau). The rule is the story's and Keras's patience rule
  (not ``min_delta`` better than the best before, in ``plateau_evaluations`` evaluations); its false rate depends on
  how much the validation loss improves an evaluation (g) against its noise (sigma, relative), per check: g 2%, sigma
  1%: 5e-5; g 1%, sigma 0.5%: 0.15%; g 1%, sigma 1%: 5%; g 0.5%, sigma 0.5%: 20%; any improvement under 0.34% an
  evaluation is a plateau by definition (so validating less often, a larger g, makes it rarer). Guards: only on busy
  GPUs, only when the restart pays, fresh evidence at each size (the history starts again after a resize), and
  ``scale_out_on_plateau=False``. The validation loss must be the whole set's (all-reduced), not rank 0's shard.
- **Scaling in a busy job on noise**: every one of ``idle_periods`` periods under 40%. A job at 70% whose 5-minute
  means swing 10 points: independent periods, Phi(-3)^3 = 2.5e-9 a check; correlated ones, as real utilization is
  (AR(1) rho 0.8: 1.2e-4 a check; a day of 288 checks has one in about 2-3% of days). The job samples no utilization
  while it saves or restores, nor between its loader's end and its next epoch (an end-of-epoch validation); a period
  sampled for less than half its length is missing. A validation inside the loader's loop is sampled.
- **A resize that does not pay** (its restart costs more than it saves): never taken on the stated model; the
  model's own error (efficiency, restart time) is bounded by the measured restart time and a conservative efficiency
  (0.9 a doubling: DDP on one placement group); a scale-out trades money for time (its saved USD is negative: more
  nodes at On-Demand prices), a scale-in trades time for money. Each size is priced as its kind (one node: the
  queue's Spot types; two or more: its multi-node On-Demand types); a size the price table lacks is "not judged".
- **Flapping** (out, in, out): at most one resize per ``snooze_seconds`` (30 minutes), so at most 2 an hour; and a
  size the run left for idle GPUs, and every larger one, is never scaled out to again, so each scale-in lowers the
  run's ceiling: at most one out-and-in cycle per allowed size.
- **A run that asked and was never resubmitted**: the queue's controller alerts on every refusal, its errors alarm,
  and a resubmission under the same name resumes from the resize's checkpoint.

Where a loss has stalled for a reason more nodes cannot fix (a learning rate too low, a bad label, a converged
model), the plateau rule scales out for nothing but the cost of the restart: turn it off (``scale_out_on_plateau=
False``); the payback rule still stops it where the remaining work is short.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping, Optional, Sequence

# 85 is the health rules' stop (health.HEALTH_STOPPED_EXIT_CODE); 86, next to it, is a resize the job asks for. Neither
# is a signal's (128 + n, e.g. 143 for SIGTERM, which the queue retries), a shell's (126, 127), Python's (1, 2) or
# sysexits.h's (64-78); the queue's retry strategy ends both (EXIT on "*"), and the controller resubmits on 86 only.
RESIZE_EXIT_CODE = 86
DEFAULT_SIZES = (1, 2, 4, 8)
DEFAULT_RESTART_SECONDS = 600.0  # until measured: a queue wait, an instance start, the image pull, a restore
# The job contract's names: ``job submit --nodes MIN:MAX`` sets the first two in the job's environment.
ELASTIC_VARIABLE = "ML_PLATFORM_ELASTIC"  # "MIN:MAX"
SIZES_VARIABLE = "ML_PLATFORM_ELASTIC_SIZES"  # "1,2,4,8": the allowed sizes (the queue's controller's)
SNOOZE_VARIABLE = "ML_PLATFORM_ELASTIC_SNOOZE_SECONDS"
PLATEAU_VARIABLE = "ML_PLATFORM_ELASTIC_PLATEAU"  # "off": never scale out on a plateau
# What a resizing job leaves next to its checkpoints for the controller (the size it asks for, why, the figures).
REQUEST_FILE = "resize-request.json"
# What the controller leaves there for each resize it took or refused (one file per ended job: a redelivered event
# writes the same file again).
DECISION_PREFIX = "resizes/"
RESIZE_MARKER = "resize-requested"  # under the launcher: torchrun's exit 1 becomes 86 again
PERIOD_SECONDS = 300.0  # a utilization period: the GPU alarms' (5 minutes)
HISTORY = 50  # validation losses kept in the run's record (the plateau rule needs plateau_evaluations + 1)
NODE_TYPES_VARIABLE = "ML_PLATFORM_ELASTIC_NODE_TYPES"  # "spot:g5.xlarge,g5.2xlarge;on-demand:g5.8xlarge"
SAMPLE_SECONDS = 10.0  # how often the job reads its GPUs' utilization (nvidia-smi)


class ElasticConfigError(ValueError):
    """A policy setting out of its range (the message names it, the value, the range and the fix)."""


@dataclass(frozen=True)
class ElasticPolicy:
    """When a job resizes (see the module docstring); every threshold keyword-only, every default the story's."""
    min_nodes: int = 1
    max_nodes: int = 8
    sizes: tuple[int, ...] = DEFAULT_SIZES
    scale_out_on_plateau: bool = True
    plateau_evaluations: int = 3
    min_delta: float = 0.01
    busy_utilization: float = 80.0
    idle_utilization: float = 40.0
    idle_periods: int = 3
    snooze_seconds: float = 1800.0
    scaling_efficiency: float = 0.9

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str, fix: str) -> ElasticConfigError:
            return ElasticConfigError(f"{name}={getattr(self, name)!r}: {allowed}; {fix}")
        if not isinstance(self.min_nodes, int) or self.min_nodes < 1:
            raise bad("min_nodes", "a whole number of 1 or more", "1 lets a simple model run on one Spot instance")
        if not isinstance(self.max_nodes, int) or not self.min_nodes <= self.max_nodes <= 1000:
            raise bad("max_nodes", f"a whole number from min_nodes ({self.min_nodes}) to 1,000 (Batch's limit)",
                      "e.g. 8")
        sizes = tuple(self.sizes)
        if not sizes or any(not isinstance(s, int) or s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
            raise bad("sizes", "whole numbers of 1 or more, increasing, without repeats", "e.g. (1, 2, 4, 8)")
        if not [s for s in sizes if self.min_nodes <= s <= self.max_nodes]:
            raise bad("sizes", f"at least one size from min_nodes {self.min_nodes} to max_nodes {self.max_nodes}",
                      "add one, or widen the range")
        for name, low, high in (("plateau_evaluations", 1, 100), ("idle_periods", 1, 100)):
            value = getattr(self, name)
            if not isinstance(value, int) or not low <= value <= high:
                raise bad(name, f"a whole number from {low} to {high}", f"the default is {getattr(ElasticPolicy, name)}")
        for name, low, high in (("min_delta", 0.0, 1.0), ("busy_utilization", 0.0, 100.0),
                                ("idle_utilization", 0.0, 100.0), ("snooze_seconds", 0.0, 7 * 86400.0),
                                ("scaling_efficiency", 0.1, 1.0)):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not low <= value <= high or math.isnan(value):
                raise bad(name, f"a number from {low:g} to {high:g}", f"the default is {getattr(ElasticPolicy, name)}")
        if self.idle_utilization >= self.busy_utilization:
            raise bad("idle_utilization", f"under busy_utilization ({self.busy_utilization:g})",
                      "the two must leave a band where nothing resizes")

    def allowed(self) -> tuple[int, ...]:
        """The sizes the job may run at."""
        return tuple(s for s in self.sizes if self.min_nodes <= s <= self.max_nodes)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Optional["ElasticPolicy"]:
        """The policy a submission with ``--nodes MIN:MAX`` gives the job (``ML_PLATFORM_ELASTIC``, and the queue's
        sizes, snooze and plateau switch), or None for a job of a fixed size."""
        env = os.environ if env is None else env
        text = (env.get(ELASTIC_VARIABLE) or "").strip()
        if not text:
            return None
        low, high = parse_nodes(text, name=ELASTIC_VARIABLE)
        settings: dict[str, Any] = {"min_nodes": low, "max_nodes": high}
        if (env.get(SIZES_VARIABLE) or "").strip():
            try:
                settings["sizes"] = tuple(int(part) for part in env[SIZES_VARIABLE].split(","))
            except ValueError:
                raise ElasticConfigError(f"{SIZES_VARIABLE}={env[SIZES_VARIABLE]!r}: whole numbers separated by "
                                         "commas, e.g. 1,2,4,8") from None
        if (env.get(SNOOZE_VARIABLE) or "").strip():
            try:
                settings["snooze_seconds"] = float(env[SNOOZE_VARIABLE])
            except ValueError:
                raise ElasticConfigError(f"{SNOOZE_VARIABLE}={env[SNOOZE_VARIABLE]!r}: seconds, e.g. 1800") from None
        if (env.get(PLATEAU_VARIABLE) or "").strip().lower() in ("off", "0", "false", "no"):
            settings["scale_out_on_plateau"] = False
        return cls(**settings)


def parse_nodes(text: str, *, name: str = "--nodes") -> tuple[int, int]:
    """``"4"`` -> (4, 4); ``"1:8"`` -> (1, 8): a job's node count, or its elastic range."""
    parts = str(text).strip().split(":")
    try:
        if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError
        low, high = int(parts[0]), int(parts[-1])
    except ValueError:
        raise ElasticConfigError(f"{name} {text!r}: a node count (e.g. 2) or an elastic range MIN:MAX (e.g. 1:8)") \
            from None
    if not 1 <= low <= high:
        raise ElasticConfigError(f"{name} {text!r}: MIN:MAX with 1 <= MIN <= MAX, e.g. 1:8")
    return low, high


@dataclass(frozen=True)
class Observation:
    """What the controller knows at a decision: the job's size, its validation losses (oldest first), its GPUs'
    utilization per period (percent, oldest first), the work left (samples), its measured throughput at this size
    (samples a second), one node's price (USD an hour), seconds since its last resize (or its start), and its
    measured restart time (None: not measured yet)."""
    nodes: int
    val_losses: Sequence[float] = ()
    utilization: Sequence[float] = ()
    remaining_samples: float = 0.0
    samples_per_second: float = 0.0
    node_price_per_hour: float = 0.0
    seconds_since_resize: float = math.inf
    restart_seconds: Optional[float] = None
    price_at: Mapping[int, float] = field(default_factory=dict)  # a node's USD an hour at another size (its kind's)
    left_idle: Sequence[int] = ()  # sizes this run left for idle GPUs: never scaled out to again, nor past them


@dataclass(frozen=True)
class Decision:
    """``size`` (the current one when nothing changes), the reason in words, and the payback's figures."""
    size: int
    reason: str
    restart_seconds: float = 0.0
    restart_usd: float = 0.0
    saved_seconds: float = 0.0
    saved_usd: float = 0.0
    figures: dict = field(default_factory=dict)

    @property
    def resize(self) -> bool:
        return self.reason.startswith(("scale out", "scale in"))


def throughput(samples_per_second: float, nodes: int, to: int, efficiency: float) -> float:
    """Throughput at ``to`` nodes from the measured one at ``nodes``: linear, times ``efficiency`` per doubling (and
    divided by it per halving: a smaller job loses less to communication)."""
    if to == nodes:
        return samples_per_second
    return samples_per_second * (to / nodes) * efficiency ** math.log2(to / nodes)


def plateaued(losses: Sequence[float], evaluations: int, min_delta: float) -> bool:
    """No improvement of ``min_delta`` (relative to the best before) in the last ``evaluations`` validation losses."""
    finite = [x for x in losses if isinstance(x, (int, float)) and math.isfinite(x)]
    if len(finite) <= evaluations:
        return False
    best_before = min(finite[:-evaluations])
    return min(finite[-evaluations:]) > best_before * (1 - min_delta) if best_before > 0 else \
        min(finite[-evaluations:]) >= best_before


def decide(policy: ElasticPolicy, seen: Observation) -> Decision:
    """The next size for a job (see the module docstring). "not judged: ..." when the data cannot decide."""
    allowed = policy.allowed()
    if seen.seconds_since_resize < policy.snooze_seconds:
        return Decision(seen.nodes, f"hold: {seen.seconds_since_resize:.0f} s since the last resize, snooze "
                                    f"{policy.snooze_seconds:.0f} s")
    recent = [u for u in seen.utilization if isinstance(u, (int, float)) and math.isfinite(u)][-policy.idle_periods:]
    if len(recent) < policy.idle_periods:
        return Decision(seen.nodes, f"not judged: {len(recent)} utilization periods, fewer than {policy.idle_periods}")
    if seen.samples_per_second <= 0 or seen.remaining_samples <= 0:
        return Decision(seen.nodes, "not judged: no measured throughput or no work left")
    restart = seen.restart_seconds if seen.restart_seconds is not None else DEFAULT_RESTART_SECONDS

    def price(size: int) -> float:  # USD a second of one node at ``size``: this one's as paid, another as its kind
        if size == seen.nodes and seen.node_price_per_hour > 0:
            return seen.node_price_per_hour / 3600.0
        return seen.price_at.get(size, seen.node_price_per_hour) / 3600.0  # no kind known: this node's

    now_seconds = seen.remaining_samples / seen.samples_per_second
    if all(u < policy.idle_utilization for u in recent):
        smaller = [s for s in allowed if s < seen.nodes]
        if not smaller:
            return Decision(seen.nodes, f"hold: idle GPUs, but {seen.nodes} node(s) is the smallest size allowed")
        to = smaller[-1]
        then_seconds = seen.remaining_samples / throughput(seen.samples_per_second, seen.nodes, to,
                                                           policy.scaling_efficiency)
        cost_now = now_seconds * seen.nodes * price(seen.nodes)
        cost_then = (then_seconds + restart) * to * price(to)
        figures = {"cost_now_usd": cost_now, "cost_then_usd": cost_then, "remaining_seconds": now_seconds}
        if price(seen.nodes) <= 0 or price(to) <= 0:
            return Decision(seen.nodes, f"not judged: idle GPUs, but no price for {seen.nodes if price(seen.nodes) <= 0 else to} "
                                        "node(s) (a type the price table lacks): a scale-in cannot be shown to pay",
                            figures=figures)
        if cost_then >= cost_now:
            return Decision(seen.nodes, f"hold: scaling in to {to} would cost {cost_then:.2f} USD against "
                                        f"{cost_now:.2f} to finish as is (the restart does not pay)", restart,
                            restart * to * price(to), figures=figures)
        return Decision(to, f"scale in: GPU utilization under {policy.idle_utilization:g}% for {len(recent)} periods",
                        restart, restart * to * price(to), now_seconds - then_seconds - restart, cost_now - cost_then,
                        figures)
    if policy.scale_out_on_plateau and all(u >= policy.busy_utilization for u in recent) and \
            plateaued(seen.val_losses, policy.plateau_evaluations, policy.min_delta):
        # a size this run left for idle GPUs, and every larger one (more nodes wait at least as much), is out
        cap = min(seen.left_idle, default=math.inf)
        larger = [s for s in allowed if seen.nodes < s < cap]
        if not larger:
            return Decision(seen.nodes, f"hold: plateau on busy GPUs, but {seen.nodes} node(s) is the largest size "
                                        "allowed" + (" (the run left the larger ones for idle GPUs)"
                                                     if seen.left_idle else ""))
        to = larger[0]
        then_seconds = seen.remaining_samples / throughput(seen.samples_per_second, seen.nodes, to,
                                                           policy.scaling_efficiency)
        saved = now_seconds - then_seconds - restart
        figures = {"remaining_seconds": now_seconds, "then_seconds": then_seconds}
        if saved <= 0:
            return Decision(seen.nodes, f"hold: scaling out to {to} would save {now_seconds - then_seconds:.0f} s "
                                        f"of {now_seconds:.0f} s left, less than its {restart:.0f} s restart",
                            restart, restart * to * price(to), figures=figures)
        cost_now = now_seconds * seen.nodes * price(seen.nodes)
        cost_then = (then_seconds + restart) * to * price(to)
        return Decision(to, f"scale out: validation loss not {policy.min_delta:.0%} better in "
                            f"{policy.plateau_evaluations} evaluations on GPUs at {policy.busy_utilization:g}% or more",
                        restart, restart * to * price(to), saved, cost_now - cost_then, figures)
    return Decision(seen.nodes, "hold: neither idle nor a plateau on busy GPUs")


# --- the job's side of a resize (no torch here: job.py feeds it) --------------------------------------------------
@dataclass(frozen=True)
class World:
    """Where this process stands in the job: its nodes (``AWS_BATCH_JOB_NUM_NODES``), its node's index, the ranks
    (``WORLD_SIZE``) and this one's (``RANK``)."""
    nodes: int = 1
    node_rank: int = 0
    world_size: int = 1
    rank: int = 0

    def accumulation(self, global_batch: int, per_device_batch: int) -> int:
        """Gradient accumulation steps that keep ``global_batch`` at this world size (see ``accumulation_steps``)."""
        return accumulation_steps(global_batch, per_device_batch, self.world_size)


def world(env: Optional[Mapping[str, str]] = None) -> World:
    """This process's ``World``, from AWS Batch's and torchrun's variables (1 node, 1 rank when they are absent)."""
    env = os.environ if env is None else env

    def number(name: str, default: int) -> int:
        value = (env.get(name) or "").strip()
        return int(value) if value.isdigit() else default

    return World(nodes=max(1, number("AWS_BATCH_JOB_NUM_NODES", 1)), node_rank=number("AWS_BATCH_JOB_NODE_INDEX", 0),
                 world_size=max(1, number("WORLD_SIZE", 1)), rank=number("RANK", 0))


def accumulation_steps(global_batch: int, per_device_batch: int, world_size: int) -> int:
    """Batches each rank accumulates per optimizer step so that the global batch stays ``global_batch`` whatever the
    world size: a resized job trains the same optimization problem (``global_batch / (per_device_batch x world_size)``,
    which must be whole: choose a global batch that every allowed size divides)."""
    for name, value in (("global_batch", global_batch), ("per_device_batch", per_device_batch),
                        ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ElasticConfigError(f"{name}={value!r}: a whole number of 1 or more")
    per_step = per_device_batch * world_size
    if global_batch % per_step:
        fits = [n for n in (1, 2, 4, 8, 16, 32) if global_batch % (per_device_batch * n) == 0]
        raise ElasticConfigError(
            f"global_batch={global_batch}: not a multiple of per_device_batch {per_device_batch} x world size "
            f"{world_size} = {per_step}; world sizes that keep it: {', '.join(map(str, fits)) or 'none'} (choose a "
            "global batch every allowed size divides, e.g. per_device_batch x 8 x GPUs per node)")
    return global_batch // per_step


def nvidia_smi_utilization(run: Callable[..., Any] = subprocess.run) -> Optional[float]:
    """The mean utilization (percent) of the GPUs this container sees, from ``nvidia-smi``; None without one."""
    if shutil.which("nvidia-smi") is None and run is subprocess.run:
        return None
    try:
        out = run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                  capture_output=True, text=True, timeout=10, check=True).stdout
        values = [float(line) for line in out.split() if line.strip()]
    except Exception:  # no driver, a timeout, "[N/A]": nothing measured
        return None
    return sum(values) / len(values) if values else None


class UtilizationPeriods:
    """GPU utilization samples averaged into periods of ``period_seconds`` (the idle alarm's 5 minutes): only
    complete periods count, and a period without samples is missing (not zero: a job that could not read its GPUs is
    not idle)."""

    def __init__(self, *, period_seconds: float = PERIOD_SECONDS, clock: Callable[[], float] = time.monotonic,
                 min_samples: Optional[int] = None) -> None:
        self.period_seconds, self.clock = period_seconds, clock
        # a period sampled for less than half its length (mostly paused) is missing, not a full period
        self.min_samples = min_samples if min_samples is not None else max(1, int(period_seconds / SAMPLE_SECONDS / 2))
        self.started = clock()
        self._sums: dict[int, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def add(self, value: Optional[float], now: Optional[float] = None) -> None:
        if value is None or not math.isfinite(value):
            return
        index = int(((self.clock() if now is None else now) - self.started) // self.period_seconds)
        with self._lock:
            total, count = self._sums.get(index, (0.0, 0))
            self._sums[index] = (total + float(value), count + 1)

    def last_complete(self, now: Optional[float] = None) -> int:
        """The index of the last complete period (-1 before the first ends)."""
        return int(((self.clock() if now is None else now) - self.started) // self.period_seconds) - 1

    def periods(self, now: Optional[float] = None) -> list[float]:
        """The complete periods' means, oldest first (a missing period ends the run of periods before it)."""
        current = int(((self.clock() if now is None else now) - self.started) // self.period_seconds)
        with self._lock:
            sums = dict(self._sums)
        means: list[float] = []
        for index in range(current - 1, -1, -1):
            if index not in sums or sums[index][1] < self.min_samples:
                break
            total, count = sums[index]
            means.append(total / count)
        return means[::-1]


class ElasticMonitor:
    """The job's side of the policy: its validation losses, its GPUs' utilization periods, its throughput, and
    ``consider`` (``decide`` on them). ``sample``: reads the GPUs' utilization (default ``nvidia_smi_utilization``,
    every ``SAMPLE_SECONDS`` on a daemon thread started by ``watch``)."""

    def __init__(self, policy: ElasticPolicy, *, nodes: int, node_price_per_hour: float = 0.0,
                 restart_seconds: Optional[float] = None, clock: Callable[[], float] = time.monotonic,
                 sample: Optional[Callable[[], Optional[float]]] = None,
                 period_seconds: float = PERIOD_SECONDS, price_at: Optional[Mapping[int, float]] = None,
                 left_idle: Sequence[int] = (), paused: Optional[Callable[[], bool]] = None) -> None:
        self.policy, self.nodes = policy, nodes
        self.node_price_per_hour, self.restart_seconds = node_price_per_hour, restart_seconds
        self.price_at, self.left_idle = dict(price_at or {}), tuple(left_idle)
        # True while the job validates, saves or restores: its GPUs wait by design then, which is not idleness
        self.paused = paused or (lambda: False)
        self._period_judged = -1  # the last complete utilization period a consider saw
        self.clock = clock
        self.sample = sample if sample is not None else nvidia_smi_utilization
        self.utilization = UtilizationPeriods(period_seconds=period_seconds, clock=clock)
        self.val_losses: list[float] = []
        self.started = clock()  # the snooze runs from this attempt's start (a resize is a new attempt)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.last: Optional[Decision] = None

    def watch(self) -> None:
        """Samples the GPUs' utilization every ``SAMPLE_SECONDS`` on a daemon thread until ``close``."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(SAMPLE_SECONDS):
                if not self.paused():
                    self.utilization.add(self.sample())

        self._thread = threading.Thread(target=loop, name="ml-platform-elastic", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def validation(self, val_loss: Any) -> None:
        try:
            value = float(val_loss)
        except (TypeError, ValueError):
            return
        if math.isfinite(value):
            self.val_losses = (self.val_losses + [value])[-HISTORY:]

    def new_period(self, now: Optional[float] = None) -> bool:
        """Whether a utilization period completed since the last ``consider``: a scale-in is judged then too, not
        only after a validation."""
        return self.utilization.last_complete(now) > self._period_judged

    def consider(self, *, remaining_samples: Optional[float], samples_per_second: float,
                 now: Optional[float] = None, after_validation: bool = True) -> Decision:
        """``decide`` on what the job has seen. ``after_validation`` False (a new utilization period, no new
        validation): a scale-in only; the plateau is judged once per validation, not once per period."""
        now = self.clock() if now is None else now
        self._period_judged = self.utilization.last_complete(now)
        if remaining_samples is None:
            self.last = Decision(self.nodes, "not judged: the work left is unknown (train with job.epochs(start, "
                                             "stop) so that the job knows it)")
            return self.last
        self.last = decide(self.policy, Observation(
            nodes=self.nodes, val_losses=tuple(self.val_losses) if after_validation else (),
            utilization=tuple(self.utilization.periods(now)),
            remaining_samples=remaining_samples, samples_per_second=samples_per_second,
            node_price_per_hour=self.node_price_per_hour, seconds_since_resize=now - self.started,
            restart_seconds=self.restart_seconds, price_at=self.price_at, left_idle=self.left_idle))
        return self.last

    def state_dict(self) -> dict:
        return {"val_losses": list(self.val_losses)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        losses = state.get("val_losses") if isinstance(state, Mapping) else None
        if isinstance(losses, list):
            self.val_losses = [float(x) for x in losses if isinstance(x, (int, float)) and math.isfinite(x)]


def _seconds_between(start: Any, end: Any) -> Optional[float]:
    try:
        return (datetime.fromisoformat(str(end).replace("Z", "+00:00"))
                - datetime.fromisoformat(str(start).replace("Z", "+00:00"))).total_seconds()
    except (TypeError, ValueError):
        return None


def resize_history(record: Mapping[str, Any], prices: Optional[Mapping[str, Any]] = None) -> list[dict]:
    """Every resize of a run, from its record: the attempt that asked, from and to (the size the next attempt ran at),
    the reason, the restart (from the asking attempt's end to the next one's start) and what it cost (the restart's
    seconds x the new size's nodes x one node's price, where ``prices`` prices the next attempt's instance)."""
    from .prices import hourly_usd

    attempts = list((record.get("passport") or {}).get("attempts") or [])
    found = []
    for index, attempt in enumerate(attempts):
        asked = attempt.get("resize")
        if attempt.get("outcome") != "resized" or not isinstance(asked, Mapping):
            continue
        after = attempts[index + 1] if index + 1 < len(attempts) else None
        entry = {"attempt": attempt.get("number"), "step": asked.get("step"), "from": attempt.get("nodes", 1),
                 "asked": asked.get("to"), "to": after.get("nodes") if after else None,
                 "reason": asked.get("reason"), "restart_seconds": None, "restart_usd": None,
                 "estimate": {k: asked.get(k) for k in ("restart_seconds", "restart_usd", "saved_seconds",
                                                         "saved_usd") if k in asked}}
        if after is not None and after.get("job_id") and after.get("job_id") == attempt.get("job_id"):
            # the queue retried the same job (a Spot reclaim came with the resize): no resubmission happened
            entry.update(to=None, retried=True)
            after = None
        if after is not None:
            restart = _seconds_between(attempt.get("ended_at"), after.get("started_at"))
            entry["restart_seconds"] = restart
            if restart is not None and prices and after.get("instance_type") and after.get("lifecycle"):
                try:
                    rate = hourly_usd(prices, after["instance_type"], after["lifecycle"])
                    entry["restart_usd"] = round(max(restart, 0.0) / 3600 * rate * int(after.get("nodes") or 1), 4)
                except (KeyError, ValueError):
                    pass
        found.append(entry)
    return found


def measured_restart_seconds(record: Mapping[str, Any]) -> Optional[float]:
    """The mean restart of the run's resizes so far (None before its first), the policy's ``restart_seconds``."""
    measured = [r["restart_seconds"] for r in resize_history(record) if isinstance(r.get("restart_seconds"), float)
                and r["restart_seconds"] >= 0]
    return sum(measured) / len(measured) if measured else None


def request_text(decision: Decision, *, step: int, samples_seen: int, job_id: Optional[str]) -> str:
    """The request file's JSON (``REQUEST_FILE``): what the controller reads when the job exits 86."""
    return json.dumps({"to": decision.size, "reason": decision.reason, "step": step, "samples_seen": samples_seen,
                       "job_id": job_id, "restart_seconds": decision.restart_seconds,
                       "restart_usd": decision.restart_usd, "saved_seconds": decision.saved_seconds,
                       "saved_usd": decision.saved_usd, "figures": decision.figures}, sort_keys=True)


def left_for_idle(record: Mapping[str, Any]) -> list[int]:
    """The sizes this run scaled in from for idle GPUs: a scale-out never goes back to them (no out-in-out cycle)."""
    return sorted({r["from"] for r in resize_history(record) if str(r.get("reason") or "").startswith("scale in")
                   and isinstance(r.get("from"), int)})


def node_prices(text: str, prices: Mapping[str, Any], sizes: Sequence[int]) -> dict[int, float]:
    """A node's USD an hour at each size from ``ML_PLATFORM_ELASTIC_NODE_TYPES`` ("spot:TYPE,...;on-demand:TYPE,...":
    one node runs on the first kind, two or more on the second): the cheapest priced type of the kind (Batch's
    allocation favours it). Sizes whose kind has no priced type are left out (the policy says "not judged")."""
    from .prices import hourly_usd

    kinds = [part.split(":", 1) for part in str(text or "").split(";") if ":" in part]
    found: dict[int, float] = {}
    for size in sizes:
        index = 0 if size == 1 else len(kinds) - 1
        if not kinds or index < 0:
            break
        lifecycle, types = kinds[index]
        rates = []
        for name in types.split(","):
            try:
                rates.append(hourly_usd(prices, name.strip(), lifecycle.strip()))
            except (KeyError, ValueError):
                continue
        if rates:
            found[size] = min(rates)
    return found
