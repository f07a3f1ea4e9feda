"""Budget operations: status and resume against moto, tag activation with a stubbed Cost Explorer."""

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ml_platform_constructs.runtime import budget_guard
from ops import budget as budget_ops


@pytest.fixture
def autoscaling(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        ec2 = boto3.client("ec2")
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        ec2.create_launch_template(LaunchTemplateName="fleet-lt", LaunchTemplateData={"ImageId": "ami-12c6146b"})
        client = boto3.client("autoscaling")
        client.create_auto_scaling_group(
            AutoScalingGroupName="dev-training", MinSize=0, MaxSize=2, DesiredCapacity=0, VPCZoneIdentifier=subnet,
            LaunchTemplate={"LaunchTemplateName": "fleet-lt"},
            Tags=[{"Key": "ml-platform:fleet", "Value": "training", "PropagateAtLaunch": True},
                  {"Key": "ml-platform:budget-scope", "Value": "dev", "PropagateAtLaunch": True}])
        yield client


def test_status_shows_running_then_stopped_with_the_reason(autoscaling):
    assert budget_ops.status(autoscaling, "dev") == ["training: running, desired 0"]
    budget_guard.stop(autoscaling, boto3.client("sagemaker"), "dev", "over budget", budget_guard.datetime.now(
        budget_guard.timezone.utc))
    assert budget_ops.status(autoscaling, "dev")[0].startswith("training: STOPPED (")
    assert "over budget" in budget_ops.status(autoscaling, "dev")[0]


def test_status_of_an_environment_without_fleets(autoscaling):
    assert budget_ops.status(autoscaling, "prod") == ["prod: no fleets found"]


def test_activate_tags_requests_the_platform_tags():
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    with Stubber(ce) as stub:
        stub.add_response("update_cost_allocation_tags_status", {"Errors": [{"TagKey": "component", "Code": "TagKeysNotFound",
                                                                             "Message": "no such tag yet"}]},
                          {"CostAllocationTagsStatus": [{"TagKey": k, "Status": "Active"} for k in budget_ops.COST_TAGS]})
        lines = budget_ops.activate_tags(ce)
    assert lines[0] == "environment: activation requested"
    assert lines[-1] == "component: FAILED: no such tag yet"
