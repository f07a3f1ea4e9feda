"""An endpoint's drift check on local files: the scheduled function's own code and decision, without AWS.

  ./platform drift check ENV ENDPOINT --baseline FILE --capture DIR [--json]

Try it on the samples: ./platform drift check dev classifier --baseline examples/decisions/baseline.json
--capture examples/decisions/capture/shifted (or capture/steady: no drift).

FILE is the endpoint's drift baseline (./platform drift-baseline ENV ENDPOINT SAMPLE.csv --output FILE, or a copy of
s3://<dataset bucket>/drift/baselines/<endpoint name>/baseline.json); DIR holds captured records as SageMaker
writes them (JSON Lines, *.jsonl at any depth, e.g. a copy of s3://<capture bucket>/capture/<endpoint name>/). The
thresholds are the endpoint's (psi_threshold 0.25; each check's level is the scheduled check's, 0.25 false alarms in
90 days of hourly checks; the feature watch's band and points).

The decision: a feature drifted when its shift is both real (chi-square against the baseline, at that level over the
features judged) and large (its PSI, corrected for its small-sample bias, at least the threshold by its own sampling
noise: the lower bound); a feature with too few values (10 expected in its smallest bin) is not judged. A captured
record the check cannot use (not JSON, not data capture, a request of another number of values than the baseline's
features) is counted and named, in words as in --json (records_unusable: each reason, how many, the first place); a
capture of no usable record is an error. --json prints alarm, judged, reason, drifted, each feature's score (n, psi,
psi_corrected, psi_lower, detectable_psi, kl, chi2, p_value, significant, or judged false and why) and the feature
watch, as the function stores them. Exit: 0 no drift, 3 DRIFT, 4 not judged, 1 an error, 2 a bad argument.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Callable, Optional

from ml_platform_constructs.runtime.decisions import capture, drift

from ops.aws_access import environment, require_known
from ops.cli import Parser, read_text, verdict_exit
from stacks import config as platform_config

WIDTH = 100
REBUILD = "build one with ./platform drift-baseline ENV ENDPOINT SAMPLE.csv --output FILE"


def thresholds_of(endpoint: platform_config.EndpointConfig) -> drift.Thresholds:
    watch = endpoint.feature_watch
    return drift.Thresholds(spread_low=watch.std_ratio_low, spread_high=watch.std_ratio_high,
                            explained_change=watch.explained_variance_drop_points)


def baseline_problem(baseline: Any) -> Optional[str]:
    """What keeps a parsed file from being a drift baseline the check can read, or None."""
    if not isinstance(baseline, dict):
        return f"a JSON {capture.json_type(baseline)}, not a baseline object"
    features, order = baseline.get("features"), baseline.get("feature_order")
    if not isinstance(features, dict) or not features:
        return "no features"
    if not isinstance(order, list) or sorted(map(str, order)) != sorted(features):
        return "its feature_order is not its features"
    for name, spec in features.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind not in ("numeric", "categorical") or not isinstance(spec.get("counts"), list) or not isinstance(
                spec.get("edges" if kind == "numeric" else "categories"), list):
            return f"feature {name!r} is not a numeric or categorical feature's bins"
    return None


def read_baseline(path: Path) -> dict:
    try:
        baseline = json.loads(read_text(path, "--baseline", "a drift baseline (./platform drift-baseline)"))
    except json.JSONDecodeError as error:
        raise SystemExit(f"error: --baseline {path} is not a drift baseline (not JSON: {error.msg}, line "
                         f"{error.lineno}): {REBUILD}") from None
    problem = baseline_problem(baseline)
    if problem:
        raise SystemExit(f"error: --baseline {path} is not a drift baseline ({problem}): {REBUILD}")
    return baseline


def request_rows(baseline: dict) -> Callable[[dict], list]:
    """What the check takes from a captured record: its request's rows (``drift.Window.add_record``'s steps), raising
    what it cannot use."""
    def read(record: dict) -> list:
        captured = record["captureData"]["endpointInput"]
        return drift.decode_input(captured["data"], captured.get("encoding", "CSV"),
                                  captured.get("observedContentType", ""), baseline["feature_order"])
    return read


def judge(baseline: dict, captures: list[Path], root: Path,
          thresholds: drift.Thresholds) -> tuple[drift.Window, dict, capture.Unusable]:
    """The scheduled check's own code (``drift_handler.check``: each record into a ``drift.Window``, then
    ``drift.decide``) on every capture file, with each record it could not use named: why, and where."""
    window = drift.Window(baseline)
    unusable = capture.Unusable()
    read = request_rows(baseline)
    for path in captures:
        text = read_text(path, "the capture file", "SageMaker's data capture JSON Lines")
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            records, malformed = window.records, window.malformed
            window.add_record(line)
            if window.malformed > malformed:
                unusable.add(capture.record_problem(line, read) or "not a record the check reads",
                             f"{path.relative_to(root)}:{number}")
            elif window.records == records:
                unusable.add("a request of no rows", f"{path.relative_to(root)}:{number}")
    return window, drift.decide(window, thresholds), unusable


def verdict(decision: dict) -> Optional[bool]:
    """For (no drift), against (drift) or None (not judged)."""
    return False if decision["alarm"] else None if not decision["judged"] else True


def describe(name: str, decision: dict, records: int, unusable: Optional[capture.Unusable] = None) -> str:
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
    if unusable is not None and unusable.count:
        lines += textwrap.wrap(f"{unusable.summary()}; not in the counts above", WIDTH, subsequent_indent="  ")
    lines.append(decision["reason"])
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = Parser("./platform drift", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="judge local capture files against a drift baseline",
                                epilog="Try it on the samples: ./platform drift check dev classifier --baseline "
                                       "examples/decisions/baseline.json --capture examples/decisions/capture/shifted")
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
        raise SystemExit(f"error: --baseline {args.baseline} "
                         f"{'is a directory' if args.baseline.is_dir() else 'does not exist'} (build one: "
                         f"./platform drift-baseline {args.env} {args.endpoint} SAMPLE.csv --output {args.baseline})")
    baseline = read_baseline(args.baseline)
    if not args.capture.is_dir():
        raise SystemExit(f"error: --capture {args.capture} is not a directory (a copy of the endpoint's capture "
                         "prefix: <variant>/yyyy/mm/dd/hh/*.jsonl)")
    captures = sorted(path for path in args.capture.rglob("*.jsonl") if path.is_file())
    if not captures:
        raise SystemExit(f"error: --capture {args.capture} holds no .jsonl capture files (copy them with aws s3 sync "
                         "s3://<capture bucket>/capture/<endpoint name>/ DIR)")
    try:
        window, decision, unusable = judge(baseline, captures, args.capture, thresholds_of(endpoint))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as error:
        # Each record's own faults are counted by the check: what fails here is the baseline's content.
        raise SystemExit(f"error: --baseline {args.baseline} cannot be judged against ({type(error).__name__}: "
                         f"{' '.join(str(error).split())}): {REBUILD}") from None
    if window.records == 0:  # not a clean "not judged": nothing in these files is what the check reads
        found = unusable.summary(2) if unusable.count else f"its {len(captures)} .jsonl file(s) hold no records"
        order = baseline["feature_order"]
        raise SystemExit(f"error: --capture {args.capture}: no record the check can use; {found}: give SageMaker's "
                         f"data capture of {args.endpoint}, whose requests have the baseline's {len(order)} features "
                         f"({', '.join(map(str, order[:6]))}{', ...' if len(order) > 6 else ''})")
    summary = {"records_read": window.records, "records_malformed": window.malformed,
               "records_unusable": unusable.to_json(), "missing_values": window.missing_values, **decision}
    print(json.dumps(summary, indent=1) if args.json else
          describe(f"{env.project}-{env.name}-{args.endpoint}", decision, window.records, unusable))
    return verdict_exit(verdict(decision))


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
