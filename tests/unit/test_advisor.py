"""The GPU advisor: memory fit, throughput sources, cost per job and the decision tree, on hand-checked numbers."""

import json
import tomllib

import pytest

from ml_platform_constructs import GPU_CATALOG
from ml_platform_constructs.advisor import (
    PRESETS,
    USABLE_MEMORY_FRACTION,
    CostAssumptions,
    MeasuredThroughput,
    advise,
    fleet_block,
    lora_parameters,
    memory_fit,
    queue_block,
    shape_throughput,
    with_overrides,
)
from ml_platform_constructs.gpu_catalog import GPU_SPECS, GpuInstanceType
from ml_platform_constructs.runtime.budget_guard import load_prices
from ml_platform_constructs.gpu_alarms import MAX_GPU_MEMORY_RATIO, MIN_INSTANCE_TYPES
from ml_platform_constructs.throughput import PUBLISHED
from ops import advise as advise_command
from stacks import config as platform_config

GIB = 2 ** 30
PRICES = load_prices("us-east-1")


@pytest.fixture(scope="module")
def advice():
    return {name: advise(workload, prices=PRICES) for name, workload in PRESETS.items()}


def option(result, instance_type, instances=1):
    return next(o for o in result.options if o.instance_type == instance_type and o.instances == instances)


# --- memory -------------------------------------------------------------------------------------------------

def test_full_fine_tuning_with_adam_is_16_bytes_per_parameter():
    # 6.74e9 parameters x 16 bytes = 107.84e9 bytes = 100.43 GiB
    assert PRESETS["llm-7b-full"].state_gib() == pytest.approx(107.84e9 / GIB)


def test_lora_state_is_frozen_weights_in_16_bit_plus_adapters_with_adam():
    # per layer, rank 16: q,o 16*(4096+4096) each, k,v 16*(4096+4096) each, gate/up/down 16*(4096+11008) each
    per_layer = 16 * (8192 * 2 + 8192 * 2 + 15104 * 3)
    assert per_layer == 1_249_280
    assert lora_parameters(16, 4096, 4096, 11008, 32) == 32 * 1_249_280 == 39_976_960
    state = (39_976_960 * 16 + (6.74e9 - 39_976_960) * 2) / GIB
    assert PRESETS["llm-7b-lora"].state_gib() == pytest.approx(state)
    assert state == pytest.approx(13.0755, abs=1e-3)


def test_a_model_that_fits_one_gpu_is_not_sharded():
    fits, sharding, per_gpu, _ = memory_fit(PRESETS["llm-7b-lora"], GPU_CATALOG["g6e.xlarge"], 1)
    assert fits and sharding is None
    assert per_gpu == pytest.approx(PRESETS["llm-7b-lora"].state_gib() + PRESETS["llm-7b-lora"].activation_gib_per_item)


def test_state_too_big_for_one_gpu_is_sharded_over_every_gpu_of_the_shape():
    workload = PRESETS["llm-7b-full"]
    fits, sharding, per_gpu, _ = memory_fit(workload, GPU_CATALOG["p4d.24xlarge"], 1)
    assert fits and sharding == "ZeRO-3/FSDP over 8 GPUs"
    assert per_gpu == pytest.approx(100.43 / 8 + workload.activation_gib_per_item, abs=0.01)


def test_single_gpu_shape_cannot_shard():
    fits, sharding, _, micro_batch = memory_fit(PRESETS["llm-7b-full"], GPU_CATALOG["p5.48xlarge"].__class__(
        "x.1", "NVIDIA H100", 1, 80, 8, 64, 0, "x86_64", True), 1)
    assert not fits and sharding is None and micro_batch == 0


