"""Operate an environment's GPU fleets in its real AWS account (credentials from the usual AWS chain).

  python -m ops.fleet scale ENV FLEET N    set the fleet's desired capacity (0 stops it; a job needs N instances)
  python -m ops.fleet status ENV           each fleet's desired, in-service and max instances
  python -m ops.fleet preflight ENV        Spot/On-Demand vCPU quotas and the Auto Scaling service-linked role
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError
from ml_platform_constructs import gpu_catalog
from ml_platform_constructs.spot_gpu_fleet import FLEET_TAG

from ops.dataset import missing_volumes
from stacks import config as platform_config
from stacks.config import EnvironmentConfig, FleetConfig


def find_group(autoscaling: Any, env: EnvironmentConfig, fleet: str) -> dict:
    """The fleet's Auto Scaling group, found by its fleet and environment tags."""
    pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=[
        {"Name": f"tag:{FLEET_TAG}", "Values": [fleet]}, {"Name": "tag:environment", "Values": [env.name]}])
    groups = [group for page in pages for group in page["AutoScalingGroups"]]
    if len(groups) != 1:
        raise SystemExit(f"fleet {fleet!r} of {env.name}: expected one Auto Scaling group, found {len(groups)} "
                         f"(deploy it with ./platform deploy {env.name})")
    return groups[0]


def scale(autoscaling: Any, env: EnvironmentConfig, fleet: str, capacity: int) -> str:
    group = find_group(autoscaling, env, fleet)
    if not 0 <= capacity <= group["MaxSize"]:
        raise SystemExit(f"capacity {capacity} is outside 0..{group['MaxSize']} (the fleet's max_capacity in config)")
    autoscaling.set_desired_capacity(AutoScalingGroupName=group["AutoScalingGroupName"], DesiredCapacity=capacity,
                                     HonorCooldown=False)
    return f"{fleet}: desired capacity {group['DesiredCapacity']} -> {capacity}"


def status(autoscaling: Any, env: EnvironmentConfig) -> list[str]:
    lines = []
    for fleet in env.fleets:
        group = find_group(autoscaling, env, fleet.name)
        in_service = sum(1 for i in group["Instances"] if i["LifecycleState"] == "InService")
        lines.append(f"{fleet.name}: desired {group['DesiredCapacity']}, in service {in_service}, max {group['MaxSize']}")
    return lines


@dataclass(frozen=True)
class QuotaNeed:
    code: str
    name: str
    vcpus: int


def quota_needs(fleets: tuple[FleetConfig, ...]) -> list[QuotaNeed]:
    """vCPUs each quota must allow for every fleet at max capacity on its largest type (Spot and On-Demand)."""
    needs: dict[tuple[str, str], int] = {}
    for fleet in fleets:
        entries = [gpu_catalog.GPU_CATALOG[name] for name in fleet.instance_types]
        by_spot: dict[tuple[str, str], int] = {}
        for entry in entries:
            key = gpu_catalog.spot_quota(entry)
            by_spot[key] = max(by_spot.get(key, 0), entry.vcpus * (fleet.max_capacity - fleet.on_demand_base_capacity))
        if fleet.on_demand_base_capacity:
            for entry in entries:
                key = gpu_catalog.on_demand_quota(entry)
                by_spot[key] = max(by_spot.get(key, 0), entry.vcpus * fleet.on_demand_base_capacity)
        for key, vcpus in by_spot.items():
            needs[key] = needs.get(key, 0) + vcpus
    return [QuotaNeed(code, name, vcpus) for (code, name), vcpus in sorted(needs.items())]


def preflight(quotas: Any, iam: Any, env: EnvironmentConfig, ssm: Any) -> tuple[list[str], bool]:
    lines = [f"MISSING {line}" for line in missing_volumes(ssm, env)]
    ready = not lines
    for need in quota_needs(env.fleets):
        try:
            value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=need.code)["Quota"]["Value"]
        except ClientError as error:
            lines.append(f"? {need.name} ({need.code}): could not read ({error.response['Error']['Code']})")
            ready = False
            continue
        ok = value >= need.vcpus
        ready &= ok
        lines.append(f"{'ok' if ok else 'TOO LOW'} {need.name} ({need.code}): {value:g} vCPUs, fleets need up to "
                     f"{need.vcpus}" + ("" if ok else " -> request an increase in the Service Quotas console"))
    try:
        iam.get_role(RoleName="AWSServiceRoleForAutoScaling")
        lines.append("ok Auto Scaling service-linked role exists (the platform key's policy names it)")
    except ClientError:
        ready = False
        lines.append("MISSING Auto Scaling service-linked role: run "
                     "`aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com` before deploying")
    return lines, ready


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    scale_parser = commands.add_parser("scale")
    scale_parser.add_argument("env")
    scale_parser.add_argument("fleet")
    scale_parser.add_argument("capacity", type=int)
    commands.add_parser("status").add_argument("env")
    commands.add_parser("preflight").add_argument("env")
    args = parser.parse_args(argv)
    env = platform_config.load().select(args.env)[0]
    session = boto3.session.Session(region_name=env.region)
    if args.command == "scale":
        print(scale(session.client("autoscaling"), env, args.fleet, args.capacity))
        return 0
    if args.command == "status":
        print("\n".join(status(session.client("autoscaling"), env)))
        return 0
    lines, ready = preflight(session.client("service-quotas"), session.client("iam"), env, session.client("ssm"))
    print("\n".join(lines))
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
