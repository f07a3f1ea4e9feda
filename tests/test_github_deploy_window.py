"""The deploy job outlasts the slowest deploy (issue 28, item 5): every other stack, then an endpoint's blue/green
update that runs to its timeout and the stack rollback's second one; the job's timeout, its OIDC session and the
deploy role's MaxSessionDuration agree with each other and with the endpoints this app synthesizes."""

from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Duration, Environment
from aws_cdk.assertions import Template
from ml_platform_constructs.serving.monitored_endpoint import MIN_ROLLOUT_BAKE_TIME

from stacks.github_deploy_stack import (DEPLOY_SESSION, DEPLOY_SETUP, GITHUB_HOSTED_JOB_LIMIT, STACKS_BEFORE_SERVING,
                                        GitHubDeployStack, deploy_role_name, deploy_window)

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "deploy-environment.yml"
# What configure-aws-credentials asks for without role-duration-seconds (OIDC), and what IAM allows a role at most:
# https://docs.aws.amazon.com/IAM/latest/APIReference/API_UpdateRole.html
DEFAULT_SESSION_SECONDS = 3600
IAM_MAX_SESSION_SECONDS = 12 * 3600


def deploy_job_settings(text: str) -> tuple[int, int]:
    """(timeout-minutes, the session seconds configure-aws-credentials asks for) of the deploy job."""
    job = yaml.safe_load(text)["jobs"]["deploy"]
    login = next(s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
    return int(job["timeout-minutes"]), int(login["with"].get("role-duration-seconds", DEFAULT_SESSION_SECONDS))


def rollouts(templates: list[dict]) -> list[dict]:
    """Each synthesized endpoint's blue/green settings, in seconds."""
    found = []
    for template in templates:
        for name, resource in template.get("Resources", {}).items():
            if resource["Type"] != "AWS::SageMaker::Endpoint":
                continue
            policy = resource["Properties"]["DeploymentConfig"]["BlueGreenUpdatePolicy"]
            routing = policy["TrafficRoutingConfiguration"]
            found.append({"endpoint": name, "timeout": policy["MaximumExecutionTimeoutInSeconds"],
                          "waits": routing["WaitIntervalInSeconds"] + policy.get("TerminationWaitInSeconds", 0)})
    return found


def window_problems(timeout_minutes: int, session_seconds: int, max_session_seconds: int,
                    endpoints: list[dict]) -> list[str]:
    """What would end a deploy before its slowest case does: the arithmetic of stacks/github_deploy_stack.py."""
    problems = []
    slowest = max(e["timeout"] for e in endpoints)
    needed = deploy_window(Duration.seconds(slowest)).to_seconds()
    if timeout_minutes * 60 < needed:
        problems.append(f"timeout-minutes {timeout_minutes} < {needed / 60:.0f}: setup {DEPLOY_SETUP.to_minutes():.0f} + "
                        f"other stacks {STACKS_BEFORE_SERVING.to_minutes():.0f} + 2 x the slowest endpoint's "
                        f"blue/green timeout {slowest / 60:.0f}")
    if timeout_minutes * 60 > GITHUB_HOSTED_JOB_LIMIT.to_seconds():
        problems.append(f"timeout-minutes {timeout_minutes} > GitHub-hosted runners' {GITHUB_HOSTED_JOB_LIMIT.to_minutes():.0f}: "
                        "deploy Serving in a job of its own, or shorten the endpoints' rollout_bake_time")
    if session_seconds < timeout_minutes * 60:
        problems.append(f"role-duration-seconds {session_seconds} < the job's {timeout_minutes * 60} s: the CDK CLI's "
                        "credentials would expire while CloudFormation still deploys")
    if session_seconds > max_session_seconds:
        problems.append(f"role-duration-seconds {session_seconds} > the deploy role's MaxSessionDuration "
                        f"{max_session_seconds}: AssumeRoleWithWebIdentity would refuse it")
    if not 3600 <= max_session_seconds <= IAM_MAX_SESSION_SECONDS:
        problems.append(f"MaxSessionDuration {max_session_seconds} outside IAM's 1-12 hours")
    for endpoint in endpoints:  # SageMaker's note: the timeout must exceed the waits, or a healthy rollout times out
        if endpoint["timeout"] <= endpoint["waits"]:
            problems.append(f"{endpoint['endpoint']}: blue/green timeout {endpoint['timeout']} s <= its waits "
                            f"{endpoint['waits']} s")
    return problems


@pytest.fixture(scope="module")
def deploy_role_max_session() -> int:
    stack = GitHubDeployStack(App(), "GitHubDeploy", repository="my-org/ml-platform", environment="prod",
                              env=Environment(account="111122223333", region="us-east-1"))
    [role] = [r["Properties"] for r in Template.from_stack(stack).find_resources("AWS::IAM::Role").values()
              if r["Properties"]["RoleName"] == deploy_role_name("prod")]
    return role["MaxSessionDuration"]


@pytest.fixture(scope="module")
def app_rollouts(platform_app) -> list[dict]:
    _, assembly, _ = platform_app
    found = rollouts([stack.template for stack in assembly.stacks_recursively])
    assert found, "the app synthesizes no SageMaker endpoint: nothing to check the deploy window against"
    return found


def test_the_deploy_job_its_session_and_the_deploy_role_outlast_a_rollout_and_its_rollback(
        app_rollouts, deploy_role_max_session):
    timeout, session = deploy_job_settings(WORKFLOW.read_text())
    assert window_problems(timeout, session, deploy_role_max_session, app_rollouts) == []
    # One setting in three places: the job's timeout is the session the role allows.
    assert timeout * 60 == session == deploy_role_max_session == DEPLOY_SESSION.to_seconds()


def test_the_apps_endpoints_bake_the_default_time_the_window_was_sized_for(app_rollouts):
    """The window is sized for the endpoints this app synthesizes; a longer rollout_bake_time makes the first test
    fail and says by how much."""
    bake = MIN_ROLLOUT_BAKE_TIME.to_seconds()
    assert {e["waits"] for e in app_rollouts} == {2 * bake}  # the bake, then the wait before the old fleet goes
    assert deploy_window(Duration.seconds(max(e["timeout"] for e in app_rollouts))).to_seconds() <= \
        DEPLOY_SESSION.to_seconds()


def test_the_window_check_fires_on_the_settings_before_issue_28(app_rollouts):
    """60 minutes, no role-duration-seconds (1 hour) and MaxSessionDuration 3600: a rollout that fails and rolls
    back takes longer than the job and its credentials last."""
    before = WORKFLOW.read_text().replace("timeout-minutes: 300", "timeout-minutes: 60").replace(
        "          role-duration-seconds: 18000\n", "")
    timeout, session = deploy_job_settings(before)
    assert (timeout, session) == (60, 3600)
    problems = window_problems(timeout, session, 3600, app_rollouts)
    assert len(problems) == 1 and problems[0].startswith("timeout-minutes 60 < ")


def test_the_window_check_fires_on_each_setting_that_disagrees(app_rollouts):
    hours5 = 5 * 3600
    assert window_problems(300, 3600, hours5, app_rollouts)[0].startswith("role-duration-seconds 3600 < the job's 18000")
    assert window_problems(300, hours5, 3600, app_rollouts) == [
        "role-duration-seconds 18000 > the deploy role's MaxSessionDuration 3600: AssumeRoleWithWebIdentity would "
        "refuse it"]
    # A bake the whole window cannot hold on a GitHub-hosted runner (two 4-hour rollouts).
    slow = [{"endpoint": "Slow", "timeout": 4 * 3600, "waits": 2 * 3600}]
    assert any("GitHub-hosted runners' 360" in p for p in window_problems(600, 43200, 43200, slow))
    assert window_problems(300, hours5, hours5, [{"endpoint": "E", "timeout": 1200, "waits": 1200}]) == [
        "E: blue/green timeout 1200 s <= its waits 1200 s"]
