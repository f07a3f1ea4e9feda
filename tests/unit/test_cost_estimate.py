"""The cost model on hand-checked examples and its flags."""

import pytest

from ops import cost_estimate

PRICES = {"region": "us-east-1", "on_demand_hourly": {"g5.xlarge": 1.0, "g5.2xlarge": 1.2, "g6.xlarge": 0.8},
          "spot_discount": {"g5": 0.5, "g6": 0.5}, "sagemaker_hourly": {"ml.m5.large": 0.1},
          "s3_gb_month": {"STANDARD": 0.02, "INTELLIGENT_TIERING": 0.02, "GLACIER_IR": 0.004, "GLACIER": 0.003},
          "nat_gateway_hourly": 0.05, "interface_endpoint_az_hourly": 0.01, "kms_key_month": 1.0, "alarm_month": 0.1,
          "dashboard_month": 3.0}


def asg(types, max_size, on_demand_base=0, on_demand_above=0):
    return {"Type": "AWS::AutoScaling::AutoScalingGroup", "Properties": {
        "MaxSize": str(max_size), "Tags": [{"Key": "ml-platform:fleet", "Value": "training"}],
        "MixedInstancesPolicy": {"LaunchTemplate": {"Overrides": [{"InstanceType": t} for t in types]},
                                 "InstancesDistribution": {"OnDemandBaseCapacity": on_demand_base,
                                                           "OnDemandPercentageAboveBaseCapacity": on_demand_above}}}}


IDLE_ALARM = {"Type": "AWS::CloudWatch::Alarm", "Properties": {
    "MetricName": "nvidia_smi_utilization_gpu", "Dimensions": [{"Name": "AutoScalingGroupName", "Value": {"Ref": "Fleet"}}]}}


def estimate(resources, **assumptions):
    return cost_estimate.estimate_environment("dev", "us-east-1", [{"Resources": resources}], PRICES,
                                              cost_estimate.Assumptions(**assumptions))


def amounts(result, group):
    return [amount for g, _, amount in result.lines if g == group]


def test_class_fractions_by_hand():
    # Standard for 30 of 365 days, then Glacier IR for the remaining 335.
    assert cost_estimate.class_fractions([(30, "GLACIER_IR")], 365) == pytest.approx(
        {"STANDARD": 30 / 365, "GLACIER_IR": 335 / 365})
    assert cost_estimate.class_fractions([(30, "GLACIER")], 20) == {"STANDARD": 1.0}  # expires before moving


def test_spot_fleet_by_hand():
    # Median Spot price of (0.5, 0.6, 0.4) = 0.5 USD/h; 2 instances; 25% of 730 h = 182.5 h -> 182.5 USD.
    result = estimate({"Fleet": asg(["g5.xlarge", "g5.2xlarge", "g6.xlarge"], 2), "Idle": IDLE_ALARM}, utilization=0.25)
    assert amounts(result, "GPU fleets") == [pytest.approx(182.5)]
    assert result.fleets[0].gpu_hour == pytest.approx(0.5)
    assert result.flags == []


def test_on_demand_base_is_priced_on_demand():
    # 1 On-Demand at median 1.0 + 1 Spot at 0.5 = 1.5 USD/h all month = 1095 USD.
    result = estimate({"Fleet": asg(["g5.xlarge", "g5.2xlarge", "g6.xlarge"], 2, on_demand_base=1), "Idle": IDLE_ALARM},
                      utilization=1.0)
    assert amounts(result, "GPU fleets") == [pytest.approx(1095)]


def test_on_demand_only_fleet_and_missing_idle_alarm_are_flagged():
    result = estimate({"Fleet": asg(["g5.xlarge"], 1, on_demand_above=100)})
    assert any("On-Demand only" in f for f in result.flags)
    assert any("no idle-GPU alarm" in f for f in result.flags)


