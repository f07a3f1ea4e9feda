"""Training jobs on a TrainingQueue from anywhere boto3 runs, without the CDK: submit, list, logs, cancel.

The commands of ``python -m ml_platform_constructs job ...`` and of the platform app's ``./platform job``, and what a
team's own tooling calls (``submit_job``). A queue is found by its name (``TrainingQueue.queue_name``) from the tags
the construct sets: its job queues carry ``ml-platform:queue``, its own job definitions also
``ml-platform:job-definition`` (single-node or multi-node) and ``ml-platform:checkpoint-root``.

The job contract (README, "The job contract"): a submission sets, in the job's environment,
``ML_PLATFORM_CHECKPOINT_URI`` = ``<checkpoint root><job name>/`` and ``ML_PLATFORM_JOB_NAME``. Every attempt of the
job, and a resubmission under the same name, resumes from the newest checkpoint there: the name is the job's
identity.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from ..advice.gpu_catalog import GPU_CATALOG
from ..runtime.handlers.budget_guard import QUEUE_TAG, settable_tags

# An ECR image URI: account, Region, repository, then :tag or @digest (optional here, required of a job's image).
ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([a-z0-9][a-z0-9._/-]*)([:@]\S+)?$")
# Batch job names: https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
MULTI_NODE_NODES = (2, 8)
ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
FINISHED = ("SUCCEEDED", "FAILED")
SUBMITTED_SUFFIX = "-submitted"  # job definition family for images other than the queue's own

# The job contract's names, and the tags a TrainingQueue's own job definitions carry.
CHECKPOINT_URI = "ML_PLATFORM_CHECKPOINT_URI"
JOB_NAME_VARIABLE = "ML_PLATFORM_JOB_NAME"
DEFINITION_TAG = "ml-platform:job-definition"
CHECKPOINT_ROOT_TAG = "ml-platform:checkpoint-root"
SINGLE_NODE, MULTI_NODE, EVALUATION = "single-node", "multi-node", "evaluation"
# Elastic jobs (TrainingQueue's elastic_max_nodes): the sizes the queue's job definitions give their jobs, the range
# a submission gives the job, and the tags its controller reads (runtime/handlers/elastic_controller.py).
ELASTIC_SIZES_VARIABLE = "ML_PLATFORM_ELASTIC_SIZES"
ELASTIC_VARIABLE = "ML_PLATFORM_ELASTIC"
ELASTIC_TAG = "ml-platform:elastic"
ELASTIC_DEFINITION_TAGS = {SINGLE_NODE: "ml-platform:elastic-single-node", MULTI_NODE: "ml-platform:elastic-multi-node"}
Nodes = Union[int, tuple[int, int]]  # N, or an elastic job's (MIN, MAX)


class JobError(SystemExit):
    """Bad input or a queue that is not there: one line that says what to do, raised before any change."""

    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


def image_problem(uri: str) -> Optional[str]:
    """What is wrong with ``uri`` as a job's image, or None: Batch pulls from Amazon ECR, and a queue never runs
    whatever "latest" is when the job starts."""
    match = ECR_IMAGE.match(uri)
    if not match:
        return ("not an Amazon ECR image (ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG or @sha256:DIGEST): push it "
                "to ECR first")
    if not match.group(4):
        return (f"no tag or digest: name the image's version, {uri}:TAG or {uri}@sha256:DIGEST (a job never runs "
                "whatever 'latest' is when it starts)")
    return None


def is_tagged_ecr_image(uri: str) -> bool:
    return image_problem(uri) is None


@dataclass(frozen=True)
class QueueTarget:
    """What a submission needs to know of a TrainingQueue: its job queues, job definitions, instance types and
    checkpoint root (``s3://BUCKET/checkpoints/<queue>/``; empty when the queue has no dataset bucket)."""
    name: str
    job_queue: str
    job_definition: str
    instance_types: tuple[str, ...]
    checkpoint_root: str = ""
    multi_node_job_queue: Optional[str] = None
    multi_node_job_definition: Optional[str] = None
    multi_node_instance_types: tuple[str, ...] = ()
    capacity: str = ""  # how much the queue may run, for messages
    evaluation_job_definition: Optional[str] = None  # the promotion gate's evidence (TrainingQueue with datasets)
    multi_node_max_vcpus: int = 0
    elastic_sizes: tuple[int, ...] = ()  # the sizes an elastic job may run at; empty: the queue has no elastic jobs

    def job_queues(self) -> list[tuple[str, str]]:
        """(label, ARN) of each job queue."""
        return [*([(self.name, self.job_queue)] if self.job_queue else []),
                *([(f"{self.name} (multi-node)", self.multi_node_job_queue)] if self.multi_node_job_queue else [])]


@dataclass(frozen=True)
class Submission:
    target: QueueTarget
    image: str
    command: list[str]
    name: str
    gpus: int
    nodes: int
    tags: Mapping[str, str] = field(default_factory=dict)
    elastic: Optional[tuple[int, int]] = None  # (MIN, MAX): an elastic job, starting at MIN (``nodes``)

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def checkpoint_uri(self) -> Optional[str]:
        return f"{self.target.checkpoint_root}{self.name}/" if self.target.checkpoint_root else None


def _pages(client: Any, operation: str, key: str, **kwargs: Any) -> Iterable[dict]:
    for page in client.get_paginator(operation).paginate(**kwargs):
        yield from page[key]


def find_queue(batch: Any, name: str) -> QueueTarget:
    """The TrainingQueue named ``name`` in the client's account and Region, from its tags."""
    queues = [q for q in _pages(batch, "describe_job_queues", "jobQueues") if q.get("tags", {}).get(QUEUE_TAG) == name]
    if not queues:
        known = sorted({q["tags"][QUEUE_TAG] for q in _pages(batch, "describe_job_queues", "jobQueues")
                        if QUEUE_TAG in q.get("tags", {})})
        raise JobError(f"no training queue {name!r} in this account and Region (training queues there: "
                       f"{', '.join(known) or 'none'}): pass TrainingQueue.queue_name, and --region if it is elsewhere")
    environments = {e["computeEnvironmentArn"]: e for e in batch.describe_compute_environments(computeEnvironments=[
        o["computeEnvironment"] for q in queues for o in q["computeEnvironmentOrder"]])["computeEnvironments"]}
    single, multi = None, None
    for queue in queues:
        resources = [environments[o["computeEnvironment"]].get("computeResources", {})
                     for o in queue["computeEnvironmentOrder"] if o["computeEnvironment"] in environments]
        types = tuple(sorted({t for r in resources for t in r.get("instanceTypes", [])}))
        vcpus = sum(r.get("maxvCpus", 0) for r in resources)
        if any(r.get("placementGroup") for r in resources):  # only the multi-node environment has one
            multi = (queue["jobQueueArn"], types, vcpus)
        else:
            single = (queue["jobQueueArn"], types, vcpus)
    definitions: dict[str, dict] = {}
    for definition in _pages(batch, "describe_job_definitions", "jobDefinitions", status="ACTIVE"):
        if definition["jobDefinitionName"].endswith(SUBMITTED_SUFFIX):
            continue  # job_definition_for's copies carry the same tags, but their revisions count in another family
        tags = definition.get("tags", {})
        kind = tags.get(DEFINITION_TAG)
        newer = definition["revision"] > definitions.get(kind, {}).get("revision", 0)
        if tags.get(QUEUE_TAG) == name and kind and newer:
            definitions[kind] = definition
    multi_node = multi is not None and MULTI_NODE in definitions
    single_node = single is not None and SINGLE_NODE in definitions
    if (single is not None and not single_node) or not (single_node or multi_node):  # untagged: an older version
        raise JobError(f"training queue {name!r} has no job queue or job definition of its own here (deployed with an "
                       "older ml_platform_constructs?): deploy it with this version")
    root = definitions[SINGLE_NODE if single_node else MULTI_NODE].get("tags", {}).get(CHECKPOINT_ROOT_TAG, "")
    sizes = _definition_variable(definitions[MULTI_NODE] if multi_node else definitions[SINGLE_NODE],
                                 ELASTIC_SIZES_VARIABLE)
    capacity = "; ".join(([f"up to {single[2]} vCPUs"] if single_node else ["multi-node only"])
                         + ([f"multi-node up to {multi[2]} vCPUs"] if multi_node else []))
    return QueueTarget(
        name=name, job_queue=single[0] if single_node else "",
        job_definition=definitions[SINGLE_NODE]["jobDefinitionArn"] if single_node else "",
        instance_types=single[1] if single_node else (), checkpoint_root=root,
        multi_node_job_queue=multi[0] if multi_node else None,
        multi_node_job_definition=definitions[MULTI_NODE]["jobDefinitionArn"] if multi_node else None,
        multi_node_instance_types=multi[1] if multi_node else (),
        capacity=capacity,
        evaluation_job_definition=definitions[EVALUATION]["jobDefinitionArn"] if EVALUATION in definitions else None,
        multi_node_max_vcpus=multi[2] if multi_node else 0,
        elastic_sizes=tuple(int(p) for p in sizes.split(",") if p.strip().isdigit()))


def _definition_variable(definition: Mapping[str, Any], name: str) -> str:
    """A variable of a job definition's container (a multi-node one's first node range's)."""
    container = definition.get("containerProperties") or \
        ((definition.get("nodeProperties") or {}).get("nodeRangeProperties") or [{}])[0].get("container") or {}
    return next((e.get("value", "") for e in container.get("environment") or [] if e.get("name") == name), "")


def check_submission(target: QueueTarget, image: str, command: Sequence[str], *, gpus: Optional[int] = None,
                     nodes: Nodes = 1, name: Optional[str] = None,
                     tags: Optional[Mapping[str, str]] = None) -> Submission:
    """Every check that needs no AWS call: a job that fits no type would wait RUNNABLE for ever. ``nodes``: N, or
    (MIN, MAX) for an elastic job (it starts at MIN)."""
    elastic = None
    if isinstance(nodes, tuple):
        elastic = check_elastic(target, nodes)
        nodes = elastic[0]
    problem = image_problem(image)
    if problem:
        raise JobError(f"--image {image!r}: {problem}")
    if not command:
        raise JobError("no command: put it after --, e.g. -- python train.py --epochs 90")
    if nodes == 1:
        if not target.instance_types and target.multi_node_instance_types:
            raise JobError(f"--nodes 1: queue {target.name} is multi-node only (TrainingQueue without instance_types); "
                           f"submit with --nodes {MULTI_NODE_NODES[0]}-{MULTI_NODE_NODES[1]}, or use a queue with "
                           "single-node types")
        types = target.instance_types
    else:
        if not target.multi_node_instance_types:
            raise JobError(f"--nodes {nodes}: queue {target.name} has no multi-node environment (TrainingQueue's "
                           "multi_node_instance_types and multi_node_max_vcpus); submit with --nodes 1")
        if not MULTI_NODE_NODES[0] <= nodes <= MULTI_NODE_NODES[1]:
            raise JobError(f"--nodes {nodes}: multi-node jobs take {MULTI_NODE_NODES[0]}-{MULTI_NODE_NODES[1]} nodes")
        types = target.multi_node_instance_types
    known = [GPU_CATALOG[t] for t in types if t in GPU_CATALOG]
    per_instance = min((e.gpu_count for e in known), default=None)
    if per_instance is None:
        raise JobError(f"queue {target.name}: none of its types ({', '.join(types) or 'none'}) is a catalog GPU type")
    gpus = per_instance if gpus is None else gpus
    if not 1 <= gpus <= per_instance:
        kind = "multi-node " if nodes > 1 else ""
        raise JobError(f"--gpus {gpus}: the queue's {kind}types ({', '.join(types)}) have {per_instance} GPU(s) per "
                       f"instance; ask for 1-{per_instance} (more GPUs: --nodes, or a queue of larger types)")
    if elastic is not None and elastic[1] > 1:  # a resize keeps the job's GPUs per node: every size's types hold them
        multi = [GPU_CATALOG[t].gpu_count for t in target.multi_node_instance_types if t in GPU_CATALOG]
        if multi and gpus > min(multi):
            raise JobError(f"--gpus {gpus}: an elastic job keeps its GPUs per node when it resizes, and the queue's "
                           f"multi-node types ({', '.join(target.multi_node_instance_types)}) have {min(multi)}; ask "
                           f"--gpus {min(multi)}")
    if not name:
        raise JobError(f"--name is required: it is the job's identity (checkpoints under checkpoints/{target.name}/"
                       "NAME/), so a resubmission under the same name resumes and a new name starts fresh")
    if not JOB_NAME.match(name):
        raise JobError(f"--name {name!r}: 1-128 letters, digits, '-' or '_', starting with a letter or digit")
    return Submission(target=target, image=image, command=list(command), name=name, gpus=gpus, nodes=nodes,
                      tags=dict(tags or {}), elastic=elastic)


def check_elastic(target: QueueTarget, nodes: tuple[int, int]) -> tuple[int, int]:
    """An elastic job's (MIN, MAX) against the queue: its controller is there, and MIN and MAX are sizes it runs."""
    low, high = nodes
    spec = f"--nodes {low}:{high}"
    if not 1 <= low < high <= MULTI_NODE_NODES[1]:
        raise JobError(f"{spec}: an elastic range is MIN:MAX with 1 <= MIN < MAX <= {MULTI_NODE_NODES[1]}, e.g. 1:8")
    sizes = target.elastic_sizes
    if not sizes:
        raise JobError(f"{spec}: queue {target.name} has no elastic jobs (nothing would resubmit a resized job); "
                       "deploy it with TrainingQueue(elastic_max_nodes=...) (config: elastic_max_nodes), or submit "
                       f"--nodes N")
    inside = [s for s in sizes if low <= s <= high]
    if low not in sizes or len(inside) < 2:
        raise JobError(f"{spec}: queue {target.name} runs elastic jobs at {', '.join(map(str, sizes))} node(s); "
                       f"MIN must be one of them and MIN:MAX hold two, e.g. --nodes {sizes[0]}:{sizes[-1]}")
    if high > sizes[-1]:
        raise JobError(f"{spec}: queue {target.name}'s multi-node environment fits at most {sizes[-1]} nodes "
                       f"({target.capacity or 'its max vCPUs'}); ask --nodes {low}:{sizes[-1]}")
    return low, high


def job_definition_for(batch: Any, definition_arn: str, image: str) -> str:
    """The queue's job definition, or a revision of it with another image (Batch cannot override the image)."""
    definition = batch.describe_job_definitions(jobDefinitions=[definition_arn])["jobDefinitions"][0]
    containers = ([definition["containerProperties"]] if "containerProperties" in definition else
                  [r["container"] for r in definition["nodeProperties"]["nodeRangeProperties"]])
    if all(c["image"] == image for c in containers):
        return definition_arn
    for container in containers:
        container["image"] = image
    fields = {k: definition[k] for k in ("type", "parameters", "retryStrategy", "timeout", "propagateTags",
                                         "platformCapabilities", "containerProperties", "nodeProperties", "tags")
              if k in definition}
    if "tags" in fields:  # the definition's own tags, by which find_queue knows it; not AWS's
        fields["tags"] = settable_tags(fields["tags"])
    return batch.register_job_definition(
        jobDefinitionName=definition["jobDefinitionName"].removesuffix(SUBMITTED_SUFFIX) + SUBMITTED_SUFFIX,
        **fields)["jobDefinitionArn"]


def submit(batch: Any, submission: Submission) -> dict:
    """Submits the job with the contract's environment; returns its id, name and checkpoint URI."""
    target = submission.target
    queue_arn = target.multi_node_job_queue if submission.multi_node else target.job_queue
    definition = target.multi_node_job_definition if submission.multi_node else target.job_definition
    environment = [{"name": JOB_NAME_VARIABLE, "value": submission.name}]
    if submission.checkpoint_uri:
        environment.insert(0, {"name": CHECKPOINT_URI, "value": submission.checkpoint_uri})
    overrides = {"command": submission.command, "environment": environment,
                 "resourceRequirements": [{"type": "GPU", "value": str(submission.gpus)}]}
    tags = {QUEUE_TAG: target.name, **submission.tags}
    kind = MULTI_NODE if submission.multi_node else SINGLE_NODE
    chosen = {kind: job_definition_for(batch, definition, submission.image)}
    if submission.elastic is not None:  # the range for the job's policy; for the controller, the range and the
        # definition of each kind with this image (a resize may move the job between the two job queues)
        environment.append({"name": ELASTIC_VARIABLE, "value": "{}:{}".format(*submission.elastic)})
        tags[ELASTIC_TAG] = "{}:{}".format(*submission.elastic)
        for each, arn in ((SINGLE_NODE, target.job_definition), (MULTI_NODE, target.multi_node_job_definition)):
            if arn:
                if each not in chosen:
                    chosen[each] = job_definition_for(batch, arn, submission.image)
                tags[ELASTIC_DEFINITION_TAGS[each]] = chosen[each]
    request = {"jobName": submission.name, "jobQueue": queue_arn, "jobDefinition": chosen[kind],
               "tags": tags, "propagateTags": True}
    if submission.multi_node:
        request["nodeOverrides"] = {"numNodes": submission.nodes, "nodePropertyOverrides": [
            {"targetNodes": "0:", "containerOverrides": overrides}]}
    else:
        request["containerOverrides"] = overrides
    job = batch.submit_job(**request)
    return {"job_id": job["jobId"], "job_name": submission.name, "checkpoint_uri": submission.checkpoint_uri}


def submit_evaluation(batch: Any, target: QueueTarget, *, name: str, command: Sequence[str],
                      environment: Mapping[str, str], tags: Optional[Mapping[str, str]] = None) -> dict:
    """Submits an evaluation job (the queue's evaluation definition: a role that reads datasets and models and alone
    writes ``evaluations/<queue>/``) with ``environment`` added to the job contract's; returns its id and name. It runs
    the deployed revision as it is: ``grant_evaluate`` allows that revision only, and no registration of another
    (0.13.0 removed the deprecated ``image``: deploy the queue with the evaluation's image).

    Deprecated since 0.14.0, removed in 0.16.0, with ``TrainingQueue.grant_evaluate``: the caller chooses the command.
    Invoke an ``EvaluationSubmitter``'s function instead (``invoke_evaluation``), which submits the deployed one."""
    warnings.warn("jobs.submit_evaluation is deprecated since 0.14.0 and removed in 0.16.0: invoke the queue's "
                  "EvaluationSubmitter (jobs.invoke_evaluation), which runs the command deployed for the endpoint",
                  DeprecationWarning, stacklevel=2)
    if not target.evaluation_job_definition or not target.job_queue:
        raise JobError(f"training queue {target.name!r} has no evaluation job definition (a TrainingQueue with a "
                       "dataset bucket has one since ml_platform_constructs 0.5.0): deploy it with this version")
    if not JOB_NAME.match(name):
        raise JobError(f"evaluation name {name!r}: 1-128 letters, digits, '-' or '_'")
    job = batch.submit_job(
        jobName=name, jobQueue=target.job_queue, jobDefinition=target.evaluation_job_definition,
        containerOverrides={"command": list(command),
                            "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())]},
        tags={QUEUE_TAG: target.name, **(tags or {})}, propagateTags=True)
    return {"job_id": job["jobId"], "job_name": name}


def invoke_evaluation(lambda_client: Any, function: str, *, endpoint: str, run_id: str, candidate_model: str,
                      live_run_id: str = "", live_model: str = "", expected_output: str = "") -> dict:
    """Asks an ``EvaluationSubmitter``'s ``function`` (name or ARN) to submit the evaluation of ``run_id`` against
    ``live_run_id`` (empty: the configured baseline) with the command deployed for ``endpoint``; returns its answer
    (``job_id``, ``job_name``, ``output``, ``command``, ``submitted``: false when the same evaluation was already
    waiting or running). With ``expected_output`` (where the caller will read the evidence) the function refuses to
    submit an evaluation that writes elsewhere. A refusal or a failure of the function is a ``JobError`` in one
    line."""
    payload = {"endpoint": endpoint, "run_id": run_id, "candidate_model": candidate_model,
               "live_run_id": live_run_id, "live_model": live_model, "expected_output": expected_output}
    response = lambda_client.invoke(FunctionName=function, InvocationType="RequestResponse",
                                    Payload=json.dumps(payload).encode())
    body = response["Payload"].read()
    try:
        answer = json.loads(body or b"null")
    except ValueError:
        answer = None
    if response.get("FunctionError") or not isinstance(answer, dict):
        reason = answer.get("errorMessage") if isinstance(answer, dict) else None
        raise JobError(f"the evaluation submitter {function} failed ({reason or repr(body[:200])}): see its log group, "
                       "then evaluate again")
    if answer.get("refused"):
        raise JobError(f"the evaluation submitter refused: {answer['refused']}")
    return answer


def submitted_lines(submission: Submission, job: Mapping[str, Any], follow: str) -> list[str]:
    target = submission.target
    nodes = f"multi-node, {submission.nodes} nodes, " if submission.multi_node else ""
    if submission.elastic is not None:
        nodes = "elastic {}:{}, starting at {} node(s), ".format(*submission.elastic, submission.nodes)
    lines = [f"submitted {submission.name}: job id {job['job_id']}",
             f"  queue {target.name} ({nodes}{submission.gpus} GPU(s) per instance): {target.capacity}"]
    lines.append(f"  checkpoints: {submission.checkpoint_uri} (every attempt resumes from the newest)"
                 if submission.checkpoint_uri else "  checkpoints: none (the queue has no dataset bucket)")
    return [*lines, f"  follow it: {follow}"]


def list_jobs(batch: Any, job_queues: Sequence[tuple[str, str]]) -> list[str]:
    """Every job of the (label, ARN) job queues, by state."""
    lines = []
    for label, arn in job_queues:
        for status in ACTIVE + FINISHED:
            for job in _pages(batch, "list_jobs", "jobSummaryList", jobQueue=arn, jobStatus=status):
                lines.append(f"{label}: {job['jobName']} {job['jobId']} {status}"
                             + (f" ({job['statusReason']})" if job.get("statusReason") else ""))
    return lines or [f"no jobs on {', '.join(label for label, _ in job_queues) or 'any queue'}"]


def describe(batch: Any, job_id: str, job_queues: Sequence[str], where: str) -> dict:
    """The job, if it is on one of ``job_queues`` (ARNs); ``where`` names them in the error."""
    jobs = batch.describe_jobs(jobs=[job_id])["jobs"]
    if not jobs:
        raise JobError(f"job {job_id!r} not found in {where}")
    job = jobs[0]
    if job["jobQueue"] not in job_queues:
        raise JobError(f"job {job_id} is on {job['jobQueue']}, not on {where}: nothing done")
    return job


def job_logs(logs_client: Any, job: Mapping[str, Any]) -> list[str]:
    """Every attempt's log, in order."""
    container = job.get("container") or {}
    group = (container.get("logConfiguration") or {}).get("options", {}).get("awslogs-group")
    streams = [a["container"]["logStreamName"] for a in job.get("attempts", [])
               if a.get("container", {}).get("logStreamName")]
    if container.get("logStreamName") and container["logStreamName"] not in streams:
        streams.append(container["logStreamName"])
    if not group or not streams:
        return [f"{job['jobName']} ({job['status']}): no log stream yet"]
    lines = []
    for number, stream in enumerate(streams, 1):
        lines.append(f"--- attempt {number}: {group} {stream}")
        events = logs_client.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=True)["events"]
        lines += [event["message"] for event in events]
    return lines


def cancel(batch: Any, job: Mapping[str, Any], reason: str) -> str:
    """Running: terminated (SIGTERM, then SIGKILL after the queue's stop timeout: it writes its checkpoint);
    waiting: cancelled; finished: nothing."""
    if job["status"] in ("STARTING", "RUNNING"):
        batch.terminate_job(jobId=job["jobId"], reason=reason)
        return f"{job['jobName']} ({job['status']}): terminated; it gets SIGTERM and writes its checkpoint"
    if job["status"] in ("SUBMITTED", "PENDING", "RUNNABLE"):
        batch.cancel_job(jobId=job["jobId"], reason=reason)
        return f"{job['jobName']} ({job['status']}): cancelled before it started"
    return f"{job['jobName']} is already {job['status']}: nothing to cancel"


def submit_job(batch: Any, *, queue: str, name: str, image: str, command: Sequence[str], gpus: Optional[int] = None,
               nodes: Nodes = 1, tags: Optional[Mapping[str, str]] = None) -> dict:
    """Submits a training job to the TrainingQueue named ``queue`` as ``python -m ml_platform_constructs job submit``
    does (the checks, the contract's environment); ``batch`` is a boto3 Batch client of the queue's account and
    Region; ``nodes``: N, or (MIN, MAX) for an elastic job. Returns ``{"job_id", "job_name", "checkpoint_uri"}``."""
    target = find_queue(batch, queue)
    return submit(batch, check_submission(target, image, command, gpus=gpus, nodes=nodes, name=name, tags=tags))
