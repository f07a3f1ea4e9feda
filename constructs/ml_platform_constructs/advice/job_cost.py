"""What an AWS Batch training job really cost, per accuracy point gained and per million tokens (no CDK).

  python -m ml_platform_constructs job cost JOB_ID [--json] [--instance-type T --lifecycle spot|on-demand]
  ./platform job cost ENV JOB_ID ...                    (the platform app, in ENV's account and Region)

The pure part, job_cost(), prices every attempt of the job (each Spot interruption or failure is an attempt,
and each attempt paid for its instance while it ran) from Batch's attempt records; progress() reads the
job's own metrics (ml_platform_constructs.job_metrics). gather() makes these read-only AWS calls, in the
clients' Region, nothing else:

- batch:DescribeJobs: the job (and, for a multi-node job, each node "JOB_ID#i"): attempts with startedAt,
  stoppedAt and container.containerInstanceArn, the GPUs asked for, and the current attempt if still running;
- ecs:DescribeContainerInstances: each attempt's instance type (the agent's `ecs.instance-type` attribute);
- batch:DescribeComputeEnvironments: the lifecycle, from the environment owning that ECS cluster (type SPOT
  or EC2, i.e. On-Demand);
- cloudwatch:GetMetricData: MLPlatform/Training ValidationAccuracy (first and last value), TokensProcessed
  and SamplesProcessed (sums) for dimension JobId.

Prices: the Region's entry of ml_platform_job/prices.json, or of a team's own table (On-Demand per type; Spot at the family's assumed
discount, not the price actually paid in that hour). Counted: each attempt's run time x its instance's price x
the share of the instance's GPUs the job asked for. Not counted: instance boot before the container starts,
a compute environment's scale-down delay, storage and data transfer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Optional

from ml_platform_job.job_metrics import JOB_ID_DIMENSION, NAMESPACE, SAMPLES_PROCESSED, TOKENS_PROCESSED, VALIDATION_ACCURACY
from ..runtime.handlers.budget_guard import load_prices
from ml_platform_job.prices import LIFECYCLES, gpu_share, hourly_usd


@dataclass(frozen=True)
class Progress:
    accuracy_start: Optional[float] = None  # percent
    accuracy_end: Optional[float] = None
    tokens: float = 0
    samples: float = 0


@dataclass
class AttemptCost:
    node: Optional[int]
    attempt: int
    instance_type: str
    lifecycle: str
    started_at: str
    stopped_at: str
    hours: float
    gpu_share: float
    usd_per_hour: float
    usd: float
    status_reason: str


@dataclass
class JobCost:
    job_id: str
    job_name: str
    status: str
    attempts: list[AttemptCost]
    progress: Progress = field(default_factory=Progress)

    @property
    def usd(self) -> float:
        return sum(a.usd for a in self.attempts)

    @property
    def instance_hours(self) -> float:
        return sum(a.hours for a in self.attempts)

    @property
    def accuracy_points(self) -> Optional[float]:
        p = self.progress
        return None if p.accuracy_start is None or p.accuracy_end is None else p.accuracy_end - p.accuracy_start

    @property
    def usd_per_accuracy_point(self) -> Optional[float]:
        points = self.accuracy_points
        return self.usd / points if points and points > 0 else None

    @property
    def usd_per_million_tokens(self) -> Optional[float]:
        return self.usd / (self.progress.tokens / 1e6) if self.progress.tokens > 0 else None

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "job_name": self.job_name, "status": self.status, "usd": round(self.usd, 4),
                "instance_hours": round(self.instance_hours, 4), "attempts": [asdict(a) for a in self.attempts],
                "progress": asdict(self.progress), "accuracy_points": self.accuracy_points,
                "usd_per_accuracy_point": self.usd_per_accuracy_point,
                "usd_per_million_tokens": self.usd_per_million_tokens}


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def _gpus_asked(container: Mapping[str, Any]) -> Optional[int]:
    for requirement in container.get("resourceRequirements", []):
        if requirement.get("type") == "GPU":
            return int(requirement["value"])
    return None


def job_attempts(job: Mapping[str, Any], now: datetime) -> list[dict]:
    """(node, attempt number, containerInstanceArn, started, stopped, reason) of every finished attempt, and of
    the one still running (STARTING/RUNNING jobs list it under `container`, not `attempts`)."""
    node = job.get("nodeDetails", {}).get("nodeIndex")
    found = []
    for number, attempt in enumerate(job.get("attempts", []), 1):
        if "startedAt" not in attempt:
            continue  # never started: no instance time
        found.append({"node": node, "attempt": number, "arn": attempt.get("container", {}).get("containerInstanceArn"),
                      "started": _time(attempt["startedAt"]),
                      "stopped": _time(attempt["stoppedAt"]) if "stoppedAt" in attempt else now,
                      "reason": attempt.get("statusReason", "")})
    if job.get("status") in ("STARTING", "RUNNING") and "startedAt" in job:
        found.append({"node": node, "attempt": len(found) + 1,
                      "arn": job.get("container", {}).get("containerInstanceArn"), "started": _time(job["startedAt"]),
                      "stopped": now, "reason": "still running"})
    return found


def job_cost(job: Mapping[str, Any], instances: Mapping[str, tuple[str, str]], prices: Mapping[str, Any], *,
             node_jobs: tuple[Mapping[str, Any], ...] = (), progress: Progress = Progress(),
             now: Optional[datetime] = None) -> JobCost:
    """The job's cost from DescribeJobs records: `instances` maps each containerInstanceArn to (instance type,
    "spot" | "on-demand"). A multi-node job's own record has no attempts with instances: pass its node jobs."""
    now = now or datetime.now(timezone.utc)
    attempts = []
    for record in (node_jobs or (job,)):
        asked = _gpus_asked(record.get("container", {}))
        for attempt in job_attempts(record, now):
            if attempt["arn"] not in instances:
                raise KeyError(f"no instance type and lifecycle for container instance {attempt['arn']} "
                               f"(attempt {attempt['attempt']}): pass --instance-type and --lifecycle")
            instance_type, lifecycle = instances[attempt["arn"]]
            hourly = hourly_usd(prices, instance_type, lifecycle)
            share = gpu_share(instance_type, asked)
            hours = max(0.0, (attempt["stopped"] - attempt["started"]).total_seconds() / 3600)
            attempts.append(AttemptCost(
                node=attempt["node"], attempt=attempt["attempt"], instance_type=instance_type, lifecycle=lifecycle,
                started_at=attempt["started"].isoformat(), stopped_at=attempt["stopped"].isoformat(), hours=hours,
                gpu_share=share, usd_per_hour=hourly, usd=hours * hourly * share, status_reason=attempt["reason"]))
    return JobCost(job_id=job["jobId"], job_name=job.get("jobName", ""), status=job.get("status", ""),
                   attempts=attempts, progress=progress)


