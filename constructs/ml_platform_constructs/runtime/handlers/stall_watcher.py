"""The stall watcher: stops a training queue's job that stopped progressing and could not stop itself.

A job stops itself on the stall rule (``ml_platform_job.health``: no step, evaluation batch nor ``progress()`` for
``stalled_minutes``), from its health timer thread. A job whose process hangs where that thread cannot act (a rank
stuck in a collective with the interpreter's lock held, a process in uninterruptible I/O, a thread that died) keeps
its GPUs until its timeout (24 hours by default). This function, on an EventBridge schedule every 5 minutes, stops
such a job from outside.

What it judges, for each RUNNING job of its queue's job queues (ListJobs, every page; then DescribeJobs):

- the job's health settings as the job reads them: ``HealthRules.from_env`` of the job's container environment (the
  job definition's, with a submission's overrides), the queue's where the job's have none (a multi-node parent);
  a job whose stall rule is off is never judged;
- its threshold: the stall rule's seconds + ``WATCHER_GRACE_SECONDS`` (15 minutes);
- a job whose current attempt has run shorter than the threshold is young: not judged yet;
- its heartbeat, ``MLPlatform/Health Progress`` {Queue, JobId}: the job prints a line of 0 when its helper starts
  (it is there, nothing done yet) and then, every minute it progresses, its steps and evaluation batches
  (``health.metric_line``). Two reads a run (GetMetricData): Sum per minute over the last ``STARTUP_FACTOR`` x stall +
  15 minutes and an hour (the longest window any job needs, whatever its age), and SampleCount per hour since the
  oldest attempt started (whether the job ever sent a line). Only buckets that start at or after the current
  attempt's start are its own (a retried job keeps its id). A job with no line of its own this attempt (a script
  without the platform's helper, or a job side older than 0.11 that has not stepped yet), or whose read did not
  complete, is never stopped, only counted ("not judged"); one with a line (progress, or a save's or restore's 0,
  "alive") in the last threshold window is progressing; one that has not progressed yet is starting up until its
  last line (the helper's start, a restore's end) is ``STARTUP_FACTOR`` x stall + 15 minutes old (the job's own
  allowance before its first step, plus the grace); any other is stalled, including one that hung before its first
  step (NCCL's start, a first compile) or in a save or restore longer than ``STARTUP_FACTOR`` x stall (the job side
  says alive that long).

A stalled job is stopped with TerminateJob, whose reason names the rule and the fix; Batch does not retry a
terminated job (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html), so the job ends FAILED and the
queue's failed-job rule tells the alert topic, with that reason. The watcher then publishes ``HealthStop`` {Queue,
Rule=stalled}, which fires the queue's stalled alarm with the fix. With the stall rule at "warn" (``health_mode=
"warn"``, or the rule's own action) it stops nothing and publishes ``HealthWarning`` once instead.

Idempotent: just before acting, the job is described again; only a job still RUNNING and without the
``ml-platform:health-watcher`` tag is acted on. The tag, put right after the stop (or the warning) and before the
metric, records the decision: a job that Batch has not ended yet (a container that ignores SIGTERM until ECS kills
it), seen again 5 minutes later, is neither stopped nor counted twice. A metric is published twice only if the tag
fails after a stop and the job is still RUNNING at the next run (Lambda's retry of a failed run, 1 and 2 minutes
later, is such a run: it lists and describes afresh); a run takes seconds (a 1-minute timeout, a 5-minute
schedule), so runs overlap only when retries of failed runs meet the next scheduled one.

Its error, stated:

- It guards against a job that holds its GPUs while nothing progresses, which its own stall rule did not stop.
- A false stop needs a job that progresses without a heartbeat reaching CloudWatch for the whole threshold (45
  minutes by default): lines that reach CloudWatch late (an embedded-metric line becomes a metric within minutes)
  land at their own timestamps, so a heartbeat delayed less than the window is still seen; the job's log driver
  dropping every line for 45 minutes would be needed. A script that progresses without the helper's heartbeat (no
  ``observe``/``progress`` in a long phase) sends none: a job that never sent one is never stopped, but one that did
  and then enters such a phase for longer than the threshold is stopped, as its own stall rule would have stopped it
  15 minutes earlier. A job whose stall rule is off (in code or through its environment) sends no heartbeat at all
  (``TrainingJob`` starts no timer), so it is never judged here either. A job that hangs before the helper starts
  (an ``init_process_group`` before ``TrainingJob.start`` that never returns) has sent nothing: it runs to its own
  time limit (the queue's ``timeout``).
- Why the job's own stop comes first: the watcher waits the stall rule's time plus 15 minutes, and runs every 5
  minutes after that; the job's rule fires at the stall time (its timer checks every minute at most) and exits 85,
  recording the rule in its run. The watcher's stop (SIGTERM, then SIGKILL after the queue's
  stop timeout) records nothing in the run: it is the fallback.
- Not seen: heartbeats older than 14 days (CloudWatch keeps 1-minute data 15 days); such a job reads as without a
  heartbeat, and is left alone.

Standard library and boto3; ``health.py`` (the job side's) sits beside it in the Lambda function's asset.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Optional

try:
    from ml_platform_job.health import (FIXES, HEALTH_NAMESPACE, HEARTBEAT_METRIC, JOB_DIMENSION, QUEUE_DIMENSION,
                                        RULE_DIMENSION, STARTUP_FACTOR, STOP_METRIC, WARNING_METRIC,
                                        WATCHER_GRACE_SECONDS, HealthConfigError, HealthRules)
except ImportError:  # in Lambda the job side's health.py sits at the top of the package
    from health import (FIXES, HEALTH_NAMESPACE, HEARTBEAT_METRIC, JOB_DIMENSION,  # type: ignore[no-redef]
                        QUEUE_DIMENSION, RULE_DIMENSION, STARTUP_FACTOR, STOP_METRIC, WARNING_METRIC,
                        WATCHER_GRACE_SECONDS, HealthConfigError, HealthRules)

RULE = "stalled"
WATCHER_TAG = "ml-platform:health-watcher"  # on a job the watcher stopped or warned of: "<action> stalled <time>"
REASON_PREFIX = "ml-platform health watcher:"
# TerminateJob's reason is kept to Batch's 255 characters, as the budget guard's.
REASON_LIMIT = 255
# DescribeJobs takes at most 100 job ids: https://docs.aws.amazon.com/batch/latest/APIReference/API_DescribeJobs.html
DESCRIBE_BATCH = 100
# GetMetricData: at most 500 queries a call, 100,800 data points a page (then NextToken); a start time over 3 hours
# ago needs a period that is a multiple of 60 s, and 1-minute data is kept 15 days:
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html
QUERIES_PER_CALL = 500
PERIOD_SECONDS = 60
PRESENCE_PERIOD_SECONDS = 3600  # whether a job ever sent a line: hourly counts (336 points a job in 14 days at most)
OLDEST_SECONDS = 14 * 86400
# The short fix TerminateJob's reason carries (the alarm's description carries health.FIXES["stalled"] whole).
SHORT_FIX = ("a hung DataLoader worker or storage, a rank stuck in a collective (set NCCL's timeout), a deadlock; "
             "long validations need progress()")

YOUNG, NO_HEARTBEAT, PROGRESSING, STALLED = "young", "no heartbeat", "progressing", "stalled"
READ_FAILED = "read failed"


def decide(*, running_seconds: float, threshold_seconds: float, startup_seconds: float, sent: bool,
           progressed: float, since_last_line: float = math.inf, complete: bool = True) -> str:
    """The watcher's decision for one job (a pure function): ``young`` while its attempt has run shorter than the
    threshold; ``read failed`` when its reads did not complete; ``no heartbeat`` when it sent no line this attempt
    (never stopped); else, with a line (progress, or a save or restore's "alive" 0, or the helper's start) younger than
    the threshold (``startup_seconds`` before any progress), ``progressing`` (``young`` before any progress), and
    ``stalled`` without one."""
    if running_seconds < threshold_seconds:
        return YOUNG
    if not complete:
        return READ_FAILED
    if not sent:
        return NO_HEARTBEAT
    allowed = threshold_seconds if progressed > 0 else startup_seconds
    if since_last_line < allowed:
        return PROGRESSING if progressed > 0 else YOUNG
    return STALLED


@dataclass(frozen=True)
class Settings:
    """The watcher's environment: ``JOB_QUEUES`` (comma-separated ARNs or names), ``QUEUE_NAME`` (the platform's
    queue name: the metrics' Queue dimension), and the queue's health variables (``ML_PLATFORM_HEALTH*``, what
    its job definitions pass), which are a job's settings where the job's environment has none."""
    job_queues: tuple[str, ...]
    queue_name: str
    queue_environment: Mapping[str, str]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Settings":
        return cls(job_queues=tuple(q for q in env["JOB_QUEUES"].split(",") if q), queue_name=env["QUEUE_NAME"],
                   queue_environment={k: v for k, v in env.items() if k.startswith("ML_PLATFORM_HEALTH")})


@dataclass
class Judged:
    """A RUNNING job old enough to judge: who it is, its heartbeat's Queue dimension, its current attempt's start,
    its threshold and the stall rule's action (stop or warn) as the job takes it."""
    job_id: str
    job_name: str
    job_arn: str
    queue: str  # the heartbeat's Queue dimension, as the job prints it
    attempt_start: float
    threshold: float
    action: str
    startup: float = 0.0  # the allowance before the first progress: STARTUP_FACTOR x stall + the grace
    previous_end: Optional[float] = None  # when the attempt before this one ended (a retried job keeps its id)

    def owns(self, at: float, period: float) -> bool:
        """Whether the bucket [at, at + period) holds this attempt's lines only: it ends after the attempt started,
        and the attempt before (same job id) had ended before it began."""
        return at + period > self.attempt_start and (self.previous_end is None or self.previous_end < at)
    decision: str = ""
    last_heartbeat: Optional[float] = None


