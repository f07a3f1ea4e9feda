"""The construct library as another team gets it: a wheel built from constructs/, installed into an environment
without the platform app, synthesizing the README's example app (examples/team_stack) with cdk-nag.

The work is tests/library_wheel_build.py, a separate process started when the session begins (conftest; under
pytest-xdist, by this file's fixture on its worker), so it runs while other tests do; the fixture waits for it.
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

from ops import terminal
from ops.lint import lint_template

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "constructs"
BUILDER = ROOT / "tests" / "library_wheel_build.py"


def start(work: Path) -> subprocess.Popen:
    """The build in a process group of its own, so that ``terminal.kill`` ends it with what it started (its synth
    of the example, and that synth's jsii kernel, outlived the build's own process when only that was killed)."""
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, str(BUILDER), str(work)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


@pytest.fixture(scope="module")
def built(request, tmp_path_factory) -> dict:
    started = getattr(request.config, "library_wheel_build", None)
    work, process = started or (tmp_path_factory.mktemp("library-wheel"), None)
    process = process or start(work)
    try:
        _, stderr = process.communicate(timeout=300)
    except BaseException:  # timed out or interrupted: nothing of the build is left running
        if process.returncode is None:  # not reaped yet: its group is still ours to end
            terminal.kill(process)
        process.communicate()  # its pipes read and closed
        raise
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


STACKS = ("TeamBData", "TeamBTraining")


def template(outdir: Path, stack: str) -> dict:
    return json.loads((outdir / f"{stack}.template.json").read_text())


def test_the_example_synthesizes_from_the_wheel_cdk_nag_and_cfn_lint_clean(team_app):
    _, outdir, _ = team_app
    types = {r["Type"] for stack in STACKS for r in template(outdir, stack)["Resources"].values()}
    assert {"AWS::AutoScaling::AutoScalingGroup", "AWS::SageMaker::Endpoint", "AWS::Budgets::Budget",
            "AWS::SSM::Document", "AWS::EC2::VPC", "AWS::Batch::JobQueue"} <= types
    report = outdir / "validation-report.json"
    assert report.exists()  # only written when a plugin is registered: cdk-nag ran, as the README tells consumers
    violations = [v for plugin in json.loads(report.read_text())["pluginReports"] for v in plugin["violations"]]
    assert [v["ruleName"] for v in violations if v["ruleName"].startswith("AwsSolutions")] == []  # and found nothing
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest.get("missing", []) == []  # no context lookup, though both stacks are bound to an account
    for stack in STACKS:
        assert lint_template(outdir / f"{stack}.template.json", ["eu-west-1"]) == []


def test_the_example_is_a_team_key_its_own_vpc_and_two_stacks_in_eu_west_1(team_app):
    _, outdir, _ = team_app
    manifest = json.loads((outdir / "manifest.json").read_text())
    environments = {a["environment"] for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}
    assert environments == {"aws://111122223333/eu-west-1"}
    data, training = (template(outdir, stack)["Resources"] for stack in STACKS)
    assert not any(r["Type"] in ("AWS::KMS::Key", "AWS::EC2::VPC") for r in training.values())
    aliases = [r["Properties"]["AliasName"] for r in data.values() if r["Type"] == "AWS::KMS::Alias"]
    assert aliases == ["alias/team-b/prod"]
    # the public subnets of the team's VPC exist, and no compute landed in them
    public = {name for name, r in data.items()
              if r["Type"] == "AWS::EC2::Subnet" and r["Properties"]["MapPublicIpOnLaunch"]}
    assert public and not any(name in json.dumps(training) for name in public)


def test_the_team_key_gets_what_every_construct_needs_once(team_app):
    """The team's plain kms.Key: AlertTopic, BudgetGuard, the flow logs, TrainingQueue and SpotGpuFleet added their
    statements, each service once."""
    _, outdir, _ = team_app
    key = next(r for r in template(outdir, "TeamBData")["Resources"].values() if r["Type"] == "AWS::KMS::Key")
    principals = []
    for statement in key["Properties"]["KeyPolicy"]["Statement"]:
        service = statement["Principal"].get("Service", [])
        principals += [service] if isinstance(service, str) else service
        if "autoscaling.amazonaws.com" in json.dumps(statement["Principal"]):
            principals.append(statement.get("Sid"))
    assert sorted(principals) == sorted(["cloudwatch.amazonaws.com", "events.amazonaws.com", "budgets.amazonaws.com",
                                         "logs.eu-west-1.amazonaws.com", "AllowAutoScalingToUseKeyForInstanceVolumes",
                                         "AllowAutoScalingToAttachEncryptedVolumes"])


def test_the_guard_governs_the_fleet_and_the_queue_at_eu_west_1s_prices(team_app):
    _, outdir, _ = team_app
    training = template(outdir, "TeamBTraining")["Resources"]
    group = next(r for r in training.values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup")
    assert {"Key": "ml-platform:budget-scope", "Value": "account", "PropagateAtLaunch": True} in \
        group["Properties"]["Tags"]
    queues = [r for r in training.values() if r["Type"] == "AWS::Batch::JobQueue"]
    assert len(queues) == 2 and all(q["Properties"]["Tags"]["ml-platform:budget-scope"] == "account" for q in queues)
    function = next(r for r in training.values() if r["Type"] == "AWS::Lambda::Function"
                    and r["Properties"].get("Environment", {}).get("Variables", {}).get("PRICE_REGION"))
    assert function["Properties"]["Environment"]["Variables"]["PRICE_REGION"] == "eu-west-1"
    report = json.loads((outdir / "validation-report.json").read_text())
    assert "price table has no" not in json.dumps(report)


def test_the_operations_cli_runs_with_the_wheel_and_boto3_alone_without_node(built):
    cli = built["cli"]
    assert not cli["node_on_path"] and cli["cdk"]["returncode"] != 0  # no Node.js, no aws-cdk-lib in that venv
    assert cli["help"]["returncode"] == 0 and "prices refresh" in cli["help"]["stdout"], cli["help"]
    # advice and operations import, and the advisor's config block is made, without aws-cdk-lib (boto3 is imported
    # when a command calls AWS)
    assert cli["modules"]["stdout"].splitlines() == ["[[environments.dev.queues]]", "[]"], cli["modules"]
    assert cli["no_region"]["returncode"] == 1 and cli["no_region"]["stderr"].startswith("error: no AWS Region: pass "
                                                                                         "--region REGION")
    assert cli["no_region"]["stderr"].count("\n") == 1


def test_the_wheel_metadata_stands_alone(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert "ml_platform_constructs/py.typed" in names
    assert not any(n.startswith("ml_platform_job/") for n in names)  # the job side is its own distribution
    assert any(r.startswith("ml-platform-job") for r in metadata.get_all("Requires-Dist"))
    assert not any(n.startswith(("stacks/", "ops/", "tests/", "examples/")) for n in names)
    version = tomllib.loads((LIBRARY / "pyproject.toml").read_text())["project"]["version"]
    assert metadata["Version"] == version
    assert f"## {version}" in (LIBRARY / "CHANGELOG.md").read_text()
    assert any(url.startswith("Homepage, https://") for url in metadata.get_all("Project-URL"))
    description = metadata.get_payload()
    # The description is the library's index: an entry per construct, each linking its page by absolute URL, and no
    # relative link, which would lead nowhere on the package index.
    entries = {section.splitlines()[0]: section for section in re.split(r"^## ", description, flags=re.M)[1:]}
    pages = "https://github.com/ml-platform/ml-training-platform/blob/main/constructs/docs/"
    for construct, page in (("DatasetBucket", "DatasetBucket"), ("SpotGpuFleet", "SpotGpuFleet"),
                            ("TrainingQueue", "TrainingQueue"), ("MonitoredEndpoint", "MonitoredEndpoint"),
                            ("DatasetSnapshotBuilder", "DatasetSnapshotBuilder"), ("BudgetGuard", "BudgetGuard"),
                            ("PlatformKey", "PlatformKey"), ("AlertTopic", "AlertTopic"),
                            ("PlatformNetwork", "PlatformNetwork"), ("ImportedNetwork", "PlatformNetwork")):
        [entry] = [text for heading, text in entries.items() if construct in heading.split()]
        assert f"]({pages}{page}.md" in entry, construct
    assert re.findall(r"\]\((?!https?://|#)([^)]*)\)", description) == []


JOB_SIDE = ROOT / "job"


def test_the_job_side_installs_with_boto3_alone_no_cdk(built):
    """What a training image installs: the job side's wheel requires boto3 and nothing of the CDK; in a venv with
    only it and boto3, every module that needs no framework imports, and neither aws-cdk-lib, jsii, constructs nor
    the construct library is there or loaded."""
    with zipfile.ZipFile(built["job_wheel"]) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
    required = [r for r in metadata.get_all("Requires-Dist") if "extra ==" not in r]
    assert [re.split(r"[ <>=!~;]", r, 1)[0] for r in required] == ["boto3"]
    assert {"ml_platform_job/prices.json", "ml_platform_job/py.typed"} <= set(names)
    assert metadata["Version"] == tomllib.loads((JOB_SIDE / "pyproject.toml").read_text())["project"]["version"]
    job = built["job_cli"]
    assert job["probe"]["returncode"] == 0, job["probe"]
    probe = json.loads(job["probe"]["stdout"])
    assert {"tracking", "passport", "goodput", "checkpoints", "rehearse", "prices", "evaluation"} <= set(probe["modules"])
    assert probe["loaded"] == []
    assert job["cdk"]["returncode"] != 0 and job["constructs"]["returncode"] != 0
    assert job["help"]["returncode"] == 0 and "--exact" in job["help"]["stdout"]
    assert job["no_command"]["returncode"] == 2
    assert job["no_command"]["stderr"].count("\n") == 1 and job["no_command"]["stderr"].startswith("error: no job command")
