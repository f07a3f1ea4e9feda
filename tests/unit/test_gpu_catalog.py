"""The GPU catalog: the families the platform supports and the facts validation and the advisor rely on."""

import pytest

from ml_platform_constructs import GPU_CATALOG
from ml_platform_constructs.advice.gpu_catalog import (
    ACCELERATOR_CATALOG,
    EFA_INSTANCE_TYPES,
    GPU_SPECS,
    NEURON_CATALOG,
    boot_seconds,
    dlami_parameter,
    lookup,
    on_demand_quota,
    spot_quota,
)
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices, load_table
from stacks import config as platform_config


def test_every_required_family_is_in_the_catalog():
    assert {"g4dn", "g5", "g6", "g6e", "p3", "p4d", "p4de", "p5", "p5en"} <= {e.family for e in GPU_CATALOG.values()}
    assert {"trn1", "trn2"} == {e.family for e in NEURON_CATALOG.values()}
    assert ACCELERATOR_CATALOG == {**GPU_CATALOG, **NEURON_CATALOG}


@pytest.mark.parametrize("name,gpu,count,memory,arch", [
    ("g4dn.xlarge", "NVIDIA T4", 1, 16, "x86_64"),
    ("g5.12xlarge", "NVIDIA A10G", 4, 24, "x86_64"),
    ("g6.xlarge", "NVIDIA L4", 1, 24, "x86_64"),
    ("g6e.xlarge", "NVIDIA L40S", 1, 48, "x86_64"),
    ("p4d.24xlarge", "NVIDIA A100", 8, 40, "x86_64"),
    ("p4de.24xlarge", "NVIDIA A100 80GB", 8, 80, "x86_64"),
    ("p5.4xlarge", "NVIDIA H100", 1, 80, "x86_64"),
    ("p5.48xlarge", "NVIDIA H100", 8, 80, "x86_64"),
    ("p5en.48xlarge", "NVIDIA H200", 8, 141, "x86_64"),
    ("g5g.xlarge", "NVIDIA T4G", 1, 16, "arm64"),
])
def test_gpu_facts(name, gpu, count, memory, arch):
    entry = GPU_CATALOG[name]
    assert (entry.gpu_model, entry.gpu_count, entry.gpu_memory_gib, entry.architecture) == (gpu, count, memory, arch)


def test_memory_is_what_the_driver_reports_not_the_nominal_figure():
    # nvidia-smi totals: a "16 GB" T4 reports 15,360 MiB, a "24 GB" A10G 23,028 and an L4 23,034
    assert GPU_CATALOG["g4dn.xlarge"].gpu_memory_mib == 15360 < 16 * 1024
    assert GPU_CATALOG["g5.xlarge"].gpu_memory_mib == 23028 and GPU_CATALOG["g6.xlarge"].gpu_memory_mib == 23034
    assert GPU_CATALOG["p5.48xlarge"].gpu_memory_mib == 81559
    for entry in ACCELERATOR_CATALOG.values():
        assert 0 < entry.gpu_memory_mib <= entry.gpu_memory_gib * 1024 * 1.03, entry.name


def test_trainium_is_neuron_and_not_a_type_fleets_or_queues_accept():
    for name, entry in NEURON_CATALOG.items():
        assert entry.accelerator == "neuron" and not entry.dlami and lookup(name) is None
        assert GPU_SPECS[entry.gpu_model].compute_capability is None
    assert all(entry.accelerator == "cuda" for entry in GPU_CATALOG.values())
    # stacks/config.py refuses a Trainium type with its catalog message
    raw = {"project": "ml-platform", "environments": {"dev": {
        "account": "111111111111", "region": "us-east-1", "availability_zones": ["us-east-1a"], "cost_center": "x",
        "alert_emails": ["a@example.com"], "network": {"mode": "create", "cidr": "10.10.0.0/16", "nat_gateways": 0,
                                                       "interface_endpoints": []},
        "datasets": {"noncurrent_version_days": 7, "access_logs_retention_days": 90},
        "fleets": [{"name": "t", "instance_types": ["trn1.2xlarge"], "max_capacity": 1}]}}}
    with pytest.raises(platform_config.ConfigError, match="trn1.2xlarge"):
        platform_config.parse(raw)


def test_current_dlami_does_not_cover_p3():
    assert not GPU_CATALOG["p3.2xlarge"].dlami and not GPU_CATALOG["p3dn.24xlarge"].dlami
    assert all(entry.dlami for entry in GPU_CATALOG.values() if not entry.family.startswith("p3"))


