"""A stateful stand-in for the AWS Batch API as the platform's functions call it (moto's Batch runs jobs in Docker,
which this machine lacks): job queues, compute environments, job definitions with revisions, jobs that move
through their states, and a job list that forgets finished jobs as Batch does after a while.

Errors are botocore's ClientError with Batch's codes, as boto3 raises them."""

from __future__ import annotations

import itertools
import re
import threading
from typing import Any, Callable, Optional

from botocore.exceptions import ClientError

ACCOUNT, REGION = "123456789012", "us-east-1"
ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}"
FINISHED = ("SUCCEEDED", "FAILED")
SUBMIT_KEYS = {"jobName", "jobQueue", "jobDefinition", "containerOverrides", "nodeOverrides", "tags", "propagateTags",
               "retryStrategy", "timeout", "parameters", "shareIdentifier", "schedulingPriorityOverride",
               "arrayProperties", "dependsOn"}


def client_error(operation: str, message: str, code: str = "ClientException") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class _Paginator:
    def __init__(self, call: Callable[..., dict]) -> None:
        self.call = call

    def paginate(self, **kwargs: Any) -> list[dict]:
        return [self.call(**kwargs)]


def _merged(container: dict, overrides: dict) -> dict:
    """A container as DescribeJobs shows it: the definition's, with the overrides over it (variables by name)."""
    merged = {**container, **{k: v for k, v in overrides.items() if k != "environment"}}
    if "environment" in overrides:
        names = {e["name"] for e in overrides["environment"]}
        merged["environment"] = [e for e in container.get("environment", []) if e["name"] not in names] + \
            list(overrides["environment"])
    return merged


