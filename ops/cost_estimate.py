"""Estimates each environment's monthly cost from its synthesized templates and the shipped price table.

  ./platform cost [ENV] [--utilization 0.25] [--storage-gb 1000] [--capture-gb 50]

./platform cost checks its arguments, then synthesizes every environment (an estimate of stale templates would
misstate a changed config); --assembly DIR estimates an app synthesized already instead.

Everything the templates do not say is an assumption, printed with the estimate, and so are the price table's
source and date.
"""

from __future__ import annotations

import argparse
import json
import statistics
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ml_platform_constructs import GPU_CATALOG
from ml_platform_constructs.runtime.handlers.budget_guard import FLEET_TAG, QUEUE_TAG, load_prices
from ml_platform_job.prices import hourly_usd, price_source

from ops import aws_access, terminal
from ops.cdk_cli import synth
from ops.cli import COLUMNS, Parser, bounded, fit

HOURS_PER_MONTH = 730
STORAGE_GB = (0, 10_000_000)  # 10 PB: a figure beyond is a typo, not a bucket
PREFIX_SHARES = {"datasets/": 0.6, "checkpoints/": 0.3, "logs/": 0.1}  # of the dataset bucket's bytes
ASSUMED_RETENTION_DAYS = 365  # for data no rule expires


@dataclass
class Assumptions:
    utilization: float = 0.25
    storage_gb: float = 1000
    capture_gb: float = 50

    def lines(self) -> list[str]:
        return [
            "prices: each environment at its own Region's rates (ml_platform_job/prices.json, with their sources; "
            "the lines below give each environment's date), every GPU hour from the one price the advisor, the "
            "budget guard and job cost use (ml_platform_job.prices.hourly_usd)",
            f"GPU fleets and training queues run at max size {self.utilization:.0%} of the month (--utilization), on "
            "the median-priced of their types (queues: per vCPU, up to their max vCPUs); Spot at the table's "
            "conservative discount per family (its low end across AZs: the estimate errs high)",
            f"dataset bucket holds {self.storage_gb:g} GB (--storage-gb): "
            + ", ".join(f"{p} {s:.0%}" for p, s in PREFIX_SHARES.items())
            + f"; data no rule expires is kept {ASSUMED_RETENTION_DAYS} days; steady ingest",
            "Intelligent-Tiering priced at its Frequent Access rate (no savings assumed), monitoring fee excluded",
            f"each endpoint's capture bucket holds {self.capture_gb:g} GB (--capture-gb)",
            "requests, data transfer, Lambda, CloudWatch Logs ingestion and metrics: not included",
        ]


@dataclass
class FleetEstimate:
    name: str
    types: list[str]
    gpus_per_instance: int
    max_size: int
    on_demand_base: int
    hourly_spot: float
    hourly_on_demand: float
    has_idle_alarm: bool

    def hourly(self, instances: int) -> float:
        on_demand = min(self.on_demand_base, instances)
        return on_demand * self.hourly_on_demand + (instances - on_demand) * self.hourly_spot

    @property
    def gpu_hour(self) -> float:
        return self.hourly(self.max_size) / (self.max_size * self.gpus_per_instance)


@dataclass
class EnvironmentEstimate:
    name: str
    region: str
    budget: Optional[float] = None
    fleets: list[FleetEstimate] = field(default_factory=list)
    lines: list[tuple[str, str, float]] = field(default_factory=list)  # (group, item, USD per month)
    flags: list[str] = field(default_factory=list)
    prices: str = ""  # where the prices come from and when (ml_platform_job.prices.price_source, short)

    def total(self) -> float:
        return sum(amount for _, _, amount in self.lines)


def instance_hourly(types: list[str], lifecycle: str, prices: dict) -> list[float]:
    """USD per instance-hour of each type on ``lifecycle`` ("spot" or "on-demand"): the one price
    (``ml_platform_job.prices.hourly_usd``), as the advisor, the budget guard and job cost take it."""
    return [hourly_usd(prices, t, lifecycle) for t in types]


