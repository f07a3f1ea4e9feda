"""GitHubDeploy: what lets GitHub Actions deploy one environment with short-lived credentials (no stored keys).

Deployed once per environment by an administrator (the roles cannot deploy themselves first):

    ./platform cdk deploy -c github_repository=OWNER/REPO -c environments=dev 'dev/GitHubDeploy'

- GitHub's OIDC provider in the account (one per account; pass -c github_oidc_provider=existing where the
  account already has it): https://docs.github.com/en/actions/how-tos/secure-your-work/security-harden-deployments/oidc-in-aws
- a deploy role that only jobs of ``main`` in the repository's GitHub environment of the same name can assume,
  allowed only to assume the CDK bootstrap roles, which do the deploy:
  https://docs.aws.amazon.com/cdk/v2/guide/bootstrapping-env.html
- a diff role for the repository's pull requests that reads the templates of this environment's stacks and
  nothing else: ``cdk diff --method template`` reads them with DescribeStacks and GetTemplate. It does not get
  the bootstrap lookup role, which carries ReadOnlyAccess on the whole account (the bootstrap template); the
  CDK CLI falls back to the role's own credentials when it cannot assume it. The app makes no context lookups
  (tests/test_ci_workflow.py guards that), so nothing else needs the lookup role in a diff.

What the roles trust. IAM evaluates only the ``aud`` and ``sub`` claims of GitHub's tokens ("Support for custom
claims for OIDC is unavailable in AWS", GitHub's page above), and GitHub's default ``sub`` for a job in an
environment, ``repo:OWNER/REPO:environment:ENV``, does not say which branch's workflow asked: any branch whose
workflow names the environment would get a token, unless the environment's branch policy stops it first.
So the repository's subject template is customised to include the ref (SUB_CLAIM_KEYS; docs/CI.md sets it with the REST
API) and the deploy role matches the whole subject:

    repo:OWNER/REPO:environment:prod:ref:refs/heads/main     a job of main in GitHub environment prod
    repo:OWNER/REPO:pull_request:ref:refs/pull/42/merge      a pull request's job (the diff role)

Subject template: https://docs.github.com/en/actions/reference/security/oidc#customizing-the-subject-claims-for-an-organization-or-repository
Trust conditions as IAM documents them for GitHub:
https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-idp_oidc.html#idp_oidc_Create_GitHub
"""

from __future__ import annotations

import json
import re
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct
from ml_platform_constructs.foundation.nag_support import AcknowledgeWildcardResources, stack_arn

from .config import ConfigError

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
BOOTSTRAP_QUALIFIER = "hnb659fds"  # cdk bootstrap's default qualifier
# The claims, in order, that the repository's OIDC subject is made of (GitHub joins them as key:value, with the
# shortened `repo` key and `context` written without its key: environment:ENV or pull_request).
SUB_CLAIM_KEYS = ("repo", "context", "ref")
DEPLOY_BRANCH = "main"
# OWNER/REPO, or the immutable form OWNER@OWNER_ID/REPO@REPO_ID that GitHub puts in `sub` for repositories
# created after 15 July 2026 or opted in (GitHub's OIDC reference, "Immutable subject claims").
REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$|^[A-Za-z0-9_.-]+@[0-9]+/[A-Za-z0-9_.-]+@[0-9]+$")
# What `cdk diff --method template` calls for each stack (nested stacks: ListStackResources).
DIFF_ACTIONS = ("cloudformation:DescribeStacks", "cloudformation:GetTemplate", "cloudformation:ListStackResources")


# How long a deploy may take. `./platform deploy ENV` deploys ENV's stacks one after another, Serving last. Each
# endpoint update is a blue/green deployment that SageMaker ends, and rolls back, once it has run its
# MaximumExecutionTimeoutInSeconds (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_BlueGreenUpdatePolicy.html);
# a failed update makes CloudFormation roll the stack back, which updates the endpoint to its old configuration: a
# second blue/green deployment under the same timeout. The CDK CLI waits for the rollback to end. So the deploy job
# (deploy-environment.yml: timeout-minutes), its OIDC session (role-duration-seconds) and the deploy role's
# MaxSessionDuration must all last DEPLOY_SETUP + STACKS_BEFORE_SERVING + 2 x the slowest endpoint's timeout
# (tests/test_github_deploy_window.py reads all three and the synthesized endpoints, and checks it).
# Checkout, ./platform setup and the synth before the first stack: a cold setup took 86 s (docs/BENCHMARKS.md), a
# synth with its validations minutes; the rest is margin for a slow runner or registry.
DEPLOY_SETUP = Duration.minutes(15)
STACKS_BEFORE_SERVING = Duration.minutes(60)  # every other stack of ENV: the whole deploy job's window before issue 28
# The longest a job may run on a GitHub-hosted runner ("Job execution time", 6 hours):
# https://docs.github.com/en/actions/reference/limits
GITHUB_HOSTED_JOB_LIMIT = Duration.hours(6)
# The deploy job's timeout and session, and the deploy role's MaxSessionDuration (1-12 hours:
# https://docs.aws.amazon.com/IAM/latest/APIReference/API_UpdateRole.html). AssumeRoleWithWebIdentity fails when
# role-duration-seconds exceeds MaxSessionDuration, and configure-aws-credentials asks for 1 hour when it is unset.
# The bootstrap roles the deploy role assumes are chained sessions, limited to 1 hour whatever their setting
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html#iam-term-role-chaining): the
# pinned CDK CLI (package.json) assumes them again from the job's session as they expire, so only the job's session
# must last the whole deploy. CloudFormation itself acts with the bootstrap execution role, not with these sessions.
DEPLOY_SESSION = Duration.hours(5)


