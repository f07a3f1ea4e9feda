"""The lifecycle cost (ops/tco.py) on hand-checked examples, over the dev environment's snapshot templates."""

import json
import os
import re
from pathlib import Path

import pytest

from ml_platform_constructs import GPU_CATALOG
from ml_platform_constructs.advice.advisor import PRESETS, advise
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ops import tco
from ops.advise import add_workload_arguments, workload_from_args

SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshot" / "__snapshots__" / "test_snapshots"
PRICES = load_prices("us-east-1")


@pytest.fixture(scope="module")
def dev_templates():
    return [json.loads((SNAPSHOTS / name).read_text()) for name in sorted(os.listdir(SNAPSHOTS))
            if name.startswith("test_stack_snapshot[dev")]


RULE = {"Prefix": "logs/", "Transitions": [{"TransitionInDays": 30, "StorageClass": "GLACIER"}], "ExpirationInDays": 365}


@pytest.mark.parametrize("age,storage_class", [(0, "STANDARD"), (29.9, "STANDARD"), (30, "GLACIER"), (364, "GLACIER"),
                                               (365, None)])
def test_storage_class_by_age(age, storage_class):
    assert tco.storage_class_at(RULE, age) == storage_class


def test_storage_by_month_ages_each_cohort_through_the_rules():
    prices = {"s3_gb_month": {"STANDARD": 0.02, "GLACIER": 0.004}}
    props = {"LifecycleConfiguration": {"Rules": [{**RULE, "Prefix": prefix} for prefix in ("datasets/", "checkpoints/",
                                                                                            "logs/")]}}
    months = tco.storage_by_month(props, tco.TcoInputs(months=3, storage_gb=1000, ingest_gb_month=100), prices)
    # month 1: 1000 GB at 15 days, Standard: 20 USD
    assert months[0] == pytest.approx({"STANDARD": 20.0})
    # month 2: the first 1000 GB at 45.6 days (Glacier, 4 USD), 100 GB new at 15 days (Standard, 2 USD)
    assert months[1] == pytest.approx({"GLACIER": 4.0, "STANDARD": 2.0})
    # month 3: 1100 GB in Glacier (4.4 USD), 100 GB new (2 USD)
    assert months[2] == pytest.approx({"GLACIER": 4.4, "STANDARD": 2.0})


def test_scheduled_functions_from_the_templates(dev_templates):
    functions = sorted(tco.scheduled_functions(dev_templates))
    # budget guard every 15 minutes at 256 MB, the classifier's drift and quality checks hourly at 1024 MB, the
    # training queue's stall watcher every 5 minutes at 128 MB
    assert [(name.rstrip("0123456789ABCDEF"), runs, memory) for name, runs, memory in functions] == [
        ("BudgetStopFunction", 730 * 4, 0.25), ("classifierDriftCheck", 730, 1.0), ("classifierQuality", 730, 1.0),
        ("trainingQueueStallWatcher", 730 * 12, 0.125)]


