"""SpotGpuFleet: one behaviour per test on one fleet synthesized for the module, plus every validation error."""

import json

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match

from tests.conftest import isolated_vpc
from ml_platform_constructs import DatasetBucket, SpotGpuFleet, SpotInterruptionAlerts, ValidationError

TYPES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]


def types(*names):
    return [ec2.InstanceType(n) for n in names]


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        vpc = isolated_vpc(stack, endpoints_for=["SpotGpuFleet"])
        topic = sns.Topic(stack, "Alerts")
        parts["key"] = kms.Key(stack, "Key")
        parts["datasets"] = DatasetBucket(stack, "Datasets", encryption_key=parts["key"])
        interruptions = SpotInterruptionAlerts(stack, "Interruptions", alerts=topic)
        parts["fleet"] = SpotGpuFleet(stack, "Fleet", vpc=vpc, alerts=topic, instance_types=types(*TYPES),
                                      datasets=parts["datasets"], fleet_name="train-a", max_capacity=3,
                                      volume_key=parts["key"], scale_to_zero_after=Duration.minutes(30),
                                      spot_max_price="2.50", interruption_alerts=interruptions)
        parts["operator"] = iam.Role(stack, "Operator", assumed_by=iam.AccountRootPrincipal())
        parts["grant"] = parts["fleet"].grant_scale(parts["operator"])
        parts["stack"] = stack

    return synth_stack(body), parts


def group(template):
    return next(iter(template.find_resources("AWS::AutoScaling::AutoScalingGroup").values()))["Properties"]


def launch_data(template):
    return next(iter(template.find_resources("AWS::EC2::LaunchTemplate").values()))["Properties"]["LaunchTemplateData"]


def role_statements(template, role_prefix="FleetInstanceRole"):
    policies = template.find_resources("AWS::IAM::Policy", {"Properties": {
        "Roles": [{"Ref": Match.string_like_regexp(f"^{role_prefix}")}]}})
    return next(iter(policies.values()))["Properties"]["PolicyDocument"]["Statement"]


def user_data(template) -> str:
    parts = launch_data(template)["UserData"]["Fn::Base64"]
    return json.dumps(parts)


def test_main_child_is_the_auto_scaling_group(built):
    _, parts = built
    assert parts["fleet"].node.default_child is parts["fleet"].auto_scaling_group


def test_scales_from_zero_and_a_deploy_never_sets_the_running_size(built):
    props = group(built[0])
    assert (props["MinSize"], props["MaxSize"]) == ("0", "3")
    assert "DesiredCapacity" not in props


def test_all_spot_with_price_capacity_optimized_and_capacity_rebalance(built):
    props = group(built[0])
    distribution = props["MixedInstancesPolicy"]["InstancesDistribution"]
    assert distribution["SpotAllocationStrategy"] == "price-capacity-optimized"
    assert (distribution["OnDemandBaseCapacity"], distribution["OnDemandPercentageAboveBaseCapacity"]) == (0, 0)
    assert props["CapacityRebalance"] is True


def test_every_instance_type_is_an_override(built):
    overrides = group(built[0])["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"]
    assert [o["InstanceType"] for o in overrides] == TYPES


def test_every_subnet_of_the_vpc_is_used(built):
    assert len(group(built[0])["VPCZoneIdentifier"]) == 2


def test_group_metrics_are_enabled_for_in_service_counts(built):
    assert group(built[0])["MetricsCollection"] == [{"Granularity": "1Minute"}]


def test_spot_max_price_is_opt_in_and_warns(built):
    template, parts = built
    assert group(template)["MixedInstancesPolicy"]["InstancesDistribution"]["SpotMaxPrice"] == "2.50"
    Annotations.from_stack(parts["stack"]).has_warning("/Test/Fleet", Match.string_like_regexp("AWS advises against"))


