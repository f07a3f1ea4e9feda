"""Instance types may be given as names (``["g5.xlarge", ...]``) as well as ``ec2.InstanceType``s; anything else
fails with the type expected, not with an AttributeError from deep inside the construct. An ECR image without a
tag or digest is refused saying that the tag or digest is what is missing."""

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
    return SpotGpuFleet(scope, "Fleet", vpc=isolated_vpc(scope, endpoints_for=["SpotGpuFleet"]), alerts=sns.Topic(scope, "Alerts"),
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


def test_a_queue_takes_instance_type_names_for_both_environments(scope):
    from aws_cdk import aws_kms as kms

    from ml_platform_constructs import TrainingQueue

    vpc = ec2.Vpc(scope, "Vpc", max_azs=2, nat_gateways=1, restrict_default_security_group=False)
    TrainingQueue(scope, "Queue", vpc=vpc, alerts=sns.Topic(scope, "Alerts"), key=kms.Key(scope, "Key"),
                  image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1", instance_types=NAMES,
                  multi_node_instance_types=["g5.12xlarge"], multi_node_max_vcpus=96)
    environments = Template.from_stack(scope).find_resources("AWS::Batch::ComputeEnvironment")
    types = sorted(sorted(e["Properties"]["ComputeResources"]["InstanceTypes"]) for e in environments.values())
    assert types == [["g5.12xlarge"], sorted(NAMES)]


@pytest.mark.parametrize("image, missing", [
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/train", "no tag or digest: name the image's version"),
    ("docker.io/library/pytorch:2", "not an Amazon ECR image"),
], ids=["no-tag", "not-ecr"])
def test_a_queue_image_is_refused_saying_what_is_missing(scope, image, missing):
    from aws_cdk import aws_kms as kms

    from ml_platform_constructs import TrainingQueue
    from tests.conftest import queue_vpc

    with pytest.raises(ValidationError, match=rf"TrainingQueue: image_uri='{image}' is invalid: an Amazon ECR image "
                                              rf"with a tag or digest .*: {missing}"):
        TrainingQueue(scope, "Queue", vpc=queue_vpc(scope), alerts=sns.Topic(scope, "Alerts"),
                      key=kms.Key(scope, "Key"), image_uri=image, instance_types=NAMES)
