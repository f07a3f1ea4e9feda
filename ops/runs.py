"""Recorded training runs: their passports, metrics, cost and cost per accuracy point.

  ./platform runs list ENV|--local [--wide | --json]
  ./platform runs show ENV|--local RUN_ID [--json]
  ./platform runs show --record DIR|FILE [--json]   a run from its record (passport.json) alone: a rehearsal's, or
                                                     one copied from next to a job's checkpoints

ENV reads the environment's SageMaker MLflow (the Data stack's MlflowTrackingUri output; AWS credentials of ENV's
account, checked first; the sagemaker-mlflow plugin signs the calls). --local reads the local store that
``./platform up``'s example run writes to (.ml-platform/mlflow.db, SQLite, git-ignored).

A run a training-health rule stopped (exit 85, never retried: docs/HEALTH.md) shows as FAILED with a line under it
in ``runs list`` (the rule and the step; ``--json``: ``health_stop``, from the run's MLflow tags
``ml_platform.health_stop`` and ``ml_platform.health_stop_step``), and ``runs show`` prints the stop (the rule, the
step, the message, the values, the fix, whether the checkpoint of that step was written) and each rule's verdict.

``show --json`` prints the run record: ``run_id``, ``run_name``, ``experiment``, ``status``, ``identity`` (the run's
digest and what it covers), ``passport`` (seed, seeds, command, git_commit, image, python, packages, frameworks,
gpu, instance_type, lifecycle, queue, job_id, attempts with each one's environment, environment_changes, dataset,
params, environment, ...), ``metrics``, ``cost_usd`` (``cost_lower_bound``), ``spot_interruptions``,
``usd_per_accuracy_point``, ``over_chance``, ``against_live`` (the gain over the live model on the same held-out
ids, from the latest promotion's evaluation), ``usd_per_million_tokens``, ``improves_on``, ``model_uri`` and
``promotions`` (the gate's decisions), ``ledger`` (where its paid time and dollars went: ``gpu_hours``,
``paid_usd``, ``goodput``, ``buckets`` with each one's ``gpu_hours``, ``usd`` and ``share``, and ``notes``; null for a
run without attempts); with --local, ``kept_at`` (where ./platform up kept the run's model, passport,
package list and dataset); ``record_from`` (``mlflow``: the run's passport.json artifact; ``checkpoints``: the copy
next to its checkpoints, read where MLflow has none, or a newer one while the run is RUNNING: a crashed job logs no
artifact) and ``record_note`` (why that copy could not be read, else null); ``health`` (the training-health rules
as the job recorded them: ``mode``, ``check_every``, ``rules`` (each rule's verdict), ``warnings``, ``stop``,
``longest_gap_seconds``, ``state``; null for a run without them), a health stop's fields in its attempt
(``health_stop``, ``saved_at_stop``, ``stopped_at_step``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import shlex
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ml_platform_job.prices import load_prices, load_table
from ml_platform_job.goodput import BUCKETS, Ledger, run_ledger
from ml_platform_job.health import RULES as HEALTH_RULES
from ml_platform_job.tracking import PROMOTION_TAG_PREFIX, RECORD_NAME, TAG_PREFIX, gain_over_live

from ops.cli import Parser, fit

ROOT = Path(__file__).resolve().parent.parent
LOCAL_STORE = ROOT / ".ml-platform"
LIST_LIMIT = 50
CHECKPOINT_TAG = f"{TAG_PREFIX}checkpoint_uri"  # where the job keeps its record (passport.json) with its checkpoints
ENDED_STATUSES = ("FINISHED", "FAILED", "KILLED")  # MLflow's run statuses of a run that is not running
# A run MLflow still shows RUNNING whose record has not been written for this long (the job writes it at every
# checkpoint) is taken as ended without a word (a hard kill, a lost instance): a job checkpointing less often than
# this has its steps since the checkpoint counted lost until its next record.
STALE_AFTER_HOURS = 6.0
SUMMARY_KEYS = ("cost_usd", "cost_lower_bound", "spot_interruptions", "usd_per_accuracy_point", "usd_per_million_tokens",
                "improves_on", "accuracy_points", "over_chance", "cost_note", "model_uri", "checkpoint_uri", "identity",
                "created_at", "finished_at", "health")
HEALTH_STOP_TAG = f"{TAG_PREFIX}health_stop"  # the rule that stopped the run (tracking.TrackedRun.health_stop)
HEALTH_STOP_STEP_TAG = f"{TAG_PREFIX}health_stop_step"
HEALTH_DOCS = "docs/HEALTH.md"


class RunsError(SystemExit):
    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


def local_tracking_uri(store: Path = LOCAL_STORE) -> str:
    return f"sqlite:///{store / 'mlflow.db'}"


def environment_tracking_uri(env: Any, session: Any) -> str:
    """The environment's MLflow ARN, from its Data stack's output."""
    from ops.dataset import stack_output

    return stack_output(session.client("cloudformation"), f"{env.name}-Data", "MlflowTrackingUri")


def store_problem(database: Path) -> Optional[str]:
    """Why a local store's file is no MLflow database, or None, read only: MLflow itself would write its tables into
    an empty file (a read command must not), and end in a traceback on a file that is not SQLite."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as error:
        return f"{error}"
    missing = sorted({"runs", "experiments", "alembic_version"} - tables)
    return f"no {', '.join(missing)} table{'s' * (len(missing) > 1)}" if missing else None


