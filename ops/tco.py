"""Lifecycle cost of an environment over months: storage by tier, training jobs, inference, monitoring, network.

  ./platform tco ENV [--months 12] [--workload PRESET|custom [advise's workload flags] | --job-usd X]
                    [--jobs-per-month 20] [--models N] [--assembly DIR]

It checks its arguments, then synthesizes ENV afresh into cdk.out (--assembly DIR: an app synthesized already,
only read: a directory that holds none is an error, never a place to synthesize into). It extends ./platform cost
from "this month at an assumed utilization" to the lifecycle:

- storage by tier, month by month: the dataset bucket starts with --storage-gb and grows by --ingest-gb-month;
  each month's data ages through the bucket's own lifecycle rules (read from the template), so data moves to
  colder classes and expires as it would; endpoint capture buckets as in the cost estimate;
- training: jobs per month x cost per job, the job priced by the advisor on the instance types the environment's
  queues list (its recommendation among them: --workload takes a preset or `custom` with the same flags as
  ./platform advise) or given (--job-usd); this replaces the cost estimate's line for fleets and queues at an
  assumed utilization, and the output says by how much the two differ and why. When the jobs need more instances
  at once than the queue's max vCPUs allow, it says so; when no type the queues list runs the workload, it is an
  error naming the closest shape and why the advisor excludes it (no training line of 0 USD);
- inference: the endpoints in the template, always on;
- monitoring: scheduled functions (drift checks, the budget guard's spend check) from their schedules and
  memory, custom metrics, log ingestion and storage, alarms and dashboards;
- network: interface endpoints and NAT gateways; other: KMS keys.

Per model: the month's total divided by --models (default: the number of endpoints, at least 1).
Prices: the price table ./platform cost uses (its source and date are printed), plus CloudWatch and Lambda
at their us-east-1 rates.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ml_platform_constructs.advice.advisor import NOT_MODELLED, PRESETS, Option, advise
from ml_platform_constructs.advice.gpu_catalog import ACCELERATOR_CATALOG
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ops import terminal
from ops.advise import WIDTH, _wrap, add_workload_arguments, fail, workload_from_args
from ops.aws_access import environment
from ops.cdk_cli import synth
from ops.cli import Parser, bounded
from ops.cost_estimate import (
    HOURS_PER_MONTH,
    PREFIX_SHARES,
    Assumptions,
    environments,
    estimate_environment,
    queue_estimate,
)

DAYS_PER_MONTH = 365 / 12
# us-east-1, first tier (https://aws.amazon.com/cloudwatch/pricing/, https://aws.amazon.com/lambda/pricing/):
CUSTOM_METRIC_MONTH = 0.30  # prorated by the hour a metric is sent
LOG_INGEST_GB = 0.50
LOG_STORAGE_GB_MONTH = 0.03
LAMBDA_REQUEST = 0.20 / 1e6
LAMBDA_GB_SECOND = 0.0000166667
JOB_METRICS_PER_JOB = 3  # ValidationAccuracy, TokensProcessed, SamplesProcessed (job_metrics), each per JobId
SYNTH_OUT = Path("cdk.out")  # where ./platform tco synthesizes ENV (the platform script runs it from the checkout)


@dataclass
class TcoInputs:
    months: int = 12
    storage_gb: float = 1000
    ingest_gb_month: float = 100
    capture_gb: float = 50
    jobs_per_month: float = 20
    job_usd: float = 0.0
    job_hours: float = 0.0
    job_label: str = "no training jobs"
    models: Optional[int] = None
    log_gb_month: float = 5
    custom_metrics: int = 50
    function_seconds: float = 30  # per scheduled invocation

    def lines(self, prices: dict) -> list[str]:
        return [
            f"prices: {prices['source']} ({prices['retrieved']}, {prices['region']}); CloudWatch and Lambda at "
            "us-east-1 first-tier rates, free tiers ignored",
            f"dataset bucket: {self.storage_gb:g} GB at month 1, +{self.ingest_gb_month:g} GB per month, split "
            + ", ".join(f"{p} {s:.0%}" for p, s in PREFIX_SHARES.items())
            + "; each month's data follows the bucket's lifecycle rules by age (Intelligent-Tiering at its "
            "Frequent Access rate); capture buckets " f"{self.capture_gb:g} GB each",
            f"training: {self.jobs_per_month:g} jobs per month x {self.job_usd:,.2f} USD ({self.job_label})",
            f"monitoring: scheduled functions {self.function_seconds:g} s per run at their configured memory; "
            f"{self.custom_metrics} custom metrics all month plus {JOB_METRICS_PER_JOB} per job for its hours; "
            f"{self.log_gb_month:g} GB of logs ingested per month, kept a year",
            "not included: requests, data transfer, endpoint autoscaling above the initial count, Spot price swings",
        ]


@dataclass
class MonthCost:
    month: int
    storage_by_class: dict[str, float] = field(default_factory=dict)
    groups: dict[str, float] = field(default_factory=dict)

    @property
    def storage(self) -> float:
        return sum(self.storage_by_class.values())

    @property
    def total(self) -> float:
        return self.storage + sum(self.groups.values())


def storage_class_at(rule: Optional[dict], age_days: float) -> Optional[str]:
    """The class a prefix's object is in at an age, by its lifecycle rule; None once expired."""
    if rule is None:
        return "STANDARD"
    if rule.get("ExpirationInDays") is not None and age_days >= rule["ExpirationInDays"]:
        return None
    current = "STANDARD"
    for transition in sorted(rule.get("Transitions", []), key=lambda t: t["TransitionInDays"]):
        if age_days >= transition["TransitionInDays"]:
            current = transition["StorageClass"]
    return current


