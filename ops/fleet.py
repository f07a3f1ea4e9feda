"""Operate an environment's GPU fleets in its real AWS account (credentials from the usual AWS chain).

  ./platform fleet scale ENV FLEET N    set the fleet's desired capacity (0 stops it; a job needs N instances)
  ./platform fleet status ENV           each fleet's desired, in-service and max instances
  ./platform fleet preflight ENV        quotas, the Auto Scaling service-linked role, dataset snapshots, and
                                        every instance type offered in every AZ it is meant to run in

Every command checks first that the environment and fleet names are configured (and scale, that N is within the
fleet's max_capacity in config), then that the credentials are those of the environment's account.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

from botocore.exceptions import ClientError
from ml_platform_constructs.advice import gpu_catalog
from ml_platform_constructs.runtime.handlers.budget_guard import FLEET_TAG

from ops.aws_access import environment, require_known, session_for
from ops.cli import INSTANCES, Parser, aws_errors_in_one_line, bounded
from ops.dataset import missing_volumes
from stacks.config import EnvironmentConfig, FleetConfig, QueueConfig

# DatasetSnapshotBuilder's default instance type (data.dataset_snapshots.DEFAULT_BUILDER_INSTANCE_TYPE, held equal by
# tests/unit/test_config.py): a copy, so that the operator's commands need no CDK.
SNAPSHOT_BUILDER_TYPE = "m6in.2xlarge"


def find_group(autoscaling: Any, env: EnvironmentConfig, fleet: str) -> dict:
    """The fleet's Auto Scaling group, found by its fleet and environment tags."""
    pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=[
        {"Name": f"tag:{FLEET_TAG}", "Values": [fleet]}, {"Name": "tag:environment", "Values": [env.name]}])
    groups = [group for page in pages for group in page["AutoScalingGroups"]]
    if len(groups) != 1:
        raise SystemExit(f"error: fleet {fleet!r} of {env.name}: expected one Auto Scaling group, found {len(groups)} "
                         f"(deploy it with ./platform deploy {env.name})")
    return groups[0]


def scale(autoscaling: Any, env: EnvironmentConfig, fleet: str, capacity: int) -> str:
    group = find_group(autoscaling, env, fleet)
    if not 0 <= capacity <= group["MaxSize"]:
        raise SystemExit(f"error: capacity {capacity} is outside 0..{group['MaxSize']} (the fleet's max_capacity in config)")
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


def quota_needs(fleets: tuple[FleetConfig, ...], queues: tuple[QueueConfig, ...] = ()) -> list[QuotaNeed]:
    """vCPUs each quota must allow for every fleet at max capacity on its largest type (Spot and On-Demand), plus
    every training queue at its vCPU caps (Batch may pass a cap by one instance: its largest type)."""
    needs: dict[tuple[str, str], int] = {}
    for queue in queues:
        for types, vcpus, quota in ((queue.instance_types, queue.max_vcpus, gpu_catalog.spot_quota),
                                    (queue.instance_types, queue.on_demand_max_vcpus, gpu_catalog.on_demand_quota),
                                    (queue.multi_node_instance_types, queue.multi_node_max_vcpus,
                                     gpu_catalog.on_demand_quota)):
            if not vcpus:
                continue
            entries = [gpu_catalog.GPU_CATALOG[name] for name in types]
            key = quota(max(entries, key=lambda e: e.vcpus))
            needs[key] = needs.get(key, 0) + vcpus + max(e.vcpus for e in entries)
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


def offering_check(ec2: Any, kind: str, name: str, instance_types: Sequence[str],
                   availability_zones: Sequence[str]) -> tuple[list[str], bool]:
    """Which of ``instance_types`` EC2 offers in each of ``availability_zones`` (DescribeInstanceTypeOfferings,
    location type availability-zone: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html).
    A type missing from some AZs is a warning (Auto Scaling skips it there: fewer Spot pools); a type offered
    in none of them, or a single-AZ resource's type missing from its AZ, is a failure. ``kind`` and ``name``
    (fleet, builder, queue, ...) only label the lines."""
    offered: set[tuple[str, str]] = set()
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "location", "Values": list(availability_zones)},
                                                   {"Name": "instance-type", "Values": list(instance_types)}])
    for page in pages:
        offered.update((o["InstanceType"], o["Location"]) for o in page["InstanceTypeOfferings"])
    lines, ok = [], True
    for instance_type in instance_types:
        missing = [az for az in availability_zones if (instance_type, az) not in offered]
        if not missing:
            continue
        if len(missing) == len(availability_zones):
            ok = False
            lines.append(f"NOT OFFERED {kind} {name}: {instance_type} in none of {', '.join(availability_zones)}"
                         " -> replace it with a type offered there")
        else:
            lines.append(f"warning {kind} {name}: {instance_type} not offered in {', '.join(missing)}"
                         " (Auto Scaling skips it there: fewer Spot pools)")
    if ok and not lines:
        lines.append(f"ok {kind} {name}: every type offered in {', '.join(availability_zones)}")
    return lines, ok


