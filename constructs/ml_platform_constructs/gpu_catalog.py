"""The GPU instance types the platform supports, with what a job and a fleet need to know about each.

Sources (AWS documentation):
- Specifications: https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html, the GPU table of
  https://docs.aws.amazon.com/batch/latest/userguide/gpu-jobs.html and
  https://docs.aws.amazon.com/sagemaker/latest/dg/notebooks-available-instance-types.html. The g6 12-48xlarge,
  g6e and p5 rows could not be checked against a stored AWS page when this was written; check them with
  `aws ec2 describe-instance-types` before relying on their vCPU, memory or NVMe figures.
- Deep Learning AMI support: https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html
  The x86_64 "Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" supports G4dn, G5, G6, G6e, P4d and P5; its
  current drivers (CUDA 13) no longer support P3's Volta GPUs, so P3 needs a pinned AMI of your own. The
  arm64 variant supports G5g.
- EFA support: the "Supported instance types" list of https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html
  (accelerated computing); confirm per Region with `aws ec2 describe-instance-types --filters
  Name=network-info.efa-supported,Values=true`.
- The SSM parameter of the latest DLAMI, named by the rule "/aws/service/deeplearning/ami/<arch>/<name without
  deep, learning, ami>/latest/ami-id": https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DLAMI_NAME = "base-oss-nvidia-driver-gpu-ubuntu-22.04"


def dlami_parameter(architecture: str) -> str:
    """The public SSM parameter holding the latest Base OSS Nvidia Driver GPU DLAMI for an architecture."""
    return f"/aws/service/deeplearning/ami/{architecture}/{DLAMI_NAME}/latest/ami-id"


@dataclass(frozen=True)
class GpuInstanceType:
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: int  # per GPU
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
    **_family("p3dn", "NVIDIA V100", 32, "x86_64", False, [("24xlarge", 8, 96, 768, 1800)]),
    **_family("p4d", "NVIDIA A100", 40, "x86_64", True, [("24xlarge", 8, 96, 1152, 8000)]),
    **_family("p5", "NVIDIA H100", 80, "x86_64", True, [("48xlarge", 8, 192, 2048, 30720)]),
}

# The catalog's types that support EFA (source in the module docstring).
EFA_INSTANCE_TYPES = frozenset({
    "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal",
    *(f"{family}.{size}" for family in ("g5", "g6", "g6e") for size in ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")),
    "p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge",
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
    return GPU_CATALOG.get(name)


def spot_quota(instance: GpuInstanceType) -> tuple[str, str]:
    """The Spot vCPU quota (code, name) an instance type counts against."""
    if instance.family.startswith("p5"):
        return SPOT_QUOTA_CODES["p5"]
    return SPOT_QUOTA_CODES["p" if instance.family.startswith("p") else "g"]


def on_demand_quota(instance: GpuInstanceType) -> tuple[str, str]:
    return ON_DEMAND_QUOTA_CODES["p" if instance.family.startswith("p") else "g"]


@dataclass(frozen=True)
class GpuSpec:
    """What one GPU can compute and move, for throughput estimates where no measured or published number exists."""

    model: str
    dense_tensor_tflops: float  # FP16/BF16 tensor throughput without structured sparsity
    memory_bandwidth_gbps: float  # GB/s
    source: str


# Per GPU model (the catalog's gpu_model), datasheet figures without sparsity. Vendors quote the sparse figure
# (2x) first; the dense one is what training reaches. Checked against the pages named in each source (2026-11).
GPU_SPECS: dict[str, GpuSpec] = {spec.model: spec for spec in (
    GpuSpec("NVIDIA T4", 65, 320,
            "NVIDIA T4 datasheet (https://www.nvidia.com/en-us/data-center/tesla-t4/): 65 TFLOPS mixed precision "
            "FP16/FP32, 320 GB/s; Turing has no BF16"),
    GpuSpec("NVIDIA T4G", 65, 320,
            "no NVIDIA datasheet for the T4G (AWS's Graviton variant, https://aws.amazon.com/ec2/instance-types/g5g/); "
            "assumed equal to the T4"),
    GpuSpec("NVIDIA A10G", 70, 600,
            "no NVIDIA datasheet for the A10G (AWS's variant of the A10); 600 GB/s as the A10, and less tensor compute "
            "than the A10's 125 TFLOPS: 70 per https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ "
            "(third party; confirm with a measured benchmark)"),
    GpuSpec("NVIDIA L4", 121, 300,
            "NVIDIA L4 datasheet (https://www.nvidia.com/en-us/data-center/l4/): 242 FP16/BF16 tensor TFLOPS with "
            "sparsity, so 121 dense; 300 GB/s"),
    GpuSpec("NVIDIA L40S", 362, 864,
            "NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/): 362.05 BF16 tensor TFLOPS "
            "dense (733 with sparsity); 864 GB/s"),
    GpuSpec("NVIDIA V100", 125, 900,
            "NVIDIA V100 datasheet (https://www.nvidia.com/en-us/data-center/v100/), SXM2: 125 tensor TFLOPS; "
            "900 GB/s; Volta has no BF16"),
    GpuSpec("NVIDIA A100", 312, 1555,
            "NVIDIA A100 datasheet (https://www.nvidia.com/en-us/data-center/a100/): 312 BF16 tensor TFLOPS dense "
            "(624 with sparsity); 1,555 GB/s for the 40 GB SXM in p4d.24xlarge (the 80 GB has 2,039)"),
    GpuSpec("NVIDIA H100", 989, 3350,
            "NVIDIA H100 datasheet (https://www.nvidia.com/en-us/data-center/h100/), SXM5: 989 BF16 tensor TFLOPS "
            "dense (1,979 with sparsity; NeMo AutoModel's performance summary uses 989 as H100 BF16 peak); 3.35 TB/s"),
)}
