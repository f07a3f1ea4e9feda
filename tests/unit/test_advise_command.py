"""./platform advise (ops/advise.py): its input checks, one-line errors, measured records, output and config block."""

import json
import re
import tomllib

import pytest

from ml_platform_constructs.advice.advisor import PRESETS, advise
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ops import advise as advise_command
from stacks import config as platform_config

TRANSFORMER = ["custom", "--params", "1.3e9", "--tokens", "1e9", "--seq-len", "2048", "--hidden", "2048", "--layers", "24"]


def run(capsys, *argv):
    assert advise_command.main(list(argv)) == 0
    return capsys.readouterr().out


def test_cli_json_output(capsys):
    document = json.loads(run(capsys, "bert-large-finetune", "--json", "--deadline-hours", "10"))
    assert document["schema_version"] == 4 and document["region"] == "us-east-1" and document["target"] == "fleet"
    assert document["workload"]["deadline_hours"] == 10 and document["recommended"]["meets_deadline"]
    assert document["recommended"]["on_demand_hourly"] > 0 and document["assumptions"]["spot_life_hours"] == 24


def test_the_output_says_which_price_it_uses(capsys):
    """One price (issue item 3): the output names the Region's table, its date and the Spot rule; --all its source;
    the breakdown shows the Advisor's 30-day average saving only as that, beside the price used."""
    out = run(capsys, "bert-large-finetune")
    assert "\nPrices: us-east-1 (2026-11-29); Spot at the family's conservative discount (--all: source)\n" in out
    assert "on Spot (51% off, interruptions >20%)" in " ".join(line.strip() for line in out.splitlines())
    everything = " ".join(line.strip() for line in run(capsys, "bert-large-finetune", "--all").splitlines())
    assert "- prices: us-east-1 (2026-11-29): AWS Price List bulk data" in everything
    assert ("Spot price: 51% below On-Demand, the table's conservative g5 discount (the budget guard's price); the "
            "Spot Instance Advisor's 30-day average saving, 59%, is shown only, never the price") in everything
    document = json.loads(run(capsys, "bert-large-finetune", "--json"))
    best = document["recommended"]
    assert (best["instance_type"], best["spot_savings"], best["advisor_savings"]) == ("g5.xlarge", 0.51, 0.59)
    assert best["spot_hourly"] == round(load_prices("us-east-1")["on_demand_hourly"]["g5.xlarge"] * 0.49, 4)


def test_the_multi_node_communication_term_and_its_assumption_are_printed(capsys):
    """Issue item 6: a multi-node shape's how gives its step's compute and communication, the bandwidth and the
    assumed efficiency; --all states the rule; --json carries the terms; --wide a scaling column."""
    out = run(capsys, "custom", *TRANSFORMER[1:], "--params", "6.74e9", "--global-batch", "16", "--block", "queue",
              "--deadline-hours", "4", "--json")
    multi = [o for o in json.loads(out)["options"] if o["instances"] > 1 and o["step_communication_seconds"]]
    assert multi and all(o["scaling_efficiency"] == pytest.approx(
        min(1.0, o["step_compute_seconds"] / o["step_communication_seconds"]), abs=2e-3) for o in multi)
    assert any(o["scaling_efficiency"] < 0.7 for o in multi)  # some shape is network-bound
    assert all("x 0.6 assumed efficiency" in o["throughput_note"] for o in multi)
    assert json.loads(out)["assumptions"]["network_efficiency"] == 0.6
    everything = " ".join(line.strip() for line in run(capsys, "llm-7b-full", "--block", "queue", "--all").splitlines())
    assert ("over its network bandwidth (EFA where the type has it, gpu_catalog) x 0.6 (assumed: NCCL over EFA"
            in everything)
    wide = run(capsys, "llm-7b-full", "--block", "queue", "--wide")
    assert "scaling  sharding" in wide


