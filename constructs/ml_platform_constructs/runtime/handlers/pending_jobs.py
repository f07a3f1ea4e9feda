"""Submissions waiting for a training queue to run again: the record a budget stop resumes from.

A job the budget stop ended, and a retraining that a stopped (disabled) queue refused, are each kept as the
SubmitJob request that runs them, in one Parameter Store SecureString under ``PENDING_PATH<job queue name>/``,
encrypted with a KMS key. The budget guard's resume submits every record of each queue it runs again, then
deletes it; ``budget status`` lists them. AWS Batch's own job list is no record: it forgets finished jobs after
a limited time. Standard library only: imported by the budget guard's and the retraining's Lambda functions.

Parameter Store encrypts a SecureString with the encryption context ``PARAMETER_ARN`` (the parameter's ARN), which
lets a reader decrypt records whatever key wrote them, and nothing else:
https://docs.aws.amazon.com/kms/latest/developerguide/services-parameter-store.html
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Optional

PENDING_PATH = "/ml-platform/pending-jobs/"
ACTIVE_STATES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
# Up to 4 KB a standard parameter; Intelligent-Tiering makes a larger request (up to 8 KB) an advanced one:
# https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-advanced-parameters.html
TIER = "Intelligent-Tiering"


def queue_name_of(job_queue: str) -> str:
    """A job queue's name from its ARN (``arn:...:job-queue/NAME``) or its name."""
    return job_queue.rsplit("/", 1)[-1]


def active_job(batch: Any, job_queue: str, job_name: str) -> Optional[dict]:
    """A job of this name waiting or running in the queue (ListJobs' JOB_NAME filter returns every status): a
    record whose job is already submitted is not submitted again."""
    pages = batch.get_paginator("list_jobs").paginate(
        jobQueue=job_queue, filters=[{"name": "JOB_NAME", "values": [job_name]}])
    return next((job for page in pages for job in page["jobSummaryList"]
                 if job["jobName"] == job_name and job.get("status") in ACTIVE_STATES), None)


def parameter_name(job_queue: str, leaf: str) -> str:
    return f"{PENDING_PATH}{queue_name_of(job_queue)}/{leaf}"


class PendingJobs:
    """The pending submissions of training queues, in Parameter Store. ``key_id`` encrypts what ``record`` writes;
    ``of_queue`` decrypts with whatever key wrote each record (``kms:Decrypt`` through Parameter Store); ``exists``
    decrypts nothing."""

    def __init__(self, ssm: Any, key_id: Optional[str] = None) -> None:
        self.ssm = ssm
        self.key_id = key_id

    def record(self, request: dict, *, leaf: str, source: str, now: datetime) -> str:
        """Keeps ``request`` (SubmitJob's arguments, ``jobQueue`` included) under ``leaf`` (letters, digits, ``-_.``);
        the same leaf again replaces it. ``source`` says who recorded it (``budget-stop``, ``retraining``)."""
        name = parameter_name(request["jobQueue"], leaf)
        body = json.dumps({"request": request, "source": source, "recorded": now.isoformat()},
                          separators=(",", ":"), sort_keys=True)
        options = {"KeyId": self.key_id} if self.key_id else {}
        self.ssm.put_parameter(Name=name, Value=body, Type="SecureString", Overwrite=True, Tier=TIER,
                               Description=f"ml-platform: {request['jobName']} waits for its queue ({source})"[:1024],
                               **options)
        return name

    def of_queue(self, job_queue: str) -> list[dict]:
        """Every record of one job queue: ``{"parameter", "request", "source", "recorded"}``, oldest first."""
        found = []
        pages = self.ssm.get_paginator("get_parameters_by_path").paginate(
            Path=f"{PENDING_PATH}{queue_name_of(job_queue)}", Recursive=True, WithDecryption=True)
        for page in pages:
            for parameter in page["Parameters"]:
                found.append({"parameter": parameter["Name"], **json.loads(parameter["Value"])})
        return sorted(found, key=lambda entry: entry["recorded"])

    def exists(self, job_queue: str, leaf: str) -> bool:
        """Whether the record ``leaf`` of one job queue is there, without decrypting it (no KMS key needed, whichever
        wrote it)."""
        try:
            self.ssm.get_parameter(Name=parameter_name(job_queue, leaf), WithDecryption=False)
        except Exception as error:  # botocore's ClientError
            if getattr(error, "response", {}).get("Error", {}).get("Code") == "ParameterNotFound":
                return False
            raise
        return True

    def forget(self, parameter: str) -> None:
        try:
            self.ssm.delete_parameter(Name=parameter)
        except Exception as error:  # botocore's ClientError; gone already is what was wanted
            if getattr(error, "response", {}).get("Error", {}).get("Code") != "ParameterNotFound":
                raise
