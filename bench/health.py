"""The training-health rules' error rates, simulated: healthy runs of many shapes (noisy loss and gradient-norm
curves, 2,000 to 50,000 steps) through a fresh ``HealthMonitor`` each, over the whole run, and sick runs (divergence,
NaN, exploding and vanishing gradients, a dead network, a stalled loader) through the same monitor; then, with
``--examples``, examples/pytorch_loop.py itself over several seeds and with its failures injected. A benchmark, not
part of the suite.

Usage: ./platform bench health [--seed N] [--runs N] [--examples] [--example-seeds N] [--set NAME=VALUE ...]
       [--action RULE=ACTION ...] [--only healthy|sick] [--max-steps N] [--workers W] [--json]

- Healthy runs (every stop on them is a false stop): each shape's share of runs stopped by any rule over the whole
  run, with its one-sided 95% Clopper-Pearson upper bound, against the target (at most 1 healthy job in 100,
  TARGET_FALSE_STOP); the healthy shapes pooled (a queue running them in equal parts); the warnings a run gets from
  the warn-only rules (loss_plateau, overfit). Rows marked "edge" are legitimate runs the rules cannot tell from a
  sick one by design (the module's docstring says so and how to turn the rule to warn): measured and reported,
  outside the pool and the exit status.
- Sick runs (every one must stop): the share stopped within the stated number of steps of the fault's start
  (target POWER; the steps follow from the rules' own settings: the checks in a row a rule needs, its windows), the
  rule that stopped it, the steps from the fault to the stop (median, 95th percentile, max), and
  the dollars the stop saved: the time from the stop to the queue's job timeout (24 h, TrainingQueue's
  ``job_timeout``) on a p4d.24xlarge On-Demand (ml_platform_job.prices), and, beside it, to the run's own planned end.
  Rows marked "warn" are faults the rules warn about (they do not stop); "gap" rows are faults no rule stops.
- Examples (``--examples``; the frameworks venv, .venv/frameworks, runs them): bench/health_example.py runs the
  example as a job would (``ML_PLATFORM_CHECKPOINT_URI`` a fresh directory) healthy over several seeds, with
  ``--lr 100`` (x100 its default: it blows up at step 2 and dies), with NaN images from a sample on, and with its loader stalled forever
  (``ML_PLATFORM_HEALTH_STALL_SECONDS=20``): exit code (85: a health stop), the rule and step its run record holds,
  seconds.

``--set NAME=VALUE`` (a HealthRules field, e.g. ``--set start_windows=10``) and ``--action RULE=ACTION`` run the same
draws against other rules: what a changed default buys against the targets. Exit status: 0 when no healthy row misses
the false-stop target (its lower bound over it), the pool meets it (its upper bound under it), every sick row marked
"stop" meets its detection target and, with --examples, every example case ends as it must; else 1.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "constructs", ROOT / "job"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
from ml_platform_job import health  # noqa: E402
from ml_platform_job.health import HealthMonitor, HealthRules  # noqa: E402
from ml_platform_job.prices import hourly_usd, load_prices  # noqa: E402

TARGET_FALSE_STOP = 0.01  # at most 1 healthy job in 100 stopped over its whole run
POWER = 0.97  # each sick shape stopped within its stated steps in at least this share of runs
LEVEL = 0.95  # one-sided confidence of the bounds
STEP_SECONDS = 1.5  # the simulated job's step: 50,000 steps (the longest run) end inside the 24-h limit
INSTANCE, REGION, LIFECYCLE = "p4d.24xlarge", "us-east-1", "on-demand"
SAVE_EVERY_STEPS = 900  # a checkpoint every 30 min of 2-s steps (the adapter's DEFAULT_SAVE_EVERY_MINUTES)
QUEUE_SOURCE = ROOT / "constructs" / "ml_platform_constructs" / "training" / "training_queue.py"
FRAMEWORKS_PYTHON = ROOT / ".venv" / "frameworks" / "bin" / "python"


def job_timeout_hours() -> float:
    """TrainingQueue's default ``job_timeout`` (read from its source: importing the construct needs the CDK)."""
    text = QUEUE_SOURCE.read_text()
    match = re.search(r"job_timeout: Duration = Duration\.(hours|minutes|seconds)\((\d+(?:\.\d+)?)\)", text)
    if not match:
        raise SystemExit(f"bench/health.py: no default job_timeout in {QUEUE_SOURCE} (expected Duration.hours(N))")
    return float(match[2]) / {"hours": 1, "minutes": 60, "seconds": 3600}[match[1]]


def hourly_price() -> float:
    return hourly_usd(load_prices(REGION), INSTANCE, LIFECYCLE)


# --- a run's curves ---------------------------------------------------------------------------------------------------

@dataclass
class Trace:
    """One simulated run: each step's loss and gradients' global norm (step i is index i - 1; None: the adapter gets
    no norm), validation losses by step, the fault's first step (None: healthy), the steps at which it is reclaimed
    (the next attempt resumes from the last checkpoint), and the step after which its loader blocks forever."""
    losses: list
    grads: Optional[list]
    validations: dict = field(default_factory=dict)
    fault: Optional[int] = None
    resumes: tuple = ()  # steps at which a reclaim happened: the next attempt restarts at the last save before
    stall_at: Optional[int] = None  # the loader blocks forever after this step


def loguniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


_CAP: list = [None]  # the longest run (run_one sets it: --max-steps, and the suite's short runs)


def length(rng: random.Random, low: int = 2_000, high: int = 50_000) -> int:
    """A run's steps: log-uniform from ``low`` to ``high`` (under a cap: from half of it to it, at most)."""
    if _CAP[0] is not None:
        high = min(high, _CAP[0])
        low = min(low, high // 2)
    return int(loguniform(rng, low, high))


class Noise:
    """Per-step noise: multiplicative (log-normal with mean 1, ``sigma``) and additive (normal, ``add`` absolute)."""

    def __init__(self, rng: random.Random, sigma: float, add: float = 0.0) -> None:
        self.gauss, self.sigma, self.shift, self.add = rng.gauss, sigma, -sigma * sigma / 2, add

    def __call__(self, value: float) -> float:
        out = value * math.exp(self.sigma * self.gauss(0.0, 1.0) + self.shift)
        if self.add:
            out += self.add * self.gauss(0.0, 1.0)
        return out if out > 0 else value * 0.01  # a loss is positive (cross-entropy, MSE)


def power_curve(rng: random.Random, n: int, start: tuple = (1.0, 5.0), floor: tuple = (0.05, 0.5)):
    """A loss falling as a power law from ``start`` to a floor (a share of the start) by the run's end."""
    l0 = rng.uniform(*start)
    linf = l0 * rng.uniform(*floor)
    alpha, t0 = rng.uniform(0.3, 1.0), loguniform(rng, 10, max(20, n / 20))
    return lambda t: linf + (l0 - linf) * (1 + t / t0) ** -alpha, l0


def grad_curve(rng: random.Random, n: int):
    """A gradient norm that starts high and settles, then drifts up or down by up to 3x over the run."""
    g_end = loguniform(rng, 0.05, 20)
    g0 = g_end * loguniform(rng, 1, 20)
    settle = loguniform(rng, 20, max(40, n / 20))
    drift = loguniform(rng, 1 / 3, 3)
    return lambda t: (g_end + (g0 - g_end) * math.exp(-t / settle)) * drift ** (t / n)


def student_t(rng: random.Random, df: float) -> float:
    return rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(df / 2, 2 / df))


def validations(rng: random.Random, n: int, mean: Callable[[float], float], *, every: tuple = (200, 1000),
                gap: tuple = (0.02, 0.15), sigma: tuple = (0.01, 0.05), rise: float = 0.0) -> dict:
    """A validation loss every so many steps: the training curve plus a generalization gap that grows to ``gap``,
    plus ``rise`` (a share of the best) late in the run, with the eval set's noise."""
    every_steps = int(rng.uniform(*every))
    final_gap, noise = rng.uniform(*gap), rng.uniform(*sigma)
    out = {}
    for step in range(every_steps, n + 1, every_steps):
        share = step / n
        value = mean(step) * (1 + final_gap * share) * (1 + rise * max(0.0, share - 0.6) / 0.4)
        out[step] = value * math.exp(noise * rng.gauss(0, 1))
    return out