def test_cli_text_lists_exclusions_frontier_and_ends_with_a_block(capsys):
    out = run(capsys, "llm-7b-full", "--all")
    assert "Decision tree" in out and "memory (" in out and "Recommended:" in out and "Cost/time frontier" in out
    assert out.rstrip().splitlines()[-1].strip().startswith("scale_to_zero_after_minutes")


def test_cli_block_is_named_apart_from_the_environments_own_fleets_and_queues(capsys):
    out = run(capsys, "bert-large-finetune")
    block = out[out.index("[[environments.dev.fleets]]"):]
    block = "\n".join(line.strip() for line in block.splitlines())
    assert 'name = "bert-large-finetune"' in block
    raw = tomllib.loads(platform_config.DEFAULT_CONFIG.read_text())
    raw["environments"]["dev"]["fleets"] += tomllib.loads(block)["environments"]["dev"]["fleets"]
    names = [f.name for f in platform_config.parse(raw).environments["dev"].fleets]
    assert names == ["training", "bert-large-finetune"]  # dev's own "training" fleet stays as it is


def test_block_name_skips_names_in_use():
    env = platform_config.load().environments["dev"]
    workload = PRESETS["bert-large-finetune"]
    taken = type(env)(**{**env.__dict__, "fleets": [*env.fleets, type(env.fleets[0])(
        **{**env.fleets[0].__dict__, "name": "bert-large-finetune"})]})
    assert advise_command.block_name(workload, env) == "bert-large-finetune"
    assert advise_command.block_name(workload, taken) == "bert-large-finetune-2"


def test_cli_queue_block_and_none_target(capsys):
    out = run(capsys, "bert-large-finetune", "--block", "queue")
    assert "[[environments.dev.queues]]" in out and 'name = "bert-large-finetune"' in out
    out = run(capsys, "bert-large-finetune", "--block", "none")
    assert "No config block (--block none)" in out
    options = json.loads(run(capsys, "bert-large-finetune", "--block", "none", "--json"))["options"]
    eligible = [o for o in options if o["excluded"] is None]
    trainium = [i for i, o in enumerate(eligible) if o["accelerator"] == "neuron"]
    assert trainium and min(trainium) > max(i for i, o in enumerate(eligible) if o["accelerator"] == "cuda")


def test_cli_custom_transformer(capsys):
    document = json.loads(run(capsys, *TRANSFORMER, "--vocab", "50000", "--json"))
    assert document["workload"]["flops_per_sample"] == pytest.approx(8 * 1.3e9)
    assert document["workload"]["logits_gib_per_item"] == pytest.approx(2048 * 50000 * 8 / 2 ** 30, abs=1e-3)
    assert all(o["throughput_source"] == ("unmeasured" if o["accelerator"] == "neuron" else "estimated")
               for o in document["options"])


def test_cli_custom_qlora_and_gpu_decode(capsys):
    document = json.loads(run(capsys, *TRANSFORMER, "--lora-params", "5e6", "--qlora", "--json"))
    assert document["workload"]["qlora"] and document["workload"]["trainable_parameters"] == 5e6
    document = json.loads(run(capsys, "resnet50-imagenet", "--gpu-decode", "--json"))
    assert document["workload"]["gpu_decode"]
    assert not any("capped" in o["throughput_note"] for o in document["options"])