def test_image_is_the_dlami_resolved_from_ssm_at_deploy_time(built):
    template, _ = built
    image = launch_data(template)["ImageId"]["Ref"]
    parameter = template.to_json()["Parameters"][image]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert parameter["Default"] == "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"


def test_imdsv2_required_with_two_hops_for_containers(built):
    assert launch_data(built[0])["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 2}


def test_root_volume_is_encrypted_gp3_with_the_given_key(built):
    ebs = launch_data(built[0])["BlockDeviceMappings"][0]["Ebs"]
    assert (ebs["VolumeType"], ebs["Encrypted"], ebs["VolumeSize"]) == ("gp3", True, 200)
    assert ebs["KmsKeyId"]["Fn::GetAtt"][0].startswith("Key") and ebs["KmsKeyId"]["Fn::GetAtt"][1] == "Arn"


def test_no_ssh_key_and_no_inbound_rule(built):
    template, _ = built
    assert "KeyName" not in launch_data(template)
    fleet_group = next(v for k, v in template.find_resources("AWS::EC2::SecurityGroup").items() if k.startswith("Fleet"))
    assert "SecurityGroupIngress" not in fleet_group["Properties"]


def test_instances_are_managed_through_ssm(built):
    template, _ = built
    role = next(v for k, v in template.find_resources("AWS::IAM::Role").items() if k.startswith("FleetInstanceRole"))
    assert "AmazonSSMManagedInstanceCore" in json.dumps(role["Properties"]["ManagedPolicyArns"])


def test_metrics_publishing_is_limited_to_the_fleet_namespaces(built):
    put = next(s for s in role_statements(built[0]) if s["Action"] == "cloudwatch:PutMetricData")
    assert put["Condition"] == {"StringEquals": {"cloudwatch:namespace": ["MLPlatform/GPU", "MLPlatform/Training"]}}


def test_lifecycle_completion_is_limited_to_the_fleet_by_tag(built):
    complete = next(s for s in role_statements(built[0]) if s["Action"] == "autoscaling:CompleteLifecycleAction")
    assert complete["Condition"] == {"StringEquals": {"autoscaling:ResourceTag/ml-platform:fleet": "train-a"}}


def test_bucket_access_reads_datasets_and_reads_writes_only_its_checkpoints(built):
    s3_resources = json.dumps([s["Resource"] for s in role_statements(built[0]) if "s3:" in json.dumps(s["Action"])])
    assert "/datasets/*" in s3_resources and "/checkpoints/train-a/*" in s3_resources
    assert "/logs/" not in s3_resources
    puts = [s for s in role_statements(built[0]) if "s3:PutObject" in s["Action"]]
    assert len(puts) == 1 and "/checkpoints/train-a/*" in json.dumps(puts[0]["Resource"])
    # Deletes under its own checkpoints only: the job side keeps the newest checkpoints and removes older ones.
    deletes = [s for s in role_statements(built[0]) if "s3:DeleteObject*" in s["Action"]]
    assert len(deletes) == 1 and json.dumps(deletes[0]["Resource"]).count("/checkpoints/train-a/*") == 1
    assert "/datasets/" not in json.dumps(deletes[0]["Resource"])


def test_termination_lifecycle_hook_gives_the_job_time_to_checkpoint(built):
    built[0].has_resource_properties("AWS::AutoScaling::LifecycleHook", {
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING", "HeartbeatTimeout": 300,
        "DefaultResult": "CONTINUE", "LifecycleHookName": "checkpoint-before-termination"})


def test_launch_failures_of_this_group_reach_the_alert_topic(built):
    built[0].has_resource_properties("AWS::Events::Rule", {
        "EventPattern": {"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance Launch Unsuccessful"],
                         "detail": {"AutoScalingGroupName": [{"Ref": Match.string_like_regexp("^FleetASG")}]}},
        "Targets": [Match.object_like({"Arn": {"Ref": Match.string_like_regexp("^Alerts")}})]})


def test_interruption_warnings_and_rebalance_recommendations_reach_the_alert_topic(built):
    built[0].has_resource_properties("AWS::Events::Rule", {
        "EventPattern": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning",
                                                                "EC2 Instance Rebalance Recommendation"]},
        "Targets": [Match.object_like({"InputTransformer": Match.object_like({
            "InputPathsMap": Match.object_like({"detail-instance-id": "$.detail.instance-id"})})})]})


def test_idle_gpu_alarm_under_40_percent_for_3_periods(built):
    built[0].has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/GPU", "MetricName": "nvidia_smi_utilization_gpu", "Statistic": "Average",
        "Period": 300, "Threshold": 40, "EvaluationPeriods": 3, "ComparisonOperator": "LessThanThreshold",
        "TreatMissingData": "notBreaching",
        "Dimensions": [{"Name": "AutoScalingGroupName", "Value": {"Ref": Match.string_like_regexp("^FleetASG")}}],
        "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})


def test_gpu_memory_pressure_alarm_is_used_over_total_above_0_7(built):
    built[0].has_resource_properties("AWS::CloudWatch::Alarm", {
        "Threshold": 0.7, "ComparisonOperator": "GreaterThanThreshold",
        "Metrics": Match.array_with([Match.object_like({"Expression": "used / total"}),
                                     Match.object_like({"Id": "used", "MetricStat": Match.object_like({"Metric": Match.object_like(
                                         {"MetricName": "nvidia_smi_memory_used"})})})])})


def test_scale_to_zero_needs_idle_gpus_and_no_job_for_the_whole_window(built):
    template, _ = built
    alarm = next(v["Properties"] for v in template.find_resources("AWS::CloudWatch::Alarm").values()
                 if v["Properties"].get("EvaluationPeriods") == 6)
    assert alarm["Metrics"][0]["Expression"] == "IF(FILL(util, 100) < 40 AND FILL(job, 1) == 0, 1, 0)"
    assert alarm["TreatMissingData"] == "notBreaching"
    alarm_id = next(k for k, v in template.find_resources("AWS::CloudWatch::Alarm").items()
                    if v["Properties"].get("EvaluationPeriods") == 6)
    function_id = next(k for k in template.find_resources("AWS::Lambda::Function") if "ScaleToZero" in k)
    template.has_resource_properties("AWS::Events::Rule", {
        "EventPattern": {"source": ["aws.cloudwatch"], "detail-type": ["CloudWatch Alarm State Change"],
                         "detail": {"alarmName": [{"Ref": alarm_id}], "state": {"value": ["ALARM"]}}},
        "Targets": [Match.object_like({"Arn": {"Fn::GetAtt": [function_id, "Arn"]}})]})


def test_scale_to_zero_acts_once_not_every_minute(built):
    # An Auto Scaling alarm action repeats while in ALARM and would undo an operator's scale-up.
    template, _ = built
    assert template.find_resources("AWS::AutoScaling::ScalingPolicy") == {}
    alarm = next(v["Properties"] for v in template.find_resources("AWS::CloudWatch::Alarm").values()
                 if v["Properties"].get("EvaluationPeriods") == 6)
    assert all("Lambda" not in json.dumps(action) and "ScalingPolicy" not in json.dumps(action)
               for action in alarm["AlarmActions"])


def test_scale_to_zero_handler_sets_the_group_to_zero_on_alarm_only(monkeypatch):
    from ml_platform_constructs.runtime.handlers import scale_to_zero

    calls = []

    class AutoScaling:
        def set_desired_capacity(self, **kwargs):
            calls.append(kwargs)

    monkeypatch.setenv("GROUP_NAME", "fleet-group")
    ok = scale_to_zero.handler({"detail": {"state": {"value": "OK"}}}, None, AutoScaling())
    assert ok["changed"] is False and calls == []
    fired = scale_to_zero.handler({"detail": {"state": {"value": "ALARM"}}}, None, AutoScaling())
    assert fired["changed"] is True
    assert calls == [{"AutoScalingGroupName": "fleet-group", "DesiredCapacity": 0, "HonorCooldown": False}]


def test_launch_failure_message_uses_the_event_fields_that_exist(built):
    rule = next(v["Properties"] for v in built[0].find_resources("AWS::Events::Rule").values()
                if "EC2 Instance Launch Unsuccessful" in json.dumps(v))
    text = json.dumps(rule["Targets"][0]["InputTransformer"])
    assert "$.detail.Cause" in text and "$.detail.StatusMessage" in text and "Description" not in text


def test_dashboard_charts_gpus_instances_jobs_interruptions_and_launch_failures(built):
    body = json.dumps(next(iter(built[0].find_resources("AWS::CloudWatch::Dashboard").values()))["Properties"])
    for title in ("GPU utilization", "GPU memory used / total", "Instances in service", "Job running",
                  "Spot interruption warnings", "Launch failures"):
        assert title in body


def test_user_data_sets_up_gpu_metrics_per_group_and_instance(built):
    text = user_data(built[0])
    for fragment in ("nvidia_gpu", "utilization_gpu", "memory_used", "memory_total", "temperature_gpu", "power_draw",
                     "AutoScalingGroupName", "aggregation_dimensions", "amazon-cloudwatch-agent-ctl"):
        assert fragment in text


def test_user_data_installs_the_interruption_watcher_with_the_job_contract(built):
    text = user_data(built[0])
    assert "ml-platform-interruption-watcher.service" in text
    assert "ML_PLATFORM_CHECKPOINT_URI=s3://" in text and "/checkpoints/train-a/" in text
    assert "ML_PLATFORM_LIFECYCLE_HOOK=checkpoint-before-termination" in text
    assert "def check(metadata" in text


def test_metric_helpers_use_the_published_names(built):
    fleet = built[1]["fleet"]
    assert fleet.metric_gpu_utilization().metric_name == "nvidia_smi_utilization_gpu"
    assert fleet.metric_in_service_instances().metric_name == "GroupInServiceInstances"
    assert fleet.metric_gpu_memory_used_ratio().expression == "used / total"
    assert (fleet.metric_job_running().namespace, fleet.metric_job_running().statistic) == ("MLPlatform/Training", "Maximum")


def test_grant_scale_allows_setting_the_desired_capacity_of_this_group(built):
    template, parts = built
    assert isinstance(parts["grant"], iam.Grant)
    statements = role_statements(template, "Operator")
    assert statements[0]["Action"] == ["autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup"]


def test_arm64_fleet_uses_the_arm64_dlami(synth_stack):
    def body(stack):
        vpc = isolated_vpc(stack, azs=["us-east-1a"], endpoints_for=["SpotGpuFleet"])
        SpotGpuFleet(stack, "Arm", vpc=vpc, alerts=sns.Topic(stack, "T"),
                     instance_types=types("g5g.xlarge", "g5g.2xlarge", "g5g.4xlarge", "g5g.8xlarge"))
    template = synth_stack(body)
    defaults = [p["Default"] for p in template.to_json()["Parameters"].values()]
    assert "/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id" in defaults


# --- validation -----------------------------------------------------------------------------------------------

@pytest.fixture
def make():
    def build(**overrides):
        stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
        vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                          private_subnet_ids=["subnet-0123456789abcdef0"])
        props = {"vpc": vpc, "alerts": sns.Topic(stack, "T"), "instance_types": types(*TYPES), **overrides}
        return SpotGpuFleet(stack, "Fleet", **props)
    return build


@pytest.mark.parametrize("overrides,message", [
    ({"instance_types": []}, "instance_types=[] is invalid: at least one GPU instance type"),
    ({"instance_types": types("m5.large", *TYPES)}, "instance_types='m5.large' is invalid: a GPU instance type of the catalog"),
    ({"instance_types": types("g5.xlarge", "g5.xlarge", "g6.xlarge", "g6.2xlarge")}, "each type once"),
    ({"instance_types": types("g5.xlarge", "g5.2xlarge", "g5g.xlarge", "g5g.2xlarge")}, "one CPU architecture (got ['arm64', 'x86_64'])"),
    ({"instance_types": types("g5.xlarge", "g5.2xlarge", "g5.12xlarge", "g6.xlarge")}, "one GPU count per instance (got [1, 4])"),
    ({"instance_types": types("g4dn.xlarge", "g4dn.2xlarge", "g6e.xlarge", "g6e.2xlarge")}, "GPU memory within 2x across types (got 16 to 48 GiB)"),
    ({"instance_types": types("g5.xlarge", "g5.2xlarge", "g6.xlarge")}, "at least 4 instance types for Spot"),
    ({"instance_types": types("p3.2xlarge", "g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge")}, "types the current Deep Learning AMI supports"),
    ({"max_capacity": 0}, "max_capacity=0 is invalid"),
    ({"on_demand_base_capacity": 2}, "on_demand_base_capacity=2 is invalid: 0 to max_capacity (1)"),
    ({"spot_max_price": "cheap"}, "spot_max_price='cheap' is invalid"),
    ({"idle_threshold_percent": 100}, "idle_threshold_percent=100 is invalid"),
    ({"alarm_period": Duration.seconds(90)}, "alarm_period='1 minute 30 seconds' is invalid: a whole number of minutes"),
    ({"idle_evaluation_periods": 0}, "idle_evaluation_periods=0 is invalid"),
    ({"scale_to_zero_after": Duration.minutes(7)}, "scale_to_zero_after='7 minutes' is invalid: a multiple of alarm_period"),
    ({"memory_pressure_threshold": 1.5}, "memory_pressure_threshold=1.5 is invalid"),
    ({"checkpoint_timeout": Duration.seconds(10)}, "checkpoint_timeout='10 seconds' is invalid: 30 seconds to 2 hours"),
    ({"fleet_name": "no spaces"}, "fleet_name='no spaces' is invalid"),
])
def test_invalid_props_fail_before_any_resource(make, overrides, message):
    with pytest.raises(ValidationError) as error:
        make(**overrides)
    assert message in str(error.value)
    assert "Fix: " in str(error.value)


def test_low_diversity_can_be_allowed_with_a_warning(make):
    fleet = make(instance_types=types("g5.xlarge", "g6.xlarge"), allow_low_diversity=True)
    Annotations.from_stack(Stack.of(fleet)).has_warning("/S/Fleet", Match.string_like_regexp("at least 4 instance types"))


def test_mixed_gpu_memory_can_be_allowed_with_a_warning(make):
    fleet = make(instance_types=types("g4dn.xlarge", "g4dn.2xlarge", "g6e.xlarge", "g6e.2xlarge"), allow_mixed_gpu_memory=True)
    Annotations.from_stack(Stack.of(fleet)).has_warning("/S/Fleet", Match.string_like_regexp("fit the smallest GPU"))


def test_p3_runs_with_a_pinned_image(make):
    fleet = make(instance_types=types("p3.16xlarge", "p3dn.24xlarge"), allow_low_diversity=True,
                 machine_image=ec2.MachineImage.generic_linux({"us-east-1": "ami-0123456789abcdef0"}))
    assert [e.name for e in fleet.catalog_entries] == ["p3.16xlarge", "p3dn.24xlarge"]


def test_user_data_is_valid_bash(built, tmp_path):
    import subprocess

    parts = launch_data(built[0])["UserData"]["Fn::Base64"]
    pieces = parts["Fn::Join"][1] if isinstance(parts, dict) else [parts]
    script = tmp_path / "user-data.sh"
    script.write_text("".join(p if isinstance(p, str) else "TOKEN" for p in pieces))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr
