"""The GPU advisor: memory as CUDA sees it, throughput sources and calibration, Spot per type, what runs, the choice,
and the config blocks, on hand-checked numbers."""

import json
import math
import tomllib
from dataclasses import replace

import pytest

from ml_platform_constructs import GPU_CATALOG
from ml_platform_constructs.advice import throughput as throughput_module
from ml_platform_constructs.advice.advisor import (
    INTERRUPTION_BANDS,
    PRESETS,
    QLORA_FROZEN_BYTES_PER_PARAMETER,
    RUNTIME_RESERVE_MIB,
    USABLE_MEMORY_FRACTION,
    SpotTerms,
    CostAssumptions,
    MeasuredThroughput,
    Workload,
    advise,
    fleet_block,
    interruption_rate,
    lora_parameters,
    memory_fit,
    queue_block,
    shape_throughput,
    spot_terms,
    usable_gib,
    with_overrides,
)
from ml_platform_constructs.training.gpu_alarms import MAX_GPU_MEMORY_RATIO, MIN_INSTANCE_TYPES
from ml_platform_constructs.advice.gpu_catalog import ACCELERATOR_CATALOG, GPU_SPECS, NEURON_CATALOG, GpuInstanceType
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices, price_per_hour
from ml_platform_job.prices import hourly_usd
from ml_platform_constructs.advice.throughput import PUBLISHED, RELATIVE_SPEED, PublishedThroughput
from stacks import config as platform_config

GIB = 2 ** 30
PRICES = load_prices("us-east-1")


@pytest.fixture(scope="module")
def advice():
    return {name: advise(workload, prices=PRICES) for name, workload in PRESETS.items()}


def option(result, instance_type, instances=1):
    return next(o for o in result.options if o.instance_type == instance_type and o.instances == instances)


def tiny_model(**overrides):
    """A small image model on 1M images: every GPU fits it, throughput estimated from the reference GPU."""
    return replace(Workload(name="tiny", description="tiny", parameters=1e6, trainable_parameters=1e6, optimizer="sgd",
                            sample_unit="images", samples=1e6, flops_per_sample=3e8, activation_gib_per_item=0.01,
                            global_batch_items=256, dataset_gib=1, cpu_samples_per_vcpu=100,
                            workload_class="convnet"), **overrides)


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


def test_qlora_keeps_the_base_in_4_bit_normal_float_with_double_quantization():
    qlora = with_overrides(PRESETS["llm-70b-lora"], qlora=True)
    frozen = 70.6e9 - qlora.trainable_parameters
    assert QLORA_FROZEN_BYTES_PER_PARAMETER == pytest.approx(4.127 / 8)
    assert qlora.state_gib() == pytest.approx((qlora.trainable_parameters * 16 + frozen * 4.127 / 8) / GIB)
    assert qlora.state_gib() < PRESETS["llm-70b-lora"].state_gib() / 3.5
    # 70B in 4 bits (about 38 GiB) fits one H100, which the 16-bit base (about 134 GiB) never does
    assert memory_fit(qlora, GPU_CATALOG["p5.4xlarge"], 1)[0]
    assert not memory_fit(PRESETS["llm-70b-lora"], GPU_CATALOG["p5.4xlarge"], 1)[0]


def test_usable_memory_is_the_drivers_total_less_the_runtime_reserve():
    # T4: nvidia-smi 15,360 MiB, less 1,024 MiB for CUDA, 95% of the rest = 13.30 GiB (not "16 GiB")
    assert usable_gib(GPU_CATALOG["g4dn.xlarge"]) == pytest.approx((15360 - 1024) * 0.95 / 1024)
    assert usable_gib(GPU_CATALOG["g4dn.xlarge"]) == pytest.approx(13.30, abs=0.01)
    assert usable_gib(GPU_CATALOG["g5.xlarge"]) == pytest.approx(20.41, abs=0.01)
    assert (RUNTIME_RESERVE_MIB, USABLE_MEMORY_FRACTION) == (1024, 0.95)


def test_full_7b_does_not_fit_eight_t4s(advice):
    # sharded over 8 T4s: 100.43/8 GiB state + 2 layers' gathered weights + activations + logits > 13.3 GiB usable
    o = option(advice["llm-7b-full"], "g4dn.metal")
    assert not o.fits and o.rule == "memory" and "13.3 GiB usable of 15,360 MiB" in o.excluded
    w = PRESETS["llm-7b-full"]
    assert o.memory_per_gpu_gib == pytest.approx(w.state_gib() / 8 + w.gathered_gib() + w.item_gib())


def test_logits_of_a_large_vocabulary_count_per_sequence():
    w = PRESETS["llm-70b-lora"]
    assert w.logits_gib_per_item() == pytest.approx(4096 * 128_256 * 8 / GIB)  # 3.91 GiB, as much as a layer stack
    assert w.item_gib() == pytest.approx(w.activation_gib_per_item + 4096 * 128_256 * 8 / GIB)
    assert PRESETS["resnet50-imagenet"].logits_gib_per_item() == 0


def test_a_model_that_fits_one_gpu_is_not_sharded():
    fits, sharding, per_gpu, _ = memory_fit(PRESETS["llm-7b-lora"], GPU_CATALOG["g6e.xlarge"], 1)
    assert fits and sharding is None
    assert per_gpu == pytest.approx(PRESETS["llm-7b-lora"].state_gib() + PRESETS["llm-7b-lora"].item_gib())


def test_state_too_big_for_one_gpu_is_sharded_over_every_gpu_of_the_shape():
    workload = PRESETS["llm-7b-full"]
    fits, sharding, per_gpu, _ = memory_fit(workload, GPU_CATALOG["p4d.24xlarge"], 1)
    assert fits and sharding == "ZeRO-3/FSDP over 8 GPUs"
    gathered = 2 * 6.74e9 / 32 * 2 / GIB  # two layers' BF16 weights gathered on each GPU
    assert per_gpu == pytest.approx(100.43 / 8 + gathered + workload.item_gib(), abs=0.01)


def test_sharding_decision_counts_activation_memory():
    """The state alone fits one GPU; state plus one micro-batch item does not, so the shape must shard. Deciding
    on the state alone would leave it unsharded and out of memory."""
    a100 = GPU_CATALOG["p4d.24xlarge"]
    usable = usable_gib(a100)
    workload = replace(PRESETS["llm-7b-full"], trainable_parameters=(usable - 1) * GIB / 16,
                       parameters=(usable - 1) * GIB / 16, activation_gib_per_item=3.0, vocab=None)
    assert workload.state_gib() < usable < workload.state_gib() + workload.item_gib()
    fits, sharding, per_gpu, micro_batch = memory_fit(workload, a100, 1)
    assert fits and sharding == "ZeRO-3/FSDP over 8 GPUs" and per_gpu < usable and micro_batch >= 1


def test_single_gpu_shape_cannot_shard():
    fits, sharding, _, micro_batch = memory_fit(PRESETS["llm-7b-full"], GPU_CATALOG["p5.4xlarge"], 1)
    assert not fits and sharding is None and micro_batch == 0


