"""Elastic jobs (issue 40, in progress): the resize policy, stated and tested, in plain Python (no CDK, no torch).

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
- and only when it pays: a resize costs ``restart_seconds`` (queue wait, start, image pull, rendezvous, restore:
  measured from the job's own attempts, ``DEFAULT_RESTART_SECONDS`` until measured) at the new size's price. Out is
  taken when the time saved on the remaining work exceeds the restart time; in when the money saved on it exceeds
  the restart's cost. Throughput at another size is the measured one scaled by ``scaling_efficiency`` per doubling.

The errors it guards against, and their rates:

- **A resize that does not pay** (its restart costs more than it saves): never taken on the stated model; the model's
  own error (efficiency, restart time) is bounded by the measured restart time and a conservative efficiency (0.9 a
  doubling: DDP on one placement group); a run records each resize's estimate and its measured restart beside it.
- **Flapping** (out, in, out): at most one resize per ``snooze_seconds`` (30 minutes), so at most 2 an hour of job
  time whatever the metrics do; a plateau and idle GPUs cannot both hold (out needs busy GPUs, in idle ones).
- **Scaling in a busy job on noise**: needs every one of ``idle_periods`` periods under 40%; with 5-minute periods of a
  job at 70% utilization and a per-period standard deviation of 10 points, under 1e-5 per check
  (``tests/unit/test_elastic_policy.py`` simulates it).

Where a loss has stalled for a reason more nodes cannot fix (a learning rate too low, a bad label, a converged
model), the plateau rule scales out for nothing but the cost of the restart: turn it off (``scale_out_on_plateau=
False``); the payback rule still stops it where the remaining work is short.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

# 85 is the health rules' stop (health.HEALTH_STOPPED_EXIT_CODE); 86, next to it, is a resize the job asks for. Neither
# is a signal's (128 + n, e.g. 143 for SIGTERM, which the queue retries), a shell's (126, 127), Python's (1, 2) or
# sysexits.h's (64-78); the queue's retry strategy ends both (EXIT on "*"), and the controller resubmits on 86 only.
RESIZE_EXIT_CODE = 86
DEFAULT_SIZES = (1, 2, 4, 8)
DEFAULT_RESTART_SECONDS = 600.0  # until measured: a queue wait, an instance start, the image pull, a restore


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
    price = seen.node_price_per_hour / 3600.0
    now_seconds = seen.remaining_samples / seen.samples_per_second
    if all(u < policy.idle_utilization for u in recent):
        smaller = [s for s in allowed if s < seen.nodes]
        if not smaller:
            return Decision(seen.nodes, f"hold: idle GPUs, but {seen.nodes} node(s) is the smallest size allowed")
        to = smaller[-1]
        then_seconds = seen.remaining_samples / throughput(seen.samples_per_second, seen.nodes, to,
                                                           policy.scaling_efficiency)
        cost_now = now_seconds * seen.nodes * price
        cost_then = (then_seconds + restart) * to * price
        figures = {"cost_now_usd": cost_now, "cost_then_usd": cost_then, "remaining_seconds": now_seconds}
        if cost_then >= cost_now:
            return Decision(seen.nodes, f"hold: scaling in to {to} would cost {cost_then:.2f} USD against "
                                        f"{cost_now:.2f} to finish as is (the restart does not pay)", restart,
                            restart * to * price, figures=figures)
        return Decision(to, f"scale in: GPU utilization under {policy.idle_utilization:g}% for {len(recent)} periods",
                        restart, restart * to * price, now_seconds - then_seconds - restart, cost_now - cost_then,
                        figures)
    if policy.scale_out_on_plateau and all(u >= policy.busy_utilization for u in recent) and \
            plateaued(seen.val_losses, policy.plateau_evaluations, policy.min_delta):
        larger = [s for s in allowed if s > seen.nodes]
        if not larger:
            return Decision(seen.nodes, f"hold: plateau on busy GPUs, but {seen.nodes} node(s) is the largest size "
                                        "allowed")
        to = larger[0]
        then_seconds = seen.remaining_samples / throughput(seen.samples_per_second, seen.nodes, to,
                                                           policy.scaling_efficiency)
        saved = now_seconds - then_seconds - restart
        figures = {"remaining_seconds": now_seconds, "then_seconds": then_seconds}
        if saved <= 0:
            return Decision(seen.nodes, f"hold: scaling out to {to} would save {now_seconds - then_seconds:.0f} s "
                                        f"of {now_seconds:.0f} s left, less than its {restart:.0f} s restart",
                            restart, restart * to * price, figures=figures)
        cost_now = now_seconds * seen.nodes * price
        cost_then = (then_seconds + restart) * to * price
        return Decision(to, f"scale out: validation loss not {policy.min_delta:.0%} better in "
                            f"{policy.plateau_evaluations} evaluations on GPUs at {policy.busy_utilization:g}% or more",
                        restart, restart * to * price, saved, cost_now - cost_then, figures)
    return Decision(seen.nodes, "hold: neither idle nor a plateau on busy GPUs")
