"""Fleet operations: scale and status against moto, preflight's quota arithmetic and checks."""

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ops import fleet as fleet_ops
from stacks.config import FleetConfig


@pytest.fixture
def dev(config):
    return config.environments["dev"]


@pytest.fixture(scope="module")
def account():
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        ec2 = session.client("ec2")
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        ec2.create_launch_template(LaunchTemplateName="fleet-lt", LaunchTemplateData={"ImageId": "ami-12c6146b"})
        client = session.client("autoscaling")
        for name, fleet, env in (("dev-training", "training", "dev"), ("prod-training", "training", "prod")):
            client.create_auto_scaling_group(
                AutoScalingGroupName=name, MinSize=0, MaxSize=2, DesiredCapacity=0, VPCZoneIdentifier=subnet,
                LaunchTemplate={"LaunchTemplateName": "fleet-lt"},
                Tags=[{"Key": "ml-platform:fleet", "Value": fleet, "PropagateAtLaunch": True},
                      {"Key": "environment", "Value": env, "PropagateAtLaunch": True}])
        yield client


@pytest.fixture
def autoscaling(account):
    for name in ("dev-training", "prod-training"):
        account.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=0)
    return account


def test_scale_finds_the_fleet_by_its_tags_and_sets_desired_capacity(autoscaling, dev):
    assert fleet_ops.scale(autoscaling, dev, "training", 2) == "training: desired capacity 0 -> 2"
    groups = {g["AutoScalingGroupName"]: g["DesiredCapacity"]
              for g in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]}
    assert groups == {"dev-training": 2, "prod-training": 0}


def test_scale_beyond_max_capacity_is_refused(autoscaling, dev):
    with pytest.raises(SystemExit, match="capacity 3 is outside 0..2"):
        fleet_ops.scale(autoscaling, dev, "training", 3)


def test_unknown_fleet_says_how_to_deploy_it(autoscaling, dev):
    with pytest.raises(SystemExit, match="found 0 .*./platform deploy dev"):
        fleet_ops.scale(autoscaling, dev, "inference", 1)


def test_status_lists_each_configured_fleet(autoscaling, dev):
    assert fleet_ops.status(autoscaling, dev) == ["training: desired 0, in service 0, max 2"]


def test_quota_needs_count_the_largest_type_at_max_capacity():
    needs = fleet_ops.quota_needs((
        FleetConfig("a", ("g5.xlarge", "g5.4xlarge"), max_capacity=3, on_demand_base_capacity=1, scale_to_zero_after_minutes=0),
        FleetConfig("b", ("p5.48xlarge",), max_capacity=1, on_demand_base_capacity=0, scale_to_zero_after_minutes=0),
    ))
    assert {(n.code, n.vcpus) for n in needs} == {("L-3819A6DF", 32), ("L-DB2E81BA", 16), ("L-C4BD4855", 192)}


class Offerings:
    """EC2's DescribeInstanceTypeOfferings by AZ: every type offered everywhere except the given (type, AZ) pairs."""

    def __init__(self, *missing):
        self.missing = set(missing)
        self.calls = []

    def get_paginator(self, name):
        assert name == "describe_instance_type_offerings"
        return self

    def paginate(self, LocationType, Filters):  # noqa: N803 (boto3 names)
        self.calls.append(LocationType)
        values = {f["Name"]: f["Values"] for f in Filters}
        return [{"InstanceTypeOfferings": [
            {"InstanceType": t, "Location": az, "LocationType": LocationType}
            for t in values["instance-type"] for az in values["location"] if (t, az) not in self.missing]}]


class NoParameters:
    def get_parameters(self, Names):  # noqa: N803 (boto3 names)
        return {"Parameters": []}


def stubbed(client_name, responses):
    client = boto3.client(client_name, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(client)
    for method, response, params in responses:
        if isinstance(response, str):
            stub.add_client_error(method, service_error_code=response, expected_params=params)
        else:
            stub.add_response(method, response, params)
    stub.activate()
    return client


def test_preflight_passes_when_quotas_cover_the_fleets_and_the_role_exists(dev):
    quotas = stubbed("service-quotas", [("get_service_quota", {"Quota": {"Value": 128.0}},
                                         {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"})])
    iam = stubbed("iam", [("get_role", {"Role": {"Path": "/", "RoleName": "AWSServiceRoleForAutoScaling", "RoleId": "AROAEXAMPLEEXAMPLE01",
                                                 "Arn": "arn:aws:iam::111111111111:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling",
                                                 "CreateDate": "2026-01-01T00:00:00Z"}},
                           {"RoleName": "AWSServiceRoleForAutoScaling"})])
    lines, ready = fleet_ops.preflight(quotas, iam, dev, NoParameters(), Offerings())
    assert ready
    assert lines[:3] == ["ok fleet training: every type offered in us-east-1a, us-east-1b",
                         "ok queue training: every type offered in us-east-1a, us-east-1b",
                         "ok snapshot builder DatasetSnapshots: every type offered in us-east-1a"]
    # fleet: 2 x g5.4xlarge (16 vCPUs); queue: 32 vCPUs, which Batch may pass by its largest type (16)
    assert lines[3] == "ok All G and VT Spot Instance Requests (L-3819A6DF): 128 vCPUs, fleets and queues need up to 80"


def test_preflight_fails_on_a_zero_quota_and_a_missing_role(dev):
    quotas = stubbed("service-quotas", [("get_service_quota", {"Quota": {"Value": 0.0}},
                                         {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"})])
    iam = stubbed("iam", [("get_role", "NoSuchEntity", {"RoleName": "AWSServiceRoleForAutoScaling"})])
    lines, ready = fleet_ops.preflight(quotas, iam, dev, NoParameters(), Offerings())
    lines = [line for line in lines if " offered" not in line]
    assert not ready
    assert lines[0].startswith("TOO LOW All G and VT Spot Instance Requests") and "request an increase" in lines[0]
    assert "create-service-linked-role --aws-service-name autoscaling.amazonaws.com" in lines[1]


def test_queue_quota_needs_count_spot_on_demand_and_multi_node_caps_plus_one_instance(config):
    needs = {need.code: need.vcpus for need in fleet_ops.quota_needs((), config.environments["staging"].queues)}
    # Spot 32 + g5.8xlarge 32; On-Demand 8 + 32 and multi-node 64 + 32 (both against the G On-Demand quota)
    assert needs == {"L-3819A6DF": 64, "L-DB2E81BA": 136}


def test_offerings_are_checked_per_availability_zone():
    ec2 = Offerings(("g6e.xlarge", "us-west-2d"))
    lines, ok = fleet_ops.offering_check(ec2, "fleet", "training", ["g5.xlarge", "g6e.xlarge"], ["us-west-2a", "us-west-2d"])
    assert ok and ec2.calls == ["availability-zone"]
    assert lines == ["warning fleet training: g6e.xlarge not offered in us-west-2d (Auto Scaling skips it there: "
                     "fewer Spot pools)"]


def test_a_type_offered_in_none_of_its_zones_fails_the_preflight():
    lines, ok = fleet_ops.offering_check(Offerings(("m6in.2xlarge", "us-east-1a")), "snapshot builder",
                                         "DatasetSnapshots", ["m6in.2xlarge"], ["us-east-1a"])
    assert not ok and lines[0].startswith("NOT OFFERED snapshot builder DatasetSnapshots: m6in.2xlarge in none of us-east-1a")
