"""PlatformNetwork and ImportedNetwork."""

import json
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match

from ml_platform_constructs import ImportedNetwork, PlatformNetwork, ValidationError
from tests.conftest import new_app

AZS = ["us-east-1a", "us-east-1b"]


@pytest.fixture(scope="module")
def isolated(synth_stack):
    return synth_stack(lambda stack: PlatformNetwork(stack, "Net", availability_zones=AZS, flow_logs_key=kms.Key(stack, "K")))


@pytest.fixture(scope="module")
def with_nat(synth_stack):
    return synth_stack(lambda stack: PlatformNetwork(
        stack, "Net", availability_zones=AZS, flow_logs_key=kms.Key(stack, "K"), nat_gateways=1,
        interface_endpoints=[ec2.InterfaceVpcEndpointAwsService.SSM]))


def test_private_isolated_subnet_per_az_without_internet_by_default(isolated):
    isolated.resource_count_is("AWS::EC2::Subnet", 2)
    isolated.resource_count_is("AWS::EC2::InternetGateway", 0)
    isolated.resource_count_is("AWS::EC2::NatGateway", 0)
    for az in AZS:
        isolated.has_resource_properties("AWS::EC2::Subnet", {"AvailabilityZone": az, "MapPublicIpOnLaunch": False})


def test_s3_gateway_endpoint(isolated):
    isolated.has_resource_properties("AWS::EC2::VPCEndpoint", {
        "VpcEndpointType": "Gateway", "ServiceName": {"Fn::Join": ["", Match.array_with([".s3"])]}})


def test_default_interface_endpoints_with_private_dns(isolated):
    endpoints = isolated.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}})
    names = sorted(e["Properties"]["ServiceName"].split(".")[-1] for e in endpoints.values())
    assert names == ["autoscaling", "ec2", "ec2messages", "logs", "monitoring", "ssm", "ssmmessages"]
    assert all(e["Properties"]["PrivateDnsEnabled"] for e in endpoints.values())


def test_endpoint_security_groups_admit_only_https_from_the_vpc(isolated):
    for group in isolated.find_resources("AWS::EC2::SecurityGroup").values():
        for rule in group["Properties"]["SecurityGroupIngress"]:
            assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (443, 443, "tcp")
            assert "Fn::GetAtt" in rule["CidrIp"]


def test_rejected_traffic_flow_logs_to_an_encrypted_group(isolated):
    isolated.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "REJECT", "LogDestinationType": "cloud-watch-logs"})
    isolated.has_resource("AWS::Logs::LogGroup", {"Properties": {"KmsKeyId": {"Fn::GetAtt": [Match.any_value(), "Arn"]},
                                                                "RetentionInDays": 365}, "DeletionPolicy": "Retain"})


def test_no_custom_resource_for_the_default_security_group(isolated):
    assert not isolated.find_resources("AWS::Lambda::Function")


def test_nat_gateway_adds_public_subnets_and_egress(with_nat):
    with_nat.resource_count_is("AWS::EC2::NatGateway", 1)
    with_nat.resource_count_is("AWS::EC2::Subnet", 4)
    with_nat.has_resource_properties("AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0",
                                                         "NatGatewayId": Match.any_value()})


@pytest.mark.parametrize("kwargs,match", [
    ({"availability_zones": []}, r"availability_zones=\[\].*at least one Availability Zone"),
    ({"availability_zones": ["use1-az1"]}, r"availability_zones='use1-az1'.*an AZ name"),
    ({"availability_zones": ["us-west-2a"]}, r"availability_zones='us-west-2a'.*Region us-east-1"),
    ({"availability_zones": ["us-east-1a", "us-east-1a"]}, r"each AZ once"),
    ({"cidr": "10.0.0.0/8"}, r"cidr='10.0.0.0/8'.*from /16 to /24"),
    ({"cidr": "bogus"}, r"cidr='bogus'"),
    ({"nat_gateways": 3}, r"nat_gateways=3.*0 to 2"),
    ({"nat_gateways": -1}, r"nat_gateways=-1"),
    ({"interface_endpoints": [ec2.InterfaceVpcEndpointAwsService.SSM] * 2}, r"each service once"),
])
def test_invalid_network_props_are_rejected(kwargs, match):
    stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
    props = {"availability_zones": AZS, "flow_logs_key": kms.Key(stack, "K"), **kwargs}
    with pytest.raises(ValidationError, match=match):
        PlatformNetwork(stack, "Net", **props)


def test_imported_network_creates_nothing_and_exposes_the_subnets(synth_stack):
    found = {}

    def body(stack):
        found["net"] = ImportedNetwork(stack, "Net", vpc_id="vpc-0123456789abcdef0", availability_zones=AZS,
                                       private_subnet_ids=["subnet-0123456789abcdef1", "subnet-0123456789abcdef2"])
    template = synth_stack(body)
    assert template.to_json().get("Resources", {}) == {} or set(
        r["Type"] for r in template.to_json()["Resources"].values()) <= {"AWS::CDK::Metadata"}
    assert [s.subnet_id for s in found["net"].vpc.private_subnets] == ["subnet-0123456789abcdef1", "subnet-0123456789abcdef2"]


@pytest.mark.parametrize("kwargs,match", [
    ({"vpc_id": "vpc-xyz"}, r"vpc_id='vpc-xyz'"),
    ({"private_subnet_ids": ["subnet-0123456789abcdef1"]}, r"one subnet per AZ \(2\)"),
    ({"private_subnet_ids": ["sub-1", "sub-2"]}, r"private_subnet_ids='sub-1'"),
])
def test_invalid_imported_network_is_rejected(kwargs, match):
    props = {"vpc_id": "vpc-0123456789abcdef0", "availability_zones": AZS,
             "private_subnet_ids": ["subnet-0123456789abcdef1", "subnet-0123456789abcdef2"], **kwargs}
    with pytest.raises(ValidationError, match=match):
        ImportedNetwork(Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"}), "Net", **props)


def test_the_az_context_from_the_package_pins_a_teams_own_vpc_too(tmp_path):
    """A plain ec2.Vpc in an account-bound stack reads the stack's AZs as PlatformNetwork does: pinned, no lookup."""
    from ml_platform_constructs import availability_zone_context

    app = new_app(tmp_path, **availability_zone_context(
        account="111122223333", region="eu-west-1", availability_zones=["eu-west-1a", "eu-west-1b"]))
    stack = Stack(app, "Team", env={"account": "111122223333", "region": "eu-west-1"})
    ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0,
            subnet_configuration=[ec2.SubnetConfiguration(name="c", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])
    assembly = app.synth()
    assert json.loads((Path(assembly.directory) / "manifest.json").read_text()).get("missing", []) == []  # no lookup
    template = json.loads((Path(assembly.directory) / "Team.template.json").read_text())
    azs = {s["Properties"]["AvailabilityZone"] for s in template["Resources"].values() if s["Type"] == "AWS::EC2::Subnet"}
    assert azs == {"eu-west-1a", "eu-west-1b"}
