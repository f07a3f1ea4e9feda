"""PyTorch Lightning on the platform: a ``Callback`` that saves and exits 143 on SIGTERM or the stop file, resumes from
the newest complete checkpoint mid-epoch, records the run and times its phases (lightning).

    from ml_platform_job.lightning import PlatformCallback

    platform = PlatformCallback(hparams)                     # the run (its parameters), the stop signal
    ...  def train_dataloader(self): return platform.loader(dataset, batch_size=32, shuffle=True, num_workers=4)
    trainer = L.Trainer(..., callbacks=[platform])
    trainer.fit(model, datamodule=data, ckpt_path=platform.ckpt_path)   # the newest complete checkpoint, or None
    platform.finish(trainer)                                 # the model, its digest, the run's cost; exit 0 after

How (Lightning's own checkpoint and hooks: https://lightning.ai/docs/pytorch/stable/extensions/callbacks.html):

- The checkpoint is Lightning's (``trainer.save_checkpoint``: model, optimizers, schedulers, precision plugin, loops,
  callbacks), saved at the end of each epoch, every ``save_every_minutes`` inside one, and on a stop, as
  ``state.ckpt`` of a complete-or-absent checkpoint (``checkpoints.CheckpointStore``) under
  ``ML_PLATFORM_CHECKPOINT_URI``; ``ckpt_path`` brings the newest one back for ``trainer.fit``. The callback's own
  state in it holds what Lightning does not save: every random generator and the data position.
- The data position: Lightning resumes its loops mid-epoch but re-reads a plain loader from its start ("resuming from a
  checkpoint that ended before the epoch ended ... your dataloader is not resumable"). ``loader`` makes one whose
  sampler (a ``DistributedSampler``, which Lightning leaves in place) starts a resumed epoch at the sample it stopped
  at, with (seed, epoch, sample) randomness (``data``).
- A stop (agreed by every rank after each training batch) saves and raises ``SystemExit(143)``, which Lightning
  passes on after its teardown. From the start of training SIGTERM reaches the platform's handler only: Lightning's
  own would raise ``SIGTERMException`` after whatever batch it lands in, with no checkpoint of that step and exit code
  0 (a stopped job would look SUCCEEDED to AWS Batch and never be retried); where it still comes (a SIGTERM before
  training starts), ``on_exception`` sets its code to 143.
- Goodput: the callback switches the clock's phase where Lightning's hooks fire (``PhaseClock.switch``): a step from
  ``on_train_batch_start`` to ``on_train_batch_end``, data wait from there to the next batch's start (Lightning
  fetches it in between), validation from ``on_validation_start`` to ``on_validation_end``, and the saves; each
  counts while it lasts, so a loader or a step stuck between two hooks reads as such on the goodput timer. The time
  from a batch's end to a validation or a save, and to the epoch's end, counts in no phase.
- Training health (``health.py``; ``TrainingJob.start``'s ``health=`` or ``ML_PLATFORM_HEALTH``...): checked every
  ``check_every`` optimizer steps in ``on_train_batch_end`` (at an accumulation's last batch), one device sync per
  check and none per batch. What each rule reads under Lightning:

  - the loss (``non_finite``, ``loss_diverging``, ``loss_not_decreasing``, ``loss_plateau``): each training batch's
    loss, ``outputs["loss"]`` of ``on_train_batch_end`` (what ``training_step`` returned, a tensor or a dict's
    ``"loss"``), kept on its device; under gradient accumulation Lightning divides it by ``accumulate_grad_batches``,
    which the callback multiplies back. A ``training_step`` that returns no loss (manual optimization returning
    nothing) leaves the loss rules "not judged".
  - the gradients' norm (``non_finite``, ``exploding_gradients``, ``vanishing_gradients``): the global norm of the
    optimizer's gradients in ``on_before_optimizer_step`` at check steps (one sync). Lightning calls that hook after
    the backward (and AMP's unscaling) and before its own clipping (``gradient_clip_val``), so the norm is the
    unclipped one and every gradient rule is judged. With a 16-bit loss scaler an inf or NaN norm is a step the
    scaler skips (an overflow), not counted.
  - the validation loss (``overfit``): ``trainer.callback_metrics["val_loss"]`` (or ``"val/loss"``,
    ``"validation_loss"``) after each validation (``on_validation_end``, not the sanity check): log it in
    ``validation_step`` (``self.log("val_loss", loss)``); without it the rule is "not judged".
  - progress (``stalled``): each training and validation batch and each save.

  A stop is agreed by every rank (at a check, in the all-reduce that agrees the stop signal and the periodic save);
  it saves the step (``trainer.save_checkpoint``, unless the rule is ``non_finite``: a NaN model is no checkpoint,
  the newest stays the last good one; the stop's checkpoint is kept for inspection and never resumed from), records the stop in the run (``health_stopped``: FAILED, the rule, the step,
  the fix; on AWS Batch its metric line) and raises ``SystemExit(85)``, which Lightning passes on after its teardown
  and ``on_exception`` leaves as it is; the queue never retries it. ``warn`` says the rule once and trains on.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, Optional

from lightning.pytorch.callbacks import Callback  # type: ignore[import-not-found]

from . import STOPPED_EXIT_CODE
from .checkpoints import HEALTH_STOP, CheckpointStore
from .health import HEALTH_STOPPED_EXIT_CODE, Verdict, grad_norm
from .job import DEFAULT_SAVE_EVERY_MINUTES, TrainingJob, _rule_flags
from .stop import all_ranks_max, rank as _rank
from .torch_state import rng_state, set_rng_state

STATE_FILE = "state.ckpt"
# What the module logs its validation loss as (``self.log(...)`` in ``validation_step``): the overfitting rule's input.
VALIDATION_LOSSES = ("val_loss", "val/loss", "validation_loss")


def _positioned_loader_class() -> type:
    """A DataLoader that says it is resumable (``state_dict``/``load_state_dict``), as it is: its sampler starts a
    resumed epoch at the callback's data position. Lightning then does not warn that a mid-epoch resume re-reads the
    epoch from its start."""
    from torch.utils.data import DataLoader  # type: ignore[import-not-found]

    class PositionedDataLoader(DataLoader):
        def state_dict(self) -> dict:
            return {}  # the position is in the callback's state

        def load_state_dict(self, state_dict: dict) -> None:
            return None

    return PositionedDataLoader


class PlatformCallback(Callback):
    """The platform's side of a Lightning run (see the module docstring)."""

    def __init__(self, params: Any = None, *, flags: Iterable[str] = (), seed: Optional[int] = None,
                 save_every_minutes: Optional[float] = DEFAULT_SAVE_EVERY_MINUTES, save_each_epoch: bool = True,
                 job: Optional[TrainingJob] = None, **start: Any) -> None:
        """``params``: the run's hyperparameters (a mapping, argparse's Namespace or a dataclass); ``flags``: the
        names among them that do not make the run. ``start``: ``TrainingJob.start``'s other keywords."""
        self.job = job or TrainingJob.start(params=params, flags=flags, seed=seed, save_every_minutes=None, **start)
        if getattr(self.job, "elastic", None) is not None:
            self.job.no_resizes("the Lightning adapter")
        self.store: CheckpointStore = self.job.store
        self.clock = self.job.clock
        self.save_every_seconds = None if not save_every_minutes else save_every_minutes * 60
        self.save_each_epoch = save_each_epoch
        self.sampler: Any = None
        self._resume: Optional[dict] = None  # the callback's state from the checkpoint being resumed
        self._ckpt_path: Optional[str] = None
        self._resolved = False
        self._epoch_base = 0  # global samples of the current epoch trained before this attempt
        self._trained = 0  # this rank's samples of the current epoch trained in this attempt
        self._last_save_at = self.clock.now()
        self._save_seconds: Optional[float] = None
        self._stopped_note: Optional[str] = None
        self._last_saved_step: Optional[int] = None
        self._batch_size = 1
        self._stop_at_epoch_end = False
        self._after_validation: Optional[str] = None  # the clock's phase after the validation in progress
        self._steps = 0  # optimizer steps in this attempt: the health checks' clock
        self._grad_failed = False
        self._health_stopping: Optional[str] = None  # a health rule's stop is under way (its rule): exit 85 stays 85

    @property
    def state_key(self) -> str:
        return "ml_platform_job.PlatformCallback"

    # --- data -----------------------------------------------------------------------------------------------------
    def loader(self, dataset: Any, *, shuffle: bool = False, drop_last: bool = False, **kwargs: Any) -> Any:
        """The training DataLoader (``TrainingJob.loader``'s data: order and random draws from (seed, epoch, sample),
        a resumed epoch starting at its sample); return it from ``train_dataloader``."""
        from .data import resumable_loader

        loader, self.sampler = resumable_loader(dataset, seed=self.job.seed, shuffle=shuffle, drop_last=drop_last,
                                                owner="the platform's loader", loader_class=_positioned_loader_class(),
                                                **kwargs)
        position = (self._resume or {}).get("position")
        if position and position["start"] >= self.sampler.total_size:  # saved at an epoch's end (or past the end of
            # the epoch as another number of ranks pads it): the next one
            self._resume["position"] = position = {"epoch": position["epoch"] + 1, "start": 0}
        if position:
            self.sampler.set_position(position["epoch"], position["start"])
            loader.generator.manual_seed(self.job.seed + self.sampler.epoch)
        self._batch_size = kwargs.get("batch_size", 1) or 1
        return loader

    # --- resuming -----------------------------------------------------------------------------------------------
    @property
    def ckpt_path(self) -> Optional[str]:
        """The newest complete checkpoint as a local file (checked against its marker), or None: pass it to
        ``trainer.fit(..., ckpt_path=...)``."""
        if self._resolved:
            return self._ckpt_path
        with self.clock.phase("restore"):
            found = self.store.load_newest(lambda checkpoint: self.store.read(checkpoint, STATE_FILE))
        if found is not None:  # a corrupt newest checkpoint: the one before
            checkpoint, data = found
            path = Path(tempfile.mkdtemp(prefix="ml-platform-ckpt-")) / STATE_FILE
            path.write_bytes(data)
            self._ckpt_path = str(path)
            self.job.resumed_from(checkpoint)
        self._resolved = True
        return self._ckpt_path

    def state_dict(self) -> dict:
        sampler = self.sampler
        position = None
        if sampler is not None:
            position = {"epoch": sampler.epoch, "start": min(sampler.total_size,
                                                             self._epoch_base + self._trained * sampler.num_replicas)}
        return {"rng": rng_state(), "position": position}

    def load_state_dict(self, state_dict: dict) -> None:
        self._resume = dict(state_dict)

    # --- the loop -----------------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        strategy = trainer.strategy
        if "DeepSpeed" in type(strategy).__name__ or getattr(strategy, "_state_dict_type", "full") == "sharded":
            raise SystemExit(f"error: {type(strategy).__name__} saves a sharded checkpoint (a folder per rank): the "
                             "platform's callback keeps single-file checkpoints; use a strategy that gathers the state "
                             "on rank 0 (DDP, or FSDPStrategy(state_dict_type=\"full\"))")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.sampler is None and _rank() == 0:
            print("ml_platform_job: the training dataloader is not the platform's (platform.loader): a stop mid-epoch "
                  "resumes as Lightning does, from the epoch's start", file=sys.stderr, flush=True)
        self.job.run.note_determinism()  # as the Trainer left it (Trainer(deterministic=True) turns torch's on)
        # SIGTERM to the platform's handler alone: Lightning's would raise its own stop after whatever batch it lands
        # in (mid-accumulation, during validation), with no checkpoint of that step. The stop is taken where a step
        # or the epoch ends (on several ranks, the others hear of it through the agreement after each step).
        self.job.stop.take_over()
        self.job.step = trainer.global_step
        if self._resume and self._resume.get("rng"):
            for line in set_rng_state(self._resume["rng"]):  # after the sanity check, as the saved run stood
                print(f"ml_platform_job: {line}", file=sys.stderr, flush=True)
        self.clock.switch("data_wait")  # Lightning fetches the first batch next

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        position = (self._resume or {}).get("position")
        resumed_here = position and self.sampler is not None and position["epoch"] == self.sampler.epoch
        self._epoch_base = position["start"] if resumed_here else 0
        self._trained = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.clock.switch("step")  # the wait since the last batch (or validation, or save) ends: it was data wait

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.clock.switch("data_wait")  # until the next batch's start, less a validation or a save in between
        self.job.health.progress()
        self.job.step = trainer.global_step
        self._observe_loss(trainer, outputs)
        now = self.clock.now()
        if self.sampler is not None:
            left = len(range(self._epoch_base + self.sampler.rank + self._trained * self.sampler.num_replicas,
                             self.sampler.total_size, self.sampler.num_replicas))
            self._trained += min(self._batch_size, left)
        accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        last = trainer.num_training_batches != float("inf") and batch_idx + 1 >= trainer.num_training_batches
        if (batch_idx + 1) % accumulate and not last:
            # Mid-accumulation: the gradients so far are in no checkpoint, so the stop waits for the optimizer's step.
            self._put_off_lightnings_stop(trainer)
            return
        due = self.save_every_seconds is not None and now - self._last_save_at >= self.save_every_seconds
        save, stopping, verdict = self._agree(trainer, due)
        if verdict is not None:
            self._health_stop(trainer, verdict)
        if stopping and last:
            # The epoch's last batch: validation comes next, and its loader draws from torch's generator. A
            # checkpoint from before that draw would resume one draw behind the uninterrupted run: the stop is taken
            # at the epoch's end, after validation, instead.
            self._stop_at_epoch_end = True
            self._put_off_lightnings_stop(trainer)
            return
        if stopping:
            self._stop(trainer)
        if save:
            self._save_on_the_way(trainer)

    def _put_off_lightnings_stop(self, trainer: Any) -> None:
        """Lightning would raise its own stop right after this batch (and, on several ranks, before the next): its
        flag is put off (ours stays set, and is taken where the step or the epoch ends)."""
        if self.job.stop.requested and getattr(trainer, "_signal_connector", None) is not None:
            trainer._signal_connector.received_sigterm = False

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return  # the sanity check before training: not timed
        # After it: the next batch's data wait in training; nothing after a validation outside it (trainer.validate).
        self._after_validation = "data_wait" if self.clock.switched is not None else None
        self.clock.switch("evaluation", counted_as=None)  # the time since the batch's end was no data wait

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self.job.health.progress()  # a validation batch: a long validation is no stall

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        if self.clock.switched == "evaluation":
            self.clock.switch(self._after_validation)
        self._log(trainer)
        self._judge_validation(trainer)

    def _log(self, trainer: Any) -> None:
        """What the module logged (``self.log``: losses, validation metrics) into the run, at the global step."""
        numbers = {}
        for name, value in trainer.callback_metrics.items():
            try:
                numbers[name] = float(value)
            except (TypeError, ValueError):  # a tensor of several values: not one figure
                continue
        if numbers:
            self.job.run.log_metrics(numbers, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.clock.switch("data_wait", counted_as=None)  # from the epoch's end: the next one's first batch
        self._log(trainer)
        if self._stop_at_epoch_end:
            self._stop(trainer)
        last = trainer.max_epochs is not None and trainer.current_epoch + 1 >= trainer.max_epochs
        if self.save_each_epoch and not last:
            self._save_on_the_way(trainer)

    def _save(self, trainer: Any) -> None:
        """A checkpoint of the current step (every rank calls it); a step saved already is not saved again."""
        if self._last_saved_step == trainer.global_step:
            return  # written already: a complete checkpoint is never rewritten
        self.clock.switch(None, counted_as=None)  # the time since the batch's (or epoch's) end was no data wait
        try:
            started = self.clock.now()
            with self.clock.phase("checkpoint_save"):
                self._write(trainer)
            self._saved(trainer, started)
        finally:
            self.clock.switch("data_wait")  # then the next batch

    def _write(self, trainer: Any) -> None:
        step = trainer.global_step
        with tempfile.TemporaryDirectory(prefix="ml-platform-ckpt-") as directory:
            path = Path(directory) / STATE_FILE
            trainer.save_checkpoint(str(path))  # every rank calls it; the strategy writes from rank 0
            if trainer.is_global_zero:
                meta = {"global_step": step, "epoch": trainer.current_epoch}
                if self._health_stopping:  # a state the rule judged bad: kept for inspection, never resumed from
                    meta[HEALTH_STOP] = self._health_stopping
                self.store.save(step, {STATE_FILE: path}, meta=meta)
        trainer.strategy.barrier("ml_platform_job.save")

    def _saved(self, trainer: Any, started: float) -> None:
        self.clock.checkpoint_saved()
        now = self.clock.now()
        self._save_seconds, self._last_save_at = now - started, now
        self._last_saved_step = trainer.global_step
        self.job._last_save_step = trainer.global_step  # the newest checkpoint, as a health stop's line names it
        self.job.run.checkpointed(step=trainer.global_step)
        self.job.health.progress()

    def _save_on_the_way(self, trainer: Any) -> None:
        """A periodic or end-of-epoch save: one that fails is said in one line and training goes on."""
        try:
            self._save(trainer)
        except Exception as error:
            print(f"ml_platform_job: the checkpoint of step {trainer.global_step} was not saved "
                  f"({type(error).__name__}: {error}); training goes on", file=sys.stderr, flush=True)

    def _stop(self, trainer: Any) -> None:
        self.clock.switch(None, counted_as=None)  # no data wait: the attempt ends here
        [skip] = all_ranks_max([not self.job.stop.save_fits(self._save_seconds)])  # every rank saves, or none
        saved = self._last_saved_step == trainer.global_step
        if saved:
            note = f"the checkpoint of step {trainer.global_step} is written"
        elif skip:
            note = (f"no checkpoint: the last save took {self._save_seconds:.0f} s and "
                    f"{max(0.0, self.job.stop.seconds_left() or 0):.0f} s are left before SIGKILL (save more often, or "
                    "raise the queue's stop_timeout)")
        else:
            started = self.clock.now()
            with self.clock.phase("checkpoint_save"):
                saved, note = self.job.stop.save_in_time(lambda: self._write(trainer))  # the file and its upload
            if saved:
                self._saved(trainer, started)
        self._record_stop(trainer, note, saved)
        raise SystemExit(STOPPED_EXIT_CODE)

    def _record_stop(self, trainer: Any, note: str, saved: bool = False) -> None:
        if self._stopped_note is not None:
            return
        self._stopped_note = note
        self.job.run.stop(f"stop requested ({self.job.stop.reason}) at step {trainer.global_step}; {note}",
                          step=trainer.global_step, saved=saved)
        self.job.stop.stopped()
        if _rank() == 0:
            print(f"stopped ({self.job.stop.reason}) at step {trainer.global_step}: {note}; exit {STOPPED_EXIT_CODE} "
                  "(the queue retries it)", flush=True)
        self.job.stop.uninstall()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Lightning's own SIGTERM stop (``SIGTERMException``, exit code 0) becomes exit 143; so does ours."""
        self.clock.switch(None, counted_as=None)  # the step or wait it broke off is not counted
        if self._health_stopping:
            return  # a health rule's stop: recorded already, and its exit 85 is never retried (nor made 143)
        if isinstance(exception, SystemExit) and (self.job.stop.requested or exception.code == STOPPED_EXIT_CODE):
            saved = self._last_saved_step is not None and self._last_saved_step == getattr(trainer, "global_step", None)
            self._record_stop(trainer, "no new checkpoint (Lightning stopped outside a training batch); the retry "
                                       "resumes from the last one", saved)
            exception.code = STOPPED_EXIT_CODE

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.clock.switch(None, counted_as=None)  # no next batch: the time since the last epoch's end is no data wait

    # --- training health ------------------------------------------------------------------------------------------
    def _observe_loss(self, trainer: Any, outputs: Any) -> None:
        """The batch's loss to the rules, on its device (no sync): ``training_step``'s, as Lightning passes it."""
        health = self.job.health
        if health.rules.mode == "off":
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is None or not hasattr(loss, "detach"):
            return
        accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        if accumulate > 1 and getattr(trainer.lightning_module, "automatic_optimization", True):
            loss = loss.detach() * accumulate  # Lightning divides each batch's loss by accumulate_grad_batches
        health.loss(loss)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """At a check step: the gradients' global norm, before Lightning clips them (after AMP unscales them)."""
        health = self.job.health
        if health.rules.mode == "off" or self._grad_failed or not health.due(self._steps + 1) or health.has_grad_norm:
            return
        try:
            norm = grad_norm(p for group in optimizer.param_groups for p in group["params"])
        except Exception as error:  # sharded gradients it cannot read: the gradient rules go unjudged
            self._grad_failed = True
            if _rank() == 0:
                print(f"ml_platform_job health: the gradients' norm is not readable here ({type(error).__name__}: "
                      f"{error}); the gradient rules are not judged", file=sys.stderr, flush=True)
            return
        if (norm is not None and not math.isfinite(norm)
                and getattr(getattr(trainer, "precision_plugin", None), "scaler", None) is not None):
            return  # the 16-bit loss scaler skips this step (an overflow, not the model's NaN: the loss rule sees that)
        health.gradients(norm)

    def _agree(self, trainer: Any, due: bool) -> tuple[bool, bool, Optional[Verdict]]:
        """After an optimizer step: (save, stop) as every rank sees them and a health rule's agreed stop, from one
        all-reduce (the health rules are read at check steps only)."""
        self._steps += 1
        health = self.job.health
        if health.rules.mode == "off" or not health.due(self._steps):
            save, stopping = self.job.agree(due, self.job.stop.requested)
            return save, stopping, None
        verdict = health.check(trainer.global_step)
        save, stopping, *fired = all_ranks_max([due, self.job.stop.requested, *_rule_flags(verdict)])
        if stopping and not self.job.stop.requested:
            self.job.stop.request("another rank was asked to stop")
        return save, stopping, (verdict or self.job._other_rank(fired)) if any(fired) else None

    def _judge_validation(self, trainer: Any) -> None:
        """The validation's loss (``VALIDATION_LOSSES``): the overfitting rule, agreed by every rank."""
        health = self.job.health
        if health.rules.mode == "off":
            return
        metrics = trainer.callback_metrics
        name = next((name for name in VALIDATION_LOSSES if name in metrics), None)
        # Every rank joins the agreement, with or without the loss: one logged with rank_zero_only=True is in rank 0's
        # callback_metrics only, and a rank that left before the all-reduce would leave rank 0 waiting in it.
        verdict = health.validation(metrics[name], trainer.global_step) if name is not None else None
        fired = all_ranks_max(_rule_flags(verdict))  # every rank validates at the same point
        if any(fired):
            self._health_stop(trainer, verdict or self.job._other_rank(fired))

    def _health_stop(self, trainer: Any, verdict: Verdict) -> None:
        """A rule stopped the job: a checkpoint of this step unless the state is NaN (the newest stays the last good
        one), the run's record, the metric line, exit 85 (the queue does not retry it)."""
        self._health_stopping = verdict.rule
        saved = self._last_saved_step == trainer.global_step
        if verdict.rule != "non_finite" and not saved:
            try:
                self._save(trainer)
                saved = self._last_saved_step == trainer.global_step
            except Exception as error:  # the stop goes on: the newest checkpoint stays
                print(f"ml_platform_job: the checkpoint of step {trainer.global_step} was not saved "
                      f"({type(error).__name__}: {error})", file=sys.stderr, flush=True)
        self.clock.switch(None, counted_as=None)  # the attempt ends here
        self.job.health_stopped(verdict, saved=saved)
        self.job.stop.uninstall()
        raise SystemExit(HEALTH_STOPPED_EXIT_CODE)

    # --- the end ------------------------------------------------------------------------------------------------
    def finish(self, trainer: Any, *, save_model: bool = True, improves_on: Any = None,
               tokens: Optional[float] = None) -> dict:
        """Training is done: the model's digest (what a rehearsal compares) and, with ``save_model``, its
        ``state_dict`` as ``model.pt`` next to the checkpoints; then the run's cost (``TrainingJob.finish``). Exit 0
        after."""
        self.clock.switch(None, counted_as=None)  # (on_train_end did, unless training broke off)
        return self.job.finish(trainer.lightning_module, save_model=save_model, improves_on=improves_on, tokens=tokens)