def progress_from_metric_data(results: list[Mapping[str, Any]]) -> Progress:
    """Progress from GetMetricData results with ids accuracy (Average), tokens and samples (Sum)."""
    by_id = {r["Id"]: sorted(zip(r.get("Timestamps", []), r.get("Values", []))) for r in results}
    accuracy = by_id.get("accuracy", [])
    return Progress(accuracy_start=accuracy[0][1] if accuracy else None,
                    accuracy_end=accuracy[-1][1] if accuracy else None,
                    tokens=sum(v for _, v in by_id.get("tokens", [])),
                    samples=sum(v for _, v in by_id.get("samples", [])))


def metric_period(start: datetime, now: datetime) -> int:
    """The finest period CloudWatch still keeps for data that old: 60 s for 15 days, 300 s for 63, then 3600.
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricStatistics.html"""
    age = now - start
    return 60 if age < timedelta(days=15) else 300 if age < timedelta(days=63) else 3600


def progress(cloudwatch: Any, job_id: str, start: datetime, end: datetime, now: datetime) -> Progress:
    period = metric_period(start, now)
    dims = [{"Name": JOB_ID_DIMENSION, "Value": job_id}]
    queries = [{"Id": query_id, "ReturnData": True, "MetricStat": {
        "Metric": {"Namespace": NAMESPACE, "MetricName": name, "Dimensions": dims}, "Period": period, "Stat": stat}}
        for query_id, name, stat in (("accuracy", VALIDATION_ACCURACY, "Average"), ("tokens", TOKENS_PROCESSED, "Sum"),
                                     ("samples", SAMPLES_PROCESSED, "Sum"))]
    results: dict[str, dict] = {}
    token = None
    while True:
        kwargs = {"NextToken": token} if token else {}
        page = cloudwatch.get_metric_data(MetricDataQueries=queries, StartTime=start - timedelta(minutes=5),
                                          EndTime=end + timedelta(minutes=5), ScanBy="TimestampAscending", **kwargs)
        for r in page["MetricDataResults"]:
            merged = results.setdefault(r["Id"], {"Id": r["Id"], "Timestamps": [], "Values": []})
            merged["Timestamps"] += r.get("Timestamps", [])
            merged["Values"] += r.get("Values", [])
        token = page.get("NextToken")
        if not token:
            return progress_from_metric_data(list(results.values()))


