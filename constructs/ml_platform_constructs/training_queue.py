"""TrainingQueue: training jobs that run to completion on Spot GPUs, on AWS Batch.

AWS Batch is the scheduler (we never write one): it scales the compute environments from zero, places each
job on an instance its GPUs, vCPUs and memory fit, and retries an attempt by its exit reason. This construct
adds what a training job needs around it: the platform's instance bootstrap (GPU metrics, interruption
watcher, dataset volumes; shared with SpotGpuFleet), a retry strategy that brings a job back from its last
checkpoint after every Spot reclaim, alerts on failed jobs, GPU alarms and a dashboard.
AWS Batch facts used here: ../../../shared/BATCH.md and the pages linked next to each use.
"""

from __future__ import annotations

import json
import re
from typing import Optional, Sequence

import jsii

from aws_cdk import (Acknowledgment, Annotations, ArnFormat, Duration, RemovalPolicy, Size, Stack, Tags, Token,
                     Validations)
from aws_cdk import aws_batch as batch
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from .dataset_bucket import DATASETS_PREFIX, DatasetBucket
from .dataset_snapshots import DatasetVolume
from .errors import ValidationError
from .monitored_endpoint import ECR_IMAGE
from .network import QUEUE_INTERFACE_ENDPOINTS
from .governance import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, govern, validate_budget_scope
from .gpu_alarms import gpu_alarms, gpu_memory_used_ratio, gpu_metric, validate_alarm_props, validate_gpu_types
from .instance_bootstrap import (AL2023_AGENT_INSTALL, GPU_NAMESPACE, RUN_DIR, InstanceBootstrap, dataset_block_devices,
                                 gpu_agent_config, validate_dataset_volumes)
from .runtime.benchmark import BENCHMARK_NAMESPACE, BENCHMARK_PREFIX
from .runtime.budget_guard import QUEUE_TAG

JOB_NAMESPACE = "MLPlatform/Training"
ROOT_DEVICE = "/dev/xvda"  # Amazon Linux 2023 (the ECS GPU AMI)
# Batch retries: 1-10 attempts: https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html
ATTEMPTS = (1, 10)
# ECS container stop timeout: the agent sends SIGTERM, then SIGKILL after this (default 30 s on EC2):
# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html (ECS_CONTAINER_STOP_TIMEOUT)
STOP_TIMEOUT_SECONDS = (30, 115)
MULTI_NODE_NODES = (2, 8)
# EFA device of the host passed into the container: https://docs.aws.amazon.com/batch/latest/userguide/efa.html
EFA_DEVICE = "/dev/infiniband/uverbs0"
# Memory the ECS agent and the OS keep back from an instance (jobs asking for all of it never start):
# https://docs.aws.amazon.com/batch/latest/userguide/memory-management.html
MEMORY_HEADROOM = 0.1
# The EFA installer needs internet (a NAT gateway): https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html
EFA_INSTALL = ("cd /tmp && curl -fsSLO https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz && "
               "tar -xf aws-efa-installer-latest.tar.gz && cd aws-efa-installer && ./efa_installer.sh -y --minimal")


