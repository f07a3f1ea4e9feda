"""An elastic job's side of a resize (issue 40): after a validation, global rank 0 judges the policy; a resize saves,
writes the request the controller reads, ends the attempt "resized" in the run and exits 86; the resubmitted job
resumes from that checkpoint as the same run, and the run's record lists the resize."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch.utils.data import TensorDataset

from ml_platform_job import TrainingJob
from ml_platform_job.elastic import (REQUEST_FILE, RESIZE_EXIT_CODE, ElasticMonitor, ElasticPolicy, resize_history)
from ml_platform_job.tracking import RECORD_NAME


@pytest.fixture
def env(tmp_path):
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt") + "/", "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"),
            "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"), "ML_PLATFORM_ELASTIC": "1:2",
            "ML_PLATFORM_JOB_ID": "job-1", "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot"}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def train(env, *, busy, losses, epochs=6):
    """examples/pytorch_loop.py's shape: the loader, the epochs, a validation each epoch with the given losses; the
    GPUs' utilization and the monitor's clock stand in for nvidia-smi and time (the job's own policy, prices and
    sizes left for idle GPUs kept; no snooze, a restart of 1 ms)."""
    job = TrainingJob.start(env=env, params={"lr": 0.1}, seed=3)
    clock, policy = Clock(), job.elastic.policy
    monitor = ElasticMonitor(ElasticPolicy(min_nodes=policy.min_nodes, max_nodes=policy.max_nodes,
                                           sizes=policy.sizes, snooze_seconds=0), nodes=job.elastic.nodes,
                             node_price_per_hour=job.elastic.node_price_per_hour, price_at=job.elastic.price_at,
                             left_idle=job.elastic.left_idle, restart_seconds=1e-3, clock=clock, sample=lambda: None,
                             period_seconds=1.0)
    monitor.load_state_dict(job.elastic.state_dict())
    job.elastic.close()
    job.elastic = monitor
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    job.track(model=model, optimizer=optimizer)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = job.loader(data, batch_size=8)
    for epoch in job.epochs(0, epochs):
        for x, y in loader:
            clock.now += 0.5
            monitor.utilization.add(busy, now=clock.now)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        job.observe(val_loss=losses[epoch])
    return job.finish(model=model)


def test_a_plateau_on_busy_gpus_resizes_out_and_the_resubmission_resumes_as_the_same_run(env, capsys):
    with pytest.raises(SystemExit) as ended:
        train(env, busy=95.0, losses=[1.0, 0.9, 0.9, 0.9, 0.9, 0.9])
    assert ended.value.code == RESIZE_EXIT_CODE
    root = env["ML_PLATFORM_CHECKPOINT_URI"]
    request = json.loads(open(os.path.join(root, REQUEST_FILE)).read())
    assert request["to"] == 2 and request["reason"].startswith("scale out") and request["job_id"] == "job-1"
    record = json.loads(open(os.path.join(root, RECORD_NAME)).read())
    attempt = record["passport"]["attempts"][-1]
    assert attempt["outcome"] == "resized" and attempt["resize"]["to"] == 2 and attempt["saved_at_stop"] is True
    assert "resize from 1 to 2 node(s) at step" in capsys.readouterr().out

    # The controller resubmits under the same name at 2 nodes: the same run resumes from the resize's checkpoint.
    resubmitted = {**env, "AWS_BATCH_JOB_NUM_NODES": "2", "ML_PLATFORM_JOB_ID": "job-2"}
    finished = train(resubmitted, busy=60.0, losses=[1.0, 0.9, 0.9, 0.9, 0.9, 0.9])
    assert finished["run_id"] == record["run_id"]
    attempts = finished["passport"]["attempts"]
    assert [a["nodes"] for a in attempts] == [1, 2] and attempts[1]["restored_from"]["step"] == attempt[
        "stopped_at_step"]
    [resize] = resize_history(finished)
    assert (resize["from"], resize["asked"], resize["to"]) == (1, 2, 2) and resize["restart_seconds"] >= 0


def test_busy_gpus_that_keep_learning_never_resize(env, capsys):
    record = train(env, busy=95.0, losses=[1.0, 0.8, 0.6, 0.5, 0.4, 0.3])
    assert record["status"] == "FINISHED" and resize_history(record) == []
    assert "elastic: at step" in capsys.readouterr().out


def test_a_job_without_the_elastic_range_keeps_its_size(env):
    plain = {k: v for k, v in env.items() if k != "ML_PLATFORM_ELASTIC"}
    job = TrainingJob.start(env=plain, params={"lr": 0.1}, seed=3)
    try:
        assert job.elastic is None and job.world.nodes == 1
    finally:
        job.stop.uninstall()


def test_an_adapter_that_does_not_resize_says_so_and_keeps_its_size(env, capsys):
    job = TrainingJob.start(env=env, params={"lr": 0.1}, seed=3)
    try:
        job.no_resizes("the Lightning adapter")
        assert job.elastic is None
        assert "elastic: the Lightning adapter does not resize yet; the job stays at 1 node(s)" in capsys.readouterr().err
    finally:
        job.stop.uninstall()
