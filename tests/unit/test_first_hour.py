"""The first hour of a new user (issue 25), each friction at its entry point: Ctrl-C ends any command with one line,
exit 130 and nothing left running; long steps show progress; nonsense figures are refused with their range before
any synth or sign-in; help says nothing of the project's insides.

The Ctrl-C tests run the real entry points in a process group of their own and signal it as a terminal does (the
whole group) or signal the command alone (kill -INT), with stand-ins for the CDK CLI, setup's tools and ./platform
test's tests. Where a stand-in can say when to signal, it says so on a pipe, and the test waits on that line, not on
a clock (issue 37: no test depends on the machine being idle)."""

import contextlib
import hashlib
import io
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ml_platform_constructs.operations import cli as library_cli
from ops import (advise, budget, cdk_cli, cost_estimate, dataset, drift_baseline, fleet, job, job_cost, labels, model,
                 quality, runs, tco, terminal)
from tests.unit.test_aws_access import no_credentials

ROOT = Path(__file__).resolve().parents[2]
INTERRUPTED = ("interrupted (Ctrl-C): stopped, and nothing it started is left running; run the command again to "
               "start over")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"


# --- Ctrl-C ---------------------------------------------------------------------------------------------------------

# What `npx --no-install cdk synth ...` stands in for: a process that starts another (the CLI's node and the app),
# writes both pids and waits, as a synth does for ten seconds or so.
STAND_IN_CLI = textwrap.dedent("""\
    #!{python}
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(os.environ["STAND_IN_PIDS"], "w") as handle:
        handle.write(f"{{os.getpid()}} {{child.pid}}")
    time.sleep(120)
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (ended, not yet reaped by init) is not running
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


@pytest.fixture
def stand_in_cli(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npx = bin_dir / "npx"
    npx.write_text(STAND_IN_CLI.format(python=sys.executable))
    npx.chmod(0o755)
    pids = tmp_path / "pids"
    # As ./platform runs it: the environment's bin first (its Node.js for the jsii kernel), the stand-in before it.
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "STAND_IN_PIDS": str(pids),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("CI", None)
    return env, pids


@pytest.mark.parametrize("whole_group", [True, False], ids=["Ctrl-C at the terminal", "kill -INT of the command"])
def test_ctrl_c_during_a_synth_is_one_line_exit_130_and_ends_the_cli_and_its_app(stand_in_cli, tmp_path, whole_group):
    env, pids = stand_in_cli
    command = subprocess.Popen([sys.executable, "-m", "ops.cdk_cli", "dev"], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, preexec_fn=interruptible)
    try:
        wait_for(lambda: pids.exists() and pids.read_text().count(" ") == 1)
        cli, app = map(int, pids.read_text().split())
        if whole_group:
            os.killpg(command.pid, signal.SIGINT)
        else:
            command.send_signal(signal.SIGINT)
        out, err = command.communicate(timeout=30)
        wait_for(lambda: not alive(cli) and not alive(app), timeout=15)  # before the group is cleaned up below
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert command.returncode == 130
    assert "Traceback" not in err and "failed" not in err
    assert err.splitlines()[-1] == INTERRUPTED
    assert [line for line in err.splitlines() if line != INTERRUPTED] == [
        "synthesizing dev into cdk.out (cdk-nag and CDK's template checks run inside) ..."]


def test_ctrl_c_while_the_commands_modules_load_is_one_line_too(stand_in_cli):
    """python -m ops.<command>: the handler is there before the command's modules load (aws-cdk-lib's import alone
    takes a second), so a Ctrl-C during the imports is the same one line, not an import traceback. Python reports
    each import as it completes (PYTHONPROFILEIMPORTTIME): the signal goes once the ops package has loaded."""
    env, pids = stand_in_cli
    command = subprocess.Popen([sys.executable, "-m", "ops.cdk_cli", "dev"], cwd=ROOT, text=True,
                               env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True, preexec_fn=interruptible)
    try:
        for line in command.stderr:
            if line.rstrip().endswith("| ops"):  # the package, ops/__init__.py, has been imported
                break
        os.killpg(command.pid, signal.SIGINT)
        err = command.stderr.read()
        command.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert "| stacks.config" not in err  # the signal came while the command's modules were loading
    assert (command.returncode, [line for line in err.splitlines() if not line.startswith("import time:")]) == (
        130, [INTERRUPTED])
    assert not pids.exists()


MOTO_THEN_WAIT = textwrap.dedent("""\
    import os, sys, time
    from ops.local.emulator import moto_server
    from ops.terminal import entry_point

    def main(argv):
        with moto_server("123456789012", sys.argv[1]) as port:
            print(port, flush=True)
            time.sleep(120)
        return 0

    entry_point(main)
