"""When each instance of a training queue ended, from the instance's own GPU metrics, for the goodput ledger's scale-in
idle (the paid time after the last job on an instance, until it terminated). Boto3 only at call time.

A queue's instances publish ``nvidia_smi_utilization_gpu`` every minute with the dimensions ``QueueName`` and
``InstanceId`` (the CloudWatch agent the platform installs: ``gpu_agent_config``), from their boot until they
terminate. The last minute with a datapoint is the instance's end, to about one collection interval (the agent stops
with the instance). CloudWatch keeps one-minute datapoints for 15 days, five-minute ones for 63 days and hourly ones
for 455 days, so an older end is known to its period; a call returns at most 100,800 datapoints, the rest behind its
NextToken (GetMetricData's API reference: https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/
API_GetMetricData.html). No datapoint after a job: the end is unknown, and the ledger says so.

``scale_in`` sets ``scale_in_seconds`` on the last attempt of every instance (over every run of the report: a later
job of another run on the same instance ends the first one's claim), the field the ledger counts as idle.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Optional

GPU_NAMESPACE = "MLPlatform/GPU"
METRIC = "nvidia_smi_utilization_gpu"
LOOK_AFTER_SECONDS = 6 * 3600  # an instance still running 6 hours after its last job: its end is beyond the report
QUERIES_PER_CALL = 500  # GetMetricData's limit of metric queries per call
BUSY_PERCENT = 5.0  # a GPU this busy after a job's end: another job ran there


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def period_for(age_seconds: float) -> int:
    """The finest period CloudWatch still keeps for datapoints this old."""
    if age_seconds < 15 * 86400:
        return 60
    if age_seconds < 63 * 86400:
        return 300
    return 3600


def last_jobs(records: Iterable[Mapping[str, Any]]) -> dict[str, dict]:
    """For each instance id, the attempt (a record's attempt dict) that ended last on it, over all ``records``
    (run records, as ``./platform runs show --json`` prints them)."""
    found: dict[str, dict] = {}
    for record in records:
        for attempt in (record.get("passport") or {}).get("attempts") or []:
            instance = (attempt.get("host") or {}).get("instance_id")
            end = attempt.get("ended_at") or attempt.get("last_seen_at")
            if not instance or not end or attempt.get("outcome") == "running":
                continue
            best = found.get(instance)
            if best is None or _epoch(end) > _epoch(best.get("ended_at") or best["last_seen_at"]):
                found[instance] = attempt
    return found


def instance_ends(cloudwatch: Any, queue: str, after: Mapping[str, float], *,
                  now: Optional[float] = None) -> dict[str, Optional[float]]:
    """Each instance's end after its last job (epoch seconds: the end of its last period with a GPU datapoint), looked
    for from ``after[instance]`` (that job's end) for LOOK_AFTER_SECONDS; None where no datapoint came after it. A
    period whose busiest GPU ran at BUSY_PERCENT or more means another job came to the instance (one of a run the
    report did not read): the instance was not idle, and its end is the job's end (no scale-in)."""
    now = time.time() if now is None else now
    ends: dict[str, Optional[float]] = {}
    items = sorted(after.items())
    for first in range(0, len(items), QUERIES_PER_CALL):
        chunk = items[first:first + QUERIES_PER_CALL]
        start = min(at for _, at in chunk)
        end = min(now, max(at for _, at in chunk) + LOOK_AFTER_SECONDS)
        period = period_for(now - start)
        queries = [{"Id": f"i{n}", "ReturnData": True, "MetricStat": {
            "Metric": {"Namespace": GPU_NAMESPACE, "MetricName": METRIC,
                       "Dimensions": [{"Name": "QueueName", "Value": queue}, {"Name": "InstanceId", "Value": instance}]},
            "Period": period, "Stat": "Maximum"}} for n, (instance, _) in enumerate(chunk)]
        seen: dict[str, list[tuple[float, float]]] = {}
        token = None
        while True:
            kwargs = {"MetricDataQueries": queries, "StartTime": datetime.fromtimestamp(start, timezone.utc),
                      "EndTime": datetime.fromtimestamp(max(end, start + period), timezone.utc)}
            if token:
                kwargs["NextToken"] = token
            page = cloudwatch.get_metric_data(**kwargs)
            for result in page.get("MetricDataResults", []):
                stamps = [t.timestamp() if hasattr(t, "timestamp") else float(t) for t in result.get("Timestamps", [])]
                values = list(result.get("Values", [])) + [0.0] * (len(stamps) - len(result.get("Values", [])))
                seen.setdefault(result["Id"], []).extend(zip(stamps, values))
            token = page.get("NextToken")
            if not token:
                break
        for n, (instance, job_end) in enumerate(chunk):
            points = sorted(p for p in seen.get(f"i{n}", [])
                            if p[0] + period > job_end and p[0] < job_end + LOOK_AFTER_SECONDS)
            if not points:
                ends[instance] = None
            elif any(value >= BUSY_PERCENT for stamp, value in points if stamp >= job_end):
                ends[instance] = job_end  # another job used its GPUs: that job's record claims the wait
            else:
                ends[instance] = points[-1][0] + period
    return ends


def apply(session: Any, entries: Iterable[tuple[Optional[str], Mapping[str, Any]]], *,
          now: Optional[float] = None) -> list[str]:
    """Sets ``scale_in_seconds`` on the last attempt of each instance of ``entries`` ((queue, passport) of every run
    the report read: a later job of any of them on an instance ends the claim of the ones before) from the queue's
    GPU metrics (``cloudwatch:GetMetricData`` with ``session``'s credentials); returns the notes."""
    from botocore.exceptions import BotoCoreError, ClientError

    by_queue: dict[str, list[dict]] = {}
    for queue, passport in entries:
        if queue:
            by_queue.setdefault(queue, []).append({"passport": passport})
    notes: list[str] = []
    for queue, records in sorted(by_queue.items()):
        last = last_jobs(records)
        if not last:
            continue
        after = {i: _epoch(a.get("ended_at") or a["last_seen_at"]) for i, a in last.items()}
        try:
            ends = instance_ends(session.client("cloudwatch"), queue, after, now=now)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            why = ("cloudwatch:GetMetricData is not allowed" if "AccessDenied" in code or "Unauthorized" in code
                   else f"{code or 'error'}")
            notes.append(f"queue {queue}: instance ends unread ({why}): scale-in after the last jobs not counted")
            continue
        except BotoCoreError as error:
            notes.append(f"queue {queue}: instance ends unread ({error}): scale-in after the last jobs not counted")
            continue
        notes += scale_in(records, ends)
    return notes


def scale_in(records: list[dict], ends: Mapping[str, Optional[float]]) -> list[str]:
    """Sets ``scale_in_seconds`` on the last attempt of each instance whose end is known (in place: the records are
    the report's copies); returns notes on the instances whose end is not."""
    notes = []
    for instance, attempt in last_jobs(records).items():
        end = ends.get(instance)
        job_end = _epoch(attempt.get("ended_at") or attempt["last_seen_at"])
        if end is None:
            notes.append(f"instance {instance}: no GPU metric after its last job: its scale-in is not counted")
            continue
        attempt["scale_in_seconds"] = round(max(0.0, end - job_end), 3)
    return notes