def test_micro_batch_is_what_fits_up_to_the_global_batch_share():
    # BERT-large on one 24 GiB GPU: (21.6 - 5.07) / 0.5625 GiB per sequence = 29 sequences
    workload = PRESETS["bert-large-finetune"]
    fits, _, _, micro_batch = memory_fit(workload, GPU_CATALOG["g5.xlarge"], 1)
    usable = 24 * USABLE_MEMORY_FRACTION
    assert fits and micro_batch == int((usable - workload.state_gib()) // workload.activation_gib_per_item) == 29


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_model_that_fits_no_single_gpu_is_never_recommended_on_one(name):
    workload = PRESETS[name]
    for deadline in (None, 200, 24, 8):
        result = advise(with_overrides(workload, deadline_hours=deadline), prices=PRICES)
        for o in result.options:
            one_gpu = GPU_CATALOG[o.instance_type].gpu_memory_gib * USABLE_MEMORY_FRACTION
            if workload.state_gib() + workload.activation_gib_per_item > one_gpu and o.gpus == 1:
                assert not o.fits and o.excluded and o.rule in ("software", "memory")
        best = result.recommended
        if best is not None and workload.state_gib() + workload.activation_gib_per_item > best.gpu_memory_gib * 0.9:
            assert best.gpus > 1 and best.sharding


def test_full_7b_and_70b_lora_are_recommended_sharded(advice):
    for name in ("llm-7b-full", "llm-70b-lora"):
        best = advice[name].recommended
        assert best.gpus >= 4 and best.sharding.startswith("ZeRO-3/FSDP")


# --- throughput -----------------------------------------------------------------------------------------------

def test_every_published_number_has_a_source_and_a_catalog_gpu():
    for row in PUBLISHED:
        assert row.source.startswith("NVIDIA") and "https://" in row.source
        assert row.gpu_model in GPU_SPECS and row.workload in PRESETS and row.samples_per_second_per_gpu > 0
    for spec in GPU_SPECS.values():
        assert spec.source and spec.dense_tensor_tflops > 0 and spec.memory_bandwidth_gbps > 0


def test_published_eight_gpu_number_is_used_as_published():
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4d.24xlarge"], 1)
    assert source == "published" and rate == pytest.approx(846.7)


def test_published_single_gpu_number_scaled_to_more_gpus_per_instance():
    four_a100 = GpuInstanceType("x.4", "NVIDIA A100", 4, 40, 48, 384, 0, "x86_64", True)
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], four_a100, 1)
    assert source == "published" and rate == pytest.approx(110.5 * 4 * 0.9)


def test_multi_node_scaling():
    rate, _, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4d.24xlarge"], 2)
    assert rate == pytest.approx(846.7 / 8 * 16 * 0.85)


def test_estimate_from_tflops_and_bandwidth_calibrated_on_the_published_a100():
    # utilization the A100 reached: 2470 img/s x 24.6 GFLOPs / 312 TFLOPS = 19.475%
    # L4 bandwidth per TFLOP against the A100's: (300/121) / (1555/312) = 0.49746
    # 121 TFLOPS x 0.19475 x 0.49746 / 24.6 GFLOPs = 476.5 img/s
    rate, source, note = shape_throughput(PRESETS["resnet50-imagenet"], GPU_CATALOG["g6.xlarge"], 1)
    assert source == "estimated" and "19.5% utilization (calibrated on NVIDIA A100)" in note
    assert rate == pytest.approx(121e12 * (2470 * 24.6e9 / 312e12) * ((300 / 121) / (1555 / 312)) / 24.6e9)
    assert rate == pytest.approx(476.5, abs=0.1)


def test_estimate_without_published_number_uses_the_default_utilization():
    # llm-7b-lora: 6 x 6.74e9 FLOPs a token; A100 at 35%: 312e12 x 0.35 / 40.44e9 = 2700.3 tokens/s per GPU
    rate, source, _ = shape_throughput(PRESETS["llm-7b-lora"], GpuInstanceType(
        "x.1", "NVIDIA A100", 1, 40, 12, 96, 0, "x86_64", True), 1)
    assert source == "estimated" and rate == pytest.approx(312e12 * 0.35 / (6 * 6.74e9))