def test_micro_batch_is_what_fits_up_to_the_global_batch_share():
    workload = PRESETS["bert-large-finetune"]
    fits, _, _, micro_batch = memory_fit(workload, GPU_CATALOG["g5.xlarge"], 1)
    usable = (23028 - 1024) * 0.95 / 1024
    assert fits and micro_batch == int((usable - workload.state_gib()) // workload.item_gib()) == 27


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_model_that_fits_no_single_gpu_is_never_recommended_on_one(name):
    workload = PRESETS[name]
    for deadline in (None, 200, 24, 8):
        result = advise(with_overrides(workload, deadline_hours=deadline), prices=PRICES)
        for o in result.options:
            one_gpu = usable_gib(ACCELERATOR_CATALOG[o.instance_type])
            # a Trainium chip is two or more NeuronCores: tensor parallelism splits a model even on one chip
            if workload.state_gib() + workload.item_gib() > one_gpu and o.gpus == 1 and o.accelerator == "cuda":
                assert not o.fits and o.excluded and o.rule in ("runs", "memory")
        best = result.recommended
        if best is not None and workload.state_gib() + workload.item_gib() > best.usable_memory_gib:
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


def test_converted_llm_rows_follow_their_rule_at_the_presets_flops():
    """NeMo publishes tokens/s of its own runs (no recomputation); a preset's number is the same FLOP rate at the
    preset's FLOPs per token, so a change to a preset's FLOPs or to the rule shows here."""
    by_workload = {row.workload: row for row in PUBLISHED if row.rule}
    assert by_workload["llm-7b-lora"].samples_per_second_per_gpu == pytest.approx(
        12472.87 * 4 * 8.03e9 / PRESETS["llm-7b-lora"].flops_per_sample)
    assert by_workload["llm-70b-lora"].samples_per_second_per_gpu == pytest.approx(
        1091.85 * 4 * 70.6e9 / PRESETS["llm-70b-lora"].flops_per_sample)
    assert by_workload["llm-7b-full"].samples_per_second_per_gpu == pytest.approx(
        866.77 * 6 * 70.6e9 / PRESETS["llm-7b-full"].flops_per_sample)


def test_every_gpu_has_a_sustained_speed_with_a_source():
    assert {e.gpu_model for e in ACCELERATOR_CATALOG.values()} <= set(RELATIVE_SPEED)
    for row in RELATIVE_SPEED.values():
        assert row.source and 0 < row.convnet < 3 and 0 < row.transformer < 3
    assert RELATIVE_SPEED["NVIDIA A100 80GB"].convnet == RELATIVE_SPEED["NVIDIA A100 80GB"].transformer == 1


def test_sustained_speeds_order_the_inference_gpus_as_measured_not_as_peak_tflops():
    speed = {model: (row.convnet, row.transformer) for model, row in RELATIVE_SPEED.items()}
    for cls in (0, 1):
        # an A10G has 1.9x the T4's bandwidth and 4x its power: about 2-3x its training speed, not 1.09x
        assert 2.0 < speed["NVIDIA A10G"][cls] / speed["NVIDIA T4"][cls] < 3.5
        # an L4 is faster than a T4 (about twice the tensor TFLOPS at the same bandwidth), never slower
        assert speed["NVIDIA L4"][cls] / speed["NVIDIA T4"][cls] > 1.15
        assert speed["NVIDIA L40S"][cls] > speed["NVIDIA A10G"][cls] > speed["NVIDIA L4"][cls]
        assert speed["NVIDIA H200"][cls] > speed["NVIDIA H100"][cls] > speed["NVIDIA A100 80GB"][cls]


@pytest.mark.parametrize("source_gpu", ["NVIDIA T4", "NVIDIA V100", "NVIDIA A100 80GB", "NVIDIA L40S"])
def test_estimated_h100_to_a100_ratio_is_the_same_whatever_gpu_the_number_came_from(monkeypatch, source_gpu):
    workload = tiny_model(name="calibration")
    monkeypatch.setattr(throughput_module, "PUBLISHED", (
        PublishedThroughput(source_gpu, "calibration", 1, 1000.0, "test", "NVIDIA test"),))
    h100, _, h100_note = shape_throughput(workload, GPU_CATALOG["p5.4xlarge"], 1)
    a100, _, _ = shape_throughput(workload, GPU_CATALOG["p4de.24xlarge"], 1)
    per_a100 = a100 / 8 / 0.9  # p4de: 8 GPUs against a 1-GPU number, x0.9 intra-node scaling
    assert h100 / per_a100 == pytest.approx(RELATIVE_SPEED["NVIDIA H100"].convnet
                                            / RELATIVE_SPEED["NVIDIA A100 80GB"].convnet)
    assert source_gpu in h100_note


def test_published_eight_gpu_number_is_used_as_published():
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4de.24xlarge"], 1)
    assert source == "published" and rate == pytest.approx(846.7)


def test_published_single_gpu_number_scaled_to_more_gpus_per_instance():
    four_a100 = GpuInstanceType("x.4", "NVIDIA A100 80GB", 4, 80, 48, 384, 0, "x86_64", True)
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], four_a100, 1)
    assert source == "published" and rate == pytest.approx(110.5 * 4 * 0.9)


def test_multi_node_throughput_is_compute_or_communication_whichever_is_longer():
    """Issue 29, item 5: every multi-node shape got a flat x0.85, whatever its network. Now a step takes
    max(compute, bytes per step / (the instance's bandwidth x the assumed efficiency))."""
    # BERT-large data parallel on 2 x p4de (400 Gbps): 2 x 340M x 4 bytes (DDP's FP32 gradients) x 1/2 = 1.36 GB,
    # in 45 ms at 400 Gbps x 0.6 (the assumed efficiency), under the 0.15 s of compute for 256 sequences:
    # compute-bound, no loss
    rate, _, note = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4de.24xlarge"], 2)
    assert rate == pytest.approx(846.7 / 8 * 16)
    assert "1.4 GB per instance over 400 Gbps EFA x 0.6 assumed efficiency = 0.05 s" in note
    # ZeRO-3 full 7B with a 16-sequence step on 8 x g5.12xlarge (40 Gbps): 3 x 6.74e9 x 2 bytes x 7/8 = 35.4 GB
    # in 11.8 s at 40 Gbps x 0.6 against 2.4 s of compute: network-bound at 65,536 tokens / 11.8 s
    small_step = with_overrides(PRESETS["llm-7b-full"], global_batch_items=16)
    rate, _, note = shape_throughput(small_step, GPU_CATALOG["g5.12xlarge"], 8)
    talk = 3 * 6.74e9 * 2 * 7 / 8 / (40e9 / 8 * 0.6)
    assert talk == pytest.approx(11.8, abs=0.01) and rate == pytest.approx(16 * 4096 / talk) and "network-bound" in note
    # the same job on 8 x p5.48xlarge's 3,200 Gbps would be compute-bound; its H100 row was measured on 64 GPUs
    # across nodes, so it carries its own communication: no second network term
    rate, source, note = shape_throughput(small_step, GPU_CATALOG["p5.48xlarge"], 8)
    assert source == "derived" and rate == pytest.approx(6809.4 * 64, rel=1e-4) and "already holds" in note


def test_step_bytes_follow_the_zero_papers_volumes():
    full, lora = PRESETS["llm-7b-full"], PRESETS["llm-7b-lora"]
    assert full.step_bytes(1, True) == 0
    # data parallel: DDP under AMP all-reduces FP32 gradients (4 bytes), once a step whatever the accumulation
    assert full.step_bytes(2, False) == pytest.approx(2 * 6.74e9 * 4 / 2)
    assert full.step_bytes(2, False, micro_batches=4) == full.step_bytes(2, False)
    assert full.step_bytes(2, True) == pytest.approx(3 * 6.74e9 * 2 / 2)  # ZeRO-3, FSDP's BF16 reduce_dtype
    assert lora.step_bytes(4, True) == pytest.approx((2 * 6.74e9 * 2 + 2 * lora.trainable_parameters * 2) * 3 / 4)
    # ZeRO-3 gathers and reduce-scatters on every micro-batch
    assert full.step_bytes(2, True, micro_batches=2) == pytest.approx(2 * full.step_bytes(2, True))
    assert lora.step_bytes(4, True, micro_batches=3) == pytest.approx(3 * lora.step_bytes(4, True))


def test_zero3_traffic_repeats_per_micro_batch_when_accumulation_is_needed():
    """Review of issue 29, finding 2: ZeRO-3's gathers were counted once per optimizer step. A worker whose share
    of the global batch needs two micro-batches moves twice the bytes (a custom 20B full fine-tune, not a preset)."""
    job = Workload(name="custom", description="20B", parameters=20e9, trainable_parameters=20e9, optimizer="adam",
                   sample_unit="tokens", samples=1e8, flops_per_sample=8 * 20e9,
                   activation_gib_per_item=20.0, global_batch_items=64, dataset_gib=1, sequence=4096, layers=48)
    instance = GPU_CATALOG["p4de.24xlarge"]
    fits, sharding, _, micro = memory_fit(job, instance, 2)
    share = math.ceil(64 / 16)
    assert fits and sharding and micro < share  # accumulation needed
    micro_batches = math.ceil(share / micro)
    _, _, note = shape_throughput(job, instance, 2)
    expected = 3 * 20e9 * 2 / 2 * micro_batches / 1e9
    assert f"{expected:,.1f} GB ({micro_batches} micro-batches)" in note
    # with room for the whole share in one micro-batch the bytes are one step's
    roomy = replace(job, activation_gib_per_item=0.1)
    _, _, note = shape_throughput(roomy, instance, 2)
    assert f"{3 * 20e9 * 2 / 2 / 1e9:,.1f} GB per instance over" in note


