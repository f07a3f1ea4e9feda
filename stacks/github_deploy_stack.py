"""GitHubDeploy: what lets GitHub Actions deploy one environment with short-lived credentials (no stored keys).

Deployed once per environment by an administrator (the roles cannot deploy themselves first):

    ./platform cdk deploy -c github_repository=OWNER/REPO -c environments=dev 'dev/GitHubDeploy'

- GitHub's OIDC provider in the account (one per account; pass -c github_oidc_provider=existing where the
  account already has it): https://docs.github.com/en/actions/how-tos/secure-your-work/security-harden-deployments/oidc-in-aws
- a deploy role that only workflow jobs of the repository's GitHub environment of the same name can assume
  (subject ``repo:OWNER/REPO:environment:ENV``, audience ``sts.amazonaws.com``), allowed only to assume the CDK
  bootstrap roles, which do the deploy: https://docs.aws.amazon.com/cdk/v2/guide/bootstrapping-env.html
- a diff role for pull requests of the repository (subject ``repo:OWNER/REPO:pull_request``), allowed only to
  assume the bootstrap lookup role, which reads the deployed templates for ``cdk diff``.

Trust conditions as IAM documents them for GitHub:
https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-idp_oidc.html#idp_oidc_Create_GitHub
"""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from .config import ConfigError

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
BOOTSTRAP_QUALIFIER = "hnb659fds"  # cdk bootstrap's default qualifier


def deploy_role_name(environment: str) -> str:
    return f"ml-platform-github-deploy-{environment}"


def diff_role_name(environment: str) -> str:
    return f"ml-platform-github-diff-{environment}"


class GitHubDeployStack(Stack):
    def __init__(self, scope: Construct, id: str, *, repository: str, environment: str,
                 create_oidc_provider: bool = True, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        if not re.match(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", repository):
            raise ConfigError("context github_repository", repository, "OWNER/REPO, e.g. my-org/ml-platform",
                              "pass -c github_repository=OWNER/REPO")
        if create_oidc_provider:
            provider_arn = iam.CfnOIDCProvider(
                self, "GitHubOidcProvider", url=f"https://{GITHUB_OIDC_HOST}", client_id_list=["sts.amazonaws.com"]).attr_arn
        else:
            provider_arn = f"arn:{self.partition}:iam::{self.account}:oidc-provider/{GITHUB_OIDC_HOST}"

        def github_role(name: str, subject: str, bootstrap_roles: list[str], description: str) -> iam.Role:
            principal = iam.WebIdentityPrincipal(provider_arn, conditions={"StringEquals": {
                f"{GITHUB_OIDC_HOST}:aud": "sts.amazonaws.com", f"{GITHUB_OIDC_HOST}:sub": subject}})
            role = iam.Role(self, name.title().replace("-", ""), role_name=name, assumed_by=principal,
                            description=description, max_session_duration=Duration.hours(1))
            role.add_to_policy(iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[
                f"arn:{self.partition}:iam::{self.account}:role/cdk-{BOOTSTRAP_QUALIFIER}-{kind}-role-{self.account}-{self.region}"
                for kind in bootstrap_roles]))
            CfnOutput(self, f"{name.title().replace('-', '')}Arn", value=role.role_arn)
            return role

        self.deploy_role = github_role(
            deploy_role_name(environment), f"repo:{repository}:environment:{environment}",
            ["deploy", "file-publishing", "image-publishing", "lookup"],
            f"GitHub Actions deploys {environment} from {repository} (environment {environment}) via the CDK bootstrap roles")
        self.diff_role = github_role(
            diff_role_name(environment), f"repo:{repository}:pull_request", ["lookup"],
            f"GitHub Actions diffs {environment} for pull requests of {repository} (read-only bootstrap lookup role)")
