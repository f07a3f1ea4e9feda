"""A TrainingQueue's compute: the launch template its instances boot from and the managed EC2 (ECS) compute
environments AWS Batch scales on it (Spot, On-Demand behind Spot, multi-node over EFA), with the checks on the
props that shape them.

Every environment of a queue shares one ``ComputeSettings``: the platform's instance bootstrap (shared with
SpotGpuFleet), the ECS agent's settings, the tags the budget guard finds the instances by, and the instance role.
AWS Batch facts used here: ../../../shared/BATCH.md and the pages linked next to each use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import jsii
from aws_cdk import (Acknowledgment, Annotations, AspectPriority, Aspects, Duration, IAspect, Size, TagManager,
                     Validations)
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..data.dataset_snapshots import DatasetVolume
from ..errors import ValidationError
from ..governance.scope import BUDGET_SCOPE_TAG
from .gpu_alarms import validate_gpu_types
from .instance_bootstrap import (AL2023_AGENT_INSTALL, GPU_NAMESPACE, InstanceBootstrap, dataset_block_devices,
                                 gpu_agent_config)
from ..foundation.network import ENDPOINTS_WITHOUT_EGRESS, require_endpoints
from .queue_jobs import MULTI_NODE_NODES
from ..runtime.handlers.budget_guard import QUEUE_TAG

ROOT_DEVICE = "/dev/xvda"  # Amazon Linux 2023 (the ECS GPU AMI)
# ECS container stop timeout: the agent sends SIGTERM, then SIGKILL after this (default 30 s on EC2):
# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html (ECS_CONTAINER_STOP_TIMEOUT)
STOP_TIMEOUT_SECONDS = (30, 115)
# An infrastructure update waits at most this long for running jobs before it replaces their instances:
# https://docs.aws.amazon.com/batch/latest/APIReference/API_UpdatePolicy.html
UPDATE_TIMEOUT_MINUTES_MAX = 7200
# The EFA installer needs internet (a NAT gateway): https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html
EFA_INSTALL = ("cd /tmp && curl -fsSLO https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz && "
               "tar -xf aws-efa-installer-latest.tar.gz && cd aws-efa-installer && ./efa_installer.sh -y --minimal")


# --- validation ---------------------------------------------------------------------------------------------------
def validate_capacity(max_vcpus: int, on_demand_max_vcpus: int, stop_timeout: Duration) -> int:
    """Checks the Spot and On-Demand caps and the stop timeout; returns the stop timeout in seconds."""
    def fail(prop, value, allowed, fix):
        raise ValidationError("TrainingQueue", prop, value, allowed, fix)

    if not isinstance(max_vcpus, int) or max_vcpus < 1:
        fail("max_vcpus", max_vcpus, "a whole number of vCPUs, at least 1", "e.g. max_vcpus=256")
    if not isinstance(on_demand_max_vcpus, int) or on_demand_max_vcpus < 0:
        fail("on_demand_max_vcpus", on_demand_max_vcpus, "0 (no On-Demand environment) or more vCPUs",
             "e.g. on_demand_max_vcpus=0")
    seconds = stop_timeout.to_seconds()
    if not STOP_TIMEOUT_SECONDS[0] <= seconds <= STOP_TIMEOUT_SECONDS[1]:
        fail("stop_timeout", stop_timeout.to_human_string(),
             f"{STOP_TIMEOUT_SECONDS[0]}-{STOP_TIMEOUT_SECONDS[1]} seconds: SIGKILL must come before the Spot "
             "notice's 2 minutes end", "e.g. Duration.seconds(110)")
    return int(seconds)


def require_x86(prop: str, entries) -> None:
    arm = [e.name for e in entries if e.architecture != "x86_64"]
    if arm:
        # ECS_AL2023_NVIDIA is an x86_64 image: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-optimized_AMI.html
        raise ValidationError("TrainingQueue", prop, arm, "x86_64 GPU types (the ECS GPU image Batch uses is x86_64)",
                              "use g4dn/g5/g6/g6e/p4d/p5 types, or a SpotGpuFleet for g5g")


def validate_multi_node(scope: Construct, instance_types: Sequence[ec2.InstanceType], max_vcpus: int) -> list:
    """The catalog entries of the multi-node types (none without them): EFA-capable x86_64 types of one shape, and
    room for at least 2 nodes of the largest."""
    if not instance_types:
        if max_vcpus:
            raise ValidationError("TrainingQueue", "multi_node_max_vcpus", max_vcpus,
                                  "0 without multi_node_instance_types", "add EFA types or set it to 0")
        return []
    entries = validate_gpu_types(scope, "TrainingQueue", instance_types, allow_low_diversity=True,
                                 allow_mixed_gpu_memory=False, prop="multi_node_instance_types", min_types=1)
    require_x86("multi_node_instance_types", entries)
    without_efa = [e.name for e in entries if not e.efa]
    if without_efa:
        raise ValidationError("TrainingQueue", "multi_node_instance_types", without_efa,
                              "types with an Elastic Fabric Adapter (gpu_catalog EFA_INSTANCE_TYPES)",
                              "use 8xlarge and larger g5/g6/g6e, p4d.24xlarge or p5.48xlarge")
    largest = max(e.vcpus for e in entries)
    if not isinstance(max_vcpus, int) or max_vcpus < MULTI_NODE_NODES[0] * largest:
        raise ValidationError("TrainingQueue", "multi_node_max_vcpus", max_vcpus,
                              f"room for at least {MULTI_NODE_NODES[0]} nodes of the largest type "
                              f"({MULTI_NODE_NODES[0] * largest} vCPUs)", "raise it (up to 8 nodes' worth)")
    return entries


def multi_node_subnet(vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection], entries, *, efa: bool) -> ec2.ISubnet:
    """The first selected subnet (one AZ for the cluster placement group); with EFA it must reach the internet."""
    # jsii structs keep their fields in _values; select_subnets takes them as keyword arguments.
    subnet = vpc.select_subnets(**(vpc_subnets._values if vpc_subnets else {})).subnets[0]
    if efa and subnet.subnet_id in {s.subnet_id for s in vpc.isolated_subnets}:
        # The boot installs the EFA driver from the internet; without it the EFA device never appears and every
        # attempt fails to start its container.
        raise ValidationError("TrainingQueue", "multi_node_efa", True,
                              "multi-node instances with EFA in subnets with a route to the internet (a NAT gateway): "
                              "their boot installs the EFA driver", "give the VPC a NAT gateway (private subnets with "
                              "egress) and pass those as vpc_subnets, or set multi_node_efa=False")
    return subnet


def check_default_security_group(scope: Construct, vpc: ec2.IVpc) -> None:
    """With EFA, the multi-node compute environment has no security groups (Batch refuses them next to a launch
    template's network interfaces), so each job container's interface gets the VPC's default security group
    (https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html). A default group CDK emptied
    (restrict_default_security_group) lets nothing through: fail. Anything else: say what it must allow."""
    if isinstance(vpc, ec2.Vpc) and vpc.node.try_find_child("RestrictDefaultSecurityGroupCustomResource") is not None:
        raise ValidationError("TrainingQueue", "multi_node_efa", True,
                              "a VPC whose default security group lets the job's nodes reach each other and S3 (with "
                              f"EFA, Batch puts each node's container interface in it); {vpc.node.path} removes its rules "
                              "(restrict_default_security_group)",
                              "set multi_node_efa=False (the nodes get the queue's own security group), or "
                              "restrict_default_security_group=False on the VPC")
    Annotations.of(scope).add_warning_v2(
        "ml-platform:multi-node-default-security-group",
        "multi_node_efa=True: each multi-node job container's network interface is in the VPC's default security "
        "group (Batch refuses security groups on a compute environment whose launch template has network "
        "interfaces), which must let the nodes reach each other and S3, and lets in whatever else is in it. "
        "multi_node_efa=False puts them in the queue's own group.")


QUEUE_ENDPOINTS_WITHOUT_EGRESS = ENDPOINTS_WITHOUT_EGRESS["TrainingQueue"]


def require_endpoints_without_egress(vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection],
                                     scope: Optional[Construct] = None) -> None:
    """In isolated subnets of a VPC of this app, the instances reach AWS only through VPC endpoints
    (``ENDPOINTS_WITHOUT_EGRESS["TrainingQueue"]``): without any of them jobs wait RUNNABLE or the GPU alarms stay
    silent (missing data is not breaching), with no error anywhere. (An imported VPC's endpoints cannot be seen.)"""
    require_endpoints("TrainingQueue", vpc, vpc_subnets,
                      uses="the ECS agent, image pulls, image layers from S3, job logs and GPU metrics go through them",
                      fix="PlatformNetwork(interface_endpoints=[*DEFAULT_INTERFACE_ENDPOINTS, "
                          "*QUEUE_INTERFACE_ENDPOINTS]) (it has the S3 gateway endpoint), or subnets with a NAT "
                          "gateway", scope=scope)


# --- resources ----------------------------------------------------------------------------------------------------
def update_timeout_for(job_timeout: Duration) -> int:
    """The job timeout in whole minutes, rounded up, at most UPDATE_TIMEOUT_MINUTES_MAX."""
    return min(UPDATE_TIMEOUT_MINUTES_MAX, -(-int(job_timeout.to_seconds()) // 60))


def ecs_agent_config(stop_timeout_seconds: int) -> list[str]:
    """ECS agent settings for a GPU training instance: Spot draining on, the SIGTERM-to-SIGKILL time raised from
    30 s so the job can write its checkpoint
    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/spot-instance-draining-linux-container.html), and
    job roles for host-network containers.

    Batch runs single-node jobs in host network mode
    (https://docs.aws.amazon.com/batch/latest/userguide/networking-modes-jobs.html): the container reaches the
    instance metadata service, whatever the hop limit. Its SDK takes the job role from the agent instead
    (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI) only where ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST is on
    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html, default false). The ECS AMI's
    ecs-init turns it on unless ecs.config says otherwise (amazon-ecs-agent ecs-init/docker/docker.go); it is set
    here so the job role never depends on that default. The instance role stays what the ECS and CloudWatch agents
    need, because a job can still read it from the metadata service."""
    return ["mkdir -p /etc/ecs",
            "echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config",
            f"echo ECS_CONTAINER_STOP_TIMEOUT={stop_timeout_seconds}s >> /etc/ecs/ecs.config",
            "echo ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=true >> /etc/ecs/ecs.config"]


# After every tag aspect (priority MUTATING, or DEFAULT in an app without @aws-cdk/core:aspectPrioritiesMutating),
# before the read-only ones; and above any tag priority an app sets, so a later tag cannot come back.
OWN_TAGS_ASPECT_PRIORITY = AspectPriority.READONLY - 1
_OWN_TAGS_PRIORITY = 1_000_000


@jsii.implements(IAspect)
class OwnTagsOnly:
    """Leaves exactly ``tags`` in the create-only top-level Tags of the resource it is added to, whatever tags the
    app, its stages and stacks add. The resource schemas list ``/properties/Tags`` of AWS::Batch::ComputeEnvironment
    and AWS::EC2::PlacementGroup as create-only: a changed tag there replaces the resource, and a replaced compute
    environment's instances are terminated under their running jobs (its update policy applies only to updates).
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-batch-computeenvironment.html
    (Tags: "Update requires: Replacement"). Only this L1's tags: the instances' tags (the L2's ComputeResources.Tags,
    updatable) keep every app tag."""

    def __init__(self, tags: Mapping[str, str]) -> None:
        self._tags = dict(tags)

    def visit(self, node) -> None:
        if not TagManager.is_taggable(node):
            return
        for key in node.tags.tag_values():
            if key not in self._tags:
                node.tags.remove_tag(key, _OWN_TAGS_PRIORITY)
        for key, value in self._tags.items():
            node.tags.set_tag(key, value, _OWN_TAGS_PRIORITY)


def own_tags_only(resource: Construct, tags: Mapping[str, str]) -> None:
    """Keeps ``resource``'s (an L2) create-only top-level Tags to ``tags``: see OwnTagsOnly."""
    Aspects.of(resource.node.default_child).add(OwnTagsOnly(tags), priority=OWN_TAGS_ASPECT_PRIORITY)


def omit_state(resource: Construct) -> None:
    # Without State in the template a deploy never re-enables what the budget guard disabled; Batch creates
    # compute environments and queues ENABLED.
    resource.node.default_child.add_property_deletion_override("State")


@dataclass(frozen=True)
class ComputeSettings:
    """What every launch template and compute environment of one queue shares.

    :param queue_name: the QUEUE_TAG value and the instances' GPU metric dimension.
    :param budget_scope: the BUDGET_SCOPE_TAG value on the instances.
    :param environment: the instance bootstrap's variables (interruption watcher).
    :param stop_timeout_seconds: the ECS agent's SIGTERM-to-SIGKILL time.
    :param root_volume_size: of each instance.
    :param dataset_volumes: mounted read-only on each instance.
    :param update_timeout_minutes: how long an infrastructure update lets running jobs go on (``update_timeout``).
    """
    queue_name: str
    budget_scope: str
    environment: Mapping[str, str]
    stop_timeout_seconds: int
    root_volume_size: Size
    dataset_volumes: Sequence[DatasetVolume]
    update_timeout_minutes: int

    def launch_template(self, scope: Construct, id: str, extra_commands: Sequence[str] = ()) -> ec2.LaunchTemplate:
        """IMDSv2, an encrypted gp3 root, the dataset volumes, and the boot: ECS agent settings, the platform
        bootstrap with the queue as the GPU metrics' dimension, then ``extra_commands``."""
        bootstrap = InstanceBootstrap(
            environment=self.environment, dataset_volumes=self.dataset_volumes, agent_install=AL2023_AGENT_INSTALL,
            agent_config=gpu_agent_config(("QueueName", self.queue_name), static=True, per_instance_in_group=True))
        script = ec2.UserData.for_linux()
        script.add_commands(*ecs_agent_config(self.stop_timeout_seconds), *bootstrap.commands(), *extra_commands)
        # Batch merges this template into the one it manages; its user data must be MIME multi-part:
        # https://docs.aws.amazon.com/batch/latest/userguide/launch-templates.html
        user_data = ec2.MultipartUserData()
        user_data.add_user_data_part(script, ec2.MultipartBody.SHELL_SCRIPT, True)
        return ec2.LaunchTemplate(
            scope, id, require_imdsv2=True, user_data=user_data,
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE, volume=ec2.BlockDeviceVolume.ebs(
                int(self.root_volume_size.to_gibibytes()), volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True,
                delete_on_termination=True)), *dataset_block_devices(scope, self.dataset_volumes)])

    def compute_environment(self, scope: Construct, id: str, vpc: ec2.IVpc,
                            vpc_subnets: Optional[ec2.SubnetSelection], instance_types: Sequence[ec2.InstanceType],
                            max_vcpus: int, *, spot: bool, launch_template: ec2.LaunchTemplate,
                            security_group: ec2.ISecurityGroup,
                            placement_group: Optional[ec2.PlacementGroup] = None) -> batch.ManagedEc2EcsComputeEnvironment:
        """A managed EC2 (ECS) environment from 0 vCPUs on the NVIDIA AL2023 image, following ``launch_template``,
        its instances tagged for the budget guard, never re-enabled by a deploy."""
        environment = batch.ManagedEc2EcsComputeEnvironment(
            scope, id, vpc=vpc, vpc_subnets=vpc_subnets, instance_types=list(instance_types),
            use_optimal_instance_classes=False, spot=spot, minv_cpus=0, maxv_cpus=max_vcpus,
            allocation_strategy=batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED if spot
            else batch.AllocationStrategy.BEST_FIT_PROGRESSIVE,
            # aws-cdk-lib picks ECS_AL2_NVIDIA for GPU types by default; AL2023 is set explicitly:
            # https://docs.aws.amazon.com/batch/latest/APIReference/API_Ec2Configuration.html
            images=[batch.EcsMachineImage(image_type=batch.EcsMachineImageType.ECS_AL2023_NVIDIA)],
            launch_template=launch_template, security_groups=[security_group], placement_group=placement_group,
            update_to_latest_image_version=True,
            # Every launch-template change is an infrastructure update: Batch launches new instances for new jobs and
            # lets running ones go on for update_timeout (30 minutes unless set) before it replaces their instances.
            # A job's own timeout comes first, so a deploy ends no job that stays within it (up to 5 days):
            # https://docs.aws.amazon.com/batch/latest/userguide/updating-compute-environments.html
            update_timeout=Duration.minutes(self.update_timeout_minutes), terminate_on_update=False)
        resource = environment.node.default_child
        # Batch reads a launch template version only at an infrastructure update of the compute environment: naming
        # the template's latest version makes every change of it (user data, volumes) such an update:
        # https://docs.aws.amazon.com/batch/latest/APIReference/API_LaunchTemplateSpecification.html
        resource.add_property_override("ComputeResources.LaunchTemplate.Version", launch_template.latest_version_number)
        # Tags on the instances Batch launches (the L2 has no property for them): the budget guard prices and
        # finds a queue's running capacity by this tag.
        own = {QUEUE_TAG: self.queue_name, BUDGET_SCOPE_TAG: self.budget_scope}
        resource.add_property_override("ComputeResources.Tags", own)
        # The environment's own Tags are create-only: only these two, which never change without the queue (the
        # guard's UpdateComputeEnvironment is allowed only on the budget-scope tag). The app's tags (cost center,
        # environment, ...) still reach the instances above, an update that lets running jobs finish.
        own_tags_only(environment, own)
        omit_state(environment)
        # Only what the ECS agent (the managed policy aws-cdk-lib attaches) and the CloudWatch agent need: a job in
        # host network mode can read this role from the metadata service (ecs_agent_config).
        role = environment.instance_role
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="PublishGpuMetrics", actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": GPU_NAMESPACE}}))
        Validations.of(role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                              "AmazonEC2ContainerServiceforEC2Role]",
                           reason="The AWS-maintained ECS container-instance policy follows the ECS agent's API needs."),
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]",
                           reason="PutMetricData has no resource-level permissions; limited to MLPlatform/GPU by condition."))
        return environment


