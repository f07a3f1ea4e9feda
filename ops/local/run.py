"""Runs the example training job locally as a TrainingQueue would run it, and shows the run it recorded.

  python -m ops.local.run [--store DIR]      (the end of ./platform up; needs no AWS account)

moto on 127.0.0.1 stands in for S3: the dataset is uploaded under datasets/, checkpoints and the run record go to
checkpoints/training/<job name>/. Attempt 1 gets a real SIGTERM a tenth of an epoch after it reports epoch 3 (a
simulated Spot reclaim, mid-step) and must save a checkpoint of the batch it stopped at and exit 143, which the
queue's retry strategy retries; the epoch it stops at is the one it says (it goes on training until the signal
lands, one epoch or more under load). Attempt 2 must resume from that checkpoint, at that batch, and exit 0; the
run's goodput ledger shows the reclaim as the restore of attempt 2, and no lost work (the stop saved its batch).
The run goes to the local MLflow store (SQLite under .ml-platform/, git-ignored), one run
for both attempts, priced as the queue's g5.xlarge on Spot would be. Before the emulator stops (its S3 goes with
it), the run's model, passport, package list and dataset are copied to .ml-platform/runs/<run id>/: what a rerun
needs (docs/RUNS.md, "Rerunning a run").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

import boto3

from ml_platform_job.passport import DATASET_LIST_NAME, DIFF_NAME
from ml_platform_job.tracking import PACKAGES_NAME, RECORD_NAME

from .emulator import client_environment, moto_server
from .. import terminal
from ..runs import LOCAL_STORE, format_record, local_tracking_uri, record_ledger, run_record, with_local_copy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_with_checkpoints.py"
ACCOUNT, REGION = "123456789012", "us-east-1"
BUCKET = "ml-platform-local-datasets"
QUEUE, INSTANCE_TYPE, LIFECYCLE = "training", "g5.xlarge", "spot"
STOP_AFTER_EPOCH = 3
STOPPED_EXIT_CODE = 143
STOPPED_AT = re.compile(r"stopped at epoch (\d+) of \d+")  # the job's own line when it stops early


def example_module():
    spec = importlib.util.spec_from_file_location("train_with_checkpoints", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_attempt(command: list[str], env: dict[str, str], *, sigterm_after_epoch: Optional[int] = None,
                sigterm_when: Optional[Callable[[str], bool]] = None,
                timeout: float = 300) -> tuple[int, list[str]]:
    """Runs one attempt; with ``sigterm_after_epoch``, sends the process SIGTERM a tenth of an epoch after it reports
    that epoch (a tenth of the time between its last two epoch lines, which also hold the epoch's save to S3 and its
    evaluation: inside the next epoch's steps, as a Spot notice lands mid-step; where exactly depends on the machine's
    load). With ``sigterm_when`` instead, SIGTERM goes at once on the first output line it accepts: a moment the caller
    controls, such as a line the job writes at a known step while it waits for the signal (what
    tests/emulator/test_local_run.py does). Returns (exit code, output lines). The attempt runs in its own
    process group (``ops.terminal``): a Ctrl-C of the local run ends it too."""
    process = terminal.start(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    signalled = False
    epoch_seen: list[float] = []  # when each epoch line came
    assert process.stdout is not None
    try:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("epoch "):
                epoch_seen.append(time.monotonic())
            if sigterm_when is not None and not signalled and sigterm_when(lines[-1]):
                process.send_signal(signal.SIGTERM)
                signalled = True
            elif (sigterm_when is None and sigterm_after_epoch is not None and not signalled
                    and line.startswith(f"epoch {sigterm_after_epoch}/")):
                if len(epoch_seen) >= 2:
                    time.sleep((epoch_seen[-1] - epoch_seen[-2]) / 10)
                process.send_signal(signal.SIGTERM)
                signalled = True
            if time.monotonic() > deadline:
                process.kill()
                break
        code = process.wait()
    except BaseException:
        terminal.stop(process)
        raise
    terminal.forget(process)
    return code, lines


def stopped_epoch(lines: list[str]) -> Optional[int]:
    """The epoch the job says it stopped and checkpointed at, from its own output."""
    found = [int(match[1]) for line in lines for match in [STOPPED_AT.search(line)] if match]
    return found[-1] if found else None


def reclaim_line(code: int, lines: list[str]) -> str:
    """What attempt 1 really did: the signal came as it reported epoch STOP_AFTER_EPOCH, and it stopped where its
    own output says, which under load is an epoch or more later (it trains on until the signal lands)."""
    epoch = stopped_epoch(lines)
    stopped = f"checkpointed at epoch {epoch}" if epoch is not None else "its output names no epoch it stopped at"
    return (f"attempt 1: SIGTERM after it reported epoch {STOP_AFTER_EPOCH} (a simulated Spot reclaim); {stopped} "
            f"-> exit {code}: {lines[-1] if lines else ''}")


def job_environment(port: int, store: Path, work: Path, job_name: str) -> dict[str, str]:
    """What a queue job's container gets (the job definition's and ./platform job submit's variables), pointed at
    the emulator and the local store."""
    return {**client_environment(port, REGION),
            "ML_PLATFORM_DATASETS_URI": f"s3://{BUCKET}/datasets/",
            "ML_PLATFORM_CHECKPOINT_URI": f"s3://{BUCKET}/checkpoints/{QUEUE}/{job_name}/",
            "ML_PLATFORM_QUEUE_NAME": QUEUE, "ML_PLATFORM_JOB_NAME": job_name,
            "ML_PLATFORM_STOP_FILE": str(work / "stop-requested"), "ML_PLATFORM_JOB_PID_FILE": str(work / "job.pid"),
            "AWS_BATCH_JOB_ID": f"local-{uuid.uuid4().hex[:12]}",
            # On AWS the platform's boot writes these where the container reads them; here they say what is simulated.
            "ML_PLATFORM_INSTANCE_TYPE": INSTANCE_TYPE, "ML_PLATFORM_LIFECYCLE": LIFECYCLE,
            "MLFLOW_TRACKING_URI": local_tracking_uri(store), "PYTHONUNBUFFERED": "1"}


KEPT = (RECORD_NAME, PACKAGES_NAME, DATASET_LIST_NAME, DIFF_NAME, "model.tar.gz")
DATASET_KEY = "datasets/blobs/v1/data.csv"


def keep_run(s3, job_name: str, run_id: str, store: Path) -> Path:
    """Copies the run's files from the emulator's S3 to ``store/runs/<run id>/`` (the passport's files as they lie
    next to the checkpoints, and the dataset under ``datasets/``, so that ``ML_PLATFORM_DATASETS_URI`` can point
    there for a rerun). Returns the directory."""
    kept = store / "runs" / run_id
    (kept / Path(DATASET_KEY).parent).mkdir(parents=True, exist_ok=True)
    prefix = f"checkpoints/{QUEUE}/{job_name}/"
    present = {o["Key"][len(prefix):] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])}
    for name in KEPT:
        if name in present:  # code.diff only when the checkout was dirty
            (kept / name).write_bytes(s3.get_object(Bucket=BUCKET, Key=prefix + name)["Body"].read())
    (kept / DATASET_KEY).write_bytes(s3.get_object(Bucket=BUCKET, Key=DATASET_KEY)["Body"].read())
    return kept


def simulate(port: int, store: Path, work: Path, *, job_name: Optional[str] = None, epochs: int = 30) -> str:
    """Both attempts against the emulator; returns the run id. Raises SystemExit when an attempt misbehaves."""
    job_name = job_name or f"example-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    env = job_environment(port, store, work, job_name)
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=REGION, aws_access_key_id="testing",
                      aws_secret_access_key="testing", aws_session_token="testing")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=DATASET_KEY, Body=example_module().make_dataset().encode())
    command = [sys.executable, str(EXAMPLE), "--epochs", str(epochs)]
    print(f"==> local run: {job_name}, checkpoints at {env['ML_PLATFORM_CHECKPOINT_URI']} (emulated S3)", flush=True)
    code, lines = run_attempt(command, {**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, sigterm_after_epoch=STOP_AFTER_EPOCH)
    print(f"    {reclaim_line(code, lines)}", flush=True)
    if code != STOPPED_EXIT_CODE:
        raise SystemExit("local run: attempt 1 should have checkpointed and exited 143 on SIGTERM:\n" + "\n".join(lines))
    code, lines = run_attempt(command, {**env, "AWS_BATCH_JOB_ATTEMPT": "2"})
    resumed = next((line for line in lines if line.startswith("resuming from")), "did not resume")
    print(f"    attempt 2: {resumed} -> exit {code}: {lines[-1] if lines else ''}", flush=True)
    if code != 0:
        raise SystemExit("local run: attempt 2 should have resumed and finished with exit 0:\n" + "\n".join(lines))
    record = json.loads(s3.get_object(Bucket=BUCKET, Key=f"checkpoints/{QUEUE}/{job_name}/{RECORD_NAME}")["Body"].read())
    kept = keep_run(s3, job_name, record["run_id"], store)
    shown = kept.relative_to(ROOT) if kept.is_relative_to(ROOT) else kept
    print(f"    kept: model, passport, package list and dataset in {shown}/ (the emulator's S3 goes when it stops)",
          flush=True)
    return record["run_id"]


SHORT_BUCKETS = {"productive": "productive", "data_wait": "data", "startup": "start", "restore": "restore",
                 "checkpoint_save": "saves", "evaluation": "eval", "tracking": "track", "lost": "lost", "other": "other",
                 "idle": "idle"}


def ledger_line(record: dict) -> str:
    """The run's goodput ledger in one line of under 120 characters (what ./platform up's summary shows): paid time
    and dollars, then each bucket's share, largest first; the simulated reclaim is the restore share (and lost work, had the stop not saved)."""
    found, _ = record_ledger(record["passport"])
    if found is None or not found.paid_seconds:
        return "ledger: no paid time recorded"
    shares = ", ".join(f"{SHORT_BUCKETS[bucket]} {found.share(bucket):.0%}"
                       for bucket in sorted(found.seconds, key=lambda b: -found.seconds[b]) if found.seconds[bucket] > 0)
    return f"ledger: {found.paid_seconds:.0f} s, {found.paid_usd:.6f} USD: {shares}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=LOCAL_STORE, help="the local MLflow store's directory")
    parser.add_argument("--epochs", type=int, default=30, help=f"more than {STOP_AFTER_EPOCH + 2}")
    args = parser.parse_args(argv)
    if args.epochs <= STOP_AFTER_EPOCH + 2:
        parser.error(f"--epochs {args.epochs}: more than {STOP_AFTER_EPOCH + 2}, so the SIGTERM comes mid-run")
    args.store.mkdir(parents=True, exist_ok=True)
    work = args.store / "work"
    work.mkdir(exist_ok=True)
    with moto_server(ACCOUNT, str(args.store / "moto.log")) as port:
        run_id = simulate(port, args.store, work, epochs=args.epochs)
    from mlflow.tracking import MlflowClient

    print("\nThe run it recorded (./platform runs show --local " + run_id + "):")
    record = with_local_copy(run_record(MlflowClient(local_tracking_uri(args.store)), run_id), args.store)
    print(format_record(record))
    print(f"    {ledger_line(record)}")
    print(f"(priced as a {INSTANCE_TYPE} {LIFECYCLE} instance, the queue's type this local run stands in for)")
    return 0


if __name__ == "__main__":
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    from ops.terminal import entry_point

    entry_point(main)