class TrainingQueue(Construct):
    """An AWS Batch job queue that runs GPU training jobs to completion on Spot, resuming from checkpoints.

    Defaults, and why (README, "TrainingQueue"):

    - a managed EC2 (ECS) compute environment on Spot with ``SPOT_PRICE_CAPACITY_OPTIMIZED``, 0 vCPUs when idle,
      across every given type (one GPU shape, at least 4 types, validated like a fleet's), on the NVIDIA ECS
      image ``ECS_AL2023_NVIDIA`` set explicitly (aws-cdk-lib's default for GPU types is still AL2);
    - optional On-Demand environment behind Spot (``on_demand_max_vcpus``). Batch does not fail over by itself:
      a job waits RUNNABLE in the first environment that has room, and goes to the On-Demand one only while the
      Spot one is at its ``max_vcpus`` (https://docs.aws.amazon.com/batch/latest/userguide/job_queues.html);
    - its own launch template (IMDSv2, encrypted gp3 root, the platform bootstrap shared with SpotGpuFleet:
      GPU metrics with the queue as a dimension, interruption watcher, dataset volumes);
    - on a Spot notice the watcher sends the job's container SIGTERM and ECS waits ``stop_timeout`` before
      SIGKILL; the attempt ends as "Host EC2 ... terminated" (or with exit code 143) and is retried; the job's
      own non-zero exit is not;
    - a job definition sized to the smallest type (all its GPUs, its vCPUs, 90% of its memory), logs in a log
      group encrypted with ``key``, a timeout;
    - failed jobs reach ``alerts`` with their status reason and attempts; Spot retries are counted; GPU idle and
      memory alarms per queue notify ``alerts``; a dashboard.

    :param vpc: where the instances run.
    :param instance_types: Spot GPU types from ``gpu_catalog.GPU_CATALOG``: x86_64, one GPU count, GPU memory
        within 2x, at least 4 types.
    :param image_uri: the job definition's container image, in Amazon ECR (``ACCOUNT.dkr.ecr.REGION.amazonaws.com/
        REPO:TAG`` or ``@sha256:``). ``./platform job submit --image`` registers a revision with another image.
    :param alerts: the environment's alert topic.
    :param key: encrypts the job log group (kept as ``.key``: RetrainOnDrift encrypts its logs with it too). A
        ``kms.Key`` of this app gets the CloudWatch Logs statement added; an imported key fails at synth.
    :param vpc_subnets: Default: the VPC's private subnets, every AZ.
    :param datasets: the environment's DatasetBucket: jobs read ``datasets/`` and read and write
        ``checkpoints/<queue_name>/``. Default: no bucket access.
    :param queue_name: names the checkpoint prefix, the queue tag and the QueueName dimension. Default: the construct id.
    :param max_vcpus: Spot vCPUs at most (Batch may exceed it by one instance). Default: 256.
    :param on_demand_max_vcpus: an On-Demand environment behind Spot with this cap; 0 for none. Default: 0.
    :param multi_node_instance_types: EFA-capable types for multi-node parallel jobs (On-Demand only, one AZ,
        cluster placement group), in a job queue of their own. Default: none.
    :param multi_node_max_vcpus: vCPUs of the multi-node environment, room for at least 2 nodes. Default: 0.
    :param job_attempts: attempts per job (1-10), Spot reclaims included. Default: 3.
    :param job_timeout: an attempt running longer is stopped (and not retried). Default: 24 hours.
    :param job_vcpus: vCPUs per job. Default: the smallest type's.
    :param job_memory: memory per job. Default: 90% of the smallest type's.
    :param stop_timeout: SIGTERM to SIGKILL (30-115 s, inside the 2-minute Spot notice). Default: 110 seconds.
    :param root_volume_size: Default: 200 GiB (training images are large).
    :param dataset_volumes: dataset snapshots each instance mounts read-only at ``/data/<name>``, passed into the
        job's container at the same path. Default: none.
    :param idle_threshold_percent / idle_evaluation_periods / alarm_period / memory_pressure_threshold: as
        SpotGpuFleet's (40, 3, 5 minutes, 0.7).
    :param allow_low_diversity / allow_mixed_gpu_memory: as SpotGpuFleet's. Default: False.
    :param removal_policy: of the log group. Default: RETAIN.
    :param budget_scope: the ``BudgetGuard`` scope that may stop this queue (tag ``ml-platform:budget-scope`` on
        its job queues, compute environments and instances). Default: ``"account"``, as the guard's.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        instance_types: Sequence[ec2.InstanceType],
        image_uri: str,
        alerts: sns.ITopic,
        key: kms.IKey,
        vpc_subnets: Optional[ec2.SubnetSelection] = None,
        datasets: Optional[DatasetBucket] = None,
        queue_name: Optional[str] = None,
        max_vcpus: int = 256,
        on_demand_max_vcpus: int = 0,
        multi_node_instance_types: Sequence[ec2.InstanceType] = (),
        multi_node_max_vcpus: int = 0,
        job_attempts: int = 3,
        job_timeout: Duration = Duration.hours(24),
        job_vcpus: Optional[int] = None,
        job_memory: Optional[Size] = None,
        stop_timeout: Duration = Duration.seconds(110),
        root_volume_size: Size = Size.gibibytes(200),
        dataset_volumes: Sequence[DatasetVolume] = (),
        idle_threshold_percent: float = 40,
        idle_evaluation_periods: int = 3,
        alarm_period: Duration = Duration.minutes(5),
        memory_pressure_threshold: Optional[float] = 0.7,
        allow_low_diversity: bool = False,
        allow_mixed_gpu_memory: bool = False,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        budget_scope: str = ACCOUNT_SCOPE,
    ) -> None:
        super().__init__(scope, id)
        self.queue_name = queue_name or id
        validate_budget_scope("TrainingQueue", budget_scope)
        self.budget_scope = budget_scope
        self._validate(image_uri, max_vcpus, on_demand_max_vcpus, job_attempts, job_timeout, stop_timeout)
        self.catalog_entries = validate_gpu_types(self, "TrainingQueue", instance_types,
                                                  allow_low_diversity=allow_low_diversity,
                                                  allow_mixed_gpu_memory=allow_mixed_gpu_memory)
        self._require_x86("instance_types", self.catalog_entries)
        self.multi_node_entries = self._validate_multi_node(multi_node_instance_types, multi_node_max_vcpus)
        self._multi_node_subnet = self._validate_multi_node_subnet(vpc, vpc_subnets) if self.multi_node_entries else None
        self._require_endpoints_without_egress(vpc, vpc_subnets)
        validate_alarm_props("TrainingQueue", idle_threshold_percent=idle_threshold_percent,
                             idle_evaluation_periods=idle_evaluation_periods, alarm_period=alarm_period,
                             memory_pressure_threshold=memory_pressure_threshold)
        validate_dataset_volumes(self, "TrainingQueue", dataset_volumes)
        self.gpus_per_job = self.catalog_entries[0].gpu_count
        self.multi_node_job_size = smallest_fit(self.multi_node_entries) if self.multi_node_entries else None
        self.job_vcpus, self.job_memory_mib = self._job_size(self.catalog_entries, job_vcpus, job_memory)
        self.checkpoint_prefix = DatasetBucket.checkpoint_prefix(self.queue_name)
        self._period = alarm_period
        self._idle_threshold = idle_threshold_percent
        self._arrange_log_key(key)
        self.key = key
        Tags.of(self).add(QUEUE_TAG, self.queue_name)
        govern(self, budget_scope)

        self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                description=f"Training queue {self.queue_name}: no inbound")
        self.log_group = logs.LogGroup(self, "JobLogs", encryption_key=key, retention=logs.RetentionDays.THREE_MONTHS,
                                       removal_policy=removal_policy)
        self.job_role = iam.Role(self, "JobRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                                 description=f"Training queue {self.queue_name} jobs")
        self._grant_job_permissions(datasets)
        environment = {"AWS_REGION": Stack.of(self).region, "ML_PLATFORM_SIGNAL_CONTAINERS": "ecs",
                       "ML_PLATFORM_QUEUE_NAME": self.queue_name}
        self.launch_template = self._launch_template("LaunchTemplate", environment, root_volume_size, dataset_volumes)

        self.spot_environment = self._compute_environment(
            "SpotEnvironment", vpc, vpc_subnets, instance_types, max_vcpus, spot=True, launch_template=self.launch_template,
            security_group=self.security_group)
        self.on_demand_environment = None
        order = [batch.OrderedComputeEnvironment(compute_environment=self.spot_environment, order=1)]
        if on_demand_max_vcpus:
            self.on_demand_environment = self._compute_environment(
                "OnDemandEnvironment", vpc, vpc_subnets, instance_types, on_demand_max_vcpus, spot=False,
                launch_template=self.launch_template, security_group=self.security_group)
            order.append(batch.OrderedComputeEnvironment(compute_environment=self.on_demand_environment, order=2))
        self.job_queue = batch.JobQueue(self, "Resource", compute_environments=order)
        self._omit_state(self.job_queue)
        # Ref of a job queue is its ARN (the CloudFormation return values), the same value as aws-cdk-lib's GetAtt.
        self.job_queue_arn = self.job_queue.node.default_child.ref

        volumes = [batch.EcsVolume.host(name="ml-platform-run", host_path=RUN_DIR, container_path=RUN_DIR)] + [
            batch.EcsVolume.host(name=f"dataset-{v.name}", host_path=v.mount_point, container_path=v.mount_point,
                                 readonly=True) for v in dataset_volumes]
        self._job_environment = self._container_environment(datasets)
        self._volumes, self._job_attempts, self._job_timeout = volumes, job_attempts, job_timeout
        self.job_definition = self.add_job_definition("JobDefinition", image_uri=image_uri)

        self.multi_node_environment = self.multi_node_job_queue = self.multi_node_job_definition = None
        self.multi_node_job_queue_arn = None
        if self.multi_node_entries:
            self._multi_node(vpc, multi_node_instance_types, multi_node_max_vcpus, environment,
                             root_volume_size, dataset_volumes, image_uri, volumes, job_attempts, job_timeout)

        self.failed_jobs_rule, self.spot_retries_rule = self._job_events(alerts)
        self.idle_alarm, self.memory_alarm = gpu_alarms(
            self, subject=f"Training queue {self.queue_name}", utilization=self.metric_gpu_utilization(),
            memory_used_ratio=self.metric_gpu_memory_used_ratio(), idle_threshold_percent=idle_threshold_percent,
            evaluation_periods=idle_evaluation_periods, memory_pressure_threshold=memory_pressure_threshold,
            actions=[cw_actions.SnsAction(alerts)],
            idle_note="A running job whose GPUs sit this low is starved by its input pipeline (data loading, "
                      "preprocessing): see README. An empty queue publishes nothing and does not alarm.")
        self.dashboard = self._dashboard()

    # --- validation -------------------------------------------------------------------------------------------
    def _validate(self, image_uri, max_vcpus, on_demand_max_vcpus, job_attempts, job_timeout, stop_timeout) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("TrainingQueue", prop, value, allowed, fix)

        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$", self.queue_name):
            fail("queue_name", self.queue_name, "1-40 letters, digits, '_' or '-', starting with a letter or digit",
                 "rename the queue")
        if not Token.is_unresolved(image_uri) and not is_tagged_ecr_image(image_uri):
            fail("image_uri", image_uri, "an Amazon ECR image, ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG",
                 "push the image to ECR (AWS Deep Learning Containers are there too) and use its URI")
        if not isinstance(max_vcpus, int) or max_vcpus < 1:
            fail("max_vcpus", max_vcpus, "a whole number of vCPUs, at least 1", "e.g. max_vcpus=256")
        if not isinstance(on_demand_max_vcpus, int) or on_demand_max_vcpus < 0:
            fail("on_demand_max_vcpus", on_demand_max_vcpus, "0 (no On-Demand environment) or more vCPUs",
                 "e.g. on_demand_max_vcpus=0")
        if not isinstance(job_attempts, int) or not ATTEMPTS[0] <= job_attempts <= ATTEMPTS[1]:
            fail("job_attempts", job_attempts, f"{ATTEMPTS[0]}-{ATTEMPTS[1]} (AWS Batch's range)",
                 "e.g. 3: each Spot reclaim uses one attempt")
        if job_timeout.to_seconds() < 60:
            fail("job_timeout", job_timeout.to_human_string(), "at least 60 seconds (AWS Batch's minimum)",
                 "e.g. Duration.hours(24)")
        seconds = stop_timeout.to_seconds()
        if not STOP_TIMEOUT_SECONDS[0] <= seconds <= STOP_TIMEOUT_SECONDS[1]:
            fail("stop_timeout", stop_timeout.to_human_string(),
                 f"{STOP_TIMEOUT_SECONDS[0]}-{STOP_TIMEOUT_SECONDS[1]} seconds: SIGKILL must come before the Spot "
                 "notice's 2 minutes end", "e.g. Duration.seconds(110)")
        self._stop_timeout_seconds = int(seconds)

    @staticmethod
    def _require_x86(prop: str, entries) -> None:
        arm = [e.name for e in entries if e.architecture != "x86_64"]
        if arm:
            # ECS_AL2023_NVIDIA is an x86_64 image: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-optimized_AMI.html
            raise ValidationError("TrainingQueue", prop, arm, "x86_64 GPU types (the ECS GPU image Batch uses is x86_64)",
                                  "use g4dn/g5/g6/g6e/p4d/p5 types, or a SpotGpuFleet for g5g")

    def _validate_multi_node(self, instance_types: Sequence[ec2.InstanceType], max_vcpus: int):
        if not instance_types:
            if max_vcpus:
                raise ValidationError("TrainingQueue", "multi_node_max_vcpus", max_vcpus,
                                      "0 without multi_node_instance_types", "add EFA types or set it to 0")
            return []
        entries = validate_gpu_types(self, "TrainingQueue", instance_types, allow_low_diversity=True,
                                     allow_mixed_gpu_memory=False, prop="multi_node_instance_types", min_types=1)
        self._require_x86("multi_node_instance_types", entries)
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

    def _require_endpoints_without_egress(self, vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection]) -> None:
        """In isolated subnets of a VPC of this app, the instances reach ECS, ECR and Logs only through interface
        endpoints: without them they never join the queue and every job waits RUNNABLE, with no error anywhere.
        (An imported VPC's endpoints cannot be seen from here.)"""
        if not isinstance(vpc, ec2.Vpc):
            return
        # jsii structs keep their fields in _values; select_subnets takes them as keyword arguments.
        subnets = vpc.select_subnets(**(vpc_subnets._values if vpc_subnets else {})).subnets
        isolated = {s.subnet_id for s in vpc.isolated_subnets}
        if not subnets or any(s.subnet_id not in isolated for s in subnets):
            return
        services = [json.dumps(Stack.of(vpc).resolve(c.service_name)) for c in vpc.node.find_all()
                    if isinstance(c, ec2.CfnVPCEndpoint)]
        needed = [*(e.short_name for e in QUEUE_INTERFACE_ENDPOINTS), "logs"]
        missing = [name for name in needed if not any(f'.{name}"' in service for service in services)]
        if missing:
            raise ValidationError("TrainingQueue", "vpc", vpc.node.path,
                                  f"isolated subnets with interface endpoints for {needed} (no NAT gateway: the "
                                  f"ECS agent, image pulls and job logs go through them); missing: {missing}",
                                  "PlatformNetwork(interface_endpoints=[*DEFAULT_INTERFACE_ENDPOINTS, "
                                  "*QUEUE_INTERFACE_ENDPOINTS]), or subnets with a NAT gateway")

    def _validate_multi_node_subnet(self, vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection]) -> ec2.ISubnet:
        """The first selected subnet (one AZ for the cluster placement group), which must reach the internet."""
        # jsii structs keep their fields in _values; select_subnets takes them as keyword arguments.
        subnet = vpc.select_subnets(**(vpc_subnets._values if vpc_subnets else {})).subnets[0]
        if subnet.subnet_id in {s.subnet_id for s in vpc.isolated_subnets}:
            # The boot installs the EFA driver from the internet; without it the EFA device never appears and every
            # attempt fails to start its container.
            raise ValidationError("TrainingQueue", "multi_node_instance_types",
                                  [e.name for e in self.multi_node_entries],
                                  "multi-node instances in subnets with a route to the internet (a NAT gateway): their "
                                  "boot installs the EFA driver", "give the VPC a NAT gateway (private subnets with "
                                  "egress) and pass those as vpc_subnets, or drop multi_node_instance_types")
        return subnet

    def _job_size(self, entries, job_vcpus: Optional[int], job_memory: Optional[Size]) -> tuple[int, int]:
        _, smallest_vcpus, smallest_memory = smallest_fit(entries)
        largest_vcpus = max(e.vcpus for e in entries)
        largest_memory = int(max(e.memory_gib for e in entries) * 1024 * (1 - MEMORY_HEADROOM))
        vcpus = job_vcpus or smallest_vcpus
        memory = int(job_memory.to_mebibytes()) if job_memory is not None else smallest_memory
        if not isinstance(vcpus, int) or not 1 <= vcpus <= largest_vcpus:
            raise ValidationError("TrainingQueue", "job_vcpus", job_vcpus, f"1-{largest_vcpus} (the largest type's "
                                  "vCPUs): a job that fits no type waits RUNNABLE forever", "lower it or add larger types")
        if not 1024 <= memory <= largest_memory:
            raise ValidationError("TrainingQueue", "job_memory", f"{memory} MiB", f"1024-{largest_memory} MiB (90% of "
                                  "the largest type's memory)", "lower it or add larger types")
        if vcpus > smallest_vcpus or memory > smallest_memory:
            Annotations.of(self).add_warning_v2(
                "ml-platform:job-fits-some-types",
                f"job_vcpus={vcpus}, job_memory={memory} MiB fit only the larger types: Spot has fewer pools to use.")
        return vcpus, memory

    def _arrange_log_key(self, key: kms.IKey) -> None:
        stack = Stack.of(self)
        added = key.add_to_resource_policy(iam.PolicyStatement(
            sid="AllowCloudWatchLogsToEncryptLogGroups",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn":
                                    f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:*"}}),
            allow_no_op=True)
        if not added.statement_added:
            raise ValidationError("TrainingQueue", "key", key.key_arn,
                                  "a key whose policy this app can change, or one that already lets CloudWatch Logs "
                                  "encrypt (an imported key's policy cannot be checked or changed here)",
                                  "pass a kms.Key or PlatformKey.key of this app (the queue adds the statement itself)")

    # --- resources --------------------------------------------------------------------------------------------
    def _launch_template(self, id: str, environment: dict, root_volume_size: Size,
                         dataset_volumes: Sequence[DatasetVolume], extra_commands: Sequence[str] = ()) -> ec2.LaunchTemplate:
        bootstrap = InstanceBootstrap(
            environment=environment, dataset_volumes=dataset_volumes, agent_install=AL2023_AGENT_INSTALL,
            agent_config=gpu_agent_config(("QueueName", self.queue_name), static=True))
        ecs_agent = ecs_agent_config(self._stop_timeout_seconds)
        script = ec2.UserData.for_linux()
        script.add_commands(*ecs_agent, *bootstrap.commands(), *extra_commands)
        # Batch merges this template into the one it manages; its user data must be MIME multi-part:
        # https://docs.aws.amazon.com/batch/latest/userguide/launch-templates.html
        user_data = ec2.MultipartUserData()
        user_data.add_user_data_part(script, ec2.MultipartBody.SHELL_SCRIPT, True)
        return ec2.LaunchTemplate(
            self, id, require_imdsv2=True, user_data=user_data,
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE, volume=ec2.BlockDeviceVolume.ebs(
                int(root_volume_size.to_gibibytes()), volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True,
                delete_on_termination=True)), *dataset_block_devices(self, dataset_volumes)])

    def _compute_environment(self, id: str, vpc, vpc_subnets, instance_types, max_vcpus: int, *, spot: bool,
                             launch_template: ec2.LaunchTemplate, security_group: ec2.ISecurityGroup,
                             placement_group: Optional[ec2.PlacementGroup] = None) -> batch.ManagedEc2EcsComputeEnvironment:
        environment = batch.ManagedEc2EcsComputeEnvironment(
            self, id, vpc=vpc, vpc_subnets=vpc_subnets, instance_types=list(instance_types),
            use_optimal_instance_classes=False, spot=spot, minv_cpus=0, maxv_cpus=max_vcpus,
            allocation_strategy=batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED if spot
            else batch.AllocationStrategy.BEST_FIT_PROGRESSIVE,
            # aws-cdk-lib picks ECS_AL2_NVIDIA for GPU types by default; AL2023 is set explicitly:
            # https://docs.aws.amazon.com/batch/latest/APIReference/API_Ec2Configuration.html
            images=[batch.EcsMachineImage(image_type=batch.EcsMachineImageType.ECS_AL2023_NVIDIA)],
            launch_template=launch_template, security_groups=[security_group], placement_group=placement_group,
            update_to_latest_image_version=True)
        resource = environment.node.default_child
        # Batch reads a launch template version only at an infrastructure update of the compute environment: naming
        # the template's latest version makes every change of it (user data, volumes) such an update:
        # https://docs.aws.amazon.com/batch/latest/APIReference/API_LaunchTemplateSpecification.html
        resource.add_property_override("ComputeResources.LaunchTemplate.Version", launch_template.latest_version_number)
        # Tags on the instances Batch launches (the L2 has no property for them): the budget guard prices and
        # finds a queue's running capacity by this tag.
        resource.add_property_override("ComputeResources.Tags", {QUEUE_TAG: self.queue_name,
                                                                 BUDGET_SCOPE_TAG: self.budget_scope})
        self._omit_state(environment)
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

    @staticmethod
    def _omit_state(resource: Construct) -> None:
        # Without State in the template a deploy never re-enables what the budget guard disabled; Batch creates
        # compute environments and queues ENABLED.
        resource.node.default_child.add_property_deletion_override("State")

    def _container_environment(self, datasets: Optional[DatasetBucket]) -> dict[str, str]:
        environment = {"ML_PLATFORM_QUEUE_NAME": self.queue_name, "ML_PLATFORM_STOP_FILE": f"{RUN_DIR}/stop-requested",
                       "ML_PLATFORM_JOB_NAMESPACE": JOB_NAMESPACE}
        if datasets is not None:
            environment["ML_PLATFORM_DATASETS_URI"] = f"s3://{datasets.bucket_name}/{DATASETS_PREFIX}"
            environment["ML_PLATFORM_DATASET_BUCKET"] = datasets.bucket_name  # e.g. gpu_benchmark.py's records
            # ./platform job submit adds ML_PLATFORM_CHECKPOINT_URI=<root><job name>/ per job.
            environment["ML_PLATFORM_CHECKPOINT_ROOT"] = f"s3://{datasets.bucket_name}/{self.checkpoint_prefix}"
        return environment

    def _container(self, id: str, image_uri: str, volumes, size: tuple[int, int, int], *,
                   efa: bool = False, command: Sequence[str] = ()) -> batch.EcsEc2ContainerDefinition:
        gpus, vcpus, memory_mib = size
        linux = batch.LinuxParameters(self, f"{id}Linux", init_process_enabled=True,
                                      # PyTorch's DataLoader workers share tensors through /dev/shm (64 MiB by default).
                                      shared_memory_size=Size.mebibytes(memory_mib // 4))
        if efa:
            linux.add_devices(batch.Device(host_path=EFA_DEVICE, container_path=EFA_DEVICE, permissions=[
                batch.DevicePermission.READ, batch.DevicePermission.WRITE, batch.DevicePermission.MKNOD]))
        container = batch.EcsEc2ContainerDefinition(
            self, id, image=ecs.ContainerImage.from_registry(image_uri), cpu=vcpus,
            memory=Size.mebibytes(memory_mib), gpu=gpus, job_role=self.job_role, command=list(command) or None,
            environment=self._job_environment, volumes=volumes, linux_parameters=linux,
            logging=ecs.LogDriver.aws_logs(stream_prefix=self.queue_name, log_group=self.log_group))
        self._grant_image_pull(container, image_uri)
        return container

    @staticmethod
    def _grant_image_pull(container: batch.EcsEc2ContainerDefinition, image_uri: str) -> None:
        """The execution role pulls the image from its ECR repository, in whatever account it lives (AWS Deep
        Learning Containers are in AWS's): https://docs.aws.amazon.com/AmazonECR/latest/userguide/ECR_on_ECS.html"""
        role = container.execution_role
        role.add_to_principal_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        if Token.is_unresolved(image_uri):
            repository = "*"
        else:
            registry, path = image_uri.split("/", 1)
            account, _, _, region = registry.split(".")[:4]
            name = re.split(r"[:@]", path, maxsplit=1)[0]
            repository = f"arn:{Stack.of(container).partition}:ecr:{region}:{account}:repository/{name}"
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
            resources=[repository]))
        Annotations.of(container).acknowledge_warning(
            "@aws-cdk/aws-ecs:ecrImageRequiresPolicy", "The execution role is granted pulls from the image's repository.")
        Validations.of(role).acknowledge(Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]", reason="ecr:GetAuthorizationToken has no resource-level permissions."))

    def add_job_definition(self, id: str, *, image_uri: str, command: Sequence[str] = ()) -> batch.EcsJobDefinition:
        """A single-node job definition of this queue (its size, retries, timeout, volumes, logs and job role) with
        another image and, optionally, a default command: e.g. an endpoint's retraining job."""
        if id != "JobDefinition" and not Token.is_unresolved(image_uri) and not is_tagged_ecr_image(image_uri):
            raise ValidationError("TrainingQueue", "add_job_definition image_uri", image_uri,
                                  "an Amazon ECR image", "push the image to ECR and use its URI")
        container = self._container(f"{id}Container" if id != "JobDefinition" else "Container", image_uri,
                                    self._volumes, (self.gpus_per_job, self.job_vcpus, self.job_memory_mib),
                                    command=command)
        return batch.EcsJobDefinition(self, id, container=container, retry_attempts=self._job_attempts,
                                      retry_strategies=self.retry_strategies(), timeout=self._job_timeout,
                                      propagate_tags=True)

    @property
    def checkpoint_root(self) -> Optional[str]:
        """``s3://BUCKET/checkpoints/<queue>/`` when the queue has a dataset bucket; a job's checkpoints go under
        ``<root><job name>/``."""
        return self._job_environment.get("ML_PLATFORM_CHECKPOINT_ROOT")

    @staticmethod
    def retry_strategies() -> list[batch.RetryStrategy]:
        """At most 5 entries (Batch's limit); the first that matches decides, and EXIT ends the list."""
        return [
            # Spot reclaim: "Host EC2 (instance i-...) terminated."
            batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.SPOT_INSTANCE_RECLAIMED),
            # The job exited on the watcher's SIGTERM (128 + 15) before its host went away; nothing else on the
            # platform sends SIGTERM to a running job that Batch would retry (TerminateJob and timeouts are final).
            batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.custom(on_exit_code="143")),
            # Start-up failures on the instance (ECR throttling, agent or Docker trouble).
            batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.CANNOT_PULL_CONTAINER),
            batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.custom(on_reason="CannotStartContainerError*")),
            # Everything else, the job's own non-zero exit included, is final.
            batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_reason="*")),
        ]

    def _grant_job_permissions(self, datasets: Optional[DatasetBucket]) -> None:
        # Progress (job_metrics) and measured throughput (examples/gpu_benchmark.py) metrics.
        self.job_role.add_to_principal_policy(iam.PolicyStatement(
            sid="PublishJobProgress", actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": [JOB_NAMESPACE, BENCHMARK_NAMESPACE]}}))
        Validations.of(self.job_role).acknowledge(Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason="PutMetricData has no resource-level permissions; limited to the platform's training and "
                   "benchmark namespaces by condition."))
        if datasets is None:
            return
        datasets.grant_training(self.job_role, checkpoint_prefix=self.checkpoint_prefix,
                                write_prefixes=[BENCHMARK_PREFIX], owner="the queue's")

    def _multi_node(self, vpc, instance_types, max_vcpus, environment, root_volume_size,
                    dataset_volumes, image_uri, volumes, job_attempts, job_timeout) -> None:
        # Multi-node parallel jobs: On-Demand only, one AZ, a cluster placement group, and a security group that
        # lets the nodes talk to each other only: https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html
        one_az = ec2.SubnetSelection(subnets=[self._multi_node_subnet])
        self.multi_node_security_group = ec2.SecurityGroup(
            self, "MultiNodeSecurityGroup", vpc=vpc, allow_all_outbound=True,
            description=f"Training queue {self.queue_name} multi-node jobs: inbound from its own nodes only")
        self.multi_node_security_group.add_ingress_rule(self.multi_node_security_group, ec2.Port.all_traffic(),
                                                        "EFA and NCCL between the job's nodes")
        Validations.of(self.multi_node_security_group).acknowledge(Acknowledgment(
            id="AwsSolutions-EC23", reason="Inbound is from this security group only (EFA needs all traffic between nodes)."))
        self.placement_group = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
        template = self._launch_template("MultiNodeLaunchTemplate", environment, root_volume_size, dataset_volumes,
                                         extra_commands=[EFA_INSTALL])
        # The L2 launch template has no network interfaces: one EFA as the primary interface.
        template.node.default_child.add_property_override("LaunchTemplateData.NetworkInterfaces", [{
            "DeviceIndex": 0, "InterfaceType": "efa", "Groups": [self.multi_node_security_group.security_group_id]}])
        self.multi_node_environment = self._compute_environment(
            "MultiNodeEnvironment", vpc, one_az, instance_types, max_vcpus, spot=False, launch_template=template,
            security_group=self.multi_node_security_group, placement_group=self.placement_group)
        # Security groups go either on the compute environment or on the launch template's network interfaces,
        # never both (Batch rejects the environment); the EFA interface carries them here.
        self.multi_node_environment.node.default_child.add_property_deletion_override("ComputeResources.SecurityGroupIds")
        self.multi_node_job_queue = batch.JobQueue(self, "MultiNodeJobQueue", compute_environments=[
            batch.OrderedComputeEnvironment(compute_environment=self.multi_node_environment, order=1)])
        self._omit_state(self.multi_node_job_queue)
        self.multi_node_job_queue_arn = self.multi_node_job_queue.node.default_child.ref
        self.multi_node_job_definition = batch.MultiNodeJobDefinition(
            self, "MultiNodeJobDefinition", main_node=0, retry_attempts=job_attempts,
            retry_strategies=self.retry_strategies(), timeout=job_timeout, propagate_tags=True,
            containers=[batch.MultiNodeContainer(
                container=self._container("MultiNodeContainer", image_uri, volumes, self.multi_node_job_size, efa=True),
                start_node=0, end_node=MULTI_NODE_NODES[0] - 1)])
        definition = self.multi_node_job_definition.node.default_child
        # An open node range ("0:") lets a submission choose 2-8 nodes with nodeOverrides.numNodes:
        # https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeOverrides.html
        definition.add_property_override("NodeProperties.NodeRangeProperties.0.TargetNodes", "0:")
        definition.add_property_override("NodeProperties.NumNodes", MULTI_NODE_NODES[0])

    def _job_events(self, alerts: sns.ITopic) -> tuple[events.Rule, events.Rule]:
        queues = [self.job_queue_arn]
        if self.multi_node_job_queue is not None:
            queues.append(self.multi_node_job_queue_arn)
        # https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html
        detail_type = ["Batch Job State Change"]
        field = events.EventField.from_path
        failed = events.Rule(
            self, "FailedJobs", description=f"Training queue {self.queue_name}: a job failed after its last attempt",
            event_pattern=events.EventPattern(source=["aws.batch"], detail_type=detail_type,
                                              detail={"jobQueue": queues, "status": ["FAILED"]}),
            targets=[targets.SnsTopic(alerts, message=events.RuleTargetInput.from_text(
                f"Training queue {self.queue_name}: job {field('$.detail.jobName')} ({field('$.detail.jobId')}) FAILED: "
                f"{field('$.detail.statusReason')}. Attempts: {field('$.detail.attempts')}. Logs: "
                f"./platform job logs ENV {field('$.detail.jobId')} (or the job's log stream in "
                f"{self.log_group.log_group_name})."))])
        # A job back in RUNNABLE after an attempt that Spot ended: counted by the rule's TriggeredRules metric.
        retries = events.Rule(
            self, "SpotRetries", description=f"Training queue {self.queue_name}: a job retried after a Spot reclaim",
            event_pattern=events.EventPattern(source=["aws.batch"], detail_type=detail_type, detail={
                "jobQueue": queues, "status": ["RUNNABLE"],
                "$or": [{"attempts": {"statusReason": [{"prefix": "Host EC2"}]}},
                        {"attempts": {"container": {"exitCode": [143]}}}]}),
            targets=[LogGroupTarget(self.log_group)])
        # Every state change of the queue's jobs, for the dashboard's jobs-by-state chart and as an audit trail.
        states = events.Rule(self, "JobStateChanges", description=f"Training queue {self.queue_name}: job state changes",
                             event_pattern=events.EventPattern(source=["aws.batch"], detail_type=detail_type,
                                                               detail={"jobQueue": queues}),
                             targets=[LogGroupTarget(self.log_group)])
        # EventBridge writes to a log group through the account's Logs resource policy (at most 10 per Region), here
        # for these two rules only:
        # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-cloudwatchlogs-permissions
        logs.ResourcePolicy(self, "EventsToLogs", policy_statements=[iam.PolicyStatement(
            principals=[iam.ServicePrincipal("events.amazonaws.com"), iam.ServicePrincipal("delivery.logs.amazonaws.com")],
            actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[self.log_group.log_group_arn],
            conditions={"ArnEquals": {"aws:SourceArn": [retries.rule_arn, states.rule_arn]}})])
        return failed, retries

    # --- metrics ----------------------------------------------------------------------------------------------
    def metric_gpu_utilization(self, **kwargs) -> cloudwatch.Metric:
        """``MLPlatform/GPU nvidia_smi_utilization_gpu`` averaged over the queue's GPUs (percent)."""
        return gpu_metric("nvidia_smi_utilization_gpu", ("QueueName", self.queue_name), self._period, **kwargs)

    def metric_gpu_memory_used_ratio(self, **kwargs) -> cloudwatch.MathExpression:
        """GPU memory used / total over the queue's instances (0-1)."""
        return gpu_memory_used_ratio(("QueueName", self.queue_name), self._period, **kwargs)

    def metric_spot_retries(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/Events TriggeredRules`` of the Spot-retry rule: jobs sent back to RUNNABLE after a reclaim (Sum).
        The rule matches a job's whole attempt history, so after one reclaim each later return to RUNNABLE of that
        job counts again: an upper bound."""
        options = {"period": self._period, "statistic": "Sum", **kwargs}
        return cloudwatch.Metric(namespace="AWS/Events", metric_name="TriggeredRules",
                                 dimensions_map={"RuleName": self.spot_retries_rule.rule_name}, **options)

    def metric_failed_jobs(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/Events TriggeredRules`` of the failed-job rule (Sum)."""
        options = {"period": self._period, "statistic": "Sum", **kwargs}
        return cloudwatch.Metric(namespace="AWS/Events", metric_name="TriggeredRules",
                                 dimensions_map={"RuleName": self.failed_jobs_rule.rule_name}, **options)

    def _dashboard(self) -> cloudwatch.Dashboard:
        return cloudwatch.Dashboard(self, "Dashboard", widgets=[[
            cloudwatch.LogQueryWidget(
                title="Job state changes by state (Batch events logged by the queue)", width=12,
                log_group_names=[self.log_group.log_group_name],
                query_lines=["fields detail.status", "filter ispresent(detail.status)",
                             "stats count(*) by detail.status, bin(5m)"]),
            cloudwatch.GraphWidget(title="Spot retries and failed jobs", width=12,
                                   left=[self.metric_spot_retries(), self.metric_failed_jobs()]),
        ], [
            cloudwatch.GraphWidget(title="GPU utilization (%)", left=[self.metric_gpu_utilization()], width=12,
                                   left_annotations=[cloudwatch.HorizontalAnnotation(value=self._idle_threshold,
                                                                                     label="idle threshold")]),
            cloudwatch.GraphWidget(title="Instances (GPU utilization per instance)", width=12, left=[
                cloudwatch.MathExpression(
                    label="", period=self._period,
                    expression=f"SELECT AVG(nvidia_smi_utilization_gpu) FROM SCHEMA(\"{GPU_NAMESPACE}\", InstanceId, "
                               f"QueueName) WHERE QueueName = '{self.queue_name}' GROUP BY InstanceId")]),
        ]])

    # --- grants -----------------------------------------------------------------------------------------------
    def grant_submit_jobs(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets a pipeline or operator submit, list, describe and terminate the queue's jobs."""
        queues = [self.job_queue_arn]
        if self.multi_node_job_queue is not None:
            queues.append(self.multi_node_job_queue_arn)
        stack = Stack.of(self)
        # Every revision of the queue's definitions, and the "-submitted" revisions ./platform job registers.
        families = [stack.format_arn(service="batch", resource="job-definition", resource_name=f"{name}*",
                                     arn_format=ArnFormat.SLASH_RESOURCE_NAME)
                    for name in [d.job_definition_name for d in definitions_of(self)]]
        grant = iam.Grant.add_to_principal(grantee=grantee, actions=["batch:SubmitJob", "batch:TagResource"],
                                           resource_arns=[*queues, *families])
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:TerminateJob", "batch:CancelJob"],
                                   resource_arns=[f"arn:{Stack.of(self).partition}:batch:{Stack.of(self).region}:"
                                                  f"{Stack.of(self).account}:job/*"])
        return grant


def definitions_of(queue: "TrainingQueue") -> list[batch.IJobDefinition]:
    return [queue.job_definition, *([queue.multi_node_job_definition] if queue.multi_node_job_definition else [])]


def is_tagged_ecr_image(uri: str) -> bool:
    """An Amazon ECR image with a tag or digest: a queue never runs whatever "latest" is at the time."""
    match = ECR_IMAGE.match(uri)
    return bool(match and match.group(4))


def smallest_fit(entries) -> tuple[int, int, int]:
    """GPUs, vCPUs and memory (MiB) a job can ask for and still fit every one of the types."""
    return (entries[0].gpu_count, min(e.vcpus for e in entries),
            int(min(e.memory_gib for e in entries) * 1024 * (1 - MEMORY_HEADROOM)))


@jsii.implements(events.IRuleTarget)
class LogGroupTarget:
    """A log group as a rule target, with the resource policy made by the queue: aws-cdk-lib's CloudWatchLogGroup
    target writes its policy through a custom resource and a Lambda function."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._log_group = log_group

    def bind(self, rule: events.IRule, id: Optional[str] = None) -> events.RuleTargetConfig:
        # The target is the log group's ARN without the ":*" its Arn attribute ends with; with it, nothing arrives.
        arn = Stack.of(rule).format_arn(service="logs", resource="log-group",
                                        resource_name=self._log_group.log_group_name,
                                        arn_format=ArnFormat.COLON_RESOURCE_NAME)
        return events.RuleTargetConfig(arn=arn)


def ecs_agent_config(stop_timeout_seconds: int) -> list[str]:
    """ECS agent settings for a GPU training instance: Spot draining on, and the SIGTERM-to-SIGKILL time raised from
    30 s so the job can write its checkpoint
    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/spot-instance-draining-linux-container.html)."""
    return ["mkdir -p /etc/ecs",
            "echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config",
            f"echo ECS_CONTAINER_STOP_TIMEOUT={stop_timeout_seconds}s >> /etc/ecs/ecs.config"]