def test_measured_beats_published_and_estimated():
    measured = [MeasuredThroughput("g6.xlarge", "NVIDIA L4", "bert-large-finetune", 1, 30.0, "2026-11-30T10:00:00Z"),
                MeasuredThroughput("p4d.24xlarge", "NVIDIA A100", "bert-large-finetune", 1, 100.0, "2026-11-30T10:00:00Z")]
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["g6.12xlarge"], 1, measured)
    assert source == "measured" and rate == pytest.approx(30.0 * 4 * 0.9)
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4d.24xlarge"], 1, measured)
    assert source == "measured" and rate == pytest.approx(100.0 * 8 * 0.9)
    result = advise(PRESETS["bert-large-finetune"], prices=PRICES, measured=measured)
    assert option(result, "g6.xlarge").throughput_source == "measured"
    assert option(result, "g5.xlarge").throughput_source == "estimated"


def test_cpu_input_pipeline_caps_image_throughput(advice):
    # p4d's published 16,621 img/s exceeds 96 vCPUs x 100 images/s
    o = option(advice["resnet50-imagenet"], "p4d.24xlarge")
    assert o.samples_per_second == 9600 and "capped at 9,600/s by the CPU input pipeline" in o.throughput_note


# --- cost per job -------------------------------------------------------------------------------------------

def test_cost_per_job_hand_checked(advice):
    o = option(advice["resnet50-imagenet"], "g6.xlarge")
    training = 115_305_030 / 400 / 3600  # 4 vCPUs x 100 img/s caps the L4's 476.5
    startup, load = 5 / 60, 150 * 1024 / 400 / 3600
    hours = startup + load + training
    assert o.hours == pytest.approx(hours) and hours == pytest.approx(80.2629, abs=1e-4)
    assert o.usd_on_demand == pytest.approx(hours * 0.8048)
    interruptions = hours * 0.02
    hours_spot = hours + interruptions * (0.25 + startup + load)  # half of 30 minutes, a start, the load again
    assert o.expected_interruptions == pytest.approx(interruptions)
    assert o.hours_spot == pytest.approx(hours_spot)
    assert o.usd_spot == pytest.approx(hours_spot * 0.8048 * (1 - 0.41))
    assert o.usd_spot == pytest.approx(38.446, abs=1e-3)
    assert o.lifecycle == "spot" and o.usd == o.usd_spot


def test_snapshot_volume_removes_the_copy_and_bills_the_volume():
    result = advise(PRESETS["resnet50-imagenet"], prices=PRICES,
                    assumptions=CostAssumptions(dataset_source="snapshot"))
    o = option(result, "g6.xlarge")
    assert o.dataset_load_hours == 0
    hours = 5 / 60 + 115_305_030 / 400 / 3600
    assert o.usd_on_demand == pytest.approx(hours * (0.8048 + 150 * 0.08 / 730))


def test_longer_checkpoint_interval_costs_more_spot_rework():
    short = advise(PRESETS["llm-7b-lora"], prices=PRICES, assumptions=CostAssumptions(checkpoint_interval_minutes=10))
    long = advise(PRESETS["llm-7b-lora"], prices=PRICES, assumptions=CostAssumptions(checkpoint_interval_minutes=120))
    assert option(long, "g6e.xlarge").usd_spot > option(short, "g6e.xlarge").usd_spot
    assert option(long, "g6e.xlarge").usd_on_demand == option(short, "g6e.xlarge").usd_on_demand


def test_multi_node_shapes_have_no_spot_price(advice):
    o = option(advice["llm-70b-lora"], "p4d.24xlarge", 2)
    assert o.usd_spot is None and o.hours_spot is None and o.lifecycle == "on-demand"


def test_p5_without_spot_discount_runs_on_demand(advice):
    # the table assumes no p5 Spot discount: Spot only adds rework
    o = option(advice["llm-70b-lora"], "p5.48xlarge")
    assert o.usd_spot > o.usd_on_demand and o.lifecycle == "on-demand"


# --- decision tree ---------------------------------------------------------------------------------------------

def test_v100_types_are_excluded_for_software(advice):
    o = option(advice["resnet50-imagenet"], "p3.2xlarge")
    assert o.rule == "software" and "Deep Learning AMI" in o.excluded