def fill(n: int, loss_mean: Callable[[float], float], loss_noise: Noise, grad_mean: Callable[[float], float],
         grad_noise: Callable[[float], float]) -> tuple[list, list]:
    losses, grads = [0.0] * n, [0.0] * n
    for i in range(n):
        t = i + 1
        losses[i] = loss_noise(loss_mean(t))
        grads[i] = grad_noise(grad_mean(t))
    return losses, grads


# --- healthy shapes ---------------------------------------------------------------------------------------------------

def exp_decay(rng: random.Random) -> Trace:
    """Exponential decay to 5-40% of a start of 1-5 over an e-folding of 5-30% of the run; per-step noise
    multiplicative (2, 5, 10 or 20%) and additive (2% of the floor); gradient norms log-normal (sigma 0.2) around a
    curve that settles from up to 20x its end value and drifts 1/3-3x over the run."""
    n = length(rng)
    l0, share, tau = rng.uniform(1, 5), rng.uniform(0.05, 0.4), n * rng.uniform(0.05, 0.3)
    linf = l0 * share
    sigma = rng.choice((0.02, 0.05, 0.1, 0.2))
    losses, grads = fill(n, lambda t: linf + (l0 - linf) * math.exp(-t / tau), Noise(rng, sigma, 0.02 * linf),
                         grad_curve(rng, n), Noise(rng, 0.2))
    return Trace(losses, grads)


def power_law(rng: random.Random) -> Trace:
    """A power law (exponent 0.3-1, time scale 10 steps to 5% of the run) to 5-50% of its start, multiplicative
    noise 10-50% a step, gradient norms log-normal (sigma 0.3), a validation loss every 200-1,000 steps."""
    n = length(rng)
    mean, _ = power_curve(rng, n)
    losses, grads = fill(n, mean, Noise(rng, rng.uniform(0.1, 0.5)), grad_curve(rng, n), Noise(rng, 0.3))
    return Trace(losses, grads, validations(rng, n, mean))


def cosine_schedule(rng: random.Random, n: int) -> list:
    warmup = max(100, int(n * rng.uniform(0.01, 0.05)))
    floor = rng.uniform(0.0, 0.1)
    return [t / warmup if t < warmup else
            floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (t - warmup) / max(1, n - warmup)))
            for t in range(1, n + 1)]


def llm_base(rng: random.Random, n: int):
    """An LLM-like pretraining run: from ln(vocabulary) down a power law in the learning rate's cumulative sum
    (warmup, cosine decay), the gradient norm high at the start, settling, then rising as the rate decays."""
    lr = cosine_schedule(rng, n)
    cumulative, total = [], 0.0
    for value in lr:
        total += value
        cumulative.append(total)
    l0, lend = math.log(rng.choice((32_000, 50_000, 128_000, 256_000))), rng.uniform(2.0, 3.5)
    s0, alpha = rng.uniform(20, 200), rng.uniform(0.3, 0.6)
    scale = (l0 - lend) / (1 - (1 + total / s0) ** -alpha)

    def loss(t: float) -> float:
        return l0 - scale * (1 - (1 + cumulative[int(t) - 1] / s0) ** -alpha)

    g_base, g0, rise = loguniform(rng, 0.2, 2), loguniform(rng, 3, 30), rng.uniform(1.0, 3.0)

    def grad(t: float) -> float:
        return g_base * (1 + (rise - 1) * (1 - lr[int(t) - 1])) + g0 * math.exp(-t / 50)

    return loss, grad


def warmup_cosine(rng: random.Random) -> Trace:
    """LLM pretraining: linear warmup over 1-5% of the run (at least 100 steps), cosine decay to 0-10%; the loss from
    ln(vocabulary) down a power law in the cumulative learning rate to 2-3.5, noise 1-5% a step; the gradient norm
    high for the first ~100 steps, then rising 1-3x as the rate decays."""
    n = length(rng)
    loss, grad = llm_base(rng, n)
    losses, grads = fill(n, loss, Noise(rng, rng.uniform(0.01, 0.05)), grad, Noise(rng, 0.15))
    return Trace(losses, grads, validations(rng, n, loss, gap=(0.0, 0.03), sigma=(0.003, 0.01)))


def step_drops(rng: random.Random) -> Trace:
    """Step decay (ResNet-style): the loss approaches each stage's floor, drops 20-50% at each of 2-3 drops of the
    learning rate, and the gradient norm moves 0.3-3x at each drop."""
    n = length(rng)
    drops = sorted(rng.uniform(0.25, 0.9) * n for _ in range(rng.choice((2, 3))))
    l0 = math.log(rng.choice((10, 100, 1000)))
    floors, level = [], l0 * rng.uniform(0.3, 0.6)
    for _ in range(len(drops) + 1):
        floors.append(level)
        level *= rng.uniform(0.5, 0.8)
    factors, factor = [], 1.0
    for _ in drops:
        factor *= loguniform(rng, 0.3, 3)
        factors.append(factor)
    tau = n * rng.uniform(0.02, 0.1)
    base_grad = grad_curve(rng, n)

    def stage(t: float) -> int:
        return sum(1 for d in drops if t >= d)

    def loss(t: float) -> float:
        k = stage(t)
        start = drops[k - 1] if k else 0.0
        top = l0 if k == 0 else floors[k - 1] + (floors[k] - floors[k - 1]) * 0.0
        return floors[k] + (top - floors[k]) * math.exp(-(t - start) / (tau if k == 0 else tau / 4))

    def grad(t: float) -> float:
        k = stage(t)
        return base_grad(t) * (factors[k - 1] if k else 1.0)

    losses, grads = fill(n, loss, Noise(rng, rng.uniform(0.05, 0.15)), grad, Noise(rng, 0.25))
    return Trace(losses, grads, validations(rng, n, loss, gap=(0.05, 0.3)))


def loss_spikes(rng: random.Random) -> Trace:
    """LLM-style spikes: 1-10 per 10,000 steps, the loss x1.2-2.5 (at most back to its first value, the untrained
    model's) recovering over 20-300 steps, the gradient norm x3-50 recovering over 5-50 steps; overlapping spikes
    take the larger factor."""
    n = length(rng)
    loss, grad = llm_base(rng, n)
    ceiling = loss(1)
    losses, grads = fill(n, loss, Noise(rng, rng.uniform(0.01, 0.05)), grad, Noise(rng, 0.15))
    loss_factor, grad_factor = [1.0] * n, [1.0] * n
    rate = rng.uniform(1, 10) / 10_000
    t = rng.expovariate(rate)
    while t < n:
        start, height, recover = int(t), rng.uniform(0.2, 1.5), rng.uniform(20, 300)
        jump, settle = loguniform(rng, 3, 50), rng.uniform(5, 50)
        for i in range(start, min(n, start + int(recover * 6))):
            loss_factor[i] = max(loss_factor[i], 1 + height * math.exp(-(i - start) / recover))
        for i in range(start, min(n, start + int(settle * 6))):
            grad_factor[i] = max(grad_factor[i], 1 + (jump - 1) * math.exp(-(i - start) / settle))
        t += rng.expovariate(rate)
    for i in range(n):
        if loss_factor[i] > 1:
            losses[i] = max(losses[i], min(losses[i] * loss_factor[i], ceiling * math.exp(0.05 * rng.gauss(0, 1))))
        grads[i] *= grad_factor[i]
    return Trace(losses, grads)


def plateau_restarts(rng: random.Random) -> Trace:
    """A descent, a long plateau (10-40% of the run, the loss flat within its noise), a second descent; or SGDR's
    warm restarts: the loss jumps 10-30% at each restart of the cosine, then falls further."""
    n = length(rng)
    mean, l0 = power_curve(rng, n, floor=(0.2, 0.5))
    if rng.random() < 0.5:
        begin = int(n * rng.uniform(0.1, 0.4))
        span = int(n * rng.uniform(0.1, 0.4))
        second, tau = rng.uniform(0.5, 0.8), n * rng.uniform(0.02, 0.1)

        def loss(t: float) -> float:
            if t < begin:
                return mean(t)
            level = mean(begin)
            if t < begin + span:
                return level
            return level * (second + (1 - second) * math.exp(-(t - begin - span) / tau))
    else:
        cycles = rng.choice((2, 3, 4, 5))
        period = n / cycles
        bump = rng.uniform(0.1, 0.3)

        def loss(t: float) -> float:
            phase = (t % period) / period
            return mean(t) * (1 + bump * 0.5 * (1 + math.cos(math.pi * min(1.0, phase * 4)))
                              * (1 if t >= period else 0))
    losses, grads = fill(n, loss, Noise(rng, rng.uniform(0.03, 0.2)), grad_curve(rng, n), Noise(rng, 0.25))
    return Trace(losses, grads)


