"""The interruption watcher's main loop, run whole: each event type (Spot notice, scale-in, rebalance, nothing,
metadata unavailable) on each host type (fleet with its lifecycle hook, queue instance), and every call it makes
bounded by a timeout, each checked at the call itself."""

import json
import os
import signal
import subprocess
import urllib.error

import pytest

from ml_platform_constructs.runtime.agents import interruption_watcher as watcher

NOTICE = json.dumps({"action": "terminate", "time": "2026-11-30T10:00:00Z"})


SLEPT: list = []  # the loop's waits (time.sleep, counted by the polls fixture): which poll the watcher is in


class Metadata:
    """Instance metadata as a sequence of polls, one per wait of the loop: each poll's paths (a missing path reads as
    None, an exception is raised); the last poll stays."""

    def __init__(self, *polls, instance_id="i-0abc"):
        self.polls, self.instance_id = list(polls), instance_id

    def get(self, path):
        if path == "instance-id":
            return self.instance_id
        value = self.polls[min(len(SLEPT), len(self.polls) - 1)].get(path)
        if isinstance(value, Exception):
            raise value
        return value


class Host:
    """The commands and signals the watcher sends, each with its timeout."""

    def __init__(self, group="dev-Compute-trainingASG", containers="c1\n"):
        self.commands, self.timeouts, self.killed = [], [], []
        self.group, self.containers = group, containers

    def run(self, args, timeout=None, **kwargs):
        self.commands.append(args)
        self.timeouts.append((args[:3], timeout))
        verb = args[2] if args[0] == "aws" else args[1]
        stdout = {"describe-auto-scaling-instances": self.group + "\n", "ps": self.containers}.get(verb, "")
        return subprocess.CompletedProcess(args, 0, stdout=stdout)

    def kill(self, pid, sig):
        self.killed.append((pid, sig))

    def named(self, *prefix):
        return [c for c in self.commands if c[:len(prefix)] == list(prefix)]


@pytest.fixture
def polls(monkeypatch):
    """time.sleep counted instead of slept; the waits the loop asks for."""
    SLEPT.clear()
    monkeypatch.setattr(watcher.time, "sleep", SLEPT.append)
    return SLEPT


def fleet_env(tmp_path, pid=None, hook="checkpoint-before-termination"):
    if pid is not None:
        (tmp_path / "job.pid").write_text(f"{pid}\n")
    env = {"AWS_REGION": "us-east-1", "ML_PLATFORM_STOP_FILE": str(tmp_path / "run" / "stop-requested"),
           "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"), "ML_PLATFORM_FLEET_NAME": "training",
           "ML_PLATFORM_HOOK_TIMEOUT_SECONDS": "600"}
    return {**env, "ML_PLATFORM_LIFECYCLE_HOOK": hook} if hook else env


def queue_env(tmp_path):
    return {"AWS_REGION": "us-east-1", "ML_PLATFORM_SIGNAL_CONTAINERS": "ecs",
            "ML_PLATFORM_STOP_FILE": str(tmp_path / "run" / "stop-requested"),
            "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid")}


@pytest.fixture
def job():
    """A live process of this test's own as the job: a mutant that signals it for real ends only this process (a made-up
    PID could name someone else's)."""
    process = subprocess.Popen(["sleep", "60"])
    yield process.pid
    process.kill()
    process.wait()


def a_finished_pid():
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_on_a_fleet_scale_in_signals_the_job_waits_for_it_then_lets_the_instance_go(job, tmp_path, polls, monkeypatch):
    host, waited = Host(), []
    monkeypatch.setattr(watcher, "wait_for_exit", lambda pid, timeout, alive: waited.append((pid, timeout)) or True)
    metadata = Metadata({"autoscaling/target-lifecycle-state": "Terminated"})
    assert watcher.main(fleet_env(tmp_path, pid=job), metadata, kill=host.kill, run=host.run) == 0
    assert host.killed == [(job, signal.SIGTERM)]
    assert waited == [(job, 600 - 30)]  # the hook's timeout, less the time to complete the action
    (complete,) = host.named("aws", "autoscaling", "complete-lifecycle-action")
    assert complete == ["aws", "autoscaling", "complete-lifecycle-action", "--region", "us-east-1",
                        "--lifecycle-hook-name", "checkpoint-before-termination", "--auto-scaling-group-name",
                        "dev-Compute-trainingASG", "--instance-id", "i-0abc", "--lifecycle-action-result", "CONTINUE"]
    assert host.commands.index(complete) > host.commands.index(host.named("aws", "autoscaling",
                                                                           "describe-auto-scaling-instances")[0])
    assert json.loads((tmp_path / "run" / "stop-requested").read_text()) == {"reason": "scale-in", "deadline": None}


