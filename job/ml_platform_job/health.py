"""Training health: rules that stop a job that diverges, produces NaN or stalls before it burns its budget, at a
stated false-stop rate (standard library; torch only to read tensors it is given).

SageMaker Debugger's built-in rules are the reference (closed to new customers, and never available beside AWS Batch:
https://docs.aws.amazon.com/sagemaker/latest/dg/debugger-built-in-rules.html); Lightning's ``EarlyStopping
(check_finite=True, divergence_threshold=...)`` and Keras's ``TerminateOnNaN`` do the in-process part. Ours run inside
the job, through its adapter (``TrainingJob.observe``, the Trainer and Lightning callbacks), and read the loss and the
gradients' global norm once every ``check_every`` steps (one device sync per check, no I/O per step):

==========================  ==========================================================================  ==========
rule                        fires when (defaults)                                                        action
==========================  ==========================================================================  ==========
``non_finite``              the loss of every step of a check, or the gradients' norm, is NaN or inf,   stop
                            on 2 checks in a row (Debugger's ExplodingTensor)
``exploding_gradients``     the gradients' norm is over 100x the median of its last 50 checks (or over  stop
                            ``max_grad_norm``, when set) on 3 checks in a row
``vanishing_gradients``     the gradients' norm is under 1e-7 (Debugger's VanishingGradient) on 5       stop
                            checks in a row
``loss_diverging``          the loss (mean of a check) is over 1.5x the median of the run's first 10    stop
                            checks, on 5 checks in a row: the job undid its progress and more
                            (Lightning's divergence)
``loss_not_decreasing``     the loss (median of a window of 10 checks) is not 5% under the first        warn
                            window's after 10 more windows (1,100 steps): the job has not learned,
                            e.g. a network that blew up and died (Debugger's LossNotDecreasing)
``loss_plateau``            after progress, the window's loss has not fallen 1% under its best for 20   warn
                            windows (2,000 steps): converged, or a learning rate decayed too far
``overfit``                 the validation loss is 10% over its best on 3 evaluations in a row          warn
                            (Debugger's Overfit, ``ratio_threshold`` 0.1)
``stalled``                 no step (nor evaluation batch, nor ``progress()``) for 1,800 s (Debugger's  stop
                            StalledTrainingRule; twice that before the first step, saves and restores
                            count as progress); the queue's watcher stops a job that cannot stop
                            itself (no heartbeat for 1,800 + 900 s)
==========================  ==========================================================================  ==========

A rule whose action is ``stop`` ends the job: it checkpoints (unless the state is NaN: the newest checkpoint stays the
last good one), records the rule, the step and the values in its run, prints the fix, and exits
``HEALTH_STOPPED_EXIT_CODE`` (85), which the queue never retries. ``warn`` says the same once and trains on. The
not-learning, plateau and overfitting rules warn by default (``loss_not_decreasing=stop`` for training from
scratch: continued pretraining and fine-tunes from a good start fall less than 5%): a slow start, a schedule's plateau or a validation bump
is often healthy, and a stop would end a job that was on its way. Under several ranks the loss is summed over all of
them at a check (``reduce``): every rank judges the job's loss, and a stop is one job's, not any rank's. Their rates, measured by ``./platform bench health``, are in
docs/HEALTH.md and docs/BENCHMARKS.md.

Configuration: ``HealthRules`` (keyword arguments), or the job's environment (``HealthRules.from_env``):
``ML_PLATFORM_HEALTH`` = stop | warn | off (the whole job), ``ML_PLATFORM_HEALTH_RULES`` = ``rule=action,...``
(e.g. ``overfit=stop,vanishing_gradients=off``), ``ML_PLATFORM_HEALTH_STALL_SECONDS``,
``ML_PLATFORM_HEALTH_CHECK_EVERY``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import threading
import time
from collections import deque
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping, Optional

# Not 143 (128 + SIGTERM, the stop the queue retries), not 128 + any signal (129-159: a kill, 137 out of memory,
# 139 a segfault), not 1 (Python's uncaught exception, torchrun's failed worker), 2 (argparse), 64-78 (sysexits),
# 126-127 (the shell's), 255. The queue's retry strategy retries 143 and Batch's own reasons only; every other code,
# this one included, ends the job (an EXIT entry matches "*"). A script that exits 85 by itself is told apart by its
# run record, which holds a health stop only when a rule fired.
HEALTH_STOPPED_EXIT_CODE = 85
# The file a worker leaves in the launcher's private folder (ML_PLATFORM_LAUNCH_DIR) when a rule stopped it: torchrun
# exits 1 when its workers exit 85, and ``launch`` turns that back into 85.
HEALTH_MARKER = "health-stopped"

HEALTH_NAMESPACE = "MLPlatform/Health"
STOP_METRIC = "HealthStop"  # 1 per stop, dimensions Queue and Rule: the queue's health alarms
WARNING_METRIC = "HealthWarning"  # 1 per warning, dimensions Queue and Rule: the dashboard's health row
HEARTBEAT_METRIC = "Progress"  # steps and evaluation batches per minute, dimensions Queue and JobId: the watcher
RULE_DIMENSION, QUEUE_DIMENSION, JOB_DIMENSION = "Rule", "Queue", "JobId"

RULES = ("non_finite", "exploding_gradients", "vanishing_gradients", "loss_diverging", "loss_not_decreasing",
         "loss_plateau", "overfit", "stalled")
ACTIONS = ("stop", "warn", "off")
DEFAULT_ACTIONS = {"non_finite": "stop", "exploding_gradients": "stop", "vanishing_gradients": "stop",
                   "loss_diverging": "stop", "loss_not_decreasing": "warn", "loss_plateau": "warn", "overfit": "warn",
                   "stalled": "stop"}
STALL_SECONDS = 1800.0  # Debugger's StalledTrainingRule threshold
# The queue's watcher stops a job with no heartbeat for STALL_SECONDS + WATCHER_GRACE_SECONDS: the job's own stop
# (which records the run) comes first; the watcher is for a job that cannot stop itself (a hung process).
WATCHER_GRACE_SECONDS = 900.0
# Before its first step an attempt may go STARTUP_FACTOR x stall_seconds without progress (a model's download, the
# framework's restore, NCCL's start, torch.compile's first step).
STARTUP_FACTOR = 2.0
HEARTBEAT_SECONDS = 60.0

MODE_ENV = "ML_PLATFORM_HEALTH"
RULES_ENV = "ML_PLATFORM_HEALTH_RULES"
STALL_ENV = "ML_PLATFORM_HEALTH_STALL_SECONDS"
CHECK_EVERY_ENV = "ML_PLATFORM_HEALTH_CHECK_EVERY"

# What to do when a rule fires: the job's log line, the run record and the queue's alarm say it.
FIXES = {
    "non_finite": "lower the learning rate (a tenth), clip gradients (torch.nn.utils.clip_grad_norm_ at the norm "
                  "the run recorded before the NaN), use bf16 or a GradScaler with fp16, and check the input for NaN",
    "exploding_gradients": "clip gradients at the norm the run had before the jump (torch.nn.utils.clip_grad_norm_"
                           "(model.parameters(), max_norm=<its median>)), lower the learning rate, warm it up",
    "vanishing_gradients": "check that the loss reaches the weights (no detach, no frozen layers by mistake), the "
                           "initialization and activations (saturated sigmoid/tanh, dead ReLUs), and the learning "
                           "rate's schedule (decayed to zero?)",
    "loss_diverging": "lower the learning rate (a tenth), clip gradients at the norm the run had while the loss "
                      "fell, add a learning-rate warmup; then resubmit under a new job name",
    "loss_not_decreasing": "the model is not learning: a learning rate too high (the loss jumped, then the network "
                           "died: lower it a tenth) or too low, labels that do not match the inputs, frozen weights, "
                           "or a loss that does not reach them",
    "loss_plateau": "the learning rate may be too low or decayed, or training has converged (fewer epochs, or early "
                    "stopping, saves the rest of the run's cost)",
    "overfit": "keep the checkpoint of the best validation loss and stop there; add regularization, augmentation "
               "or data",
    "stalled": "check the input pipeline (a hung DataLoader worker, S3 or a file system that stopped answering), a "
               "rank waiting on a dead one in a collective (set NCCL's timeout), or a deadlock; a validation "
               "longer than the threshold needs progress() calls in it",
}


class HealthConfigError(ValueError):
    """A health setting out of range: names the setting, the value, what is allowed and the fix."""


@dataclass(frozen=True)
class HealthRules:
    """The rules' settings (every default is Debugger's where it has one; see the module's table).

    ``mode``: "stop" (each rule's action), "warn" (every stop becomes a warning: a job's first runs), "off".
    ``actions``: a rule's own action (stop, warn, off), over DEFAULT_ACTIONS. ``check_every``: steps between two reads
    of the loss and the gradients' norm (one device sync each). The rest: the thresholds in the module's table."""
    mode: str = "stop"
    actions: Mapping[str, str] = field(default_factory=dict)
    check_every: int = 10
    non_finite_checks: int = 2
    max_grad_norm: Optional[float] = None
    grad_jump: float = 100.0
    grad_history: int = 50
    grad_warmup: int = 10
    grad_patience: int = 3
    vanishing_threshold: float = 1e-7
    vanishing_patience: int = 5
    loss_rise: float = 1.5
    loss_patience: int = 5
    loss_window: int = 10
    min_delta: float = 0.01
    start_windows: int = 10
    learn_delta: float = 0.05
    plateau_windows: int = 20
    overfit_ratio: float = 0.1
    overfit_patience: int = 3
    stall_seconds: float = STALL_SECONDS

    def __post_init__(self) -> None:
        if self.mode not in ACTIONS:
            raise HealthConfigError(f"mode={self.mode!r}: one of stop, warn, off; set mode='warn' to try the rules "
                                    "without stopping")
        for rule, action in dict(self.actions).items():
            if rule not in RULES:
                raise HealthConfigError(f"actions[{rule!r}]: no such rule; the rules are {', '.join(RULES)}")
            if action not in ACTIONS:
                raise HealthConfigError(f"actions[{rule!r}]={action!r}: one of stop, warn, off")
        whole = {"check_every": (1, 100_000), "non_finite_checks": (1, 1000), "grad_history": (3, 100_000),
                 "grad_warmup": (1, 100_000), "grad_patience": (1, 1000), "vanishing_patience": (1, 1000),
                 "loss_patience": (1, 1000), "loss_window": (1, 100_000), "plateau_windows": (1, 100_000),
                 "start_windows": (1, 100_000),
                 "overfit_patience": (1, 1000)}
        for name, (low, high) in whole.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise HealthConfigError(f"{name}={value!r}: a whole number from {low} to {high}; the default is "
                                        f"{_DEFAULTS[name]}")
        bounded = {"grad_jump": (1.0, False), "vanishing_threshold": (0.0, False), "loss_rise": (1.0, False),
                   "min_delta": (0.0, True), "learn_delta": (0.0, False), "overfit_ratio": (0.0, False), "stall_seconds": (10.0, True)}
        for name, (low, inclusive) in bounded.items():
            value = getattr(self, name)
            if not _number(value) or value < low or (value == low and not inclusive):
                allowed = f"at least {low:g}" if inclusive else f"over {low:g}"
                raise HealthConfigError(f"{name}={value!r}: a number {allowed}; the default is {_DEFAULTS[name]}")
        if self.max_grad_norm is not None and (not _number(self.max_grad_norm) or self.max_grad_norm <= 0):
            raise HealthConfigError(f"max_grad_norm={self.max_grad_norm!r}: a positive norm, or None (the jump "
                                    "against the run's own history only)")
        if self.grad_warmup > self.grad_history:
            raise HealthConfigError(f"grad_warmup={self.grad_warmup}: at most grad_history ({self.grad_history}); "
                                    "the median needs that many checks first")

    def action(self, rule: str) -> str:
        """The rule's action as the job takes it: off when the mode is off, warn for a stop when the mode is warn."""
        chosen = dict(self.actions).get(rule, DEFAULT_ACTIONS[rule])
        if self.mode == "off" or chosen == "off":
            return "off"
        return "warn" if self.mode == "warn" else chosen

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **settings: Any) -> "HealthRules":
        """The settings given, over the job's environment (``ML_PLATFORM_HEALTH``, ``ML_PLATFORM_HEALTH_RULES``,
        ``ML_PLATFORM_HEALTH_STALL_SECONDS``, ``ML_PLATFORM_HEALTH_CHECK_EVERY``), over the defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        mode = (env.get(MODE_ENV) or "").strip().lower()
        if mode:
            values["mode"] = mode
        listed = (env.get(RULES_ENV) or "").strip()
        if listed:
            actions = {}
            for item in listed.split(","):
                rule, _, action = item.partition("=")
                if not action:
                    raise HealthConfigError(f"{RULES_ENV}={listed!r}: rule=action pairs, e.g. overfit=stop,"
                                            "vanishing_gradients=off")
                actions[rule.strip()] = action.strip().lower()
            values["actions"] = actions
        for name, variable, kind in (("stall_seconds", STALL_ENV, float), ("check_every", CHECK_EVERY_ENV, int)):
            raw = (env.get(variable) or "").strip()
            if raw:
                try:
                    values[name] = kind(raw)
                except ValueError:
                    raise HealthConfigError(f"{variable}={raw!r}: a number; the default is {_DEFAULTS[name]}") from None
        if "actions" in settings and "actions" in values:
            settings = {**settings, "actions": {**values["actions"], **dict(settings["actions"])}}
        return cls(**{**values, **settings})


_DEFAULTS = {f.name: f.default for f in fields(HealthRules) if f.default is not MISSING}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Verdict:
    """A rule that fired: what the job does (``action`` stop or warn), where, the values that made it fire, and the
    fix."""
    rule: str
    action: str
    step: int
    values: Mapping[str, Any]
    message: str

    @property
    def fix(self) -> str:
        return FIXES[self.rule]

    def line(self) -> str:
        """The job's log line: the rule, the step, why, the fix."""
        what = "stopping the job" if self.action == "stop" else "training goes on (warn only)"
        return f"ml_platform_job health: {self.rule} at step {self.step}: {self.message}; {what}. Fix: {self.fix}"

    def to_dict(self) -> dict:
        return {"rule": self.rule, "action": self.action, "step": self.step, "values": dict(self.values),
                "message": self.message, "fix": self.fix}


