"""SpotGpuFleet: an Auto Scaling group of right-sized Spot GPU instances that watches its own GPUs."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Optional, Sequence

from aws_cdk import Acknowledgment, Annotations, Duration, Size, Stack, Tags, Validations
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from . import gpu_catalog
from .dataset_bucket import DATASETS_PREFIX, DatasetBucket
from .dataset_snapshots import DatasetVolume, filesystem_label
from .errors import ValidationError
from .governance import ACCOUNT_SCOPE, govern, validate_budget_scope
from .nag_support import AcknowledgeWildcardResources, nag_arn, stack_arn
from .platform_key import allow_autoscaling_volumes

GPU_NAMESPACE = "MLPlatform/GPU"
JOB_NAMESPACE = "MLPlatform/Training"
FLEET_TAG = "ml-platform:fleet"
MIN_INSTANCE_TYPES = 4
MAX_GPU_MEMORY_RATIO = 2.0
RUNTIME_DIR = "/opt/ml-platform"
ROOT_DEVICE = "/dev/sda1"  # the Ubuntu DLAMI's root device name
# Every Auto Scaling group of the stack's account and Region (for actions limited by a tag condition instead).
AUTO_SCALING_GROUPS_ARN = "arn:{partition}:autoscaling:{region}:{account}:autoScalingGroup:*"


class SpotGpuFleet(Construct):
    """A scale-to-zero Auto Scaling group of Spot GPU instances across several right-sized GPU types.

    Defaults, and why (README, "SpotGpuFleet"):

    - all capacity on Spot with the ``price-capacity-optimized`` allocation strategy and capacity rebalancing,
      across every given instance type and subnet (AZ); at least 4 types of one GPU shape
      (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-best-practices.html);
    - min 0, no desired capacity in the template (a deploy never resets the running size);
    - the latest Base OSS Nvidia Driver GPU DLAMI for the types' architecture, resolved from AWS's public SSM
      parameter at deploy time; IMDSv2 only; encrypted gp3 root volume; no SSH key, no inbound rule (SSM);
    - the CloudWatch agent publishes NVIDIA GPU metrics per group and per instance to ``MLPlatform/GPU``;
    - Spot interruptions and scale-in reach the job through an on-instance watcher and a termination
      lifecycle hook, so it can checkpoint; launch failures reach ``alerts``;
    - idle-GPU alarm (average utilization under 40% for 3 periods of 5 minutes) and GPU memory pressure
      alarm (used/total above 0.7) notify ``alerts``; scale-to-zero on idle is opt-in.

    :param vpc: where the instances run.
    :param instance_types: GPU instance types from ``gpu_catalog.GPU_CATALOG``, all of one architecture and
        GPU count, GPU memory within a factor of 2.
    :param alerts: the environment's alert topic.
    :param vpc_subnets: Default: the VPC's private subnets, every AZ.
    :param datasets: the environment's DatasetBucket: read ``datasets/``, read and write
        ``checkpoints/<fleet_name>/``. Default: no bucket access.
    :param fleet_name: names the checkpoint prefix, the fleet tag and the JobRunning dimension. Default: the construct id.
    :param max_capacity: instances at most. Default: 1.
    :param on_demand_base_capacity: instances kept On-Demand before Spot. Default: 0.
    :param spot_max_price: opt-in cap in USD per instance-hour (the only form Auto Scaling offers); warns,
        because AWS advises against it. Default: none (you pay the Spot price, capped at On-Demand).
    :param machine_image: Default: the DLAMI from SSM (see above). Required for types the DLAMI no longer
        supports (P3).
    :param root_volume_size: Default: 200 GiB.
    :param volume_key: KMS key for the root and dataset volumes. Default: the account's default EBS key. A key
        created in the same app gets the Auto Scaling service-linked role statements added to its policy by the
        fleet; an imported key fails synth unless ``volume_key_allows_autoscaling`` says its policy has them.
    :param volume_key_allows_autoscaling: an imported ``volume_key``'s policy already allows the Auto Scaling
        service-linked role (statements as ``PlatformKey`` adds them). Default: False.
    :param budget_scope: the ``BudgetGuard`` scope that may stop this fleet (tag ``ml-platform:budget-scope``,
        see ``ml_platform_constructs.governance``). Default: ``"account"``, the default of ``BudgetGuard``.
    :param allow_low_diversity: accept fewer than 4 instance types, with a warning. Default: False.
    :param allow_mixed_gpu_memory: accept GPU memory differing more than 2x, with a warning. Default: False.
    :param idle_threshold_percent: Default: 40.
    :param idle_evaluation_periods: Default: 3.
    :param alarm_period: a multiple of one minute. Default: 5 minutes.
    :param scale_to_zero_after: also set the group to 0 when its GPUs have been idle this long with no job
        process running on any instance (see README). Default: none (notify only).
    :param memory_pressure_threshold: GPU memory used/total that alarms; None switches the alarm off. Default: 0.7.
    :param checkpoint_timeout: how long scale-in waits for the job to checkpoint. Default: 5 minutes.
    :param interruption_alerts: the environment's SpotInterruptionAlerts, charted on the dashboard. Default: none.
    :param dataset_volumes: dataset snapshots (``DatasetSnapshotBuilder.volume(...)``) each instance gets as its own
        gp3 volume, mounted read-only at ``/data/<name>``. Default: none.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        instance_types: Sequence[ec2.InstanceType],
        alerts: sns.ITopic,
        vpc_subnets: Optional[ec2.SubnetSelection] = None,
        datasets: Optional[DatasetBucket] = None,
        fleet_name: Optional[str] = None,
        max_capacity: int = 1,
        on_demand_base_capacity: int = 0,
        spot_max_price: Optional[str] = None,
        machine_image: Optional[ec2.IMachineImage] = None,
        root_volume_size: Size = Size.gibibytes(200),
        volume_key: Optional[kms.IKey] = None,
        volume_key_allows_autoscaling: bool = False,
        budget_scope: str = ACCOUNT_SCOPE,
        allow_low_diversity: bool = False,
        allow_mixed_gpu_memory: bool = False,
        idle_threshold_percent: float = 40,
        idle_evaluation_periods: int = 3,
        alarm_period: Duration = Duration.minutes(5),
        scale_to_zero_after: Optional[Duration] = None,
        memory_pressure_threshold: Optional[float] = 0.7,
        checkpoint_timeout: Duration = Duration.minutes(5),
        interruption_alerts: Optional["SpotInterruptionAlerts"] = None,
        dataset_volumes: Sequence[DatasetVolume] = (),
    ) -> None:
        super().__init__(scope, id)
        self.fleet_name = fleet_name or id
        self.catalog_entries = self._validate_types(instance_types, machine_image, allow_low_diversity,
                                                    allow_mixed_gpu_memory)
        self._validate_sizes(max_capacity, on_demand_base_capacity, spot_max_price, idle_threshold_percent,
                             idle_evaluation_periods, alarm_period, scale_to_zero_after, memory_pressure_threshold,
                             checkpoint_timeout)
        self._validate_volumes(dataset_volumes)
        validate_budget_scope("SpotGpuFleet", budget_scope)
        if volume_key is not None and not volume_key_allows_autoscaling and not allow_autoscaling_volumes(volume_key):
            raise ValidationError(
                "SpotGpuFleet", "volume_key", volume_key.key_arn,
                "a key whose policy lets the Auto Scaling service-linked role use it; this imported key's policy "
                "cannot be changed from this app, and without those statements every launch fails",
                "add the statements of https://docs.aws.amazon.com/autoscaling/ec2/userguide/"
                "key-policy-requirements-EBS-encryption.html to the key's policy (ml_platform_constructs.PlatformKey "
                "has them), then pass volume_key_allows_autoscaling=True; or pass a key created in this app")
        architecture = self.catalog_entries[0].architecture
        self.checkpoint_prefix = DatasetBucket.checkpoint_prefix(self.fleet_name)
        self._period = alarm_period
        self._idle_threshold = idle_threshold_percent

        self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                description=f"GPU fleet {self.fleet_name}: no inbound; access via SSM")
        self.role = iam.Role(self, "InstanceRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                             description=f"GPU fleet {self.fleet_name} instances")
        self._grant_instance_permissions(datasets)

        hook_name = "checkpoint-before-termination"
        self.launch_template = ec2.LaunchTemplate(
            self, "LaunchTemplate",
            machine_image=machine_image or ec2.MachineImage.from_ssm_parameter(
                gpu_catalog.dlami_parameter(architecture), os=ec2.OperatingSystemType.LINUX),
            role=self.role,
            security_group=self.security_group,
            require_imdsv2=True,
            user_data=self._user_data(datasets, hook_name, checkpoint_timeout, dataset_volumes),
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE, volume=ec2.BlockDeviceVolume.ebs(
                int(root_volume_size.to_gibibytes()), volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True,
                kms_key=volume_key, delete_on_termination=True)),
                *[self._dataset_block_device(index, volume) for index, volume in enumerate(dataset_volumes)]],
        )
        self.auto_scaling_group = autoscaling.AutoScalingGroup(
            self, "Resource",
            vpc=vpc,
            vpc_subnets=vpc_subnets,
            min_capacity=0,
            max_capacity=max_capacity,
            capacity_rebalance=True,
            group_metrics=[autoscaling.GroupMetrics.all()],
            mixed_instances_policy=autoscaling.MixedInstancesPolicy(
                launch_template=self.launch_template,
                launch_template_overrides=[autoscaling.LaunchTemplateOverrides(instance_type=t) for t in instance_types],
                instances_distribution=autoscaling.InstancesDistribution(
                    on_demand_base_capacity=on_demand_base_capacity,
                    on_demand_percentage_above_base_capacity=0,
                    spot_allocation_strategy=autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED,
                    spot_max_price=spot_max_price,
                ),
            ),
        )
        Tags.of(self.auto_scaling_group).add(FLEET_TAG, self.fleet_name, apply_to_launched_instances=True)
        govern(self.auto_scaling_group, budget_scope)
        self.auto_scaling_group.add_lifecycle_hook(
            "CheckpointHook", lifecycle_hook_name=hook_name,
            lifecycle_transition=autoscaling.LifecycleTransition.INSTANCE_TERMINATING,
            heartbeat_timeout=checkpoint_timeout, default_result=autoscaling.DefaultResult.CONTINUE)
        Validations.of(self.auto_scaling_group).acknowledge(Acknowledgment(
            id="AwsSolutions-EC26",
            reason="The launch template's only block device is encrypted (Encrypted: true, gp3); the rule cannot "
                   "follow the group's reference to the launch template and reports an error instead.",
        ), Acknowledgment(
            id="AwsSolutions-AS3",
            reason="Launch failures reach the alert topic through an EventBridge rule filtered on this group's name; "
                   "Auto Scaling notifications to a KMS-encrypted topic would need the service-linked role.",
        ))
        self.launch_failures_rule = events.Rule(
            self, "LaunchFailures",
            description=f"GPU fleet {self.fleet_name}: instance launch failed (Spot capacity, quotas, KMS access)",
            event_pattern=events.EventPattern(source=["aws.autoscaling"], detail_type=["EC2 Instance Launch Unsuccessful"],
                                              detail={"AutoScalingGroupName": [self.auto_scaling_group.auto_scaling_group_name]}),
            targets=[targets.SnsTopic(alerts, message=events.RuleTargetInput.from_text(
                f"GPU fleet {self.fleet_name}: launch failed: {events.EventField.from_path('$.detail.StatusMessage')} "
                f"({events.EventField.from_path('$.detail.Description')})"))],
        )
        if spot_max_price is not None:
            Annotations.of(self).add_warning_v2(
                "ml-platform:spot-max-price",
                f"spot_max_price={spot_max_price}: AWS advises against a Spot price cap because it raises "
                "interruptions; without one you pay the current Spot price, never more than On-Demand.")

        self.idle_alarm, self.memory_alarm, self.scale_to_zero_alarm = self._alarms(
            alerts, idle_threshold_percent, idle_evaluation_periods, scale_to_zero_after, memory_pressure_threshold)
        self.dashboard = self._dashboard(interruption_alerts)

    # --- validation -------------------------------------------------------------------------------------------
    def _validate_types(self, instance_types, machine_image, allow_low_diversity, allow_mixed_gpu_memory):
        names = [t.to_string() for t in instance_types]
        if not names:
            raise ValidationError("SpotGpuFleet", "instance_types", [], "at least one GPU instance type",
                                  "list several types of one GPU shape, e.g. g5.xlarge, g5.2xlarge, g6.xlarge, g6.2xlarge")
        if len(set(names)) != len(names):
            raise ValidationError("SpotGpuFleet", "instance_types", names, "each type once", "remove the duplicate")
        entries = []
        for name in names:
            entry = gpu_catalog.lookup(name)
            if entry is None:
                raise ValidationError("SpotGpuFleet", "instance_types", name,
                                      f"a GPU instance type of the catalog (families "
                                      f"{sorted({e.family for e in gpu_catalog.GPU_CATALOG.values()})})",
                                      "pick GPU types from ml_platform_constructs.gpu_catalog.GPU_CATALOG")
            entries.append(entry)
        architectures = sorted({e.architecture for e in entries})
        if len(architectures) > 1:
            raise ValidationError("SpotGpuFleet", "instance_types", names, f"one CPU architecture (got {architectures})",
                                  "use only x86_64 types or only arm64 (g5g) types: one AMI serves the whole fleet")
        counts = sorted({e.gpu_count for e in entries})
        if len(counts) > 1:
            raise ValidationError("SpotGpuFleet", "instance_types", names, f"one GPU count per instance (got {counts})",
                                  "a job's parallelism is set per GPU count: split the types into one fleet per count")
        memories = sorted({e.gpu_memory_gib for e in entries})
        if memories[-1] / memories[0] > MAX_GPU_MEMORY_RATIO:
            detail = (f"GPU memory within {MAX_GPU_MEMORY_RATIO:g}x across types (got {memories[0]} to "
                      f"{memories[-1]} GiB)")
            if not allow_mixed_gpu_memory:
                raise ValidationError("SpotGpuFleet", "instance_types", names, detail,
                                      "keep GPUs of a similar size (e.g. A10G/L4 24 GiB with L40S 48 GiB), or set "
                                      "allow_mixed_gpu_memory=True if the job fits the smallest")
            Annotations.of(self).add_warning_v2("ml-platform:mixed-gpu-memory",
                                                f"{detail}: the job must fit the smallest GPU.")
        if len(entries) < MIN_INSTANCE_TYPES:
            detail = (f"at least {MIN_INSTANCE_TYPES} instance types for Spot to find capacity reliably "
                      f"(got {len(entries)}; AWS's rule of thumb is 10)")
            if not allow_low_diversity:
                raise ValidationError("SpotGpuFleet", "instance_types", names, detail,
                                      "add sizes or families of the same GPU shape, or set allow_low_diversity=True")
            Annotations.of(self).add_warning_v2("ml-platform:low-spot-diversity", f"{detail}: expect interruptions "
                                                "and unfilled capacity.")
        unsupported = [e.name for e in entries if not e.dlami]
        if machine_image is None and unsupported:
            raise ValidationError("SpotGpuFleet", "instance_types", unsupported,
                                  "types the current Deep Learning AMI supports (its drivers dropped P3's V100)",
                                  "pass machine_image= an AMI with a driver for these GPUs, or use newer GPU types")
        return entries

    def _validate_sizes(self, max_capacity, on_demand_base_capacity, spot_max_price, idle_threshold_percent,
                        idle_evaluation_periods, alarm_period, scale_to_zero_after, memory_pressure_threshold,
                        checkpoint_timeout) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("SpotGpuFleet", prop, value, allowed, fix)

        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", self.fleet_name):
            fail("fleet_name", self.fleet_name, "1-128 letters, digits, '.', '_' or '-'", "rename the fleet")
        if not isinstance(max_capacity, int) or max_capacity < 1:
            fail("max_capacity", max_capacity, "a whole number of instances, at least 1", "set max_capacity >= 1")
        if not isinstance(on_demand_base_capacity, int) or not 0 <= on_demand_base_capacity <= max_capacity:
            fail("on_demand_base_capacity", on_demand_base_capacity, f"0 to max_capacity ({max_capacity})",
                 "lower it or raise max_capacity")
        if spot_max_price is not None:
            try:
                price = float(spot_max_price)
            except ValueError:
                price = -1
            if price < 0.001:
                fail("spot_max_price", spot_max_price, "a price in USD per instance-hour, at least 0.001 (a string)",
                     "e.g. spot_max_price='1.20', or leave it unset (recommended)")
        if not 0 < idle_threshold_percent < 100:
            fail("idle_threshold_percent", idle_threshold_percent, "between 0 and 100", "e.g. 40")
        period = alarm_period.to_seconds()
        if period % 60 or period < 60:
            fail("alarm_period", alarm_period.to_human_string(), "a whole number of minutes (the agent publishes "
                 "every 60 s)", "e.g. Duration.minutes(5)")
        if not isinstance(idle_evaluation_periods, int) or idle_evaluation_periods < 1 or \
                period * idle_evaluation_periods > 86400:
            fail("idle_evaluation_periods", idle_evaluation_periods, "at least 1, with periods x period up to one day "
                 "(CloudWatch's limit for periods under an hour)", "e.g. 3")
        if scale_to_zero_after is not None:
            after = scale_to_zero_after.to_seconds()
            if after % period or after < 2 * period or after > 86400:
                fail("scale_to_zero_after", scale_to_zero_after.to_human_string(),
                     f"a multiple of alarm_period ({alarm_period.to_human_string()}), at least two periods, "
                     "at most one day", "e.g. Duration.minutes(30), longer than boot plus your job's start-up")
        if memory_pressure_threshold is not None and not 0 < memory_pressure_threshold <= 1:
            fail("memory_pressure_threshold", memory_pressure_threshold, "a ratio in (0, 1], or None",
                 "e.g. 0.7; None switches the alarm off")
        timeout = checkpoint_timeout.to_seconds()
        if not 30 <= timeout <= 7200:
            fail("checkpoint_timeout", checkpoint_timeout.to_human_string(),
                 "30 seconds to 2 hours (Auto Scaling's lifecycle hook heartbeat range)", "e.g. Duration.minutes(5)")

    def _validate_volumes(self, volumes: Sequence[DatasetVolume]) -> None:
        names = [v.name for v in volumes]
        if len(set(names)) != len(names):
            raise ValidationError("SpotGpuFleet", "dataset_volumes", names, "each dataset once (one mount point each)",
                                  "mount one version per dataset")
        if len(volumes) > 10:
            raise ValidationError("SpotGpuFleet", "dataset_volumes", names, "at most 10 dataset volumes (/dev/sdg-/dev/sdp)",
                                  "merge datasets into fewer snapshots")
        for volume in volumes:
            volume.validate("SpotGpuFleet")
            if volume.size_gib < volume.streaming_threshold_gib:
                Annotations.of(self).add_warning_v2(
                    "ml-platform:small-dataset-volume",
                    f"dataset {volume.name} is {volume.size_gib} GiB, under {volume.streaming_threshold_gib} GiB: "
                    "streaming it from S3 at job start is likely cheaper than a volume per instance.")

    def _dataset_block_device(self, index: int, volume: DatasetVolume) -> ec2.BlockDevice:
        # The snapshot id is read from SSM at deploy time; a version not built yet fails the deploy.
        snapshot_id = ssm.StringParameter.value_for_string_parameter(self, volume.parameter_name)
        return ec2.BlockDevice(device_name=f"/dev/sd{chr(ord('g') + index)}", volume=ec2.BlockDeviceVolume.ebs_from_snapshot(
            snapshot_id, volume_size=volume.size_gib, delete_on_termination=True, volume_type=ec2.EbsDeviceVolumeType.GP3,
            iops=volume.iops, throughput=volume.throughput_mibps,
            volume_initialization_rate=Size.mebibytes(volume.initialization_rate_mibps)
            if volume.initialization_rate_mibps else None))

    # --- instance permissions and bootstrap -------------------------------------------------------------------
    def _grant_instance_permissions(self, datasets: Optional[DatasetBucket]) -> None:
        self.role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"))
        Validations.of(self.role).acknowledge(Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
            reason="Session Manager access instead of SSH; the AWS-maintained policy follows SSM Agent's API changes.",
        ))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="PublishGpuAndJobMetrics",
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": [GPU_NAMESPACE, JOB_NAMESPACE]}}))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="AgentAndWatcherFindTheirGroup", actions=["ec2:DescribeTags", "autoscaling:DescribeAutoScalingInstances"],
            resources=["*"]))
        stack = Stack.of(self)
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="CompleteOwnCheckpointHook", actions=["autoscaling:CompleteLifecycleAction"],
            resources=[stack_arn(stack, AUTO_SCALING_GROUPS_ARN)],
            conditions={"StringEquals": {f"autoscaling:ResourceTag/{FLEET_TAG}": self.fleet_name}}))
        Validations.of(self.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]",
                           reason="PutMetricData, DescribeTags and DescribeAutoScalingInstances have no resource-level "
                                  "permissions; PutMetricData is limited to the fleet's two namespaces by condition."),
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, AUTO_SCALING_GROUPS_ARN)}]",
                           reason="The group's ARN is not known before it exists (it would be a dependency cycle); the "
                                  "fleet tag condition limits the hook completion to this fleet's group."),
        )
        if datasets is None:
            return
        datasets.grant_read(self.role, DATASETS_PREFIX)
        datasets.grant_read(self.role, self.checkpoint_prefix)
        datasets.grant_write_prefix(self.role, self.checkpoint_prefix)
        wildcard_reason = ("Object-level access is scoped to the fleet's prefixes (datasets/, checkpoints/<fleet>/); "
                           "the wildcards are CDK's grant actions and the objects under those prefixes.")
        Validations.of(self.role).acknowledge(*[
            Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=wildcard_reason)
            for finding in ("Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*", "Action::s3:Abort*",
                            "Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")])
        # The bucket ARN reads as an export name when the bucket is in another stack: named after synth resolves it.
        policy = self.role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeWildcardResources(
            policy, [f"/{DATASETS_PREFIX}*", f"/{self.checkpoint_prefix}*"], wildcard_reason))

    def _user_data(self, datasets: Optional[DatasetBucket], hook_name: str, checkpoint_timeout: Duration,
                   dataset_volumes: Sequence[DatasetVolume]) -> ec2.UserData:
        stack = Stack.of(self)
        agent_config = {
            "agent": {"metrics_collection_interval": 60},
            "metrics": {
                "namespace": GPU_NAMESPACE,
                "append_dimensions": {"AutoScalingGroupName": "${aws:AutoScalingGroupName}",
                                      "InstanceId": "${aws:InstanceId}"},
                "aggregation_dimensions": [["AutoScalingGroupName"], ["InstanceId"]],
                "metrics_collected": {"nvidia_gpu": {"measurement": [
                    {"name": "utilization_gpu", "unit": "Percent"}, {"name": "memory_used", "unit": "Megabytes"},
                    {"name": "memory_total", "unit": "Megabytes"}, "temperature_gpu", "power_draw"]}},
            },
        }
        environment = {
            "ML_PLATFORM_FLEET_NAME": self.fleet_name,
            "ML_PLATFORM_STOP_FILE": "/run/ml-platform/stop-requested",
            "ML_PLATFORM_JOB_PID_FILE": "/run/ml-platform/job.pid",
            "ML_PLATFORM_LIFECYCLE_HOOK": hook_name,
            "ML_PLATFORM_HOOK_TIMEOUT_SECONDS": str(int(checkpoint_timeout.to_seconds())),
            "AWS_REGION": stack.region,
        }
        if datasets is not None:
            environment["ML_PLATFORM_DATASETS_URI"] = f"s3://{datasets.bucket_name}/{DATASETS_PREFIX}"
            environment["ML_PLATFORM_CHECKPOINT_URI"] = f"s3://{datasets.bucket_name}/{self.checkpoint_prefix}"
        watcher = resources.files("ml_platform_constructs.runtime").joinpath("interruption_watcher.py").read_text()
        arch = "arm64" if self.catalog_entries[0].architecture == "arm64" else "amd64"
        agent_url = (f"https://amazoncloudwatch-agent-{stack.region}.s3.{stack.region}.{stack.url_suffix}"
                     f"/ubuntu/{arch}/latest/amazon-cloudwatch-agent.deb")
        user_data = ec2.UserData.for_linux()
        # The checkpoint signal and the dataset mounts come first: a failed agent download must not cost them.
        user_data.add_commands(
            "set -euo pipefail",
            f"mkdir -p {RUNTIME_DIR} /etc/ml-platform",
            "cat > /etc/ml-platform/fleet.env <<'EOF'\n" + "\n".join(f"{k}={v}" for k, v in environment.items()) + "\nEOF",
            f"cat > {RUNTIME_DIR}/interruption_watcher.py <<'EOF'\n{watcher}EOF",
            "cat > /etc/systemd/system/ml-platform-interruption-watcher.service <<'EOF'\n"
            "[Unit]\nDescription=Checkpoint signal before Spot interruption or scale-in\nAfter=network-online.target\n"
            f"[Service]\nEnvironmentFile=/etc/ml-platform/fleet.env\nExecStart=/usr/bin/python3 {RUNTIME_DIR}/interruption_watcher.py\n"
            # /run/ml-platform: where any job user writes its PID file and reads the stop file.
            "RuntimeDirectory=ml-platform\nRuntimeDirectoryMode=1777\nRuntimeDirectoryPreserve=yes\n"
            "Restart=on-failure\n[Install]\nWantedBy=multi-user.target\nEOF",
            "systemctl daemon-reload && systemctl enable --now ml-platform-interruption-watcher.service",
        )
        for volume in dataset_volumes:
            # Nitro instances name EBS devices /dev/nvme*: mount by the label the snapshot builder gave the filesystem.
            label = filesystem_label(volume.name, volume.version)
            user_data.add_commands(
                f"for i in $(seq 90); do [ -e /dev/disk/by-label/{label} ] && break; sleep 2; done",
                f"mkdir -p {volume.mount_point}",
                f"echo 'LABEL={label} {volume.mount_point} ext4 ro,noload,nofail 0 2' >> /etc/fstab",
                f"mount {volume.mount_point}")
        user_data.add_commands(
            # The Region's own agent bucket is reachable through the S3 gateway endpoint, without internet.
            "if ! command -v /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl >/dev/null; then "
            f"curl -fsSL -o /tmp/cwagent.deb {agent_url} && dpkg -i /tmp/cwagent.deb "
            "|| echo 'CloudWatch agent install failed: no GPU metrics from this instance' >&2; fi",
            f"cat > {RUNTIME_DIR}/cloudwatch-agent.json <<'EOF'\n{json.dumps(agent_config, indent=1)}\nEOF",
            "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s "
            f"-c file:{RUNTIME_DIR}/cloudwatch-agent.json || echo 'CloudWatch agent did not start' >&2",
        )
        return user_data

    # --- metrics ----------------------------------------------------------------------------------------------
    def _gpu_metric(self, name: str, **kwargs) -> cloudwatch.Metric:
        options = {"period": self._period, "statistic": "Average", **kwargs}
        return cloudwatch.Metric(namespace=GPU_NAMESPACE, metric_name=name,
                                 dimensions_map={"AutoScalingGroupName": self.auto_scaling_group.auto_scaling_group_name},
                                 **options)

    def metric_gpu_utilization(self, **kwargs) -> cloudwatch.Metric:
        """``MLPlatform/GPU nvidia_smi_utilization_gpu`` averaged over the group's GPUs (percent)."""
        return self._gpu_metric("nvidia_smi_utilization_gpu", **kwargs)

    def metric_gpu_memory_used_ratio(self, **kwargs) -> cloudwatch.MathExpression:
        """GPU memory used / total over the group (0-1), from ``nvidia_smi_memory_used`` and ``_total``."""
        return cloudwatch.MathExpression(
            expression="used / total", label="GPU memory used / total", period=kwargs.pop("period", self._period),
            using_metrics={"used": self._gpu_metric("nvidia_smi_memory_used", **kwargs),
                           "total": self._gpu_metric("nvidia_smi_memory_total", **kwargs)})

    def metric_in_service_instances(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/AutoScaling GroupInServiceInstances`` (group metrics are enabled on the group)."""
        options = {"period": Duration.minutes(1), "statistic": "Average", **kwargs}
        return cloudwatch.Metric(namespace="AWS/AutoScaling", metric_name="GroupInServiceInstances",
                                 dimensions_map={"AutoScalingGroupName": self.auto_scaling_group.auto_scaling_group_name},
                                 **options)

    def metric_job_running(self, **kwargs) -> cloudwatch.Metric:
        """``MLPlatform/Training JobRunning`` (dimension FleetName, Maximum): 1 while any instance's job process
        is alive, published every minute by the interruption watcher."""
        options = {"period": self._period, "statistic": "Maximum", **kwargs}
        return cloudwatch.Metric(namespace=JOB_NAMESPACE, metric_name="JobRunning",
                                 dimensions_map={"FleetName": self.fleet_name}, **options)

    # --- alarms and dashboard ---------------------------------------------------------------------------------
    def _alarms(self, alerts, idle_threshold, periods, scale_to_zero_after, memory_threshold):
        notify = cw_actions.SnsAction(alerts)
        idle = self.metric_gpu_utilization().create_alarm(
            self, "GpuIdleAlarm",
            alarm_description=f"GPU fleet {self.fleet_name}: average GPU utilization under {idle_threshold:g}% "
                              f"for {periods} periods. A fleet at zero publishes nothing and does not alarm.",
            threshold=idle_threshold, evaluation_periods=periods,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
        idle.add_alarm_action(notify)
        memory = None
        if memory_threshold is not None:
            memory = self.metric_gpu_memory_used_ratio().create_alarm(
                self, "GpuMemoryPressureAlarm",
                alarm_description=f"GPU fleet {self.fleet_name}: GPU memory used/total above {memory_threshold:g} "
                                  f"for {periods} periods (frameworks that preallocate memory keep this high: see README).",
                threshold=memory_threshold, evaluation_periods=periods,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
            memory.add_alarm_action(notify)
        scale_to_zero = None
        if scale_to_zero_after is not None:
            # Idle GPUs and no job process: nobody uses the fleet. Missing data counts as busy (no instance, still
            # booting, watcher silent); a live job is never stopped here, only reported by the idle alarm.
            signal = cloudwatch.MathExpression(
                expression=f"IF(FILL(util, 100) < {idle_threshold:g} AND FILL(job, 1) == 0, 1, 0)",
                label="idle and no job running", period=self._period,
                using_metrics={"util": self.metric_gpu_utilization(), "job": self.metric_job_running()})
            periods_to_zero = int(scale_to_zero_after.to_seconds() // self._period.to_seconds())
            scale_to_zero = signal.create_alarm(
                self, "ScaleToZeroAlarm",
                alarm_description=f"GPU fleet {self.fleet_name}: GPUs idle and no job running for "
                                  f"{scale_to_zero_after.to_human_string()}; sets the group to 0 instances.",
                threshold=1, evaluation_periods=periods_to_zero,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
            action = autoscaling.StepScalingAction(self, "ScaleToZero", auto_scaling_group=self.auto_scaling_group,
                                                   adjustment_type=autoscaling.AdjustmentType.EXACT_CAPACITY)
            action.add_adjustment(adjustment=0, lower_bound=0)
            scale_to_zero.add_alarm_action(cw_actions.AutoScalingAction(action))
            scale_to_zero.add_alarm_action(notify)
        return idle, memory, scale_to_zero

    def _dashboard(self, interruption_alerts: Optional["SpotInterruptionAlerts"]) -> cloudwatch.Dashboard:
        widgets = [
            cloudwatch.GraphWidget(title="GPU utilization (%)", left=[self.metric_gpu_utilization()], width=12,
                                   left_annotations=[cloudwatch.HorizontalAnnotation(value=self._idle_threshold,
                                                                                     label="idle threshold")]),
            cloudwatch.GraphWidget(title="GPU memory used / total", left=[self.metric_gpu_memory_used_ratio()], width=12),
            cloudwatch.GraphWidget(title="Instances in service", left=[self.metric_in_service_instances()], width=12),
            cloudwatch.GraphWidget(title="Job running (1) or not (0)", left=[self.metric_job_running()], width=12),
        ]
        if interruption_alerts is not None:
            widgets.append(cloudwatch.GraphWidget(title="Spot interruption warnings and rebalance recommendations (account)",
                                                  left=[interruption_alerts.metric_events()], width=12))
        widgets.append(cloudwatch.GraphWidget(title="Launch failures", width=12, left=[cloudwatch.Metric(
            namespace="AWS/Events", metric_name="TriggeredRules", statistic="Sum", period=self._period,
            dimensions_map={"RuleName": self.launch_failures_rule.rule_name})]))
        return cloudwatch.Dashboard(self, "Dashboard", widgets=[widgets[i:i + 2] for i in range(0, len(widgets), 2)])

    # --- grants -----------------------------------------------------------------------------------------------
    def grant_scale(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets an operator or pipeline set the fleet's desired capacity (scale up for a job, back to 0)."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup"],
            resource_arns=[self.auto_scaling_group.auto_scaling_group_arn])


class SpotInterruptionAlerts(Construct):
    """One EventBridge rule per environment that forwards Spot interruption warnings and rebalance
    recommendations to the alert topic. The events name the instance, not its fleet: the message says how to
    find the fleet from the instance's ``ml-platform:fleet`` tag.
    """

    def __init__(self, scope: Construct, id: str, *, alerts: sns.ITopic) -> None:
        super().__init__(scope, id)
        instance = events.EventField.from_path("$.detail.instance-id")
        self.rule = events.Rule(
            self, "Resource",
            description="Spot interruption warnings and rebalance recommendations for this account and Region",
            event_pattern=events.EventPattern(source=["aws.ec2"], detail_type=[
                "EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"]),
            targets=[targets.SnsTopic(alerts, message=events.RuleTargetInput.from_text(
                f"{events.EventField.from_path('$.detail-type')} for {instance} in {events.EventField.region}. "
                f"Its fleet: aws ec2 describe-tags --filters Name=resource-id,Values={instance} "
                f"Name=key,Values={FLEET_TAG}"))],
        )

    def metric_events(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/Events TriggeredRules`` of the rule (Sum over 5 minutes)."""
        options = {"period": Duration.minutes(5), "statistic": "Sum", **kwargs}
        return cloudwatch.Metric(namespace="AWS/Events", metric_name="TriggeredRules",
                                 dimensions_map={"RuleName": self.rule.rule_name}, **options)