def initial_plateau(rng: random.Random) -> Trace:
    """Abrupt learning: the loss flat at its start for 200-3,000 steps (a deep net's first plateau, a task learned
    at once), then a descent."""
    n = length(rng)
    mean, l0 = power_curve(rng, n)
    flat = int(loguniform(rng, 200, 3000))
    losses, grads = fill(n, lambda t: l0 if t < flat else mean(t - flat), Noise(rng, rng.uniform(0.02, 0.2)),
                         grad_curve(rng, n), Noise(rng, 0.25))
    return Trace(losses, grads)


def fine_tune(rng: random.Random) -> Trace:
    """Fine-tuning: short runs from a low loss (0.05-1) falling 10-50% with large relative noise per batch
    (log-normal sigma 0.3-0.8), noisy gradient norms, a validation loss every 100-500 steps."""
    n = length(rng, 2_000, 10_000)
    l0, share, tau = loguniform(rng, 0.05, 1.0), rng.uniform(0.5, 0.9), n * rng.uniform(0.05, 0.3)
    lend = l0 * share

    def loss(t: float) -> float:
        return lend + (l0 - lend) * math.exp(-t / tau)

    losses, grads = fill(n, loss, Noise(rng, rng.uniform(0.3, 0.8)), grad_curve(rng, n), Noise(rng, 0.4))
    return Trace(losses, grads, validations(rng, n, loss, every=(100, 500), gap=(0.0, 0.2)))


def converged_fine_tune(rng: random.Random) -> Trace:
    """A fine-tune of a model already converged on similar data: the loss falls under 1% in the whole run."""
    n = length(rng, 2_000, 10_000)
    l0 = loguniform(rng, 0.05, 1.0)
    drop = rng.uniform(0.0, 0.01)
    losses, grads = fill(n, lambda t: l0 * (1 - drop * t / n), Noise(rng, rng.uniform(0.05, 0.5)),
                         grad_curve(rng, n), Noise(rng, 0.3))
    return Trace(losses, grads)


def rising_objective(rng: random.Random) -> Trace:
    """An objective that is no falling loss (a GAN's discriminator as its generator improves, an RL policy's loss as
    its returns grow): it rises 2-6x over the run with noise 10-40%, gradient norms normal."""
    n = length(rng, 2_000, 20_000)
    l0, rise = loguniform(rng, 0.1, 2.0), rng.uniform(2.0, 6.0)
    losses, grads = fill(n, lambda t: l0 * (1 + (rise - 1) * t / n), Noise(rng, rng.uniform(0.1, 0.4)),
                         grad_curve(rng, n), Noise(rng, 0.3))
    return Trace(losses, grads)


def heavy_tailed(rng: random.Random) -> Trace:
    """Heavy-tailed gradient norms: Student-t (3 degrees of freedom) in the log, or log-normal sigma 0.5-1, and rare
    10-30x spikes lasting 1-5 steps (one per 1,000 steps)."""
    n = length(rng)
    mean, _ = power_curve(rng, n)
    base = grad_curve(rng, n)
    losses, grads = fill(n, mean, Noise(rng, rng.uniform(0.05, 0.3)), base, lambda g: g)
    if rng.random() < 0.5:
        scale = rng.uniform(0.2, 0.4)
        for i in range(n):
            grads[i] *= math.exp(scale * student_t(rng, 3))
    else:
        sigma = rng.uniform(0.5, 1.0)
        for i in range(n):
            grads[i] *= math.exp(sigma * rng.gauss(0, 1))
    t = rng.expovariate(1 / 1000)
    while t < n:
        jump = rng.uniform(10, 30)
        for i in range(int(t), min(n, int(t) + rng.randint(1, 5))):
            grads[i] *= jump
        t += rng.expovariate(1 / 1000)
    return Trace(losses, grads)


def near_zero(rng: random.Random) -> Trace:
    """Converging to a near-zero loss (memorizing a small set, an easy task): exponential down to 1e-5-1e-3 of the
    start, the gradient norm falling as the loss's square root."""
    n = length(rng)
    l0, floor, tau = rng.uniform(0.5, 3), loguniform(rng, 1e-5, 1e-3), n * rng.uniform(0.02, 0.1)
    g0 = loguniform(rng, 0.5, 20)

    def loss(t: float) -> float:
        return l0 * (floor + (1 - floor) * math.exp(-t / tau))

    losses, grads = fill(n, loss, Noise(rng, rng.uniform(0.05, 0.3)), lambda t: g0 * math.sqrt(loss(t) / l0),
                         Noise(rng, 0.3))
    return Trace(losses, grads)


def noisy_validation(rng: random.Random) -> Trace:
    """A healthy generalization gap (2-30%) with a noisy validation set (1-8% per evaluation), and in half the runs
    the validation loss rising up to 10% late in training (overconfident, still improving in accuracy)."""
    n = length(rng)
    mean, _ = power_curve(rng, n)
    losses, grads = fill(n, mean, Noise(rng, rng.uniform(0.05, 0.3)), grad_curve(rng, n), Noise(rng, 0.25))
    rise = rng.uniform(0.0, 0.1) if rng.random() < 0.5 else 0.0
    return Trace(losses, grads, validations(rng, n, mean, every=(100, 1000), gap=(0.02, 0.3), sigma=(0.01, 0.08),
                                            rise=rise))


def fp16_scaler(rng: random.Random) -> Trace:
    """fp16 with a GradScaler (init scale 2^16): the norm given (clip_grad_norm_'s return after unscale_) is inf on
    each skipped step: the first 0-12 steps, the step after each growth (every 2,000 steps, half the time), and a
    rare overflow (one per 1,000 steps); the loss (fp32) stays finite."""
    n = length(rng)
    mean, _ = power_curve(rng, n)
    losses, grads = fill(n, mean, Noise(rng, rng.uniform(0.05, 0.3)), grad_curve(rng, n), Noise(rng, 0.25))
    skipped = set(range(rng.randint(0, 12)))
    skipped |= {i for i in range(2000, n, 2000) if rng.random() < 0.5}
    t = rng.expovariate(1 / 1000)
    while t < n:
        skipped.add(int(t))
        t += rng.expovariate(1 / 1000)
    for i in skipped:
        if i < n:
            grads[i] = math.inf
    return Trace(losses, grads)


def resumed(rng: random.Random) -> Trace:
    """Reclaimed and resumed: a reclaim every 2-8 hours of job time (Poisson); each retry restores the last
    checkpoint (every 30 min) and the rules' state the run recorded there, and redoes the steps since."""
    trace = power_law(rng)
    n = len(trace.losses)
    rate = 1 / (loguniform(rng, 2, 8) * 3600 / STEP_SECONDS)
    resumes, t = [], rng.expovariate(rate)
    while t < n:
        resumes.append(int(t))
        t += rng.expovariate(rate)
    trace.resumes = tuple(resumes)
    return trace


def fp16_big_start(rng: random.Random) -> Trace:
    """fp16 from a 2^32 loss scale (DeepSpeed-style initial_scale_power 32): 16-24 skipped steps at the start, each
    an inf norm."""
    trace = fp16_scaler(rng)
    for i in range(rng.randint(16, 24)):
        trace.grads[i] = math.inf
    return trace


# --- sick shapes ------------------------------------------------------------------------------------------------------

def _sick_base(rng: random.Random) -> tuple[Trace, int, int]:
    """A healthy power-law run, its length, and the fault's first step (10-90% into the run, and 1,000 steps or
    more before its end: the slowest rule's stated time)."""
    n = length(rng)
    mean, _ = power_curve(rng, n)
    losses, grads = fill(n, mean, Noise(rng, rng.uniform(0.05, 0.3)), grad_curve(rng, n), Noise(rng, 0.25))
    return Trace(losses, grads), n, int(rng.uniform(0.1 * n, min(0.9 * n, n - 1000)))


FLOAT32_MAX = 3.4028235e38


