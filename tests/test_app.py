"""The composed app: stages per environment, protection, tags, no lookups, no custom resources."""

import json
import re

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Match, Template

from ml_platform_constructs import ValidationError
from stacks.app_builder import build, user_error
from stacks.config import ConfigError
from tests.conftest import ROOT, new_app

ENVIRONMENTS = ("dev", "staging", "prod")
TAG_KEYS = {"environment", "project", "cost-center", "component"}


def test_one_stage_per_environment_with_core_data_and_compute_stacks(platform_app):
    stages, assembly, _ = platform_app
    assert list(stages) == list(ENVIRONMENTS)
    for name in ENVIRONMENTS:
        nested = assembly.get_nested_assembly(f"assembly-{name}")
        assert sorted(s.stack_name for s in nested.stacks) == [f"{name}-Compute", f"{name}-Core", f"{name}-Data",
                                                               f"{name}-Governance"] + ([f"{name}-Serving"] if name == "dev" else [])


def test_serving_stack_only_where_endpoints_are_configured(platform_app, config):
    stages, _, _ = platform_app
    assert {name: stage.serving is not None for name, stage in stages.items()} == {
        name: bool(env.endpoints) for name, env in config.environments.items()}


def test_stacks_are_bound_to_the_configured_account_and_region(platform_app, config):
    stages, _, _ = platform_app
    for name, stage in stages.items():
        env = config.environments[name]
        assert (stage.core.account, stage.core.region) == (env.account, env.region)


@pytest.mark.parametrize("name,protected", [("dev", False), ("staging", False), ("prod", True)])
def test_termination_protection_only_in_prod(platform_app, name, protected):
    stages, _, _ = platform_app
    for stack in (stages[name].core, stages[name].data, stages[name].compute, stages[name].serving,
                  stages[name].governance):
        assert stack is None or stack.termination_protection is protected


@pytest.mark.parametrize("name,policy", [("dev", "Delete"), ("staging", "Retain"), ("prod", "Retain")])
def test_stateful_resources_retained_outside_dev(templates, name, policy):
    stateful = ("AWS::S3::Bucket", "AWS::KMS::Key", "AWS::Logs::LogGroup")
    found = 0
    for stack in ("Core", "Data", "Compute", "Serving", "Governance"):
        for resource in templates.get(f"{name}/{stack}", Template.from_json({"Resources": {}})).to_json()["Resources"].values():
            if resource["Type"] in stateful:
                assert resource["DeletionPolicy"] == policy
                found += 1
    assert found >= 3


# Their Tags are create-only: a training queue keeps only its own there (tests/unit/test_queue_tags.py).
CREATE_ONLY_TAGS = ("AWS::EC2::PlacementGroup", "AWS::Batch::ComputeEnvironment")


def test_every_taggable_resource_carries_the_cost_tags(templates, config):
    for key, template in templates.items():
        env = config.environments[key.split("/")[0]]
        for logical_id, resource in template.to_json()["Resources"].items():
            tags = resource.get("Properties", {}).get("Tags")
            if isinstance(tags, list) and resource["Type"] not in CREATE_ONLY_TAGS:
                assert TAG_KEYS <= {t["Key"] for t in tags}, (key, logical_id)
                assert any(t["Key"] == "cost-center" and t["Value"] == env.cost_center for t in tags)


def test_key_bucket_and_topic_are_tagged(templates):
    template = templates["staging/Core"]
    for resource_type in ("AWS::KMS::Key", "AWS::SNS::Topic", "AWS::EC2::VPC"):
        template.has_resource_properties(resource_type, {"Tags": Match.array_with([{"Key": "environment", "Value": "staging"}])})


def test_synthesis_needs_no_lookups(platform_app):
    _, assembly, outdir = platform_app
    for name in ENVIRONMENTS:
        manifest = json.loads((outdir / f"assembly-{name}" / "manifest.json").read_text())
        assert not manifest.get("missing"), manifest.get("missing")
    assert not (outdir / "cdk.context.json").exists()


