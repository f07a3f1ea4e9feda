"""Builds and lists an environment's dataset snapshots in its real AWS account: the first of the two steps to a
dataset volume on a fleet's instances.

  ./platform dataset build ENV NAME VERSION --prefix datasets/NAME/ --size-gib N
  ./platform dataset list ENV

`build` starts the Data stack's snapshot runbook and prints how to follow it; when it succeeds the snapshot
id is at /<project>/<env>/datasets/NAME/VERSION/snapshot-id and fleets can mount that version (the second
step: add it to the fleet's dataset_volumes in config and deploy).
"""

from __future__ import annotations

import sys
from typing import Any

from botocore.exceptions import ClientError

from ops.aws_access import environment, session_for
from ops.cli import Parser, add_size_gib, aws_errors_in_one_line
from stacks.config import EnvironmentConfig


def stack_output(cloudformation: Any, stack_name: str, prefix: str) -> str:
    try:
        outputs = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0].get("Outputs", [])
    except ClientError as error:
        if "does not exist" not in str(error):
            raise
        raise SystemExit(f"error: stack {stack_name} does not exist in this account and Region: deploy it first "
                         f"(./platform deploy {stack_name.split('-')[0]})") from None
    for output in outputs:
        if output["OutputKey"].startswith(prefix):
            return output["OutputValue"]
    raise SystemExit(f"error: {stack_name} has no {prefix} output: deploy it first "
                     f"(./platform deploy {stack_name.split('-')[0]})")


def parameter_prefix(env: EnvironmentConfig) -> str:
    return f"/{env.project}/{env.name}/datasets/"


def build(ssm: Any, cloudformation: Any, env: EnvironmentConfig, name: str, version: str, prefix: str,
          size_gib: int) -> str:
    if not prefix.startswith("datasets/") or not prefix.endswith("/"):
        raise SystemExit(f"error: --prefix {prefix!r}: a prefix under datasets/ ending in '/', e.g. datasets/{name}/")
    if not 1 <= size_gib <= 65536:
        raise SystemExit(f"error: --size-gib {size_gib}: a gp3 size of 1-65536 GiB, at least the dataset's size")
    parameter = f"{parameter_prefix(env)}{name}/{version}/snapshot-id"
    if ssm.get_parameters(Names=[parameter])["Parameters"]:
        raise SystemExit(f"error: {name} {version} is already built ({parameter}): versions are built once; use a new version")
    bucket = stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName")
    runbook = stack_output(cloudformation, f"{env.name}-Data", "DatasetSnapshotRunbook")
    execution = ssm.start_automation_execution(DocumentName=runbook, Parameters={
        "DatasetName": [name], "Version": [version], "SourceBucket": [bucket], "SourcePrefix": [prefix],
        "SizeGiB": [str(size_gib)]})["AutomationExecutionId"]
    return (f"building {name} {version} from s3://{bucket}/{prefix} on a {size_gib} GiB volume: execution {execution}\n"
            f"follow it: aws ssm get-automation-execution --automation-execution-id {execution}")


def listing(ssm: Any, env: EnvironmentConfig) -> list[str]:
    lines = []
    pages = ssm.get_paginator("get_parameters_by_path").paginate(Path=parameter_prefix(env), Recursive=True)
    for page in pages:
        for parameter in page["Parameters"]:
            dataset, version = parameter["Name"].removeprefix(parameter_prefix(env)).split("/")[:2]
            lines.append(f"{dataset} {version}: {parameter['Value']}")
    return sorted(lines) or [f"{env.name}: no dataset snapshots built yet"]


def missing_volumes(ssm: Any, env: EnvironmentConfig) -> list[str]:
    """The configured fleets' dataset volumes whose snapshot was not built: the command that builds each."""
    missing = []
    for fleet in env.fleets:
        for volume in fleet.dataset_volumes:
            name = f"{parameter_prefix(env)}{volume.name}/{volume.version}/snapshot-id"
            if not ssm.get_parameters(Names=[name])["Parameters"]:
                missing.append(f"fleet {fleet.name} mounts {volume.name} {volume.version}, not built yet: "
                               f"./platform dataset build {env.name} {volume.name} {volume.version} "
                               f"--prefix datasets/{volume.name}/ --size-gib {volume.size_gib}")
    return missing


@aws_errors_in_one_line
def main(argv: list[str]) -> int:
    parser = Parser("./platform dataset", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="build an EBS snapshot of a datasets/ prefix")
    for name in ("env", "name", "version"):
        build_parser.add_argument(name)
    build_parser.add_argument("--prefix", required=True)
    add_size_gib(build_parser)
    commands.add_parser("list", help="the dataset snapshot versions built").add_argument("env")
    args = parser.parse_args(argv)
    env = environment(args.env)
    session = session_for(env)
    if args.command == "build":
        print(build(session.client("ssm"), session.client("cloudformation"), env, args.name, args.version, args.prefix,
                    args.size_gib))
    else:
        print("\n".join(listing(session.client("ssm"), env)))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
