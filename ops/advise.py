"""Which GPU shape should a training job run on, and what will the whole job cost and take? (./platform advise)

  ./platform advise PRESET [--deadline-hours H] [--minimize cost|time] [--block fleet|queue|none] [--json]
  ./platform advise custom --params 1.3e9 --tokens 2e9 --seq-len 2048 --hidden 2048 --layers 24 [--vocab 32000]
                           [--lora-params N [--qlora]]
  ./platform advise custom --params 11.7e6 --images 12e6 --forward-gflops 3.6 --activation-gib-per-image 0.02
                           [--lora-params N | --frozen-params N]
  ./platform advise PRESET --measured ENV|FILE   # prefer throughput measured by examples/gpu_benchmark.py
  ./platform advise PRESET --wide                # the wide table (every price column); --all: every shape

Not modelled, refused in one line with the reason: tabular (GBDT: XGBoost, LightGBM) and diffusion (no cited
measurement: benchmark first), by name or by their figures: a custom image model above 100 forward GFLOPs an image
(diffusion-sized), and a job whose CPU input pipeline holds the best shape 10x or more below its GPUs (CPU-bound).

Presets: resnet50-imagenet, bert-large-finetune, llm-7b-lora, llm-7b-full, llm-70b-lora (the library's advisor, which a
team without the platform app calls itself). --measured ENV reads the JSON records under benchmarks/ in
ENV's dataset bucket (found from the ENV-Data stack's DatasetBucketName output) with ENV's credentials, checked
first (sts:GetCallerIdentity, cloudformation:DescribeStacks, s3:ListObjectsV2, s3:GetObject); --measured FILE
reads records from a local file (the JSON lines examples/gpu_benchmark.py prints). Otherwise it makes no AWS call.
--presets-table and --throughput-table print the Markdown that README.md and docs/THROUGHPUT.md show.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from ml_platform_constructs.advice.advisor import (
    MAX_JOB_HOURS,
    NOT_MODELLED,
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
from ml_platform_job.benchmark import BENCHMARK_PREFIX
from ml_platform_job.prices import price_source

from ops.cli import Parser, read_text, usage_error

RULES = [
    ("runs", "the accelerator runs the job's methods (QLoRA and LLM.int8() need bitsandbytes: no Neuron backend, "
             "LLM.int8() compute capability 7.5+; FP8 8.9+, on no Trainium of the catalog) and the platform can run it "
             "for the target: NVIDIA GPUs on x86_64 with the platform's driver for a fleet or a queue (arm64 T4G "
             "needs AWS's ARM64 DLAMI with PyTorch; V100 an AMI of your own; Trainium a model built for its Neuron "
             "SDK path, trn1 the legacy PyTorch/XLA one, trn2 TorchNeuron, outside fleets and queues: --block "
             "none), offered in the Region"),
    ("memory", "model state + one micro-batch of activations and logits fit each worker (a GPU as CUDA offers it; "
               "a NeuronCore on Trainium), sharded when it fits no single one: ZeRO-3/FSDP over the shape's GPUs "
               "(never on one GPU), tensor parallel over an instance's NeuronCores"),
    ("scale-out", "several instances only for EFA types on a queue, and only when one instance cannot fit or meet "
                  "the deadline"),
    ("deadline", "expected hours (on Spot with its capacity waits and rework) within the deadline"),
    ("choice", "the rest ranked by cost per job (--minimize time: by hours), each on the better of Spot and "
               "On-Demand, unmeasured Trainium rows after every GPU; the first is recommended"),
]

# What each kind of workload reads; the others are refused with the reason, never silently ignored.
CUSTOM_COMMON = ("params", "optimizer", "global_batch", "lora_params")
IMAGE_FLAGS = ("images", "forward_gflops", "activation_gib_per_image", "frozen_params")
TRANSFORMER_FLAGS = ("tokens", "seq_len", "hidden", "layers", "vocab")
POSITIVE = ("deadline_hours", "dataset_gib", "samples", "checkpoint_minutes", "startup_minutes", "params",
            "lora_params", "frozen_params", "tokens", "images", "forward_gflops", "activation_gib_per_image",
            "s3_mibps")
NON_NEGATIVE = ("value_of_hour", "spot_wait_minutes", "interruptions_per_hour", "neuron_compile_minutes")
# The most a figure can sensibly be (beyond it, a typo): the limit and what it stands for.
MAXIMA = {"deadline_hours": (8760, "a year"), "max_instances": (1000, "config's max_capacity bound"),
          "value_of_hour": (1_000_000, "USD an hour"), "checkpoint_minutes": (10_080, "a week"),
          "startup_minutes": (1440, "a day"), "spot_wait_minutes": (1440, "a day"),
          "s3_mibps": (100_000, "100 GiB/s per instance"), "dataset_gib": (10_000_000, "10 PB"),
          "samples": (1e14, "100 trillion, 7x Llama 3's 15T training tokens"),
          "tokens": (1e14, "100 trillion, 7x Llama 3's 15T training tokens"),
          "images": (1e12, "a trillion, 800,000 epochs of ImageNet-1k"),
          "params": (1e13, "10 trillion parameters"), "lora_params": (1e13, "10 trillion parameters"),
          "frozen_params": (1e13, "10 trillion parameters"),
          "forward_gflops": (1e6, "a PFLOP a forward pass"), "activation_gib_per_image": (1024, "1 TiB an image"),
          "seq_len": (1_048_576, "a million tokens"), "hidden": (131_072, "16x Llama 3 70B's 8,192"),
          "layers": (1000, "8x Llama 3 405B's 126"), "vocab": (10_000_000, "10 million tokens"),
          "global_batch": (10_000_000, "10 million items a step"),
          "neuron_compile_minutes": (10_080, "a week")}
# Below this, a forward pass is no image network the advisor models: MobileNetV3-Small, about the smallest
# ImageNet network, is 0.06 GMACs (0.12 GFLOPs) at 224x224 (torchvision's model table,
# https://pytorch.org/vision/stable/models.html); a tabular model or a tiny network is CPU-bound.
MIN_FORWARD_GFLOPS = 0.05
# Above this, a forward pass is no network the convnet speed ratios describe: they were measured on ResNet-50
# (8.2 GFLOPs at 224x224), and 100 is 12x that; an SDXL-sized diffusion U-Net at 1024x1024 is thousands, a ViT-L/16
# at 224x224 about 123 (61.6 GMACs, torchvision's model table above). Such a model is refused: benchmark first.
MAX_FORWARD_GFLOPS = 100
WIDTH = 100  # the default output's width; --wide prints the whole table
INTEGERS = ("seq_len", "hidden", "layers", "vocab", "global_batch", "max_instances")


def fail(message: str) -> None:
    """Every error is one line, exit status 1."""
    raise SystemExit(f"error: {message}")


class BadArgument(SystemExit):
    """A bad argument, or two that do not go together (its code the one line, "error: ..."): ``main`` prints it as
    the parser does and exits 2; a command that reuses advise's checks (tco) does the same under its own name."""