def _as_float(value: Any) -> float:
    """A Python number or a one-element tensor as a float (a tensor's read is a device sync: checks only)."""
    if hasattr(value, "detach"):
        value = value.detach()
        if hasattr(value, "float"):
            value = value.float()
        return float(value.item())
    return float(value)


def grad_norm(parameters: Iterable[Any]) -> Optional[float]:
    """The global L2 norm of the parameters' gradients (None when none has one), as ``clip_grad_norm_`` computes it:
    one device sync."""
    import torch  # type: ignore[import-not-found]

    grads = [p.grad.detach() for p in parameters if getattr(p, "grad", None) is not None]
    if not grads:
        return None
    norms = [torch.linalg.vector_norm(g.float()) for g in grads]
    if len({n.device for n in norms}) > 1:
        norms = [n.to(norms[0].device) for n in norms]
    return float(torch.linalg.vector_norm(torch.stack(norms)).item())


class _LossWindow:
    """The losses of the steps since the last check, summed on the device they come from (no sync per step)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total: Any = 0.0
        self.bad: Any = 0
        self.count = 0

    def add(self, value: Any) -> None:
        if hasattr(value, "detach"):
            import torch  # type: ignore[import-not-found]

            value = value.detach().double().reshape(-1).mean() if value.numel() != 1 else value.detach().double()
            finite = torch.isfinite(value)
            self.total = self.total + torch.where(finite, value, torch.zeros_like(value))
            self.bad = self.bad + (~finite).int()
        else:
            value = float(value)
            if math.isfinite(value):
                self.total += value
            else:
                self.bad += 1
        self.count += 1

    def read(self, reduce: Optional[Callable[[list], list]] = None) -> tuple[Optional[float], int, int]:
        """(mean of the finite losses or None, non-finite steps, steps), then empty: the check's one sync. ``reduce``:
        sums (total, non-finite, steps) over every rank, so that all judge the job's loss, not their own share."""
        count = self.count
        total, bad = _as_float(self.total), int(_as_float(self.bad))
        if reduce is not None:
            total, bad, count = reduce([total, float(bad), float(count)])
            bad, count = int(round(bad)), int(round(count))
        self.reset()
        good = count - bad
        return (total / good if good else None), bad, count


