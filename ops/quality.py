"""An endpoint's quality check on local files: the scheduled function's join and decision, without AWS.

  ./platform quality check ENV ENDPOINT --capture DIR --labels FILE [--baseline VALUE --baseline-n N]
                           [--labels-per-hour R] [--json]

Try it on the samples: ./platform quality check dev classifier --capture examples/decisions/capture/steady
--labels examples/decisions/labels.jsonl

DIR holds captured records as SageMaker writes them (JSON Lines, *.jsonl at any depth, e.g. a copy of
s3://<capture bucket>/capture/<endpoint name>/); FILE holds labels as ./platform labels upload takes them. The
settings (problem type, prediction path, baseline and its examples, sample floor, drop, false-alarm budget) are the
endpoint's quality settings in config/environments.toml; --baseline and --baseline-n judge against another reference
(the live model's held-out score and the examples behind it: the test counts the baseline's own noise).

The labels are checked first as ./platform labels upload checks them (a line that is no label record, an id twice, a
label the check cannot score: NaN, null, 2 for a binary endpoint): such a file is refused in one line. The joined
labels are judged as one batch, as the scheduled check judges one, at the level of a batch that took as long as these
labels did (--labels-per-hour; default: all of them in one day). What it could not use is counted and named, in
words as in --json: capture records it cannot read (records_unusable) and labels it cannot compare with their
predictions (pairs_unusable), each reason with its count and first place; a capture of no readable record is an
error. --json prints metric, value, labelled, matched, unmatched_labels, unmatched_predictions, the reference
(baseline, baseline_examples), decision (ok, alarm or not_judged), reason, shortfall, z, p_value and the plan (the
batch a drop of max_drop needs at that rate), with the other counts the function stores. Exit: 0 OK, 3 ALARM,
4 NOT JUDGED (too few labelled predictions), 1 an error, 2 a bad argument.

  ./platform quality acknowledge ENV ENDPOINT --reason TEXT

The deployment check's verdict on the live version (worse than its held-out score) stands, one alarm episode, until
another version goes live. An operator who has looked and keeps the version acknowledges it: the verdict is recorded
with who, when and why, the alarm returns to OK at the next run, and the batches go on against the level the version
was acknowledged at (its production labels so far, recorded as the reference "acknowledged"): a drop from there
alarms again. Without it, every batch against the held-out score would alarm again.
"""

from __future__ import annotations

import json
import math
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ml_platform_constructs.runtime.decisions import capture
from ml_platform_constructs.runtime.decisions.quality import Counts, Settings, check_files, join_files, predictions_of, scores_of

from ops.aws_access import environment, session_for
from ops.cli import Parser, read_text, verdict_exit
from ops.dataset import stack_output
from ops.labels import check_labels, quality_endpoint, read_label_file, refuse_labels
from stacks import config as platform_config

WIDTH = 100
VERDICTS = {"ok": True, "alarm": False}  # any other decision (not_judged, filling): not judged


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


def prediction_reader(settings: Settings) -> Callable[[dict], Any]:
    """What the check takes from a captured record (``Join.add_capture_line``'s steps): its key and predictions."""
    def read(record: dict) -> list:
        values = predictions_of(record["captureData"]["endpointOutput"], settings.prediction_path)
        if not any(capture.event_keys(record)):
            raise ValueError("no inferenceId or eventId in its eventMetadata: nothing to join a label on")
        return values
    return read


def unusable_records(settings: Settings, captures: list[Path], root: Path) -> capture.Unusable:
    """The capture records the check could not read, each with why and where (a second pass, over files read
    already: only when the check counted some)."""
    unusable = capture.Unusable()
    read = prediction_reader(settings)
    for path in captures:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            problem = capture.record_problem(line, read) if line.strip() else None
            if problem:
                unusable.add(problem, f"{path.relative_to(root)}:{number}")
    return unusable


def unusable_pairs(settings: Settings, captures: list[Path], labels: Path) -> capture.Unusable:
    """The labelled predictions the check could not score, each with why and where (its id): a label for another
    number of rows than the request had, or one that cannot be compared with its prediction."""
    join = join_files(settings, captures, [labels])
    unusable = capture.Unusable()
    for key, values in join.labels.items():
        predicted = join.predictions.get(key)
        if predicted is None or scores_of(settings, predicted, values) is not None:
            continue
        if len(predicted) != len(values):
            unusable.add(f"{len(values)} label(s) for a request of {len(predicted)} prediction(s)", key)
        else:
            pair = next((p, v) for p, v in zip(predicted, values) if scores_of(settings, [p], [v]) is None)
            unusable.add("a label that cannot be compared with its prediction (a class name against a number)",
                         f"{key}: {pair[1]!r} against {pair[0]!r}")
    return unusable


def _unmatched(result: dict) -> str:
    if result["matched"] or not result["unmatched_labels"]:
        return ""
    return (f": none of the {result['unmatched_labels']} labels' ids is a captured record's inferenceId or eventId "
            f"({result['unmatched_predictions']} captured)")