def test_estimate_scales_the_nearest_gpus_number_by_sustained_speed():
    # L4's convnet speed (0.226) is nearest the V100's (0.527) among the GPUs with a ResNet-50 number (V100, A100
    # 80GB): 1,200 img/s x 0.226/0.527
    rate, source, note = shape_throughput(PRESETS["resnet50-imagenet"], GPU_CATALOG["g6.xlarge"], 1)
    l4, v100 = RELATIVE_SPEED["NVIDIA L4"].convnet, RELATIVE_SPEED["NVIDIA V100"].convnet
    assert source == "estimated" and rate == pytest.approx(1200 * l4 / v100) and "on the NVIDIA V100" in note
    rate, _, note = shape_throughput(PRESETS["resnet50-imagenet"], GPU_CATALOG["p5.4xlarge"], 1)
    h100, a100 = RELATIVE_SPEED["NVIDIA H100"].convnet, RELATIVE_SPEED["NVIDIA A100 80GB"].convnet
    assert rate == pytest.approx(2470 * h100 / a100) and "on the NVIDIA A100 80GB" in note


def test_estimate_without_any_number_uses_the_reference_gpu_at_the_default_utilization():
    workload = tiny_model()
    rate, source, note = shape_throughput(workload, GPU_CATALOG["p4de.24xlarge"], 1)
    assert source == "estimated" and rate == pytest.approx(312e12 * 0.35 / 3e8 * 8 * 0.9) and "35%" in note


def test_measured_beats_published_and_estimated_and_anchors_estimates():
    measured = [MeasuredThroughput("g6.xlarge", "NVIDIA L4", "bert-large-finetune", 1, 30.0, "2026-11-30T10:00:00Z"),
                MeasuredThroughput("p4de.24xlarge", "NVIDIA A100 80GB", "bert-large-finetune", 1, 100.0,
                                   "2026-11-30T10:00:00Z")]
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["g6.12xlarge"], 1, measured)
    assert source == "measured" and rate == pytest.approx(30.0 * 4 * 0.9)
    rate, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4de.24xlarge"], 1, measured)
    assert source == "measured" and rate == pytest.approx(100.0 * 8 * 0.9)
    # the T4 is nearest the measured L4: its estimate follows the measurement
    rate, source, note = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["g4dn.xlarge"], 1, measured)
    assert source == "estimated" and "measured on the NVIDIA L4" in note
    assert rate == pytest.approx(30.0 * RELATIVE_SPEED["NVIDIA T4"].transformer / RELATIVE_SPEED["NVIDIA L4"].transformer)
    result = advise(PRESETS["bert-large-finetune"], prices=PRICES, measured=measured)
    assert option(result, "g6.xlarge").throughput_source == "measured"
    assert option(result, "g5.xlarge").throughput_source == "estimated"


def test_cpu_input_pipeline_caps_image_throughput_unless_decoding_on_the_gpu(advice):
    o = option(advice["resnet50-imagenet"], "p4de.24xlarge")
    assert o.samples_per_second == 9600 and "capped at 9,600/s by the CPU input pipeline" in o.throughput_note
    dali = advise(with_overrides(PRESETS["resnet50-imagenet"], gpu_decode=True), prices=PRICES)
    assert option(dali, "p4de.24xlarge").samples_per_second == pytest.approx(16621)


# --- Spot, cost per job -------------------------------------------------------------------------------------

def test_cost_per_job_hand_checked(advice):
    o = option(advice["resnet50-imagenet"], "g6.xlarge")
    training = 115_305_030 / 400 / 3600  # 4 vCPUs x 100 img/s cap the L4's 516
    startup, load = 47 / 3600 + 4 / 60, 150 * 1024 / 400 / 3600  # the G family's boot + software start
    hours = startup + load + training
    assert o.hours == pytest.approx(hours) and hours == pytest.approx(80.2593, abs=1e-4)
    assert o.usd_on_demand == pytest.approx(hours * 0.8048)
    # Spot at the one price: us-east-1's conservative g6 discount, 41% (the low end across its AZs), not the Spot
    # Instance Advisor's 49% 30-day average for g6.xlarge (shown, labelled); its band >20%: 50% over a 24-hour life
    assert o.spot_savings == pytest.approx(0.41) and o.advisor_savings == 0.49 and o.interruption_band == ">20%"
    per_hour = -math.log(0.5) / 24
    interruptions = hours * per_hour
    billed = hours + interruptions * (0.25 + startup + load)  # half of 30 minutes, a start, the load again
    wall = billed + (1 + interruptions) * 0.5  # 30 minutes' capacity wait per start, not billed
    assert o.expected_interruptions == pytest.approx(interruptions)
    assert o.hours_spot == pytest.approx(wall) and o.expected_hours == pytest.approx(wall)
    assert o.usd_spot == pytest.approx(billed * 0.8048 * (1 - 0.41))
    assert o.usd_spot == pytest.approx(38.590, abs=1e-3)
    assert o.lifecycle == "spot" and o.usd == o.usd_spot and o.spot_hourly == pytest.approx(0.8048 * 0.59)
    assert o.spot_hourly == hourly_usd(PRICES, "g6.xlarge", "spot")  # the one price, exactly


def test_spot_terms_give_the_band_and_the_advisors_average_never_a_price():
    """One price (issue item 3): the Spot Instance Advisor's per-type data gives the interruption band; its 30-day
    average saving is shown, labelled, and priced nothing."""
    p5 = spot_terms(PRICES, "p5.48xlarge")
    assert p5.advisor_savings == 0.52 and not hasattr(p5, "savings")
    assert spot_terms(load_prices("us-west-2"), "p5.48xlarge").advisor_savings == 0.46
    g5g = spot_terms(PRICES, "g5g.xlarge")
    assert INTERRUPTION_BANDS[p5.band][0] == ">20%" and INTERRUPTION_BANDS[g5g.band][0] == "<5%"
    assert interruption_rate(p5.band) > 10 * interruption_rate(g5g.band)
    # a type the Advisor lacks: no average to show, and the worst band
    lacking = spot_terms(PRICES, "p5.4xlarge")
    assert lacking.advisor_savings is None and lacking.band == len(INTERRUPTION_BANDS) - 1
    # an Advisor figure out of range is shown clamped to [0, 0.99]
    assert spot_terms({"spot_by_type": {"g5.xlarge": {"savings": -0.3, "band": 9}}}, "g5.xlarge") == SpotTerms(
        len(INTERRUPTION_BANDS) - 1, "Spot Instance Advisor", 0.0)


def test_p5_spot_is_priced_as_the_budget_guard_prices_it(advice):
    """One price (issue item 3): the advisor priced p5 Spot at the Advisor's 52% average (26.42 USD/h) while the
    budget guard priced it at On-Demand: the table's p5 discount is 0.0 (no low-end Spot price in its snapshot). Now
    both take that price: Spot only adds rework and waits, On-Demand wins, and the Advisor's 52% is shown, unused."""
    o = option(advice["llm-70b-lora"], "p5.48xlarge")
    assert PRICES["spot_discount"]["p5"] == 0.0 and o.advisor_savings == 0.52
    assert o.spot_hourly == o.on_demand_hourly == 55.04 == price_per_hour("p5.48xlarge", "spot", PRICES)
    assert o.spot_savings == 0 and o.usd_spot > o.usd_on_demand and o.lifecycle == "on-demand"
    assert o.spot_note.startswith("Spot loses: the table's conservative p5 discount is 0 (Spot priced as On-Demand)")


def test_spot_never_costs_more_per_hour_than_on_demand():
    # a team's table with a nonsense negative discount, or a measured Spot price above On-Demand: Spot's default
    # maximum price is On-Demand, so the one price never exceeds it
    prices = {**PRICES, "spot_discount": {**PRICES["spot_discount"], "g5": -0.3},
              "spot_hourly": {"g6.xlarge": 5.0}}
    assert hourly_usd(prices, "g6.xlarge", "spot") == hourly_usd(prices, "g6.xlarge", "on-demand") == 0.8048
    result = advise(PRESETS["bert-large-finetune"], prices=prices)
    o = option(result, "g5.xlarge")
    assert o.spot_hourly == o.on_demand_hourly
    # with no saving, Spot only adds rework and waits: it loses, and the advice says so
    assert o.usd_spot > o.usd_on_demand and o.lifecycle == "on-demand" and o.usd == o.usd_on_demand
    assert o.spot_note.startswith("Spot loses")


