"""Recorded training runs: their passports, metrics, cost and cost per accuracy point.

  ./platform runs list ENV|--local [--json]
  ./platform runs show ENV|--local RUN_ID [--json]

ENV reads the environment's SageMaker MLflow (the Data stack's MlflowTrackingUri output; AWS credentials of ENV's
account, checked first; the sagemaker-mlflow plugin signs the calls). --local reads the local store that
``./platform up``'s example run writes to (.ml-platform/mlflow.db, SQLite, git-ignored).

``show --json`` prints the run record: ``run_id``, ``run_name``, ``experiment``, ``status``, ``passport`` (seed,
git_commit, image, python, packages, frameworks, gpu, instance_type, lifecycle, queue, job_id, attempts, dataset,
params, environment, ...), ``metrics``, ``cost_usd``, ``spot_interruptions``, ``usd_per_accuracy_point``,
``usd_per_million_tokens``, ``improves_on``, ``model_uri`` and ``promotions`` (the gate's decisions).
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from ml_platform_constructs.runtime.tracking import PROMOTION_TAG_PREFIX, RECORD_NAME, TAG_PREFIX

from ops.cli import Parser

ROOT = Path(__file__).resolve().parent.parent
LOCAL_STORE = ROOT / ".ml-platform"
LIST_LIMIT = 50
SUMMARY_KEYS = ("cost_usd", "spot_interruptions", "usd_per_accuracy_point", "usd_per_million_tokens", "improves_on",
                "accuracy_points", "cost_note", "model_uri", "created_at", "finished_at")


class RunsError(SystemExit):
    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


def local_tracking_uri(store: Path = LOCAL_STORE) -> str:
    return f"sqlite:///{store / 'mlflow.db'}"


def environment_tracking_uri(env: Any, session: Any) -> str:
    """The environment's MLflow ARN, from its Data stack's output."""
    from ops.dataset import stack_output

    return stack_output(session.client("cloudformation"), f"{env.name}-Data", "MlflowTrackingUri")


def open_store(target: str, *, local_store: Optional[Path] = None) -> tuple[Any, str]:
    """(MlflowClient, where) for ``--local`` or an environment name; every check before the first MLflow call."""
    local_store = local_store or LOCAL_STORE
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise RunsError("mlflow is not installed in this environment: run ./platform setup") from None
    if target == "--local":
        if not (local_store / "mlflow.db").exists():
            raise RunsError(f"no local runs yet ({local_store / 'mlflow.db'} does not exist): ./platform up runs the "
                            "example training job into it")
        uri = local_tracking_uri(local_store)
        return MlflowClient(uri), f"the local store ({uri})"
    from ops.aws_access import environment, session_for

    env = environment(target)
    session = session_for(env)
    uri = environment_tracking_uri(env, session)
    return MlflowClient(uri), f"{env.name}'s SageMaker MLflow ({uri})"


def run_record(client: Any, run_id: str) -> dict:
    """The run record of ``runs show --json``: the passport artifact, with MLflow's latest metrics and status and
    the promotion decisions recorded in its tags."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise RunsError(f"no run {run_id} in this store (./platform runs list shows the runs)") from None
    record: dict = {}
    with tempfile.TemporaryDirectory() as directory:
        try:
            record = json.loads(Path(client.download_artifacts(run_id, RECORD_NAME, directory)).read_text())
        except (MlflowException, OSError, ValueError):
            pass  # a run logged without the job-contract helper: MLflow's own data only
    experiment = client.get_experiment(run.info.experiment_id)
    tags = run.data.tags
    promotions = sorted((json.loads(v) for k, v in tags.items() if k.startswith(PROMOTION_TAG_PREFIX)),
                        key=lambda d: d.get("at", ""))
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "experiment": experiment.name if experiment else None,
        "status": run.info.status,
        "started_at": _time(run.info.start_time),
        "passport": record.get("passport", {}),
        "metrics": {**record.get("metrics", {}), **run.data.metrics},
        **{key: record.get(key) for key in SUMMARY_KEYS},
        "tags": {k: v for k, v in tags.items() if k.startswith(TAG_PREFIX) and not k.startswith(PROMOTION_TAG_PREFIX)},
        "promotions": promotions,
    }


def _time(millis: Optional[int]) -> Optional[str]:
    return datetime.fromtimestamp(millis / 1000, timezone.utc).isoformat(timespec="seconds") if millis else None


def list_runs(client: Any, limit: int = LIST_LIMIT) -> list[dict]:
    """The newest runs of every experiment, one summary each."""
    experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    if not experiments:
        return []
    runs = client.search_runs(list(experiments), max_results=limit, order_by=["attributes.start_time DESC"])
    return [{"run_id": r.info.run_id, "run_name": r.info.run_name, "experiment": experiments[r.info.experiment_id],
             "status": r.info.status, "started_at": _time(r.info.start_time),
             "holdout_accuracy": r.data.metrics.get("holdout_accuracy"), "cost_usd": r.data.metrics.get("cost_usd"),
             "usd_per_accuracy_point": r.data.metrics.get("usd_per_accuracy_point"),
             "attempts": r.data.tags.get(f"{TAG_PREFIX}attempts")} for r in runs]


