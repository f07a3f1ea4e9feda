"""cdk-nag (AwsSolutions), which runs inside every synth of the app: what it finds, what is acknowledged and why.
cfn-lint and checkov over the synthesized templates are in test_scanners.py."""

import json
import re

import pytest
from aws_cdk import Stack, Validations
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from ml_platform_constructs import DatasetBucket
from stacks.app_builder import build, failed_validations
from tests.conftest import new_app


# Every acknowledged cdk-nag finding, reviewed, by the construct that acknowledges it (its path below the
# environment) and the finding (rule and what it is about: the action or resource of a wildcard, the managed policy):
# a new wildcard on another resource, or another rule anywhere, fails until it is added here with its reason next to
# the resource. Account, Region and environment name are written <account>, <region> and <env>.
S3_GRANT = {"AwsSolutions-IAM5[Action::s3:Abort*]", "AwsSolutions-IAM5[Action::s3:GetBucket*]",
            "AwsSolutions-IAM5[Action::s3:GetObject*]", "AwsSolutions-IAM5[Action::s3:List*]"}
MLFLOW_WRITE = "AwsSolutions-IAM5[Action::s3:DeleteObject*]"  # the read-write grant on the MLflow artifacts
KMS_GRANT = {"AwsSolutions-IAM5[Action::kms:GenerateDataKey*]", "AwsSolutions-IAM5[Action::kms:ReEncrypt*]"}
ANY_RESOURCE = "AwsSolutions-IAM5[Resource::*]"
LAMBDA_BASIC = "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]"
SSM_CORE = "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]"
ECS_INSTANCE = ("AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonEC2ContainerServiceforEC2Role]")
FLEETS = "AwsSolutions-IAM5[Resource::arn:aws:autoscaling:<region>:<account>:autoScalingGroup:*]"
DATASETS = "<env>-Data:ExportsOutputFnGetAttDatasets9A172240Arn24506DB6"
EXPECTED_ACKNOWLEDGEMENTS = {
    "Compute/training/InstanceRole": {SSM_CORE, *KMS_GRANT, *S3_GRANT, MLFLOW_WRITE, ANY_RESOURCE, FLEETS},
    "Compute/training/InstanceRole/DefaultPolicy": {f"AwsSolutions-IAM5[Resource::{DATASETS}/{prefix}/*]"
                                                    for prefix in ("checkpoints/training", "datasets", "mlflow")},
    "Compute/training/Resource": {"AwsSolutions-AS3", "AwsSolutions-EC26"},
    "Compute/training/ScaleToZeroFunction/ServiceRole": {LAMBDA_BASIC, FLEETS},
    "Compute/trainingQueue/Container/ExecutionRole": {ANY_RESOURCE},
    "Compute/trainingQueue/MultiNodeContainer/ExecutionRole": {ANY_RESOURCE},
    "Compute/trainingQueue/EvaluationContainer/ExecutionRole": {ANY_RESOURCE},
    "Compute/trainingQueue/EvaluationRole": {*KMS_GRANT, *S3_GRANT},
    "Compute/trainingQueue/EvaluationRole/DefaultPolicy": {
        f"AwsSolutions-IAM5[Resource::{DATASETS}/{prefix}/*]"
        for prefix in ("checkpoints/training", "datasets", "evaluations/training", "models")},
    "Compute/trainingQueue/JobRole": {*KMS_GRANT, *S3_GRANT, MLFLOW_WRITE, ANY_RESOURCE},
    "Compute/trainingQueue/JobRole/DefaultPolicy": {
        f"AwsSolutions-IAM5[Resource::{DATASETS}/{prefix}/*]"
        for prefix in ("benchmarks", "checkpoints/training", "datasets", "mlflow")},
    **{f"Compute/trainingQueue/{kind}Environment/InstanceProfileRole": {ECS_INSTANCE, ANY_RESOURCE}
       for kind in ("Spot", "OnDemand", "MultiNode")},
    "Compute/trainingQueue/MultiNodeSecurityGroup": {"AwsSolutions-EC23"},
    # the stall watcher: reads without resource-level permissions, TerminateJob and its own tag on the account's jobs
    "Compute/trainingQueue/StallWatcher/ServiceRole": {
        LAMBDA_BASIC, ANY_RESOURCE, "AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job/*]"},
    **{f"Core/Network/Resource/{service}Endpoint": {"AwsSolutions-EC23"} for service in (
        "Autoscaling", "Ec2", "Ec2Messages", "EcrApi", "EcrDkr", "Ecs-Agent", "Ecs-Telemetry", "Ecs", "Logs",
        "Monitoring", "Ssm", "Ssmmessages", "SagemakerApi")},
    "Data/DatasetSnapshots/AutomationRole": {
        ANY_RESOURCE, "AwsSolutions-IAM5[Resource::arn:aws:ec2:<region>:<account>:instance/*]",
        "AwsSolutions-IAM5[Resource::arn:aws:ssm:<region>:<account>:parameter/ml-platform/<env>/datasets/*]"},
    "Data/DatasetSnapshots/BuilderRole": {SSM_CORE, *KMS_GRANT, *(S3_GRANT - {"AwsSolutions-IAM5[Action::s3:Abort*]"})},
    "Data/DatasetSnapshots/BuilderRole/DefaultPolicy": {"AwsSolutions-IAM5[Resource::<Datasets9A172240.Arn>/datasets/*]"},
    "Data/Datasets/AccessLogs": {"AwsSolutions-S1"},
    "Data/Tracking/ServiceRole": {*KMS_GRANT, *S3_GRANT, MLFLOW_WRITE},
    "Data/Tracking/ServiceRole/DefaultPolicy": {"AwsSolutions-IAM5[Resource::<Datasets9A172240.Arn>/mlflow/*]"},
    "Governance/Budget/StopFailures": {"AwsSolutions-SQS3"},
    "Governance/Budget/StopFunction/ServiceRole": {
        LAMBDA_BASIC, *KMS_GRANT, ANY_RESOURCE, FLEETS,
        *{f"AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:{kind}/*]"
          for kind in ("compute-environment", "job-definition", "job-queue", "job")},
        "AwsSolutions-IAM5[Resource::arn:aws:ec2:<region>:<account>:instance/*]",
        "AwsSolutions-IAM5[Resource::arn:aws:ssm:<region>:<account>:parameter/ml-platform/pending-jobs*]"},
    "Serving/classifier/CaptureBucket/AccessLogs": {"AwsSolutions-S1"},
    "Serving/classifier/DriftCheck/ServiceRole": {LAMBDA_BASIC, *KMS_GRANT, *S3_GRANT, ANY_RESOURCE},
    "Serving/classifier/DriftCheck/ServiceRole/DefaultPolicy": {
        "AwsSolutions-IAM5[Resource::<classifierCaptureBucket4BB71E88.Arn>/capture/ml-platform-<env>-classifier/*]",
        f"AwsSolutions-IAM5[Resource::{DATASETS}/drift/baselines/ml-platform-<env>-classifier/*]",
        f"AwsSolutions-IAM5[Resource::{DATASETS}/drift/results/ml-platform-<env>-classifier/*]"},
    "Serving/classifier/Quality/Resource/ServiceRole": {LAMBDA_BASIC, *KMS_GRANT, *S3_GRANT, ANY_RESOURCE},
    "Serving/classifier/Quality/Resource/ServiceRole/DefaultPolicy": {
        f"AwsSolutions-IAM5[Resource::<classifierCaptureBucket4BB71E88.Arn>/{prefix}/ml-platform-<env>-classifier/*]"
        for prefix in ("capture", "ground-truth")} | {
        f"AwsSolutions-IAM5[Resource::{DATASETS}/quality/{part}/ml-platform-<env>-classifier/*]"
        for part in ("results", "state")},
    "Serving/classifier/ModelRole": {
        *KMS_GRANT, *S3_GRANT, ANY_RESOURCE, "AwsSolutions-IAM5[Resource::arn:aws:logs:<region>:<account>:log-group:"
        "/aws/sagemaker/Endpoints/ml-platform-<env>-classifier:*]"},
    "Serving/classifier/ModelRole/DefaultPolicy": {
        "AwsSolutions-IAM5[Resource::<classifierCaptureBucket4BB71E88.Arn>/capture/*]",
        f"AwsSolutions-IAM5[Resource::{DATASETS}/models/classifier/*/model.tar.gz]"},
    "Compute/trainingQueue/Elastic/Resource/ServiceRole": {
        LAMBDA_BASIC, *KMS_GRANT, ANY_RESOURCE, "AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job/*]"},
    # The evaluation submitter: ListJobs (no resource-level permissions) and the job it submits (its id unknown).
    "Compute/trainingEvaluations/Resource/ServiceRole": {
        LAMBDA_BASIC, ANY_RESOURCE, "AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job/*]"},
    "Compute/trainingQueue/Elastic/Resource/ServiceRole/DefaultPolicy": {
        f"AwsSolutions-IAM5[Resource::{DATASETS}/checkpoints/training/*/resize-request.json]",
        f"AwsSolutions-IAM5[Resource::{DATASETS}/checkpoints/training/*/resizes/*]",
        *[f'AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job-definition/{{"Fn::Select":[1,{{"Fn::Split":'
          f'["/",{{"Fn::Select":[5,{{"Fn::Split":[":",{{"Ref":"{definition}"}}]}}]}}]}}]}}*]'
          for definition in ("trainingQueueJobDefinitionE8B396CF", "trainingQueueMultiNodeJobDefinitionD0C30020")],
        *[f'AwsSolutions-IAM5[Resource::arn:aws:ssm:<region>:<account>:parameter/ml-platform/pending-jobs/{{"Fn::Select":'
          f'[1,{{"Fn::Split":["/",{{"Ref":"{queue}"}}]}}]}}/resize-*]'
          for queue in ("trainingQueue55CCD64C", "trainingQueueMultiNodeJobQueue8CDCE302")]},
    "Serving/classifierRetrain/JobContainer/ExecutionRole": {ANY_RESOURCE},
    "Serving/classifierRetrain/Resource/ServiceRole": {
        LAMBDA_BASIC, *KMS_GRANT, ANY_RESOURCE, "AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job/*]"},
    "Serving/classifierRetrain/Resource/ServiceRole/DefaultPolicy": {
        'AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job-definition/{"Fn::Select":[1,{"Fn::Split":'
        '["/",{"Fn::Select":[5,{"Fn::Split":[":",{"Ref":"classifierRetrainJobEDAC98DF"}]}]}]}]}:*]',
        'AwsSolutions-IAM5[Resource::arn:aws:ssm:<region>:<account>:parameter/ml-platform/pending-jobs/{"Fn::Select":'
        '[1,{"Fn::Split":["/",{"Fn::ImportValue":"<env>-Compute:ExportsOutputReftrainingQueue55CCD64C9C1E7460"}]}]}'
        '/retrain-retrain-classifier-*]'},
}


def acknowledgements(outdir):
    """(construct path, finding, reason) of every acknowledged cdk-nag finding of the synthesized app."""
    found = []
    for path in outdir.rglob("*.metadata.json"):
        for construct_path, entries in json.loads(path.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    found.extend((construct_path, rule.removeprefix("Annotation::"), reason)
                                 for rule, reason in entry["data"].items() if "AwsSolutions-" in rule)
    return found


def normalized(construct_path: str, finding: str) -> tuple[str, str]:
    """The construct path below its environment, and the finding with account, Region and environment written
    <account>, <region>, <env> (the same acknowledgement in every environment is one entry)."""
    _, environment, below = construct_path.split("/", 2)
    finding = re.sub(r"\b\d{12}\b", "<account>", finding)
    finding = re.sub(r"\b[a-z]{2}(-gov)?-[a-z]+-\d\b", "<region>", finding)
    return below, re.sub(rf"\b{re.escape(environment)}\b", "<env>", finding)


def test_cdk_nag_reports_no_unacknowledged_finding(platform_app):
    _, _, outdir = platform_app
    assert (outdir / "validation-report.json").exists()
    assert failed_validations(str(outdir)) == []


def test_the_app_runs_cdk_nag_on_every_stack(tmp_path, config):
    app = new_app(tmp_path)
    stage = build(app, config, environments="dev")[0]
    s3.Bucket(stage.data, "Unchecked")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert any(line.startswith("AwsSolutions-S1 at dev/Data/Unchecked/Resource")
               for line in failed_validations(str(tmp_path)))


def test_every_acknowledgement_is_expected_by_construct_and_finding(platform_app):
    _, _, outdir = platform_app
    found: dict[str, set[str]] = {}
    for construct_path, finding, _ in acknowledgements(outdir):
        below, finding = normalized(construct_path, finding)
        found.setdefault(below, set()).add(finding)
    unexpected = {path: sorted(findings - EXPECTED_ACKNOWLEDGEMENTS.get(path, set()))
                  for path, findings in found.items() if findings - EXPECTED_ACKNOWLEDGEMENTS.get(path, set())}
    assert unexpected == {}, "acknowledged but not reviewed here"
    missing = {path: sorted(findings - found.get(path, set()))
               for path, findings in EXPECTED_ACKNOWLEDGEMENTS.items() if findings - found.get(path, set())}
    assert missing == {}, "reviewed here but no longer acknowledged: remove them"


def test_every_acknowledgement_has_a_specific_reason(platform_app):
    _, _, outdir = platform_app
    for construct_path, finding, reason in acknowledgements(outdir):
        assert len(reason) >= 40, (construct_path, finding, reason)


def test_acknowledgements_are_told_apart_by_what_they_are_about():
    """The comparison sees a wildcard on another resource, and the same acknowledgement in each environment as one."""
    assert normalized("/prod/Governance/Budget/StopFunction/ServiceRole",
                      "AwsSolutions-IAM5[Resource::arn:aws:batch:eu-west-1:222222222222:job-queue/*]") == (
        "Governance/Budget/StopFunction/ServiceRole",
        "AwsSolutions-IAM5[Resource::arn:aws:batch:<region>:<account>:job-queue/*]")
    assert normalized("/dev/Serving/classifier/ModelRole", "AwsSolutions-IAM5[Resource::arn:aws:logs:us-east-1:"
                      "111111111111:log-group:/aws/sagemaker/Endpoints/ml-platform-dev-classifier:*]")[1] == (
        "AwsSolutions-IAM5[Resource::arn:aws:logs:<region>:<account>:log-group:/aws/sagemaker/Endpoints/"
        "ml-platform-<env>-classifier:*]")


def test_acknowledgements_sit_on_the_resource_not_the_stack(platform_app):
    _, _, outdir = platform_app
    for construct_path, rule, _ in acknowledgements(outdir):
        assert construct_path.count("/") >= 4, (construct_path, rule)


def test_dataset_bucket_alone_is_nag_clean(tmp_path):
    app = new_app(tmp_path)
    DatasetBucket(Stack(app, "Team"), "Data")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    assert failed_validations(str(tmp_path)) == []
