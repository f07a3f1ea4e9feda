"""Which GPU shape should a training job run on, and what will the whole job cost?

$/hour is not $/job: a GPU twice the price that trains three times as fast is the cheaper one. The advisor
ranks every catalog shape (instance type x instance count, several instances only where the type has EFA)
by what the job pays end to end: start-up, loading the dataset, training at the shape's throughput, and on
Spot the work redone after interruptions since the last checkpoint.

Throughput comes from, in order: your own measurements (examples/gpu_benchmark.py), published numbers
(throughput.PUBLISHED, each with its source), or an estimate from the GPU's dense tensor TFLOPS and memory
bandwidth (gpu_catalog.GPU_SPECS) at a utilization calibrated on a published number, labelled `estimated`.

The decision tree, applied to every shape in this order (the first rule that fails excludes it, and says why):

1. software: the platform's Deep Learning AMI must support the GPU (P3's V100 no longer is);
2. memory: weights, gradients, optimizer states and one micro-batch of activations must fit in 90% of each
   GPU's memory; a model whose state fits no single GPU is sharded (ZeRO-3/FSDP) over every GPU of the
   shape, and never placed on a single-GPU shape;
3. scale-out: several instances only for EFA types, and only when one instance of the type cannot fit the
   model or meet the deadline (scaling below 100% makes more instances cost more per job);
4. deadline: the expected hours (with Spot rework on Spot) within the deadline;
5. the rest ranks by cost per job, on the cheaper of Spot and On-Demand; the cheapest is recommended.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Optional, Sequence

from .gpu_catalog import GPU_CATALOG, GPU_SPECS, GpuInstanceType
from .throughput import published

GIB = 1024 ** 3
HOURS_PER_MONTH = 730

# Model state per parameter in bytes. Adam with mixed precision: 2 (half weights) + 2 (half gradients)
# + 4 (FP32 master weights) + 8 (two FP32 moments) = 16 (ZeRO paper, https://arxiv.org/abs/1910.02054, sec. 3.1).
# SGD with momentum: 2 + 2 + 4 + 4 = 12. Frozen weights (LoRA's base model) in BF16/FP16: 2.
STATE_BYTES_PER_PARAMETER = {"adam": 16, "sgd": 12}
FROZEN_BYTES_PER_PARAMETER = 2
USABLE_MEMORY_FRACTION = 0.9  # CUDA context, allocator fragmentation and communication buffers take the rest
INTRA_NODE_SCALING = 0.9  # per-GPU throughput kept when a shape has more GPUs per instance than the reference
INTER_NODE_SCALING = 0.85  # and again across instances over EFA
DEFAULT_UTILIZATION = 0.35  # share of dense tensor TFLOPS reached where no published number calibrates it
REFERENCE_GPU = "NVIDIA A100"  # whose bandwidth-to-compute ratio DEFAULT_UTILIZATION assumes
MAX_INSTANCES = 8



@dataclass(frozen=True)
class Workload:
    """A training job. A sample is the unit throughput counts: an image, a sequence, or a token."""

    name: str
    description: str
    parameters: float
    trainable_parameters: float  # = parameters for full training; the adapters' for LoRA
    optimizer: str  # "adam" or "sgd"
    sample_unit: str  # "images", "sequences" or "tokens"
    samples: float  # to train (epochs x dataset, or tokens)
    flops_per_sample: float  # training FLOPs per sample (forward, backward, recomputation)
    activation_gib_per_item: float  # one image or one sequence in the micro-batch
    global_batch_items: int  # images or sequences per optimizer step
    dataset_gib: float
    deadline_hours: Optional[float] = None
    # what one vCPU decodes and augments per second, where the input pipeline runs on the CPU (JPEG images)
    cpu_samples_per_vcpu: Optional[float] = None
    notes: tuple[str, ...] = ()

    def state_gib(self) -> float:
        """Weights, gradients and optimizer states of the whole model, unsharded."""
        trainable = self.trainable_parameters * STATE_BYTES_PER_PARAMETER[self.optimizer]
        frozen = max(0.0, self.parameters - self.trainable_parameters) * FROZEN_BYTES_PER_PARAMETER
        return (trainable + frozen) / GIB


def transformer_activation_gib(sequence: int, hidden: int, layers: int) -> float:
    """Activations of one sequence with full activation checkpointing and a fused (flash) attention kernel:
    each layer's input kept in 16-bit (2*s*h bytes per layer) plus one layer recomputed in full (34*s*h bytes;
    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    https://arxiv.org/abs/2205.05198, sec. 4.1, without the attention-score term a fused kernel never stores)."""
    return (2 * sequence * hidden * layers + 34 * sequence * hidden) / GIB


