"""The local run's account of attempt 1 (ops/local/run.py) is what the job did: the SIGTERM goes as the job reports
epoch 3, and the job trains on until it lands (an epoch or more under load), so the epoch it checkpointed at comes
from its own output. Stand-ins for the job, quick and slow, in place of the example's training."""

import sys
import textwrap

import pytest

from ops.local import run as local_run

# A job that reports EPOCHS epochs before it looks at the signal (a loaded machine: the reader saw "epoch 3" late),
# then waits for SIGTERM and stops as the example does.
STAND_IN = textwrap.dedent("""
    import signal, sys, time
    epochs = int(sys.argv[1])
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    for epoch in range(1, epochs + 1):
        print(f"epoch {epoch}/30: loss 0.5", flush=True)
    deadline = time.monotonic() + 20
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.01)
    print(f"attempt 1: stopped at epoch {epochs} of 30; checkpoint written, exit 143 (the queue retries it)", flush=True)
    sys.exit(143 if stopped else 1)
""")


@pytest.mark.parametrize("epochs_before_the_signal_lands", [3, 6], ids=["quiet machine", "under load"])
def test_attempt_one_says_the_epoch_the_job_really_stopped_at(tmp_path, epochs_before_the_signal_lands):
    job = tmp_path / "job.py"
    job.write_text(STAND_IN)
    code, lines = local_run.run_attempt([sys.executable, str(job), str(epochs_before_the_signal_lands)], {},
                                        sigterm_after_epoch=local_run.STOP_AFTER_EPOCH, timeout=30)
    assert code == 143
    assert local_run.reclaim_line(code, lines) == (
        f"attempt 1: SIGTERM after it reported epoch 3 (a simulated Spot reclaim); checkpointed at epoch "
        f"{epochs_before_the_signal_lands} -> exit 143: {lines[-1]}")


def test_a_job_that_does_not_say_where_it_stopped_is_not_given_an_epoch():
    assert local_run.reclaim_line(143, ["epoch 3/30: loss 0.5"]) == (
        "attempt 1: SIGTERM after it reported epoch 3 (a simulated Spot reclaim); its output names no epoch it "
        "stopped at -> exit 143: epoch 3/30: loss 0.5")
