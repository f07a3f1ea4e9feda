"""The construct library as another team gets it: a wheel built from constructs/, installed into an environment
without the platform app, synthesizing the README's example app (examples/team_stack) with cdk-nag.

Nothing is downloaded: the wheel is built by setuptools' PEP 517 hook (what pip runs, without its start-up cost)
from a copy of constructs/, installed by unpacking it (a pure-Python wheel: what an installer does for purelib),
and the interpreter sees the already installed aws-cdk-lib, constructs and cdk-nag through PYTHONPATH, where
.pth files (the editable install's finder) are not processed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "team_stack"
LIBRARY = ROOT / "constructs"

PROBE = """
import importlib.util, json, runpy
import ml_platform_constructs
found = {name: importlib.util.find_spec(name) is not None for name in ("stacks", "ops", "tests")}
print("PROBE " + json.dumps({"library": ml_platform_constructs.__file__, "app_modules": found}))
runpy.run_path("app.py", run_name="__main__")
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "constructs"
    shutil.copytree(LIBRARY, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])",
                    str(work)], cwd=source, check=True, capture_output=True, text=True)
    return next(work.glob("ml_platform_constructs-*.whl"))


@pytest.fixture(scope="module")
def team_app(wheel, tmp_path_factory):
    """The example app, alone in a directory, synthesized by a Python that sees the wheel and not the app."""
    work = tmp_path_factory.mktemp("team")
    site = work / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    app = work / "app"
    app.mkdir()
    for name in ("app.py", "team_stack.py", "cdk.json"):
        shutil.copy(EXAMPLE / name, app / name)
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # node for jsii
        "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]]),
        "PYTHONNOUSERSITE": "1",
        "CDK_OUTDIR": str(work / "cdk.out"),
        # aws-cdk-lib's built-in template validation off, as in the other tests' synths (conftest.new_app): then
        # the validation report is written only because the example registered a plugin, cdk-nag.
        "CDK_VALIDATION": "false",
        "HOME": os.environ.get("HOME", str(work)),
    }
    base_python = getattr(sys, "_base_executable", sys.executable)  # not the venv: no site .pth processing
    result = subprocess.run([base_python, "-s", "-c", PROBE], cwd=app, env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads(re.search(r"^PROBE (.*)$", result.stdout, re.M).group(1))
    return probe, work / "cdk.out", site


def test_the_wheel_is_what_the_example_imports_not_the_source_tree(team_app):
    probe, _, site = team_app
    assert Path(probe["library"]).resolve().is_relative_to(site.resolve())
    assert not Path(probe["library"]).resolve().is_relative_to(LIBRARY.resolve())
    assert probe["app_modules"] == {"stacks": False, "ops": False, "tests": False}


def test_the_example_synthesizes_from_the_wheel_with_cdk_nag_clean(team_app):
    _, outdir, _ = team_app
    template = json.loads((outdir / "TeamA.template.json").read_text())
    types = {r["Type"] for r in template["Resources"].values()}
    assert {"AWS::AutoScaling::AutoScalingGroup", "AWS::SageMaker::Endpoint", "AWS::Budgets::Budget",
            "AWS::SSM::Document", "AWS::EC2::VPC"} <= types
    report = outdir / "validation-report.json"
    assert report.exists()  # only written when a plugin is registered: cdk-nag ran, as the README tells consumers
    assert json.loads(report.read_text())["pluginReports"] == []  # and found nothing
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest.get("missing", []) == []  # no context lookup


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
