"""Ground-truth labels for an endpoint's quality check.

  ./platform labels upload ENV ENDPOINT FILE

FILE is JSON Lines, one label a line: {"inferenceId": "<the InferenceId the caller passed>", "label": 1} (or
"eventId" for a request sent without one), or SageMaker Model Monitor's ground-truth form {"groundTruthData":
{"data": "1", "encoding": "CSV"}, "eventMetadata": {"eventId": "..."}, "eventVersion": "0"}. The file is checked
first (every line a label record, each id once); it then goes to the endpoint's capture bucket (read from the
endpoint's data capture configuration) under ground-truth/<endpoint name>/yyyy/mm/dd/hh/, the hour of the upload,
where the quality check reads labels until its window's lateness has passed.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from ml_platform_constructs.serving.endpoint_quality import GROUND_TRUTH_PREFIX
from ml_platform_constructs.runtime.quality import validate_labels

from ops.aws_access import environment, require_known, session_for
from ops.cli import Parser, aws_errors_in_one_line, read_text
from stacks import config as platform_config

MAX_PROBLEMS_SHOWN = 5


def quality_endpoint(env: platform_config.EnvironmentConfig, endpoint: str) -> platform_config.EndpointConfig:
    """The configured endpoint, which must have quality settings (without them nothing reads its labels)."""
    require_known("endpoint", endpoint, [e.name for e in env.endpoints], env)
    config = next(e for e in env.endpoints if e.name == endpoint)
    if config.quality is None:
        raise SystemExit(f"error: {env.name}'s endpoint {endpoint!r} has no quality settings, so nothing would read "
                         "its labels: add quality = { problem_type = \"binary\", baseline = 0.92 } to it in "
                         "config/environments.toml and deploy")
    return config


def capture_bucket(sagemaker: Any, endpoint_name: str) -> str:
    """The bucket of the endpoint's data capture (its endpoint configuration's DestinationS3Uri)."""
    config_name = sagemaker.describe_endpoint(EndpointName=endpoint_name)["EndpointConfigName"]
    capture = sagemaker.describe_endpoint_config(EndpointConfigName=config_name).get("DataCaptureConfig") or {}
    uri = capture.get("DestinationS3Uri", "")
    if not uri.startswith("s3://"):
        raise SystemExit(f"error: endpoint {endpoint_name} captures no data (its configuration {config_name} has no "
                         "DataCaptureConfig): deploy it with the platform's MonitoredEndpoint")
    return uri[len("s3://"):].split("/", 1)[0]


def label_key(endpoint_name: str, path: Path, now: datetime) -> str:
    return f"{GROUND_TRUTH_PREFIX}{endpoint_name}/{now:%Y/%m/%d/%H}/{now:%Y%m%dT%H%M%SZ}-{path.stem}.jsonl"


def upload(session: Any, endpoint_name: str, path: Path, body: bytes, now: datetime) -> str:
    bucket = capture_bucket(session.client("sagemaker"), endpoint_name)
    key = label_key(endpoint_name, path, now)
    session.client("s3").put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/jsonl")
    return f"s3://{bucket}/{key}"


@aws_errors_in_one_line
def main(argv: list[str], now: Optional[datetime] = None) -> int:
    parser = Parser("./platform labels", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("upload", help="check a label file and put it where the quality check reads it")
    up.add_argument("env")
    up.add_argument("endpoint")
    up.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    env = environment(args.env)
    quality_endpoint(env, args.endpoint)
    if not args.file.is_file():
        raise SystemExit(f"error: the label file {args.file} does not exist (JSON Lines, one "
                         '{"inferenceId": ..., "label": ...} a line)')
    text = read_text(args.file, "the label file", 'JSON Lines, one {"inferenceId": ..., "label": ...} a line')
    records, problems = validate_labels(text)
    if problems:
        for problem in problems[:MAX_PROBLEMS_SHOWN]:
            print(f"{args.file}: {problem}", file=sys.stderr)
        more = f" (first {MAX_PROBLEMS_SHOWN} above)" if len(problems) > MAX_PROBLEMS_SHOWN else " (above)"
        raise SystemExit(f"error: {args.file} has {len(problems)} problem(s){more}; nothing was uploaded. Fix: one "
                         'JSON object a line, {"inferenceId": ..., "label": ...}, each inferenceId once')
    name = f"{env.project}-{env.name}-{args.endpoint}"
    session = session_for(env)
    where = upload(session, name, args.file, text.encode("utf-8"), now or datetime.now(timezone.utc))
    print(f"{records} labels -> {where}")
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
