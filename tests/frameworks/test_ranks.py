"""A job of two processes (gloo, on the CPU) keeps the rank rules (issue 35): a SIGTERM that reaches one rank stops
both at the same step (a rank that exits alone would leave the other waiting in its next collective), each rank's
generators are saved, one run is recorded (by rank 0) across both attempts, and the resumed job ends with the
weights of an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ml_platform_job.checkpoints import CheckpointStore

RANKED = """
import os, time
import torch
import torch.distributed as dist
from ml_platform_job import TrainingJob

dist.init_process_group("gloo")
job = TrainingJob.start(params={"epochs": 40, "lr": 0.05}, seed=5, deterministic=True)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(160, 4, generator=torch.Generator().manual_seed(0)),
                                      torch.randn(160, 1, generator=torch.Generator().manual_seed(1)))
loader = job.loader(data, batch_size=8, shuffle=True)
job.track(model=model, optimizer=optimizer)
for epoch in job.epochs(40):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        time.sleep(0.003)
job.finish(model=model.module)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(script: Path, uri: Path, work: Path, attempt: int) -> list[subprocess.Popen]:
    port = free_port()
    processes = []
    for rank in (0, 1):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "ML_PLATFORM_CHECKPOINT_URI": str(uri),
               "ML_PLATFORM_STOP_FILE": str(work / "stop"), "ML_PLATFORM_JOB_PID_FILE": str(work / "job.pid"),
               "ML_PLATFORM_JOB_NAME": "ranked", "AWS_BATCH_JOB_ATTEMPT": str(attempt), "PYTHONUNBUFFERED": "1"}
        log = open(work / f"attempt-{attempt}-rank-{rank}.log", "w")
        processes.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=log, stderr=subprocess.STDOUT))
    return processes


def wait(processes: list[subprocess.Popen]) -> list[int]:
    return [process.wait(timeout=240) for process in processes]


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "ranked.py"
    path.write_text(RANKED)
    return path


def test_one_ranks_sigterm_stops_both_at_one_step_and_one_run_is_recorded(script, tmp_path):
    uri, work = tmp_path / "interrupted", tmp_path
    ranks = start(script, uri, work, 1)
    store = CheckpointStore(str(uri))
    deadline = time.monotonic() + 240
    while store.latest() is None:  # the first complete checkpoint (an event, not a clock)
        assert all(p.poll() is None for p in ranks) and time.monotonic() < deadline, "no checkpoint came"
        time.sleep(0.05)
    ranks[1].send_signal(signal.SIGTERM)  # rank 1 only: rank 0 hears of it through the agreement
    assert wait(ranks) == [143, 143]
    logs = [(work / f"attempt-1-rank-{r}.log").read_text() for r in (0, 1)]
    [stopped] = [line for line in logs[0].splitlines() if line.startswith("stopped (another rank was asked to stop)")]
    checkpoint = store.latest()
    assert f"at step {checkpoint.step} " in stopped and "rng-rank-1.pt" in checkpoint.files, logs

    assert wait(start(script, uri, work, 2)) == [0, 0]
    record = json.loads((uri / "passport.json").read_text())
    assert record["status"] == "FINISHED"
    assert [a["outcome"] for a in record["passport"]["attempts"]] == ["stopped", "finished"]  # rank 0's record only
    assert record["passport"]["attempts"][1]["restored_from"]["step"] == checkpoint.step

    assert wait(start(script, tmp_path / "uninterrupted", work, 3)) == [0, 0]
    clean = json.loads((tmp_path / "uninterrupted" / "passport.json").read_text())
    assert record["final_state_sha256"] == clean["final_state_sha256"]


def test_the_launcher_exits_143_when_a_worker_stopped_by_the_stop_file(script, tmp_path):
    """torchrun exits 1 once its workers stopped; the launcher in front of it makes that 143 for the queue's retry,
    though nothing signalled it (the stop file, or another node's rank, stopped the workers)."""
    import shutil

    uri = tmp_path / "interrupted"
    env = {**os.environ, "ML_PLATFORM_CHECKPOINT_URI": str(uri), "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"),
           "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"), "ML_PLATFORM_JOB_NAME": "launched",
           "ML_PLATFORM_SEED": "5", "PYTHONUNBUFFERED": "1"}
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    with open(tmp_path / "launched.log", "w") as log:
        launcher = subprocess.Popen([sys.executable, "-m", "ml_platform_job", "launch", "--", torchrun,
                                     "--nproc-per-node", "2", str(script)], env=env, stdout=log, stderr=subprocess.STDOUT)
    store = CheckpointStore(str(uri))
    deadline = time.monotonic() + 240
    while store.latest() is None:
        assert launcher.poll() is None and time.monotonic() < deadline, (tmp_path / "launched.log").read_text()
        time.sleep(0.05)
    (tmp_path / "stop").write_text(json.dumps({"reason": "scale-in"}))
    assert launcher.wait(timeout=240) == 143, (tmp_path / "launched.log").read_text()[-3000:]
    record = json.loads((uri / "passport.json").read_text())
    assert record["passport"]["attempts"][0]["saved_at_stop"] is True
