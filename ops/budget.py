"""Operate an environment's budget guard in its real AWS account (credentials from the usual AWS chain).

  python -m ops.budget status ENV          which fleets the guard has stopped, and why
  python -m ops.budget resume ENV          let stopped fleets launch again (their desired capacity stays 0)
  python -m ops.budget activate-tags ENV   activate the platform's tags for cost allocation (payer account)
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import datetime, timezone
from typing import Any

import boto3
from ml_platform_constructs.runtime import budget_guard

from stacks import config as platform_config

COST_TAGS = ("environment", "project", "cost-center", "component")


def status(autoscaling: Any, environment: str) -> list[str]:
    lines = []
    for group in budget_guard.fleet_groups(autoscaling, environment):
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        launch_suspended = any(p["ProcessName"] == "Launch" for p in group.get("SuspendedProcesses", []))
        state = f"STOPPED ({tags.get(budget_guard.STOP_TAG, 'Launch suspended')})" if launch_suspended else "running"
        lines.append(f"{tags.get(budget_guard.FLEET_TAG)}: {state}, desired {group['DesiredCapacity']}")
    return lines or [f"{environment}: no fleets found"]


def activate_tags(ce: Any) -> list[str]:
    """Cost allocation tags count from the day they are activated, never retroactively; activation takes up
    to 24 hours and is done in the management (payer) account:
    https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html"""
    response = ce.update_cost_allocation_tags_status(
        CostAllocationTagsStatus=[{"TagKey": key, "Status": "Active"} for key in COST_TAGS])
    failed = {e["TagKey"]: e.get("Message", e.get("Code")) for e in response.get("Errors", [])}
    return [f"{key}: {'activation requested' if key not in failed else 'FAILED: ' + str(failed[key])}"
            for key in COST_TAGS]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["status", "resume", "activate-tags"])
    parser.add_argument("env")
    args = parser.parse_args(argv)
    env = platform_config.load().select(args.env)[0]
    session = boto3.session.Session(region_name=env.region)
    if args.command == "status":
        print("\n".join(status(session.client("autoscaling"), env.name)))
    elif args.command == "activate-tags":
        print("\n".join(activate_tags(session.client("ce", region_name="us-east-1"))))
    else:
        operator = session.client("sts").get_caller_identity()["Arn"] if session.get_credentials() else getpass.getuser()
        report = budget_guard.resume(session.client("autoscaling"), env.name, operator, datetime.now(timezone.utc))
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