def fleet_estimate(logical_id: str, group: dict, alarms: list[dict], prices: dict) -> FleetEstimate:
    props = group["Properties"]
    policy = props["MixedInstancesPolicy"]
    types = [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]]
    od = sorted(instance_hourly(types, "on-demand", prices))
    spot = sorted(instance_hourly(types, "spot", prices))
    distribution = policy.get("InstancesDistribution", {})
    all_on_demand = distribution.get("OnDemandPercentageAboveBaseCapacity", 100) == 100
    name = next((t["Value"] for t in props.get("Tags", []) if t["Key"] == FLEET_TAG), logical_id)
    idle = any(a["Properties"].get("MetricName") == "nvidia_smi_utilization_gpu"
               and {"Ref": logical_id} in [d.get("Value") for d in a["Properties"].get("Dimensions", [])]
               for a in alarms)
    return FleetEstimate(
        name=name, types=types, gpus_per_instance=GPU_CATALOG[types[0]].gpu_count, max_size=int(props["MaxSize"]),
        on_demand_base=int(props["MaxSize"]) if all_on_demand else int(distribution.get("OnDemandBaseCapacity", 0)),
        hourly_spot=statistics.median(spot),  # what Spot would cost: an On-Demand-only fleet's flag says so
        hourly_on_demand=statistics.median(od), has_idle_alarm=idle)


@dataclass
class QueueEstimate:
    name: str
    kind: str  # Spot, On-Demand or multi-node On-Demand
    max_vcpus: int
    instances: float
    hourly: float  # at max_vcpus


def queue_estimate(logical_id: str, environment: dict, prices: dict) -> QueueEstimate:
    """A training queue's compute environment at its max vCPUs, filled with its median-priced type (per vCPU)."""
    resources = environment["Properties"]["ComputeResources"]
    types = resources["InstanceTypes"]
    spot = resources["Type"] == "SPOT"
    rates = instance_hourly(types, "spot" if spot else "on-demand", prices)
    per_vcpu = statistics.median(rate / GPU_CATALOG[t].vcpus for t, rate in zip(types, rates))
    max_vcpus = int(resources["MaxvCpus"])
    vcpus = statistics.median(GPU_CATALOG[t].vcpus for t in types)
    kind = "Spot" if spot else ("multi-node On-Demand" if "PlacementGroup" in resources else "On-Demand")
    name = resources.get("Tags", {}).get(QUEUE_TAG, logical_id)
    return QueueEstimate(name=name, kind=kind, max_vcpus=max_vcpus, instances=round(max_vcpus / vcpus, 1),
                         hourly=per_vcpu * max_vcpus)


def class_fractions(transitions: list[tuple[int, str]], retention_days: int) -> dict[str, float]:
    """Share of a steadily filled prefix's bytes in each storage class, from its transitions and retention."""
    boundaries = [(0, "STANDARD"), *sorted(transitions)]
    fractions: dict[str, float] = {}
    for (start, storage_class), (end, _) in zip(boundaries, [*boundaries[1:], (retention_days, "")]):
        span = max(0, min(end, retention_days) - start)
        if span:
            fractions[storage_class] = fractions.get(storage_class, 0) + span / retention_days
    return fractions


def bucket_monthly(props: dict, gb: float, shares: dict[str, float], prices: dict) -> float:
    rules = props.get("LifecycleConfiguration", {}).get("Rules", [])
    cost = 0.0
    for prefix, share in shares.items():
        rule = next((r for r in rules if r.get("Prefix") == prefix), None)
        transitions = [(t["TransitionInDays"], t["StorageClass"]) for t in (rule or {}).get("Transitions", [])]
        retention = (rule or {}).get("ExpirationInDays", ASSUMED_RETENTION_DAYS)
        for storage_class, fraction in class_fractions(transitions, retention).items():
            table = prices["s3_gb_month"]
            cost += gb * share * fraction * table.get(storage_class, table["STANDARD"])
    return cost