def test_memory_exclusion_says_what_is_needed(advice):
    o = option(advice["llm-7b-full"], "g6e.xlarge")
    assert o.rule == "memory" and "(one GPU: no sharding possible)" in o.excluded and "43.2 GiB usable of 48" in o.excluded


def test_scale_out_only_when_one_instance_cannot_do_it(advice):
    o = option(advice["llm-7b-lora"], "g6e.xlarge", 2) if any(
        x.instances == 2 and x.instance_type == "g6e.xlarge" for x in advice["llm-7b-lora"].options) else None
    assert o is None  # g6e.xlarge has no EFA: no multi-instance shape at all
    o = option(advice["llm-7b-lora"], "g6e.12xlarge", 2)
    assert o.rule == "scale-out"


def test_deadline_excludes_slow_shapes_and_never_excludes_fast_ones():
    result = advise(with_overrides(PRESETS["resnet50-imagenet"], deadline_hours=48), prices=PRICES)
    for o in result.options:
        expected = o.hours_spot if o.lifecycle == "spot" else o.hours
        if o.rule is None:
            assert expected <= 48
        if o.rule == "deadline":
            assert expected > 48 and "deadline 48 h" in o.excluded
    assert option(result, "g4dn.xlarge").rule == "deadline"


def test_recommended_is_the_cheapest_eligible_and_options_are_ranked(advice):
    for result in advice.values():
        eligible = [o for o in result.options if o.excluded is None]
        assert result.recommended is eligible[0]
        assert [o.usd for o in eligible] == sorted(o.usd for o in eligible)
        assert all(o.excluded for o in result.options[len(eligible):])


def test_impossible_deadline_recommends_nothing():
    result = advise(with_overrides(PRESETS["llm-70b-lora"], deadline_hours=0.01), prices=PRICES)
    assert result.recommended is None and all(o.excluded for o in result.options)


def test_json_has_the_fields_scripts_rely_on(advice):
    document = json.loads(json.dumps(advice["llm-7b-lora"].to_json()))
    assert set(document) == {"workload", "options", "recommended"}
    required = {"instance_type", "instances", "gpus_per_instance", "gpu_memory_gib", "fits", "samples_per_second",
                "throughput_source", "hours", "usd_spot", "usd_on_demand", "meets_deadline"}
    for entry in document["options"] + [document["recommended"]]:
        assert required <= set(entry) and entry["throughput_source"] in ("measured", "published", "estimated")
    assert document["workload"]["name"] == "llm-7b-lora"


