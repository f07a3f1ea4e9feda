"""The plain PyTorch loop's adapter (issue 35): examples/pytorch_loop.py, an MNIST-shaped network with data-loader
workers, persistent workers, random augmentation and dropout, rehearsed as a queue runs it: SIGTERM mid-epoch, exit
143, the retry resumes at that sample and ends with the uninterrupted run's weights, bit for bit."""

from __future__ import annotations

import sys

from conftest import EXAMPLES
from ml_platform_job.rehearse import format_lines, rehearse


def test_the_loop_example_survives_a_reclaim_exactly_with_persistent_workers(tmp_path):
    result = rehearse([sys.executable, str(EXAMPLES / "pytorch_loop.py"), "--deterministic", "--log-interval", "100"],
                      workdir=str(tmp_path), exact=True)
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: PASS", "\n".join(lines)
    assert all(check.passed for check in result.checks), "\n".join(lines)  # exactness judged, not skipped
    checks = {check.name: check for check in result.checks}
    step = checks["a checkpoint of the step it stopped at"].detail  # "step N": the one the stop saved
    assert checks["the retry resumed (did not start over)"].detail == f"from {step}"
    log = (tmp_path / "attempt-1.log").read_text()
    [stopped] = [line for line in log.splitlines() if line.startswith("stopped (SIGTERM) at ")]
    assert stopped.startswith(f"stopped (SIGTERM) at {step} (epoch ") and ": checkpoint written;" in stopped, log[-2000:]
    assert checks["the final state equals an uninterrupted run's"].passed
    # The health rules judged the rehearsed run, and none fired (issue 39): each verdict is in the report.
    rules = result.health["rules"]
    assert result.health["recorded"] and result.health["stop"] is None and result.warnings == [], "\n".join(lines)
    for rule in ("non_finite", "exploding_gradients", "vanishing_gradients", "loss_diverging"):
        assert rules[rule].startswith("ok ("), (rule, rules[rule])
    assert any(line.startswith("          loss_diverging       ok (") for line in lines)


SABOTAGED = """
import os, random, sys, time
import torch
from ml_platform_job import TrainingJob

job = TrainingJob.start(params={"epochs": 40}, seed=1, deterministic=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = job.loader(torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
job.track(model=model, optimizer=optimizer)
for epoch in job.epochs(40):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        time.sleep(0.01)  # a step that takes as long as a real one: the signal lands mid-run
with torch.no_grad():  # what no checkpoint holds: a draw from the operating system
    model.bias.add_(random.SystemRandom().random())
job.finish(model=model)
"""


def test_the_exactness_check_fails_a_job_whose_weights_depend_on_more_than_its_checkpoint(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(SABOTAGED)
    result = rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"), exact=True)
    exact = result.checks[-1]
    assert exact.passed is False and exact.detail.startswith("the weights differ ("), format_lines(result)
    assert exact.detail.endswith("with deterministic algorithms on")
    assert format_lines(result)[-1] == ("rehearsal: FAIL: the final state equals an uninterrupted run's (read "
                                        "docs/BRING_YOUR_SCRIPT.md)")


ACCUMULATING = """
import time
import torch
from ml_platform_job import TrainingJob

job = TrainingJob.start(params={"epochs": 12, "accumulate": 4}, seed=2, deterministic=True)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(100, 4, generator=torch.Generator().manual_seed(0)),
                                      torch.randn(100, 1, generator=torch.Generator().manual_seed(1)))
loader = job.loader(data, batch_size=4, shuffle=True, accumulate=4)  # 25 batches: the epoch ends mid-accumulation
job.track(model=model, optimizer=optimizer)
for epoch in job.epochs(12):
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        if loader.step_due:
            optimizer.step()
            optimizer.zero_grad()
        time.sleep(0.01)
job.finish(model=model)
"""


def test_gradient_accumulation_resumes_exactly_with_its_steps_in_place(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(ACCUMULATING)
    result = rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"), exact=True)
    lines = format_lines(result)
    assert all(check.passed for check in result.checks), "\n".join(lines)
