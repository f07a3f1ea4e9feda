"""ElasticTraining: the controller of a TrainingQueue's elastic jobs: its rule on the queue's failed jobs, the sizes
the multi-node environment fits (synth fails where max_nodes cannot fit at all), and least-privilege grants scoped to
the queue's job queues, definitions, checkpoint prefix and pending records."""

import shutil
import subprocess
import sys
from ml_platform_constructs import runtime

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template

from ml_platform_constructs import ValidationError
from ml_platform_constructs.training.elastic_training import FUNCTION_FILES, fitting_sizes
from tests.conftest import ACCOUNT, new_app
from test_training_queue import queue_stack


def elastic_stack(tmp_path, *, queue=None, **props):
    """A queue with elastic jobs (TrainingQueue(elastic_max_nodes=...)) of g6.12xlarge multi-node nodes (48 vCPUs)."""
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    egress = ec2.Vpc(stack, "EgressVpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1,
                     restrict_default_security_group=False)
    settings = {"multi_node_instance_types": [ec2.InstanceType("g6.12xlarge")], "multi_node_max_vcpus": 192,
                **(queue or {}), **{f"elastic_{k}": v for k, v in props.items()}}
    settings.setdefault("elastic_max_nodes", 8)
    parts = queue_stack(stack, vpc=egress, alerts=sns.Topic(stack, "ElasticAlerts"),
                        vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS), **settings)
    return stack, parts["queue"].elastic, parts


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    stack, elastic, parts = elastic_stack(tmp_path_factory.mktemp("elastic"), max_nodes=4)
    assert elastic is not None
    return Template.from_stack(stack), elastic, parts


def function_environment(template):
    (function,) = [r for r in template.find_resources("AWS::Lambda::Function").values()
                   if r["Properties"].get("Handler") == "elastic_controller.handler"]
    return function["Properties"]["Environment"]["Variables"]


def test_the_rule_sends_the_queues_failed_jobs_to_the_function(built):
    template, _, _ = built
    template.has_resource_properties("AWS::Events::Rule", {"EventPattern": {
        "source": ["aws.batch"], "detail-type": ["Batch Job State Change"],
        "detail": {"status": ["FAILED"], "jobQueue": Match.array_with([{"Ref": Match.string_like_regexp("MultiNode")}])}},
        "Targets": [Match.object_like({"RetryPolicy": {"MaximumRetryAttempts": 2}})]})


def test_the_function_and_the_jobs_know_the_sizes_and_the_function_both_job_queues(built):
    template, elastic, _ = built
    variables = function_environment(template)
    assert variables["SIZES"] == "1,2,4" and elastic.sizes == [1, 2, 4]
    for definition in template.find_resources("AWS::Batch::JobDefinition").values():
        properties = definition["Properties"]
        container = properties.get("ContainerProperties") or properties["NodeProperties"]["NodeRangeProperties"][0][
            "Container"]
        assert {"Name": "ML_PLATFORM_ELASTIC_SIZES", "Value": "1,2,4"} in container["Environment"]
    assert set(variables) >= {"JOB_QUEUE", "MULTI_NODE_JOB_QUEUE", "CHECKPOINT_ROOT", "CLAIMS_TABLE", "TOPIC_ARN"}


def test_the_multi_node_definition_keeps_its_open_node_range(built):
    template, _, _ = built
    template.has_resource_properties("AWS::Batch::JobDefinition", {
        "Type": "multinode", "NodeProperties": Match.object_like({"NodeRangeProperties": [
            Match.object_like({"TargetNodes": "0:"})]})})


def statements(template):
    policies = [p for k, p in template.find_resources("AWS::IAM::Policy").items() if "ElasticServiceRole" in k]
    return [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_it_may_submit_only_to_the_queues_job_queues_and_definitions(built):
    template, _, _ = built
    (submit,) = [s for s in statements(template) if s.get("Sid") == "ResubmitTheJob"]
    assert submit["Action"] == "batch:SubmitJob"
    text = str(submit["Resource"])
    assert "MultiNodeJobQueue" in text and "job-definition/" in text and "*" not in [r for r in submit["Resource"]
                                                                                    if isinstance(r, str)]
    actions = {a for s in statements(template) for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not actions & {"batch:RegisterJobDefinition", "iam:PassRole", "batch:TerminateJob", "batch:UpdateJobQueue",
                          "s3:DeleteObject*", "s3:List*", "s3:GetBucket*", "ssm:DeleteParameter", "ssm:GetParameter"}


def test_it_reads_requests_and_writes_decisions_under_the_queues_checkpoints_only(built):
    template, _, _ = built
    s3 = [s for s in statements(template) if any(a.startswith("s3:") for a in (
        [s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    resources = str([s["Resource"] for s in s3])
    assert "/checkpoints/training/*/resize-request.json" in resources
    assert "/checkpoints/training/*/resizes/*" in resources


def test_its_pending_records_are_its_own_under_each_job_queue(built):
    template, _, _ = built
    (keep,) = [s for s in statements(template) if s.get("Sid") == "KeepItPendingWhileTheQueueIsStopped"]
    assert "/resize-*" in str(keep["Resource"]) and len(keep["Resource"]) == 2


def test_its_failures_alarm_the_alert_topic(built):
    template, _, _ = built
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "Errors", "Namespace": "AWS/Lambda",
        "AlarmActions": [{"Ref": Match.string_like_regexp("^ElasticAlerts")}]})


def test_the_functions_code_imports_as_lambda_packages_it(tmp_path):
    for name in FUNCTION_FILES:
        shutil.copy(runtime.source(name), tmp_path / name)
    subprocess.run([sys.executable, "-c", "import elastic_controller; elastic_controller.handler"], cwd=tmp_path,
                   check=True)


def test_a_queue_without_elastic_jobs_has_no_controller(tmp_path):
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    assert queue_stack(stack)["queue"].elastic is None


def test_fitting_sizes():
    assert fitting_sizes([1, 2, 4, 8], 48, 192) == [1, 2, 4]
    assert fitting_sizes([1, 2, 4, 8], 32, 64) == [1, 2]


@pytest.mark.parametrize("queue, props, message", [
    ({"multi_node_max_vcpus": 96}, {},
     r"TrainingQueue: elastic_max_nodes=8 is invalid: at most 2: queue training's multi_node_max_vcpus \(96\) holds 2 "
     r".* Fix: lower elastic_max_nodes to 2, or raise the queue's multi_node_max_vcpus to 384"),
    ({"multi_node_instance_types": [], "multi_node_max_vcpus": 0}, {},
     "elastic_max_nodes=8 is invalid: unset \\(0\\) on a queue without a multi-node environment"),
    ({"datasets": None}, {}, "elastic_max_nodes=8 is invalid: unset \\(0\\) on a queue without a dataset bucket"),
    ({}, {"max_nodes": 9}, "elastic_max_nodes=9 is invalid: a whole number from 2 to 8"),
    ({}, {"max_nodes": 2, "sizes": (2, 1)}, r"elastic_sizes=\[2, 1\] is invalid: increasing whole numbers"),
    ({"elastic_max_nodes": 0}, {"sizes": (1, 2)}, "elastic_sizes=\\[1, 2\\] is invalid: unset without"),
])
def test_invalid_props(tmp_path, queue, props, message):
    with pytest.raises(ValidationError, match=message):
        elastic_stack(tmp_path, queue=queue, **props)