def lora_parameters(rank: int, hidden: int, kv_hidden: int, ffn: int, layers: int) -> float:
    """LoRA adapters of rank r on every linear layer of a Llama-style block: r * (in + out) each."""
    per_layer = rank * ((hidden + hidden) * 2 + (hidden + kv_hidden) * 2 + (hidden + ffn) * 3)
    return per_layer * layers


def _llm(name: str, description: str, parameters: float, hidden: int, kv_hidden: int, ffn: int, layers: int,
         lora_rank: Optional[int], tokens: float, sequence: int = 4096) -> Workload:
    trainable = lora_parameters(lora_rank, hidden, kv_hidden, ffn, layers) if lora_rank else parameters
    # FLOPs per token: forward 2N, backward 4N for full training (2N for LoRA: frozen weights get no gradient),
    # plus 2N for the forward recomputed under activation checkpointing (the memory model assumes it).
    flops = (8 if lora_rank is None else 6) * parameters
    return Workload(
        name=name, description=description, parameters=parameters, trainable_parameters=trainable,
        optimizer="adam", sample_unit="tokens", samples=tokens, flops_per_sample=flops,
        activation_gib_per_item=transformer_activation_gib(sequence, hidden, layers),
        global_batch_items=128, dataset_gib=1,
        notes=(f"sequence length {sequence}, global batch 128 sequences, BF16 mixed precision, AdamW, activation "
               "checkpointing" + (f", LoRA rank {lora_rank} on every linear layer" if lora_rank else ""),))


PRESETS: dict[str, Workload] = {workload.name: workload for workload in (
    Workload(
        name="resnet50-imagenet", description="ResNet-50 v1.5, 90 epochs of ImageNet-1k at 224x224, mixed precision",
        parameters=25.6e6, trainable_parameters=25.6e6, optimizer="sgd", sample_unit="images",
        samples=90 * 1_281_167,
        # 4.1 GMACs (8.2 GFLOPs) forward per 224x224 image; backward about twice the forward.
        flops_per_sample=3 * 8.2e9,
        # NVIDIA trains it at 256 images per 16 GB V100 with AMP; 40 MiB an image keeps that within memory.
        activation_gib_per_item=0.04, global_batch_items=256 * 8, dataset_gib=150,
        cpu_samples_per_vcpu=100,
        notes=("SGD with momentum, batch 256 per GPU as NVIDIA's recipe; ImageNet-1k train set 1,281,167 images, "
               "about 150 GiB; JPEG decoding and augmentation on the CPU at an assumed 100 images/s per vCPU "
               "(GPU decoding with NVIDIA DALI lifts that cap)",)),
    Workload(
        name="bert-large-finetune", description="BERT-large fine-tuning on SQuAD v1.1, 2 epochs at sequence length 384",
        parameters=340e6, trainable_parameters=340e6, optimizer="adam", sample_unit="sequences",
        samples=2 * 88_641,  # SQuAD v1.1 training features at length 384, stride 128
        flops_per_sample=6 * 340e6 * 384,
        # no checkpointing: 34*s*h + 5*a*s^2 bytes per layer (Korthikanti et al.), s=384, h=1024, a=16, 24 layers
        activation_gib_per_item=(34 * 384 * 1024 + 5 * 16 * 384 * 384) * 24 / GIB,
        global_batch_items=256, dataset_gib=0.1,
        notes=("mixed precision, Adam; NVIDIA's recipe uses batch 32 per A100",)),
    _llm("llm-7b-lora", "Llama-2-7B-shaped model, LoRA fine-tuning on 100M tokens", 6.74e9, 4096, 4096, 11008, 32,
         16, 100e6),
    _llm("llm-7b-full", "Llama-2-7B-shaped model, full fine-tuning on 100M tokens", 6.74e9, 4096, 4096, 11008, 32,
         None, 100e6),
    _llm("llm-70b-lora", "Llama-3-70B-shaped model, LoRA fine-tuning on 100M tokens", 70.6e9, 8192, 1024, 28672, 80,
         16, 100e6),
)}