def bad_argument(message: str) -> None:
    raise BadArgument(f"error: {message}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def validate(args: argparse.Namespace) -> None:
    if args.workload in NOT_MODELLED:
        fail(f"{args.workload}: not modelled: {NOT_MODELLED[args.workload]}")
    for name in POSITIVE:
        value = getattr(args, name, None)
        if value is not None and (not math.isfinite(value) or value <= 0):
            bad_argument(f"{_flag(name)}={value}: must be a finite number above 0")
    for name in NON_NEGATIVE:
        value = getattr(args, name, None)
        if value is not None and (not math.isfinite(value) or value < 0):
            bad_argument(f"{_flag(name)}={value}: must be a finite number, 0 or more")
    for name in INTEGERS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            bad_argument(f"{_flag(name)}={value}: must be 1 or more")
    for name, (most, meaning) in MAXIMA.items():
        value = getattr(args, name, None)
        if value is not None and value > most:
            bad_argument(f"{_flag(name)}={value:g}: out of range: at most {most:,.0f} ({meaning}); pass a figure up to that")
    if getattr(args, "interruptions_per_hour", None) is not None and args.interruptions_per_hour >= 1:
        bad_argument(f"--interruptions-per-hour={args.interruptions_per_hour}: a rate per instance-hour below 1")
    if args.qlora and args.int8:
        bad_argument("--qlora, --int8: one base model: 4-bit (QLoRA) or 8-bit (LLM.int8()), not both")
    given = {name for name in (*CUSTOM_COMMON, *IMAGE_FLAGS, *TRANSFORMER_FLAGS) if getattr(args, name) is not None}
    if args.workload != "custom":
        if given:
            bad_argument(f"{', '.join(_flag(n) for n in sorted(given))}: {args.workload} is a preset with its own model; "
                 "describe your own with `custom`")
        preset = PRESETS[args.workload]
        for flag, method in (("qlora", "QLoRA"), ("int8", "LLM.int8() LoRA")):
            if getattr(args, flag) and not preset.lora:
                bad_argument(f"--{flag}: {args.workload} trains every parameter; {method} applies to LoRA presets "
                     "(llm-7b-lora, llm-70b-lora)")
        if args.gpu_decode and not preset.cpu_samples_per_vcpu:
            bad_argument(f"--gpu-decode: {args.workload} has no CPU decoding step to move (images only)")
        return
    if args.params is None:
        bad_argument("custom: --params (the model's parameters) is required")
    if getattr(args, "samples", None) is not None:
        bad_argument("--samples: a custom workload counts its work with --tokens or --images")
    image = args.images is not None
    wrong = [n for n in (TRANSFORMER_FLAGS if image else IMAGE_FLAGS) if getattr(args, n) is not None]
    if wrong:
        kind = "an image model (--images)" if image else "a transformer (--tokens)"
        bad_argument(f"{', '.join(_flag(n) for n in wrong)}: not read for {kind}")
    if args.lora_params is not None and args.lora_params > args.params:
        bad_argument(f"--lora-params={args.lora_params:g} is more than --params={args.params:g}: LoRA trains adapters "
             "that are a small part of the model")
    if image:
        if args.forward_gflops is None:
            bad_argument("custom image model: --forward-gflops (GFLOPs of one forward pass per image) is required")
        if args.forward_gflops < MIN_FORWARD_GFLOPS:
            fail(f"--forward-gflops={args.forward_gflops:g}: not modelled: under {MIN_FORWARD_GFLOPS:g} GFLOPs an image "
                 "is no network the advisor models (MobileNetV3-Small: 0.12); a tabular/GBDT or tiny model is "
                 "CPU-bound: use a CPU instance or benchmark")
        if args.forward_gflops > MAX_FORWARD_GFLOPS:
            fail(f"--forward-gflops={args.forward_gflops:g}: not modelled: above {MAX_FORWARD_GFLOPS:g} GFLOPs an "
                 "image (12x ResNet-50's 8.2, whose measured speeds the convnet ratios are) is a diffusion U-Net or a "
                 "large vision transformer, which no cited measurement here describes: benchmark first "
                 "(examples/gpu_benchmark.py, then --measured)")
        if args.activation_gib_per_image is None:
            bad_argument("custom image model: --activation-gib-per-image is required (no default: ResNet-50 at 224x224 "
                 "keeps about 0.04 GiB an image, a diffusion U-Net at 1024x1024 tens of GiB; measure one step "
                 "with torch.cuda.max_memory_allocated)")
        if args.frozen_params is not None and args.lora_params is not None:
            bad_argument("--frozen-params, --lora-params: LoRA freezes the whole base already; pass one of them")
        if args.frozen_params is not None and args.frozen_params >= args.params:
            bad_argument(f"--frozen-params={args.frozen_params:g}: at least --params={args.params:g}; something must train")
        if args.qlora or args.int8:
            bad_argument(f"--{'qlora' if args.qlora else 'int8'}: applies to a transformer with --lora-params")
        return
    missing = [flag for flag, value in (("--tokens", args.tokens), ("--seq-len", args.seq_len),
                                        ("--hidden", args.hidden), ("--layers", args.layers)) if value is None]
    if missing:
        bad_argument(f"custom transformer: {', '.join(missing)} required (or --images for an image model)")
    if args.qlora and args.lora_params is None:
        bad_argument("--qlora: needs --lora-params (QLoRA is LoRA over a 4-bit base model)")
    if args.int8 and args.lora_params is None:
        bad_argument("--int8: needs --lora-params (LoRA over an 8-bit LLM.int8() base model)")
    if args.gpu_decode:
        bad_argument("--gpu-decode: a transformer has no image decoding to move")


def custom_workload(args: argparse.Namespace) -> Workload:
    optimizer = args.optimizer or "adam"
    if args.images is not None:
        # Forward + backward: 3x the forward pass; LoRA computes no weight gradients of the frozen base: 2x.
        # Frozen modules (--frozen-params) are counted at 3x too: the advisor cannot tell which run backward.
        lora = args.lora_params is not None
        trainable = args.lora_params if lora else args.params - (args.frozen_params or 0)
        return Workload(
            name="custom", description=f"image model, {args.params:g} parameters, {args.images:g} images"
            + (f", LoRA ({args.lora_params:g} trainable)" if lora else "")
            + (f", {args.frozen_params:g} frozen" if args.frozen_params else ""),
            parameters=args.params, trainable_parameters=trainable, optimizer=optimizer, sample_unit="images",
            samples=args.images, flops_per_sample=(2 if lora else 3) * args.forward_gflops * 1e9,
            activation_gib_per_item=args.activation_gib_per_image,
            global_batch_items=args.global_batch or 256, dataset_gib=args.dataset_gib or 1,
            deadline_hours=args.deadline_hours, cpu_samples_per_vcpu=100, workload_class="convnet",
            fp8=args.fp8, logical_nc=args.logical_nc)
    lora = args.lora_params is not None
    return Workload(
        name="custom", description=f"transformer, {args.params:g} parameters, {args.tokens:g} tokens"
        + (f", {'Q' if args.qlora else ''}LoRA ({args.lora_params:g} trainable)" if lora else ", full training"),
        parameters=args.params, trainable_parameters=args.lora_params if lora else args.params,
        optimizer=optimizer, sample_unit="tokens", samples=args.tokens,
        flops_per_sample=(6 if lora else 8) * args.params,
        activation_gib_per_item=transformer_activation_gib(args.seq_len, args.hidden, args.layers),
        global_batch_items=args.global_batch or 128, dataset_gib=args.dataset_gib or 1,
        deadline_hours=args.deadline_hours, sequence=args.seq_len, vocab=args.vocab, layers=args.layers,
        qlora=args.qlora, int8=args.int8, fp8=args.fp8, logical_nc=args.logical_nc)


def workload_from_args(args: argparse.Namespace) -> Workload:
    validate(args)
    if args.workload == "custom":
        return custom_workload(args)
    return with_overrides(PRESETS[args.workload], deadline_hours=args.deadline_hours, dataset_gib=args.dataset_gib,
                          samples=args.samples, qlora=args.qlora or None, int8=args.int8 or None,
                          fp8=args.fp8 or None, gpu_decode=args.gpu_decode or None, logical_nc=args.logical_nc)


def add_workload_arguments(parser: argparse.ArgumentParser, positional: bool = True) -> None:
    """The flags that describe a job, shared by advise and tco."""
    if positional:
        parser.add_argument("workload", choices=[*PRESETS, "custom", *NOT_MODELLED])
    parser.add_argument("--deadline-hours", type=float)
    parser.add_argument("--dataset-gib", type=float)
    parser.add_argument("--samples", type=float, help="a preset on your own data: images, sequences or tokens to train")
    parser.add_argument("--qlora", action="store_true", help="LoRA over a 4-bit (NF4, bitsandbytes) base model")
    parser.add_argument("--int8", action="store_true", help="LoRA over an 8-bit (LLM.int8(), bitsandbytes) base model")
    parser.add_argument("--fp8", action="store_true", help="FP8 training: only accelerators that run it (compute "
                                                            "capability 8.9+, Trainium); speed counted as BF16's")
    parser.add_argument("--logical-nc", type=int, choices=[1, 2], default=2,
                        help="Trainium2's Logical NeuronCore Configuration (default 2: 4 cores of 24 GiB a chip)")
    parser.add_argument("--gpu-decode", action="store_true",
                        help="decode and augment images on the GPU (NVIDIA DALI): lifts the CPU decoding cap")
    parser.add_argument("--params", type=float, help="custom: the model's parameters")
    parser.add_argument("--lora-params", type=float, help="custom: LoRA's trainable parameters")
    parser.add_argument("--frozen-params", type=float,
                        help="custom image model: parameters that do not train (frozen encoders)")
    parser.add_argument("--tokens", type=float, help="custom transformer: tokens to train")
    parser.add_argument("--images", type=float, help="custom image model: images to train (epochs x dataset)")
    parser.add_argument("--forward-gflops", type=float,
                        help="custom image model: GFLOPs of one forward pass per image, a multiply-add counting 2 "
                             "(ResNet-50 at 224x224: 8.2, ResNet-18: 3.6); training counts 3x")
    parser.add_argument("--activation-gib-per-image", type=float,
                        help="custom image model, required: activation memory of one image in training")
    for flag, text in (("--seq-len", "tokens per sequence"), ("--hidden", "hidden size"), ("--layers", "layers"),
                       ("--vocab", "vocabulary (the loss's logits)"), ("--global-batch", "items per optimizer step")):
        parser.add_argument(flag, type=int, help=f"custom: {text}")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], help="custom (default adam)")


