"""Dataset snapshots: the build runbook, its clean-up, its IAM scope, retention, and fleets mounting versions."""

import hashlib
import json
import subprocess

import boto3
import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match
from botocore.stub import Stubber
from moto import mock_aws

from tests.conftest import isolated_vpc
from ml_platform_constructs import (DatasetBucket, DatasetSnapshotBuilder, DatasetVolume, SpotGpuFleet, ValidationError,
                                    filesystem_label)
from ops import dataset as dataset_ops

TYPES = [ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")]


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        vpc = isolated_vpc(stack, endpoints_for=["DatasetSnapshotBuilder", "SpotGpuFleet"])
        key = kms.Key(stack, "Key")
        data = DatasetBucket(stack, "Datasets", encryption_key=key)
        builder = DatasetSnapshotBuilder(stack, "Snapshots", vpc=vpc, source_buckets=[data.bucket], key=key,
                                         environment="dev", parameter_prefix="/ml-platform/dev/datasets/")
        parts["builder"] = builder
        parts["fleet"] = SpotGpuFleet(stack, "Fleet", vpc=vpc, alerts=sns.Topic(stack, "Alerts"), instance_types=TYPES,
                                      dataset_volumes=[builder.volume("imagenet", "v3", 200, initialization_rate_mibps=300),
                                                       builder.volume("tiny", "v1", 20)])
        parts["stack"] = stack
    return synth_stack(body), parts


def runbook(template):
    return next(iter(template.find_resources("AWS::SSM::Document").values()))["Properties"]


def steps(template):
    return {s["name"]: s for s in runbook(template)["Content"]["mainSteps"]}


def test_runbook_is_an_automation_document(built):
    props = runbook(built[0])
    assert props["DocumentType"] == "Automation" and props["Content"]["schemaVersion"] == "0.3"
    assert set(props["Content"]["parameters"]) >= {"DatasetName", "Version", "SourceBucket", "SourcePrefix", "SizeGiB"}


def test_steps_launch_copy_snapshot_wait_publish_and_terminate(built):
    assert list(steps(built[0])) == ["LaunchBuilder", "WaitForBuilder", "FindVolume", "CopyDataset", "Snapshot",
                                     "WaitForSnapshot", "PublishSnapshotId", "TerminateBuilder"]


def test_every_step_after_launch_cleans_up_on_failure_and_cancel(built):
    for name, step in steps(built[0]).items():
        if name not in ("LaunchBuilder", "TerminateBuilder"):
            assert step["onFailure"] == step["onCancel"] == "step:TerminateBuilder", name
    terminate = steps(built[0])["TerminateBuilder"]
    assert terminate["inputs"]["Api"] == "TerminateInstances" and terminate["isEnd"] is True


def test_the_data_volume_goes_with_the_builder_instance(built):
    mapping = steps(built[0])["LaunchBuilder"]["inputs"]["BlockDeviceMappings"][0]
    assert mapping["Ebs"]["DeleteOnTermination"] is True and mapping["Ebs"]["Encrypted"] is True
    assert mapping["Ebs"]["VolumeType"] == "gp3"


def test_snapshot_is_tagged_and_its_id_published_once_per_version(built):
    snapshot = steps(built[0])["Snapshot"]["inputs"]
    keys = {t["Key"] for t in snapshot["TagSpecifications"][0]["Tags"]}
    assert keys >= {"ml-platform:dataset-snapshot", "dataset", "version", "source", "size"}
    publish = steps(built[0])["PublishSnapshotId"]["inputs"]
    assert publish["Overwrite"] is False
    assert publish["Name"] == "/ml-platform/dev/datasets/{{ DatasetName }}/{{ Version }}/snapshot-id"


def test_copy_labels_the_filesystem_the_way_fleets_mount_it(built):
    commands = steps(built[0])["CopyDataset"]["inputs"]["Parameters"]["commands"]
    label_line = next(c for c in commands if c.startswith("LABEL="))
    shell = label_line.replace("{{ DatasetName }}", "imagenet").replace("{{ Version }}", "v3")
    label = subprocess.run(["bash", "-c", f"{shell}; echo $LABEL"], capture_output=True, text=True, check=True).stdout.strip()
    assert label == filesystem_label("imagenet", "v3") and len(label) <= 12
    assert any("aws s3 sync" in c for c in commands)
    # The data volume is found by its serial (the volume id), never an instance-store disk.
    assert "VOLUME='{{ FindVolume.VolumeId }}'" in commands and any("SERIAL" in c for c in commands)


def test_the_snapshot_holds_a_content_manifest_of_every_file(built, tmp_path):
    """Written once by the builder, so a run fingerprints a mounted snapshot by its id and this manifest."""
    commands = steps(built[0])["CopyDataset"]["inputs"]["Parameters"]["commands"]
    line = next(c for c in commands if "MANIFEST.sha256" in c)
    assert commands.index(line) == next(i for i, c in enumerate(commands) if "aws s3 sync" in c) + 1
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "labels.csv").write_text("id,label\n1,cat\n")
    (tmp_path / "MANIFEST.sha256").write_text("stale\n")
    subprocess.run(["bash", "-c", line.replace("/mnt/dataset", str(tmp_path))], check=True)
    digest = hashlib.sha256(b"id,label\n1,cat\n").hexdigest()
    assert (tmp_path / "MANIFEST.sha256").read_text() == f"{digest}  ./train/labels.csv\n"


