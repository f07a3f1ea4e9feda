"""SpotGpuFleet: an Auto Scaling group of right-sized Spot GPU instances that watches its own GPUs."""

from __future__ import annotations

import re
from typing import Optional, Sequence, Union

from aws_cdk import Acknowledgment, Annotations, Duration, RemovalPolicy, Size, Stack, Tags, Validations
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..advice import gpu_catalog
from ..data.dataset_bucket import DATASETS_PREFIX, DatasetBucket
from ..data.dataset_snapshots import DatasetVolume
from ..errors import ValidationError, refusal_leaves_no_node
from ..governance.scope import ACCOUNT_SCOPE, govern, validate_budget_scope
from .gpu_alarms import (as_instance_types, gpu_alarms, gpu_memory_used_ratio, gpu_metric, validate_alarm_props,
                         validate_gpu_types)
from .instance_bootstrap import (GPU_NAMESPACE, RUN_DIR, InstanceBootstrap, dataset_block_devices, gpu_agent_config,
                                 ubuntu_agent_install, validate_dataset_volumes)
from ..data.mlflow_tracking import MlflowTracking
from ..foundation.nag_support import nag_arn, stack_arn, suppress_checkov
from ..foundation.network import require_endpoints, require_private_subnets, warn_without_session_manager
from ..foundation.platform_key import allow_autoscaling_volumes
from ..runtime.handlers.budget_guard import FLEET_TAG
from ..foundation.runtime_function import runtime_function
from ml_platform_job.job_metrics import NAMESPACE as JOB_METRICS_NAMESPACE

JOB_NAMESPACE = JOB_METRICS_NAMESPACE  # what the job side publishes to (one name, the job's own)
ROOT_DEVICE = "/dev/sda1"  # the Ubuntu DLAMI's root device name
# Every Auto Scaling group of the stack's account and Region (for actions limited by a tag condition instead).
AUTO_SCALING_GROUPS_ARN = "arn:{partition}:autoscaling:{region}:{account}:autoScalingGroup:*"


@refusal_leaves_no_node
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
    :param instance_types: GPU instance types from ``gpu_catalog.GPU_CATALOG`` (``ec2.InstanceType`` or names such
        as ``"g5.xlarge"``), all of one architecture and GPU count, GPU memory within a factor of 2.
    :param alerts: the environment's alert topic.
    :param vpc_subnets: Default: the VPC's private subnets, every AZ. Subnets whose instances would get public
        addresses (public subnets, or subnets of this app that map public IPs or route to an internet gateway) fail
        synth unless ``allow_public_subnets``.
    :param allow_public_subnets: accept such subnets, with a warning. Default: False.
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
        process running on any instance (constructs/docs/SpotGpuFleet.md). Default: none (notify only).
    :param memory_pressure_threshold: GPU memory used/total that alarms; None switches the alarm off. Default: 0.7.
    :param checkpoint_timeout: how long scale-in waits for the job to checkpoint. Default: 5 minutes.
    :param interruption_alerts: the environment's SpotInterruptionAlerts, charted on the dashboard. Default: none.
    :param removal_policy: of the scale-to-zero function's log group. Default: RETAIN.
    :param dataset_volumes: dataset snapshots (``DatasetSnapshotBuilder.volume(...)``) each instance gets as its own
        gp3 volume, mounted read-only at ``/data/<name>``. Default: none.
    :param tracking: the environment's MlflowTracking: the instances may record runs in it
        (``grant_log_runs``) and jobs find it as ``MLFLOW_TRACKING_URI``. Default: none.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        instance_types: Sequence[Union[ec2.InstanceType, str]],
        alerts: sns.ITopic,
        vpc_subnets: Optional[ec2.SubnetSelection] = None,
        allow_public_subnets: bool = False,
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
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        tracking: Optional[MlflowTracking] = None,
    ) -> None:
        super().__init__(scope, id)
        self.fleet_name = fleet_name or id
        self._tracking = tracking
        instance_types = as_instance_types("SpotGpuFleet", "instance_types", instance_types)
        self.catalog_entries = self._validate_types(instance_types, machine_image, allow_low_diversity,
                                                    allow_mixed_gpu_memory)
        self._validate_sizes(max_capacity, on_demand_base_capacity, spot_max_price, idle_threshold_percent,
                             idle_evaluation_periods, alarm_period, scale_to_zero_after, memory_pressure_threshold,
                             checkpoint_timeout)
        validate_dataset_volumes(self, "SpotGpuFleet", dataset_volumes)
        validate_budget_scope("SpotGpuFleet", budget_scope)
        require_private_subnets(self, "SpotGpuFleet", vpc, vpc_subnets, allow_public_subnets)
        require_endpoints("SpotGpuFleet", vpc, vpc_subnets,
                          uses="the CloudWatch agent's install and GPU metrics, datasets and checkpoints, and the "
                               "watcher's lifecycle-hook completion go through them; without monitoring the idle and "
                               "memory alarms get no data and never fire",
                          fix="PlatformNetwork() (its DEFAULT_INTERFACE_ENDPOINTS and S3 gateway endpoint have them), "
                              "or subnets with a NAT gateway", scope=self)
        warn_without_session_manager(self, "SpotGpuFleet", vpc, vpc_subnets)
        if tracking is not None:
            tracking.check_clients("SpotGpuFleet", vpc, vpc_subnets)
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
        self._removal_policy = removal_policy

        self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                description=f"GPU fleet {self.fleet_name}: no inbound; access via SSM")
        self.role = iam.Role(self, "InstanceRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                             description=f"GPU fleet {self.fleet_name} instances")
        self._grant_instance_permissions(datasets)
        if tracking is not None:
            tracking.grant_log_runs(self.role)

        hook_name = "checkpoint-before-termination"
        self.launch_template = ec2.LaunchTemplate(
            self, "LaunchTemplate",
            machine_image=machine_image or ec2.MachineImage.from_ssm_parameter(
                gpu_catalog.dlami_parameter(architecture), os=ec2.OperatingSystemType.LINUX),
            role=self.role,
            security_group=self.security_group,
            require_imdsv2=True,
            # 2 hops: a job in a Docker container (the DLAMI ships Docker) reaches IMDSv2 through the bridge
            # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html#imds-considerations).
            http_put_response_hop_limit=2,
            user_data=self._user_data(datasets, hook_name, checkpoint_timeout, dataset_volumes),
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE, volume=ec2.BlockDeviceVolume.ebs(
                int(root_volume_size.to_gibibytes()), volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True,
                kms_key=volume_key, delete_on_termination=True)),
                *dataset_block_devices(self, dataset_volumes)],
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
                # The event's detail has Cause and StatusMessage (no Description):
                # https://docs.aws.amazon.com/autoscaling/ec2/userguide/automating-ec2-auto-scaling-with-eventbridge.html
                f"GPU fleet {self.fleet_name}: launch failed: {events.EventField.from_path('$.detail.StatusMessage')} "
                f"(cause: {events.EventField.from_path('$.detail.Cause')})"))],
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
        entries = validate_gpu_types(self, "SpotGpuFleet", instance_types, allow_low_diversity=allow_low_diversity,
                                     allow_mixed_gpu_memory=allow_mixed_gpu_memory)
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
        validate_alarm_props("SpotGpuFleet", idle_threshold_percent=idle_threshold_percent,
                             idle_evaluation_periods=idle_evaluation_periods, alarm_period=alarm_period,
                             memory_pressure_threshold=memory_pressure_threshold)
        period = alarm_period.to_seconds()
        if scale_to_zero_after is not None:
            after = scale_to_zero_after.to_seconds()
            if after % period or after < 2 * period or after > 86400:
                fail("scale_to_zero_after", scale_to_zero_after.to_human_string(),
                     f"a multiple of alarm_period ({alarm_period.to_human_string()}), at least two periods, "
                     "at most one day", "e.g. Duration.minutes(30), longer than boot plus your job's start-up")
        timeout = checkpoint_timeout.to_seconds()
        if not 30 <= timeout <= 7200:
            fail("checkpoint_timeout", checkpoint_timeout.to_human_string(),
                 "30 seconds to 2 hours (Auto Scaling's lifecycle hook heartbeat range)", "e.g. Duration.minutes(5)")

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
        datasets.grant_training(self.role, checkpoint_prefix=self.checkpoint_prefix, owner="the fleet's")

    def _user_data(self, datasets: Optional[DatasetBucket], hook_name: str, checkpoint_timeout: Duration,
                   dataset_volumes: Sequence[DatasetVolume]) -> ec2.UserData:
        stack = Stack.of(self)
        environment = {
            "ML_PLATFORM_FLEET_NAME": self.fleet_name,
            "ML_PLATFORM_STOP_FILE": f"{RUN_DIR}/stop-requested",
            "ML_PLATFORM_JOB_PID_FILE": f"{RUN_DIR}/job.pid",
            "ML_PLATFORM_LIFECYCLE_HOOK": hook_name,
            "ML_PLATFORM_HOOK_TIMEOUT_SECONDS": str(int(checkpoint_timeout.to_seconds())),
            "AWS_REGION": stack.region,
        }
        if datasets is not None:
            environment["ML_PLATFORM_DATASETS_URI"] = f"s3://{datasets.bucket_name}/{DATASETS_PREFIX}"
            environment["ML_PLATFORM_CHECKPOINT_URI"] = f"s3://{datasets.bucket_name}/{self.checkpoint_prefix}"
        if self._tracking is not None:
            environment["MLFLOW_TRACKING_URI"] = self._tracking.tracking_uri_for(self)
        bootstrap = InstanceBootstrap(
            environment=environment, dataset_volumes=dataset_volumes,
            agent_config=gpu_agent_config(("AutoScalingGroupName", "${aws:AutoScalingGroupName}"), static=False),
            agent_install=ubuntu_agent_install(stack.region, stack.url_suffix, self.catalog_entries[0].architecture))
        user_data = ec2.UserData.for_linux()
        user_data.add_commands(*bootstrap.commands())
        return user_data

    # --- metrics ----------------------------------------------------------------------------------------------
    @property
    def _group_dimension(self) -> tuple[str, str]:
        return ("AutoScalingGroupName", self.auto_scaling_group.auto_scaling_group_name)

    def metric_gpu_utilization(self, **kwargs) -> cloudwatch.Metric:
        """``MLPlatform/GPU nvidia_smi_utilization_gpu`` averaged over the group's GPUs (percent)."""
        return gpu_metric("nvidia_smi_utilization_gpu", self._group_dimension, self._period, **kwargs)

    def metric_gpu_memory_used_ratio(self, **kwargs) -> cloudwatch.MathExpression:
        """GPU memory used / total over the group (0-1), from ``nvidia_smi_memory_used`` and ``_total``."""
        return gpu_memory_used_ratio(self._group_dimension, self._period, **kwargs)

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
        idle, memory = gpu_alarms(
            self, subject=f"GPU fleet {self.fleet_name}", utilization=self.metric_gpu_utilization(),
            memory_used_ratio=self.metric_gpu_memory_used_ratio(), idle_threshold_percent=idle_threshold,
            evaluation_periods=periods, memory_pressure_threshold=memory_threshold, actions=[notify],
            idle_note="A fleet at zero publishes nothing and does not alarm.")
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
                                  f"{scale_to_zero_after.to_human_string()}; sets the group to 0 instances once.",
                threshold=1, evaluation_periods=periods_to_zero,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
            # An Auto Scaling alarm action repeats every minute while the alarm stays in ALARM, undoing an
            # operator's scale-up; the alarm's state-change event reaches EventBridge once per change to ALARM
            # (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html).
            self.scale_to_zero_function = runtime_function(
                self, "ScaleToZeroFunction", handler="scale_to_zero.handler", files=["scale_to_zero.py"],
                description=f"GPU fleet {self.fleet_name}: sets the group to 0 once when the scale-to-zero alarm fires",
                timeout=Duration.seconds(30),
                environment={"GROUP_NAME": self.auto_scaling_group.auto_scaling_group_name},
                log_group=logs.LogGroup(self, "ScaleToZeroLogs", retention=logs.RetentionDays.THREE_MONTHS,
                                        removal_policy=self._removal_policy))
            suppress_checkov(self.node.find_child("ScaleToZeroLogs"), "CKV_AWS_158",
                             "Holds the group's name and when it was set to 0, nothing else; CloudWatch Logs encrypts it")
            suppress_checkov(self.scale_to_zero_function, "CKV_AWS_116",
                             "EventBridge retries it twice; the alarm that triggers it also notifies the alert topic, "
                             "so a failed stop is never silent")
            self.scale_to_zero_function.add_to_role_policy(iam.PolicyStatement(
                actions=["autoscaling:SetDesiredCapacity"],
                resources=[stack_arn(Stack.of(self), AUTO_SCALING_GROUPS_ARN)],
                conditions={"StringEquals": {f"autoscaling:ResourceTag/{FLEET_TAG}": self.fleet_name}}))
            Validations.of(self.scale_to_zero_function.role).acknowledge(Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::{nag_arn(Stack.of(self), AUTO_SCALING_GROUPS_ARN)}]",
                reason="Limited to this fleet's group by the fleet tag condition (the group's ARN would be a cycle)."))
            events.Rule(self, "ScaleToZeroOnAlarm", description=f"GPU fleet {self.fleet_name}: scale to zero, once",
                        event_pattern=events.EventPattern(
                            source=["aws.cloudwatch"], detail_type=["CloudWatch Alarm State Change"],
                            detail={"alarmName": [scale_to_zero.alarm_name], "state": {"value": ["ALARM"]}}),
                        targets=[targets.LambdaFunction(self.scale_to_zero_function, retry_attempts=2)])
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


@refusal_leaves_no_node
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