def _number(value: Optional[float], digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def format_list(runs: list[dict], where: str) -> str:
    if not runs:
        return f"No runs in {where} yet."
    lines = [f"Runs in {where}, newest first:",
             f"  {'run id':<32}  {'name':<24} {'experiment':<12} {'status':<9} {'attempts':>8} {'holdout acc':>11} "
             f"{'cost USD':>10} {'USD/point':>10}  started"]
    for r in runs:
        lines.append(f"  {r['run_id']:<32}  {(r['run_name'] or '')[:24]:<24} {(r['experiment'] or '')[:12]:<12} "
                     f"{r['status']:<9} {r['attempts'] or '-':>8} {_number(r['holdout_accuracy'], 4):>11} "
                     f"{_number(r['cost_usd'], 4):>10} {_number(r['usd_per_accuracy_point'], 4):>10}  "
                     f"{r['started_at'] or '-'}")
    return "\n".join(lines)


def format_record(record: dict) -> str:
    p = record["passport"]
    lines = [f"Run {record['run_id']} ({record['run_name']}, experiment {record['experiment']}): {record['status']}"]
    if p:
        commit = p.get("git_commit") or {}
        image = p.get("image") or {}
        gpu = p.get("gpu") or {}
        frameworks = ", ".join(f"{k} {v}" for k, v in (p.get("frameworks") or {}).items() if v) or "none found"
        dataset = p.get("dataset")
        holdout = p.get("holdout")
        lines += [
            "  passport:",
            f"    seed {p.get('seed')}; code {commit.get('commit') or 'unknown'}"
            + (" (with uncommitted changes)" if commit.get("dirty") else ""),
            f"    image {image.get('uri') or '-'}" + (f" ({image['digest']})" if image.get("digest") else ""),
            f"    python {p.get('python')}; {p['packages']['count']} packages (sha256 {p['packages']['sha256'][:16]}...,"
            f" artifact {p['packages']['artifact']}); {frameworks}",
            "    gpu: " + (f"{gpu['count']} x {gpu['model']} ({gpu['memory_mib']} MiB)" if gpu.get("count") else "none"),
            f"    instance {p.get('instance_type') or '-'} {p.get('lifecycle') or ''}; queue {p.get('queue') or '-'}; "
            f"job {p.get('job_id') or '-'}" + (f"; retraining started by {p['trigger']['trigger']} "
                                                f"({p['trigger'].get('alarm')})" if p.get("trigger") else ""),
            "    dataset " + (f"{dataset['name']}@{dataset['version']} {dataset['uri']} ({dataset['objects']} objects, "
                              f"{dataset['bytes']:,} bytes, list sha256 {dataset['list_sha256'][:16]}...)"
                              if dataset else "-"),
            "    held out " + (f"{holdout['samples']} samples ({holdout['fraction']:.0%}, ids sha256 "
                               f"{holdout['ids_sha256'][:16]}...)" if holdout else "-"),
            "    params " + (", ".join(f"{k}={v}" for k, v in sorted((p.get("params") or {}).items())) or "-"),
            "    environment " + (", ".join(sorted(p.get("environment") or {})) or "-"),
            "  attempts:"]
        for a in p.get("attempts", []):
            lines.append(f"    {a['number']}. {a.get('instance_type') or '?'} {a.get('lifecycle') or '?'} "
                         f"{a['started_at']} to {a.get('ended_at') or a.get('last_seen_at')}: {a['outcome']}"
                         + (f" ({a['reason']})" if a.get("reason") else ""))
    lines.append("  metrics: " + (", ".join(f"{k} {_number(v)}" for k, v in sorted(record["metrics"].items())) or "-"))
    cost = record.get("cost_usd")
    if cost is None:
        lines.append(f"  cost: unknown ({record.get('cost_note') or 'the run has not stopped or finished yet'})")
    else:
        lines.append(f"  cost: {cost:.6f} USD over {len(p.get('attempts', []))} attempt(s), "
                     f"{record.get('spot_interruptions', 0)} Spot interruption(s)")
    baseline = record.get("improves_on")
    if record.get("usd_per_accuracy_point") is not None:
        against = (f"run {baseline['run_id']}" if baseline.get("run_id") else baseline.get("note", "a given score"))
        lines.append(f"  {record['usd_per_accuracy_point']:.6f} USD per accuracy point: {record['accuracy_points']:+.2f} "
                     f"points over {against} ({baseline['holdout_accuracy']:.4f})")
    if record.get("usd_per_million_tokens") is not None:
        lines.append(f"  {record['usd_per_million_tokens']:.6f} USD per million tokens")
    if record.get("model_uri"):
        lines.append(f"  model: {record['model_uri']}")
    for decision in record.get("promotions", []):
        lines.append(f"  promotion to {decision.get('endpoint')} ({decision.get('environment')}) at {decision.get('at')}:"
                     f" {decision.get('outcome')}: {decision.get('reason')}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = Parser("./platform runs", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="the newest runs")
    listing.add_argument("target", metavar="ENV|--local")
    listing.add_argument("--json", action="store_true")
    show = commands.add_parser("show", help="one run: passport, metrics, cost, cost per accuracy point")
    show.add_argument("target", metavar="ENV|--local")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true")
    # "--local" reads as an option to argparse: accept it where ENV goes.
    args = parser.parse_args([a if a != "--local" else "@local" for a in argv])
    target = "--local" if args.target == "@local" else args.target
    client, where = open_store(target)
    if args.command == "list":
        runs = list_runs(client)
        print(json.dumps(runs, indent=1) if args.json else format_list(runs, where))
    else:
        record = run_record(client, args.run_id)
        print(json.dumps(record, indent=1) if args.json else format_record(record))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
