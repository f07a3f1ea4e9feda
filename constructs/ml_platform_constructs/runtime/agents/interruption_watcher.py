#!/usr/bin/env python3
"""Tells the training job to checkpoint before its instance goes away, and lets the instance go once it has.

Runs as a systemd service on every fleet instance (standard library only). Every 5 seconds it asks the
instance metadata service (IMDSv2) for:
- spot/instance-action: a Spot interruption notice, 2 minutes ahead
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html);
- autoscaling/target-lifecycle-state: "Terminated" when the group scales in, held by the fleet's termination
  lifecycle hook (https://docs.aws.amazon.com/autoscaling/ec2/userguide/retrieving-target-lifecycle-state-through-imds.html);
- events/recommendations/rebalance: logged only; capacity rebalancing replaces the instance through scale-in.

On a notice it writes the stop file (reason and deadline) and sends SIGTERM to the job: on a fleet to the process
in the job's PID file; on an AWS Batch instance (ML_PLATFORM_SIGNAL_CONTAINERS=ecs) to every ECS task container
(whose stop timeout the queue raises so the job can checkpoint) and never to a PID file, which a container writes
from its own PID namespace: on the host that number names another process. When the stop came from scale-in it waits for the job to exit (up to the hook's timeout) and then completes the
lifecycle action so the instance terminates without waiting out the hook.

Every call it makes is bounded by a timeout: a hung metric publish must not cost the 2 minutes' notice.

On fleets, every minute it also publishes MLPlatform/Training JobRunning (dimension FleetName): 1 while the process in
the job's PID file is alive, else 0. The fleet's scale-to-zero alarm reads it, so a fleet whose job is
still loading data (GPUs idle, job alive) is never stopped.
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Optional

IMDS = "http://169.254.169.254"
POLL_SECONDS = 5
PUBLISH_SECONDS = 60
CALL_TIMEOUT_SECONDS = 10
# The ECS agent labels every task container with its task ARN; the agent's own container has no such label.
ECS_TASK_LABEL = "com.amazonaws.ecs.task-arn"
JOB_NAMESPACE = "MLPlatform/Training"


@dataclass(frozen=True)
class Settings:
    stop_file: str
    pid_file: str
    lifecycle_hook: Optional[str]  # fleets: the termination hook to complete; none on a queue's instances
    hook_timeout_seconds: int
    region: str
    fleet_name: Optional[str]  # fleets: publishes JobRunning; none on a queue's instances
    signal_containers: bool  # AWS Batch: SIGTERM the ECS task containers, never a PID file

    @classmethod
    def from_env(cls, env: dict[str, str]) -> "Settings":
        return cls(stop_file=env.get("ML_PLATFORM_STOP_FILE", "/run/ml-platform/stop-requested"),
                   pid_file=env.get("ML_PLATFORM_JOB_PID_FILE", "/run/ml-platform/job.pid"),
                   lifecycle_hook=env.get("ML_PLATFORM_LIFECYCLE_HOOK"),
                   hook_timeout_seconds=int(env.get("ML_PLATFORM_HOOK_TIMEOUT_SECONDS", "300")),
                   region=env["AWS_REGION"], fleet_name=env.get("ML_PLATFORM_FLEET_NAME"),
                   signal_containers=env.get("ML_PLATFORM_SIGNAL_CONTAINERS") == "ecs")


class Metadata:
    """IMDSv2 reads: a session token first, then GETs; a 404 means "nothing scheduled"."""

    def __init__(self, base: str = IMDS) -> None:
        self.base = base
        self._token: Optional[str] = None
        self._token_expires = 0.0

    def _get_token(self) -> str:
        if self._token is None or time.monotonic() > self._token_expires:
            request = urllib.request.Request(f"{self.base}/latest/api/token", method="PUT",
                                             headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
            with urllib.request.urlopen(request, timeout=2) as response:
                self._token = response.read().decode()
            self._token_expires = time.monotonic() + 21000
        return self._token

    def get(self, path: str) -> Optional[str]:
        request = urllib.request.Request(f"{self.base}/latest/meta-data/{path}",
                                         headers={"X-aws-ec2-metadata-token": self._get_token()})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise


def check(metadata: Metadata) -> Optional[dict]:
    """The stop to act on, if any: {"reason": "spot-interruption"|"scale-in", "deadline": epoch seconds|None}."""
    action = metadata.get("spot/instance-action")
    if action:
        notice = json.loads(action)
        deadline = calendar.timegm(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ"))
        return {"reason": "spot-interruption", "action": notice.get("action"), "deadline": deadline}
    if metadata.get("autoscaling/target-lifecycle-state") == "Terminated":
        return {"reason": "scale-in", "deadline": None}
    return None


def request_stop(settings: Settings, stop: dict, kill: Callable[[int, int], None] = os.kill,
                 run=subprocess.run) -> Optional[int]:
    """Writes the stop file and sends SIGTERM to the job; returns a fleet job's PID if one was running."""
    os.makedirs(os.path.dirname(settings.stop_file), exist_ok=True)
    with open(settings.stop_file, "w") as handle:
        json.dump(stop, handle)
    if settings.signal_containers:
        print(f"SIGTERM sent to task containers: {signal_task_containers(run)}", flush=True)
        return None
    pid = job_pid(settings.pid_file)
    if pid is None:
        return None
    try:
        kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    return pid


