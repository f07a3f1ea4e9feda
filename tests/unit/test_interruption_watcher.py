"""The on-instance interruption watcher, against a fake instance metadata service on 127.0.0.1."""

import json
import signal
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ml_platform_constructs.runtime.agents import interruption_watcher as watcher


class FakeImds(BaseHTTPRequestHandler):
    paths: dict[str, str] = {}

    def do_PUT(self):  # noqa: N802 (http.server naming)
        assert self.path == "/latest/api/token" and self.headers["X-aws-ec2-metadata-token-ttl-seconds"]
        self._reply(200, "token-1")

    def do_GET(self):  # noqa: N802
        assert self.headers["X-aws-ec2-metadata-token"] == "token-1"
        path = self.path.removeprefix("/latest/meta-data/")
        self._reply(200, self.paths[path]) if path in self.paths else self._reply(404, "")

    def _reply(self, status, body):
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def imds():
    server = HTTPServer(("127.0.0.1", 0), FakeImds)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    FakeImds.paths = {}
    yield watcher.Metadata(f"http://127.0.0.1:{server.server_address[1]}"), FakeImds.paths
    server.shutdown()


@pytest.fixture
def settings(tmp_path):
    return watcher.Settings(stop_file=str(tmp_path / "run" / "stop-requested"), pid_file=str(tmp_path / "job.pid"),
                            lifecycle_hook="checkpoint-before-termination", hook_timeout_seconds=300,
                            region="us-east-1", fleet_name="training", signal_containers=False)


def test_nothing_scheduled_is_no_stop(imds):
    metadata, _ = imds
    assert watcher.check(metadata) is None


def test_spot_interruption_notice_is_a_stop_with_its_deadline(imds):
    metadata, paths = imds
    paths["spot/instance-action"] = json.dumps({"action": "terminate", "time": "2026-11-29T20:00:00Z"})
    assert watcher.check(metadata) == {"reason": "spot-interruption", "action": "terminate", "deadline": 1795982400}  # 2026-11-29T20:00:00Z


def test_scale_in_is_a_stop_without_deadline(imds):
    metadata, paths = imds
    paths["autoscaling/target-lifecycle-state"] = "Terminated"
    assert watcher.check(metadata) == {"reason": "scale-in", "deadline": None}


def test_in_service_lifecycle_state_is_no_stop(imds):
    metadata, paths = imds
    paths["autoscaling/target-lifecycle-state"] = "InService"
    assert watcher.check(metadata) is None


def test_stop_writes_the_stop_file_and_signals_the_job(settings):
    with open(settings.pid_file, "w") as handle:
        handle.write("4242\n")
    sent = []
    pid = watcher.request_stop(settings, {"reason": "scale-in", "deadline": None}, kill=lambda p, s: sent.append((p, s)))
    assert pid == 4242 and sent == [(4242, signal.SIGTERM)]
    with open(settings.stop_file) as handle:
        assert json.load(handle) == {"reason": "scale-in", "deadline": None}


def test_stop_without_a_job_still_writes_the_stop_file(settings):
    assert watcher.request_stop(settings, {"reason": "scale-in", "deadline": None}, kill=lambda p, s: None) is None
    with open(settings.stop_file) as handle:
        assert json.load(handle)["reason"] == "scale-in"


def test_wait_for_exit_returns_when_the_job_is_gone():
    states = iter([True, False])
    assert watcher.wait_for_exit(7, timeout=10, alive=lambda pid: next(states), interval=0.01) is True


def test_wait_for_exit_gives_up_at_the_timeout():
    assert watcher.wait_for_exit(7, timeout=0, alive=lambda pid: True) is False


def test_job_running_follows_the_pid_file(settings):
    assert watcher.job_running(settings.pid_file, alive=lambda pid: True) is False
    with open(settings.pid_file, "w") as handle:
        handle.write("99")
    assert watcher.job_running(settings.pid_file, alive=lambda pid: pid == 99) is True


def test_job_running_metric_names_the_fleet(settings):
    calls = []
    watcher.publish_job_running(settings, True, run=lambda args, check, timeout: calls.append(args))
    assert calls[0][:3] == ["aws", "cloudwatch", "put-metric-data"]
    assert calls[0][calls[0].index("--namespace") + 1] == "MLPlatform/Training"
    assert calls[0][calls[0].index("--dimensions") + 1] == "FleetName=training"
    assert calls[0][calls[0].index("--value") + 1] == "1"


