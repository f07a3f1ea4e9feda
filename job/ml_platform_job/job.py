"""A plain PyTorch training loop that survives a Spot reclaim exactly, in a few lines (torch; boto3 for ``s3://``).

    job = TrainingJob.start(params=args, flags=["log_interval", "save_model"])    # the run, its seed, the stop signal
    train_loader = job.loader(dataset, batch_size=64, shuffle=True, num_workers=4, persistent_workers=True)
    model, optimizer, scheduler = ...
    job.track(model=model, optimizer=optimizer, scheduler=scheduler)   # resumes from the newest checkpoint, if any
    for epoch in job.epochs(1, args.epochs + 1):                       # from the epoch (and sample) it stopped at
        for data, target in train_loader:                             # a stop is taken between two steps
            ...                                                        # the step, unchanged, with after backward:
            job.observe(loss=loss)                                     # the health rules' input (docs/HEALTH.md)
        job.log_holdout(accuracy=evaluate(model))                      # and validation, logging, scheduler.step()
        scheduler.step()
    job.finish(model=model)                                            # the model, the run's cost; exit 0 after it

What it does for the loop:

- **Checkpoints** (``checkpoints.CheckpointStore`` under ``ML_PLATFORM_CHECKPOINT_URI``, complete or absent, the newest
  ``keep``): every tracked object's ``state_dict()`` (model, optimizer, scheduler, AMP scaler, anything with
  ``state_dict``/``load_state_dict``), every random generator (Python, NumPy, torch CPU and CUDA; each rank's own) and
  the data position (a global sample counter: a stop mid-epoch resumes mid-epoch). Saved at the end of each epoch,
  every ``save_every_minutes`` of training inside an epoch, and on a stop.
- **The stop**: SIGTERM or the stop file (``stop.StopRequest``), seen after the step that was running, agreed by every
  rank; the job saves (when the last save's duration fits in the time left before SIGKILL, else it says so and keeps
  the previous checkpoint), records the stop and exits 143, which the queue retries. It never exits 0 unless
  ``finish`` ran.
- **Exactness**: the loader's order and every sample's random draws come from (seed, epoch, sample) (``data``), so the
  resumed run ends with the same weights as an uninterrupted one, bit for bit on CPU with deterministic algorithms,
  with ``num_workers > 0`` and persistent workers. ``finish`` records the weights' digest; the rehearsal compares it.
- **Health** (``health``): ``job.observe(loss=loss)`` after each backward gives the rules the loss (summed on its
  device, read every ``check_every`` optimizer steps); the gradients' norm is read from the tracked optimizers at those
  checks; ``job.observe(val_loss=...)`` after a validation. A job that produces NaN, diverges, does not learn or
  stalls stops itself: a checkpoint (unless the state is NaN), the rule and its values in the run, exit 85, which the
  queue does not retry. ``TrainingJob.start(health="warn")`` only says so.
- **The run** (``tracking.TrackedRun``): one record per job across attempts, its passport (the parameters that make
  the run, apart from ``flags`` that do not), held-out scores, cost; **goodput**: data wait, steps, saves, restores,
  and the rest of an epoch's body (validation, logging) as evaluation.

Only global rank 0 writes the record, the model and the checkpoint's shared state; every rank writes its own random
generators. Sharded models (FSDP, DeepSpeed ZeRO-3) need each rank's shard saved: use Lightning or the Trainer adapter.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import secrets
import sys
from dataclasses import asdict, is_dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional

from . import STOPPED_EXIT_CODE
from .checkpoints import DEFAULT_KEEP, HEALTH_STOP, Checkpoint, CheckpointStore
from .elastic import (NODE_TYPES_VARIABLE, REQUEST_FILE, RESIZE_EXIT_CODE, RESIZE_MARKER, Decision, ElasticMonitor,
                      ElasticPolicy, World, left_for_idle, measured_restart_seconds, node_prices, request_text,
                      world as _world)
from .health import (HEALTH_MARKER, HEALTH_STOPPED_EXIT_CODE, HEARTBEAT_METRIC, STOP_METRIC, WARNING_METRIC, HealthMonitor,
                     RULES, HealthRules, Verdict, metric_line)
from .stop import (LAUNCH_DIR, SaveTimedOut, StopRequest, _distributed, all_ranks_max, collective_device,
                   release_process_group)
from .stop import rank as _rank, world_size as _world_size
from .storage import Location
from .torch_state import rng_state, set_rng_state, state_digest
from .tracking import RECORD_NAME, TrackedRun

STATE_FILE = "state.pt"
MODEL_FILE = "model.pt"
RANK_FILE = "rng-rank-{rank}.pt"
DEFAULT_SAVE_EVERY_MINUTES = 30.0
# Parameters that never make a run another run: how it logs and where it writes. Recorded as the run's flags.
DEFAULT_FLAGS = frozenset({
    "log_interval", "log_every", "log_every_n_steps", "log_level", "logging_steps", "logging_dir", "verbose", "quiet",
    "progress", "progress_bar", "output_dir", "checkpoint_dir", "save_dir", "save_model", "overwrite_output_dir",
    "report_to", "run_name", "disable_tqdm", "tensorboard_dir", "wandb_project", "no_cuda", "no_accel", "no_mps",
})
CHECKPOINT_URI = "ML_PLATFORM_CHECKPOINT_URI"
# A seed for a job that names none (the rehearsal sets it, so that its interrupted and uninterrupted runs compare).
SEED_VARIABLE = "ML_PLATFORM_SEED"


def _as_params(params: Any) -> dict[str, Any]:
    """A job's parameters as a dict: argparse's Namespace, a dataclass (TrainingArguments), a mapping, or None."""
    if params is None:
        return {}
    if isinstance(params, Mapping):
        return dict(params)
    if hasattr(params, "to_dict") and callable(params.to_dict):
        return dict(params.to_dict())
    if is_dataclass(params) and not isinstance(params, type):
        return asdict(params)
    if hasattr(params, "__dict__"):
        return dict(vars(params))
    raise TypeError(f"params={params!r}: a mapping, argparse's Namespace or a dataclass of the job's parameters")


def _rank_zeros(seed: int) -> int:
    """Rank 0's seed on every rank, when a process group is already up (else this process's own)."""
    dist = _distributed()
    if dist is None:
        return seed
    shared = [seed]
    dist.broadcast_object_list(shared, src=0, device=collective_device(dist))
    return int(shared[0])


def _recorded_seed(location: Location) -> Optional[int]:
    """The seed an earlier attempt of this run chose (None when there is no run yet)."""
    try:
        text = location.read(RECORD_NAME)
        return json.loads(text)["passport"].get("seed") if text else None
    except (ValueError, KeyError, TypeError):
        return None


def _sum_over_ranks(values: list) -> list:
    """Each value summed over every rank (one all-reduce, float64; every rank checks at the same step)."""
    import torch  # type: ignore[import-not-found]

    dist = _distributed()
    if dist is None:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=collective_device(dist))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def _rule_flags(verdict: Optional[Verdict]) -> list[bool]:
    """A stop's rule as one flag per rule (the ranks agree on it with one all-reduce)."""
    return [verdict is not None and verdict.rule == rule for rule in RULES]


