"""The local run's account of attempt 1 (ops/local/run.py) is what the job did: the SIGTERM goes as the job reports
epoch 3, and the job trains on until it lands (an epoch or more under load), so the epoch it checkpointed at comes
from its own output. Stand-ins for the job, quick and slow, in place of the example's training."""

import sys
import textwrap

import boto3
import pytest
from moto import mock_aws

from ops.local import run as local_run

# A job that reports EPOCHS epochs before it looks at the signal (a loaded machine: the reader saw "epoch 3" late),
# then takes SIGTERM (blocked from its start, so it waits on the signal itself, not on a clock: the 20 s are a last
# resort) and stops as the example does. With HOLD, it first says it holds inside a step, as
# tests/emulator/test_local_run.py's hook makes the example do.
STAND_IN = textwrap.dedent("""
    import signal, sys
    epochs, hold = int(sys.argv[1]), sys.argv[2:] == ["hold"]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    for epoch in range(1, epochs + 1):
        print(f"epoch {epoch}/30: loss 0.5", flush=True)
    if hold:
        print("held inside a step", flush=True)
    stopped = signal.sigtimedwait({signal.SIGTERM}, 20) is not None
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


def test_a_caller_can_send_the_sigterm_on_a_line_of_its_choosing(tmp_path):
    """sigterm_when: at once on the line it accepts (the test's moment), not a tenth of an epoch after epoch 3."""
    job = tmp_path / "job.py"
    job.write_text(STAND_IN)
    seen = []

    def held(line):
        seen.append(line)
        return line == "held inside a step"
    code, lines = local_run.run_attempt([sys.executable, str(job), "5", "hold"], {},
                                        sigterm_after_epoch=local_run.STOP_AFTER_EPOCH, sigterm_when=held, timeout=30)
    assert code == 143 and lines[-2] == "held inside a step"
    assert seen == lines[:6]  # asked of each line up to the one it accepted, not after it


def test_a_job_that_does_not_say_where_it_stopped_is_not_given_an_epoch():
    assert local_run.reclaim_line(143, ["epoch 3/30: loss 0.5"]) == (
        "attempt 1: SIGTERM after it reported epoch 3 (a simulated Spot reclaim); its output names no epoch it "
        "stopped at -> exit 143: epoch 3/30: loss 0.5")


def test_the_runs_model_passport_and_dataset_outlive_the_emulator(tmp_path, monkeypatch):
    """./platform up's run is in moto's S3, which goes when the emulator stops: its files are copied under the store."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=local_run.BUCKET)
        prefix = "checkpoints/training/example-1/"
        for name, body in [("passport.json", b"{}"), ("packages.txt", b"boto3==1\n"), ("model.tar.gz", b"model"),
                           ("ckpt-000001.json", b"{}"), (local_run.DATASET_KEY, b"id,label\n")]:
            s3.put_object(Bucket=local_run.BUCKET, Key=name if name.startswith("datasets/") else prefix + name, Body=body)
        kept = local_run.keep_run(s3, "example-1", "run1", tmp_path)
    assert kept == tmp_path / "runs" / "run1"
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "datasets/blobs/v1/data.csv", "model.tar.gz", "packages.txt", "passport.json"]
    assert (kept / "model.tar.gz").read_bytes() == b"model"
