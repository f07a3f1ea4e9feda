"""The accelerated instance types the platform knows, with what a job, a fleet and the GPU advisor need about each.

``GPU_CATALOG`` holds the NVIDIA GPU types that fleets and queues accept; ``NEURON_CATALOG`` holds AWS Trainium
types, which only the advisor ranks (fleets and queues run NVIDIA GPUs: their images carry the NVIDIA driver, not
the Neuron runtime); ``ACCELERATOR_CATALOG`` is both.

Sources (AWS documentation):
- Specifications: https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html, the GPU table of
  https://docs.aws.amazon.com/batch/latest/userguide/gpu-jobs.html and
  https://docs.aws.amazon.com/sagemaker/latest/dg/notebooks-available-instance-types.html. The g6 12-48xlarge,
  g6e, p5, p5en, p4de and trn rows were cross-checked against the vCPU and memory columns of the skypilot-catalog
  compilation of the EC2 API (catalogs/v7/aws/vms.csv, commit 27f67dd4); check NVMe sizes with
  `aws ec2 describe-instance-types` before relying on them.
- Deep Learning AMI support: https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html
  The x86_64 "Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" supports G4dn, G5, G6, G6e, P4d, P4de, P5 and P5en;
  its current drivers (CUDA 13) no longer support P3's Volta GPUs, so P3 needs a pinned AMI of your own. The arm64
  variant supports G5g; it carries the driver only, and pytorch.org's aarch64 CUDA wheels are built for compute
  capability 8.0 and up, so PyTorch on G5g's T4G (7.5) needs AWS's ARM64 Deep Learning AMI with PyTorch.
- Trainium: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html
  (190 BF16 TFLOPS, 32 GiB at 820 GB/s per chip) and .../trainium2.html (667 BF16 TFLOPS, 96 GiB at 2.9 TB/s).
- EFA support: the "Supported instance types" list of https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html
  (accelerated computing); confirm per Region with `aws ec2 describe-instance-types --filters
  Name=network-info.efa-supported,Values=true`.
- Network bandwidth per instance (NETWORK_GBPS, every catalog type): the "Network specifications" table of
  https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html, as AWS's "Amazon EC2: Instance Types" guide (2024
  edition, accelerated computing) prints it for the types it lists, and for g6e, p5.4xlarge, p5en and trn2 the EC2
  API's NetworkPerformance as compiled by instances.vantage.sh in github.com/tsaol/aws-gpu
  (data/all_gpu_instances.js, commit 7412fd25, the price table's source); trn1.32xlarge's 800 Gbps EFA also in the
  Trn1 table of https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trn1-arch.html.
  A type listed "up to" (NETWORK_UP_TO) has a lower baseline and bursts to the figure for minutes at a time
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html): none of them has EFA,
  so none runs multi-node. Confirm with `aws ec2 describe-instance-types --query
  'InstanceTypes[].NetworkInfo.NetworkCards[].PeakBandwidthInGbps'`.
- NeuronCores: a Trainium chip is two NeuronCore-v2 sharing its 32 GiB (16 GiB each), each core one data-parallel
  worker by default (trainium.html above); a Trainium2 chip is eight NeuronCore-v3 sharing 96 GiB, grouped into
  logical cores by the Logical NeuronCore Configuration (LNC, default 2 on Trn2: four logical cores of 24 GiB; only
  LNC 1 on Trn1): https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/logical-neuroncore-config.html
- Which training methods run where (METHODS): bitsandbytes' installation guide
  (https://huggingface.co/docs/bitsandbytes/main/en/installation: NVIDIA CUDA, AMD, Intel XPU, Apple Silicon, Intel
  Gaudi and CPU; LLM.int8() needs compute capability 7.5+, NF4/FP4 6.0+; no Neuron backend), and Transformer Engine's
  support matrix (https://nvidia.github.io/TransformerEngine/support_matrix.html: FP8 needs compute capability 8.9+:
  Ada, Hopper, Blackwell); Trainium's cFP8 datatype is no training path: Neuron's MXFP8 training is Trn3 only.
- Which Neuron SDK path each Trainium trains on (NEURON_PATHS): Trn1 the legacy PyTorch/XLA path (Neuron 2.29 or
  earlier), Trn2 TorchNeuron; sources at NEURON_PATHS.
- The SSM parameter of the latest DLAMI, named by the rule "/aws/service/deeplearning/ami/<arch>/<name without
  deep, learning, ami>/latest/ami-id": https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html

Not in the catalog: P5e (H200) is sold through EC2 Capacity Blocks for ML only, with no On-Demand or Spot price to
rank (the compilation above lists none); G6f (fractions of an L4 through NVIDIA vGPU) needs the GRID driver, which
the platform's AMIs do not carry, and its largest size holds half an L4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# One GPU shape per fleet or queue: at least this many types (Spot finds capacity among several), GPU memory within
# this ratio across them. The fleet's and the queue's checks (training.gpu_alarms) and the advisor's config blocks
# both use them, so they live here, where no CDK is needed.
MIN_INSTANCE_TYPES = 4
MAX_GPU_MEMORY_RATIO = 2.0

TRN2_DEFAULT_LNC = 2  # Trainium2's default Logical NeuronCore Configuration (source in the module docstring)
LNC_SETTINGS = (1, 2)

DLAMI_NAME = "base-oss-nvidia-driver-gpu-ubuntu-22.04"


def dlami_parameter(architecture: str) -> str:
    """The public SSM parameter holding the latest Base OSS Nvidia Driver GPU DLAMI for an architecture."""
    return f"/aws/service/deeplearning/ami/{architecture}/{DLAMI_NAME}/latest/ami-id"


@dataclass(frozen=True)
class GpuInstanceType:
    name: str
    gpu_model: str  # a key of GPU_SPECS (a Trainium chip counts as one accelerator)
    gpu_count: int
    gpu_memory_gib: int  # per GPU, nominal (the datasheet's figure); what CUDA offers is gpu_memory_mib
    vcpus: int
    memory_gib: float
    local_nvme_gb: int  # total instance store; 0 for EBS only
    architecture: str  # "x86_64" or "arm64"
    dlami: bool  # whether the current Base OSS Nvidia Driver GPU DLAMI supports it

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def efa(self) -> bool:
        """Whether the type supports an Elastic Fabric Adapter (multi-node training over EFA)."""
        return self.name in EFA_INSTANCE_TYPES

    @property
    def gpu_memory_mib(self) -> int:
        """Memory per GPU as the driver reports it (nvidia-smi's total), before the runtime's own reserve."""
        return GPU_SPECS[self.gpu_model].memory_mib

    @property
    def accelerator(self) -> str:
        """"cuda" (NVIDIA) or "neuron" (AWS Trainium)."""
        return GPU_SPECS[self.gpu_model].accelerator

    @property
    def network_gbps(self) -> Optional[float]:
        """The instance's rated network bandwidth in Gbps (NETWORK_GBPS; over EFA where the type has it); for an
        "up to" type (NETWORK_UP_TO) the burst figure. None for a type outside the catalog."""
        return NETWORK_GBPS.get(self.name)

    def workers(self, logical_nc: int = TRN2_DEFAULT_LNC) -> int:
        """Data-parallel workers by default: one per GPU; on Trainium one per (logical) NeuronCore."""
        return self.gpu_count * GPU_SPECS[self.gpu_model].workers_per_chip(logical_nc)

    def worker_memory_mib(self, logical_nc: int = TRN2_DEFAULT_LNC) -> int:
        """Memory one worker has: a GPU's, or the chip's split over its (logical) NeuronCores."""
        return self.gpu_memory_mib // GPU_SPECS[self.gpu_model].workers_per_chip(logical_nc)


def _family(family: str, gpu: str, memory: int, arch: str, dlami: bool,
            sizes: list[tuple[str, int, int, float, int]]) -> dict[str, GpuInstanceType]:
    return {f"{family}.{size}": GpuInstanceType(f"{family}.{size}", gpu, count, memory, vcpus, mem, nvme, arch, dlami)
            for size, count, vcpus, mem, nvme in sizes}


# size, GPUs, vCPUs, memory GiB, local NVMe GB
GPU_CATALOG: dict[str, GpuInstanceType] = {
    **_family("g4dn", "NVIDIA T4", 16, "x86_64", True, [
        ("xlarge", 1, 4, 16, 125), ("2xlarge", 1, 8, 32, 225), ("4xlarge", 1, 16, 64, 225),
        ("8xlarge", 1, 32, 128, 900), ("16xlarge", 1, 64, 256, 900), ("12xlarge", 4, 48, 192, 900),
        ("metal", 8, 96, 384, 1800)]),
    **_family("g5", "NVIDIA A10G", 24, "x86_64", True, [
        ("xlarge", 1, 4, 16, 250), ("2xlarge", 1, 8, 32, 450), ("4xlarge", 1, 16, 64, 600),
        ("8xlarge", 1, 32, 128, 900), ("16xlarge", 1, 64, 256, 1900), ("12xlarge", 4, 48, 192, 3800),
        ("24xlarge", 4, 96, 384, 3800), ("48xlarge", 8, 192, 768, 7600)]),
    **_family("g5g", "NVIDIA T4G", 16, "arm64", True, [
        ("xlarge", 1, 4, 8, 0), ("2xlarge", 1, 8, 16, 0), ("4xlarge", 1, 16, 32, 0), ("8xlarge", 1, 32, 64, 0),
        ("16xlarge", 2, 64, 128, 0), ("metal", 2, 64, 128, 0)]),
    **_family("g6", "NVIDIA L4", 24, "x86_64", True, [
        ("xlarge", 1, 4, 16, 250), ("2xlarge", 1, 8, 32, 450), ("4xlarge", 1, 16, 64, 600),
        ("8xlarge", 1, 32, 128, 900), ("16xlarge", 1, 64, 256, 1880), ("12xlarge", 4, 48, 192, 3760),
        ("24xlarge", 4, 96, 384, 3760), ("48xlarge", 8, 192, 768, 7520)]),
    **_family("g6e", "NVIDIA L40S", 48, "x86_64", True, [
        ("xlarge", 1, 4, 32, 250), ("2xlarge", 1, 8, 64, 450), ("4xlarge", 1, 16, 128, 600),
        ("8xlarge", 1, 32, 256, 900), ("16xlarge", 1, 64, 512, 1900), ("12xlarge", 4, 48, 384, 3800),
        ("24xlarge", 4, 96, 768, 3800), ("48xlarge", 8, 192, 1536, 7600)]),
    **_family("p3", "NVIDIA V100", 16, "x86_64", False, [
        ("2xlarge", 1, 8, 61, 0), ("8xlarge", 4, 32, 244, 0), ("16xlarge", 8, 64, 488, 0)]),
    **_family("p3dn", "NVIDIA V100 32GB", 32, "x86_64", False, [("24xlarge", 8, 96, 768, 1800)]),
    **_family("p4d", "NVIDIA A100", 40, "x86_64", True, [("24xlarge", 8, 96, 1152, 8000)]),
    **_family("p4de", "NVIDIA A100 80GB", 80, "x86_64", True, [("24xlarge", 8, 96, 1152, 8000)]),
    **_family("p5", "NVIDIA H100", 80, "x86_64", True, [
        ("4xlarge", 1, 16, 256, 3840), ("48xlarge", 8, 192, 2048, 30720)]),
    **_family("p5en", "NVIDIA H200", 141, "x86_64", True, [("48xlarge", 8, 192, 2048, 30720)]),
}

# AWS Trainium: the Neuron SDK, not CUDA. dlami=False: the NVIDIA driver DLAMI does not serve them.
NEURON_CATALOG: dict[str, GpuInstanceType] = {
    **_family("trn1", "AWS Trainium", 32, "x86_64", False, [("2xlarge", 1, 8, 32, 474), ("32xlarge", 16, 128, 512, 7600)]),
    **_family("trn2", "AWS Trainium2", 96, "x86_64", False, [("48xlarge", 16, 192, 2048, 7600)]),
}

ACCELERATOR_CATALOG: dict[str, GpuInstanceType] = {**GPU_CATALOG, **NEURON_CATALOG}

# Per instance, Gbps, every catalog type (sources in the module docstring: the EC2 accelerated-computing "Network
# specifications", https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html): what a multi-node job's collectives
# cross between instances, over EFA where the type has it (EFA_INSTANCE_TYPES). p4d/p4de are 4 x 100 Gbps, trn1.32xlarge
# 8 x 100, p5.48xlarge 3,200 Gbps EFAv2, p5en 3,200 EFAv3, trn2.48xlarge 16 x 200.
NETWORK_GBPS: dict[str, float] = {
    "g4dn.xlarge": 25, "g4dn.2xlarge": 25, "g4dn.4xlarge": 25, "g4dn.8xlarge": 50, "g4dn.12xlarge": 50,
    "g4dn.16xlarge": 50, "g4dn.metal": 100,
    **{f"{family}.{size}": gbps for family in ("g5", "g6") for size, gbps in (
        ("xlarge", 10), ("2xlarge", 10), ("4xlarge", 25), ("8xlarge", 25), ("12xlarge", 40), ("16xlarge", 25),
        ("24xlarge", 50), ("48xlarge", 100))},
    "g5g.xlarge": 10, "g5g.2xlarge": 10, "g5g.4xlarge": 10, "g5g.8xlarge": 12, "g5g.16xlarge": 25, "g5g.metal": 25,
    "g6e.xlarge": 20, "g6e.2xlarge": 20, "g6e.4xlarge": 20, "g6e.8xlarge": 25, "g6e.12xlarge": 100,
    "g6e.16xlarge": 35, "g6e.24xlarge": 200, "g6e.48xlarge": 400,
    "p3.2xlarge": 10, "p3.8xlarge": 10, "p3.16xlarge": 25, "p3dn.24xlarge": 100,
    "p4d.24xlarge": 400, "p4de.24xlarge": 400, "p5.4xlarge": 100, "p5.48xlarge": 3200, "p5en.48xlarge": 3200,
    "trn1.2xlarge": 12.5, "trn1.32xlarge": 800, "trn2.48xlarge": 3200,
}
# Listed "up to" the figure above: a lower baseline, bursts for minutes (none has EFA; sources in the docstring).
NETWORK_UP_TO = frozenset({
    "g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge", "g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5g.xlarge",
    "g5g.2xlarge", "g5g.4xlarge", "g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6e.xlarge", "g6e.2xlarge", "p3.2xlarge",
    "trn1.2xlarge",
})

# The catalog's types that support EFA (source in the module docstring).
EFA_INSTANCE_TYPES = frozenset({
    "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal",
    *(f"{family}.{size}" for family in ("g5", "g6", "g6e") for size in ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")),
    "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge", "trn1.32xlarge", "trn2.48xlarge",
})

# Service Quotas (service code ec2), counted in vCPUs of running and pending instances; 0 in new accounts.
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html
SPOT_QUOTA_CODES = {
    "g": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "p": ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    "p5": ("L-C4BD4855", "All P5 Spot Instance Requests"),
}
ON_DEMAND_QUOTA_CODES = {
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": ("L-417A185B", "Running On-Demand P instances"),
}


def lookup(name: str) -> Optional[GpuInstanceType]:
    """A GPU type fleets and queues accept (Trainium types are not: see ACCELERATOR_CATALOG)."""
    return GPU_CATALOG.get(name)


def spot_quota(instance: GpuInstanceType) -> tuple[str, str]:
    """The Spot vCPU quota (code, name) an instance type counts against (P5, P5e and P5en share the P5 quota)."""
    if instance.family.startswith("p5"):
        return SPOT_QUOTA_CODES["p5"]
    return SPOT_QUOTA_CODES["p" if instance.family.startswith("p") else "g"]


def on_demand_quota(instance: GpuInstanceType) -> tuple[str, str]:
    return ON_DEMAND_QUOTA_CODES["p" if instance.family.startswith("p") else "g"]


@dataclass(frozen=True)
class GpuSpec:
    """What one accelerator is: its datasheet compute and bandwidth, the memory its driver reports, and its software."""

    model: str
    dense_tensor_tflops: float  # FP16/BF16 tensor throughput without structured sparsity
    memory_bandwidth_gbps: float  # GB/s
    memory_mib: int  # per GPU as the driver reports it (nvidia-smi's total; Neuron: the chip's device memory)
    compute_capability: Optional[str]  # CUDA compute capability; None for Trainium
    source: str
    accelerator: str = "cuda"
    neuron_cores: int = 0  # physical NeuronCores per chip (Trainium); 0 for a GPU
    lnc_configurable: bool = False  # whether the Logical NeuronCore Configuration groups them (Trainium2)
    neuron_sdk: str = ""  # Trainium: the Neuron SDK training path the chip needs (NEURON_PATHS); "" for a GPU

    def workers_per_chip(self, logical_nc: int = TRN2_DEFAULT_LNC) -> int:
        """One worker per GPU; per NeuronCore on Trainium (per logical core where LNC groups them)."""
        if not self.neuron_cores:
            return 1
        return self.neuron_cores // (logical_nc if self.lnc_configurable else 1)


# Per model. TFLOPS are the dense figures (vendors quote the 2x sparse figure first; the dense one is what training
# reaches). memory_mib is nvidia-smi's "Total" on the named part (ECC on, as on EC2); CUDA itself then keeps some
# for its context and libraries (advisor.RUNTIME_RESERVE_MIB). Checked against the pages named in each source.
GPU_SPECS: dict[str, GpuSpec] = {spec.model: spec for spec in (
    GpuSpec("NVIDIA T4", 65, 320, 15360, "7.5",
            "NVIDIA T4 datasheet (https://www.nvidia.com/en-us/data-center/tesla-t4/): 65 TFLOPS mixed precision "
            "FP16/FP32 at 1,590 MHz boost (a 70 W card does not hold it under load), 320 GB/s; Turing has no BF16; "
            "nvidia-smi reports 15,360 MiB (CUDA offers about 14.75 GiB)"),
    GpuSpec("NVIDIA T4G", 65, 320, 15360, "7.5",
            "no NVIDIA datasheet for the T4G (AWS's Graviton variant, https://aws.amazon.com/ec2/instance-types/g5g/); "
            "assumed equal to the T4"),
    GpuSpec("NVIDIA A10G", 70, 600, 23028, "8.6",
            "no NVIDIA datasheet for the A10G (AWS's variant of the A10); 600 GB/s as the A10, and less tensor compute "
            "than the A10's 125 TFLOPS: 70 per https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ "
            "(third party); nvidia-smi reports 23,028 MiB"),
    GpuSpec("NVIDIA L4", 121, 300, 23034, "8.9",
            "NVIDIA L4 datasheet (https://www.nvidia.com/en-us/data-center/l4/): 242 FP16/BF16 tensor TFLOPS with "
            "sparsity, so 121 dense; 300 GB/s at 72 W; nvidia-smi reports 23,034 MiB"),
    GpuSpec("NVIDIA L40S", 362, 864, 46068, "8.9",
            "NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/): 362.05 BF16 tensor TFLOPS "
            "dense (733 with sparsity); 864 GB/s; nvidia-smi reports 46,068 MiB"),
    GpuSpec("NVIDIA V100", 125, 900, 16160, "7.0",
            "NVIDIA V100 datasheet (https://www.nvidia.com/en-us/data-center/v100/), SXM2 16 GB: 125 tensor TFLOPS; "
            "900 GB/s; Volta has no BF16; nvidia-smi reports 16,160 MiB"),
    GpuSpec("NVIDIA V100 32GB", 125, 900, 32510, "7.0",
            "as the V100 16 GB (same datasheet), with 32 GB; nvidia-smi reports 32,510 MiB"),
    GpuSpec("NVIDIA A100", 312, 1555, 40960, "8.0",
            "NVIDIA A100 datasheet (https://www.nvidia.com/en-us/data-center/a100/): 312 BF16 tensor TFLOPS dense "
            "(624 with sparsity); 1,555 GB/s for the 40 GB SXM in p4d.24xlarge; nvidia-smi reports 40,960 MiB"),
    GpuSpec("NVIDIA A100 80GB", 312, 2039, 81920, "8.0",
            "the same datasheet, 80 GB SXM (p4de.24xlarge): 312 BF16 tensor TFLOPS dense, 2,039 GB/s; nvidia-smi "
            "reports 81,920 MiB"),
    GpuSpec("NVIDIA H100", 989, 3350, 81559, "9.0",
            "NVIDIA H100 datasheet (https://www.nvidia.com/en-us/data-center/h100/), SXM5: 989 BF16 tensor TFLOPS "
            "dense (1,979 with sparsity; NeMo AutoModel's performance summary uses 989 as H100 BF16 peak); 3.35 TB/s; "
            "nvidia-smi reports 81,559 MiB"),
    GpuSpec("NVIDIA H200", 989, 4800, 143771, "9.0",
            "NVIDIA H200 datasheet (https://www.nvidia.com/en-us/data-center/h200/): the H100's 989 dense BF16 TFLOPS "
            "with 141 GB at 4.8 TB/s; nvidia-smi reports 143,771 MiB"),
    GpuSpec("AWS Trainium", 190, 820, 32768, None,
            "AWS Neuron, Trainium architecture (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/"
            "neuron-hardware/trainium.html): 190 FP16/BF16 TFLOPS per chip (two NeuronCore-v2), 32 GiB at 820 GB/s",
            accelerator="neuron", neuron_cores=2, neuron_sdk="xla"),
    GpuSpec("AWS Trainium2", 667, 2900, 98304, None,
            "AWS Neuron, Trainium2 architecture (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/"
            "arch/neuron-hardware/trainium2.html): 667 BF16 TFLOPS dense per chip (eight NeuronCore-v3), 96 GiB at "
            "2.9 TB/s", accelerator="neuron", neuron_cores=8, lnc_configurable=True, neuron_sdk="torchneuron"),
)}


@dataclass(frozen=True)
class NeuronPath:
    """A Neuron SDK training path: what a model must be written for to train on a Trainium generation."""

    name: str  # as exclusions and notes name it
    tensor_parallel: str  # what shards a model over NeuronCores on this path
    compile: str  # what compiles the training graphs before the first step, with its source
    source: str


# Neuron ended PyTorch/XLA training in release 2.30.0 ("Starting with Neuron Release 2.30.0, PyTorch/XLA is no longer
# supported for training workloads on Trainium": https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/
# announcements/neuron2.x/announce-no-support-pytorch-xla-training.html; 2.29 shipped the last, PyTorch 2.9), and NxD
# Training reached end of support in 2.32 (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/archive/nxd-training/
# nxd-training-tp-appnote.html). Its successor, TorchNeuron, lists "Supported instances: Trn2 and Trn3"
# (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html): Trn1 trains only
# on the legacy path, pinned to Neuron SDK 2.29 or earlier.
NEURON_PATHS: dict[str, NeuronPath] = {
    "xla": NeuronPath(
        "the legacy PyTorch/XLA path (torch-neuronx with Neuron SDK 2.29 or earlier, unsupported for training from "
        "2.30; TorchNeuron does not run on Trn1)",
        "neuronx-distributed tensor parallelism (legacy, end of support in Neuron 2.32)",
        "neuron_parallel_compile ahead of the run, legacy (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
        "frameworks/torch/torch-neuronx/api-reference-guide/training/pytorch-neuron-parallel-compile.html)",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/announcements/neuron2.x/"
        "announce-no-support-pytorch-xla-training.html"),
    "torchneuron": NeuronPath(
        "TorchNeuron (native PyTorch on device \"neuron\", Neuron SDK 2.33+, public beta)",
        "DTensor tensor parallelism on TorchNeuron",
        "torch.compile(backend=\"neuron\") JIT-compiling the graphs on the first steps "
        "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/about-pytorch-neuron.html)",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/index.html"),
}


def neuron_path(gpu_model: str) -> NeuronPath:
    """The Neuron SDK training path a Trainium chip needs."""
    return NEURON_PATHS[GPU_SPECS[gpu_model].neuron_sdk]


@dataclass(frozen=True)
class Method:
    """A training method that only some accelerators run, and why."""

    name: str
    label: str  # as an exclusion names it
    min_compute_capability: Optional[float]  # NVIDIA; None: any CUDA GPU
    neuron_refusal: str  # why no Trainium in the catalog runs it
    source: str


BITSANDBYTES = "bitsandbytes installation guide (https://huggingface.co/docs/bitsandbytes/main/en/installation)"
METHODS: dict[str, Method] = {method.name: method for method in (
    Method("qlora", "QLoRA (bitsandbytes 4-bit NF4)", 6.0, "has no Neuron backend",
           f"{BITSANDBYTES}: NF4/FP4 quantization needs compute capability 6.0+; backends for NVIDIA, AMD, Intel, "
           "Apple Silicon, Gaudi and CPU, none for Neuron"),
    Method("int8", "LLM.int8() (bitsandbytes 8-bit)", 7.5, "has no Neuron backend",
           f"{BITSANDBYTES}: LLM.int8() needs compute capability 7.5+ (Turing, T4, or newer)"),
    Method("fp8", "FP8 training", 8.9,
           "has no training path in the Neuron SDK for Trn1 or Trn2: Neuron's MXFP8 training (TorchAO Neuron) runs "
           "on Trn3 only",
           "Transformer Engine support matrix (https://nvidia.github.io/TransformerEngine/support_matrix.html): FP8 "
           "needs compute capability 8.9+ (Ada, Hopper, Blackwell); on Neuron, TorchAO Neuron's MXFP8 training is "
           "\"supported on Trn3 instances\" (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/training/"
           "torchao-neuron/index.html), none of the catalog's"),
)}


def method_refused(gpu_model: str, method: str) -> Optional[str]:
    """Why a method does not run on an accelerator, or None."""
    spec, rule = GPU_SPECS[gpu_model], METHODS[method]
    if spec.accelerator == "neuron":
        return f"{rule.label} {rule.neuron_refusal}"
    if rule.min_compute_capability and float(spec.compute_capability) < rule.min_compute_capability:
        return (f"{rule.label} needs compute capability {rule.min_compute_capability:g} or more; the {gpu_model} is "
                f"{spec.compute_capability}")
    return None


def boot_seconds(instance: GpuInstanceType) -> int:
    """Seconds from launch to a usable instance, by the seed story's measurements (g4dn.xlarge 47 s, p3.2xlarge
    130 s, p4d.24xlarge 210 s), extended by kind: eight or more accelerators (NVSwitch, EFA, eight NVMe drives)
    as p4d, other P types as p3, G and single-chip Trainium types as g4dn."""
    if instance.gpu_count >= 8:
        return 210
    return 130 if instance.family.startswith("p") else 47