""")


def test_ctrl_c_while_the_emulator_runs_ends_moto(tmp_path):
    script = tmp_path / "emulate.py"
    script.write_text(MOTO_THEN_WAIT)
    command = subprocess.Popen([sys.executable, str(script), str(tmp_path / "moto.log")], cwd=ROOT, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, preexec_fn=interruptible)
    try:
        port = int(command.stdout.readline())
        servers = [p for p in Path("/proc").glob("[0-9]*") if f"-p\0{port}" in _cmdline(p)]
        assert len(servers) == 1
        os.killpg(command.pid, signal.SIGINT)
        _, err = command.communicate(timeout=30)
        wait_for(lambda: not alive(int(servers[0].name)), timeout=15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert (command.returncode, err) == (130, INTERRUPTED + "\n")


def interruptible() -> None:
    """In the child before it runs: Ctrl-C's default, whatever this process inherited. A runner started in the
    background by a non-interactive shell ignores SIGINT, its children inherit that (across exec), and a shell cannot
    trap a signal ignored at its start: the tests' Ctrl-C would reach nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_text()
    except OSError:
        return ""


# Each wait on a process below ends on an event it writes or on its end; SAFETY_SECONDS is only the last resort
# against a hang, never how long a test waits.
SAFETY_SECONDS = 120


def next_event(fd: int, timeout: float = SAFETY_SECONDS) -> str:
    """The next line a stand-in writes on the events pipe ``fd``; "" at the pipe's end: every process that held its
    write end has ended."""
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([fd], [], [], timeout)[0]:
            raise AssertionError(f"no event within {timeout} s (a last resort: each comes in well under a second)")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line.decode().rstrip("\n")


# What setup's first tool stands in for: Python that answers the version check, then takes its time (as pip does),
# after saying on the events pipe that it has started.
STAND_IN_PYTHON = textwrap.dedent("""\
    #!/usr/bin/env bash
    [ "$1" = -c ] && exit 0
    echo started >&"$STAND_IN_EVENTS"
    exec sleep 120
""")