def test_a_job_that_outlives_the_hook_still_lets_the_instance_go(job, tmp_path, polls, monkeypatch, capsys):
    host = Host()
    monkeypatch.setattr(watcher, "wait_for_exit", lambda pid, timeout, alive: False)
    metadata = Metadata({"autoscaling/target-lifecycle-state": "Terminated"})
    assert watcher.main(fleet_env(tmp_path, pid=job), metadata, kill=host.kill, run=host.run) == 0
    assert "job still running at the hook timeout" in capsys.readouterr().out
    assert host.named("aws", "autoscaling", "complete-lifecycle-action")


def test_on_a_fleet_a_spot_notice_signals_the_job_and_leaves_the_lifecycle_alone(job, tmp_path, polls, monkeypatch):
    host = Host()
    monkeypatch.setattr(watcher, "wait_for_exit", lambda *a: pytest.fail("a Spot notice waits for nothing"))
    metadata = Metadata({"spot/instance-action": NOTICE})
    assert watcher.main(fleet_env(tmp_path, pid=job), metadata, kill=host.kill, run=host.run) == 0
    assert host.killed == [(job, signal.SIGTERM)]
    assert host.named("aws", "autoscaling") == [] and host.named("docker") == []
    assert json.loads((tmp_path / "run" / "stop-requested").read_text()) == {
        "reason": "spot-interruption", "action": "terminate", "deadline": 1796032800}


def test_a_fleet_without_a_hook_completes_nothing_on_scale_in(tmp_path, polls):
    host = Host()
    metadata = Metadata({"autoscaling/target-lifecycle-state": "Terminated"})
    assert watcher.main(fleet_env(tmp_path, pid=a_finished_pid(), hook=None), metadata, kill=host.kill,
                        run=host.run) == 0
    assert host.named("aws", "autoscaling") == []


@pytest.mark.parametrize("event", [{"spot/instance-action": NOTICE},
                                   {"autoscaling/target-lifecycle-state": "Terminated"}])
def test_on_a_queue_instance_every_stop_signals_the_task_containers_only(tmp_path, polls, event):
    (tmp_path / "job.pid").write_text("7\n")  # a PID from a container's namespace
    host = Host(containers="c1\nc2\n")
    assert watcher.main(queue_env(tmp_path), Metadata(event), kill=host.kill, run=host.run) == 0
    assert host.killed == [] and host.named("aws") == []  # no metric, no lifecycle action: Batch owns the instance
    assert host.named("docker", "kill") == [["docker", "kill", "--signal", "SIGTERM", "c1", "c2"]]


def test_nothing_scheduled_and_rebalance_keep_polling_every_5_seconds(job, tmp_path, polls, capsys):
    host = Host()
    metadata = Metadata({}, {"events/recommendations/rebalance": '{"noticeTime": "2026-11-30T09:58:00Z"}'},
                        {"spot/instance-action": NOTICE})
    assert watcher.main(fleet_env(tmp_path, pid=job), metadata, kill=host.kill, run=host.run) == 0
    assert polls == [watcher.POLL_SECONDS] * 2 and watcher.POLL_SECONDS == 5
    assert "rebalance recommendation received" in capsys.readouterr().out
    assert host.killed == [(job, signal.SIGTERM)]  # only the notice stopped the job


def test_metadata_unavailable_is_logged_and_polled_again(job, tmp_path, polls, capsys):
    host = Host()
    metadata = Metadata({"spot/instance-action": urllib.error.URLError("connection refused")},
                        {"spot/instance-action": OSError("timed out")}, {"spot/instance-action": NOTICE})
    assert watcher.main(fleet_env(tmp_path, pid=job), metadata, kill=host.kill, run=host.run) == 0
    assert capsys.readouterr().err.count("metadata unavailable") == 2 and len(polls) == 2


def test_a_fleet_publishes_whether_its_job_runs_once_a_minute(tmp_path, polls, monkeypatch):
    host, clock = Host(), iter([1000.0, 1000.0, 1030.0, 1061.0, 1061.0, 1070.0])
    monkeypatch.setattr(watcher.time, "monotonic", lambda: next(clock))
    metadata = Metadata({}, {}, {"spot/instance-action": NOTICE})
    watcher.main(fleet_env(tmp_path, pid=a_finished_pid()), metadata, kill=host.kill, run=host.run)
    published = host.named("aws", "cloudwatch", "put-metric-data")
    assert len(published) == 2  # at the start and 61 s later, not at 30 s
    assert published[0][published[0].index("--value") + 1] == "0"  # the PID file names no live process


