"""Stops an environment's GPU spend when its budget runs out, and resumes it on an operator's word.

AWS Lambda handler (standard library and the runtime's boto3). Three events:
- a Budgets notification through the stop topic (actual spend crossed the stop line): stop;
- the scheduled spend check: estimate the spend *to now* (Budgets' actual spend as of its last update plus
  what the running GPU capacity has cost since then) and stop when it reaches the stop line; project the
  month at the current rate and warn, at most once a day, with the date the line will be crossed;
- {"action": "resume"} from ``python -m ml_platform_constructs budget resume --function NAME`` (or the platform
  app's ``./platform budget resume ENV``): resume (also callable locally).

The decision (``decide``) is a pure function of figures: ``./platform budget what-if`` runs it without AWS.
It prices ``RunningCapacity`` records, whatever launched them; ``fleet_capacity`` reads them from the
environment's Auto Scaling groups, and another kind of governed capacity adds its own reader and its own
stop function next to ``stop_fleets``.

Stopping a fleet suspends its Auto Scaling ``Launch`` process and sets its desired capacity to 0: running
instances leave through the normal scale-in (the job gets its checkpoint signal), nothing launches again,
and a ``cdk deploy`` does not undo it (the template sets neither a desired capacity nor suspended
processes). Stopping a training queue (AWS Batch) disables its job queues (no new job starts) and compute
environments (no new instances; idle ones go), then terminates its starting and running jobs: ECS sends
SIGTERM and waits the queue's stop timeout, so each writes its checkpoint. A ``cdk deploy`` does not re-enable
them (the templates carry no ``State``). Resuming enables them again and resubmits, under the same name (so
from the same checkpoints), every job the stop ended. Data is never touched. Each action is logged as one JSON line, tagged on the group
(``ml-platform:budget-stop``) and reported to the alert topic, with what the stop cannot stop. Stop actions
run first; reporting (listing endpoints) runs after them and cannot undo or block them.
"""

from __future__ import annotations

import calendar
import json
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Sequence

# The tag keys governed constructs set on themselves; defined here once (this module runs in Lambda, standard
# library only), imported by the constructs.
FLEET_TAG = "ml-platform:fleet"
QUEUE_TAG = "ml-platform:queue"
RESUBMITTED_TAG = "ml-platform:budget-resubmitted"  # on a job the stop ended: the id of its resubmission
RESUBMISSION_OF_TAG = "ml-platform:budget-resubmission-of"  # on the resubmission: the job it replaces
STOP_REASON_PREFIX = "ml-platform budget stop"  # starts the status reason of every job the stop ended

# --- what the guard governs (the selection contract of ml_platform_constructs.governance) -----------------------
# Each governed construct tags itself BUDGET_SCOPE_TAG=<scope>; the guard's function gets its scope as
# BUDGET_SCOPE. Called without it (an operator's local command), the scope is the environment's name, which
# the platform app passes as the scope of every environment.
BUDGET_SCOPE_TAG = "ml-platform:budget-scope"


def governed_scope(environment: str) -> str:
    return os.environ.get("BUDGET_SCOPE") or environment
STOP_TAG = "ml-platform:budget-stop"
RESUMED_TAG = "ml-platform:budget-resumed"  # YYYY-MM: an operator resumed this month; the guard leaves it running
SPOT, ON_DEMAND = "spot", "on-demand"
# AWS updates a budget's figures "several times a day" from billing data that itself lags
# (https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_Operations_AWS_Budgets.html), and
# DescribeBudget gives no as-of time for them (LastUpdatedTime is when the budget itself was changed). The
# guard therefore treats the figure as this many hours old: capacity running in that window may be counted
# twice, which errs towards stopping, never towards overspending.
DEFAULT_BUDGET_AGE_HOURS = 24.0


# --- what is running, and what it costs --------------------------------------------------------------------------

@dataclass(frozen=True)
class RunningCapacity:
    """One running instance of governed capacity, whatever launched it (an Auto Scaling group, a Batch compute
    environment): the guard prices it by type, lifecycle and how long it has run."""
    instance_type: str
    lifecycle: str  # SPOT or ON_DEMAND
    launch_time: datetime
    owner: str = ""  # for the report, e.g. "fleet training"


