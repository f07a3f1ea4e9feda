"""The GPU instance types a job may run on, as the job side needs them: GPUs, vCPUs and memory (standard library only).

What a training container needs to know about its host without the construct library: the share of the instance's
GPUs a job used (its cost), the data-loader settings for its vCPUs (``goodput.loader_settings_for``) and the GPU a
benchmark measured. The
construct library's GPU catalog (``ml_platform_constructs.advice.gpu_catalog``) holds the same figures with their
sources; a test keeps the two equal.
"""

from __future__ import annotations

from typing import NamedTuple


class InstanceShape(NamedTuple):
    gpus: int
    vcpus: int
    memory_gib: float
    gpu: str  # the GPU's model, as the construct library's catalog names it


def _family(family: str, gpu: str, sizes: list[tuple[str, int, int, float]]) -> dict[str, InstanceShape]:
    return {f"{family}.{size}": InstanceShape(gpus, vcpus, memory, gpu) for size, gpus, vcpus, memory in sizes}


# size, GPUs, vCPUs, memory GiB
INSTANCE_SHAPES: dict[str, InstanceShape] = {
    **_family("g4dn", "NVIDIA T4", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64),
        ("8xlarge", 1, 32, 128), ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192), ("metal", 8, 96, 384)]),
    **_family("g5", "NVIDIA A10G", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64),
        ("8xlarge", 1, 32, 128), ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192), ("24xlarge", 4, 96, 384),
        ("48xlarge", 8, 192, 768)]),
    **_family("g5g", "NVIDIA T4G", [("xlarge", 1, 4, 8), ("2xlarge", 1, 8, 16), ("4xlarge", 1, 16, 32),
        ("8xlarge", 1, 32, 64), ("16xlarge", 2, 64, 128), ("metal", 2, 64, 128)]),
    **_family("g6", "NVIDIA L4", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64),
        ("8xlarge", 1, 32, 128), ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192), ("24xlarge", 4, 96, 384),
        ("48xlarge", 8, 192, 768)]),
    **_family("g6e", "NVIDIA L40S", [("xlarge", 1, 4, 32), ("2xlarge", 1, 8, 64), ("4xlarge", 1, 16, 128),
        ("8xlarge", 1, 32, 256), ("16xlarge", 1, 64, 512), ("12xlarge", 4, 48, 384), ("24xlarge", 4, 96, 768),
        ("48xlarge", 8, 192, 1536)]),
    **_family("p3", "NVIDIA V100", [("2xlarge", 1, 8, 61), ("8xlarge", 4, 32, 244), ("16xlarge", 8, 64, 488)]),
    **_family("p3dn", "NVIDIA V100 32GB", [("24xlarge", 8, 96, 768)]),
    **_family("p4d", "NVIDIA A100", [("24xlarge", 8, 96, 1152)]),
    **_family("p4de", "NVIDIA A100 80GB", [("24xlarge", 8, 96, 1152)]),
    **_family("p5", "NVIDIA H100", [("4xlarge", 1, 16, 256), ("48xlarge", 8, 192, 2048)]),
    **_family("p5en", "NVIDIA H200", [("48xlarge", 8, 192, 2048)]),
}
