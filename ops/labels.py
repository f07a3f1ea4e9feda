"""Ground-truth labels for an endpoint's quality check.

  ./platform labels upload ENV ENDPOINT FILE

FILE is JSON Lines, one label a line: {"inferenceId": "<the InferenceId the caller passed>", "label": 1} (or
"eventId" for a request sent without one), or SageMaker Model Monitor's ground-truth form {"groundTruthData":
{"data": "1", "encoding": "CSV"}, "eventMetadata": {"eventId": "..."}, "eventVersion": "0"}. The file is checked
first, as ./platform quality check checks its --labels: every line a label record, each id once, each label one the
check can score (a number, or a class name for a classifier; 0 or 1 for a binary one; no NaN, null or empty text).
A sample file: examples/decisions/labels.jsonl. It then goes to the endpoint's capture bucket (read from the endpoint's data capture configuration) under
ground-truth/<endpoint name>/yyyy/mm/dd/hh/, the hour of the upload, where the quality check reads labels until its
window's lateness has passed.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn, Optional

from ml_platform_constructs.runtime.decisions.quality import GROUND_TRUTH_PREFIX, label_of, validate_labels

from ops.aws_access import environment, require_known, session_for
from ops.cli import Parser, aws_errors_in_one_line, read_text
from stacks import config as platform_config

MAX_PROBLEMS_SHOWN = 3
LABEL_FORM = 'JSON Lines, one {"inferenceId": ..., "label": ...} a line'


def label_value_problem(value: Any, problem_type: str) -> Optional[str]:
    """Why one label cannot be scored by an endpoint's quality check of ``problem_type``, or None: a regression's
    label is its true value (a finite number); a binary one's 0 or 1, or a class name; a multiclass one's a number
    or a class name. NaN, infinities, null, empty text and objects are no label (a missing truth is left out)."""
    if value is None:
        return "a null label (leave the line out until the truth is known)"
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'list'} where a label goes"
    if isinstance(value, bool):
        return None if problem_type != "regression" else f"{json.dumps(value)} is no number (a regression's label)"
    text = value.strip() if isinstance(value, str) else None
    if text == "":
        return "an empty label"
    try:
        number: Optional[float] = float(value)
    except (TypeError, ValueError):
        number = None
    if number is not None and not math.isfinite(number):
        return f"{value!r} is no label (a missing value? leave the line out until the truth is known)"
    if number is None and problem_type == "regression":
        return f"{value!r} is no number (a regression's label is its true value)"
    if number is not None and problem_type == "binary" and number not in (0, 1):
        return f"{value!r} is no binary class (0 or 1)"
    return None


def check_labels(text: str, problem_type: str) -> tuple[int, list[str]]:
    """``(records, problems)`` of a label file for an endpoint whose quality check is of ``problem_type``: every line
    a label record and each id once (the check's own ``validate_labels``), and every label one the check can score
    (``label_value_problem``). ``labels upload`` and ``quality check --labels`` both refuse a file with problems."""
    records, problems = validate_labels(text)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            _, values = label_of(json.loads(line))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # validate_labels has named it
        found = next((problem for problem in (label_value_problem(v, problem_type) for v in values) if problem), None)
        if found:
            problems.append(f"line {number}: {found}")
    return records, sorted(problems, key=_line_of)


def _line_of(problem: str) -> int:
    """A problem's line number ("line 7: ..."); a problem of the whole file comes last."""
    head = problem.split(":", 1)[0]
    return int(head[5:]) if head.startswith("line ") and head[5:].isdigit() else 1 << 62


def refuse_labels(path: Path, what: str, records: int, problems: list[str], consequence: str) -> NoReturn:
    """One line: how many problems, the first few, what did not happen, and what a label file holds."""
    more = f"; {len(problems) - MAX_PROBLEMS_SHOWN} more" if len(problems) > MAX_PROBLEMS_SHOWN else ""
    raise SystemExit(f"error: {what} {path} has {len(problems)} problem(s) in {records} line(s) "
                     f"({'; '.join(problems[:MAX_PROBLEMS_SHOWN])}{more}); {consequence}. Fix: {LABEL_FORM}, each "
                     "inferenceId once, each label a number or class name")


def quality_endpoint(env: platform_config.EnvironmentConfig, endpoint: str) -> platform_config.EndpointConfig:
    """The configured endpoint, which must have quality settings (without them nothing reads its labels)."""
    require_known("endpoint", endpoint, [e.name for e in env.endpoints], env)
    config = next(e for e in env.endpoints if e.name == endpoint)
    if config.quality is None:
        raise SystemExit(f"error: {env.name}'s endpoint {endpoint!r} has no quality settings, so nothing would read "
                         "its labels: add quality = { problem_type = \"binary\", baseline = 0.92 } to it in "
                         "config/environments.toml and deploy")
    return config


def read_label_file(path: Path, what: str) -> str:
    """A label file's text, or one line: it does not exist, is a directory, is not text."""
    if not path.is_file():
        raise SystemExit(f"error: {what} {path} {'is a directory' if path.is_dir() else 'does not exist'} "
                         f"({LABEL_FORM})")
    return read_text(path, what, LABEL_FORM)


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
    config = quality_endpoint(env, args.endpoint)
    text = read_label_file(args.file, "the label file")
    records, problems = check_labels(text, config.quality.problem_type)
    if problems:
        refuse_labels(args.file, "the label file", records, problems, "nothing was uploaded")
    name = f"{env.project}-{env.name}-{args.endpoint}"
    session = session_for(env)
    where = upload(session, name, args.file, text.encode("utf-8"), now or datetime.now(timezone.utc))
    print(f"{records} labels -> {where}")
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
