"""Each line of the cost estimate, present with its amount, on one environment that has every kind of line; the
printed estimate and the command over a synthesized assembly."""

import json

import pytest

from ops import cost_estimate

PRICES = {"region": "us-east-1", "on_demand_hourly": {"g5.xlarge": 1.0, "g6.xlarge": 0.8},
          "spot_discount": {"g5": 0.5, "g6": 0.5}, "sagemaker_hourly": {"ml.m5.large": 0.1},
          "s3_gb_month": {"STANDARD": 0.02, "GLACIER_IR": 0.004}, "nat_gateway_hourly": 0.05,
          "interface_endpoint_az_hourly": 0.01, "kms_key_month": 1.0, "alarm_month": 0.1, "dashboard_month": 3.0}
FLEET = {"Type": "AWS::AutoScaling::AutoScalingGroup", "Properties": {
    "MaxSize": "2", "Tags": [{"Key": "ml-platform:fleet", "Value": "training"}],
    "MixedInstancesPolicy": {"LaunchTemplate": {"Overrides": [{"InstanceType": "g5.xlarge"}, {"InstanceType": "g6.xlarge"}]},
                             "InstancesDistribution": {"OnDemandBaseCapacity": 0,
                                                       "OnDemandPercentageAboveBaseCapacity": 0}}}}
ALARM = {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors"}}
RESOURCES = {
    "Fleet": FLEET,
    "Idle": {"Type": "AWS::CloudWatch::Alarm", "Properties": {
        "MetricName": "nvidia_smi_utilization_gpu",
        "Dimensions": [{"Name": "AutoScalingGroupName", "Value": {"Ref": "Fleet"}}]}},
    "Errors": ALARM, "Latency": ALARM,
    "SpotEnvironment": {"Type": "AWS::Batch::ComputeEnvironment", "Properties": {"ComputeResources": {
        "Type": "SPOT", "MaxvCpus": 16, "InstanceTypes": ["g5.xlarge", "g6.xlarge"],
        "Tags": {"ml-platform:queue": "training"}}}},
    "Datasets": {"Type": "AWS::S3::Bucket", "Properties": {"LifecycleConfiguration": {"Rules": [
        {"Prefix": "checkpoints/", "Transitions": [{"StorageClass": "GLACIER_IR", "TransitionInDays": 73}]},
        {"Prefix": "datasets/", "ExpirationInDays": 365}]}}},
    "Capture": {"Type": "AWS::S3::Bucket", "Properties": {"LifecycleConfiguration": {"Rules": [
        {"Prefix": "capture/", "Transitions": [{"StorageClass": "GLACIER_IR", "TransitionInDays": 10}],
         "ExpirationInDays": 30}]}}},
    "Archive": {"Type": "AWS::S3::Bucket", "Properties": {"LifecycleConfiguration": {"Rules": [  # tiered, kept
        {"Prefix": "old/", "Transitions": [{"StorageClass": "GLACIER_IR", "TransitionInDays": 30}]}]}}},
    "Scratch": {"Type": "AWS::S3::Bucket", "Properties": {"LifecycleConfiguration": {"Rules": [  # expires only
        {"Prefix": "tmp/", "ExpirationInDays": 7}]}}},
    "Config": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [
        {"InstanceType": "ml.m5.large", "InitialInstanceCount": 2}]}},
    "Unpriced": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [
        {"InstanceType": "ml.p9.large", "InitialInstanceCount": 1},  # flagged; the next variant is still priced
        {"InstanceType": "ml.m5.large", "InitialInstanceCount": 1}]}},
    "Runs": {"Type": "AWS::SageMaker::MlflowApp", "Properties": {}},
    "RunServer": {"Type": "AWS::SageMaker::MlflowTrackingServer", "Properties": {}},
    "Ecr": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b"]}},
    "Logs": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b", "c"]}},
    "S3": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Gateway"}},
    "Nat": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
    "Key": {"Type": "AWS::KMS::Key", "Properties": {}}, "LogKey": {"Type": "AWS::KMS::Key", "Properties": {}},
    "Dashboard": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
    "Budget": {"Type": "AWS::Budgets::Budget", "Properties": {"Budget": {"BudgetLimit": {"Amount": 1000}}}},
}