# SageMaker's managed MLflow. UNVERIFIED: these hourly rates were written from memory, not read from AWS's pricing
# page (https://aws.amazon.com/sagemaker/pricing/, MLflow), which could not be reached from this machine; the only
# corroboration found is third-party (a Small server at 0.642 USD an hour in a cost comparison on
# https://github.com/londonaicentre/FLIP/issues/745). Every estimate that uses them says so (a FLAG). A serverless
# MLflow app is counted at no charge of its own (its artifacts are in the dataset bucket, priced there); a tracking
# server is billed per hour by size (us-east-1 figures, used for every Region), plus metadata storage (not counted).
MLFLOW_TRACKING_SERVER_HOURLY = {"Small": 0.642, "Medium": 1.284, "Large": 2.568}
MLFLOW_RATES_FLAG = ("the MLflow tracking server's hourly rate is unverified (us-east-1 figure written from memory, "
                     "used for every Region): check https://aws.amazon.com/sagemaker/pricing/ (MLflow)")


def mlflow_lines(by_type: dict[str, list[tuple[str, dict]]]) -> list[tuple[str, str, float]]:
    """The environment's run tracking: a serverless MLflow app, or a tracking server always on."""
    lines = [("Tracking", f"{logical_id}: serverless MLflow app (no charge of its own; artifacts in the bucket)", 0.0)
             for logical_id, _ in by_type.get("AWS::SageMaker::MlflowApp", [])]
    for logical_id, server in by_type.get("AWS::SageMaker::MlflowTrackingServer", []):
        size = server["Properties"].get("TrackingServerSize", "Small")
        lines.append(("Tracking", f"{logical_id}: MLflow tracking server {size}, always on",
                      MLFLOW_TRACKING_SERVER_HOURLY[size] * HOURS_PER_MONTH))
    return lines