def describe(name: str, result: dict) -> str:
    metric, labelled = result["metric"], result["labelled"]
    head = (f"{name}: no {metric}: {labelled} labelled predictions" if result["value"] is None
            else f"{name}: {metric} {result['value']:.4g} from {labelled} labelled predictions")
    lines = [head, f"  labels: {result['matched'] + result['unmatched_labels']} read, {result['matched']} matched a "
                   f"captured prediction, {result['unmatched_labels']} matched none",
             f"  predictions: {result['matched'] + result['unmatched_predictions']} captured, "
             f"{result['unmatched_predictions']} without a label"
             + (f", {result['duplicate_predictions']} captured again (the later kept)"
                if result.get("duplicate_predictions") else "")]
    for key, what in (("records_unusable", "capture record(s)"), ("pairs_unusable", "labelled prediction(s)")):
        found = result.get(key) or {}
        if found.get("count"):
            text = "; ".join(f"{r['records']} {r['reason']} (first: {r['first']})" for r in found["reasons"][:3])
            lines += textwrap.wrap(f"  unusable: {found['count']} {what}, not counted: {text}", WIDTH,
                                   subsequent_indent="    ")
    unit = "percent over" if metric == "MAE" else "points under"
    examples = (f"measured on {result['baseline_examples']} examples" if result["baseline_examples"]
                else "taken as exact")
    if result["decision"] in VERDICTS:
        plan = result["plan"]
        judged = (f"{result['shortfall']:.3g} {unit} the baseline {result['baseline']:g} ({examples}): z "
                  f"{result['z']:.2f} against {result['critical_z']:.2f} (a healthy model alarms about "
                  f"{result['false_alarms_per_90_days']:g} times in 90 days); a batch at this rate catches a "
                  f"{result['max_drop']:g}-point drop with {plan['power']:.0%} power"
                  + (f", {plan['detectable_drop']:.2f} points with 90%" if plan["detectable_drop"] else ""))
    else:
        judged = f"not judged: {result['reason']}"
    lines += textwrap.wrap(f"{judged}: {result['decision'].upper().replace('_', ' ')}", WIDTH)
    return "\n".join(lines)


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
    check = commands.add_parser("check", help="join local capture files with a label file and judge the quality",
                                epilog="Try it on the samples: ./platform quality check dev classifier --capture "
                                       "examples/decisions/capture/steady --labels examples/decisions/labels.jsonl")
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
        check.error(f"--baseline-n {args.baseline_n}: the examples --baseline was measured on, 1 or more, with "
                    "--baseline")
    if args.baseline is not None and not math.isfinite(args.baseline):
        check.error(f"--baseline {args.baseline}: an accuracy share (0 to 1) or an MAE, a finite number")
    if args.labels_per_hour is not None and not (args.labels_per_hour > 0 and math.isfinite(args.labels_per_hour)):
        check.error(f"--labels-per-hour {args.labels_per_hour}: the labels' rate per hour, a number above 0 (e.g. 50)")
    try:
        settings = settings_of(endpoint, args.baseline, args.baseline_n)
    except ValueError as error:
        check.error(f"--baseline {args.baseline}: {error}")
    if not args.capture.is_dir():
        raise SystemExit(f"error: --capture {args.capture} is not a directory (a copy of the endpoint's capture "
                         "prefix: <variant>/yyyy/mm/dd/hh/*.jsonl)")
    captures = sorted(path for path in args.capture.rglob("*.jsonl") if path.is_file())
    if not captures:
        raise SystemExit(f"error: --capture {args.capture} holds no .jsonl capture files (copy them with aws s3 sync "
                         "s3://<capture bucket>/capture/<endpoint name>/ DIR)")
    # The labels as labels upload checks them (one function): a file it would refuse is not judged either.
    records, problems = check_labels(read_label_file(args.labels, "--labels"), settings.problem_type)
    if problems:
        refuse_labels(args.labels, "--labels", records, problems, "nothing was judged")
    for path in captures:
        read_text(path, "the capture file", "SageMaker's data capture JSON Lines")
    result = check_files(settings, captures, [args.labels], labels_per_hour=args.labels_per_hour)
    unusable = unusable_records(settings, captures, args.capture) if result["malformed_records"] else capture.Unusable()
    if not result["matched"] + result["unmatched_predictions"]:  # no prediction read: not a clean "not judged"
        found = unusable.summary(2) if unusable.count else f"its {len(captures)} .jsonl file(s) hold no records"
        raise SystemExit(f"error: --capture {args.capture}: no record the check can use; {found}: give SageMaker's "
                         f"data capture of {args.endpoint} (its responses' prediction at prediction_path "
                         f"{settings.prediction_path!r}, each record with an inferenceId or eventId)")
    pairs = unusable_pairs(settings, captures, args.labels) if result["unusable_pairs"] else capture.Unusable()
    result = {**result, "records_unusable": unusable.to_json(), "pairs_unusable": pairs.to_json()}
    if result["decision"] not in VERDICTS and not result["labelled"]:
        result["reason"] += _unmatched(result) or (f": the {pairs.count} labelled prediction(s) cannot be scored"
                                                   if pairs.count else "")
    print(json.dumps(result, indent=1) if args.json else describe(f"{env.project}-{env.name}-{args.endpoint}", result))
    return verdict_exit(VERDICTS.get(result["decision"]))


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
