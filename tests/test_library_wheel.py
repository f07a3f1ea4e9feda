"""The construct library as another team gets it: a wheel built from constructs/, installed into an environment
without the platform app, synthesizing the README's example app (examples/team_stack) with cdk-nag.

The work is tests/library_wheel_build.py, a separate process started when the session begins (conftest), so it
runs while other tests do; the fixture waits for it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from ops.lint import lint_template

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "constructs"
BUILDER = ROOT / "tests" / "library_wheel_build.py"


def start(work: Path) -> subprocess.Popen:
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, str(BUILDER), str(work)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture(scope="module")
def built(request, tmp_path_factory) -> dict:
    started = getattr(request.config, "library_wheel_build", None)
    work, process = started or (tmp_path_factory.mktemp("library-wheel"), None)
    process = process or start(work)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    result = json.loads((work / "result.json").read_text())
    assert result["returncode"] == 0, result["stderr"]
    return result | {"outdir": work / "cdk.out"}


@pytest.fixture(scope="module")
def team_app(built):
    return built["probe"], built["outdir"], Path(built["site"])


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return Path(built["wheel"])


def test_the_wheel_is_what_the_example_imports_not_the_source_tree(team_app):
    probe, _, site = team_app
    assert Path(probe["library"]).resolve().is_relative_to(site.resolve())
    assert not Path(probe["library"]).resolve().is_relative_to(LIBRARY.resolve())
    assert probe["app_modules"] == {"stacks": False, "ops": False, "tests": False}


def test_the_example_synthesizes_from_the_wheel_cdk_nag_and_cfn_lint_clean(team_app):
    _, outdir, _ = team_app
    template = json.loads((outdir / "TeamA.template.json").read_text())
    types = {r["Type"] for r in template["Resources"].values()}
    assert {"AWS::AutoScaling::AutoScalingGroup", "AWS::SageMaker::Endpoint", "AWS::Budgets::Budget",
            "AWS::SSM::Document", "AWS::EC2::VPC"} <= types
    report = outdir / "validation-report.json"
    assert report.exists()  # only written when a plugin is registered: cdk-nag ran, as the README tells consumers
    violations = [v for plugin in json.loads(report.read_text())["pluginReports"] for v in plugin["violations"]]
    assert [v["ruleName"] for v in violations if v["ruleName"].startswith("AwsSolutions")] == []  # and found nothing
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest.get("missing", []) == []  # no context lookup
    assert lint_template(outdir / "TeamA.template.json", ["us-east-1"]) == []


def test_the_examples_check_fails_on_cdk_nag_errors_only_under_cdk_inits_flags(team_app):
    """cdk init's cdk.json puts every construct annotation in the validation report: the example's check must not
    take a warning for a cdk-nag finding (the app exited 0, see the fixture, with warnings in the report)."""
    _, outdir, _ = team_app
    context = json.loads((ROOT / "examples" / "team_stack" / "cdk.json").read_text())["context"]
    assert context["@aws-cdk/core:annotationsInValidationReport"] is True
    plugins = json.loads((outdir / "validation-report.json").read_text())["pluginReports"]
    warnings = [v for p in plugins if p["pluginName"] == "Construct Annotations" for v in p["violations"]]
    assert warnings and {v["severity"] for v in warnings} == {"warning"}


def test_the_example_gets_the_safety_the_platform_app_gets(team_app):
    _, outdir, _ = team_app
    template = json.loads((outdir / "TeamA.template.json").read_text())
    key = next(r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Key")
    sids = {s.get("Sid") for s in key["Properties"]["KeyPolicy"]["Statement"]}
    assert "AllowAutoScalingToUseKeyForInstanceVolumes" in sids
    group = next(r for r in template["Resources"].values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup")
    assert {"Key": "ml-platform:budget-scope", "Value": "account", "PropagateAtLaunch": True} in group["Properties"]["Tags"]


def test_the_wheel_metadata_stands_alone(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert "ml_platform_constructs/py.typed" in names and "ml_platform_constructs/runtime/prices.json" in names
    assert not any(n.startswith(("stacks/", "ops/", "tests/", "examples/")) for n in names)
    version = tomllib.loads((LIBRARY / "pyproject.toml").read_text())["project"]["version"]
    assert metadata["Version"] == version
    assert f"## {version}" in (LIBRARY / "CHANGELOG.md").read_text()
    assert any(url.startswith("Homepage, https://") for url in metadata.get_all("Project-URL"))
    description = metadata.get_payload()
    headings = re.findall(r"^## (.*)$", description, re.M)
    for construct in ("DatasetBucket", "SpotGpuFleet", "MonitoredEndpoint", "DatasetSnapshotBuilder", "BudgetGuard",
                      "PlatformKey", "AlertTopic", "PlatformNetwork", "ImportedNetwork"):
        assert any(construct in heading for heading in headings), construct
    assert "](docs/" not in description and "](constructs/" not in description  # no links that break off-repo