def test_capacity_wait_is_on_the_clock_and_priced_by_the_value_of_time():
    base = advise(PRESETS["bert-large-finetune"], prices=PRICES, assumptions=CostAssumptions(spot_wait_minutes=0))
    waiting = advise(PRESETS["bert-large-finetune"], prices=PRICES,
                     assumptions=CostAssumptions(spot_wait_minutes=120, value_of_hour=50))
    quick, slow = option(base, "g5.xlarge"), option(waiting, "g5.xlarge")
    assert slow.usd_spot == pytest.approx(quick.usd_spot)  # waiting is not billed
    assert slow.hours_spot == pytest.approx(quick.hours_spot + (1 + quick.expected_interruptions) * 2)
    # two hours' wait at 50 USD/h makes On-Demand the better deal
    assert slow.lifecycle == "on-demand" and slow.cost == pytest.approx(slow.usd_on_demand + 50 * slow.hours)


def test_snapshot_volume_removes_the_copy_and_bills_the_volume():
    result = advise(PRESETS["resnet50-imagenet"], prices=PRICES,
                    assumptions=CostAssumptions(dataset_source="snapshot"))
    o = option(result, "g6.xlarge")
    assert o.dataset_load_hours == 0
    hours = 47 / 3600 + 4 / 60 + 115_305_030 / 400 / 3600
    assert o.usd_on_demand == pytest.approx(hours * (0.8048 + 150 * 0.08 / 730))


def test_longer_checkpoint_interval_costs_more_spot_rework():
    short = advise(PRESETS["llm-7b-lora"], prices=PRICES, assumptions=CostAssumptions(checkpoint_interval_minutes=10))
    long = advise(PRESETS["llm-7b-lora"], prices=PRICES, assumptions=CostAssumptions(checkpoint_interval_minutes=120))
    assert option(long, "g6e.xlarge").usd_spot > option(short, "g6e.xlarge").usd_spot
    assert option(long, "g6e.xlarge").usd_on_demand == option(short, "g6e.xlarge").usd_on_demand


def test_cold_start_by_family_decides_a_short_job():
    """A 10-minute job: p4d's 210 s boot and more expensive start-up outweigh its speed."""
    short = tiny_model(samples=3e5)
    result = advise(short, prices=PRICES, target="fleet")
    assert option(result, "g4dn.xlarge").startup_hours == pytest.approx((47 + 240) / 3600)
    assert option(result, "p4d.24xlarge").startup_hours == pytest.approx((210 + 240) / 3600)
    assert result.recommended.instance_type.startswith("g")


def test_multi_node_shapes_run_on_demand_on_a_queue():
    result = advise(PRESETS["llm-70b-lora"], prices=PRICES, target="queue")
    o = option(result, "p4d.24xlarge", 2)
    assert o.usd_spot is None and o.hours_spot is None and o.lifecycle == "on-demand"


# --- what runs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workload", [PRESETS["resnet50-imagenet"], PRESETS["bert-large-finetune"], tiny_model()])
@pytest.mark.parametrize("target", ["fleet", "queue"])
def test_t4g_on_arm64_is_never_recommended_for_the_platform(workload, target):
    result = advise(workload, prices=PRICES, target=target)
    assert not result.recommended.instance_type.startswith("g5g")
    o = option(result, "g5g.xlarge")
    assert o.rule == "runs"
    if target == "queue":
        assert "ECS GPU image" in o.excluded
    else:
        assert "pytorch.org's aarch64 CUDA wheels need 8.0" in o.excluded and "--arm64-dlami" in o.excluded


def test_t4g_runs_with_the_arm64_dlami_outside_the_platform():
    result = advise(tiny_model(), prices=PRICES, target="none", arm64_dlami=True)
    assert option(result, "g5g.xlarge").excluded is None
    assert option(advise(tiny_model(), prices=PRICES, target="none"), "g5g.xlarge").rule == "runs"


def test_trainium_only_for_a_neuron_model_and_outside_fleets_and_queues():
    tiny = tiny_model()
    o = option(advise(tiny, prices=PRICES, target="none"), "trn1.2xlarge")
    assert o.rule == "runs" and "--accelerator neuron" in o.excluded
    o = option(advise(tiny, prices=PRICES, target="none", accelerator="neuron"), "trn1.2xlarge")
    assert o.excluded is None and o.accelerator == "neuron"
    o = option(advise(tiny, prices=PRICES, target="fleet", accelerator="neuron"), "trn1.2xlarge")
    assert o.rule == "runs" and "--block none" in o.excluded
    # a preset known to train on Neuron needs no flag; --accelerator cuda excludes Trainium again
    assert option(advise(PRESETS["bert-large-finetune"], prices=PRICES, target="none"), "trn1.2xlarge").excluded is None
    o = option(advise(PRESETS["bert-large-finetune"], prices=PRICES, target="none", accelerator="cuda"), "trn1.2xlarge")
    assert "--accelerator neuron" in o.excluded


def test_a_type_the_region_does_not_offer_is_excluded():
    o = option(advise(PRESETS["bert-large-finetune"], prices=PRICES, target="none"), "trn2.48xlarge")
    assert o.rule == "runs" and o.excluded.startswith("not offered in us-east-1")


def test_v100_only_on_an_ami_of_your_own(advice):
    o = option(advice["resnet50-imagenet"], "p3.2xlarge")
    assert o.rule == "runs" and "dropped Volta" in o.excluded and "--block none" in o.excluded
    assert option(advise(PRESETS["resnet50-imagenet"], prices=PRICES, target="none"), "p3.2xlarge").excluded is None


def test_a_fleet_runs_one_instance_per_job(advice):
    o = option(advice["llm-70b-lora"], "p4d.24xlarge", 2)
    assert o.rule == "scale-out" and "--block queue" in o.excluded


# --- decision tree and the choice ------------------------------------------------------------------------------

def test_memory_exclusion_says_what_is_needed(advice):
    o = option(advice["llm-7b-full"], "g6e.xlarge")
    assert o.rule == "memory" and "(one GPU: no sharding possible)" in o.excluded and "41.8 GiB usable of 46,068 MiB" in o.excluded


def test_scale_out_only_when_one_instance_cannot_do_it():
    result = advise(PRESETS["llm-7b-lora"], prices=PRICES, target="queue")
    assert not any(x.instances == 2 and x.instance_type == "g6e.xlarge" for x in result.options)  # no EFA
    assert option(result, "g6e.12xlarge", 2).rule == "scale-out"


def test_deadline_excludes_slow_shapes_and_never_excludes_fast_ones():
    result = advise(with_overrides(PRESETS["resnet50-imagenet"], deadline_hours=48), prices=PRICES)
    for o in result.options:
        if o.rule is None:
            assert o.expected_hours <= 48
        if o.rule == "deadline":
            assert o.expected_hours > 48 and "deadline 48 h" in o.excluded
    assert option(result, "g4dn.xlarge").rule == "deadline"
    assert result.recommended.expected_hours <= 48


def test_deadline_picks_on_demand_where_spot_would_miss_it():
    # g5.2xlarge: 40.2 h On-Demand; Spot's waits and rework make it 40.7 h, so within 40.5 h it runs On-Demand
    result = advise(with_overrides(PRESETS["resnet50-imagenet"], deadline_hours=40.5), prices=PRICES)
    o = option(result, "g5.2xlarge")
    assert o.hours <= 40.5 < o.hours_spot and o.lifecycle == "on-demand" and o.meets_deadline
    assert "miss the 40.5 h deadline" in o.spot_note


def test_recommended_is_the_cheapest_eligible_and_options_are_ranked(advice):
    for result in advice.values():
        eligible = result.eligible()
        assert result.recommended is eligible[0]
        assert [o.cost for o in eligible] == sorted(o.cost for o in eligible)
        assert all(o.excluded for o in result.options[len(eligible):])


def test_minimize_time_recommends_the_fastest_eligible():
    result = advise(PRESETS["resnet50-imagenet"], prices=PRICES, minimize="time")
    eligible = result.eligible()
    assert result.recommended is min(eligible, key=lambda o: o.expected_hours)
    assert result.recommended.expected_hours < advise(PRESETS["resnet50-imagenet"], prices=PRICES).recommended.expected_hours


def test_minimize_time_runs_each_shape_on_its_faster_lifecycle():
    # Spot's capacity wait and rework make it slower than On-Demand on the same shape
    o = option(advise(PRESETS["bert-large-finetune"], prices=PRICES, minimize="time"), "g5.xlarge")
    assert o.hours < o.hours_spot and o.lifecycle == "on-demand" and o.expected_hours == o.hours
    assert o.spot_note.startswith("Spot loses on time")
    assert option(advise(PRESETS["bert-large-finetune"], prices=PRICES), "g5.xlarge").lifecycle == "spot"


def test_value_of_time_moves_the_choice_to_faster_shapes():
    cheap = advise(PRESETS["resnet50-imagenet"], prices=PRICES).recommended
    valued = advise(PRESETS["resnet50-imagenet"], prices=PRICES,
                    assumptions=CostAssumptions(value_of_hour=100)).recommended
    assert valued.expected_hours < cheap.expected_hours / 5


