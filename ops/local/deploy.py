"""Deploys the dev environment to moto on 127.0.0.1 with the pinned CDK CLI and reports what really exists.

  python -m ops.local.deploy [--assembly DIR]    the emulator step of ./platform up, with the whole table

Starts and stops the emulator itself; needs no AWS account. The CDK CLI's output goes to logs/cdk*.log and moto's
to logs/moto.log. ./platform up and the emulator tests deploy through LocalEmulator, the same code.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import boto3

from stacks.config import EnvironmentConfig

from ..aws_access import environment
from ..cdk_cli import CDK, LOGS, ROOT, run_logged, synth
from ..cli import Parser
from .emulator import client_environment, moto_server
from .report import MISSING, PARTIAL, StackReport, format_reports, gap_lines, report_assembly, unknown_gaps

# What moto 5.2 creates without applying (shared/EMULATOR.md); the report shows it per resource.
EMULATOR_LIMITS = """\
The emulator (moto) reports stacks complete even where it skipped work. Read the table above, not the status:
  NOT CREATED    moto has no CloudFormation support for the type (alarms, SNS subscriptions and topic policies,
                 S3 bucket policies, budgets, ...): exists only in a real account.
  PARTIAL        created, but some declared settings were not applied (for example S3 lifecycle rules).
  not read back  listed by the stack; this report cannot read the type back.
  not checked    (an aspect) the report cannot compare it with the template, so it claims nothing about it.
The local target also leaves KMS keys and SSM parameters untagged (moto fails on them tagged in templates),
gives GPU fleets a fixed image id (moto cannot resolve AWS's public Deep Learning AMI parameter) and the budget
a fixed name (moto creates no budget and cannot resolve a reference to one)."""


@dataclass
class LocalDeploy:
    reports: list[StackReport]
    endpoint: str
    seconds: dict[str, float]  # per step

    @property
    def complete(self) -> bool:
        return all(stack.status.endswith("_COMPLETE") for stack in self.reports)

    def count(self, status: str) -> int:
        return sum(1 for stack in self.reports for r in stack.resources if r.status == status)

    def verdict(self) -> str:
        return (f"local deploy: {len(self.reports)} stacks {'complete' if self.complete else 'NOT complete'}; "
                f"{self.count(PARTIAL)} resources partly applied, {self.count(MISSING)} not created by the emulator")

    def table(self) -> str:
        """The whole read-back, every resource of every stack, with what the statuses mean."""
        unknown = unknown_gaps(self.reports)
        return "\n".join(["What was deployed to the emulator (read back from its service APIs):",
                          format_reports(self.reports), "", EMULATOR_LIMITS, "",
                          "What moto did not apply or create, by type"
                          + (f" (not known from moto before: {', '.join(unknown)}):" if unknown
                             else " (each a known gap of moto's, pinned by tests/emulator):"),
                          *gap_lines(self.reports), "", self.verdict()])


def synthesize(assembly: Path, logs: Path = LOGS) -> list[Path]:
    """The local target (dev only, for the emulator), with the same validation as every synth."""
    return synth(assembly, target="local", log=logs / "cdk.log")


class LocalEmulator:
    """moto as dev's account on 127.0.0.1, bootstrapped for the pinned CDK CLI; ``deploy_and_report`` deploys an
    assembly to it and reads every resource back. ``start`` may run in a thread while the assembly is synthesized
    (./platform up and the emulator tests overlap the two); ``stop`` ends moto."""

    def __init__(self, dev: EnvironmentConfig, logs: Path = LOGS) -> None:
        self.dev, self.logs = dev, logs
        self.seconds: dict[str, float] = {}
        self._stack = ExitStack()
        self._env: dict[str, str] = {}

    def start(self) -> None:
        port = self._stack.enter_context(moto_server(self.dev.account, str(self.logs / "moto.log")))
        # Fail fast: the SDK would retry an emulator error for about 50 s.
        self._env = {**client_environment(port, self.dev.region), "AWS_MAX_ATTEMPTS": "2"}
        self.seconds["bootstrap"] = self._cdk(["bootstrap", f"aws://{self.dev.account}/{self.dev.region}", "--app",
                                               str(self._bootstrap_assembly())], "cdk bootstrap (emulator)")

    @property
    def endpoint(self) -> str:
        return self._env["AWS_ENDPOINT_URL"]

    def deploy_and_report(self, assembly: Path) -> LocalDeploy:
        self.seconds["deploy"] = self._cdk(["deploy", "dev/*", "--app", str(assembly), "--method=direct",
                                            "--require-approval", "never"], "cdk deploy dev (emulator)")
        started = time.monotonic()
        session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                        aws_session_token="testing", region_name=self.dev.region)
        reports = report_assembly(session, self.endpoint, assembly)
        self.seconds["read back"] = time.monotonic() - started
        return LocalDeploy(reports, self.endpoint.removeprefix("http://"), dict(self.seconds))

    def stop(self) -> None:
        self._stack.close()

    def __enter__(self) -> "LocalEmulator":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _cdk(self, arguments: list[str], what: str) -> float:
        return run_logged([*CDK, *arguments], what, log=self.logs / "cdk-emulator.log", env=self._env)

    def _bootstrap_assembly(self) -> Path:
        """An assembly that only names dev's account and Region: enough for `cdk bootstrap`, which would otherwise
        run app.py (cdk.json) and wait for a synth of its own."""
        directory = self.logs / "bootstrap-assembly"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "Placeholder.template.json").write_text('{"Resources": {}}')
        (directory / "manifest.json").write_text(json.dumps({"version": "36.0.0", "artifacts": {"Placeholder": {
            "type": "aws:cloudformation:stack", "environment": f"aws://{self.dev.account}/{self.dev.region}",
            "properties": {"templateFile": "Placeholder.template.json"}}}}))
        return directory


def synthesize_and_deploy(assembly: Path, dev: EnvironmentConfig, logs: Path = LOGS) -> LocalDeploy:
    """The emulator step of ./platform up: the local target's synth while moto starts and is bootstrapped, then
    the deploy of every stack and the read-back, then moto is ended."""
    emulator = LocalEmulator(dev, logs)
    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(emulator.start)
        try:
            synthesize(assembly, logs)
            starting.result()
            return emulator.deploy_and_report(assembly)
        finally:
            wait([starting])
            emulator.stop()


def main(argv: list[str]) -> int:
    parser = Parser("python -m ops.local.deploy", description=__doc__)
    parser.add_argument("--assembly", default="cdk.out.local", help="where to synthesize the local target")
    args = parser.parse_args(argv)
    dev = environment("dev")
    assembly = ROOT / args.assembly
    result = synthesize_and_deploy(assembly, dev)
    print(result.table())
    return 0 if result.complete else 1


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
