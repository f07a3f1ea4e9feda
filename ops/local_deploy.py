"""Deploys the dev environment to moto on 127.0.0.1 with the pinned CDK CLI and reports what really exists.

Usage: python -m ops.local_deploy [--assembly DIR]. Starts and stops the emulator itself; needs no AWS account.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import boto3

from stacks import config as platform_config

from .emulator import client_environment, moto_server
from .report import MISSING, PARTIAL, format_reports, report_assembly

ROOT = Path(__file__).resolve().parent.parent

# What moto 5.2 creates without applying (shared/EMULATOR.md); the report shows it per resource.
EMULATOR_LIMITS = """\
The emulator (moto) reports stacks complete even where it skipped work. Read the table above, not the status:
  NOT CREATED    moto has no CloudFormation support for the type (alarms, SNS subscriptions and topic policies,
                 S3 bucket policies, budgets, ...): exists only in a real account.
  PARTIAL        created, but some declared settings were not applied (for example S3 lifecycle rules).
  not read back  listed by the stack; this report cannot read the type back.
The local target also leaves KMS keys and SSM parameters untagged (moto fails on them tagged in templates),
gives GPU fleets a fixed image id (moto cannot resolve AWS's public Deep Learning AMI parameter) and the budget
a fixed name (moto creates no budget and cannot resolve a reference to one)."""


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    started = time.monotonic()
    print(f"==> {what}: {' '.join(command)}", flush=True)
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        print(result.stdout, file=sys.stderr)
        raise SystemExit(f"{what} failed (exit {result.returncode})")
    print(f"    done in {time.monotonic() - started:.1f} s", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--assembly", default="cdk.out.local", help="where to synthesize the local target")
    args = parser.parse_args(argv)
    dev = platform_config.load().environments["dev"]
    assembly = ROOT / args.assembly
    with moto_server(dev.account, str(ROOT / "moto.log")) as port:
        print(f"==> emulator: moto on 127.0.0.1:{port} as account {dev.account}, Region {dev.region}", flush=True)
        # Fail fast: the SDK would retry an emulator error for about 50 s.
        env = {**client_environment(port, dev.region), "AWS_MAX_ATTEMPTS": "2"}
        cdk = ["npx", "--no-install", "cdk"]
        _run([*cdk, "synth", "--quiet", "-c", "target=local", "--output", str(assembly), "**"], env, "synth (local target)")
        _run([*cdk, "bootstrap", f"aws://{dev.account}/{dev.region}", "--app", str(assembly)], env, "bootstrap")
        _run([*cdk, "deploy", "dev/*", "--app", str(assembly), "--method=direct", "--require-approval", "never"], env,
             "deploy dev")
        endpoint = env["AWS_ENDPOINT_URL"]
        session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                        aws_session_token="testing", region_name=dev.region)
        reports = report_assembly(session, endpoint, assembly)
    print("\nWhat was deployed to the emulator (read back from its service APIs):")
    print(format_reports(reports))
    print("\n" + EMULATOR_LIMITS)
    complete = all(r.status.endswith("_COMPLETE") for r in reports)
    counts = {s: sum(1 for stack in reports for r in stack.resources if r.status == s) for s in (PARTIAL, MISSING)}
    print(f"\nlocal deploy: {len(reports)} stacks {'complete' if complete else 'NOT complete'}; "
          f"{counts[PARTIAL]} resources partly applied, {counts[MISSING]} not created by the emulator")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
