"""MlflowTracking: the managed MLflow resource, its artifact store in the dataset bucket (encrypted by the bucket's
key, tiered), the narrow service role, the grants jobs and fleets use, the interface endpoints private subnets need;
and how the platform app wires it in every environment."""

import json
from pathlib import Path

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Annotations, Match
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from ml_platform_constructs import (MLFLOW_INTERFACE_ENDPOINTS, DatasetBucket, MlflowTracking, ValidationError)
from ml_platform_constructs.data.mlflow_tracking import LOG_RUN_ACTIONS
from tests.conftest import isolated_vpc


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        key = kms.Key(stack, "PlatformKey")
        datasets = DatasetBucket(stack, "Datasets", encryption_key=key)
        vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a"], nat_gateways=1)
        parts["tracking"] = MlflowTracking(stack, "Tracking", datasets=datasets, name="team-a-dev", vpc=vpc)
        parts["job"] = iam.Role(stack, "JobRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
        parts["grant"] = parts["tracking"].grant_log_runs(parts["job"])
        parts["reader"] = iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        parts["tracking"].grant_read_runs(parts["reader"])
    return synth_stack(body), parts


def resource(template, resource_type):
    return next(iter(template.find_resources(resource_type).values()))["Properties"]


def logical_id(template, resource_type, prefix=""):
    return next(k for k in template.find_resources(resource_type) if k.startswith(prefix))


def statements(template, role_prefix):
    return [s for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith(role_prefix)
            for s in v["Properties"]["PolicyDocument"]["Statement"]]


def test_serverless_app_is_the_default_with_its_artifact_store_under_mlflow(built):
    template, parts = built
    assert parts["tracking"].node.default_child is parts["tracking"].resource
    app = resource(template, "AWS::SageMaker::MlflowApp")
    assert app["Name"] == "team-a-dev" and app["ModelRegistrationMode"] == "AutoModelRegistrationDisabled"
    bucket = logical_id(template, "AWS::S3::Bucket", "Datasets9")
    assert app["ArtifactStoreUri"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket}, "/mlflow/"]]}
    assert template.find_resources("AWS::SageMaker::MlflowTrackingServer") == {}
    assert parts["tracking"].serverless is True


