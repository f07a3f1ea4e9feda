"""TrainingQueue: Spot compute on AWS Batch, retries from checkpoints, multi-node over EFA, alarms and events."""

import json
import subprocess

import pytest
from aws_cdk import Duration, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match

from ml_platform_constructs import DatasetBucket, DatasetVolume, TrainingQueue, ValidationError
from ml_platform_constructs.training.training_queue import is_tagged_ecr_image
from tests.conftest import isolated_vpc, queue_vpc

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
SPOT_TYPES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]


def queue_stack(stack: Stack, **overrides) -> dict:
    vpc = overrides.get("vpc") or queue_vpc(stack)
    key = kms.Key(stack, "Key")
    datasets = DatasetBucket(stack, "Datasets", encryption_key=key)
    props = dict(vpc=vpc, instance_types=[ec2.InstanceType(t) for t in SPOT_TYPES], image_uri=IMAGE,
                 alerts=sns.Topic(stack, "Alerts"), key=key, datasets=datasets, queue_name="training")
    props.update(overrides)
    queue = TrainingQueue(stack, "Queue", **props)
    return {"queue": queue, "key": key, "datasets": datasets, "vpc": vpc}


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        # Multi-node instances need egress (the EFA installer): private subnets behind a NAT gateway.
        egress = ec2.Vpc(stack, "EgressVpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1,
                         restrict_default_security_group=False)
        parts.update(queue_stack(
            stack, vpc=egress, vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            on_demand_max_vcpus=16, multi_node_instance_types=[ec2.InstanceType("g6.12xlarge")],
            multi_node_max_vcpus=96,
            dataset_volumes=[DatasetVolume(name="imagenet", version="v1", size_gib=200, parameter_prefix="/p/")]))
        parts["stack"] = stack
    return synth_stack(body), parts


def environments(template):
    return {k: v["Properties"] for k, v in template.find_resources("AWS::Batch::ComputeEnvironment").items()}


def spot(template):
    return next(p for p in environments(template).values() if p["ComputeResources"]["Type"] == "SPOT")


def single_node_definition(template):
    return next(p["Properties"] for k, p in template.find_resources("AWS::Batch::JobDefinition").items()
                if p["Properties"]["Type"] == "container")


def user_data(template, multi_node=False):
    text = json.dumps([v for k, v in template.find_resources("AWS::EC2::LaunchTemplate").items()
                       if ("MultiNode" in k) == multi_node][0]["Properties"]["LaunchTemplateData"]["UserData"])
    return json.loads(text)


def test_spot_environment_scales_from_zero_with_price_capacity_optimized(built):
    resources = spot(built[0])["ComputeResources"]
    assert resources["AllocationStrategy"] == "SPOT_PRICE_CAPACITY_OPTIMIZED"
    assert (resources["MinvCpus"], resources["MaxvCpus"]) == (0, 256)
    assert resources["InstanceTypes"] == SPOT_TYPES


def test_nvidia_al2023_image_is_set_explicitly(built):
    for props in environments(built[0]).values():
        assert props["ComputeResources"]["Ec2Configuration"] == [{"ImageType": "ECS_AL2023_NVIDIA"}]


def test_on_demand_environment_sits_behind_spot_with_its_own_cap(built):
    template, _ = built
    on_demand = next(p for p in environments(template).values()
                     if p["ComputeResources"]["Type"] == "EC2" and "PlacementGroup" not in p["ComputeResources"])
    assert on_demand["ComputeResources"]["MaxvCpus"] == 16
    queue = next(p["Properties"] for k, p in template.find_resources("AWS::Batch::JobQueue").items()
                 if "MultiNode" not in k)
    assert [entry["Order"] for entry in queue["ComputeEnvironmentOrder"]] == [1, 2]


def test_a_deploy_never_re_enables_what_the_budget_stop_disabled(built):
    template, _ = built
    for kind in ("AWS::Batch::ComputeEnvironment", "AWS::Batch::JobQueue"):
        for props in (v["Properties"] for v in template.find_resources(kind).values()):
            assert "State" not in props


def test_instances_carry_the_queue_and_budget_scope_tags_the_budget_guard_finds_them_by(built):
    for props in environments(built[0]).values():
        assert props["ComputeResources"]["Tags"] == {"ml-platform:queue": "training", "ml-platform:budget-scope": "account"}
        assert props["Tags"]["ml-platform:queue"] == "training"
        assert props["Tags"]["ml-platform:budget-scope"] == "account"
    for queue in built[0].find_resources("AWS::Batch::JobQueue").values():
        assert queue["Properties"]["Tags"]["ml-platform:budget-scope"] == "account"