def multi_node_network(scope: Construct, vpc: ec2.IVpc, queue_name: str) -> tuple[ec2.SecurityGroup, ec2.PlacementGroup]:
    """Multi-node parallel jobs: a cluster placement group, and a security group that lets the nodes talk to each
    other only: https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html"""
    security_group = ec2.SecurityGroup(
        scope, "MultiNodeSecurityGroup", vpc=vpc, allow_all_outbound=True,
        description=f"Training queue {queue_name} multi-node jobs: inbound from its own nodes only")
    security_group.add_ingress_rule(security_group, ec2.Port.all_traffic(), "EFA and NCCL between the job's nodes")
    Validations.of(security_group).acknowledge(Acknowledgment(
        id="AwsSolutions-EC23", reason="Inbound is from this security group only (EFA needs all traffic between nodes)."))
    placement_group = ec2.PlacementGroup(scope, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
    # Its Tags are create-only too: a replaced group changes the environment's placement group (an infrastructure
    # update), and EC2 refuses to delete a group that still has instances. The queue's name only (no budget scope:
    # nothing acts on a placement group by it).
    own_tags_only(placement_group, {QUEUE_TAG: queue_name})
    return security_group, placement_group


def attach_efa(template: ec2.LaunchTemplate, environment: batch.ManagedEc2EcsComputeEnvironment,
               security_group: ec2.ISecurityGroup) -> None:
    """One EFA as the instances' primary interface, carrying ``security_group`` (the L2 launch template has no
    network interfaces). Batch refuses a compute environment with security groups whose launch template has network
    interfaces ("Either compute environment Security Groups or Network Interfaces in Launch template are exclusively
    allowed": https://github.com/aws/aws-cdk/issues/21577, the reason for aws-cdk's fix in
    https://github.com/aws/aws-cdk/pull/21579), and an EFA can be attached only at launch or to a stopped instance
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html): the environment's groups go."""
    template.node.default_child.add_property_override("LaunchTemplateData.NetworkInterfaces", [{
        "DeviceIndex": 0, "InterfaceType": "efa", "Groups": [security_group.security_group_id]}])
    environment.node.default_child.add_property_deletion_override("ComputeResources.SecurityGroupIds")