def load_measured(s3: Any, bucket: str) -> list[MeasuredThroughput]:
    """Every benchmark record under benchmarks/ in the bucket."""
    records = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=BENCHMARK_PREFIX):
        for item in page.get("Contents", []):
            if item["Key"].endswith(".json"):
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                records.append(MeasuredThroughput.from_record(json.loads(body)))
    return records


def read_measured_file(path: Path) -> list[MeasuredThroughput]:
    """Records from a file: JSON lines (as gpu_benchmark.py prints them), a JSON list, or one JSON object."""
    text = read_text(path, "--measured", "the JSON lines gpu_benchmark.py prints")
    try:
        document = json.loads(text)
        records = document if isinstance(document, list) else [document]
    except json.JSONDecodeError:
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as error:
            fail(f"--measured {path}: not JSON ({error}); expected the JSON lines examples/gpu_benchmark.py prints")
    if not records:
        fail(f"--measured {path}: no benchmark record in it; expected the JSON lines examples/gpu_benchmark.py prints")
    measured = []
    for number, record in enumerate(records, 1):
        try:
            measured.append(MeasuredThroughput.from_record(record))
        except (KeyError, TypeError, ValueError) as error:
            fail(f"--measured {path}: record {number} lacks or mangles {error}: each needs instance_type, gpu_model, "
                 "workload, gpus, samples_per_second_per_gpu, measured_at")
    return measured