def test_launch_template_is_imdsv2_encrypted_gp3_and_mime_multipart(built):
    template, _ = built
    data = next(v for k, v in template.find_resources("AWS::EC2::LaunchTemplate").items()
                if "MultiNode" not in k)["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    root = data["BlockDeviceMappings"][0]
    assert root["DeviceName"] == "/dev/xvda"
    assert root["Ebs"]["Encrypted"] is True and root["Ebs"]["VolumeType"] == "gp3"
    assert "Content-Type: multipart/mixed" in json.dumps(data["UserData"])


def test_user_data_raises_the_stop_timeout_and_drains_spot_instances(built):
    text = boot_script(built[0])
    assert "ECS_CONTAINER_STOP_TIMEOUT=110s" in text
    assert "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true" in text


def boot_script(template, multi_node=False) -> str:
    """The shell part of the MIME multi-part user data (base64 inside the part), tokens replaced by a placeholder."""
    parts = user_data(template, multi_node)["Fn::Base64"]["Fn::Join"][1]
    shell = next(part for part in parts if isinstance(part, dict))["Fn::Base64"]
    pieces = shell["Fn::Join"][1] if isinstance(shell, dict) else [shell]
    return "".join(piece if isinstance(piece, str) else "TOKEN" for piece in pieces)


def test_user_data_is_the_shared_bootstrap_with_the_queue_as_gpu_dimension(built):
    script = boot_script(built[0])
    for fragment in ("interruption_watcher.py", "ML_PLATFORM_SIGNAL_CONTAINERS=ecs", "> /run/ml-platform/instance-type",
                     "dnf install -y amazon-cloudwatch-agent", "LABEL=ds", "/data/imagenet ext4 ro"):
        assert fragment in script, fragment
    agent = json.loads(script.split("cloudwatch-agent.json <<'EOF'\n", 1)[1].split("\nEOF", 1)[0])
    gpu = agent["metrics"]["metrics_collected"]["nvidia_gpu"]
    assert gpu["append_dimensions"] == {"QueueName": "training"}
    assert agent["metrics"]["aggregation_dimensions"] == [["QueueName"], ["QueueName", "InstanceId"]]


def test_boot_script_is_valid_bash_with_terminated_here_documents(built, tmp_path):
    path = tmp_path / "boot.sh"
    path.write_text(boot_script(built[0]))
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0

def test_job_definition_fits_the_smallest_type(built):
    requirements = {r["Type"]: r["Value"] for r in single_node_definition(built[0])["ContainerProperties"][
        "ResourceRequirements"]}
    # g5.xlarge / g6.xlarge: 1 GPU, 4 vCPUs, 16 GiB of which 90% for the job.
    assert requirements == {"GPU": "1", "VCPU": "4", "MEMORY": str(int(16 * 1024 * 0.9))}


def test_retry_strategy_retries_reclaims_and_start_up_failures_but_not_the_jobs_own_exit(built):
    strategy = single_node_definition(built[0])["RetryStrategy"]
    assert strategy["Attempts"] == 3
    assert strategy["EvaluateOnExit"] == [
        {"Action": "RETRY", "OnStatusReason": "Host EC2*"},
        {"Action": "RETRY", "OnExitCode": "143"},
        {"Action": "RETRY", "OnReason": "CannotPullContainerError:*"},
        {"Action": "RETRY", "OnReason": "CannotStartContainerError*"},
        {"Action": "EXIT", "OnExitCode": "*"},
    ]


def test_jobs_get_the_stop_file_and_datasets_and_no_checkpoint_variable_but_their_own(built):
    """One set of job-contract names: a submission sets ML_PLATFORM_CHECKPOINT_URI per job; a definition carries no
    checkpoint variable of another name (ML_PLATFORM_CHECKPOINT_ROOT was one)."""
    container = single_node_definition(built[0])["ContainerProperties"]
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env["ML_PLATFORM_STOP_FILE"] == "/run/ml-platform/stop-requested"
    # The job's own checkpoint URI is set at submission; the checkpoint-bound threshold is the alarm's, not a location.
    assert not [name for name in env if "CHECKPOINT" in name and name != "ML_PLATFORM_CHECKPOINT_BOUND_PERCENT"]
    mounts = {m["ContainerPath"]: m.get("ReadOnly", False) for m in container["MountPoints"]}
    assert mounts == {"/run/ml-platform": False, "/data/imagenet": True}


def test_job_logs_go_to_a_log_group_encrypted_with_the_key(built):
    template, parts = built
    container = single_node_definition(template)["ContainerProperties"]
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"
    group = next(iter(template.find_resources("AWS::Logs::LogGroup").values()))["Properties"]
    assert "KmsKeyId" in group


def test_the_queue_adds_the_logs_statement_to_a_key_of_this_app(built):
    template, _ = built
    key = next(iter(template.find_resources("AWS::KMS::Key").values()))["Properties"]["KeyPolicy"]["Statement"]
    assert any(s.get("Sid") == "AllowCloudWatchLogsToEncryptLogGroups" for s in key)


def test_an_imported_key_it_cannot_change_fails_at_synth_with_the_fix(synth_stack):
    def body(stack):
        imported = kms.Key.from_key_arn(stack, "Imported", "arn:aws:kms:us-east-1:123456789012:key/abc")
        queue_stack(stack, key=imported)
    with pytest.raises(ValidationError, match=r"TrainingQueue: key=.*a key whose policy lets logs.us-east-1.amazonaws.com "
                                              r"use it.*Fix: .*key_policy_has\(key, 'logs'\)"):
        synth_stack(body)


def test_an_imported_key_declared_to_allow_cloudwatch_logs_is_used(synth_stack):
    from ml_platform_constructs import LOGS_SERVICE, key_policy_has

    def body(stack):
        imported = kms.Key.from_key_arn(stack, "Imported", "arn:aws:kms:us-east-1:123456789012:key/abc")
        key_policy_has(imported, LOGS_SERVICE)
        queue_stack(stack, key=imported)
    synth_stack(body).resource_count_is("AWS::Batch::JobQueue", 1)


def test_job_timeout_is_set(built):
    assert single_node_definition(built[0])["Timeout"] == {"AttemptDurationSeconds": 86400}


def test_failed_jobs_reach_the_alert_topic_with_reason_and_attempts(built):
    template, _ = built
    rule = next(v["Properties"] for v in template.find_resources("AWS::Events::Rule").values()
                if v["Properties"]["EventPattern"].get("detail", {}).get("status") == ["FAILED"])
    assert rule["EventPattern"]["detail-type"] == ["Batch Job State Change"]
    text = json.dumps(rule["Targets"][0]["InputTransformer"])
    assert "$.detail.statusReason" in text and "$.detail.attempts" in text


def test_spot_retries_are_counted_by_their_own_rule(built):
    template, _ = built
    rule = next(v["Properties"] for v in template.find_resources("AWS::Events::Rule").values()
                if v["Properties"]["EventPattern"].get("detail", {}).get("status") == ["RUNNABLE"])
    assert rule["EventPattern"]["detail"]["$or"] == [
        {"attempts": {"statusReason": [{"prefix": "Host EC2"}]}}, {"attempts": {"container": {"exitCode": [143]}}}]


def test_events_reach_the_log_group_without_a_custom_resource(built):
    template, _ = built
    # the queue's one function is its stall watcher (health): none writes the log group's policy
    assert [k for k in template.find_resources("AWS::Lambda::Function") if "StallWatcher" not in k] == []
    template.has_resource_properties("AWS::Logs::ResourcePolicy", {"PolicyDocument": Match.any_value()})


def test_idle_gpu_alarm_per_queue_under_40_percent_for_3_periods(built):
    template, _ = built
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "nvidia_smi_utilization_gpu", "Namespace": "MLPlatform/GPU", "Threshold": 40,
        "EvaluationPeriods": 3, "ComparisonOperator": "LessThanThreshold",
        "Dimensions": [{"Name": "QueueName", "Value": "training"}]})


