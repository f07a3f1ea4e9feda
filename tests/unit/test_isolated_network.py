"""A training team's isolated VPC (issue 37): every construct that puts instances in subnets without a NAT gateway
fails at synth naming the VPC endpoints it lacks (one list per construct, ``ENDPOINTS_WITHOUT_EGRESS``, the same
on its docs page); an imported isolated VPC can be used and is said to be unchecked; the goodput alarms can be
switched off; a refused construct leaves nothing in the tree."""

import re
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template

import ml_platform_constructs
from ml_platform_constructs import (ENDPOINTS_WITHOUT_EGRESS, DatasetSnapshotBuilder, ImportedNetwork, SpotGpuFleet,
                                    TrainingQueue, ValidationError)
from constructs import Construct
from tests.conftest import ACCOUNT, isolated_vpc, training_queue

DOCS = Path(__file__).resolve().parents[2] / "constructs" / "docs"
TYPES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"


def stack() -> Stack:
    return Stack(App(), "Team", env={"account": ACCOUNT, "region": "us-east-1"})


def without(construct: str, *dropped: str):
    """An isolated VPC with the construct's endpoints and Session Manager's, less ``dropped``."""
    scope = stack()
    vpc = isolated_vpc(scope)
    for name in sorted({*ENDPOINTS_WITHOUT_EGRESS[construct], "ssm", "ssmmessages"} - set(dropped)):
        if name == "s3":
            vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        else:
            vpc.add_interface_endpoint(name.replace(".", "-"), service=ec2.InterfaceVpcEndpointAwsService(name))
    return scope, vpc


def fleet(scope, vpc, **props):
    return SpotGpuFleet(scope, "Fleet", vpc=vpc, alerts=sns.Topic(scope, "Alerts"), instance_types=TYPES, **props)


def builder(scope, vpc):
    return DatasetSnapshotBuilder(scope, "Snapshots", vpc=vpc, source_buckets=[s3.Bucket(scope, "Data")],
                                  key=kms.Key(scope, "Key"), environment="dev")


# --- one list per construct, in code and docs ---------------------------------------------------------------------
@pytest.mark.parametrize("construct", sorted(ENDPOINTS_WITHOUT_EGRESS))
def test_each_constructs_page_lists_exactly_the_endpoints_the_code_checks(construct):
    page = (DOCS / f"{construct}.md").read_text()
    lines = re.findall(r"^Endpoints without a NAT gateway: (.*)$", page, flags=re.M)
    assert len(lines) == 1, f"{construct}.md needs one 'Endpoints without a NAT gateway:' line"
    listed = re.findall(r"`([a-z0-9.-]+)`", lines[0].split("(")[0])
    assert listed == list(ENDPOINTS_WITHOUT_EGRESS[construct])


def test_the_queues_old_name_is_the_same_list():
    from ml_platform_constructs.training.queue_compute import QUEUE_ENDPOINTS_WITHOUT_EGRESS

    assert QUEUE_ENDPOINTS_WITHOUT_EGRESS == ENDPOINTS_WITHOUT_EGRESS["TrainingQueue"]


# --- SpotGpuFleet -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dropped", ["monitoring", "s3", "autoscaling", "ec2"])
def test_a_fleet_in_isolated_subnets_without_one_of_its_endpoints_fails_naming_it(dropped):
    scope, vpc = without("SpotGpuFleet", dropped)
    with pytest.raises(ValidationError) as error:
        fleet(scope, vpc)
    message = str(error.value)
    assert message.startswith("SpotGpuFleet: vpc='Team/Vpc' is invalid: isolated subnets with VPC endpoints for")
    assert f"missing: ['{dropped}']" in message and "Fix: PlatformNetwork()" in message
    assert scope.node.try_find_child("Fleet") is None


def test_a_fleet_with_its_endpoints_synthesizes_and_warns_only_without_session_manager():
    scope, vpc = without("SpotGpuFleet")
    fleet(scope, vpc)
    assert not Annotations.from_stack(scope).find_warning("*", Match.string_like_regexp("no-session-manager"))
    scope, vpc = without("SpotGpuFleet", "ssm", "ssmmessages")
    fleet(scope, vpc)
    [warning] = Annotations.from_stack(scope).find_warning("/Team/Fleet", Match.string_like_regexp("Session Manager"))
    assert "['ssm', 'ssmmessages']" in warning.entry.data


