"""The rehearsal (issue 35): a job run as a queue runs it, SIGTERM after its first complete checkpoint, the queue's
retry, and a verdict. The standard-library example passes, exactly; jobs that break the contract fail with the reason
and the page to read, never a traceback. (The PyTorch, Trainer and Lightning examples: ./platform test-frameworks.)"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ml_platform_job import __main__ as cli
from ml_platform_job.rehearse import format_lines, rehearse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_with_checkpoints.py"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("train_with_checkpoints", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    root = tmp_path_factory.mktemp("datasets")
    (root / "blobs" / "v1").mkdir(parents=True)
    (root / "blobs" / "v1" / "data.csv").write_text(example.make_dataset(samples=2000))
    return root


def test_the_standard_library_example_survives_a_reclaim_exactly(datasets, tmp_path):
    result = rehearse([sys.executable, str(EXAMPLE), "--epochs", "60"], workdir=str(tmp_path), datasets=str(datasets),
                      exact=True)
    lines = format_lines(result)
    assert lines[-1] == "rehearsal: PASS", "\n".join(lines)
    checks = {check.name: check for check in result.checks}
    assert checks["exited 143 within the stop timeout (30 s)"].passed
    resumed = checks["the retry resumed (did not start over)"]
    assert resumed.passed and resumed.detail.startswith("from step ")
    assert checks["the final state equals an uninterrupted run's"].detail.startswith("the same weights, sha256 ")
    assert all(len(line) <= 100 for line in lines)


# Stand-ins for jobs that break the contract, each after one complete checkpoint (so that the signal comes then).
CHECKPOINTED = """
import os, signal, sys, time
from ml_platform_job.checkpoints import CheckpointStore
{handler}
CheckpointStore(os.environ["ML_PLATFORM_CHECKPOINT_URI"]).save(1, {{"state.pt": b"one"}})
time.sleep(120)
"""
BROKEN = {
    "no handler": ("", "exited 143 within the stop timeout (30 s): it died of SIGTERM (no handler"),
    "exit 0 on SIGTERM": ("signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))",
                          "exited 143 within the stop timeout (30 s): exit 0: AWS Batch records it as SUCCEEDED"),
    "exit 1 on SIGTERM": ("signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))",
                          "exited 143 within the stop timeout (30 s): exit 1: the queue retries exit 143 only"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_job_that_does_not_stop_by_the_contract_fails_with_the_reason(tmp_path, case):
    handler, reason = BROKEN[case]
    job = tmp_path / "job.py"
    job.write_text(CHECKPOINTED.format(handler=handler))
    result = rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"))
    lines = format_lines(result)
    failed = [check for check in result.checks if check.passed is False]
    assert f"{failed[0].name}: {failed[0].detail}".startswith(reason), lines
    assert lines[-1] == "rehearsal: FAIL: exited 143 within the stop timeout (30 s) (read docs/BRING_YOUR_SCRIPT.md)"
    assert not any("Traceback" in line for line in lines)


def test_a_job_that_ignores_sigterm_is_killed_at_the_stop_timeout(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(CHECKPOINTED.format(handler="signal.signal(signal.SIGTERM, signal.SIG_IGN)"))
    result = rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"), stop_timeout=1)
    assert result.checks[0].detail == "still running 1 s after SIGTERM: killed"
    assert "raise the queue's stop_timeout" in result.checks[0].fix


def test_a_script_without_checkpoints_is_signalled_after_the_limit_and_says_what_is_missing(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("import time\ntime.sleep(120)\n")
    result = rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"), signal_after=1)
    failed = {check.name: check.detail for check in result.checks if check.passed is False}
    assert failed["a checkpoint of the step it stopped at"].startswith("no complete checkpoint under ")
    assert failed["one run recorded"].startswith("no run record (passport.json) under ")


def test_a_job_that_finishes_before_the_signal_is_told_to_run_longer(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("print('done')\n")
    result = rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"))
    assert [(c.name, c.passed) for c in result.checks] == [("attempt 1 ran until the stop", False)]
    assert "give it more work" in result.checks[0].fix


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ml_platform_job", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["rehearse"], "error: no job command: put it after -- (usage: python -m ml_platform_job rehearse [options] -- "
                   "COMMAND...)"),
    (["rehearse", "--stop-timeout", "soon", "--", "true"], "error: argument --stop-timeout: 'soon' is not a number of "
                                                           "seconds"),
    ([], "error: a command is needed"),
    (["rehearse", "--", "/nonexistent/python"], None),
])
def test_every_command_line_error_is_one_line(args, message, tmp_path):
    if "--" in args:
        args = [*args[:args.index("--")], "--workdir", str(tmp_path), *args[args.index("--"):]]
    done = run_cli(*args)
    if message is None:  # a command that cannot start: an error (1), not a verdict on the job (3)
        assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
        assert done.stderr.startswith("error: rehearse: cannot start /nonexistent/python: no such program")
        return
    assert done.returncode == 2 and done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def test_json_is_the_checks_and_the_verdict(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("print('done')\n")
    done = run_cli("rehearse", "--json", "--workdir", str(tmp_path / "work"), "--", sys.executable, str(job))
    report = json.loads(done.stdout)
    assert done.returncode == 3 and report["passed"] is False
    assert report["checks"][0]["name"] == "attempt 1 ran until the stop" and report["verdict"].startswith("rehearsal: FAIL")


def test_a_closed_pipe_ends_the_output_quietly(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("print('done')\n")
    shell = (f"{sys.executable} -m ml_platform_job rehearse --workdir {tmp_path / 'work'} -- {sys.executable} {job} "
             "| head -c 1")
    done = subprocess.run(shell, shell=True, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr


def test_the_platform_command_adds_the_emulators_s3(monkeypatch, capsys):
    """./platform job rehearse --s3 passes the library a checkpoint prefix in moto's S3; without --s3 it is the
    library's command unchanged."""
    from ops import rehearse as platform_rehearse

    seen = []
    monkeypatch.setattr(cli, "main", lambda argv: seen.append(argv) or 0)
    assert platform_rehearse.main(["--exact", "--", "python", "train.py"]) == 0
    assert seen[-1] == ["rehearse", "--exact", "--", "python", "train.py"]
    assert platform_rehearse.main(["--s3", "--checkpoints", "s3://b/p/", "--", "python", "train.py"]) == 2
    assert capsys.readouterr().err.startswith("error: --s3 and --checkpoints: pick one")


