"""Hugging Face Trainer on the platform: a ``TrainerCallback`` that stops on SIGTERM or the stop file with a checkpoint
and exit 143, resumes from the newest complete checkpoint, records the run and times its phases (transformers).

    from ml_platform_job.transformers import PlatformCallback

    platform = PlatformCallback(training_args)                    # the run, from the TrainingArguments; the stop signal
    trainer = Trainer(model=model, args=training_args, ..., callbacks=[platform])
    trainer.train(resume_from_checkpoint=platform.resume_from)    # the newest complete checkpoint, or None
    platform.finish(trainer)                                      # the model, its digest, the run's cost; exit 0 after

How (the Trainer's own flags and hooks: https://huggingface.co/docs/transformers/main_classes/callback):

- The checkpoint is the Trainer's own ``checkpoint-N`` folder (model, optimizer, scheduler, scaler, RNG states and
  the trainer state; on resume the Trainer skips the batches already trained, so a stop mid-epoch resumes mid-epoch).
  Every time the Trainer saves (``on_save``), global rank 0 uploads the folder to ``ML_PLATFORM_CHECKPOINT_URI`` as a
  complete-or-absent checkpoint (``checkpoints.CheckpointStore``); ``resume_from`` brings the newest complete one back
  into ``output_dir`` (the node's first process downloads, the others wait: ``main_process_first``).
- A stop (``stop.StopRequest``, agreed by every rank after each optimizer step) sets ``control.should_save`` and
  ``control.should_training_stop``: the Trainer saves that step and leaves its loop; ``on_train_end`` then records the
  stop and exits 143 (the queue retries it), so nothing after ``trainer.train()`` runs on an unfinished model. When
  the last save took longer than the time left before SIGKILL, the stop skips the save and says so.
- Periodic saves are the Trainer's (``save_strategy``, ``save_steps``): with ``save_strategy="no"`` an instance lost
  without notice restarts from the beginning, and a warning says so.
- Goodput: steps between ``on_step_begin`` and ``on_step_end``; the time from one step's end to the next one's begin,
  less the evaluations and saves in it, is the data wait (the Trainer fetches the next batches there). Each counts
  while it lasts (``PhaseClock.switch``), so a loader or a step stuck between two hooks reads as such on the goodput
  timer. The Trainer has no hook where an evaluation or a save begins: it evaluates and saves right after a step's
  (or the epoch's) end when its control says so, so the callback switches there to what the control says comes
  next; where the Trainer did otherwise, the hook at the end (``on_evaluate``, ``on_save``, ``on_step_begin``)
  counts the time as what it was.

- Training health (``health.py``; ``TrainingJob.start``'s ``health=`` or ``ML_PLATFORM_HEALTH``...): checked every
  ``check_every`` optimizer steps in ``on_step_end``, one device sync per check and none per step. What each rule
  reads under the Trainer:

  - the loss (``non_finite``, ``loss_diverging``, ``loss_not_decreasing``, ``loss_plateau``): each optimizer step's
    training loss, read from the model's own output (a forward hook on the model, in training mode, that keeps
    ``outputs["loss"]`` on its device: the micro-batches of a step summed where the Trainer passed
    ``num_items_in_batch``, as the Trainer sums them, else averaged). Unlike the logged ``loss`` it is not filtered:
    ``logging_nan_inf_filter`` (on by default) replaces a NaN step's loss by the interval's mean in the Trainer's log,
    never here. A model whose output holds no ``loss`` (a tuple, a ``compute_loss_func``, label smoothing, a
    ``compute_loss`` of its own) falls back to the logged ``loss`` (``on_log``: the mean over ``logging_steps``, NaN
    filtered): the loss rules then judge once per log, and NaN is seen by the gradients' norm only.
  - the gradients' norm (``non_finite``, ``exploding_gradients``, ``vanishing_gradients``): the global norm of the
    model's gradients in ``on_pre_optimizer_step`` at check steps (one sync). The Trainer clips before that hook
    (``max_grad_norm``, 1.0 by default), so the norm read is the clipped one: NaN and inf still read as NaN (clipping
    does not mend them) and a norm under the threshold is the unclipped one (``vanishing_gradients`` is judged
    exactly), but a jump past the threshold is not seen: with clipping on, ``exploding_gradients`` is "not judged"
    (the clip bounds the step; a blow-up behind it shows in the loss rules). With ``max_grad_norm=0`` every rule reads
    the unclipped norm. The logged ``grad_norm`` (unclipped) comes only every ``logging_steps``; it is not used.
  - the validation loss (``overfit``): ``eval_loss`` from ``on_evaluate`` (every evaluation the Trainer runs).
  - progress (``stalled``): each optimizer step and micro-batch, each evaluation batch (``on_prediction_step``) and
    each save; the job's timer stops a run without any for ``stall_seconds``.

  A stop is agreed by every rank at the check (with the stop signal's flag, in the same all-reduce), then the
  Trainer is told to save that step (unless the rule is ``non_finite``: a NaN model is no checkpoint, and a save
  due at that step is called off) and to leave its loop; ``on_train_end`` records the stop in the run
  (``health_stopped``: FAILED, the rule, the step, the fix; on AWS Batch its metric line) and exits 85, which the
  queue never retries. ``warn`` says the rule once and trains on.

Parameters: ``TrainingArguments.to_dict()`` (its tokens redacted); where output, logging and saving go
(``HF_FLAGS``) is recorded but never makes another run.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, Optional

from transformers import TrainerCallback  # type: ignore[import-not-found]

from . import STOPPED_EXIT_CODE
from .checkpoints import HEALTH_STOP, CheckpointStore
from .health import HEALTH_STOPPED_EXIT_CODE, Verdict, grad_norm
from .job import DEFAULT_FLAGS, TrainingJob, _rule_flags
from .stop import _distributed, all_ranks_max, rank as _rank
from .torch_state import state_digest

PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR
# TrainingArguments that say where and how often the Trainer writes and logs, never what it trains.
HF_FLAGS = frozenset(DEFAULT_FLAGS | {
    "logging_dir", "logging_strategy", "logging_steps", "logging_first_step", "logging_nan_inf_filter", "log_level",
    "log_level_replica", "log_on_each_node", "save_strategy", "save_steps", "save_total_limit", "save_on_each_node",
    "save_only_model", "save_safetensors", "push_to_hub", "hub_model_id", "hub_strategy", "hub_token",
    "hub_private_repo", "hub_always_push", "hub_revision", "resume_from_checkpoint", "enable_jit_checkpoint",
    "disable_tqdm", "report_to", "run_name", "project", "trackio_space_id", "output_dir", "overwrite_output_dir",
    "include_tokens_per_second", "include_num_input_tokens_seen", "skip_memory_metrics", "dataloader_prefetch_factor",
    "dataloader_pin_memory",
})


def _not_judged(health: Any, rule: str, why: str) -> None:
    """A rule this adapter cannot judge, and why: the run record's health summary says "not judged: <why>"."""
    notes = getattr(health, "not_judged", None)
    if not isinstance(notes, dict):
        notes = {}
        try:
            health.not_judged = notes
        except AttributeError:
            return
    notes[rule] = why