class FakeBatch:
    def __init__(self) -> None:
        self.queues: dict[str, dict] = {}
        self.environments: dict[str, dict] = {}
        self.definitions: dict[str, dict] = {}  # revision ARN -> definition
        self.jobs: dict[str, dict] = {}
        self.forgotten: set[str] = set()  # jobs ListJobs no longer returns
        self.calls: list[tuple] = []
        self._ids = itertools.count(1)
        self.lock = threading.Lock()
        self.before_submit: Optional[Callable[[dict], None]] = None

    # --- setting up -------------------------------------------------------------------------------------------
    def add_environment(self, name: str, *, tags: dict, desired_vcpus: int = 0) -> str:
        arn = f"{ARN}:compute-environment/{name}"
        self.environments[arn] = {"computeEnvironmentName": name, "computeEnvironmentArn": arn, "state": "ENABLED",
                                  "tags": dict(tags), "computeResources": {"desiredvCpus": desired_vcpus}}
        return arn

    def add_queue(self, name: str, *, tags: dict, environments: tuple[str, ...] = (), state: str = "ENABLED") -> str:
        arn = f"{ARN}:job-queue/{name}"
        self.queues[arn] = {"jobQueueName": name, "jobQueueArn": arn, "state": state, "tags": dict(tags),
                            "computeEnvironmentOrder": [{"order": i + 1, "computeEnvironment": e}
                                                        for i, e in enumerate(environments)]}
        return arn

    def register(self, name: str, *, image: str = "img:1", command: tuple = ("python", "train.py"),
                 tags: Optional[dict] = None, environment: tuple = ()) -> str:
        """Registers the next revision of ``name`` and deregisters the previous one, as a CloudFormation update does."""
        revisions = [d for d in self.definitions.values() if d["jobDefinitionName"] == name]
        for old in revisions:
            old["status"] = "INACTIVE"
        revision = len(revisions) + 1
        arn = f"{ARN}:job-definition/{name}:{revision}"
        self.definitions[arn] = {"jobDefinitionName": name, "jobDefinitionArn": arn, "revision": revision,
                                 "status": "ACTIVE", "tags": dict(tags or {}),
                                 "containerProperties": {"image": image, "command": list(command),
                                                         "environment": [{"name": k, "value": v}
                                                                         for k, v in environment]}}
        return arn

    def add_job(self, name: str, queue: str, status: str, *, definition: str, environment: tuple = (),
                tags: Optional[dict] = None, started_at: Optional[int] = None) -> str:
        """A job in ``status``; ``started_at``: its attempt's startedAt (epoch milliseconds, as Batch gives it)."""
        job_id = f"job-{next(self._ids)}"
        self.jobs[job_id] = {"jobId": job_id, "jobArn": f"{ARN}:job/{job_id}", "jobName": name, "jobQueue": queue,
                             "status": status, "jobDefinition": definition, "tags": dict(tags or {}),
                             "propagateTags": True, "createdAt": len(self.jobs),
                             "container": {"command": list(self.definitions[definition]["containerProperties"]["command"]),
                                           "image": self.definitions[definition]["containerProperties"]["image"],
                                           "environment": [{"name": "AWS_BATCH_JOB_ATTEMPT", "value": "1"},
                                                           *[{"name": k, "value": v} for k, v in environment]],
                                           "resourceRequirements": [{"type": "GPU", "value": "1"}]}}
        if started_at is not None:
            self.jobs[job_id]["startedAt"] = started_at
        return job_id

    def finish(self, job_id: str, status: str = "SUCCEEDED") -> None:
        self.jobs[job_id]["status"] = status

    def end(self, job_id: str, exit_code: int) -> None:
        """The job's main container exits ``exit_code``: FAILED unless 0 (a multi-node job's main node is the job
        ``ID#0``, as DescribeJobs knows it)."""
        job = self.jobs[job_id]
        job["status"] = "SUCCEEDED" if exit_code == 0 else "FAILED"
        if "nodeProperties" in job:
            main = f"{job_id}#0"
            self.jobs[main] = {"jobId": main, "jobArn": f"{ARN}:job/{main}", "jobName": job["jobName"], "jobQueue": job["jobQueue"],
                               "status": job["status"], "tags": {}, "createdAt": job["createdAt"],
                               "container": {**job["nodeProperties"]["nodeRangeProperties"][0]["container"],
                                             "exitCode": exit_code}}
        else:
            job["container"]["exitCode"] = exit_code

    def forget_finished(self) -> None:
        """Batch lists finished jobs for a limited time only."""
        self.forgotten |= {j for j, job in self.jobs.items() if job["status"] in FINISHED}

    def submitted(self) -> list[dict]:
        return [call[1] for call in self.calls if call[0] == "submit"]

    # --- the API ----------------------------------------------------------------------------------------------
    def get_paginator(self, name: str) -> _Paginator:
        return _Paginator(getattr(self, name))

    def describe_job_queues(self, jobQueues: Optional[list] = None) -> dict:  # noqa: N803 (boto3 names)
        wanted = [q for q in self.queues.values()
                  if jobQueues is None or q["jobQueueArn"] in jobQueues or q["jobQueueName"] in jobQueues]
        return {"jobQueues": [dict(q, tags=dict(q["tags"])) for q in wanted]}

    def describe_compute_environments(self, computeEnvironments: list) -> dict:  # noqa: N803
        return {"computeEnvironments": [dict(self.environments[arn]) for arn in computeEnvironments
                                        if arn in self.environments]}

    def describe_job_definitions(self, jobDefinitions: Optional[list] = None, jobDefinitionName: Optional[str] = None,
                                 status: Optional[str] = None) -> dict:  # noqa: N803
        found = [d for d in self.definitions.values()
                 if (jobDefinitions is None or d["jobDefinitionArn"] in jobDefinitions)
                 and (jobDefinitionName is None or d["jobDefinitionName"] == jobDefinitionName)
                 and (status is None or d["status"] == status)]
        return {"jobDefinitions": [dict(d) for d in found]}

    def list_jobs(self, jobQueue: str, jobStatus: Optional[str] = None, filters: Optional[list] = None) -> dict:  # noqa: N803
        queue = self._queue(jobQueue, "ListJobs")
        jobs = [j for j in self.jobs.values() if j["jobQueue"] == queue["jobQueueArn"] and j["jobId"] not in self.forgotten
                and "#" not in j["jobId"]]  # a multi-node job's nodes are listed only with multiNodeJobId
        if filters:  # with a filter, jobStatus is ignored and every status is listed
            (only,) = filters
            assert only["name"] == "JOB_NAME", only
            jobs = [j for j in jobs if j["jobName"] in only["values"]]
        else:
            jobs = [j for j in jobs if j["status"] == (jobStatus or "RUNNING")]
        return {"jobSummaryList": [{k: j[k] for k in ("jobId", "jobArn", "jobName", "status", "createdAt")}
                                   | {k: j[k] for k in ("statusReason", "startedAt") if k in j} for j in jobs]}

    def describe_jobs(self, jobs: list) -> dict:
        return {"jobs": [dict(self.jobs[j], tags=dict(self.jobs[j]["tags"])) for j in jobs if j in self.jobs]}

    def update_job_queue(self, jobQueue: str, state: str) -> dict:  # noqa: N803
        self.calls.append(("queue", jobQueue, state))
        self._queue(jobQueue, "UpdateJobQueue")["state"] = state
        return {}

    def update_compute_environment(self, computeEnvironment: str, state: str) -> dict:  # noqa: N803
        self.calls.append(("environment", computeEnvironment, state))
        self.environments[computeEnvironment]["state"] = state
        return {}

    def terminate_job(self, jobId: str, reason: str) -> dict:  # noqa: N803
        self.calls.append(("terminate", jobId))
        job = self.jobs[jobId]
        if job["status"] in ("STARTING", "RUNNING"):
            job.update(status="FAILED", statusReason=reason)
        return {}

    def tag_resource(self, resourceArn: str, tags: dict) -> dict:  # noqa: N803
        self.calls.append(("tag", resourceArn, tags))
        self._resource(resourceArn)["tags"].update(tags)
        return {}

    def untag_resource(self, resourceArn: str, tagKeys: list) -> dict:  # noqa: N803
        self.calls.append(("untag", resourceArn, tagKeys))
        for key in tagKeys:
            self._resource(resourceArn)["tags"].pop(key, None)
        return {}

    def submit_job(self, **request: Any) -> dict:
        if self.before_submit is not None:
            self.before_submit(request)
        unknown = set(request) - SUBMIT_KEYS
        if unknown:
            raise TypeError(f"SubmitJob has no parameters {sorted(unknown)}")
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$", request["jobName"]):
            raise client_error("SubmitJob", f"Job name {request['jobName']!r} is invalid")
        with self.lock:
            queue = self._queue(request["jobQueue"], "SubmitJob")
            if queue["state"] != "ENABLED":
                raise client_error("SubmitJob", f"Job Queue {queue['jobQueueArn']} is not in ENABLED state")
            definition = self._definition(request["jobDefinition"])
            for entry in request.get("containerOverrides", {}).get("environment", []):
                if entry["name"].startswith("AWS_BATCH"):
                    raise client_error("SubmitJob", "Environment variables starting with AWS_BATCH are reserved")
            self.calls.append(("submit", dict(request)))
            job_id = f"job-{next(self._ids)}"
            container = _merged(definition["containerProperties"], request.get("containerOverrides", {}))
            self.jobs[job_id] = {"jobId": job_id, "jobArn": f"{ARN}:job/{job_id}", "jobName": request["jobName"],
                                 "jobQueue": queue["jobQueueArn"], "status": "SUBMITTED",
                                 "jobDefinition": definition["jobDefinitionArn"], "tags": dict(request.get("tags", {})),
                                 "propagateTags": request.get("propagateTags", False), "container": container,
                                 "createdAt": len(self.jobs)}
            nodes = request.get("nodeOverrides")
            if nodes:  # a multi-node parallel job: no container of its own, its node range's (DescribeJobs' shape)
                node_container = dict(definition["containerProperties"])
                for override in nodes.get("nodePropertyOverrides", []):
                    node_container = _merged(node_container, override.get("containerOverrides", {}))
                del self.jobs[job_id]["container"]
                self.jobs[job_id]["nodeProperties"] = {
                    "numNodes": nodes["numNodes"], "mainNode": 0,
                    "nodeRangeProperties": [{"targetNodes": "0:", "container": node_container}]}
        return {"jobId": job_id, "jobName": request["jobName"], "jobArn": f"{ARN}:job/{job_id}"}

    # --- lookups ----------------------------------------------------------------------------------------------
    def _queue(self, name_or_arn: str, operation: str) -> dict:
        for queue in self.queues.values():
            if name_or_arn in (queue["jobQueueArn"], queue["jobQueueName"]):
                return queue
        raise client_error(operation, f"Job Queue {name_or_arn} not found")

    def _definition(self, reference: str) -> dict:
        tail = reference.rsplit("/", 1)[-1]
        name, _, revision = tail.partition(":")
        revisions = [d for d in self.definitions.values() if d["jobDefinitionName"] == name]
        if revision:
            found = [d for d in revisions if d["revision"] == int(revision)]
        else:
            found = sorted((d for d in revisions if d["status"] == "ACTIVE"), key=lambda d: d["revision"])[-1:]
        if not found or found[0]["status"] != "ACTIVE":
            raise client_error("SubmitJob", f"Job definition {reference} is not found or INACTIVE")
        return found[0]

    def _resource(self, arn: str) -> dict:
        for collection in (self.queues, self.environments, self.definitions):
            if arn in collection:
                return collection[arn]
        return next(job for job in self.jobs.values() if job["jobArn"] == arn)