def test_no_custom_resources_anywhere(templates):
    for key, template in templates.items():
        types = {r["Type"] for r in template.to_json()["Resources"].values()}
        assert not any(t.startswith("Custom::") or t == "AWS::CloudFormation::CustomResource" for t in types), key


def test_the_only_lambda_functions_are_the_platforms_own(templates):
    # Drift and quality checks, retraining on drift, budget guards, fleet scale-to-zero, the elastic controller, the
    # stall watcher and the evaluation submitters: no custom-resource providers.
    for key, template in templates.items():
        for logical_id in template.find_resources("AWS::Lambda::Function"):
            assert (key.endswith("/Serving") and any(n in logical_id for n in ("DriftCheck", "Retrain", "Quality"))) or (
                key.endswith("/Governance") and "StopFunction" in logical_id) or (
                key.endswith("/Compute") and any(n in logical_id for n in (
                    "ScaleToZeroFunction", "StallWatcher", "Elastic", "Evaluations"))), (key, logical_id)


def test_each_queue_that_evaluates_an_endpoint_has_the_only_submitter_of_its_evaluations(templates, config):
    """dev's classifier sets promotion.evaluate_command: its queue's submitter holds that command, and is the Compute
    stack's output ./platform model evaluate reads; staging and prod evaluate nothing (no submitter)."""
    for name in ENVIRONMENTS:
        template = templates[f"{name}/Compute"]
        submitters = template.find_resources("AWS::Lambda::Function", {
            "Properties": {"Handler": "evaluation_submitter.handler"}})
        commands = config.environments[name].evaluation_commands()
        assert len(submitters) == len(commands), name
        if commands:
            [(logical_id, function)] = submitters.items()
            assert json.loads(function["Properties"]["Environment"]["Variables"]["COMMANDS"]) == {
                "classifier": ["python", "/opt/ml/code/train.py", "--evaluate"]}
            [output] = template.find_outputs("QueueTrainingEvaluationSubmitter").values()
            assert output["Value"] == {"Ref": logical_id}


@pytest.mark.parametrize("name,limit,stop", [("dev", 1500, "80"), ("staging", 3000, "80"), ("prod", 12000, "90")])
def test_each_environment_has_its_budget_and_stop_threshold_priced_in_its_region(templates, config, name, limit, stop):
    governance = templates[f"{name}/Governance"]
    governance.has_resource_properties("AWS::Budgets::Budget", {"Budget": Match.object_like({
        "BudgetName": Match.absent(), "BudgetLimit": {"Amount": limit, "Unit": "USD"}})})
    governance.has_resource_properties("AWS::Lambda::Function", {"Environment": {"Variables": Match.object_like(
        {"ENVIRONMENT": name, "STOP_AT_PERCENT": stop, "PRICE_REGION": config.environments[name].region})}})


def test_prod_uses_the_imported_vpc_and_creates_none(templates):
    templates["prod/Core"].resource_count_is("AWS::EC2::VPC", 0)
    templates["dev/Core"].resource_count_is("AWS::EC2::VPC", 1)


def test_nat_gateways_follow_config(templates):
    templates["dev/Core"].resource_count_is("AWS::EC2::NatGateway", 1)
    templates["staging/Core"].resource_count_is("AWS::EC2::NatGateway", 1)


def test_subnets_in_the_configured_azs(templates, config):
    azs = sorted(r["Properties"]["AvailabilityZone"]
                 for r in templates["staging/Core"].find_resources("AWS::EC2::Subnet").values())
    assert sorted(set(azs)) == sorted(config.environments["staging"].availability_zones)


def test_alert_topic_encrypted_with_the_platform_key_and_subscribed(templates, config):
    core = templates["prod/Core"]
    key_id = next(iter(core.find_resources("AWS::KMS::Key")))
    core.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}})
    core.resource_count_is("AWS::SNS::Subscription", len(config.environments["prod"].alert_emails))