def deploy_window(rollout_timeout: Duration) -> Duration:
    """The longest a deploy of an environment may take, for the slowest endpoint's blue/green timeout: every other
    stack, then an endpoint update that runs to its timeout and the stack rollback's second one."""
    return Duration.seconds(DEPLOY_SETUP.to_seconds() + STACKS_BEFORE_SERVING.to_seconds()
                            + 2 * rollout_timeout.to_seconds())


def deploy_role_name(environment: str) -> str:
    return f"ml-platform-github-deploy-{environment}"


def diff_role_name(environment: str) -> str:
    return f"ml-platform-github-diff-{environment}"


def subject_template() -> dict[str, Any]:
    """The body of PUT /repos/OWNER/REPO/actions/oidc/customization/sub that the trust policies expect."""
    return {"use_default": False, "include_claim_keys": list(SUB_CLAIM_KEYS)}


def subject_template_command(repository: str = "OWNER/REPO") -> str:
    """docs/CI.md's command that sets the repository's subject template (GitHub CLI)."""
    return (f"echo '{json.dumps(subject_template(), separators=(',', ':'))}' | "
            f"gh api --method PUT repos/{repository}/actions/oidc/customization/sub --input -")


def deploy_subject(repository: str, environment: str) -> str:
    return f"repo:{repository}:environment:{environment}:ref:refs/heads/{DEPLOY_BRANCH}"


def diff_subject(repository: str) -> str:
    return f"repo:{repository}:pull_request:ref:refs/pull/*/merge"


class GitHubDeployStack(Stack):
    def __init__(self, scope: Construct, id: str, *, repository: str, environment: str,
                 create_oidc_provider: bool = True, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        if not REPOSITORY.match(repository):
            raise ConfigError("context github_repository", repository,
                              "OWNER/REPO (e.g. my-org/ml-platform), or OWNER@OWNER_ID/REPO@REPO_ID where the "
                              "repository's OIDC subject uses GitHub's immutable form",
                              "pass -c github_repository=OWNER/REPO")
        if create_oidc_provider:
            provider_arn = iam.CfnOIDCProvider(
                self, "GitHubOidcProvider", url=f"https://{GITHUB_OIDC_HOST}", client_id_list=["sts.amazonaws.com"]).attr_arn
        else:
            provider_arn = f"arn:{self.partition}:iam::{self.account}:oidc-provider/{GITHUB_OIDC_HOST}"

        def github_role(name: str, subject: tuple[str, str], description: str,
                        max_session: Duration = Duration.hours(1)) -> iam.Role:
            operator, value = subject
            conditions = {"StringEquals": {f"{GITHUB_OIDC_HOST}:aud": "sts.amazonaws.com"}}
            conditions.setdefault(operator, {})[f"{GITHUB_OIDC_HOST}:sub"] = value
            principal = iam.WebIdentityPrincipal(provider_arn, conditions=conditions)
            role = iam.Role(self, name.title().replace("-", ""), role_name=name, assumed_by=principal,
                            description=description, max_session_duration=max_session)
            CfnOutput(self, f"{name.title().replace('-', '')}Arn", value=role.role_arn)
            return role

        self.deploy_role = github_role(
            deploy_role_name(environment), ("StringEquals", deploy_subject(repository, environment)),
            f"GitHub Actions deploys {environment} from {repository} ({DEPLOY_BRANCH}, environment {environment}) "
            "via the CDK bootstrap roles", max_session=DEPLOY_SESSION)
        self.deploy_role.add_to_policy(iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[
            f"arn:{self.partition}:iam::{self.account}:role/cdk-{BOOTSTRAP_QUALIFIER}-{kind}-role-{self.account}-{self.region}"
            for kind in ("deploy", "file-publishing", "image-publishing", "lookup")]))

        self.diff_role = github_role(
            diff_role_name(environment), ("StringLike", diff_subject(repository)),
            f"GitHub Actions diffs {environment} for pull requests of {repository} (reads its stacks' templates)")
        # The app names a stage's stacks ENV-<id> (prod-Core, prod-Data, ...).
        stacks = "arn:{partition}:cloudformation:{region}:{account}:stack/" + environment + "-*/*"
        self.diff_role.add_to_policy(iam.PolicyStatement(actions=list(DIFF_ACTIONS), resources=[stack_arn(self, stacks)]))
        policy = self.diff_role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeWildcardResources(
            policy, ["-*/*"], f"Only the CloudFormation stacks of {environment} (named {environment}-*), whose "
                              "stack ids are random: the templates that cdk diff compares"))