def open_store(target: str, *, local_store: Optional[Path] = None) -> tuple[Any, str]:
    """(MlflowClient, where) for ``--local`` or an environment name; every check before the first MLflow call."""
    client, where, _ = open_store_session(target, local_store=local_store)
    return client, where


def open_store_session(target: str, *, local_store: Optional[Path] = None) -> tuple[Any, str, Any]:
    """``open_store``'s (MlflowClient, where) and the boto3 Session of ENV it checked (None for ``--local``): what
    reads the records next to a run's checkpoints (S3) and the Spot price history (EC2)."""
    local_store = local_store or LOCAL_STORE
    if target == "--local":  # checked before MLflow loads (a second)
        if not (local_store / "mlflow.db").exists():
            raise RunsError(f"no local runs yet ({local_store / 'mlflow.db'} does not exist): ./platform up runs the "
                            "example training job into it")
        problem = store_problem(local_store / "mlflow.db")
        if problem:
            raise RunsError(f"the local store {local_store / 'mlflow.db'} is not an MLflow store ({problem}): move it "
                            "away, and ./platform up runs the example training job into a new one")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise RunsError("mlflow is not installed in this environment: run ./platform setup") from None
    if target == "--local":
        uri = local_tracking_uri(local_store)
        return MlflowClient(uri), f"the local store ({uri})", None
    from ops.aws_access import environment, session_for

    env = environment(target)
    session = session_for(env)
    uri = environment_tracking_uri(env, session)
    return MlflowClient(uri), f"{env.name}'s SageMaker MLflow ({uri})", session


