"""Training health through the Trainer and Lightning callbacks (issue 39): a run whose weights turn NaN stops itself
(exit 85) within the stated steps, with the run's record and the alarm's metric line; a healthy run trains to the end
with every stop rule judged or said not judged; warn mode says the NaN and trains on. Tiny models built from code (no
downloads), run as a queue runs them: one process each, all started at once (the file's time is the slowest run's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES
from ml_platform_job.health import (DEFAULT_ACTIONS, HEALTH_NAMESPACE, HEALTH_STOPPED_EXIT_CODE, STOP_METRIC,
                                   WARNING_METRIC, HealthRules)

CHECK_EVERY = 2
RULES = HealthRules(check_every=CHECK_EVERY)
NAN_AT = 10  # the weights turn NaN at the end of optimizer step 10: every step from 11 on is NaN
# non_finite fires on the non_finite_checks-th check in a row that saw only NaN: the checks at 12 and 14.
STOP_BY = NAN_AT + RULES.non_finite_checks * CHECK_EVERY  # step 14
STOP_RULES = [rule for rule, action in DEFAULT_ACTIONS.items() if action == "stop"]

# The Trainer: examples/hf_trainer.py's tiny BERT, 64 sequences, 8 a step: 8 steps an epoch, 4 epochs (32 steps).
TRAINER = """
import os, sys, tempfile, torch
sys.path.insert(0, {examples!r})
from hf_trainer import Sequences
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments
from ml_platform_job.transformers import PlatformCallback

class Poison(TrainerCallback):  # NaN in the weights after step NAN_AT: every later step's loss and gradients are NaN
    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == int(os.environ["NAN_AT"]):
            with torch.no_grad():
                model.classifier.weight.fill_(float("nan"))

args = TrainingArguments(output_dir=tempfile.mkdtemp(), num_train_epochs=4, per_device_train_batch_size=8,
                         learning_rate=5e-3, seed=42, save_strategy="steps", save_steps=16, eval_strategy="epoch",
                         logging_steps=8, report_to=[], use_cpu=True, disable_tqdm=True)
platform = PlatformCallback(args)
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Sequences(64, seed=1),
                  eval_dataset=Sequences(32, seed=2), callbacks=[Poison(), platform])
trainer.train(resume_from_checkpoint=platform.resume_from)
platform.finish(trainer)
"""

# Lightning: examples/lightning_module.py's classifier (it logs val_loss), 256 points, 16 a step: 16 steps an epoch,
# 4 epochs (64 steps).
LIGHTNING = """
import os, sys, tempfile, torch
sys.path.insert(0, {examples!r})
import lightning as L
from lightning_module import Classifier, Points
from ml_platform_job.lightning import PlatformCallback

class Poison(L.Callback):  # NaN in the weights after step NAN_AT: every later step's loss and gradients are NaN
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == int(os.environ["NAN_AT"]):
            with torch.no_grad():
                pl_module.net[0].weight.fill_(float("nan"))

class Data(L.LightningDataModule):
    def __init__(self, platform):
        super().__init__()
        self.platform = platform
    def train_dataloader(self):
        return self.platform.loader(Points(256, seed=1), batch_size=16, shuffle=True)
    def val_dataloader(self):
        return torch.utils.data.DataLoader(Points(64, seed=2), batch_size=64)

platform = PlatformCallback({{"lr": 0.01, "epochs": 4}}, seed=3)
trainer = L.Trainer(max_epochs=4, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                    default_root_dir=tempfile.mkdtemp(), callbacks=[Poison(), platform])
trainer.fit(Classifier(0.01), datamodule=Data(platform), ckpt_path=platform.ckpt_path)
platform.finish(trainer)
"""

SCRIPTS = {"trainer": TRAINER, "lightning": LIGHTNING}
CASES = {"nan": {"NAN_AT": str(NAN_AT)}, "healthy": {"NAN_AT": "-1"},
         "warn": {"NAN_AT": str(NAN_AT), "ML_PLATFORM_HEALTH": "warn"}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Every (framework, case) run, started together; each test waits for its own."""
    root = tmp_path_factory.mktemp("health-adapters")
    started = {}
    for framework, script in SCRIPTS.items():
        path = root / f"job_{framework}.py"  # not lightning.py: the script's own folder comes first on sys.path
        path.write_text(script.format(examples=str(EXAMPLES)))
        for case, extra in CASES.items():
            name = f"{framework}-{case}"
            env = {key: value for key, value in os.environ.items() if not key.startswith("ML_PLATFORM_HEALTH")}
            env = {**env, "ML_PLATFORM_CHECKPOINT_URI": str(root / name),
                   "ML_PLATFORM_STOP_FILE": str(root / "none"), "ML_PLATFORM_JOB_PID_FILE": str(root / f"{name}.pid"),
                   "ML_PLATFORM_HEALTH_CHECK_EVERY": str(CHECK_EVERY), "AWS_BATCH_JQ_NAME": "arn-queue",
                   "ML_PLATFORM_QUEUE_NAME": "gpu", "AWS_BATCH_JOB_ID": f"job-{name}", "OMP_NUM_THREADS": "1",
                   **extra}
            with open(root / f"{name}.out", "w") as stdout, open(root / f"{name}.err", "w") as stderr:
                started[name] = _Run(subprocess.Popen([sys.executable, str(path)], env=env, cwd=str(root),
                                                      stdout=stdout, stderr=stderr), root / name)
    yield started
    for run in started.values():
        if run.process.poll() is None:
            run.process.kill()