def price_per_hour(instance_type: str, lifecycle: str, prices: dict) -> float:
    """USD per hour from the Region's price table: Spot at the table's assumed discount for the family. An
    unknown type is priced as the dearest known one: the guard errs towards stopping."""
    on_demand = prices["on_demand_hourly"].get(instance_type)
    if on_demand is None:
        on_demand = max(prices["on_demand_hourly"].values())
    if lifecycle == SPOT:
        return on_demand * (1 - prices["spot_discount"].get(instance_type.split(".")[0], 0.0))
    return on_demand


def month_start(now: datetime) -> datetime:
    return datetime(now.year, now.month, 1, tzinfo=timezone.utc)


def hours_left_in_month(now: datetime) -> float:
    days = calendar.monthrange(now.year, now.month)[1]
    return max(0.0, (month_start(now) + timedelta(days=days) - now).total_seconds() / 3600)


def accrued_cost(capacity: Sequence[RunningCapacity], since: datetime, now: datetime, prices: dict) -> float:
    """What the capacity has cost between ``since`` and ``now`` (instance-hours x the price table)."""
    total = 0.0
    for item in capacity:
        hours = max(0.0, (now - max(item.launch_time, since)).total_seconds() / 3600)
        total += hours * price_per_hour(item.instance_type, item.lifecycle, prices)
    return total


@dataclass(frozen=True)
class Decision:
    decision: str  # "none", "warn" or "stop"
    estimated_to_date: float
    projected_month: float
    stop_line: float
    actual: float  # Budgets' figure
    budget_as_of: str
    accrued_since_budget: float
    hourly_cost: float
    crossing_date: Optional[str]  # when the estimate reaches the stop line at the current rate
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def decide(*, actual: float, budget_age_hours: float, capacity: Sequence[RunningCapacity], prices: dict,
           monthly_limit: float, stop_at_percent: float, now: datetime) -> Decision:
    """Stop when the spend estimated to now reaches the stop line; warn when the month, projected at the
    current hourly cost, would reach it (with the date it would); otherwise nothing."""
    line = monthly_limit * stop_at_percent / 100
    # Budgets' figure is month to date: capacity counts from when the figure was taken, never before the month.
    since = max(now - timedelta(hours=budget_age_hours), month_start(now))
    accrued = accrued_cost(capacity, since, now, prices)
    hourly = sum(price_per_hour(c.instance_type, c.lifecycle, prices) for c in capacity)
    estimated = actual + accrued
    projected = estimated + hourly * hours_left_in_month(now)
    crossing = None
    if estimated < line and hourly > 0 and projected >= line:
        crossing = (now + timedelta(hours=(line - estimated) / hourly)).strftime("%Y-%m-%d %H:%M UTC")
    if estimated >= line:
        decision = "stop"
        reason = (f"spend estimated to now {estimated:.2f} USD (Budgets {actual:.2f} + running GPU capacity "
                  f"{accrued:.2f} since {since:%Y-%m-%d %H:%M} UTC) reached the stop line {line:.2f} USD "
                  f"({stop_at_percent:g}% of {monthly_limit:.2f})")
    elif crossing:
        decision = "warn"
        reason = (f"at {hourly:.2f} USD/h the spend reaches the stop line {line:.2f} USD on {crossing} "
                  f"(estimated to now {estimated:.2f}, projected month {projected:.2f}); the guard stops then")
    else:
        decision = "none"
        reason = (f"estimated to now {estimated:.2f} USD and projected month {projected:.2f} USD stay under the "
                  f"stop line {line:.2f} USD")
    return Decision(decision=decision, estimated_to_date=round(estimated, 2), projected_month=round(projected, 2),
                    stop_line=round(line, 2), actual=round(actual, 2), budget_as_of=f"{since:%Y-%m-%dT%H:%MZ}",
                    accrued_since_budget=round(accrued, 2), hourly_cost=round(hourly, 2), crossing_date=crossing,
                    reason=reason)


# --- fleets: find, read, stop, resume ---------------------------------------------------------------------------