def _health_rules(health: Any, env: Mapping[str, str]) -> HealthRules:
    """``TrainingJob.start``'s ``health`` as rules: given rules, a mode, or settings over the environment's."""
    if isinstance(health, HealthRules):
        return health
    if health is None:
        return HealthRules.from_env(env)
    if isinstance(health, str):
        return HealthRules.from_env(env, mode=health)
    if isinstance(health, Mapping):
        return HealthRules.from_env(env, **dict(health))
    raise TypeError(f"health={health!r}: HealthRules(...), a mapping of its settings, or 'stop', 'warn', 'off'")


class TrainingJob:
    """A plain PyTorch loop's side of the job contract (see the module docstring). Make it with ``start``."""

    def __init__(self, run: TrackedRun, store: CheckpointStore, stop: StopRequest, *, seed: int,
                 save_every_minutes: Optional[float] = DEFAULT_SAVE_EVERY_MINUTES, save_each_epoch: bool = True,
                 health: Optional[HealthMonitor] = None) -> None:
        self.run = run
        self.store = store
        self.stop = stop
        self.seed = seed
        self.save_every_seconds = None if not save_every_minutes else save_every_minutes * 60
        self.save_each_epoch = save_each_epoch
        self.objects: dict[str, Any] = {}
        self.epoch: Optional[int] = None  # the caller's epoch number inside epochs()
        self.step = 0  # optimizer steps (loader batches) trained, over the whole run
        self.samples_seen = 0  # global samples trained, over the whole run
        self._epoch_index = 0  # epochs begun before this one: the sampler's epoch
        self._position = 0  # global samples of the current epoch already trained
        self._epochs_managed = False
        self._loader: Optional[JobLoader] = None
        self._restored: Optional[dict] = None
        self._last_save_step: Optional[int] = None
        self._last_save_at = run.clock.now()
        self._save_seconds: Optional[float] = None
        self._loader_ended_at: Optional[float] = None
        # The training-health rules (health.py): fed by observe() and the optimizers' step hook, checked every
        # check_every optimizer steps; the run records their verdicts.
        self.health = health or HealthMonitor(HealthRules(mode="off"))
        self.run.health = self.health
        self._optimizer_steps = 0  # optimizer steps (accumulation boundaries) in this attempt: the checks' clock
        self._grad_hooks: list[Any] = []
        self._pending_verdict: Optional[Verdict] = None  # a validation's stop, agreed at the next check
        # Elastic jobs (elastic.py): the resize policy, considered at the first optimizer step after a validation
        self.elastic: Optional[ElasticMonitor] = None
        self._resize_due = False
        self._epochs_total: Optional[int] = None  # epochs(start, stop)'s count: the work left is known
        self._rate_from: Optional[tuple[float, int]] = None  # (time, samples) at this attempt's first step

    # --- starting -----------------------------------------------------------------------------------------------
    @classmethod
    def start(cls, *, params: Any = None, flags: Iterable[str] = (), seed: Optional[int] = None,
              deterministic: bool = False, dataset: Any = None, holdout: Optional[Mapping[str, Any]] = None,
              keep: int = DEFAULT_KEEP, save_every_minutes: Optional[float] = DEFAULT_SAVE_EVERY_MINUTES,
              save_each_epoch: bool = True, env: Optional[Mapping[str, str]] = None, s3: Any = None,
              tracking_uri: Optional[str] = None, experiment: Optional[str] = None, run_name: Optional[str] = None,
              code_directory: Optional[str] = None, health: Any = None,
              elastic: Optional[ElasticPolicy] = None) -> "TrainingJob":
        """Installs the stop handler and the PID file, starts or continues the run and seeds every generator.

        ``params``: the job's parameters (argparse's Namespace, a dataclass or a mapping); the ones named in ``flags``
        (and ``DEFAULT_FLAGS``: logging intervals, output paths) are recorded but never make another run.
        ``seed``: the run's (default: ``params["seed"]``, else the one the run's first attempt recorded, else
        ``ML_PLATFORM_SEED``, else one derived from ``ML_PLATFORM_JOB_NAME``, else one chosen at random; when a
        process group is up, rank 0's, so that every rank shuffles alike).
        ``deterministic``: torch's deterministic algorithms (slower; what bit-for-bit exactness on a GPU needs).
        ``dataset``/``holdout``: a ``passport.DatasetRef`` and ``holdout.describe(...)``, recorded and compared.
        ``keep``: complete checkpoints kept (default 2). ``save_every_minutes``: a save inside an epoch after this much
        training since the last (default 30; None: at epoch ends and stops only). An earlier attempt that finished
        (only its exit was lost) ends this one with exit 0.
        ``health``: the training-health rules (``health.HealthRules``, a mapping of its settings, or "stop", "warn",
        "off"); default: the rules' defaults as the job's environment sets them (``ML_PLATFORM_HEALTH``, ...; the
        queue's job definitions pass its ``health_mode``). A rule that stops the job exits 85, never retried.
        ``elastic``: the resize policy (``elastic.ElasticPolicy``); default: the one ``job submit --nodes MIN:MAX``
        sets in the environment (``ML_PLATFORM_ELASTIC``), else none (the job keeps its size). A resize saves, records
        the request in the run and exits 86; the queue's elastic controller resubmits the job at the new size."""
        env = dict(os.environ) if env is None else dict(env)
        if not env.get(CHECKPOINT_URI):
            raise SystemExit(f"{CHECKPOINT_URI} is not set: checkpoints and the run record live there (./platform job "
                             "submit sets it; locally, set it to a directory or an s3:// prefix)")
        stop = StopRequest(env).install()
        values = _as_params(params)
        unknown = [name for name in flags if not isinstance(name, str)]
        if unknown:
            raise TypeError(f"flags={list(flags)!r}: parameter names (str)")
        flagged = set(flags) | DEFAULT_FLAGS
        identity = {k: v for k, v in values.items() if k not in flagged}
        recorded = {k: v for k, v in values.items() if k in flagged}
        location = Location(env[CHECKPOINT_URI], s3)
        if seed is None:
            given = identity.get("seed")
            seed = given if isinstance(given, int) and not isinstance(given, bool) else _recorded_seed(location)
        if seed is None and env.get(SEED_VARIABLE, "").strip().isdigit():  # the rehearsal's, for its runs to compare
            seed = int(env[SEED_VARIABLE])
        if seed is None and env.get("ML_PLATFORM_JOB_NAME"):  # the same in every process and attempt of the job
            seed = int.from_bytes(hashlib.sha256(env["ML_PLATFORM_JOB_NAME"].encode()).digest()[:4], "big") >> 1
        if seed is None:
            seed = secrets.randbits(31)
        seed = _rank_zeros(seed)
        run = TrackedRun.start(params=identity, flags=recorded, seed=seed, dataset=dataset, holdout=holdout, env=env,
                               s3=s3, tracking_uri=tracking_uri, experiment=experiment, run_name=run_name,
                               code_directory=code_directory or os.path.dirname(os.path.abspath(sys.argv[0] or ".")))
        if run.finished:
            stop.uninstall()
            print(f"run {run.run_id} already finished (an earlier attempt's exit was lost): nothing to do", flush=True)
            raise SystemExit(0)
        run.seed_everything(seed, deterministic=deterministic)
        if _rank() == 0:
            print(f"run {run.run_id}, attempt {run.attempt['number']}", flush=True)
        monitor = HealthMonitor(_health_rules(health, env))
        earlier = (run.record.get("health") or {}).get("state")
        if isinstance(earlier, Mapping):
            monitor.load_state_dict(earlier)  # the run's first loss and gradient history, from its last attempt
        job = cls(run, CheckpointStore(location, keep=keep), stop, seed=seed, save_every_minutes=save_every_minutes,
                  save_each_epoch=save_each_epoch, health=monitor)
        job._watch_health(env)
        policy = elastic if elastic is not None else ElasticPolicy.from_env(env)
        if policy is not None:
            job._watch_elastic(policy, env)
        return job

    def _watch_elastic(self, policy: ElasticPolicy, env: Mapping[str, str]) -> None:
        """The elastic monitor: this attempt's size and node price, the run's measured restarts and validation
        losses so far; global rank 0 samples its GPUs' utilization and decides."""
        from .job_metrics import job_id_from_environment

        self._job_id = job_id_from_environment(env)  # the request names the job that asked (the controller checks)
        attempt = self.run.attempt
        from .prices import hourly_usd, load_prices

        price, price_at = 0.0, {}
        prices = load_prices(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")
        try:  # this attempt's node as priced; unpriced: a scale-in from it cannot be shown to pay, none is taken
            if attempt.get("instance_type") and attempt.get("lifecycle"):
                price = hourly_usd(prices, attempt["instance_type"], attempt["lifecycle"])
        except (KeyError, ValueError):
            pass
        try:  # one node runs on the queue's Spot types, two or more on its multi-node On-Demand ones
            price_at = node_prices(env.get(NODE_TYPES_VARIABLE, ""), prices, policy.allowed())
        except (KeyError, ValueError):
            pass
        # the GPUs wait by design while the job validates, saves or restores: not sampled as idle then
        busy_phases = ("checkpoint_save", "restore")
        self.elastic = ElasticMonitor(
            policy, nodes=int(attempt.get("nodes") or 1), node_price_per_hour=price, price_at=price_at,
            restart_seconds=measured_restart_seconds(self.run.record), clock=self.clock.now,
            left_idle=left_for_idle(self.run.record),
            paused=lambda: self._loader_ended_at is not None or any(
                name in getattr(self.clock, "_active", {}) for name in busy_phases))
        state = (self.run.record.get("elastic") or {}).get("state")
        if isinstance(state, Mapping):
            self.elastic.load_state_dict(state)
        if _rank() == 0:
            self.elastic.watch()

    def no_resizes(self, who: str) -> None:
        """An adapter that does not resize yet: an elastic range is said to be ignored (once, rank 0), never silently
        kept: the job runs at the size it started at."""
        if self.elastic is None:
            return
        self.elastic.close()
        if _rank() == 0:
            print(f"elastic: {who} does not resize yet; the job stays at {self.elastic.nodes} node(s) (the plain "
                  "loop's TrainingJob resizes: docs/TRAINING.md, 'Elastic jobs')", file=sys.stderr, flush=True)
        self.elastic = None

    @property
    def world(self) -> World:
        """This process's nodes, node index, world size and rank; ``job.world.accumulation(global_batch,
        per_device_batch)`` keeps the global batch when the job runs at another size."""
        return _world()

    @property
    def clock(self) -> Any:
        return self.run.clock

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def resumed(self) -> bool:
        """True when this attempt continued from a checkpoint."""
        return self._restored is not None

    # --- what is saved ------------------------------------------------------------------------------------------
    def track(self, **objects: Any) -> "TrainingJob":
        """Saves and restores these with every checkpoint (each needs ``state_dict`` and ``load_state_dict``: a
        model, an optimizer, an LR scheduler, an AMP GradScaler, ...), then restores them, the generators and the data
        position from the newest complete checkpoint, if there is one. Call it once, after making them."""
        bad = [f"{name} ({type(value).__name__})" for name, value in objects.items()
               if not (callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)))]
        if bad:
            raise TypeError(f"track: {', '.join(bad)}: no state_dict()/load_state_dict(); track models, optimizers, "
                            "schedulers, scalers (anything with both), or keep the value in job.extra")
        if not objects:
            raise TypeError("track: name what to save, e.g. job.track(model=model, optimizer=optimizer)")
        if self.objects:
            raise RuntimeError("track: called twice; name every object in one call (it restores them together)")
        self.objects = dict(objects)
        self._hook_optimizers()
        self._restore()
        return self

    def _hook_optimizers(self) -> None:
        """The gradients' norm for the health rules, read just before a tracked optimizer's step at a check (the
        gradients it applies: a GradScaler's skipped steps never reach it; a norm clipped by the script reads as
        clipped: pass the unclipped one, clip_grad_norm_'s return, to ``observe``)."""
        try:
            from torch.optim import Optimizer  # type: ignore[import-not-found]
        except ImportError:
            return
        for value in self.objects.values():
            if isinstance(value, Optimizer) and hasattr(value, "register_step_pre_hook"):
                self._grad_hooks.append(value.register_step_pre_hook(self._before_optimizer_step))

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        health = self.health
        if health.rules.mode == "off" or not health.due(self._optimizer_steps + 1) or health.has_grad_norm:
            return
        # A fused optimizer under a GradScaler (torch.amp.GradScaler.step): the scaler sets the optimizer's grad_scale
        # (None once unscale_ ran) and found_inf attributes before its step (older releases passed a grad_scaler
        # keyword): its gradients are still scaled, and an overflow step is skipped inside the fused kernel.
        scaler = kwargs.get("grad_scaler") if isinstance(kwargs, Mapping) else None
        scale = getattr(optimizer, "grad_scale", None)
        found = getattr(optimizer, "found_inf", None)
        if scaler is not None:
            scale, found = scaler.get_scale(), kwargs.get("found_inf", found)
        if found is not None and float(found) > 0:
            return  # an overflow step the optimizer skips: not applied, not judged
        health.gradients(parameters=(p for group in optimizer.param_groups for p in group["params"]),
                         scale=float(scale) if scale is not None else 1.0)

    def _restore(self) -> None:
        import torch  # type: ignore[import-not-found]

        def load(checkpoint: Checkpoint) -> tuple[dict, Optional[dict]]:
            # Tensors and plain values only (weights_only): a checkpoint never runs code when it is read.
            payload = torch.load(io.BytesIO(self.store.read(checkpoint, STATE_FILE)), map_location="cpu",
                                 weights_only=True)
            own = RANK_FILE.format(rank=_rank())
            if _rank() == 0 or own not in checkpoint.files:
                return payload, None
            return payload, torch.load(io.BytesIO(self.store.read(checkpoint, own)), map_location="cpu",
                                       weights_only=True)

        with self.clock.phase("restore"):
            found = self.store.load_newest(load)
            if found is None:
                return
            checkpoint, (payload, own) = found
            missing = sorted(set(self.objects) - set(payload["objects"]))
            if missing:
                raise SystemExit(f"error: the checkpoint of step {checkpoint.step} holds no {', '.join(missing)} (it "
                                 f"holds {', '.join(sorted(payload['objects']))}): track the same objects as the "
                                 "attempt that saved it, or start a new run under a new job name")
            for name, value in self.objects.items():
                value.load_state_dict(payload["objects"][name])
            skipped = set_rng_state((own or payload)["rng"])
            position = payload["job"]
            self.step, self.samples_seen = position["step"], position["samples_seen"]
            self._epoch_index, self._position = position["epoch_index"], position["position"]
            self.epoch = position.get("epoch")
            self._restored = position
            self._last_save_step = self.step
        for line in skipped:
            print(f"ml_platform_job: {line}", file=sys.stderr, flush=True)
        epoch = self.epoch if self.epoch is not None else self._epoch_index
        self.resumed_from(checkpoint, f" (epoch {epoch}, sample {self._position} of it)")

    def resumed_from(self, checkpoint: Checkpoint, detail: str = "") -> None:
        """Records in the run that this attempt resumed from ``checkpoint`` (the rehearsal and ``runs show`` read it)
        and says so on rank 0."""
        self.run.restored(checkpoint.step, f"{self.store.location.uri}{checkpoint.folder}")
        if _rank() == 0:
            print(f"resuming from the checkpoint of step {checkpoint.step}{detail}", flush=True)

    def save(self) -> Optional[Checkpoint]:
        """Writes a checkpoint of the current step now (every rank calls it: it is a collective when there are
        several). Returns it (None on ranks other than 0, and when this step's checkpoint is written already: a
        complete checkpoint is never rewritten)."""
        return self._save()

    def _save(self, health_stop: Optional[str] = None) -> Optional[Checkpoint]:
        if self._last_save_step == self.step:
            return None
        started = self.clock.now()
        with self.clock.phase("checkpoint_save"):
            checkpoint = self._write(health_stop)
        self._saved(started)
        return checkpoint

    def _write(self, health_stop: Optional[str] = None) -> Optional[Checkpoint]:
        """The checkpoint's files and marker (a collective when there are several ranks); ``health_stop``: the rule
        whose stop writes it (kept for inspection, never resumed from)."""
        import torch  # type: ignore[import-not-found]

        me, dist = _rank(), _distributed()
        position = {"step": self.step, "samples_seen": self.samples_seen, "epoch_index": self._epoch_index,
                    "position": self._position, "epoch": self.epoch, "world_size": _world_size()}
        folder = self.store.location.child(f"checkpoints/step-{self.step:012d}")
        listed: dict[str, Any] = {}
        if me != 0:
            buffer = io.BytesIO()
            torch.save({"rng": rng_state()}, buffer)
            name = RANK_FILE.format(rank=me)
            listed = {name: CheckpointStore.write_file(folder, name, buffer.getvalue())}
        gathered = [listed]
        if dist is not None:
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, listed)  # NCCL: the current GPU (torch.cuda.set_device(local rank))
        checkpoint = None
        if me == 0:
            buffer = io.BytesIO()
            torch.save({"format": 1, "job": position, "rng": rng_state(),
                        "objects": {name: value.state_dict() for name, value in self.objects.items()}}, buffer)
            others = {k: v for entry in gathered if entry for k, v in entry.items()}
            meta = {**position, HEALTH_STOP: health_stop} if health_stop else position
            checkpoint = self.store.save(self.step, {STATE_FILE: buffer.getvalue()}, meta=meta, listed=others)
        if dist is not None:
            dist.barrier()  # no rank goes on (or exits) before the checkpoint is complete
        return checkpoint

    def _saved(self, started: float) -> None:
        self.health.progress()  # a save is progress: the stall rule counts from its end
        self.clock.checkpoint_saved()
        self._save_seconds = self.clock.now() - started
        self._last_save_at, self._last_save_step = self.clock.now(), self.step
        self.run.checkpointed(step=self.step)

    def _save_on_the_way(self) -> None:
        """A periodic or end-of-epoch save: one that fails (S3 throttled, the disk full) is said in one line and
        training goes on; the next save, or the one a stop makes, may succeed."""
        try:
            self.save()
        except SaveTimedOut:
            raise
        except Exception as error:
            print(f"ml_platform_job: the checkpoint of step {self.step} was not saved ({type(error).__name__}: "
                  f"{error}); training goes on", file=sys.stderr, flush=True)

    # --- the loop -----------------------------------------------------------------------------------------------
    def loader(self, dataset: Any, *, shuffle: bool = False, drop_last: bool = False, accumulate: int = 1,
               **kwargs: Any) -> "JobLoader":
        """A ``torch.utils.data.DataLoader`` over a map-style dataset whose order and random draws come from (seed,
        epoch, sample) and which resumes at the data position (``data``). Takes DataLoader's keywords except
        ``sampler``, ``batch_sampler`` and ``generator`` (it makes those); ``shuffle`` as DataLoader's. Every rank of a
        job of several takes its share. One per job: the training data. ``accumulate``: batches per optimizer step
        (gradient accumulation): stops and saves come only after a step's last batch (a gradient half accumulated is
        in no checkpoint), so a resumed epoch's batches keep their places in the accumulation."""
        from .data import resumable_loader

        if self._loader is not None:
            raise RuntimeError("loader: called twice; the job resumes one training loader (validation loaders are "
                               "plain DataLoaders)")
        if not isinstance(accumulate, int) or isinstance(accumulate, bool) or accumulate < 1:
            raise ValueError(f"accumulate={accumulate!r}: batches per optimizer step, a whole number of 1 or more")
        loader, sampler = resumable_loader(dataset, seed=self.seed, shuffle=shuffle, drop_last=drop_last,
                                           owner="the job's loader", **kwargs)
        self._loader = JobLoader(self, loader, sampler, dataset, accumulate)
        return self._loader

    def epochs(self, start: int, stop: Optional[int] = None) -> Iterator[int]:
        """The epochs to train, as ``range(start, stop)`` (or ``range(start)``), from the one a resumed attempt stopped
        in. After each epoch's body it saves (``save_each_epoch``) and takes a stop that came meanwhile."""
        if stop is None:
            start, stop = 0, start
        first = start + self._epoch_index
        self._epochs_managed = True
        self._epochs_total = stop - start
        try:
            for epoch in range(first, stop):
                self.epoch = epoch
                if self._epoch_index != epoch - start:
                    self._epoch_index, self._position = epoch - start, 0
                self._loader_ended_at = None
                yield epoch
                if self._loader_ended_at is not None:  # validation, logging, the scheduler: the epoch's own end
                    self.clock.add("evaluation", self.clock.now() - self._loader_ended_at)
                self._epoch_index, self._position, self.epoch = epoch - start + 1, 0, epoch + 1
                save, stopping = self.agree(self.save_each_epoch and epoch + 1 < stop, self.stop.requested)
                if stopping:
                    self._stop()
                if save:
                    self._save_on_the_way()
        finally:
            self._epochs_managed = False

    def agree(self, save: bool, stopping: bool) -> tuple[bool, bool]:
        """(save, stop) as every rank sees them (``stop.all_ranks_max``: one all-reduce when there are several ranks;
        every rank calls it at the same step). A stop another rank was asked for becomes this rank's too."""
        save, agreed = all_ranks_max([save, stopping])
        if agreed and not stopping:
            self.stop.request("another rank was asked to stop")
        return save, agreed

    def _after_step(self, samples: int, boundary: bool = True) -> None:
        """A batch was trained: the data position moves on; at an optimizer step's end (``boundary``), a save falls
        due, the health rules are checked (every ``check_every`` optimizer steps) and a stop is taken."""
        self.step += 1
        self.samples_seen += samples
        self._position += samples
        self.health.progress()
        if not boundary:
            return
        self._optimizer_steps += 1
        if self._rate_from is None:
            self._rate_from = (self.clock.now(), self.samples_seen)
        wanted = self._resize_flags()
        verdict = self.health.check(self.step) if self.health.due(self._optimizer_steps) else None
        if verdict is None and self.health.due(self._optimizer_steps) and self._pending_verdict is not None:
            verdict, self._pending_verdict = self._pending_verdict, None
        due = self.save_every_seconds is not None and self.clock.now() - self._last_save_at >= self.save_every_seconds
        if self.health.due(self._optimizer_steps) and self.health.rules.mode != "off":
            save, stopping, *flags = all_ranks_max([due, self.stop.requested, *_rule_flags(verdict), *wanted])
            fired, wanted = flags[:len(flags) - len(wanted)], flags[len(flags) - len(wanted):]
            if stopping and not self.stop.requested:
                self.stop.request("another rank was asked to stop")
            if any(fired):
                self._health_stop(verdict or self._other_rank(fired))
        elif wanted:
            save, stopping, *wanted = all_ranks_max([due, self.stop.requested, *wanted])
            if stopping and not self.stop.requested:
                self.stop.request("another rank was asked to stop")
        else:
            save, stopping = self.agree(due, self.stop.requested)
        if stopping:
            self._stop()
        if any(wanted):
            self._resize(self.elastic.policy.allowed()[wanted.index(True)])
        if save:
            self._save_on_the_way()

    # --- elastic jobs -------------------------------------------------------------------------------------------
    def _remaining_samples(self) -> Optional[float]:
        """Global samples left to train: known when the loop runs in ``epochs(start, stop)`` over ``loader``."""
        if self._epochs_total is None or self._loader is None:
            return None
        per_epoch = self._loader.sampler.total_size
        return max(0.0, float((self._epochs_total - self._epoch_index) * per_epoch - self._position))

    def _resize_flags(self) -> list[bool]:
        """One flag per allowed size (every rank the same length: the collective's), set on global rank 0 for the
        size the policy chose after a validation; all false when nothing changes."""
        if self.elastic is None:
            return []
        allowed = self.elastic.policy.allowed()
        flags = [False] * len(allowed)
        validated = self._resize_due
        if _rank() != 0 or not (validated or self.elastic.new_period()):
            self._resize_due = False  # after a validation (out or in), or a new utilization period (in only)
            return flags
        self._resize_due = False
        rate = 0.0
        if self._rate_from is not None:
            seconds = self.clock.now() - self._rate_from[0]
            rate = (self.samples_seen - self._rate_from[1]) / seconds if seconds > 0 else 0.0
        decision = self.elastic.consider(remaining_samples=self._remaining_samples(), samples_per_second=rate,
                                         after_validation=validated)
        said = decision.reason.split(":")[0] + decision.reason.split(" ")[-1]  # its kind, not its changing figures
        if decision.resize or said != getattr(self, "_elastic_said", None):  # one line per change, not per period
            print(f"elastic: at step {self.step} on {self.elastic.nodes} node(s): {decision.reason}", flush=True)
        self._elastic_said = said
        if decision.resize and decision.size in allowed:
            flags[allowed.index(decision.size)] = True
        return flags

    def _resize(self, size: int) -> None:
        """Every rank: the policy asked for ``size`` nodes. A checkpoint of this step, the request next to it (the
        controller reads it), the run's record, exit 86 (the queue does not retry it; its controller resubmits)."""
        saved = self._last_save_step == self.step
        if not saved:
            try:
                self._save()
                saved = self._last_save_step == self.step
            except Exception as error:  # the resize goes on: the newest checkpoint is where it resumes
                print(f"ml_platform_job: the checkpoint of step {self.step} was not saved ({type(error).__name__}: "
                      f"{error}); the resized job resumes from step {self._last_save_step}", file=sys.stderr,
                      flush=True)
        launch_dir = os.environ.get(LAUNCH_DIR)
        if launch_dir:
            try:
                with open(os.path.join(launch_dir, RESIZE_MARKER), "w") as handle:
                    handle.write(str(size))
            except OSError:
                pass
        if _rank() == 0 and self.elastic is not None:
            decision = self.elastic.last if self.elastic.last is not None and self.elastic.last.size == size \
                else Decision(size, "scale to the size another rank chose")
            text = request_text(decision, step=self.step, samples_seen=self.samples_seen,
                                job_id=getattr(self, "_job_id", None))
            self.store.location.write(REQUEST_FILE, text)
            self.elastic.close()
            # the next size judges a plateau from its own evaluations (no ratchet on one old plateau)
            self.run.record["elastic"] = {"state": {"val_losses": []}}
            self.run.resized(json.loads(text), step=self.step, saved=saved)
            print(f"resize from {self.elastic.nodes} to {size} node(s) at step {self.step}: {decision.reason}; exit "
                  f"{RESIZE_EXIT_CODE} (the queue's elastic controller resubmits the job at {size} node(s); it resumes "
                  f"from step {self.step if saved else self._last_save_step})", flush=True)
        self.stop.uninstall()
        release_process_group()
        raise SystemExit(RESIZE_EXIT_CODE)

    # --- training health --------------------------------------------------------------------------------------
    def observe(self, loss: Any = None, *, grad_norm: Any = None, val_loss: Any = None) -> None:
        """Gives the health rules what the loop knows (``health.py``): ``loss``, each batch's training loss (a tensor
        stays on its device: the rules read the sum every ``check_every`` optimizer steps, one sync); ``grad_norm``,
        the gradients' norm before clipping (``clip_grad_norm_``'s return; without it the norm is read from the tracked
        optimizers, as they apply it; an infinite one under a tracked GradScaler is an overflow step the scaler
        skips, not judged); ``val_loss``, after a validation (the overfitting rule). A rule that stops the
        job stops it here or at the step's end: a checkpoint (unless the state is NaN), the run's record, exit 85."""
        if loss is not None:
            self.health.loss(loss)
        if grad_norm is not None and self.health.due(self._optimizer_steps + 1) and not self._overflow(grad_norm):
            self.health.gradients(grad_norm)
        if val_loss is not None and self.elastic is not None:
            self.elastic.validation(val_loss)
            self._resize_due = True  # considered (rank 0) and agreed (every rank) at the next optimizer step
            self.run.record["elastic"] = {"state": self.elastic.state_dict()}
        if val_loss is not None:
            # No collective here (a script may validate on rank 0 only): a stop is agreed at the next check
            verdict = self.health.validation(val_loss, self.step)
            if verdict is not None:
                self._pending_verdict = verdict

    def _overflow(self, grad_norm: Any) -> bool:
        """A non-finite norm under an enabled GradScaler: an fp16 overflow whose step the scaler skips (its scale
        halves), not a broken model (a NaN model's loss is NaN too, which the rules see): not judged."""
        try:
            if math.isfinite(float(grad_norm)):
                return False
        except (TypeError, ValueError):
            return False
        # torch.amp.GradScaler, FSDP's ShardedGradScaler, any scaler of that interface (tracked with job.track)
        return any(callable(getattr(value, "unscale_", None)) and callable(getattr(value, "get_scale", None))
                   and getattr(value, "is_enabled", lambda: True)() for value in self.objects.values())

    def progress(self) -> None:
        """The job is alive (call it inside a validation or a step longer than the stall rule's 30 minutes)."""
        self.health.progress()

    def _watch_health(self, env: Mapping[str, str]) -> None:
        """The stall rule and the heartbeat on the health timer; on AWS Batch, the stops, warnings and heartbeat
        as embedded-metric lines the queue's alarms and stall watcher read (global rank 0 prints them)."""
        from .job_metrics import job_id_from_environment

        queue = (env.get("ML_PLATFORM_QUEUE_NAME") or env.get("AWS_BATCH_JQ_NAME")) if env.get("AWS_BATCH_JQ_NAME") \
            else None
        self._health_queue = queue if _rank() == 0 else None
        job_id = job_id_from_environment(env)
        self.health.on_stall = self._stalled
        if _distributed() is not None:
            self.health.reduce = _sum_over_ranks
        # membership tests only: the main thread changes the clock's dict while the timer reads it
        self.health.busy = lambda: any(name in getattr(self.clock, "_active", {}) for name in ("checkpoint_save",
                                                                                                "restore"))
        self.health.on_verdict = self._publish_warning
        emit = None
        # No heartbeat when the stall rule is off: the queue's watcher then judges nothing ("not judged: no heartbeat")
        if self._health_queue and job_id and self.health.rules.action("stalled") != "off":
            def emit(count: int) -> None:
                _print_line(metric_line(HEARTBEAT_METRIC, self._health_queue, job_id=job_id, value=count))

            emit(0)  # the helper is here, nothing done yet: the watcher judges a job that hangs before its first step
        if self.health.rules.action("stalled") != "off":
            self.health.watch(lambda: self.step, emit=emit)

    def _publish_warning(self, verdict: Verdict) -> None:
        if verdict.action == "warn" and getattr(self, "_health_queue", None):
            _print_line(metric_line(WARNING_METRIC, self._health_queue, verdict.rule,
                                    fields={"Step": verdict.step, "RunId": self.run_id}))

    def _other_rank(self, fired: list[bool]) -> Verdict:
        """The stop of a rule that fired on another rank only (its values are in that rank's log)."""
        rule = RULES[fired.index(True)]
        return Verdict(rule, "stop", self.step, {}, "the rule fired on another rank (its log line has the values)")

    def _health_stop(self, verdict: Verdict) -> None:
        """A rule stopped the job: a checkpoint of this step unless the state is NaN (the newest stays the last
        good one), the record, the metric line, exit 85 (the queue does not retry it)."""
        saved = self._last_save_step == self.step
        if verdict.rule != "non_finite" and not saved:
            try:
                self._save(health_stop=verdict.rule)
                saved = self._last_save_step == self.step
            except Exception as error:  # the stop goes on: the newest checkpoint stays
                print(f"ml_platform_job: the checkpoint of step {self.step} was not saved ({type(error).__name__}: "
                      f"{error})", file=sys.stderr, flush=True)
        self.health_stopped(verdict, saved=saved)
        self.stop.uninstall()
        release_process_group()
        raise SystemExit(HEALTH_STOPPED_EXIT_CODE)

    def health_stopped(self, verdict: Verdict, *, saved: bool) -> None:
        """Records a health stop in the run (rank 0), prints the stop's metric line and its one-line summary; the
        caller exits 85. The adapters' stops end here."""
        if self.health.stop_verdict is None:
            self.health.stop_verdict = verdict
        self.health.close()
        launch_dir = os.environ.get(LAUNCH_DIR)
        if launch_dir:  # under the launcher (torchrun's exit 1 becomes 85 again)
            try:
                with open(os.path.join(launch_dir, HEALTH_MARKER), "w") as handle:
                    handle.write(verdict.rule)
            except OSError:
                pass
        if _rank() == 0:
            try:  # saves from the rule's step on (a periodic save before a validation's stop was agreed) hold the
                # state it judged: never resumed from
                for checkpoint in self.store.complete():
                    if checkpoint.step >= verdict.step and checkpoint.health_stop is None:
                        self.store.mark_health_stop(checkpoint.step, verdict.rule)
            except Exception as error:
                print(f"ml_platform_job: the checkpoints from step {verdict.step} on were not marked as the health "
                      f"stop's ({type(error).__name__}: {error}); a resume would load them", file=sys.stderr,
                      flush=True)
            self.run.health_stop(verdict.to_dict(), saved=saved)
            if getattr(self, "_health_queue", None):
                _print_line(metric_line(STOP_METRIC, self._health_queue, verdict.rule,
                                        fields={"Step": verdict.step, "RunId": self.run_id,
                                                "Values": dict(verdict.values)}))
            kept = (f"the checkpoint of step {verdict.step} is written (for inspection: a resume starts from the good "
                    "one before it)" if saved
                    else f"the newest checkpoint is step {self._last_save_step}" if self._last_save_step is not None
                    else "no checkpoint")
            print(f"stopped by the health rule {verdict.rule} at step {verdict.step}: {verdict.message}; {kept}; "
                  f"exit {HEALTH_STOPPED_EXIT_CODE} (the queue does not retry it). Fix: {verdict.fix}", flush=True)

    def _stalled(self, verdict: Verdict) -> None:
        """The timer's stall stop: the loop is stuck (a loader, a collective), so no checkpoint can be taken; the
        record, the metric line, and the process ends with exit 85 from the timer thread."""
        try:
            self.health_stopped(verdict, saved=False)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(HEALTH_STOPPED_EXIT_CODE)

    def _stop(self) -> None:
        """Saves (when it fits in the time left, and within it), records the stop and exits 143."""
        [skip] = all_ranks_max([not self.stop.save_fits(self._save_seconds)])  # every rank saves, or none
        where = (f"step {self.step} (epoch {self.epoch if self.epoch is not None else self._epoch_index}, sample "
                 f"{self._position} of it)")
        saved = self._last_save_step == self.step
        if saved:
            note = "its checkpoint is written"
        elif skip:
            note = (f"no checkpoint: the last save took {self._save_seconds:.0f} s and "
                    f"{max(0.0, self.stop.seconds_left() or 0):.0f} s are left before SIGKILL")
        else:
            started = self.clock.now()
            with self.clock.phase("checkpoint_save"):
                saved, note = self.stop.save_in_time(self._write)  # the files and marker only
            if saved:
                self._saved(started)
        if not saved:
            note += (f"; the retry resumes from step {self._last_save_step} (save more often: save_every_minutes, or "
                     "raise the queue's stop_timeout)")
        self.run.stop(f"stop requested ({self.stop.reason}) at {where}; {note}", step=self.step, saved=saved)
        self.stop.stopped()
        if _rank() == 0:
            print(f"stopped ({self.stop.reason}) at {where}: {note}; exit {STOPPED_EXIT_CODE} (the queue retries it)",
                  flush=True)
        self.stop.uninstall()
        release_process_group()
        raise SystemExit(STOPPED_EXIT_CODE)

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for: a long validation can break off (the stop is then taken at the epoch's
        end, with the epoch's steps saved)."""
        return self.stop.requested

    # --- the run ------------------------------------------------------------------------------------------------
    def log(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        """Metrics into the run (the latest of each in its record; every value in MLflow, with ``step``)."""
        self.run.log_metrics(metrics, step=self.step if step is None else step)

    def log_holdout(self, step: Optional[int] = None, **metrics: float) -> None:
        """Held-out scores (``accuracy`` a fraction from 0 to 1), logged as ``holdout_<name>``."""
        self.run.log_holdout(step=self.step if step is None else step, **metrics)

    def finish(self, model: Any = None, *, save_model: bool = True, improves_on: Any = None,
               tokens: Optional[float] = None) -> dict:
        """Training is done: the model's digest (what a rehearsal compares) and, with ``save_model``, its
        ``state_dict`` as ``model.pt`` next to the checkpoints (the run's model); then the run's cost. Exit 0 after."""
        import torch  # type: ignore[import-not-found]

        digest = state_digest(model) if model is not None else None
        if model is not None and save_model and _rank() == 0:
            with self.clock.phase("checkpoint_save"):
                buffer = io.BytesIO()
                torch.save(model.state_dict(), buffer)
                self.store.location.write(MODEL_FILE, buffer.getvalue())
            self.run.record_model(self.store.location.uri + MODEL_FILE)
        record = self.run.finish(improves_on=improves_on, tokens=tokens, final_state_sha256=digest)
        self.stop.uninstall()
        dist = _distributed()
        if dist is not None:
            dist.barrier()  # no rank tears its process group down while rank 0 still writes the model and the record
        if _rank() == 0:
            cost = (f"cost {record['cost_usd']} USD" if record.get("cost_usd") is not None
                    else "cost unknown (its record's cost_note says why)")
            print(f"run {self.run_id} finished: {len(record['passport']['attempts'])} attempt(s), {cost}", flush=True)
        return record


def _print_line(line: str) -> None:
    """One metric line on stdout (the job's log stream, which CloudWatch Logs reads); a closed pipe loses it only."""
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


class JobLoader:
    """The job's training loader: iterate it as a DataLoader (it is one underneath: ``.loader``). Each epoch starts at
    the data position; the time blocked on it is data wait; after each step the position moves on and a stop or a
    due save is taken."""

    def __init__(self, job: TrainingJob, loader: Any, sampler: Any, dataset: Any, accumulate: int = 1) -> None:
        self.job, self.loader, self.sampler, self.dataset = job, loader, sampler, dataset
        self.batch_size = loader.batch_size
        self.accumulate = accumulate
        self.batch_index = -1  # the batch being trained: its index in the whole epoch, counting a resumed epoch's start

    def __len__(self) -> int:
        """The whole epoch's batches (a resumed epoch yields fewer: a scheduler sized from it stays right)."""
        return len(self.loader)

    @property
    def step_due(self) -> bool:
        """With ``accumulate=K``: whether the batch being trained ends an optimizer step (every K-th batch of the
        epoch, and its last), counted in the whole epoch: a resumed epoch's batches keep their places. Step then."""
        return (self.batch_index + 1) % self.accumulate == 0 or self.batch_index + 1 >= len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name in ("job", "loader", "sampler", "dataset"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        job, sampler = self.job, self.sampler
        if not job.objects:
            raise RuntimeError("job.track(model=..., optimizer=..., ...) before the first batch: without it a resumed "
                               "attempt would skip the data already trained on and start from untrained weights")
        if not job._epochs_managed and job._position >= sampler.total_size:  # a loop of its own: the next epoch
            job._epoch_index, job._position = job._epoch_index + 1, 0
        # A position past this world size's epoch (a retry on fewer ranks pads the epoch less): the epoch is done.
        sampler.set_position(job._epoch_index, min(job._position, sampler.total_size))
        # The workers' base seed from (seed, epoch): a new iterator draws it from the loader's own generator.
        self.loader.generator.manual_seed(job.seed + job._epoch_index)
        job._loader_ended_at = None  # training again (a loop without epochs(): its validation has ended)
        ranks = sampler.num_replicas
        left = sampler.remaining()
        batch_size = self.batch_size or 1
        batches = 0
        self.batch_index = sampler.start // (batch_size * ranks) - 1
        for batch in job.clock.batches(self.loader):
            self.batch_index += 1
            with job.clock.step():
                yield batch
            taken = min(batch_size, left)
            left -= taken
            batches += 1
            job._after_step(taken * ranks, boundary=batches % self.accumulate == 0 or left <= 0)
        if not job._epochs_managed:
            job._position = sampler.total_size
        job._loader_ended_at = job.clock.now()
