"""The first hour of a new user (issue 25), each friction at its entry point: Ctrl-C ends any command with one line,
exit 130 and nothing left running. (Progress, figures refused before any work, help, binary input and early-closed
output: test_first_hour_inputs.py.)

The Ctrl-C tests run the real entry points in a process group of their own and signal it as a terminal does (the
whole group) or signal the command alone (kill -INT), with stand-ins for the CDK CLI, setup's tools and ./platform
test's tests. Where a stand-in can say when to signal, it says so on a pipe, and the test waits on that line, not on
a clock (issue 37: no test depends on the machine being idle)."""

import contextlib
import hashlib
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
from ops import terminal

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
        servers = moto_servers(port)
        assert len(servers) == 1
        os.killpg(command.pid, signal.SIGINT)
        _, err = command.communicate(timeout=30)
        wait_for(lambda: not alive(servers[0]), timeout=15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert (command.returncode, err) == (130, INTERRUPTED + "\n")


def test_the_emulator_ends_with_its_block_and_its_log_is_whole(tmp_path):
    """moto is killed at the block's end (an orderly exit took a second after a deploy): nothing of it is left
    running, and its log, unbuffered, holds every request it answered."""
    import urllib.request

    from ops.local.emulator import moto_server

    log = tmp_path / "moto.log"
    with moto_server("123456789012", str(log)) as port:
        [server] = moto_servers(port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/data.json?last=1", timeout=10):
            pass
    assert not alive(server)  # reaped as the block ended: no wait needed
    assert "data.json?last=1" in log.read_text()


def interruptible() -> None:
    """In the child before it runs: Ctrl-C's default, whatever this process inherited. A runner started in the
    background by a non-interactive shell ignores SIGINT, its children inherit that (across exec), and a shell cannot
    trap a signal ignored at its start: the tests' Ctrl-C would reach nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def moto_servers(port: int) -> list[int]:
    """The pids of the processes listening as moto on ``port`` (its command line ends ``-p PORT``)."""
    return [int(proc.name) for proc in Path("/proc").glob("[0-9]*") if f"-p\0{port}\0" in _cmdline(proc) + "\0"]


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

    EVENTS = int(os.environ["STAND_IN_EVENTS"])
    if os.environ.get("PYTEST_XDIST_WORKER"):  # execnet starts a worker without the fd: it opens its parent's
        EVENTS = os.open(f"/proc/{os.getppid()}/fd/{EVENTS}", os.O_WRONLY)

    def tell(what):
        os.write(EVENTS, what.encode() + b"\\n")

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


@pytest.mark.parametrize("moment,whole_group,workers", [("test", True, []), ("test", True, ["-n", "2"]),
                                                        ("conftest", False, [])],
                         ids=["Ctrl-C at the terminal during a test (one file: one process)",
                              "Ctrl-C at the terminal during a test on xdist workers",
                              "kill -INT while conftest.py loads"])
def test_ctrl_c_during_platform_test_is_one_line_exit_130_after_pytest_tears_down(tmp_path, moment, whole_group,
                                                                                 workers):
    """0.7 ended in pytest's KeyboardInterrupt section and summary, exit 2 (or in a traceback when the Ctrl-C came
    while conftest.py loaded). Now the output up to the Ctrl-C stays, pytest still tears every fixture down, and one
    line ends it, exit 130. One file runs in one process (./platform test FILE); on pytest-xdist's workers, as the
    whole suite runs, the Ctrl-C reaches them with the terminal's group; conftest.py loads first in the command's own
    process."""
    checkout = set_up_checkout(tmp_path)
    events, write_end = os.pipe()  # the write end goes to the command and its children
    # This checkout's modules by absolute path: under ./platform test (python -c) sys.path starts with "", which in the
    # stand-in checkout would be the checkout.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, sys.path)]),
           "STAND_IN_EVENTS": str(write_end), "STAND_IN_WAIT_IN": moment}
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "CI", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
                 "PYTEST_XDIST_TESTRUNUID"):  # this test's own worker's
        env.pop(name, None)
    command = subprocess.Popen([str(checkout / "platform"), "test", "-p", "no:cacheprovider", *workers,
                                "test_waits.py"],
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
        if workers:
            # The quick test's dot, if the command had printed it: a worker's report reaches the command a moment after
            # the test, and the Ctrl-C may come first. The interrupted test has none.
            started = next(n for n, line in enumerate(lines) if re.fullmatch(r"2 workers \[2 items\]", line))
            assert lines[started + 1:] in ([""], ["", "."]), out
        else:
            assert lines[-1] == "test_waits.py ."  # the quick test's dot; the interrupted test has none
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