def test_parameters_that_reach_the_shell_cannot_carry_quotes(built):
    parameters = runbook(built[0])["Content"]["parameters"]
    assert "'" not in parameters["SourcePrefix"]["allowedPattern"]
    assert parameters["SourceBucket"]["allowedPattern"] == r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"


def test_automation_role_terminates_only_builders_and_writes_only_dataset_parameters(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("SnapshotsAutomationRole"))
    statements = {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["TerminateOnlyBuilders"]["Condition"] == {"StringEquals": {"aws:ResourceTag/ml-platform:dataset-builder": "dev"}}
    assert statements["RunShellOnBuilderInstances"]["Condition"] == {"StringEquals": {"ssm:resourceTag/ml-platform:dataset-builder": "dev"}}
    assert "document/AWS-RunShellScript" in json.dumps(statements["RunShellOnlyOnBuilders"]["Resource"])
    assert "launch-template/" in json.dumps(statements["LaunchOnlyFromTheBuilderTemplate"]["Condition"])
    assert statements["GrantsForEncryptedVolumes"]["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": True}}
    assert "parameter/ml-platform/dev/datasets/*" in json.dumps(statements["PublishSnapshotIds"]["Resource"])
    assert "ec2:DeleteSnapshot" not in json.dumps(policy) and "ec2:DeleteVolume" not in json.dumps(policy)


def test_builder_reads_only_the_datasets_prefix(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("SnapshotsBuilderRole"))
    text = json.dumps(policy)
    assert "/datasets/*" in text and "s3:PutObject" not in text


def test_deleted_snapshots_stay_in_the_recycle_bin(built):
    built[0].has_resource_properties("AWS::Rbin::Rule", {
        "ResourceType": "EBS_SNAPSHOT", "RetentionPeriod": {"RetentionPeriodValue": 30, "RetentionPeriodUnit": "DAYS"},
        "ResourceTags": [{"ResourceTagKey": "ml-platform:dataset-snapshot", "ResourceTagValue": "dev"}]})


def fleet_template(template):
    return next(v for k, v in template.find_resources("AWS::EC2::LaunchTemplate").items() if k.startswith("FleetLaunchTemplate"))


def fleet_block_devices(template):
    return fleet_template(template)["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"]


def test_fleet_volumes_come_from_the_snapshot_id_in_ssm(built):
    template, _ = built
    devices = fleet_block_devices(template)
    imagenet = next(d for d in devices if d["DeviceName"] == "/dev/sdg")
    parameter = template.to_json()["Parameters"][imagenet["Ebs"]["SnapshotId"]["Ref"]]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<String>"
    assert parameter["Default"] == "/ml-platform/dev/datasets/imagenet/v3/snapshot-id"
    assert imagenet["Ebs"] | {"SnapshotId": None} == {"SnapshotId": None, "VolumeSize": 200, "VolumeType": "gp3", "Iops": 3000,
                                                       "Throughput": 125, "DeleteOnTermination": True,
                                                       "VolumeInitializationRate": 300}


def test_fleet_mounts_each_dataset_read_only_by_label(built):
    text = json.dumps(fleet_template(built[0]))
    label = filesystem_label("imagenet", "v3")
    assert f"LABEL={label} /data/imagenet ext4 ro,noload,nofail" in text and "mount /data/imagenet" in text


def test_small_dataset_volume_warns_that_streaming_is_cheaper(built):
    Annotations.from_stack(built[1]["stack"]).has_warning(
        "/Test/Fleet", Match.string_like_regexp("dataset tiny is 20 GiB, under 50 GiB: streaming it from S3"))


@pytest.mark.parametrize("options,message", [
    ({"size_gib": 10, "iops": 6000}, "iops=6000 is invalid: 3000-80000 and at most 500 per GiB (5000 for 10 GiB)"),
    ({"size_gib": 100, "iops": 3000, "throughput_mibps": 1000}, "throughput_mibps=1000 is invalid"),
    ({"size_gib": 100, "iops": 90000}, "iops=90000 is invalid"),
    ({"size_gib": 100, "initialization_rate_mibps": 500}, "initialization_rate_mibps=500 is invalid: 100-300 MiB/s"),
    ({"size_gib": 0}, "size_gib=0 is invalid"),
])
def test_gp3_and_initialization_limits(options, message):
    volume = DatasetVolume(name="imagenet", version="v3", parameter_prefix="/p/", **options)
    with pytest.raises(ValidationError) as error:
        volume.validate("SpotGpuFleet")
    assert message in str(error.value) and "dataset_volumes['imagenet']" in str(error.value)