def test_dlami_parameter_per_architecture():
    assert dlami_parameter("x86_64") == "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    assert dlami_parameter("arm64").startswith("/aws/service/deeplearning/ami/arm64/")


@pytest.mark.parametrize("name,code", [("g5.xlarge", "L-3819A6DF"), ("p4d.24xlarge", "L-7212CCBC"),
                                       ("p4de.24xlarge", "L-7212CCBC"), ("p5.48xlarge", "L-C4BD4855"),
                                       ("p5.4xlarge", "L-C4BD4855"), ("p5en.48xlarge", "L-C4BD4855")])
def test_spot_quota_per_family(name, code):
    assert spot_quota(GPU_CATALOG[name])[0] == code


def test_on_demand_quota_per_family():
    assert on_demand_quota(GPU_CATALOG["g6.xlarge"])[0] == "L-DB2E81BA"
    assert on_demand_quota(GPU_CATALOG["p5.48xlarge"])[0] == "L-417A185B"


def test_efa_types_are_catalog_types_and_single_gpu_small_sizes_have_none():
    assert EFA_INSTANCE_TYPES <= set(ACCELERATOR_CATALOG)
    assert GPU_CATALOG["p4d.24xlarge"].efa and GPU_CATALOG["g6e.12xlarge"].efa and GPU_CATALOG["p5en.48xlarge"].efa
    assert not GPU_CATALOG["g5.xlarge"].efa and not GPU_CATALOG["g5g.16xlarge"].efa
    assert not GPU_CATALOG["p5.4xlarge"].efa  # a single-GPU type is never a multi-node shape here


def test_every_catalog_gpu_has_specs_with_a_source():
    assert {entry.gpu_model for entry in ACCELERATOR_CATALOG.values()} <= set(GPU_SPECS)
    for spec in GPU_SPECS.values():
        assert spec.source and 0 < spec.dense_tensor_tflops < 2000 and 0 < spec.memory_bandwidth_gbps < 5000
    # dense, not the sparse figure vendors quote first
    assert GPU_SPECS["NVIDIA H100"].dense_tensor_tflops == 989 and GPU_SPECS["NVIDIA L4"].dense_tensor_tflops == 121


def test_boot_time_by_kind_from_the_seed():
    assert boot_seconds(GPU_CATALOG["g4dn.xlarge"]) == 47
    assert boot_seconds(GPU_CATALOG["p3.2xlarge"]) == 130 == boot_seconds(GPU_CATALOG["p5.4xlarge"])
    assert boot_seconds(GPU_CATALOG["p4d.24xlarge"]) == 210 == boot_seconds(NEURON_CATALOG["trn1.32xlarge"])


def test_every_catalog_type_has_a_price_in_every_configured_region():
    """The budget guard prices whatever runs from this table, the advisor every shape: no type may lack a price."""
    table = load_table()
    regions = {env.region for env in platform_config.load().environments.values()}
    for region in regions:
        assert region in table["regions"], region
        prices = load_prices(region)
        assert set(ACCELERATOR_CATALOG) <= set(prices["on_demand_hourly"]), region
        assert {e.family for e in ACCELERATOR_CATALOG.values()} <= set(prices["spot_discount"]), region
        for name, entry in prices["spot_by_type"].items():
            assert name in ACCELERATOR_CATALOG and 0 <= entry["savings"] < 1 and entry["band"] in range(5)
        assert set(prices["not_offered"]) <= set(ACCELERATOR_CATALOG)
        assert prices["spot_by_type_source"] and prices["new_types_note"]