@pytest.fixture  # per test, so that mutation testing sees which test reads what (a few milliseconds)
def estimate():
    # Two templates, as a stage has several stacks.
    fleet_side = {k: v for k, v in RESOURCES.items() if k in ("Fleet", "Idle", "SpotEnvironment")}
    rest = {k: v for k, v in RESOURCES.items() if k not in fleet_side}
    return cost_estimate.estimate_environment(
        "dev", "us-east-1", [{"Resources": fleet_side}, {"Resources": rest}], PRICES,
        cost_estimate.Assumptions(utilization=0.5, storage_gb=100, capture_gb=10))


# Worked by hand from PRICES and the assumptions (730 hours a month):
# fleet: Spot median of (1.0 x 0.5, 0.8 x 0.5) = 0.45 USD/h, x 2 instances x 730 h = 657 all month, half of it = 328.5;
#   On-Demand median 0.9 x 2 x 730 = 1,314
# queue: per vCPU after Spot (0.5/4, 0.4/4), median 0.1125, x 16 vCPUs = 1.8 USD/h, x 730 = 1,314, half = 657; ~4 instances
# datasets 100 GB: datasets/ 60 GB Standard all year (1.2); checkpoints/ 30 GB, 73 of 365 days Standard then Glacier IR
#   (30 x (0.2 x 0.02 + 0.8 x 0.004) = 0.216); logs/ 10 GB no rule: Standard, kept 365 days (0.2) -> 1.616
# capture 10 GB, Standard for 10 of its 30 days, then Glacier IR: 10 x (1/3 x 0.02 + 2/3 x 0.004) = 0.09333
# endpoints: 0.1 x 2 x 730 = 146; the unpriced variant is flagged, not counted; its neighbour 0.1 x 730 = 73
# tracking: a serverless MLflow app costs nothing of its own; a server (Small by default) 0.642 x 730 = 468.66
# network: 5 endpoint-AZs x 0.01 x 730 = 36.5; one NAT gateway 0.05 x 730 = 36.5
# other: 2 keys x 1.0 + 3 alarms x 0.1 + 1 dashboard x 3.0 = 5.3
EXPECTED_LINES = [
    ("GPU fleets", "training: max 2, 50% of the month (all month: 657; all On-Demand: 1,314)", 328.5),
    ("GPU queues", "training (Spot): up to 16 vCPUs (~4 instances), 50% of the month (all month: 1,314)", 657.0),
    ("Storage", "dataset bucket, 100 GB across tiers", 1.616),
    ("Storage", "capture bucket Capture, 10 GB", 10 * (0.02 / 3 + 0.004 * 2 / 3)),
    ("Endpoints", "Config: 2 x ml.m5.large, always on", 146.0),
    ("Endpoints", "Unpriced: 1 x ml.m5.large, always on", 73.0),
    ("Tracking", "Runs: serverless MLflow app (no charge of its own; artifacts in the bucket)", 0.0),
    ("Tracking", "RunServer: MLflow tracking server Small, always on", 0.642 * 730),
    ("Network", "2 interface endpoints, 5 endpoint-AZs", 36.5),
    ("Network", "1 NAT gateway(s), before data processing", 36.5),
    ("Other", "2 KMS keys, 3 alarms, 1 dashboards", 5.3),
]


def test_every_line_with_its_amount(estimate):
    assert [(group, item) for group, item, _ in estimate.lines] == [(group, item) for group, item, _ in EXPECTED_LINES]
    for (group, item, amount), (_, _, expected) in zip(estimate.lines, EXPECTED_LINES):
        assert amount == pytest.approx(expected), (group, item)
    assert estimate.total() == pytest.approx(sum(amount for _, _, amount in EXPECTED_LINES))
    assert estimate.budget == 1000


def test_what_it_cannot_price_is_flagged_not_counted(estimate):
    # Archive (tiered, kept) and Scratch (expires) are not flagged: only a bucket with neither is.
    assert estimate.flags == ["no price for ml.p9.large (Unpriced): add it to the table",
                              cost_estimate.MLFLOW_RATES_FLAG]  # the tracking server's rate


def test_the_fleet_behind_its_line(estimate):
    fleet, = estimate.fleets
    assert (fleet.name, fleet.types, fleet.gpus_per_instance, fleet.max_size, fleet.on_demand_base) == (
        "training", ["g5.xlarge", "g6.xlarge"], 1, 2, 0)
    assert (fleet.hourly_spot, fleet.hourly_on_demand, fleet.has_idle_alarm) == (pytest.approx(0.45), 0.9, True)
    assert fleet.hourly(1) == pytest.approx(0.45) and fleet.gpu_hour == pytest.approx(0.45)