def job_environment(job: Mapping[str, Any]) -> dict[str, str]:
    """A described job's container environment (a multi-node job's first node range's)."""
    container = job.get("container")
    if container is None:
        ranges = (job.get("nodeProperties") or {}).get("nodeRangeProperties") or []
        container = (ranges[0].get("container") if ranges else None) or {}
    return {e["name"]: e.get("value", "") for e in container.get("environment") or []}


def attempt_start(job: Mapping[str, Any]) -> Optional[float]:
    """When the job's current attempt started (epoch seconds): its startedAt, or its last ended attempt's end when
    later (a retried job)."""
    started = [job.get("startedAt")] + [a.get("stoppedAt") for a in job.get("attempts") or []]
    known = [s for s in started if isinstance(s, (int, float)) and s > 0]
    return max(known) / 1000 if known else None


def previous_end(job: Mapping[str, Any]) -> Optional[float]:
    """When the job's last ended attempt ended (epoch seconds), or None for a first attempt."""
    ended = [a.get("stoppedAt") for a in job.get("attempts") or []]
    known = [s for s in ended if isinstance(s, (int, float)) and s > 0]
    return max(known) / 1000 if known else None


def running_jobs(batch: Any, job_queues: Iterable[str]) -> list[dict]:
    """The RUNNING jobs of the job queues, described (ListJobs, every page; DescribeJobs, 100 at a time)."""
    ids: list[str] = []
    for queue in job_queues:
        for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus="RUNNING"):
            ids.extend(j["jobId"] for j in page["jobSummaryList"] if j["jobId"] not in ids)
    return describe(batch, ids)


