"""The launcher in front of torchrun (issue 35 review): ECS signals the container's first process only, and torchrun
exits 1 when it is stopped (never retried); the launcher passes SIGTERM on, gives the child the stop timeout, and exits
143 when it was stopped, 0 when the child finished, the child's code otherwise."""

import os
import signal
import subprocess
import sys

import pytest

# A stand-in for torchrun: it reports its shutdown timeout, then waits for SIGTERM and exits 1 (torchrun's
# SignalException), or exits with the code it is given.
CHILD = """
import os, signal, sys, time
if sys.argv[1] == "wait":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # before it says it is up: the test signals then
print(os.environ["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"], os.environ["ML_PLATFORM_JOB_PID_FILE"] != sys.argv[2], flush=True)
if sys.argv[1] != "wait":
    sys.exit(int(sys.argv[1]))
time.sleep(60)
sys.exit(2)
"""


def launch(tmp_path, *args):
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    pid_file = tmp_path / "job.pid"
    env = {**os.environ, "ML_PLATFORM_STOP_TIMEOUT_SECONDS": "110", "ML_PLATFORM_JOB_PID_FILE": str(pid_file)}
    env.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
    return subprocess.Popen([sys.executable, "-m", "ml_platform_job", "launch", "--", sys.executable, str(child),
                             *args, str(pid_file)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_stopped_job_exits_143_though_its_torchrun_exits_1(tmp_path):
    process = launch(tmp_path, "wait")
    first = process.stdout.readline()  # the child is up (an event, not a clock)
    assert first.split() == ["105", "True"]  # the stop timeout less 5 s; the child's PID file is its own
    assert int((tmp_path / "job.pid").read_text()) == process.pid  # the watcher signals the launcher
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143
    assert err.strip() == ("ml_platform_job launch: stopped (SIGTERM); exit 143 (the queue retries it; the child "
                           "exited 1)")


@pytest.mark.parametrize("code", ["0", "3"])
def test_an_unstopped_job_exits_as_its_child(tmp_path, code):
    process = launch(tmp_path, code)
    process.communicate(timeout=60)
    assert process.returncode == int(code)


def test_without_a_command_it_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ml_platform_job", "launch"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == ("error: no command: put it after -- (usage: python -m "
                                                    "ml_platform_job launch -- COMMAND...)\n")


STOPPED_CHILD = """
import os, sys
with open(os.path.join(os.environ["ML_PLATFORM_LAUNCH_DIR"], "stopped"), "w") as handle:
    handle.write("the stop file")
sys.exit(1)  # torchrun's exit once its workers stopped by the contract
"""


def test_a_job_stopped_by_the_stop_file_or_another_node_exits_143_though_the_launcher_was_never_signalled(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(STOPPED_CHILD)
    done = subprocess.run([sys.executable, "-m", "ml_platform_job", "launch", "--", sys.executable, str(child)],
                          env={**os.environ, "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"),
                               "ML_PLATFORM_STOP_FILE": str(tmp_path / "none")}, capture_output=True, text=True)
    assert done.returncode == 143, done.stderr
    assert "stopped (the job stopped by the contract); exit 143" in done.stderr


def test_a_second_sigterm_is_not_passed_on(tmp_path):
    counting = tmp_path / "child.py"
    counting.write_text("""
import signal, sys, time
seen = []
signal.signal(signal.SIGTERM, lambda *_: seen.append(1))
print("up", flush=True)
deadline = time.monotonic() + 30
while len(seen) < 1 and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.5)  # a second SIGTERM, were it passed on, would arrive in this time
print(len(seen), flush=True)
sys.exit(1)
""")
    process = subprocess.Popen([sys.executable, "-m", "ml_platform_job", "launch", "--", sys.executable, str(counting)],
                               env={**os.environ, "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid")},
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "up"
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert (out.strip(), process.returncode) == ("1", 143)


HEALTH_CHILD = """
import os, sys
with open(os.path.join(os.environ["ML_PLATFORM_LAUNCH_DIR"], "health-stopped"), "w") as handle:
    handle.write("non_finite")  # what TrainingJob.health_stopped leaves: torchrun then exits 1 for its workers' 85
sys.exit(1)
"""


def test_a_job_a_health_rule_stopped_exits_85_though_its_torchrun_exits_1(tmp_path):
    from ml_platform_job.health import HEALTH_MARKER

    assert HEALTH_MARKER in HEALTH_CHILD
    child = tmp_path / "child.py"
    child.write_text(HEALTH_CHILD)
    env = {**os.environ, "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"),
           "ML_PLATFORM_STOP_FILE": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "ml_platform_job", "launch", "--", sys.executable, str(child)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 85
    assert done.stderr.strip() == ("ml_platform_job launch: a health rule stopped the job; exit 85 (the queue does not "
                                   "retry it; the child exited 1)")


RESIZE_CHILD = """
import os, signal, sys
signal.signal(signal.SIGTERM, lambda *_: None)  # a Spot notice during the resize's save: the save goes on
print("up", flush=True)
sys.stdin.readline()  # the test has signalled the launcher
with open(os.path.join(os.environ["ML_PLATFORM_LAUNCH_DIR"], "resize-requested"), "w") as handle:
    handle.write("2")  # what TrainingJob._resize leaves after its checkpoint: torchrun then exits 1 for its 86
sys.exit(1)
"""


def test_a_resized_job_exits_86_though_a_sigterm_came_during_its_save(tmp_path):
    """The resize's checkpoint is written when the marker is: the controller resubmits it at the new size, rather
    than the queue retrying it at the old one (which would record a resize that never happened)."""
    from ml_platform_job.elastic import RESIZE_EXIT_CODE, RESIZE_MARKER

    assert RESIZE_MARKER in RESIZE_CHILD
    child = tmp_path / "child.py"
    child.write_text(RESIZE_CHILD)
    env = {**os.environ, "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"),
           "ML_PLATFORM_STOP_FILE": str(tmp_path / "none")}
    process = subprocess.Popen([sys.executable, "-m", "ml_platform_job", "launch", "--", sys.executable, str(child)],
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert process.stdout.readline().strip() == "up"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate("go\n", timeout=60)
    assert process.returncode == RESIZE_EXIT_CODE
    assert "the job asked to be resized; exit 86" in err