def fleet_groups(autoscaling: Any, environment: str) -> list[dict]:
    pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=[
        {"Name": "tag-key", "Values": [FLEET_TAG]},
        {"Name": f"tag:{BUDGET_SCOPE_TAG}", "Values": [governed_scope(environment)]}])
    return [group for page in pages for group in page["AutoScalingGroups"]]


def _fleet_name(group: dict) -> str:
    return next((t["Value"] for t in group.get("Tags", []) if t["Key"] == FLEET_TAG), group["AutoScalingGroupName"])


def _not_found(error: Exception) -> bool:
    return getattr(error, "response", {}).get("Error", {}).get("Code", "") == "InvalidInstanceID.NotFound"


def fleet_capacity(autoscaling: Any, ec2: Any, environment: str, now: datetime) -> list[RunningCapacity]:
    """The environment's running fleet instances. EC2 can answer NotFound for instances Auto Scaling just
    launched (eventual consistency: https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html);
    those are counted as On-Demand, launched now, of the type Auto Scaling reports (errs high)."""
    members = {i["InstanceId"]: (i.get("InstanceType", ""), f"fleet {_fleet_name(g)}")
               for g in fleet_groups(autoscaling, environment) for i in g.get("Instances", [])
               if i["LifecycleState"] in ("InService", "Pending", "Pending:Wait", "Pending:Proceed")}
    found: dict[str, RunningCapacity] = {}

    def describe(ids: list[str]) -> None:
        for reservation in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = RunningCapacity(
                    instance["InstanceType"], SPOT if instance.get("InstanceLifecycle") == "spot" else ON_DEMAND,
                    instance["LaunchTime"], members[instance["InstanceId"]][1])

    ids = list(members)
    for start in range(0, len(ids), 100):
        try:
            describe(ids[start:start + 100])
        except Exception as error:  # botocore's ClientError; the runtime imports no botocore at module level
            if not _not_found(error):
                raise
            for one in ids[start:start + 100]:  # one at a time, so a single new instance hides no others
                try:
                    describe([one])
                except Exception as inner:
                    if not _not_found(inner):
                        raise
    return [found.get(i) or RunningCapacity(members[i][0], ON_DEMAND, now, members[i][1]) for i in ids]


def stop_fleets(autoscaling: Any, environment: str, reason: str, now: datetime) -> dict:
    """Idempotent: a fleet already stopped is reported as such and left as it is. A fleet an operator resumed
    this month is left running: resuming is a decision to spend past the line."""
    report = {"stopped": [], "already_stopped": [], "resumed_by_operator": []}
    for group in fleet_groups(autoscaling, environment):
        name = group["AutoScalingGroupName"]
        suspended = {p["ProcessName"] for p in group.get("SuspendedProcesses", [])}
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        entry = {"fleet": _fleet_name(group), "group": name, "desired_before": group["DesiredCapacity"],
                 "instances": len(group.get("Instances", []))}
        if tags.get(RESUMED_TAG) == f"{now:%Y-%m}":
            report["resumed_by_operator"].append(entry)
            continue
        if "Launch" in suspended and group["DesiredCapacity"] == 0:
            report["already_stopped"].append(entry)
            continue
        autoscaling.suspend_processes(AutoScalingGroupName=name, ScalingProcesses=["Launch"])
        autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, DesiredCapacity=0)
        autoscaling.create_or_update_tags(Tags=[{
            "ResourceId": name, "ResourceType": "auto-scaling-group", "Key": STOP_TAG, "PropagateAtLaunch": False,
            "Value": f"{now:%Y-%m-%dT%H:%MZ} {reason}"[:256]}])
        report["stopped"].append(entry)
    return report


def unstoppable(sagemaker: Any, environment: str) -> list[str]:
    """What the stop leaves running: the environment's SageMaker endpoints (they serve users)."""
    found = []
    for page in sagemaker.get_paginator("list_endpoints").paginate():
        for endpoint in page["Endpoints"]:
            tags = sagemaker.list_tags(ResourceArn=endpoint["EndpointArn"]).get("Tags", [])
            if {"Key": "environment", "Value": environment} in tags:
                found.append(f"SageMaker endpoint {endpoint['EndpointName']} ({endpoint['EndpointStatus']}): "
                             "delete it or scale it down by hand if it must stop too")
    return found