class PlatformCallback(TrainerCallback):
    """The platform's side of a Hugging Face Trainer run (see the module docstring)."""

    def __init__(self, args: Any, *, flags: Iterable[str] = (), job: Optional[TrainingJob] = None,
                 **start: Any) -> None:
        """``args``: the run's ``TrainingArguments``. ``flags``: more parameter names that do not make the run.
        ``start``: ``TrainingJob.start``'s other keywords (``dataset``, ``holdout``, ``keep``, ``env``, ...)."""
        self.args = args
        self.job = job or TrainingJob.start(params=args, flags=set(flags) | HF_FLAGS, seed=getattr(args, "seed", None),
                                            deterministic=bool(getattr(args, "full_determinism", False)),
                                            save_every_minutes=None, **start)
        if getattr(self.job, "elastic", None) is not None:
            self.job.no_resizes("the Trainer adapter")
        self.store: CheckpointStore = self.job.store
        self.clock = self.job.clock
        self._stopping = False
        self._at_epoch_end = False
        self._saved_on_stop = False
        self._save_seconds: Optional[float] = None
        self._note = "no checkpoint written"
        self._resume_from: Optional[str] = None
        self._resolved = False
        # Training health (health.py): the stop a rule asked for (taken in on_train_end), the step's loss so far (the
        # model's own, kept on its device), and this attempt's optimizer steps (the checks' clock).
        self._health_stop: Optional[Verdict] = None
        self._health_saved = False
        self._steps = 0
        self._step_loss: Any = None
        self._micro_batches = 0
        self._loss_shared = False  # the model normalized its loss over the step's items (num_items_in_batch)
        self._loss_seen = False  # the model's output had a loss: the logged one is not fed to the rules
        self._loss_hook: Any = None
        self._grad_failed = False
        self._training = False
        if (getattr(args, "dataloader_persistent_workers", False) and getattr(args, "dataloader_num_workers", 0)
                and _rank() == 0):
            print("ml_platform_job: the Trainer's data-loader workers are persistent: a resumed run is not the "
                  "uninterrupted one (the workers' random state starts again); dataloader_persistent_workers=False "
                  "for exactness", file=sys.stderr, flush=True)
        if str(getattr(args, "save_strategy", "")).lower().endswith("no") and _rank() == 0:
            print("ml_platform_job: save_strategy is 'no': only a stop saves; an instance lost without notice "
                  "restarts from the beginning (set save_strategy='steps' and save_steps)", file=sys.stderr, flush=True)

    # --- resuming -----------------------------------------------------------------------------------------------
    @property
    def resume_from(self) -> Optional[str]:
        """The newest complete checkpoint as a local ``checkpoint-N`` folder under ``output_dir`` (downloaded once
        per node, checked against its marker), or None: pass it to ``trainer.train(resume_from_checkpoint=...)``."""
        if self._resolved:
            return self._resume_from
        with self.clock.phase("restore"), self.args.main_process_first(local=True, desc="platform checkpoint"):
            # A corrupt newest checkpoint: the one before (the node's first process downloads, the others find it)
            output = Path(self.args.output_dir)
            found = self.store.load_newest(lambda checkpoint: self.store.download(
                checkpoint, output / f"{PREFIX}-{checkpoint.step}"))
        if found is not None:
            checkpoint, folder = found
            self._resume_from = str(folder)
            self.job.resumed_from(checkpoint)
        self._resolved = True
        return self._resume_from

    # --- the Trainer's hooks ------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.switch("evaluation" if getattr(args, "eval_on_start", False) else "data_wait")
        self.job.run.note_determinism()  # as the Trainer left it (full_determinism turns torch's on)
        self._training = True
        self.job.step = state.global_step
        self._watch_model(kwargs.get("model"), args)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Since the last step's end (or evaluation, or save) the Trainer fetched this step's batches.
        self.clock.switch("step", counted_as="data_wait")

    @staticmethod
    def _next_phase(control: Any) -> str:
        """What the Trainer does next, after a step's or the epoch's end or an evaluation, as its control says (the
        flow callback's flags and ours): evaluate (then save), save, or fetch the next step's batches."""
        if getattr(control, "should_evaluate", False):
            return "evaluation"
        return "checkpoint_save" if getattr(control, "should_save", False) else "data_wait"

    def _expect(self, control: Any) -> None:
        """The time since the last switch (a step's end, an evaluation, a save) was, and is, what comes next."""
        upcoming = self._next_phase(control)
        if self.clock.switched is not None and upcoming != self.clock.switched:
            self.clock.switch(upcoming, counted_as=upcoming)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.switch("data_wait")
        self.job.step = state.global_step
        self.job.health.progress()
        try:
            self._step_ended(state, control)
        finally:
            self._expect(control)  # the Trainer logs, evaluates and saves next, as the control now says

    def _step_ended(self, state: Any, control: Any) -> None:
        stop, verdict = self._health_check(state)
        if verdict is not None:
            self._take_health_stop(verdict, state, control)
            return
        if self._health_stop is not None:
            return  # stopping already (an evaluation's rule)
        if stop:
            self._stopping = True
            if state.epoch and abs(state.epoch - round(state.epoch)) < 1e-9:
                # The epoch's last step: the Trainer evaluates at the epoch's end, drawing from torch's generator (its
                # evaluation loader's seed). A checkpoint from before that draw would resume one draw behind the
                # uninterrupted run: the stop is taken at the epoch's end, after the evaluation, instead.
                self._at_epoch_end = True
                # A save due on this step (save_steps) would come before the evaluation and hold the generator's
                # state from before its draw: the stop's own save, after the evaluation, replaces it.
                control.should_save = False
                return
            self._take_stop(state, control)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            if self._health_stop is not None:
                self._hold_health_stop(state, control)
            elif self._at_epoch_end:
                self._at_epoch_end = False
                self._take_stop(state, control)
        finally:
            self._expect(control)  # the epoch's evaluation and save, as the control now says

    def _take_stop(self, state: Any, control: Any) -> None:
        """Asks the Trainer to save this step (when the save fits in the time left) and to leave its loop."""
        [skip] = all_ranks_max([not self.job.stop.save_fits(self._save_seconds)])
        control.should_training_stop = True
        if not skip:
            control.should_save = True
            # The Trainer saves next: if that outlasts the time left, record it and exit 143 before SIGKILL.
            self.job.stop.deadline(lambda: self._record_stop(state.global_step, "no checkpoint: the save did not "
                                                             "finish in the time left before SIGKILL", False))
        else:
            self._note = (f"no checkpoint: the last save took {self._save_seconds:.0f} s and "
                          f"{max(0.0, self.job.stop.seconds_left() or 0):.0f} s are left before SIGKILL (save more "
                          "often, or raise the queue's stop_timeout)")

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Optional[dict] = None, **kwargs: Any) -> None:
        self.job.health.progress()
        try:
            self._judge_validation(state, control, (metrics or {}).get("eval_loss"))
        finally:
            if self.clock.switched is not None:  # in training: since the step's end (or the save's), the evaluation
                self.clock.switch(self._next_phase(control), counted_as="evaluation")
        self.on_log(args, state, control, logs=metrics)

    def _judge_validation(self, state: Any, control: Any, loss: Any) -> None:
        """The evaluation's loss (``eval_loss``: the evaluation dataset's, not one of several named ones): the
        overfitting rule, agreed by every rank (each evaluates)."""
        health = self.job.health
        if health.rules.mode == "off" or loss is None or self._health_stop is not None:
            return
        verdict = health.validation(loss, state.global_step)
        fired = all_ranks_max(_rule_flags(verdict))
        if not any(fired):
            return
        verdict = verdict or self.job._other_rank(fired)
        if not self._training:  # trainer.evaluate() outside train(): no loop to leave, no step to save
            self._health_exit(verdict)
        self._take_health_stop(verdict, state, control)

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict] = None, **kwargs: Any) -> None:
        """The Trainer's logged figures (loss, learning rate, evaluation metrics) into the run, at their step."""
        numbers = {k: float(v) for k, v in (logs or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if numbers:
            self.job.run.log_metrics(numbers, step=state.global_step)
        if "loss" in numbers and self._training and not self._loss_seen:
            self.job.health.loss(numbers["loss"])  # the model's output has no loss: the logged mean (NaN filtered)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        started = self.clock.now()
        self.job.stop.disarm()  # the Trainer's files are written; the upload below is bounded by the queue's timeout
        dist = _distributed()
        if dist is not None:
            dist.barrier()  # every process's files of the folder (its rng_state_N.pth) are written before the upload
        uploaded = True
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"{PREFIX}-{state.global_step}"
            try:
                meta = {"global_step": state.global_step, "epoch": state.epoch}
                if self._health_stop is not None and state.global_step == self._health_stop.step:
                    meta[HEALTH_STOP] = self._health_stop.rule  # a state judged bad: for inspection, never resumed
                self.store.save_directory(state.global_step, folder, meta=meta)
            except Exception as error:
                if self._health_stop is None:
                    raise
                uploaded = False  # a health stop goes on to its record and exit 85: the newest checkpoint stays
                print(f"ml_platform_job: the checkpoint of step {state.global_step} was not saved "
                      f"({type(error).__name__}: {error})", file=sys.stderr, flush=True)
        if self.clock.switched is not None:  # since the step's end (or the evaluation's): the Trainer's save, then ours
            self._save_seconds = self.clock.switch("data_wait", counted_as="checkpoint_save")
        else:
            self._save_seconds = self.clock.now() - started
            self.clock.add("checkpoint_save", self._save_seconds)
        self.job.health.progress()
        if not uploaded:
            return
        self.clock.checkpoint_saved()
        self.job._last_save_step = state.global_step  # the newest checkpoint, as a health stop's line names it
        self.job.run.checkpointed(step=state.global_step)
        if self._stopping:
            self._saved_on_stop = True
        if self._health_stop is not None and state.global_step == self._health_stop.step:
            self._health_saved = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.switch(None, counted_as=None)  # no next step: the time since the last one is no data wait
        self._training = False
        self._unwatch_model()
        if self._health_stop is not None:
            self._health_exit(self._health_stop)
        finished = state.max_steps and state.global_step >= state.max_steps
        if not self._stopping or finished:
            return
        note = "checkpoint written" if self._saved_on_stop else self._note
        self._record_stop(state.global_step, note, self._saved_on_stop)
        raise SystemExit(STOPPED_EXIT_CODE)

    def _record_stop(self, step: int, note: str, saved: bool) -> None:
        self.job.run.stop(f"stop requested ({self.job.stop.reason}) at step {step}; {note}", step=step, saved=saved)
        self.job.stop.stopped()
        if _rank() == 0:
            print(f"stopped ({self.job.stop.reason}) at step {step}: {note}; exit {STOPPED_EXIT_CODE} (the queue "
                  "retries it)", flush=True)
        self.job.stop.uninstall()

    # --- training health ----------------------------------------------------------------------------------------------
    def _watch_model(self, model: Any, args: Any) -> None:
        """The loss of each training forward, from the model's output (no sync: it stays on its device)."""
        health = self.job.health
        if health.rules.mode == "off" or model is None or self._loss_hook is not None:
            return
        clip = getattr(args, "max_grad_norm", 0) or 0
        if clip > 0 and health.rules.action("exploding_gradients") != "off":
            _not_judged(health, "exploding_gradients", f"the Trainer clips the gradients at max_grad_norm={clip:g} "
                        "before its callbacks see them (a jump past the clip is not seen; the loss rules see a "
                        "blow-up)")
        import torch  # type: ignore[import-not-found]

        hook = self._forward_loss
        disable = getattr(getattr(torch, "compiler", None), "disable", None)
        if disable is not None:  # under torch.compile, a graph break at the model's end rather than the hook traced
            hook = disable(hook)
        self._loss_hook = model.register_forward_hook(hook, with_kwargs=True)

    def _forward_loss(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        import torch  # type: ignore[import-not-found]

        if not module.training or not torch.is_grad_enabled():
            return  # an evaluation's forward (the Trainer evaluates in eval mode, under no_grad)
        loss = output.get("loss") if isinstance(output, Mapping) else None
        if loss is None or not hasattr(loss, "detach"):
            return
        loss = loss.detach().float()
        if loss.numel() != 1:
            loss = loss.mean()  # DataParallel's losses of each GPU
        self._step_loss = loss if self._step_loss is None else self._step_loss + loss
        self._micro_batches += 1
        self._loss_shared = kwargs.get("num_items_in_batch") is not None
        self._loss_seen = True

    def _feed_step_loss(self) -> None:
        """The optimizer step's loss to the rules, as the Trainer counts it: its micro-batches' losses summed where
        the model divided each by the whole step's items (``num_items_in_batch``, over every rank when the Trainer
        averages tokens across devices), else their mean."""
        loss, micro = self._step_loss, self._micro_batches
        self._step_loss, self._micro_batches = None, 0
        if loss is None:
            return
        if self._loss_shared:
            ranks = getattr(self.args, "world_size", 1) or 1
            if getattr(self.args, "average_tokens_across_devices", False) and ranks > 1:
                loss = loss * ranks
        elif micro > 1:
            loss = loss / micro
        self.job.health.loss(loss)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """At a check step: the gradients' global norm (after the Trainer's clipping: see the module docstring)."""
        health, model = self.job.health, kwargs.get("model")
        if (health.rules.mode == "off" or model is None or self._grad_failed or not health.due(self._steps + 1)
                or health.has_grad_norm):
            return
        try:
            norm = grad_norm(model.parameters())
        except Exception as error:  # sharded gradients (DTensor) it cannot read: the gradient rules go unjudged
            self._grad_failed = True
            if _rank() == 0:
                print(f"ml_platform_job health: the gradients' norm is not readable here ({type(error).__name__}: "
                      f"{error}); the gradient rules are not judged", file=sys.stderr, flush=True)
            return
        if norm is not None and not math.isfinite(norm) and getattr(kwargs.get("optimizer"), "scaler", None):
            return  # fp16's loss scaler skips this step (an overflow, not the model's NaN: the loss rule sees that)
        health.gradients(norm)

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.job.health.progress()  # a micro-batch of gradient accumulation

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.job.health.progress()  # an evaluation batch: a long evaluation is no stall

    def _health_check(self, state: Any) -> tuple[bool, Optional[Verdict]]:
        """After an optimizer step: (the stop signal as every rank sees it, a health rule's agreed stop). At a check
        step both come from one all-reduce; between checks, the stop signal's own."""
        self._feed_step_loss()
        self._steps += 1
        health = self.job.health
        if health.rules.mode == "off" or not health.due(self._steps):
            return (not self._stopping and self.job.stop.agreed()), None
        verdict = health.check(state.global_step)
        requested, *fired = all_ranks_max([self.job.stop.requested, *_rule_flags(verdict)])
        if requested and not self.job.stop.requested:
            self.job.stop.request("another rank was asked to stop")
        if any(fired):
            return requested, verdict or self.job._other_rank(fired)
        return requested and not self._stopping, None

    def _take_health_stop(self, verdict: Verdict, state: Any, control: Any) -> None:
        """A rule stops the run: the Trainer saves this step (unless the state is NaN: the newest checkpoint stays the
        last good one) and leaves its loop; on_train_end records the stop and exits 85."""
        self._health_stop = verdict
        self._at_epoch_end = False  # a stop signal put off to the epoch's end gives way: the run ends here
        self._hold_health_stop(state, control)

    def _hold_health_stop(self, state: Any, control: Any) -> None:
        """The control for a health stop (again at the epoch's end, where the Trainer's flow asks to evaluate and
        save by its strategies): no evaluation, a save of the step unless it is NaN or written already, the end."""
        control.should_training_stop = True
        control.should_evaluate = False
        control.should_save = self._health_stop.rule != "non_finite" and not self._health_saved

    def _health_exit(self, verdict: Verdict) -> None:
        self.job.health_stopped(verdict, saved=self._health_saved)
        self.job.stop.uninstall()
        raise SystemExit(HEALTH_STOPPED_EXIT_CODE)

    def _unwatch_model(self) -> None:
        hook, self._loss_hook = self._loss_hook, None
        if hook is not None:
            hook.remove()

    # --- the end ------------------------------------------------------------------------------------------------
    def finish(self, trainer: Any, *, save_model: bool = True, improves_on: Any = None,
               tokens: Optional[float] = None) -> dict:
        """Training is done: the model's digest (what a rehearsal compares) and, with ``save_model``, the model as
        the Trainer saves it (``save_model``), uploaded to ``model/`` next to the checkpoints; then the run's cost."""
        digest = state_digest(trainer.model)
        if save_model:
            local = Path(trainer.args.output_dir) / "platform-model"
            trainer.save_model(str(local))
            if trainer.is_world_process_zero():
                with self.clock.phase("checkpoint_save"):
                    model = self.store.location.child("model")
                    for path in sorted(p for p in local.rglob("*") if p.is_file()):
                        model.upload_file(path, path.relative_to(local).as_posix())
                self.job.run.record_model(self.store.location.uri + "model/")
        record = self.job.run.finish(improves_on=improves_on, tokens=tokens, final_state_sha256=digest)
        self.job.stop.uninstall()
        if _rank() == 0:
            print(f"run {self.job.run_id} finished: {len(record['passport']['attempts'])} attempt(s)", flush=True)
        return record