def test_a_fleet_with_an_on_demand_base_and_one_on_demand_only():
    base = {**FLEET, "Properties": {**FLEET["Properties"], "MixedInstancesPolicy": {
        **FLEET["Properties"]["MixedInstancesPolicy"],
        "InstancesDistribution": {"OnDemandBaseCapacity": 1, "OnDemandPercentageAboveBaseCapacity": 0}}}}
    fleet = cost_estimate.fleet_estimate("Fleet", base, [], PRICES)
    assert fleet.on_demand_base == 1 and fleet.hourly(2) == pytest.approx(0.9 + 0.45) and fleet.hourly(1) == 0.9
    assert not fleet.has_idle_alarm
    # No distribution: all On-Demand, priced On-Demand, named by its logical id without the fleet tag; its flag says
    # what Spot would save (nothing to say where the table has no Spot discount for the family).
    plain = {"Type": "AWS::AutoScaling::AutoScalingGroup", "Properties": {"MaxSize": 3, "MixedInstancesPolicy": {
        "LaunchTemplate": {"Overrides": [{"InstanceType": "g5.xlarge"}]}}}}
    fleet = cost_estimate.fleet_estimate("Plain", plain, [], PRICES)
    assert (fleet.name, fleet.on_demand_base, fleet.hourly_spot, fleet.hourly_on_demand) == ("Plain", 3, 0.5, 1.0)
    assert fleet.hourly(3) == 3.0 and fleet.gpu_hour == 1.0
    flags = lambda prices: cost_estimate.estimate_environment(  # noqa: E731
        "dev", "us-east-1", [{"Resources": {"Plain": plain}}], prices, cost_estimate.Assumptions()).flags
    assert flags(PRICES) == ["fleet Plain is On-Demand only: Spot would cost about 50% less",
                             "fleet Plain has no idle-GPU alarm: idle GPUs go unnoticed"]
    assert flags({**PRICES, "spot_discount": {}})[0] == "fleet Plain is On-Demand only"


def test_an_on_demand_queue_and_a_multi_node_one():
    resources = {"Type": "EC2", "MaxvCpus": 8, "InstanceTypes": ["g5.xlarge"]}
    on_demand = cost_estimate.queue_estimate("OdEnv", {"Properties": {"ComputeResources": resources}}, PRICES)
    assert (on_demand.name, on_demand.kind, on_demand.hourly, on_demand.instances) == ("OdEnv", "On-Demand", 2.0, 2.0)
    multi = cost_estimate.queue_estimate("MnEnv", {"Properties": {"ComputeResources": {**resources, "PlacementGroup": "p"}}},
                                         PRICES)
    assert multi.kind == "multi-node On-Demand"


def test_the_report_says_where_each_environments_prices_come_from_and_when(estimate):
    """One price (issue item 3): after the assumptions, a line per environment gives its prices' Region, date (a
    table without one says so) and Spot rule."""
    report = cost_estimate.format_report(cost_estimate.Assumptions(), [estimate]).splitlines()
    assert max(map(len, report)) <= 100  # the assumptions fold, continued four spaces in
    assert report[1].startswith("  - prices: each environment at its own Region's rates")
    items = [line for line in report if line.startswith("  - ")]
    line = "  - dev's prices: us-east-1 (no date in the table); Spot at the family's conservative discount"
    assert items[-1] == line and len(items) == len(cost_estimate.Assumptions().lines()) + 1
    assert report[report.index(line) + 2].startswith("== dev (us-east-1)")


def test_the_printed_estimate(estimate):
    text = cost_estimate.format_estimate(estimate)
    lines = text.splitlines()
    assert lines[1] == "== dev (us-east-1): about 1,753 USD per month, 175% of its 1,000 USD budget"
    width = 75  # the amounts in one column at the 100th; a longer item folds, its amount on its last line
    assert max(map(len, lines)) <= 100
    first = EXPECTED_LINES[0][1]
    if len(first) <= width:
        assert lines[2] == f"  GPU fleets  {first:<{width}}     328.50"
    else:
        assert lines[2].startswith("  GPU fleets  ") and lines[3].endswith("     328.50") and len(lines[3]) == 100
        assert " ".join(lines[2][13:].split() + lines[3][13:-11].split()) == " ".join(first.split())
    capture = next(line for line in lines if line.startswith("  Storage     capture bucket Capture, 10 GB"))
    assert capture == "  Storage     capture bucket Capture, 10 GB" + " " * (width - 29) + "       0.09"
    assert "  GPU-hour    training: 0.450 USD per GPU-hour at max size (2 x 1 GPU; On-Demand 0.900)" in lines
    flags = " ".join(text[text.index("  FLAG"):].split())
    assert flags == " ".join(["FLAG no price for ml.p9.large (Unpriced): add it to the table",
                              f"FLAG {cost_estimate.MLFLOW_RATES_FLAG}"])
    unbudgeted = cost_estimate.EnvironmentEstimate(name="x", region="us-east-1", lines=[("Other", "keys", 2.0)])
    assert cost_estimate.format_estimate(unbudgeted).splitlines()[1] == "== x (us-east-1): about 2 USD per month"


