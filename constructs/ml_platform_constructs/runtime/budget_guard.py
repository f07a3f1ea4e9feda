"""Stops an environment's GPU spend when its budget runs out, and resumes it on an operator's word.

AWS Lambda handler (standard library and the runtime's boto3). Three events:
- a Budgets notification through the stop topic (actual spend crossed the stop threshold): stop;
- the scheduled spend check: project the month from the budget's actual spend plus what the running fleets
  cost per hour (price table), and stop when the projection crosses the stop threshold;
- {"action": "resume"} from ``python -m ml_platform_constructs budget resume --function NAME`` (or the platform
  app's ``./platform budget resume ENV``): resume (also callable locally).

Stopping a fleet suspends its Auto Scaling ``Launch`` process and sets its desired capacity to 0: running
instances leave through the normal scale-in (the job gets its checkpoint signal), nothing launches again,
and a ``cdk deploy`` does not undo it (the template sets neither a desired capacity nor suspended
processes). Data is never touched. Each action is logged as one JSON line, tagged on the group
(``ml-platform:budget-stop``) and reported to the alert topic, with what the stop cannot stop.
"""

from __future__ import annotations

import calendar
import json
import os
from datetime import datetime, timezone
from typing import Any, Optional

FLEET_TAG = "ml-platform:fleet"
STOP_TAG = "ml-platform:budget-stop"
RESUMED_TAG = "ml-platform:budget-resumed"  # YYYY-MM: an operator resumed this month; the guard leaves it running


# --- what the guard governs (the selection contract of ml_platform_constructs.governance) -----------------------
# Each governed construct tags itself BUDGET_SCOPE_TAG=<scope>; the guard's function gets its scope as
# BUDGET_SCOPE. Called without it (an operator's local command), the scope is the environment's name, which
# the platform app passes as the scope of every environment.
BUDGET_SCOPE_TAG = "ml-platform:budget-scope"


def governed_scope(environment: str) -> str:
    return os.environ.get("BUDGET_SCOPE") or environment


def fleet_groups(autoscaling: Any, environment: str) -> list[dict]:
    pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=[
        {"Name": "tag-key", "Values": [FLEET_TAG]},
        {"Name": f"tag:{BUDGET_SCOPE_TAG}", "Values": [governed_scope(environment)]}])
    return [group for page in pages for group in page["AutoScalingGroups"]]


def _fleet_name(group: dict) -> str:
    return next((t["Value"] for t in group.get("Tags", []) if t["Key"] == FLEET_TAG), group["AutoScalingGroupName"])


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


def stop(autoscaling: Any, sagemaker: Any, environment: str, reason: str, now: datetime) -> dict:
    """Idempotent: a fleet already stopped is reported as such and left as it is. A fleet an operator resumed
    this month is left running: resuming is a decision to spend past the threshold."""
    report = {"action": "stop", "environment": environment, "reason": reason, "time": now.isoformat(),
              "stopped": [], "already_stopped": [], "resumed_by_operator": [],
              "not_stopped": unstoppable(sagemaker, environment)}
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


def resume(autoscaling: Any, environment: str, operator: str, now: datetime) -> dict:
    """Lets the fleets launch again for the rest of the month (the guard will not stop them again before the
    next month); their desired capacity stays 0 until someone scales them."""
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
    return report


# --- the fast guard ---------------------------------------------------------------------------------------------

def hourly_rate(autoscaling: Any, ec2: Any, environment: str, prices: dict) -> tuple[float, list[dict]]:
    """What the environment's fleets cost per hour right now, from the price table (Spot at its assumed discount)."""
    instance_ids = [i["InstanceId"] for g in fleet_groups(autoscaling, environment) for i in g.get("Instances", [])
                    if i["LifecycleState"] in ("InService", "Pending", "Pending:Wait", "Pending:Proceed")]
    details = []
    for start in range(0, len(instance_ids), 100):
        for reservation in ec2.describe_instances(InstanceIds=instance_ids[start:start + 100])["Reservations"]:
            for instance in reservation["Instances"]:
                details.append(price_instance(instance["InstanceType"], instance.get("InstanceLifecycle") == "spot",
                                              prices) | {"instance": instance["InstanceId"]})
    return sum(d["hourly"] for d in details), details


def price_instance(instance_type: str, spot: bool, prices: dict) -> dict:
    on_demand = prices["on_demand_hourly"].get(instance_type)
    if on_demand is None:
        # An unknown type is priced high rather than free: the guard errs towards stopping.
        on_demand = max(prices["on_demand_hourly"].values())
    family = instance_type.split(".")[0]
    hourly = on_demand * (1 - prices["spot_discount"].get(family, 0.0)) if spot else on_demand
    return {"type": instance_type, "spot": spot, "hourly": hourly}


def hours_left_in_month(now: datetime) -> float:
    days = calendar.monthrange(now.year, now.month)[1]
    end = datetime(now.year, now.month, days, tzinfo=timezone.utc).timestamp() + 86400
    return max(0.0, (end - now.timestamp()) / 3600)