@pytest.mark.parametrize("argv,message", [
    (["custom", "--params", "-5", *TRANSFORMER[3:]], "--params=-5.0: must be a finite number above 0"),
    ([*TRANSFORMER[:6], "0", *TRANSFORMER[7:]], "--seq-len=0: must be 1 or more"),
    (["resnet50-imagenet", "--samples", "nan"], "--samples=nan: must be a finite number above 0"),
    (["resnet50-imagenet", "--deadline-hours", "inf"], "--deadline-hours=inf: must be a finite number above 0"),
    (["resnet50-imagenet", "--value-of-hour", "-1"], "--value-of-hour=-1.0: must be a finite number, 0 or more"),
    ([*TRANSFORMER, "--lora-params", "2e9"], "--lora-params=2e+09 is more than --params=1.3e+09"),
    (["bert-large-finetune", "--env", "nosuch"],
     "--env nosuch: no such environment in config/environments.toml (known: dev, staging, prod)"),
    (["resnet50-imagenet", "--params", "1e9", "--layers", "4"],
     "--layers, --params: resnet50-imagenet is a preset with its own model; describe your own with `custom`"),
    (["llm-7b-full", "--qlora"], "--qlora: llm-7b-full trains every parameter"),
    (["llm-7b-lora", "--gpu-decode"], "--gpu-decode: llm-7b-lora has no CPU decoding step"),
    (["custom", "--params", "1e7", "--images", "1e6", "--forward-gflops", "3.6", "--hidden", "4"],
     "--hidden: not read for an image model (--images)"),
    (["custom", "--params", "1e7", "--images", "1e6"], "--forward-gflops (GFLOPs of one forward pass per image)"),
    (["custom", "--params", "1e9", "--tokens", "1e9"], "--seq-len, --hidden, --layers required"),
    ([*TRANSFORMER, "--qlora"], "--qlora: needs --lora-params"),
    ([*TRANSFORMER, "--samples", "1e6"], "--samples: a custom workload counts its work with --tokens or --images"),
    ([], "a workload is required"),
    (["resnet50-imagenet", "--arm64-dlami"], "--arm64-dlami: only with --block none"),
    (["bert-large-finetune", "--measured", "no/such/records.json"], "--measured no/such/records.json: no such file"),
    # issue 29: workloads outside the model, absurd figures, image models described in full
    (["tabular"], "tabular: not modelled: tabular/GBDT (XGBoost, LightGBM, CatBoost)"),
    (["diffusion"], "diffusion: not modelled: diffusion models: no cited training measurement"),
    (["custom", "--params", "1e5", "--images", "1e8", "--forward-gflops", "0.001", "--activation-gib-per-image",
      "0.001"], "--forward-gflops=0.001: not modelled: under 0.05 GFLOPs an image"),
    (["custom", "--params", "2.6e9", "--images", "2e6", "--forward-gflops", "60"],
     "custom image model: --activation-gib-per-image is required (no default"),
    # review of issue 29, finding 3: a diffusion-sized model refused by its figures, not only by name
    (["custom", "--params", "2.6e9", "--images", "2e6", "--forward-gflops", "12000", "--activation-gib-per-image", "2"],
     "--forward-gflops=12000: not modelled: above 100 GFLOPs an image (12x ResNet-50's 8.2, whose measured speeds "
     "the convnet ratios are) is a diffusion U-Net or a large vision transformer, which no cited measurement here "
     "describes: benchmark first"),
    (["custom", "--params", "2.6e9", "--images", "2e6", "--forward-gflops", "101", "--activation-gib-per-image", "2"],
     "--forward-gflops=101: not modelled: above 100 GFLOPs"),
    # review of issue 29, finding 4: a tabular-sized job through the image path is CPU-bound, refused
    (["custom", "--params", "1e6", "--images", "1e8", "--forward-gflops", "0.06", "--activation-gib-per-image",
      "0.001"], "CPU-bound: on "),
    (["resnet50-imagenet", "--samples", "1e30"],
     "--samples=1e+30: out of range: at most 100,000,000,000,000 (100 trillion, 7x Llama 3's 15T training tokens)"),
    ([*TRANSFORMER[:4], "1e20", *TRANSFORMER[5:]], "--tokens=1e+20: out of range: at most 100,000,000,000,000"),
    (["custom", "--params", "1e9", "--images", "1e6", "--forward-gflops", "3.6", "--activation-gib-per-image", "0.1",
      "--frozen-params", "1e9"], "--frozen-params=1e+09: at least --params=1e+09; something must train"),
    (["custom", "--params", "1e9", "--images", "1e6", "--forward-gflops", "3.6", "--activation-gib-per-image", "0.1",
      "--frozen-params", "5e8", "--lora-params", "1e6"], "--frozen-params, --lora-params: LoRA freezes the whole base"),
    ([*TRANSFORMER, "--frozen-params", "1e8"], "--frozen-params: not read for a transformer (--tokens)"),
    (["llm-7b-lora", "--qlora", "--int8"], "--qlora, --int8: one base model"),
    (["llm-7b-full", "--int8"], "--int8: llm-7b-full trains every parameter"),
])
def test_bad_input_is_one_line_and_exits_non_zero(argv, message, capsys):
    """A bad argument (or two that do not go together) is the parser's one line on stderr, exit 2; what cannot be
    modelled is one line, exit 1."""
    with pytest.raises(SystemExit) as raised:
        advise_command.main(argv)
    if raised.value.code == 2:
        text = capsys.readouterr().err
        assert text.startswith("error: ./platform advise: ") and text.count("\n") == 1
    else:
        text = str(raised.value.code)
        assert text.startswith("error: ") and "\n" not in text  # not modelled, CPU-bound, a missing file
    assert message in text


