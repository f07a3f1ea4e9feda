"""Which GPU shape should a training job run on, and what will the whole job cost and take?

$/hour is not $/job: a GPU twice the price that trains three times as fast is the cheaper one. The advisor
ranks every catalog shape (instance type x instance count, several instances only where the type has EFA)
by what the job pays end to end: the instance's boot and the software's start, loading the dataset, training at
the shape's throughput, and on Spot the wait for capacity and the work redone after interruptions since the last
checkpoint, each at the interruption band of that type in that Region. Every hour is priced by the one price
(``ml_platform_job.prices.hourly_usd``: On-Demand from the table, Spot at the table's conservative per-family
discount), as the budget guard, ``./platform cost`` and job cost price it; the Spot Instance Advisor's 30-day average
saving of the type is shown beside it (``advisor_savings``), never used as the price.

Throughput comes from, in order: your own measurements (examples/gpu_benchmark.py), published numbers
(throughput.PUBLISHED, each with its source), or an estimate from the nearest GPU with a number, scaled by the
two GPUs' sustained speeds (throughput.RELATIVE_SPEED), labelled `estimated`.

The decision tree, applied to every shape in this order (the first rule that fails excludes it, and says why):

1. runs: the platform can run it for the target (a fleet or a queue: NVIDIA GPUs on x86_64 with the platform's
   driver; arm64 T4G only with AWS's ARM64 Deep Learning AMI; Trainium only for a model built with the Neuron
   SDK, outside the platform's fleets and queues), and the Region offers it;
2. memory: model state, one micro-batch of activations and the loss's logits fit each GPU's memory as CUDA
   offers it (the driver's total less the runtime's reserve); a model whose state fits no single GPU is sharded
   (ZeRO-3/FSDP) over every GPU of the shape, and never placed on a single-GPU shape;
3. scale-out: several instances only for EFA types on a queue, and only when one instance of the type cannot
   fit the model or meet the deadline (scaling below 100% makes more instances cost more per job);
4. deadline: the expected hours (on Spot with its waits and rework) within the deadline;
5. the rest ranks by cost per job (or by time with minimize="time"); the first is recommended.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Optional, Sequence

from .gpu_catalog import (ACCELERATOR_CATALOG, GPU_CATALOG, GPU_SPECS, LNC_SETTINGS, MAX_GPU_MEMORY_RATIO,
                          MIN_INSTANCE_TYPES, TRN2_DEFAULT_LNC, GpuInstanceType, boot_seconds, method_refused,
                          neuron_path)
from .throughput import RELATIVE_SPEED, published
from ml_platform_job.prices import hourly_usd, price_source

GIB = 1024 ** 3
HOURS_PER_MONTH = 730
# 4: one price (spot_savings is the table's conservative discount, advisor_savings the Spot Instance Advisor's 30-day
# average, shown only); per option the step's terms (step_compute_seconds, step_communication_seconds, step_gb,
# network_gbps, scaling_efficiency); assumptions' network_efficiency and prices line.
# 3: throughput sources "derived" and "unmeasured", compile_hours; no inter_node_scaling
SCHEMA_VERSION = 4

# Model state per parameter in bytes. Adam with mixed precision: 2 (half weights) + 2 (half gradients)
# + 4 (FP32 master weights) + 8 (two FP32 moments) = 16 (ZeRO paper, https://arxiv.org/abs/1910.02054, sec. 3.1).
# SGD with momentum: 2 + 2 + 4 + 4 = 12. Frozen weights (LoRA's base model) in BF16/FP16: 2; in QLoRA's 4-bit
# NormalFloat with double quantization: 4.127 bits (Dettmers et al., https://arxiv.org/abs/2305.14314, sec. 3).
STATE_BYTES_PER_PARAMETER = {"adam": 16, "sgd": 12}
FROZEN_BYTES_PER_PARAMETER = 2
QLORA_FROZEN_BYTES_PER_PARAMETER = 4.127 / 8
# LLM.int8(): int8 weights, 1 byte per parameter (the row-wise scales are negligible; Dettmers et al.,
# https://arxiv.org/abs/2208.07339).
INT8_FROZEN_BYTES_PER_PARAMETER = 1
# A 4-bit or 8-bit base is dequantized to the compute dtype (BF16) before every matmul, forward and backward
# (bitsandbytes' bnb_4bit_compute_dtype: https://huggingface.co/docs/bitsandbytes/main/en/reference/nn/linear4bit).
# No published measurement gives the cost for these presets: the advisor assumes 30% less throughput for NF4
# (QLoRA) and, separately, 50% less for LLM.int8(), whose mixed-precision decomposition (outlier columns in 16-bit,
# the rest in int8) makes it the slower of the two (https://arxiv.org/abs/2208.07339 sec. 3.2), until a measurement
# of your own replaces them (--measured); the recommendation line says so.
QUANTIZED_BASE_SPEED = 0.7
INT8_BASE_SPEED = 0.5
# What CUDA keeps of a GPU's memory before the model gets any: its context, cuBLAS/cuDNN workspaces and NCCL's
# buffers (about 1 GiB with PyTorch), then the caching allocator's fragmentation (5% of the rest).
RUNTIME_RESERVE_MIB = 1024
USABLE_MEMORY_FRACTION = 0.95
LOGIT_BYTES = 8  # per logit: FP32 logits for the loss and their FP32 gradient (a fused loss kernel avoids both)
ZERO3_GATHERED_LAYERS = 2  # ZeRO-3/FSDP gathers the current layer's full weights and prefetches the next
INTRA_NODE_SCALING = 0.9  # per-GPU throughput kept when a shape has more GPUs per instance than the reference
# Across instances, communication per optimizer step (bytes each instance moves over its network, per the ZeRO
# paper's volumes, https://arxiv.org/abs/1910.02054 sec. 7: data parallel all-reduces the gradients, 2x their bytes;
# ZeRO-3 moves 3x the model's 16-bit weights: gathered forward and backward, gradients reduce-scattered) over the
# instance's network bandwidth (gpu_catalog.NETWORK_GBPS, EFA where the type has it) x NETWORK_EFFICIENCY. Overlap
# rule: the step takes max(compute, communication) (ZeRO-3/FSDP prefetch the next layer's weights and DDP all-reduces
# gradient buckets during the backward pass), the best case of overlap: the step takes at least its communication
# time, and a step with more communication than compute is network-bound. ZeRO-3/FSDP gathers and
# reduce-scatters on every micro-batch's forward and backward, so with gradient accumulation (a worker's share of
# the global batch over its micro-batch) its bytes repeat per micro-batch; DDP all-reduces once per step (no_sync).
# Gradient bytes: DDP under torch.autocast keeps FP32 parameters, so it all-reduces FP32 gradients, 4 bytes
# (https://pytorch.org/docs/stable/amp.html: autocast changes the ops' dtype, not the parameters'); ZeRO-3 is counted
# with FSDP MixedPrecision(param_dtype=bfloat16, reduce_dtype=bfloat16): 16-bit gathers and reduce-scatters
# (https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.MixedPrecision).
DDP_GRADIENT_BYTES = 4  # FP32 gradients (AMP), all-reduced by DDP
# The share of an instance's rated bandwidth NCCL's collectives get across instances: assumed 0.6 for every type, no
# AWS page giving an achieved share. Published nccl-tests runs over EFA sit about there at several nodes:
# p3dn.24xlarge's 100 Gbps EFA gave 80 Gbps on 2 nodes and 50-60 Gbps on 8 to 32 (https://github.com/NVIDIA/nccl/
# issues/235), p4d's 400 Gbps a 29.6 GB/s (237 Gbps) all-reduce bus bandwidth on 4 nodes
# (https://github.com/NVIDIA/nccl/issues/527). A measured run across instances (--measured, a record of more GPUs
# than one instance holds) already holds its communication and replaces the term.
NETWORK_EFFICIENCY = 0.6
# What a TrainingQueue's multi-node job gets of an instance's network: the queue gives each node one interface (one
# EFA on network card 0 with multi_node_efa, else its primary ENA interface), and the types rated above 100 Gbps
# spread that over several network cards of about 100 Gbps each (p4d 4, p5 32, trn1 8): their full rate needs one
# EFA per card (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html). So for --block queue
# the advisor assumes at most one card's 100 Gbps, whatever the type's rating.
QUEUE_NETWORK_GBPS = 100.0
SHARDED_GRADIENT_BYTES = 2  # BF16 reduce_dtype (FSDP MixedPrecision)
ZERO3_VOLUME = 3  # weights gathered twice, gradients reduce-scattered once
ALL_REDUCE_VOLUME = 2
DEFAULT_UTILIZATION = 0.35  # share of the reference GPU's dense TFLOPS where no number exists for a workload
REFERENCE_GPU = "NVIDIA A100 80GB"
MAX_INSTANCES = 8
SOFTWARE_STARTUP_MINUTES = 4  # after boot: container image pull, CUDA and NCCL initialisation, data loader start
# Trainium compiles its training graphs before training at speed, by the chip's SDK path (gpu_catalog.NEURON_PATHS):
# on Trn1's legacy PyTorch/XLA path neuron_parallel_compile pre-compiles them ("for large models, the compilation
# time for each graph can be high": https://awsdocs-neuron.readthedocs-hosted.com/en/latest/frameworks/torch/
# torch-neuronx/api-reference-guide/training/pytorch-neuron-parallel-compile.html); on Trn2's TorchNeuron
# torch.compile(backend="neuron") compiles on the first steps
# (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/about-pytorch-neuron.html); a cache keeps them for
# later runs. No Neuron page gives a duration: assumed 60 minutes on a job's first run on either path, 0 once cached.
NEURON_COMPILE_MINUTES = 60
TRADE_OFF_COST_RATIO = 1.5  # --minimize time: "much more" money ...
TRADE_OFF_TIME_SHARE = 0.1  # ... for "little" time saved, as a share of the cheaper choice's hours
MAX_JOB_HOURS = 8760  # a job the best shape needs more than a year for gets no config block: shrink it
# A job whose CPU input pipeline holds the recommended shape this many times below its accelerators' rate is
# CPU-bound: the GPU's price buys nothing, and the ranking is of vCPUs. Refused rather than ranked.
CPU_BOUND_RATIO = 10

# Spot. The Spot Instance Advisor gives per type and Region the savings over On-Demand and the "frequency of
# interruption": the share of capacity Spot reclaimed during the trailing month, in bands. Read as the chance an
# instance is reclaimed over an assumed average Spot instance life of SPOT_LIFE_HOURS (AWS publishes no hourly
# rate); the open band >20% is taken as 50%. Waiting for Spot capacity at each (re)start, by band: assumed.
SPOT_LIFE_HOURS = 24
INTERRUPTION_BANDS = (("<5%", 0.05, 5), ("5-10%", 0.10, 5), ("10-15%", 0.15, 10), ("15-20%", 0.20, 15),
                      (">20%", 0.50, 30))  # label, share reclaimed, capacity wait in minutes per start
UNKNOWN_BAND = len(INTERRUPTION_BANDS) - 1  # a type the Advisor does not list: the worst band
MAX_SPOT_SAVINGS = 0.99

TARGETS = ("fleet", "queue", "none")
# Workloads the advisor has no memory or speed model for: refused in one line, never forced through another path.
NOT_MODELLED = {
    "tabular": "tabular/GBDT (XGBoost, LightGBM, CatBoost): trees train on CPUs (and GPU histograms), which no "
               "FLOP or memory model here describes; use a CPU instance or benchmark",
    "diffusion": "diffusion models: no cited training measurement for one (their activations and speed are not "
                 "ResNet-50's); benchmark first (examples/gpu_benchmark.py style, then --measured)",
}
RULES = ("runs", "memory", "scale-out", "deadline")


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
    workload_class: str = "transformer"  # "convnet" or "transformer": which relative speeds apply
    sequence: Optional[int] = None  # tokens per sequence (language models)
    vocab: Optional[int] = None  # output vocabulary: the loss's logits per token
    layers: Optional[int] = None  # transformer layers: the weights ZeRO-3 gathers at a time
    neuron: bool = False  # known to train on AWS Trainium with the Neuron SDK
    qlora: bool = False  # LoRA over a 4-bit base model
    int8: bool = False  # LoRA over an 8-bit (LLM.int8()) base model
    fp8: bool = False  # FP8 mixed precision (Transformer Engine, Neuron cFP8): eligibility only, speed as BF16
    logical_nc: int = TRN2_DEFAULT_LNC  # Trainium2's Logical NeuronCore Configuration (1 or 2)
    gpu_decode: bool = False  # images decoded and augmented on the GPU (NVIDIA DALI): no CPU cap

    @property
    def lora(self) -> bool:
        return self.trainable_parameters < self.parameters

    def frozen_bytes(self) -> float:
        if self.qlora:
            return QLORA_FROZEN_BYTES_PER_PARAMETER
        return INT8_FROZEN_BYTES_PER_PARAMETER if self.int8 else FROZEN_BYTES_PER_PARAMETER

    def methods(self) -> tuple[str, ...]:
        """The methods (gpu_catalog.METHODS) this job needs its accelerator to run."""
        return tuple(name for name in ("qlora", "int8", "fp8") if getattr(self, name))

    @property
    def quantized_base(self) -> Optional[str]:
        return "QLoRA" if self.qlora else "LLM.int8()" if self.int8 else None

    @property
    def quantized_speed(self) -> float:
        """The assumed throughput share of a quantized base (1 without one)."""
        return QUANTIZED_BASE_SPEED if self.qlora else INT8_BASE_SPEED if self.int8 else 1.0

    def samples_per_step(self) -> float:
        """Samples (the throughput's unit) in one optimizer step: the global batch, in tokens for a language model."""
        return self.global_batch_items * (self.sequence if self.sample_unit == "tokens" else 1)

    def step_bytes(self, instances: int, sharded: bool, micro_batches: int = 1) -> float:
        """Bytes each instance sends over its network per optimizer step (ring collectives: x (n - 1) / n).
        ``micro_batches``: micro-batches per optimizer step (gradient accumulation); ZeRO-3's gathers and
        reduce-scatters repeat on each, DDP's all-reduce does not."""
        if instances < 2:
            return 0.0
        ring = (instances - 1) / instances
        if not sharded:
            return ALL_REDUCE_VOLUME * self.trainable_parameters * DDP_GRADIENT_BYTES * ring
        gradients = ALL_REDUCE_VOLUME * self.trainable_parameters * SHARDED_GRADIENT_BYTES
        if self.lora:  # the frozen base is gathered forward and backward; only the adapters have gradients
            return (2 * self.parameters * self.frozen_bytes() + gradients) * ring * micro_batches
        return ZERO3_VOLUME * self.parameters * FROZEN_BYTES_PER_PARAMETER * ring * micro_batches

    def state_gib(self) -> float:
        """Weights, gradients and optimizer states of the whole model, unsharded."""
        trainable = self.trainable_parameters * STATE_BYTES_PER_PARAMETER[self.optimizer]
        frozen = max(0.0, self.parameters - self.trainable_parameters) * self.frozen_bytes()
        return (trainable + frozen) / GIB

    def logits_gib_per_item(self) -> float:
        """The loss's logits and their gradient for one sequence: sequence x vocabulary x 8 bytes."""
        return (self.sequence or 0) * (self.vocab or 0) * LOGIT_BYTES / GIB

    def item_gib(self) -> float:
        """Memory one micro-batch item needs: its activations and its logits."""
        return self.activation_gib_per_item + self.logits_gib_per_item()

    def gathered_gib(self) -> float:
        """Under ZeRO-3/FSDP, the full weights of the layers being computed (two), on every GPU."""
        if not self.layers:
            return 0.0
        weight_bytes = FROZEN_BYTES_PER_PARAMETER if not self.lora else self.frozen_bytes()
        return ZERO3_GATHERED_LAYERS * self.parameters / self.layers * weight_bytes / GIB


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


NEURON_TUTORIALS = ("Trn1: the legacy PyTorch/XLA tutorials, Neuron SDK 2.29 or earlier "
                    "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/frameworks/torch/torch-neuronx/tutorials/"
                    "training/bert.html: BERT-large; https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/"
                    "neuronx-distributed/tutorials/training_tutorials.html: Llama 2 7B, Llama 3 8B LoRA, Llama 70B); "
                    "Trn2: TorchNeuron, the model as standard PyTorch on device \"neuron\" "
                    "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/index.html)")


def _llm(name: str, description: str, parameters: float, hidden: int, kv_hidden: int, ffn: int, layers: int,
         lora_rank: Optional[int], tokens: float, vocab: int, sequence: int = 4096) -> Workload:
    trainable = lora_parameters(lora_rank, hidden, kv_hidden, ffn, layers) if lora_rank else parameters
    # FLOPs per token: forward 2N, backward 4N for full training (2N for LoRA: frozen weights get no gradient),
    # plus 2N for the forward recomputed under activation checkpointing (the memory model assumes it).
    flops = (8 if lora_rank is None else 6) * parameters
    return Workload(
        name=name, description=description, parameters=parameters, trainable_parameters=trainable,
        optimizer="adam", sample_unit="tokens", samples=tokens, flops_per_sample=flops,
        activation_gib_per_item=transformer_activation_gib(sequence, hidden, layers),
        global_batch_items=128, dataset_gib=1, sequence=sequence, vocab=vocab, layers=layers, neuron=True,
        notes=(f"sequence length {sequence}, vocabulary {vocab:,}, global batch 128 sequences, BF16 mixed precision, "
               "AdamW, activation checkpointing" + (f", LoRA rank {lora_rank} on every linear layer" if lora_rank else ""),
               f"trains on AWS Trainium with the Neuron SDK ({NEURON_TUTORIALS})"))


PRESETS: dict[str, Workload] = {workload.name: workload for workload in (
    Workload(
        name="resnet50-imagenet", description="ResNet-50 v1.5, 90 epochs of ImageNet-1k at 224x224, mixed precision",
        parameters=25.6e6, trainable_parameters=25.6e6, optimizer="sgd", sample_unit="images",
        samples=90 * 1_281_167,
        # 4.1 GMACs (8.2 GFLOPs) forward per 224x224 image; backward about twice the forward.
        flops_per_sample=3 * 8.2e9,
        # NVIDIA trains it at 256 images per 16 GB V100 with AMP; 40 MiB an image keeps that within memory.
        activation_gib_per_item=0.04, global_batch_items=256 * 8, dataset_gib=150,
        cpu_samples_per_vcpu=100, workload_class="convnet",
        notes=("SGD with momentum, batch 256 per GPU as NVIDIA's recipe; ImageNet-1k train set 1,281,167 images, "
               "about 150 GiB; JPEG decoding and augmentation on the CPU at an assumed 100 images/s per vCPU "
               "(--gpu-decode: on the GPU with NVIDIA DALI, as NVIDIA's published numbers are)",)),
    Workload(
        name="bert-large-finetune", description="BERT-large fine-tuning on SQuAD v1.1, 2 epochs at sequence length 384",
        parameters=340e6, trainable_parameters=340e6, optimizer="adam", sample_unit="sequences",
        samples=2 * 88_641,  # SQuAD v1.1 training features at length 384, stride 128
        flops_per_sample=6 * 340e6 * 384,
        # no checkpointing: 34*s*h + 5*a*s^2 bytes per layer (Korthikanti et al.), s=384, h=1024, a=16, 24 layers
        activation_gib_per_item=(34 * 384 * 1024 + 5 * 16 * 384 * 384) * 24 / GIB,
        global_batch_items=256, dataset_gib=0.1, sequence=384, layers=24, neuron=True,
        notes=("mixed precision, Adam; NVIDIA's recipe uses batch 32 per A100; the span head's logits are two per "
               "token", f"trains on AWS Trainium with the Neuron SDK ({NEURON_TUTORIALS})")),
    _llm("llm-7b-lora", "Llama-2-7B-shaped model, LoRA fine-tuning on 100M tokens", 6.74e9, 4096, 4096, 11008, 32,
         16, 100e6, 32_000),
    _llm("llm-7b-full", "Llama-2-7B-shaped model, full fine-tuning on 100M tokens", 6.74e9, 4096, 4096, 11008, 32,
         None, 100e6, 32_000),
    _llm("llm-70b-lora", "Llama-3-70B-shaped model, LoRA fine-tuning on 100M tokens", 70.6e9, 8192, 1024, 28672, 80,
         16, 100e6, 128_256),
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

    startup_minutes: float = SOFTWARE_STARTUP_MINUTES  # per start, after the instance's boot (by family); billed
    dataset_source: str = "s3"  # "s3": copied to each instance at every start; "snapshot": a dataset volume
    s3_copy_mibps: float = 400  # per instance, for a copy from S3 in the same Region
    checkpoint_interval_minutes: float = 30
    # None: per type and Region from the price table's Spot Instance Advisor data; a number overrides every type
    spot_interruptions_per_instance_hour: Optional[float] = None
    spot_wait_minutes: Optional[float] = None  # None: by the type's interruption band (INTERRUPTION_BANDS)
    value_of_hour: float = 0.0  # USD a waiting hour costs you (people, a deadline): added to each shape's cost
    neuron_compile_minutes: float = NEURON_COMPILE_MINUTES  # Trainium: graph compilation before the first step

    def to_json(self) -> dict:
        return {**asdict(self), "runtime_reserve_mib": RUNTIME_RESERVE_MIB,
                "usable_memory_fraction": USABLE_MEMORY_FRACTION, "intra_node_scaling": INTRA_NODE_SCALING,
                "communication": "max(compute, bytes per step / (network bandwidth x network_efficiency)) per step",
                "network_efficiency": NETWORK_EFFICIENCY,
                "quantized_base_speed": QUANTIZED_BASE_SPEED, "int8_base_speed": INT8_BASE_SPEED,
                "spot_life_hours": SPOT_LIFE_HOURS,
                "interruption_bands": [{"band": label, "share_per_life": share, "wait_minutes": wait}
                                       for label, share, wait in INTERRUPTION_BANDS],
                "default_utilization": DEFAULT_UTILIZATION, "reference_gpu": REFERENCE_GPU}

    def lines(self, prices: dict) -> list[str]:
        source = (f"dataset copied from S3 at {self.s3_copy_mibps:g} MiB/s per instance on every start"
                  if self.dataset_source == "s3" else
                  "dataset on a snapshot volume (lazy-loaded: no copy before training; the gp3 volume billed "
                  f"at {prices['ebs_gp3_gb_month']} USD per GB-month while the job runs)")
        if self.spot_interruptions_per_instance_hour is None:
            interruptions = (f"per type from the Spot Instance Advisor's band ({prices.get('spot_by_type_source', 'price table')}): "
                             f"the monthly share reclaimed read as the chance over a {SPOT_LIFE_HOURS}-hour instance "
                             "life (" + ", ".join(f"{label} as {share:.0%}" for label, share, _ in INTERRUPTION_BANDS)
                             + "); a type the Advisor lacks is taken as >20%")
        else:
            interruptions = f"{self.spot_interruptions_per_instance_hour:g} per instance-hour for every type (given)"
        wait = ("by band: " + ", ".join(f"{label} {minutes} min" for label, _, minutes in INTERRUPTION_BANDS)
                if self.spot_wait_minutes is None else f"{self.spot_wait_minutes:g} minutes (given)")
        return [
            f"prices: {price_source(prices)}; the same price as the budget guard, ./platform cost and job cost "
            "(ml_platform_job.prices.hourly_usd). The Spot Instance Advisor's 30-day average saving per type is shown "
            "beside it, never used as the price (the table's notes found Spot dearer than that average across AZs)",
            f"start-up: the instance's boot by kind (the seed's g4dn 47 s, p3 130 s, p4d 210 s) + {self.startup_minutes:g} "
            f"minutes of software start per start; {source}",
            f"Spot interruptions: {interruptions}; each redoes half a checkpoint interval "
            f"({self.checkpoint_interval_minutes:g} minutes) plus a start and the dataset load",
            f"Spot capacity wait per (re)start, not billed but on the clock: {wait}",
            f"memory: per GPU as the driver reports it, less {RUNTIME_RESERVE_MIB} MiB for CUDA's context, libraries "
            f"and NCCL (the same reserve assumed per NeuronCore), then {USABLE_MEMORY_FRACTION:.0%} of the rest "
            "(allocator fragmentation); sharding (ZeRO-3/FSDP) "
            f"splits the model state over every GPU of the shape and gathers {ZERO3_GATHERED_LAYERS} layers' weights "
            "on each; activations and logits are per GPU",
            f"scaling: per-GPU throughput x {INTRA_NODE_SCALING} with more GPUs per instance than the reference run; "
            "across instances each step takes max(compute, communication): the bytes each instance moves per step "
            f"(ring collectives, x (n - 1) / n: data parallel 2x the FP32 gradients of the trained parameters DDP "
            "all-reduces under AMP, once a step; ZeRO-3 3x the 16-bit weights, FSDP MixedPrecision with BF16 "
            "reduce_dtype, on every micro-batch of the step; LoRA under ZeRO-3: the frozen base gathered twice plus "
            f"the adapters' gradients) over its network bandwidth (EFA where the type has it, gpu_catalog) x "
            f"{NETWORK_EFFICIENCY} (assumed: NCCL over EFA at several nodes), overlapped with compute (the best case); "
            "a reference run across nodes already holds its communication, and an estimate from it inherits that "
            "overhead (said in its how)",
            f"Trainium: trn1 on {neuron_path('AWS Trainium').name}, trn2 on {neuron_path('AWS Trainium2').name}; "
            "memory per NeuronCore (trn1 16 GiB; trn2 by logical-core setting, LNC 2: 24 GiB), tensor "
            f"parallel over the instance's cores where the model needs it; {self.neuron_compile_minutes:g} minutes of "
            "graph compilation on the first run (trn1: neuron_parallel_compile; trn2: torch.compile with the neuron "
            "backend; 0 once cached: --neuron-compile-minutes); unmeasured rows rank after every GPU until "
            "--measured gives a Neuron number",
            f"quantized base: throughput x {QUANTIZED_BASE_SPEED} for QLoRA (NF4) and x {INT8_BASE_SPEED} for "
            "LLM.int8() (slower: its outlier decomposition), for dequantizing before each matmul, assumed until "
            "measured",
            "estimated throughput: the nearest GPU with a measured or published number for the workload, x the "
            "two GPUs' sustained-speed ratio (throughput.RELATIVE_SPEED, docs/THROUGHPUT.md); with no number at "
            f"all, the {REFERENCE_GPU} at {DEFAULT_UTILIZATION:.0%} of its dense TFLOPS",
            "multi-instance shapes run as multi-node jobs on a queue, which AWS Batch runs On-Demand only "
            "(https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html)",
            *([f"value of time: {self.value_of_hour:g} USD per hour of waiting added to every shape's cost"]
              if self.value_of_hour else []),
        ]


@dataclass
class Option:
    instance_type: str
    instances: int
    gpus_per_instance: int
    gpu_model: str
    gpu_memory_gib: int  # nominal, per GPU
    efa: bool
    fits: bool
    sharding: Optional[str]
    memory_per_gpu_gib: float
    micro_batch_per_gpu: int
    samples_per_second: float  # the whole shape
    throughput_source: str
    throughput_note: str
    accelerator_samples_per_second: float  # the accelerators' rate, before the CPU input pipeline's cap
    startup_hours: float  # boot + software start
    dataset_load_hours: float
    training_hours: float
    hours: float  # On-Demand wall clock: start-up + load + training
    hours_spot: Optional[float]  # expected wall clock on Spot: with capacity waits and rework
    expected_interruptions: Optional[float]
    usd_spot: Optional[float]
    usd_on_demand: float
    lifecycle: str  # "spot" or "on-demand", the better for the objective within the deadline
    usd: float  # on that lifecycle (the bill)
    meets_deadline: bool
    on_demand_hourly: float  # per instance
    spot_hourly: Optional[float]  # per instance: the one price (ml_platform_job.prices.hourly_usd)
    spot_savings: Optional[float]  # below On-Demand at that price: the table's conservative discount
    interruption_band: Optional[str]
    interruptions_per_hour: Optional[float]
    spot_wait_hours: Optional[float]  # per start
    usable_memory_gib: float  # per GPU, as CUDA offers it to the model
    accelerator: str
    expected_hours: float  # wall clock on the chosen lifecycle
    cost: float  # usd + the value of the expected hours (= usd without --value-of-hour)
    compile_hours: float = 0.0  # Trainium's graph compilation, within training_hours
    advisor_savings: Optional[float] = None  # the Spot Instance Advisor's 30-day average saving: shown, not the price
    network_gbps: Optional[float] = None  # the type's rated network bandwidth (gpu_catalog.NETWORK_GBPS)
    # multi-instance shapes whose step the advisor bounds by the network (None otherwise): one optimizer step's
    # compute, its communication (the bytes each instance sends / (network_gbps x NETWORK_EFFICIENCY)), those bytes
    step_compute_seconds: Optional[float] = None
    step_communication_seconds: Optional[float] = None
    step_gb: Optional[float] = None
    scaling_efficiency: float = 1.0  # compute / max(compute, communication) per step: 1.0 when the network keeps up
    spot_note: Optional[str] = None  # why Spot loses, where it does
    excluded: Optional[str] = None
    rule: Optional[str] = None  # the decision-tree rule that excluded it
    pareto: bool = False  # on the eligible shapes' cost/time frontier

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
    target: str = "fleet"
    minimize: str = "cost"

    @property
    def region(self) -> str:
        return self.prices.get("region", "")

    def cpu_bound(self) -> Optional[str]:
        """Why the job is CPU-bound (its input pipeline holds the recommended shape CPU_BOUND_RATIO times or more
        below its accelerators' rate: the ranking is then of vCPUs, not GPUs), or None. ./platform advise and tco
        refuse such a job with it."""
        best = self.recommended
        if best is None or best.accelerator_samples_per_second < CPU_BOUND_RATIO * best.samples_per_second:
            return None
        return (f"CPU-bound: on {best.instance_type} x{best.instances} the CPU input pipeline caps the job at "
                f"{best.samples_per_second:,.0f} {self.workload.sample_unit}/s, "
                f"{best.accelerator_samples_per_second / best.samples_per_second:,.0f}x below the accelerators' "
                f"{best.accelerator_samples_per_second:,.0f}/s: the GPU buys nothing; use a CPU instance or "
                "benchmark (--gpu-decode if your input pipeline runs on the GPU)")

    def eligible(self) -> list[Option]:
        return [o for o in self.options if o.excluded is None]

    def pareto(self) -> list[Option]:
        """The eligible shapes no other is both faster and cheaper than, fastest first."""
        return sorted((o for o in self.options if o.pareto), key=lambda o: o.expected_hours)

    def trade_off(self) -> Optional[str]:
        """With minimize="time": what the recommendation pays over a cheaper eligible choice (any shape, Spot or
        On-Demand, within the deadline) and the time it saves, or None where nothing is cheaper. The choice
        compared: the cheapest of those within TRADE_OFF_TIME_SHARE of the recommendation's hours, else the
        cheapest of all. "Much more for little time": at least TRADE_OFF_COST_RATIO x the money for at most
        TRADE_OFF_TIME_SHARE of the cheaper choice's hours."""
        best = self.recommended
        if self.minimize != "time" or best is None:
            return None
        deadline = self.workload.deadline_hours
        choices = [(o.usd_on_demand, o.hours, o, "on-demand") for o in self.eligible()
                   if o.throughput_source != "unmeasured" and (deadline is None or o.hours <= deadline)]
        choices += [(o.usd_spot, o.hours_spot, o, "spot") for o in self.eligible()
                    if o.usd_spot is not None and o.throughput_source != "unmeasured"
                    and (deadline is None or o.hours_spot <= deadline)]
        cheaper = [c for c in choices if c[0] < best.usd]
        if not cheaper:
            return None
        # the cheapest choice nearly as fast (within the time share) if there is one, else the cheapest of all
        close = [c for c in cheaper if c[1] - best.expected_hours <= TRADE_OFF_TIME_SHARE * c[1]]
        usd, hours, cheapest, lifecycle = min(close or cheaper, key=lambda c: (c[0], c[1]))
        saved = hours - best.expected_hours
        much = best.usd >= TRADE_OFF_COST_RATIO * usd and saved <= TRADE_OFF_TIME_SHARE * hours
        # what --minimize cost recommends instead: the cheapest choice of all, which may not be the one compared
        low_usd, _, low, low_lifecycle = min(cheaper, key=lambda c: (c[0], c[1]))
        same = low is cheapest and low_lifecycle == lifecycle
        by_cost = ("that one" if same else
                   f"{low.instance_type} x{low.instances} {low_lifecycle} at {low_usd:,.2f} USD, the cheapest")
        return (f"trade-off{' (much more for little time)' if much else ''}: {best.usd:,.2f} USD against "
                f"{usd:,.2f} on {cheapest.instance_type} x{cheapest.instances} {lifecycle} ({best.usd / usd:.1f}x) to "
                f"finish {saved:,.1f} h sooner ({saved / hours:.0%} of {hours:,.1f} h); --minimize cost recommends "
                f"{by_cost}")

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "region": self.region,
            "target": self.target,
            "minimize": self.minimize,
            "workload": {**asdict(self.workload), "model_state_gib": round(self.workload.state_gib(), 3),
                         "logits_gib_per_item": round(self.workload.logits_gib_per_item(), 3)},
            "assumptions": {**self.assumptions.to_json(), "prices_source": self.prices.get("source"),
                            "prices_retrieved": self.prices.get("retrieved"), "prices": price_source(self.prices)},
            "options": [option.to_json() for option in self.options],
            "recommended": self.recommended.to_json() if self.recommended else None,
            "pareto": [{"instance_type": o.instance_type, "instances": o.instances} for o in self.pareto()],
        }


# --- memory ------------------------------------------------------------------------------------------------------

def usable_gib(instance: GpuInstanceType, logical_nc: int = TRN2_DEFAULT_LNC) -> float:
    """What one worker offers the model (a GPU, or a NeuronCore on Trainium): its memory less the runtime's
    reserve, less fragmentation."""
    return (instance.worker_memory_mib(logical_nc) - RUNTIME_RESERVE_MIB) * USABLE_MEMORY_FRACTION / 1024


def memory_fit(workload: Workload, instance: GpuInstanceType, instances: int) -> tuple[bool, Optional[str], float, int]:
    """(fits, sharding, GiB per worker at micro-batch 1, largest micro-batch per worker that fits). The model is
    sharded when its state and one micro-batch item (activations and logits) do not fit one worker: over every GPU
    with ZeRO-3/FSDP, or on Trainium with tensor parallelism over the fewest NeuronCores of one instance that hold it
    (by the chip's SDK path, gpu_catalog.NEURON_PATHS; each core is otherwise a data-parallel worker)."""
    workers_per_instance = instance.workers(workload.logical_nc)
    gpus = workers_per_instance * instances
    usable = usable_gib(instance, workload.logical_nc)
    state = workload.state_gib()
    item = workload.item_gib()
    sharding = None
    if state + item > usable and instance.accelerator == "neuron":
        degree = 2
        while degree < workers_per_instance and state / degree + item > usable:
            degree *= 2
        degree = min(degree, workers_per_instance)
        sharding = (f"tensor parallel {degree} x data parallel {gpus // degree} over {gpus} NeuronCores "
                    f"({neuron_path(instance.gpu_model).tensor_parallel})")
        state = state / degree
        gpus = gpus // degree  # data-parallel replicas share the global batch
    elif state + item > usable and gpus > 1:
        sharding = f"ZeRO-3/FSDP over {gpus} GPUs"
        state = state / gpus + workload.gathered_gib()
    per_gpu = state + item
    if per_gpu > usable:
        return False, sharding, per_gpu, 0
    wanted = max(1, math.ceil(workload.global_batch_items / gpus))
    micro_batch = min(wanted, int((usable - state) // item)) if item > 0 else wanted
    return True, sharding, per_gpu, micro_batch


# --- throughput --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Anchor:
    gpu_model: str
    gpus: int
    per_gpu: float
    source: str  # "measured", "published" or "derived" (a published run converted to the preset by a rule)
    note: str


def _anchors(workload: Workload, measured: Sequence[MeasuredThroughput]) -> dict[str, list[_Anchor]]:
    """Per GPU model, the numbers a workload has: measured ones if any, else published ones."""
    by_gpu: dict[str, list[_Anchor]] = {}
    for m in sorted((m for m in measured if m.workload == workload.name), key=lambda m: m.measured_at):
        by_gpu.setdefault(m.gpu_model, []).append(_Anchor(
            m.gpu_model, m.gpus, m.samples_per_second_per_gpu, "measured",
            f"{m.samples_per_second_per_gpu:,.1f}/s per GPU on {m.instance_type} ({m.gpus} GPU, {m.measured_at})"))
    for gpu in {row.gpu_model for row in published_rows(workload)} - set(by_gpu):
        by_gpu[gpu] = [_Anchor(row.gpu_model, row.gpus, row.samples_per_second_per_gpu,
                               "derived" if row.rule else "published",
                               f"{row.samples_per_second_per_gpu:,.1f}/s per GPU ({row.measured_on}, {row.gpus} GPU); "
                               f"{row.source}" + (f"; {row.rule}" if row.rule else ""))
                       for row in published(gpu, workload.name)]
    return by_gpu


def published_rows(workload: Workload):
    return [row for gpu in RELATIVE_SPEED for row in published(gpu, workload.name)]


def _pick(rows: list[_Anchor], gpu_count: int) -> _Anchor:
    """The row closest to the shape: the most GPUs not above the instance's, else the fewest (measured: latest)."""
    ranked = list(enumerate(rows))  # in measured order: a later measurement wins a tie
    fitting = [(i, r) for i, r in ranked if r.gpus <= gpu_count]
    if fitting:
        return max(fitting, key=lambda item: (item[1].gpus, item[0]))[1]
    return min(ranked, key=lambda item: (item[1].gpus, -item[0]))[1]


def _scaling(per_instance_gpus: int, reference_gpus: int) -> float:
    return INTRA_NODE_SCALING if per_instance_gpus > reference_gpus else 1.0


def _inherited(row: "_Anchor", instance: GpuInstanceType, instances: int) -> str:
    """Where the reference run spans more GPUs than one instance of its GPU holds, its per-GPU rate carries that
    run's inter-node communication: said, not stripped (no source gives the run's single-node rate).
    ``instances``: the shape's instance count on the run's own GPU (0 for an estimate on another GPU)."""
    per_instance = max(i.gpu_count for i in ACCELERATOR_CATALOG.values() if i.gpu_model == row.gpu_model)
    if row.gpus <= per_instance or instance.gpu_count * instances >= row.gpus:
        return ""
    target = "this GPU's estimate" if instances == 0 else "a shape of fewer GPUs"
    return (f"; inherited: the {row.gpus}-GPU reference run's per-GPU rate holds its inter-node communication "
            f"across {row.gpus // per_instance} instances, which {target} keeps (pessimistic for one instance)")


def _times(gpus: int, factor: float) -> str:
    return (f" x {gpus} GPUs" if gpus > 1 else "") + (f" x {factor:.3g} scaling" if factor != 1 else "")


@dataclass(frozen=True)
class StepTerms:
    """One optimizer step of a multi-instance shape: its compute and what each instance sends over its network."""

    compute_seconds: float
    step_bytes: float  # each instance sends per step
    micro_batches: int  # ZeRO-3's collectives repeat on each
    network_gbps: float  # the bandwidth the shape's collectives cross (the type's rating, or a queue's one card)

    @property
    def communication_seconds(self) -> float:
        """The bytes at the rated bandwidth x NETWORK_EFFICIENCY."""
        return self.step_bytes / (self.network_gbps * 1e9 / 8 * NETWORK_EFFICIENCY)

    @property
    def step_seconds(self) -> float:
        """Compute and communication overlapped (the best case): the step takes the longer."""
        return max(self.compute_seconds, self.communication_seconds)

    @property
    def scaling_efficiency(self) -> float:
        return self.compute_seconds / self.step_seconds


def network_gbps_for(instance: GpuInstanceType, target: str) -> float:
    """The bandwidth a multi-instance job of this type gets on ``target``: the type's rating, or on a TrainingQueue
    (one network interface a node) at most QUEUE_NETWORK_GBPS."""
    return min(instance.network_gbps, QUEUE_NETWORK_GBPS) if target == "queue" else instance.network_gbps


def step_terms(workload: Workload, instance: GpuInstanceType, instances: int,
               compute_rate: float, network_gbps: Optional[float] = None) -> Optional[StepTerms]:
    """The step of a multi-instance shape at ``compute_rate`` samples per second (None for one instance): the bytes
    each instance sends per step (``Workload.step_bytes``, with the sharding ``memory_fit`` picks) over the type's
    network (EFA where it has it)."""
    if instances < 2:
        return None
    _, sharding, _, micro_batch = memory_fit(workload, instance, instances)
    sharded = sharding is not None and instance.accelerator == "cuda"
    # micro-batches per step: a worker's share of the global batch over the micro-batch that fits (ZeRO-3 repeats
    # its collectives on each)
    share = math.ceil(workload.global_batch_items / (instance.workers(workload.logical_nc) * instances))
    micro_batches = math.ceil(share / micro_batch) if sharded and micro_batch else 1
    return StepTerms(workload.samples_per_step() / compute_rate, workload.step_bytes(instances, sharded, micro_batches),
                     micro_batches, instance.network_gbps if network_gbps is None else network_gbps)


def communication(workload: Workload, instance: GpuInstanceType, instances: int, compute_rate: float,
                  reference_gpus: int, network_gbps: Optional[float] = None) -> tuple[float, str, Optional[StepTerms]]:
    """(samples per second with the network's share, how, the step's terms) for a multi-instance shape: a step takes
    max(compute, bytes per step / (network bandwidth x NETWORK_EFFICIENCY)). A run of this GPU across more GPUs than
    one instance holds (``reference_gpus``; 0 for an estimate from another GPU, whose network says nothing of this
    one's) already measured its own communication: no second network term."""
    if instances < 2:
        return compute_rate, "", None
    capped = network_gbps is not None and network_gbps < instance.network_gbps
    if reference_gpus > instance.gpu_count and not capped:
        return compute_rate, f"; its {reference_gpus}-GPU reference run already holds inter-node communication", None
    terms = step_terms(workload, instance, instances, compute_rate, network_gbps)
    compute, talk, step = terms.compute_seconds, terms.communication_seconds, terms.step_seconds
    repeated = f" ({terms.micro_batches} micro-batches)" if terms.micro_batches > 1 else ""
    efa = " EFA" if instance.efa else ""
    card = (f" (a queue node's one network card of the type's {instance.network_gbps:,g})" if capped else "")
    how = (f"; per step {compute:,.2f} s compute, {terms.step_bytes / 1e9:,.1f} GB{repeated} per instance over "
           f"{terms.network_gbps:,g} Gbps{efa}{card} x {NETWORK_EFFICIENCY:g} assumed efficiency = {talk:,.2f} s; "
           f"overlapped (the best case), the step takes the longer: {step:,.2f} s"
           + (f" (network-bound: scaling {terms.scaling_efficiency:.0%})" if talk > compute else ""))
    return workload.samples_per_step() / step, how, terms


def _quantized(workload: Workload, rate: float, source: str) -> tuple[float, str]:
    if not workload.quantized_base or source == "measured":
        return rate, ""
    speed = workload.quantized_speed
    return rate * speed, f"; x {speed} for {workload.quantized_base}'s dequantization (assumed until measured)"


def shape_throughput(workload: Workload, instance: GpuInstanceType, instances: int,
                     measured: Sequence[MeasuredThroughput] = ()) -> tuple[float, str, str]:
    """(samples per second of the whole shape, source, how it was derived). The source is "measured", "published",
    "derived" (a published run converted by a rule), "estimated" (another GPU's number x sustained speeds), or on
    Trainium without a Neuron number "unmeasured" (a datasheet ratio)."""
    rate, source, how, _ = _shape_throughput(workload, instance, instances, measured)
    return rate, source, how


def _shape_throughput(workload: Workload, instance: GpuInstanceType, instances: int,
                      measured: Sequence[MeasuredThroughput], network_gbps: Optional[float] = None
                      ) -> tuple[float, str, str, Optional[StepTerms]]:
    rate, source, how, measured_gpus = _compute_throughput(workload, instance, instances, measured)
    rate, quantized = _quantized(workload, rate, source)
    rate, network, terms = communication(workload, instance, instances, rate, measured_gpus, network_gbps)
    return rate, source, how + quantized + network, terms


def _compute_throughput(workload: Workload, instance: GpuInstanceType, instances: int,
                        measured: Sequence[MeasuredThroughput]) -> tuple[float, str, str, int]:
    gpus = instance.gpu_count * instances
    anchors = _anchors(workload, measured)
    if instance.gpu_model in anchors:
        row = _pick(anchors[instance.gpu_model], instance.gpu_count)
        factor = _scaling(instance.gpu_count, row.gpus)
        # this GPU's own run: a run across nodes carries the inter-node communication of that hardware
        return (row.per_gpu * gpus * factor, row.source,
                f"{row.note}{_inherited(row, instance, instances)}{_times(gpus, factor)}", row.gpus)
    speed = RELATIVE_SPEED[instance.gpu_model].of(workload.workload_class)
    if anchors:
        # the GPU whose sustained speed is nearest this one's: the smallest extrapolation
        gpu = min(anchors, key=lambda g: (abs(math.log(speed / RELATIVE_SPEED[g].of(workload.workload_class))), g))
        row = _pick(anchors[gpu], instance.gpu_count)
        ratio = speed / RELATIVE_SPEED[gpu].of(workload.workload_class)
        per_gpu = row.per_gpu * ratio
        how = (f"{row.per_gpu:,.1f}/s per GPU {row.source} on the {gpu} ({row.gpus} GPU) x {ratio:.3f} sustained "
               f"{workload.workload_class} speed ratio = {per_gpu:,.1f}/s per GPU{_inherited(row, instance, 0)}")
        reference_gpus = row.gpus
    else:
        reference = RELATIVE_SPEED[REFERENCE_GPU].of(workload.workload_class)
        per_gpu = (GPU_SPECS[REFERENCE_GPU].dense_tensor_tflops * 1e12 * DEFAULT_UTILIZATION
                   / workload.flops_per_sample * speed / reference)
        how = (f"no number for this workload: the {REFERENCE_GPU} at {DEFAULT_UTILIZATION:.0%} of "
               f"{GPU_SPECS[REFERENCE_GPU].dense_tensor_tflops:g} TFLOPS / {workload.flops_per_sample:.3g} FLOPs x "
               f"{speed / reference:.3f} sustained speed ratio = {per_gpu:,.1f}/s per GPU")
        reference_gpus = 1
    factor = _scaling(instance.gpu_count, reference_gpus)
    source = "unmeasured" if instance.accelerator == "neuron" else "estimated"
    if RELATIVE_SPEED[instance.gpu_model].uncertainty:
        how += f"; the {instance.gpu_model} ratio is {RELATIVE_SPEED[instance.gpu_model].uncertainty}"
    return per_gpu * gpus * factor, source, f"{how}{_times(gpus, factor)}", 0


# --- Spot terms --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpotTerms:
    band: int  # index into INTERRUPTION_BANDS
    source: str  # of the band
    advisor_savings: Optional[float]  # the Advisor's 30-day average saving over On-Demand: shown, never the price


def spot_terms(prices: dict, instance_type: str) -> SpotTerms:
    """The type's interruption band in the table's Region from the Spot Instance Advisor's data (a type it lacks: the
    worst band), and the Advisor's 30-day average saving for it, in [0, 0.99] (None where it lacks the type). No
    price: Spot is priced by ``ml_platform_job.prices.hourly_usd``, the table's conservative family discount."""
    entry = prices.get("spot_by_type", {}).get(instance_type)
    if entry:
        savings = min(max(float(entry["savings"]), 0.0), MAX_SPOT_SAVINGS)
        return SpotTerms(min(max(int(entry["band"]), 0), UNKNOWN_BAND), "Spot Instance Advisor", savings)
    return SpotTerms(UNKNOWN_BAND, "not in the Spot Instance Advisor data: the worst band", None)


def interruption_rate(band: int) -> float:
    """Interruptions per instance-hour for an Advisor band (see INTERRUPTION_BANDS)."""
    return -math.log(1 - INTERRUPTION_BANDS[band][1]) / SPOT_LIFE_HOURS


# --- one shape ---------------------------------------------------------------------------------------------------

def _option(workload: Workload, instance: GpuInstanceType, instances: int, prices: dict,
            assumptions: CostAssumptions, measured: Sequence[MeasuredThroughput], minimize: str,
            target: str = "fleet") -> Option:
    fits, sharding, per_gpu_gib, micro_batch = memory_fit(workload, instance, instances)
    network_gbps = network_gbps_for(instance, target)
    rate, source, note, terms = _shape_throughput(workload, instance, instances, measured, network_gbps)
    accelerator_rate = rate
    if workload.cpu_samples_per_vcpu and not workload.gpu_decode:
        cpu_cap = instance.vcpus * instances * workload.cpu_samples_per_vcpu
        if cpu_cap < rate:
            note += (f"; capped at {cpu_cap:,.0f}/s by the CPU input pipeline ({instance.vcpus * instances} vCPUs x "
                     f"{workload.cpu_samples_per_vcpu:g}/s; --gpu-decode lifts it)")
            rate = cpu_cap
    startup = boot_seconds(instance) / 3600 + assumptions.startup_minutes / 60
    load = (workload.dataset_gib * 1024 / assumptions.s3_copy_mibps / 3600
            if assumptions.dataset_source == "s3" else 0.0)
    volume_hourly = (workload.dataset_gib * prices["ebs_gp3_gb_month"] / HOURS_PER_MONTH
                     if assumptions.dataset_source == "snapshot" else 0.0)
    training = workload.samples / rate / 3600
    # Trainium compiles once per job (the Neuron cache then serves restarts), so it is not redone after interruptions
    compile_hours = assumptions.neuron_compile_minutes / 60 if instance.accelerator == "neuron" else 0.0
    training += compile_hours
    hours = startup + load + training
    on_demand = hourly_usd(prices, instance.name, "on-demand")
    usd_on_demand = hours * instances * (on_demand + volume_hourly)
    value = assumptions.value_of_hour
    choices = [("on-demand", hours, usd_on_demand)]
    spot = interruptions = hours_spot = usd_spot = per_hour = wait = spot_hourly = spot_savings = None
    if instances == 1:
        spot = spot_terms(prices, instance.name)
        spot_hourly = hourly_usd(prices, instance.name, "spot")  # the one price: the guard's, cost's, job cost's
        spot_savings = 1 - spot_hourly / on_demand
        per_hour = (assumptions.spot_interruptions_per_instance_hour
                    if assumptions.spot_interruptions_per_instance_hour is not None else interruption_rate(spot.band))
        wait = (assumptions.spot_wait_minutes if assumptions.spot_wait_minutes is not None
                else INTERRUPTION_BANDS[spot.band][2]) / 60
        interruptions = hours * per_hour
        billed = hours + interruptions * (assumptions.checkpoint_interval_minutes / 60 / 2 + startup + load)
        hours_spot = billed + (1 + interruptions) * wait
        usd_spot = billed * (spot_hourly + volume_hourly)
        choices.append(("spot", hours_spot, usd_spot))
    deadline = workload.deadline_hours
    in_time = [c for c in choices if deadline is None or c[1] <= deadline] or choices

    def objective(choice):
        _, wall, usd = choice
        cost = usd + value * wall
        return (wall, cost) if minimize == "time" else (cost, wall)

    lifecycle, expected, usd = min(in_time, key=objective)
    spot_note = None
    if spot is not None and lifecycle == "on-demand":
        spot_cost = usd_spot + value * hours_spot
        od_cost = usd_on_demand + value * hours
        if deadline is not None and hours_spot > deadline >= hours:
            spot_note = f"Spot loses: its waits and rework ({hours_spot:,.1f} h) miss the {deadline:g} h deadline"
        elif minimize == "time":
            spot_note = (f"Spot loses on time: {hours_spot:,.1f} h expected against {hours:,.1f} h On-Demand, which "
                         f"costs {od_cost:,.2f} against {spot_cost:,.2f} USD on Spot")
        elif spot_cost >= od_cost and spot_savings <= 0:
            spot_note = (f"Spot loses: the table's conservative {instance.family} discount is 0 (Spot priced as "
                         f"On-Demand), so it only adds the expected rework and waits ({spot_cost:,.2f} against "
                         f"{od_cost:,.2f} USD On-Demand)")
        elif spot_cost >= od_cost:
            spot_note = (f"Spot loses: its {spot_savings:.0%} saving (the table's conservative discount) does not pay "
                         f"for the expected rework and waits ({spot_cost:,.2f} against {od_cost:,.2f} USD "
                         "On-Demand)")
    return Option(
        instance_type=instance.name, instances=instances, gpus_per_instance=instance.gpu_count,
        gpu_model=instance.gpu_model, gpu_memory_gib=instance.gpu_memory_gib, efa=instance.efa, fits=fits,
        sharding=sharding, memory_per_gpu_gib=per_gpu_gib, micro_batch_per_gpu=micro_batch, samples_per_second=rate,
        throughput_source=source, throughput_note=note, accelerator_samples_per_second=accelerator_rate,
        startup_hours=startup, dataset_load_hours=load,
        training_hours=training, hours=hours, hours_spot=hours_spot, expected_interruptions=interruptions,
        usd_spot=usd_spot, usd_on_demand=usd_on_demand, lifecycle=lifecycle, usd=usd,
        meets_deadline=deadline is None or expected <= deadline, on_demand_hourly=on_demand, spot_hourly=spot_hourly,
        spot_savings=spot_savings, advisor_savings=spot.advisor_savings if spot else None,
        network_gbps=network_gbps,
        step_compute_seconds=terms.compute_seconds if terms else None,
        step_communication_seconds=terms.communication_seconds if terms else None,
        step_gb=terms.step_bytes / 1e9 if terms else None,
        scaling_efficiency=terms.scaling_efficiency if terms else 1.0,
        interruption_band=INTERRUPTION_BANDS[spot.band][0] if spot else None, interruptions_per_hour=per_hour,
        spot_wait_hours=wait, usable_memory_gib=usable_gib(instance, workload.logical_nc),
        accelerator=instance.accelerator, compile_hours=compile_hours,
        expected_hours=expected, cost=usd + value * expected, spot_note=spot_note)


def shapes(catalog: dict[str, GpuInstanceType], max_instances: int) -> Iterable[tuple[GpuInstanceType, int]]:
    """Every type once; EFA types also at 2, 4, 8 ... instances up to max_instances."""
    for instance in catalog.values():
        yield instance, 1
        count = 2
        while instance.efa and count <= max_instances:
            yield instance, count
            count *= 2


# --- what runs ---------------------------------------------------------------------------------------------------

def runs(instance: GpuInstanceType, workload: Workload, target: str, prices: dict, *,
         accelerator: Optional[str] = None, arm64_dlami: bool = False) -> Optional[str]:
    """Why the platform cannot run this type for the target, or None. ``accelerator``: "neuron" (the model is
    built with the Neuron SDK), "cuda" (it is not), None (the workload says: presets known to run on Neuron)."""
    region = prices.get("region", "the Region")
    if instance.name in prices.get("not_offered", ()):
        return f"not offered in {region} (the price table's {region} entry lists it as not offered)"
    for method in workload.methods():
        reason = method_refused(instance.gpu_model, method)
        if reason:
            return reason
    if instance.accelerator == "neuron":
        neuron = accelerator == "neuron" or (accelerator is None and workload.neuron)
        if not neuron:
            return (f"{instance.family} trains models written for {neuron_path(instance.gpu_model).name}, not CUDA "
                    "code: pass --accelerator neuron if yours is")
        if target != "none":
            return ("the platform's fleets and queues run NVIDIA GPUs (their AMIs carry the NVIDIA driver, not the "
                    "Neuron runtime): rank it with --block none and run it with SageMaker or ParallelCluster on the "
                    f"Neuron DLAMI of {neuron_path(instance.gpu_model).name}")
        return None
    if instance.architecture != "x86_64":
        if target == "queue":
            return "arm64, and the queue's ECS GPU image (ECS_AL2023_NVIDIA) is x86_64"
        cc = GPU_SPECS[instance.gpu_model].compute_capability
        if target == "fleet" or not arm64_dlami:
            return (f"arm64 {instance.gpu_model} (compute capability {cc}): pytorch.org's aarch64 CUDA wheels need "
                    "8.0 or newer and the fleet's Base OSS DLAMI has no PyTorch; only AWS's ARM64 Deep Learning AMI "
                    "with PyTorch runs it, which config cannot set on a fleet: --block none --arm64-dlami ranks it")
        return None
    if not instance.dlami and target != "none":
        return (f"the platform's images no longer carry a driver for the {instance.gpu_model} (the DLAMI's CUDA 13 "
                "drivers dropped Volta, see gpu_catalog): --block none ranks it for an AMI of your own")
    return None


# --- the choice --------------------------------------------------------------------------------------------------

def advise(workload: Workload, *, prices: Optional[dict] = None, assumptions: CostAssumptions = CostAssumptions(),
           measured: Sequence[MeasuredThroughput] = (), max_instances: int = MAX_INSTANCES,
           catalog: Optional[dict[str, GpuInstanceType]] = None, region: str = "us-east-1", target: str = "fleet",
           minimize: str = "cost", accelerator: Optional[str] = None, arm64_dlami: bool = False) -> Advice:
    """Every shape ranked by cost per job (or by time: ``minimize="time"``), eligible first, each excluded one with
    its reason, and the first eligible shape as the recommendation (None when nothing is eligible). ``target``:
    "fleet", "queue" (what the platform runs) or "none" (rank what runs anywhere). ``catalog`` narrows the shapes
    to a subset of ACCELERATOR_CATALOG; ``prices`` defaults to the shipped table's ``region`` entry."""
    if target not in TARGETS:
        raise ValueError(f"target={target!r}: one of {', '.join(TARGETS)}")
    if minimize not in ("cost", "time"):
        raise ValueError(f"minimize={minimize!r}: 'cost' or 'time'")
    if workload.workload_class in NOT_MODELLED:
        raise ValueError(f"not modelled: {NOT_MODELLED[workload.workload_class]}")
    if workload.logical_nc not in LNC_SETTINGS:
        raise ValueError(f"logical_nc={workload.logical_nc}: Trainium2's Logical NeuronCore Configuration is one of "
                         f"{', '.join(map(str, LNC_SETTINGS))}")
    if prices is None:
        from ..runtime.handlers.budget_guard import load_prices
        prices = load_prices(region)
    catalog = ACCELERATOR_CATALOG if catalog is None else catalog
    options = [_option(workload, instance, count, prices, assumptions, measured, minimize, target)
               for instance, count in shapes(catalog, max_instances) if instance.name in prices["on_demand_hourly"]]
    single_ok = {o.instance_type for o in options if o.instances == 1 and o.fits and o.meets_deadline}
    for option in options:
        instance = catalog[option.instance_type]
        reason = runs(instance, workload, target, prices, accelerator=accelerator, arm64_dlami=arm64_dlami)
        if reason:
            option.rule, option.excluded = "runs", reason
        elif not option.fits:
            usable = usable_gib(instance, workload.logical_nc)
            how = f" even with {option.sharding}" if option.sharding else " (one GPU: no sharding possible)"
            worker = "NeuronCore" if instance.accelerator == "neuron" else "GPU"
            option.rule, option.excluded = "memory", (
                f"needs {option.memory_per_gpu_gib:.1f} GiB per {worker}{how}; {usable:.1f} GiB usable of "
                f"{instance.worker_memory_mib(workload.logical_nc):,} MiB")
        elif option.instances > 1 and target == "fleet":
            option.rule, option.excluded = "scale-out", (
                "a fleet runs one instance per job: multi-node jobs run on a queue (--block queue)")
        elif option.instances > 1 and option.instance_type in single_ok:
            option.rule, option.excluded = "scale-out", (
                "one instance of this type already fits and meets the deadline; more instances cost more per job "
                "(communication between them) and run On-Demand")
        elif not option.meets_deadline:
            option.rule, option.excluded = "deadline", (
                f"{option.expected_hours:,.1f} h expected, deadline {workload.deadline_hours:g} h")
    # An unmeasured Trainium row (a datasheet ratio) ranks after every eligible GPU, whatever it costs.
    if minimize == "time":
        options.sort(key=lambda o: (o.excluded is not None, o.throughput_source == "unmeasured", o.expected_hours,
                                    o.cost))
    else:
        options.sort(key=lambda o: (o.excluded is not None, o.throughput_source == "unmeasured", o.cost,
                                    o.expected_hours))
    cheapest_so_far = math.inf
    for option in sorted((o for o in options if o.excluded is None and o.throughput_source != "unmeasured"),
                         key=lambda o: (o.expected_hours, o.cost)):
        if option.cost < cheapest_so_far:
            option.pareto, cheapest_so_far = True, option.cost
    recommended = next((o for o in options if o.excluded is None), None)
    return Advice(workload=workload, assumptions=assumptions, options=options, recommended=recommended, prices=prices,
                  target=target, minimize=minimize)


def with_overrides(workload: Workload, **overrides) -> Workload:
    """A preset with some fields replaced (deadline_hours, dataset_gib, samples, qlora, gpu_decode, ...)."""
    return replace(workload, **{k: v for k, v in overrides.items() if v is not None})


# --- ready-to-paste config ------------------------------------------------------------------------------------

def compatible_types(advice: Advice, limit: int = 10) -> list[str]:
    """The recommended single-instance type first, then eligible types of the same GPU count and architecture,
    best first, within the fleet/queue limit of 2x GPU memory: of the memory windows [m, 2m] that hold the
    recommended type, the one with the most types (Spot finds capacity among several types)."""
    best = advice.recommended
    if best is None:
        return []
    anchor = ACCELERATOR_CATALOG[best.instance_type]
    candidates = [ACCELERATOR_CATALOG[o.instance_type] for o in advice.options
                  if o.instances == 1 and o.excluded is None and o.instance_type != anchor.name
                  and ACCELERATOR_CATALOG[o.instance_type].gpu_count == anchor.gpu_count
                  and ACCELERATOR_CATALOG[o.instance_type].architecture == anchor.architecture]
    windows = []
    for low in sorted({c.gpu_memory_gib for c in candidates} | {anchor.gpu_memory_gib}):
        high = low * MAX_GPU_MEMORY_RATIO
        if low <= anchor.gpu_memory_gib <= high:
            windows.append([c for c in candidates if low <= c.gpu_memory_gib <= high])
    chosen = max(windows, key=len)  # the first (lowest) window wins a tie; candidates keep their rank
    return [anchor.name, *(c.name for c in chosen[:limit - 1])]


BLOCK_WIDTH = 96  # a block's lines fit a 100-column terminal where TOML allows (an image URI cannot be split)


def _cost_comment(advice: Advice, types: list[str]) -> str:
    usd = {o.instance_type: o.usd for o in advice.options if o.instances == 1}
    words = ", ".join(f"{t} {usd[t]:,.2f}" for t in types)
    return "\n".join(textwrap.wrap("USD per job, one instance: " + words, BLOCK_WIDTH - 2, initial_indent="# ",
                                   subsequent_indent="#   "))


def _types_line(types: list[str]) -> str:
    """instance_types = [...] on one line, or one TOML array over several lines where it would be too wide."""
    line = "instance_types = [" + ", ".join(f'"{t}"' for t in types) + "]"
    if len(line) <= BLOCK_WIDTH:
        return line
    body = textwrap.wrap(", ".join(f'"{t}"' for t in types) + ",", BLOCK_WIDTH - 4, initial_indent="    ",
                         subsequent_indent="    ")
    return "\n".join(["instance_types = [", *body, "]"])


def _enough_types(types: list[str]) -> None:
    if len(types) < MIN_INSTANCE_TYPES:
        raise ValueError(f"only {len(types)} eligible types of this GPU shape ({', '.join(types)}); fleets and queues "
                         f"need {MIN_INSTANCE_TYPES} for Spot to find capacity: relax the deadline, or add types of the "
                         "same GPU count by hand where the job fits them")


def _within_a_year(advice: Advice) -> None:
    best = advice.recommended
    hours = best.hours_spot or best.hours
    if hours > MAX_JOB_HOURS:
        raise ValueError(f"the job takes {hours:,.0f} h on its best shape, more than a year ({MAX_JOB_HOURS:,} h): "
                         "no block for it; shrink the job (fewer samples) or check its figures")


def _platform_types(types: list[str]) -> None:
    outside = [t for t in types if t not in GPU_CATALOG]
    if outside:
        raise ValueError(f"{', '.join(outside)} cannot run on the platform's fleets and queues: advise with "
                         "--block fleet or --block queue, which exclude what they cannot run")


def fleet_block(advice: Advice, env: str, name: str = "training", max_capacity: int = 1) -> str:
    """A [[environments.ENV.fleets]] table (stacks/config.py's schema) for the recommended single-instance shape."""
    types = compatible_types(advice)
    if not types or advice.recommended.instances != 1:
        raise ValueError("a fleet runs one instance per job: the recommendation is multi-node, use a queue block")
    _within_a_year(advice)
    _platform_types(types)
    _enough_types(types)
    lines = [_cost_comment(advice, types), f"[[environments.{env}.fleets]]", f'name = "{name}"',
             _types_line(types),
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
    _within_a_year(advice)
    multi = best.instances > 1
    if multi:
        spot = [o for o in advice.options if o.instances == 1 and o.excluded is None]
        types = compatible_types(replace(advice, recommended=spot[0])) if spot else []
        if len(types) < 4:
            # A TrainingQueue always has its Spot environment: the multi-node types join an existing queue.
            raise ValueError(
                f"no single-instance shape has 4 Spot types for a new queue; add multi_node_instance_types = "
                f'["{best.instance_type}"] and multi_node_max_vcpus = '
                f"{ACCELERATOR_CATALOG[best.instance_type].vcpus * best.instances * parallel_jobs} to an existing queue")
    else:
        types = compatible_types(advice)
        if ACCELERATOR_CATALOG[types[0]].architecture != "x86_64":
            raise ValueError(f"{types[0]} is arm64 and a queue's ECS GPU image is x86_64: advise with --block queue, "
                             "which excludes arm64 types")
        _platform_types(types)
        _enough_types(types)
    vcpus = max([ACCELERATOR_CATALOG[t].vcpus for t in types] or [0]) * parallel_jobs
    timeout = max(1, math.ceil((best.hours_spot or best.hours) * 1.5))
    lines = [_cost_comment(advice, types),
             f"[[environments.{env}.queues]]", f'name = "{name}"',
             _types_line(types),
             f'image = "{DLC_PYTORCH_TRAINING.format(region=region)}"',
             f"max_vcpus = {vcpus}", "on_demand_max_vcpus = 0"]
    if multi:
        lines += [f'multi_node_instance_types = ["{best.instance_type}"]',
                  f"multi_node_max_vcpus = {ACCELERATOR_CATALOG[best.instance_type].vcpus * best.instances * parallel_jobs}"]
    else:
        lines += ["multi_node_instance_types = []", "multi_node_max_vcpus = 0"]
    lines += [f"job_attempts = {job_attempts}", f"job_timeout_hours = {timeout}"]
    return "\n".join(lines)


__all__ = ["Advice", "CostAssumptions", "MeasuredThroughput", "Option", "PRESETS", "Workload", "advise",
           "fleet_block", "queue_block", "memory_fit", "runs", "shape_throughput", "spot_terms", "usable_gib"]
