"""The example app's validation-report check (README, "A team's app"), run on reports as aws-cdk-lib writes them
with cdk init's flags: construct warnings and cdk-nag warnings pass, a cdk-nag error fails naming its rule."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

APP = Path(__file__).resolve().parents[2] / "examples" / "team_stack" / "app.py"
CDK_JSON = APP.parent / "cdk.json"


def check(tmp_path: Path, plugin_reports: list) -> None:
    """Runs the lines of app.py after its synth against a validation report with these plugin reports."""
    code = APP.read_text().split("assembly = app.synth()\n", 1)[1]
    (tmp_path / "validation-report.json").write_text(json.dumps({"pluginReports": plugin_reports}))
    namespace = {"assembly": SimpleNamespace(directory=str(tmp_path))}
    exec(compile("import json, sys\nfrom pathlib import Path\n" + code, str(APP), "exec"), namespace)


def violation(rule, severity):
    return {"ruleName": rule, "description": "…", "severity": severity, "violatingConstructs": []}


ANNOTATIONS = {"pluginName": "Construct Annotations", "conclusion": "success", "metadata": {"cdk:annotations": "true"},
               "violations": [violation("Annotation::ml-platform:budget-name", "warning")]}


def test_cdk_inits_flags_put_construct_warnings_in_the_report():
    assert json.loads(CDK_JSON.read_text())["context"]["@aws-cdk/core:annotationsInValidationReport"] is True


def test_warnings_do_not_fail_the_check(tmp_path):
    check(tmp_path, [ANNOTATIONS, {"pluginName": "AwsSolutions", "conclusion": "success",
                                   "violations": [violation("AwsSolutions-VPC3", "warning")]}])


def test_a_cdk_nag_error_fails_the_check_naming_the_rule(tmp_path):
    with pytest.raises(SystemExit, match=re.escape("cdk-nag errors AwsSolutions-IAM5[Resource::*]: see ")):
        check(tmp_path, [ANNOTATIONS, {"pluginName": "AwsSolutions", "conclusion": "failure",
                                       "violations": [violation("AwsSolutions-IAM5[Resource::*]", "error")]}])
