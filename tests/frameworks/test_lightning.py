"""The Lightning adapter (issue 35): examples/lightning_module.py, with data-loader workers, persistent workers, random
jitter per sample and dropout, rehearsed as a queue runs it: SIGTERM mid-epoch, Lightning's checkpoint with the
callback's generators and data position, exit 143, the retry resumes at that batch and ends with the uninterrupted
run's weights. Lightning's own SIGTERM stop exits 0; the callback makes it 143."""

from __future__ import annotations

import json
import sys

import pytest
from lightning.pytorch.utilities.exceptions import SIGTERMException

from conftest import EXAMPLES, stop_resume_and_compare
from ml_platform_job.lightning import PlatformCallback
from ml_platform_job.rehearse import format_lines, rehearse


def test_the_lightning_example_survives_a_reclaim_exactly(tmp_path):
    result = rehearse([sys.executable, str(EXAMPLES / "lightning_module.py")], workdir=str(tmp_path), exact=True)
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: PASS", "\n".join(lines)
    assert all(check.passed for check in result.checks), "\n".join(lines)  # exactness judged, not skipped
    record = json.loads((tmp_path / "interrupted" / "passport.json").read_text())
    assert record["passport"]["flags"] == {"num_workers": 2}  # the workers do not make another run
    assert record["passport"]["seeds"]["deterministic"] is True  # as Trainer(deterministic=True) left torch
    assert "not resumable" not in (tmp_path / "attempt-2.log").read_text()  # Lightning's mid-epoch warning


def test_with_gradient_accumulation_the_stop_waits_for_the_optimizers_step_and_resumes_exactly(tmp_path):
    """A stop mid-accumulation would save a step whose gradient is half-accumulated: the callback waits for the
    step's last batch, and keeps Lightning's own stop from coming first."""
    result = rehearse([sys.executable, str(EXAMPLES / "lightning_module.py"), "--accumulate", "3"],
                      workdir=str(tmp_path), exact=True)
    lines = format_lines(result)
    assert all(check.passed for check in result.checks), "\n".join(lines)


def test_lightnings_own_sigterm_stop_exits_143_not_0(tmp_path, monkeypatch):
    env = {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"),
           "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid")}
    platform = PlatformCallback({"lr": 0.1}, seed=1, env=env)
    try:
        platform.job.stop.request("SIGTERM")

        class Trainer:
            global_step = 12

        stop = SIGTERMException()
        assert stop.code is None  # what Lightning raises: exit status 0, SUCCEEDED to AWS Batch
        platform.on_exception(Trainer(), None, stop)
        assert stop.code == 143
        record = json.loads((tmp_path / "ckpt" / "passport.json").read_text())
        assert record["status"] == "STOPPED" and "at step 12" in record["passport"]["attempts"][0]["reason"]
    finally:
        platform.job.stop.uninstall()


def test_an_exception_that_is_not_a_stop_is_left_as_it_is(tmp_path):
    env = {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"),
           "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid")}
    platform = PlatformCallback({"lr": 0.1}, seed=1, env=env)
    try:
        crash = SystemExit(1)
        platform.on_exception(object(), None, crash)
        assert crash.code == 1
        with pytest.raises(TypeError, match="sampler: the platform's loader makes its own"):
            platform.loader([1, 2, 3], sampler=None)
    finally:
        platform.job.stop.uninstall()


STOPPED_AT = """
import os, sys, tempfile
sys.path.insert(0, {examples!r})
import lightning as L
from lightning_module import Classifier, Data
from ml_platform_job.lightning import PlatformCallback

class StopAt(L.Callback):  # a stop that lands on a given step (SIGTERM would land where the clock says)
    def __init__(self, platform, step):
        self.platform, self.step = platform, step
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            self.platform.job.stop.request("the test's stop")

platform = PlatformCallback({{"lr": 0.01, "epochs": 3}})
trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, enable_checkpointing=False, deterministic=True,
                    default_root_dir=tempfile.mkdtemp(), callbacks=[StopAt(platform, int(os.environ["STOP_AT"])), platform])
trainer.fit(Classifier(0.01), datamodule=Data(platform, 16, 2), ckpt_path=platform.ckpt_path)
platform.finish(trainer)
"""


@pytest.mark.parametrize("step", [192, 250], ids=["the epoch's last batch", "mid-epoch"])
def test_a_stop_on_any_batch_resumes_to_the_uninterrupted_weights(tmp_path, step):
    """The epoch's last batch is followed by validation (its loader draws from torch's generator): a stop there
    resumes to the same weights as one mid-epoch does."""
    script = tmp_path / "job.py"
    script.write_text(STOPPED_AT.format(examples=str(EXAMPLES)))

    stop_resume_and_compare(script, tmp_path, step, ML_PLATFORM_SEED="3")