def _blow_up(trace: Trace, start: int, loss_tau: float, grad_tau: float) -> None:
    """From ``start``: the loss e-folds every ``loss_tau`` steps, the norm every ``grad_tau``; the first to pass
    float32's largest value is inf at that step, and both are NaN from the next (the weights are no longer finite)."""
    n = len(trace.losses)
    losses, grads = trace.losses, trace.grads
    for i in range(start - 1, n):
        k = i - start + 1
        loss = losses[i] * math.exp(min(700.0, k / loss_tau))
        grad = grads[i] * math.exp(min(700.0, k / grad_tau))
        if loss >= FLOAT32_MAX or grad >= FLOAT32_MAX:
            losses[i] = math.inf if loss >= FLOAT32_MAX else loss
            grads[i] = math.inf if grad >= FLOAT32_MAX else grad
            for j in range(i + 1, n):
                losses[j] = grads[j] = math.nan
            return
        losses[i], grads[i] = loss, grad


def diverging(rng: random.Random) -> Trace:
    """Diverging mid-run (a learning rate too high for a sharper region): the loss e-folds every 10-200 steps from
    the fault, the gradient norm every 20-400 (grad ~ sqrt(loss)), both inf then NaN past float32's range."""
    trace, n, fault = _sick_base(rng)
    tau = loguniform(rng, 10, 200)
    _blow_up(trace, fault, tau, 2 * tau)
    trace.fault = fault
    return trace


def diverging_from_start(rng: random.Random) -> Trace:
    """A learning rate far too high from the first step: the loss e-folds every 2-50 steps from step 1."""
    trace, n, _ = _sick_base(rng)
    tau = loguniform(rng, 2, 50)
    _blow_up(trace, 1, tau, 2 * tau)
    trace.fault = 1
    return trace


def nan_from(rng: random.Random) -> Trace:
    """NaN from the fault on: every step's loss and the gradients' norm (a bad batch poisons the weights)."""
    trace, n, fault = _sick_base(rng)
    for i in range(fault - 1, n):
        trace.losses[i] = trace.grads[i] = math.nan
    trace.fault = fault
    return trace


def nan_no_grads(rng: random.Random) -> Trace:
    """The same with no gradient norm given to the rules (a loop that observes only its loss)."""
    trace = nan_from(rng)
    trace.grads = None
    return trace


def exploding(rng: random.Random) -> Trace:
    """The gradient norm jumps x1000 at the fault and stays there, the loss still finite (clipping holds the update;
    a layer's weights blew up)."""
    trace, n, fault = _sick_base(rng)
    for i in range(fault - 1, n):
        trace.grads[i] *= 1000
    trace.fault = fault
    return trace


def vanishing(rng: random.Random) -> Trace:
    """The gradients vanish at the fault (dead ReLUs, a detached graph, a saturated activation): the norm 1e-12 to
    1e-8 from there (0 in a fifth of the runs), the loss flat."""
    trace, n, fault = _sick_base(rng)
    level, norm = trace.losses[fault - 1], 0.0 if rng.random() < 0.2 else loguniform(rng, 1e-12, 1e-8)
    noise = Noise(rng, 0.05)
    for i in range(fault - 1, n):
        trace.grads[i] = norm * math.exp(0.3 * rng.gauss(0, 1))
        trace.losses[i] = noise(level)
    trace.fault = fault
    return trace


def dead_from_start(rng: random.Random) -> Trace:
    """Blew up and died in the first 5 steps: the loss jumps x3-30 and stays flat there, gradients small but not
    vanishing (1e-4 of their start)."""
    trace, n, _ = _sick_base(rng)
    first = trace.losses[0]
    level, noise = first * loguniform(rng, 3, 30), Noise(rng, rng.uniform(0.01, 0.1))
    jump_at = rng.randint(1, 5)
    for i in range(jump_at - 1, n):
        trace.losses[i] = noise(level)
        trace.grads[i] *= 1e-4
    trace.fault = 1
    return trace


def collapse(rng: random.Random) -> Trace:
    """Collapse to the starting loss (the model forgets everything and predicts uniformly): the loss returns to
    0.8-1.2x its first value over 50 steps and stays, gradient norms normal."""
    trace, n, fault = _sick_base(rng)
    target, noise = trace.losses[0] * rng.uniform(0.8, 1.2), Noise(rng, 0.05)
    for i in range(fault - 1, n):
        k = i - fault + 1
        current = trace.losses[i]
        trace.losses[i] = noise(current + (target - current) * min(1.0, k / 50))
    trace.fault = fault
    return trace


def plateau_sick(rng: random.Random) -> Trace:
    """The learning rate decays to zero at the fault: the loss stays where it is for the rest of the run (warn)."""
    trace, n, fault = _sick_base(rng)
    level, noise = trace.losses[fault - 1], Noise(rng, rng.uniform(0.02, 0.2))
    for i in range(fault - 1, n):
        trace.losses[i] = noise(level)
    trace.fault = fault
    return trace


def overfitting(rng: random.Random) -> Trace:
    """Overfitting: from the fault the validation loss rises linearly to 2x its best by the run's end (warn)."""
    n = length(rng)
    mean, _ = power_curve(rng, n)
    losses, grads = fill(n, mean, Noise(rng, rng.uniform(0.05, 0.3)), grad_curve(rng, n), Noise(rng, 0.25))
    fault = int(n * rng.uniform(0.2, 0.6))
    every, noise = int(rng.uniform(100, 500)), rng.uniform(0.005, 0.03)
    vals = {}
    for step in range(every, n + 1, every):
        value = mean(min(step, fault)) * 1.1 * (1 + max(0, step - fault) / (n - fault))
        vals[step] = value * math.exp(noise * rng.gauss(0, 1))
    return Trace(losses, grads, vals, fault=fault)


def stalled(rng: random.Random) -> Trace:
    """A loader that blocks forever after a step (a hung DataLoader worker, an S3 read that never returns)."""
    trace, n, fault = _sick_base(rng)
    trace.stall_at = fault
    trace.fault = fault
    return trace


# --- the shapes' table ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "healthy", "edge" (legitimate, stopped by design: reported), "stop", "warn", "gap"
    make: Callable[[random.Random], Trace]
    # A sick shape: the stated steps (seconds for a stall) from the fault to the stop, from the rules' own settings
    # (the checks a rule needs in a row, the windows, the threshold); 0: any time.
    within: Callable[[HealthRules], float] = lambda rules: 0
    unit: str = "steps"
    note: str = ""
    expects: str = ""  # a warn shape: the rule that must warn; a stop shape's rule: a warn row when it warns

    def kind_under(self, rules: HealthRules) -> str:
        """"warn" for a stop shape whose rule only warns under ``rules`` (loss_not_decreasing by default)."""
        return "warn" if self.kind == "stop" and self.expects and rules.action(self.expects) == "warn" else self.kind


HEALTHY: tuple[Shape, ...] = (
    Shape("exp decay, noise 2-20%", "healthy", exp_decay),
    Shape("power law, noise 10-50%", "healthy", power_law),
    Shape("LLM warmup + cosine", "healthy", warmup_cosine),
    Shape("step LR drops", "healthy", step_drops),
    Shape("LLM loss spikes", "healthy", loss_spikes),
    Shape("plateau / warm restarts", "healthy", plateau_restarts),
    Shape("fine-tune, noise 30-80%", "healthy", fine_tune),
    Shape("heavy-tailed grad norms", "healthy", heavy_tailed),
    Shape("converging to ~0 loss", "healthy", near_zero),
    Shape("noisy validation", "healthy", noisy_validation),
    Shape("fp16 GradScaler", "healthy", fp16_scaler),
    Shape("resumed after reclaims", "healthy", resumed),
    Shape("flat start, 200-3k steps", "edge", initial_plateau, note="loss_not_decreasing by design"),
    Shape("converged model, more data", "edge", converged_fine_tune, note="loss_not_decreasing=warn (its fix)"),
    Shape("fp16 from a 2^32 scale", "edge", fp16_big_start, note="DeepSpeed's scaler, or a GradScaler not tracked"),
    Shape("GAN / RL objective, rising", "edge", rising_objective, note="turn the loss rules off (docs/HEALTH.md)"),
)

def checks(count: Callable[[HealthRules], int]) -> Callable[[HealthRules], float]:
    """``count(rules)`` checks from the fault's step: a fault mid-window is seen at the next check."""
    return lambda rules: count(rules) * rules.check_every