def measured_from(source: str) -> list[MeasuredThroughput]:
    path = Path(source)
    if path.is_dir():
        fail(f"--measured {source} is a directory: give the JSON lines file examples/gpu_benchmark.py printed")
    if path.is_file():
        return read_measured_file(path)
    if "/" in source or source.endswith((".json", ".jsonl")):
        fail(f"--measured {source}: no such file")
    from botocore.exceptions import BotoCoreError, ClientError

    from ops.aws_access import environment, session_for
    from ops.dataset import stack_output
    env = environment(source)
    session = session_for(env)
    try:
        bucket = stack_output(session.client("cloudformation"), f"{env.name}-Data", "DatasetBucketName")
        return load_measured(session.client("s3"), bucket)
    except (BotoCoreError, ClientError) as error:
        fail(f"--measured {source}: reading the benchmark records failed: {error}")
    return []


def known_environments() -> dict:
    from stacks import config as platform_config
    try:
        return platform_config.load().environments
    except platform_config.ConfigError as error:
        fail(str(error))
    return {}


def block_name(workload: Workload, env: Any) -> str:
    """A fleet or queue name the environment does not use yet (the block is added next to what is there)."""
    taken = {f.name for f in env.fleets} | {q.name for q in env.queues}
    base = workload.name[:36]
    name, suffix = base, 2
    while name in taken:
        name, suffix = f"{base}-{suffix}", suffix + 1
    return name