def test_the_help_names_every_option_within_100_columns():
    done = run_cli("rehearse", "--help")
    assert done.returncode == 0
    for option in ("--exact", "--datasets", "--checkpoints", "--stop-timeout", "--signal-after", "--signal-delay",
                   "--attempt-timeout", "--json", "--workdir"):
        assert option in done.stdout
    assert all(len(line) <= 100 for line in done.stdout.splitlines())


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 3), (None, 0)])
def test_the_verdict_is_the_exit_code_the_operator_commands_use(passed, code, monkeypatch, capsys):
    """PASS 0, FAIL 3: the operator commands' "decided for" and "decided against" (docs/COMMANDS.md, "Exit codes"),
    so that CI tells a job that fails the rehearsal (3) from a rehearsal that could not run (1, 2). A check not made
    (None) fails nothing."""
    from ml_platform_constructs.operations.cli import EXIT_DECIDED_AGAINST, EXIT_OK
    from ml_platform_job import rehearse as rehearsal

    assert (rehearsal.EXIT_PASS, rehearsal.EXIT_FAIL) == (EXIT_OK, EXIT_DECIDED_AGAINST)  # defined twice, the same
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # the test process keeps its own handlers
    monkeypatch.setattr(cli.rehearsal, "rehearse", lambda command, **kwargs: rehearsal.Rehearsal(
        command, "/tmp/work", [rehearsal.Check("attempt 1 ran until the stop", passed, "detail")]))
    assert cli.main(["rehearse", "--json", "--", "python", "train.py"]) == code
    assert json.loads(capsys.readouterr().out)["passed"] is (passed is not False)
