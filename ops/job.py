"""Training jobs on an environment's TrainingQueue (AWS Batch), in its real AWS account.

  ./platform job submit ENV QUEUE --image IMAGE --name NAME [--gpus N] [--nodes N|MIN:MAX] -- COMMAND...
  ./platform job list ENV [QUEUE]
  ./platform job show ENV JOB_ID             the job, its run's attempts and an elastic job's resizes and their cost
  ./platform job logs ENV JOB_ID
  ./platform job cancel ENV JOB_ID
  ./platform job cost ENV JOB_ID [--json]    what the job really cost (./platform job cost --help)
  ./platform job rehearse [--s3] [--exact] [...] -- COMMAND...   a Spot reclaim rehearsed locally, before a real one
                                             (./platform job rehearse --help; no AWS account)

The commands are the library's (`python -m ml_platform_constructs job ...` for a team without the platform app),
with ENV's queues from config and the Compute and Data stacks' outputs. `submit` checks everything it can before calling
AWS (the queue exists in config, the job fits its instance types, the image is in ECR with a tag or digest),
registers a revision of the queue's job definition when the image differs, and submits with the job contract's
ML_PLATFORM_CHECKPOINT_URI=s3://BUCKET/checkpoints/<queue>/<NAME>/ and ML_PLATFORM_JOB_NAME: every attempt of the
job resumes from there, and so does a resubmission under the same --name. The name is required because it is the
job's identity: a default could not tell a resubmission (resume) from a new run (start fresh).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Optional

from ml_platform_constructs.advice import gpu_catalog
from ml_platform_constructs.operations import jobs
from ml_platform_constructs.operations.jobs import JobError, Submission

from ops.aws_access import environment, require_known, session_for
from ops.cli import Parser, add_job_figures, aws_errors_in_one_line
from ops.dataset import stack_output
from stacks.config import EnvironmentConfig, QueueConfig, queue_output_key


def find_queue(env: EnvironmentConfig, name: str) -> QueueConfig:
    require_known("queue", name, [q.name for q in env.queues], env)
    return next(q for q in env.queues if q.name == name)


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


def config_target(queue: QueueConfig) -> jobs.QueueTarget:
    """The queue as config knows it; its job queues, definitions and checkpoint root come from AWS (resolve)."""
    return jobs.QueueTarget(name=queue.name, job_queue="", job_definition="",
                            instance_types=tuple(queue.instance_types),
                            multi_node_instance_types=tuple(queue.multi_node_instance_types), capacity=capacity(queue),
                            multi_node_max_vcpus=queue.multi_node_max_vcpus,
                            # the sizes TrainingQueue(elastic_max_nodes=...) gives its jobs (synth checked they fit)
                            elastic_sizes=tuple(s for s in (1, 2, 4, 8) if s <= queue.elastic_max_nodes
                                                and (s > 1 or queue.instance_types)) if queue.elastic_max_nodes else ())


def resolve(cloudformation: Any, env: EnvironmentConfig, queue: QueueConfig) -> jobs.QueueTarget:
    """The queue's job queues and definitions from the Compute stack's outputs, its checkpoints under the Data
    stack's dataset bucket."""
    compute = f"{env.name}-Compute"
    bucket = stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName")
    multi = bool(queue.multi_node_instance_types)
    return dataclasses.replace(
        config_target(queue), checkpoint_root=f"s3://{bucket}/checkpoints/{queue.name}/",
        job_queue=stack_output(cloudformation, compute, queue_output_key(queue.name, "JobQueue")),
        job_definition=stack_output(cloudformation, compute, queue_output_key(queue.name, "JobDefinition")),
        multi_node_job_queue=stack_output(cloudformation, compute, queue_output_key(queue.name, "MultiNodeJobQueue"))
        if multi else None,
        multi_node_job_definition=stack_output(cloudformation, compute,
                                               queue_output_key(queue.name, "MultiNodeJobDefinition")) if multi else None)


def check_submission(env: EnvironmentConfig, queue_name: str, image: str, command: list[str], *,
                     gpus: Optional[int], nodes: jobs.Nodes, name: Optional[str]) -> Submission:
    """Every check that needs no AWS call (the library's, against config's queue): a job that fits no type would
    wait RUNNABLE for ever."""
    return jobs.check_submission(config_target(find_queue(env, queue_name)), image, command, gpus=gpus, nodes=nodes,
                                 name=name, tags={"environment": env.name})


def submit(batch: Any, cloudformation: Any, env: EnvironmentConfig, submission: Submission) -> list[str]:
    target = resolve(cloudformation, env, find_queue(env, submission.target.name))
    submission = dataclasses.replace(submission, target=target)
    return jobs.submitted_lines(submission, jobs.submit(batch, submission),
                                f"./platform job list {env.name} {target.name}; ./platform job logs {env.name} JOB_ID")


def queue_arns(cloudformation: Any, env: EnvironmentConfig, queues: list[QueueConfig]) -> list[tuple[str, str]]:
    return [pair for queue in queues for pair in resolve(cloudformation, env, queue).job_queues()]


def listing(batch: Any, cloudformation: Any, env: EnvironmentConfig, queue: Optional[str]) -> list[str]:
    queues = [find_queue(env, queue)] if queue else list(env.queues)
    lines = jobs.list_jobs(batch, queue_arns(cloudformation, env, queues))
    return [f"{env.name}: {lines[0]}"] if lines[0].startswith("no jobs") else lines