def storage_by_month(bucket_props: dict, inputs: TcoInputs, prices: dict) -> list[dict[str, float]]:
    """USD per storage class for each month: cohorts (the initial data, then each month's ingest) priced at
    their age in the middle of the month."""
    rules = bucket_props.get("LifecycleConfiguration", {}).get("Rules", [])
    by_prefix = {prefix: next((r for r in rules if r.get("Prefix") == prefix), None) for prefix in PREFIX_SHARES}
    cohorts = [(0, inputs.storage_gb)] + [(born, inputs.ingest_gb_month) for born in range(1, inputs.months)]
    table = prices["s3_gb_month"]
    months = []
    for month in range(inputs.months):
        costs: dict[str, float] = {}
        for born, gb in cohorts:
            if born > month or not gb:
                continue
            age = (month - born + 0.5) * DAYS_PER_MONTH
            for prefix, share in PREFIX_SHARES.items():
                storage_class = storage_class_at(by_prefix[prefix], age)
                if storage_class:
                    costs[storage_class] = costs.get(storage_class, 0) + gb * share * table.get(storage_class,
                                                                                                  table["STANDARD"])
        months.append(costs)
    return months


def scheduled_functions(templates: list[dict]) -> list[tuple[str, float, float]]:
    """(function, invocations per month, memory GB) of every Lambda function an EventBridge schedule runs."""
    resources = {k: v for t in templates for k, v in t.get("Resources", {}).items()}
    found = []
    for rule in resources.values():
        props = rule.get("Properties", {})
        match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", props.get("ScheduleExpression", ""))
        if rule.get("Type") != "AWS::Events::Rule" or not match:
            continue
        minutes = int(match.group(1)) * {"m": 1, "h": 60, "d": 1440}[match.group(2)[0]]
        for target in props.get("Targets", []):
            arn = target.get("Arn", {})
            name = arn.get("Fn::GetAtt", [None])[0] if isinstance(arn, dict) else None
            function = resources.get(name, {})
            if function.get("Type") == "AWS::Lambda::Function":
                found.append((name, HOURS_PER_MONTH * 60 / minutes, function["Properties"].get("MemorySize", 128) / 1024))
    return found