SICK: tuple[Shape, ...] = (
    Shape("NaN from a step", "stop", nan_from, checks(lambda r: r.non_finite_checks)),
    Shape("NaN, loss only (no norm)", "stop", nan_no_grads, checks(lambda r: r.non_finite_checks + 1),
          note="the first check's window is partly finite"),
    Shape("grad norm x1000", "stop", exploding, checks(lambda r: r.grad_patience)),
    Shape("vanishing grads", "stop", vanishing, checks(lambda r: r.vanishing_patience)),
    Shape("diverging mid-run", "stop", diverging, lambda r: 1000, note="loss e-folds every 10-200 steps"),
    Shape("diverging from step 1", "stop", diverging_from_start, lambda r: 200, note="loss e-folds every 2-50 steps"),
    Shape("dead from step 1", "stop", dead_from_start, checks(lambda r: (r.start_windows + 1) * r.loss_window + 1),
          note="loss x3-30 in 5 steps, flat; a stop with loss_not_decreasing=stop", expects="loss_not_decreasing"),
    Shape("stalled loader", "stop", stalled, lambda r: r.stall_seconds + tick_seconds(r), "s"),
    Shape("LR decayed to 0", "warn", plateau_sick, checks(lambda r: (r.plateau_windows + 2) * r.loss_window),
          expects="loss_plateau"),
    Shape("overfitting (val x2)", "warn", overfitting, note="3 evaluations over +10%", expects="overfit"),
    Shape("collapse to the first loss", "gap", collapse, note="no stop rule sees it"),
)
SHAPES = HEALTHY + SICK


# --- one run through the monitor --------------------------------------------------------------------------------------

class _Null:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


NULL = _Null()


@dataclass
class Outcome:
    shape: str
    trial: int
    steps: int  # the run's planned steps
    stop_rule: Optional[str] = None
    stop_step: Optional[int] = None
    stop_seconds: Optional[float] = None  # job time at the stop
    end_seconds: float = 0.0  # job time at the run's planned end (or where the simulation left it)
    fault: Optional[int] = None
    fault_seconds: Optional[float] = None
    warnings: tuple = ()  # (rule, step) of each warning
    stopped_before_fault: bool = False


class Clock:
    """The job's time (the monitor's ``now``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tick_seconds(rules: HealthRules) -> float:
    """The watch thread's period (HealthMonitor.watch): min(the heartbeat's 60 s, a quarter of stall_seconds)."""
    return max(0.05, min(health.HEARTBEAT_SECONDS, rules.stall_seconds / 4))


class Job:
    """One simulated job: its attempts' monitors on one clock. Progress is given to the monitor in batches, just
    before the clock passes a tick of the stall rule's timer (what the rule reads is the time of the last progress
    at each tick: the same verdicts as a call per step, at a fraction of the cost)."""

    def __init__(self, rules: HealthRules) -> None:
        self.rules, self.clock, self.tick = rules, Clock(), tick_seconds(rules)
        self.next_tick = self.tick
        self.pending = 0
        self.monitor: Optional[HealthMonitor] = None
        self.warnings: list = []

    def attempt(self, state: Optional[dict]) -> HealthMonitor:
        """A new process: a fresh monitor (continuing from ``state``), its timer started now."""
        if self.monitor is not None:
            self.warnings += [(rule, v.step) for rule, v in self.monitor.fired.items() if v.action == "warn"]
        self.monitor = HealthMonitor(self.rules, now=self.clock, stream=NULL)
        if state is not None:
            self.monitor.load_state_dict(state)
        self.next_tick = self.clock.now + self.tick
        self.pending = 0
        return self.monitor

    def advance(self, seconds: float, step: int) -> Optional[Any]:
        """``seconds`` with no progress after the last: the ticks inside run the stall rule; a stop's verdict."""
        clock = self.clock
        end = clock.now + seconds
        if self.next_tick <= end:
            if self.pending:
                self.monitor.progress(self.pending)  # at the last progress's time: now
                self.pending = 0
            while self.next_tick <= end:
                clock.now = self.next_tick
                self.next_tick += self.tick
                verdict = self.monitor.stalled(step)
                if verdict is not None and verdict.action == "stop":
                    return verdict
        clock.now = end
        return None


def simulate_run(trace: Trace, rules: HealthRules, shape: str = "", trial: int = 0) -> Outcome:
    """``trace`` through fresh monitors (one per attempt, each continuing from the state the run recorded at its last
    checkpoint, as the adapter does): the first stop, the warnings, the job time."""
    job = Job(rules)
    clock = job.clock
    n = len(trace.losses)
    out = Outcome(shape, trial, n, fault=trace.fault)
    every = rules.check_every
    losses, grads, vals = trace.losses, trace.grads, trace.validations
    resumes = list(trace.resumes)
    saved_state: Optional[dict] = None
    saved_step = step = 0
    monitor = job.attempt(None)
    verdict = job.advance(STARTUP_SECONDS, 0)
    while step < n and verdict is None:
        if resumes and step >= resumes[0]:
            resumes.pop(0)
            step = saved_step
            clock.now += RESTART_SECONDS  # the old process is gone, its timer with it; the new instance boots
            monitor = job.attempt(saved_state)
            verdict = job.advance(STARTUP_SECONDS, step)
            continue
        if trace.stall_at is not None and step >= trace.stall_at:
            out.fault_seconds = clock.now  # the last step ended; next(loader) never returns
            verdict = job.advance(max(0.0, JOB_TIMEOUT_SECONDS - clock.now), step)
            break
        step += 1
        if clock.now + STEP_SECONDS < job.next_tick:
            clock.now += STEP_SECONDS
        else:
            verdict = job.advance(STEP_SECONDS, step - 1)
            if verdict is not None:
                break
        monitor.loss(losses[step - 1])
        job.pending += 1
        if step % every == 0:
            if grads is not None:
                monitor.gradients(grads[step - 1])
            verdict = monitor.check(step)
            if verdict is not None:
                break
        if vals and step in vals:
            verdict = monitor.validation(vals[step], step)
            if verdict is not None:
                break
        if step % SAVE_EVERY_STEPS == 0:
            saved_state, saved_step = monitor.state_dict(), step
            verdict = job.advance(SAVE_SECONDS, step)
    job.attempt(None)  # the last attempt's warnings
    out.warnings = tuple(job.warnings)
    if verdict is not None:
        out.stop_rule, out.stop_step, out.stop_seconds = verdict.rule, verdict.step, clock.now
        out.stopped_before_fault = trace.fault is not None and verdict.step < trace.fault
    out.end_seconds = clock.now
    if trace.fault is not None and out.fault_seconds is None:
        out.fault_seconds = STARTUP_SECONDS + (trace.fault - 1) * STEP_SECONDS \
            + ((trace.fault - 1) // SAVE_EVERY_STEPS) * SAVE_SECONDS
    return out


STARTUP_SECONDS = 180.0  # TrainingJob.start to the first step: restore, loader workers, the first batch
RESTART_SECONDS = 300.0  # a reclaim: the replacement instance boots
SAVE_SECONDS = 60.0  # a blocking checkpoint save every SAVE_EVERY_STEPS
JOB_TIMEOUT_SECONDS = job_timeout_hours() * 3600


def make_trace(index: int, seed: int, trial: int, max_steps: Optional[int] = None) -> Trace:
    """Run ``trial`` of ``SHAPES[index]``: its own seeded draws (the same run whatever the rules)."""
    shape = SHAPES[index]
    rng = random.Random(f"{seed}:{shape.name}:{trial}")
    _CAP[0] = max_steps
    try:
        return shape.make(rng)
    finally:
        _CAP[0] = None


def run_one(index: int, seed: int, trial: int, rules: HealthRules, max_steps: Optional[int] = None) -> Outcome:
    return simulate_run(make_trace(index, seed, trial, max_steps), rules, SHAPES[index].name, trial)


def _task(arguments: tuple) -> Outcome:
    return run_one(*arguments)


def _worker_signals() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def simulate(indices: Iterable[int], runs: Callable[[Shape], int], seed: int, rules: HealthRules, *,
             workers: int = 1, progress: Optional[Callable[[str], None]] = None,
             max_steps: Optional[int] = None) -> dict[str, list[Outcome]]:
    """``runs(shape)`` runs of each of ``SHAPES[i]`` (at most ``max_steps`` steps each), on ``workers`` processes."""
    indices = list(indices)
    tasks = [(index, seed, trial, rules, max_steps) for index in indices for trial in range(runs(SHAPES[index]))]
    results: dict[str, list[Outcome]] = {SHAPES[index].name: [] for index in indices}
    done, started, said = 0, time.monotonic(), time.monotonic()

    def note(outcome: Outcome) -> None:
        nonlocal done, said
        results[outcome.shape].append(outcome)
        done += 1
        if progress is not None and (time.monotonic() - said > 10 or done == len(tasks)):
            said = time.monotonic()
            progress(f"bench health: {done}/{len(tasks)} simulated runs, {said - started:.0f} s")

    if workers > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_signals) as pool:
            for outcome in pool.imap_unordered(_task, tasks, chunksize=4):
                note(outcome)
            pool.close()
            pool.join()
    else:
        for task in tasks:
            note(_task(task))
    for outcomes in results.values():
        outcomes.sort(key=lambda o: o.trial)
    return results