def test_pareto_frontier_holds_the_cheapest_and_the_fastest_and_nothing_dominated(advice):
    for result in advice.values():
        frontier = result.pareto()
        eligible = result.eligible()
        assert result.recommended in frontier
        assert min(eligible, key=lambda o: (o.expected_hours, o.cost)) in frontier
        for point in frontier:
            assert not any(o.expected_hours <= point.expected_hours and o.cost < point.cost for o in eligible)
        assert [o.cost for o in frontier] == sorted((o.cost for o in frontier), reverse=True)


def test_impossible_deadline_recommends_nothing():
    result = advise(with_overrides(PRESETS["llm-70b-lora"], deadline_hours=0.01), prices=PRICES)
    assert result.recommended is None and all(o.excluded for o in result.options)


def test_advise_refuses_an_unknown_target_or_objective():
    with pytest.raises(ValueError, match="target='cloud'"):
        advise(tiny_model(), prices=PRICES, target="cloud")
    with pytest.raises(ValueError, match="minimize='money'"):
        advise(tiny_model(), prices=PRICES, minimize="money")


def test_json_has_the_fields_scripts_rely_on(advice):
    document = json.loads(json.dumps(advice["llm-7b-lora"].to_json()))
    assert {"schema_version", "region", "target", "minimize", "workload", "assumptions", "options", "recommended",
            "pareto"} == set(document)
    assert document["schema_version"] == 4 and document["region"] == "us-east-1"
    required = {"instance_type", "instances", "gpus_per_instance", "gpu_memory_gib", "fits", "samples_per_second",
                "throughput_source", "hours", "hours_spot", "usd_spot", "usd_on_demand", "meets_deadline", "lifecycle",
                "usd", "on_demand_hourly", "spot_hourly", "spot_savings", "advisor_savings", "interruption_band",
                "usable_memory_gib", "network_gbps", "step_compute_seconds", "step_communication_seconds", "step_gb",
                "scaling_efficiency"}
    for entry in document["options"] + [document["recommended"]]:
        assert required <= set(entry) and entry["throughput_source"] in ("measured", "published", "derived",
                                                                         "estimated", "unmeasured")
    assert document["workload"]["name"] == "llm-7b-lora"
    assert document["assumptions"]["runtime_reserve_mib"] == 1024 and document["assumptions"]["prices_source"]
    assert document["assumptions"]["network_efficiency"] == 0.6
    assert document["assumptions"]["prices"].startswith("us-east-1 (2026-11-29): AWS Price List")
    assert document["assumptions"]["interruption_bands"][-1] == {"band": ">20%", "share_per_life": 0.5,
                                                                 "wait_minutes": 30}


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
nat_gateways = 1
interface_endpoints = []
[environments.dev.datasets]
noncurrent_version_days = 7
access_logs_retention_days = 90
"""


@pytest.mark.parametrize("name", ["resnet50-imagenet", "bert-large-finetune"])
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
    result = advise(PRESETS["llm-70b-lora"], prices=PRICES, catalog=only_g5, target="queue")
    assert result.recommended.instances > 1
    with pytest.raises(ValueError, match="multi-node, use a queue block"):
        fleet_block(result, "dev")


def test_queue_block_for_a_multi_node_only_job_says_which_queue_keys_to_add():
    only_g5 = {n: t for n, t in GPU_CATALOG.items() if n.startswith("g5.")}
    result = advise(PRESETS["llm-70b-lora"], prices=PRICES, catalog=only_g5, target="queue")
    best = result.recommended
    assert best.instances > 1 and GPU_CATALOG[best.instance_type].efa
    with pytest.raises(ValueError, match=rf'multi_node_instance_types = \["{best.instance_type}"\] and '
                                         rf"multi_node_max_vcpus = {GPU_CATALOG[best.instance_type].vcpus * best.instances}"):
        queue_block(result, "dev")


def test_queue_block_for_a_single_instance_job():
    result = advise(PRESETS["bert-large-finetune"], prices=PRICES, target="queue")
    text = queue_block(result, "staging")
    queue = tomllib.loads(text)["environments"]["staging"]["queues"][0]
    entries = [GPU_CATALOG[t] for t in queue["instance_types"]]
    assert set(queue) == {"name", "instance_types", "image", "max_vcpus", "on_demand_max_vcpus",
                          "multi_node_instance_types", "multi_node_max_vcpus", "job_attempts", "job_timeout_hours"}
    assert len(entries) >= 4 and len({e.gpu_count for e in entries}) == 1 and len({e.architecture for e in entries}) == 1
    assert max(e.gpu_memory_gib for e in entries) / min(e.gpu_memory_gib for e in entries) <= 2
    assert queue["max_vcpus"] == max(e.vcpus for e in entries) and queue["multi_node_instance_types"] == []


def test_blocks_refuse_fewer_than_four_spot_types():
    three = {n: GPU_CATALOG[n] for n in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge")}
    result = advise(PRESETS["llm-70b-lora"], prices=PRICES, catalog=three, target="queue")
    for block in (fleet_block, queue_block):
        with pytest.raises(ValueError, match=r"only 3 eligible types .* need 4 for Spot to find capacity"):
            block(result, "dev")


def test_blocks_refuse_types_the_platform_cannot_run():
    result = advise(PRESETS["bert-large-finetune"], prices=PRICES, target="none", catalog=NEURON_CATALOG)
    assert result.recommended.instance_type in NEURON_CATALOG
    for block in (fleet_block, queue_block):
        with pytest.raises(ValueError, match="cannot run on the platform's fleets and queues"):
            block(result, "dev")


def test_queue_block_refuses_an_arm64_recommendation_naming_a_real_flag():
    arm = {n: t for n, t in GPU_CATALOG.items() if n.startswith("g5g.")}
    result = advise(tiny_model(), prices=PRICES, catalog=arm, target="none", arm64_dlami=True)
    with pytest.raises(ValueError, match="is arm64 and a queue's ECS GPU image is x86_64: advise with --block queue"):
        queue_block(result, "dev")


def test_queue_block_passes_the_platforms_config_checks():
    result = advise(PRESETS["bert-large-finetune"], prices=PRICES, target="queue")
    text = queue_block(result, "staging", name="bert")
    raw = tomllib.loads((platform_config.DEFAULT_CONFIG).read_text())
    raw["environments"]["staging"]["queues"] = tomllib.loads(text)["environments"]["staging"]["queues"]
    queue = platform_config.parse(raw).environments["staging"].queues[0]
    assert queue.image.startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:")


# --- issue 29: workloads the presets were not tuned on ----------------------------------------------------------

def custom_llm(parameters, trainable=None, sequence=2048, hidden=5120, layers=40, vocab=32_000, **overrides):
    """A transformer no preset describes (a 13B-ish shape by default), full training unless ``trainable``."""
    from ml_platform_constructs.advice.advisor import transformer_activation_gib
    trainable = trainable or parameters
    return replace(Workload(
        name="custom", description="custom", parameters=parameters, trainable_parameters=trainable, optimizer="adam",
        sample_unit="tokens", samples=2e8, flops_per_sample=(6 if trainable < parameters else 8) * parameters,
        activation_gib_per_item=transformer_activation_gib(sequence, hidden, layers), global_batch_items=64,
        dataset_gib=1, sequence=sequence, vocab=vocab, layers=layers), **overrides)


def test_qlora_is_never_placed_on_trainium_and_the_exclusion_names_why():
    """Item 1: `llm-7b-lora --qlora --block none` recommended trn1.2xlarge; bitsandbytes has no Neuron backend."""
    workload = custom_llm(13e9, trainable=25e6, qlora=True)
    result = advise(workload, prices=PRICES, target="none", accelerator="neuron")
    for name in ("trn1.2xlarge", "trn1.32xlarge"):  # trn2 is not offered in us-east-1
        o = option(result, name)
        assert o.rule == "runs" and o.excluded == "QLoRA (bitsandbytes 4-bit NF4) has no Neuron backend"
    assert result.recommended.accelerator == "cuda"
    # quiet on legitimate work: the same job without QLoRA may run on Trainium
    plain = advise(replace(workload, qlora=False), prices=PRICES, target="none", accelerator="neuron")
    assert option(plain, "trn1.32xlarge").excluded is None


def test_llm_int8_needs_compute_capability_7_5_so_not_a_v100():
    workload = custom_llm(3e9, trainable=5e6, hidden=2560, layers=32, int8=True)
    result = advise(workload, prices=PRICES, target="none")
    v100 = option(result, "p3.2xlarge")
    assert v100.rule == "runs" and v100.excluded == ("LLM.int8() (bitsandbytes 8-bit) needs compute capability 7.5 or "
                                                     "more; the NVIDIA V100 is 7.0")
    assert option(result, "g4dn.xlarge").excluded is None  # the T4 is 7.5
    assert workload.frozen_bytes() == 1 and "trn1.2xlarge" in {o.instance_type for o in result.options if o.rule == "runs"}
    # QLoRA's NF4 needs 6.0: the V100 runs it
    assert option(advise(replace(workload, int8=False, qlora=True), prices=PRICES, target="none"),
                  "p3.2xlarge").excluded is None


# us-east-1 lists trn2.48xlarge as not offered; these tests need its row ranked
WITH_TRN2 = {**PRICES, "not_offered": [t for t in PRICES.get("not_offered", ()) if t != "trn2.48xlarge"]}


def test_fp8_runs_on_ada_and_hopper_only():
    """Review of issue 29, finding 7: FP8 was counted as running on Trainium1. Neuron's only FP8 (MXFP8) training
    path is Trn3's, so trn1 and trn2 refuse --fp8 with the reason."""
    workload = custom_llm(1.3e9, hidden=2048, layers=24, fp8=True)
    result = advise(workload, prices=WITH_TRN2, target="none", accelerator="neuron")
    refused = {o.instance_type.split(".")[0] for o in result.options
               if o.rule == "runs" and o.excluded.startswith("FP8 training needs compute capability 8.9")}
    assert refused == {"g4dn", "g5g", "g5", "p3", "p3dn", "p4d", "p4de"}  # Turing, Ampere, Volta
    for name in ("g6.xlarge", "g6e.xlarge", "p5.4xlarge"):
        assert option(result, name).rule != "runs"
    for name in ("trn1.2xlarge", "trn1.32xlarge", "trn2.48xlarge"):
        assert option(result, name).rule == "runs"
        assert option(result, name).excluded.startswith("FP8 training has no training path in the Neuron SDK")
    # without --fp8 the same job runs on Trainium
    plain = advise(replace(workload, fp8=False), prices=WITH_TRN2, target="none", accelerator="neuron")
    assert option(plain, "trn1.2xlarge").rule != "runs"