class _Run:
    def __init__(self, process: subprocess.Popen, folder: Path) -> None:
        self.process, self.folder, self._done = process, folder, None

    def wait(self) -> tuple[int, str, str, dict]:
        """(exit code, stdout, stderr, the run's record) once the process has ended."""
        if self._done is None:
            code = self.process.wait(timeout=300)
            stdout, stderr = (Path(f"{self.folder}.{kind}").read_text() for kind in ("out", "err"))
            record = self.folder / "passport.json"
            assert record.exists(), f"no run record (exit {code}): {stderr[-3000:]}"
            self._done = (code, stdout, stderr, json.loads(record.read_text()))
        return self._done


def _metric_lines(stdout: str, metric: str) -> list[dict]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"_aws"')]
    return [line for line in lines if metric in line]


@pytest.mark.parametrize("framework", list(SCRIPTS))
def test_nan_weights_stop_the_run_within_two_checks_with_exit_85_and_its_record(runs, framework):
    code, stdout, stderr, record = runs[f"{framework}-nan"].wait()
    assert code == HEALTH_STOPPED_EXIT_CODE, stdout[-2000:] + stderr[-2000:]
    attempt = record["passport"]["attempts"][-1]
    stop = attempt["health_stop"]
    assert (record["status"], attempt["outcome"], stop["rule"]) == ("FAILED", "health_stopped", "non_finite")
    assert NAN_AT < stop["step"] <= STOP_BY, stop  # 14: the checks at 12 and 14 saw only NaN
    assert attempt["saved_at_stop"] is False  # a NaN model is no checkpoint
    assert record["health"]["stop"]["rule"] == "non_finite" and "learning rate" in stop["fix"]
    [line] = _metric_lines(stdout, STOP_METRIC)  # exactly one: the queue's alarm
    [directive] = line["_aws"]["CloudWatchMetrics"]
    assert (directive["Namespace"], line["Queue"], line["Rule"], line[STOP_METRIC]) == \
        (HEALTH_NAMESPACE, "gpu", "non_finite", 1)
    assert f"stopped by the health rule non_finite at step {stop['step']}" in stdout
    assert "finished" not in stdout.split("stopped by the health rule")[1]  # nothing after train() ran


@pytest.mark.parametrize("framework", list(SCRIPTS))
def test_a_healthy_run_finishes_with_every_stop_rule_judged_or_said_not_judged(runs, framework):
    code, stdout, stderr, record = runs[f"{framework}-healthy"].wait()
    assert code == 0, stdout[-2000:] + stderr[-2000:]
    health = record["health"]
    assert record["status"] == "FINISHED" and health["stop"] is None and health["check_every"] == CHECK_EVERY
    rules = health["rules"]
    for rule in STOP_RULES:
        assert rules[rule].startswith(("ok (", "not judged: ")), (rule, rules[rule])
    for rule in ("non_finite", "vanishing_gradients", "loss_diverging"):
        assert rules[rule].startswith("ok ("), (rule, rules[rule])  # the loss and the norm reached the rules
    if framework == "lightning":  # the norm before Lightning clips
        assert rules["exploding_gradients"].startswith("ok ("), rules["exploding_gradients"]
    else:  # the Trainer clips (max_grad_norm 1.0) before its callbacks see the gradients
        assert rules["exploding_gradients"].startswith(("not judged: the Trainer clips", "ok (")), \
            rules["exploding_gradients"]
    # The 4 evaluations' loss reached the rule (the tiny BERT overfits its 64 sequences by the third: a warning only).
    assert rules["overfit"] == "ok (4 evaluations)" or rules["overfit"].startswith("fired at step 32 (warn)"), \
        rules["overfit"]
    assert {warning["rule"] for warning in health["warnings"]} <= {"overfit"}, health["warnings"]
    assert _metric_lines(stdout, STOP_METRIC) == []


@pytest.mark.parametrize("framework", list(SCRIPTS))
def test_warn_mode_says_the_nan_and_trains_to_the_end(runs, framework):
    code, stdout, stderr, record = runs[f"{framework}-warn"].wait()
    assert code == 0, stdout[-2000:] + stderr[-2000:]
    assert record["status"] == "FINISHED" and record["health"]["stop"] is None
    [warning] = record["health"]["warnings"]
    assert warning["rule"] == "non_finite" and NAN_AT < warning["step"] <= STOP_BY, warning
    assert f"ml_platform_job health: non_finite at step {warning['step']}" in stderr and "warn only" in stderr
    assert _metric_lines(stdout, STOP_METRIC) == [] and len(_metric_lines(stdout, WARNING_METRIC)) == 1


def test_a_lightning_rank_without_the_validation_loss_still_joins_the_ranks_agreement(monkeypatch):
    """``self.log("val_loss", ..., rank_zero_only=True)`` puts the loss in rank 0's callback_metrics only: the other
    ranks must still join the all-reduce that agrees a validation's stop, or rank 0 waits in it for ever."""
    from types import SimpleNamespace

    from ml_platform_job import lightning as adapter
    from ml_platform_job.health import RULES as RULE_NAMES, HealthMonitor

    joined: list[list[bool]] = []
    monkeypatch.setattr(adapter, "all_ranks_max", lambda flags: joined.append(list(flags)) or list(flags))
    job = SimpleNamespace(health=HealthMonitor(RULES), store=None, clock=SimpleNamespace(now=lambda: 0.0))
    callback = adapter.PlatformCallback(job=job)
    callback._judge_validation(SimpleNamespace(callback_metrics={}, global_step=40))  # another rank: no val_loss
    callback._judge_validation(SimpleNamespace(callback_metrics={"val_loss": 0.5}, global_step=40))  # rank 0
    assert joined == [[False] * len(RULE_NAMES)] * 2
