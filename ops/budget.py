"""Operate an environment's budget guard.

  ./platform budget status ENV          which fleets and queues the guard has stopped, and why; what a stopped
                                        queue still runs, and the jobs that wait for resume
  ./platform budget resume ENV          let stopped fleets launch again (their desired capacity stays 0), run
                                        the queues again and submit the jobs that wait for resume
  ./platform budget activate-tags ENV   activate the platform's tags for cost allocation, with the credentials
                                        of the management (payer) account that pays for ENV's account
  ./platform budget what-if ENV [--actual USD] [--budget-age-hours H] [--running TYPE=COUNT[@HOURS]]...
                                [--on-demand TYPE=COUNT[@HOURS]]... [--now ISO-8601] [--json]
                                        what the guard would decide for these figures (no AWS access)

what-if runs the guard's own decision (runtime/budget_guard.py: decide) with the environment's budget and its
Region's prices. --running counts Spot instances, --on-demand On-Demand ones; @HOURS is how long they have
run (default 0: just launched). Defaults: nothing spent, Budgets' figure fresh, nothing running, now.
status and resume need the environment's credentials, activate-tags the payer account's (both checked first:
ops/aws_access.py).
"""

from __future__ import annotations

import getpass
import json
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

from ml_platform_constructs.operations import budget_status
from ml_platform_constructs.runtime import budget_guard
from ml_platform_constructs.runtime.budget_guard import ON_DEMAND, SPOT, RunningCapacity

from ops.aws_access import environment, payer_session, session_for
from ops.cli import Parser, aws_errors_in_one_line
from stacks.config import EnvironmentConfig

COST_TAGS = ("environment", "project", "cost-center", "component")


def activate_tags(ce: Any) -> list[str]:
    """Cost allocation tags count from the day they are activated, never retroactively; activation takes up
    to 24 hours and is done in the management (payer) account:
    https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html"""
    response = ce.update_cost_allocation_tags_status(
        CostAllocationTagsStatus=[{"TagKey": key, "Status": "Active"} for key in COST_TAGS])
    failed = {e["TagKey"]: e.get("Message", e.get("Code")) for e in response.get("Errors", [])}
    return [f"{key}: {'activation requested' if key not in failed else 'FAILED: ' + str(failed[key])}"
            for key in COST_TAGS]


# --- what-if ------------------------------------------------------------------------------------------------------

CAPACITY = re.compile(r"^(?P<type>[a-z0-9-]+\.[a-z0-9-]+)=(?P<count>\d+)(@(?P<hours>\d+(\.\d+)?))?$")


def parse_capacity(spec: str, lifecycle: str, now: datetime, prices: dict) -> list[RunningCapacity]:
    """TYPE=COUNT[@HOURS] as COUNT records of TYPE launched HOURS ago."""
    match = CAPACITY.match(spec)
    if not match:
        raise SystemExit(f"error: {spec!r}: expected TYPE=COUNT[@HOURS], e.g. g6e.24xlarge=4@2.5")
    if match["type"] not in prices["on_demand_hourly"]:
        raise SystemExit(f"error: {match['type']!r} has no price in the {prices['region']} table; priced types: "
                         f"{', '.join(sorted(prices['on_demand_hourly']))}")
    launched = now - timedelta(hours=float(match["hours"] or 0))
    return [RunningCapacity(match["type"], lifecycle, launched, f"what-if {spec}")] * int(match["count"])


def what_if(env: EnvironmentConfig, *, actual: float, budget_age_hours: float, running: list[str],
            on_demand: list[str], now: datetime) -> dict:
    """The guard's decision (budget_guard.decide) for the given figures, with the environment's budget and
    the price table of its Region."""
    if env.budget is None or env.budget.stop_at_percent is None:
        raise SystemExit(f"error: {env.name} has no budget stop configured ([environments.{env.name}.budget] with "
                         "stop_at_percent): the guard would never stop it")
    prices = budget_guard.load_prices(env.region)
    capacity = [record for spec in running for record in parse_capacity(spec, SPOT, now, prices)]
    capacity += [record for spec in on_demand for record in parse_capacity(spec, ON_DEMAND, now, prices)]
    decision = budget_guard.decide(actual=actual, budget_age_hours=budget_age_hours, capacity=capacity,
                                   prices=prices, monthly_limit=env.budget.monthly_limit_usd,
                                   stop_at_percent=env.budget.stop_at_percent, now=now)
    return {"environment": env.name, "region_priced": env.region, "now": now.isoformat(), **decision.as_dict(),
            "running": running, "on_demand": on_demand}


def format_what_if(result: dict) -> str:
    def usd(value: float) -> str:
        return f"{value:>12,.2f} USD"

    lines = [f"{result['environment']} at {result['now']} ({result['region_priced']} prices): "
             f"decision {result['decision'].upper()}",
             f"  stop line          {usd(result['stop_line'])}",
             f"  Budgets' actual    {usd(result['actual'])}  (taken as of {result['budget_as_of']})",
             f"  + GPU since then   {usd(result['accrued_since_budget'])}",
             f"  = estimated to now {usd(result['estimated_to_date'])}",
             f"  running cost       {result['hourly_cost']:>12,.2f} USD/h",
             f"  projected month    {usd(result['projected_month'])}"]
    if result["crossing_date"]:
        lines.append(f"  line crossed on    {result['crossing_date']:>16}")
    lines.append(f"  why: {result['reason']}")
    return "\n".join(lines)


@aws_errors_in_one_line
def main(argv: list[str]) -> int:
    parser = Parser("./platform budget", description=__doc__)
    parser.add_argument("command", choices=["status", "resume", "activate-tags", "what-if"])
    parser.add_argument("env")
    parser.add_argument("--actual", type=float, default=0.0, help="Budgets' actual spend this month (USD)")
    parser.add_argument("--budget-age-hours", type=float, default=0.0, help="how old Budgets' figure is")
    parser.add_argument("--running", action="append", default=[], metavar="TYPE=COUNT[@HOURS]", help="Spot")
    parser.add_argument("--on-demand", action="append", default=[], metavar="TYPE=COUNT[@HOURS]")
    parser.add_argument("--now", type=datetime.fromisoformat, default=None, help="ISO 8601 (default: now, UTC)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = environment(args.env)
    if args.command == "what-if":
        now = args.now or datetime.now(timezone.utc)
        now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
        result = what_if(env, actual=args.actual, budget_age_hours=args.budget_age_hours, running=args.running,
                         on_demand=args.on_demand, now=now)
        print(json.dumps(result, indent=1) if args.json else format_what_if(result))
        return 0
    if args.command == "activate-tags":  # the payer account's credentials, not the environment's
        session = payer_session(env)
        print("\n".join(activate_tags(session.client("ce", region_name="us-east-1"))))
        return 0
    session = session_for(env)
    pending = budget_guard.PendingJobs(session.client("ssm"))  # the record of jobs the stop ended, and refused ones
    if args.command == "status":
        print("\n".join(budget_status(session.client("autoscaling"), env.name, session.client("batch"),
                                       session.client("ec2"), pending)))
    else:
        operator = session.client("sts").get_caller_identity()["Arn"] or getpass.getuser()
        report = budget_guard.resume(session.client("autoscaling"), env.name, operator, datetime.now(timezone.utc),
                                     session.client("batch"), pending)
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
