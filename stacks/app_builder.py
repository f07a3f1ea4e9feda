"""Builds the app's stages from configuration; app.py and the tests share it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from aws_cdk import App, DefaultStackSynthesizer, Validations
from cdk_nag import AwsSolutionsChecks
from ml_platform_constructs import ValidationError

from .config import ConfigError, PlatformConfig
from .github_deploy_stack import GitHubDeployStack
from .stage import PlatformStage

TARGETS = ("aws", "local")


def build(app: App, config: PlatformConfig, *, target: str = "aws", environments: str | None = None,
          github_repository: str | None = None, github_oidc_provider: str | None = None) -> list[PlatformStage]:
    """Adds one stage per selected environment and registers cdk-nag's AwsSolutions checks once.

    github_repository (OWNER/REPO) adds each stage's GitHubDeploy stack (the roles GitHub Actions deploys
    with; see stacks/github_deploy_stack.py); github_oidc_provider "existing" reuses the account's provider.

    target "local" builds only dev, for the local emulator: without the bootstrap-version rule, which the
    emulator cannot evaluate on updates.
    """
    if target not in TARGETS:
        raise ConfigError("context target", target, f"one of {list(TARGETS)}", "pass -c target=aws (default) or -c target=local")
    if target == "local":
        selected = config.select("dev")
        synthesizer = DefaultStackSynthesizer(generate_bootstrap_version_rule=False)
    else:
        selected = config.select(environments)
        synthesizer = None
    stages = [PlatformStage(app, env.name, config=env, synthesizer=synthesizer, emulator=target == "local")
              for env in selected]
    if github_repository:
        for stage in stages:
            stage.github_deploy = GitHubDeployStack(
                stage, "GitHubDeploy", repository=github_repository, environment=stage.stage_name,
                create_oidc_provider=github_oidc_provider != "existing",
                description=f"GitHub Actions OIDC deploy roles for {stage.stage_name}")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stages


def failed_validations(outdir: str) -> list[str]:
    """The rule/construct pairs that failed in a synthesized assembly's validation report.

    Under the CDK CLI the app does not raise on failed validations, and `cdk synth` with no stack selected
    exits 0 anyway; app.py checks this report so that every synth fails on an unacknowledged finding.
    """
    report = Path(outdir) / "validation-report.json"
    if not report.exists():
        return []
    failures = []
    for plugin in json.loads(report.read_text())["pluginReports"]:
        for violation in plugin["violations"]:
            for construct in violation["violatingConstructs"]:
                failures.append(f"{violation['ruleName']} at {construct['constructPath']}: {violation['description']}")
    return failures


def user_error(error: BaseException) -> str | None:
    """The message of a configuration or construct error, wherever in the synth it was raised; None for others.

    A ValidationError raised while jsii calls back into Python (a lazy value, a validation hook) reaches the app
    as a RuntimeError whose text embeds the message ("Resolution error: <message>."); the message's own shape
    ("<who>: <prop>=<value> is invalid: <allowed>. Fix: <fix>") finds it.
    """
    if isinstance(error, (ConfigError, ValidationError)):
        return str(error)
    if isinstance(error, RuntimeError):
        found = re.search(r"((?:config: |\w+: )\S+=.*? is invalid: .*?\. Fix: [^\n]*?)\.?(?:\n|$)", str(error))
        return found[1] if found else None
    return None
