"""An endpoint's quality check on local files: the scheduled function's join and decision, without AWS.

  ./platform quality check ENV ENDPOINT --capture DIR --labels FILE [--baseline VALUE --baseline-n N]
                           [--labels-per-hour R] [--json]

DIR holds captured records as SageMaker writes them (JSON Lines, *.jsonl at any depth, e.g. a copy of
s3://<capture bucket>/capture/<endpoint name>/); FILE holds labels as ./platform labels upload takes them. The
settings (problem type, prediction path, baseline and its examples, sample floor, drop, false-alarm budget) are the
endpoint's quality settings in config/environments.toml; --baseline and --baseline-n judge against another reference
(the live model's held-out score and the examples behind it: the test counts the baseline's own noise).

The joined labels are judged as one batch, as the scheduled check judges one, at the level of a batch that took as
long as these labels did (--labels-per-hour; default: all of them in one day). --json prints metric, value, labelled,
matched, unmatched_labels, unmatched_predictions, the reference (baseline, baseline_examples), decision (ok, alarm or
not_judged), shortfall, z, p_value and the plan (the batch a drop of max_drop needs at that rate), with the other
counts the function stores.

  ./platform quality acknowledge ENV ENDPOINT --reason TEXT

The deployment check's verdict on the live version (worse than its held-out score) stands, one alarm episode, until
another version goes live. An operator who has looked and keeps the version acknowledges it: the verdict is recorded
with who, when and why, the alarm returns to OK at the next run, and the batches go on against the level the version
was acknowledged at (its production labels so far, recorded as the reference "acknowledged"): a drop from there
alarms again. Without it, every batch against the held-out score would alarm again.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ml_platform_constructs.runtime.quality import Counts, Settings, check_files

from ops.aws_access import environment, session_for
from ops.cli import Parser, read_text
from ops.dataset import stack_output
from ops.labels import quality_endpoint
from stacks import config as platform_config


def settings_of(endpoint: platform_config.EndpointConfig, baseline: Optional[float] = None,
                baseline_examples: Optional[int] = None) -> Settings:
    quality = endpoint.quality
    return Settings(problem_type=quality.problem_type,
                    baseline=quality.baseline if baseline is None else baseline,
                    baseline_examples=quality.baseline_examples if baseline is None else baseline_examples,
                    prediction_path=quality.prediction_path, probability_threshold=quality.probability_threshold,
                    min_labelled=quality.min_labelled, max_drop=quality.max_drop_points,
                    false_alarms_per_90_days=quality.false_alarms_per_90_days, power=quality.power,
                    max_batch_hours=quality.max_batch_hours, reference_labels=quality.reference_labels)


def describe(name: str, result: dict) -> str:
    value = "no labelled prediction" if result["value"] is None else f"{result['value']:.4g}"
    unit = "percent over" if result["metric"] == "MAE" else "points under"
    examples = (f"measured on {result['baseline_examples']} examples" if result["baseline_examples"]
                else "taken as exact")
    if result["decision"] == "not_judged":
        judged = f"not judged: {result['reason']}"
    else:
        plan = result["plan"]
        judged = (f"{result['shortfall']:.3g} {unit} the baseline {result['baseline']:g} ({examples}): z {result['z']:.2f}"
                  f" against {result['critical_z']:.2f} (a healthy model alarms about "
                  f"{result['false_alarms_per_90_days']:g} times in 90 days); a batch at this rate catches a "
                  f"{result['max_drop']:g}-point drop with {plan['power']:.0%} power"
                  + (f", {plan['detectable_drop']:.2f} points with 90%" if plan["detectable_drop"] else ""))
    return (f"{name}: {result['metric']} {value} from {result['labelled']} labelled predictions "
            f"({result['matched']} labels matched; unmatched: {result['unmatched_labels']} labels, "
            f"{result['unmatched_predictions']} predictions; malformed: {result['malformed_records']} records, "
            f"{result['malformed_labels']} labels)\n{judged}: {result['decision'].upper()}")


def acknowledge(env: platform_config.EnvironmentConfig, endpoint: str, *, s3: Any, bucket: str, reason: str,
                caller: str, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                out: Callable[[str], None] = print) -> int:
    """Marks the live version's standing deployment-check verdict acknowledged (a conditional write: a run of the
    check that saved meanwhile makes this say "run it again")."""
    name = f"{env.project}-{env.name}-{endpoint}"
    prefix = f"quality/state/{name}/"

    def read(key: str) -> tuple[Optional[dict], Optional[str]]:
        try:
            answer = s3.get_object(Bucket=bucket, Key=key)
        except s3.exceptions.NoSuchKey:
            return None, None
        return json.loads(answer["Body"].read()), answer["ETag"]

    live, _ = read(f"{prefix}live.json")
    if not live:
        raise SystemExit(f"error: {name}'s quality check has not run yet: nothing to acknowledge")
    key = f"{prefix}state/{live['version']}/monitor.json"
    state, etag = read(key)
    deployment = ((state or {}).get("monitor") or {}).get("deployment") or {}
    if deployment.get("decision") != "alarm":
        out(f"{name}: version {live['version']} has no deployment-check verdict standing "
            f"({deployment.get('decision', 'nothing judged yet')}): nothing to acknowledge")
        return 0
    monitor = state["monitor"]
    production = Counts(**monitor["production"])
    problem_type = quality_endpoint(env, endpoint).quality.problem_type
    level = production.value(problem_type)
    deployment.update(decision="acknowledged", acknowledged={
        "by": caller, "at": now().isoformat(timespec="seconds"), "reason": reason,
        "latest_batch": (monitor.get("last") or {}).get("latest_batch"), "level": level, "labels": production.n})
    # The level it was kept at is the reference from now on (a decision recorded, not one taken by default); nothing
    # judged since: the next run publishes 0 and the alarm returns to OK.
    monitor["reference"] = {"value": level, "examples": production.n, "source": "acknowledged",
                            "spread": production.variance() ** 0.5 if problem_type == "regression" else None}
    monitor["last"] = None
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(state).encode(), IfMatch=etag)
    except s3.exceptions.ClientError as error:
        if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
            raise SystemExit(f"error: {name}'s quality check saved its state meanwhile: run this again") from None
        raise
    last = deployment.get("last") or {}
    out(f"{name}: acknowledged the deployment check's verdict on version {live['version']} "
        f"({last.get('value', 0):.4g} against the held-out {last.get('reference', 0):.4g}); the alarm returns to OK "
        f"at the next run, and batches go on against {level:.4g} on {production.n} labels")
    return 0


def main(argv: list[str]) -> int:
    parser = Parser("./platform quality", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="join local capture files with a label file and judge the quality")
    check.add_argument("env")
    check.add_argument("endpoint")
    check.add_argument("--capture", type=Path, required=True, metavar="DIR")
    check.add_argument("--labels", type=Path, required=True, metavar="FILE")
    check.add_argument("--baseline", type=float, metavar="VALUE", help="judge against this accuracy share (or MAE)")
    check.add_argument("--baseline-n", type=int, metavar="N", help="the examples --baseline was measured on")
    check.add_argument("--labels-per-hour", type=float, metavar="R",
                       help="the labels' rate: the batch's length, and so its critical value (default: a day)")
    check.add_argument("--json", action="store_true")
    ack = commands.add_parser("acknowledge", help="accept the live version after the deployment check found it worse")
    ack.add_argument("env")
    ack.add_argument("endpoint")
    ack.add_argument("--reason", required=True, help="why the version stays (recorded)")
    args = parser.parse_args(argv)
    env = environment(args.env)
    if args.command == "acknowledge":
        quality_endpoint(env, args.endpoint)
        session = session_for(env)
        bucket = stack_output(session.client("cloudformation"), f"{env.name}-Data", "DatasetBucketName")
        return acknowledge(env, args.endpoint, s3=session.client("s3"), bucket=bucket, reason=args.reason,
                           caller=session.client("sts").get_caller_identity()["Arn"])
    endpoint = quality_endpoint(env, args.endpoint)
    if args.baseline_n is not None and (args.baseline is None or args.baseline_n < 1):
        raise SystemExit(f"error: --baseline-n {args.baseline_n}: the examples --baseline was measured on, 1 or more, "
                         "with --baseline")
    if args.labels_per_hour is not None and not args.labels_per_hour > 0:
        raise SystemExit(f"error: --labels-per-hour {args.labels_per_hour}: the labels' rate, above 0")
    try:
        settings = settings_of(endpoint, args.baseline, args.baseline_n)
    except ValueError as error:
        raise SystemExit(f"error: --baseline {args.baseline}: {error}") from None
    if not args.capture.is_dir():
        raise SystemExit(f"error: --capture {args.capture} is not a directory (a copy of the endpoint's capture "
                         "prefix: <variant>/yyyy/mm/dd/hh/*.jsonl)")
    captures = sorted(args.capture.rglob("*.jsonl"))
    if not captures:
        raise SystemExit(f"error: --capture {args.capture} holds no .jsonl capture files (copy them with aws s3 sync "
                         "s3://<capture bucket>/capture/<endpoint name>/ DIR)")
    if not args.labels.is_file():
        raise SystemExit(f"error: --labels {args.labels} does not exist (JSON Lines, one "
                         '{"inferenceId": ..., "label": ...} a line)')
    read_text(args.labels, "--labels", 'JSON Lines, one {"inferenceId": ..., "label": ...} a line')
    for capture in captures:
        read_text(capture, "the capture file", "SageMaker's data capture JSON Lines")
    result = check_files(settings, captures, [args.labels], labels_per_hour=args.labels_per_hour)
    print(json.dumps(result, indent=1) if args.json else describe(f"{env.project}-{env.name}-{args.endpoint}", result))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
