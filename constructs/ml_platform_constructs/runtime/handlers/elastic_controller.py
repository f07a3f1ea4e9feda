"""Resubmits an elastic job at the size it asked for (standard library and boto3): the Lambda function of
``ElasticTraining``, on AWS Batch's "Batch Job State Change" events of a TrainingQueue's job queues.

An elastic job (submitted with ``--nodes MIN:MAX``: tagged ``ml-platform:elastic``) that decides to resize saves a
checkpoint, writes ``resize-request.json`` next to it (``ml_platform_job.elastic``) and exits 86 (``RESIZE_EXIT_CODE``;
the queue's retry strategy ends it: it matches none of the RETRY entries). This function, on the job's FAILED event:

1. reads the main node's exit code (86, or the event is not a resize) and the request (which must name this job);
2. chooses the size: the one asked for, if it is one of the sizes the queue fits (``SIZES``: computed at synth from
   the multi-node environment's max vCPUs) and inside the job's own range, else the nearest one that is; one node runs
   on the single-node queue (Spot), two or more on the multi-node queue (On-Demand, its placement group), with the
   job definition the submission tagged for each (the same image);
3. respects the budget guard: while a stop holds (the target queue DISABLED) the job does not grow (the size stays
   at most the current one) and nothing is submitted: the submission is kept as a pending record that the budget
   guard's resume submits (``pending_jobs``), so a resize never turns a stopped queue back on;
4. claims the resize (``resize#<job id>`` in DynamoDB, conditional) before submitting, so that an event delivered twice
   resubmits once, and a function that died between its claim and the submission is taken over after
   ``STALE_CLAIM_SECONDS`` (a job of the same name already waiting or running counts as submitted);
5. resubmits under the same name (the same checkpoint prefix: the same run, its next attempt resumes from the resize's
   checkpoint) with the ended job's command, environment, GPUs and tags; writes its decision beside the checkpoints
   (``resizes/<job id>.json``: from, asked, to, why, the new job) and tells the alert topic once.

A job that exits 86 without a readable request (or one naming another job) is resubmitted at its own size: it stopped
to be resized, so it must go on; the alert says the request was missing.

Environment: JOB_QUEUE, MULTI_NODE_JOB_QUEUE (ARNs; either may be empty), SIZES (comma-separated), CHECKPOINT_ROOT
(``s3://BUCKET/checkpoints/<queue>/``), CLAIMS_TABLE, TOPIC_ARN, RECORD_KEY_ID.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from typing import Any, Optional
from urllib.parse import urlparse

try:
    from .pending_jobs import PendingJobs, active_job
    from .retrain import EXPIRES_ATTRIBUTE, Claims, ConditionFailed, alert_once, queue_enabled
except ImportError:  # in Lambda the modules sit at the top of the package
    from pending_jobs import PendingJobs, active_job  # type: ignore[no-redef]
    from retrain import EXPIRES_ATTRIBUTE, Claims, ConditionFailed, alert_once, queue_enabled  # type: ignore[no-redef]

# The job side's (ml_platform_job.elastic); the function's package does not carry the job side.
RESIZE_EXIT_CODE = 86
REQUEST_FILE = "resize-request.json"
DECISION_PREFIX = "resizes/"
ELASTIC_TAG = "ml-platform:elastic"  # "MIN:MAX" on an elastic job (job submit --nodes MIN:MAX)
SINGLE_NODE_DEFINITION_TAG = "ml-platform:elastic-single-node"  # the job definition (ARN) for 1 node
MULTI_NODE_DEFINITION_TAG = "ml-platform:elastic-multi-node"  # and for 2 or more
CHECKPOINT_URI = "ML_PLATFORM_CHECKPOINT_URI"
SIZES_VARIABLE = "ML_PLATFORM_ELASTIC_SIZES"
# A claim is a lease of one invocation: the function's timeout (ElasticTraining: 60 s). Past it, its invocation is
# over (done, failed and retried, or timed out), and Lambda's retry of the event, a minute or more later, takes over.
STALE_CLAIM_SECONDS = 60
CLAIM_DAYS = 30  # the claims' time to live: a job id is never reused, its claim only stops redeliveries
_RANGE = re.compile(r"^(\d+):(\d+)$")


def _main_node_exit(batch: Any, job: dict) -> Optional[int]:
    """The exit code the job's status follows: its container's, or a multi-node job's main node's."""
    if job.get("nodeProperties"):
        main = job["nodeProperties"].get("mainNode", 0)
        nodes = batch.describe_jobs(jobs=[f"{job['jobId']}#{main}"])["jobs"]
        container = (nodes[0].get("container") or {}) if nodes else {}
    else:
        container = job.get("container") or {}
    code = container.get("exitCode")
    return int(code) if isinstance(code, int) else None


def _container(job: dict) -> dict:
    if job.get("nodeProperties"):
        ranges = job["nodeProperties"].get("nodeRangeProperties") or [{}]
        return ranges[0].get("container") or {}
    return job.get("container") or {}


def _nodes(job: dict) -> int:
    return int((job.get("nodeProperties") or {}).get("numNodes") or 1)


def _s3_location(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def read_request(s3: Any, checkpoint_uri: str) -> Optional[dict]:
    bucket, prefix = _s3_location(checkpoint_uri)
    try:
        body = s3.get_object(Bucket=bucket, Key=prefix + REQUEST_FILE)["Body"].read()
        request = json.loads(body)
    except Exception:  # absent, unreadable, not JSON: no request
        return None
    return request if isinstance(request, dict) else None


def choose(asked: Any, current: int, low: int, high: int, sizes: list[int]) -> tuple[Optional[int], str]:
    """The size to run at, and why: ``asked`` if the queue fits it and the job's range holds it, else the nearest
    allowed size in the same direction (none: the current size, if allowed)."""
    allowed = [s for s in sizes if low <= s <= high]
    if not allowed:
        return None, f"no size the queue fits ({', '.join(map(str, sizes)) or 'none'}) is in the job's range {low}:{high}"
    if not isinstance(asked, int) or isinstance(asked, bool):
        return (current, "no valid size asked for: the job goes on at its own size") if current in allowed else \
            (allowed[0], f"no valid size asked for, and {current} node(s) is not allowed: the smallest allowed")
    if asked in allowed:
        return asked, "as asked"
    toward = [s for s in allowed if (current < s <= asked) or (asked <= s < current)]
    if toward:
        pick = max(toward) if asked > current else min(toward)
        return pick, f"{asked} node(s) is not allowed here (sizes {', '.join(map(str, allowed))}): the nearest on the way"
    return (current, f"{asked} node(s) is not allowed here: stays at {current}") if current in allowed else \
        (min(allowed, key=lambda s: abs(s - asked)), f"{asked} node(s) is not allowed here: the nearest allowed")


def _definition_container(definition: dict) -> dict:
    return definition.get("containerProperties") or \
        ((definition.get("nodeProperties") or {}).get("nodeRangeProperties") or [{}])[0].get("container") or {}


def own_environment(batch: Any, job: dict) -> list[dict]:
    """The variables the job's submission gave it: DescribeJobs merges its definition's own with them, and a
    resubmission that copied those would freeze them (a deploy's new sizes, tracking URI, health settings)."""
    environment = [e for e in _container(job).get("environment") or [] if not e.get("name", "").startswith("AWS_BATCH")]
    try:
        described = batch.describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"]
    except Exception:  # unreadable: every variable goes, as before a deploy
        return environment
    defined = {(e.get("name"), e.get("value")) for e in _definition_container(described[0]).get("environment") or []} \
        if described else set()
    return [e for e in environment if (e.get("name"), e.get("value")) not in defined]


def active_definition(batch: Any, tagged: str) -> tuple[Optional[str], str]:
    """(the definition to submit, a note): the tagged revision while ACTIVE; after a deploy deregistered it (a
    CloudFormation update registers a new revision and deregisters the old; Batch refuses an INACTIVE one), its
    family's latest active revision if it runs the same image (the run refuses another: its passport compares them);
    (None, why) otherwise."""
    family, _, revision = tagged.rsplit("/", 1)[-1].partition(":")
    image = None
    if revision:
        described = batch.describe_job_definitions(jobDefinitions=[tagged])["jobDefinitions"]
        if described and described[0].get("status") == "ACTIVE":
            return tagged, ""
        image = _definition_container(described[0]).get("image") if described else None
    active = [d for page in batch.get_paginator("describe_job_definitions").paginate(
        jobDefinitionName=family, status="ACTIVE") for d in page["jobDefinitions"]]
    if not active:
        return None, f"its job definition {family} has no active revision"
    latest = max(active, key=lambda d: d["revision"])
    now_image = _definition_container(latest).get("image")
    if image and now_image != image:
        return None, (f"a deploy replaced its job definition {tagged} with one of another image ({now_image}; the "
                      f"run's is {image}), which its run would refuse")
    return latest["jobDefinitionArn"], (f" Its definition {tagged} was deregistered (a deploy): resubmitted with "
                                        f"{latest['jobDefinitionArn']}.")


def resubmission(job: dict, nodes: int, queue: str, definition: str,
                 environment: Optional[list[dict]] = None, sizes: str = "") -> dict:
    """SubmitJob's arguments for the ended ``job`` at ``nodes``: its name, command, GPUs, tags and ``environment``
    (default: every variable it had but Batch's own; ``own_environment``: the submission's only)."""
    container = _container(job)
    if environment is None:
        environment = [e for e in container.get("environment") or [] if not e.get("name", "").startswith("AWS_BATCH")]
    if sizes:  # the queue's sizes now (a definition copy of another image keeps those of its submission)
        environment = [e for e in environment if e.get("name") != SIZES_VARIABLE] + [
            {"name": SIZES_VARIABLE, "value": sizes}]
    overrides: dict[str, Any] = {"environment": environment}
    if container.get("command"):
        overrides["command"] = list(container["command"])
    gpus = [r for r in container.get("resourceRequirements") or [] if r.get("type") == "GPU"]
    if gpus:
        overrides["resourceRequirements"] = gpus
    # Batch refuses a request's tag with AWS's reserved prefix, in its key or value, in any case (tag-restrictions)
    tags = {k: v for k, v in (job.get("tags") or {}).items()
            if not k.lower().startswith("aws:") and not str(v).lower().startswith("aws:")}
    request: dict[str, Any] = {"jobName": job["jobName"], "jobQueue": queue, "jobDefinition": definition,
                               "tags": tags, "propagateTags": True}
    if nodes > 1:
        request["nodeOverrides"] = {"numNodes": nodes, "nodePropertyOverrides": [
            {"targetNodes": "0:", "containerOverrides": overrides}]}
    else:
        request["containerOverrides"] = overrides
    return request


def handler(event: dict, context: object, batch: Any = None, s3: Any = None, sns: Any = None, dynamodb: Any = None,
            ssm: Any = None, now: Optional[float] = None) -> dict:
    import boto3

    batch = batch or boto3.client("batch")
    s3 = s3 or boto3.client("s3")
    claims = Claims(dynamodb or boto3.client("dynamodb"), os.environ["CLAIMS_TABLE"])
    pending = PendingJobs(ssm or boto3.client("ssm"), os.environ.get("RECORD_KEY_ID"))
    now = time.time() if now is None else now
    result = resize(event, dict(os.environ), batch, s3, claims, pending, now)
    if result.get("message"):
        alert_once(claims, sns or boto3.client("sns"), result, f"Elastic job {result.get('jobName') or ''}", now)
    print(json.dumps({k: v for k, v in result.items() if k != "message"}, sort_keys=True, default=str))
    return result


def resize(event: dict, env: dict, batch: Any, s3: Any, claims: Claims, pending: PendingJobs, now: float,
           owner: Optional[str] = None) -> dict:
    detail = event.get("detail") or {}
    event_id = event.get("id") or f"{detail.get('jobId')}@{event.get('time', '')}"
    base = {"event": event_id, "jobId": detail.get("jobId"), "jobName": detail.get("jobName"), "submitted": False}
    job_id = detail.get("jobId") or ""
    if detail.get("status") != "FAILED" or "#" in job_id:  # a node of a multi-node job: its parent's event decides
        return {**base, "skipped": "not a job that ended"}
    jobs = batch.describe_jobs(jobs=[job_id])["jobs"]
    if not jobs:
        return {**base, "skipped": "job not found (Batch lists finished jobs for a limited time)"}
    job = jobs[0]
    tags = job.get("tags") or {}
    code = _main_node_exit(batch, job)
    if code != RESIZE_EXIT_CODE:
        return {**base, "skipped": f"exit {code}: not a resize"}
    name, current = job["jobName"], _nodes(job)
    elastic = _RANGE.match(tags.get(ELASTIC_TAG, ""))
    if not elastic:
        return {**base, "skipped": "not elastic",
                "message": f"{name} ({job_id}) exited {RESIZE_EXIT_CODE} (a resize) but was not submitted elastic "
                           f"(no {ELASTIC_TAG} tag): not resubmitted. Resubmit it with ./platform job submit ENV QUEUE "
                           "--nodes MIN:MAX --name NAME (the same name resumes from its checkpoint)."}
    low, high = int(elastic.group(1)), int(elastic.group(2))
    checkpoint_uri = next((e["value"] for e in _container(job).get("environment") or []
                           if e.get("name") == CHECKPOINT_URI), "")
    root = env.get("CHECKPOINT_ROOT", "")
    if not root or not checkpoint_uri.startswith(root):
        return {**base, "skipped": "checkpoints elsewhere",
                "message": f"{name} ({job_id}) asked to be resized, but its checkpoints ({checkpoint_uri or 'none'}) "
                           f"are not under this queue's ({root or 'none'}): not resubmitted. Resubmit it by hand."}
    request = read_request(s3, checkpoint_uri)
    note = ""
    if request is None or request.get("job_id") not in (None, job_id):
        note = (f" Its request ({checkpoint_uri}{REQUEST_FILE}) was missing or another job's: it goes on at its own "
                "size.")
        asked: Any = current
    else:
        asked = request.get("to")
    sizes = [int(s) for s in env.get("SIZES", "").split(",") if s.strip().isdigit()]
    to, why = choose(asked, current, low, high, sizes)
    if to is None:
        return {**base, "skipped": "no size fits",
                "message": f"{name} ({job_id}) asked to be resized to {asked}: {why}. Not resubmitted."}
    queue = env.get("JOB_QUEUE", "") if to == 1 else env.get("MULTI_NODE_JOB_QUEUE", "")
    definition = tags.get(SINGLE_NODE_DEFINITION_TAG if to == 1 else MULTI_NODE_DEFINITION_TAG, "")
    if not queue or not definition:
        return {**base, "skipped": "no queue for the size",
                "message": f"{name} ({job_id}) asked for {to} node(s), but the queue has no "
                           f"{'single' if to == 1 else 'multi'}-node job queue or the job no definition tagged for it "
                           f"({SINGLE_NODE_DEFINITION_TAG if to == 1 else MULTI_NODE_DEFINITION_TAG}): not "
                           "resubmitted. Resubmit it with ./platform job submit --nodes MIN:MAX."}
    decision = {"job_id": job_id, "job_name": name, "from": current, "asked": asked, "to": to, "why": why,
                "reason": (request or {}).get("reason"), "at": now, "event": event_id,
                "estimate": {k: (request or {}).get(k) for k in ("restart_seconds", "restart_usd", "saved_seconds",
                                                                  "saved_usd")}}
    key = f"resize#{job_id}"
    # The claim's owner is this invocation (a fresh id each run): two deliveries of one event that run together are
    # two owners, and only one submits; the other returns (the owner's failure is retried by Lambda, and its retry
    # takes over the lease once it has expired).
    owner = owner or uuid.uuid4().hex
    try:
        claims.put({"pk": key, "event": event_id, "owner": owner, "state": "claimed", "at": now,
                    EXPIRES_ATTRIBUTE: int(now) + CLAIM_DAYS * 86400},
                   "attribute_not_exists(#pk) OR (#state = :claimed AND #at < :stale)",
                   {":claimed": "claimed", ":stale": now - STALE_CLAIM_SECONDS})
    except ConditionFailed as held:
        item = held.item or {}
        if item.get("state") != "claimed":
            return {**base, "redelivered": True, "state": item.get("state"), "newJobId": item.get("job_id")}
        if item.get("owner") != owner:  # another invocation is resubmitting it right now
            return {**base, "in_flight": True, "state": "claimed",
                    "note": f"another invocation claimed it at {item.get('at')} and is resubmitting it"}
    definition, moved = active_definition(batch, definition)
    if definition is None:
        claims.release(key, event_id)
        return {**base, "skipped": "no definition",
                "message": f"{name} ({job_id}) asked for {to} node(s), but {moved}: not resubmitted. Deploy the "
                           "queue, then resubmit it with ./platform job submit ENV QUEUE --nodes MIN:MAX --name "
                           f"{name} (the same name resumes from its checkpoint)."}
    note += moved
    environment = own_environment(batch, job)
    if not queue_enabled(batch, queue):
        # A budget stop holds: no growth, nothing submitted; the guard's resume submits the kept record.
        to = min(to, current)
        queue = env.get("JOB_QUEUE", "") if to == 1 else env.get("MULTI_NODE_JOB_QUEUE", "")
        tagged = tags.get(SINGLE_NODE_DEFINITION_TAG if to == 1 else MULTI_NODE_DEFINITION_TAG, "")
        if tagged and tagged != definition:
            definition = active_definition(batch, tagged)[0] or definition
        request_args = resubmission(job, to, queue, definition, environment, env.get("SIZES", ""))
        parameter = pending.record(request_args, leaf=f"resize-{name}", source="elastic-resize",
                                   now=_utc(now))
        decision.update(to=to, held="budget stop", pending=parameter)
        _write_decision(s3, checkpoint_uri, decision)
        claims.update(key, event_id, state="pending")
        return {**base, "pending": parameter, "to": to,
                "message": f"{name} asked to go from {current} to {asked} node(s), but its queue is stopped (a budget "
                           f"stop): kept pending at {to} node(s) in {parameter}; the budget guard's resume submits it "
                           f"(./platform budget resume ENV).{note}"}
    try:
        already = active_job(batch, queue, name)
        request_args = resubmission(job, to, queue, definition, environment, env.get("SIZES", ""))
        new_id = already["jobId"] if already is not None else batch.submit_job(**request_args)["jobId"]
        claims.update(key, event_id, state="submitted", job_id=new_id)
    except Exception:
        claims.release(key, event_id)  # the retry of this event submits it
        raise
    decision["new_job_id"] = new_id
    _write_decision(s3, checkpoint_uri, decision)
    return {**base, "submitted": True, "newJobId": new_id, "from": current, "to": to,
            "message": f"{name} resized from {current} to {to} node(s) ({why}; the job's reason: "
                       f"{(request or {}).get('reason') or 'none given'}): resubmitted as {new_id}, resuming from its "
                       f"checkpoint. Its resizes and their cost: ./platform job show ENV {new_id}.{note}"}


def _utc(now: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(now, timezone.utc)


def _write_decision(s3: Any, checkpoint_uri: str, decision: dict) -> None:
    """The controller's side of the resize, beside the checkpoints (one file per ended job: a redelivery rewrites the
    same); a failed write is said in the log, the resize stands."""
    bucket, prefix = _s3_location(checkpoint_uri)
    try:
        s3.put_object(Bucket=bucket, Key=f"{prefix}{DECISION_PREFIX}{decision['job_id']}.json",
                      Body=json.dumps(decision, sort_keys=True, default=str).encode())
    except Exception as error:
        print(f"the resize's record was not written beside the checkpoints ({type(error).__name__}: {error})")