class HealthMonitor:
    """The rules of one attempt. The adapter gives it the loss of each step (``loss``), the gradients' norm at
    checks (``gradients``), validation losses (``validation``) and progress (``progress``); ``check`` returns the
    verdict to act on. ``watch`` starts the stall rule and the heartbeat on a timer thread."""

    def __init__(self, rules: Optional[HealthRules] = None, *, now: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, stream: Any = None) -> None:
        self.rules = rules or HealthRules()
        self._now, self._wall = now, wall
        self.stream = stream  # warnings and stops are said on stderr; None: sys.stderr at the time
        self._window = _LossWindow()
        self._grad: Optional[float] = None
        self.checks = 0  # checks with a loss read
        self.grad_checks = 0
        self.evaluations = 0
        self.reference: Optional[float] = None  # the run's first check's mean loss
        self._bad_checks = 0
        self._grad_history: deque = deque(maxlen=self.rules.grad_history)
        self._exploding = 0
        self._vanishing = 0
        self._diverging = 0
        self._window_losses: list[float] = []
        self._first_window: Optional[float] = None  # the run's first window's loss: the start it must move from
        self._best_window: Optional[float] = None
        self.windows = 0  # full windows judged in this attempt
        self._plateau = 0
        self._since_start = 0
        self._best_validation: Optional[float] = None
        self._overfit = 0
        self.fired: dict[str, Verdict] = {}  # each rule's first verdict in this attempt
        # Rules the adapter cannot judge, and why (the Trainer clips the gradients before its callbacks see them):
        # the summary says "not judged: <why>" for them, unless they fired.
        self.not_judged: dict[str, str] = {}
        self.stop_verdict: Optional[Verdict] = None
        self.last_progress = now()
        self.longest_gap = 0.0  # the longest time without progress so far (the rehearsal reports it)
        self._progress_count = 0
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stop_event: Optional[threading.Event] = None
        self.on_stall: Optional[Callable[[Verdict], None]] = None
        self.on_verdict: Optional[Callable[[Verdict], None]] = None  # e.g. the EMF line of a stop or a warning
        # True while the job saves or restores a checkpoint: alive, not stalled, for up to STARTUP_FACTOR x stall.
        self.busy: Optional[Callable[[], bool]] = None
        self._busy_since: Optional[float] = None
        self._busy_alive = False  # a save or restore was seen in progress since the last heartbeat
        # Sums (total, non-finite steps, steps) over the ranks at a check (TrainingJob sets it when a process group is
        # up): every rank then judges the same, global loss, and the false-stop rate is one job's, not N ranks' OR.
        self.reduce: Optional[Callable[[list], list]] = None
        self._progressed = False  # before the first progress the stall rule allows startup_seconds

    # --- what the adapter gives it -------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """Whether ``step`` (counted from 1) is a check: every ``check_every`` steps."""
        return step % self.rules.check_every == 0

    def loss(self, value: Any) -> None:
        """One step's loss (a tensor stays on its device until the check reads the sum)."""
        if self.rules.mode != "off":
            self._window.add(value)

    def gradients(self, norm: Any = None, *, parameters: Optional[Iterable[Any]] = None,
                  scale: float = 1.0) -> None:
        """The gradients' global norm at this check: given (``clip_grad_norm_``'s return, the Trainer's logged
        ``grad_norm``), or computed from ``parameters`` (one sync); divided by ``scale`` (a GradScaler's scale, for
        gradients that are still scaled)."""
        if self.rules.mode == "off":
            return
        if norm is None and parameters is not None:
            norm = grad_norm(parameters)
        if norm is not None:
            self._grad = _as_float(norm) / scale

    @property
    def has_grad_norm(self) -> bool:
        """Whether this check's gradients' norm is given already (the script's own, before clipping)."""
        return self._grad is not None

    def progress(self, count: int = 1) -> None:
        """A step, an evaluation batch, or the script's own ``progress()`` in a long validation: the job is alive."""
        self._busy_since = None  # the next save or restore has its own bound
        now = self._now()
        with self._lock:
            self.longest_gap = max(self.longest_gap, now - self.last_progress)
            self.last_progress = now
            self._progress_count += count
            self._progressed = True

    # --- the rules ---------------------------------------------------------------------------------------------
    def check(self, step: int) -> Optional[Verdict]:
        """Reads the losses since the last check and the gradients' norm, applies the rules, says a warning, and
        returns a stop's verdict (None: train on). Call it at ``due`` steps (or at the end of a logging interval)."""
        if self.rules.mode == "off":
            return None
        mean, bad, count = self._window.read(self.reduce)
        grad, self._grad = self._grad, None
        found: list[Verdict] = []
        self._non_finite(step, mean, bad, count, grad, found)
        if grad is not None and math.isfinite(grad):
            self._gradient_rules(step, grad, found)
        if mean is not None and bad < count:
            self._loss_rules(step, mean, found)
        return self._act(found)

    def _non_finite(self, step: int, mean: Optional[float], bad: int, count: int, grad: Optional[float],
                    found: list) -> None:
        loss_bad = count > 0 and bad == count
        grad_bad = grad is not None and not math.isfinite(grad)
        if not (loss_bad or grad_bad):
            if count or grad is not None:
                self._bad_checks = 0
            return
        self._bad_checks += 1
        if self._bad_checks >= self.rules.non_finite_checks:
            values = {"loss_non_finite_steps": bad, "steps_checked": count, "grad_norm": _json_number(grad),
                      "checks_in_a_row": self._bad_checks,
                      "last_grad_norm_median": _json_number(self._median())}
            what = ("the loss was NaN or inf on every step" if loss_bad else "the gradients' norm was NaN or inf")
            found.append(self._verdict("non_finite", step, values, f"{what} for {self._bad_checks} checks in a row"))

    def _median(self) -> Optional[float]:
        return statistics.median(self._grad_history) if self._grad_history else None

    def _gradient_rules(self, step: int, grad: float, found: list) -> None:
        rules = self.rules
        self.grad_checks += 1
        median = self._median()
        jump = (median is not None and len(self._grad_history) >= rules.grad_warmup and median > 0
                and grad > rules.grad_jump * median)
        over = rules.max_grad_norm is not None and grad > rules.max_grad_norm
        if jump or over:
            self._exploding += 1
        else:
            self._exploding = 0
            self._grad_history.append(grad)  # an explosion never raises the median it is judged against
        if self._exploding >= rules.grad_patience:
            bound = (f"over max_grad_norm {rules.max_grad_norm:g}" if over
                     else f"{grad / median:.0f}x the median {median:.3g} of its last {len(self._grad_history)} checks")
            found.append(self._verdict("exploding_gradients", step, {
                "grad_norm": grad, "median": _json_number(median), "max_grad_norm": rules.max_grad_norm,
                "checks_in_a_row": self._exploding}, f"gradient norm {grad:.3g}, {bound}, {self._exploding} checks "
                                                      "in a row"))
        self._vanishing = self._vanishing + 1 if grad < rules.vanishing_threshold else 0
        if self._vanishing >= rules.vanishing_patience:
            found.append(self._verdict("vanishing_gradients", step, {
                "grad_norm": grad, "threshold": rules.vanishing_threshold, "checks_in_a_row": self._vanishing},
                f"gradient norm {grad:.3g}, under {rules.vanishing_threshold:g} for {self._vanishing} checks in a row"))

    def _loss_rules(self, step: int, mean: float, found: list) -> None:
        rules = self.rules
        self.checks += 1
        if self.reference is not None and self.reference > 0 and math.isfinite(mean):
            self._diverging = self._diverging + 1 if mean > rules.loss_rise * self.reference else 0
            if self._diverging >= rules.loss_patience:
                found.append(self._verdict("loss_diverging", step, {
                    "loss": mean, "first_loss": self.reference, "rise": mean / self.reference,
                    "checks_in_a_row": self._diverging},
                    f"loss {mean:.4g}, {mean / self.reference:.2g}x the run's first window's {self.reference:.4g}, "
                    f"{self._diverging} checks in a row"))
        self._window_losses.append(mean)
        if len(self._window_losses) < rules.loss_window:
            return
        # A window's loss is the median of its checks' means: one spike (a step that blew up) moves it not at all.
        window = statistics.median(self._window_losses)
        self._window_losses = []
        self.windows += 1
        if self._first_window is None:
            self._first_window = self._best_window = window
            if self.reference is None:
                # The rise is judged against the first window's median (a 10-step first check is noise)
                self.reference = window
            self._since_start = 0
            return
        first, best = self._first_window, self._best_window
        if window < best * (1 - rules.min_delta) or window <= 0 or best <= 0:
            self._best_window = min(window, best)
            self._plateau = 0
        else:
            self._plateau += 1
        if not self._learned():
            self._since_start += 1
            if self._since_start >= rules.start_windows:
                steps = (rules.start_windows + 1) * rules.loss_window * rules.check_every
                found.append(self._verdict("loss_not_decreasing", step, {
                    "loss": window, "first_loss": first, "best": self._best_window, "learn_delta": rules.learn_delta,
                    "steps": steps},
                    f"loss {window:.4g} (median of its last {rules.loss_window} checks), its best {self._best_window:.4g}"
                    f" not {rules.learn_delta:.0%} under the first window's {first:.4g} in about {steps} steps: the "
                    "model has not learned"))
            return
        if self._plateau >= rules.plateau_windows:
            steps = rules.plateau_windows * rules.loss_window * rules.check_every
            found.append(self._verdict("loss_plateau", step, {
                "loss": window, "best": self._best_window, "min_delta": rules.min_delta, "steps": steps},
                f"loss {window:.4g}, not {rules.min_delta:.0%} under its best {self._best_window:.4g} for about "
                f"{steps} steps"))
            self._plateau = 0

    def _learned(self) -> bool:
        first, best = self._first_window, self._best_window
        return first is not None and best is not None and (first <= 0 or best < first * (1 - self.rules.learn_delta))

    def validation(self, loss: Any, step: int) -> Optional[Verdict]:
        """A validation loss (after each evaluation): the overfitting rule; returns a stop's verdict."""
        if self.rules.mode == "off" or loss is None:
            return None
        value = _as_float(loss)
        if not math.isfinite(value):
            return None  # the training loss's own rule judges NaN
        self.evaluations += 1
        best = self._best_validation
        if best is None or value < best:
            self._best_validation, self._overfit = value, 0
            return None
        self._overfit = self._overfit + 1 if best > 0 and value > best * (1 + self.rules.overfit_ratio) else 0
        if self._overfit < self.rules.overfit_patience:
            return None
        return self._act([self._verdict("overfit", step, {
            "validation_loss": value, "best": best, "ratio": value / best - 1, "evaluations_in_a_row": self._overfit},
            f"validation loss {value:.4g}, {value / best - 1:.0%} over its best {best:.4g}, {self._overfit} "
            "evaluations in a row")])

    def _verdict(self, rule: str, step: int, values: Mapping[str, Any], message: str) -> Verdict:
        return Verdict(rule, self.rules.action(rule), step, values, message)

    def _act(self, found: list) -> Optional[Verdict]:
        """Says each newly fired rule (once per attempt) and returns the first stop."""
        stop = None
        for verdict in found:
            if verdict.action == "off":
                continue
            if verdict.rule not in self.fired:
                self.fired[verdict.rule] = verdict
                self._say(verdict)
            if verdict.action == "stop" and stop is None:
                stop = verdict
        if stop is not None and self.stop_verdict is None:
            self.stop_verdict = stop
        return stop

    def _say(self, verdict: Verdict) -> None:
        stream = self.stream or sys.stderr
        try:
            stream.write(verdict.line() + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
        if self.on_verdict is not None:
            self.on_verdict(verdict)

    # --- stalls and the heartbeat ------------------------------------------------------------------------------
    def stalled(self, step: int, now: Optional[float] = None) -> Optional[Verdict]:
        """The stall rule at ``now``: a verdict (said once) when nothing progressed for ``stall_seconds``."""
        if self.rules.action("stalled") == "off" or "stalled" in self.fired:
            return None
        now = self._now() if now is None else now
        # A save or restore in progress is alive for up to STARTUP_FACTOR x stall_seconds (a big checkpoint over a
        # slow link); past that it counts as hung, for this rule and for the heartbeat the queue's watcher reads.
        # It is no progress (the startup allowance and the heartbeat's count stay as they were): the heartbeat says 0,
        # alive. Its end restarts the clock (a restore before the first step, then a compile, gets the allowance anew).
        since = self._busy_since
        if self.busy is not None and self.busy():
            if since is None:
                since = self._busy_since = now
            if now - since < STARTUP_FACTOR * self.rules.stall_seconds:
                self._busy_alive = True
                return None
        elif since is not None:
            self._busy_since = None
            with self._lock:
                self.last_progress = max(self.last_progress, now)
        with self._lock:
            gap = now - self.last_progress
            started = self._progressed
        # Before the first step: loading a model, a framework's restore, NCCL's start, a compile: twice the time
        allowed = self.rules.stall_seconds if started else STARTUP_FACTOR * self.rules.stall_seconds
        if gap < allowed:
            return None
        self.longest_gap = max(self.longest_gap, gap)
        verdict = self._verdict("stalled", step, {"seconds_without_progress": round(gap, 1),
                                                  "stall_seconds": self.rules.stall_seconds},
                                f"no step, evaluation batch or progress() for {gap:.0f} s (threshold "
                                f"{allowed:.0f} s{'' if started else ', before the first step'})")
        return self._act([verdict])

    def heartbeat(self) -> Optional[int]:
        """The progress counted since the last heartbeat (and resets it): 0 when only a save or restore was in
        progress (alive, no progress), None when there was neither (nothing to send)."""
        with self._lock:
            count, self._progress_count = self._progress_count, 0
        alive, self._busy_alive = self._busy_alive, False
        return count if count or alive else None

    def watch(self, step: Callable[[], int], *, interval: float = HEARTBEAT_SECONDS,
              emit: Optional[Callable[[int], None]] = None) -> None:
        """From now on, on a daemon thread: every ``interval`` seconds ``emit(progress since the last heartbeat)``
        when there was progress (the heartbeat the queue's watcher reads), and every ``min(interval, stall_seconds /
        4)`` the stall rule, whose stop calls ``on_stall(verdict)`` (the adapter records the run and exits: the loop
        is stuck, so the thread acts)."""
        self.close()
        stop = threading.Event()
        self._stop_event = stop
        tick_seconds = max(0.05, min(interval, self.rules.stall_seconds / 4))

        def tick() -> None:
            emitted_at = self._now()
            while not stop.wait(tick_seconds):
                try:
                    if self._now() - emitted_at >= interval:
                        emitted_at = self._now()
                        count = self.heartbeat()
                        if count is not None and emit is not None:
                            emit(count)
                    verdict = self.stalled(step())
                    if verdict is not None and verdict.action == "stop" and self.on_stall is not None:
                        self.on_stall(verdict)
                except Exception as error:  # the timer never takes the job down by itself
                    print(f"ml_platform_job health: the timer failed ({type(error).__name__}: {error})",
                          file=sys.stderr, flush=True)

        self._thread = threading.Thread(target=tick, name="ml-platform-health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops the timer thread (idempotent)."""
        stop, thread = self._stop_event, self._thread
        self._stop_event = self._thread = None
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # --- what the run records ----------------------------------------------------------------------------------
    def summary(self) -> dict:
        """Each rule's verdict for the run record and the rehearsal: "fired at step N (stop|warn)", "ok (N checks)",
        "off", or "not judged: <why>" (a result, never a silent ok)."""
        rules: dict[str, str] = {}
        for rule in RULES:
            action = self.rules.action(rule)
            if action == "off":
                rules[rule] = "off"
            elif rule in self.fired:
                verdict = self.fired[rule]
                rules[rule] = f"fired at step {verdict.step} ({verdict.action}): {verdict.message}"
            elif rule in self.not_judged:
                rules[rule] = f"not judged: {self.not_judged[rule]}"
            elif rule in ("exploding_gradients", "vanishing_gradients"):
                rules[rule] = (f"ok ({self.grad_checks} checks)" if self.grad_checks >= self.rules.grad_warmup else
                               f"not judged: {self.grad_checks} gradient checks, fewer than {self.rules.grad_warmup} "
                               "(a short run, or no optimizer step the adapter could see)")
            elif rule == "overfit":
                rules[rule] = (f"ok ({self.evaluations} evaluations)" if self.evaluations > self.rules.overfit_patience
                               else f"not judged: {self.evaluations} validation losses (log val_loss or eval_loss)")
            elif rule == "stalled":
                rules[rule] = (f"ok (longest gap {self.longest_gap:.0f} s of {self.rules.stall_seconds:.0f} s "
                               "allowed)")
            elif rule in ("loss_not_decreasing", "loss_plateau") and self._first_window is not None \
                    and self._first_window <= 0:
                rules[rule] = "not judged: the loss is not positive (a relative fall means nothing)"
            elif rule in ("loss_not_decreasing", "loss_plateau"):
                windows = self.rules.start_windows if rule == "loss_not_decreasing" else self.rules.plateau_windows
                enough = self.rules.loss_window * (windows + 1)
                rules[rule] = (f"ok ({self.checks} checks)" if self.checks >= enough or (
                    rule == "loss_not_decreasing" and self._learned()) else
                               f"not judged: {self.checks} loss checks, fewer than {enough}")
            elif self.reference is not None and self.reference <= 0 and rule == "loss_diverging":
                rules[rule] = "not judged: the loss is not positive (a rise by a factor means nothing)"
            else:
                rules[rule] = (f"ok ({self.checks} checks)" if self.checks else
                               "not judged: no loss observed (a plain loop gives it: job.observe(loss=loss))")
        return {"mode": self.rules.mode, "check_every": self.rules.check_every,
                "stall_seconds": self.rules.stall_seconds, "rules": rules,
                "warnings": [v.to_dict() for v in self.fired.values() if v.action == "warn"],
                "stop": self.stop_verdict.to_dict() if self.stop_verdict else None,
                "longest_gap_seconds": round(self.longest_gap, 1)}

    def state_dict(self) -> dict:
        """What the next attempt continues from (the first loss, the gradients' history, the best losses)."""
        return {"reference": self.reference, "grad_history": list(self._grad_history),
                "first_window": self._first_window, "best_window": self._best_window,
                "best_validation": self._best_validation}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.reference = state.get("reference")
        self._grad_history.extend(x for x in state.get("grad_history") or () if _number(x))
        self._first_window = state.get("first_window")
        self._best_window = state.get("best_window")
        self._since_start = 0
        self._best_validation = state.get("best_validation")


def _json_number(value: Optional[float]) -> Any:
    """A float for JSON: NaN and inf as strings (JSON has neither)."""
    if value is None or math.isfinite(value):
        return value
    return str(value)


def metric_line(metric: str, queue: str, rule: Optional[str] = None, *, job_id: Optional[str] = None, value: float = 1,
                wall: Optional[float] = None, fields: Optional[Mapping[str, Any]] = None) -> str:
    """One embedded-metric-format line (CloudWatch Logs extracts the metric from the job's log stream): a stop or a
    warning (dimensions Queue, Rule) or the heartbeat (dimensions Queue, JobId)."""
    dimensions = [QUEUE_DIMENSION, RULE_DIMENSION] if rule is not None else [QUEUE_DIMENSION, JOB_DIMENSION]
    document: dict[str, Any] = {"_aws": {"Timestamp": int((time.time() if wall is None else wall) * 1000),
                                         "CloudWatchMetrics": [{"Namespace": HEALTH_NAMESPACE,
                                                                "Dimensions": [dimensions],
                                                                "Metrics": [{"Name": metric, "Unit": "Count"}]}]},
                                QUEUE_DIMENSION: queue, metric: value}
    if rule is not None:
        document[RULE_DIMENSION] = rule
    if job_id is not None:
        document[JOB_DIMENSION] = job_id
    for key, item in (fields or {}).items():
        document.setdefault(key, item)
    return json.dumps(_json_safe(document), separators=(",", ":"), default=str, allow_nan=False)


def _json_safe(value: Any) -> Any:
    """NaN and inf as strings at any depth: JSON has neither, and CloudWatch drops a line that is not JSON."""
    if isinstance(value, float):
        return _json_number(value)
    if isinstance(value, Mapping):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def with_rules(rules: Optional[HealthRules], **settings: Any) -> HealthRules:
    """``rules`` with ``settings`` changed (a test's or a bench's shortcut)."""
    return replace(rules or HealthRules(), **settings)