def run_record(client: Any, run_id: str, target: str = "ENV|--local", *, s3: Any = None,
               local_copies: Optional[Path] = None) -> dict:
    """The run record of ``runs show --json``: the passport artifact, with MLflow's latest metrics and status, the
    promotion decisions recorded in its tags and the gain over the live model the latest evaluation shows. Where
    MLflow has no passport artifact (a job that crashed logs none: it logs the record at a stop or the finish only),
    or the run is RUNNING (its artifact, if any, is the last stop's), the record next to its checkpoints (the tag
    ``ml_platform.checkpoint_uri``) when that one is newer: a directory, or ``s3://`` read with ``s3`` (ENV's
    client; without one an ``s3://`` copy is not read, and ``record_note`` says so); ``local_copies``: where
    ./platform up keeps its runs' files (``RUN_ID/passport.json``), for a local run whose emulated S3 is gone."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise RunsError(f"no run {run_id} in this store (./platform runs list {target} shows the runs)") from None
    record: dict = {}
    record_from: Optional[str] = None
    with tempfile.TemporaryDirectory() as directory:
        try:
            record = json.loads(Path(client.download_artifacts(run_id, RECORD_NAME, directory)).read_text())
            record_from = "mlflow"
        except (MlflowException, OSError, ValueError):
            pass  # a run logged without the job-contract helper, or one that crashed: MLflow's own data only
    if not isinstance(record, dict):
        record, record_from = {}, None
    tags = run.data.tags
    record_note = None
    uri = tags.get(CHECKPOINT_TAG) or record.get("checkpoint_uri")
    if not record or (run.info.status == "RUNNING" and (s3 is not None or not str(uri).startswith("s3://"))):
        kept, record_note = checkpoint_record(uri, run_id, s3)
        if kept is None and local_copies is not None:
            kept, _ = checkpoint_record(str(local_copies / run_id), run_id)
        if kept is not None and newer(kept, record):
            record, record_from = kept, "checkpoints"
    experiment = client.get_experiment(run.info.experiment_id)
    promotions = sorted((json.loads(v) for k, v in tags.items() if k.startswith(PROMOTION_TAG_PREFIX)),
                        key=lambda d: d.get("at", ""))
    judged = [d for d in promotions if d.get("metric") == "holdout_accuracy" and d.get("evidence_manifest")]
    against_live = ({**gain_over_live(record, judged[-1]["evidence_manifest"]), "evidence": judged[-1].get("evidence"),
                     "live_run": judged[-1].get("live_run")} if judged else None)
    passport = record.get("passport", {})
    ended, settle_notes = settled(passport, run.info.status)
    ledger = ledger_json(ended)
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "experiment": experiment.name if experiment else None,
        "status": run.info.status,
        "started_at": _time(run.info.start_time),
        "passport": passport,
        "metrics": {**record.get("metrics", {}), **run.data.metrics},
        **{key: record.get(key) for key in SUMMARY_KEYS},
        "tags": {k: v for k, v in tags.items() if k.startswith(TAG_PREFIX) and not k.startswith(PROMOTION_TAG_PREFIX)},
        "promotions": promotions,
        "against_live": against_live,
        "ledger": ledger if ledger is None else {**ledger, "notes": settle_notes + ledger["notes"]},
        "record_from": record_from,
        "record_note": record_note,
    }


def checkpoint_record(uri: Optional[str], run_id: str, s3: Any = None) -> tuple[Optional[dict], Optional[str]]:
    """(the run record next to a run's checkpoints, why it is not there): ``passport.json`` under ``uri`` (a
    directory, or ``s3://bucket/prefix/`` read with ``s3``), None with the reason when there is none, it cannot be
    read, or it is another run's."""
    if not uri:
        return None, None
    if str(uri).startswith("s3://") and s3 is None:
        return None, f"its record next to the checkpoints ({uri}) is read for ENV only (S3)"
    from botocore.exceptions import BotoCoreError, ClientError
    from ml_platform_job.storage import Location

    try:
        text = Location(str(uri), s3).read(RECORD_NAME)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        hint = " (the credentials lack s3:GetObject on it)" if code in ("AccessDenied", "403") else ""
        return None, f"its record next to the checkpoints ({uri}) unreadable: {code}{hint}"
    except (BotoCoreError, OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"its record next to the checkpoints ({uri}) unreadable: {type(error).__name__}"
    if text is None:
        return None, None
    try:
        found = json.loads(text)
    except ValueError:
        return None, f"its record next to the checkpoints ({uri}{RECORD_NAME}) is not JSON"
    if not isinstance(found, dict) or found.get("run_id") not in (None, run_id):
        return None, f"the record next to the checkpoints ({uri}{RECORD_NAME}) is another run's"
    return found, None


def newer(candidate: dict, record: dict) -> bool:
    """Whether ``candidate`` (the record next to the checkpoints) is newer than ``record`` (MLflow's artifact, or
    {}): more attempts, or the same number with a later last record of the last one."""
    def mark(found: dict) -> tuple[int, str]:
        attempts = (found.get("passport") or {}).get("attempts") or [] if isinstance(found, dict) else []
        last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
        return len(attempts), str(last.get("ended_at") or last.get("last_seen_at") or last.get("started_at") or "")

    if not record:
        return True
    try:
        return mark(candidate) > mark(record)
    except (AttributeError, TypeError):
        return False


def _epoch_of(text: Any) -> Optional[float]:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


class BatchEnds:
    """AWS Batch's end of a job's attempt (``DescribeJobs``: its ``stoppedAt`` and ``statusReason``), one call per job,
    for an attempt the record still says is running. https://docs.aws.amazon.com/batch/latest/APIReference/
    API_AttemptDetail.html. Batch keeps a finished job's description for a limited time only: an older attempt stays a
    lower bound. A refused call (no ``batch:DescribeJobs``) is noted once and read as unknown."""

    def __init__(self, batch: Any) -> None:
        self.batch, self.cache, self.notes = batch, {}, []

    def __call__(self, job_id: Optional[str], attempt: Optional[int]) -> Optional[tuple[float, str]]:
        if not job_id or not isinstance(attempt, int) or attempt < 1:
            return None
        if job_id not in self.cache:
            try:
                jobs = self.batch.describe_jobs(jobs=[job_id]).get("jobs") or []
            except Exception as error:  # no permission, throttled, no network: the lower bound stands
                if not self.notes:
                    self.notes.append(f"AWS Batch's job ends unread ({type(error).__name__}: grant batch:DescribeJobs): "
                                      "runs still recorded running are billed to their last record")
                jobs = []
            self.cache[job_id] = jobs[0] if jobs else None
        job = self.cache[job_id]
        tried = (job or {}).get("attempts") or []
        if len(tried) < attempt or not tried[attempt - 1].get("stoppedAt"):
            return None
        detail = tried[attempt - 1]
        return detail["stoppedAt"] / 1000, str(detail.get("statusReason") or (job or {}).get("statusReason") or "")


def settled(passport: dict, status: Optional[str], now: Optional[float] = None,
            batch_end: Optional[Callable[[Optional[str], Optional[int]], Optional[tuple[float, str]]]] = None
            ) -> tuple[dict, list[str]]:
    """(the passport with its last attempt ended where it ended without a word, notes): an attempt still
    ``running`` in the record while MLflow's run has ended (FAILED or KILLED: a crash the job could not record, a
    hard kill), or one not recorded for ``STALE_AFTER_HOURS`` while MLflow still says RUNNING, is ``lost`` at its
    last record, as the job's next attempt records it when AWS Batch's end is unreadable (a lower bound: AWS Batch's
    stoppedAt is later). The passport given is not changed; ``status`` None (unknown) settles nothing."""
    attempts = passport.get("attempts") if isinstance(passport, dict) else None
    if not attempts or not isinstance(attempts, list) or not isinstance(attempts[-1], dict) or status is None:
        return passport, []
    last = attempts[-1]
    if last.get("outcome") != "running":
        return passport, []
    seen = last.get("last_seen_at") or last.get("started_at")
    found = batch_end(last.get("job_id"), last.get("batch_attempt")) if batch_end else None
    if found is not None:  # AWS Batch ended the attempt (a crash the job could not record, a hard kill, a timeout)
        stopped, reason = found
        ended = copy.deepcopy(passport)
        at = datetime.fromtimestamp(stopped, timezone.utc).isoformat(timespec="milliseconds")
        ended["attempts"][-1].update(outcome="lost", ended_at=at, end_known=True,
                                     reason=f"ended without stopping cleanly; AWS Batch's stoppedAt ({reason or 'no reason'})")
        return ended, [f"attempt {last.get('number', len(attempts))}: never recorded its end; AWS Batch stopped it at "
                       f"{at} ({reason or 'no reason given'}): its steps since its last checkpoint counted lost"]
    if status in ENDED_STATUSES:
        why = f"MLflow's run is {status} but its last attempt never recorded an end (a hard kill, a lost instance)"
    else:
        seen_at = _epoch_of(seen)
        now = time.time() if now is None else now
        if status != "RUNNING" or seen_at is None or now - seen_at < STALE_AFTER_HOURS * 3600:
            return passport, []
        why = (f"its last attempt has not recorded for {(now - seen_at) / 3600:.0f} h while MLflow's run is still "
               "RUNNING")
    ended = copy.deepcopy(passport)
    ended["attempts"][-1].update(outcome="lost", ended_at=seen, end_known=False,
                                 reason=f"ended without stopping cleanly: {why}")
    return ended, [f"attempt {last.get('number', len(attempts))}: {why}: billed to its last record ({seen}), a lower "
                   "bound; its steps since its last checkpoint counted lost"]


def record_ledger(passport: dict, window: Optional[tuple[float, float]] = None) -> tuple[Optional[Ledger], list[str]]:
    """The run's goodput ledger and its notes, priced as its cost is (the Region's price table; an attempt's own
    ``rate`` where it has one), or (None, []) for a record without attempts. ``window``: (start, end) in epoch
    seconds, the attempts' time inside it only (a month's share of an attempt that crosses its bounds)."""
    attempts = passport.get("attempts") or []
    if not attempts:
        return None, []
    environment = passport.get("environment") or {}
    region = environment.get("AWS_REGION") or environment.get("AWS_DEFAULT_REGION") or "us-east-1"
    if window is None:
        return run_ledger(attempts, load_prices(region, _price_table()))
    return run_ledger(attempts, load_prices(region, _price_table()), window=window)


@functools.lru_cache(maxsize=1)
def _price_table() -> dict:
    """The price table, read once per process (a report prices thousands of runs' attempts with it)."""
    return load_table()


def ledger_json(passport: dict) -> Optional[dict]:
    try:
        found, notes = record_ledger(passport)
    except ValueError:  # an attempt the ledger cannot read: runs show says so (format_record), --json has null
        return None
    return None if found is None else {**found.to_dict(), "notes": notes}


def ledger_lines(found: Ledger, notes: list[str], indent: str = "    ") -> list[str]:
    """One line per bucket with time in it: hours, USD and percent of the paid time, largest first."""
    lines = []
    for bucket in sorted(BUCKETS, key=lambda b: -found.seconds[b]):
        if found.seconds[bucket] > 0:
            lines.append(f"{indent}{bucket:<16} {found.seconds[bucket] / 3600:>10.6f} GPU-h "
                         f"{found.usd[bucket]:>11.6f} USD {found.share(bucket):>6.1%}")
    return lines + [f"{indent}({note})" for note in notes]


def with_local_copy(record: dict, store: Path) -> dict:
    """The record with ``kept_at``: where ./platform up keeps a local run's files after the emulator stops
    (``ops.local.run``), when it kept them."""
    kept = store / "runs" / record["run_id"]
    return {**record, "kept_at": str(kept) if kept.is_dir() else None}


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
             "attempts": _count(r.data.tags.get(f"{TAG_PREFIX}attempts")),
             "health_stop": _health_tag(r.data.tags)} for r in runs]