def test_trainium_exclusions_and_sharding_name_the_sdk_path_of_each_generation():
    """Review of issue 29, finding 1: the rows named neuronx-distributed and torch-neuronx's PyTorch/XLA flow for
    every Trainium; now trn1 names the legacy XLA path and trn2 TorchNeuron."""
    cuda_model = custom_llm(1.3e9, hidden=2048, layers=24)
    result = advise(cuda_model, prices=WITH_TRN2, target="none", accelerator="cuda")
    assert "legacy PyTorch/XLA path" in option(result, "trn1.2xlarge").excluded
    assert option(result, "trn2.48xlarge").excluded.startswith("trn2 trains models written for TorchNeuron")
    fleet = advise(PRESETS["llm-7b-lora"], prices=WITH_TRN2)
    assert "Neuron DLAMI of TorchNeuron" in option(fleet, "trn2.48xlarge").excluded
    # a 34B model fits no core: tensor parallel by each path's own library
    big = with_overrides(custom_llm(34e9, hidden=8192, layers=48), deadline_hours=None)
    ranked = advise(big, prices=WITH_TRN2, target="none", accelerator="neuron")
    assert "neuronx-distributed" in option(ranked, "trn1.32xlarge").sharding
    assert "DTensor tensor parallelism on TorchNeuron" in option(ranked, "trn2.48xlarge").sharding
    lines = " ".join(CostAssumptions().lines(PRICES))
    assert "neuron_parallel_compile" in lines and "torch.compile with the neuron backend" in lines


def test_trainium_memory_is_per_neuroncore_and_a_model_too_big_for_one_is_tensor_parallel():
    """Item 2: a trn1 chip is two NeuronCores of 16 GiB, each a data-parallel worker; a model that fits no core is
    split over cores with tensor parallelism, which the fit now says."""
    trn1 = NEURON_CATALOG["trn1.32xlarge"]
    core = (16384 - RUNTIME_RESERVE_MIB) * USABLE_MEMORY_FRACTION / 1024
    assert usable_gib(trn1) == pytest.approx(core)  # 14.25 GiB, not the chip's 32
    # 22 GiB a worker fits a 32 GiB chip but not a 16 GiB core: tensor parallel 2 over 32 cores
    workload = custom_llm(1.2e9, hidden=2048, layers=24)  # 17.9 GiB of state
    fits, sharding, per_worker, _ = memory_fit(workload, trn1, 1)
    assert workload.state_gib() + workload.item_gib() > core and fits
    assert sharding.startswith("tensor parallel 2 x data parallel 16 over 32 NeuronCores")
    assert per_worker == pytest.approx(workload.state_gib() / 2 + workload.item_gib())
    # a 13B full fine-tune (194 GiB of state) needs 16 cores of tensor parallelism
    big = custom_llm(13e9)
    assert memory_fit(big, trn1, 1)[1].startswith("tensor parallel 16 x data parallel 2")
    # the trn1.2xlarge has two cores: what fits no pair of them is excluded at rule 2, per NeuronCore
    result = advise(big, prices=PRICES, target="none", accelerator="neuron")
    assert option(result, "trn1.2xlarge").excluded.startswith("needs ") and "GiB per NeuronCore even with tensor " \
        "parallel 2" in option(result, "trn1.2xlarge").excluded


def test_trainium2_memory_follows_the_logical_neuroncore_setting():
    trn2 = NEURON_CATALOG["trn2.48xlarge"]
    assert trn2.workers() == 64 and trn2.worker_memory_mib() == 24576  # LNC 2 (the default): 4 cores a chip
    assert trn2.workers(1) == 128 and trn2.worker_memory_mib(1) == 12288
    workload = custom_llm(1.2e9, hidden=2048, layers=24)  # 18 GiB a worker: one LNC-2 core, two LNC-1 cores
    assert memory_fit(workload, trn2, 1)[1] is None
    assert memory_fit(replace(workload, logical_nc=1), trn2, 1)[1].startswith("tensor parallel 2 x data parallel 64")
    with pytest.raises(ValueError, match="logical_nc=3: Trainium2's Logical NeuronCore Configuration is one of 1, 2"):
        advise(replace(workload, logical_nc=3), prices=PRICES)


def test_trainium_pays_its_graph_compilation_on_the_first_run():
    workload = custom_llm(1.2e9, hidden=2048, layers=24)
    first = option(advise(workload, prices=PRICES, target="none", accelerator="neuron"), "trn1.32xlarge")
    cached = option(advise(workload, prices=PRICES, target="none", accelerator="neuron",
                           assumptions=CostAssumptions(neuron_compile_minutes=0)), "trn1.32xlarge")
    assert first.compile_hours == 1.0 and cached.compile_hours == 0
    assert first.training_hours == pytest.approx(cached.training_hours + 1.0)
    assert option(advise(workload, prices=PRICES, target="none"), "p4d.24xlarge").compile_hours == 0  # GPUs: none


def test_unmeasured_trainium_is_never_recommended_ahead_of_a_gpu_without_a_measurement():
    """Item 2: `llm-7b-full --block none` recommended trn1.32xlarge from a datasheet ratio. It is cheaper on paper;
    it ranks after every GPU until a Neuron measurement backs it."""
    workload = custom_llm(3e9, hidden=3200, layers=26)  # no preset: full training of a 3B model
    result = advise(workload, prices=PRICES, target="none", accelerator="neuron")
    trn = option(result, "trn1.32xlarge")
    assert trn.throughput_source == "unmeasured" and trn.excluded is None
    assert trn.cost < result.recommended.cost and result.recommended.accelerator == "cuda"
    assert not any(o.pareto for o in result.options if o.throughput_source == "unmeasured")
    # with a measurement on Trainium it competes on cost like any GPU
    record = MeasuredThroughput("trn1.32xlarge", "AWS Trainium", "custom", 16, trn.samples_per_second / 16, "2026-12-01")
    measured = advise(workload, prices=PRICES, target="none", accelerator="neuron", measured=[record])
    assert measured.recommended.instance_type == "trn1.32xlarge"
    assert measured.recommended.throughput_source == "measured"