def tco(templates: list[dict], name: str, region: str, inputs: TcoInputs, prices: dict) -> list[MonthCost]:
    estimate = estimate_environment(name, region, templates, prices, Assumptions(0, inputs.storage_gb, inputs.capture_gb))
    resources = [r for t in templates for r in t.get("Resources", {}).values()]
    bucket = next((r["Properties"] for r in resources if r["Type"] == "AWS::S3::Bucket" and any(
        rule.get("Prefix") == "datasets/" for rule in r["Properties"].get("LifecycleConfiguration", {}).get("Rules", []))),
        None)
    storage = storage_by_month(bucket, inputs, prices) if bucket else [{} for _ in range(inputs.months)]
    capture = sum(amount for group, item, amount in estimate.lines if group == "Storage" and "capture" in item)
    inference = sum(amount for group, _, amount in estimate.lines if group == "Endpoints")
    network = sum(amount for group, _, amount in estimate.lines if group == "Network")
    count = {kind: sum(1 for r in resources if r["Type"] == kind)
             for kind in ("AWS::KMS::Key", "AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard")}
    functions = sum(runs * LAMBDA_REQUEST + runs * inputs.function_seconds * memory * LAMBDA_GB_SECOND
                    for _, runs, memory in scheduled_functions(templates))
    job_metric_hours = inputs.jobs_per_month * JOB_METRICS_PER_JOB * inputs.job_hours
    monitoring_base = (functions + inputs.custom_metrics * CUSTOM_METRIC_MONTH
                       + job_metric_hours * CUSTOM_METRIC_MONTH / HOURS_PER_MONTH
                       + count["AWS::CloudWatch::Alarm"] * prices["alarm_month"]
                       + count["AWS::CloudWatch::Dashboard"] * prices["dashboard_month"]
                       + inputs.log_gb_month * LOG_INGEST_GB)
    months = []
    for index in range(inputs.months):
        logs_stored = inputs.log_gb_month * min(index + 1, 12)  # kept a year
        months.append(MonthCost(month=index + 1, storage_by_class={**storage[index], **(
            {"capture buckets": capture} if capture else {})}, groups={
            "training": inputs.jobs_per_month * inputs.job_usd,
            "inference": inference,
            "monitoring": monitoring_base + logs_stored * LOG_STORAGE_GB_MONTH,
            "network": network,
            "other (KMS keys)": count["AWS::KMS::Key"] * prices["kms_key_month"],
        }))
    return months


