"""Submits an endpoint's retraining job to its training queue when a drift alarm changes to ALARM, at most
once per cooldown, and tells the alert topic what it did (standard library and boto3 only).

EventBridge has no rate limit of its own, so the cooldown is read from the queue: a job of the same name
prefix created within it (whatever its state) means the drift is already being handled.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone


def handler(event: dict, context: object, batch=None, sns=None, now: float | None = None) -> dict:
    import boto3

    batch = batch or boto3.client("batch")
    sns = sns or boto3.client("sns")
    now = time.time() if now is None else now
    env = os.environ
    prefix, queue = env["JOB_NAME_PREFIX"], env["JOB_QUEUE"]
    alarm = event.get("detail", {}).get("alarmName", "a drift alarm")
    since_ms = int((now - int(env["COOLDOWN_SECONDS"])) * 1000)
    recent = []
    for status in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"):
        pages = batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus=status)
        recent += [job for page in pages for job in page.get("jobSummaryList", [])
                   if job["jobName"].startswith(prefix) and job.get("createdAt", 0) >= since_ms]
    if recent:
        message = (f"{alarm} is in ALARM; retraining not submitted: {recent[0]['jobName']} ({recent[0]['jobId']}) "
                   f"was submitted within the cooldown of {int(env['COOLDOWN_SECONDS']) // 3600} h.")
        result = {"submitted": False, "recent": recent[0]["jobId"]}
    else:
        name = f"{prefix}-{datetime.fromtimestamp(now, timezone.utc):%Y%m%d%H%M}"
        overrides = {"environment": [{"name": "ML_PLATFORM_JOB_NAME", "value": name}]}
        if env.get("CHECKPOINT_ROOT"):
            overrides["environment"].append({"name": "ML_PLATFORM_CHECKPOINT_URI",
                                             "value": f"{env['CHECKPOINT_ROOT']}{name}/"})
        job = batch.submit_job(jobName=name, jobQueue=queue, jobDefinition=env["JOB_DEFINITION"],
                               containerOverrides=overrides, propagateTags=True)
        message = (f"{alarm} is in ALARM: retraining job {name} ({job['jobId']}) submitted to {queue}. "
                   f"Follow it with ./platform job list ENV (or aws batch describe-jobs --jobs {job['jobId']}).")
        result = {"submitted": True, "jobId": job["jobId"], "jobName": name}
    sns.publish(TopicArn=env["TOPIC_ARN"], Subject="Retraining on drift", Message=message)
    print(message)
    return result