def test_cli_json_output(capsys):
    assert advise_command.main(["bert-large-finetune", "--json", "--deadline-hours", "10"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["workload"]["deadline_hours"] == 10 and document["recommended"]["meets_deadline"]


def test_cli_text_lists_exclusions_and_ends_with_a_block(capsys):
    assert advise_command.main(["llm-7b-full"]) == 0
    out = capsys.readouterr().out
    assert "Decision tree" in out and "memory (" in out and "Recommended:" in out
    assert out.rstrip().splitlines()[-1].strip().startswith("scale_to_zero_after_minutes")


def test_cli_custom_transformer(capsys):
    assert advise_command.main(["custom", "--params", "1.3e9", "--tokens", "1e9", "--seq-len", "2048",
                                "--hidden", "2048", "--layers", "24", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["workload"]["flops_per_sample"] == pytest.approx(8 * 1.3e9)
    assert all(o["throughput_source"] == "estimated" for o in document["options"])


def test_cli_custom_needs_its_shape():
    with pytest.raises(SystemExit, match="--seq-len, --hidden, --layers required"):
        advise_command.main(["custom", "--params", "1e9", "--tokens", "1e9"])


# --- config blocks ---------------------------------------------------------------------------------------------

BASE = """
project = "ml-platform"
[environments.dev]
account = "111111111111"
region = "us-east-1"
availability_zones = ["us-east-1a"]
cost_center = "x"
alert_emails = ["a@example.com"]
[environments.dev.network]
mode = "create"
cidr = "10.10.0.0/16"
nat_gateways = 0
interface_endpoints = []
[environments.dev.datasets]
noncurrent_version_days = 7
access_logs_retention_days = 90
"""


@pytest.mark.parametrize("name", ["resnet50-imagenet", "bert-large-finetune", "llm-7b-lora"])
def test_fleet_block_passes_the_config_checks_and_the_fleet_rules(advice, name):
    block = fleet_block(advice[name], "dev")
    fleet = platform_config.parse(tomllib.loads(BASE + block)).environments["dev"].fleets[0]
    entries = [GPU_CATALOG[t] for t in fleet.instance_types]
    assert fleet.instance_types[0] == advice[name].recommended.instance_type
    assert len(entries) >= MIN_INSTANCE_TYPES and len({e.gpu_count for e in entries}) == 1
    assert len({e.architecture for e in entries}) == 1 and all(e.dlami for e in entries)
    memories = [e.gpu_memory_gib for e in entries]
    assert max(memories) / min(memories) <= MAX_GPU_MEMORY_RATIO


def test_fleet_block_refuses_a_multi_node_recommendation():
    only_g5 = {n: t for n, t in GPU_CATALOG.items() if n.startswith("g5.")}
    result = advise(PRESETS["llm-70b-lora"], prices=PRICES, catalog=only_g5)
    assert result.recommended.instances > 1
    with pytest.raises(ValueError, match="multi-node, use a queue block"):
        fleet_block(result, "dev")


def test_queue_block_for_a_multi_node_only_job_says_which_queue_keys_to_add():
    only_g5 = {n: t for n, t in GPU_CATALOG.items() if n.startswith("g5.")}
    result = advise(PRESETS["llm-70b-lora"], prices=PRICES, catalog=only_g5)
    best = result.recommended
    assert best.instances > 1 and GPU_CATALOG[best.instance_type].efa
    with pytest.raises(ValueError, match=rf'multi_node_instance_types = \["{best.instance_type}"\] and '
                                         rf"multi_node_max_vcpus = {GPU_CATALOG[best.instance_type].vcpus * best.instances}"):
        queue_block(result, "dev")


def test_queue_block_for_a_single_instance_job(advice):
    text = queue_block(advice["llm-7b-lora"], "staging")
    queue = tomllib.loads(text)["environments"]["staging"]["queues"][0]
    entries = [GPU_CATALOG[t] for t in queue["instance_types"]]
    assert set(queue) == {"name", "instance_types", "image", "max_vcpus", "on_demand_max_vcpus",
                          "multi_node_instance_types", "multi_node_max_vcpus", "job_attempts", "job_timeout_hours"}
    assert len(entries) >= 4 and len({e.gpu_count for e in entries}) == 1 and len({e.architecture for e in entries}) == 1
    assert max(e.gpu_memory_gib for e in entries) / min(e.gpu_memory_gib for e in entries) <= 2
    assert queue["max_vcpus"] == max(e.vcpus for e in entries) and queue["multi_node_instance_types"] == []


def test_blocks_refuse_fewer_than_four_spot_types(advice):
    # llm-70b-lora: only p4d, p5 and g6e.48xlarge (8 GPUs of 40-80 GiB) fit one instance
    for block in (fleet_block, queue_block):
        with pytest.raises(ValueError, match=r"only 3 eligible types .* need 4 for Spot to find capacity"):
            block(advice["llm-70b-lora"], "dev")


def test_queue_block_passes_the_platforms_config_checks(advice):
    from stacks import config as platform_config

    text = queue_block(advice["llm-7b-lora"], "staging")
    raw = tomllib.loads((platform_config.DEFAULT_CONFIG).read_text())
    raw["environments"]["staging"]["queues"] = tomllib.loads(text)["environments"]["staging"]["queues"]
    queue = platform_config.parse(raw).environments["staging"].queues[0]
    assert queue.image.startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:")


def test_queue_block_refuses_an_arm64_recommendation():
    arm = {n: t for n, t in GPU_CATALOG.items() if n.startswith("g5g.")}
    result = advise(PRESETS["resnet50-imagenet"], prices=PRICES, catalog=arm)
    with pytest.raises(ValueError, match="is arm64 and a queue's ECS GPU image is x86_64"):
        queue_block(result, "dev")