def test_a_fleet_in_subnets_with_a_nat_gateway_needs_no_endpoint():
    scope = stack()
    vpc = ec2.Vpc(scope, "Vpc", availability_zones=["us-east-1a"], nat_gateways=1, restrict_default_security_group=False)
    fleet(scope, vpc)
    assert not Annotations.from_stack(scope).find_warning("*", Match.string_like_regexp("Session Manager"))


# --- DatasetSnapshotBuilder ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dropped", ["ssm", "ssmmessages", "s3"])
def test_a_snapshot_builder_without_run_commands_endpoints_fails_naming_them(dropped):
    scope, vpc = without("DatasetSnapshotBuilder", dropped)
    with pytest.raises(ValidationError, match=rf"DatasetSnapshotBuilder: vpc='Team/Vpc' is invalid: .*Run Command.*"
                                              rf"missing: \['{dropped}'\]"):
        builder(scope, vpc)


def test_a_snapshot_builder_with_its_endpoints_synthesizes():
    scope, vpc = without("DatasetSnapshotBuilder")
    builder(scope, vpc)
    Template.from_stack(scope).resource_count_is("AWS::SSM::Document", 1)


# --- an imported isolated VPC -------------------------------------------------------------------------------------
ISOLATED = ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]


def test_an_imported_isolated_vpc_places_compute_in_its_isolated_subnets_and_says_it_is_unchecked():
    scope = stack()
    network = ImportedNetwork(scope, "Net", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a", "us-east-1b"],
                              isolated_subnet_ids=ISOLATED)
    assert [s.subnet_id for s in network.vpc.select_subnets(**network.compute_subnets._values).subnets] == ISOLATED
    TrainingQueue(scope, "Queue", vpc=network.vpc, vpc_subnets=network.compute_subnets, alerts=sns.Topic(scope, "T"),
                  key=kms.Key(scope, "K"), image_uri=IMAGE, instance_types=TYPES)
    template = Template.from_stack(scope)
    template.has_resource_properties("AWS::Batch::ComputeEnvironment", {
        "ComputeResources": Match.object_like({"Subnets": ISOLATED})})
    [warning] = Annotations.from_stack(scope).find_warning("/Team/Net", Match.string_like_regexp("cannot see"))
    for construct, names in ENDPOINTS_WITHOUT_EGRESS.items():
        assert f"{construct}: {', '.join(names)}" in warning.entry.data


@pytest.mark.parametrize("subnets, message", [
    ({}, r"private_subnet_ids / isolated_subnet_ids=\[\[\], \[\]\] is invalid: exactly one of the two"),
    ({"private_subnet_ids": ISOLATED, "isolated_subnet_ids": ISOLATED}, "exactly one of the two"),
    ({"isolated_subnet_ids": ISOLATED[:1]}, r"isolated_subnet_ids=\['subnet-0123456789abcdef0'\] is invalid: one "
                                            r"subnet per AZ \(2\)"),
    ({"isolated_subnet_ids": ["sub-1", "sub-2"]}, "isolated_subnet_ids='sub-1' is invalid"),
])
def test_imported_subnets_are_one_kind_one_per_az(subnets, message):
    scope = stack()
    with pytest.raises(ValidationError, match=message):
        ImportedNetwork(scope, "Net", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a", "us-east-1b"],
                        **subnets)
    assert scope.node.try_find_child("Net") is None


def test_a_private_imported_vpc_gives_no_unchecked_warning():
    scope = stack()
    ImportedNetwork(scope, "Net", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                    private_subnet_ids=ISOLATED[:1])
    assert not Annotations.from_stack(scope).find_warning("*", Match.string_like_regexp("cannot see"))


# --- goodput alarms can be switched off ---------------------------------------------------------------------------
@pytest.mark.parametrize("off, kept", [("input_bound_percent", "checkpoint_bound"),
                                       ("checkpoint_bound_percent", "input_bound")])
def test_a_goodput_threshold_of_none_switches_that_alarm_off(off, kept):
    scope = stack()
    queue = training_queue(scope, **{off: None})
    assert set(queue.alarms) == {"idle", "memory", kept}
    metrics = [a["Properties"]["MetricName"] for a in Template.from_stack(scope).find_resources(
        "AWS::CloudWatch::Alarm").values() if "MetricName" in a["Properties"]]
    assert ("DataWaitShare" in metrics) == (kept == "input_bound")
    assert ("CheckpointShare" in metrics) == (kept == "checkpoint_bound")


