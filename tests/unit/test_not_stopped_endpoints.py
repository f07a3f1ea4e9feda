"""The guard's "not stopped" list finds endpoints by the budget-scope tag MonitoredEndpoint sets on itself, not by
an `environment` tag only the platform's Stage adds: a team's endpoint next to its guard is listed."""

import boto3
import pytest
from aws_cdk import Stack
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template
from moto import mock_aws

from ml_platform_constructs import BUDGET_SCOPE_TAG, DatasetBucket, MonitoredEndpoint
from ml_platform_constructs.runtime.handlers import budget_guard
from endpoint_vpc import endpoint_vpc
from tests.conftest import ACCOUNT, new_app

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def test_a_monitored_endpoint_tags_only_its_endpoint_with_its_budget_scope(tmp_path):
    stack = Stack(new_app(tmp_path), "Team", env={"account": ACCOUNT, "region": "us-east-1"})
    data = DatasetBucket(stack, "Data")
    MonitoredEndpoint(stack, "Endpoint", endpoint_name="team-clf", image_uri=IMAGE, model_data_bucket=data.bucket,
                      model_data_key="m.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"),
                      baseline_bucket=data, vpc=endpoint_vpc(stack), budget_scope="vision-prod")
    tagged = {name: r["Type"] for name, r in Template.from_stack(stack).to_json()["Resources"].items()
              if {"Key": BUDGET_SCOPE_TAG, "Value": "vision-prod"} in r.get("Properties", {}).get("Tags", [])}
    assert list(tagged.values()) == ["AWS::SageMaker::Endpoint"]


@pytest.fixture
def sagemaker():
    with mock_aws():
        client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        client.create_model(ModelName="m", ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/r",
                            PrimaryContainer={"Image": IMAGE})
        client.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.large", "InitialInstanceCount": 1}])
        for name, tags in (("team-clf", {BUDGET_SCOPE_TAG: "vision-prod"}), ("other-team", {BUDGET_SCOPE_TAG: "other"}),
                           ("platform-0-2", {"environment": "prod"}), ("untagged", {})):
            client.create_endpoint(EndpointName=name, EndpointConfigName="c",
                                   Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        yield client


def test_the_guard_lists_the_endpoints_of_its_scope_as_not_stopped(sagemaker, monkeypatch):
    monkeypatch.setenv("BUDGET_SCOPE", "vision-prod")  # the guard's function gets its scope from the construct
    listed = budget_guard.unstoppable(sagemaker, "prod")
    assert [line.split()[2] for line in listed] == ["team-clf", "platform-0-2"]  # and an endpoint tagged by 0.2's Stage
