"""The GPU catalog: the families the platform supports and the facts validation relies on."""

import pytest

from ml_platform_constructs import GPU_CATALOG
from ml_platform_constructs.gpu_catalog import dlami_parameter, on_demand_quota, spot_quota


def test_every_required_family_is_in_the_catalog():
    assert {"g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5"} <= {entry.family for entry in GPU_CATALOG.values()}


@pytest.mark.parametrize("name,gpu,count,memory,arch", [
    ("g4dn.xlarge", "NVIDIA T4", 1, 16, "x86_64"),
    ("g5.12xlarge", "NVIDIA A10G", 4, 24, "x86_64"),
    ("g6.xlarge", "NVIDIA L4", 1, 24, "x86_64"),
    ("g6e.xlarge", "NVIDIA L40S", 1, 48, "x86_64"),
    ("p4d.24xlarge", "NVIDIA A100", 8, 40, "x86_64"),
    ("p5.48xlarge", "NVIDIA H100", 8, 80, "x86_64"),
    ("g5g.xlarge", "NVIDIA T4G", 1, 16, "arm64"),
])
def test_gpu_facts(name, gpu, count, memory, arch):
    entry = GPU_CATALOG[name]
    assert (entry.gpu_model, entry.gpu_count, entry.gpu_memory_gib, entry.architecture) == (gpu, count, memory, arch)


def test_current_dlami_does_not_cover_p3():
    assert not GPU_CATALOG["p3.2xlarge"].dlami and not GPU_CATALOG["p3dn.24xlarge"].dlami
    assert all(entry.dlami for entry in GPU_CATALOG.values() if not entry.family.startswith("p3"))


def test_dlami_parameter_per_architecture():
    assert dlami_parameter("x86_64") == "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    assert dlami_parameter("arm64").startswith("/aws/service/deeplearning/ami/arm64/")


@pytest.mark.parametrize("name,code", [("g5.xlarge", "L-3819A6DF"), ("p4d.24xlarge", "L-7212CCBC"), ("p5.48xlarge", "L-C4BD4855")])
def test_spot_quota_per_family(name, code):
    assert spot_quota(GPU_CATALOG[name])[0] == code


def test_on_demand_quota_per_family():
    assert on_demand_quota(GPU_CATALOG["g6.xlarge"])[0] == "L-DB2E81BA"
    assert on_demand_quota(GPU_CATALOG["p5.48xlarge"])[0] == "L-417A185B"


def test_efa_types_are_catalog_types_and_single_gpu_small_sizes_have_none():
    from ml_platform_constructs.gpu_catalog import EFA_INSTANCE_TYPES, GPU_CATALOG
    assert EFA_INSTANCE_TYPES <= set(GPU_CATALOG)
    assert GPU_CATALOG["p4d.24xlarge"].efa and GPU_CATALOG["g6e.12xlarge"].efa
    assert not GPU_CATALOG["g5.xlarge"].efa and not GPU_CATALOG["g5g.16xlarge"].efa


def test_every_catalog_gpu_has_specs_with_a_source():
    from ml_platform_constructs.gpu_catalog import GPU_SPECS
    assert {entry.gpu_model for entry in GPU_CATALOG.values()} <= set(GPU_SPECS)
    for spec in GPU_SPECS.values():
        assert spec.source and 0 < spec.dense_tensor_tflops < 2000 and 0 < spec.memory_bandwidth_gbps < 5000
    # dense, not the sparse figure vendors quote first
    assert GPU_SPECS["NVIDIA H100"].dense_tensor_tflops == 989 and GPU_SPECS["NVIDIA L4"].dense_tensor_tflops == 121
