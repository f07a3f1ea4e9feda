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

Parameters: ``TrainingArguments.to_dict()`` (its tokens redacted); where output, logging and saving go
(``HF_FLAGS``) is recorded but never makes another run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from transformers import TrainerCallback  # type: ignore[import-not-found]

from . import STOPPED_EXIT_CODE
from .checkpoints import CheckpointStore
from .job import DEFAULT_FLAGS, TrainingJob
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
        self.store: CheckpointStore = self.job.store
        self.clock = self.job.clock
        self._stopping = False
        self._at_epoch_end = False
        self._saved_on_stop = False
        self._save_seconds: Optional[float] = None
        self._note = "no checkpoint written"
        self._resume_from: Optional[str] = None
        self._resolved = False
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
        try:
            self._step_ended(state, control)
        finally:
            self._expect(control)  # the Trainer logs, evaluates and saves next, as the control now says

    def _step_ended(self, state: Any, control: Any) -> None:
        if not self._stopping and self.job.stop.agreed():
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
            if self._at_epoch_end:
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
        if self.clock.switched is not None:  # in training: since the step's end (or the save's), the evaluation
            self.clock.switch(self._next_phase(control), counted_as="evaluation")
        self.on_log(args, state, control, logs=metrics)

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict] = None, **kwargs: Any) -> None:
        """The Trainer's logged figures (loss, learning rate, evaluation metrics) into the run, at their step."""
        numbers = {k: float(v) for k, v in (logs or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if numbers:
            self.job.run.log_metrics(numbers, step=state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        started = self.clock.now()
        self.job.stop.disarm()  # the Trainer's files are written; the upload below is bounded by the queue's timeout
        dist = _distributed()
        if dist is not None:
            dist.barrier()  # every process's files of the folder (its rng_state_N.pth) are written before the upload
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"{PREFIX}-{state.global_step}"
            self.store.save_directory(state.global_step, folder, meta={"global_step": state.global_step,
                                                                       "epoch": state.epoch})
        if self.clock.switched is not None:  # since the step's end (or the evaluation's): the Trainer's save, then ours
            self._save_seconds = self.clock.switch("data_wait", counted_as="checkpoint_save")
        else:
            self._save_seconds = self.clock.now() - started
            self.clock.add("checkpoint_save", self._save_seconds)
        self.clock.checkpoint_saved()
        self.job.run.checkpointed(step=state.global_step)
        if self._stopping:
            self._saved_on_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.switch(None, counted_as=None)  # no next step: the time since the last one is no data wait
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