@dataclass(frozen=True)
class MeasuredThroughput:
    """A benchmark record (examples/gpu_benchmark.py): per-GPU throughput measured on a real instance."""

    instance_type: str
    gpu_model: str
    workload: str
    gpus: int
    samples_per_second_per_gpu: float
    measured_at: str

    @classmethod
    def from_record(cls, record: dict) -> "MeasuredThroughput":
        return cls(record["instance_type"], record["gpu_model"], record["workload"], int(record["gpus"]),
                   float(record["samples_per_second_per_gpu"]), record["measured_at"])


@dataclass(frozen=True)
class CostAssumptions:
    """What a job pays beyond its training hours. Every value is a stated assumption, printed with the advice."""

    startup_minutes: float = 5  # boot, GPU driver, container image pull; per start, billed
    dataset_source: str = "s3"  # "s3": copied to each instance at every start; "snapshot": a dataset volume
    s3_copy_mibps: float = 400  # per instance, for a copy from S3 in the same Region
    checkpoint_interval_minutes: float = 30
    spot_interruptions_per_instance_hour: float = 0.02  # about one per 50 instance-hours

    def lines(self, prices: dict) -> list[str]:
        source = (f"dataset copied from S3 at {self.s3_copy_mibps:g} MiB/s per instance on every start"
                  if self.dataset_source == "s3" else
                  "dataset on a snapshot volume (lazy-loaded: no copy before training; the gp3 volume billed "
                  f"at {prices['ebs_gp3_gb_month']} USD per GB-month while the job runs)")
        return [
            f"prices: {prices['source']} ({prices['retrieved']}, {prices['region']}); Spot = On-Demand x (1 - "
            "the family's assumed discount)",
            f"start-up {self.startup_minutes:g} minutes per start; {source}",
            f"Spot: {self.spot_interruptions_per_instance_hour:g} interruptions per instance-hour (any instance's "
            f"interruption stops the job); each one redoes half a checkpoint interval "
            f"({self.checkpoint_interval_minutes:g} minutes) plus a start and the dataset load",
            f"memory: {USABLE_MEMORY_FRACTION:.0%} of each GPU usable; sharding (ZeRO-3/FSDP) splits the model state "
            "evenly over every GPU of the shape, activations are per GPU",
            f"scaling: per-GPU throughput x {INTRA_NODE_SCALING} with more GPUs per instance than the reference run, "
            f"x {INTER_NODE_SCALING} across instances",
            f"estimated throughput: dense tensor TFLOPS x utilization calibrated on the workload's published number "
            f"(else {DEFAULT_UTILIZATION:.0%} against the {REFERENCE_GPU}), scaled down on GPUs with less memory "
            "bandwidth per TFLOP than the calibrating GPU",
            "multi-instance shapes run as multi-node jobs, which AWS Batch runs On-Demand only "
            "(https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html)",
        ]


@dataclass
class Option:
    instance_type: str
    instances: int
    gpus_per_instance: int
    gpu_model: str
    gpu_memory_gib: int
    efa: bool
    fits: bool
    sharding: Optional[str]
    memory_per_gpu_gib: float
    micro_batch_per_gpu: int
    samples_per_second: float  # the whole shape
    throughput_source: str
    throughput_note: str
    startup_hours: float
    dataset_load_hours: float
    training_hours: float
    hours: float  # On-Demand wall clock: start-up + load + training
    hours_spot: Optional[float]  # expected, with rework after interruptions
    expected_interruptions: Optional[float]
    usd_spot: Optional[float]
    usd_on_demand: float
    lifecycle: str  # the cheaper of "spot" and "on-demand"
    usd: float  # on that lifecycle
    meets_deadline: bool
    excluded: Optional[str] = None
    rule: Optional[str] = None  # the decision-tree rule that excluded it

    @property
    def gpus(self) -> int:
        return self.instances * self.gpus_per_instance

    def to_json(self) -> dict:
        return {key: (round(value, 4) if isinstance(value, float) else value) for key, value in asdict(self).items()}


