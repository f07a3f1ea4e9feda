"""The end of ./platform up: the example job run as a queue runs it, against the emulator's S3 (moto server on
127.0.0.1), a real SIGTERM mid-run, exit 143, a second attempt that resumes and finishes, one run in the local store.

Where the SIGTERM lands is not left to the machine's load: attempt 1 of the (unchanged) example holds inside a known
step, HELD_AT steps after its third checkpoint, says so on its output and waits for the signal, which the local run
sends on that line (a hook loaded at the interpreter's start, sitecustomize.py on PYTHONPATH; idle in attempt
2). So the reclaim is mid-epoch, always with steps since the last checkpoint, at one known batch."""

import json
import os
import re
import textwrap

from mlflow.tracking import MlflowClient

from ops.local import run as local_run

CHECKPOINTS, HELD_AT = 3, 30  # the 30th step of epoch 4 (an epoch is 90 steps)
HELD = "held inside a step for the simulated reclaim"
# The hook: ml_platform_job's PhaseClock (the example's run.clock) counts checkpoints and steps; inside the step it
# holds at, it writes HELD and waits until a signal has come (its byte on the wakeup fd: however soon the signal
# comes, it is not missed), then the step ends and the job sees its stop request before the next batch. (The 120 s are
# a last resort: without the signal the job trains on to the end, and the local run fails saying so.)
HOLD = textwrap.dedent(f"""\
    import os

    if os.environ.get("AWS_BATCH_JOB_ATTEMPT") == "1" and os.environ.get("LOCAL_RUN_TEST_HOLD"):
        import contextlib, select, signal
        from ml_platform_job import goodput

        saved, stepped = [0], [0]
        checkpoint_saved, step = goodput.PhaseClock.checkpoint_saved, goodput.PhaseClock.step

        def counted_checkpoint_saved(self):
            checkpoint_saved(self)
            saved[0], stepped[0] = saved[0] + 1, 0

        @contextlib.contextmanager
        def held_step(self):
            with step(self):
                yield
                stepped[0] += 1
                if (saved[0], stepped[0]) == ({CHECKPOINTS}, {HELD_AT}):
                    read, write = os.pipe()
                    os.set_blocking(write, False)
                    signal.set_wakeup_fd(write)
                    print({HELD!r}, flush=True)
                    select.select([read], [], [], 120)
                    signal.set_wakeup_fd(-1)
                    os.close(read)
                    os.close(write)

        goodput.PhaseClock.checkpoint_saved = counted_checkpoint_saved
        goodput.PhaseClock.step = held_step
""")


def test_up_ends_with_one_recorded_run_across_a_simulated_spot_reclaim(mlflow_store, tmp_path, capsys, monkeypatch):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOLD)
    environment = local_run.job_environment
    monkeypatch.setattr(local_run, "job_environment", lambda *args: {
        **environment(*args), "LOCAL_RUN_TEST_HOLD": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), environment(*args).get("PYTHONPATH")]))})
    run_attempt = local_run.run_attempt

    def on_the_held_step(command, env, *, sigterm_after_epoch=None, **options):
        if sigterm_after_epoch is None:  # attempt 2: no signal
            return run_attempt(command, env, **options)
        assert sigterm_after_epoch == CHECKPOINTS
        return run_attempt(command, env, sigterm_when=lambda line: line == HELD, **options)
    monkeypatch.setattr(local_run, "run_attempt", on_the_held_step)

    store = tmp_path / "store"
    assert local_run.main(["--store", str(store), "--epochs", "12"]) == 0
    out = capsys.readouterr().out
    # Attempt 1 stopped at the batch the signal came in, and attempt 2 resumed at that very batch.
    assert (f"attempt 1: SIGTERM after it reported epoch 3 (a simulated Spot reclaim); checkpointed at epoch 3 -> "
            f"exit 143: attempt 1: stopped at epoch 3 of 12 (batch {HELD_AT} of the next); checkpoint written, exit "
            "143 (the queue retries it)") in out, out
    assert re.search(rf"attempt 2: resuming from the checkpoint of epoch 3 \(batch {HELD_AT} of epoch 4\) -> exit 0: "
                     r"run \w+ finished", out), out
    client = MlflowClient(mlflow_store)
    [run] = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED" and run.data.tags["ml_platform.attempts"] == "2"
    assert run.data.metrics["spot_interruptions"] == 1 and run.data.metrics["holdout_accuracy"] > 0.75
    attempts = json.loads((store / "runs" / run.info.run_id / "passport.json").read_text())["passport"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["stopped", "finished"]
    assert attempts[0]["saved_at_stop"] and attempts[0]["stopped_at_step"] == attempts[1]["restored_from"]["step"]
    # up shows the run: its passport, cost and cost per accuracy point.
    assert f"Run {run.info.run_id} (example-" in out and "passport:" in out
    assert "USD per accuracy point" in out and "1 Spot interruption(s)" in out
    # The run's goodput ledger in one line: the simulated reclaim is a restore; no work is lost, since the stop saved
    # the very batch it came at (issue 35; before it, the stopped epoch's steps were lost). The signal came 30 steps
    # after the last checkpoint: a stop that saved nothing would show them as lost.
    [ledger] = [line for line in out.splitlines() if line.lstrip().startswith("ledger: ")]
    assert re.search(r"ledger: \d+ s, [\d.]+ USD: .*restore \d+%", ledger) and "lost " not in ledger, ledger
    assert len(ledger) <= 120