def assembly(tmp_path, environments):
    artifacts = {}
    for name, region, resources in environments:
        stage = tmp_path / f"assembly-{name}"
        stage.mkdir()
        (stage / "Core.template.json").write_text(json.dumps({"Resources": resources}))
        (stage / "manifest.json").write_text(json.dumps({"artifacts": {
            f"{name}Core": {"type": "aws:cloudformation:stack", "environment": f"aws://123456789012/{region}",
                            "properties": {"templateFile": "Core.template.json"}},
            "Tree": {"type": "cdk:tree"}}}))
        artifacts[f"assembly-{name}"] = {"type": "cdk:cloud-assembly", "properties": {"directoryName": stage.name}}
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {**artifacts, "Tree": {"type": "cdk:tree"}}}))
    return tmp_path


def test_the_command_estimates_each_environment_of_an_assembly(tmp_path, capsys):
    key = {"Key": {"Type": "AWS::KMS::Key", "Properties": {}}}
    out = assembly(tmp_path, [("dev", "us-east-1", key), ("prod", "us-west-2", {**key, "Key2": key["Key"]})])
    assert [(name, region) for name, region, _ in cost_estimate.environments(out)] == [("dev", "us-east-1"),
                                                                                      ("prod", "us-west-2")]
    assert cost_estimate.main(["prod", "--assembly", str(out), "--utilization", "0.5"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Monthly cost estimate. Assumptions:\n  - prices: each environment at its own Region's")
    assert "  - GPU fleets and training queues run at max size 50% of the month (--utilization)" in printed
    assert "== prod (us-west-2): about 2 USD per month" in printed and "== dev" not in printed
    assert "  Other       2 KMS keys, 0 alarms, 0 dashboards" in printed
    assert cost_estimate.main(["--assembly", str(out)]) == 0
    assert "== dev (us-east-1): about 1 USD per month" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--utilization", "1.5"], "argument --utilization: 1.5 is out of range: the share of the month GPU fleets and "
                               "queues run at max size, from 0 to 1 (e.g. --utilization 0.25)"),
    (["--storage-gb", "-1"], "argument --storage-gb: -1 is out of range: GB in the dataset bucket, from 0 to "
                             "10,000,000 (e.g. --storage-gb 1000)"),
    (["--capture-gb", "1e30"], "argument --capture-gb: 1e30 is out of range: GB in each endpoint's capture bucket, "
                               "from 0 to 10,000,000 (e.g. --capture-gb 50)"),
    ([], "no synthesized app there; run ./platform cost"),
])
def test_the_command_refuses_what_it_cannot_estimate(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        cost_estimate.main([*argv, "--assembly", str(tmp_path)])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_the_assumptions_name_their_flags():
    lines = cost_estimate.Assumptions(utilization=0.3, storage_gb=500, capture_gb=20).lines()
    assert lines[1].startswith("GPU fleets and training queues run at max size 30% of the month (--utilization)")
    assert lines[2] == ("dataset bucket holds 500 GB (--storage-gb): datasets/ 60%, checkpoints/ 30%, logs/ 10%; "
                        "data no rule expires is kept 365 days; steady ingest")
    assert lines[4] == "each endpoint's capture bucket holds 20 GB (--capture-gb)"
    assert lines[5] == "requests, data transfer, Lambda, CloudWatch Logs ingestion and metrics: not included"


def test_a_stage_without_stacks_has_no_region(tmp_path):
    out = assembly(tmp_path, [("dev", "us-east-1", {})])
    (tmp_path / "assembly-dev" / "manifest.json").write_text(json.dumps({"artifacts": {}}))
    assert cost_estimate.environments(out) == [("dev", "?", [])]


def test_platform_cost_asks_the_command_to_synthesize_first():
    assert cost_estimate.parser().parse_args(["--synth"]).synth is True
    assert cost_estimate.parser().parse_args([]).synth is False