def test_artifacts_are_encrypted_by_the_buckets_key_and_tiered(built):
    template, _ = built
    bucket = next(v["Properties"] for k, v in template.find_resources("AWS::S3::Bucket").items()
                  if k.startswith("Datasets") and "AccessLogs" not in k)
    sse = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    key = {"Fn::GetAtt": [logical_id(template, "AWS::KMS::Key", "PlatformKey"), "Arn"]}
    assert sse["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}
    rule = next(r for r in bucket["LifecycleConfiguration"]["Rules"] if r.get("Prefix") == "mlflow/")
    assert rule["Transitions"] == [{"StorageClass": "INTELLIGENT_TIERING", "TransitionInDays": 7}]


def test_the_service_role_reaches_only_the_artifact_prefix_and_the_key(built):
    template, _ = built
    role = next(v["Properties"] for k, v in template.find_resources("AWS::IAM::Role").items()
                if k.startswith("TrackingServiceRole"))
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "ManagedPolicyArns" not in role  # not AmazonS3FullAccess
    found = statements(template, "TrackingServiceRole")
    object_resources = [r for s in found if any(a.startswith("s3:") for a in s["Action"]) for r in s["Resource"]
                        if "Fn::Join" in r]
    assert object_resources and all(r["Fn::Join"][1][-1] == "/mlflow/*" for r in object_resources)
    keys = [s["Resource"] for s in found if any(a.startswith("kms:") for a in s["Action"])]
    assert keys == [{"Fn::GetAtt": [logical_id(template, "AWS::KMS::Key", "PlatformKey"), "Arn"]}]
    assert all(not a.startswith(("s3:*", "sagemaker")) for s in found for a in s["Action"])


def test_a_job_may_log_runs_on_this_app_and_write_artifacts_but_delete_none(built):
    template, parts = built
    found = statements(template, "JobRole")
    api = next(s for s in found if "sagemaker-mlflow:CreateRun" in s["Action"])
    assert api["Resource"] == {"Fn::GetAtt": [logical_id(template, "AWS::SageMaker::MlflowApp"), "Arn"]}
    assert set(api["Action"]) == {"sagemaker:CallMlflowAppApi", "sagemaker:DescribeMlflowApp",
                                  *(f"sagemaker-mlflow:{a}" for a in LOG_RUN_ACTIONS)}
    actions = {a for s in found for a in s["Action"]}
    assert "s3:PutObject" in actions and not any("Delete" in a for a in actions)
    assert parts["grant"].success


def test_a_reader_of_the_app_holds_its_whole_api_and_is_warned_so(built):
    template, parts = built
    actions = {a for s in statements(template, "Reader") for a in s["Action"]}
    assert "sagemaker-mlflow:GetRun" in actions and "sagemaker-mlflow:SearchRuns" in actions
    assert not any(a.startswith(("s3:Put", "s3:Delete")) for a in actions)
    # CallMlflowAppApi is the app's one gate for every MLflow call, DeleteRun included: not read-only, and said so.
    assert "sagemaker:CallMlflowAppApi" in actions
    warnings = Annotations.from_stack(Stack.of(parts["tracking"])).find_warning(
        "*", Match.string_like_regexp("ml-platform:mlflow-app-read-is-full-access"))
    [warning] = [w.entry.data for w in warnings]
    assert warning.startswith("grant_read_runs(Test/Reader) on the serverless MLflow app grants "
                              "sagemaker:CallMlflowAppApi") and "Fix: a tracking server (tracking_server_size)" in warning


def test_a_reader_of_a_tracking_server_reads_only_without_a_warning(synth_stack):
    stacks = []

    def body(stack):
        tracking = MlflowTracking(stack, "Tracking", datasets=DatasetBucket(stack, "Datasets"), name="team-a-prod",
                                  tracking_server_size="Small")
        tracking.grant_read_runs(iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
        stacks.append(stack)
    template = synth_stack(body)
    actions = {a for s in statements(template, "Reader") for a in s["Action"]}
    assert actions & {f"sagemaker-mlflow:{a}" for a in ("GetRun", "SearchRuns")}
    assert not any(a.startswith(("s3:Put", "s3:Delete", "sagemaker:CallMlflowAppApi")) or a in (
        "sagemaker-mlflow:CreateRun", "sagemaker-mlflow:LogBatch") or "Delete" in a for a in actions)
    assert Annotations.from_stack(stacks[0]).find_warning("*", Match.string_like_regexp("mlflow-app")) == []


def test_the_library_docs_say_the_apps_grants_include_deletes():
    page = (Path(__file__).resolve().parents[2] / "constructs" / "docs" / "MlflowTracking.md").read_text()
    page = " ".join(page.split())
    section = page[:page.index("## Recording a run")]
    assert ("So on the app both grants (`CallMlflowAppApi` and `DescribeMlflowApp`, with the `sagemaker-mlflow:` "
            "actions above) let the grantee also delete runs and experiments") in section
    assert "on this app or server (no delete" not in section


def test_a_tracking_server_of_a_fixed_size_is_the_option(synth_stack):
    def body(stack):
        datasets = DatasetBucket(stack, "Datasets")
        tracking = MlflowTracking(stack, "Tracking", datasets=datasets, name="team-a-prod",
                                  tracking_server_size="Medium", mlflow_version="3.0",
                                  weekly_maintenance_window_start="Tue:04:30")
        tracking.grant_log_runs(iam.Role(stack, "Job", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com")))
    template = synth_stack(body)
    server = resource(template, "AWS::SageMaker::MlflowTrackingServer")
    assert (server["TrackingServerName"], server["TrackingServerSize"], server["MlflowVersion"],
            server["WeeklyMaintenanceWindowStart"]) == ("team-a-prod", "Medium", "3.0", "Tue:04:30")
    assert template.find_resources("AWS::SageMaker::MlflowApp") == {}
    api = next(s for s in statements(template, "Job") if "sagemaker-mlflow:CreateRun" in s["Action"])
    assert "sagemaker:DescribeMlflowTrackingServer" in api["Action"]
    assert "sagemaker:CallMlflowAppApi" not in api["Action"]
    assert api["Resource"] == {"Fn::GetAtt": [logical_id(template, "AWS::SageMaker::MlflowTrackingServer"),
                                              "TrackingServerArn"]}


def test_isolated_subnets_without_the_mlflow_endpoints_fail_at_synth_with_the_fix():
    from aws_cdk import App

    stack = Stack(App(), "T", env={"account": "123456789012", "region": "us-east-1"})
    vpc = isolated_vpc(stack)
    with pytest.raises(ValidationError, match=r"MlflowTracking: vpc=.* is invalid: isolated subnets with interface "
                                              r"endpoints for \['experiments', 'sagemaker.api'\].*missing: "
                                              r"\['experiments', 'sagemaker.api'\]\. Fix: PlatformNetwork\("):
        MlflowTracking(stack, "Tracking", datasets=DatasetBucket(stack, "D"), name="x", vpc=vpc,
                       tracking_server_size="Small")


def test_a_tracking_server_in_isolated_subnets_with_its_endpoints_synthesizes():
    from aws_cdk import App

    stack = Stack(App(), "T", env={"account": "123456789012", "region": "us-east-1"})
    vpc = isolated_vpc(stack)
    for service in MLFLOW_INTERFACE_ENDPOINTS:
        vpc.add_interface_endpoint(service.short_name.replace(".", "-"), service=service)
    MlflowTracking(stack, "Tracking", datasets=DatasetBucket(stack, "D"), name="x", vpc=vpc, tracking_server_size="Small")


def test_the_serverless_app_in_isolated_subnets_is_refused_even_with_every_endpoint():
    # Its client calls mlflow.sagemaker.<region>.app.aws; the experiments endpoint serves tracking servers only.
    from aws_cdk import App

    stack = Stack(App(), "T", env={"account": "123456789012", "region": "us-east-1"})
    vpc = isolated_vpc(stack)
    for service in MLFLOW_INTERFACE_ENDPOINTS:
        vpc.add_interface_endpoint(service.short_name.replace(".", "-"), service=service)
    with pytest.raises(ValidationError, match=r"MlflowTracking: vpc='T/Vpc' is invalid: subnets with egress .* for "
                                              r"the serverless MLflow app.*Fix: give the clients' subnets a NAT "
                                              r"gateway, or set tracking_server_size"):
        MlflowTracking(stack, "Tracking", datasets=DatasetBucket(stack, "D"), name="x", vpc=vpc)


def test_subnets_with_a_nat_gateway_need_no_endpoints():
    from aws_cdk import App

    stack = Stack(App(), "T", env={"account": "123456789012", "region": "us-east-1"})
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a"], nat_gateways=1)
    MlflowTracking(stack, "Tracking", datasets=DatasetBucket(stack, "D"), name="x", vpc=vpc)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "bad_name"}, r"name='bad_name' is invalid: 1-256 letters, digits and hyphens"),
    ({"tracking_server_size": "XL"}, r"tracking_server_size='XL' is invalid: one of \['Small', 'Medium', 'Large'\]"),
    ({"mlflow_version": "3.0"}, r"mlflow_version='3.0' is invalid: only with a tracking server"),
    ({"tracking_server_size": "Small", "mlflow_version": "latest"}, r"mlflow_version='latest' is invalid"),
    ({"weekly_maintenance_window_start": "Sunday 3am"}, r"weekly_maintenance_window_start='Sunday 3am' is invalid"),
    ({"artifact_prefix": "checkpoints/"}, r"artifact_prefix='checkpoints/' is invalid: an S3 prefix of its own"),
])
def test_bad_props_fail_before_anything_is_created(kwargs, message):
    from aws_cdk import App

    stack = Stack(App(), "T")
    datasets = DatasetBucket(stack, "D")
    with pytest.raises(ValidationError, match=message):
        MlflowTracking(stack, "Tracking", datasets=datasets, **{"name": "ok", **kwargs})
    assert stack.node.try_find_child("Tracking") is None  # a refused construct leaves nothing in the tree
    assert "mlflow-warm-intelligent-tiering" not in datasets._rule_ids


