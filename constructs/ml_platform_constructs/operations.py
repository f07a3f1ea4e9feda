"""Operations for a team that has only the library (the platform app has ./platform for the same jobs).

  python -m ml_platform_constructs dataset build --runbook NAME --bucket BUCKET --name N --version V
                                   --prefix datasets/N/ --size-gib SIZE
  python -m ml_platform_constructs drift-baseline SAMPLE.csv --endpoint NAME (--bucket BUCKET | --output FILE)
                                   [--exclude COLUMN] [--bins 10] [--max-categories 20]
  python -m ml_platform_constructs budget resume --function NAME
  python -m ml_platform_constructs budget status [--scope account]

Each takes --region (default: the AWS CLI's). The names come from the constructs' attributes, which a team
exports with CfnOutputs: DatasetSnapshotBuilder.runbook_name, DatasetBucket.bucket_name,
MonitoredEndpoint.endpoint_name, BudgetGuard.stop_function.function_name. Credentials come from the usual
AWS chain; boto3 must be installed (the library itself does not need it).
"""

from __future__ import annotations

import argparse
import csv
import getpass
import json
from pathlib import Path
from typing import Any, Iterator, Optional

from .governance import ACCOUNT_SCOPE
from .runtime import budget_guard
from .runtime.pending_jobs import PendingJobs
from .runtime.drift import build_baseline


def read_rows(path: Path) -> tuple[list[str], Iterator[dict]]:
    """A CSV with a header, or JSON Lines (the first record's keys are the columns)."""
    if path.suffix == ".jsonl":
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return (list(lines[0]) if lines else []), iter(lines)
    handle = path.open(newline="")
    reader = csv.DictReader(handle)
    return list(reader.fieldnames or []), reader


def baseline_from_sample(sample: Path, exclude: list[str], bins: int, max_categories: int) -> tuple[dict, list[str]]:
    """A drift baseline of every column of ``sample`` but ``exclude`` (the app's and the library's command)."""
    columns, rows = read_rows(sample)
    features = [c for c in columns if c not in exclude]
    return build_baseline(rows, features, bins=bins, max_categories=max_categories), features


def baseline_key(endpoint_name: str) -> str:
    """Where MonitoredEndpoint's drift check reads the baseline (``MonitoredEndpoint.baseline_key``)."""
    return f"drift/baselines/{endpoint_name}/baseline.json"


def start_dataset_build(ssm: Any, *, runbook: str, bucket: str, name: str, version: str, prefix: str,
                        size_gib: int) -> str:
    """Starts DatasetSnapshotBuilder's runbook; the snapshot id appears at <parameter_prefix>NAME/VERSION/snapshot-id."""
    if not prefix.startswith("datasets/") or not prefix.endswith("/"):
        raise SystemExit(f"--prefix {prefix!r}: a prefix under datasets/ ending in '/', e.g. datasets/{name}/")
    if not 1 <= size_gib <= 65536:
        raise SystemExit(f"--size-gib {size_gib}: a gp3 size of 1-65536 GiB, at least the dataset's size")
    execution = ssm.start_automation_execution(DocumentName=runbook, Parameters={
        "DatasetName": [name], "Version": [version], "SourceBucket": [bucket], "SourcePrefix": [prefix],
        "SizeGiB": [str(size_gib)]})["AutomationExecutionId"]
    return (f"building {name} {version} from s3://{bucket}/{prefix}: execution {execution}\n"
            f"follow it: aws ssm get-automation-execution --automation-execution-id {execution}")


def resume_budget_stop(lambda_client: Any, function_name: str, operator: str) -> dict:
    """Asks the guard's own function to resume (it has the permissions and the scope)."""
    response = lambda_client.invoke(FunctionName=function_name, Payload=json.dumps(
        {"action": "resume", "operator": operator}).encode())
    payload = json.loads(response["Payload"].read() or b"null")
    if response.get("FunctionError"):
        raise SystemExit(f"{function_name} failed: {payload}")
    return payload


