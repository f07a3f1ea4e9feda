"""The GPU instance types a job may run on, as the job side needs them: GPUs, vCPUs and memory (standard library only).

What a training container needs to know about its host without the construct library: the share of the instance's
GPUs a job used (its cost) and the data-loader settings for its vCPUs (``goodput.loader_settings_for``). The
construct library's GPU catalog (``ml_platform_constructs.advice.gpu_catalog``) holds the same figures with their
sources; a test keeps the two equal.
"""

from __future__ import annotations

from typing import NamedTuple


class InstanceShape(NamedTuple):
    gpus: int
    vcpus: int
    memory_gib: float


def _family(family: str, sizes: list[tuple[str, int, int, float]]) -> dict[str, InstanceShape]:
    return {f"{family}.{size}": InstanceShape(gpus, vcpus, memory) for size, gpus, vcpus, memory in sizes}


# size, GPUs, vCPUs, memory GiB
INSTANCE_SHAPES: dict[str, InstanceShape] = {
    **_family("g4dn", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64), ("8xlarge", 1, 32, 128),
        ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192), ("metal", 8, 96, 384)]),
    **_family("g5", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64), ("8xlarge", 1, 32, 128),
        ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192), ("24xlarge", 4, 96, 384), ("48xlarge", 8, 192, 768)]),
    **_family("g5g", [("xlarge", 1, 4, 8), ("2xlarge", 1, 8, 16), ("4xlarge", 1, 16, 32), ("8xlarge", 1, 32, 64),
        ("16xlarge", 2, 64, 128), ("metal", 2, 64, 128)]),
    **_family("g6", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64), ("8xlarge", 1, 32, 128),
        ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192), ("24xlarge", 4, 96, 384), ("48xlarge", 8, 192, 768)]),
    **_family("g6e", [("xlarge", 1, 4, 32), ("2xlarge", 1, 8, 64), ("4xlarge", 1, 16, 128), ("8xlarge", 1, 32, 256),
        ("16xlarge", 1, 64, 512), ("12xlarge", 4, 48, 384), ("24xlarge", 4, 96, 768), ("48xlarge", 8, 192, 1536)]),
    **_family("p3", [("2xlarge", 1, 8, 61), ("8xlarge", 4, 32, 244), ("16xlarge", 8, 64, 488)]),
    **_family("p3dn", [("24xlarge", 8, 96, 768)]),
    **_family("p4d", [("24xlarge", 8, 96, 1152)]),
    **_family("p4de", [("24xlarge", 8, 96, 1152)]),
    **_family("p5", [("4xlarge", 1, 16, 256), ("48xlarge", 8, 192, 2048)]),
    **_family("p5en", [("48xlarge", 8, 192, 2048)]),
}