def test_dataset_bucket_storage_by_hand():
    bucket = {"Type": "AWS::S3::Bucket", "Properties": {"LifecycleConfiguration": {"Rules": [
        {"Prefix": "datasets/", "Transitions": [{"StorageClass": "INTELLIGENT_TIERING", "TransitionInDays": 7}]},
        {"Prefix": "checkpoints/", "Transitions": [{"StorageClass": "GLACIER_IR", "TransitionInDays": 30}]},
        {"Prefix": "logs/", "Transitions": [{"StorageClass": "GLACIER", "TransitionInDays": 30}], "ExpirationInDays": 365}]}}}
    result = estimate({"Data": bucket}, storage_gb=1000)
    datasets = 600 * 0.02
    checkpoints = 300 * (30 / 365 * 0.02 + 335 / 365 * 0.004)
    logs = 100 * (30 / 365 * 0.02 + 335 / 365 * 0.003)
    assert amounts(result, "Storage") == [pytest.approx(datasets + checkpoints + logs)]


def test_bucket_without_tiering_or_expiry_is_flagged():
    result = estimate({"Raw": {"Type": "AWS::S3::Bucket", "Properties": {}}})
    assert result.flags == ["bucket Raw has no tiering and no expiry: all of it stays in Standard"]


def test_endpoints_network_and_other_by_hand():
    result = estimate({
        "Config": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [
            {"InstanceType": "ml.m5.large", "InitialInstanceCount": 2}]}},
        "Ssm": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b"]}},
        "Nat": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
        "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
        "Budget": {"Type": "AWS::Budgets::Budget", "Properties": {"Budget": {"BudgetLimit": {"Amount": 1000}}}},
    })
    assert amounts(result, "Endpoints") == [pytest.approx(0.1 * 2 * 730)]
    assert amounts(result, "Network") == [pytest.approx(2 * 0.01 * 730), pytest.approx(0.05 * 730)]
    assert amounts(result, "Other") == [pytest.approx(1.0)]
    assert result.budget == 1000 and result.total() == pytest.approx(146 + 14.6 + 36.5 + 1)


def test_a_region_the_table_lacks_is_flagged():
    result = cost_estimate.estimate_environment("prod", "mx-central-1", [{"Resources": {}}],
                                                cost_estimate.load_prices("mx-central-1"), cost_estimate.Assumptions())
    assert result.flags == ["the price table has no mx-central-1 rates: priced at the dearest Region it has "
                            "(python -m ops.refresh_prices --region mx-central-1)"]


def test_estimate_of_the_synthesized_app_covers_every_environment(platform_app, config):
    _, _, outdir = platform_app
    found = cost_estimate.environments(outdir)
    assert [name for name, _, _ in found] == list(config.environments)
    for name, region, templates in found:
        prices = cost_estimate.load_prices(region)
        result = cost_estimate.estimate_environment(name, region, templates, prices, cost_estimate.Assumptions())
        assert not any("price table has no" in f for f in result.flags)  # every configured Region is priced
        assert result.fleets and result.total() > 0 and result.budget == config.environments[name].budget.monthly_limit_usd
        assert not [f for f in result.flags if "no idle-GPU alarm" in f or "On-Demand only" in f or "no tiering" in f]


def test_a_training_queue_is_priced_at_its_max_vcpus_per_vcpu_of_its_median_type():
    prices = {"on_demand_hourly": {"g5.xlarge": 1.0, "g5.2xlarge": 1.2, "g6.xlarge": 0.8},
              "spot_discount": {"g5": 0.5, "g6": 0.25}}
    spot = {"Properties": {"ComputeResources": {"Type": "SPOT", "MaxvCpus": 32, "Tags": {"ml-platform:queue": "training"},
                                                "InstanceTypes": ["g5.xlarge", "g5.2xlarge", "g6.xlarge"]}}}
    estimate = cost_estimate.queue_estimate("SpotEnv", spot, prices)
    # per vCPU after the Spot discount: g5.xlarge 0.5/4, g5.2xlarge 0.6/8, g6.xlarge 0.6/4 -> median 0.125
    assert (estimate.name, estimate.kind, estimate.hourly) == ("training", "Spot", pytest.approx(0.125 * 32))
    assert estimate.instances == 8.0
    on_demand = {"Properties": {"ComputeResources": {**spot["Properties"]["ComputeResources"], "Type": "EC2",
                                                     "PlacementGroup": "pg"}}}
    assert cost_estimate.queue_estimate("MnpEnv", on_demand, prices).kind == "multi-node On-Demand"
    # On-Demand per vCPU: 1.0/4, 1.2/8, 0.8/4 -> median 0.2
    assert cost_estimate.queue_estimate("MnpEnv", on_demand, prices).hourly == pytest.approx(0.2 * 32)