# --- in the platform app ------------------------------------------------------------------------------------------

def test_every_environment_has_its_tracking_app_in_its_data_stack(templates):
    for env in ("dev", "staging", "prod"):
        app = resource(templates[f"{env}/Data"], "AWS::SageMaker::MlflowApp")
        assert app["Name"] == f"ml-platform-{env}"
        outputs = templates[f"{env}/Data"].find_outputs("MlflowTrackingUri")
        assert outputs["MlflowTrackingUri"]["Value"] == {
            "Fn::GetAtt": [logical_id(templates[f"{env}/Data"], "AWS::SageMaker::MlflowApp"), "Arn"]}


PARAMETER = "SsmParameterValuemlplatformdevmlflowtrackinguri"


def test_fleet_instances_may_log_runs_and_find_the_tracking_uri(templates):
    compute = templates["dev/Compute"]
    policy = next(v for k, v in compute.find_resources("AWS::IAM::Policy").items() if k.startswith("trainingInstanceRole"))
    api = next(s for s in policy["Properties"]["PolicyDocument"]["Statement"]
               if "sagemaker-mlflow:LogBatch" in s["Action"])
    assert PARAMETER in json.dumps(api["Resource"])
    user_data = json.dumps(next(iter(compute.find_resources("AWS::EC2::LaunchTemplate").values())))
    assert "MLFLOW_TRACKING_URI=" in user_data and PARAMETER in user_data


