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
SIGTERM and waits the queue's stop timeout, so each writes its checkpoint; each job it ends is first recorded as
the submission that runs it again (``pending_jobs``: Batch's job list forgets finished jobs). A ``cdk deploy`` does
not re-enable them (the templates carry no ``State``). A disabled compute environment may keep instances (and their
bill), so every spend check after a stop ends the instances a stopped queue still runs after a grace period.
Resuming enables the queues again and submits every pending record of them: the jobs the stop ended, under their
names (so from the same checkpoints), and what a stopped queue refused meanwhile (a retraining). Data is never touched. Each action is logged as one JSON line, tagged on the group
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

try:
    from .pending_jobs import PendingJobs, active_job
    from ml_platform_job.prices import hourly_usd, load_prices, load_table
except ImportError:  # in Lambda the modules sit at the top of the package (prices.py from the job side's package)
    from pending_jobs import PendingJobs, active_job  # type: ignore[no-redef]
    from prices import hourly_usd, load_prices, load_table  # type: ignore[no-redef]

# The tag keys governed constructs set on themselves; defined here once (this module runs in Lambda, standard
# library only), imported by the constructs.
FLEET_TAG = "ml-platform:fleet"
QUEUE_TAG = "ml-platform:queue"
# The tag an EvaluationSubmitter puts on the evaluation jobs it submits (operations.jobs.DEFINITION_TAG, EVALUATION).
EVALUATION_TAG = ("ml-platform:job-definition", "evaluation")
RESUBMISSION_OF_TAG = "ml-platform:budget-resubmission-of"  # on the resubmission: the job it replaces
STOP_REASON_PREFIX = "ml-platform budget stop"  # starts the status reason of every job the stop ended
STOP_TIME = "%Y-%m-%dT%H:%MZ"  # starts the stop tag's value and the ended jobs' status reason


def settable_tags(tags: dict) -> dict:
    """``tags`` without AWS's own (CloudFormation's ``aws:cloudformation:*`` on every definition a stack deploys),
    which a request may not set: the prefix ``aws:``, in any case, of a key or a value is reserved
    (https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html)."""
    return {k: v for k, v in tags.items() if not k.lower().startswith("aws:") and not v.lower().startswith("aws:")}


# --- what the guard governs (the selection contract of ml_platform_constructs.governance) -----------------------
# Each governed construct tags itself BUDGET_SCOPE_TAG=<scope>; the guard's function gets its scope as
# BUDGET_SCOPE. Called without it (an operator's local command), the scope is the environment's name, which
# the platform app passes as the scope of every environment.
BUDGET_SCOPE_TAG = "ml-platform:budget-scope"
ACCOUNT_SCOPE = "account"  # both sides' default: a guard governs what chose no other scope


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
# After a stop, the instances of a stopped training queue get this long to go by themselves (their jobs' stop
# timeout, then Batch's scale-in) before the guard ends them.
DEFAULT_GRACE_MINUTES = 10.0


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
    """USD per hour from the Region's price table: the one price every command uses (``ml_platform_job.prices.
    hourly_usd``; Spot at the table's conservative discount for the family). An unknown type is priced as the dearest
    known one (``unknown="dearest"``): the guard errs towards stopping; a lifecycle other than Spot is On-Demand."""
    return hourly_usd(prices, instance_type, SPOT if lifecycle == SPOT else ON_DEMAND, unknown="dearest")


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
            "Value": f"{now:{STOP_TIME}} {reason}"[:256]}])
        report["stopped"].append(entry)
    return report


def unstoppable(sagemaker: Any, environment: str) -> list[str]:
    """What the stop leaves running: the SageMaker endpoints of the guard's budget scope (they serve users), found by
    the tag MonitoredEndpoint sets on itself; an endpoint deployed before it did (0.2), by its ``environment`` tag."""
    scope = {"Key": BUDGET_SCOPE_TAG, "Value": governed_scope(environment)}
    found = []
    for page in sagemaker.get_paginator("list_endpoints").paginate():
        for endpoint in page["Endpoints"]:
            tags = sagemaker.list_tags(ResourceArn=endpoint["EndpointArn"]).get("Tags", [])
            if scope in tags or {"Key": "environment", "Value": environment} in tags:
                found.append(f"SageMaker endpoint {endpoint['EndpointName']} ({endpoint['EndpointStatus']}): "
                             "delete it or scale it down by hand if it must stop too")
    return found