def test_ctrl_c_during_setup_is_one_line_not_the_tools_failure(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy2(ROOT / "platform", checkout / "platform")  # a checkout that has not been set up
    python = tmp_path / "python3.11"
    python.write_text(STAND_IN_PYTHON)
    python.chmod(0o755)
    events, write_end = os.pipe()  # the write end goes to the command and its children
    env = {**os.environ, "PYTHON": str(python), "STAND_IN_EVENTS": str(write_end)}
    command = subprocess.Popen([str(checkout / "platform"), "setup"], cwd=checkout, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, preexec_fn=interruptible,
                               pass_fds=(write_end,))
    os.close(write_end)
    try:
        assert next_event(events) == "started"  # the tool runs: the Ctrl-C comes during setup, not before it
        os.killpg(command.pid, signal.SIGINT)
        _, err = command.communicate(timeout=SAFETY_SECONDS)
        assert next_event(events) == ""  # the pipe's end: the tool (its sleep) has ended too, nothing left running
    finally:
        os.close(events)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert command.returncode == 130
    assert err.splitlines()[-1] == ("interrupted (Ctrl-C): setup stopped, nothing left running; run the command again "
                                    "to finish it")
    assert "error:" not in err and not (checkout / ".venv" / ".setup-stamp").exists()


# ./platform test in a checkout whose setup is done (its stamp matches, the CDK CLI and checkov are there: stand-ins),
# with this environment's Python, on a test file of its own: a quick test, then one that says it has started and waits
# for the Ctrl-C, with a fixture whose teardown says it ran. Its conftest.py can wait for it too, as it loads.
STAND_IN_EVENTS = textwrap.dedent("""\
    import os, select, signal

    def tell(what):
        os.write(int(os.environ["STAND_IN_EVENTS"]), what.encode() + b"\\n")

    def tell_and_wait_for_the_ctrl_c(what):
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)  # the signal's byte, however soon it comes: no race with the wait below
        tell(what)
        select.select([read], [], [])  # ends as the Ctrl-C comes; its KeyboardInterrupt follows
""")
STAND_IN_CONFTEST = textwrap.dedent("""\
    import os
    from stand_in_events import tell_and_wait_for_the_ctrl_c

    if os.environ.get("STAND_IN_WAIT_IN") == "conftest":
        tell_and_wait_for_the_ctrl_c("loading conftest.py")
""")
STAND_IN_TESTS = textwrap.dedent("""\
    import pytest
    from stand_in_events import tell, tell_and_wait_for_the_ctrl_c

    @pytest.fixture
    def torn_down():
        yield
        tell("torn down")

    def test_a_quick_one():
        pass

    def test_waits_for_the_ctrl_c(torn_down):
        tell_and_wait_for_the_ctrl_c("started")
""")


def set_up_checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    script = (ROOT / "platform").read_text()
    digested = re.search(r"setup_digest\(\) \{\s+cat (.+?) \|", script, re.S)[1].replace("\\\n", " ").split()
    for name in digested:  # empty: the digest is of their contents
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("")
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / ".setup-stamp").write_text(hashlib.sha256(b"").hexdigest() + "\n")
    stand_ins = {".venv/bin/python": f'#!/bin/sh\nexec {sys.executable} "$@"\n',
                 ".venv/checkov/bin/checkov": "#!/bin/sh\nexit 1\n", "node_modules/.bin/cdk": "#!/bin/sh\nexit 1\n"}
    for name, text in stand_ins.items():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(text)
        (checkout / name).chmod(0o755)
    shutil.copy2(ROOT / "platform", checkout / "platform")
    for name, text in {"stand_in_events.py": STAND_IN_EVENTS, "conftest.py": STAND_IN_CONFTEST,
                       "test_waits.py": STAND_IN_TESTS}.items():
        (checkout / name).write_text(text)
    return checkout


@pytest.mark.parametrize("moment,whole_group", [("test", True), ("conftest", False)],
                         ids=["Ctrl-C at the terminal during a test", "kill -INT while conftest.py loads"])
def test_ctrl_c_during_platform_test_is_one_line_exit_130_after_pytest_tears_down(tmp_path, moment, whole_group):
    """0.7 ended in pytest's KeyboardInterrupt section and summary, exit 2 (or in a traceback when the Ctrl-C came
    while conftest.py loaded). Now the output up to the Ctrl-C stays, pytest still tears every fixture down, and one
    line ends it, exit 130."""
    checkout = set_up_checkout(tmp_path)
    events, write_end = os.pipe()  # the write end goes to the command and its children
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "STAND_IN_EVENTS": str(write_end),
           "STAND_IN_WAIT_IN": moment}
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "CI"):
        env.pop(name, None)
    command = subprocess.Popen([str(checkout / "platform"), "test", "-p", "no:cacheprovider", "test_waits.py"],
                               cwd=checkout, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, preexec_fn=interruptible, pass_fds=(write_end,))
    os.close(write_end)
    try:
        assert next_event(events) == ("started" if moment == "test" else "loading conftest.py")
        if whole_group:
            os.killpg(command.pid, signal.SIGINT)
        else:
            command.send_signal(signal.SIGINT)
        out, err = command.communicate(timeout=SAFETY_SECONDS)
        after = []
        while line := next_event(events):  # to the pipe's end: pytest has ended, and so has all it started
            after.append(line)
    finally:
        os.close(events)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert (command.returncode, err) == (130, INTERRUPTED + "\n"), out + err
    assert "KeyboardInterrupt" not in out and "Traceback" not in out, out
    if moment == "test":
        assert after == ["torn down"]
        lines = out.splitlines()
        assert lines[-1] == "test_waits.py ."  # the quick test's dot; the interrupted test has none; then the line
        assert [line for line in lines if line.startswith(("=", "!", "_"))] == [lines[0]]  # "== test session starts"
    else:
        assert (after, out) == ([], "")


