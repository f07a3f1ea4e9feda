"""The Lightning and Hugging Face adapters count a step and the data wait between two steps while they last
(``PhaseClock.switch``, issue 38): a loader stalled an hour between two hooks reads as 100% data wait on the goodput
timer while it is stuck, not once the next hook fires; an evaluation or a save between two steps is not data wait;
and the attempt's phases come out as the hooks' after-the-fact timing gave them for the same hooks at the same times.

The adapters are the real modules, loaded with stand-ins for the frameworks' base classes (neither framework is a
dependency of the platform); their hooks get stub arguments, and the clock a fake monotonic time that runs the
timer's ticks as it advances."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

import ml_platform_job
from ml_platform_job.phase_clock import EMIT_SECONDS, SWITCH_PHASES, PhaseClock
from tests.unit.test_goodput_alarm_replay import WINDOW_SECONDS, FakeTime  # 15 minutes; the timer's ticks

HOUR = 3600.0


def timed_clock() -> tuple[FakeTime, PhaseClock, io.StringIO]:
    """A clock on fake time that prints a line a minute (the timer's) into the returned stream."""
    fake = FakeTime()
    clock = PhaseClock(now=fake, wall=lambda: fake.now)
    fake.clock = clock
    out = io.StringIO()
    clock.emit_windows("training", out, instance_type="g5.2xlarge",
                       env={"ML_PLATFORM_GOODPUT_WINDOW_SECONDS": str(WINDOW_SECONDS)}, interval=0)
    return fake, clock, out


def lines(out: io.StringIO, start: float = 0.0, end: float = float("inf")) -> list[dict]:
    """The lines printed with a timestamp in [start, end] (seconds of fake time)."""
    documents = [json.loads(line) for line in out.getvalue().splitlines()]
    return [d for d in documents if start <= d["_aws"]["Timestamp"] / 1000 <= end]


# --- the adapters, with stand-ins for the frameworks ---------------------------------------------------------------

class StandInCallback:
    """The frameworks' callback base class: every hook a no-op."""

    def __getattr__(self, name: str):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def load_adapter(monkeypatch, name: str) -> types.ModuleType:
    """``ml_platform_job.<name>`` (lightning or transformers) loaded afresh under another name, its framework's base
    class a stand-in: the package's own module, and sys.modules, are left as they were."""
    base = StandInCallback
    if name == "lightning":
        for module in ("lightning", "lightning.pytorch", "lightning.pytorch.callbacks"):
            monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
        sys.modules["lightning.pytorch.callbacks"].Callback = base
    else:
        fake = types.ModuleType("transformers")
        fake.TrainerCallback = base
        monkeypatch.setitem(sys.modules, "transformers", fake)
    spec = importlib.util.spec_from_file_location(f"ml_platform_job._stalls_{name}",
                                                  Path(ml_platform_job.__file__).parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class StubStop:
    requested, reason = False, "the test's stop"

    def agreed(self) -> bool:
        return False

    def save_fits(self, seconds) -> bool:
        return True

    def take_over(self) -> None: ...
    def disarm(self) -> None: ...
    def deadline(self, on_overrun) -> None: ...


class StubRun:
    def note_determinism(self) -> None: ...
    def log_metrics(self, metrics, step=None) -> None: ...
    def checkpointed(self, step=None) -> None: ...


class StubStore:
    """The checkpoint store: an upload takes ``upload_seconds`` of fake time."""

    def __init__(self, fake: FakeTime, upload_seconds: float = 0.0) -> None:
        self.fake, self.upload_seconds = fake, upload_seconds

    def save(self, step, files, meta=None) -> None:
        self.fake.advance(self.upload_seconds)

    def save_directory(self, step, folder, meta=None) -> None:
        self.fake.advance(self.upload_seconds)


class StubJob:
    """What the callbacks use of a TrainingJob."""

    def __init__(self, clock: PhaseClock, store: StubStore) -> None:
        self.clock, self.store, self.stop, self.run, self.seed = clock, store, StubStop(), StubRun(), 0
        from ml_platform_job.health import HealthMonitor, HealthRules

        self.health = HealthMonitor(HealthRules(mode="off"))  # the health rules are tests/unit/test_health_*'s
        self.step = 0

    def agree(self, save: bool, stopping: bool) -> tuple[bool, bool]:
        return save, stopping


# --- Lightning ---------------------------------------------------------------------------------------------------

class LightningTrainer:
    """The Trainer as the callback reads it; ``save_checkpoint`` takes ``save_seconds`` of fake time."""

    sanity_checking, accumulate_grad_batches, num_training_batches = False, 1, 10 ** 9
    max_epochs, current_epoch, global_step, is_global_zero, callback_metrics = None, 0, 0, False, {}

    def __init__(self, fake: FakeTime, save_seconds: float) -> None:
        self.fake, self.save_seconds = fake, save_seconds
        self.strategy = SimpleNamespace(barrier=lambda name: None)

    def save_checkpoint(self, path: str) -> None:
        self.fake.advance(self.save_seconds)


class LightningTimingBefore:
    """The Lightning callback's timing before issue 38 (after the fact, from its hooks' times), for comparison."""

    def __init__(self, clock: PhaseClock) -> None:
        self.clock, self.save_every_seconds, self._mark, self._step_started = clock, None, None, None
        self._validation_started, self._last_saved_step = None, None

    def on_train_start(self, trainer, module):
        self._mark = self.clock.now()

    def on_train_epoch_start(self, trainer, module):
        pass

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        now = self.clock.now()
        if self._mark is not None:
            self.clock.add_step(now - self._mark, data_wait=now - self._mark)
        self._step_started = now

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        now = self.clock.now()
        self.clock.add_step(now - self._step_started)
        self._mark = now
        if self.save_every_seconds is not None:
            self._save(trainer)

    def on_validation_start(self, trainer, module):
        self._validation_started = self.clock.now()

    def on_validation_end(self, trainer, module):
        now = self.clock.now()
        self.clock.add("evaluation", now - self._validation_started)
        self._mark = now

    def on_train_epoch_end(self, trainer, module):
        self._mark = self.clock.now()
        self._save(trainer)

    def on_train_end(self, trainer, module):
        pass

    def _save(self, trainer):
        if self._last_saved_step == trainer.global_step:
            return
        with self.clock.phase("checkpoint_save"):
            trainer.save_checkpoint("state.ckpt")
        self.clock.checkpoint_saved()
        self._mark = self.clock.now()
        self._last_saved_step = trainer.global_step


def lightning_callback(monkeypatch, fake: FakeTime, clock: PhaseClock):
    adapter = load_adapter(monkeypatch, "lightning")
    return adapter.PlatformCallback(job=StubJob(clock, StubStore(fake)), save_every_minutes=None)


def lightning_fit(callback, fake: FakeTime, trainer: LightningTrainer, *, epochs: int = 1, batches: int = 40,
                  fetch=lambda epoch, batch: 0.25, compute=lambda epoch, batch: 1.75, saves=(), validations=(),
                  validation_seconds: float = 30.0, startup: float = 20.0) -> None:
    """Lightning's fit loop as the callback sees it, hook by hook: ``fetch`` and ``compute`` seconds per batch, a
    save after the (epoch, batch) in ``saves``, a mid-epoch validation after those in ``validations`` and at each
    epoch's end, then the epoch-end save. Between a hook and Lightning's next step there is a little bookkeeping
    (an eighth of a second) that neither timing counts."""
    fake.advance(startup)
    callback.on_train_start(trainer, None)
    for epoch in range(epochs):
        trainer.current_epoch = epoch
        callback.on_train_epoch_start(trainer, None)
        for batch in range(batches):
            fake.advance(fetch(epoch, batch))
            callback.on_train_batch_start(trainer, None, batch, batch)
            fake.advance(compute(epoch, batch))
            trainer.global_step += 1
            callback.save_every_seconds = 0 if (epoch, batch) in saves else None
            callback.on_train_batch_end(trainer, None, None, batch, batch)
            if (epoch, batch) in validations or batch == batches - 1:
                fake.advance(0.125)  # the validation loop's setup
                callback.on_validation_start(trainer, None)
                fake.advance(validation_seconds)
                callback.on_validation_end(trainer, None)
        fake.advance(0.125)
        callback.on_train_epoch_end(trainer, None)
    fake.advance(0.5)
    callback.on_train_end(trainer, None)


def test_lightning_a_loader_stalled_an_hour_between_two_batches_reads_all_data_wait_while_stuck(monkeypatch):
    """Compute-bound (12.5% wait) for half an hour, then the loader blocks an hour between two batches: the lines
    printed while it is stuck read DataWaitShare 100 (the hooks' after-the-fact timing read 0, or nothing: no wait
    had ended in their window), the lines before it 12.5."""
    stall_at, batches = 900, 1800  # (2 s a batch: the stall comes at 0:30)
    fetch = lambda epoch, batch: HOUR if batch == stall_at else 0.25  # noqa: E731
    fake, clock, out = timed_clock()
    lightning_fit(lightning_callback(monkeypatch, fake, clock), fake, LightningTrainer(fake, 0), batches=batches,
                  fetch=fetch, startup=0)
    stalled = 2 * stall_at  # the stall's start: the clock's 1800 s
    before = lines(out, WINDOW_SECONDS, stalled)
    assert before and {d["DataWaitShare"] for d in before} == {12.5}
    during = lines(out, stalled + WINDOW_SECONDS, stalled + HOUR)
    assert len(during) == (HOUR - WINDOW_SECONDS) // EMIT_SECONDS + 1
    assert {d["DataWaitShare"] for d in during} == {100.0} and {d["ProductiveShare"] for d in during} == {0.0}

    fake, clock, out = timed_clock()
    lightning_fit(LightningTimingBefore(clock), fake, LightningTrainer(fake, 0), batches=batches, fetch=fetch,
                  startup=0)
    assert all(d.get("DataWaitShare", 0) == 0 for d in lines(out, stalled + WINDOW_SECONDS, stalled + HOUR))


def test_lightning_a_step_that_hangs_reads_as_step_time_while_it_hangs(monkeypatch):
    fake, clock, out = timed_clock()
    compute = lambda epoch, batch: HOUR if batch == 900 else 1.75  # noqa: E731
    lightning_fit(lightning_callback(monkeypatch, fake, clock), fake, LightningTrainer(fake, 0), batches=1800,
                  compute=compute, startup=0)
    hung = 900 * 2 + 0.25  # the step's start
    during = lines(out, hung + WINDOW_SECONDS, hung + HOUR)
    assert during and {(d["DataWaitShare"], d["ProductiveShare"]) for d in during} == {(0.0, 100.0)}


def test_lightning_validation_and_saves_between_batches_are_not_data_wait(monkeypatch):
    """An hour of validation mid-epoch and a 10-minute save: while they last no line reads data wait; after, the
    window holds only the loader's waits (12.5% of the step time)."""
    fake, clock, out = timed_clock()
    callback = lightning_callback(monkeypatch, fake, clock)
    # 2-s batches; validation after batch 600 (and at the epoch's end), a save after batch 2000 (and at the end).
    lightning_fit(callback, fake, LightningTrainer(fake, 600), batches=3000, validations={(0, 600)},
                  validation_seconds=HOUR, saves={(0, 2000)}, startup=0)
    validated = 601 * 2 + 0.125  # the validation's start
    validating = lines(out, validated + WINDOW_SECONDS, validated + HOUR)
    assert len(validating) >= 40 and all(d.get("DataWaitShare", 0) == 0 for d in validating)
    assert {d["ProductiveShare"] for d in validating} == {0.0}
    saved = 2001 * 2 + HOUR + 0.125  # the save's start
    saving = lines(out, saved, saved + 600)
    # The steps before it, not it (once the save fills over half the window, no DataWaitShare at all: MIN_STEP_SHARE)
    assert len(saving) == 10 and all(d.get("DataWaitShare", 12.5) == 12.5 for d in saving)
    assert any("DataWaitShare" in d for d in saving)
    assert saving[-1]["CheckpointShare"] > 0
    phases = clock.summary()  # two validations and two saves (the epoch's end's)
    assert phases["evaluation"] == 2 * HOUR and phases["checkpoint_save"] == 2 * 600
    assert phases["data_wait"] == 3000 * 0.25 and phases["step"] == 3000 * 2


@pytest.mark.parametrize("epochs, saves, validations", [(1, (), ()), (3, {(0, 5), (1, 0), (2, 9)}, {(1, 3), (2, 9)})],
                         ids=["one epoch", "saves, mid-epoch validations, three epochs"])
def test_lightning_phases_are_the_after_the_fact_timings(monkeypatch, epochs, saves, validations):
    """The same hooks at the same times: the phases the callback records are those its after-the-fact timing gave
    (a batch's end to a validation or a save, and to the epoch's end, counted in no phase, as before)."""
    fetch = lambda epoch, batch: 0.5 + (batch % 3) * 0.25  # noqa: E731
    compute = lambda epoch, batch: 1.5 + (epoch % 2) * 0.125  # noqa: E731
    summaries = []
    for make in (lambda fake, clock: lightning_callback(monkeypatch, fake, clock),
                 lambda fake, clock: LightningTimingBefore(clock)):
        fake, clock, _ = timed_clock()
        lightning_fit(make(fake, clock), fake, LightningTrainer(fake, 45), epochs=epochs, batches=12, fetch=fetch,
                      compute=compute, saves=saves, validations=validations, validation_seconds=17)
        summaries.append(clock.summary())
    now, before = summaries
    assert now == pytest.approx(before, abs=1e-6)
    assert now["data_wait"] > 0 and now["evaluation"] == 17 * (epochs + len(validations))


# --- Hugging Face's Trainer ------------------------------------------------------------------------------------------

class HFTimingBefore:
    """The Trainer callback's timing before issue 38 (after the fact, from its hooks' times), for comparison."""

    def __init__(self, clock: PhaseClock, store: StubStore) -> None:
        self.clock, self.store, self._mark, self._step_started = clock, store, None, None

    def on_train_begin(self, args, state, control):
        self._mark = self.clock.now()

    def on_epoch_begin(self, args, state, control):
        pass

    def on_step_begin(self, args, state, control):
        now = self.clock.now()
        if self._mark is not None:
            self.clock.add_step(now - self._mark, data_wait=now - self._mark)
        self._step_started = now

    def on_step_end(self, args, state, control):
        now = self.clock.now()
        self.clock.add_step(now - self._step_started)
        self._mark = now

    def on_epoch_end(self, args, state, control):
        pass

    def on_evaluate(self, args, state, control, metrics=None):
        now = self.clock.now()
        self.clock.add("evaluation", now - self._mark)
        self._mark = now

    def on_log(self, args, state, control, logs=None):
        pass

    def on_save(self, args, state, control):
        started = self._mark
        self.store.save_directory(state.global_step, None)
        now = self.clock.now()
        self.clock.add("checkpoint_save", now - started)
        self.clock.checkpoint_saved()
        self._mark = now

    def on_train_end(self, args, state, control):
        pass


def hf_args(**overrides) -> SimpleNamespace:
    return SimpleNamespace(**{"output_dir": "/nonexistent/out", "save_strategy": "steps", "eval_on_start": False,
                              **overrides})


def hf_callback(monkeypatch, fake: FakeTime, clock: PhaseClock, upload_seconds: float, args=None):
    adapter = load_adapter(monkeypatch, "transformers")
    return adapter.PlatformCallback(args or hf_args(), job=StubJob(clock, StubStore(fake, upload_seconds)))


def hf_train(callback, fake: FakeTime, args, *, epochs: int = 1, steps: int = 40, fetch=lambda epoch, step: 0.25,
             compute=lambda epoch, step: 1.75, log_seconds: float = 0.125, evaluations=(), saves=(),
             unannounced=(), eval_seconds: float = 30.0, save_seconds: float = 10.0, epoch_eval: bool = True,
             epoch_save: bool = True, finalize: float = 2.0, startup: float = 20.0) -> None:
    """The Trainer's loop as its callbacks see it (transformers' ``_inner_training_loop`` and
    ``_maybe_log_save_evaluate``): the flow callback's flags set before the platform's hooks run, ``fetch`` and
    ``compute`` seconds per step, an evaluation after the (epoch, step) in ``evaluations``, a save after those in
    ``saves``, each announced by the control at the step's end, and by the epoch's end; ``unannounced``: (epoch,
    step, what) evaluations or saves a later callback asks for after the platform's hook ran."""
    control = SimpleNamespace(should_log=False, should_evaluate=False, should_save=False,
                              should_training_stop=False)
    state = SimpleNamespace(global_step=0, epoch=0.0, max_steps=epochs * steps, is_world_process_zero=True)

    def log_save_evaluate():
        fake.advance(log_seconds)  # the loss's all-gather and the log line
        if control.should_evaluate:
            fake.advance(eval_seconds)
            control.should_evaluate = False  # (the callback handler's, before on_evaluate)
            callback.on_evaluate(args, state, control, metrics={"eval_loss": 0.5})
        if control.should_save:
            fake.advance(save_seconds)  # the Trainer's _save_checkpoint; the upload is the callback's own
            control.should_save = False
            callback.on_save(args, state, control)

    fake.advance(startup)
    callback.on_train_begin(args, state, control)
    if args.eval_on_start:
        fake.advance(eval_seconds)
        callback.on_evaluate(args, state, control, metrics={})
    for epoch in range(epochs):
        callback.on_epoch_begin(args, state, control)
        for step in range(steps):
            fake.advance(fetch(epoch, step))  # get_batch_samples
            control.should_log = control.should_evaluate = control.should_save = False
            callback.on_step_begin(args, state, control)
            fake.advance(compute(epoch, step))
            state.global_step += 1
            state.epoch = epoch + (step + 1) / steps
            control.should_evaluate = (epoch, step) in evaluations
            control.should_save = (epoch, step) in saves
            callback.on_step_end(args, state, control)
            for what in (what for e, s, what in unannounced if (e, s) == (epoch, step)):
                setattr(control, f"should_{what}", True)
            log_save_evaluate()
        control.should_evaluate, control.should_save = epoch_eval, epoch_save
        callback.on_epoch_end(args, state, control)
        log_save_evaluate()
    fake.advance(finalize)  # the train metrics' log, the best model's load
    callback.on_train_end(args, state, control)


def test_hf_a_loader_stalled_an_hour_between_two_steps_reads_all_data_wait_while_stuck(monkeypatch):
    stall_at, steps = 900, 1800
    fetch = lambda epoch, step: HOUR if step == stall_at else 0.25  # noqa: E731
    fake, clock, out = timed_clock()
    hf_train(hf_callback(monkeypatch, fake, clock, 5), fake, hf_args(), steps=steps, fetch=fetch, log_seconds=0,
             startup=0, epoch_eval=False, epoch_save=False)
    stalled = 2 * stall_at
    before = lines(out, WINDOW_SECONDS, stalled)
    assert before and {d["DataWaitShare"] for d in before} == {12.5}
    during = lines(out, stalled + WINDOW_SECONDS, stalled + HOUR)
    assert len(during) == (HOUR - WINDOW_SECONDS) // EMIT_SECONDS + 1
    assert {d["DataWaitShare"] for d in during} == {100.0}

    fake, clock, out = timed_clock()
    store = StubStore(fake, 5)
    hf_train(HFTimingBefore(clock, store), fake, hf_args(), steps=steps, fetch=fetch, log_seconds=0, startup=0,
             epoch_eval=False, epoch_save=False)
    assert all(d.get("DataWaitShare", 0) == 0 for d in lines(out, stalled + WINDOW_SECONDS, stalled + HOUR))


def test_hf_evaluations_and_saves_the_control_announces_are_not_data_wait_while_they_last(monkeypatch):
    """An hour-long evaluation after step 600, then the Trainer's save and the upload (10 minutes): no line read
    while they last counts them as data wait."""
    fake, clock, out = timed_clock()
    callback = hf_callback(monkeypatch, fake, clock, upload_seconds=300)
    hf_train(callback, fake, hf_args(), steps=3000, evaluations={(0, 600)}, saves={(0, 600)}, eval_seconds=HOUR,
             save_seconds=300, log_seconds=0, startup=0, epoch_eval=False, epoch_save=False)
    evaluated = 601 * 2  # step 600's end: the evaluation's start
    evaluating = lines(out, evaluated + WINDOW_SECONDS, evaluated + HOUR)
    assert len(evaluating) >= 40 and all(d.get("DataWaitShare", 0) == 0 for d in evaluating)
    saving = lines(out, evaluated + HOUR, evaluated + HOUR + 600)
    assert len(saving) == 10 and all(d.get("DataWaitShare", 0) == 0 for d in saving)
    assert saving[-1]["CheckpointShare"] > 0
    phases = clock.summary()
    assert phases["evaluation"] == HOUR and phases["checkpoint_save"] == 600
    assert phases["data_wait"] == 3000 * 0.25 and phases["step"] == 3000 * 2


@pytest.mark.parametrize("scenario", [
    dict(),
    dict(epochs=3, evaluations={(0, 9), (1, 4)}, saves={(0, 9), (1, 0), (2, 11)}),
    dict(epochs=2, evaluations={(0, 3)}, unannounced={(0, 5, "evaluate"), (1, 2, "save"), (1, 7, "evaluate"),
                                                       (1, 7, "save")}),
    dict(epochs=2, saves={(0, 11)}, epoch_eval=False, eval_on_start=True),
], ids=["epoch-end evaluation and save", "step evaluations and saves", "unannounced ones", "eval_on_start"])
def test_hf_phases_are_the_after_the_fact_timings(monkeypatch, scenario):
    """The same hooks at the same times: the phases the callback records are those its after-the-fact timing gave,
    also where the control did not announce an evaluation or a save (the hook at its end counts it as what it was),
    in the counters and in the window's later readings."""
    scenario = dict(scenario)
    args = hf_args(eval_on_start=scenario.pop("eval_on_start", False))
    fetch = lambda epoch, step: 0.5 + (step % 3) * 0.25  # noqa: E731
    compute = lambda epoch, step: 1.5 + (epoch % 2) * 0.125  # noqa: E731
    runs = []
    for make in (lambda fake, clock: hf_callback(monkeypatch, fake, clock, 3, args),
                 lambda fake, clock: HFTimingBefore(clock, StubStore(fake, 3))):
        fake, clock, _ = timed_clock()
        hf_train(make(fake, clock), fake, args, steps=12, fetch=fetch, compute=compute, eval_seconds=17,
                 save_seconds=7, **scenario)
        runs.append(clock.summary())
    now, before = runs
    assert now == pytest.approx(before, abs=1e-6)
    assert now["data_wait"] > 0 and now["evaluation"] > 0 and now["checkpoint_save"] > 0


# --- the clock's switch ------------------------------------------------------------------------------------------

def test_switch_counts_each_phase_while_it_lasts_and_returns_the_seconds_of_the_one_that_ended():
    fake = FakeTime()
    clock = PhaseClock(now=fake)
    fake.now = 20
    assert clock.switch("data_wait") == 0 and clock.switched == "data_wait"
    fake.now = 21
    assert clock.summary()["data_wait"] == 1 and clock.summary()["startup"] == 0  # counted at the first step
    assert clock.switch("step") == 1
    fake.now = 24
    assert clock.summary() == {"startup": 21, "restore": 0, "step": 4, "data_wait": 1, "checkpoint_save": 0,
                               "evaluation": 0, "since_checkpoint": 4}
    with clock.phase("tracking"):  # a record write inside the hooks' step: step time, as blocks nest
        fake.now = 25
    assert clock.switch("checkpoint_save") == 4
    fake.now = 30
    clock.checkpoint_saved()
    assert clock.switch(None) == 5 and clock.switched is None
    fake.now = 40
    assert clock.summary() == {"startup": 21, "restore": 0, "step": 5, "data_wait": 1, "checkpoint_save": 5,
                               "evaluation": 0, "since_checkpoint": 0}
    assert SWITCH_PHASES == ("step", "data_wait", "restore", "checkpoint_save", "evaluation")
    with pytest.raises(ValueError, match="switch\\('tracking'\\): one of step, data_wait, restore"):
        clock.switch("tracking")
    with pytest.raises(ValueError, match="counted_as='steps'"):
        clock.switch("step", counted_as="steps")


@pytest.mark.parametrize("began_as, counted_as", [("data_wait", "evaluation"), ("data_wait", None),
                                                  ("checkpoint_save", "data_wait"), ("data_wait", "checkpoint_save"),
                                                  ("evaluation", "step")])
def test_counted_as_gives_the_counters_and_later_readings_of_the_phase_it_was(began_as, counted_as):
    """A phase a hook learns only at its end (it began as ``began_as``, 10 minutes long, with readings meanwhile):
    counted as what it was, the counters and every later reading are those of a clock that knew it all along
    (the readings taken meanwhile were what the clock knew then)."""
    clocks, readings = [], []
    for known in (False, True):
        fake = FakeTime()
        clock = PhaseClock(now=fake)
        at = 0.0

        def step_and_wait() -> None:  # a 4-s step: 3 s of it a step, then 1 s of data wait
            nonlocal at
            clock.switch("step")
            at += 3
            fake.now = at
            clock.switch("data_wait")
            at += 1
            fake.now = at

        for index in range(300):  # 20 minutes of 4-s steps, 1 s of it data wait, a 30-s save at 10 minutes
            step_and_wait()
            if index == 150:
                clock.switch("checkpoint_save", counted_as=None)
                at += 30
                fake.now = at
                clock.checkpoint_saved()
                clock.switch("data_wait")
            if index % 15 == 0:
                clock.window()
        clock.switch(counted_as if known else began_as)
        seen = []
        for _ in range(10):  # a reading a minute while it lasts
            at += 60
            fake.now = at
            seen.append(clock.window())
        after = "step" if counted_as != "step" else "data_wait"
        clock.switch(after) if known else clock.switch(after, counted_as=counted_as)
        for index in range(400):  # then 4-s steps again, a reading a minute
            step_and_wait()
            if index % 15 == 0:
                seen.append(clock.window())
        clocks.append(clock)
        readings.append(seen)
    unknown, known = clocks
    assert unknown.summary() == pytest.approx(known.summary(), abs=1e-6)
    assert readings[0][10:] == readings[1][10:]  # every reading after the hook said what it was
    if began_as == "data_wait" and counted_as is not None:
        assert readings[0][9]["DataWaitShare"] > readings[1][9].get("DataWaitShare", 0)  # meanwhile: what it knew