def test_measured_records_from_a_file(tmp_path, capsys):
    records = tmp_path / "bench.jsonl"
    records.write_text("\n".join(json.dumps({
        "instance_type": "g6.xlarge", "gpu_model": "NVIDIA L4", "workload": "bert-large-finetune", "gpus": 1,
        "samples_per_second_per_gpu": rate, "measured_at": at}) for rate, at in ((30.0, "2026-12-01T10:00:00Z"),
                                                                               (31.0, "2026-12-02T10:00:00Z"))) + "\n")
    out = run(capsys, "bert-large-finetune", "--measured", str(records), "--json")
    document = json.loads(out[out.index("{"):])
    l4 = next(o for o in document["options"] if o["instance_type"] == "g6.xlarge")
    assert l4["throughput_source"] == "measured" and "31.0/s per GPU on g6.xlarge" in l4["throughput_note"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_type": "g6.xlarge"}\n')
    with pytest.raises(SystemExit, match=r"record 1 lacks or mangles 'gpu_model'"):
        advise_command.main(["bert-large-finetune", "--measured", str(bad)])


def test_measured_env_without_credentials_is_the_shared_check_not_a_traceback(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(SystemExit) as raised:
        advise_command.main(["bert-large-finetune", "--measured", "dev"])
    assert str(raised.value.code).startswith("error: no AWS credentials found for dev (account 111111111111")


def test_every_flag_a_message_names_exists(capsys):
    """Hints such as "advise again without arm64 types" must name flags a user can type."""
    with pytest.raises(SystemExit):
        advise_command.main(["--help"])
    help_text = capsys.readouterr().out
    prices = load_prices("us-east-1")
    texts = [text for _, text in advise_command.RULES]
    for workload in PRESETS.values():
        for target in ("fleet", "queue", "none"):
            result = advise(workload, prices=prices, target=target)
            texts += [o.excluded for o in result.options if o.excluded]
            texts += [o.spot_note or "" for o in result.options] + [o.throughput_note for o in result.options]
    texts.append(run(capsys, "resnet50-imagenet"))
    flags = {flag for text in texts for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text)}
    assert flags and {flag for flag in flags if flag not in help_text} == set()


def test_forward_gflops_help_states_its_unit(capsys):
    with pytest.raises(SystemExit):
        advise_command.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "GFLOPs of one forward pass per image, a multiply-add counting 2 (ResNet-50 at 224x224: 8.2, ResNet-18: 3.6)" in help_text
    assert "--forward-gflops 3.6" in advise_command.__doc__


# --- issue 29 -----------------------------------------------------------------------------------------------------

def test_a_figure_that_is_not_a_number_is_one_line_without_the_usage(capsys):
    with pytest.raises(SystemExit):
        advise_command.main(["resnet50-imagenet", "--samples", "abc"])
    err = capsys.readouterr().err
    assert err == ("error: ./platform advise: argument --samples: invalid float value: 'abc' (usage: ./platform "
                   "advise --help)\n")


def test_image_models_take_lora_and_frozen_parameters(capsys):
    """Item 3: --lora-params was refused for image models and frozen encoders could not be described."""
    image = ["custom", "--params", "2.6e9", "--images", "2e5", "--forward-gflops", "100",
             "--activation-gib-per-image", "6"]
    lora = json.loads(run(capsys, *image, "--lora-params", "2e7", "--json"))["workload"]
    assert lora["trainable_parameters"] == 2e7 and lora["flops_per_sample"] == pytest.approx(2 * 100e9)
    assert lora["model_state_gib"] == pytest.approx((2e7 * 16 + (2.6e9 - 2e7) * 2) / 2 ** 30, abs=1e-3)
    frozen = json.loads(run(capsys, *image, "--frozen-params", "8e8", "--json"))["workload"]
    assert frozen["trainable_parameters"] == pytest.approx(1.8e9)
    assert frozen["flops_per_sample"] == pytest.approx(3 * 100e9)
    assert frozen["activation_gib_per_item"] == 6  # as given, never a silent 0.04


SEVEN = [  # the workloads of issue 29's "Why" that the advisor answers (tabular and SDXL-sized ones are refused;
    # a ViT-L-sized image model stands in for the image case)
    ["llm-7b-lora", "--qlora", "--block", "none"],
    ["llm-70b-lora", "--qlora"],
    ["llm-7b-full", "--block", "none"],
    ["custom", "--params", "3e8", "--images", "2e6", "--forward-gflops", "100", "--activation-gib-per-image", "0.5"],
    ["llm-7b-full", "--block", "queue"],
    ["resnet50-imagenet"],
    ["llm-70b-lora", "--qlora", "--minimize", "time"],
]


@pytest.mark.parametrize("argv", SEVEN, ids=lambda argv: " ".join(argv[:3]))
def test_output_fits_100_columns_unless_wide(capsys, argv):
    """Item 8: advise printed 74 lines, some 561 characters wide. A queue block's image URI is the one line TOML
    cannot fold."""
    out = run(capsys, *argv)
    wide = [line for line in out.splitlines() if len(line) > 100 and not line.strip().startswith("image = ")]
    assert wide == [] and len(out.splitlines()) <= 70
    assert max(len(line) for line in run(capsys, *argv, "--wide").splitlines()) > 100


def test_the_recommendation_line_states_the_qlora_slowdown(capsys):
    """Item 4: the slowdown is on the recommendation line itself, not only in the notes."""
    out = run(capsys, "llm-70b-lora", "--qlora")
    line = out.split("Recommended:")[1].split("\n  how:")[0].replace("\n  ", " ")  # folded at 100 columns
    assert "x0.7 for QLoRA's dequantization, assumed until measured" in line
    assert "dequantization" not in run(capsys, "llm-70b-lora").split("Recommended:")[1].split("\n  how:")[0]


def test_minimize_time_names_what_it_pays_for_the_time(capsys):
    out = run(capsys, "llm-70b-lora", "--qlora", "--minimize", "time")
    assert "Spot loses on time: " in out and "trade-off (much more for little time): " in out
    assert "trade-off" not in run(capsys, "llm-70b-lora", "--qlora")


def test_image_models_between_the_bounds_and_off_the_cpu_cap_still_run(capsys):
    """The two refusals stay quiet on legitimate work: ResNet-50-sized at the 100 GFLOPs bound, and a small network
    whose CPU cap binds less than 10x (ResNet-18-sized on ImageNet)."""
    out = run(capsys, "custom", "--params", "3e8", "--images", "2e6", "--forward-gflops", "100",
              "--activation-gib-per-image", "0.5")
    assert "Recommended:" in out
    out = run(capsys, "custom", "--params", "11.7e6", "--images", "12e6", "--forward-gflops", "3.6",
              "--activation-gib-per-image", "0.02")
    assert "Recommended:" in out and "capped at" in out  # capped, under 10x: ranked
    assert "Recommended:" in run(capsys, "resnet50-imagenet")