@pytest.mark.parametrize("value", [0, 100, True, "30"])
def test_a_goodput_threshold_is_a_percentage_or_none(value):
    with pytest.raises(ValidationError, match=r"input_bound_percent=.* is invalid: a percentage from 1 to 99, or None"):
        training_queue(stack(), input_bound_percent=value)


# --- a refused construct leaves nothing in the tree ---------------------------------------------------------------
def test_every_construct_the_library_exports_takes_its_node_back_when_it_refuses():
    constructs = [getattr(ml_platform_constructs, name) for name in ml_platform_constructs.__all__]
    constructs = [c for c in constructs if isinstance(c, type) and issubclass(c, Construct)]
    assert len(constructs) >= 12
    assert [c.__name__ for c in constructs if not getattr(c, "__refusal_leaves_no_node__", False)] == []


def test_a_refused_queue_leaves_no_node_and_its_id_can_be_used_again():
    scope = stack()
    vpc, alerts, key = isolated_vpc(scope, endpoints_for=["TrainingQueue"]), sns.Topic(scope, "T"), kms.Key(scope, "K")

    def queue(**props):
        return TrainingQueue(scope, "Queue", vpc=vpc, alerts=alerts, key=key, image_uri=IMAGE, instance_types=TYPES,
                             **props)

    with pytest.raises(ValidationError, match="job_attempts"):
        queue(job_attempts=0)
    assert scope.node.try_find_child("Queue") is None
    assert queue().node.path == "Team/Queue"  # the same id: nothing of the refused one is left
    Template.from_stack(scope).resource_count_is("AWS::Batch::JobQueue", 1)


# --- a multi-node-only queue --------------------------------------------------------------------------------------
MULTI = ["g5.48xlarge"]


def multi_only(scope, **props):
    vpc = ec2.Vpc(scope, "Vpc", availability_zones=["us-east-1a"], nat_gateways=1, restrict_default_security_group=False)
    return TrainingQueue(scope, "Queue", vpc=vpc, alerts=sns.Topic(scope, "T"), key=kms.Key(scope, "K"), image_uri=IMAGE,
                         multi_node_instance_types=MULTI, multi_node_max_vcpus=384, **props)


def test_a_queue_can_be_multi_node_only():
    scope = stack()
    queue = multi_only(scope)
    assert queue.multi_node_only and queue.job_queue is None and queue.job_definition is None
    assert queue.spot_environment is None and queue.launch_template is None and queue.multi_node_job_queue is not None
    template = Template.from_stack(scope)
    template.resource_count_is("AWS::Batch::JobQueue", 1)
    template.resource_count_is("AWS::Batch::ComputeEnvironment", 1)
    template.has_resource_properties("AWS::Batch::ComputeEnvironment", {"ComputeResources": Match.object_like({
        "Type": "EC2", "InstanceTypes": MULTI})})
    template.has_resource_properties("AWS::Batch::JobDefinition", {"Type": "multinode"})
    assert set(queue.alarms) == {"idle", "memory", "input_bound", "checkpoint_bound"}
    with pytest.raises(ValidationError, match="add_job_definition='Extra' is invalid: .*multi-node only"):
        queue.add_job_definition("Extra", image_uri=IMAGE)


@pytest.mark.parametrize("prop, value", [("on_demand_max_vcpus", 64), ("job_vcpus", 8)])
def test_a_multi_node_only_queue_refuses_single_node_sizes(prop, value):
    with pytest.raises(ValidationError, match=rf"{prop}=.* is invalid: unset on a multi-node-only queue"):
        multi_only(stack(), **{prop: value})


def test_a_queue_without_any_types_says_both_ways_out():
    scope = stack()
    with pytest.raises(ValidationError, match=r"instance_types=\[\] is invalid: at least one GPU instance type. Fix: "
                                              r"give Spot GPU types, or multi_node_instance_types"):
        TrainingQueue(scope, "Queue", vpc=isolated_vpc(scope, endpoints_for=["TrainingQueue"]),
                      alerts=sns.Topic(scope, "T"), key=kms.Key(scope, "K"), image_uri=IMAGE)


def test_submitting_to_a_multi_node_only_queue_takes_nodes():
    from ml_platform_constructs.operations.jobs import JobError, QueueTarget, check_submission

    target = QueueTarget(name="big", job_queue="", job_definition="", instance_types=(),
                         multi_node_job_queue="arn:mq", multi_node_job_definition="arn:md",
                         multi_node_instance_types=tuple(MULTI))
    with pytest.raises(JobError, match="queue big is multi-node only .* submit with --nodes 2-8"):
        check_submission(target, IMAGE, ["python", "train.py"], name="run-1")
    assert check_submission(target, IMAGE, ["python", "train.py"], name="run-1", nodes=2).multi_node
    assert target.job_queues() == [("big (multi-node)", "arn:mq")]


def test_a_multi_node_only_queue_in_isolated_subnets_without_an_endpoint_fails_naming_it():
    scope, vpc = without("TrainingQueue", "monitoring")
    with pytest.raises(ValidationError, match=r"TrainingQueue: vpc='Team/Vpc' is invalid: .*missing: \['monitoring'\]"):
        TrainingQueue(scope, "Queue", vpc=vpc, alerts=sns.Topic(scope, "T"), key=kms.Key(scope, "K"), image_uri=IMAGE,
                      multi_node_instance_types=MULTI, multi_node_max_vcpus=384)


def test_an_endpoint_defined_outside_the_vpc_counts_and_one_that_cannot_serve_does_not():
    """An endpoint construct of its own (not vpc.add_*) counts; an interface endpoint without private DNS and a
    gateway endpoint routed from other subnets do not."""
    scope = stack()
    vpc = isolated_vpc(scope)
    for name in ("autoscaling", "ec2"):
        ec2.InterfaceVpcEndpoint(scope, name, vpc=vpc, service=ec2.InterfaceVpcEndpointAwsService(name))
    ec2.InterfaceVpcEndpoint(scope, "monitoring", vpc=vpc, service=ec2.InterfaceVpcEndpointAwsService("monitoring"),
                             private_dns_enabled=False)
    ec2.GatewayVpcEndpoint(scope, "S3", vpc=vpc, service=ec2.GatewayVpcEndpointAwsService.S3,
                           subnets=[ec2.SubnetSelection(subnets=vpc.isolated_subnets[:1])])
    with pytest.raises(ValidationError, match=r"missing: \['monitoring', 's3'\]"):
        fleet(scope, vpc)


def test_an_imported_vpcs_isolated_subnets_warn_on_the_construct_that_it_is_unchecked():
    scope = stack()
    vpc = ec2.Vpc.from_vpc_attributes(scope, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                      isolated_subnet_ids=ISOLATED[:1])
    fleet(scope, vpc, vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED))
    [warning] = Annotations.from_stack(scope).find_warning("/Team/Fleet", Match.string_like_regexp("cannot see"))
    assert "autoscaling, ec2, monitoring, s3" in warning.entry.data


def test_a_fleet_or_queue_that_records_to_serverless_mlflow_cannot_sit_in_isolated_subnets():
    """The serverless MLflow app is reached only with egress (no interface endpoint serves it): a fleet or a queue
    recording to it from isolated subnets fails at synth, naming tracking; a tracking server's endpoints pass."""
    from ml_platform_constructs import MLFLOW_INTERFACE_ENDPOINTS, DatasetBucket, MlflowTracking

    for construct, build in (("SpotGpuFleet", lambda scope, vpc, tracking: fleet(scope, vpc, tracking=tracking)),
                             ("TrainingQueue", lambda scope, vpc, tracking: TrainingQueue(
                                 scope, "Queue", vpc=vpc, alerts=sns.Topic(scope, "T"), key=kms.Key(scope, "K"),
                                 image_uri=IMAGE, instance_types=TYPES, tracking=tracking))):
        scope, vpc = without(construct)
        tracking = MlflowTracking(scope, "Tracking", datasets=DatasetBucket(scope, "Data"), name="team")
        with pytest.raises(ValidationError, match=rf"{construct}: vpc='Team/Vpc' is invalid: subnets with egress .* it records runs to"):
            build(scope, vpc, tracking)
        scope, vpc = without(construct)
        for service in MLFLOW_INTERFACE_ENDPOINTS:
            vpc.add_interface_endpoint(service.short_name.replace(".", "-"), service=service)
        server = MlflowTracking(scope, "Tracking", datasets=DatasetBucket(scope, "Data"), name="team",
                                tracking_server_size="Small")
        build(scope, vpc, server)