def _money(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _shape(o) -> str:
    return f"{o.instance_type} x{o.instances}"


def _wrap(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """A prose line folded to the width, its continuation indented two more."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _recommendation(best, w: Workload) -> str:
    """The recommendation line: shape, money, hours, where its throughput comes from, and what it assumes."""
    terms = [f"{best.throughput_source} throughput"]
    if w.quantized_base and best.throughput_source != "measured":
        terms.append(f"x{w.quantized_speed} for {w.quantized_base}'s dequantization, assumed until measured")
    if best.compile_hours:
        terms.append(f"{best.compile_hours:.1f} h Neuron graph compilation")
    return (f"Recommended: {_shape(best)} on {best.lifecycle}: about {best.usd:,.2f} USD and "
            f"{best.expected_hours:,.1f} h per job ({'; '.join(terms)})")


def format_advice(advice: Advice, env: Any, show_all: bool = False, wide: bool = False) -> str:
    """The advice as text: 100 columns by default (prose folded, the narrow table); ``wide``: the table with every
    price column; ``show_all``: every shape and exclusion, the assumptions and the decision tree."""
    w = advice.workload
    width = 10_000 if wide else WIDTH
    per_item = "sequence" if w.sample_unit == "tokens" else w.sample_unit.rstrip("s")
    logits = f" + logits {w.logits_gib_per_item():.2f} GiB" if w.logits_gib_per_item() else ""
    base = {"qlora": ", 4-bit base (QLoRA)", "int8": ", 8-bit base (LLM.int8())"}
    out = _wrap(f"Workload {w.name}: {w.description}", width=width)
    out += _wrap(f"{w.samples:,.0f} {w.sample_unit}; model state {w.state_gib():.1f} GiB unsharded "
                 f"({w.trainable_parameters:,.0f} of {w.parameters:,.0f} parameters trained, {w.optimizer}"
                 f"{''.join(base[m] for m in w.methods() if m in base)}{', FP8' if w.fp8 else ''}); activations "
                 f"{w.activation_gib_per_item:.2f} GiB{logits} per {per_item}; dataset {w.dataset_gib:g} GiB; "
                 + (f"deadline {w.deadline_hours:g} h" if w.deadline_hours else "no deadline"), "  ", width)
    if show_all:
        for note in w.notes:
            out += _wrap(note, "  ", width)
    out += _wrap(f"Target: {advice.target} in {advice.region} ({env.name if env else 'no environment'}); minimize "
                 f"{advice.minimize}", width=width)
    out += _wrap(f"Prices: {price_source(advice.prices, detail=False)} (--all: source)", width=width)
    if show_all:
        out.append("Assumptions:")
        for line in advice.assumptions.lines(advice.prices):
            out += _wrap(f"- {line}", "  ", width)
        out.append("Decision tree (every shape, in order; the first rule a shape fails excludes it):")
        for i, (name, text) in enumerate(RULES, 1):
            out += _wrap(f"{i}. {name}: {text}", "  ", width)
    else:
        out.append("Assumptions, notes and the decision tree: --all")
    eligible = advice.eligible()
    limit = len(eligible) if show_all else 10
    shown = eligible[:limit]
    out.append(f"Eligible shapes, {'fastest' if advice.minimize == 'time' else 'cheapest job'} first "
               f"({len(eligible)}{'' if show_all or len(eligible) <= limit else f', top {limit}; --all for every one'}"
               f"{'' if wide else '; --wide for the price columns'}):")
    head = (f"  {'shape':<18} {'GPUs':>4} {'GiB/GPU':>7} {w.sample_unit + '/s':>12} {'source':<10} {'on':<4} "
            f"{'hours':>9} {'USD/job':>12}")
    out.append(head + (f" {'Spot USD':>12} {'OD USD':>12} {'Spot/h':>7} {'OD/h':>7} {'scaling':>7}  sharding"
                       if wide else ""))
    for o in shown:
        row = (f"  {_shape(o):<18} {o.gpus:>4} {o.memory_per_gpu_gib:>7.1f} {o.samples_per_second:>12,.1f} "
               f"{o.throughput_source:<10} {'Spot' if o.lifecycle == 'spot' else 'OD':<4} {o.expected_hours:>9,.1f} "
               f"{o.usd:>12,.2f}")
        if wide:
            row += (f" {_money(o.usd_spot):>12} {o.usd_on_demand:>12,.2f} {_money(o.spot_hourly):>7} "
                    f"{o.on_demand_hourly:>7,.2f} {o.scaling_efficiency:>7.0%}  {o.sharding or '-'}")
        out.append(row)
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
        if show_all:
            for o in excluded:
                out += _wrap(f"{_shape(o)}: {o.excluded}", "    ", width)
            continue
        # one line per type and reason: "p3dn.24xlarge x1, x2, x4: ..."
        groups: dict[tuple[str, str], list[int]] = {}
        for o in excluded:
            groups.setdefault((o.instance_type, o.excluded), []).append(o.instances)
        for (instance_type, reason), counts in list(groups.items())[:3]:
            shapes_ = ", ".join(f"x{n}" for n in sorted(counts))
            out += _wrap(f"{instance_type} {shapes_}: {reason}", "    ", width)
        if len(groups) > 3:
            out.append(f"    ... {len(groups) - 3} more types (--all)")
    best = advice.recommended
    if best is None:
        out += _wrap("Recommended: nothing is eligible (see the exclusions): relax the deadline, shrink the job, or "
                     "change --block.", width=width)
        return "\n".join(out)
    out += _wrap(_recommendation(best, w), width=width)
    out += _wrap(f"how: {best.throughput_note}", "  ", width)
    out += _wrap(f"breakdown: start-up {best.startup_hours:.2f} h, dataset load {best.dataset_load_hours:.2f} h, "
                 f"training {best.training_hours:,.2f} h" + (
                     f"; on Spot ({best.spot_savings:.0%} off, interruptions {best.interruption_band}): "
                     f"{best.expected_interruptions:.2f} expected interruptions, {best.spot_wait_hours * 60:.0f} min "
                     "capacity wait per start" if best.lifecycle == "spot" else ""), "  ", width)
    if show_all and best.spot_savings is not None:
        out += _wrap(f"Spot price: {best.spot_savings:.0%} below On-Demand, the table's conservative "
                     f"{best.instance_type.split('.')[0]} discount (the budget guard's price)" + (
                         f"; the Spot Instance Advisor's 30-day average saving, {best.advisor_savings:.0%}, is shown "
                         "only, never the price" if best.advisor_savings is not None else ""), "  ", width)
    if best.spot_note:
        out += _wrap(f"{best.spot_note}; On-Demand recommended", "  ", width)
    trade_off = advice.trade_off()
    if trade_off:
        out += _wrap(trade_off, "  ", width)
    if advice.assumptions.value_of_hour:
        out.append(f"  with your time at {advice.assumptions.value_of_hour:g} USD/h the job costs {best.cost:,.2f} USD")
    if best.throughput_source in ("estimated", "derived"):
        out += _wrap(f"its throughput is {best.throughput_source}: run examples/gpu_benchmark.py on it and the "
                     "runner-up, then advise again with --measured ENV (or FILE) before committing a fleet to it",
                     "  ", width)
    cheaper_unmeasured = [o for o in eligible if o.throughput_source == "unmeasured" and o.cost < best.cost]
    if cheaper_unmeasured:
        o = min(cheaper_unmeasured, key=lambda o: o.cost)
        out += _wrap(f"unmeasured: {_shape(o)} would cost {o.usd:,.2f} USD by a datasheet ratio; it ranks after "
                     "every GPU until a Neuron measurement (--measured) backs it", "  ", width)
    if best.expected_hours > MAX_JOB_HOURS:
        out += _wrap(f"the job takes more than a year ({MAX_JOB_HOURS:,} h): check its figures", "  ", width)
    frontier = advice.pareto()
    out.append("Cost/time frontier (each faster shape costs more; no eligible shape is both faster and cheaper):")
    shown_points = frontier if len(frontier) <= 10 else [*frontier[:5], None, *frontier[-4:]]
    for o in shown_points:
        if o is None:
            out.append(f"  ... {len(frontier) - 9} more (--json)")
            continue
        mark = "  <- recommended" if o is best else ""
        out.append(f"  {_shape(o):<18} {o.expected_hours:>8,.1f} h {o.usd:>10,.2f} USD on {o.lifecycle}{mark}")
    if advice.target == "none":
        out += _wrap("No config block (--block none): the ranking includes what the platform's fleets and queues "
                     "cannot run.", width=width)
        return "\n".join(out)
    name = block_name(w, env)
    out.append(f"Config block for config/environments.toml ({advice.target}, added next to {env.name}'s own):")
    try:
        text = (fleet_block(advice, env.name, name=name) if advice.target == "fleet"
                else queue_block(advice, env.name, name=name, region=env.region))
        out += [f"  {line}" for line in text.splitlines()]
    except ValueError as error:
        out += _wrap(f"no block: {error}", "  ", width)
    return "\n".join(out)


# --- generated documentation -----------------------------------------------------------------------------------

def _why(advice: Advice) -> str:
    """The binding reason for a recommendation, in a phrase."""
    best = advice.recommended
    w = advice.workload
    fastest = min(advice.eligible(), key=lambda o: o.expected_hours)
    parts = []
    need = w.state_gib() + w.item_gib()
    if best.sharding:
        parts.append(f"{w.state_gib():.0f} GiB of state fits no single GPU: {best.sharding}")
    elif best.gpus > 1:
        parts.append(f"{need:.1f} GiB fits one GPU, but {best.gpus} GPUs in data parallel cost less per job")
    elif need > 1:
        parts.append(f"{need:.1f} GiB per GPU")
    if "capped" in best.throughput_note:
        parts.append("CPU JPEG decoding caps every small instance alike, so the cheapest hour wins")
    if best.lifecycle == "spot":
        parts.append(f"Spot at {best.spot_savings:.0%} off ({best.interruption_band} interrupted)")
    if fastest is not best:
        parts.append(f"fastest: {_shape(fastest)} in {fastest.expected_hours:,.1f} h for {fastest.usd:,.2f} USD")
    return "; ".join(parts)


def presets_table(region: str = "us-east-1") -> str:
    """The five presets' recommendations (fleet target, no deadline) as README.md shows them."""
    rows = ["| preset | recommended (fleet) | per job | throughput | why |", "|---|---|---|---|---|"]
    for name, workload in PRESETS.items():
        advice = advise(workload, region=region)
        best = advice.recommended
        rows.append(f"| `{name}` | {_shape(best)}, {best.lifecycle} | {best.usd:,.2f} USD, {best.expected_hours:,.1f} h "
                    f"| {best.samples_per_second:,.0f} {workload.sample_unit}/s, {best.throughput_source} | {_why(advice)} |")
    return "\n".join(rows)


def throughput_table() -> str:
    """docs/THROUGHPUT.md: every published row, every relative speed, and what the advisor uses per GPU."""
    from ml_platform_constructs.advice import advisor
    from ml_platform_constructs.advice.advisor import shape_throughput
    from ml_platform_constructs.advice.gpu_catalog import (ACCELERATOR_CATALOG, EFA_INSTANCE_TYPES, GPU_SPECS, METHODS,
                                                          NETWORK_GBPS, NETWORK_UP_TO, NEURON_CATALOG, method_refused,
                                                          neuron_path)
    from ml_platform_constructs.advice.throughput import PUBLISHED, RELATIVE_SPEED
    out = ["# Throughput: every number the GPU advisor uses, with its source or rule",
           "",
           "Generated by `python -m ops.advise --throughput-table` from `constructs/ml_platform_constructs/advice/throughput.py`; "
           "a test keeps this page equal to the code. No GPU was measured for this round: every row is published or "
           "derived. Measurements replace them: run `examples/gpu_benchmark.py` on a GPU (a fleet instance, a queue "
           "job, a workstation), then `./platform advise PRESET --measured ENV` (records in the dataset bucket) or "
           "`--measured FILE` (the JSON lines the script prints); a measured row says the GPU's name and when.",
           "",
           "## Published numbers",
           "",
           "A row with a rule is a published run converted to the preset: the advisor labels it `derived`, not "
           "`published`. A row measured across more GPUs than one instance holds (the 64-GPU run) already holds its "
           "inter-node communication: no network term is added to it.", "",
           "| GPU | preset | GPUs | per GPU per second | run | source | rule |", "|---|---|---|---|---|---|---|"]
    for row in PUBLISHED:
        out.append(f"| {row.gpu_model} | `{row.workload}` | {row.gpus} | {row.samples_per_second_per_gpu:,.1f} | "
                   f"{row.measured_on} | {row.source} | {row.rule or 'as published'} |")
    out += ["", "## Sustained speed relative to the A100 80 GB SXM", "",
            "Estimates scale the nearest GPU with a number by the ratio of these (per workload class), so every "
            "estimated H100/A100 ratio is the same whichever GPU a preset's published number came from.", "",
            "| GPU | convnet (ResNet-50) | transformer (BERT-large) | source | rule | uncertainty |",
            "|---|---|---|---|---|---|"]
    for row in RELATIVE_SPEED.values():
        out.append(f"| {row.gpu_model} | {row.convnet:.3f} | {row.transformer:.3f} | {row.source} | "
                   f"{row.rule or 'measured'} | {row.uncertainty or '-'} |")
    out += ["", "## Which methods run where", "",
            "A shape whose accelerator cannot run a job's method is excluded at rule 1 with the reason.", "",
            "| method | needs | on Trainium | source | refused on |", "|---|---|---|---|---|"]
    for method in METHODS.values():
        refused = [model for model in GPU_SPECS if method_refused(model, method.name)]
        out.append(f"| {method.label} (`--{method.name}`) | NVIDIA compute capability "
                   f"{method.min_compute_capability:g}+ | {method.neuron_refusal} | "
                   f"{method.source} | {', '.join(refused) or '-'} |")
    out += ["", "## Trainium per NeuronCore", "",
            "Each generation trains on its own Neuron SDK path, which the model must be written for: Neuron ended "
            "PyTorch/XLA training in release 2.30 (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/"
            "announcements/neuron2.x/announce-no-support-pytorch-xla-training.html) and its successor TorchNeuron "
            "supports Trn2 and Trn3 only (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/"
            "components/torchneuron.html). Each (logical) NeuronCore is a data-parallel worker with its share of the "
            "chip's memory; a model that fits no core is tensor parallel over the fewest cores of one instance that "
            f"hold it. A job's first run compiles its graphs: {advisor.NEURON_COMPILE_MINUTES} minutes assumed on "
            "either path, no Neuron page giving a duration (`--neuron-compile-minutes`, 0 once cached). Throughput "
            "is a datasheet ratio (the relative-speed table): every Trainium row is `unmeasured` and ranks after every "
            "eligible GPU until `--measured` gives a Neuron number. Sources: "
            "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html, "
            "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/logical-neuroncore-config.html, "
            "and each path's compile page in the table.",
            "", "| instance | chips | workers (LNC 1) | MiB each | workers (LNC 2) | MiB each | SDK path | tensor "
                "parallel | compile |", "|---|---|---|---|---|---|---|---|---|"]
    for instance in NEURON_CATALOG.values():
        path = neuron_path(instance.gpu_model)
        out.append(f"| {instance.name} | {instance.gpu_count} | {instance.workers(1)} | {instance.worker_memory_mib(1):,} "
                   f"| {instance.workers(2)} | {instance.worker_memory_mib(2):,} | {path.name} | {path.tensor_parallel} "
                   f"| {path.compile} |")
    out += ["", "## Communication across instances", "",
            "Per optimizer step each instance moves, over its network, x (n - 1) / n for n instances (ring "
            f"collectives): data parallel {advisor.ALL_REDUCE_VOLUME}x the {advisor.DDP_GRADIENT_BYTES}-byte (FP32) "
            "gradients of the trained parameters, once a step (DDP under torch.autocast keeps FP32 parameters, so "
            "its gradients are FP32: https://pytorch.org/docs/stable/amp.html); ZeRO-3/FSDP "
            f"{advisor.ZERO3_VOLUME}x the model's 16-bit weights (gathered forward and backward, gradients "
            f"reduce-scattered in {advisor.SHARDED_GRADIENT_BYTES} bytes: FSDP MixedPrecision with BF16 reduce_dtype, "
            "https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.MixedPrecision; LoRA: the frozen base "
            "gathered twice plus the adapters' gradients) on every micro-batch, so x ceil(a worker's share of the "
            "global batch / the micro-batch that fits) with gradient accumulation, per the ZeRO paper "
            "(https://arxiv.org/abs/1910.02054, sec. 7). The bytes cross each instance's network at its rated "
            f"bandwidth x {advisor.NETWORK_EFFICIENCY} (assumed for every type: published nccl-tests runs over EFA "
            "reach about that share at several nodes, https://github.com/NVIDIA/nccl/issues/235 and "
            "https://github.com/NVIDIA/nccl/issues/527). Overlap rule: a step takes max(compute, bytes / (bandwidth x "
            f"{advisor.NETWORK_EFFICIENCY})), the best case of prefetching and bucketed all-reduce: never less than "
            "its communication. Only EFA types run multi-node. Bandwidth per instance, from the EC2 "
            "accelerated-computing network specifications (https://docs.aws.amazon.com/ec2/latest/instancetypes/"
            "ac.html; sources per type in gpu_catalog); \"up to\": a lower baseline, bursts for minutes:",
            "", "| instance | Gbps | EFA |", "|---|---|---|"]
    out += [f"| {name} | {'up to ' if name in NETWORK_UP_TO else ''}{gbps:,g} | "
            f"{'yes' if name in EFA_INSTANCE_TYPES else '-'} |" for name, gbps in NETWORK_GBPS.items()]
    out += ["", "## Other rules", "",
            f"- Quantized base: throughput x {advisor.QUANTIZED_BASE_SPEED} for QLoRA (NF4) and x "
            f"{advisor.INT8_BASE_SPEED} for LLM.int8(), the slower (its outlier decomposition runs some columns in "
            "16-bit, https://arxiv.org/abs/2208.07339 sec. 3.2): each 4-bit or 8-bit weight is dequantized to BF16 "
            "before its matmul, forward and backward (bitsandbytes' compute dtype); no measurement for these "
            "presets, so both are assumed until `--measured` replaces them, and printed on the recommendation line.",
            "- FP8 (`--fp8`): eligibility only (the methods table); its speed is counted as BF16's until measured.",
            *(f"- Not modelled, refused in one line: {text}." for text in advisor.NOT_MODELLED.values()),
            f"- A custom image model's forward pass under {MIN_FORWARD_GFLOPS:g} GFLOPs or above "
            f"{MAX_FORWARD_GFLOPS:g} is refused as not modelled (MobileNetV3-Small: 0.12 GFLOPs; ViT-L/16 about "
            "123, https://pytorch.org/vision/stable/models.html; above 100, 12x ResNet-50's 8.2, the convnet "
            "ratios measured on ResNet-50 say nothing: a diffusion U-Net or a large ViT, benchmark first); "
            "`--activation-gib-per-image` has no default.",
            f"- CPU-bound: where the CPU input pipeline holds the recommended shape {advisor.CPU_BOUND_RATIO}x or "
            "more below its accelerators' rate, the job is refused (use a CPU instance or benchmark): the ranking "
            "would be of vCPUs, not GPUs.",
            f"- A job over {MAX_JOB_HOURS:,} hours on its best shape gets no config block."]
    out += ["", "## What the advisor uses, per GPU and preset", "",
            "Per GPU on the instance named (its smallest with that GPU: the published row for that GPU count, and "
            "x0.9 where it has more GPUs than the row), before the CPU decoding cap; `published` and `derived` rows "
            "come from the first table, `estimated` ones from the nearest GPU with a number, `unmeasured` ones "
            "(Trainium, per chip) from the datasheet ratio.", "",
            "| GPU (instance) | " + " | ".join(f"`{n}`" for n in PRESETS) + " |",
            "|---|" + "---|" * len(PRESETS)]
    for model in GPU_SPECS:
        single = min((i for i in ACCELERATOR_CATALOG.values() if i.gpu_model == model),
                     key=lambda i: (i.gpu_count, i.vcpus))
        cells = []
        for workload in PRESETS.values():
            rate, source, _ = shape_throughput(workload, single, 1)
            cells.append(f"{rate / single.gpu_count:,.1f} ({source})")
        out.append(f"| {model} ({single.name}) | " + " | ".join(cells) + " |")
    out += ["", "Units: images/s (ResNet-50), sequences/s (BERT-large), tokens/s (LLM presets)."]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except BadArgument as refused:
        usage_error("./platform advise", str(refused.code).removeprefix("error: "))


def _main(argv: list[str]) -> int:
    parser = Parser("./platform advise", description=__doc__)
    parser.add_argument("workload", nargs="?", choices=[*PRESETS, "custom", *NOT_MODELLED])
    parser.add_argument("--json", action="store_true", help="print {schema_version, region, workload, assumptions, "
                                                            "options, recommended, pareto} as JSON")
    parser.add_argument("--all", action="store_true", help="list every shape and exclusion, the assumptions and "
                                                           "the decision tree")
    parser.add_argument("--wide", action="store_true", help="the table with every price column, lines unfolded")
    parser.add_argument("--neuron-compile-minutes", type=float,
                        help="Trainium graph compilation on the job's first run (default 60; 0 once cached)")
    parser.add_argument("--measured", metavar="ENV|FILE", help="prefer throughput measured in ENV or read from FILE")
    parser.add_argument("--block", choices=["fleet", "queue", "none"], default="fleet",
                        help="the target: a fleet or a queue of --env (what the platform runs), or none (rank "
                             "everything that runs somewhere, Trainium included, with no config block)")
    parser.add_argument("--minimize", choices=["cost", "time"], default="cost")
    parser.add_argument("--value-of-hour", type=float, help="USD an hour of waiting is worth to you (default 0)")
    parser.add_argument("--accelerator", choices=["cuda", "neuron"],
                        help="neuron: your model is built with the AWS Neuron SDK (Trainium eligible); default: "
                             "the preset's (BERT and the LLM presets train on Neuron), cuda for custom")
    parser.add_argument("--arm64-dlami", action="store_true",
                        help="with --block none: your instances run AWS's ARM64 Deep Learning AMI with PyTorch "
                             "(G5g's T4G eligible)")
    parser.add_argument("--dataset-source", choices=["s3", "snapshot"], default="s3")
    parser.add_argument("--s3-mibps", type=float, help="S3 copy rate per instance (default 400 MiB/s)")
    parser.add_argument("--checkpoint-minutes", type=float, default=30)
    parser.add_argument("--interruptions-per-hour", type=float,
                        help="Spot interruptions per instance-hour for every type (default: per type and Region)")
    parser.add_argument("--spot-wait-minutes", type=float,
                        help="Spot capacity wait per start for every type (default: by interruption band)")
    parser.add_argument("--startup-minutes", type=float, default=4,
                        help="software start per start, after the instance's boot (default 4)")
    parser.add_argument("--max-instances", type=int, default=8)
    parser.add_argument("--env", default="dev", help="the environment: its Region's prices, its config for the "
                                                     "block (default dev)")
    parser.add_argument("--presets-table", action="store_true", help="print README.md's presets table and stop")
    parser.add_argument("--throughput-table", action="store_true", help="print docs/THROUGHPUT.md and stop")
    add_workload_arguments(parser, positional=False)
    args = parser.parse_args(argv)
    if args.presets_table or args.throughput_table:
        print(presets_table() if args.presets_table else throughput_table(), end="" if args.throughput_table else "\n")
        return 0
    if args.workload is None:
        bad_argument("a workload is required: one of " + ", ".join([*PRESETS, "custom"]) + " (./platform advise --help)")
    if args.arm64_dlami and args.block != "none":
        bad_argument("--arm64-dlami: only with --block none (config cannot set a fleet's AMI; a queue's image is x86_64)")
    workload = workload_from_args(args)
    environments = known_environments()
    if args.env not in environments:
        bad_argument(f"--env {args.env}: no such environment in config/environments.toml (known: {', '.join(environments)})")
    env = environments[args.env]
    measured = measured_from(args.measured) if args.measured else []
    assumptions = CostAssumptions(startup_minutes=args.startup_minutes, dataset_source=args.dataset_source,
                                  s3_copy_mibps=args.s3_mibps or 400,
                                  checkpoint_interval_minutes=args.checkpoint_minutes,
                                  spot_interruptions_per_instance_hour=args.interruptions_per_hour,
                                  spot_wait_minutes=args.spot_wait_minutes, value_of_hour=args.value_of_hour or 0.0,
                                  **({} if args.neuron_compile_minutes is None
                                     else {"neuron_compile_minutes": args.neuron_compile_minutes}))
    advice = advise(workload, assumptions=assumptions, measured=measured, max_instances=args.max_instances,
                    region=env.region, target=args.block, minimize=args.minimize, accelerator=args.accelerator,
                    arm64_dlami=args.arm64_dlami)
    if advice.cpu_bound():
        fail(advice.cpu_bound())
    if args.json:
        print(json.dumps(advice.to_json(), indent=1))
    else:
        if args.measured:
            print(f"{len(measured)} measured benchmark records from {args.measured}")
        print(format_advice(advice, env, args.all, args.wide))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
