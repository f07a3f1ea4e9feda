"""An endpoint's drift check on local files: the scheduled function's own code and decision, without AWS.

  ./platform drift check ENV ENDPOINT --baseline FILE --capture DIR [--json]

FILE is the endpoint's drift baseline (./platform drift-baseline ENV ENDPOINT SAMPLE.csv --output FILE, or a copy of
s3://<dataset bucket>/drift/baselines/<endpoint name>/baseline.json); DIR holds captured records as SageMaker
writes them (JSON Lines, *.jsonl at any depth, e.g. a copy of s3://<capture bucket>/capture/<endpoint name>/). The
thresholds are the endpoint's (psi_threshold 0.25; each check's level is the scheduled check's, 0.25 false alarms in
90 days of hourly checks; the feature watch's band and points).

The decision: a feature drifted when its shift is both real (chi-square against the baseline, at that level over the
features judged) and large (its PSI, corrected for its small-sample bias, at least the threshold by its own sampling
noise: the lower bound); a feature with too few values (10 expected in its smallest bin) is not judged. --json
prints alarm, judged, reason, drifted, each feature's score (n, psi, psi_corrected, psi_lower, detectable_psi, kl,
chi2, p_value, significant, or judged false and why) and the feature watch, as the function stores them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ml_platform_constructs.runtime import drift, drift_handler

from ops.aws_access import environment, require_known
from ops.cli import Parser, read_text
from stacks import config as platform_config


def thresholds_of(endpoint: platform_config.EndpointConfig) -> drift.Thresholds:
    watch = endpoint.feature_watch
    return drift.Thresholds(spread_low=watch.std_ratio_low, spread_high=watch.std_ratio_high,
                            explained_change=watch.explained_variance_drop_points)


def describe(name: str, decision: dict, records: int) -> str:
    lines = [f"{name}: {records} records; {decision['features_judged']} feature(s) judged: "
             f"{'DRIFT' if decision['alarm'] else 'not judged' if not decision['judged'] else 'no drift'}"]
    for feature, score in sorted(decision["scores"].items()):
        if score["judged"]:
            flag = "drifted" if feature in decision["drifted"] else "significant, not above the threshold" \
                if score["significant"] else "calm"
            lines.append(f"  {feature}: PSI {score['psi']:.3f}, corrected {score['psi_corrected']:.3f} >= "
                         f"{score['psi_lower']:.3f}, p {score['p_value']:.2g} ({flag})")
        else:
            lines.append(f"  {feature}: not judged ({score['reason']})")
    lines += [f"  {feature}: not judged (no values)" for feature in sorted(decision["features_not_judged"])
              if feature not in decision["scores"]]
    watch = decision["feature_watch"]
    if decision["spread_out_of_band"]:
        lines.append(f"feature watch: spread out of band: {', '.join(decision['spread_out_of_band'])}")
    if watch["correlation_changes"]:
        lines.append(f"feature watch: correlations changed: {', '.join(watch['correlation_changes'])}")
    if watch["pca_inactive"]:
        lines.append(f"feature watch: relations not judged ({watch['pca_inactive']})")
    lines.append(decision["reason"])
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = Parser("./platform drift", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="judge local capture files against a drift baseline")
    check.add_argument("env")
    check.add_argument("endpoint")
    check.add_argument("--baseline", type=Path, required=True, metavar="FILE")
    check.add_argument("--capture", type=Path, required=True, metavar="DIR")
    check.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = environment(args.env)
    require_known("endpoint", args.endpoint, [e.name for e in env.endpoints], env)
    endpoint = next(e for e in env.endpoints if e.name == args.endpoint)
    if not args.baseline.is_file():
        raise SystemExit(f"error: --baseline {args.baseline} does not exist (build one: ./platform drift-baseline "
                         f"{args.env} {args.endpoint} SAMPLE.csv --output {args.baseline})")
    try:
        baseline = json.loads(read_text(args.baseline, "--baseline", "a drift baseline (./platform drift-baseline)"))
        baseline["features"], baseline["feature_order"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise SystemExit(f"error: --baseline {args.baseline} is not a drift baseline (build one with ./platform "
                         "drift-baseline)") from None
    if not args.capture.is_dir():
        raise SystemExit(f"error: --capture {args.capture} is not a directory (a copy of the endpoint's capture "
                         "prefix: <variant>/yyyy/mm/dd/hh/*.jsonl)")
    captures = sorted(args.capture.rglob("*.jsonl"))
    if not captures:
        raise SystemExit(f"error: --capture {args.capture} holds no .jsonl capture files (copy them with aws s3 sync "
                         "s3://<capture bucket>/capture/<endpoint name>/ DIR)")
    window, decision, _ = drift_handler.check(
        baseline, (read_text(path, "the capture file", "SageMaker's data capture JSON Lines") for path in captures),
        thresholds_of(endpoint))
    summary = {"records_read": window.records, "records_malformed": window.malformed,
               "missing_values": window.missing_values, **decision}
    print(json.dumps(summary, indent=1) if args.json else
          describe(f"{env.project}-{env.name}-{args.endpoint}", decision, window.records))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
