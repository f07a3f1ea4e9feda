"""The Hugging Face Trainer's adapter (issue 35): examples/hf_trainer.py, a tiny BERT built from a config, rehearsed as
a queue runs it: SIGTERM mid-epoch, the Trainer's own checkpoint of that step uploaded complete, exit 143 (nothing
after trainer.train() runs), the retry resumes from it and ends with the uninterrupted run's weights."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import EXAMPLES, stop_resume_and_compare
from ml_platform_job.rehearse import format_lines, rehearse


def test_the_trainer_example_survives_a_reclaim_exactly(tmp_path):
    result = rehearse([sys.executable, str(EXAMPLES / "hf_trainer.py"), "--output-dir", str(tmp_path / "out")],
                      workdir=str(tmp_path / "work"), exact=True)
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: PASS", "\n".join(lines)
    assert all(check.passed for check in result.checks), "\n".join(lines)  # exactness judged, not skipped
    log = (tmp_path / "work" / "attempt-1.log").read_text()
    [stopped] = [line for line in log.splitlines() if line.startswith("stopped (SIGTERM) at step ")]
    assert ": checkpoint written;" in stopped and "finished" not in log.split(stopped)[1]
    record = json.loads((tmp_path / "work" / "interrupted" / "passport.json").read_text())
    # The run's identity holds what trains the model, not where the Trainer writes or how often it logs.
    assert "learning_rate" in record["passport"]["params"] and "output_dir" not in record["passport"]["params"]
    assert record["passport"]["flags"]["output_dir"] == str(tmp_path / "out")
    phases = record["passport"]["attempts"][1]["phases"]
    assert phases["step"] > 0 and phases["checkpoint_save"] > 0 and phases["evaluation"] > 0


STOPPED_AT = """
import os, sys, tempfile
sys.path.insert(0, {examples!r})
from hf_trainer import Sequences
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments
from ml_platform_job.transformers import PlatformCallback

class StopAt(TrainerCallback):  # a stop that lands on a given step (SIGTERM would land where the clock says)
    def __init__(self, platform, step):
        self.platform, self.step = platform, step
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.platform.job.stop.request("the test's stop")

args = TrainingArguments(output_dir=tempfile.mkdtemp(), num_train_epochs=3, per_device_train_batch_size=16,
                         learning_rate=5e-3, seed=42, save_strategy="steps", save_steps=8, eval_strategy="epoch",
                         logging_steps=8, report_to=[], use_cpu=True, disable_tqdm=True)
platform = PlatformCallback(args)
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Sequences(320, seed=1),
                  eval_dataset=Sequences(64, seed=2), callbacks=[StopAt(platform, int(os.environ["STOP_AT"])), platform])
trainer.train(resume_from_checkpoint=platform.resume_from)
platform.finish(trainer)
"""


@pytest.mark.parametrize("step", [20, 27, 40], ids=["the epoch's last step", "mid-epoch",
                                                    "the epoch's last step, a save step too"])
def test_a_stop_on_any_step_resumes_to_the_uninterrupted_weights(tmp_path, step):
    """The Trainer evaluates at each epoch's end, drawing from torch's generator: a stop on an epoch's last step is
    taken after that evaluation, so the resumed run is not one draw behind the uninterrupted one. Step 40 is also a
    save step (save_steps 8): that save, before the evaluation, is replaced by the stop's (a CI run under load once
    landed its SIGTERM there and resumed one draw behind)."""
    script = tmp_path / "job.py"
    script.write_text(STOPPED_AT.format(examples=str(EXAMPLES)))

    stop_resume_and_compare(script, tmp_path, step)