def stop(autoscaling: Any, sagemaker: Any, environment: str, reason: str, now: datetime, batch: Any = None) -> dict:
    """Stops every kind of governed capacity first (fleets, then training queues when ``batch`` is given), then
    lists what it cannot stop; a failure to list is reported, never raised, since the stop itself is done."""
    report = {"action": "stop", "environment": environment, "reason": reason, "time": now.isoformat(),
              **stop_fleets(autoscaling, environment, reason, now)}
    if batch is not None:
        report.update(stop_queues(batch, environment, reason, now))
    try:
        report["not_stopped"] = unstoppable(sagemaker, environment)
    except Exception as error:  # reporting only
        report["not_stopped"] = [f"could not list the environment's SageMaker endpoints ({error}): check them by hand"]
    return report


def resume(autoscaling: Any, environment: str, operator: str, now: datetime, batch: Any = None) -> dict:
    """Lets the fleets launch again for the rest of the month (the guard will not stop them again before the
    next month); their desired capacity stays 0 until someone scales them. With ``batch``, the training queues
    run again too, and the jobs the stop ended are resubmitted."""
    report = {"action": "resume", "environment": environment, "operator": operator, "time": now.isoformat(),
              "resumed": []}
    for group in fleet_groups(autoscaling, environment):
        name = group["AutoScalingGroupName"]
        if not any(p["ProcessName"] == "Launch" for p in group.get("SuspendedProcesses", [])):
            continue
        autoscaling.resume_processes(AutoScalingGroupName=name, ScalingProcesses=["Launch"])
        autoscaling.delete_tags(Tags=[{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": STOP_TAG}])
        autoscaling.create_or_update_tags(Tags=[{
            "ResourceId": name, "ResourceType": "auto-scaling-group", "Key": RESUMED_TAG, "PropagateAtLaunch": False,
            "Value": f"{now:%Y-%m}"}])
        report["resumed"].append({"fleet": _fleet_name(group), "group": name})
    if batch is not None:
        report.update(resume_queues(batch, environment, now))
    return report


# --- training queues (AWS Batch): find, read, stop, resume ----------------------------------------------------

def governed_queues(batch: Any, environment: str) -> list[dict]:
    """The job queues of training queues governed by this scope (each TrainingQueue tags its queues)."""
    scope = governed_scope(environment)
    queues = []
    for page in batch.get_paginator("describe_job_queues").paginate():
        queues += [q for q in page["jobQueues"]
                   if QUEUE_TAG in q.get("tags", {}) and q.get("tags", {}).get(BUDGET_SCOPE_TAG) == scope]
    return queues


def queue_capacity(ec2: Any, environment: str, now: datetime) -> list[RunningCapacity]:
    """The running instances of governed training queues, by the tags each queue's compute environments put on
    the instances Batch launches."""
    found = []
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": "tag-key", "Values": [QUEUE_TAG]},
        {"Name": f"tag:{BUDGET_SCOPE_TAG}", "Values": [governed_scope(environment)]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                found.append(RunningCapacity(instance["InstanceType"],
                                             SPOT if instance.get("InstanceLifecycle") == "spot" else ON_DEMAND,
                                             instance.get("LaunchTime", now), f"queue {tags.get(QUEUE_TAG, '?')}"))
    return found


def _queue_jobs(batch: Any, queue_arn: str, statuses: Sequence[str]) -> list[dict]:
    jobs = []
    for status in statuses:
        for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue_arn, jobStatus=status):
            jobs += page["jobSummaryList"]
    return jobs


def stop_queues(batch: Any, environment: str, reason: str, now: datetime) -> dict:
    """Idempotent, like the fleets' stop; a queue an operator resumed this month is left running."""
    report = {"queues_stopped": [], "queues_already_stopped": [], "queues_resumed_by_operator": [], "jobs_ended": []}
    for queue in governed_queues(batch, environment):
        name, arn, tags = queue["tags"][QUEUE_TAG], queue["jobQueueArn"], queue.get("tags", {})
        entry = {"queue": name, "job_queue": queue["jobQueueName"]}
        if tags.get(RESUMED_TAG) == f"{now:%Y-%m}":
            report["queues_resumed_by_operator"].append(entry)
            continue
        environments = [e["computeEnvironment"] for e in queue.get("computeEnvironmentOrder", [])]
        running = _queue_jobs(batch, arn, ("STARTING", "RUNNING"))
        if queue["state"] == "DISABLED" and not running:
            report["queues_already_stopped"].append(entry)
            continue
        batch.update_job_queue(jobQueue=arn, state="DISABLED")  # no new job starts
        for environment_arn in environments:  # no new instances; idle ones scale in
            batch.update_compute_environment(computeEnvironment=environment_arn, state="DISABLED")
        for job in running:  # SIGTERM, then SIGKILL after the queue's stop timeout: the job checkpoints
            batch.terminate_job(jobId=job["jobId"], reason=f"{STOP_REASON_PREFIX} {now:%Y-%m-%dT%H:%MZ}: {reason}"[:255])
            report["jobs_ended"].append({"queue": name, "job": job["jobName"], "id": job["jobId"]})
        batch.tag_resource(resourceArn=arn, tags={STOP_TAG: f"{now:%Y-%m-%dT%H:%MZ} {reason}"[:256]})
        report["queues_stopped"].append({**entry, "jobs_ended": len(running),
                                         "jobs_waiting": len(_queue_jobs(batch, arn, ("SUBMITTED", "PENDING", "RUNNABLE")))})
    return report


def _resubmission(job: dict) -> dict:
    """SubmitJob arguments that run a job again as it was submitted (same name: same checkpoint prefix)."""
    tags = {k: v for k, v in job.get("tags", {}).items() if k not in (RESUBMITTED_TAG, RESUBMISSION_OF_TAG)}
    request = {"jobName": job["jobName"], "jobQueue": job["jobQueue"], "jobDefinition": job["jobDefinition"],
               "propagateTags": job.get("propagateTags", True), "tags": {**tags, RESUBMISSION_OF_TAG: job["jobId"]}}
    for key in ("retryStrategy", "timeout", "parameters"):
        if job.get(key):
            request[key] = job[key]
    if job.get("container"):
        request["containerOverrides"] = _overrides(job["container"])
    if job.get("nodeProperties"):
        nodes = job["nodeProperties"]
        request["nodeOverrides"] = {"numNodes": nodes["numNodes"], "nodePropertyOverrides": [
            {"targetNodes": r["targetNodes"], "containerOverrides": _overrides(r.get("container", {}))}
            for r in nodes.get("nodeRangeProperties", [])]}
    return request


def _overrides(container: dict) -> dict:
    """The command, environment and resources a job ran with, as overrides. Batch sets the AWS_BATCH_* variables
    itself and refuses them in a submission."""
    overrides = {k: container[k] for k in ("command", "resourceRequirements") if container.get(k)}
    environment = [e for e in container.get("environment", []) if not e["name"].startswith("AWS_BATCH")]
    if environment:
        overrides["environment"] = environment
    return overrides


def resume_queues(batch: Any, environment: str, now: datetime) -> dict:
    """Enables the queues and their compute environments for the rest of the month, and resubmits every job the
    stop ended (under its name, so it resumes from its checkpoints); each is resubmitted once."""
    report = {"queues_resumed": [], "jobs_resubmitted": []}
    for queue in governed_queues(batch, environment):
        arn, tags = queue["jobQueueArn"], queue.get("tags", {})
        if STOP_TAG not in tags and queue["state"] == "ENABLED":
            continue
        for entry in queue.get("computeEnvironmentOrder", []):
            batch.update_compute_environment(computeEnvironment=entry["computeEnvironment"], state="ENABLED")
        batch.update_job_queue(jobQueue=arn, state="ENABLED")
        ended = [j["jobId"] for j in _queue_jobs(batch, arn, ("FAILED",))
                 if j.get("statusReason", "").startswith(STOP_REASON_PREFIX)]
        for start in range(0, len(ended), 100):
            for job in batch.describe_jobs(jobs=ended[start:start + 100])["jobs"]:
                if RESUBMITTED_TAG in job.get("tags", {}):
                    continue
                new = batch.submit_job(**_resubmission(job))
                batch.tag_resource(resourceArn=job["jobArn"], tags={RESUBMITTED_TAG: new["jobId"]})
                report["jobs_resubmitted"].append({"job": job["jobName"], "was": job["jobId"], "now": new["jobId"]})
        batch.untag_resource(resourceArn=arn, tagKeys=[STOP_TAG])
        batch.tag_resource(resourceArn=arn, tags={RESUMED_TAG: f"{now:%Y-%m}"})
        report["queues_resumed"].append({"queue": tags[QUEUE_TAG], "job_queue": queue["jobQueueName"]})
    return report


# --- the scheduled spend check ----------------------------------------------------------------------------------

def actual_spend(budgets: Any, account: str, budget_name: str) -> float:
    budget = budgets.describe_budget(AccountId=account, BudgetName=budget_name)["Budget"]
    return float(budget.get("CalculatedSpend", {}).get("ActualSpend", {}).get("Amount", 0.0))


def warned_today(ssm: Any, parameter: str, now: datetime) -> bool:
    """The early warning goes out at most once a day; the parameter holds the last day it went out."""
    today = f"{now:%Y-%m-%d}"
    if ssm.get_parameter(Name=parameter)["Parameter"]["Value"] == today:
        return True
    ssm.put_parameter(Name=parameter, Value=today, Type="String", Overwrite=True)
    return False


def spend_check(clients: dict, env: dict[str, str], prices: dict, now: datetime) -> dict:
    actual = actual_spend(clients["budgets"], env["ACCOUNT_ID"], env["BUDGET_NAME"])
    capacity = fleet_capacity(clients["autoscaling"], clients["ec2"], env["ENVIRONMENT"], now)
    if "batch" in clients:
        capacity += queue_capacity(clients["ec2"], env["ENVIRONMENT"], now)
    decision = decide(actual=actual, budget_age_hours=float(env.get("BUDGET_AGE_HOURS", DEFAULT_BUDGET_AGE_HOURS)),
                      capacity=capacity, prices=prices, monthly_limit=float(env["MONTHLY_LIMIT"]),
                      stop_at_percent=float(env["STOP_AT_PERCENT"]), now=now)
    result = {"action": "spend-check", "environment": env["ENVIRONMENT"], "time": now.isoformat(),
              "region_priced": prices.get("region"), **decision.as_dict(),
              "capacity": [{**asdict(c), "launch_time": c.launch_time.isoformat()} for c in capacity]}
    if decision.decision == "stop":
        stopped = stop(clients["autoscaling"], clients["sagemaker"], env["ENVIRONMENT"], decision.reason, now,
                       clients.get("batch"))
        if stopped["stopped"] or stopped.get("queues_stopped"):  # every check past the line: report a stop once
            result["stop"] = stopped
    elif decision.decision == "warn" and not warned_today(clients["ssm"], env["WARNING_PARAMETER"], now):
        result["warning"] = decision.reason
    try:  # metrics after the decision: a metrics failure never delays a stop
        clients["cloudwatch"].put_metric_data(Namespace="MLPlatform/Cost", MetricData=[
            {"MetricName": name, "Dimensions": [{"Name": "Environment", "Value": env["ENVIRONMENT"]}],
             "Value": value, "Unit": "None", "Timestamp": now}
            for name, value in (("EstimatedSpendToDate", decision.estimated_to_date),
                                ("ProjectedMonthlySpend", decision.projected_month),
                                ("FleetHourlyCost", decision.hourly_cost))])
    except Exception as error:
        result["metrics_error"] = str(error)
    return result


# --- prices -----------------------------------------------------------------------------------------------------

def load_table() -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "prices.json")) as handle:
        return json.load(handle)


def load_prices(region: str, table: Optional[dict] = None) -> dict:
    """The price table of one Region: its own rates over the table's shared defaults, with ``region`` set. A
    Region the table lacks is priced at the dearest rate of any Region it has (flagged ``unpriced_region``)."""
    table = table or load_table()
    shared = {k: v for k, v in table.items() if k != "regions"}
    regions = table["regions"]
    if region in regions:
        return {**shared, **regions[region], "region": region}
    dearest = {"on_demand_hourly": {}, "spot_discount": {}}
    for rates in regions.values():
        for name, price in rates["on_demand_hourly"].items():
            dearest["on_demand_hourly"][name] = max(price, dearest["on_demand_hourly"].get(name, 0.0))
        for family, discount in rates["spot_discount"].items():
            dearest["spot_discount"][family] = min(discount, dearest["spot_discount"].get(family, 1.0))
    first = next(iter(regions.values()))
    return {**shared, **first, **dearest, "region": region, "unpriced_region": True}


# --- Lambda entry point -----------------------------------------------------------------------------------------

def _announce(sns: Any, topic_arn: str, report: dict) -> None:
    if report.get("action") == "spend-check" and "warning" in report:
        sns.publish(TopicArn=topic_arn, Subject=f"GPU budget guard: early warning {report['environment']}"[:100],
                    Message=f"GPU budget guard, {report['environment']}: early warning at {report['time']}\n"
                            f"{report['warning']}\nscale down, or raise the budget, before then")
        return
    if report.get("action") == "spend-check" and "stop" not in report:
        return  # a routine check under the line is a metric, not a message
    body = report.get("stop", report)
    lines = [f"GPU budget guard, {body['environment']}: {body['action']} at {body['time']}",
             f"why: {body.get('reason', body.get('operator', ''))}"]
    lines += [f"stopped fleet {e['fleet']} (was {e['desired_before']} desired)" for e in body.get("stopped", [])]
    lines += [f"already stopped: {e['fleet']}" for e in body.get("already_stopped", [])]
    lines += [f"resumed fleet {e['fleet']} for the rest of the month (desired stays 0)" for e in body.get("resumed", [])]
    lines += [f"left running (resumed by an operator this month): {e['fleet']}" for e in body.get("resumed_by_operator", [])]
    lines += [f"stopped training queue {e['queue']}: {e['jobs_ended']} running job(s) ended with their checkpoint "
              f"signal, {e['jobs_waiting']} waiting" for e in body.get("queues_stopped", [])]
    lines += [f"already stopped: queue {e['queue']}" for e in body.get("queues_already_stopped", [])]
    lines += [f"left running (resumed by an operator this month): queue {e['queue']}"
              for e in body.get("queues_resumed_by_operator", [])]
    lines += [f"resumed training queue {e['queue']}" for e in body.get("queues_resumed", [])]
    lines += [f"resubmitted {e['job']} ({e['was']} -> {e['now']}): it resumes from its checkpoints"
              for e in body.get("jobs_resubmitted", [])]
    lines += [f"NOT stopped: {item}" for item in body.get("not_stopped", [])]
    if body["action"] == "stop":
        lines.append(f"resume with: ./platform budget resume {body['environment']} (the platform app), or with the "
                      "library only: python -m ml_platform_constructs budget resume --function "
                      f"{os.environ.get('AWS_LAMBDA_FUNCTION_NAME', '<the guard stop_function name>')}")
    sns.publish(TopicArn=topic_arn, Subject=f"GPU budget guard: {body['action']} {body['environment']}"[:100],
                Message="\n".join(lines))


def handle(event: dict, clients: dict, env: dict[str, str], now: datetime, prices: Optional[dict] = None) -> dict:
    if "Records" in event:  # the stop topic: a Budgets notification
        message = event["Records"][0]["Sns"]["Message"]
        report = stop(clients["autoscaling"], clients["sagemaker"], env["ENVIRONMENT"],
                      f"AWS Budgets: {message.strip()[:200]}", now, clients.get("batch"))
    elif event.get("action") == "resume":
        report = resume(clients["autoscaling"], env["ENVIRONMENT"], event.get("operator", "unknown operator"), now,
                        clients.get("batch"))
    else:  # the schedule
        region = env.get("PRICE_REGION") or env.get("AWS_REGION", "us-east-1")
        report = spend_check(clients, env, prices or load_prices(region), now)
    print(json.dumps(report, default=str))  # the audit trail: one JSON line per action in the function's log
    _announce(clients["sns"], env["ALERT_TOPIC_ARN"], report)
    return report


def handler(event: dict, context: Any) -> dict:
    import boto3

    clients = {name: boto3.client(name)
               for name in ("autoscaling", "ec2", "budgets", "cloudwatch", "sagemaker", "sns", "ssm", "batch")}
    return handle(event, clients, dict(os.environ), datetime.now(timezone.utc))