def describe(batch: Any, ids: list[str]) -> list[dict]:
    jobs: list[dict] = []
    for i in range(0, len(ids), DESCRIBE_BATCH):
        jobs.extend(batch.describe_jobs(jobs=ids[i:i + DESCRIBE_BATCH])["jobs"])
    return jobs


def heartbeat_series(cloudwatch: Any, jobs: list[Judged], now: float
                     ) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[tuple[float, float]]]]:
    """Each job's heartbeat: (Sum per minute over the longest window any of them needs, SampleCount per hour since
    the oldest attempt started, at most 14 days back), as (timestamp, value) lists by job id."""
    if not jobs:
        return {}, {}
    # Per minute over the longest allowance and the hour before it: an attempt that started in that hour has its start
    # in this read (an hourly bucket that straddles an attempt's start is never taken as this attempt's).
    window = max(max(j.threshold, j.startup) for j in jobs) + PERIOD_SECONDS + PRESENCE_PERIOD_SECONDS
    recent = read_series(cloudwatch, jobs, start=now - window, end=now, period=PERIOD_SECONDS, stat="Sum")
    oldest = max(min(j.attempt_start for j in jobs), now - OLDEST_SECONDS)
    sent = read_series(cloudwatch, jobs, start=oldest, end=now, period=PRESENCE_PERIOD_SECONDS, stat="SampleCount")
    return recent, sent


