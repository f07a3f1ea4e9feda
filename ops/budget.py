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

what-if runs the guard's own decision with the environment's budget and its Region's prices (the same as the
library's `python -m ml_platform_constructs budget what-if`, with config's figures). --running counts Spot
instances, --on-demand On-Demand ones: COUNT 1 to 1,000 of a type; @HOURS is how long they have run this month (0 to
744; default 0: just launched). Defaults: nothing spent, Budgets' figure fresh, nothing running, now.
status and resume need the environment's credentials, activate-tags the payer account's (both checked first).
"""

from __future__ import annotations

import getpass
import json
from datetime import datetime, timezone
from typing import Any

from ml_platform_constructs.advice import budget_what_if
from ml_platform_constructs.operations.cli import budget_status
from ml_platform_constructs.runtime.handlers import budget_guard

from ops.aws_access import environment, payer_session, session_for
from ops.cli import Parser, add_what_if_figures, aws_errors_in_one_line, fit, refusals_are_bad_arguments
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


# --- what-if: the library's (ml_platform_constructs.advice.budget_what_if), with the environment's budget and Region -----

def what_if(env: EnvironmentConfig, *, actual: float, budget_age_hours: float, running: list[str],
            on_demand: list[str], now: datetime) -> dict:
    if env.budget is None or env.budget.stop_at_percent is None:
        raise SystemExit(f"error: {env.name} has no budget stop configured ([environments.{env.name}.budget] with "
                         "stop_at_percent): the guard would never stop it")
    return budget_what_if.what_if(label=env.name, prices=budget_guard.load_prices(env.region),
                                  monthly_limit=env.budget.monthly_limit_usd,
                                  stop_at_percent=env.budget.stop_at_percent, actual=actual,
                                  budget_age_hours=budget_age_hours, running=running, on_demand=on_demand, now=now)


@aws_errors_in_one_line
def main(argv: list[str]) -> int:
    parser = Parser("./platform budget", description=__doc__)
    parser.add_argument("command", choices=["status", "resume", "activate-tags", "what-if"])
    parser.add_argument("env")
    add_what_if_figures(parser)
    parser.add_argument("--now", type=datetime.fromisoformat, default=None, help="ISO 8601 (default: now, UTC)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = environment(args.env)
    if args.command == "what-if":
        now = args.now or datetime.now(timezone.utc)
        now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
        with refusals_are_bad_arguments("./platform budget what-if"):
            result = what_if(env, actual=args.actual, budget_age_hours=args.budget_age_hours, running=args.running,
                             on_demand=args.on_demand, now=now)
        print(json.dumps(result, indent=1) if args.json else fit(budget_what_if.format_what_if(result)))
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
    from ops.terminal import entry_point

    entry_point(main)
