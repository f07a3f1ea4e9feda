"""cdk-nag (AwsSolutions, run inside every synth) and cfn-lint on every synthesized template."""

import json

import pytest
from aws_cdk import Stack, Validations
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from ml_platform_constructs import DatasetBucket
from ops.lint import lint_template, templates as assembly_templates
from stacks.app_builder import build, failed_validations
from tests.conftest import STACKS, new_app

# Every acknowledged cdk-nag finding, reviewed: a new one must be added here with its reason next to the resource.
EXPECTED_ACKNOWLEDGEMENTS = {"AwsSolutions-S1", "AwsSolutions-EC23", "AwsSolutions-EC26", "AwsSolutions-AS3",
                             "AwsSolutions-IAM4", "AwsSolutions-IAM5", "AwsSolutions-SQS3"}


def acknowledgements(outdir):
    found = []
    for path in outdir.rglob("*.metadata.json"):
        for construct_path, entries in json.loads(path.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    found.extend((construct_path, rule.removeprefix("Annotation::").split("[")[0], reason)
                                 for rule, reason in entry["data"].items() if "AwsSolutions-" in rule)
    return found


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


def test_every_acknowledgement_is_expected_and_has_a_specific_reason(platform_app):
    _, _, outdir = platform_app
    found = acknowledgements(outdir)
    assert {rule for _, rule, _ in found} == EXPECTED_ACKNOWLEDGEMENTS
    for construct_path, rule, reason in found:
        assert len(reason) >= 40, (construct_path, rule, reason)


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


def test_cfn_lint_reports_no_error_on_any_template(platform_app, cfn_lint_scan):
    _, _, outdir = platform_app
    assert sorted(cfn_lint_scan) == sorted(map(str, assembly_templates(outdir)))
    assert len(cfn_lint_scan) == len(STACKS)
    assert {path: errors for path, errors in cfn_lint_scan.items() if errors} == {}


def test_cfn_lint_reports_the_errors_it_finds(tmp_path):
    path = tmp_path / "Bad.template.json"
    path.write_text(json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": {"BucketNameX": "x"}}}}))
    assert [line.split(" ")[1] for line in lint_template(path, ["us-east-1"])] == ["E3002"]


# --- checkov ------------------------------------------------------------------------------------------------------

# Every suppressed checkov check, reviewed: each suppression sits on its resource with a one-line reason
# (nag_support.suppress_checkov). A new one must be added here.
EXPECTED_CHECKOV_SUPPRESSIONS = {
    "CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117", "CKV_AWS_173",  # the platform's Lambda functions
    "CKV_AWS_18", "CKV_AWS_21",  # the server access log buckets
    "CKV_AWS_158",  # the fleet scale-to-zero function's log (a group name and a time)
    "CKV_AWS_109", "CKV_AWS_111",  # SageMaker's VPC network interfaces, the snapshot workflow's conditioned writes
}


def test_checkov_reports_no_unsuppressed_finding(checkov_scan):
    assert checkov_scan.failed == []
    assert checkov_scan.passed > 300  # it scanned every template (445 passing checks when written)


def test_every_checkov_suppression_is_expected_and_has_a_specific_reason(checkov_scan):
    assert {check for _, check, _ in checkov_scan.skipped} == EXPECTED_CHECKOV_SUPPRESSIONS
    for resource, check, reason in checkov_scan.skipped:
        assert len(reason) >= 40 and reason != "No comment provided", (resource, check, reason)