def estimate_environment(name: str, region: str, templates: list[dict], prices: dict,
                         assumptions: Assumptions) -> EnvironmentEstimate:
    estimate = EnvironmentEstimate(name=name, region=region, prices=price_source(prices, detail=False))
    if region != prices["region"] or prices.get("unpriced_region"):
        estimate.flags.append(f"the price table has no {region} rates: priced at the dearest Region it has "
                              f"(python -m ops.refresh_prices --region {region})")
    resources = [(logical_id, r) for t in templates for logical_id, r in t.get("Resources", {}).items()]
    by_type: dict[str, list[tuple[str, dict]]] = {}
    for logical_id, resource in resources:
        by_type.setdefault(resource["Type"], []).append((logical_id, resource))
    alarms = [r for _, r in by_type.get("AWS::CloudWatch::Alarm", [])]

    for logical_id, group in by_type.get("AWS::AutoScaling::AutoScalingGroup", []):
        fleet = fleet_estimate(logical_id, group, alarms, prices)
        estimate.fleets.append(fleet)
        at_max = fleet.hourly(fleet.max_size) * HOURS_PER_MONTH
        estimate.lines.append(("GPU fleets", f"{fleet.name}: max {fleet.max_size}, {assumptions.utilization:.0%} of the month "
                               f"(all month: {at_max:,.0f}; all On-Demand: "
                               f"{fleet.hourly_on_demand * fleet.max_size * HOURS_PER_MONTH:,.0f})",
                               at_max * assumptions.utilization))
        if fleet.on_demand_base >= fleet.max_size:
            estimate.flags.append(f"fleet {fleet.name} is On-Demand only: Spot would cost about "
                                  f"{1 - fleet.hourly_spot / fleet.hourly_on_demand:.0%} less" if fleet.hourly_spot <
                                  fleet.hourly_on_demand else f"fleet {fleet.name} is On-Demand only")
        if not fleet.has_idle_alarm:
            estimate.flags.append(f"fleet {fleet.name} has no idle-GPU alarm: idle GPUs go unnoticed")

    for logical_id, environment in by_type.get("AWS::Batch::ComputeEnvironment", []):
        queue = queue_estimate(logical_id, environment, prices)
        estimate.lines.append(("GPU queues", f"{queue.name} ({queue.kind}): up to {queue.max_vcpus} vCPUs "
                               f"(~{queue.instances:g} instances), {assumptions.utilization:.0%} of the month "
                               f"(all month: {queue.hourly * HOURS_PER_MONTH:,.0f})",
                               queue.hourly * HOURS_PER_MONTH * assumptions.utilization))

    for logical_id, bucket in by_type.get("AWS::S3::Bucket", []):
        props = bucket["Properties"]
        rules = props.get("LifecycleConfiguration", {}).get("Rules", [])
        tiered = any(r.get("Transitions") for r in rules) or props.get("IntelligentTieringConfigurations")
        expires = any(r.get("ExpirationInDays") for r in rules)
        if not tiered and not expires:
            estimate.flags.append(f"bucket {logical_id} has no tiering and no expiry: all of it stays in Standard")
        if any(r.get("Prefix") == "datasets/" for r in rules):
            estimate.lines.append(("Storage", f"dataset bucket, {assumptions.storage_gb:g} GB across tiers",
                                   bucket_monthly(props, assumptions.storage_gb, PREFIX_SHARES, prices)))
        elif any(r.get("Prefix") == "capture/" for r in rules):
            estimate.lines.append(("Storage", f"capture bucket {logical_id}, {assumptions.capture_gb:g} GB",
                                   bucket_monthly(props, assumptions.capture_gb, {"capture/": 1.0}, prices)))

    for logical_id, config in by_type.get("AWS::SageMaker::EndpointConfig", []):
        for variant in config["Properties"]["ProductionVariants"]:
            hourly = prices["sagemaker_hourly"].get(variant["InstanceType"])
            if hourly is None:
                estimate.flags.append(f"no price for {variant['InstanceType']} ({logical_id}): add it to the table")
                continue
            estimate.lines.append(("Endpoints", f"{logical_id}: {variant['InitialInstanceCount']} x "
                                   f"{variant['InstanceType']}, always on",
                                   hourly * variant["InitialInstanceCount"] * HOURS_PER_MONTH))

    estimate.lines.extend(mlflow_lines(by_type))
    if by_type.get("AWS::SageMaker::MlflowTrackingServer"):
        estimate.flags.append(MLFLOW_RATES_FLAG)

    interface = [e for _, e in by_type.get("AWS::EC2::VPCEndpoint", [])
                 if e["Properties"].get("VpcEndpointType") == "Interface"]
    endpoint_azs = sum(len(e["Properties"].get("SubnetIds", [])) for e in interface)
    if interface:
        estimate.lines.append(("Network", f"{len(interface)} interface endpoints, {endpoint_azs} endpoint-AZs",
                               endpoint_azs * prices["interface_endpoint_az_hourly"] * HOURS_PER_MONTH))
    nat = len(by_type.get("AWS::EC2::NatGateway", []))
    if nat:
        estimate.lines.append(("Network", f"{nat} NAT gateway(s), before data processing",
                               nat * prices["nat_gateway_hourly"] * HOURS_PER_MONTH))
    keys = len(by_type.get("AWS::KMS::Key", []))
    dashboards = len(by_type.get("AWS::CloudWatch::Dashboard", []))
    estimate.lines.append(("Other", f"{keys} KMS keys, {len(alarms)} alarms, {dashboards} dashboards",
                           keys * prices["kms_key_month"] + len(alarms) * prices["alarm_month"]
                           + dashboards * prices["dashboard_month"]))
    for _, budget in by_type.get("AWS::Budgets::Budget", []):
        estimate.budget = float(budget["Properties"]["Budget"]["BudgetLimit"]["Amount"])
    return estimate


