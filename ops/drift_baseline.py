"""Builds an endpoint's drift baseline from a sample of its training data and uploads it.

  ./platform drift-baseline ENV ENDPOINT SAMPLE.csv|SAMPLE.jsonl [--exclude label] [--bins 10]
                            [--max-categories 20] [--bucket NAME | --output FILE]

The features are the sample's columns in order (a CSV's header; a JSON Lines file's first record's keys),
which must match the order of the values in the endpoint's CSV requests. Without --bucket or --output the
baseline goes to the environment's dataset bucket (read from the Data stack's DatasetBucketName output) at
drift/baselines/<endpoint name>/baseline.json, where the drift check reads it. --output FILE writes it to a
local file instead (no AWS call, no credentials): to look at it, or to upload it yourself.

Try it on the sample (no AWS): ./platform drift-baseline dev classifier examples/decisions/train_sample.csv
--exclude label --output /tmp/baseline.json
"""

from __future__ import annotations

import json
from pathlib import Path

from ml_platform_constructs.operations.cli import baseline_from_sample, baseline_key, check_output, write_output

from ops.aws_access import environment, require_known, session_for
from ops.cli import Parser, add_drift_figures, aws_errors_in_one_line
from ops.dataset import stack_output
from stacks import config as platform_config


def endpoint_name(env: platform_config.EnvironmentConfig, endpoint: str) -> str:
    require_known("endpoint", endpoint, [e.name for e in env.endpoints], env)
    return f"{env.project}-{env.name}-{endpoint}"


@aws_errors_in_one_line
def main(argv: list[str]) -> int:
    parser = Parser("./platform drift-baseline", description=__doc__)
    parser.add_argument("env")
    parser.add_argument("endpoint")
    parser.add_argument("sample", type=Path)
    parser.add_argument("--exclude", action="append", default=[], help="a column that is not a model input")
    add_drift_figures(parser)
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--bucket", help="upload to this bucket (default: the environment's dataset bucket)")
    target.add_argument("--output", type=Path, help="write to a local file instead of uploading (no AWS call)")
    args = parser.parse_args(argv)
    env = environment(args.env)
    name = endpoint_name(env, args.endpoint)
    if not args.sample.is_file():
        state = "is a directory" if args.sample.is_dir() else "does not exist"
        raise SystemExit(f"error: the sample {args.sample} {state} (give a CSV with a header, or JSON Lines, of "
                         "training rows)")
    if args.output:
        check_output(args.output)
    baseline, features = baseline_from_sample(args.sample, args.exclude, args.bins, args.max_categories)
    body = json.dumps(baseline, indent=1)
    if args.output:
        write_output(args.output, body)
        print(f"baseline of {baseline['sample_size']} rows, {len(features)} features -> {args.output}")
        return 0
    session = session_for(env)
    bucket = args.bucket or stack_output(session.client("cloudformation"), f"{env.name}-Data", "DatasetBucketName")
    key = baseline_key(name)
    session.client("s3").put_object(Bucket=bucket, Key=key, Body=body.encode())
    print(f"baseline of {baseline['sample_size']} rows, {len(features)} features -> s3://{bucket}/{key}")
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