def format_tco(name: str, region: str, months: list[MonthCost], models: int, wide: bool = False) -> str:
    """The months as a table: 100 columns by default (the S3 classes summed into one column, prose folded);
    ``wide``: a column per storage class, lines unfolded."""
    width = 10_000 if wide else WIDTH
    classes = sorted({c for m in months for c in m.storage_by_class if c != "capture buckets"})
    groups = list(months[0].groups)
    if wide:
        storage_columns = [(f"S3 {c}", lambda m, c=c: m.storage_by_class.get(c, 0)) for c in classes]
    else:
        storage_columns = [("S3", lambda m: sum(v for c, v in m.storage_by_class.items() if c != "capture buckets"))]
    columns = [*storage_columns, ("capture", lambda m: m.storage_by_class.get("capture buckets", 0)),
               *[(g, lambda m, g=g: m.groups[g]) for g in groups], ("total", lambda m: m.total)]
    rows = [[str(m.month), *[f"{value(m):,.2f}" for _, value in columns]] for m in months]
    header = ["month", *[title for title, _ in columns]]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    total = sum(m.total for m in months)
    out = _wrap(f"== TCO {name} ({region}), {len(months)} months: {total:,.0f} USD, {total / len(months):,.0f} USD "
                f"per month on average, {total / len(months) / models:,.0f} per model per month ({models} model(s))"
                + ("" if wide else "; --wide: a column per storage class"), width=width)
    out.insert(0, "")
    out.append("  " + " ".join(h.rjust(w) for h, w in zip(header, widths)))
    out += ["  " + " ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    last = months[-1]
    out += _wrap(f"month {last.month}: storage {last.storage:,.2f} ("
                 + ", ".join(f"{c} {v:,.2f}" for c, v in sorted(last.storage_by_class.items())) + ")", "  ", width)
    return "\n".join(out)


WORKLOAD_FLAGS = ("deadline_hours", "dataset_gib", "samples", "qlora", "int8", "fp8", "gpu_decode", "params",
                  "lora_params", "frozen_params", "tokens", "images", "forward_gflops", "activation_gib_per_image",
                  "seq_len", "hidden", "layers", "vocab", "global_batch", "optimizer")


def queue_capacity(templates: list[dict], best: Option, jobs_per_month: float, job_hours: float,
                   prices: dict) -> Optional[str]:
    """A line when the month's jobs need more instances at once than the environment's queues allow, or None.
    Jobs spread evenly over the month run jobs x hours / 730 at once on average; each takes its shape's vCPUs."""
    multi = best.instances > 1
    environments_ = [(queue_estimate(logical_id, resource, prices), resource["Properties"]["ComputeResources"])
                     for t in templates for logical_id, resource in t.get("Resources", {}).items()
                     if resource["Type"] == "AWS::Batch::ComputeEnvironment"]
    matching = [q for q, _ in environments_ if (q.kind == "multi-node On-Demand") == multi]
    types = {t for q, resources in environments_ if (q.kind == "multi-node On-Demand") == multi
             for t in resources["InstanceTypes"]}
    shape = f"{best.instance_type} x{best.instances}"
    kind = "multi-node" if multi else "single-instance"
    if not matching:
        return f"capacity: the environment has no {kind} queue for {shape}: the jobs have nowhere to run"
    max_vcpus = sum(q.max_vcpus for q in matching)
    per_job = ACCELERATOR_CATALOG[best.instance_type].vcpus * best.instances
    allowed = max_vcpus // per_job
    needed = jobs_per_month * job_hours / HOURS_PER_MONTH
    names = ", ".join(f"{q.name} ({q.kind}, {q.max_vcpus} vCPUs)" for q in matching)
    if allowed < 1:
        return (f"capacity: one job on {shape} needs {per_job} vCPUs, more than the {kind} queues allow ({names}): "
                "raise max_vcpus or pick a smaller shape")
    if best.instance_type not in types:
        return (f"capacity: the {kind} queues ({names}) do not list {best.instance_type}: add the types of "
                f"./platform advise --block queue, or price the job on the queue's own types with --job-usd")
    if needed > allowed:
        return (f"capacity: {jobs_per_month:g} jobs a month of {job_hours:,.1f} h on {shape} run {needed:,.1f} at "
                f"once on average, and the {kind} queues ({names}) allow {allowed} at {per_job} vCPUs each: "
                "jobs will wait and the month's work does not fit; raise max_vcpus or run fewer jobs")
    return None


def queue_types(templates: list[dict]) -> list[str]:
    """The instance types the environment's training queues list (their compute environments'), in the catalog."""
    return sorted({t for template in templates for resource in template.get("Resources", {}).values()
                   if resource["Type"] == "AWS::Batch::ComputeEnvironment"
                   for t in resource["Properties"].get("ComputeResources", {}).get("InstanceTypes", [])
                   if t in ACCELERATOR_CATALOG})


def against_cost(name: str, region: str, templates: list[dict], prices: dict, inputs: "TcoInputs") -> str:
    """Why the training line differs from ./platform cost's: that estimate prices every fleet and queue at max size
    for an assumed share of the month; this one prices the jobs a month."""
    utilization = Assumptions().utilization
    estimate = estimate_environment(name, region, templates, prices,
                                    Assumptions(utilization, inputs.storage_gb, inputs.capture_gb))
    capacity = sum(amount for group, _, amount in estimate.lines if group in ("GPU fleets", "GPU queues"))
    jobs = inputs.jobs_per_month * inputs.job_usd
    return (f"training differs from ./platform cost {name}: cost prices the fleets and queues at max size "
            f"{utilization:.0%} of the month ({capacity:,.2f} USD); tco prices {inputs.jobs_per_month:g} jobs a "
            f"month ({jobs:,.2f} USD)")


def nothing_runs(name: str, workload: str, types: list[str], advice: Any) -> str:
    """Why no type the environment's queues list can run the workload (the advisor's reasons), instead of a
    training line of 0 USD: the closest shape (the most GPUs) and its reason, and the rules that excluded the rest."""
    closest = max(advice.options, key=lambda o: o.gpus)
    rules = sorted({o.rule for o in advice.options if o.rule})
    return (f"no type {name}'s queues list ({', '.join(types)}) runs {workload}, so its jobs cannot be priced: the "
            f"closest, {closest.instance_type} x{closest.instances} ({closest.gpus} GPU{'s' * (closest.gpus > 1)}), is "
            f"excluded for "
            f"{closest.rule}: {closest.excluded} (every shape: {', '.join(rules)}); add a type ./platform advise "
            f"{workload} --block queue recommends to a queue of {name}, or give the cost per job: --job-usd USD")


def parser() -> Parser:
    costs = Parser("./platform tco", description=__doc__)
    costs.add_argument("env", metavar="ENV", help="the environment, e.g. dev")
    costs.add_argument("--assembly", type=Path, metavar="DIR",
                       help="an app synthesized already, only read (default: ./platform tco synthesizes ENV afresh "
                            "into cdk.out)")
    costs.add_argument("--synth", action="store_true", help=argparse.SUPPRESS)  # ./platform tco: synthesize first

    def figure(flag: str, low: float, high: float, meaning: str, example: str, **options) -> None:
        integer = options.pop("integer", False)
        costs.add_argument(flag, type=bounded(low, high, meaning, example=f"{flag} {example}", integer=integer),
                           help=f"{meaning}, {low:,g} to {int(high):,}" + (f" (default {options['default']:g})"
                                                                          if options.get("default") is not None else ""),
                           **options)

    figure("--months", 1, 120, "months of the lifecycle", "12", default=12, integer=True)
    figure("--storage-gb", 0, 10_000_000, "GB in the dataset bucket at month 1", "1000", default=1000)
    figure("--ingest-gb-month", 0, 1_000_000, "GB added to the dataset bucket each month", "100", default=100)
    figure("--capture-gb", 0, 10_000_000, "GB in each endpoint's capture bucket", "50", default=50)
    figure("--jobs-per-month", 0, 100_000, "training jobs a month", "20", default=20)
    job = costs.add_mutually_exclusive_group()
    job.add_argument("--workload", choices=[*PRESETS, "custom", *NOT_MODELLED], default="resnet50-imagenet",
                     help="the job the advisor prices (default resnet50-imagenet)")
    job.add_argument("--job-usd", type=bounded(0, 10_000_000, "USD per training job", example="--job-usd 25"),
                     help="a given cost per job instead of the advisor's")
    figure("--job-hours", 0, 10_000, "hours per job (with --job-usd, for its metrics)", "6")
    figure("--models", 1, 10_000, "models the monthly cost is shared by", "2", integer=True)
    figure("--log-gb-month", 0, 1_000_000, "GB of logs ingested a month", "5", default=5)
    figure("--custom-metrics", 0, 1_000_000, "custom metrics sent all month", "50", default=50, integer=True)
    costs.add_argument("--wide", action="store_true", help="a column per storage class, lines unfolded (default: "
                                                           "100 columns)")
    add_workload_arguments(costs, positional=False)
    return costs


def main(argv: list[str]) -> int:
    costs = parser()
    args = costs.parse_args(argv)
    workload_flags = sorted(f"--{name.replace('_', '-')}" for name in WORKLOAD_FLAGS if getattr(args, name))
    if args.job_usd is not None and workload_flags:
        costs.error(f"{', '.join(workload_flags)}: not read with --job-usd (a given cost per job); drop one or the "
                    "other")
    if args.job_hours is not None and args.job_usd is None:
        costs.error("--job-hours: only with --job-usd (the advisor gives the hours of the jobs it prices)")
    if args.job_usd is None:
        try:
            workload = workload_from_args(args)  # advise's own checks of the workload's flags, before the synth
        except SystemExit as refused:  # a bad argument, in advise's one line: exit 2 here, as every bad argument
            if isinstance(refused.code, str):
                costs.error(refused.code.removeprefix("error: "))
            raise
    if args.assembly is not None:  # read, never written: a synth would empty it and write there
        assembly = args.assembly
        if not (assembly / "manifest.json").is_file():
            there = ("no synthesized app there (no manifest.json)" if assembly.is_dir() else
                     "a file, not a directory" if assembly.exists() else "no such directory")
            fail(f"--assembly {assembly}: {there}; give a cdk.out directory (./platform synth {args.env} writes one), "
                 f"or leave --assembly out to synthesize {args.env} afresh")
    else:
        assembly = SYNTH_OUT
        if args.synth:
            environment(args.env)  # an unknown name ends here, naming the known ones, before the synth
            with terminal.progress(f"synthesizing {args.env} for its lifecycle cost (cdk-nag and CDK's template "
                                   "checks run inside)"):
                synth(assembly, environments=args.env)
    try:
        found = [e for e in environments(assembly) if e[0] == args.env]
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        fail(f"{assembly} is not a synthesized app this command reads ({type(error).__name__}: "
             f"{' '.join(str(error).split())}): synthesize it again (./platform synth {args.env})")
    if not found:
        fail(f"{args.env} is not in {assembly}: synthesize it first (./platform synth {args.env})")
    name, region, templates = found[0]
    prices = load_prices(region)
    capacity = None
    if args.job_usd is not None:
        job_usd, job_hours, label = args.job_usd, args.job_hours or 0.0, "given"
    else:
        types = queue_types(templates)
        if not types:
            fail(f"{name} has no training queue to price a job on: pass --job-usd, or add a queue to {name}")
        advice = advise(workload, prices=prices, region=region, target="queue",
                        catalog={t: ACCELERATOR_CATALOG[t] for t in types})
        if advice.cpu_bound():
            fail(advice.cpu_bound())
        best = advice.recommended
        if best is None and args.jobs_per_month:
            fail(nothing_runs(name, workload.name, types, advice))
        job_usd = best.usd if best else 0.0
        job_hours = best.expected_hours if best else 0.0
        label = (f"{workload.name} on {best.instance_type} x{best.instances}, {best.lifecycle}, per ./platform advise "
                 f"--block queue among the queues' types ({', '.join(types)})" if best else
                 f"{workload.name}: nothing eligible among the queues' types ({', '.join(types)})")
        if best:  # (none, with no jobs a month: nothing to price or to fit)
            capacity = queue_capacity(templates, best, args.jobs_per_month, job_hours, prices)
    endpoints = sum(1 for t in templates for r in t.get("Resources", {}).values()
                    if r["Type"] == "AWS::SageMaker::Endpoint")
    inputs = TcoInputs(months=args.months, storage_gb=args.storage_gb, ingest_gb_month=args.ingest_gb_month,
                       capture_gb=args.capture_gb, jobs_per_month=args.jobs_per_month, job_usd=job_usd,
                       job_hours=job_hours, job_label=label, models=args.models, log_gb_month=args.log_gb_month,
                       custom_metrics=args.custom_metrics)
    models = args.models or max(1, endpoints)
    width = 10_000 if args.wide else WIDTH
    print("\n".join(["Lifecycle cost (TCO). Assumptions:",
                     *(folded for line in inputs.lines(prices) for folded in _wrap(f"- {line}", "  ", width)),
                     *(_wrap(f"! {capacity}", "  ", width) if capacity else []),
                     *_wrap(f"- {against_cost(name, region, templates, prices, inputs)}", "  ", width)]))
    print(format_tco(name, region, tco(templates, name, region, inputs, prices), models, args.wide))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