# --- statistics -------------------------------------------------------------------------------------------------------

def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), each term in logs."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    return min(1.0, math.fsum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                       + i * log_p + (n - i) * log_q) for i in range(k + 1)))


def _solve(condition: Callable[[float], bool]) -> float:
    """The p in [0, 1] where ``condition`` turns from true to false (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if condition(middle) else (low, middle)
    return (low + high) / 2


def upper_bound(k: int, n: int, level: float = LEVEL) -> float:
    """The one-sided Clopper-Pearson upper bound of a rate from ``k`` events in ``n`` runs (0 in n: 1 - 0.05^(1/n),
    about 3/n, the rule of three)."""
    if n == 0:
        return 1.0
    if k >= n:
        return 1.0
    return _solve(lambda p: binomial_cdf(k, n, p) > 1 - level)


def lower_bound(k: int, n: int, level: float = LEVEL) -> float:
    """The one-sided Clopper-Pearson lower bound."""
    if k == 0 or n == 0:
        return 0.0
    return _solve(lambda p: 1 - binomial_cdf(k - 1, n, p) < 1 - level)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def rate_verdict(k: int, n: int, target: float = TARGET_FALSE_STOP) -> str:
    """yes: the upper bound is under the target; **no**: the lower bound is over it; else not shown."""
    if upper_bound(k, n) <= target:
        return "yes"
    return "**no**" if lower_bound(k, n) > target else "not shown"


# --- the tables ------------------------------------------------------------------------------------------------------

def percent(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.2%}" if value < 0.01 else f"{value:.1%}"


def healthy_rows(results: dict[str, list[Outcome]]) -> tuple[list[dict], dict]:
    """Per healthy or edge shape: runs, steps, false stops (by rule), bound, warnings per run; and the pool."""
    rows, pooled = [], {"runs": 0, "stops": 0, "steps": 0, "warnings": 0, "rules": {}}
    lengths: list[int] = []
    for shape in HEALTHY:
        outcomes = results.get(shape.name)
        if not outcomes:
            continue
        stops = [o for o in outcomes if o.stop_rule is not None]
        rules: dict[str, int] = {}
        for o in stops:
            rules[o.stop_rule] = rules.get(o.stop_rule, 0) + 1
        warned: dict[str, int] = {}
        for o in outcomes:
            for rule, _ in o.warnings:
                warned[rule] = warned.get(rule, 0) + 1
        row = {"shape": shape.name, "kind": shape.kind, "runs": len(outcomes),
               "steps": sum(o.steps for o in outcomes), "median_steps": percentile([o.steps for o in outcomes], 0.5),
               "false_stops": len(stops), "rate": len(stops) / len(outcomes),
               "upper_95": upper_bound(len(stops), len(outcomes)), "stop_rules": rules,
               "first_stop_steps": sorted(o.stop_step for o in stops)[:5],
               "warnings_per_run": sum(warned.values()) / len(outcomes), "warning_rules": warned,
               "met": rate_verdict(len(stops), len(outcomes)), "note": shape.note,
               "description": " ".join((shape.make.__doc__ or "").split())}
        rows.append(row)
        if shape.kind == "healthy":
            lengths += [o.steps for o in outcomes]
            pooled["runs"] += len(outcomes)
            pooled["stops"] += len(stops)
            pooled["steps"] += row["steps"]
            pooled["warnings"] += sum(warned.values())
            for rule, count in rules.items():
                pooled["rules"][rule] = pooled["rules"].get(rule, 0) + count
    if pooled["runs"]:
        pooled.update(median_steps=percentile(lengths, 0.5), rate=pooled["stops"] / pooled["runs"],
                      upper_95=upper_bound(pooled["stops"], pooled["runs"]),
                      met=rate_verdict(pooled["stops"], pooled["runs"]),
                      warnings_per_run=pooled["warnings"] / pooled["runs"])
    return rows, pooled


def sick_rows(results: dict[str, list[Outcome]], price: float, settings: Optional[HealthRules] = None) -> list[dict]:
    """Per sick shape: the share stopped (or warned) within its stated steps under ``settings``, the rules, the
    steps from the fault to the stop, the dollars saved."""
    rows = []
    for shape in SICK:
        outcomes = results.get(shape.name)
        if not outcomes:
            continue
        within = shape.within(settings or HealthRules())
        kind = shape.kind_under(settings or HealthRules())
        delays, saved_limit, saved_end, rules = [], [], [], {}
        hits = early = already = 0
        for o in outcomes:
            if kind == "warn":
                after = [step for rule, step in o.warnings if rule == shape.expects and step >= o.fault]
                if not after:
                    # said once per attempt: a run that warned before the fault is not told again
                    already += any(rule == shape.expects and step < o.fault for rule, step in o.warnings)
                    delays.append(math.inf)
                    continue
                delay, rule = min(after) - o.fault, shape.expects
            elif o.stop_rule is None or o.stopped_before_fault:
                early += o.stopped_before_fault
                delays.append(math.inf)
                continue
            else:
                rule = o.stop_rule
                delay = (o.stop_seconds - o.fault_seconds) if shape.unit == "s" else o.stop_step - o.fault
                planned = min(JOB_TIMEOUT_SECONDS, STARTUP_SECONDS + o.steps * STEP_SECONDS
                              + (o.steps // SAVE_EVERY_STEPS) * SAVE_SECONDS)
                if shape.unit == "s":
                    planned = JOB_TIMEOUT_SECONDS  # a hung job runs to its timeout
                saved_limit.append(max(0.0, JOB_TIMEOUT_SECONDS - o.stop_seconds) / 3600 * price)
                saved_end.append(max(0.0, planned - o.stop_seconds) / 3600 * price)
            rules[rule] = rules.get(rule, 0) + 1
            delays.append(delay)
            if within == 0 or delay <= within:
                hits += 1
        finite = [d for d in delays if math.isfinite(d)]
        rows.append({
            "shape": shape.name, "kind": kind, "runs": len(outcomes), "within": within,
            "unit": shape.unit, "detected_in_time": hits, "share": hits / len(outcomes),
            "lower_95": lower_bound(hits, len(outcomes)), "stopped_before_fault": early, "rules": rules,
            "warned_before_fault": already,
            "median": percentile(delays, 0.5) if delays else math.inf,
            "p95": percentile(delays, 0.95) if delays else math.inf, "max": max(delays) if delays else math.inf,
            "max_finite": max(finite) if finite else None,
            "usd_saved_to_limit_median": percentile(saved_limit, 0.5) if saved_limit else 0.0,
            "usd_saved_to_limit_total": sum(saved_limit),
            "usd_saved_to_end_median": percentile(saved_end, 0.5) if saved_end else 0.0,
            "met": (hits / len(outcomes) >= POWER) if kind == "stop" else None,
            "note": shape.note, "description": " ".join((shape.make.__doc__ or "").split())})
    return rows


def figure(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "never"
    return f"{value:,.0f}{' s' if unit == 's' else ''}"


def short_rules(rules: dict) -> str:
    names = {"non_finite": "nan", "exploding_gradients": "explode", "vanishing_gradients": "vanish",
             "loss_diverging": "diverge", "loss_not_decreasing": "not_decr", "loss_plateau": "plateau",
             "overfit": "overfit", "stalled": "stall"}
    ordered = sorted(rules.items(), key=lambda item: -item[1])
    return " ".join(f"{names.get(rule, rule)}:{count}" for rule, count in ordered) or "-"


def healthy_table(rows: list[dict], pooled: dict) -> str:
    heads = ["healthy shape", "runs", "steps (med)", "stops", "rate (95% up)", "rules that stopped", "warn/run",
             "met"]
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    for row in rows:
        met = row["met"] if row["kind"] == "healthy" else f"edge: {row['met'].strip('*')}"
        lines.append(f"| {row['shape']} | {row['runs']} | {row['median_steps']:,} | {row['false_stops']} | "
                     f"{percent(row['rate'])} ({percent(row['upper_95'])}) | {short_rules(row['stop_rules'])} | "
                     f"{row['warnings_per_run']:.2f} | {met} |")
    if pooled.get("runs"):
        lines.append(f"| **pooled** | {pooled['runs']} | {pooled['median_steps']:,} | "
                     f"{pooled['stops']} | {percent(pooled['rate'])} ({percent(pooled['upper_95'])}) | "
                     f"{short_rules(pooled['rules'])} | {pooled['warnings_per_run']:.2f} | {pooled['met']} |")
    return "\n".join(lines)


def sick_table(rows: list[dict]) -> str:
    heads = ["fault", "runs", "in time", "rule", "to stop: med/p95/max", "target", "USD saved", "met"]
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    for row in rows:
        unit = row["unit"]
        if row["kind"] == "warn":
            target = "warn" if not row["within"] else f"warn <= {row['within']:,}"
        elif row["kind"] == "gap":
            target = "(none)"
        else:
            target = f"<= {figure(row['within'], unit)}"
        delays = "/".join(figure(row[k], unit) for k in ("median", "p95", "max"))
        usd = f"{row['usd_saved_to_limit_median']:,.0f}" if row["kind"] == "stop" else "-"
        met = {True: "yes", False: "**no**", None: row["kind"]}[row["met"]]
        lines.append(f"| {row['shape']} | {row['runs']} | {percent(row['share'])} | {short_rules(row['rules'])} | "
                     f"{delays} | {target} | {usd} | {met} |")
    return "\n".join(lines)


def assumptions(rules: HealthRules, price: float) -> str:
    changed = {f.name: getattr(rules, f.name) for f in fields(HealthRules)
               if getattr(rules, f.name) != getattr(HealthRules(), f.name)}
    return (f"Rules: HealthRules({', '.join(f'{k}={v!r}' for k, v in changed.items())}) "
            f"(defaults{' but those' if changed else ''}: check_every {rules.check_every}); actions "
            f"{ {r: rules.action(r) for r in health.RULES} }.\n"
            f"Job: {STEP_SECONDS:g} s a step, {STARTUP_SECONDS:g} s from start to the first step, a {SAVE_SECONDS:g}-s "
            f"save every {SAVE_EVERY_STEPS} steps (the state a retry resumes from), the stall rule's timer every "
            f"{tick_seconds(rules):g} s; time limit {JOB_TIMEOUT_SECONDS / 3600:g} h (TrainingQueue job_timeout); "
            f"{INSTANCE} On-Demand {REGION} {price:.2f} USD/h (ml_platform_job.prices). USD saved: the median "
            f"sick run's stop to the time limit.\n"
            f"Targets: healthy runs stopped <= {TARGET_FALSE_STOP:.0%} (one-sided {LEVEL:.0%} Clopper-Pearson upper "
            f"bound under it: yes; lower bound over it: **no**); sick runs stopped within the stated steps >= "
            f"{POWER:.0%}.")


# --- the examples -----------------------------------------------------------------------------------------------------

EXAMPLE_CASES = (
    # case, the runner's arguments, the exit the case must end with, the rules that may stop it (or, exit 0: the rules
    # that must warn), the case's own health settings
    ("healthy", [], 0, (), {}),
    # The network blows up at step 2 and dies at chance level: the loss neither rises nor falls, which
    # loss_not_decreasing sees, a warning by default; a stop for training from scratch (docs/HEALTH.md). 20 epochs:
    # 1,200 steps, past its (start_windows + 1) x loss_window x check_every = 1,100.
    ("lr x100, 20 epochs", ["--lr", "100", "--epochs", "20"], 0, ("loss_not_decreasing",), {}),
    ("lr x100, 20 epochs, not learning a stop", ["--lr", "100", "--epochs", "20"], health.HEALTH_STOPPED_EXIT_CODE,
     ("loss_diverging", "non_finite", "exploding_gradients", "loss_not_decreasing"),
     {health.RULES_ENV: "loss_not_decreasing=stop"}),
    ("NaN input", ["--inject", "nan"], health.HEALTH_STOPPED_EXIT_CODE, ("non_finite",), {}),
    ("stalled loader", ["--inject", "stall"], health.HEALTH_STOPPED_EXIT_CODE, ("stalled",), {}),
)
EXAMPLE_STALL_SECONDS = 20


def run_example(case: str, arguments: list, seed: int, workdir: Path, timeout: float = 600.0,
                settings: Optional[dict] = None) -> dict:
    """bench/health_example.py (the frameworks venv) once: exit code, the rule and step its run record holds, the
    fault's start (the runner's note), seconds."""
    from ml_platform_job.tracking import RECORD_NAME

    checkpoints = workdir / f"{re.sub(r'[^a-z0-9]+', '-', case.lower())}-{seed}"
    env = {**os.environ, "ML_PLATFORM_CHECKPOINT_URI": str(checkpoints),
           "ML_PLATFORM_STOP_FILE": str(workdir / "no-stop"), "ML_PLATFORM_JOB_PID_FILE": str(checkpoints) + ".pid",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "job"), str(ROOT)]),
           "ML_PLATFORM_HEALTH_STALL_SECONDS": str(EXAMPLE_STALL_SECONDS)}
    for name in (health.MODE_ENV, health.RULES_ENV, health.CHECK_EVERY_ENV, "AWS_BATCH_JOB_ID", "AWS_BATCH_JQ_NAME"):
        env.pop(name, None)
    env.update(settings or {})
    command = [str(FRAMEWORKS_PYTHON), str(ROOT / "bench" / "health_example.py"), "--seed", str(seed), *arguments]
    started = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        code, stdout, tail = done.returncode, done.stdout, (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired as error:
        code, stdout, tail = None, "", f"timed out after {timeout:g} s: {str(error.stderr or '')[-800:]}"
    seconds = time.monotonic() - started
    record_path = checkpoints / RECORD_NAME
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    fault_path = Path(str(checkpoints) + ".fault.json")
    fault = json.loads(fault_path.read_text()) if fault_path.exists() else {}
    summary = record.get("health") or {}
    stop = summary.get("stop") or {}
    accuracies = re.findall(r"Test set: Accuracy: \d+/\d+ \((\d+%)\)", stdout)
    return {"case": case, "seed": seed, "exit": code, "rule": stop.get("rule"), "step": stop.get("step"),
            "message": stop.get("message"), "seconds": round(seconds, 1),
            "fault_step": 1 if "--lr" in arguments else fault.get("first_non_finite_step"),
            "seconds_without_progress": (stop.get("values") or {}).get("seconds_without_progress"),
            "rules": summary.get("rules"), "accuracy": accuracies[-1] if accuracies else None,
            "warned": [(w.get("rule"), w.get("step")) for w in summary.get("warnings") or []],
            "tail": tail if code not in (0, health.HEALTH_STOPPED_EXIT_CODE) else ""}


def examples(seeds: int, base_seed: int, progress: Callable[[str], None]) -> list[dict]:
    if not FRAMEWORKS_PYTHON.exists():
        raise SystemExit(f"bench/health.py --examples: {FRAMEWORKS_PYTHON} is missing (./platform test-frameworks "
                         "makes it)")
    out = []
    with tempfile.TemporaryDirectory(prefix="health-bench-") as directory:
        for case, arguments, _, _, settings in EXAMPLE_CASES:
            for seed in (range(base_seed, base_seed + seeds) if case == "healthy" else (base_seed,)):
                progress(f"bench health: examples/pytorch_loop.py, {case}, seed {seed}")
                out.append(run_example(case, arguments, seed, Path(directory), settings=settings))
                progress(f"  exit {out[-1]['exit']}, {out[-1]['rule'] or 'no stop'}"
                         + (f" at step {out[-1]['step']}" if out[-1]["step"] is not None else "")
                         + f", {out[-1]['seconds']:.0f} s" + (f"\n{out[-1]['tail']}" if out[-1]["tail"] else ""))
    return out


def example_met(result: dict) -> bool:
    """The case's exit; a stop by one of its rules, or (exit 0) no stop and a warning from each rule it names."""
    [(_, _, code, rules, _)] = [c for c in EXAMPLE_CASES if c[0] == result["case"]]
    if result["exit"] != code:
        return False
    if code == 0:
        warned = {rule for rule, _ in result.get("warned") or ()}
        return result["rule"] is None and set(rules) <= warned
    return result["rule"] in rules