def test_a_dataset_is_mounted_once_per_fleet():
    stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                      private_subnet_ids=["subnet-0123456789abcdef0"])
    volume = DatasetVolume(name="imagenet", version="v3", size_gib=100, parameter_prefix="/p/")
    with pytest.raises(ValidationError, match="each dataset once"):
        SpotGpuFleet(stack, "F", vpc=vpc, alerts=sns.Topic(stack, "T"), instance_types=TYPES,
                     dataset_volumes=[volume, DatasetVolume(name="imagenet", version="v4", size_gib=100, parameter_prefix="/p/")])


def test_retention_outside_recycle_bin_range_is_rejected():
    stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                      private_subnet_ids=["subnet-0123456789abcdef0"])
    from aws_cdk import Duration
    with pytest.raises(ValidationError, match="retention='400 days' is invalid: 1 to 365 days"):
        DatasetSnapshotBuilder(stack, "B", vpc=vpc, source_buckets=[], key=kms.Key(stack, "K"), environment="dev",
                               retention=Duration.days(400))


# --- operations -------------------------------------------------------------------------------------------------

def test_build_starts_the_runbook_with_the_bucket_and_prefix(config):
    dev = config.environments["dev"]
    cloudformation = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    outputs = {"Stacks": [{"StackName": "dev-Data", "CreationTime": "2026-11-29T00:00:00Z", "StackStatus": "CREATE_COMPLETE",
                           "Outputs": [{"OutputKey": "DatasetBucketName1234", "OutputValue": "dev-bucket"},
                                       {"OutputKey": "DatasetSnapshotRunbookABCD", "OutputValue": "dev-Data-Runbook"}]}]}
    with Stubber(cloudformation) as cf_stub, Stubber(ssm) as ssm_stub:
        cf_stub.add_response("describe_stacks", outputs, {"StackName": "dev-Data"})
        cf_stub.add_response("describe_stacks", outputs, {"StackName": "dev-Data"})
        ssm_stub.add_response("get_parameters", {"Parameters": []},
                              {"Names": ["/ml-platform/dev/datasets/imagenet/v3/snapshot-id"]})
        ssm_stub.add_response("start_automation_execution", {"AutomationExecutionId": "0123abcd-4567-89ab-cdef-0123456789ab"}, {
            "DocumentName": "dev-Data-Runbook", "Parameters": {
                "DatasetName": ["imagenet"], "Version": ["v3"], "SourceBucket": ["dev-bucket"],
                "SourcePrefix": ["datasets/imagenet/"], "SizeGiB": ["200"]}})
        message = dataset_ops.build(ssm, cloudformation, dev, "imagenet", "v3", "datasets/imagenet/", 200)
    assert "execution 0123abcd-4567-89ab-cdef-0123456789ab" in message


def test_build_refuses_a_prefix_outside_datasets(config):
    with pytest.raises(SystemExit, match="a prefix under datasets/"):
        dataset_ops.build(None, None, config.environments["dev"], "x", "v1", "logs/x/", 10)


def test_build_refuses_a_version_already_built(config, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        ssm = boto3.client("ssm")
        ssm.put_parameter(Name="/ml-platform/dev/datasets/imagenet/v3/snapshot-id", Value="snap-0abc", Type="String")
        with pytest.raises(SystemExit, match="already built"):
            dataset_ops.build(ssm, None, config.environments["dev"], "imagenet", "v3", "datasets/imagenet/", 100)


def test_list_and_missing_volumes_read_the_published_parameters(config, monkeypatch):
    from stacks.config import DatasetVolumeConfig
    import dataclasses

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    dev = config.environments["dev"]
    fleet = dataclasses.replace(dev.fleets[0], dataset_volumes=(DatasetVolumeConfig("imagenet", "v3", 200, None),
                                                                DatasetVolumeConfig("coco", "v1", 100, None)))
    env = dataclasses.replace(dev, fleets=(fleet,))
    with mock_aws():
        ssm = boto3.client("ssm")
        ssm.put_parameter(Name="/ml-platform/dev/datasets/imagenet/v3/snapshot-id", Value="snap-0abc", Type="String")
        assert dataset_ops.listing(ssm, env) == ["imagenet v3: snap-0abc"]
        assert dataset_ops.missing_volumes(ssm, env) == [
            "fleet training mounts coco v1, not built yet: ./platform dataset build dev coco v1 "
            "--prefix datasets/coco/ --size-gib 100"]


def test_copy_commands_are_valid_bash(built, tmp_path):
    commands = steps(built[0])["CopyDataset"]["inputs"]["Parameters"]["commands"]
    script = tmp_path / "copy.sh"
    script.write_text("\n".join(commands).replace("{{ ", "").replace(" }}", ""))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr
