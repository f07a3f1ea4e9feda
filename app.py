#!/usr/bin/env python3
"""The CDK app: one Stage per environment of config/environments.toml.

Context: -c target=aws|local (local: dev only, for the emulator), -c environments=dev,prod (default: all),
-c github_repository=OWNER/REPO (adds each environment's GitHubDeploy stack: see docs/CI.md).
A configuration or construct error ends the synth with its message alone (exit 1), never a traceback.
"""

import sys

from aws_cdk import App

from stacks import config as platform_config
from stacks.app_builder import build, failed_validations, user_error

app = App()
try:
    build(app, platform_config.load(), target=app.node.try_get_context("target") or "aws",
          environments=app.node.try_get_context("environments"),
          github_repository=app.node.try_get_context("github_repository"),
          github_oidc_provider=app.node.try_get_context("github_oidc_provider"))
    assembly = app.synth()
except Exception as error:  # noqa: BLE001: only the errors user_error recognises are turned into a message
    message = user_error(error)
    if message is None:
        raise
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)
failures = failed_validations(assembly.directory)
if failures:
    print("error: validation failed:\n  " + "\n  ".join(failures), file=sys.stderr)
    sys.exit(1)
