"""The Hugging Face Trainer's adapter (issue 35): examples/hf_trainer.py, a tiny BERT built from a config, rehearsed as
a queue runs it: SIGTERM mid-epoch, the Trainer's own checkpoint of that step uploaded complete, exit 143 (nothing
after trainer.train() runs), the retry resumes from it and ends with the uninterrupted run's weights."""

from __future__ import annotations

import json
import sys

from conftest import EXAMPLES
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