def test_dev_tco_hand_checked(dev_templates):
    inputs = tco.TcoInputs(months=2, storage_gb=1000, ingest_gb_month=0, capture_gb=0, jobs_per_month=10,
                           job_usd=30.0, job_hours=4.0, log_gb_month=5, custom_metrics=50)
    months = tco.tco(dev_templates, "dev", "us-east-1", inputs, PRICES)
    first = months[0]
    assert first.groups["training"] == 300.0
    assert first.groups["inference"] == pytest.approx(0.115 * 730)  # one ml.m5.large, always on
    # 13 interface endpoints x 2 AZs, and one NAT gateway (the serverless MLflow app is reached through it)
    assert first.groups["network"] == pytest.approx(26 * 0.01 * 730 + 0.045 * 730)
    runs = 2920 * 0.25 + 2 * 730 * 1.0 + 8760 * 0.125  # GB per second of run time
    functions = (2920 + 2 * 730 + 8760) * 0.20 / 1e6 + runs * 30 * 0.0000166667
    alarms = sum(1 for t in dev_templates for r in t["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm")
    dashboards = sum(1 for t in dev_templates for r in t["Resources"].values()
                     if r["Type"] == "AWS::CloudWatch::Dashboard")
    monitoring = (functions + 50 * 0.30 + 10 * 3 * 4.0 * 0.30 / 730 + alarms * 0.1 + dashboards * 3.0
                  + 5 * 0.50 + 5 * 0.03)
    assert first.groups["monitoring"] == pytest.approx(monitoring)
    assert months[1].groups["monitoring"] == pytest.approx(monitoring + 5 * 0.03)  # a second month of logs kept
    # at 15 days: datasets/ (600 GB) past its day-7 move to Intelligent-Tiering, checkpoints/ and logs/ (400 GB)
    # still in Standard
    assert first.storage_by_class == pytest.approx({"INTELLIGENT_TIERING": 600 * 0.023, "STANDARD": 400 * 0.023})
    # month 2 (45.6 days): datasets in Intelligent-Tiering, checkpoints in Glacier IR, logs in Glacier
    assert months[1].storage_by_class == pytest.approx({"INTELLIGENT_TIERING": 600 * 0.023, "GLACIER_IR": 300 * 0.004,
                                                        "GLACIER": 100 * 0.0036})
    assert first.total == pytest.approx(first.storage + sum(first.groups.values()))


def write_assembly(root, name, templates):
    """A cloud assembly as cdk synth writes one: the top manifest, the stage's directory, its stacks' templates."""
    stage = root / f"assembly-{name}"
    stage.mkdir()
    artifacts = {}
    for index, template in enumerate(templates):
        (stage / f"stack{index}.template.json").write_text(json.dumps(template))
        artifacts[f"stack{index}"] = {"type": "aws:cloudformation:stack", "environment": "aws://111111111111/us-east-1",
                                      "properties": {"templateFile": f"stack{index}.template.json"}}
    (stage / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    (root / "manifest.json").write_text(json.dumps({"artifacts": {f"assembly-{name}": {
        "type": "cdk:cloud-assembly", "properties": {"directoryName": f"assembly-{name}"}}}}))
    return root


@pytest.fixture
def assembly(tmp_path, dev_templates):
    return write_assembly(tmp_path, "dev", dev_templates)


def test_main_prints_months_and_per_model(assembly, capsys):
    assert tco.main(["dev", "--assembly", str(assembly), "--months", "3", "--job-usd", "25", "--models", "2", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "== TCO dev (us-east-1), 3 months" in out and "per model per month (2 model(s))" in out
    assert "20 jobs per month x 25.00 USD (given)" in out
    with pytest.raises(SystemExit, match="error: prod is not in"):
        tco.main(["prod", "--assembly", str(assembly)])


def test_main_prices_a_custom_workload_as_advise_does(assembly, dev_templates, capsys):
    argv = ["--workload", "custom", "--params", "1.3e9", "--tokens", "1e8", "--seq-len", "2048", "--hidden", "2048",
            "--layers", "24", "--lora-params", "5e6"]  # full training of 1.3e9 fits none of dev's queue types
    assert tco.main(["dev", "--assembly", str(assembly), "--months", "1", "--wide", *argv]) == 0  # unfolded
    out = capsys.readouterr().out
    types = tco.queue_types(dev_templates)
    best = advise(workload_from_args(_namespace(argv)), prices=PRICES, target="queue",
                  catalog={t: GPU_CATALOG[t] for t in types}).recommended
    assert (f"20 jobs per month x {best.usd:,.2f} USD (custom on {best.instance_type} x{best.instances}, "
            f"{best.lifecycle}, per ./platform advise --block queue among the queues' types "
            f"({', '.join(types)}))") in out


def _namespace(argv):
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload")
    add_workload_arguments(parser, positional=False)
    return parser.parse_args(argv)


def test_capacity_warning_when_the_jobs_need_more_instances_than_the_queue_allows(dev_templates):
    best = advise(PRESETS["bert-large-finetune"], prices=PRICES, target="queue").recommended
    per_job = GPU_CATALOG[best.instance_type].vcpus
    allowed = 32 // per_job  # dev's queue: max_vcpus 32 (config/environments.toml)
    hours = best.expected_hours
    enough = allowed * 730 / hours  # jobs a month that keep `allowed` instances busy on average
    assert tco.queue_capacity(dev_templates, best, enough * 0.9, hours, PRICES) is None
    line = tco.queue_capacity(dev_templates, best, enough * 1.2, hours, PRICES)
    assert line.startswith("capacity: ") and f"allow {allowed} at {per_job} vCPUs each" in line
    assert "training (Spot, 32 vCPUs)" in line


def test_capacity_warning_when_one_job_exceeds_the_queue(dev_templates):
    big = advise(PRESETS["llm-7b-full"], prices=PRICES, target="queue").recommended  # an 8-GPU instance
    line = tco.queue_capacity(dev_templates, big, 1, big.expected_hours, PRICES)
    assert f"needs {GPU_CATALOG[big.instance_type].vcpus} vCPUs, more than the single-instance queues allow" in line


def test_capacity_warning_when_the_queue_does_not_list_the_type(dev_templates):
    l40s = advise(PRESETS["bert-large-finetune"], prices=PRICES, target="queue",
                  catalog={"g6e.xlarge": GPU_CATALOG["g6e.xlarge"]}).recommended
    line = tco.queue_capacity(dev_templates, l40s, 1, l40s.expected_hours, PRICES)
    assert "do not list g6e.xlarge" in line


def test_main_says_when_no_queue_type_runs_the_job(assembly, capsys):
    """0.7 priced these jobs at 0 with a warning; the TCO of jobs that cannot run is refused, saying why."""
    with pytest.raises(SystemExit) as raised:
        tco.main(["dev", "--assembly", str(assembly), "--months", "1", "--workload", "llm-7b-full",
                  "--jobs-per-month", "5"])
    assert str(raised.value.code).startswith("error: no type dev's queues list (g5.2xlarge")
    assert "the closest, g5.xlarge x1 (1 GPU), is excluded for memory: needs 102.9 GiB" in str(raised.value.code)


def test_a_job_is_priced_on_the_queues_own_types_and_the_gap_to_cost_is_explained(assembly, dev_templates, capsys):
    """Issue 29, item 8: tco priced training on a shape dev's queue cannot run, and its month disagreed with
    ./platform cost without a word. Now the job runs on the queue's own types (no capacity warning on a preset the
    queue runs) and a line names both figures."""
    types = tco.queue_types(dev_templates)
    assert types and all(t.startswith(("g5.", "g6.")) for t in types)  # dev's queue: small G types
    assert tco.main(["dev", "--assembly", str(assembly), "--months", "1", "--workload", "bert-large-finetune",
                     "--wide"]) == 0
    out = capsys.readouterr().out
    best = advise(PRESETS["bert-large-finetune"], prices=PRICES, target="queue",
                  catalog={t: GPU_CATALOG[t] for t in types}).recommended
    assert best.instance_type in types and f"on {best.instance_type} x1" in out and "! capacity" not in out
    assert "training differs from ./platform cost dev: cost prices the fleets and queues at max size 25% of the " \
           "month (" in out and "tco prices 20 jobs a month (" in out


@pytest.mark.parametrize("argv,message", [
    (["--months", "0"], "argument --months: 0 is out of range: months of the lifecycle, from 1 to 120 (e.g. --months "
                        "12)"),
    (["--jobs-per-month", "nan"], "argument --jobs-per-month: nan is out of range: training jobs a month, from 0 to "
                                  "100,000 (e.g. --jobs-per-month 20)"),
    (["--job-usd", "-3"], "argument --job-usd: -3 is out of range: USD per training job, from 0 to 10,000,000 (e.g. "
                          "--job-usd 25)"),
    (["--custom-metrics", "-1"], "argument --custom-metrics: -1 is out of range: custom metrics sent all month, from 0 "
                                 "to 1,000,000 (e.g. --custom-metrics 50)"),
    (["--job-usd", "5", "--job-hours", "-2"], "argument --job-hours: -2 is out of range: hours per job"),
    (["--models", "1e9"], "argument --models: '1e9' is not a whole number: models the monthly cost is shared by"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_nonsense_figure_is_one_line_with_its_range_before_any_synth(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(tco, "synth", lambda *a, **k: pytest.fail("synthesized before the arguments were checked"))
    with pytest.raises(SystemExit) as raised:
        tco.main(["dev", "--synth", *argv])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: ./platform tco: {message}") and err.count("\n") == 1, err


@pytest.mark.parametrize("argv,message", [
    (["--workload", "custom"], "custom: --params (the model's parameters) is required"),
    (["--workload", "llm-7b-full", "--qlora"], "--qlora: llm-7b-full trains every parameter"),
    (["--job-usd", "20", "--params", "1e9"], "--params: not read with --job-usd"),
    (["--job-hours", "3"], "--job-hours: only with --job-usd"),
])
def test_bad_input_is_one_line_with_exit_2(assembly, argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        tco.main(["dev", "--assembly", str(assembly), *argv])
    err = capsys.readouterr().err
    assert raised.value.code == 2 and err.startswith("error: ./platform tco: ") and message in err
    assert err.endswith(" (usage: ./platform tco --help)\n") and err.count("\n") == 1


def test_the_output_fits_100_columns_and_the_wide_table_is_behind_wide(assembly, capsys):
    """Review of issue 29, finding 8: tco dev's monthly table was about 170 columns wide."""
    assert tco.main(["dev", "--assembly", str(assembly), "--months", "3"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    header = next(line for line in out.splitlines() if line.strip().startswith("month ") and "total" in line)
    assert header.split()[:2] == ["month", "S3"] and "S3 STANDARD" not in out.split("month 3:")[0]
    assert tco.main(["dev", "--assembly", str(assembly), "--months", "3", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "S3 STANDARD" in wide and max(len(line) for line in wide.splitlines()) > 100
    # both tables carry the same monthly totals
    totals = [line.split()[-1] for line in out.splitlines() if re.match(r"\s+[123] ", line)]
    assert totals == [line.split()[-1] for line in wide.splitlines() if re.match(r"\s+[123] ", line)] and totals


def test_a_cpu_bound_job_is_refused_as_advise_refuses_it(assembly):
    """Review of issue 29, finding 4: tco prices jobs through the advisor, so it refuses a CPU-bound one too."""
    argv = ["--workload", "custom", "--params", "1e6", "--images", "1e8", "--forward-gflops", "0.06",
            "--activation-gib-per-image", "0.001"]
    with pytest.raises(SystemExit) as raised:
        tco.main(["dev", "--assembly", str(assembly), "--months", "1", *argv])
    assert str(raised.value.code).startswith("error: CPU-bound: on ")


# --- issue 37 item 2: a read-only option never writes; a job no queue type runs is said, not priced at 0 ----------

@pytest.mark.parametrize("kind", ["missing", "empty directory", "not an assembly"])
def test_an_assembly_that_is_not_there_is_one_line_and_nothing_is_synthesized_or_created(kind, tmp_path,
                                                                                          monkeypatch):
    """0.7: ./platform tco dev --assembly /nonexistent/asm created the directory and synthesized into it."""
    monkeypatch.setattr(tco, "synth", lambda *a, **k: pytest.fail("synthesized into a directory given to be read"))
    target = tmp_path / "asm"
    if kind != "missing":
        target.mkdir()
    if kind == "not an assembly":
        (target / "manifest.json").write_text("{")
    with pytest.raises(SystemExit) as raised:
        tco.main(["dev", "--synth", "--assembly", str(target), "--job-usd", "10"])
    message = str(raised.value.code)
    assert message.startswith("error: ") and "\n" not in message
    assert {"missing": "no such directory; give a cdk.out directory (./platform synth dev writes one)",
            "empty directory": "no synthesized app there (no manifest.json)",
            "not an assembly": "is not a synthesized app this command reads (JSONDecodeError"}[kind] in message
    assert target.exists() == (kind != "missing") and sorted(p.name for p in tmp_path.iterdir()) == (
        [] if kind == "missing" else ["asm"])


def test_without_assembly_the_platform_command_synthesizes_into_cdk_out(assembly, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(tco, "synth", lambda outdir, **kwargs: written.append((outdir, kwargs)))
    monkeypatch.setattr(tco, "SYNTH_OUT", assembly)
    assert tco.main(["dev", "--synth", "--months", "1", "--job-usd", "10"]) == 0
    assert written == [(assembly, {"environments": "dev"})]


def test_a_workload_no_queue_type_runs_is_one_line_with_the_advisors_reason_not_a_training_line_of_0(tmp_path,
                                                                                                     capsys):
    """0.7: tco staging --workload llm-70b-lora priced training at 0 USD: staging's queues list single-GPU 24 GB
    types, and the job needs 144 GiB on one GPU or 30 GiB each over eight."""
    templates = [json.loads((SNAPSHOTS / name).read_text()) for name in sorted(os.listdir(SNAPSHOTS))
                 if name.startswith("test_stack_snapshot[staging")]
    staging = write_assembly(tmp_path, "staging", templates)
    with pytest.raises(SystemExit) as raised:
        tco.main(["staging", "--assembly", str(staging), "--workload", "llm-70b-lora"])
    message = str(raised.value.code)
    assert message.startswith("error: no type staging's queues list (g5.2xlarge, ") and "\n" not in message
    assert (") runs llm-70b-lora, so its jobs cannot be priced: the closest, g5.8xlarge x8 (8 GPUs), is excluded for "
            "memory: needs 30.0 GiB per GPU even with ZeRO-3/FSDP over 8 GPUs") in message
    assert message.endswith("add a type ./platform advise llm-70b-lora --block queue recommends to a queue of "
                            "staging, or give the cost per job: --job-usd USD")
    assert capsys.readouterr().out == ""
    # with no jobs a month there is nothing to price: the rest of the lifecycle cost stands
    assert tco.main(["staging", "--assembly", str(staging), "--workload", "llm-70b-lora", "--months", "1",
                     "--jobs-per-month", "0"]) == 0