def describe(batch: Any, cloudformation: Any, env: EnvironmentConfig, job_id: str) -> dict:
    return jobs.describe(batch, job_id, [arn for _, arn in queue_arns(cloudformation, env, list(env.queues))],
                         f"a queue of {env.name}")


def logs(batch: Any, cloudformation: Any, logs_client: Any, env: EnvironmentConfig, job_id: str) -> list[str]:
    return jobs.job_logs(logs_client, describe(batch, cloudformation, env, job_id))


def show(batch: Any, cloudformation: Any, s3: Any, env: EnvironmentConfig, job_id: str) -> list[str]:
    """The job, its run's attempts at their sizes and, for an elastic job, every resize: from and to, why, the
    restart it took and what it cost (the run's record beside its checkpoints), and the controller's decisions."""
    import json

    from ml_platform_job.elastic import DECISION_PREFIX
    from ml_platform_job.tracking import RECORD_NAME
    from ops.runs import resize_lines

    job = describe(batch, cloudformation, env, job_id)
    nodes = int((job.get("nodeProperties") or {}).get("numNodes") or 1)
    tags = job.get("tags") or {}
    elastic = tags.get(jobs.ELASTIC_TAG)
    lines = [f"{job['jobName']} {job['jobId']}: {job['status']}" + (f" ({job['statusReason']})"
                                                                    if job.get("statusReason") else ""),
             f"  {nodes} node(s)" + (f", elastic {elastic}" if elastic else "")]
    container = job.get("container") or ((job.get("nodeProperties") or {}).get("nodeRangeProperties") or [{}])[0].get(
        "container") or {}
    uri = next((e["value"] for e in container.get("environment") or [] if e.get("name") == jobs.CHECKPOINT_URI), "")
    if not uri.startswith("s3://"):
        return [*lines, "  no checkpoints (the queue has no dataset bucket): no run record to show"]
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    try:
        record = json.loads(s3.get_object(Bucket=bucket, Key=prefix + RECORD_NAME)["Body"].read())
    except Exception as error:  # no record yet (the job has not started), or unreadable
        code = getattr(error, "response", {}).get("Error", {}).get("Code", type(error).__name__)
        return [*lines, f"  run record: none yet at {uri}{RECORD_NAME} ({code})"]
    attempts = (record.get("passport") or {}).get("attempts") or []
    lines.append(f"  run {record.get('run_id')}: {record.get('status')}, {len(attempts)} attempt(s) at "
                 + ", ".join(f"{a.get('nodes', 1)}" for a in attempts) + " node(s); cost "
                 + (f"{record['cost_usd']} USD" if record.get("cost_usd") is not None else "not settled yet"))
    lines += resize_lines(record) or (["  resizes: none"] if elastic else [])
    if elastic:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + DECISION_PREFIX).get("Contents") or []
        for item in sorted(listed, key=lambda o: o["Key"]):
            try:
                decision = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
            except Exception:
                continue
            held = f"; held: {decision['held']}, pending in {decision.get('pending')}" if decision.get("held") else ""
            lines.append(f"  controller: {decision.get('job_id')} -> {decision.get('new_job_id') or '-'}, "
                         f"{decision.get('from')} -> {decision.get('to')} node(s) (asked {decision.get('asked')}; "
                         f"{decision.get('why')}){held}")
    return lines


def cancel(batch: Any, cloudformation: Any, env: EnvironmentConfig, job_id: str) -> str:
    return jobs.cancel(batch, describe(batch, cloudformation, env, job_id), "cancelled with ./platform job cancel")


def parser() -> Parser:
    jobs = Parser("./platform job", description=__doc__)
    commands = jobs.add_subparsers(dest="command", required=True,
                                   metavar="{submit,list,show,logs,cancel,cost,rehearse}")
    submit_parser = commands.add_parser("submit", help="run a training job on a queue",
                                        usage="%(prog)s ENV QUEUE --image IMAGE --name NAME [--gpus N] [--nodes N|MIN:MAX] "
                                              "-- COMMAND...")
    submit_parser.add_argument("env")
    submit_parser.add_argument("queue")
    submit_parser.add_argument("--image", required=True, help="the job's image in Amazon ECR")
    submit_parser.add_argument("--name", help="the job's identity: a resubmission under the same name resumes")
    add_job_figures(submit_parser)
    list_parser = commands.add_parser("list", help="the queues' jobs by state")
    list_parser.add_argument("env")
    list_parser.add_argument("queue", nargs="?")
    for name, text in (("logs", "every attempt's log"), ("cancel", "stop a job (running: SIGTERM, it checkpoints)"),
                       ("show", "a job, its run's attempts and, for an elastic job, its resizes and their cost")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("env")
        sub.add_argument("job_id")
    commands.add_parser("cost", help="what a job really cost (./platform job cost --help)", add_help=False)
    commands.add_parser("rehearse", help="a Spot reclaim rehearsed locally (./platform job rehearse --help)",
                        add_help=False)
    return jobs


@aws_errors_in_one_line
def main(argv: list[str], session_factory=None) -> int:
    if argv[:1] == ["cost"]:
        from ops import job_cost
        return job_cost.main(argv[1:], session_factory=session_factory)
    if argv[:1] == ["rehearse"]:
        from ops import rehearse
        return rehearse.main(argv[1:])
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
    elif args.command == "show":
        output = show(batch, cloudformation, session.client("s3"), env, args.job_id)
    elif args.command == "logs":
        output = logs(batch, cloudformation, session.client("logs"), env, args.job_id)
    else:
        output = [cancel(batch, cloudformation, env, args.job_id)]
    print("\n".join(output))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
