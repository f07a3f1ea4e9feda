"""Instance types may be given as names (``["g5.xlarge", ...]``) as well as ``ec2.InstanceType``s; anything else
fails with the type expected, not with an AttributeError from deep inside the construct."""

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from ml_platform_constructs import SpotGpuFleet, ValidationError
from tests.conftest import ACCOUNT, isolated_vpc, new_app

NAMES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]


@pytest.fixture
def scope(tmp_path) -> Stack:
    return Stack(new_app(tmp_path), "Team", env={"account": ACCOUNT, "region": "us-east-1"})


def fleet(scope: Stack, instance_types) -> SpotGpuFleet:
    return SpotGpuFleet(scope, "Fleet", vpc=isolated_vpc(scope), alerts=sns.Topic(scope, "Alerts"),
                        instance_types=instance_types)


def test_a_fleet_takes_instance_type_names(scope):
    fleet(scope, [NAMES[0], *(ec2.InstanceType(n) for n in NAMES[1:])])
    group = next(iter(Template.from_stack(scope).find_resources("AWS::AutoScaling::AutoScalingGroup").values()))
    overrides = group["Properties"]["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"]
    assert [o["InstanceType"] for o in overrides] == NAMES


def test_something_else_says_what_type_is_expected(scope):
    with pytest.raises(ValidationError, match=r"SpotGpuFleet: instance_types=\{'type': 'g5.xlarge'\} is invalid: "
                                              r"ec2.InstanceType objects or instance type names"):
        fleet(scope, [{"type": "g5.xlarge"}, *NAMES[1:]])


def test_one_name_instead_of_a_list_says_a_list_is_expected(scope):
    with pytest.raises(ValidationError, match=r"instance_types='g5.xlarge' is invalid: a list of instance types"):
        fleet(scope, "g5.xlarge")