def test_the_tracking_uri_crosses_stacks_as_a_parameter_read_at_deploy_not_an_export(templates):
    data = templates["dev/Data"]
    parameter = resource(data, "AWS::SSM::Parameter")
    assert parameter["Name"] == "/ml-platform/dev/mlflow/tracking-uri"
    assert parameter["Value"] == {"Fn::GetAtt": [logical_id(data, "AWS::SageMaker::MlflowApp"), "Arn"]}
    for stack in ("Compute", "Serving"):
        body = json.dumps(templates[f"dev/{stack}"].to_json())
        assert "Tracking" not in "".join(v for v in body.split('"') if v.startswith("dev-Data:"))
        parameters = templates[f"dev/{stack}"].to_json()["Parameters"]
        assert parameters[next(k for k in parameters if k.startswith(PARAMETER))] == {
            "Type": "AWS::SSM::Parameter::Value<String>", "Default": "/ml-platform/dev/mlflow/tracking-uri"}


def test_dev_reaches_the_serverless_app_through_its_nat_gateway(templates):
    assert len(templates["dev/Core"].find_resources("AWS::EC2::NatGateway")) == 1
    services = [v["Properties"]["ServiceName"] for v in templates["dev/Core"].find_resources("AWS::EC2::VPCEndpoint").values()]
    assert "aws.sagemaker.us-east-1.experiments" not in services  # serves tracking servers only


def test_queue_jobs_may_log_runs_and_find_the_tracking_uri(templates):
    compute = templates["dev/Compute"]
    policy = next(v for k, v in compute.find_resources("AWS::IAM::Policy").items() if k.startswith("trainingQueueJobRole"))
    api = next(s for s in policy["Properties"]["PolicyDocument"]["Statement"] if "sagemaker-mlflow:CreateRun" in s["Action"])
    assert PARAMETER in json.dumps(api["Resource"])
    for definition in compute.find_resources("AWS::Batch::JobDefinition").values():
        environment = {e["Name"]: e["Value"] for e in definition["Properties"]["ContainerProperties"]["Environment"]}
        assert PARAMETER in json.dumps(environment["MLFLOW_TRACKING_URI"])


