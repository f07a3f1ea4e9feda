"""A TrainingQueue's job definition as its jobs live it: the job's container runs with the job role, the execution
role can pull the image (and only from its repository), a single-node container gets no EFA device, and the stop file
the interruption watcher writes on the host is where the job reads it (mutation survivors of test_training_queue)."""

import pytest

from iam_policy import Request, allowed, role_statements
from tests.conftest import training_queue

REPOSITORY = "arn:aws:ecr:us-east-1:123456789012:repository/train"


@pytest.fixture(scope="module")
def template(synth_stack):
    return synth_stack(training_queue).to_json()


def container(template):
    (definition,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Batch::JobDefinition"]
    return definition["Properties"]["ContainerProperties"]


def test_the_job_runs_with_the_job_role_that_ecs_tasks_assume(template):
    role = container(template)["JobRoleArn"]["Fn::GetAtt"][0]
    assert role.startswith("QueueJobRole")
    trust = template["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert allowed(trust, Request("sts:AssumeRole", principal={"Service": "ecs-tasks.amazonaws.com"}))
    assert not allowed(trust, Request("sts:AssumeRole", principal={"Service": "ec2.amazonaws.com"}))


def test_the_execution_role_pulls_the_image_from_its_repository_only(template):
    role = container(template)["ExecutionRoleArn"]["Fn::GetAtt"][0]
    statements = role_statements(template, role)
    assert allowed(statements, Request("ecr:GetAuthorizationToken"))
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"):
        assert allowed(statements, Request(action, REPOSITORY)), action
        assert not allowed(statements, Request(action, REPOSITORY.replace("/train", "/other"))), action
    assert not allowed(statements, Request("ecr:PutImage", REPOSITORY))


def test_a_single_node_job_gets_no_efa_device_and_reads_the_watchers_stop_file(template):
    settings = container(template)
    assert "Devices" not in settings.get("LinuxParameters", {})
    (volume,) = [v for v in settings["Volumes"] if v["Name"] == "ml-platform-run"]
    assert volume["Host"]["SourcePath"] == "/run/ml-platform"
    assert {"ContainerPath": "/run/ml-platform", "SourceVolume": "ml-platform-run"} in settings["MountPoints"]
    assert {"Name": "ML_PLATFORM_STOP_FILE", "Value": "/run/ml-platform/stop-requested"} in settings["Environment"]