def preflight(quotas: Any, iam: Any, env: EnvironmentConfig, ssm: Any, ec2: Any) -> tuple[list[str], bool]:
    lines = [f"MISSING {line}" for line in missing_volumes(ssm, env)]
    ready = not lines
    checks = [("fleet", fleet.name, fleet.instance_types, env.availability_zones) for fleet in env.fleets]
    for queue in env.queues:
        checks.append(("queue", queue.name, queue.instance_types, env.availability_zones))
        if queue.multi_node_instance_types:  # one AZ: the first subnet's
            checks.append(("multi-node queue", queue.name, queue.multi_node_instance_types, env.availability_zones[:1]))
    # The snapshot builder launches in the first subnet, the first configured AZ.
    checks.append(("snapshot builder", "DatasetSnapshots", [SNAPSHOT_BUILDER_TYPE], env.availability_zones[:1]))
    for check in checks:
        found, ok = offering_check(ec2, *check)
        lines += found
        ready &= ok
    for need in quota_needs(env.fleets, env.queues):
        try:
            value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=need.code)["Quota"]["Value"]
        except ClientError as error:
            lines.append(f"? {need.name} ({need.code}): could not read ({error.response['Error']['Code']})")
            ready = False
            continue
        ok = value >= need.vcpus
        ready &= ok
        lines.append(f"{'ok' if ok else 'TOO LOW'} {need.name} ({need.code}): {value:g} vCPUs, fleets and queues need up to "
                     f"{need.vcpus}" + ("" if ok else " -> request an increase in the Service Quotas console"))
    try:
        iam.get_role(RoleName="AWSServiceRoleForAutoScaling")
        lines.append("ok Auto Scaling service-linked role exists (the platform key's policy names it)")
    except ClientError:
        ready = False
        lines.append("MISSING Auto Scaling service-linked role: run "
                     "`aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com` before deploying")
    return lines, ready


@aws_errors_in_one_line
def main(argv: list[str]) -> int:
    parser = Parser("./platform fleet", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    scale_parser = commands.add_parser("scale", help="set a fleet's desired capacity (0 stops it)")
    scale_parser.add_argument("env", metavar="ENV", help="the environment, e.g. dev")
    scale_parser.add_argument("fleet", metavar="FLEET", help="a fleet of ENV in config, e.g. training")
    scale_parser.add_argument("capacity", metavar="N", help="instances: 0 to the fleet's max_capacity in config",
                              type=bounded(0, INSTANCES[1], "the fleet's desired capacity in instances (0 stops it)",
                                           example="./platform fleet scale dev training 2", integer=True))
    commands.add_parser("status", help="each fleet's desired, in-service and max instances").add_argument(
        "env", metavar="ENV", help="the environment, e.g. dev")
    commands.add_parser("preflight", help="quotas, service-linked role, snapshots, offerings").add_argument(
        "env", metavar="ENV", help="the environment, e.g. dev")
    args = parser.parse_args(argv)
    env = environment(args.env)
    if args.command == "scale":  # everything config can tell, before the credentials are asked for
        require_known("fleet", args.fleet, [f.name for f in env.fleets], env)
        fleet = next(f for f in env.fleets if f.name == args.fleet)
        if args.capacity > fleet.max_capacity:
            scale_parser.error(f"N={args.capacity} is out of range: {args.fleet}'s desired capacity, from 0 to its "
                               f"max_capacity {fleet.max_capacity} in config/environments.toml (raise max_capacity "
                               f"there and deploy to go higher)")
    session = session_for(env)
    if args.command == "scale":
        print(scale(session.client("autoscaling"), env, args.fleet, args.capacity))
        return 0
    if args.command == "status":
        print("\n".join(status(session.client("autoscaling"), env)))
        return 0
    lines, ready = preflight(session.client("service-quotas"), session.client("iam"), env, session.client("ssm"),
                             session.client("ec2"))
    print("\n".join(lines))
    return 0 if ready else 1


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
