"""Compute stays private: SpotGpuFleet, TrainingQueue and MonitoredEndpoint refuse subnets whose instances would
get public addresses (public subnets, subnets that map public IPs or route to an internet gateway), with the fix;
``allow_public_subnets=True`` accepts them with a warning; private subnets, with or without NAT, pass silently."""

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match

from aws_cdk import aws_kms as kms

from ml_platform_constructs import DatasetBucket, MonitoredEndpoint, SpotGpuFleet, TrainingQueue, ValidationError
from tests.conftest import ACCOUNT, new_app

TYPES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]
AZS = ["us-east-1a", "us-east-1b"]
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


@pytest.fixture
def scope(tmp_path) -> Stack:
    return Stack(new_app(tmp_path), "Team", env={"account": ACCOUNT, "region": "us-east-1"})


def vpc_with(stack: Stack, *types: ec2.SubnetType, nat_gateways: int = 0) -> ec2.Vpc:
    return ec2.Vpc(stack, "Vpc", availability_zones=AZS, nat_gateways=nat_gateways, restrict_default_security_group=False,
                   subnet_configuration=[ec2.SubnetConfiguration(name=t.name.lower().replace("_", ""), subnet_type=t)
                                         for t in types])


def fleet(scope: Stack, vpc: ec2.IVpc, **props) -> SpotGpuFleet:
    return SpotGpuFleet(scope, "Fleet", vpc=vpc, alerts=sns.Topic(scope, "FleetAlerts"), instance_types=TYPES, **props)


def endpoint(scope: Stack, vpc: ec2.IVpc, **props) -> MonitoredEndpoint:
    data = DatasetBucket(scope, "Data")
    return MonitoredEndpoint(scope, "Endpoint", endpoint_name="team-clf", image_uri=IMAGE, model_data_bucket=data.bucket,
                             model_data_key="m.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(scope, "Alerts"),
                             baseline_bucket=data, vpc=vpc, **props)


def queue(scope: Stack, vpc: ec2.IVpc, **props) -> TrainingQueue:
    return TrainingQueue(scope, "Queue", vpc=vpc, alerts=sns.Topic(scope, "QueueAlerts"), key=kms.Key(scope, "Key"),
                         image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1", instance_types=TYPES, **props)


PUBLIC_FIX = r"Fix: select private subnets .* or pass allow_public_subnets=True"


@pytest.mark.parametrize("build", [fleet, queue, endpoint], ids=["fleet", "queue", "endpoint"])
def test_a_vpc_with_only_public_subnets_is_refused_by_default_selection(build, scope):
    with pytest.raises(ValidationError, match=r"vpc_subnets=.*is invalid: private subnets: .*a public subnet of the "
                                              r"VPC \(routed to its internet gateway\).*" + PUBLIC_FIX):
        build(scope, vpc_with(scope, ec2.SubnetType.PUBLIC))


@pytest.mark.parametrize("build", [fleet, queue, endpoint], ids=["fleet", "queue", "endpoint"])
def test_public_subnets_selected_explicitly_are_refused(build, scope):
    vpc = vpc_with(scope, ec2.SubnetType.PUBLIC, ec2.SubnetType.PRIVATE_WITH_EGRESS, nat_gateways=1)
    with pytest.raises(ValidationError, match=r"Team/Vpc/publicSubnet1.*" + PUBLIC_FIX):
        build(scope, vpc, vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC))


def test_private_subnets_next_to_public_ones_pass_without_a_warning(scope):
    vpc = vpc_with(scope, ec2.SubnetType.PUBLIC, ec2.SubnetType.PRIVATE_WITH_EGRESS, nat_gateways=1)
    fleet(scope, vpc)
    queue(scope, vpc)
    endpoint(scope, vpc)
    Annotations.from_stack(scope).has_no_warning("*", Match.string_like_regexp("allow_public_subnets"))


def test_an_app_subnet_that_maps_public_ips_is_refused(scope):
    vpc = vpc_with(scope, ec2.SubnetType.PRIVATE_ISOLATED)
    subnet = ec2.Subnet(scope, "Mapped", vpc_id=vpc.vpc_id, availability_zone="us-east-1a", cidr_block="10.0.200.0/24",
                        map_public_ip_on_launch=True)
    with pytest.raises(ValidationError, match=r"Team/Mapped: maps public IPv4 addresses on launch"):
        fleet(scope, vpc, vpc_subnets=ec2.SubnetSelection(subnets=[subnet]))


def test_an_app_subnet_routed_to_an_internet_gateway_is_refused(scope):
    vpc = vpc_with(scope, ec2.SubnetType.PRIVATE_ISOLATED)
    gateway = ec2.CfnInternetGateway(scope, "Gateway")
    subnet = ec2.Subnet(scope, "Routed", vpc_id=vpc.vpc_id, availability_zone="us-east-1a", cidr_block="10.0.201.0/24")
    subnet.add_default_internet_route(gateway.ref, gateway)
    with pytest.raises(ValidationError, match=r"Team/Routed: routes to an internet gateway"):
        endpoint(scope, vpc, vpc_subnets=ec2.SubnetSelection(subnets=[subnet]))


def test_public_subnets_of_an_imported_vpc_are_refused_by_id(scope):
    vpc = ec2.Vpc.from_vpc_attributes(scope, "Imported", vpc_id="vpc-0123456789abcdef0", availability_zones=AZS,
                                      public_subnet_ids=["subnet-0a0a0a0a0a0a0a0a0", "subnet-0b0b0b0b0b0b0b0b0"])
    with pytest.raises(ValidationError, match=r"\['subnet-0a0a0a0a0a0a0a0a0', 'subnet-0b0b0b0b0b0b0b0b0'\]"):
        fleet(scope, vpc)


@pytest.mark.parametrize("build", [fleet, queue, endpoint], ids=["fleet", "queue", "endpoint"])
def test_allow_public_subnets_accepts_them_with_a_warning(build, scope):
    build(scope, vpc_with(scope, ec2.SubnetType.PUBLIC), allow_public_subnets=True)
    Annotations.from_stack(scope).has_warning("*", Match.string_like_regexp(
        r"allow_public_subnets=True: its instances may get public addresses.*\[ack: ml-platform:public-subnets\]"))
