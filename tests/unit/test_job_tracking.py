"""What the run record gained with the job side (issue 35): flags kept out of a run's identity, the command's
interpreter and working directory (a "rerun:" line to paste), one record from global rank 0 only, where an attempt
resumed and how far it saved, and runs show of a record file alone."""

import json
import os
import sys

import pytest

from ml_platform_job.tracking import TrackedRun, main_node
from ops import runs


def env_for(tmp_path, **extra):
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "AWS_REGION": "us-east-1", **extra}


def test_flags_are_recorded_and_never_refuse_a_retry(tmp_path):
    first = TrackedRun.start(params={"lr": 0.1}, flags={"log_interval": 10}, env=env_for(tmp_path),
                             code_directory=str(tmp_path))
    again = TrackedRun.start(params={"lr": 0.1}, flags={"log_interval": 50}, env=env_for(tmp_path),
                             code_directory=str(tmp_path))
    assert again.run_id == first.run_id and again.record["passport"]["flags"] == {"log_interval": 10}
    assert "log_interval" not in json.dumps(again.record["identity"])
    with pytest.raises(SystemExit, match="params.lr 0.1 -> 0.3"):
        TrackedRun.start(params={"lr": 0.3}, env=env_for(tmp_path), code_directory=str(tmp_path))


def test_the_rerun_line_has_the_interpreter_and_the_working_directory(tmp_path):
    run = TrackedRun.start(params={"lr": 0.1}, env=env_for(tmp_path), code_directory=str(tmp_path))
    passport = run.record["passport"]
    assert (passport["interpreter"], passport["working_directory"]) == (sys.executable, os.getcwd())
    line = runs.rerun_command({**passport, "command": ["train.py", "--name", "my run"]})
    assert line == f"cd {os.getcwd()} && {sys.executable} train.py --name 'my run'"
    # a record of 0.6 has neither: a script is run with python, from wherever the reader is
    assert runs.rerun_command({"command": ["train.py", "--epochs", "3"]}) == "python train.py --epochs 3"


@pytest.mark.parametrize("env, records", [
    ({}, True), ({"RANK": "0"}, True), ({"RANK": "3"}, False),
    ({"AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"}, False),
    ({"AWS_BATCH_JOB_NODE_INDEX": "0", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0", "RANK": "1"}, False),
])
def test_one_process_of_a_job_records_its_run(env, records):
    assert main_node(env) is records


def test_runs_show_reads_a_record_file_with_its_resume_and_ledger(tmp_path, capsys):
    run = TrackedRun.start(params={"lr": 0.1}, env=env_for(tmp_path, ML_PLATFORM_INSTANCE_TYPE="g5.xlarge",
                                                              ML_PLATFORM_LIFECYCLE="spot"),
                           code_directory=str(tmp_path))
    run.checkpointed(step=40)
    run.stop("stop requested (SIGTERM) at step 40")
    again = TrackedRun.start(params={"lr": 0.1}, env=env_for(tmp_path, ML_PLATFORM_INSTANCE_TYPE="g5.xlarge",
                                                                ML_PLATFORM_LIFECYCLE="spot"),
                             code_directory=str(tmp_path))
    again.restored(40, "s3://b/checkpoints/step-000000000040/")
    again.finish(final_state_sha256="ab" * 32)
    assert runs.main(["show", "--record", str(tmp_path / "ckpt")]) == 0
    out = " ".join(capsys.readouterr().out.split())  # long lines fold at 100 columns
    assert "2. g5.xlarge spot " in out and ": finished; resumed from the checkpoint of step 40" in out
    assert "goodput ledger:" in out
    assert runs.main(["show", "--record", str(tmp_path / "ckpt" / "passport.json"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["passport"]["attempts"][0]["checkpoint_step"] == 40 and shown["ledger"]["attempts"] == 2
    (tmp_path / "binary").write_bytes(b"\x00\xff\xfe")
    with pytest.raises(SystemExit, match=r"binary: not a run record \(UnicodeDecodeError\); pass the passport.json"):
        runs.main(["show", "--record", str(tmp_path / "binary")])