def job_pid(pid_file: str) -> Optional[int]:
    try:
        with open(pid_file) as handle:
            return int(handle.read().strip())
    except (FileNotFoundError, ValueError):
        return None


def job_running(pid_file: str, alive: Callable[[int], bool]) -> bool:
    pid = job_pid(pid_file)
    return pid is not None and alive(pid)


def bounded(run: Callable, command: list[str], **kwargs) -> Optional[subprocess.CompletedProcess]:
    """Runs a command with a timeout; None (and a log line) if it did not finish in time."""
    try:
        return run(command, timeout=CALL_TIMEOUT_SECONDS, **kwargs)
    except subprocess.TimeoutExpired:
        print(f"timed out after {CALL_TIMEOUT_SECONDS} s: {' '.join(command[:3])}", file=sys.stderr, flush=True)
        return None


def publish_job_running(settings: Settings, running: bool, run=subprocess.run) -> None:
    bounded(run, ["aws", "cloudwatch", "put-metric-data", "--region", settings.region, "--namespace", JOB_NAMESPACE,
                  "--metric-name", "JobRunning", "--dimensions", f"FleetName={settings.fleet_name}",
                  "--value", "1" if running else "0", "--unit", "Count"], check=False)


def signal_task_containers(run=subprocess.run) -> list[str]:
    """Sends SIGTERM to every ECS task container (AWS Batch jobs) without stopping it: the job checkpoints, and the
    container's stop timeout (raised by the queue) bounds how long ECS waits if the job is stopped too."""
    listed = bounded(run, ["docker", "ps", "--quiet", "--filter", f"label={ECS_TASK_LABEL}"],
                     check=False, capture_output=True, text=True)
    containers = listed.stdout.split() if listed is not None and listed.returncode == 0 else []
    if containers:
        bounded(run, ["docker", "kill", "--signal", "SIGTERM", *containers], check=False)
    return containers


def wait_for_exit(pid: Optional[int], timeout: float, alive: Callable[[int], bool], interval: float = 1.0) -> bool:
    """Waits until the job's process is gone; False if it outlived the timeout."""
    deadline = time.monotonic() + timeout
    while pid is not None and alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def group_name(instance_id: str, region: str, run=subprocess.run) -> str:
    """The instance's Auto Scaling group, from the Auto Scaling API (aws: tags may not be in instance metadata)."""
    result = run(["aws", "autoscaling", "describe-auto-scaling-instances", "--region", region, "--instance-ids",
                  instance_id, "--query", "AutoScalingInstances[0].AutoScalingGroupName", "--output", "text"],
                 check=True, capture_output=True, text=True, timeout=CALL_TIMEOUT_SECONDS)
    return result.stdout.strip()


def complete_lifecycle_action(settings: Settings, metadata: Metadata, run=subprocess.run) -> None:
    instance_id = metadata.get("instance-id")
    group = group_name(instance_id, settings.region, run)
    run(["aws", "autoscaling", "complete-lifecycle-action", "--region", settings.region,
         "--lifecycle-hook-name", settings.lifecycle_hook, "--auto-scaling-group-name", group,
         "--instance-id", instance_id, "--lifecycle-action-result", "CONTINUE"], check=True, timeout=CALL_TIMEOUT_SECONDS)


def main(env: Optional[dict[str, str]] = None, metadata: Optional[Metadata] = None,
         kill: Callable[[int, int], None] = os.kill, run=subprocess.run) -> int:
    settings = Settings.from_env(dict(os.environ) if env is None else env)
    metadata = metadata or Metadata()
    last_published = 0.0
    while True:
        if settings.fleet_name and time.monotonic() - last_published >= PUBLISH_SECONDS:
            publish_job_running(settings, job_running(settings.pid_file, _alive), run=run)
            last_published = time.monotonic()
        try:
            stop = check(metadata)
            if metadata.get("events/recommendations/rebalance"):
                print("rebalance recommendation received; the group will replace this instance", flush=True)
        except (urllib.error.URLError, OSError) as error:
            print(f"metadata unavailable: {error}", file=sys.stderr, flush=True)
            stop = None
        if stop:
            print(f"stop requested: {stop}", flush=True)
            pid = request_stop(settings, stop, kill=kill, run=run)
            if stop["reason"] == "scale-in" and settings.lifecycle_hook:
                exited = wait_for_exit(pid, settings.hook_timeout_seconds - 30, _alive)
                print("job exited" if exited else "job still running at the hook timeout", flush=True)
                complete_lifecycle_action(settings, metadata, run=run)
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
