"""Which GPU shape should a training job run on, and what will the whole job cost? (./platform advise)

  python -m ops.advise PRESET [--deadline-hours H] [--samples N] [--dataset-gib N] [--dataset-source s3|snapshot] [--json]
  python -m ops.advise custom --params 1.3e9 --tokens 2e9 --seq-len 2048 --hidden 2048 --layers 24 [--lora-params N]
  python -m ops.advise custom --params 11.7e6 --images 12e6 --forward-gflops 3.6 [--activation-gib-per-image 0.02]
  python -m ops.advise PRESET --measured ENV     # prefer throughput measured by examples/gpu_benchmark.py in ENV

Presets: resnet50-imagenet, bert-large-finetune, llm-7b-lora, llm-7b-full, llm-70b-lora. The library function
behind it is ml_platform_constructs.advisor.advise(). --measured ENV reads the JSON records under
benchmarks/ in ENV's dataset bucket (found from the ENV-Data stack's DatasetBucketName output): AWS calls
cloudformation:DescribeStacks, s3:ListObjectsV2 and s3:GetObject. Without --measured it makes no AWS call.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any, Optional

from ml_platform_constructs.advisor import (
    PRESETS,
    Advice,
    CostAssumptions,
    MeasuredThroughput,
    Workload,
    advise,
    fleet_block,
    queue_block,
    transformer_activation_gib,
    with_overrides,
)
from ml_platform_constructs.runtime.benchmark import BENCHMARK_PREFIX

RULES = [
    ("software", "the platform's Deep Learning AMI supports the GPU"),
    ("memory", "model state + one micro-batch of activations fit each GPU (sharded with ZeRO-3/FSDP over the shape's "
               "GPUs when it fits no single GPU; never on one GPU)"),
    ("scale-out", "several instances only for EFA types, and only when one instance cannot fit or meet the deadline"),
    ("deadline", "expected hours (with Spot rework on Spot) within the deadline"),
    ("cost", "the rest ranked by cost per job on the cheaper of Spot and On-Demand; the cheapest is recommended"),
]


def custom_workload(args: argparse.Namespace) -> Workload:
    if args.params is None:
        raise SystemExit("custom: --params is required")
    if args.images is not None:
        if args.forward_gflops is None:
            raise SystemExit("custom image model: --forward-gflops (per image) is required")
        return Workload(
            name="custom", description=f"image model, {args.params:g} parameters, {args.images:g} images",
            parameters=args.params, trainable_parameters=args.params, optimizer=args.optimizer, sample_unit="images",
            samples=args.images, flops_per_sample=3 * args.forward_gflops * 1e9,
            activation_gib_per_item=args.activation_gib_per_image,
            global_batch_items=args.global_batch or 256, dataset_gib=args.dataset_gib or 1,
            deadline_hours=args.deadline_hours, cpu_samples_per_vcpu=100)
    missing = [flag for flag, value in (("--tokens", args.tokens), ("--seq-len", args.seq_len),
                                        ("--hidden", args.hidden), ("--layers", args.layers)) if value is None]
    if missing:
        raise SystemExit(f"custom transformer: {', '.join(missing)} required (or --images for an image model)")
    lora = args.lora_params is not None
    return Workload(
        name="custom", description=f"transformer, {args.params:g} parameters, {args.tokens:g} tokens"
        + (f", LoRA ({args.lora_params:g} trainable)" if lora else ", full training"),
        parameters=args.params, trainable_parameters=args.lora_params if lora else args.params,
        optimizer=args.optimizer, sample_unit="tokens", samples=args.tokens,
        flops_per_sample=(6 if lora else 8) * args.params,
        activation_gib_per_item=transformer_activation_gib(args.seq_len, args.hidden, args.layers),
        global_batch_items=args.global_batch or 128,
        dataset_gib=args.dataset_gib or 1, deadline_hours=args.deadline_hours)


def load_measured(s3: Any, bucket: str) -> list[MeasuredThroughput]:
    """Every benchmark record under benchmarks/ in the bucket."""
    records = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=BENCHMARK_PREFIX):
        for item in page.get("Contents", []):
            if item["Key"].endswith(".json"):
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                records.append(MeasuredThroughput.from_record(json.loads(body)))
    return records


def _money(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.2f}"


def format_advice(advice: Advice, env: str, block: str, show_all: bool = False, region: str = "us-east-1") -> str:
    w = advice.workload
    per_item = "sequence" if w.sample_unit == "tokens" else w.sample_unit.rstrip("s")
    out = [f"Workload {w.name}: {w.description}",
           f"  {w.samples:,.0f} {w.sample_unit}; model state {w.state_gib():.1f} GiB unsharded "
           f"({w.trainable_parameters:,.0f} of {w.parameters:,.0f} parameters trained, {w.optimizer}); "
           f"activations {w.activation_gib_per_item:.2f} GiB per {per_item}; dataset {w.dataset_gib:g} GiB; "
           + (f"deadline {w.deadline_hours:g} h" if w.deadline_hours else "no deadline"),
           *(f"  {note}" for note in w.notes),
           "Assumptions:", *(f"  - {line}" for line in advice.assumptions.lines(advice.prices)),
           "Decision tree (every shape, in order; the first rule a shape fails excludes it):",
           *(f"  {i}. {name}: {text}" for i, (name, text) in enumerate(RULES, 1))]
    eligible = [o for o in advice.options if o.excluded is None]
    shown = eligible if show_all else eligible[:15]
    out.append(f"Eligible shapes, cheapest job first ({len(eligible)}{'' if show_all else ', top 15; --all for every one'}):")
    out.append(f"  {'shape':<20} {'GPUs':>4} {'GiB/GPU':>7} {w.sample_unit + '/s':>12} {'source':<9} {'hours':>7} "
               f"{'Spot USD':>10} {'On-Dem. USD':>11}  sharding")
    for o in shown:
        out.append(f"  {o.instance_type + ' x' + str(o.instances):<20} {o.gpus:>4} {o.memory_per_gpu_gib:>7.1f} "
                   f"{o.samples_per_second:>12,.1f} {o.throughput_source:<9} "
                   f"{(o.hours_spot if o.lifecycle == 'spot' else o.hours):>7,.1f} {_money(o.usd_spot):>10} "
                   f"{_money(o.usd_on_demand):>11}  {o.sharding or '-'}")
    by_rule: dict[str, list] = defaultdict(list)
    for o in advice.options:
        if o.excluded:
            by_rule[o.rule].append(o)
    out.append("Excluded shapes, by rule:")
    for rule, _ in RULES:
        excluded = by_rule.get(rule, [])
        if not excluded:
            continue
        out.append(f"  {rule} ({len(excluded)}):")
        for o in (excluded if show_all else excluded[:6]):
            out.append(f"    {o.instance_type} x{o.instances}: {o.excluded}")
        if not show_all and len(excluded) > 6:
            out.append(f"    ... {len(excluded) - 6} more (--all)")
    best = advice.recommended
    if best is None:
        out.append("Recommended: nothing is eligible (see the exclusions): relax the deadline or shrink the job.")
        return "\n".join(out)
    expected = best.hours_spot if best.lifecycle == "spot" else best.hours
    out += [f"Recommended: {best.instance_type} x{best.instances} on {best.lifecycle}: about {best.usd:,.2f} USD and "
            f"{expected:,.1f} h per job ({best.throughput_source} throughput: {best.throughput_note})",
            f"  breakdown: start-up {best.startup_hours:.2f} h, dataset load {best.dataset_load_hours:.2f} h, training "
            f"{best.training_hours:,.2f} h" + (f", {best.expected_interruptions:.2f} expected Spot interruptions"
                                               if best.expected_interruptions is not None else "")]
    if best.throughput_source == "estimated":
        out.append("  its throughput is estimated: run examples/gpu_benchmark.py on it and the runner-up, then "
                   "advise again with --measured ENV before committing a fleet to it")
    fastest = min(eligible, key=lambda o: o.hours)
    if fastest is not best:
        out.append(f"  fastest eligible: {fastest.instance_type} x{fastest.instances}, {fastest.hours:,.1f} h for "
                   f"{fastest.usd:,.2f} USD ({fastest.usd / best.usd:.1f}x the cost)")
    out.append(f"Config block for config/environments.toml ({block}):")
    try:
        text = fleet_block(advice, env) if block == "fleet" and best.instances == 1 else queue_block(advice, env, region=region)
        if block == "fleet" and best.instances > 1:
            out.append("  (a multi-node shape runs on a queue, not a fleet: queue block instead)")
        out += [f"  {line}" for line in text.splitlines()]
    except ValueError as error:
        out.append(f"  no block: {error}")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=[*PRESETS, "custom"])
    parser.add_argument("--json", action="store_true", help="print {workload, options, recommended} as JSON")
    parser.add_argument("--all", action="store_true", help="list every shape and exclusion")
    parser.add_argument("--measured", metavar="ENV", help="prefer throughput measured in ENV (benchmarks/ records)")
    parser.add_argument("--deadline-hours", type=float)
    parser.add_argument("--dataset-gib", type=float)
    parser.add_argument("--samples", type=float, help="a preset on your own data: images, sequences or tokens to train")
    parser.add_argument("--dataset-source", choices=["s3", "snapshot"], default="s3")
    parser.add_argument("--checkpoint-minutes", type=float, default=30)
    parser.add_argument("--interruptions-per-hour", type=float, default=0.02)
    parser.add_argument("--startup-minutes", type=float, default=5)
    parser.add_argument("--max-instances", type=int, default=8)
    parser.add_argument("--block", choices=["fleet", "queue"], default="fleet")
    parser.add_argument("--env", default="dev", help="the environment the config block is for (default dev)")
    for flag in ("--params", "--lora-params", "--tokens", "--images", "--forward-gflops"):
        parser.add_argument(flag, type=float)
    for flag in ("--seq-len", "--hidden", "--layers", "--global-batch"):
        parser.add_argument(flag, type=int)
    parser.add_argument("--activation-gib-per-image", type=float, default=0.04)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    args = parser.parse_args(argv)
    for flag in ("deadline_hours", "dataset_gib", "samples", "checkpoint_minutes", "startup_minutes"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            parser.error(f"--{flag.replace('_', '-')}={value}: must be above 0")
    if not 0 <= args.interruptions_per_hour < 1:
        parser.error(f"--interruptions-per-hour={args.interruptions_per_hour}: a rate from 0 to below 1")
    if args.workload == "custom":
        workload = custom_workload(args)
    else:
        workload = with_overrides(PRESETS[args.workload], deadline_hours=args.deadline_hours,
                                  dataset_gib=args.dataset_gib, samples=args.samples)
    measured: list[MeasuredThroughput] = []
    if args.measured:
        import boto3

        from ops.dataset import stack_output
        from stacks import config as platform_config
        env = platform_config.load().select(args.measured)[0]
        session = boto3.session.Session(region_name=env.region)
        bucket = stack_output(session.client("cloudformation"), f"{env.name}-Data", "DatasetBucketName")
        measured = load_measured(session.client("s3"), bucket)
    assumptions = CostAssumptions(startup_minutes=args.startup_minutes, dataset_source=args.dataset_source,
                                  checkpoint_interval_minutes=args.checkpoint_minutes,
                                  spot_interruptions_per_instance_hour=args.interruptions_per_hour)
    from stacks import config as platform_config
    environments = platform_config.load().environments
    region = environments[args.env].region if args.env in environments else "us-east-1"
    advice = advise(workload, assumptions=assumptions, measured=measured, max_instances=args.max_instances,
                    region=region)
    if args.json:
        print(json.dumps(advice.to_json(), indent=1))
    else:
        if args.measured:
            print(f"{len(measured)} measured benchmark records from {args.measured}")
        print(format_advice(advice, args.env, args.block, args.all, region=region))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
