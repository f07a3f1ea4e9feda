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
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from ml_platform_constructs.runtime.quality import Settings, check_files

from ops.aws_access import environment
from ops.cli import Parser
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
    args = parser.parse_args(argv)
    env = environment(args.env)
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
    result = check_files(settings, captures, [args.labels], labels_per_hour=args.labels_per_hour)
    print(json.dumps(result, indent=1) if args.json else describe(f"{env.project}-{env.name}-{args.endpoint}", result))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
