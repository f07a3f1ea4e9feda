"""The checks every operator command makes before it calls AWS, in one place.

    env = environment("prod")                    # configured? (config errors as one line, no traceback)
    require_known("fleet", "training", [f.name for f in env.fleets], env)   # a name config knows?
    session = session_for(env)                   # credentials present, and of prod's configured account?

Each failure raises SystemExit with a message that says what is wrong and how to fix it (exit status 1), so
a command never reaches AWS with a misspelled name or another environment's credentials.
"""

from __future__ import annotations

from typing import Callable, Sequence

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from stacks import config as platform_config
from stacks.config import EnvironmentConfig

HOW_TO_PROVIDE = (
    "Provide credentials for it in one of these ways:\n"
    "  - IAM Identity Center (SSO): aws configure sso --profile {name}  (once), then aws sso login --profile {name}"
    " and AWS_PROFILE={name} ./platform ...\n"
    "  - a named profile: aws configure --profile {name}, then AWS_PROFILE={name} ./platform ...\n"
    "  - environment variables: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)")


def environment(name: str) -> EnvironmentConfig:
    """The named environment of config/environments.toml; a config error or unknown name ends the command."""
    try:
        return platform_config.load().select(name)[0]
    except platform_config.ConfigError as error:
        raise SystemExit(f"error: {error}") from None


def require_known(kind: str, name: str, known: Sequence[str], env: EnvironmentConfig) -> str:
    """``name`` if config declares it for ``env``; otherwise the command ends naming the known ones."""
    if name not in known:
        listed = ", ".join(known) if known else "none"
        raise SystemExit(f"error: {env.name} has no {kind} {name!r} in config/environments.toml "
                         f"(known {kind}s: {listed})")
    return name


def session_for(env: EnvironmentConfig, *, check_account: bool = True,
                session_factory: Callable[..., boto3.session.Session] = boto3.session.Session) -> boto3.session.Session:
    """A boto3 Session in ``env``'s Region whose credentials work (STS GetCallerIdentity, which needs no
    permission: https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html) and belong to
    ``env``'s configured account. ``check_account=False`` only for commands run with another account's
    credentials on purpose (tag activation in the payer account)."""
    profile_hint = f"{env.project}-{env.name}"
    try:
        session = session_factory(region_name=env.region)
        if session.get_credentials() is None:
            raise SystemExit(f"error: no AWS credentials found for {env.name} (account {env.account}, "
                             f"{env.region}).\n" + HOW_TO_PROVIDE.format(name=profile_hint))
        identity = session.client("sts").get_caller_identity()
    except (BotoCoreError, ClientError) as error:  # a missing profile, an expired SSO token, revoked keys
        raise SystemExit(f"error: the AWS credentials for {env.name} do not work: {error}.\n"
                         + HOW_TO_PROVIDE.format(name=profile_hint)) from None
    if check_account and identity["Account"] != env.account:
        raise SystemExit(
            f"error: refusing to act on {env.name}: its account is {env.account} (config/environments.toml), but "
            f"these credentials are of account {identity['Account']} ({identity['Arn']}). Use {env.name}'s "
            f"credentials, e.g. AWS_PROFILE={profile_hint}.")
    return session
