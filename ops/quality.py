"""An endpoint's quality check on local files: the scheduled function's join and decision, without AWS.

  ./platform quality check ENV ENDPOINT --capture DIR --labels FILE [--json]

DIR holds captured records as SageMaker writes them (JSON Lines, *.jsonl at any depth, e.g. a copy of
s3://<capture bucket>/capture/<endpoint name>/); FILE holds labels as ./platform labels upload takes them. The
settings (problem type, prediction path, baseline, sample floor, drop) are the endpoint's quality settings in
config/environments.toml. --json prints metric, value, labelled, matched, unmatched_labels, unmatched_predictions,
baseline and decision (ok, alarm, not_significant or too_few_labels), with the shortfall, its p-value and the other
counts the function stores.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ml_platform_constructs.runtime.quality import Settings, check_files

from ops.aws_access import environment
from ops.cli import Parser
from ops.labels import quality_endpoint
from stacks import config as platform_config


def settings_of(endpoint: platform_config.EndpointConfig) -> Settings:
    quality = endpoint.quality
    return Settings(problem_type=quality.problem_type, baseline=quality.baseline,
                    prediction_path=quality.prediction_path, probability_threshold=quality.probability_threshold,
                    min_labelled=quality.min_labelled, max_drop=quality.max_drop_points,
                    significance=quality.significance)


def describe(name: str, result: dict) -> str:
    value = "no labelled prediction" if result["value"] is None else f"{result['value']:.4g}"
    unit = "percent over" if result["metric"] == "MAE" else "points under"
    judged = ("not judged: fewer than the " f"{result['min_labelled']} labelled predictions needed"
              if result["shortfall"] is None else
              f"{result['shortfall']:.3g} {unit} the baseline {result['baseline']:g} (alarm from {result['max_drop']:g}"
              f"{_p_value(result)})")
    return (f"{name}: {result['metric']} {value} from {result['labelled']} labelled predictions "
            f"({result['matched']} labels matched; unmatched: {result['unmatched_labels']} labels, "
            f"{result['unmatched_predictions']} predictions; malformed: {result['malformed_records']} records, "
            f"{result['malformed_labels']} labels)\n{judged}: {result['decision'].upper()}")


def _p_value(result: dict) -> str:
    if result["p_value"] is None:
        return ", no p-value from a single error"
    return f" with a p-value of at most {result['significance']:g}; this window's: {result['p_value']:.2g}"


def main(argv: list[str]) -> int:
    parser = Parser("./platform quality", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="join local capture files with a label file and judge the quality")
    check.add_argument("env")
    check.add_argument("endpoint")
    check.add_argument("--capture", type=Path, required=True, metavar="DIR")
    check.add_argument("--labels", type=Path, required=True, metavar="FILE")
    check.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = environment(args.env)
    endpoint = quality_endpoint(env, args.endpoint)
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
    result = check_files(settings_of(endpoint), captures, [args.labels])
    print(json.dumps(result, indent=1) if args.json else describe(f"{env.project}-{env.name}-{args.endpoint}", result))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