def examples_table(results: list[dict]) -> str:
    heads = ["example case", "seed", "exit", "rule", "fault -> stop", "seconds", "met"]
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    for r in results:
        if r["rule"] == "stalled":
            where = f"step {r['step']}, {r['seconds_without_progress']:.0f} s without progress"
        elif r["step"] is not None:
            where = (f"step {r['fault_step']} -> {r['step']}" if r["fault_step"] is not None
                     else f"stop at step {r['step']}")
        else:
            where = f"finished, test accuracy {r['accuracy']}" if r["accuracy"] else "finished"
            where += "".join(f"; {rule} warned at step {step}" for rule, step in r.get("warned") or ())
        lines.append(f"| {r['case']} | {r['seed']} | {r['exit']} | {r['rule'] or '-'} | {where} | "
                     f"{r['seconds']:.0f} | {'yes' if example_met(r) else '**no**'} |")
    return "\n".join(lines)


# --- the command -----------------------------------------------------------------------------------------------------

def parse_setting(text: str) -> tuple[str, Any]:
    name, _, raw = text.partition("=")
    kinds = {f.name: f for f in fields(HealthRules)}
    if name not in kinds or name in ("actions", "mode") or not raw:
        raise ValueError(f"{text!r}: NAME=VALUE with NAME a HealthRules threshold "
                         f"({', '.join(f for f in kinds if f not in ('actions', 'mode'))})")
    default = getattr(HealthRules(), name)
    if name == "max_grad_norm":
        return name, None if raw.lower() == "none" else float(raw)
    return name, int(raw) if isinstance(default, int) else float(raw)