def test_the_per_instance_widget_reads_a_dimension_set_the_agent_publishes(built):
    # The raw GPU metrics also carry index, name and host: only the agent's aggregations have exactly these sets.
    import re
    body = json.dumps(next(iter(built[0].find_resources("AWS::CloudWatch::Dashboard").values()))["Properties"])
    schema = re.search(r'SCHEMA\(\\+"MLPlatform/GPU\\+", ([A-Za-z, ]+)\)', body)
    script = boot_script(built[0])
    agent = json.loads(script.split("cloudwatch-agent.json <<'EOF'\n", 1)[1].split("\nEOF", 1)[0])
    published = [set(d) for d in agent["metrics"]["aggregation_dimensions"]]
    assert schema and {d.strip() for d in schema.group(1).split(",")} in published


def test_dashboard_charts_jobs_retries_gpus_and_instances(built):
    body = json.dumps(next(iter(built[0].find_resources("AWS::CloudWatch::Dashboard").values()))["Properties"])
    for title in ("Job state changes by state", "Spot retries and failed jobs", "GPU utilization",
                  "Instances (GPU utilization per instance)"):
        assert title in body


def test_multi_node_is_on_demand_in_one_az_with_a_cluster_placement_group(built):
    template, _ = built
    multi = next(p for p in environments(template).values() if "PlacementGroup" in p["ComputeResources"])
    assert multi["ComputeResources"]["Type"] == "EC2"
    assert len(multi["ComputeResources"]["Subnets"]) == 1
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})


def test_multi_node_security_group_admits_its_own_nodes_only(built):
    template, _ = built
    ingress = list(template.find_resources("AWS::EC2::SecurityGroupIngress").values())
    assert len(ingress) == 1
    rule = ingress[0]["Properties"]
    assert rule["IpProtocol"] == "-1" and rule["SourceSecurityGroupId"] == rule["GroupId"]


def test_multi_node_definition_has_an_open_node_range(built):
    template, _ = built
    definition = next(p["Properties"] for p in template.find_resources("AWS::Batch::JobDefinition").values()
                      if p["Properties"]["Type"] == "multinode")
    nodes = definition["NodeProperties"]
    assert (nodes["NumNodes"], nodes["MainNode"], nodes["NodeRangeProperties"][0]["TargetNodes"]) == (2, 0, "0:")
    container = nodes["NodeRangeProperties"][0]["Container"]
    requirements = {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}
    assert requirements["GPU"] == "4" and requirements["VCPU"] == "48"


def test_execution_role_pulls_only_from_the_image_repository(built):
    template, _ = built
    text = json.dumps(template.find_resources("AWS::IAM::Policy"))
    assert "arn:${AWS::Partition}:ecr:us-east-1:763104351884:repository/pytorch-training" in text.replace(
        '{"Ref": "AWS::Partition"}', "${AWS::Partition}") or ":763104351884:repository/pytorch-training" in text


def test_job_role_reads_datasets_and_writes_only_its_checkpoints(built):
    text = json.dumps(built[0].find_resources("AWS::IAM::Policy"))
    assert "/checkpoints/training/*" in text and "/datasets/*" in text


def test_the_job_role_reads_its_own_lost_attempts_end_and_nothing_else_of_batch(built):
    statements = [st for policy in built[0].find_resources("AWS::IAM::Policy").values()
                  if policy["Properties"]["PolicyName"].startswith("QueueJobRole")
                  for st in policy["Properties"]["PolicyDocument"]["Statement"]]
    read = next(st for st in statements if st.get("Sid") == "ReadOwnJobAttempts")
    assert read == {"Sid": "ReadOwnJobAttempts", "Action": "batch:DescribeJobs", "Effect": "Allow", "Resource": "*"}
    batch_actions = {a for st in statements for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
                     if a.startswith("batch:")}
    assert batch_actions == {"batch:DescribeJobs"}


def test_the_goodput_alarms_go_to_the_alerts_with_the_fix_for_the_queues_instances(built):
    template, parts = built
    queue = parts["queue"]
    assert set(queue.alarms) == {"idle", "memory", "input_bound", "checkpoint_bound"}
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    by_metric = {a["Properties"].get("MetricName"): a["Properties"] for a in alarms.values()}
    input_bound, checkpoint_bound = by_metric["DataWaitShare"], by_metric["CheckpointShare"]
    assert (input_bound["Threshold"], input_bound["EvaluationPeriods"], checkpoint_bound["Threshold"]) == (30, 6, 10)
    assert input_bound["Dimensions"] == [{"Name": "Queue", "Value": "training"}]
    assert "Fix for g5.xlarge: DataLoader(num_workers=2" in input_bound["AlarmDescription"]
    assert "async_save" in checkpoint_bound["AlarmDescription"]
    alerts = next(k for k in template.find_resources("AWS::SNS::Topic") if k.startswith("Alerts"))
    assert input_bound["AlarmActions"] == [{"Ref": alerts}] and checkpoint_bound["AlarmActions"] == [{"Ref": alerts}]
    body = json.dumps(next(iter(template.find_resources("AWS::CloudWatch::Dashboard").values()))["Properties"])
    assert "DataWaitShare" in body and "MLPlatform/Goodput" in body


def test_the_goodput_thresholds_are_props(synth_stack):
    template = synth_stack(lambda stack: queue_stack(stack, input_bound_percent=50, checkpoint_bound_percent=5,
                                                     bound_minutes=30))
    by_metric = {a["Properties"].get("MetricName"): a["Properties"]
                 for a in template.find_resources("AWS::CloudWatch::Alarm").values()}
    assert (by_metric["DataWaitShare"]["Threshold"], by_metric["DataWaitShare"]["EvaluationPeriods"]) == (50, 6)
    assert by_metric["CheckpointShare"]["Threshold"] == 5


def test_add_job_definition_reuses_the_queue_settings_with_another_image_and_command(synth_stack):
    def body(stack):
        queue = queue_stack(stack)["queue"]
        queue.add_job_definition("Retrain", image_uri=IMAGE.replace("2.5.1", "2.6.0"), command=["python", "train.py"])
    template = synth_stack(body)
    definitions = [v["Properties"] for v in template.find_resources("AWS::Batch::JobDefinition").values()]
    retrain = next(d for d in definitions if "2.6.0" in d["ContainerProperties"]["Image"])
    assert retrain["ContainerProperties"]["Command"] == ["python", "train.py"]
    assert retrain["RetryStrategy"] == definitions[0]["RetryStrategy"]


@pytest.mark.parametrize("overrides,message", [
    ({"image_uri": "pytorch/pytorch:latest"}, r"image_uri='pytorch/pytorch:latest' is invalid: an Amazon ECR image"),
    ({"job_attempts": 11}, r"job_attempts=11 is invalid: 1-10"),
    ({"stop_timeout": Duration.seconds(130)}, r"stop_timeout='2 minutes 10 seconds' is invalid: 30-115 seconds"),
    ({"instance_types": [ec2.InstanceType("g5g.xlarge"), ec2.InstanceType("g5g.2xlarge"),
                         ec2.InstanceType("g5g.4xlarge"), ec2.InstanceType("g5g.8xlarge")]},
     r"instance_types=.*x86_64 GPU types"),
    ({"instance_types": [ec2.InstanceType("g5.xlarge"), ec2.InstanceType("g5.12xlarge"),
                         ec2.InstanceType("g6.xlarge"), ec2.InstanceType("g6.2xlarge")]}, r"one GPU count per instance"),
    ({"instance_types": [ec2.InstanceType("g5.xlarge")]}, r"at least 4 instance types"),
    ({"multi_node_instance_types": [ec2.InstanceType("g5.xlarge")], "multi_node_max_vcpus": 64},
     r"multi_node_instance_types=\['g5.xlarge'\] is invalid: types with an Elastic Fabric Adapter"),
    ({"multi_node_instance_types": [ec2.InstanceType("g6.12xlarge")], "multi_node_max_vcpus": 48},
     r"multi_node_max_vcpus=48 is invalid: room for at least 2 nodes of the largest type \(96 vCPUs\)"),
    ({"multi_node_max_vcpus": 96}, r"multi_node_max_vcpus=96 is invalid: 0 without multi_node_instance_types"),
    ({"job_vcpus": 64}, r"job_vcpus=64 is invalid: 1-8 \(the largest type's vCPUs\)"),
    ({"job_memory": Size.gibibytes(40)}, r"job_memory='40960 MiB' is invalid"),
    ({"queue_name": "has space"}, r"queue_name='has space' is invalid"),
    ({"input_bound_percent": 100}, r"input_bound_percent=100 is invalid: a percentage from 1 to 99"),
    ({"checkpoint_bound_percent": 0}, r"checkpoint_bound_percent=0 is invalid: a percentage from 1 to 99"),
    ({"bound_minutes": 7}, r"bound_minutes=7 is invalid: a multiple of 5 minutes"),
])
def test_bad_props_fail_at_synth_with_prop_value_range_and_fix(synth_stack, overrides, message):
    with pytest.raises(ValidationError, match=message):
        synth_stack(lambda stack: queue_stack(stack, **overrides))


def test_a_job_larger_than_the_smallest_type_warns(synth_stack):
    stacks = []
    synth_stack(lambda stack: stacks.append(stack) or queue_stack(stack, job_vcpus=8))
    Annotations.from_stack(stacks[0]).has_warning("*", Match.string_like_regexp("fit only the larger types"))


def test_ecr_pattern_accepts_tags_and_digests_only_from_ecr():
    assert is_tagged_ecr_image(IMAGE)
    assert is_tagged_ecr_image("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/train@sha256:" + "a" * 64)
    assert not is_tagged_ecr_image("docker.io/library/python:3.12")
    assert not is_tagged_ecr_image("123456789012.dkr.ecr.eu-west-1.amazonaws.com/train")  # never "latest" by accident


def test_every_compute_environment_follows_its_launch_templates_latest_version(built):
    for props in environments(built[0]).values():
        template = props["ComputeResources"]["LaunchTemplate"]
        assert template["Version"] == {"Fn::GetAtt": [template["LaunchTemplateId"]["Ref"], "LatestVersionNumber"]}


def test_events_go_to_the_log_group_arn_without_the_wildcard_and_only_from_the_queues_rules(built):
    template, _ = built
    rules = {k: v["Properties"] for k, v in template.find_resources("AWS::Events::Rule").items()
             if "Batch Job State Change" in json.dumps(v) and "FAILED" not in json.dumps(v)}
    assert len(rules) == 2
    for rule in rules.values():
        target = json.dumps(rule["Targets"][0]["Arn"])
        assert ":log-group:" in target and ":*" not in target
    policy = json.loads(json.dumps(next(iter(template.find_resources("AWS::Logs::ResourcePolicy").values()))))
    text = json.dumps(policy)
    assert "aws:SourceArn" in text and all(rule_id in text for rule_id in rules)


def test_grant_submit_jobs_covers_every_revision_of_the_queues_definitions(synth_stack):
    from aws_cdk import aws_iam as iam

    def body(stack):
        queue = queue_stack(stack)["queue"]
        queue.grant_submit_jobs(iam.Role(stack, "Pipeline", assumed_by=iam.AccountRootPrincipal()))
    text = json.dumps(synth_stack(body).find_resources("AWS::IAM::Policy"))
    assert "batch:SubmitJob" in text and ":job-definition/" in text and '*"' in text


def test_grant_submit_jobs_lets_the_librarys_own_job_commands_work(synth_stack):
    """jobs.submit_job and `job submit|list|cancel` find the queue and its definitions with Describe/List calls (no
    resource-level permissions: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html),
    and `--image` registers a revision, which passes the job and execution roles."""
    from aws_cdk import aws_iam as iam

    def body(stack):
        queue = queue_stack(stack)["queue"]
        queue.grant_submit_jobs(iam.Role(stack, "Pipeline", assumed_by=iam.AccountRootPrincipal()))
    template = synth_stack(body)
    policy = next(p for k, p in template.find_resources("AWS::IAM::Policy").items() if k.startswith("PipelineDefault"))
    statements = policy["Properties"]["PolicyDocument"]["Statement"]

    def granted(action):
        return [s for s in statements if action in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    for action in ("batch:DescribeJobQueues", "batch:DescribeComputeEnvironments", "batch:DescribeJobDefinitions",
                   "batch:DescribeJobs", "batch:ListJobs"):
        assert [s["Resource"] for s in granted(action)] == ["*"], action
    (register,) = granted("batch:RegisterJobDefinition")
    assert ":job-definition/" in json.dumps(register["Resource"]) and "*" != register["Resource"]
    (passing,) = granted("iam:PassRole")
    passed = json.dumps(passing["Resource"])
    roles = template.find_resources("AWS::IAM::Role")
    job_role = next(k for k in roles if k.startswith("QueueJobRole"))
    execution_role = next(k for k in roles if "ExecutionRole" in k)
    assert job_role in passed and execution_role in passed


def grantee_statements(synth_stack, grant):
    """The statements ``grant(queue, role)`` gives a pipeline role, and the queue's evaluation definition and role."""
    from aws_cdk import aws_iam as iam

    def body(stack):
        queue = queue_stack(stack)["queue"]
        grant(queue, iam.Role(stack, "Pipeline", assumed_by=iam.AccountRootPrincipal()))
    template = synth_stack(body)
    policy = next(p for k, p in template.find_resources("AWS::IAM::Policy").items() if k.startswith("PipelineDefault"))
    definitions = {p["Properties"]["Tags"].get("ml-platform:job-definition"): k
                   for k, p in template.find_resources("AWS::Batch::JobDefinition").items()}
    roles = template.find_resources("AWS::IAM::Role")
    return (policy["Properties"]["PolicyDocument"]["Statement"], definitions["evaluation"],
            next(k for k in roles if k.startswith("QueueEvaluationRole")))


def test_grant_submit_jobs_can_neither_run_the_evaluation_definition_nor_pass_its_role(synth_stack):
    """Its role writes the promotion gate's evidence: a submitter who could submit it, register a revision of it with
    an image of their own, or pass its role to a definition of their own, could write any run's evidence."""
    statements, definition, role = grantee_statements(synth_stack, lambda queue, role: queue.grant_submit_jobs(role))
    text = json.dumps(statements)
    assert "batch:SubmitJob" in text and "iam:PassRole" in text  # it still submits training jobs
    assert definition not in text and role not in text


def test_grant_evaluate_submits_the_deployed_evaluation_revision_only_and_passes_no_role(synth_stack):
    statements, definition, _ = grantee_statements(synth_stack, lambda queue, role: queue.grant_evaluate(role))
    (submit,) = [s for s in statements if "batch:SubmitJob" in s["Action"]]
    assert submit["Resource"] == [{"Ref": "Queue956AD878"}, {"Ref": definition}]  # the revision ARN, no wildcard
    actions = [a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    assert "batch:RegisterJobDefinition" not in actions and "iam:PassRole" not in actions
    assert {"batch:DescribeJobQueues", "batch:DescribeJobDefinitions", "batch:DescribeJobs"} <= set(actions)


def test_grant_evaluate_on_a_queue_without_datasets_says_there_is_no_evaluation_definition(synth_stack):
    from aws_cdk import aws_iam as iam

    def body(stack):
        queue = queue_stack(stack, datasets=None)["queue"]
        queue.grant_evaluate(iam.Role(stack, "Pipeline", assumed_by=iam.AccountRootPrincipal()))
    with pytest.raises(ValidationError, match=r"TrainingQueue: grant_evaluate datasets=None is invalid: a queue with a "
                                              r"DatasetBucket .*Fix: pass datasets= to the queue"):
        synth_stack(body)


def test_isolated_subnets_without_the_ecs_and_ecr_endpoints_fail_at_synth_with_the_fix(synth_stack):
    # Without them the instances never join the queue and every job waits RUNNABLE, with no error anywhere.
    with pytest.raises(ValidationError, match=r"TrainingQueue: vpc=.* is invalid: isolated subnets with VPC "
                                              r"endpoints for .*missing: \['ecs', 'ecs-agent', 'ecs-telemetry', "
                                              r"'ecr.api', 'ecr.dkr', 'logs', 'monitoring', 's3'\].*Fix: "
                                              r"PlatformNetwork\(interface_endpoints="):
        synth_stack(lambda stack: queue_stack(stack, vpc=isolated_vpc(stack)))


@pytest.mark.parametrize("left_out", ["s3", "monitoring"])
def test_a_queue_with_the_listed_endpoints_but_no_s3_or_monitoring_fails_at_synth(synth_stack, left_out):
    """Image layers come from S3 (ECR's GetDownloadUrlForLayer answers with a pre-signed S3 URL): without an S3
    endpoint no job starts. The GPU idle and memory alarms read the CloudWatch agent's metrics, sent to the monitoring
    endpoint: without it they get no data and never fire. Both were accepted silently."""
    from aws_cdk import aws_ec2 as ec2

    from ml_platform_constructs import QUEUE_INTERFACE_ENDPOINTS

    def body(stack):
        vpc = isolated_vpc(stack)
        services = [*QUEUE_INTERFACE_ENDPOINTS, ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS]
        if left_out == "s3":
            services.append(ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING)
        else:
            vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        for service in services:
            vpc.add_interface_endpoint(service.short_name.replace(".", "-"), service=service)
        queue_stack(stack, vpc=vpc)
    with pytest.raises(ValidationError, match=rf"missing: \['{left_out}'\]"):
        synth_stack(body)


def test_the_module_keeps_offering_the_names_it_always_had():
    # TrainingQueue's parts live in queue_compute, queue_jobs and queue_monitoring; imports from here keep working.
    import ml_platform_constructs.training.training_queue as module
    for name in ("TrainingQueue", "QUEUE_TAG", "MULTI_NODE_NODES", "is_tagged_ecr_image", "ATTEMPTS", "EFA_DEVICE",
                 "EFA_INSTALL", "JOB_NAMESPACE", "MEMORY_HEADROOM", "ROOT_DEVICE", "STOP_TIMEOUT_SECONDS",
                 "LogGroupTarget", "definitions_of", "ecs_agent_config", "smallest_fit"):
        assert hasattr(module, name), name
    for method in ("add_job_definition", "grant_submit_jobs", "metric_gpu_utilization", "metric_gpu_memory_used_ratio",
                   "metric_spot_retries", "metric_failed_jobs", "retry_strategies", "checkpoint_root"):
        assert hasattr(module.TrainingQueue, method), method
    assert len(TrainingQueue.retry_strategies()) == 5


# --- multi-node networking: the nodes' container interfaces (awsvpc) get the environment's security groups, or the
# VPC's default group where it has none: https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html

def multi_node_environment(template):
    return next(p for p in environments(template).values() if "PlacementGroup" in p["ComputeResources"])


def multi_node_template_data(template):
    return next(v for k, v in template.find_resources("AWS::EC2::LaunchTemplate").items()
                if "MultiNode" in k)["Properties"]["LaunchTemplateData"]


def multi_node_container(template):
    definition = next(p["Properties"] for p in template.find_resources("AWS::Batch::JobDefinition").values()
                      if p["Properties"]["Type"] == "multinode")
    return definition["NodeProperties"]["NodeRangeProperties"][0]["Container"]


def test_multi_node_environment_puts_the_nodes_in_the_queues_node_group_not_the_vpc_default(built):
    template, _ = built
    groups = multi_node_environment(template)["ComputeResources"]["SecurityGroupIds"]
    node_group = next(k for k in template.find_resources("AWS::EC2::SecurityGroup") if "MultiNodeSecurityGroup" in k)
    assert groups == [{"Fn::GetAtt": [node_group, "GroupId"]}]
    # Without EFA the launch template has no network interfaces (Batch refuses them next to the groups) and the job
    # asks for no EFA device.
    assert "NetworkInterfaces" not in multi_node_template_data(template)
    assert "efa_installer.sh" not in boot_script(template, multi_node=True)
    assert "Devices" not in multi_node_container(template).get("LinuxParameters", {})


@pytest.fixture(scope="module")
def built_efa(synth_stack):
    stacks = []

    def body(stack):
        egress = ec2.Vpc(stack, "EgressVpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1,
                         restrict_default_security_group=False)
        queue_stack(stack, vpc=egress, vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
                    multi_node_instance_types=[ec2.InstanceType("g6.12xlarge")], multi_node_max_vcpus=96,
                    multi_node_efa=True)
        stacks.append(stack)
    return synth_stack(body), stacks[0]


def test_multi_node_efa_attaches_an_efa_with_the_node_group_and_installs_its_driver(built_efa):
    template, _ = built_efa
    interface = multi_node_template_data(template)["NetworkInterfaces"][0]
    assert interface["InterfaceType"] == "efa" and interface["DeviceIndex"] == 0
    assert "MultiNodeSecurityGroup" in json.dumps(interface["Groups"])
    assert "efa_installer.sh" in boot_script(template, multi_node=True)
    assert multi_node_container(template)["LinuxParameters"]["Devices"][0]["HostPath"] == "/dev/infiniband/uverbs0"
    # Batch refuses security groups on an environment whose launch template has network interfaces.
    assert "SecurityGroupIds" not in multi_node_environment(template)["ComputeResources"]
    assert spot(template)["ComputeResources"]["SecurityGroupIds"]


def test_multi_node_efa_warns_that_the_nodes_are_in_the_vpc_default_group(built_efa):
    Annotations.from_stack(built_efa[1]).has_warning("*", Match.string_like_regexp(
        "multi_node_efa=True: each multi-node job container's network interface is in the VPC's default security group"))


def test_multi_node_efa_in_a_vpc_whose_default_group_cdk_emptied_fails_at_synth_with_the_fix(synth_stack):
    def body(stack):
        vpc = ec2.Vpc(stack, "Locked", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1,
                      restrict_default_security_group=True)
        queue_stack(stack, vpc=vpc, vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
                    multi_node_instance_types=[ec2.InstanceType("g6.12xlarge")], multi_node_max_vcpus=96,
                    multi_node_efa=True)
    with pytest.raises(ValidationError, match=r"multi_node_efa=True is invalid: a VPC whose default security group "
                                              r"lets the job's nodes reach each other.*Fix: set multi_node_efa=False"):
        synth_stack(body)


def test_multi_node_efa_in_isolated_subnets_fails_at_synth_with_the_fix(synth_stack):
    with pytest.raises(ValidationError, match=r"multi_node_efa=True is invalid: multi-node instances with EFA in subnets "
                                              r"with a route to the internet.*Fix: give the VPC a NAT"):
        synth_stack(lambda stack: queue_stack(stack, multi_node_instance_types=[ec2.InstanceType("g6.12xlarge")],
                                              multi_node_max_vcpus=96, multi_node_efa=True))


def test_multi_node_without_efa_runs_in_isolated_subnets_with_the_queue_endpoints(synth_stack):
    template = synth_stack(lambda stack: queue_stack(stack, multi_node_instance_types=[ec2.InstanceType("g6.12xlarge")],
                                                     multi_node_max_vcpus=96))
    assert multi_node_environment(template)["ComputeResources"]["SecurityGroupIds"]


def test_multi_node_efa_without_multi_node_types_fails(synth_stack):
    with pytest.raises(ValidationError, match=r"multi_node_efa=True is invalid: False without multi_node_instance_types"):
        synth_stack(lambda stack: queue_stack(stack, multi_node_efa=True))


# --- credentials: single-node jobs run in host network mode and reach the instance metadata service
# (https://docs.aws.amazon.com/batch/latest/userguide/networking-modes-jobs.html)

def test_jobs_in_host_network_mode_get_the_job_role_from_the_ecs_agent(built):
    for script in (boot_script(built[0]), boot_script(built[0], multi_node=True)):
        assert "echo ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=true >> /etc/ecs/ecs.config" in script


ECS_INSTANCE_POLICY = "service-role/AmazonEC2ContainerServiceforEC2Role"


def test_the_instance_role_a_job_can_read_holds_only_what_the_ecs_and_cloudwatch_agents_need(built):
    template, _ = built
    profiles = template.find_resources("AWS::IAM::InstanceProfile")
    roles = template.find_resources("AWS::IAM::Role")
    policies = template.find_resources("AWS::IAM::Policy").values()
    instance_roles = set()
    for environment in environments(template).values():
        profile = environment["ComputeResources"]["InstanceRole"]["Fn::GetAtt"][0]
        instance_roles |= {r["Ref"] for r in profiles[profile]["Properties"]["Roles"]}
    assert len(instance_roles) == 3  # Spot, On-Demand, multi-node
    for role in instance_roles:
        managed = json.dumps(roles[role]["Properties"]["ManagedPolicyArns"])
        assert managed.count("arn:") == 1 and ECS_INSTANCE_POLICY in managed
        statements = [s for p in policies if {"Ref": role} in p["Properties"]["Roles"]
                      for s in p["Properties"]["PolicyDocument"]["Statement"]]
        assert statements == [{"Action": "cloudwatch:PutMetricData", "Condition": {
            "StringEquals": {"cloudwatch:namespace": "MLPlatform/GPU"}}, "Effect": "Allow", "Resource": "*",
            "Sid": "PublishGpuMetrics"}], role


def test_the_queues_own_definitions_carry_what_the_library_finds_them_by(built):
    """jobs.find_queue: the single-node, multi-node and evaluation definitions are tagged with their kind and the
    checkpoint root."""
    from ml_platform_constructs.operations.jobs import CHECKPOINT_ROOT_TAG, DEFINITION_TAG

    definitions = [p["Properties"] for p in built[0].find_resources("AWS::Batch::JobDefinition").values()]
    kinds = sorted(d["Tags"].get(DEFINITION_TAG, "") for d in definitions)
    assert [k for k in kinds if k] == ["evaluation", "multi-node", "single-node"]
    for definition in definitions:
        if definition["Tags"].get(DEFINITION_TAG):
            assert "checkpoints/training/" in json.dumps(definition["Tags"][CHECKPOINT_ROOT_TAG])
            assert definition["Tags"]["ml-platform:queue"] == "training"


def test_the_evaluation_role_alone_writes_the_promotion_evidence(built):
    """The gate's evidence (evaluations/<queue>/) is written by the evaluation definition's role: a training job
    cannot write its own or another run's outcomes."""
    template = built[0]
    definitions = {p["Properties"]["Tags"].get("ml-platform:job-definition"): p["Properties"]
                   for p in template.find_resources("AWS::Batch::JobDefinition").values()}
    evaluation_role = definitions["evaluation"]["ContainerProperties"]["JobRoleArn"]["Fn::GetAtt"][0]
    job_role = definitions["single-node"]["ContainerProperties"]["JobRoleArn"]["Fn::GetAtt"][0]
    assert evaluation_role != job_role

    def writes(role):
        policies = [p["Properties"] for p in template.find_resources("AWS::IAM::Policy").values()
                    if {"Ref": role} in p["Properties"]["Roles"]]
        return json.dumps([s["Resource"] for p in policies for s in p["PolicyDocument"]["Statement"]
                           if "s3:PutObject" in s["Action"]])
    assert "evaluations/training/*" in writes(evaluation_role) and "checkpoints/" not in writes(evaluation_role)
    assert "evaluations/" not in writes(job_role)