def test_dataset_bucket_uses_the_platform_key_across_stacks(templates):
    templates["dev/Data"].has_resource_properties("AWS::S3::Bucket", {"BucketEncryption": {
        "ServerSideEncryptionConfiguration": [Match.object_like({"ServerSideEncryptionByDefault": {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::ImportValue": Match.string_like_regexp("^dev-Core:")}}})]}})
    templates["dev/Data"].resource_count_is("AWS::KMS::Key", 0)


def test_dataset_retention_settings_follow_config(templates, config):
    rules = next(b for b in templates["prod/Data"].find_resources("AWS::S3::Bucket").values()
                 if b["Properties"]["LifecycleConfiguration"]["Rules"][0]["Id"] == "housekeeping")
    assert rules["Properties"]["LifecycleConfiguration"]["Rules"][0]["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": config.environments["prod"].datasets.noncurrent_version_days}


def test_unknown_target_fails(tmp_path, config):
    with pytest.raises(ConfigError, match="context target='cloud'.*one of \\['aws', 'local'\\]"):
        build(new_app(tmp_path), config, target="cloud")


def test_environment_selection_builds_only_those_stages(tmp_path, config):
    app = new_app(tmp_path)
    assert [stage.stage_name for stage in build(app, config, environments="prod")] == ["prod"]
    assert all(isinstance(s, Stack) for s in (app.node.find_child("prod").node.find_child("Core"),))


def test_gpu_instances_and_their_volumes_carry_the_cost_tags(templates):
    group = next(iter(templates["prod/Compute"].find_resources("AWS::AutoScaling::AutoScalingGroup").values()))
    propagated = {t["Key"]: t["Value"] for t in group["Properties"]["Tags"] if t["PropagateAtLaunch"]}
    assert propagated["cost-center"] == "ml-production" and propagated["component"] == "compute"
    assert propagated["ml-platform:fleet"] == "training"


def test_training_queue_instances_carry_the_cost_tags(templates):
    for environment in templates["staging/Compute"].find_resources("AWS::Batch::ComputeEnvironment").values():
        tags = environment["Properties"]["ComputeResources"]["Tags"]
        assert tags["cost-center"] == "ml-research" and tags["component"] == "compute"
        assert tags["ml-platform:queue"] == "training"


def test_one_fleet_per_configured_fleet_and_one_interruption_rule(templates, config):
    for name, env in config.environments.items():
        compute = templates[f"{name}/Compute"]
        compute.resource_count_is("AWS::AutoScaling::AutoScalingGroup", len(env.fleets))
        # Per fleet: launch failures (+ scale to zero); per queue: failed jobs, Spot retries, state changes.
        scale_to_zero = sum(1 for fleet in env.fleets if fleet.scale_to_zero_after_minutes)
        elastic = sum(1 for queue in env.queues if queue.elastic_max_nodes)  # its controller's rule
        compute.resource_count_is("AWS::Events::Rule", 1 + len(env.fleets) + scale_to_zero + 4 * len(env.queues)
                                  + elastic)  # each queue: 3 + its stall watcher's schedule


def test_one_job_queue_per_configured_queue_plus_multi_node_queues(templates, config):
    for name, env in config.environments.items():
        compute = templates[f"{name}/Compute"]
        multi_node = sum(1 for queue in env.queues if queue.multi_node_instance_types)
        compute.resource_count_is("AWS::Batch::JobQueue", len(env.queues) + multi_node)
        environments = sum(1 + bool(q.on_demand_max_vcpus) + bool(q.multi_node_instance_types) for q in env.queues)
        compute.resource_count_is("AWS::Batch::ComputeEnvironment", environments)
        assert len(env.queues) >= 1, f"{name} ships without a training queue"


def test_dev_classifier_retrains_on_its_composite_drift_alarm_through_its_queue(templates):
    serving = templates["dev/Serving"]
    (drift,) = serving.find_resources("AWS::CloudWatch::CompositeAlarm")
    serving.has_resource_properties("AWS::Events::Rule", {"EventPattern": Match.object_like({
        "detail-type": ["CloudWatch Alarm State Change"],
        "detail": {"alarmName": [{"Ref": drift}], "state": {"value": ["ALARM"]}}})})
    serving.has_resource_properties("AWS::Lambda::Function", {"Environment": {"Variables": Match.object_like({
        "JOB_NAME_PREFIX": "retrain-classifier", "TRIGGERS": '{"drift": 86400, "quality": 86400}'})}})
    serving.resource_count_is("AWS::Batch::JobDefinition", 1)  # the retraining's own, beside what submits it


# Resources whose Ref or attributes change when one of their properties does (a new revision, version or name):
# an export of one that another stack imports blocks the next change (Fn::ImportValue: an imported export cannot
# change).
REVISIONED = {"AWS::Batch::JobDefinition", "AWS::EC2::LaunchTemplate", "AWS::Lambda::Version",
              "AWS::ECS::TaskDefinition", "AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig"}


def test_no_stack_imports_a_value_that_changes_when_its_resource_changes(platform_app):
    _, assembly, _ = platform_app
    stacks = {s.stack_name: s.template for s in assembly.stacks_recursively}
    exported = {o["Export"]["Name"]: (name, o["Value"]) for name, t in stacks.items()
                for o in t.get("Outputs", {}).values() if "Export" in o}
    imported = {m for t in stacks.values() for m in re.findall(r'"Fn::ImportValue": "([^"]+)"', json.dumps(t))}
    assert imported and imported <= set(exported)
    for name in imported:
        stack, value = exported[name]
        targets = re.findall(r'"(?:Ref|Fn::GetAtt)": \[?"([A-Za-z0-9]+)"', json.dumps(value))
        types = {stacks[stack]["Resources"][t]["Type"] for t in targets if t in stacks[stack]["Resources"]}
        assert not types & REVISIONED, f"{name} exports {types & REVISIONED} from {stack}"


def test_platform_key_allows_auto_scaling_only_where_fleets_use_it(templates):
    statements = next(iter(templates["dev/Core"].find_resources("AWS::KMS::Key").values()))["Properties"]["KeyPolicy"]["Statement"]
    assert {"AllowAutoScalingToUseKeyForInstanceVolumes", "AllowAutoScalingToAttachEncryptedVolumes"} <= {
        s.get("Sid") for s in statements}


def test_fleet_volumes_use_the_platform_key(templates):
    template = next(iter(templates["prod/Compute"].find_resources("AWS::EC2::LaunchTemplate").values()))
    ebs = template["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]
    assert ebs["Encrypted"] is True and "Fn::ImportValue" in ebs["KmsKeyId"]


def test_prod_keeps_one_on_demand_instance(templates):
    group = next(iter(templates["prod/Compute"].find_resources("AWS::AutoScaling::AutoScalingGroup").values()))
    assert group["Properties"]["MixedInstancesPolicy"]["InstancesDistribution"]["OnDemandBaseCapacity"] == 1


def test_scale_to_zero_follows_config(templates):
    def functions(key):
        return [k for k in templates[key].find_resources("AWS::Lambda::Function") if "ScaleToZero" in k]
    assert len(functions("dev/Compute")) == 1
    assert functions("prod/Compute") == []


def test_endpoint_capture_is_encrypted_with_the_platform_key(templates):
    config = next(iter(templates["dev/Serving"].find_resources("AWS::SageMaker::EndpointConfig").values()))
    assert "Fn::ImportValue" in json.dumps(config["Properties"]["DataCaptureConfig"]["KmsKeyId"])


def test_a_deploy_cannot_undo_a_budget_stop(templates):
    # The stop suspends Launch and sets desired capacity 0; templates that set neither leave both alone.
    for key, template in templates.items():
        for group in template.find_resources("AWS::AutoScaling::AutoScalingGroup").values():
            assert "DesiredCapacity" not in group["Properties"], key
            assert "SuspendProcesses" not in json.dumps(group.get("UpdatePolicy", {})), key


def test_the_budget_guard_cannot_delete_data(templates):
    for name in ("dev", "staging", "prod"):
        policies = templates[f"{name}/Governance"].find_resources("AWS::IAM::Policy")
        for action in ("s3:Delete", "s3:Put", "ec2:Delete", "DeleteSnapshot", "sagemaker:Delete"):
            assert action not in json.dumps(policies)
        # It may end the instances a stopped training queue still runs, and only those: what they hold is their
        # root volume and copies of dataset snapshots, deleted with them; data lives in S3 and in the snapshots.
        statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
        (terminate,) = [s for s in statements if "ec2:Terminate" in json.dumps(s["Action"])]
        assert terminate["Action"] == "ec2:TerminateInstances" and terminate["Condition"] == {
            "StringEquals": {"aws:ResourceTag/ml-platform:budget-scope": name},
            "Null": {"aws:ResourceTag/ml-platform:queue": "false"}}
        for template in templates[f"{name}/Compute"].find_resources("AWS::EC2::LaunchTemplate").values():
            for device in template["Properties"]["LaunchTemplateData"].get("BlockDeviceMappings", []):
                assert device["Ebs"]["DeleteOnTermination"] is True



def test_each_environment_has_a_dataset_snapshot_runbook_and_recycle_bin_rule(templates):
    for name in ("dev", "staging", "prod"):
        data = templates[f"{name}/Data"]
        data.resource_count_is("AWS::SSM::Document", 1)
        data.has_resource_properties("AWS::Rbin::Rule", {"ResourceTags": [
            {"ResourceTagKey": "ml-platform:dataset-snapshot", "ResourceTagValue": name}]})
        data.has_output("*", {"Description": Match.string_like_regexp("dataset snapshots")})


def test_a_config_error_under_synth_prints_one_line_and_exits_non_zero(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "CDK_CONTEXT_JSON": '{"environments": "qa"}', "CDK_OUTDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: config: context environments='qa' is invalid")


def test_a_construct_error_raised_inside_synth_is_reduced_to_its_message():
    """Raised while jsii calls back into Python (here a lazy value), it arrives wrapped in a RuntimeError."""
    import jsii
    from aws_cdk import App, CfnOutput, IStableStringProducer, Lazy

    @jsii.implements(IStableStringProducer)
    class Failing:
        def produce(self):
            raise ValidationError("DatasetBucket", "bucket_name", "A", "lowercase letters", "rename it")

    app = App()
    CfnOutput(Stack(app, "S"), "Out", value=Lazy.string(Failing()))
    with pytest.raises(RuntimeError) as error:
        app.synth()
    assert user_error(error.value) == "DatasetBucket: bucket_name='A' is invalid: lowercase letters. Fix: rename it"
    assert user_error(ConfigError("k", 1, "allowed", "fix")) == "config: k=1 is invalid: allowed. Fix: fix"
    assert user_error(RuntimeError("something else broke")) is None  # other errors keep their traceback


def test_the_data_stack_keeps_the_mlflow_export_that_0_5_stacks_import(templates):
    """Compute and Serving stacks deployed with 0.5 import the MLflow app's ARN: the Data stack keeps exporting it
    for one release, or its update fails ("Cannot delete export ... as it is in use") before they are redeployed."""
    outputs = templates["dev/Data"].to_json()["Outputs"]
    exports = {o.get("Export", {}).get("Name"): o["Value"] for o in outputs.values()}
    assert exports["dev-Data:ExportsOutputFnGetAttTracking0CBED059ArnAAC3BDAF"] == {
        "Fn::GetAtt": ["Tracking0CBED059", "Arn"]}