def stop(autoscaling: Any, sagemaker: Any, environment: str, reason: str, now: datetime, batch: Any = None,
         pending: Optional[PendingJobs] = None) -> dict:
    """Stops every kind of governed capacity first (fleets, then training queues when ``batch`` is given, recording
    each job it ends in ``pending``), then lists what it cannot stop; a failure to list is reported, never raised,
    since the stop itself is done."""
    report = {"action": "stop", "environment": environment, "reason": reason, "time": now.isoformat(),
              **stop_fleets(autoscaling, environment, reason, now)}
    if batch is not None:
        report.update(stop_queues(batch, _required(pending), environment, reason, now))
    try:
        report["not_stopped"] = unstoppable(sagemaker, environment)
    except Exception as error:  # reporting only
        report["not_stopped"] = [f"could not list the environment's SageMaker endpoints ({error}): check them by hand"]
    return report


def resume(autoscaling: Any, environment: str, operator: str, now: datetime, batch: Any = None,
           pending: Optional[PendingJobs] = None) -> dict:
    """Lets the fleets launch again for the rest of the month (the guard will not stop them again before the
    next month); their desired capacity stays 0 until someone scales them. With ``batch``, the training queues
    run again too, and every submission recorded in ``pending`` for them is submitted."""
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
        report.update(resume_queues(batch, _required(pending), environment, now))
    return report


def _required(pending: Optional[PendingJobs]) -> PendingJobs:
    if pending is None:
        raise ValueError("training queues are stopped and resumed with their record of pending jobs (pending=)")
    return pending


# --- training queues (AWS Batch): find, read, stop, resume ----------------------------------------------------

def governed_queues(batch: Any, environment: str) -> list[dict]:
    """The job queues of training queues governed by this scope (each TrainingQueue tags its queues)."""
    scope = governed_scope(environment)
    queues = []
    for page in batch.get_paginator("describe_job_queues").paginate():
        queues += [q for q in page["jobQueues"]
                   if QUEUE_TAG in q.get("tags", {}) and q.get("tags", {}).get(BUDGET_SCOPE_TAG) == scope]
    return queues


def _queue_instances(ec2: Any, environment: str, queue_names: Optional[Sequence[str]] = None) -> list[dict]:
    """Running instances of governed training queues, by the tags each queue's compute environments put on them."""
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": "tag-key", "Values": [QUEUE_TAG]} if queue_names is None
        else {"Name": f"tag:{QUEUE_TAG}", "Values": list(queue_names)},
        {"Name": f"tag:{BUDGET_SCOPE_TAG}", "Values": [governed_scope(environment)]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [instance for page in pages for reservation in page["Reservations"] for instance in reservation["Instances"]]


def _lifecycle(instance: dict) -> str:
    return SPOT if instance.get("InstanceLifecycle") == "spot" else ON_DEMAND


def _tag(instance: dict, key: str) -> str:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), "?")


def queue_capacity(ec2: Any, environment: str, now: datetime) -> list[RunningCapacity]:
    """The running instances of governed training queues, by the tags each queue's compute environments put on
    the instances Batch launches."""
    return [RunningCapacity(i["InstanceType"], _lifecycle(i), i.get("LaunchTime", now), f"queue {_tag(i, QUEUE_TAG)}")
            for i in _queue_instances(ec2, environment)]


def _queue_jobs(batch: Any, queue_arn: str, statuses: Sequence[str]) -> list[dict]:
    jobs = []
    for status in statuses:
        for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue_arn, jobStatus=status):
            jobs += page["jobSummaryList"]
    return jobs


def _described(batch: Any, job_ids: Sequence[str]) -> dict[str, dict]:
    found = {}
    for start in range(0, len(job_ids), 100):
        found.update({job["jobId"]: job for job in batch.describe_jobs(jobs=list(job_ids[start:start + 100]))["jobs"]})
    return found


def _evaluation_definitions(batch: Any, jobs: Sequence[dict]) -> set[str]:
    """Which of these jobs' definitions are a promotion gate's evaluation definition (by the definition's tag, which
    the guard's role may not change): none known where DescribeJobDefinitions fails (the jobs' own tag still says)."""
    arns = sorted({job["jobDefinition"] for job in jobs if job.get("jobDefinition")})
    found = set()
    try:
        for start in range(0, len(arns), 100):
            found |= {d["jobDefinitionArn"] for d in batch.describe_job_definitions(
                jobDefinitions=arns[start:start + 100])["jobDefinitions"]
                if (d.get("tags") or {}).get(EVALUATION_TAG[0]) == EVALUATION_TAG[1]}
    except Exception:  # the stop goes on; a record the guard may not submit is kept and reported at resume
        pass
    return found


def stop_queues(batch: Any, pending: PendingJobs, environment: str, reason: str, now: datetime) -> dict:
    """Idempotent, like the fleets' stop; a queue an operator resumed this month is left running. Each job it ends is
    first recorded in ``pending`` as the submission that runs it again (resume reads that record, not Batch's job
    list); a job it could not record is still ended, and reported. A promotion gate's evaluation job (its definition
    tagged ``EVALUATION_TAG``, or the job by its submitter, an EvaluationSubmitter) is ended and not recorded: the
    guard may not submit the evaluation definition (its role writes the gate's evidence), so it is evaluated again by
    hand."""
    report = {"queues_stopped": [], "queues_already_stopped": [], "queues_resumed_by_operator": [], "jobs_ended": [],
              "jobs_not_recorded": [], "evaluations_ended": []}
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
        details = _described(batch, [job["jobId"] for job in running])
        evaluations = _evaluation_definitions(batch, list(details.values()))
        for job in running:  # SIGTERM, then SIGKILL after the queue's stop timeout: the job checkpoints
            ended = {"queue": name, "job": job["jobName"], "id": job["jobId"]}
            described = details.get(job["jobId"], {})
            if ((described.get("tags") or {}).get(EVALUATION_TAG[0]) == EVALUATION_TAG[1]
                    or described.get("jobDefinition") in evaluations):
                report["evaluations_ended"].append(ended)
            else:
                try:  # (a job DescribeJobs did not return: a KeyError here, reported, and the stop goes on)
                    pending.record(_resubmission(details[job["jobId"]]), leaf=f"job-{job['jobId']}",
                                   source="budget-stop", now=now)
                except Exception as error:  # the spend stops all the same; the report says what resume will not run
                    report["jobs_not_recorded"].append({**ended, "error": str(error)[:300]})
            batch.terminate_job(jobId=job["jobId"], reason=f"{STOP_REASON_PREFIX} {now:{STOP_TIME}}: {reason}"[:255])
            report["jobs_ended"].append(ended)
        batch.tag_resource(resourceArn=arn, tags={STOP_TAG: f"{now:{STOP_TIME}} {reason}"[:256]})
        report["queues_stopped"].append({**entry, "jobs_ended": len(running),
                                         "jobs_waiting": len(_queue_jobs(batch, arn, ("SUBMITTED", "PENDING", "RUNNABLE")))})
    return report


def _resubmission(job: dict) -> dict:
    """SubmitJob arguments that run a job again as it was submitted (same name: same checkpoint prefix)."""
    tags = {k: v for k, v in settable_tags(job.get("tags", {})).items() if k != RESUBMISSION_OF_TAG}
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


def resume_queues(batch: Any, pending: PendingJobs, environment: str, now: datetime) -> dict:
    """Enables the stopped (or disabled) queues and their compute environments for the rest of the month, then
    submits every pending record of each governed queue: the jobs a stop ended (under their names, so they resume
    from their checkpoints) and submissions a disabled queue refused (a retraining). A record is deleted once
    submitted; one that fails stays for the next resume."""
    report = {"queues_resumed": [], "jobs_resubmitted": [], "jobs_not_resubmitted": []}
    for queue in governed_queues(batch, environment):
        arn, tags = queue["jobQueueArn"], queue.get("tags", {})
        if STOP_TAG in tags or queue["state"] != "ENABLED":
            for entry in queue.get("computeEnvironmentOrder", []):
                batch.update_compute_environment(computeEnvironment=entry["computeEnvironment"], state="ENABLED")
            batch.update_job_queue(jobQueue=arn, state="ENABLED")
            batch.untag_resource(resourceArn=arn, tagKeys=[STOP_TAG])
            batch.tag_resource(resourceArn=arn, tags={RESUMED_TAG: f"{now:%Y-%m}"})
            report["queues_resumed"].append({"queue": tags[QUEUE_TAG], "job_queue": queue["jobQueueName"]})
        for entry in pending.of_queue(queue["jobQueueName"]):
            done, error = submit_pending(batch, pending, queue, entry)
            if error is None:
                report["jobs_resubmitted"].append(done)
            else:
                report["jobs_not_resubmitted"].append({**done, "error": error})
    return report


def _active_definition(batch: Any, definition: str) -> str:
    """The recorded revision, or the family's latest active revision when the record names the family only (a
    retraining) or a deploy deregistered the recorded one (a CloudFormation update registers a new revision and
    deregisters the previous one; Batch refuses an INACTIVE revision). Always a revision: the guard's scope
    condition is evaluated on a job definition's tags only when the submission names one
    (https://docs.aws.amazon.com/batch/latest/userguide/iam-example-restrict-job-submission-by-tags.html)."""
    family, _, revision = definition.rsplit("/", 1)[-1].partition(":")
    if revision:
        described = batch.describe_job_definitions(jobDefinitions=[definition])["jobDefinitions"]
        if described and described[0].get("status") == "ACTIVE":
            return definition
    active = [d for page in batch.get_paginator("describe_job_definitions").paginate(
        jobDefinitionName=family, status="ACTIVE") for d in page["jobDefinitions"]]
    if not active:
        raise LookupError(f"job definition {family} has no active revision: register one, then resume again")
    return max(active, key=lambda d: d["revision"])["jobDefinitionArn"]


def submit_pending(batch: Any, pending: PendingJobs, queue: dict, entry: dict) -> tuple[dict, Optional[str]]:
    """Submits one record and deletes it: ``(report entry, None)``, or ``(entry, error)`` with the record kept."""
    request = entry["request"]
    done = {"queue": queue.get("tags", {}).get(QUEUE_TAG, queue["jobQueueName"]), "job": request["jobName"],
            "was": request.get("tags", {}).get(RESUBMISSION_OF_TAG), "source": entry["source"]}
    if request["jobQueue"] not in (queue["jobQueueArn"], queue["jobQueueName"]):
        return done, f"the record names another job queue ({request['jobQueue']}); left for an operator"
    try:
        running = active_job(batch, queue["jobQueueArn"], request["jobName"])
        if running is not None:  # submitted already (a resume that ended before it deleted the record)
            pending.forget(entry["parameter"])
            return {**done, "now": running["jobId"], "already": True}, None
        definition = _active_definition(batch, request["jobDefinition"])
        new = batch.submit_job(**{**request, "jobDefinition": definition})
    except Exception as error:  # each record on its own: one failure holds back no other
        return done, str(error)[:300]
    pending.forget(entry["parameter"])
    changed = {"definition": definition} if definition != request["jobDefinition"] else {}
    return {**done, "now": new["jobId"], **changed}, None


# --- after a stop: what still runs -------------------------------------------------------------------------------

def _stopped_at(tag: str) -> Optional[datetime]:
    try:
        return datetime.strptime(tag.split(" ", 1)[0], STOP_TIME).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def queue_leftovers(batch: Any, ec2: Any, environment: str) -> list[dict]:
    """For each stopped training queue, what still runs: its instances (by the tags Batch puts on them) and the vCPUs
    its compute environments still want. A DISABLED compute environment "may continue to incur billing charges"
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_ComputeEnvironmentDetail.html, ``state``)."""
    queues: dict[str, dict] = {}
    for queue in governed_queues(batch, environment):
        tags = queue.get("tags", {})
        entry = queues.setdefault(tags[QUEUE_TAG], {"queue": tags[QUEUE_TAG], "stopped": True, "stopped_at": None,
                                                    "environments": []})
        stopped = STOP_TAG in tags and queue["state"] == "DISABLED"
        entry["stopped"] = entry["stopped"] and stopped  # a queue whose job queues were all stopped
        if stopped:
            at = _stopped_at(tags[STOP_TAG])
            entry["stopped_at"] = max(filter(None, (entry["stopped_at"], at)), default=None)
        entry["environments"] += [e["computeEnvironment"] for e in queue.get("computeEnvironmentOrder", [])]
    stopped = {name: entry for name, entry in queues.items() if entry["stopped"]}
    if not stopped:
        return []
    for entry in stopped.values():
        entry["instances"], entry["wanted_vcpus"] = [], []
    for instance in _queue_instances(ec2, environment, sorted(stopped)):
        stopped[_tag(instance, QUEUE_TAG)]["instances"].append({
            "id": instance["InstanceId"], "type": instance["InstanceType"], "lifecycle": _lifecycle(instance),
            "launched": str(instance.get("LaunchTime", ""))})
    for entry in stopped.values():
        arns = sorted(set(entry.pop("environments")))
        for start in range(0, len(arns), 100):
            for environment_ in batch.describe_compute_environments(
                    computeEnvironments=arns[start:start + 100])["computeEnvironments"]:
                wanted = environment_.get("computeResources", {}).get("desiredvCpus", 0)
                if wanted:
                    entry["wanted_vcpus"].append({"environment": environment_["computeEnvironmentName"],
                                                  "desired_vcpus": wanted})
        del entry["stopped"]
    return [entry for entry in stopped.values() if entry["instances"] or entry["wanted_vcpus"]]


def end_leftovers(ec2: Any, leftovers: Sequence[dict], grace: timedelta, now: datetime) -> list[dict]:
    """Terminates the instances of a queue still running ``grace`` after its stop (its jobs were ended with their
    checkpoint signal then; Batch should have let the idle instances go). Returns what it ended, or could not."""
    acted = []
    for entry in leftovers:
        if entry["stopped_at"] is not None and now - entry["stopped_at"] < grace:
            continue
        ids = [instance["id"] for instance in entry["instances"]]
        if not ids:
            continue
        item = {**entry, "stopped_at": entry["stopped_at"] and entry["stopped_at"].isoformat(), "ended": []}
        try:
            for start in range(0, len(ids), 100):
                ec2.terminate_instances(InstanceIds=ids[start:start + 100])
                item["ended"] += ids[start:start + 100]
        except Exception as error:
            item["error"] = str(error)[:300]
        acted.append(item)
    return acted


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
                       clients.get("batch"), pending_jobs(clients, env))
        if stopped["stopped"] or stopped.get("queues_stopped"):  # every check past the line: report a stop once
            result["stop"] = stopped
    elif decision.decision == "warn" and not warned_today(clients["ssm"], env["WARNING_PARAMETER"], now):
        result["warning"] = decision.reason
    if "batch" in clients:  # after the stop, never before it: instances a stopped queue still runs
        try:
            grace = timedelta(minutes=float(env.get("STOPPED_INSTANCE_GRACE_MINUTES", DEFAULT_GRACE_MINUTES)))
            ended = end_leftovers(clients["ec2"], queue_leftovers(clients["batch"], clients["ec2"], env["ENVIRONMENT"]),
                                  grace, now)
            if ended:
                result["leftovers"] = ended
        except Exception as error:
            result["leftovers"] = [{"queue": "?", "instances": [], "wanted_vcpus": [], "ended": [],
                                    "error": f"could not check the stopped queues' instances: {error}"[:300]}]
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


# --- Lambda entry point -----------------------------------------------------------------------------------------

def _announce(sns: Any, topic_arn: str, report: dict) -> None:
    if report.get("action") == "spend-check" and "warning" in report:
        sns.publish(TopicArn=topic_arn, Subject=f"GPU budget guard: early warning {report['environment']}"[:100],
                    Message=f"GPU budget guard, {report['environment']}: early warning at {report['time']}\n"
                            f"{report['warning']}\nscale down, or raise the budget, before then")
        return
    if report.get("action") == "spend-check" and "stop" not in report and not report.get("leftovers"):
        return  # a routine check under the line is a metric, not a message
    body = report.get("stop", report)
    if "stop" not in report and report.get("action") == "spend-check":  # only leftovers to report
        body = {"environment": report["environment"], "action": "check after a stop", "time": report["time"],
                "reason": "a stopped training queue still runs instances"}
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
    lines += [f"NOT recorded, so resume will not run it again: {e['job']} ({e['id']}) of queue {e['queue']}: "
              f"{e['error']}; submit it again by hand, under the same name" for e in body.get("jobs_not_recorded", [])]
    lines += [f"ended evaluation {e['job']} ({e['id']}) of queue {e['queue']}, not recorded (only its submitter runs "
              "it): ./platform model evaluate it again after the resume" for e in body.get("evaluations_ended", [])]
    lines += [f"resumed training queue {e['queue']}" for e in body.get("queues_resumed", [])]
    lines += [f"resubmitted {e['job']} ({e['was']} -> {e['now']}): it resumes from its checkpoints" if e.get("was")
              else f"submitted {e['job']} ({e['now']}), which the stopped queue had refused ({e['source']})"
              for e in body.get("jobs_resubmitted", [])]
    lines += [f"NOT resubmitted: {e['job']} to queue {e['queue']}: {e['error']} (its record stays: resume again)"
              for e in body.get("jobs_not_resubmitted", [])]
    lines += [f"NOT stopped: {item}" for item in body.get("not_stopped", [])]
    for entry in report.get("leftovers", []):
        running = ", ".join(f"{i['id']} ({i['type']}, {i['lifecycle']})" for i in entry["instances"])
        wanted = "; ".join(f"compute environment {w['environment']} still wants {w['desired_vcpus']} vCPUs"
                           for w in entry["wanted_vcpus"])
        if entry.get("error"):
            lines.append(f"STILL RUNNING after the stop of training queue {entry['queue']}: {running or '?'}; could not "
                         f"end them ({entry['error']}): end them by hand (aws ec2 terminate-instances --instance-ids "
                         f"{' '.join(i['id'] for i in entry['instances'])}). {wanted}".rstrip(". ") + ".")
        else:
            lines.append(f"ended {len(entry['ended'])} instance(s) training queue {entry['queue']} still ran after its "
                         f"stop: {running}. {wanted}".rstrip(". ") + ".")
    if body["action"] == "stop":
        lines.append(f"resume with: ./platform budget resume {body['environment']} (the platform app), or with the "
                      "library only: python -m ml_platform_constructs budget resume --function "
                      f"{os.environ.get('AWS_LAMBDA_FUNCTION_NAME', '<the guard stop_function name>')}")
    sns.publish(TopicArn=topic_arn, Subject=f"GPU budget guard: {body['action']} {body['environment']}"[:100],
                Message="\n".join(lines))


def pending_jobs(clients: dict, env: dict[str, str]) -> Optional[PendingJobs]:
    """The record of pending submissions, encrypted with the guard's key (RECORD_KEY_ID)."""
    return PendingJobs(clients["ssm"], env.get("RECORD_KEY_ID")) if "ssm" in clients else None


def handle(event: dict, clients: dict, env: dict[str, str], now: datetime, prices: Optional[dict] = None) -> dict:
    if "Records" in event:  # the stop topic: a Budgets notification
        message = event["Records"][0]["Sns"]["Message"]
        report = stop(clients["autoscaling"], clients["sagemaker"], env["ENVIRONMENT"],
                      f"AWS Budgets: {message.strip()[:200]}", now, clients.get("batch"), pending_jobs(clients, env))
    elif event.get("action") == "resume":
        report = resume(clients["autoscaling"], env["ENVIRONMENT"], event.get("operator", "unknown operator"), now,
                        clients.get("batch"), pending_jobs(clients, env))
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