def budget_status(autoscaling: Any, scope: str, batch: Any = None, ec2: Any = None,
                  pending: Optional[PendingJobs] = None) -> list[str]:
    """Each governed fleet (and, with ``batch``, training queue): running, or stopped with when and why; for a stopped
    queue, with ``ec2``, the instances it still runs and the vCPUs its compute environments still want; with
    ``pending``, the submissions that wait for resume."""
    lines = []
    for group in budget_guard.fleet_groups(autoscaling, scope):
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        stopped = any(p["ProcessName"] == "Launch" for p in group.get("SuspendedProcesses", []))
        state = f"STOPPED ({tags.get(budget_guard.STOP_TAG, 'Launch suspended')})" if stopped else "running"
        lines.append(f"{tags.get(budget_guard.FLEET_TAG)}: {state}, desired {group['DesiredCapacity']}")
    if batch is None:
        return lines or [f"no fleets or queues governed by budget scope {scope!r}"]
    leftovers = {e["queue"]: e for e in budget_guard.queue_leftovers(batch, ec2, scope)} if ec2 is not None else {}
    for queue in budget_guard.governed_queues(batch, scope):
        tags = queue.get("tags", {})
        name = tags[budget_guard.QUEUE_TAG]
        state = f"STOPPED ({tags.get(budget_guard.STOP_TAG, 'disabled')})" if queue["state"] == "DISABLED" else "running"
        lines.append(f"queue {name} ({queue['jobQueueName']}): {state}")
        left = leftovers.pop(name, {})  # once per training queue, under its first job queue
        lines += [f"  still running: {i['id']} ({i['type']}, {i['lifecycle']}, since {i['launched']}): the guard ends "
                  "it once it outlives the grace period after the stop" for i in left.get("instances", [])]
        lines += [f"  compute environment {w['environment']} wants {w['desired_vcpus']} vCPUs"
                  for w in left.get("wanted_vcpus", [])]
        waiting = sorted(e["request"]["jobName"] for e in pending.of_queue(queue["jobQueueName"])) if pending else []
        if waiting:
            lines.append(f"  {len(waiting)} submission(s) wait for resume: {', '.join(waiting)}")
    return lines or [f"no fleets or queues governed by budget scope {scope!r}"]


def _session(region: Optional[str]) -> Any:
    try:
        import boto3
    except ImportError:
        raise SystemExit("these commands call AWS: pip install boto3") from None
    return boto3.session.Session(region_name=region)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ml_platform_constructs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--region")
    commands = parser.add_subparsers(dest="command", required=True)
    dataset = commands.add_parser("dataset").add_subparsers(dest="action", required=True).add_parser("build")
    for option in ("--runbook", "--bucket", "--name", "--version", "--prefix"):
        dataset.add_argument(option, required=True)
    dataset.add_argument("--size-gib", type=int, required=True)
    drift = commands.add_parser("drift-baseline")
    drift.add_argument("sample", type=Path)
    drift.add_argument("--endpoint", required=True, help="the endpoint's name (MonitoredEndpoint.endpoint_name)")
    drift.add_argument("--exclude", action="append", default=[], help="a column that is not a model input")
    drift.add_argument("--bins", type=int, default=10)
    drift.add_argument("--max-categories", type=int, default=20)
    target = drift.add_mutually_exclusive_group(required=True)
    target.add_argument("--bucket")
    target.add_argument("--output", type=Path)
    budget = commands.add_parser("budget").add_subparsers(dest="action", required=True)
    budget.add_parser("resume").add_argument("--function", required=True,
                                             help="BudgetGuard.stop_function.function_name")
    budget.add_parser("status").add_argument("--scope", default=ACCOUNT_SCOPE, help="the guard's budget_scope")
    args = parser.parse_args(argv)

    if args.command == "drift-baseline":
        baseline, features = baseline_from_sample(args.sample, args.exclude, args.bins, args.max_categories)
        body = json.dumps(baseline, indent=1)
        if args.output:
            args.output.write_text(body)
            where = str(args.output)
        else:
            key = baseline_key(args.endpoint)
            _session(args.region).client("s3").put_object(Bucket=args.bucket, Key=key, Body=body.encode())
            where = f"s3://{args.bucket}/{key}"
        print(f"baseline of {baseline['sample_size']} rows, {len(features)} features -> {where}")
    elif args.command == "dataset":
        print(start_dataset_build(_session(args.region).client("ssm"), runbook=args.runbook, bucket=args.bucket,
                                  name=args.name, version=args.version, prefix=args.prefix, size_gib=args.size_gib))
    elif args.action == "resume":
        session = _session(args.region)
        operator = session.client("sts").get_caller_identity()["Arn"] if session.get_credentials() else getpass.getuser()
        print(json.dumps(resume_budget_stop(session.client("lambda"), args.function, operator), indent=1))
    else:
        session = _session(args.region)
        print("\n".join(budget_status(session.client("autoscaling"), args.scope, session.client("batch"),
                                       session.client("ec2"), PendingJobs(session.client("ssm")))))
    return 0
