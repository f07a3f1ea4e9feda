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

        def github_role(name: str, subject: tuple[str, str], description: str) -> iam.Role:
            operator, value = subject
            conditions = {"StringEquals": {f"{GITHUB_OIDC_HOST}:aud": "sts.amazonaws.com"}}
            conditions.setdefault(operator, {})[f"{GITHUB_OIDC_HOST}:sub"] = value
            principal = iam.WebIdentityPrincipal(provider_arn, conditions=conditions)
            role = iam.Role(self, name.title().replace("-", ""), role_name=name, assumed_by=principal,
                            description=description, max_session_duration=Duration.hours(1))
            CfnOutput(self, f"{name.title().replace('-', '')}Arn", value=role.role_arn)
            return role

        self.deploy_role = github_role(
            deploy_role_name(environment), ("StringEquals", deploy_subject(repository, environment)),
            f"GitHub Actions deploys {environment} from {repository} ({DEPLOY_BRANCH}, environment {environment}) "
            "via the CDK bootstrap roles")
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
