"""cfn-lint and checkov over every synthesized template (background scans, tests/conftest.py). cdk-nag, which runs
inside the synth, is in test_cdk_nag.py."""

import json

import pytest

from ops.lint import LintResult, lint_template, nag_acknowledgements, templates as assembly_templates
from ops.local import up
from tests.conftest import STACKS
from tests.test_readme_examples import readme_example


@pytest.fixture(scope="module", autouse=True)
def scans(request):
    """The background scans start with this module's first test, unless the whole app's first synth started them
    (in one process, tests/conftest.py; under pytest-xdist, on the worker that runs this file): its tests that need
    no scan run while they scan, those that read them come last."""
    request.getfixturevalue("scans_started")


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


def test_the_readme_up_example_shows_what_was_synthesized_and_validated(platform_app, config, cfn_lint_scan,
                                                                         checkov_scan):
    _, _, assembly = platform_app
    templates = assembly_templates(assembly)
    lint = LintResult(len(templates), [line for lines in cfn_lint_scan.values() for line in lines], checkov_scan)
    lines = up.validation_lines(len(templates), len(config.environments), "cdk.out", nag_acknowledgements(assembly),
                                lint)
    assert [line for line in lines if line not in readme_example("./platform up")] == []
