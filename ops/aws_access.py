"""The checks every operator command makes before it calls AWS, in one place.

    env = environment("prod")                    # configured? (config errors as one line, no traceback)
    require_known("fleet", "training", [f.name for f in env.fleets], env)   # a name config knows?
    session = session_for(env)                   # credentials present, and of prod's configured account?
    session = payer_session(env)                 # or: of the management (payer) account that pays for prod's

Each failure raises SystemExit with one line that says what is wrong and how to fix it (exit status 1), so
a command never reaches AWS with a misspelled name or another environment's credentials.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, Sequence

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from stacks import config as platform_config
from stacks.config import EnvironmentConfig

CONFIG_FILE = "config/environments.toml"


def how_to_provide(profile: str) -> str:
    """The fix, on the same line as the error: sign in to the profile and name it."""
    return (f"sign in (aws sso login --profile {profile}, after aws configure sso --profile {profile} once) and run "
            f"with AWS_PROFILE={profile}, or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(docs/COMMANDS.md)")


def environment(name: str) -> EnvironmentConfig:
    """The named environment of config/environments.toml; a config error or an unknown name ends the command
    with one line that names the environments config declares."""
    try:
        config = platform_config.load()
    except platform_config.ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    if name not in config.environments:
        raise SystemExit(f"error: unknown environment {name!r}: {CONFIG_FILE} declares "
                         f"{', '.join(config.environments)}")
    return config.environments[name]


def require_known(kind: str, name: str, known: Sequence[str], env: EnvironmentConfig) -> str:
    """``name`` if config declares it for ``env``; otherwise the command ends naming the known ones."""
    if name not in known:
        listed = ", ".join(known) if known else "none"
        raise SystemExit(f"error: {env.name} has no {kind} {name!r} in {CONFIG_FILE} "
                         f"(known {kind}s: {listed})")
    return name


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def session_for(env: EnvironmentConfig, *,
                session_factory: Callable[..., boto3.session.Session] = boto3.session.Session) -> boto3.session.Session:
    """A boto3 Session in ``env``'s Region whose credentials work (STS GetCallerIdentity, which needs no
    permission: https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html) and belong to
    ``env``'s configured account."""
    profile = f"{env.project}-{env.name}"
    session, identity = _signed_in(session_factory, env.region, f"{env.name} (account {env.account}, {env.region})",
                                   profile)
    if identity["Account"] != env.account:
        raise SystemExit(
            f"error: refusing to act on {env.name}: its account is {env.account} ({CONFIG_FILE}), but "
            f"these credentials are of account {identity['Account']} ({identity['Arn']}): use {env.name}'s "
            f"credentials, e.g. AWS_PROFILE={profile}")
    return session


def payer_session(env: EnvironmentConfig, *,
                  session_factory: Callable[..., boto3.session.Session] = boto3.session.Session) -> boto3.session.Session:
    """A Session of the management (payer) account that pays for ``env``'s account: cost allocation tags are
    activated there and nowhere else
    (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html). Organizations'
    DescribeOrganization names that account; an account in no organization pays for itself."""
    profile = f"{env.project}-payer"
    session, identity = _signed_in(session_factory, "us-east-1",
                                   f"the management (payer) account that pays for {env.name} (account {env.account})",
                                   profile)
    caller = identity["Account"]
    organizations = session.client("organizations")
    try:
        payer = organizations.describe_organization()["Organization"]["MasterAccountId"]
    except ClientError as error:
        code = error.response["Error"]["Code"]
        if code != "AWSOrganizationsNotInUseException":
            raise SystemExit(f"error: cannot tell whether account {caller} is the management (payer) account "
                             f"(organizations:DescribeOrganization: {code}): run with the payer account's "
                             f"credentials, e.g. AWS_PROFILE={profile}") from None
        if caller != env.account:
            raise SystemExit(f"error: account {caller} is in no organization, so it pays only for itself, not for "
                             f"{env.name} (account {env.account}): run with the credentials of the account that "
                             f"pays for {env.account}, e.g. AWS_PROFILE={profile}") from None
        return session
    if caller != payer:
        raise SystemExit(f"error: tags are activated in the management (payer) account {payer}, but these credentials "
                         f"are of account {caller} ({identity['Arn']}): run with {payer}'s credentials, "
                         f"e.g. AWS_PROFILE={profile}")
    if env.account != payer:
        try:
            organizations.describe_account(AccountId=env.account)
        except ClientError as error:
            raise SystemExit(f"error: {env.name}'s account {env.account} is not in the organization of payer account "
                             f"{payer} ({error.response['Error']['Code']}): tags activated there would not cover "
                             f"it; run with the credentials of {env.account}'s payer account") from None
    return session


def _signed_in(session_factory: Callable[..., boto3.session.Session], region: str, whose: str,
               profile: str) -> tuple[boto3.session.Session, dict]:
    try:
        session = session_factory(region_name=region)
        if session.get_credentials() is None:
            raise SystemExit(f"error: no AWS credentials found for {whose}: {how_to_provide(profile)}")
        return session, session.client("sts").get_caller_identity()
    except (BotoCoreError, ClientError) as error:  # a missing profile, an expired SSO token, revoked keys
        raise SystemExit(f"error: the AWS credentials for {whose} do not work ({_one_line(error)}): "
                         f"{how_to_provide(profile)}") from None


def main(argv: list[str]) -> int:
    """``python -m ops.aws_access ENV``: the checks alone (what ./platform diff and deploy run before the CDK CLI)."""
    from ops.cli import Parser

    parser = Parser("python -m ops.aws_access",
                    description="Checks that ENV is configured and that the AWS credentials are its account's.")
    parser.add_argument("env")
    parser.add_argument("--profile", help="a named profile, as the CDK CLI's --profile (default: the usual chain)")
    args = parser.parse_args(argv)
    session_for(environment(args.env), session_factory=functools.partial(boto3.session.Session,
                                                                         profile_name=args.profile))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