def _two_stack_app(tmp_path, **tracking):
    from aws_cdk import App
    from aws_cdk import aws_sns as sns
    from ml_platform_constructs import TrainingQueue

    app = App(outdir=str(tmp_path))
    env = {"account": "123456789012", "region": "us-east-1"}
    data = Stack(app, "Data", env=env)
    key = kms.Key(data, "Key")
    datasets = DatasetBucket(data, "Datasets", encryption_key=key)
    mlflow = MlflowTracking(data, "Tracking", datasets=datasets, **{"name": "team-a", **tracking})
    compute = Stack(app, "Compute", env=env)
    # Subnets with egress: the serverless app is reached only through a NAT gateway (TrainingQueue checks it)
    vpc = ec2.Vpc(compute, "Vpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1,
                  restrict_default_security_group=False)
    TrainingQueue(compute, "Queue", vpc=vpc, instance_types=[ec2.InstanceType(t) for t in (
                  "g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")],
                  datasets=datasets, key=key, alerts=sns.Topic(compute, "Alerts"), tracking=mlflow,
                  image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1", queue_name="training")
    assembly = app.synth()
    return {name: assembly.get_stack_by_name(name).template for name in ("Data", "Compute")}


@pytest.mark.parametrize("change", [{"tracking_server_size": "Small"}, {"name": "team-a-renamed"}])
def test_switching_kind_or_renaming_changes_no_imported_export_and_no_logical_ids_type(tmp_path, change):
    before, after = _two_stack_app(tmp_path / "a"), _two_stack_app(tmp_path / "b", **change)
    exports = {name: {o["Export"]["Name"]: o["Value"] for o in t.get("Outputs", {}).values() if "Export" in o}
               for name, t in (("before", before["Data"]), ("after", after["Data"]))}
    imported = {json.loads(chunk.split("}")[0]) for chunk in json.dumps(before["Compute"]).split('"Fn::ImportValue": ')[1:]}
    mlflow_ids = {k for k, v in before["Data"]["Resources"].items() if v["Type"].startswith("AWS::SageMaker::Mlflow")}
    for export_name in imported:
        # A rename replaces the resource (Name is create-only): an export of its ARN would change under the import.
        assert not any(i in json.dumps(exports["before"][export_name]) for i in mlflow_ids), export_name
        assert exports["before"][export_name] == exports["after"].get(export_name), export_name
    for stack in ("Data", "Compute"):
        old, new = before[stack]["Resources"], after[stack]["Resources"]
        assert [k for k in old.keys() & new.keys() if old[k]["Type"] != new[k]["Type"]] == []


def test_the_cost_estimate_prices_the_tracking_service():
    from ops import cost_estimate

    prices = cost_estimate.load_prices("us-east-1")
    app = cost_estimate.estimate_environment("dev", "us-east-1", [{"Resources": {
        "Tracking": {"Type": "AWS::SageMaker::MlflowApp", "Properties": {"Name": "x"}}}}], prices,
        cost_estimate.Assumptions())
    assert [(group, amount) for group, _, amount in app.lines if group == "Tracking"] == [("Tracking", 0.0)]
    server = cost_estimate.estimate_environment("dev", "us-east-1", [{"Resources": {
        "Tracking": {"Type": "AWS::SageMaker::MlflowTrackingServer", "Properties": {"TrackingServerSize": "Medium"}}}}],
        prices, cost_estimate.Assumptions())
    assert [amount for group, _, amount in server.lines if group == "Tracking"] == [pytest.approx(1.284 * 730)]
    # The hourly rates were not read from AWS's pricing page: an estimate that uses them says so.
    assert any("tracking server's hourly rate is unverified" in flag for flag in server.flags)
    assert not any("MLflow" in flag for flag in app.flags)
