"""An elastic job resized 1 -> 2 -> 1 node(s) for real (issue 40): processes stand in for nodes (gloo on the CPU, one
process a node). The 2-node attempt starts as the queue starts a multi-node job, through
examples/multinode_torchrun.sh on each "node", the job side's launcher and torchrun (static rendezvous); the 1-node
ones as a worker of its own, a process group of one (the script's single-node path is
tests/unit/test_multinode_example.py's: each torchrun start and end costs about 3 s here, on 2 cores). The policy's
inputs are injected (a fake clock, GPU utilization and validation losses from the test's environment) so that attempt
1 scales out and attempt 2 scales in at known steps; everything else is the job's own: the checkpoint at the resize,
exit 86 through the launcher, the resume at another world size from the global sample counter, the global batch kept
by gradient accumulation."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import torch

from ml_platform_job.elastic import REQUEST_FILE, RESIZE_EXIT_CODE, resize_history
from ml_platform_job.tracking import RECORD_NAME

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_SCRIPT = ROOT / "examples" / "multinode_torchrun.sh"

# An example-style loop (examples/pytorch_loop.py's shape): a DDP model whenever a process group is up, the global
# batch kept by accumulation (per-device batch 4, global 8: 1 rank accumulates 2 batches, 2 ranks 1), a validation and
# a scheduler step per epoch. UTILIZATION and VAL_LOSS feed the resize policy (a fake clock, 1-s periods, no snooze);
# the validation loss the job sees is VAL_LOSS when set (a plateau on demand), the measured one otherwise.
WORKER = """
import contextlib, os
import torch
import torch.distributed as dist
import torch.nn.functional as F
from ml_platform_job import TrainingJob
from ml_platform_job.elastic import ElasticMonitor, ElasticPolicy

GLOBAL_BATCH, PER_DEVICE, EPOCHS = 8, 4, 4
distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")
job = TrainingJob.start(params={"global_batch": GLOBAL_BATCH, "per_device_batch": PER_DEVICE, "lr": 0.05,
                                "epochs": EPOCHS}, seed=11)
accumulate = job.world.accumulation(GLOBAL_BATCH, PER_DEVICE)
now = [0.0]
if job.elastic is not None:
    policy = job.elastic.policy
    monitor = ElasticMonitor(ElasticPolicy(min_nodes=policy.min_nodes, max_nodes=policy.max_nodes, sizes=(1, 2),
                                           snooze_seconds=0, plateau_evaluations=1, idle_periods=1),
                             nodes=job.elastic.nodes, node_price_per_hour=1.0, restart_seconds=0.001,
                             clock=lambda: now[0], sample=lambda: None, period_seconds=1.0)
    monitor.load_state_dict(job.elastic.state_dict())
    job.elastic.close()
    job.elastic = monitor
utilization = float(os.environ.get("UTILIZATION") or 60)
data = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)),
                                      torch.randn(64, 1, generator=torch.Generator().manual_seed(1)))
held_out = (torch.randn(16, 4, generator=torch.Generator().manual_seed(2)),
            torch.randn(16, 1, generator=torch.Generator().manual_seed(3)))
loader = job.loader(data, batch_size=PER_DEVICE, shuffle=True, accumulate=accumulate)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
job.track(model=model, optimizer=optimizer, scheduler=scheduler)
print(f"world size {job.world.world_size}, nodes {job.world.nodes}, accumulate {accumulate}", flush=True)
for epoch in job.epochs(0, EPOCHS):
    model.train()
    for x, y in loader:
        now[0] += 0.5
        if job.elastic is not None:
            job.elastic.utilization.add(utilization, now=now[0])
        sync = loader.step_due or not distributed
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = F.mse_loss(model(x), y) / accumulate
            loss.backward()
        job.observe(loss=loss)
        if loader.step_due:
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        val_loss = F.mse_loss(model(held_out[0]), held_out[1]).item()
    job.observe(val_loss=float(os.environ.get("VAL_LOSS") or val_loss))
    scheduler.step()
job.finish(model=model.module if distributed else model)
if distributed:
    dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def attempt(script: Path, uri: Path, work: Path, name: str, nodes: int, utilization: float,
            launched: bool = True) -> list[int]:
    """One attempt of the elastic job at ``nodes`` node(s), each node a process started as the queue starts it, by
    the example's script (the launcher, torchrun, one worker), or (``launched`` False, 1 node) the worker alone as a
    process group of one: exit codes by node."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun, f"no torchrun next to {sys.executable}: install torch in the frameworks venv"
    common = {**os.environ, "ML_PLATFORM_CHECKPOINT_URI": str(uri), "ML_PLATFORM_STOP_FILE": str(work / "no-stop"),
              "ML_PLATFORM_JOB_NAME": "elastic-resize", "ML_PLATFORM_JOB_ID": f"job-{name}",
              "ML_PLATFORM_ELASTIC": "1:2", "UTILIZATION": str(utilization), "VAL_LOSS": "1.0",
              "PYTHON": sys.executable, "TORCHRUN": torchrun, "GPUS_PER_NODE": "1", "OMP_NUM_THREADS": "1",
              "PYTHONUNBUFFERED": "1"}
    for variable in ("AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_MAIN_NODE_INDEX",
                     "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        common.pop(variable, None)
    if nodes > 1:  # a multi-node parallel job: Batch's variables on each node, the main node's address
        common.update({"AWS_BATCH_JOB_NUM_NODES": str(nodes), "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
                       "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1", "MASTER_PORT": str(free_port())})
    command = ["bash", str(LAUNCHER_SCRIPT), str(script)]
    if not launched:
        assert nodes == 1
        common.update({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())})
        command = [sys.executable, str(script)]
    processes = []
    for node in range(nodes):
        env = {**common, "ML_PLATFORM_JOB_PID_FILE": str(work / f"{name}-node-{node}.pid")}
        if nodes > 1:
            env["AWS_BATCH_JOB_NODE_INDEX"] = str(node)
        with open(work / f"{name}-node-{node}.log", "w") as log:
            processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                                              start_new_session=True))
    try:
        return [process.wait(timeout=120) for process in processes]
    finally:
        for process in processes:  # a hung attempt: its launcher, torchrun and workers go with it
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def logs(work: Path, name: str) -> str:
    return "\n".join(path.read_text()[-3000:] for path in sorted(work.glob(f"{name}-node-*.log")))


def resize(script: Path, uri: Path, work: Path) -> None:
    """The three attempts: busy GPUs on a plateau at 1 node (scale out), idle ones at 2 (scale in), neither at 1."""
    assert attempt(script, uri, work, "a1", 1, utilization=95.0, launched=False) == [RESIZE_EXIT_CODE], \
        logs(work, "a1")
    assert json.loads((uri / REQUEST_FILE).read_text())["to"] == 2
    assert attempt(script, uri, work, "a2", 2, utilization=10.0) == [RESIZE_EXIT_CODE] * 2, logs(work, "a2")
    assert json.loads((uri / REQUEST_FILE).read_text())["to"] == 1
    assert logs(work, "a2").count("the job asked to be resized; exit 86") == 2  # each node's launcher: 86, not 1
    assert attempt(script, uri, work, "a3", 1, utilization=60.0, launched=False) == [0], logs(work, "a3")


def test_a_job_resized_1_2_1_ends_with_the_weights_of_an_unresized_run(tmp_path):
    """Attempt 1 (1 node) scales out and exits 86, attempt 2 (2 nodes, DDP) scales in and exits 86, attempt 3 (1 node)
    finishes: one run whose record lists both resizes and nodes [1, 2, 1], each attempt resumed at the resize's own
    checkpoint, and whose final weights equal those of an unresized single-process run of the same samples and seed
    within atol 1e-5 (rtol 0). Not bit for bit: at 2 ranks a step's gradient is DDP's all-reduced mean of two 4-sample
    means, at 1 rank the sum of two accumulated halves, so float32 rounds differently (measured: 3.5e-8 at most after
    the 32 optimizer steps, on weights of order 0.02 to 0.6). A step trained on other samples, or lost, or repeated,
    moves the weights by 4e-2 to 8e-2 (measured on the same model and data), so 1e-5 tells a right resume from a
    wrong one by three orders of magnitude either way."""
    script = tmp_path / "elastic_worker.py"
    script.write_text(WORKER)
    uri = tmp_path / "resized"
    reference_env = {**os.environ, "ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "unresized"),
                     "ML_PLATFORM_STOP_FILE": str(tmp_path / "no-stop"), "OMP_NUM_THREADS": "1",
                     "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "unresized.pid"), "ML_PLATFORM_JOB_NAME": "unresized"}
    for variable in ("ML_PLATFORM_ELASTIC", "WORLD_SIZE", "RANK", "LOCAL_RANK", "AWS_BATCH_JOB_NUM_NODES",
                     "AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_MAIN_NODE_INDEX"):
        reference_env.pop(variable, None)
    with open(tmp_path / "unresized.log", "w") as log:  # beside attempt 1
        reference = subprocess.Popen([sys.executable, str(script)], env=reference_env, stdout=log,
                                     stderr=subprocess.STDOUT)
    try:
        resize(script, uri, tmp_path)
        assert reference.wait(timeout=120) == 0, (tmp_path / "unresized.log").read_text()[-3000:]
    finally:
        if reference.poll() is None:  # an attempt failed first: no process outlives the test
            reference.kill()
            reference.wait()

    record = json.loads((uri / RECORD_NAME).read_text())
    attempts = record["passport"]["attempts"]
    assert record["status"] == "FINISHED"
    assert [a["nodes"] for a in attempts] == [1, 2, 1]
    assert [a["outcome"] for a in attempts] == ["resized", "resized", "finished"]
    resizes = resize_history(record)
    assert [(r["from"], r["asked"], r["to"]) for r in resizes] == [(1, 2, 2), (2, 1, 1)], resizes
    assert resizes[0]["reason"].startswith("scale out") and resizes[1]["reason"].startswith("scale in")
    # each resumed where the last one stopped, at the resize's own checkpoint
    assert [a["restored_from"]["step"] for a in attempts[1:]] == [a["stopped_at_step"] for a in attempts[:-1]]
    assert all(a["saved_at_stop"] for a in attempts[:-1])
    assert "world size 2, nodes 2, accumulate 1" in logs(tmp_path, "a2")
    assert "world size 1, nodes 1, accumulate 2" in logs(tmp_path, "a3")

    resized, unresized = (torch.load(path / "model.pt", weights_only=True) for path in (uri, tmp_path / "unresized"))
    assert resized.keys() == unresized.keys()
    differences = {name: (resized[name] - unresized[name]).abs().max().item() for name in resized}
    print(f"max |resized - unresized| = {max(differences.values()):.3e}")  # bench/elastic.py reports it
    assert all(torch.allclose(resized[name], unresized[name], rtol=0, atol=1e-5) for name in resized), differences