def test_every_call_the_loop_makes_is_bounded(job, tmp_path, polls, monkeypatch):
    """Each command at its own call (the host answers every one; the metadata service's requests: below)."""
    host = Host()
    monkeypatch.setattr(watcher, "wait_for_exit", lambda pid, timeout, alive: True)
    assert watcher.main(fleet_env(tmp_path, pid=job), Metadata({"autoscaling/target-lifecycle-state": "Terminated"}),
                        kill=host.kill, run=host.run) == 0
    assert [prefix for prefix, _ in host.timeouts] == [["aws", "cloudwatch", "put-metric-data"],
                                                       ["aws", "autoscaling", "describe-auto-scaling-instances"],
                                                       ["aws", "autoscaling", "complete-lifecycle-action"]]
    assert all(timeout == watcher.CALL_TIMEOUT_SECONDS for _, timeout in host.timeouts)
    queue = Host()
    watcher.main(queue_env(tmp_path), Metadata({"spot/instance-action": NOTICE}), kill=queue.kill, run=queue.run)
    assert [prefix[:2] for prefix, _ in queue.timeouts] == [["docker", "ps"], ["docker", "kill"]]
    assert all(timeout == watcher.CALL_TIMEOUT_SECONDS for _, timeout in queue.timeouts)


def test_metadata_requests_are_bounded(monkeypatch):
    opened = []

    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return b"value"
    monkeypatch.setattr(watcher.urllib.request, "urlopen", lambda request, timeout=None: opened.append(
        (request.get_method(), request.full_url, timeout)) or Response())
    metadata = watcher.Metadata("http://imds")
    assert metadata.get("spot/instance-action") == "value" and metadata.get("instance-id") == "value"
    assert opened == [("PUT", "http://imds/latest/api/token", 2),  # one token for both reads
                      ("GET", "http://imds/latest/meta-data/spot/instance-action", 2),
                      ("GET", "http://imds/latest/meta-data/instance-id", 2)]


def test_the_commands_exactly_as_the_aws_cli_and_docker_take_them(job, tmp_path, polls, monkeypatch, capsys):
    host = Host()
    monkeypatch.setattr(watcher, "wait_for_exit", lambda pid, timeout, alive: True)
    watcher.main(fleet_env(tmp_path, pid=job), Metadata({"autoscaling/target-lifecycle-state": "Terminated"}),
                 kill=host.kill, run=host.run)
    assert host.commands[:2] == [
        ["aws", "cloudwatch", "put-metric-data", "--region", "us-east-1", "--namespace", "MLPlatform/Training",
         "--metric-name", "JobRunning", "--dimensions", "FleetName=training", "--value", "1", "--unit", "Count"],
        ["aws", "autoscaling", "describe-auto-scaling-instances", "--region", "us-east-1", "--instance-ids", "i-0abc",
         "--query", "AutoScalingInstances[0].AutoScalingGroupName", "--output", "text"]]
    assert "stop requested: {'reason': 'scale-in', 'deadline': None}" in capsys.readouterr().out
    assert host.killed == [(job, signal.SIGTERM)]
    listed = []
    watcher.signal_task_containers(run=lambda args, **kwargs: listed.append(kwargs) or subprocess.CompletedProcess(
        args, 0, stdout=""))
    assert listed == [{"timeout": watcher.CALL_TIMEOUT_SECONDS, "check": False, "capture_output": True, "text": True}]


def test_a_command_that_timed_out_is_logged_to_stderr(capsys):
    def hanging(args, timeout=None, **kwargs):
        raise subprocess.TimeoutExpired(args, timeout)
    assert watcher.bounded(hanging, ["aws", "cloudwatch", "put-metric-data", "--region"]) is None
    assert capsys.readouterr().err == "timed out after 10 s: aws cloudwatch put-metric-data\n"


def test_the_metric_is_published_again_after_exactly_a_minute(tmp_path, polls, monkeypatch):
    host, clock = Host(), iter([1000.0, 1000.0, 1060.0, 1060.0])
    monkeypatch.setattr(watcher.time, "monotonic", lambda: next(clock))
    watcher.main(fleet_env(tmp_path, pid=a_finished_pid()), Metadata({}, {"spot/instance-action": NOTICE}),
                 kill=host.kill, run=host.run)
    assert len(host.named("aws", "cloudwatch", "put-metric-data")) == 2


def test_defaults_of_a_fleet_instance():
    settings = watcher.Settings.from_env({"AWS_REGION": "eu-west-1"})
    assert (settings.stop_file, settings.pid_file, settings.hook_timeout_seconds) == (
        "/run/ml-platform/stop-requested", "/run/ml-platform/job.pid", 300)
    assert (settings.lifecycle_hook, settings.fleet_name, settings.signal_containers) == (None, None, False)