def test_the_platform_script_lifts_its_trap_before_a_command_it_waits_for():
    """A Python command the script runs and waits for (lint's synth, diff's credential check) prints its own one line
    on Ctrl-C; the script's trap must not add a second."""
    lines = [line.strip() for line in (ROOT / "platform").read_text().splitlines()]
    waited = [number for number, line in enumerate(lines) if line.startswith("python -m ops.")]
    assert [lines[number] for number in waited] == ["python -m ops.cdk_cli",
                                                    'python -m ops.aws_access "$env_name" "${profile[@]}"']
    assert [lines[number - 1] for number in waited] == ["trap - INT TERM"] * 2


def test_every_python_entry_point_ends_on_ctrl_c_through_the_one_handler():
    """Each `python -m ops...` module and each bench script that starts processes runs its main through
    ops.terminal.entry_point; a bench script that starts none may end on KeyboardInterrupt itself, with exit 130."""
    entry_points = [path for path in [*(ROOT / "ops").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
                    if '__name__ == "__main__"' in path.read_text()]
    assert len(entry_points) >= 25
    for path in entry_points:
        source = path.read_text()
        main_block = source.split('if __name__ == "__main__":', 1)[1]
        if path.parent.name == "bench" and "subprocess" not in source and "terminal" not in source:
            assert "except KeyboardInterrupt" in main_block and "130" in main_block, path.relative_to(ROOT)
        else:
            assert "entry_point(main)" in main_block, path.relative_to(ROOT)


def test_a_child_of_a_command_is_ended_with_its_group_when_the_command_is_interrupted(tmp_path):
    pid_file = tmp_path / "grandchild"
    spawn = (f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
             f"time.sleep(120)']); open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(120)")
    process = terminal.start([sys.executable, "-c", spawn])
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    grandchild = int(pid_file.read_text())
    terminal.stop(process, grace=5)
    assert process.poll() is not None
    wait_for(lambda: not alive(grandchild), timeout=10)


def test_the_librarys_command_ends_on_ctrl_c_with_one_line_and_130(capsys):
    def interrupted(**kwargs):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as done:
        library_cli.main(["--region", "us-east-1", "budget", "status"], session_factory=interrupted)
    assert done.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C): stopped; run the command again to start over\n"


# --- progress -------------------------------------------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_off_a_terminal_is_plain_lines_a_start_each_item_and_a_heartbeat():
    stream = io.StringIO()
    with terminal.progress("running each test file alone", total=2, stream=stream, heartbeat=0.05) as shown:
        shown.advance("tests/a.py")
        time.sleep(0.12)
        shown.advance("tests/b.py")
    lines = stream.getvalue().splitlines()
    assert lines[:2] == ["running each test file alone ...", "  [1/2] tests/a.py"]
    assert lines[-1] == "  [2/2] tests/b.py"
    assert any(line.startswith("  ... still running each test file alone (") for line in lines[2:-1])
    assert "\r" not in stream.getvalue()