def parser():
    from ops.cli import Parser, add_seed, bounded

    bench = Parser("./platform bench health", description=__doc__.split("\n\n")[0])
    add_seed(bench)
    bench.add_argument("--runs", type=bounded(1, 100_000, "simulated runs per shape", example="--runs 300",
                                              integer=True), default=300,
                       help="simulated runs per shape (default 300: 0 false stops in 300 bound a shape's rate under "
                            "1%%)")
    bench.add_argument("--examples", action="store_true",
                       help="also run examples/pytorch_loop.py (the frameworks venv): healthy over --example-seeds "
                            "seeds, --lr 100, NaN input, a stalled loader (a few minutes)")
    bench.add_argument("--example-seeds", type=bounded(1, 100, "healthy example runs", example="--example-seeds 5",
                                                       integer=True), default=5,
                       help="healthy runs of the example, seeds --seed on (default 5)")
    bench.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="a HealthRules threshold for this run (e.g. start_windows=10); repeatable")
    bench.add_argument("--action", action="append", default=[], metavar="RULE=ACTION",
                       help="a rule's action for this run (e.g. loss_not_decreasing=warn); repeatable")
    bench.add_argument("--only", choices=("healthy", "sick", "examples"), default=None,
                       help="one of the two simulations, or (with nothing simulated) the examples")
    bench.add_argument("--max-steps", type=bounded(200, 1_000_000, "the longest simulated run, steps", example=
                                                   "--max-steps 3000", integer=True), default=None,
                       help="cap every simulated run's length (default: 2,000 to 50,000 steps): a quick look")
    bench.add_argument("--workers", type=bounded(1, 64, "processes", example="--workers 2", integer=True),
                       default=os.cpu_count() or 1, help="processes (default: one per core)")
    bench.add_argument("--json", action="store_true", help="the results as JSON (the tables' rows and the verdict)")
    return bench


def rules_from(args, bench) -> HealthRules:
    settings: dict[str, Any] = {}
    try:
        for text in args.set:
            name, value = parse_setting(text)
            settings[name] = value
        actions = {}
        for text in args.action:
            rule, _, action = text.partition("=")
            actions[rule] = action
        return HealthRules(actions=actions, **settings)
    except (ValueError, health.HealthConfigError) as error:
        bench.error(f"argument --set/--action: {error}")


def _finite(value: Any) -> Any:
    """``value`` for strict JSON: inf and NaN as strings ("never" for a run that never stopped)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "never" if value == math.inf else str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str]) -> int:
    from ops.cli import fit

    bench = parser()
    args = bench.parse_args(argv)
    rules = rules_from(args, bench)
    price = hourly_price()
    started = time.monotonic()

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    indices = [i for i, s in enumerate(SHAPES) if args.only is None
               or args.only != "examples" and (args.only == "healthy") == (s.kind in ("healthy", "edge"))]
    results = simulate(indices, lambda shape: args.runs, args.seed, rules, workers=args.workers, progress=progress,
                       max_steps=args.max_steps)
    healthy, pooled = healthy_rows(results)
    sick = sick_rows(results, price, rules)
    example_results = examples(args.example_seeds, args.seed, progress) \
        if args.examples or args.only == "examples" else []
    healthy_ok = all(r["met"] != "**no**" for r in healthy if r["kind"] == "healthy") and \
        (not pooled.get("runs") or pooled["met"] == "yes")
    sick_ok = all(r["met"] is not False for r in sick)
    examples_ok = all(example_met(r) for r in example_results)
    met = healthy_ok and sick_ok and examples_ok
    seconds = time.monotonic() - started
    if args.json:
        print(json.dumps(_finite({"seed": args.seed, "runs_per_shape": args.runs, "rules": {
            f.name: getattr(rules, f.name) for f in fields(HealthRules)}, "price_usd_per_hour": price,
            "step_seconds": STEP_SECONDS, "job_timeout_hours": JOB_TIMEOUT_SECONDS / 3600,
            "healthy": healthy, "pooled": pooled, "sick": sick, "examples": example_results,
            "seconds": round(seconds, 1), "met": met}), indent=2, allow_nan=False))
        return 0 if met else 1
    print(fit(assumptions(rules, price)))
    if healthy:
        print()
        print(healthy_table(healthy, pooled))
    if sick:
        print()
        print(sick_table(sick))
        stops = [r for r in sick if r["kind"] == "stop"]
        print(fit(f"\nUSD saved per sick run, median, against running to the {JOB_TIMEOUT_SECONDS / 3600:g} h limit "
                  f"(against the run's own planned end, {STEP_SECONDS:g} s a step): " + "; ".join(
                      f"{r['shape']} {r['usd_saved_to_limit_median']:,.0f} ({r['usd_saved_to_end_median']:,.0f})"
                      for r in stops) + "."))
        for r in sick:
            if r["kind"] == "warn":
                print(fit(f"{r['shape']}: warned after the fault in {r['detected_in_time']} of {r['runs']} runs; "
                          f"{r['warned_before_fault']} more had warned before it (a rule warns once an attempt)"))
        for r in stops:
            print(fit(f"{r['shape']}: stopped within {figure(r['max_finite'], r['unit'])} "
                      f"{'' if r['unit'] == 's' else 'steps '}of the fault in {r['detected_in_time']} of {r['runs']} "
                      f"runs (target <= {figure(r['within'], r['unit'])}{'' if r['unit'] == 's' else ' steps'})"
                      + (f"; {r['stopped_before_fault']} stopped before the fault" if r["stopped_before_fault"]
                         else "")))
    if example_results:
        print()
        print(examples_table(example_results))
    print(fit(f"\nseed {args.seed}, " + (f"{args.runs} runs a shape" if indices else "no simulation")
              + (f" of at most {args.max_steps:,} steps" if args.max_steps and indices else "")
              + f", {args.workers} processes, {seconds:.0f} s; targets: "
              + ("met" if met else "NOT met")))
    return 0 if met else 1


if __name__ == "__main__":
    from ops import terminal

    terminal.entry_point(main)