def gather(job_id: str, clients: Mapping[str, Any], now: datetime,
           override: Optional[tuple[str, str]] = None, region: str = "us-east-1",
           table: Optional[dict] = None) -> JobCost:
    """Reads the job, its attempts' instances and its progress (the calls in the module docstring)."""
    batch = clients["batch"]
    jobs = batch.describe_jobs(jobs=[job_id])["jobs"]
    if not jobs:
        raise SystemExit(f"error: no Batch job {job_id} in {region} (Batch keeps finished jobs for about 7 days)")
    job = jobs[0]
    node_jobs: tuple = ()
    if "nodeProperties" in job:
        count = job["nodeProperties"]["numNodes"]
        node_jobs = tuple(batch.describe_jobs(jobs=[f"{job_id}#{i}" for i in range(count)])["jobs"])
    records = node_jobs or (job,)
    arns = {a["arn"] for r in records for a in job_attempts(r, now) if a["arn"]}
    instances: dict[str, tuple[str, str]] = {}
    if override:
        instances = {arn: override for arn in arns}
    elif arns:
        clusters: dict[str, str] = {}
        for page in batch.get_paginator("describe_compute_environments").paginate():
            for environment in page["computeEnvironments"]:
                kind = environment.get("computeResources", {}).get("type", "EC2")
                clusters[environment["ecsClusterArn"]] = "spot" if kind in ("SPOT", "FARGATE_SPOT") else "on-demand"
        for arn in sorted(arns):
            # arn:aws:ecs:REGION:ACCOUNT:container-instance/CLUSTER/ID
            region_account, _, path = arn.partition(":container-instance/")
            cluster_name = path.split("/")[0]
            cluster = f"{region_account}:cluster/{cluster_name}"
            found = clients["ecs"].describe_container_instances(cluster=cluster, containerInstances=[arn])
            if not found["containerInstances"]:
                raise SystemExit(f"error: ECS no longer describes {arn} (deregistered): pass --instance-type and "
                                 "--lifecycle")
            attributes = {a["name"]: a.get("value") for a in found["containerInstances"][0].get("attributes", [])}
            if cluster not in clusters:
                raise SystemExit(f"error: no compute environment owns cluster {cluster}: pass --lifecycle with "
                                 "--instance-type")
            instances[arn] = (attributes["ecs.instance-type"], clusters[cluster])
    attempts = [a for r in records for a in job_attempts(r, now)]
    start = min((a["started"] for a in attempts), default=now)
    end = max((a["stopped"] for a in attempts), default=now)
    return job_cost(job, instances, load_prices(region, table), node_jobs=node_jobs,
                    progress=progress(clients["cloudwatch"], job_id, start, end, now), now=now)


def format_cost(cost: JobCost) -> str:
    out = [f"Job {cost.job_id} ({cost.job_name}, {cost.status}): {cost.usd:,.2f} USD over {len(cost.attempts)} "
           f"attempt(s), {cost.instance_hours:,.2f} instance-hours"]
    for a in cost.attempts:
        node = f"node {a.node} " if a.node is not None else ""
        out.append(f"  {node}attempt {a.attempt}: {a.instance_type} {a.lifecycle}, {a.hours:,.2f} h x "
                   f"{a.usd_per_hour:.4f} USD/h x {a.gpu_share:.2f} of its GPUs = {a.usd:,.2f} USD"
                   + (f" ({a.status_reason})" if a.status_reason else ""))
    p = cost.progress
    if cost.accuracy_points is not None:
        per_point = (f"{cost.usd_per_accuracy_point:,.2f} USD per accuracy point" if cost.usd_per_accuracy_point
                     else "no accuracy gained")
        out.append(f"  validation accuracy {p.accuracy_start:.2f}% -> {p.accuracy_end:.2f}% "
                   f"({cost.accuracy_points:+.2f} points): {per_point}")
    else:
        out.append("  no ValidationAccuracy reported (ml_platform_constructs.job_metrics): no cost per accuracy point")
    if cost.usd_per_million_tokens is not None:
        out.append(f"  {p.tokens:,.0f} tokens: {cost.usd_per_million_tokens:,.4f} USD per million tokens")
    if p.samples:
        out.append(f"  {p.samples:,.0f} samples: {cost.usd / p.samples * 1000:,.4f} USD per thousand samples")
    return "\n".join(out)


def check_override(instance_type: Optional[str], lifecycle: Optional[str]) -> Optional[tuple[str, str]]:
    """--instance-type and --lifecycle, for attempts whose container instance ECS no longer describes."""
    if bool(instance_type) != bool(lifecycle):
        raise SystemExit("error: --instance-type and --lifecycle go together")
    if instance_type and instance_type not in load_prices("us-east-1")["on_demand_hourly"]:
        raise SystemExit(f"error: --instance-type={instance_type}: not in the price table (a GPU type of the catalog)")
    return (instance_type, lifecycle) if instance_type else None
