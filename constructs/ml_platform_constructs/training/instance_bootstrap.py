"""What every GPU instance of the platform runs at boot, for SpotGpuFleet and TrainingQueue alike.

One renderer, so a fleet and a queue never drift apart: the environment file of the job contract, the
interruption watcher as a systemd service, the dataset volumes mounted read-only by filesystem label, and the
CloudWatch agent publishing NVIDIA GPU metrics to ``MLPlatform/GPU``. The caller wraps the commands in the
user data its launch template needs (plain shell for a fleet, MIME multi-part for AWS Batch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Mapping, Sequence

from aws_cdk import Annotations, Size
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from ..data.dataset_snapshots import DatasetVolume, filesystem_label
from ..errors import ValidationError
from ml_platform_job.benchmark import INSTANCE_TYPE_FILE
from ml_platform_job.host import AVAILABILITY_ZONE_FILE, INSTANCE_ID_FILE
from ml_platform_job.passport import LIFECYCLE_FILE

GPU_NAMESPACE = "MLPlatform/GPU"
RUNTIME_DIR = "/opt/ml-platform"
RUN_DIR = "/run/ml-platform"
ENV_FILE = "/etc/ml-platform/fleet.env"

AGENT_CTL = "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
GPU_MEASUREMENTS = [{"name": "utilization_gpu", "unit": "Percent"}, {"name": "memory_used", "unit": "Megabytes"},
                    {"name": "memory_total", "unit": "Megabytes"}, "temperature_gpu", "power_draw"]


def validate_dataset_volumes(scope: Construct, construct: str, volumes: Sequence[DatasetVolume]) -> None:
    names = [v.name for v in volumes]
    if len(set(names)) != len(names):
        raise ValidationError(construct, "dataset_volumes", names, "each dataset once (one mount point each)",
                              "mount one version per dataset")
    if len(volumes) > 10:
        raise ValidationError(construct, "dataset_volumes", names, "at most 10 dataset volumes (/dev/sdg-/dev/sdp)",
                              "merge datasets into fewer snapshots")
    for volume in volumes:
        volume.validate(construct)
        if volume.size_gib < volume.streaming_threshold_gib:
            Annotations.of(scope).add_warning_v2(
                "ml-platform:small-dataset-volume",
                f"dataset {volume.name} is {volume.size_gib} GiB, under {volume.streaming_threshold_gib} GiB: "
                "streaming it from S3 at job start is likely cheaper than a volume per instance.")


def dataset_block_devices(scope: Construct, volumes: Sequence[DatasetVolume]) -> list[ec2.BlockDevice]:
    """One gp3 volume per dataset snapshot, /dev/sdg onwards. The snapshot id is read from SSM at deploy time;
    a version not built yet fails the deploy."""
    devices = []
    for index, volume in enumerate(volumes):
        snapshot_id = ssm.StringParameter.value_for_string_parameter(scope, volume.parameter_name)
        devices.append(ec2.BlockDevice(device_name=f"/dev/sd{chr(ord('g') + index)}", volume=ec2.BlockDeviceVolume.ebs_from_snapshot(
            snapshot_id, volume_size=volume.size_gib, delete_on_termination=True, volume_type=ec2.EbsDeviceVolumeType.GP3,
            iops=volume.iops, throughput=volume.throughput_mibps,
            volume_initialization_rate=Size.mebibytes(volume.initialization_rate_mibps)
            if volume.initialization_rate_mibps else None)))
    return devices


def gpu_agent_config(group_dimension: tuple[str, str], *, static: bool, per_instance_in_group: bool = False) -> dict:
    """The CloudWatch agent's configuration: GPU metrics per group (fleet or queue) and per instance.

    ``static`` dimensions (a queue's name) go into the plugin's own ``append_dimensions``, which takes any
    key and value; the global one only takes the agent's ``${aws:...}`` variables
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-Configuration-File-Details.html);
    the agent's nvidia_gpu section goes through the same common handling that turns a plugin's append_dimensions
    into tags (translator/translate/metrics/util/commonconfigutil.go, ProcessLinuxCommonConfig).

    The raw metrics also carry each GPU's index, name and host (https://github.com/aws/amazon-cloudwatch-agent/issues/981),
    so a dashboard or alarm can only read the aggregations published here: the group alone, and the instance alone
    or, with ``per_instance_in_group``, the group and the instance together (what a queue's dashboard charts).
    """
    key, value = group_dimension
    gpu: dict = {"measurement": GPU_MEASUREMENTS}
    global_dimensions = {"InstanceId": "${aws:InstanceId}"}
    if static:
        gpu["append_dimensions"] = {key: value}
    else:
        global_dimensions = {key: value, **global_dimensions}
    per_instance = [key, "InstanceId"] if per_instance_in_group else ["InstanceId"]
    return {
        "agent": {"metrics_collection_interval": 60},
        "metrics": {"namespace": GPU_NAMESPACE, "append_dimensions": global_dimensions,
                    "aggregation_dimensions": [[key], per_instance], "metrics_collected": {"nvidia_gpu": gpu}},
    }


def ubuntu_agent_install(region: str, url_suffix: str, architecture: str) -> str:
    """Installs the agent on the Ubuntu Deep Learning AMI from the Region's own agent bucket (reachable through the
    S3 gateway endpoint, without internet)."""
    arch = "arm64" if architecture == "arm64" else "amd64"
    url = (f"https://amazoncloudwatch-agent-{region}.s3.{region}.{url_suffix}/ubuntu/{arch}/latest/"
           "amazon-cloudwatch-agent.deb")
    return (f"if ! command -v {AGENT_CTL} >/dev/null; then curl -fsSL -o /tmp/cwagent.deb {url} && "
            "dpkg -i /tmp/cwagent.deb || echo 'CloudWatch agent install failed: no GPU metrics from this instance' >&2; fi")


# Amazon Linux 2023 ships the agent in its own repository (on S3, reachable through the gateway endpoint):
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/installing-cloudwatch-agent-commandline.html
AL2023_AGENT_INSTALL = (f"if ! command -v {AGENT_CTL} >/dev/null; then dnf install -y amazon-cloudwatch-agent "
                        "|| echo 'CloudWatch agent install failed: no GPU metrics from this instance' >&2; fi")


@dataclass(frozen=True)
class InstanceBootstrap:
    """The boot commands of a platform GPU instance.

    :param environment: the job contract's variables, written to ``/etc/ml-platform/fleet.env`` and read by the
        interruption watcher.
    :param agent_config: from ``gpu_agent_config``.
    :param agent_install: the command that installs the CloudWatch agent on the image.
    :param dataset_volumes: mounted read-only at their mount points, by filesystem label.
    """
    environment: Mapping[str, str]
    agent_config: dict
    agent_install: str
    dataset_volumes: Sequence[DatasetVolume] = field(default_factory=tuple)

    def commands(self) -> list[str]:
        watcher = resources.files("ml_platform_constructs.runtime.agents").joinpath("interruption_watcher.py").read_text()
        commands = [
            "set -euo pipefail",
            f"mkdir -p {RUNTIME_DIR} /etc/ml-platform",
            f"cat > {ENV_FILE} <<'EOF'\n" + "\n".join(f"{k}={v}" for k, v in self.environment.items()) + "\nEOF",
            f"cat > {RUNTIME_DIR}/interruption_watcher.py <<'EOF'\n{watcher}EOF",
            "cat > /etc/systemd/system/ml-platform-interruption-watcher.service <<'EOF'\n"
            "[Unit]\nDescription=Checkpoint signal before Spot interruption or scale-in\nAfter=network-online.target\n"
            f"[Service]\nEnvironmentFile={ENV_FILE}\nExecStart=/usr/bin/python3 {RUNTIME_DIR}/interruption_watcher.py\n"
            # /run/ml-platform: where any job user writes its PID file and reads the stop file.
            "RuntimeDirectory=ml-platform\nRuntimeDirectoryMode=1777\nRuntimeDirectoryPreserve=yes\n"
            "Restart=on-failure\n[Install]\nWantedBy=multi-user.target\nEOF",
            # The checkpoint signal and the dataset mounts come first: a failed agent download must not cost them.
            "systemctl daemon-reload && systemctl enable --now ml-platform-interruption-watcher.service",
            # The instance type and Spot or On-Demand (a run's cost), in the run directory every job mounts: a
            # job reads them without a metadata call.
            "token=$(curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://169.254.169.254/latest/api/token)"
            " && curl -sf -H \"X-aws-ec2-metadata-token: $token\" http://169.254.169.254/latest/meta-data/instance-type"
            f" > {INSTANCE_TYPE_FILE} && curl -sf -H \"X-aws-ec2-metadata-token: $token\""
            f" http://169.254.169.254/latest/meta-data/instance-life-cycle > {LIFECYCLE_FILE}"
            # The instance's id and Availability Zone: the goodput ledger's boot and idle per instance, and the Spot
            # price history of the AZ the attempt ran in (ml_platform_job.host).
            f" && curl -sf -H \"X-aws-ec2-metadata-token: $token\" http://169.254.169.254/latest/meta-data/instance-id"
            f" > {RUN_DIR}/{INSTANCE_ID_FILE} && curl -sf -H \"X-aws-ec2-metadata-token: $token\""
            f" http://169.254.169.254/latest/meta-data/placement/availability-zone > {RUN_DIR}/{AVAILABILITY_ZONE_FILE}"
            " || echo 'instance type unknown' >&2",
        ]
        for volume in self.dataset_volumes:
            # Nitro instances name EBS devices /dev/nvme*: mount by the label the snapshot builder gave the filesystem.
            label = filesystem_label(volume.name, volume.version)
            commands += [
                f"for i in $(seq 90); do [ -e /dev/disk/by-label/{label} ] && break; sleep 2; done",
                f"mkdir -p {volume.mount_point}",
                f"echo 'LABEL={label} {volume.mount_point} ext4 ro,noload,nofail 0 2' >> /etc/fstab",
                f"mount {volume.mount_point}"]
        commands += [
            self.agent_install,
            f"cat > {RUNTIME_DIR}/cloudwatch-agent.json <<'EOF'\n{json.dumps(self.agent_config, indent=1)}\nEOF",
            f"{AGENT_CTL} -a fetch-config -m ec2 -s -c file:{RUNTIME_DIR}/cloudwatch-agent.json "
            "|| echo 'CloudWatch agent did not start' >&2",
        ]
        return commands