def projected_month_spend(actual_to_date: float, hourly: float, now: datetime) -> float:
    return actual_to_date + hourly * hours_left_in_month(now)


def actual_spend(budgets: Any, account: str, budget_name: str) -> float:
    budget = budgets.describe_budget(AccountId=account, BudgetName=budget_name)["Budget"]
    return float(budget.get("CalculatedSpend", {}).get("ActualSpend", {}).get("Amount", 0.0))


def spend_check(clients: dict, env: dict[str, str], prices: dict, now: datetime) -> dict:
    limit = float(env["MONTHLY_LIMIT"]) * float(env["STOP_AT_PERCENT"]) / 100
    actual = actual_spend(clients["budgets"], env["ACCOUNT_ID"], env["BUDGET_NAME"])
    rate, details = hourly_rate(clients["autoscaling"], clients["ec2"], env["ENVIRONMENT"], prices)
    projection = projected_month_spend(actual, rate, now)
    clients["cloudwatch"].put_metric_data(Namespace="MLPlatform/Cost", MetricData=[
        {"MetricName": name, "Dimensions": [{"Name": "Environment", "Value": env["ENVIRONMENT"]}], "Value": value,
         "Unit": "None", "Timestamp": now}
        for name, value in (("ProjectedMonthlySpend", projection), ("FleetHourlyCost", rate))])
    result = {"action": "spend-check", "environment": env["ENVIRONMENT"], "time": now.isoformat(),
              "actual_to_date": actual, "fleet_hourly_cost": rate, "projected_month": projection,
              "stop_threshold": limit, "instances": details}
    if projection >= limit:
        reason = (f"projected month spend {projection:.2f} USD >= {env['STOP_AT_PERCENT']}% of the "
                  f"{float(env['MONTHLY_LIMIT']):.2f} USD budget (actual {actual:.2f} + {rate:.2f} USD/h)")
        stopped = stop(clients["autoscaling"], clients["sagemaker"], env["ENVIRONMENT"], reason, now)
        if stopped["stopped"]:  # every 15 minutes past the threshold: report a stop once, not each check
            result["stop"] = stopped
    return result


# --- Lambda entry point -----------------------------------------------------------------------------------------

def _announce(sns: Any, topic_arn: str, report: dict) -> None:
    if report.get("action") == "spend-check" and "stop" not in report:
        return  # a routine check below the threshold is a metric, not a message
    body = report.get("stop", report)
    lines = [f"GPU budget guard, {body['environment']}: {body['action']} at {body['time']}",
             f"why: {body.get('reason', body.get('operator', ''))}"]
    lines += [f"stopped fleet {e['fleet']} (was {e['desired_before']} desired)" for e in body.get("stopped", [])]
    lines += [f"already stopped: {e['fleet']}" for e in body.get("already_stopped", [])]
    lines += [f"resumed fleet {e['fleet']} for the rest of the month (desired stays 0)" for e in body.get("resumed", [])]
    lines += [f"left running (resumed by an operator this month): {e['fleet']}" for e in body.get("resumed_by_operator", [])]
    lines += [f"NOT stopped: {item}" for item in body.get("not_stopped", [])]
    if body["action"] == "stop":
        lines.append(f"resume with: ./platform budget resume {body['environment']} (the platform app), or with the "
                      "library only: python -m ml_platform_constructs budget resume --function "
                      f"{os.environ.get('AWS_LAMBDA_FUNCTION_NAME', '<the guard stop_function name>')}")
    sns.publish(TopicArn=topic_arn, Subject=f"GPU budget guard: {body['action']} {body['environment']}"[:100],
                Message="\n".join(lines))


def load_prices() -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "prices.json")) as handle:
        return json.load(handle)


def handle(event: dict, clients: dict, env: dict[str, str], now: datetime, prices: Optional[dict] = None) -> dict:
    if "Records" in event:  # the stop topic: a Budgets notification
        message = event["Records"][0]["Sns"]["Message"]
        report = stop(clients["autoscaling"], clients["sagemaker"], env["ENVIRONMENT"],
                      f"AWS Budgets: {message.strip()[:200]}", now)
    elif event.get("action") == "resume":
        report = resume(clients["autoscaling"], env["ENVIRONMENT"], event.get("operator", "unknown operator"), now)
    else:  # the schedule
        report = spend_check(clients, env, prices or load_prices(), now)
    print(json.dumps(report, default=str))  # the audit trail: one JSON line per action in the function's log
    _announce(clients["sns"], env["ALERT_TOPIC_ARN"], report)
    return report


def handler(event: dict, context: Any) -> dict:
    import boto3

    clients = {name: boto3.client(name) for name in ("autoscaling", "ec2", "budgets", "cloudwatch", "sagemaker", "sns")}
    return handle(event, clients, dict(os.environ), datetime.now(timezone.utc))
