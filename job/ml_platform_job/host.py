"""What the job can see of the instance it runs on, for the paid time before and around it (the goodput ledger's
startup and idle). Standard library only; every read is bounded and returns None where it cannot be made.

- The instance's id and Availability Zone: the files the platform's instance bootstrap writes into the run directory
  every queue job mounts (``/run/ml-platform``: a queue job's container cannot reach the metadata service), else the
  metadata service itself on a fleet's host. The AZ prices a Spot attempt from the price history of that AZ.
- The instance's boot: ``btime`` in ``/proc/stat``, the kernel's boot (a container shares its host's kernel, so it
  is the instance's boot, a few seconds after EC2 starts billing it: https://man7.org/linux/man-pages/man5/proc_stat.5.html).
- The image pull and the container's start: the ECS task metadata endpoint v4 (``PullStartedAt``, the container's
  ``StartedAt``, ``TaskARN``; AWS Batch on ECS sets ``ECS_CONTAINER_METADATA_URI_V4``:
  https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-response.html). Its
  ``AvailabilityZone`` is for Fargate tasks only, hence the bootstrap's file.
- The jobs before this one on the same instance: ``jobs.jsonl`` in the run directory, one line per job start and end
  (this module writes them). The first job on an instance pays its boot; a later one pays only the wait since the
  previous job ended (the instance idle, waiting for it).
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional

RUN_DIR = "/run/ml-platform"
INSTANCE_ID_FILE = "instance-id"
AVAILABILITY_ZONE_FILE = "availability-zone"
JOBS_FILE = "jobs.jsonl"
METADATA_TIMEOUT_SECONDS = 2.0
_NANOSECONDS = re.compile(r"(\.\d{6})\d+")


def _iso(epoch: Optional[float]) -> Optional[str]:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def _epoch(text: Any) -> Optional[float]:
    """Epoch seconds of an ECS timestamp (RFC 3339, up to nanoseconds, ``Z``), None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(_NANOSECONDS.sub(r"\1", text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def booted_at(stat: str = "/proc/stat") -> Optional[float]:
    """The kernel's boot (epoch seconds), None off Linux."""
    try:
        for line in Path(stat).read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_started_at(pid: str = "self", stat: str = "/proc/stat") -> Optional[float]:
    """When this process started (epoch seconds): its start in clock ticks after boot (``/proc/<pid>/stat`` field 22)
    plus the boot; None off Linux. The imports and setup before the run starts are paid time too."""
    boot = booted_at(stat)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = float(fields[19])  # field 22 counts from 1, and the two before ")" are cut off
        return None if boot is None else boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _read(run_dir: str, name: str) -> Optional[str]:
    try:
        return (Path(run_dir) / name).read_text().strip() or None
    except OSError:
        return None


def _metadata(url: str) -> Optional[dict]:
    try:
        with urllib.request.urlopen(url, timeout=METADATA_TIMEOUT_SECONDS) as response:
            found = json.loads(response.read())
        return found if isinstance(found, dict) else None
    except (OSError, ValueError):
        return None


def task_times(env: Mapping[str, str]) -> dict[str, Optional[float]]:
    """The image pull's start and the container's start (epoch seconds) and the task's ARN, from the ECS task metadata
    endpoint; all None off ECS."""
    found: dict[str, Any] = {"image_pull_started_at": None, "container_started_at": None, "task_arn": None}
    url = env.get("ECS_CONTAINER_METADATA_URI_V4")
    if not url:
        return found
    task = _metadata(f"{url}/task") or {}
    container = _metadata(url) or {}
    found.update(image_pull_started_at=_epoch(task.get("PullStartedAt")),
                 container_started_at=_epoch(container.get("StartedAt")),
                 task_arn=task.get("TaskARN") if isinstance(task.get("TaskARN"), str) else None)
    return found


def _jobs(run_dir: str) -> list[dict]:
    try:
        lines = (Path(run_dir) / JOBS_FILE).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if isinstance(entry, dict) and isinstance(entry.get("at"), (int, float)):
            found.append(entry)
    return found


def previous_job_ended_at(run_dir: str, job: str, started: float) -> tuple[bool, Optional[float]]:
    """(first on this instance, when the instance was last busy before ``started``): from the run directory's job
    lines. Another job still running (a start with no end) means the instance was busy until now."""
    entries = [e for e in _jobs(run_dir) if e.get("job") != job and e["at"] <= started]
    if not entries:
        return True, None
    running: dict[str, bool] = {}
    for entry in entries:
        running[str(entry.get("job"))] = entry.get("event") == "start"
    if any(running.values()):
        return False, started
    return False, max(e["at"] for e in entries)


def note_job(run_dir: str, job: str, event: str, at: float) -> None:
    """Appends a start or end line for ``job`` to the run directory's job lines (nothing when it is not there)."""
    path = Path(run_dir) / JOBS_FILE
    if not Path(run_dir).is_dir():
        return
    line = (json.dumps({"job": job, "event": event, "at": round(at, 3)}) + "\n").encode()
    try:
        # One write of a whole line in append mode (jobs on one instance may write at once); readable and writable by
        # every job's user, whichever created it (the run directory is 1777).
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            if os.fstat(descriptor).st_uid == os.getuid():
                os.fchmod(descriptor, 0o666)
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
    except OSError:
        pass


def host_record(env: Mapping[str, str], *, job: str, started: float, run_dir: str = RUN_DIR,
                stat: str = "/proc/stat", imds: Any = None) -> Optional[dict]:
    """What the attempt's record keeps of its instance (ISO times), or None off the platform's instances (a laptop's
    boot is no instance's): ``instance_id``, ``availability_zone``, ``booted_at``, ``first_on_instance``,
    ``previous_job_ended_at`` (when the instance was last busy with another job), ``image_pull_started_at``,
    ``container_started_at``, ``task_arn``. Writes this job's start line."""
    instance_id = _read(run_dir, INSTANCE_ID_FILE)
    zone = _read(run_dir, AVAILABILITY_ZONE_FILE)
    if env.get("ML_PLATFORM_FLEET_NAME") and imds is not None:  # a fleet's job runs on its host: ask directly
        instance_id = instance_id or imds("instance-id")
        zone = zone or imds("placement/availability-zone")
    if instance_id is None:
        return None
    first, previous = previous_job_ended_at(run_dir, job, started)
    times = task_times(env)
    note_job(run_dir, job, "start", started)
    return {"instance_id": instance_id, "availability_zone": zone, "booted_at": _iso(booted_at(stat)),
            "first_on_instance": first, "previous_job_ended_at": _iso(previous),
            "image_pull_started_at": _iso(times["image_pull_started_at"]),
            "container_started_at": _iso(times["container_started_at"]), "task_arn": times["task_arn"]}