def environments(assembly_dir: Path) -> list[tuple[str, str, list[dict]]]:
    """(environment, Region, templates) per stage assembly of a synthesized app."""
    found = []
    top = json.loads((assembly_dir / "manifest.json").read_text())
    for artifact in top["artifacts"].values():
        if artifact["type"] != "cdk:cloud-assembly":
            continue
        stage_dir = assembly_dir / artifact["properties"]["directoryName"]
        manifest = json.loads((stage_dir / "manifest.json").read_text())
        stacks = [a for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"]
        region = stacks[0]["environment"].rsplit("/", 1)[-1] if stacks else "?"
        templates = [json.loads((stage_dir / a["properties"]["templateFile"]).read_text()) for a in stacks]
        found.append((stage_dir.name.removeprefix("assembly-"), region, templates))
    return found


def format_estimate(estimate: EnvironmentEstimate) -> str:
    out = [f"\n== {estimate.name} ({estimate.region}): about {estimate.total():,.0f} USD per month"
           + (f", {estimate.total() / estimate.budget:.0%} of its {estimate.budget:,.0f} USD budget"
              if estimate.budget else "")]
    width = COLUMNS - 25  # amounts in one column at the right edge; a longer item folds, its amount on its last line
    for group, item, amount in estimate.lines:
        parts = textwrap.wrap(item, width, subsequent_indent="  ", break_long_words=False) or [""]
        out += [f"  {group if n == 0 else '':<11} {part}" for n, part in enumerate(parts[:-1])]
        out.append(f"  {group if len(parts) == 1 else '':<11} {parts[-1]:<{width}} {amount:>10,.2f}")
    for fleet in estimate.fleets:
        out.append(f"  GPU-hour    {fleet.name}: {fleet.gpu_hour:.3f} USD per GPU-hour at max size "
                   f"({fleet.max_size} x {fleet.gpus_per_instance} GPU; On-Demand {fleet.hourly_on_demand / fleet.gpus_per_instance:.3f})")
    out += [f"  FLAG        {flag}" for flag in estimate.flags]
    return fit("\n".join(out))


def estimates(assembly_dir: Path, assumptions: Assumptions, env: Optional[str] = None) -> list[EnvironmentEstimate]:
    """Each environment's estimate (or ENV's alone) from a synthesized assembly, at its own Region's prices."""
    return [estimate_environment(name, region, templates, load_prices(region), assumptions)
            for name, region, templates in environments(assembly_dir) if env in (None, name)]


def price_lines(found: list[EnvironmentEstimate]) -> list[str]:
    """Each environment's prices: their Region, date and Spot rule (``ml_platform_job.prices.price_source``)."""
    return [line for estimate in found if estimate.prices
            for line in textwrap.wrap(f"{estimate.name}'s prices: {estimate.prices}", 100, initial_indent="  - ",
                                      subsequent_indent="      ", break_long_words=False, break_on_hyphens=False)]


def format_report(assumptions: Assumptions, found: list[EnvironmentEstimate]) -> str:
    return fit("\n".join(["Monthly cost estimate. Assumptions:", *(f"  - {line}" for line in assumptions.lines()),
                          *price_lines(found), *(format_estimate(estimate) for estimate in found)]))


def parser() -> Parser:
    costs = Parser("./platform cost", description=__doc__)
    costs.add_argument("env", nargs="?", help="one environment (default: every one)")
    costs.add_argument("--utilization", type=bounded(0, 1, "the share of the month GPU fleets and queues run at max "
                                                      "size", example="--utilization 0.25"), default=0.25,
                       help="share of the month GPU fleets and queues run at max size, 0-1 (default 0.25)")
    costs.add_argument("--storage-gb", type=bounded(*STORAGE_GB, "GB in the dataset bucket",
                                                     example="--storage-gb 1000"), default=1000,
                       help="GB in the dataset bucket (default 1000)")
    costs.add_argument("--capture-gb", type=bounded(*STORAGE_GB, "GB in each endpoint's capture bucket",
                                                     example="--capture-gb 50"), default=50,
                       help="GB in each endpoint's capture bucket (default 50)")
    costs.add_argument("--assembly", type=Path, default=Path("cdk.out"),
                       help="an app synthesized already (default cdk.out)")
    costs.add_argument("--synth", action="store_true", help=argparse.SUPPRESS)  # ./platform cost: synthesize first
    return costs


def main(argv: list[str]) -> int:
    costs = parser()
    args = costs.parse_args(argv)
    if args.env:
        aws_access.environment(args.env)  # an unknown name ends here, naming the known ones
    if args.synth:
        with terminal.progress("synthesizing every environment for the estimate (cdk-nag and CDK's template checks "
                               "run inside)"):
            synth(args.assembly)  # every environment, like the estimate's budget lines
    elif not (args.assembly / "manifest.json").exists():
        costs.error(f"--assembly {args.assembly}: no synthesized app there; run ./platform cost (it synthesizes)")
    assumptions = Assumptions(args.utilization, args.storage_gb, args.capture_gb)
    print(format_report(assumptions, estimates(args.assembly, assumptions, args.env)))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
