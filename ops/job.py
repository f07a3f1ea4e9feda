"""Training jobs on an environment's TrainingQueue (AWS Batch), in its real AWS account.

  ./platform job submit ENV QUEUE --image IMAGE --name NAME [--gpus N] [--nodes N] -- COMMAND...
  ./platform job list ENV [QUEUE]
  ./platform job logs ENV JOB_ID
  ./platform job cancel ENV JOB_ID
  ./platform job cost ENV JOB_ID [--json]    what the job really cost (ops/job_cost.py)

`submit` checks everything it can before calling AWS (the queue exists in config, the job fits its instance
types, the image is in ECR), registers a revision of the queue's job definition when the image differs, and
submits with ML_PLATFORM_CHECKPOINT_URI=s3://BUCKET/checkpoints/<queue>/<NAME>/: every attempt of the job
resumes from there, and so does a resubmission under the same --name. The name is required because it is the
job's identity: a default could not tell a resubmission (resume) from a new run (start fresh).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

from ml_platform_constructs import gpu_catalog
from ml_platform_constructs.training_queue import MULTI_NODE_NODES, QUEUE_TAG, is_tagged_ecr_image

from ops.aws_access import environment, require_known, session_for
from ops.cli import Parser, aws_errors_in_one_line
from ops.dataset import stack_output
from stacks.compute_stack import queue_output_key
from stacks.config import EnvironmentConfig, QueueConfig

JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
FINISHED = ("SUCCEEDED", "FAILED")
SUBMITTED_SUFFIX = "-submitted"  # job definition family for images other than the queue's own


class JobError(SystemExit):
    """Bad input, named with the value and the fix, raised before any AWS call where it can be."""

    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


@dataclass(frozen=True)
class Submission:
    queue: QueueConfig
    image: str
    command: list[str]
    name: str
    gpus: int
    nodes: int

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def find_queue(env: EnvironmentConfig, name: str) -> QueueConfig:
    require_known("queue", name, [q.name for q in env.queues], env)
    return next(q for q in env.queues if q.name == name)


def check_submission(env: EnvironmentConfig, queue_name: str, image: str, command: list[str], *,
                     gpus: Optional[int], nodes: int, name: Optional[str]) -> Submission:
    """Every check that needs no AWS call: a job that fits no type would wait RUNNABLE for ever."""
    queue = find_queue(env, queue_name)
    if not is_tagged_ecr_image(image):
        raise JobError(f"--image {image!r}: not an Amazon ECR image (ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG); "
                       "push it to ECR first (AWS Batch on the queue's instances pulls from ECR)")
    if not command:
        raise JobError("no command: put it after --, e.g. -- python train.py --epochs 90")
    if nodes == 1:
        types = queue.instance_types
    else:
        if not queue.multi_node_instance_types:
            raise JobError(f"--nodes {nodes}: queue {queue.name} has no multi-node environment; add "
                           "multi_node_instance_types (EFA types) to its config, or submit with --nodes 1")
        if not MULTI_NODE_NODES[0] <= nodes <= MULTI_NODE_NODES[1]:
            raise JobError(f"--nodes {nodes}: multi-node jobs take {MULTI_NODE_NODES[0]}-{MULTI_NODE_NODES[1]} nodes")
        types = queue.multi_node_instance_types
    per_instance = gpu_catalog.GPU_CATALOG[types[0]].gpu_count
    gpus = per_instance if gpus is None else gpus
    if not 1 <= gpus <= per_instance:
        raise JobError(f"--gpus {gpus}: the queue's {'multi-node ' if nodes > 1 else ''}types ({', '.join(types)}) have "
                       f"{per_instance} GPU(s) per instance; ask for 1-{per_instance} (more GPUs: --nodes, or a queue "
                       "of larger types)")
    if not name:
        raise JobError(f"--name is required: it is the job's identity (checkpoints under checkpoints/{queue.name}/"
                       "NAME/), so a resubmission under the same name resumes and a new name starts fresh")
    if not JOB_NAME.match(name):
        raise JobError(f"--name {name!r}: 1-128 letters, digits, '-' or '_', starting with a letter or digit")
    return Submission(queue=queue, image=image, command=command, name=name, gpus=gpus, nodes=nodes)


def capacity(queue: QueueConfig) -> str:
    entries = [gpu_catalog.GPU_CATALOG[t] for t in queue.instance_types]
    smallest = min(entries, key=lambda e: e.vcpus)
    text = (f"Spot up to {queue.max_vcpus} vCPUs (about {max(1, queue.max_vcpus // smallest.vcpus)} x "
            f"{smallest.name}, {smallest.gpu_count} GPU each)")
    if queue.on_demand_max_vcpus:
        text += f", then On-Demand up to {queue.on_demand_max_vcpus} vCPUs"
    if queue.multi_node_instance_types:
        text += f"; multi-node On-Demand up to {queue.multi_node_max_vcpus} vCPUs"
    return text


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
    return batch.register_job_definition(
        jobDefinitionName=definition["jobDefinitionName"].removesuffix(SUBMITTED_SUFFIX) + SUBMITTED_SUFFIX,
        **fields)["jobDefinitionArn"]


def submit(batch: Any, cloudformation: Any, env: EnvironmentConfig, submission: Submission) -> list[str]:
    compute, queue = f"{env.name}-Compute", submission.queue
    kind = "MultiNode" if submission.multi_node else ""
    queue_arn = stack_output(cloudformation, compute, queue_output_key(queue.name, f"{kind}JobQueue"))
    definition_arn = stack_output(cloudformation, compute, queue_output_key(queue.name, f"{kind}JobDefinition"))
    bucket = stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName")
    checkpoints = f"s3://{bucket}/checkpoints/{queue.name}/{submission.name}/"
    overrides = {"command": submission.command,
                 "environment": [{"name": "ML_PLATFORM_CHECKPOINT_URI", "value": checkpoints},
                                 {"name": "ML_PLATFORM_JOB_NAME", "value": submission.name}],
                 "resourceRequirements": [{"type": "GPU", "value": str(submission.gpus)}]}
    request = {"jobName": submission.name, "jobQueue": queue_arn,
               "jobDefinition": job_definition_for(batch, definition_arn, submission.image),
               "tags": {QUEUE_TAG: queue.name, "environment": env.name}, "propagateTags": True}
    if submission.multi_node:
        request["nodeOverrides"] = {"numNodes": submission.nodes, "nodePropertyOverrides": [
            {"targetNodes": "0:", "containerOverrides": overrides}]}
    else:
        request["containerOverrides"] = overrides
    job = batch.submit_job(**request)
    return [f"submitted {submission.name}: job id {job['jobId']}",
            f"  queue {queue.name} ({'multi-node, ' + str(submission.nodes) + ' nodes, ' if submission.multi_node else ''}"
            f"{submission.gpus} GPU(s) per instance): {capacity(queue)}",
            f"  checkpoints: {checkpoints} (every attempt resumes from the newest)",
            f"  follow it: ./platform job list {env.name} {queue.name}; ./platform job logs {env.name} {job['jobId']}"]


def queue_arns(cloudformation: Any, env: EnvironmentConfig, queues: list[QueueConfig]) -> list[tuple[str, str]]:
    arns = []
    for queue in queues:
        arns.append((queue.name, stack_output(cloudformation, f"{env.name}-Compute", queue_output_key(queue.name, "JobQueue"))))
        if queue.multi_node_instance_types:
            arns.append((f"{queue.name} (multi-node)", stack_output(
                cloudformation, f"{env.name}-Compute", queue_output_key(queue.name, "MultiNodeJobQueue"))))
    return arns


def listing(batch: Any, cloudformation: Any, env: EnvironmentConfig, queue: Optional[str]) -> list[str]:
    queues = [find_queue(env, queue)] if queue else list(env.queues)
    lines = []
    for label, arn in queue_arns(cloudformation, env, queues):
        for status in ACTIVE + FINISHED:
            for page in batch.get_paginator("list_jobs").paginate(jobQueue=arn, jobStatus=status):
                for job in page["jobSummaryList"]:
                    lines.append(f"{label}: {job['jobName']} {job['jobId']} {status}"
                                 + (f" ({job['statusReason']})" if job.get("statusReason") else ""))
    return lines or [f"{env.name}: no jobs on {', '.join(q.name for q in queues) or 'any queue'}"]


def describe(batch: Any, cloudformation: Any, env: EnvironmentConfig, job_id: str) -> dict:
    jobs = batch.describe_jobs(jobs=[job_id])["jobs"]
    if not jobs:
        raise JobError(f"job {job_id!r} not found in {env.name}'s account and Region ({env.region})")
    job = jobs[0]
    ours = {arn for _, arn in queue_arns(cloudformation, env, list(env.queues))}
    if job["jobQueue"] not in ours:
        raise JobError(f"job {job_id} is on {job['jobQueue']}, not on a queue of {env.name}: nothing done")
    return job


def logs(batch: Any, cloudformation: Any, logs_client: Any, env: EnvironmentConfig, job_id: str) -> list[str]:
    job = describe(batch, cloudformation, env, job_id)
    container = job.get("container") or {}
    group = (container.get("logConfiguration") or {}).get("options", {}).get("awslogs-group")
    streams = [a["container"]["logStreamName"] for a in job.get("attempts", []) if a.get("container", {}).get("logStreamName")]
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


def cancel(batch: Any, cloudformation: Any, env: EnvironmentConfig, job_id: str) -> str:
    job = describe(batch, cloudformation, env, job_id)
    reason = "cancelled with ./platform job cancel"
    if job["status"] in ("STARTING", "RUNNING"):
        # TerminateJob sends SIGTERM, then SIGKILL after the queue's stop timeout: the job writes its checkpoint.
        batch.terminate_job(jobId=job_id, reason=reason)
        return f"{job['jobName']} ({job['status']}): terminated; it gets SIGTERM and writes its checkpoint"
    if job["status"] in ("SUBMITTED", "PENDING", "RUNNABLE"):
        batch.cancel_job(jobId=job_id, reason=reason)
        return f"{job['jobName']} ({job['status']}): cancelled before it started"
    return f"{job['jobName']} is already {job['status']}: nothing to cancel"


def parser() -> Parser:
    jobs = Parser("./platform job", description=__doc__)
    commands = jobs.add_subparsers(dest="command", required=True, metavar="{submit,list,logs,cancel,cost}")
    submit_parser = commands.add_parser("submit", help="run a training job on a queue",
                                        usage="%(prog)s ENV QUEUE --image IMAGE --name NAME [--gpus N] [--nodes N] "
                                              "-- COMMAND...")
    submit_parser.add_argument("env")
    submit_parser.add_argument("queue")
    submit_parser.add_argument("--image", required=True, help="the job's image in Amazon ECR")
    submit_parser.add_argument("--name", help="the job's identity: a resubmission under the same name resumes")
    submit_parser.add_argument("--gpus", type=int, help="GPUs per instance (default: all of the smallest type's)")
    submit_parser.add_argument("--nodes", type=int, default=1, help="instances of a multi-node job (default 1)")
    list_parser = commands.add_parser("list", help="the queues' jobs by state")
    list_parser.add_argument("env")
    list_parser.add_argument("queue", nargs="?")
    for name, text in (("logs", "every attempt's log"), ("cancel", "stop a job (running: SIGTERM, it checkpoints)")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("env")
        sub.add_argument("job_id")
    commands.add_parser("cost", help="what a job really cost (./platform job cost --help)", add_help=False)
    return jobs


@aws_errors_in_one_line
def main(argv: list[str], session_factory=None) -> int:
    if argv[:1] == ["cost"]:
        from ops import job_cost
        return job_cost.main(argv[1:], session_factory=session_factory)
    # The job's command follows "--" and may carry options of its own.
    ours, command = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    jobs = parser()
    args, extra = jobs.parse_known_args(ours)
    if extra:
        if args.command == "submit" and "--" not in argv:
            raise JobError(f"{' '.join(extra)!r}: the job's command goes after --, e.g. ./platform job submit "
                           f"{args.env} {args.queue} --image IMAGE --name NAME -- {' '.join(extra)}")
        jobs.error(f"unrecognized arguments: {' '.join(extra)}")
    env = environment(args.env)
    submission = None
    if args.command == "submit":
        submission = check_submission(env, args.queue, args.image, command, gpus=args.gpus, nodes=args.nodes,
                                      name=args.name)
    elif args.command == "list" and args.queue:
        find_queue(env, args.queue)
    session = (session_factory or session_for)(env)  # credentials of env's own account, or a clear refusal
    batch, cloudformation = session.client("batch"), session.client("cloudformation")
    if args.command == "submit":
        output = submit(batch, cloudformation, env, submission)
    elif args.command == "list":
        output = listing(batch, cloudformation, env, args.queue)
    elif args.command == "logs":
        output = logs(batch, cloudformation, session.client("logs"), env, args.job_id)
    else:
        output = [cancel(batch, cloudformation, env, args.job_id)]
    print("\n".join(output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