def read_series(cloudwatch: Any, jobs: list[Judged], *, start: float, end: float, period: int,
                stat: str) -> dict[str, list[tuple[float, float]]]:
    """One statistic of each job's heartbeat, per ``period``, from ``start`` (down to the minute) to ``end``: 500
    queries a call, every NextToken page."""
    begin = datetime.fromtimestamp(start // PERIOD_SECONDS * PERIOD_SECONDS, timezone.utc)
    finish = datetime.fromtimestamp(end, timezone.utc)
    series: dict[str, list[tuple[float, float]]] = {j.job_id: [] for j in jobs}
    incomplete: set[str] = set()
    for first in range(0, len(jobs), QUERIES_PER_CALL):
        chunk = jobs[first:first + QUERIES_PER_CALL]
        ids = {f"job{i}": job.job_id for i, job in enumerate(chunk)}
        queries = [{"Id": query_id, "ReturnData": True, "MetricStat": {
            "Metric": {"Namespace": HEALTH_NAMESPACE, "MetricName": HEARTBEAT_METRIC, "Dimensions": [
                {"Name": QUEUE_DIMENSION, "Value": job.queue}, {"Name": JOB_DIMENSION, "Value": job.job_id}]},
            "Period": period, "Stat": stat}} for query_id, job in zip(ids, chunk)]
        request: dict[str, Any] = {"MetricDataQueries": queries, "StartTime": begin, "EndTime": finish}
        while True:
            page = cloudwatch.get_metric_data(**request)
            for result in page["MetricDataResults"]:
                series[ids[result["Id"]]].extend(
                    (stamp.timestamp(), value) for stamp, value in zip(result["Timestamps"], result["Values"]))
                # InternalError, Forbidden: nothing is known; PartialData is completed by the next page
                if result.get("StatusCode", "Complete") not in ("Complete", "PartialData"):
                    incomplete.add(ids[result["Id"]])
            if not page.get("NextToken"):
                break
            request["NextToken"] = page["NextToken"]
    for job_id in incomplete:  # a read that failed is no silence: the job is not judged this run
        series[job_id] = UNKNOWN
    return series


# A job's series whose read did not complete (read_series): judged "no heartbeat" this run, never stalled.
UNKNOWN: list[tuple[float, float]] = [(math.nan, math.nan)]


def _rules(job: Mapping[str, Any], settings: Settings) -> HealthRules:
    """The job's health settings as the job reads them: its own variables over the queue's."""
    own = {k: v for k, v in job_environment(job).items() if k.startswith("ML_PLATFORM_HEALTH")}
    return HealthRules.from_env({**settings.queue_environment, **own})


def reason_for(judged: Judged, now: float) -> str:
    """TerminateJob's reason: the rule, how long without a heartbeat, the fix (at most 255 characters)."""
    silent = (f"{(now - judged.last_heartbeat) / 60:.0f} min" if judged.last_heartbeat else
              f"over {judged.startup / 60:.0f} min")
    text = (f"{REASON_PREFIX} stalled, no progress heartbeat for {silent} (limit {judged.threshold / 60:.0f}); "
            f"not retried. Fix: {SHORT_FIX}")
    return text[:REASON_LIMIT]


def watch(batch: Any, cloudwatch: Any, settings: Settings, *, now: Optional[float] = None) -> dict:
    """One run: judges every RUNNING job of the queue and acts on the stalled ones; returns what it did per
    decision (job ids)."""
    now = time.time() if now is None else now
    report: dict[str, list[str]] = {"stopped": [], "warned": [], PROGRESSING: [], YOUNG: [], NO_HEARTBEAT: [],
                                    READ_FAILED: [],
                                    "already handled": [], "stall rule off": [], "bad settings": []}
    candidates: list[Judged] = []
    for job in running_jobs(batch, settings.job_queues):
        if job.get("status") != "RUNNING":
            continue
        if WATCHER_TAG in (job.get("tags") or {}):
            report["already handled"].append(job["jobId"])
            continue
        try:
            rules = _rules(job, settings)
        except HealthConfigError as error:
            print(f"{settings.queue_name}: job {job['jobId']} not judged: its health settings do not parse ({error})")
            report["bad settings"].append(job["jobId"])
            continue
        action = rules.action(RULE)
        if action == "off":
            report["stall rule off"].append(job["jobId"])
            continue
        start = attempt_start(job)
        threshold = rules.stall_seconds + WATCHER_GRACE_SECONDS
        environment = job_environment(job)
        judged = Judged(job_id=job["jobId"], job_name=job.get("jobName", ""), job_arn=job.get("jobArn", ""),
                        queue=environment.get("ML_PLATFORM_QUEUE_NAME") or settings.queue_name,
                        attempt_start=now if start is None else start, threshold=threshold, action=action,
                        startup=STARTUP_FACTOR * rules.stall_seconds + WATCHER_GRACE_SECONDS,
                        previous_end=previous_end(job))
        if now - judged.attempt_start < threshold:
            report[YOUNG].append(judged.job_id)
            continue
        candidates.append(judged)
    recent, sent = heartbeat_series(cloudwatch, candidates, now)
    for judged in candidates:
        minutes, hours = recent[judged.job_id], sent[judged.job_id]
        complete = minutes is not UNKNOWN and hours is not UNKNOWN
        lines = [(at, value) for at, value in minutes if judged.owns(at, PERIOD_SECONDS)] if complete else []
        beats = [(at, value) for at, value in lines if value > 0]
        judged.last_heartbeat = max((at for at, _ in beats), default=None)
        last_line = max((at for at, _ in lines), default=None)
        judged.decision = decide(
            running_seconds=now - judged.attempt_start, threshold_seconds=judged.threshold, startup_seconds=judged.startup,
            sent=bool(lines) or any(count > 0 for at, count in hours if judged.owns(at, PRESENCE_PERIOD_SECONDS)),
            progressed=sum(v for _, v in beats), complete=complete,
            # the age counts from the end of the line's minute: a doubt keeps the job running
            since_last_line=math.inf if last_line is None else now - last_line - PERIOD_SECONDS)
        if judged.decision == STALLED:
            report[_act(batch, cloudwatch, settings, judged, now) or "already handled"].append(judged.job_id)
        else:
            report[judged.decision].append(judged.job_id)
    if report[NO_HEARTBEAT]:
        print(f"{settings.queue_name}: {len(report[NO_HEARTBEAT])} running job(s) not judged: no heartbeat "
              f"({', '.join(report[NO_HEARTBEAT])}): a script without the platform's helper is never stopped here")
    print(f"{settings.queue_name}: " + "; ".join(f"{name} {len(ids)}" for name, ids in report.items() if ids)
          if any(report.values()) else f"{settings.queue_name}: no running job")
    return report


def _act(batch: Any, cloudwatch: Any, settings: Settings, judged: Judged, now: float) -> Optional[str]:
    """Stops (or warns of) a stalled job once: described again first, acted on only while RUNNING and untagged."""
    fresh = describe(batch, [judged.job_id])
    if not fresh or fresh[0].get("status") != "RUNNING" or WATCHER_TAG in (fresh[0].get("tags") or {}):
        return None
    stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    last = (datetime.fromtimestamp(judged.last_heartbeat, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            if judged.last_heartbeat else "none")
    if judged.action == "stop":
        batch.terminate_job(jobId=judged.job_id, reason=reason_for(judged, now))
    batch.tag_resource(resourceArn=fresh[0].get("jobArn") or judged.job_arn,
                       tags={WATCHER_TAG: f"{judged.action} {RULE} {stamp}"})
    metric = STOP_METRIC if judged.action == "stop" else WARNING_METRIC
    cloudwatch.put_metric_data(Namespace=HEALTH_NAMESPACE, MetricData=[{
        "MetricName": metric, "Value": 1.0, "Unit": "Count",
        "Timestamp": datetime.fromtimestamp(now, timezone.utc),
        "Dimensions": [{"Name": QUEUE_DIMENSION, "Value": settings.queue_name},
                       {"Name": RULE_DIMENSION, "Value": RULE}]}])
    done = "stopped" if judged.action == "stop" else "warned"
    print(f"{settings.queue_name}: job {judged.job_name} ({judged.job_id}) {done}: stalled, last progress heartbeat "
          f"{last}, threshold {judged.threshold / 60:.0f} min. Fix: {FIXES[RULE]}")
    return done


def handler(event: dict, context: object, batch: Any = None, cloudwatch: Any = None) -> dict:
    settings = Settings.from_env(os.environ)
    if batch is None or cloudwatch is None:
        import boto3

        batch = batch or boto3.client("batch")
        cloudwatch = cloudwatch or boto3.client("cloudwatch")
    return watch(batch, cloudwatch, settings)