def test_converted_published_rows_are_labelled_derived():
    """Item 5: the H100 llm-7b-full row is a 70B 64-GPU run converted by a rule: `derived`, not `published`."""
    _, source, _ = shape_throughput(PRESETS["llm-7b-full"], GPU_CATALOG["p5.48xlarge"], 1)
    assert source == "derived"
    _, source, _ = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["p4de.24xlarge"], 1)
    assert source == "published"  # as NVIDIA published it


def test_a_slow_network_costs_throughput_a_fast_one_does_not():
    """Item 5: g5.48xlarge (100 Gbps), p4d (400 Gbps EFA) and p5 (3,200 Gbps) got the same x0.85 at 2 and 8 nodes.
    A 13B ZeRO-3 job with a 16-sequence step moves 68 GB a step through each NIC: network-bound on g5 and on p4d
    (whose compute is 3x faster), nearly compute-bound on p5 (0.28 s of network at 0.6 against 0.27 s of compute)."""
    workload = custom_llm(13e9, global_batch_items=16)
    scaling = {}
    for name in ("g5.48xlarge", "p4d.24xlarge", "p5.48xlarge"):
        one, _, _ = shape_throughput(workload, GPU_CATALOG[name], 1)
        eight, _, note = shape_throughput(workload, GPU_CATALOG[name], 8)
        scaling[name] = eight / (8 * one)
    assert scaling["g5.48xlarge"] < scaling["p4d.24xlarge"] < 0.5 < scaling["p5.48xlarge"] == pytest.approx(0.962,
                                                                                                          abs=1e-3)
    talk = 3 * 13e9 * 2 * 7 / 8 / (100e9 / 8 * 0.6)  # 9.1 s per step on g5's 100 Gbps at 0.6
    eight_g5, _, note = shape_throughput(workload, GPU_CATALOG["g5.48xlarge"], 8)
    assert eight_g5 == pytest.approx(16 * 2048 / talk) and "network-bound" in note


def test_eight_g5_48xlarge_scale_worse_than_eight_p5_48xlarge_for_the_7b_case():
    """Issue item 6: 8 x g5.48xlarge and 8 x p5.48xlarge both scaled at 1.0 for a 7B model. The issue's case: the
    full 7B (its BF16 gradients alone 13.5 GB; ZeRO-3's gathers add twice that) at a global batch of 32 x 4,096
    tokens. A step now takes at least its communication over each instance's network: g5.48xlarge's 100 Gbps, p5's
    3,200 Gbps EFA (the EC2 accelerated-computing network specifications, gpu_catalog.NETWORK_GBPS), both at the
    assumed 0.6 efficiency."""
    from ml_platform_constructs.advice.advisor import NETWORK_EFFICIENCY, step_terms
    from ml_platform_constructs.advice.gpu_catalog import EFA_INSTANCE_TYPES, NETWORK_GBPS
    assert (NETWORK_GBPS["g5.48xlarge"], NETWORK_GBPS["p5.48xlarge"], NETWORK_EFFICIENCY) == (100, 3200, 0.6)
    assert {"g5.48xlarge", "p5.48xlarge"} <= EFA_INSTANCE_TYPES
    case = with_overrides(PRESETS["llm-7b-full"], global_batch_items=32)
    result = advise(case, prices=PRICES, target="none")  # each type at its rated network (an EFA per card)
    g5, p5 = option(result, "g5.48xlarge", 8), option(result, "p5.48xlarge", 8)
    assert g5.sharding == p5.sharding == "ZeRO-3/FSDP over 64 GPUs"
    # g5: 3 x 6.74e9 x 2 bytes x 7/8 = 35.4 GB each instance sends a step, at 100 Gbps x 0.6 = 7.5 GB/s: 4.72 s,
    # against 2.16 s of compute (32 x 4,096 tokens at 8 x one instance's rate): network-bound at 46%
    talk = 3 * 6.74e9 * 2 * 7 / 8 / (100e9 / 8 * 0.6)
    one_g5 = option(result, "g5.48xlarge").samples_per_second
    assert g5.step_gb == pytest.approx(35.385, abs=1e-3) and g5.step_communication_seconds == pytest.approx(talk)
    assert talk == pytest.approx(4.72, abs=0.01) and g5.network_gbps == 100
    assert g5.step_compute_seconds == pytest.approx(32 * 4096 / (8 * one_g5)) == pytest.approx(2.16, abs=0.01)
    assert g5.scaling_efficiency == pytest.approx(g5.step_compute_seconds / talk) == pytest.approx(0.457, abs=1e-3)
    assert g5.samples_per_second == pytest.approx(8 * one_g5 * g5.scaling_efficiency)
    # p5: its H100 row was run across 8 instances and already holds its communication; with a network term it
    # would still be compute-bound: 35.4 GB at 3,200 Gbps x 0.6 = 0.15 s against 0.30 s of compute
    one_p5 = option(result, "p5.48xlarge").samples_per_second
    assert p5.scaling_efficiency == 1.0 and p5.samples_per_second == pytest.approx(8 * one_p5)
    terms = step_terms(case, GPU_CATALOG["p5.48xlarge"], 8, p5.samples_per_second)
    assert terms.communication_seconds == pytest.approx(0.147, abs=1e-3)
    assert terms.compute_seconds == pytest.approx(0.30, abs=0.01)
    assert terms.communication_seconds < terms.compute_seconds
    # On a TrainingQueue a node has one network interface: p5's 32 cards of 100 Gbps give it one card's 100 Gbps,
    # and the same 35.4 GB a step make it network-bound (the reference run's own network no longer applies)
    queued = advise(case, prices=PRICES, target="queue")
    p5_queue, g5_queue = option(queued, "p5.48xlarge", 8), option(queued, "g5.48xlarge", 8)
    assert p5_queue.network_gbps == 100 and g5_queue.network_gbps == 100
    assert p5_queue.step_communication_seconds == pytest.approx(talk)
    assert p5_queue.scaling_efficiency == pytest.approx(p5_queue.step_compute_seconds / talk)
    assert p5_queue.scaling_efficiency < 0.5
    assert "one network card of the type's 3,200" in p5_queue.throughput_note
    assert g5_queue.scaling_efficiency == pytest.approx(g5.scaling_efficiency)
    assert terms.scaling_efficiency == 1.0
    assert g5.scaling_efficiency < 0.5 < 1.0 == p5.scaling_efficiency
    # the assumption is in the option's note (the output's "how") and in its JSON
    assert ("35.4 GB per instance over 100 Gbps EFA x 0.6 assumed efficiency = 4.72 s; overlapped (the best case), "
            "the step takes the longer: 4.72 s (network-bound: scaling 46%)") in g5.throughput_note
    entry = g5.to_json()
    assert (entry["step_gb"], entry["step_communication_seconds"], entry["scaling_efficiency"]) == (
        35.385, 4.718, 0.4569)
    # LoRA's 7B reduces only its adapters' gradients (40M parameters, FP32 under DDP): 0.28 GB a step, no loss
    lora = option(advise(with_overrides(PRESETS["llm-7b-lora"], global_batch_items=32), prices=PRICES,
                         target="queue"), "g5.48xlarge", 8)
    assert lora.sharding is None and lora.scaling_efficiency == 1.0
    assert lora.step_gb == pytest.approx(2 * PRESETS["llm-7b-lora"].trainable_parameters * 4 * 7 / 8 / 1e9)


def test_single_instance_estimates_do_not_depend_on_the_network(monkeypatch):
    """Issue item 6: the communication bound is across instances only; every one-instance estimate is what it was
    (the presets table's p4d figures: 24,043 tokens/s for llm-7b-full, 31,481 for llm-7b-lora)."""
    from ml_platform_constructs.advice import advisor
    assert shape_throughput(PRESETS["llm-7b-full"], GPU_CATALOG["p4d.24xlarge"], 1)[0] == pytest.approx(24_042.8,
                                                                                                         abs=0.1)
    assert shape_throughput(PRESETS["llm-7b-lora"], GPU_CATALOG["p4d.24xlarge"], 1)[0] == pytest.approx(31_481,
                                                                                                         abs=1)
    case = with_overrides(PRESETS["llm-7b-full"], global_batch_items=32)

    def estimates():
        single = {(w, t): shape_throughput(PRESETS[w], ACCELERATOR_CATALOG[t], 1) for w in PRESETS
                  for t in ACCELERATOR_CATALOG}
        return single, shape_throughput(case, GPU_CATALOG["g5.48xlarge"], 8)[0]

    single, eight = estimates()
    monkeypatch.setattr(advisor, "NETWORK_EFFICIENCY", 0.06)  # a network ten times slower
    slower_single, slower_eight = estimates()
    assert slower_single == single and slower_eight < eight / 5