def test_every_catalog_type_has_its_network_bandwidth():
    """Issue 29, item 5, and the issue's item 6: multi-node communication is priced over each instance's own
    network, and every catalog type carries its figure from the EC2 accelerated-computing network specifications."""
    from ml_platform_constructs.advice.gpu_catalog import NETWORK_GBPS, NETWORK_UP_TO
    assert set(NETWORK_GBPS) == set(ACCELERATOR_CATALOG) and all(gbps > 0 for gbps in NETWORK_GBPS.values())
    assert (GPU_CATALOG["g5.48xlarge"].network_gbps, GPU_CATALOG["p4d.24xlarge"].network_gbps,
            GPU_CATALOG["p5.48xlarge"].network_gbps, NEURON_CATALOG["trn1.32xlarge"].network_gbps) == (100, 400, 3200, 800)
    assert (GPU_CATALOG["g5.xlarge"].network_gbps, GPU_CATALOG["p5.4xlarge"].network_gbps,
            GPU_CATALOG["g6e.48xlarge"].network_gbps,
            NEURON_CATALOG["trn1.2xlarge"].network_gbps) == (10, 100, 400, 12.5)
    # "up to" (a burst over a lower baseline) only on small types, none with EFA: none runs multi-node
    assert NETWORK_UP_TO < set(ACCELERATOR_CATALOG) and not NETWORK_UP_TO & EFA_INSTANCE_TYPES
    assert {"g5.xlarge", "g6e.2xlarge", "trn1.2xlarge"} <= NETWORK_UP_TO and "g6e.4xlarge" not in NETWORK_UP_TO
    # every EFA type's network is at least 25 Gbps
    assert min(NETWORK_GBPS[name] for name in EFA_INSTANCE_TYPES) >= 25


def test_a_worker_is_a_gpu_or_a_neuroncore():
    """Issue 29, item 2: trn1 chips are two 16 GiB NeuronCores; trn2 chips eight, grouped by LNC (default 2)."""
    assert GPU_CATALOG["p4d.24xlarge"].workers() == 8 and GPU_CATALOG["p4d.24xlarge"].worker_memory_mib() == 40960
    assert NEURON_CATALOG["trn1.2xlarge"].workers() == 2 and NEURON_CATALOG["trn1.2xlarge"].worker_memory_mib() == 16384
    assert NEURON_CATALOG["trn1.2xlarge"].workers(1) == 2  # trn1 has no LNC setting
    assert NEURON_CATALOG["trn2.48xlarge"].workers() == 64 and NEURON_CATALOG["trn2.48xlarge"].worker_memory_mib() == 24576


@pytest.mark.parametrize("model,method,reason", [
    ("AWS Trainium", "qlora", "QLoRA (bitsandbytes 4-bit NF4) has no Neuron backend"),
    ("AWS Trainium2", "int8", "LLM.int8() (bitsandbytes 8-bit) has no Neuron backend"),
    ("NVIDIA V100", "int8", "LLM.int8() (bitsandbytes 8-bit) needs compute capability 7.5 or more; the NVIDIA V100 is 7.0"),
    ("NVIDIA T4", "int8", None),
    ("NVIDIA V100", "qlora", None),
    ("NVIDIA A100 80GB", "fp8", "FP8 training needs compute capability 8.9 or more; the NVIDIA A100 80GB is 8.0"),
    ("NVIDIA L4", "fp8", None),
    ("NVIDIA H200", "fp8", None),
    ("AWS Trainium", "fp8", "FP8 training has no training path in the Neuron SDK for Trn1 or Trn2: Neuron's MXFP8 "
                            "training (TorchAO Neuron) runs on Trn3 only"),
    ("AWS Trainium2", "fp8", "FP8 training has no training path in the Neuron SDK for Trn1 or Trn2: Neuron's MXFP8 "
                             "training (TorchAO Neuron) runs on Trn3 only"),
])
def test_which_methods_run_where(model, method, reason):
    from ml_platform_constructs.advice.gpu_catalog import method_refused
    assert method_refused(model, method) == reason


def test_each_trainium_names_the_neuron_sdk_path_it_trains_on():
    """Review of issue 29, finding 1: Neuron ended PyTorch/XLA training in 2.30 and TorchNeuron runs on Trn2 and
    Trn3 only, so Trn1 trains on the legacy XLA path and Trn2 on TorchNeuron."""
    from ml_platform_constructs.advice.gpu_catalog import NEURON_PATHS, neuron_path
    trn1, trn2 = neuron_path("AWS Trainium"), neuron_path("AWS Trainium2")
    assert trn1 is NEURON_PATHS["xla"] and "legacy PyTorch/XLA" in trn1.name and "2.29 or earlier" in trn1.name
    assert "neuron_parallel_compile" in trn1.compile and "neuronx-distributed" in trn1.tensor_parallel
    assert trn2 is NEURON_PATHS["torchneuron"] and trn2.name.startswith("TorchNeuron")
    assert 'torch.compile(backend="neuron")' in trn2.compile and "DTensor" in trn2.tensor_parallel
    assert all(spec.neuron_sdk in NEURON_PATHS for spec in GPU_SPECS.values() if spec.accelerator == "neuron")