@dataclass
class Advice:
    workload: Workload
    assumptions: CostAssumptions
    options: list[Option]
    recommended: Optional[Option]
    prices: dict = field(repr=False)

    def to_json(self) -> dict:
        return {
            "workload": {**asdict(self.workload), "model_state_gib": round(self.workload.state_gib(), 3)},
            "options": [option.to_json() for option in self.options],
            "recommended": self.recommended.to_json() if self.recommended else None,
        }


def _spot_price(prices: dict, instance_type: str) -> float:
    family = instance_type.split(".")[0]
    return prices["on_demand_hourly"][instance_type] * (1 - prices["spot_discount"].get(family, 0))


def memory_fit(workload: Workload, instance: GpuInstanceType, instances: int) -> tuple[bool, Optional[str], float, int]:
    """(fits, sharding, GiB per GPU at micro-batch 1, largest micro-batch per GPU that fits)."""
    gpus = instance.gpu_count * instances
    usable = instance.gpu_memory_gib * USABLE_MEMORY_FRACTION
    state = workload.state_gib()
    sharding = None
    if state + workload.activation_gib_per_item > usable and gpus > 1:
        sharding = f"ZeRO-3/FSDP over {gpus} GPUs"
        state = state / gpus
    per_gpu = state + workload.activation_gib_per_item
    if per_gpu > usable:
        return False, sharding, per_gpu, 0
    wanted = max(1, math.ceil(workload.global_batch_items / gpus))
    micro_batch = min(wanted, int((usable - state) // workload.activation_gib_per_item))
    return True, sharding, per_gpu, micro_batch


def _scaling(per_instance_gpus: int, instances: int, reference_gpus: int) -> float:
    factor = INTRA_NODE_SCALING if per_instance_gpus > reference_gpus else 1.0
    return factor * (INTER_NODE_SCALING if instances > 1 else 1.0)


def _calibration(workload: Workload) -> tuple[float, str, int]:
    """(utilization, calibrating GPU, its GPU count) for estimates of a workload: the utilization its published
    number reached (the run with the fewest GPUs, then the fastest GPU), else DEFAULT_UTILIZATION."""
    rows = [row for gpu in GPU_SPECS for row in published(gpu, workload.name)]
    if not rows:
        return DEFAULT_UTILIZATION, REFERENCE_GPU, 1
    row = min(rows, key=lambda r: (r.gpus, -GPU_SPECS[r.gpu_model].dense_tensor_tflops))
    achieved = row.samples_per_second_per_gpu * workload.flops_per_sample
    return achieved / (GPU_SPECS[row.gpu_model].dense_tensor_tflops * 1e12), row.gpu_model, row.gpus


def shape_throughput(workload: Workload, instance: GpuInstanceType, instances: int,
                     measured: Sequence[MeasuredThroughput] = ()) -> tuple[float, str, str]:
    """(samples per second of the whole shape, source, how it was derived)."""
    gpus = instance.gpu_count * instances
    mine = [m for m in measured if m.gpu_model == instance.gpu_model and m.workload == workload.name]
    if mine:
        row = max(mine, key=lambda m: (m.gpus <= instance.gpu_count, m.gpus, m.measured_at))
        factor = _scaling(instance.gpu_count, instances, row.gpus)
        return (row.samples_per_second_per_gpu * gpus * factor, "measured",
                f"{row.samples_per_second_per_gpu:,.1f}/s per GPU on {row.instance_type} ({row.gpus} GPU, "
                f"{row.measured_at}) x {gpus} GPUs x {factor:.3g}")
    rows = published(instance.gpu_model, workload.name)
    if rows:
        fitting = [r for r in rows if r.gpus <= instance.gpu_count]
        row = fitting[-1] if fitting else rows[0]
        factor = _scaling(instance.gpu_count, instances, row.gpus)
        return (row.samples_per_second_per_gpu * gpus * factor, "published",
                f"{row.samples_per_second_per_gpu:,.1f}/s per GPU ({row.measured_on}, {row.gpus} GPU) x {gpus} GPUs "
                f"x {factor:.3g}; {row.source}")
    spec = GPU_SPECS[instance.gpu_model]
    utilization, reference, reference_gpus = _calibration(workload)
    ref = GPU_SPECS[reference]
    bandwidth = min(1.0, (spec.memory_bandwidth_gbps / spec.dense_tensor_tflops)
                    / (ref.memory_bandwidth_gbps / ref.dense_tensor_tflops))
    per_gpu = spec.dense_tensor_tflops * 1e12 * utilization * bandwidth / workload.flops_per_sample
    factor = _scaling(instance.gpu_count, instances, reference_gpus)
    return (per_gpu * gpus * factor, "estimated",
            f"{spec.dense_tensor_tflops:g} TFLOPS x {utilization:.1%} utilization (calibrated on {reference}) x "
            f"{bandwidth:.2f} bandwidth factor / {workload.flops_per_sample:.3g} FLOPs = {per_gpu:,.1f}/s per GPU "
            f"x {gpus} GPUs x {factor:.3g}")


def _option(workload: Workload, instance: GpuInstanceType, instances: int, prices: dict,
            assumptions: CostAssumptions, measured: Sequence[MeasuredThroughput]) -> Option:
    fits, sharding, per_gpu_gib, micro_batch = memory_fit(workload, instance, instances)
    rate, source, note = shape_throughput(workload, instance, instances, measured)
    if workload.cpu_samples_per_vcpu:
        cpu_cap = instance.vcpus * instances * workload.cpu_samples_per_vcpu
        if cpu_cap < rate:
            note += (f"; capped at {cpu_cap:,.0f}/s by the CPU input pipeline ({instance.vcpus * instances} vCPUs x "
                     f"{workload.cpu_samples_per_vcpu:g}/s)")
            rate = cpu_cap
    startup = assumptions.startup_minutes / 60
    load = (workload.dataset_gib * 1024 / assumptions.s3_copy_mibps / 3600
            if assumptions.dataset_source == "s3" else 0.0)
    volume_hourly = (workload.dataset_gib * prices["ebs_gp3_gb_month"] / HOURS_PER_MONTH
                     if assumptions.dataset_source == "snapshot" else 0.0)
    training = workload.samples / rate / 3600
    hours = startup + load + training
    on_demand = prices["on_demand_hourly"][instance.name]
    usd_on_demand = hours * instances * (on_demand + volume_hourly)
    if instances == 1:
        interruptions = hours * assumptions.spot_interruptions_per_instance_hour * instances
        rework = assumptions.checkpoint_interval_minutes / 60 / 2 + startup + load
        hours_spot = hours + interruptions * rework
        usd_spot = hours_spot * instances * (_spot_price(prices, instance.name) + volume_hourly)
    else:
        interruptions = hours_spot = usd_spot = None
    spot_cheaper = usd_spot is not None and usd_spot < usd_on_demand
    return Option(
        instance_type=instance.name, instances=instances, gpus_per_instance=instance.gpu_count,
        gpu_model=instance.gpu_model, gpu_memory_gib=instance.gpu_memory_gib, efa=instance.efa, fits=fits,
        sharding=sharding, memory_per_gpu_gib=per_gpu_gib, micro_batch_per_gpu=micro_batch, samples_per_second=rate,
        throughput_source=source, throughput_note=note, startup_hours=startup, dataset_load_hours=load,
        training_hours=training, hours=hours, hours_spot=hours_spot, expected_interruptions=interruptions,
        usd_spot=usd_spot, usd_on_demand=usd_on_demand, lifecycle="spot" if spot_cheaper else "on-demand",
        usd=usd_spot if spot_cheaper else usd_on_demand,
        meets_deadline=workload.deadline_hours is None
        or (hours_spot if spot_cheaper else hours) <= workload.deadline_hours)


def shapes(catalog: dict[str, GpuInstanceType], max_instances: int) -> Iterable[tuple[GpuInstanceType, int]]:
    """Every type once; EFA types also at 2, 4, 8 ... instances up to max_instances."""
    for instance in catalog.values():
        yield instance, 1
        count = 2
        while instance.efa and count <= max_instances:
            yield instance, count
            count *= 2


def advise(workload: Workload, *, prices: Optional[dict] = None, assumptions: CostAssumptions = CostAssumptions(),
           measured: Sequence[MeasuredThroughput] = (), max_instances: int = MAX_INSTANCES,
           catalog: Optional[dict[str, GpuInstanceType]] = None, region: str = "us-east-1") -> Advice:
    """Every shape ranked by cost per job (eligible first), each excluded one with its reason, and the cheapest
    eligible shape as the recommendation (None when nothing is eligible). `catalog` narrows the shapes to a
    subset of GPU_CATALOG (default: all of it); `prices` defaults to the shipped table's `region` entry."""
    if prices is None:
        from .runtime.budget_guard import load_prices
        prices = load_prices(region)
    catalog = GPU_CATALOG if catalog is None else catalog
    options = [_option(workload, instance, count, prices, assumptions, measured)
               for instance, count in shapes(catalog, max_instances) if instance.name in prices["on_demand_hourly"]]
    single_ok = {o.instance_type for o in options if o.instances == 1 and o.fits and o.meets_deadline}
    for option in options:
        instance = catalog[option.instance_type]
        if not instance.dlami:
            option.rule, option.excluded = "software", (
                f"the platform's Deep Learning AMI no longer supports the {instance.gpu_model} "
                f"(see gpu_catalog): it needs an AMI of your own")
        elif not option.fits:
            usable = instance.gpu_memory_gib * USABLE_MEMORY_FRACTION
            how = f" even with {option.sharding}" if option.sharding else " (one GPU: no sharding possible)"
            option.rule, option.excluded = "memory", (
                f"needs {option.memory_per_gpu_gib:.1f} GiB per GPU{how}; {usable:.1f} GiB usable of "
                f"{instance.gpu_memory_gib} GiB")
        elif option.instances > 1 and option.instance_type in single_ok:
            option.rule, option.excluded = "scale-out", (
                "one instance of this type already fits and meets the deadline; more instances cost more per job "
                f"(x{INTER_NODE_SCALING} scaling) and run On-Demand")
        elif not option.meets_deadline:
            expected = option.hours_spot if option.lifecycle == "spot" else option.hours
            option.rule, option.excluded = "deadline", (
                f"{expected:,.1f} h expected, deadline {workload.deadline_hours:g} h")
    options.sort(key=lambda o: (o.excluded is not None, o.usd, o.hours))
    recommended = next((o for o in options if o.excluded is None), None)
    return Advice(workload=workload, assumptions=assumptions, options=options, recommended=recommended, prices=prices)


def with_overrides(workload: Workload, **overrides) -> Workload:
    """A preset with some fields replaced (deadline_hours, dataset_gib, samples, ...)."""
    return replace(workload, **{k: v for k, v in overrides.items() if v is not None})


# --- ready-to-paste config ------------------------------------------------------------------------------------

def compatible_types(advice: Advice, limit: int = 10) -> list[str]:
    """The recommended single-instance type first, then eligible types of the same GPU count and architecture,
    cheapest per job first, within the fleet/queue limit of 2x GPU memory: of the memory windows [m, 2m] that hold
    the recommended type, the one with the most types (Spot finds capacity among several types)."""
    from .gpu_alarms import MAX_GPU_MEMORY_RATIO
    best = advice.recommended
    if best is None:
        return []
    anchor = GPU_CATALOG[best.instance_type]
    candidates = [GPU_CATALOG[o.instance_type] for o in advice.options
                  if o.instances == 1 and o.fits and o.meets_deadline and o.rule in (None, "scale-out")
                  and GPU_CATALOG[o.instance_type].dlami and o.instance_type != anchor.name
                  and GPU_CATALOG[o.instance_type].gpu_count == anchor.gpu_count
                  and GPU_CATALOG[o.instance_type].architecture == anchor.architecture]
    windows = []
    for low in sorted({c.gpu_memory_gib for c in candidates} | {anchor.gpu_memory_gib}):
        high = low * MAX_GPU_MEMORY_RATIO
        if low <= anchor.gpu_memory_gib <= high:
            windows.append([c for c in candidates if low <= c.gpu_memory_gib <= high])
    chosen = max(windows, key=len)  # the first (lowest) window wins a tie; candidates keep their cost order
    return [anchor.name, *(c.name for c in chosen[:limit - 1])]


def _cost_comment(advice: Advice, types: list[str]) -> str:
    usd = {o.instance_type: o.usd for o in advice.options if o.instances == 1}
    return "# USD per job, one instance: " + ", ".join(f"{t} {usd[t]:,.2f}" for t in types)


def _enough_types(types: list[str]) -> None:
    from .gpu_alarms import MIN_INSTANCE_TYPES
    if len(types) < MIN_INSTANCE_TYPES:
        raise ValueError(f"only {len(types)} eligible types of this GPU shape ({', '.join(types)}); fleets and queues "
                         f"need {MIN_INSTANCE_TYPES} for Spot to find capacity: relax the deadline, or add types of the "
                         "same GPU count by hand where the job fits them")


def fleet_block(advice: Advice, env: str, name: str = "training", max_capacity: int = 1) -> str:
    """A [[environments.ENV.fleets]] table (stacks/config.py's schema) for the recommended single-instance shape."""
    types = compatible_types(advice)
    if not types or advice.recommended.instances != 1:
        raise ValueError("a fleet runs one instance per job: the recommendation is multi-node, use a queue block")
    _enough_types(types)
    lines = [_cost_comment(advice, types), f"[[environments.{env}.fleets]]", f'name = "{name}"',
             "instance_types = [" + ", ".join(f'"{t}"' for t in types) + "]",
             f"max_capacity = {max_capacity}", "scale_to_zero_after_minutes = 30"]
    if advice.assumptions.dataset_source == "snapshot":
        lines.append(f"# dataset_volumes = [{{name = \"DATASET\", version = \"VERSION\", size_gib = "
                     f"{max(1, math.ceil(advice.workload.dataset_gib * 1.1))}}}]  # after ./platform dataset build")
    return "\n".join(lines)


# The AWS Deep Learning Container for PyTorch training (GPU) a suggested queue starts with; its account holds the
# image in every commercial Region: https://docs.aws.amazon.com/deep-learning-containers/latest/devguide/deep-learning-containers-images.html
DLC_PYTORCH_TRAINING = "763104351884.dkr.ecr.{region}.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"


def queue_block(advice: Advice, env: str, name: str = "training", parallel_jobs: int = 1, job_attempts: int = 3,
                region: str = "us-east-1") -> str:
    """A [[environments.ENV.queues]] table (the TrainingQueue schema): Spot types for single-instance jobs and,
    where the recommendation is multi-node, its EFA type On-Demand for multi-node jobs."""
    best = advice.recommended
    if best is None:
        raise ValueError("nothing is eligible: no queue to suggest")
    multi = best.instances > 1
    if multi:
        spot = [o for o in advice.options if o.instances == 1 and o.excluded is None]
        types = compatible_types(replace(advice, recommended=spot[0])) if spot else []
        if len(types) < 4:
            # A TrainingQueue always has its Spot environment: the multi-node types join an existing queue.
            raise ValueError(
                f"no single-instance shape has 4 Spot types for a new queue; add multi_node_instance_types = "
                f'["{best.instance_type}"] and multi_node_max_vcpus = '
                f"{GPU_CATALOG[best.instance_type].vcpus * best.instances * parallel_jobs} to an existing queue")
    else:
        types = compatible_types(advice)
        if GPU_CATALOG[types[0]].architecture != "x86_64":
            raise ValueError(f"{types[0]} is arm64 and a queue's ECS GPU image is x86_64: use a fleet block, or "
                             "advise again without arm64 types")
        _enough_types(types)
    vcpus = max([GPU_CATALOG[t].vcpus for t in types] or [0]) * parallel_jobs
    timeout = max(1, math.ceil((best.hours_spot or best.hours) * 1.5))
    lines = [_cost_comment(advice, types),
             f"[[environments.{env}.queues]]", f'name = "{name}"',
             "instance_types = [" + ", ".join(f'"{t}"' for t in types) + "]",
             f'image = "{DLC_PYTORCH_TRAINING.format(region=region)}"',
             f"max_vcpus = {vcpus}", "on_demand_max_vcpus = 0"]
    if multi:
        lines += [f'multi_node_instance_types = ["{best.instance_type}"]',
                  f"multi_node_max_vcpus = {GPU_CATALOG[best.instance_type].vcpus * best.instances * parallel_jobs}"]
    else:
        lines += ["multi_node_instance_types = []", "multi_node_max_vcpus = 0"]
    lines += [f"job_attempts = {job_attempts}", f"job_timeout_hours = {timeout}"]
    return "\n".join(lines)


__all__ = ["Advice", "CostAssumptions", "MeasuredThroughput", "Option", "PRESETS", "Workload", "advise",
           "fleet_block", "queue_block", "memory_fit", "shape_throughput"]