def test_quantized_base_throughput_carries_the_stated_slowdown_unless_measured():
    """Item 4: QLoRA's dequantization had no cost at all."""
    from ml_platform_constructs.advice.advisor import QUANTIZED_BASE_SPEED
    workload = custom_llm(13e9, trainable=25e6)
    plain, _, _ = shape_throughput(workload, GPU_CATALOG["g6e.xlarge"], 1)
    qlora, _, note = shape_throughput(replace(workload, qlora=True), GPU_CATALOG["g6e.xlarge"], 1)
    assert QUANTIZED_BASE_SPEED == 0.7 and qlora == pytest.approx(plain * 0.7)
    assert "x 0.7 for QLoRA's dequantization (assumed until measured)" in note
    record = MeasuredThroughput("g6e.xlarge", "NVIDIA L40S", "custom", 1, 1234.0, "2026-12-01")
    measured, source, _ = shape_throughput(replace(workload, qlora=True), GPU_CATALOG["g6e.xlarge"], 1, [record])
    assert source == "measured" and measured == pytest.approx(1234.0)  # a measurement already holds the slowdown


def test_llm_int8_has_its_own_assumed_slowdown_below_nf4s():
    """Review of issue 29, finding 8: LLM.int8() shared QLoRA's x0.7, yet it is the slower of the two."""
    from ml_platform_constructs.advice.advisor import INT8_BASE_SPEED, QUANTIZED_BASE_SPEED
    workload = custom_llm(13e9, trainable=25e6)
    plain, _, _ = shape_throughput(workload, GPU_CATALOG["g6e.xlarge"], 1)
    int8, _, note = shape_throughput(replace(workload, int8=True), GPU_CATALOG["g6e.xlarge"], 1)
    qlora, _, _ = shape_throughput(replace(workload, qlora=True), GPU_CATALOG["g6e.xlarge"], 1)
    assert INT8_BASE_SPEED < QUANTIZED_BASE_SPEED and int8 < qlora and int8 == pytest.approx(plain * INT8_BASE_SPEED)
    assert f"x {INT8_BASE_SPEED} for LLM.int8()'s dequantization (assumed until measured)" in note


def test_the_t4_ratio_is_labelled_as_derived_from_inference():
    """Item 7: the T4's training speed came from an inference ratio without saying so."""
    assert "derived from inference" in RELATIVE_SPEED["NVIDIA T4"].uncertainty
    assert RELATIVE_SPEED["NVIDIA T4"].uncertainty == RELATIVE_SPEED["NVIDIA T4G"].uncertainty
    assert not RELATIVE_SPEED["NVIDIA L4"].uncertainty
    _, _, note = shape_throughput(tiny_model(), GPU_CATALOG["g4dn.xlarge"], 1)
    assert "the NVIDIA T4 ratio is derived from inference, not training" in note and "+/-30%" in note
    _, _, note = shape_throughput(tiny_model(), GPU_CATALOG["g6.xlarge"], 1)
    assert "derived from inference" not in note


def test_a_workload_outside_the_model_is_refused_in_one_line():
    """Item 6: an XGBoost-like job forced through the image path ranked g4dn.16xlarge at 6,400 images/s."""
    with pytest.raises(ValueError, match=r"^not modelled: tabular/GBDT .*use a CPU instance or benchmark$"):
        advise(tiny_model(workload_class="tabular"), prices=PRICES)
    with pytest.raises(ValueError, match="not modelled: diffusion models: .*benchmark first"):
        advise(tiny_model(workload_class="diffusion"), prices=PRICES)
    assert advise(tiny_model(), prices=PRICES).recommended is not None  # a convnet stays modelled


def test_the_minimize_time_trade_off_is_named_when_it_pays_much_more_for_little_time():
    """Item 8: `llm-70b-lora --qlora --minimize time` took On-Demand at 381.66 USD against ~137 on Spot for 0.1 h
    less, silently. Here: a 13B LoRA on H200s, whose On-Demand finishes minutes before Spot for several times it."""
    workload = custom_llm(13e9, trainable=25e6, samples=5e8)
    result = advise(workload, prices=PRICES, minimize="time")
    line = result.trade_off()
    best = result.recommended
    assert best.lifecycle == "on-demand" and line.startswith("trade-off (much more for little time): ")
    assert f"{best.usd:,.2f} USD against {best.usd_spot:,.2f} on {best.instance_type} x1 spot" in line
    # --minimize cost recommends the cheapest choice of all, not necessarily the one compared (review finding 8)
    cheapest = advise(workload, prices=PRICES).recommended
    assert f"--minimize cost recommends {cheapest.instance_type} x{cheapest.instances} {cheapest.lifecycle} at " \
           f"{cheapest.usd:,.2f} USD, the cheapest" in line
    # quiet where nothing cheaper exists (the cheapest objective) and where the fastest is the cheapest
    assert advise(workload, prices=PRICES).trade_off() is None
    only = {"p5en.48xlarge": GPU_CATALOG["p5en.48xlarge"]}
    assert advise(workload, prices=PRICES, minimize="time", catalog=only,
                  assumptions=CostAssumptions(spot_interruptions_per_instance_hour=0, spot_wait_minutes=0)
                  ).trade_off() is None


def test_a_job_longer_than_a_year_gets_no_config_block():
    """Item 8: `--samples 1e30` printed a 7e23-hour job and a config block."""
    huge = advise(with_overrides(PRESETS["resnet50-imagenet"], samples=1e13), prices=PRICES)
    for block in (fleet_block, queue_block):
        with pytest.raises(ValueError, match=r"the job takes [\d,]+ h on its best shape, more than a year \(8,760 h\)"):
            block(huge, "dev")
    assert fleet_block(advise(with_overrides(PRESETS["resnet50-imagenet"], samples=1e8), prices=PRICES), "dev")


def test_a_job_the_cpu_pipeline_holds_ten_times_below_the_gpu_is_cpu_bound():
    """Review of issue 29, finding 4: a tabular-sized job through the image path recommended g4dn.16xlarge at
    6,400 images/s, its 64 vCPUs' cap, with no word that the GPU buys nothing."""
    tabular = tiny_model(parameters=1e6, samples=1e8, flops_per_sample=3 * 0.06e9, activation_gib_per_item=0.001)
    result = advise(tabular, prices=PRICES)
    best = result.recommended
    assert best.accelerator_samples_per_second >= 10 * best.samples_per_second
    assert result.cpu_bound() == (
        f"CPU-bound: on {best.instance_type} x1 the CPU input pipeline caps the job at {best.samples_per_second:,.0f} "
        f"images/s, {best.accelerator_samples_per_second / best.samples_per_second:,.0f}x below the accelerators' "
        f"{best.accelerator_samples_per_second:,.0f}/s: the GPU buys nothing; use a CPU instance or benchmark "
        "(--gpu-decode if your input pipeline runs on the GPU)")
    # quiet on ResNet-50 (capped on small instances, under 10x) and where the GPU decodes
    assert advise(PRESETS["resnet50-imagenet"], prices=PRICES).cpu_bound() is None
    assert advise(replace(tabular, gpu_decode=True), prices=PRICES).cpu_bound() is None


def test_the_64_gpu_runs_inter_node_overhead_is_stated_where_it_is_inherited():
    """Review of issue 29, finding 6: the 64-GPU H100 row's per-GPU rate holds multi-node overhead, which every
    estimate from it and every smaller H100 shape inherited silently."""
    full = PRESETS["llm-7b-full"]
    _, _, note = shape_throughput(full, GPU_CATALOG["p5.48xlarge"], 1)
    assert ("inherited: the 64-GPU reference run's per-GPU rate holds its inter-node communication across 8 "
            "instances, which a shape of fewer GPUs keeps (pessimistic for one instance)") in note
    _, source, note = shape_throughput(full, GPU_CATALOG["p5en.48xlarge"], 1)  # H200: estimated from the H100 row
    assert source == "estimated" and "which this GPU's estimate keeps" in note
    assert "inherited overhead: the per-GPU rate holds the 64-GPU run's inter-node communication" in next(
        row.rule for row in PUBLISHED if row.workload == "llm-7b-full")  # the derived rule says so too
    # the run's own size holds its communication as measured: nothing inherited, nothing added
    _, _, note = shape_throughput(full, GPU_CATALOG["p5.48xlarge"], 8)
    assert "inherited: " not in note and "already holds" in note
    # a single-instance reference row says nothing
    _, _, note = shape_throughput(PRESETS["bert-large-finetune"], GPU_CATALOG["g6e.xlarge"], 1)
    assert "inherited: " not in note