def _health_tag(tags: Mapping[str, str]) -> Optional[dict]:
    """The health stop a run's tags record (``{"rule", "step"}``), or None."""
    rule = tags.get(HEALTH_STOP_TAG)
    return {"rule": rule, "step": _count(tags.get(HEALTH_STOP_STEP_TAG))} if rule else None


def _health_line(run: Mapping[str, Any]) -> list[str]:
    """The line under a run a health rule stopped: what tells it from another failure."""
    stop = run.get("health_stop")
    if not stop:
        return []
    at = f" at step {stop['step']}" if stop.get("step") is not None else ""
    return [f"{' ' * 6}stopped by the health rule {str(stop['rule'])[:40]}{at} (exit 85, not retried; runs show: "
            "the fix)"]


def _count(tag: Optional[str]) -> Optional[int]:
    """A count MLflow keeps as a tag (text) as the number it is."""
    return int(tag) if tag and tag.isdigit() else None


def _number(value: Optional[float], digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def format_list(runs: list[dict], where: str, *, wide: bool = False) -> str:
    """One line per run within 100 columns (``wide``: the experiment and the cost per accuracy point too)."""
    if not runs:
        return f"No runs in {where} yet."
    if wide:
        lines = [f"Runs in {where}, newest first:",
                 f"  {'run id':<32}  {'name':<24} {'experiment':<12} {'status':<9} {'attempts':>8} {'holdout acc':>11} "
                 f"{'cost USD':>10} {'USD/point':>10}  started"]
        for r in runs:
            lines.append(f"  {r['run_id']:<32}  {(r['run_name'] or '')[:24]:<24} {(r['experiment'] or '')[:12]:<12} "
                         f"{r['status']:<9} {r['attempts'] or '-':>8} {_number(r['holdout_accuracy'], 4):>11} "
                         f"{_number(r['cost_usd'], 4):>10} {_number(r['usd_per_accuracy_point'], 4):>10}  "
                         f"{r['started_at'] or '-'}")
            lines += _health_line(r)
        return "\n".join(lines)
    lines = fit(f"Runs in {where}, newest first (--wide: experiment, USD per accuracy point):").split("\n")
    lines.append(f"  {'run id':<32}  {'name':<15} {'status':<9} {'att':>3} {'acc':>6} {'USD':>9}  started (UTC)")
    for r in runs:
        started = (r["started_at"] or "-").replace("T", " ")[:16]
        lines.append(f"  {r['run_id'][:32]:<32}  {(r['run_name'] or '')[:15]:<15} {(r['status'] or '')[:9]:<9} "
                     f"{r['attempts'] or '-':>3} {_number(r['holdout_accuracy'], 4):>6} "
                     f"{_number(r['cost_usd'], 2):>9}  {started}")
        lines += _health_line(r)
    return "\n".join(lines)


def _gpu(gpu: dict) -> str:
    return f"{gpu['count']} x {gpu['model']} ({gpu['memory_mib']} MiB)" if gpu.get("count") else "no GPU"


def _seeds(seeds: Optional[dict]) -> str:
    if not seeds:
        return "not seeded by the helper (TrackedRun.seed_everything)"
    what = [name for name in ("python", "numpy", "torch", "cuda") if seeds.get(name)]
    flags = "deterministic algorithms on" if seeds.get("deterministic") else "deterministic algorithms off"
    benchmark = "" if seeds.get("cudnn_benchmark") is None else f", cuDNN benchmark {'on' if seeds['cudnn_benchmark'] else 'off'}"
    return f"{seeds['seed']} set for {', '.join(what)}; {flags}{benchmark}; PYTHONHASHSEED {seeds.get('PYTHONHASHSEED') or 'unset'}"


def rerun_command(passport: Mapping[str, Any]) -> str:
    """The recorded command as a shell line: in its working directory, with its interpreter (records before 0.7 have
    neither: ``python`` for a script then)."""
    command = [shlex.quote(part) for part in passport["command"]]
    interpreter = passport.get("interpreter")
    if interpreter:
        command = [shlex.quote(interpreter), *command]
    elif passport["command"][0].endswith(".py"):
        command = ["python", *command]
    directory = passport.get("working_directory")
    return (f"cd {shlex.quote(directory)} && " if directory else "") + " ".join(command)


def format_record(record: dict) -> str:
    p = record["passport"]
    lines = [f"Run {record['run_id']} ({record['run_name']}, experiment {record['experiment']}): {record['status']}"]
    where = record.get("checkpoint_uri") or "(next to the checkpoints)"
    if p:
        commit = p.get("git_commit") or {}
        image = p.get("image") or {}
        frameworks = ", ".join(f"{k} {v}" for k, v in (p.get("frameworks") or {}).items() if v) or "none found"
        dataset = p.get("dataset")
        holdout = p.get("holdout")
        identity = record.get("identity") or {}
        dirty = {True: f" with uncommitted changes ({commit.get('changed_files', '?')} files, diff "
                       f"{where}{commit.get('diff_artifact') or 'not kept'})",
                 False: " (clean)", None: " (dirty state unknown)"}[commit.get("dirty")]
        lines += [
            "  passport:",
            f"    run digest {identity.get('sha256', 'none (a record of format 1)')}: params, seed, dataset content, "
            "code, image, held-out split",
            f"    seed {p.get('seed')}; seeds: {_seeds(p.get('seeds'))}",
            f"    code {commit.get('commit') or 'unknown'}{dirty}",
            f"    command {' '.join(p['command']) if p.get('command') else '-'}",
            f"    image {image.get('uri') or '-'}" + (f" ({image['digest']})" if image.get("digest") else ""),
            f"    python {p.get('python')}; {p['packages']['count']} packages (sha256 {p['packages']['sha256'][:16]}...): "
            f"{where}{p['packages']['artifact']}; {frameworks}",
            f"    instance {p.get('instance_type') or '-'} {p.get('lifecycle') or ''}; queue {p.get('queue') or '-'}; "
            f"job {p.get('job_id') or '-'}" + (f"; retraining started by {p['trigger']['trigger']} "
                                                f"({p['trigger'].get('alarm')})" if p.get("trigger") else ""),
            "    dataset " + (f"{dataset['name']}@{dataset['version']} {dataset['uri']} ({dataset['objects']} objects, "
                              # A record of format 1 digests the object list (list_sha256), not the content.
                              f"{dataset['bytes']:,} bytes, sha256 {(dataset.get('sha256') or dataset['list_sha256'])[:16]}"
                              f"... of {dataset.get('method', 'the object list (keys and sizes)')})"
                              if dataset else "-"),
            "    held out " + (f"{holdout['samples']} samples ({holdout['fraction']:.0%}, ids sha256 "
                               f"{holdout['ids_sha256'][:16]}...)" if holdout else "-"),
            "    params " + (", ".join(f"{k}={v}" for k, v in sorted((p.get("params") or {}).items())) or "-"),
            "    environment " + (", ".join(sorted(p.get("environment") or {})) or "-"),
            "  attempts:"]
        for a in p.get("attempts", []):
            environment = a.get("environment") or {}
            cuda = environment.get("cuda") or {}
            ran_on = (f"; {_gpu(environment.get('gpu') or {})}, driver {environment.get('driver') or '-'}, CUDA "
                      f"{cuda.get('build') or '-'} (driver supports {cuda.get('driver_supports') or '-'})"
                      if environment else "")
            nodes = f" x {a['nodes']} nodes" if a.get("nodes", 1) > 1 else ""
            resumed = (f"; resumed from the checkpoint of step {a['restored_from'].get('step')}"
                       if a.get("restored_from") else "")
            lines.append(f"    {a['number']}. {a.get('instance_type') or '?'} {a.get('lifecycle') or '?'}{nodes} "
                         f"{a['started_at']} to {a.get('ended_at') or a.get('last_seen_at')}: {a['outcome']}"
                         + (f" ({a['reason']})" if a.get("reason") else "") + resumed + ran_on)
            if a.get("environment_changes"):
                lines.append(f"       CHANGED from the attempt before: {'; '.join(a['environment_changes'])}")
        lines += resize_lines(record)
        if p.get("command"):
            lines.append(f"  rerun: the code at {commit.get('commit') or '(unknown commit)'}, the packages of "
                         f"{p['packages']['artifact']}, the dataset above; ML_PLATFORM_CHECKPOINT_URI a new prefix (a new "
                         f"run); then {rerun_command(p)}")
    if p:
        lines += health_lines(record.get("health"), p.get("attempts"), record.get("checkpoint_uri"))
    # A run read from MLflow (run_record: record_from) is settled by MLflow's status, as its "ledger" is; a record
    # file alone is shown as it is.
    ended, settle_notes = settled(p, record.get("status")) if "record_from" in record else (p, [])
    try:
        found, notes = record_ledger(ended) if p else (None, [])
    except ValueError as error:  # a record the ledger cannot read is shown all the same
        found, notes = None, []
        lines.append(f"  goodput ledger: unreadable ({error})")
    notes = settle_notes + notes
    if found is not None:
        goodput = "-" if found.goodput is None else f"{found.goodput:.1%}"
        lines.append(f"  goodput ledger: {found.paid_seconds / 3600:.4f} paid GPU-hours, {found.paid_usd:.6f} "
                     f"USD over {found.attempts} attempt(s); goodput {goodput} (productive of paid):")
        lines += ledger_lines(found, notes)
    lines.append("  metrics: " + (", ".join(f"{k} {_number(v)}" for k, v in sorted(record["metrics"].items())) or "-"))
    cost = record.get("cost_usd")
    if cost is None:
        lines.append(f"  cost: unknown ({record.get('cost_note') or 'the run has not stopped or finished yet'})")
    else:
        bound = f" (a lower bound: {record.get('cost_note')})" if record.get("cost_lower_bound") else ""
        lines.append(f"  cost: {cost:.6f} USD over {len(p.get('attempts', []))} attempt(s), "
                     f"{record.get('spot_interruptions', 0)} Spot interruption(s){bound}")
    baseline = record.get("improves_on")
    if record.get("usd_per_accuracy_point") is not None:
        against = f"run {baseline['run_id']}" if baseline.get("run_id") else "the score given (improves_on)"
        lines.append(f"  {record['usd_per_accuracy_point']:.6f} USD per accuracy point: {record['accuracy_points']:+.2f} "
                     f"points over {against} ({baseline['holdout_accuracy']:.4f})")
    live = record.get("against_live")
    if live and live.get("accuracy_points") is not None:
        per_point = (f"{live['usd_per_accuracy_point']:.6f} USD per accuracy point" if live["usd_per_accuracy_point"]
                     is not None else f"no cost per accuracy point ({live['reason']})")
        lines.append(f"  against the live model ({live.get('live_run') or 'its version'}): {per_point}: "
                     f"{live['accuracy_points']:+.2f} points ({live['candidate_score']:.4f} vs {live['live_score']:.4f} "
                     f"on the same {live['examples']} held-out examples)")
    elif live:
        lines.append(f"  against the live model: {live['reason']}")
    chance = record.get("over_chance")
    if chance and chance.get("usd_per_point") is not None:
        lines.append(f"  {chance['usd_per_point']:.6f} USD per accuracy point over chance, the chance baseline: "
                     f"{chance['accuracy_points']:+.2f} points over the untrained model ({chance['holdout_accuracy']:.4f}),"
                     " not over a live model")
    if record.get("usd_per_million_tokens") is not None:
        lines.append(f"  {record['usd_per_million_tokens']:.6f} USD per million tokens")
    if record.get("model_uri"):
        lines.append(f"  model: {record['model_uri']}")
    if record.get("kept_at"):
        lines.append(f"  kept: {record['kept_at']}/ (model, passport, package list, dataset; docs/RUNS.md, \"Rerunning "
                     "a run\")")
    for decision in record.get("promotions", []):
        lines.append(f"  promotion to {decision.get('endpoint')} ({decision.get('environment')}) at {decision.get('at')}:"
                     f" {decision.get('outcome')}: {decision.get('reason')}")
    return "\n".join(lines)


def resize_lines(record: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """An elastic run's resizes (``ml_platform_job.elastic.resize_history``): from and to, at which step, why, the
    restart it took and what the restart cost at the new size, beside the job's own estimate."""
    from ml_platform_job.elastic import resize_history

    passport = record.get("passport") or {}
    environment = passport.get("environment") or {}
    region = environment.get("AWS_REGION") or environment.get("AWS_DEFAULT_REGION") or "us-east-1"
    try:
        found = resize_history(record, load_prices(region, _price_table()))
    except Exception as error:  # a record the history cannot read is shown all the same
        return [f"{indent}resizes: unreadable ({type(error).__name__})"]
    if not found:
        return []
    lines = [f"{indent}resizes ({len(found)}):"]
    for entry in found:
        to = entry["to"] if entry["to"] is not None else f"{entry['asked']} (asked; not resubmitted yet)"
        restart = (f"restart {entry['restart_seconds']:.0f} s" if entry["restart_seconds"] is not None
                   else "restart not measured yet")
        cost = f", {entry['restart_usd']:.2f} USD" if entry["restart_usd"] is not None else ""
        estimate = entry.get("estimate") or {}
        expected = (f" (expected {estimate['restart_seconds']:.0f} s; saves {estimate.get('saved_seconds') or 0:.0f} s, "
                    f"{estimate.get('saved_usd') or 0:.2f} USD)" if estimate.get("restart_seconds") is not None else "")
        lines.append(f"{indent}  attempt {entry['attempt']}, step {entry['step']}: {entry['from']} -> {to} node(s), "
                     f"{restart}{cost}{expected}: {entry['reason']}")
    return lines


def _values(values: Any) -> str:
    """A verdict's values as ``name value, ...`` (numbers to 4 significant digits)."""
    if not isinstance(values, Mapping) or not values:
        return "none recorded"
    return ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in values.items())


def health_lines(health: Any, attempts: Any, checkpoint_uri: Optional[str] = None) -> list[str]:
    """``runs show``'s training-health section: each health stop (the attempt, the rule, the step, the message, the
    values, the checkpoint, the fix), each rule's verdict, the warnings; one line for a record without the rules
    (older than them, or a job without TrainingJob or a framework callback) or with a ``health`` that is no object."""
    attempts = [a for a in attempts or [] if isinstance(a, Mapping)] if isinstance(attempts, list) else []
    lines: list[str] = []
    for index, attempt in enumerate(attempts):
        stop = attempt.get("health_stop")
        if attempt.get("outcome") != "health_stopped" and stop is None:
            continue
        number = attempt.get("number", index + 1)
        if not isinstance(stop, Mapping):
            lines.append(f"  health stop: attempt {number}'s verdict is unreadable in the record (a "
                         f"{type(stop).__name__}, not an object)")
            continue
        step = stop.get("step", attempt.get("stopped_at_step"))
        saved = attempt.get("saved_at_stop")
        newest = attempt.get("checkpoint_step")
        kept = (f"the checkpoint of step {step} was written" if saved is True else
                f"no checkpoint of step {step} (a NaN state or a stuck loop is never saved); the newest is "
                + (f"step {newest}" if newest is not None and newest != step else "the last one before it")
                if saved is False else "unknown (the record does not say)")
        lines += [f"  health stop: the rule {stop.get('rule')} stopped attempt {number} at step {step} (exit 85, "
                  f"which the queue does not retry; {HEALTH_DOCS})",
                  f"    {stop.get('message') or 'no message recorded'}",
                  f"    values: {_values(stop.get('values'))}",
                  f"    checkpoint: {kept}" + (f" under {checkpoint_uri}" if saved is True and checkpoint_uri else ""),
                  f"    fix: {stop.get('fix') or 'read ' + HEALTH_DOCS}"]
    if health is None:
        if not lines:
            lines.append("  health rules: not recorded (a run from before them, or a job without TrainingJob or a "
                         f"framework callback: {HEALTH_DOCS})")
        return lines
    rules = health.get("rules") if isinstance(health, Mapping) else None
    if not isinstance(health, Mapping):
        return lines + [f"  health rules: unreadable in the record (a {type(health).__name__}, not an object)"]
    if rules is None and health.get("error"):
        return lines + [f"  health rules: not recorded: the job could not record them ({health['error']})"]
    if not isinstance(rules, Mapping):
        return lines + [f"  health rules: unreadable in the record (its rules are a {type(rules).__name__}, not an "
                        "object)"]
    how = ", ".join(part for part in (f"mode {health['mode']}" if health.get("mode") else "",
                                       f"a check every {health['check_every']} steps" if health.get("check_every")
                                       else "") if part)
    lines.append(f"  health rules{f' ({how})' if how else ''}:")
    ordered = [rule for rule in HEALTH_RULES if rule in rules] + [rule for rule in rules if rule not in HEALTH_RULES]
    lines += [f"    {str(rule):<20} {rules[rule]}" for rule in ordered] or ["    none recorded"]
    gap = health.get("longest_gap_seconds")
    if isinstance(gap, (int, float)) and not isinstance(gap, bool):
        lines.append(f"    longest time without progress: {gap:g} s")
    for warning in health.get("warnings") or []:
        if isinstance(warning, Mapping):
            lines.append(f"    warned: {warning.get('rule')} at step {warning.get('step')}: {warning.get('message')}; "
                         f"fix: {warning.get('fix')}")
    return lines


def file_record(path: str) -> dict:
    """``runs show``'s record from a run's record file alone (no MLflow): a directory holding ``passport.json`` (a
    rehearsal's ``interrupted/``, a copy of a job's checkpoint prefix) or the file itself."""
    found = Path(path)
    found = found / RECORD_NAME if found.is_dir() else found
    try:
        record = json.loads(found.read_text())
    except FileNotFoundError:
        raise RunsError(f"no run record at {found} (a job's {RECORD_NAME} lies next to its checkpoints)") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise RunsError(f"{found}: not a run record ({type(error).__name__}); pass the {RECORD_NAME} a job "
                        "wrote") from None
    if not isinstance(record, dict) or "passport" not in record or "run_id" not in record:
        raise RunsError(f"{found}: not a run record (no run_id and passport); pass the {RECORD_NAME} a job wrote")
    return {"run_id": record["run_id"], "run_name": record.get("run_name"), "experiment": record.get("experiment"),
            "status": record.get("status"), "started_at": record.get("created_at"),
            "passport": record.get("passport", {}), "metrics": record.get("metrics", {}),
            **{key: record.get(key) for key in SUMMARY_KEYS}, "tags": {}, "promotions": [], "against_live": None,
            "ledger": ledger_json(record.get("passport", {})), "record_file": str(found)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"] and any(a == "--record" or a.startswith("--record=") for a in argv):
        shown = Parser("./platform runs show --record", description="a run from its record file alone")
        shown.add_argument("--record", required=True, metavar="DIR|FILE")
        shown.add_argument("--json", action="store_true")
        args = shown.parse_args(argv[1:])
        record = file_record(args.record)
        print(json.dumps(record, indent=1) if args.json else fit(format_record(record)))
        return 0
    parser = Parser("./platform runs", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="the newest runs")
    listing.add_argument("target", metavar="ENV|--local")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--wide", action="store_true", help="the experiment and USD per accuracy point too")
    show = commands.add_parser("show", help="one run: passport, metrics, cost, cost per accuracy point")
    show.add_argument("target", metavar="ENV|--local")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true")
    # "--local" reads as an option to argparse: accept it where ENV goes.
    args = parser.parse_args([a if a != "--local" else "@local" for a in argv])
    target = "--local" if args.target == "@local" else args.target
    client, where, session = open_store_session(target)
    if args.command == "list":
        runs = list_runs(client)
        print(json.dumps(runs, indent=1) if args.json else format_list(runs, where, wide=args.wide))
    else:
        record = run_record(client, args.run_id, target, s3=session.client("s3") if session else None,
                            local_copies=LOCAL_STORE / "runs" if target == "--local" else None)
        if target == "--local":
            record = with_local_copy(record, LOCAL_STORE)
        print(json.dumps(record, indent=1) if args.json else fit(format_record(record)))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
