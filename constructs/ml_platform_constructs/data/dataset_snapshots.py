"""Datasets preloaded onto EBS: a workflow that builds a snapshot from an S3 prefix, and the volume spec fleets mount.

Phase 1: ``DatasetSnapshotBuilder`` deploys an SSM Automation runbook (``runbook_name``);
``python -m ml_platform_constructs dataset build`` (the platform app: ``./platform dataset build``) runs it.
It copies the prefix onto a new encrypted gp3 volume on a temporary instance, snapshots the volume, tags the
snapshot, publishes its id at ``<parameter_prefix><name>/<version>/snapshot-id`` and terminates the instance
(its volume goes with it), also when a step fails.
Phase 2: a fleet given ``DatasetVolume(name, version, ...)`` reads that parameter at deploy time; every
instance then boots with its own volume made from the snapshot, in whatever AZ it lands, mounted read-only
at ``/data/<name>``. A parameter that does not exist yet fails the deploy: ``./platform fleet preflight``
names the build command to run first.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from aws_cdk import Acknowledgment, Annotations, Duration, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_rbin as rbin
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from .dataset_bucket import DATASETS_PREFIX
from ..errors import ValidationError, refusal_leaves_no_node
from ..foundation.nag_support import AcknowledgeWildcardResources, nag_arn, stack_arn, suppress_checkov
from ..foundation.network import require_endpoints
from ..foundation.platform_key import allow_autoscaling_volumes

SNAPSHOT_TAG = "ml-platform:dataset-snapshot"
BUILDER_TAG = "ml-platform:dataset-builder"
DATA_DEVICE = "/dev/sdf"
# gp3 limits: https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-ebs-volume-type
GP3_SIZE_GIB = (1, 65536)
GP3_IOPS = (3000, 80000)
GP3_THROUGHPUT_MIBPS = (125, 2000)
GP3_IOPS_PER_GIB = 500
GP3_MIBPS_PER_IOPS = 0.25
# Provisioned rate for volume initialization: https://docs.aws.amazon.com/ebs/latest/userguide/initalize-volume.html
INITIALIZATION_RATE_MIBPS = (100, 300)
STREAMING_THRESHOLD_GIB = 50
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
_VERSION = re.compile(r"^[A-Za-z0-9._-]{1,32}$")


def filesystem_label(name: str, version: str) -> str:
    """The label the builder gives the filesystem and fleets mount by: device names differ on Nitro instances."""
    return "ds" + hashlib.sha1(f"{name}/{version}".encode()).hexdigest()[:10]


@dataclass(frozen=True)
class DatasetVolume:
    """A dataset snapshot version a fleet mounts read-only at ``/data/<name>``.

    :param name: the dataset (1-40 lowercase letters, digits, hyphens).
    :param version: the snapshot version built by ``./platform dataset build``.
    :param size_gib: the volume size, at least the snapshot's.
    :param parameter_prefix: where the builder publishes snapshot ids (``DatasetSnapshotBuilder.parameter_prefix``).
    :param iops: gp3 IOPS (3,000-80,000; at most 500 per GiB). Default: 3,000 (included in gp3's price).
    :param throughput_mibps: gp3 MiB/s (125-2,000; at most 0.25 per IOPS). Default: 125 (included).
    :param initialization_rate_mibps: provisioned rate for volume initialization (100-300 MiB/s), so the first
        read of each block does not wait on S3; billed per GiB initialized. Default: none (lazy loading).
    :param streaming_threshold_gib: below this size a warning says streaming from S3 is likely cheaper. Default: 50.
    """
    name: str
    version: str
    size_gib: int
    parameter_prefix: str
    iops: int = 3000
    throughput_mibps: int = 125
    initialization_rate_mibps: Optional[int] = None
    streaming_threshold_gib: int = STREAMING_THRESHOLD_GIB

    @property
    def parameter_name(self) -> str:
        return f"{self.parameter_prefix}{self.name}/{self.version}/snapshot-id"

    @property
    def mount_point(self) -> str:
        return f"/data/{self.name}"

    def validate(self, construct: str) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError(construct, f"dataset_volumes[{self.name!r}].{prop}", value, allowed, fix)

        if not _NAME.match(self.name):
            fail("name", self.name, "1-40 lowercase letters, digits and hyphens", "e.g. 'imagenet'")
        if not _VERSION.match(self.version):
            fail("version", self.version, "1-32 letters, digits, '.', '_' or '-'", "e.g. 'v3' or '2026-11-29'")
        low, high = GP3_SIZE_GIB
        if not low <= self.size_gib <= high:
            fail("size_gib", self.size_gib, f"a gp3 size of {low}-{high} GiB", "at least the dataset's size")
        low, high = GP3_IOPS
        if not low <= self.iops <= high or self.iops > GP3_IOPS_PER_GIB * self.size_gib:
            fail("iops", self.iops, f"{low}-{high} and at most {GP3_IOPS_PER_GIB} per GiB "
                 f"({GP3_IOPS_PER_GIB * self.size_gib} for {self.size_gib} GiB)", "lower iops or raise size_gib")
        low, high = GP3_THROUGHPUT_MIBPS
        if not low <= self.throughput_mibps <= high or self.throughput_mibps > GP3_MIBPS_PER_IOPS * self.iops:
            fail("throughput_mibps", self.throughput_mibps, f"{low}-{high} MiB/s and at most {GP3_MIBPS_PER_IOPS} "
                 f"per IOPS ({GP3_MIBPS_PER_IOPS * self.iops:g} for {self.iops} IOPS)", "lower it or raise iops")
        if self.initialization_rate_mibps is not None:
            low, high = INITIALIZATION_RATE_MIBPS
            if not low <= self.initialization_rate_mibps <= high:
                fail("initialization_rate_mibps", self.initialization_rate_mibps, f"{low}-{high} MiB/s",
                     "e.g. 300, or None for lazy loading")


# Network-optimized: the copy from S3 is network-bound. The builder launches in the first selected subnet.
DEFAULT_BUILDER_INSTANCE_TYPE = "m6in.2xlarge"


@refusal_leaves_no_node
class DatasetSnapshotBuilder(Construct):
    """The environment's dataset snapshot workflow (an SSM Automation runbook) and the snapshots' retention.

    :param vpc: where the temporary builder instance runs (private subnets; S3 through the gateway endpoint).
    :param source_buckets: buckets whose ``datasets/`` prefix the builder may copy.
    :param key: encrypts the dataset volumes and so the snapshots. Fleets' instances get volumes made from them,
        so a key of this app gets the Auto Scaling service-linked role statements added; an imported key must
        have them (a warning, ``ml-platform:snapshot-key-autoscaling``, says so).
    :param environment: tags the snapshots; the Recycle Bin rule keeps this environment's deleted snapshots.
    :param parameter_prefix: where snapshot ids are published. Default: ``/ml-platform/<environment>/datasets/``.
    :param builder_instance_type: Default: ``m6in.2xlarge`` (network-optimized: the copy is network-bound).
    Attributes: ``runbook_name`` (run it with ``python -m ml_platform_constructs dataset build`` or
    ``aws ssm start-automation-execution``), ``parameter_prefix``, ``document``, ``launch_template``,
    ``automation_role``, ``recycle_bin_rule``.

    :param retention: how long a deleted snapshot stays recoverable in the Recycle Bin (1-365 days): a tag-level
        rule for this environment's dataset snapshots (only Region-level rules can be locked). Nothing here
        deletes a snapshot; old versions are removed only by an operator. Default: 30 days.
    """

    def __init__(self, scope: Construct, id: str, *, vpc: ec2.IVpc, source_buckets: Sequence[s3.IBucket],
                 key: kms.IKey, environment: str, vpc_subnets: Optional[ec2.SubnetSelection] = None,
                 parameter_prefix: Optional[str] = None, builder_instance_type: str = DEFAULT_BUILDER_INSTANCE_TYPE,
                 retention: Duration = Duration.days(30)) -> None:
        super().__init__(scope, id)
        self.parameter_prefix = parameter_prefix or f"/ml-platform/{environment}/datasets/"
        if not re.match(r"^/[A-Za-z0-9_./-]+/$", self.parameter_prefix):
            raise ValidationError("DatasetSnapshotBuilder", "parameter_prefix", self.parameter_prefix,
                                  "an SSM parameter path starting and ending with '/'", "e.g. '/ml-platform/dev/datasets/'")
        days = retention.to_days()
        if not 1 <= days <= 365:
            raise ValidationError("DatasetSnapshotBuilder", "retention", retention.to_human_string(),
                                  "1 to 365 days (Recycle Bin's range)", "e.g. Duration.days(30)")
        require_endpoints("DatasetSnapshotBuilder", vpc, vpc_subnets,
                          uses="Run Command reaches the builder's SSM Agent and the builder copies the dataset from "
                               "S3 through them; without them the runbook waits for an instance that never reports",
                          fix="PlatformNetwork() (its DEFAULT_INTERFACE_ENDPOINTS and S3 gateway endpoint have them), "
                              "or subnets with a NAT gateway", scope=self)
        stack = Stack.of(self)
        self.environment = environment
        subnets = vpc.select_subnets(**({"subnet_type": vpc_subnets.subnet_type, "subnets": vpc_subnets.subnets}
                                        if vpc_subnets else {}))

        self.security_group = ec2.SecurityGroup(self, "BuilderSecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                description="Dataset snapshot builder: no inbound")
        self.builder_role = iam.Role(self, "BuilderRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                                     description="Temporary dataset snapshot builder instances")
        self.builder_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"))
        for bucket in source_buckets:
            bucket.grant_read(self.builder_role, f"{DATASETS_PREFIX}*")
        self.launch_template = ec2.LaunchTemplate(
            self, "BuilderTemplate", machine_image=ec2.MachineImage.latest_amazon_linux2023(),
            instance_type=ec2.InstanceType(builder_instance_type), role=self.builder_role,
            security_group=self.security_group, require_imdsv2=True,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            block_devices=[ec2.BlockDevice(device_name="/dev/xvda", volume=ec2.BlockDeviceVolume.ebs(
                16, volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True, kms_key=key))])

        self.automation_role = iam.Role(
            self, "AutomationRole", description="Runs the dataset snapshot workflow",
            assumed_by=iam.ServicePrincipal("ssm.amazonaws.com").with_conditions(
                {"StringEquals": {"aws:SourceAccount": stack.account}}))
        self._grant_automation(stack, key)
        self.document = ssm.CfnDocument(
            self, "Resource", document_type="Automation", document_format="JSON",
            content=self._runbook(subnets.subnet_ids[0], key))
        if not allow_autoscaling_volumes(key):
            Annotations.of(self).add_warning_v2(
                "ml-platform:snapshot-key-autoscaling",
                "DatasetSnapshotBuilder: the imported key's policy cannot be changed from this app; fleets mount "
                "volumes made from its snapshots only if it lets the Auto Scaling service-linked role use it: "
                "https://docs.aws.amazon.com/autoscaling/ec2/userguide/key-policy-requirements-EBS-encryption.html")
        self.recycle_bin_rule = rbin.CfnRule(
            self, "RecycleBinRule", resource_type="EBS_SNAPSHOT",
            description=f"Deleted {environment} dataset snapshots stay recoverable for {int(days)} days",
            resource_tags=[rbin.CfnRule.ResourceTagProperty(resource_tag_key=SNAPSHOT_TAG, resource_tag_value=environment)],
            retention_period=rbin.CfnRule.RetentionPeriodProperty(retention_period_value=int(days),
                                                                  retention_period_unit="DAYS"))

    def volume(self, name: str, version: str, size_gib: int, **options) -> DatasetVolume:
        """A DatasetVolume of this builder's snapshots, for ``SpotGpuFleet(dataset_volumes=...)``."""
        volume = DatasetVolume(name=name, version=version, size_gib=size_gib, parameter_prefix=self.parameter_prefix,
                               **options)
        volume.validate("DatasetSnapshotBuilder")
        return volume

    def _grant_automation(self, stack: Stack, key: kms.IKey) -> None:
        role = self.automation_role
        instances_arn = "arn:{partition}:ec2:{region}:{account}:instance/*"
        parameters_arn = "arn:{partition}:ssm:{region}:{account}:parameter" + self.parameter_prefix + "*"
        scoped = {"StringEquals": {f"aws:ResourceTag/{BUILDER_TAG}": self.environment}}
        role.add_to_policy(iam.PolicyStatement(
            sid="LaunchOnlyFromTheBuilderTemplate", actions=["ec2:RunInstances"], resources=["*"],
            conditions={"ArnLike": {"ec2:LaunchTemplate": f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:"
                                                         f"launch-template/{self.launch_template.launch_template_id}"}}))
        role.add_to_policy(iam.PolicyStatement(sid="TagAtLaunchAndSnapshot", actions=["ec2:CreateTags"], resources=["*"],
                                               conditions={"StringEquals": {"ec2:CreateAction": ["RunInstances",
                                                                                                 "CreateSnapshot"]}}))
        role.add_to_policy(iam.PolicyStatement(sid="TerminateOnlyBuilders", actions=["ec2:TerminateInstances"],
                                               resources=["*"], conditions=scoped))
        role.add_to_policy(iam.PolicyStatement(sid="SnapshotAndObserve", resources=["*"], actions=[
            "ec2:CreateSnapshot", "ec2:DescribeInstances", "ec2:DescribeVolumes", "ec2:DescribeSnapshots",
            "ssm:DescribeInstanceInformation", "ssm:GetCommandInvocation", "ssm:ListCommands",
            "ssm:ListCommandInvocations"]))
        role.add_to_policy(iam.PolicyStatement(
            sid="RunShellOnlyOnBuilders", actions=["ssm:SendCommand"],
            resources=[f"arn:{stack.partition}:ssm:{stack.region}::document/AWS-RunShellScript"]))
        role.add_to_policy(iam.PolicyStatement(
            sid="RunShellOnBuilderInstances", actions=["ssm:SendCommand"],
            resources=[stack_arn(stack, instances_arn)],
            conditions={"StringEquals": {f"ssm:resourceTag/{BUILDER_TAG}": self.environment}}))
        role.add_to_policy(iam.PolicyStatement(sid="PublishSnapshotIds", actions=["ssm:PutParameter"],
                                               resources=[stack_arn(stack, parameters_arn)]))
        role.add_to_policy(iam.PolicyStatement(sid="PassBuilderRole", actions=["iam:PassRole"],
                                               resources=[self.builder_role.role_arn]))
        key.grant(role, "kms:GenerateDataKeyWithoutPlaintext", "kms:Decrypt", "kms:DescribeKey")
        role.add_to_policy(iam.PolicyStatement(sid="GrantsForEncryptedVolumes", actions=["kms:CreateGrant"],
                                               resources=[key.key_arn],
                                               conditions={"Bool": {"kms:GrantIsForAWSResource": True}}))
        reason = ("Launches only from the builder template, terminates and runs shell only on instances tagged as this "
                  "environment's builders; describe and snapshot calls have no resource-level scope; parameters are "
                  "limited to the dataset prefix.")
        suppress_checkov(role.node.find_child("DefaultPolicy"), "CKV_AWS_111", "Each wildcard write is bound by a "
                         "condition (the builder launch template, the creating action, the builder tag) or, like "
                         "CreateSnapshot of a volume made at run time, has no ARN to name beforehand")
        Validations.of(role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=reason),
            *[Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, arn)}]", reason=reason)
              for arn in (parameters_arn, instances_arn)])
        Validations.of(self.builder_role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
                           reason="The workflow drives the builder through SSM Run Command."),
            *[Acknowledgment(id=f"AwsSolutions-IAM5[{f}]", reason="Read-only access to the source buckets' datasets/ prefix.")
              for f in ("Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*", "Action::kms:ReEncrypt*",
                        "Action::kms:GenerateDataKey*")])
        policy = self.builder_role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeWildcardResources(
            policy, [f"/{DATASETS_PREFIX}*"], "Read-only access to the source buckets' datasets/ prefix."))

    @property
    def runbook_name(self) -> str:
        """The SSM Automation document's name (a token until deploy: export it with a CfnOutput)."""
        return self.document.ref

    def _runbook(self, default_subnet: str, key: kms.IKey) -> dict:
        fill = [
            "set -euo pipefail",
            # NVMe serial numbers are EBS volume ids without the hyphen: pick the data volume by it, never an
            # instance-store disk: https://docs.aws.amazon.com/ebs/latest/userguide/nvme-ebs-volumes.html
            "VOLUME='{{ FindVolume.VolumeId }}'",
            "DEV=/dev/$(lsblk -dno NAME,SERIAL | awk -v serial=\"${VOLUME/-/}\" '$2==serial{print $1}')",
            "[ \"$DEV\" != /dev/ ] || { echo \"volume $VOLUME not found\" >&2; exit 1; }",
            "LABEL=ds$(printf '%s' '{{ DatasetName }}/{{ Version }}' | sha1sum | cut -c1-10)",
            "mkfs.ext4 -q -L \"$LABEL\" \"$DEV\"",
            "mkdir -p /mnt/dataset && mount \"$DEV\" /mnt/dataset",
            "aws s3 sync 's3://{{ SourceBucket }}/{{ SourcePrefix }}' /mnt/dataset --only-show-errors",
            # The content manifest a run's passport fingerprints the snapshot by (ml_platform_job.passport.MANIFEST_NAME),
            # written once here so that no job reads the whole dataset to fingerprint it.
            "(cd /mnt/dataset && find . -type f ! -name MANIFEST.sha256 -print0 | sort -z | xargs -0 -r sha256sum) "
            "> /mnt/dataset/MANIFEST.sha256",
            "BYTES=$(du -sb /mnt/dataset | cut -f1)",
            "printf '{\"name\":\"%s\",\"version\":\"%s\",\"source\":\"%s\",\"bytes\":%s}' '{{ DatasetName }}' "
            "'{{ Version }}' 's3://{{ SourceBucket }}/{{ SourcePrefix }}' \"$BYTES\" > /mnt/dataset/.dataset.json",
            "sync && umount /mnt/dataset",
        ]
        terminate = {"name": "TerminateBuilder", "action": "aws:executeAwsApi", "onFailure": "Continue",
                     "inputs": {"Service": "ec2", "Api": "TerminateInstances",
                                "InstanceIds": ["{{ LaunchBuilder.InstanceId }}"]}, "isEnd": True}
        cleanup = {"onFailure": "step:TerminateBuilder", "onCancel": "step:TerminateBuilder"}
        return {
            "schemaVersion": "0.3",
            "description": "Builds an encrypted EBS snapshot of an S3 prefix and publishes its id in SSM "
                           "(ml-platform dataset volumes). The builder instance is terminated on success and failure.",
            "assumeRole": "{{ AutomationAssumeRole }}",
            "parameters": {
                "DatasetName": {"type": "String", "allowedPattern": _NAME.pattern},
                "Version": {"type": "String", "allowedPattern": _VERSION.pattern},
                "SourceBucket": {"type": "String", "allowedPattern": r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"},
                # No quotes: the values are pasted into a shell command on the builder.
                "SourcePrefix": {"type": "String", "allowedPattern": r"^datasets/[A-Za-z0-9!_.*()/-]*$"},
                "SizeGiB": {"type": "Integer"},
                "SubnetId": {"type": "String", "default": default_subnet},
                "AutomationAssumeRole": {"type": "String", "default": self.automation_role.role_arn},
            },
            "mainSteps": [
                {"name": "LaunchBuilder", "action": "aws:executeAwsApi", "onFailure": "Abort",
                 "inputs": {"Service": "ec2", "Api": "RunInstances", "MinCount": 1, "MaxCount": 1,
                            "SubnetId": "{{ SubnetId }}",
                            "LaunchTemplate": {"LaunchTemplateId": self.launch_template.launch_template_id,
                                               "Version": self.launch_template.latest_version_number},
                            "BlockDeviceMappings": [{"DeviceName": DATA_DEVICE, "Ebs": {
                                "VolumeSize": "{{ SizeGiB }}", "VolumeType": "gp3", "Encrypted": True,
                                "KmsKeyId": key.key_arn, "DeleteOnTermination": True}}],
                            "TagSpecifications": [{"ResourceType": "instance", "Tags": [
                                {"Key": BUILDER_TAG, "Value": self.environment},
                                {"Key": "Name", "Value": "dataset-builder {{ DatasetName }} {{ Version }}"}]}]},
                 "outputs": [{"Name": "InstanceId", "Selector": "$.Instances[0].InstanceId", "Type": "String"}]},
                {"name": "WaitForBuilder", "action": "aws:waitForAwsResourceProperty", "timeoutSeconds": 900, **cleanup,
                 "inputs": {"Service": "ssm", "Api": "DescribeInstanceInformation",
                            "InstanceInformationFilterList": [{"key": "InstanceIds",
                                                               "valueSet": ["{{ LaunchBuilder.InstanceId }}"]}],
                            "PropertySelector": "$.InstanceInformationList[0].PingStatus", "DesiredValues": ["Online"]}},
                {"name": "FindVolume", "action": "aws:executeAwsApi", **cleanup,
                 "inputs": {"Service": "ec2", "Api": "DescribeVolumes", "Filters": [
                     {"Name": "attachment.instance-id", "Values": ["{{ LaunchBuilder.InstanceId }}"]},
                     {"Name": "attachment.device", "Values": [DATA_DEVICE]}]},
                 "outputs": [{"Name": "VolumeId", "Selector": "$.Volumes[0].VolumeId", "Type": "String"}]},
                {"name": "CopyDataset", "action": "aws:runCommand", "timeoutSeconds": 172800, **cleanup,
                 "inputs": {"DocumentName": "AWS-RunShellScript", "InstanceIds": ["{{ LaunchBuilder.InstanceId }}"],
                            "Parameters": {"commands": fill, "executionTimeout": "172800"}}},
                {"name": "Snapshot", "action": "aws:executeAwsApi", **cleanup,
                 "inputs": {"Service": "ec2", "Api": "CreateSnapshot", "VolumeId": "{{ FindVolume.VolumeId }}",
                            "Description": "Dataset {{ DatasetName }} {{ Version }} from s3://{{ SourceBucket }}/{{ SourcePrefix }}",
                            "TagSpecifications": [{"ResourceType": "snapshot", "Tags": [
                                {"Key": SNAPSHOT_TAG, "Value": self.environment},
                                {"Key": "dataset", "Value": "{{ DatasetName }}"},
                                {"Key": "version", "Value": "{{ Version }}"},
                                {"Key": "source", "Value": "s3://{{ SourceBucket }}/{{ SourcePrefix }}"},
                                {"Key": "size", "Value": "{{ SizeGiB }} GiB"},
                                {"Key": "environment", "Value": self.environment}]}]},
                 "outputs": [{"Name": "SnapshotId", "Selector": "$.SnapshotId", "Type": "String"}]},
                {"name": "WaitForSnapshot", "action": "aws:waitForAwsResourceProperty", "timeoutSeconds": 86400,
                 **cleanup,
                 "inputs": {"Service": "ec2", "Api": "DescribeSnapshots", "SnapshotIds": ["{{ Snapshot.SnapshotId }}"],
                            "PropertySelector": "$.Snapshots[0].State", "DesiredValues": ["completed"]}},
                # Overwrite false: a version is built once, so fleets on it never see it change.
                {"name": "PublishSnapshotId", "action": "aws:executeAwsApi", **cleanup,
                 "inputs": {"Service": "ssm", "Api": "PutParameter", "Type": "String", "Overwrite": False,
                            "Name": f"{self.parameter_prefix}{{{{ DatasetName }}}}/{{{{ Version }}}}/snapshot-id",
                            "Value": "{{ Snapshot.SnapshotId }}",
                            "Description": "Dataset {{ DatasetName }} {{ Version }} (s3://{{ SourceBucket }}/{{ SourcePrefix }})"},
                 "nextStep": "TerminateBuilder"},
                terminate,
            ],
            "outputs": ["Snapshot.SnapshotId"],
        }