def test_progress_on_a_terminal_is_a_spinner_with_the_count_and_seconds_cleared_at_the_end(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    stream = Terminal()
    with terminal.progress("synthesizing dev", total=3, stream=stream, interval=0.01) as shown:
        shown.advance("run 1")
        time.sleep(0.05)
    text = stream.getvalue()
    assert "\r\033[K| synthesizing dev" in text and "[1/3] run 1 (0 s)" in text
    assert text.endswith("\r\033[K") and "\n" not in text


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setenv("CI", "true")  # progress as CI shows it: plain lines


def test_cost_says_what_it_does_before_its_synth(plain, monkeypatch, capsys, tmp_path):
    seen = []
    monkeypatch.setattr(cost_estimate, "synth", lambda assembly: seen.append(capsys.readouterr().err))
    monkeypatch.setattr(cost_estimate, "estimates", lambda *args: [])
    assert cost_estimate.main(["--synth", "--assembly", str(tmp_path)]) == 0
    assert seen == ["synthesizing every environment for the estimate (cdk-nag and CDK's template checks run inside) "
                    "...\n"]


def test_synth_says_what_it_does_before_the_cdk_cli_runs(plain, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cdk_cli, "synth", lambda outdir, environments: seen.append(capsys.readouterr().err) or [])
    assert cdk_cli.main(["dev"]) == 0
    assert seen == ["synthesizing dev into cdk.out (cdk-nag and CDK's template checks run inside) ...\n"]


# --- figures checked before any work --------------------------------------------------------------------------------

@pytest.fixture
def no_work(monkeypatch):
    """Any synth, credential check or AWS session fails the test: the figure had to be refused before it."""
    def called(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")
    for module in (fleet, job, dataset, drift_baseline, budget):
        for name in ("session_for", "payer_session"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, called)
    monkeypatch.setattr(cost_estimate, "synth", called)
    monkeypatch.setattr(tco, "synth", called)
    no_credentials(monkeypatch)


@pytest.mark.parametrize("module,argv,message", [
    (budget, ["what-if", "dev", "--actual", "-5"],
     "error: ./platform budget: argument --actual: -5 is out of range: Budgets' actual spend this month in USD, from 0 "
     "to 10,000,000 (e.g. --actual 1200) (usage: ./platform budget --help)"),
    (budget, ["what-if", "dev", "--running", "g5.xlarge=1000000"],
     "error: ./platform budget: argument --running: 'g5.xlarge=1000000': COUNT 1000000 is out of range: instances of "
     "one type, from 1 to 1,000 (e.g. --running g5.xlarge=4@2.5: 4 instances that have run 2.5 hours) (usage: "
     "./platform budget --help)"),
    (budget, ["what-if", "dev", "--on-demand", "g5.xlarge=2@1000"],
     "error: ./platform budget: argument --on-demand: 'g5.xlarge=2@1000': HOURS 1000 is out of range: how long they "
     "have run this month, from 0 to 744 (e.g. --on-demand g5.xlarge=4@2.5: 4 instances that have run 2.5 hours) "
     "(usage: ./platform budget --help)"),
    (budget, ["what-if", "dev", "--budget-age-hours", "-3"],
     "error: ./platform budget: argument --budget-age-hours: -3 is out of range: how old Budgets' figure is, in hours, "
     "from 0 to 744 (e.g. --budget-age-hours 8) (usage: ./platform budget --help)"),
    (fleet, ["scale", "dev", "training", "1000000"],
     "error: ./platform fleet scale: argument N: 1000000 is out of range: the fleet's desired capacity in instances (0 "
     "stops it), from 0 to 1,000 (e.g. ./platform fleet scale dev training 2) (usage: ./platform fleet scale --help)"),
    (fleet, ["scale", "dev", "training", "7"],
     "error: ./platform fleet scale: N=7 is out of range: training's desired capacity, from 0 to its max_capacity 2 in "
     "config/environments.toml (raise max_capacity there and deploy to go higher) (usage: ./platform fleet scale "
     "--help)"),
    (fleet, ["scale", "dev", "training", "-1"],
     "error: ./platform fleet scale: argument N: -1 is out of range: the fleet's desired capacity in instances (0 "
     "stops it), from 0 to 1,000 (e.g. ./platform fleet scale dev training 2) (usage: ./platform fleet scale --help)"),
    (job, ["submit", "dev", "training", "--image", IMAGE, "--name", "r1", "--nodes", "-3", "--", "python", "t.py"],
     "error: ./platform job submit: argument --nodes: -3 is out of range: instances of the job (2 or more: a "
     "multi-node job), from 1 to 8 (e.g. --nodes 2), or an elastic range MIN:MAX (e.g. --nodes 1:8) (usage: "
     "./platform job submit --help)"),
    (job, ["submit", "dev", "training", "--image", IMAGE, "--name", "r1", "--gpus", "0", "--", "python", "t.py"],
     "error: ./platform job submit: argument --gpus: 0 is out of range: GPUs per instance, from 1 to 16 (e.g. --gpus "
     "1) (usage: ./platform job submit --help)"),
    (dataset, ["build", "dev", "imagenet", "v1", "--prefix", "datasets/imagenet/", "--size-gib", "0"],
     "error: ./platform dataset build: argument --size-gib: 0 is out of range: the volume's size in GiB, at least the "
     "dataset's, from 1 to 65,536 (e.g. --size-gib 200) (usage: ./platform dataset build --help)"),
    (drift_baseline, ["dev", "classifier", "sample.csv", "--bins", "1"],
     "error: ./platform drift-baseline: argument --bins: 1 is out of range: histogram bins per numeric feature, from 2 "
     "to 100 (e.g. --bins 10) (usage: ./platform drift-baseline --help)"),
    (cost_estimate, ["--synth", "--capture-gb", "1e30"],
     "error: ./platform cost: argument --capture-gb: 1e30 is out of range: GB in each endpoint's capture bucket, from "
     "0 to 10,000,000 (e.g. --capture-gb 50) (usage: ./platform cost --help)"),
    (tco, ["dev", "--synth", "--jobs-per-month", "-20"],
     "error: ./platform tco: argument --jobs-per-month: -20 is out of range: training jobs a month, from 0 to 100,000 "
     "(e.g. --jobs-per-month 20) (usage: ./platform tco --help)"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_a_nonsense_figure_is_one_line_with_its_range_exit_2_before_any_synth_or_sign_in(module, argv, message,
                                                                                          no_work, capsys):
    with pytest.raises(SystemExit) as done:
        module.main(argv)
    assert (done.value.code, capsys.readouterr().err) == (2, message + "\n")


@pytest.mark.parametrize("argv,message", [
    (["budget", "what-if", "--monthly-limit", "2000", "--actual", "-5"], "argument --actual: -5 is out of range"),
    (["budget", "what-if", "--monthly-limit", "-1"], "argument --monthly-limit: -1 is out of range"),
    (["budget", "what-if", "--monthly-limit", "2000", "--running", "g5.xlarge=1000000"],
     "'g5.xlarge=1000000': COUNT 1000000 is out of range"),
    (["job", "submit", "training", "--image", IMAGE, "--name", "r1", "--nodes", "100", "--", "python", "t.py"],
     "argument --nodes: 100 is out of range: instances of the job (2 or more: a multi-node job), from 1 to 8"),
    (["dataset", "build", "--runbook", "r", "--bucket", "b", "--name", "n", "--version", "v1", "--prefix",
      "datasets/n/", "--size-gib", "-1"], "argument --size-gib: -1 is out of range"),
])
def test_the_librarys_command_refuses_nonsense_figures_before_it_asks_for_a_session(argv, message, capsys):
    def session(**kwargs):
        raise AssertionError("a session was asked for before the arguments were checked")
    with pytest.raises(SystemExit) as done:
        library_cli.main(["--region", "us-east-1", *argv], session_factory=session)
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and err.count("\n") == 1


def test_fleet_scale_checks_the_count_before_it_asks_for_credentials(no_work, capsys):
    with pytest.raises(SystemExit) as done:
        fleet.main(["scale", "dev", "training", "3"])  # dev's training fleet has max_capacity 2
    assert done.value.code == 2 and "from 0 to its max_capacity 2" in capsys.readouterr().err


def test_tco_checks_every_flag_before_its_synth_through_the_platform_script():
    # What ./platform tco runs after setup, and nothing before it: the command checks, then synthesizes. (Not the
    # script itself: in a checkout whose setup is stale it would set up first, minutes of pip and npm.)
    script = (ROOT / "platform").read_text()
    case = script[script.index("\n  tco)\n"):].split(";;", 1)[0]
    assert [line.strip() for line in case.splitlines() if line.strip() and not line.strip().startswith("#")] == [
        "tco)", "setup", 'exec python -m ops.tco --synth "$@"']
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    answer = subprocess.run([sys.executable, "-m", "ops.tco", "--synth", "dev", "--bogus"], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=120)
    assert (answer.returncode, answer.stdout) == (2, "")
    assert answer.stderr == "error: ./platform tco: unrecognized arguments: --bogus (usage: ./platform tco --help)\n"


# --- help says nothing of the project's insides ---------------------------------------------------------------------

# Module paths, `python -m ops...`, issue numbers, internal parameter names: what a new user cannot act on.
INTERNAL = re.compile(r"python -m ops|\bops[/.]\w|[Ii]ssue \d|runtime[/.]|ml_platform_constructs[./]|\bassembly env\b"
                      r"|(?<!examples/)\b\w+\.py\b|shared/|\bphase \d")
HELPS = {
    "fleet": (fleet, [[], ["scale"], ["status"], ["preflight"]]),
    "job": (job, [[], ["submit"], ["list"], ["logs"], ["cancel"]]),
    "job cost": (job_cost, [[]]),
    "dataset": (dataset, [[], ["build"], ["list"]]),
    "drift-baseline": (drift_baseline, [[]]),
    "labels": (labels, [[], ["upload"]]),
    "quality": (quality, [[], ["check"]]),
    "budget": (budget, [[]]),
    "cost": (cost_estimate, [[]]),
    "advise": (advise, [[]]),
    "tco": (tco, [[]]),
    "runs": (runs, [[], ["list"], ["show"]]),
    "model": (model, [[], ["promote"], ["status"]]),
    "synth": (cdk_cli, [[]]),
    "python -m ml_platform_constructs": (library_cli, [[], ["budget", "what-if"], ["job", "submit"],
                                                       ["dataset", "build"], ["drift-baseline"], ["job", "cost"],
                                                       ["prices", "refresh"]]),
}


def helps() -> list[tuple[str, str]]:
    found = []
    for name, (module, commands) in HELPS.items():
        for words in commands:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
                module.main([*words, "--help"])
            found.append((" ".join([name, *words]), out.getvalue()))
    return found


def test_no_commands_help_names_the_projects_insides():
    leaks = [f"{name}: {line.strip()}" for name, text in helps() for line in text.splitlines() if INTERNAL.search(line)]
    assert leaks == []


def test_the_command_list_and_the_bench_scripts_help_name_nothing_internal():
    texts = [subprocess.run([str(ROOT / "platform"), "help"], capture_output=True, text=True, cwd=ROOT).stdout]
    for script in ("benchmark.py", "join_breaks.py", "mutation.py"):
        texts.append(subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True,
                                    text=True, cwd=ROOT).stdout)
    assert [line for text in texts for line in text.splitlines() if INTERNAL.search(line)] == []
    assert all(text.startswith("usage: ./platform bench") for text in texts[1:])


@pytest.mark.parametrize("command", [["advise", "llm-7b-lora", "--json"], ["advise", "resnet50-imagenet", "--all"]])
def test_output_read_by_a_reader_that_stops_early_ends_without_a_traceback(command):
    """`| head -1`: 0.7 ended in a BrokenPipeError traceback. The command stops writing, says nothing more, and exits
    as a process killed by SIGPIPE would (141), or 0 when everything fitted in the pipe before the reader left."""
    process = subprocess.Popen([str(ROOT / "platform"), *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()  # the reader leaves
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) in (0, 141) and stderr == ""


@pytest.mark.parametrize("command", [
    ["model", "judge", "{binary}", "{binary}"],
    ["drift", "check", "dev", "classifier", "--baseline", "{binary}", "--capture", "{dir}"],
    ["quality", "check", "dev", "classifier", "--capture", "{dir}", "--labels", "{binary}"],
    ["advise", "resnet50-imagenet", "--measured", "{binary}"],
])
def test_a_binary_file_given_as_text_is_one_line_that_names_it(command, tmp_path):
    """0.7 ended each of these in a UnicodeDecodeError traceback."""
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    (tmp_path / "capture").mkdir()
    (tmp_path / "capture" / "x.jsonl").write_text("{}\n")
    argv = [a.format(binary=binary, dir=tmp_path / "capture") for a in command]
    result = subprocess.run([str(ROOT / "platform"), *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{binary} is not UTF-8 text" in lines[0] and "binary file?" in lines[0]


def test_a_setup_step_says_every_10_s_that_it_is_still_running_and_stops_saying_so_when_it_ends(tmp_path):
    """The platform script's quietly: while a step runs, a heartbeat line (every SETUP_HEARTBEAT_SECONDS, 10 by
    default); the step here ends only once a heartbeat has been written (an event, not a clock), and the heartbeat
    ends with it."""
    script = (Path(__file__).resolve().parents[2] / "platform").read_text()
    functions = script[script.index('BEAT=""\nquietly() {'):script.index("# Ctrl-C (or SIGTERM) while the script")]
    assert "SETUP_HEARTBEAT_SECONDS:-10" in functions
    err = tmp_path / "err"
    step = f"until grep -q 'a step: ' {err}; do sleep 0.05; done"
    program = (f"LOGS={tmp_path}\n{functions}\nquietly 'a step' bash -c \"{step}\"\n"
               "echo \"beat after: ${BEAT:-none}\"\n")
    done = subprocess.run(["bash", "-c", program], stderr=err.open("w"), stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "SETUP_HEARTBEAT_SECONDS": "0.2"}, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "beat after: none"
    lines = err.read_text().splitlines()
    assert lines and all(re.fullmatch(r"      \.\.\. a step: \d+ s", line) for line in lines), lines