def test_scale_in_completes_the_lifecycle_action_of_its_group(imds, settings):
    metadata, paths = imds
    paths["instance-id"] = "i-0abc"
    calls = []

    def run(args, check, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="dev-Compute-trainingASG\n")
    watcher.complete_lifecycle_action(settings, metadata, run=run)
    assert calls[0][:3] == ["aws", "autoscaling", "describe-auto-scaling-instances"] and "i-0abc" in calls[0]
    args = calls[1]
    assert args[:3] == ["aws", "autoscaling", "complete-lifecycle-action"]
    assert args[args.index("--auto-scaling-group-name") + 1] == "dev-Compute-trainingASG"
    assert args[args.index("--instance-id") + 1] == "i-0abc"
    assert args[args.index("--lifecycle-action-result") + 1] == "CONTINUE"


def test_every_call_in_the_loop_is_bounded_so_a_hang_cannot_cost_the_notice(settings, imds):
    metadata, paths = imds
    paths["instance-id"] = "i-0abc"
    timeouts = []

    def hanging(args, timeout=None, **kwargs):
        timeouts.append(timeout)
        raise subprocess.TimeoutExpired(args, timeout)
    watcher.publish_job_running(settings, True, run=hanging)  # logged, not raised
    assert watcher.signal_task_containers(run=hanging) == []
    with pytest.raises(subprocess.TimeoutExpired):
        watcher.complete_lifecycle_action(settings, metadata, run=hanging)
    assert timeouts and all(t == watcher.CALL_TIMEOUT_SECONDS for t in timeouts)


def test_batch_instances_sigterm_every_ecs_task_container_without_stopping_it():
    calls = []

    def run(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="c1\nc2\n" if args[1] == "ps" else "")
    assert watcher.signal_task_containers(run=run) == ["c1", "c2"]
    assert calls[0] == ["docker", "ps", "--quiet", "--filter", "label=com.amazonaws.ecs.task-arn"]
    assert calls[1] == ["docker", "kill", "--signal", "SIGTERM", "c1", "c2"]


def test_queue_instances_need_no_fleet_or_hook_settings():
    settings = watcher.Settings.from_env({"AWS_REGION": "us-east-1", "ML_PLATFORM_SIGNAL_CONTAINERS": "ecs"})
    assert settings.signal_containers and settings.fleet_name is None and settings.lifecycle_hook is None


def test_on_a_queue_a_spot_notice_signals_the_task_containers_and_never_a_pid_a_container_wrote(imds, tmp_path):
    metadata, paths = imds
    paths["spot/instance-action"] = json.dumps({"action": "terminate", "time": "2026-11-30T10:00:00Z"})
    pid_file = tmp_path / "run" / "job.pid"
    pid_file.parent.mkdir()
    pid_file.write_text("7\n")  # the job's PID in its container's namespace: another process on the host
    killed, commands = [], []

    def run(args, **kwargs):
        commands.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="c1\n" if args[1] == "ps" else "")
    env = {"AWS_REGION": "us-east-1", "ML_PLATFORM_SIGNAL_CONTAINERS": "ecs",
           "ML_PLATFORM_STOP_FILE": str(tmp_path / "run" / "stop-requested"), "ML_PLATFORM_JOB_PID_FILE": str(pid_file)}
    assert watcher.main(env, metadata, kill=lambda pid, sig: killed.append(pid), run=run) == 0
    assert killed == []
    assert commands[-1] == ["docker", "kill", "--signal", "SIGTERM", "c1"]
    assert json.loads((tmp_path / "run" / "stop-requested").read_text())["reason"] == "spot-interruption"


def test_on_a_fleet_a_spot_notice_signals_the_process_in_the_pid_file(imds, tmp_path):
    metadata, paths = imds
    paths["spot/instance-action"] = json.dumps({"action": "terminate", "time": "2026-11-30T10:00:00Z"})
    (tmp_path / "job.pid").write_text("4242\n")
    killed, commands = [], []
    env = {"AWS_REGION": "us-east-1", "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop-requested"),
           "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid")}
    assert watcher.main(env, metadata, kill=lambda pid, sig: killed.append((pid, sig)),
                        run=lambda args, **kwargs: commands.append(args)) == 0
    assert killed == [(4242, signal.SIGTERM)] and not any(c[0] == "docker" for c in commands)


def test_a_queue_stop_never_kills_the_number_in_the_pid_file(settings, monkeypatch):
    queue = watcher.Settings(**{**settings.__dict__, "signal_containers": True, "fleet_name": None,
                                "lifecycle_hook": None})
    with open(queue.pid_file, "w") as handle:
        handle.write("7\n")
    signalled, killed = [], []
    monkeypatch.setattr(watcher, "signal_task_containers", lambda *args, **kwargs: signalled.append(True) or ["c1"])
    assert watcher.request_stop(queue, {"reason": "spot-interruption", "deadline": 0},
                                kill=lambda pid, sig: killed.append(pid)) is None
    assert killed == [] and signalled == [True]
