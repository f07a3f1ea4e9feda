"""The job-contract helper: one recorded run per training job, whatever the number of attempts, with its passport,
metrics, held-out scores and cost (standard library and boto3; MLflow when installed).

    from ml_platform_job.holdout import describe, split
    from ml_platform_job.passport import DatasetRef
    from ml_platform_job.tracking import TrackedRun

    run = TrackedRun.start(params={"lr": 0.1, "epochs": 20}, seed=1234,
                           dataset=DatasetRef("blobs", "v1", "s3://bucket/datasets/blobs/v1/"),
                           holdout=describe(holdout_ids))
    if run.finished:                          # an earlier attempt finished and only the exit was lost
        sys.exit(0)
    seeds = run.seed_everything(1234)         # python, numpy, torch, CUDA; DataLoader(generator=seeds.generator,
    ...                                       #   worker_init_fn=seeds.worker_init_fn)
    run.log_metrics({"train_loss": loss}, step=epoch)
    run.log_holdout(accuracy=0.93, step=epoch)           # logged as holdout_accuracy
    run.checkpointed()                                   # after each checkpoint: the attempt is alive until now
    ...
    run.stop("SIGTERM")   # then exit 143: the next attempt continues this run
    run.finish()          # then exit 0: cost, Spot interruptions, USD per accuracy point

Where things go:

- The run record (``passport.json``) is written next to the checkpoints, under ``ML_PLATFORM_CHECKPOINT_URI``
  (``s3://`` or a directory), at the start of every attempt, after each ``checkpointed()``, at ``stop`` and at
  ``finish``, with the package list (``packages.txt``), the dataset's content list and, for a dirty checkout, the
  code's diff (``code.diff``) beside it. It survives without MLflow.
- One run per configuration: the record holds the run's identity (``identity.sha256`` over parameters, seed,
  dataset content, code (the git tree of ``code_directory`` and its dirty state), image digest and held-out split). An attempt under the same
  checkpoint prefix continues the run only when the identity matches; a changed configuration stops the attempt
  with one line naming what changed: a new configuration is a new run, under a new job name (its own
  checkpoints). A part the attempt does not pass (``params=None``, ``seed=None``, ...) is not compared.
- Each attempt records what it ran on (GPUs, driver, CUDA, frameworks, image, packages): a Spot retry on another
  instance type is flagged (``environment_changes``), never merged into the first attempt's.
- MLflow, when the ``mlflow`` (or ``mlflow-skinny``) package is installed and a tracking URI is given (argument or
  ``MLFLOW_TRACKING_URI``): on AWS the environment's managed MLflow (its ARN, with the ``sagemaker-mlflow``
  plugin in the image), on a laptop a local SQLite store (``sqlite:///.ml-platform/mlflow.db``). Params, metrics,
  ``ml_platform.*`` tags and the record and package list as artifacts. A tracking failure is reported once and
  never stops training: the record next to the checkpoints stays complete.

Goodput: ``run.clock`` (``phase_clock.PhaseClock``, restarted at each attempt's start) times the job's phases: wrap
the loader in ``run.clock.batches(loader)`` (time blocked on it is data wait), each step in ``run.clock.step()``,
restores, saves and evaluations in ``run.clock.phase(...)``, and call ``run.clock.checkpoint_saved()`` after a
save. The record's own writes and MLflow calls are timed as ``tracking``. Each attempt records them as ``phases`` at
every save; on AWS Batch (``AWS_BATCH_JQ_NAME`` set) a timer prints, every minute, the shares over the queue alarms'
window (``ML_PLATFORM_GOODPUT_WINDOW_SECONDS``) as an embedded-metric-format line, also while the job is blocked in
its loader or a save: the queue's goodput alarms' data. ``run.loader_settings()`` gives DataLoader settings for the
attempt's instance.

An attempt starts where AWS Batch started it (``DescribeJobs``: the job's ``startedAt``, or its entry in the job's
``attempts``), when the job may read it (``batch:DescribeJobs``), else at its process's start (imports, the dataset's
fingerprint and the passport are paid time too either way), and records its instance (``host``: the instance's id
and Availability Zone, its boot, the image pull, the previous job's end on it; ``host.py``). An attempt whose
process raises, or exits without ``finish`` or ``stop``, is recorded as ``failed`` when the interpreter exits (its
record and MLflow run written, the run FAILED); a hard kill (SIGKILL, out of memory) leaves it ``running``, billed
to its last record.

Cost: every attempt's paid hours (``goodput.paid_span``: from its instance's boot, or the previous job's end on it,
or its image pull, to its end) x its rate (the price table's, or the price paid where the operator side recorded
one) x its GPU share x its nodes (``AWS_BATCH_JOB_NUM_NODES``). An attempt lost without a word is billed to AWS
Batch's ``stoppedAt`` for it when the job may read it (``batch:DescribeJobs``), else to its last checkpoint, and the
cost is then marked a lower bound.

Accuracy metrics are fractions (0-1); one accuracy point is one percentage point. ``usd_per_accuracy_point`` is
the run's cost over the points its final ``holdout_accuracy`` gained on the model it would replace:
``improves_on`` (the live model's score, or ``{"run_id": ..., "holdout_accuracy": ...}``), or, after
``./platform model evaluate``, ``gain_over_live`` on the evaluation's manifest (both models on the same held-out
ids). The points over the run's own first held-out evaluation (the untrained model: chance) are kept apart, as
``over_chance``, and never called the run's cost per accuracy point.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
import weakref
from datetime import datetime, timezone
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from . import host as hosts
from . import passport as passports
from .goodput import LoaderSettings, PhaseClock, loader_settings, loader_settings_for, run_ledger
from .job_metrics import batch_job_id, job_id_from_environment
from .prices import gpu_share, load_prices
from .storage import Location

RECORD_NAME = "passport.json"
PACKAGES_NAME = "packages.txt"
RECORD_FORMAT = 2  # 2: identity, per-attempt environments, nodes, over_chance
TAG_PREFIX = "ml_platform."
PROMOTION_TAG_PREFIX = f"{TAG_PREFIX}promotion."
HOLDOUT_PREFIX = "holdout_"
RUNNING, STOPPED, FINISHED, FAILED = "RUNNING", "STOPPED", "FINISHED", "FAILED"
# Runs of this process whose attempt is still open: at the interpreter's exit, one that neither stopped nor finished
# is recorded as failed (a crash is paid time too, and a failed run is pure waste).
_OPEN_RUNS: "weakref.WeakSet[TrackedRun]" = weakref.WeakSet()
_PROCESS_START_USED = False  # the process's start is the first attempt's start; a later run in it starts when called


def main_node(env: Mapping[str, str]) -> bool:
    """True for the one process of a job that records its run: on the main node of a multi-node job (AWS Batch's
    variables: https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html), and global rank 0 of a job of
    several processes (``RANK``, as torchrun sets it: rank 0 runs on the main node; without it, ``LOCAL_RANK`` and
    ``NODE_RANK`` both 0)."""
    index, main = env.get("AWS_BATCH_JOB_NODE_INDEX"), env.get("AWS_BATCH_JOB_MAIN_NODE_INDEX")
    rank = (env.get("RANK") or "").strip()
    if not rank:  # Lightning's launcher sets LOCAL_RANK and NODE_RANK in the processes it starts, never RANK
        rank = "0" if ((env.get("LOCAL_RANK") or "0").strip(), (env.get("NODE_RANK") or "0").strip()) == ("0", "0") \
            else "1"
    return (index is None or main is None or index == main) and rank == "0"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def local_artifact_location(tracking_uri: str) -> Optional[str]:
    """For a SQLite store, artifacts beside its database file (MLflow's default is relative to the working
    directory); None for a server, which has its own artifact store."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = Path(tracking_uri[len("sqlite:///"):]).resolve()
    return (database.parent / "artifacts").as_uri()


class MlflowSink:
    """The MLflow side of a run (MlflowClient: no global state, explicit run ids)."""

    def __init__(self, tracking_uri: str, experiment: str) -> None:
        from mlflow.tracking import MlflowClient  # type: ignore[import-not-found]

        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(
            experiment, artifact_location=local_artifact_location(tracking_uri))

    def create(self, run_name: str, tags: Mapping[str, str]) -> str:
        return self.client.create_run(self.experiment_id, run_name=run_name, tags=dict(tags)).info.run_id

    def resume(self, run_id: str) -> None:
        self.client.update_run(run_id, status="RUNNING")

    def log(self, run_id: str, *, metrics: Mapping[str, float] = {}, step: Optional[int] = None,
            params: Mapping[str, Any] = {}, tags: Mapping[str, str] = {}, timestamp: Optional[float] = None) -> None:
        from mlflow.entities import Metric, Param, RunTag  # type: ignore[import-not-found]

        millis = int((timestamp or time.time()) * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), millis, step or 0) for k, v in metrics.items()],
                              params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                              tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def artifact(self, run_id: str, name: str, text: str) -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / name
            path.write_text(text)
            self.client.log_artifact(run_id, str(path))

    def dataset(self, run_id: str, fingerprint: Mapping[str, Any]) -> None:
        """The dataset as MLflow's run input (``log_inputs``, context "training"): its digest field holds at most 36
        characters, so the first 32 of the SHA-256, the whole fingerprint in the profile."""
        from mlflow.entities import Dataset, DatasetInput, InputTag  # type: ignore[import-not-found]

        dataset = Dataset(name=f"{fingerprint['name']}@{fingerprint['version']}", digest=fingerprint["sha256"][:32],
                          source_type="s3" if fingerprint["uri"].startswith("s3://") else "local",
                          source=json.dumps({"uri": fingerprint["uri"]}), profile=json.dumps(fingerprint))
        self.client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags=[InputTag("mlflow.data.context",
                                                                                      "training")])])

    def end(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)


def mlflow_sink(tracking_uri: Optional[str], experiment: str) -> Optional[MlflowSink]:
    """A sink when MLflow is installed and a tracking URI is given; None (record only) otherwise."""
    if not tracking_uri:
        return None
    try:
        import mlflow  # noqa: F401  # type: ignore[import-not-found]
    except ImportError:
        print(f"tracking: MLFLOW_TRACKING_URI is {tracking_uri} but mlflow is not installed (pip install mlflow-skinny"
              " sagemaker-mlflow): the run is recorded next to its checkpoints only", file=sys.stderr)
        return None
    return MlflowSink(tracking_uri, experiment)


def attempts_cost(attempts: list[dict], prices: Mapping) -> tuple[Optional[float], Optional[str]]:
    """(USD, None): every attempt's dollars as the goodput ledger counts them (``goodput.run_ledger``: its paid span
    at its rate, ``rate`` where the operator side recorded the price paid, else the price table's; the job's part x
    its GPU share x its nodes, the instance's alone x its nodes); (None, why) when an attempt's instance type or
    lifecycle is unknown or unpriced, or its record cannot be read."""
    total = 0.0
    for attempt in attempts:
        instance_type, lifecycle = attempt.get("instance_type"), attempt.get("lifecycle")
        if not instance_type or not lifecycle:
            return None, (f"attempt {attempt['number']}: instance type or lifecycle unknown (set ML_PLATFORM_INSTANCE_TYPE "
                          "and ML_PLATFORM_LIFECYCLE where the platform's boot files are absent)")
        if instance_type not in prices["on_demand_hourly"]:
            return None, f"attempt {attempt['number']}: no price for {instance_type} in the price table"
        # As the goodput ledger counts it: the paid span (goodput.paid_span: from the instance's boot, or the
        # previous job's end on it, or the image pull, to the job's end and the scale-in where recorded), the job's
        # part at its GPU share, the instance's alone (boot, waits, scale-in) at its whole rate.
        try:
            found, _ = run_ledger([attempt], prices)
        except ValueError as error:
            return None, f"attempt {attempt['number']}: {error}"
        total += found.paid_usd
    return total, None


def gain_over_live(record: Mapping[str, Any], manifest: Mapping[str, Any]) -> dict:
    """The run's accuracy points over the live model and its cost per point, from an evaluation's manifest
    (``ml_platform_job.evaluation``: both models scored on the same held-out ids). ``usd_per_accuracy_point`` is None when
    the run gained nothing, has no cost, or the two were not scored on the same ids (``reason`` says which)."""
    candidate, live = manifest.get("candidate"), manifest.get("live")
    found = {"live_score": None, "candidate_score": None, "examples": None, "accuracy_points": None,
             "usd_per_accuracy_point": None, "reason": None}
    if not candidate or not live:
        return {**found, "reason": "the evaluation scored no live model (the first promotion): no gain to price"}
    if candidate.get("ids_sha256") != live.get("ids_sha256"):
        return {**found, "reason": "the candidate and the live model were scored on different ids"}
    points = (candidate["score"] - live["score"]) * 100
    cost = record.get("cost_usd")
    found.update(live_score=live["score"], candidate_score=candidate["score"], examples=candidate.get("examples"),
                 accuracy_points=round(points, 6))
    if cost is None:
        return {**found, "reason": "the run's cost is unknown"}
    if points <= 0:
        return {**found, "reason": "no gain over the live model"}
    return {**found, "usd_per_accuracy_point": round(cost / points, 6)}


def seed_worker(worker_id: int) -> None:
    """A DataLoader's ``worker_init_fn``: each worker's Python and NumPy generators from torch's per-worker seed
    (PyTorch's reproducibility notes, "DataLoader": https://docs.pytorch.org/docs/stable/notes/randomness.html)."""
    import torch  # type: ignore[import-not-found]

    worker_seed = torch.initial_seed() % 2 ** 32
    random.seed(worker_seed)
    try:
        import numpy  # type: ignore[import-not-found]
    except ImportError:
        return
    numpy.random.seed(worker_seed)


@dataclass(frozen=True)
class Seeds:
    """What ``seed_everything`` set: pass ``generator`` and ``worker_init_fn`` to each DataLoader (None without
    torch)."""
    seed: int
    generator: Any
    worker_init_fn: Optional[Callable[[int], None]]
    recorded: Mapping[str, Any]


def goodput_queue(env: Mapping[str, str]) -> Optional[str]:
    """The Queue dimension of an attempt's goodput windows: on AWS Batch (its job queues' names are generated), the
    platform's queue name, as the queue's goodput alarms read it (the job definition sets ML_PLATFORM_QUEUE_NAME),
    else Batch's own; off Batch, None (no windows are printed)."""
    if not env.get("AWS_BATCH_JQ_NAME"):
        return None
    return env.get("ML_PLATFORM_QUEUE_NAME") or env["AWS_BATCH_JQ_NAME"]


class TrackedRun:
    """One run of a training job across its attempts (see the module docstring)."""

    def __init__(self, record: dict, location: Location, sink: Optional[MlflowSink], *,
                 clock: Callable[[], float] = time.time, prices: Optional[Mapping] = None, batch: Any = None,
                 monotonic: Callable[[], float] = time.monotonic, writes: bool = True) -> None:
        self.record = record
        self.location = location
        self.sink = sink
        self._clock = clock
        self._monotonic = monotonic
        # The attempt's phases (goodput.PhaseClock), recorded in it as ``phases`` at every save; restarted when this
        # process begins its attempt, so they lie within the attempt's recorded start and end.
        self.clock = PhaseClock(now=monotonic, wall=clock)
        self._timing = False  # this process began the last attempt: its phases are the clock's
        self._writes = writes  # False on a multi-node job's other nodes: only the main node records the run
        self._prices = prices
        self._batch = batch
        self._batch_jobs: dict[str, Optional[Mapping[str, Any]]] = {}  # DescribeJobs' answers, once per job id
        self._sink_failed = False
        self._host_job: Optional[str] = None  # this attempt's name in the instance's job lines (host.py)
        self._crash: Optional[str] = None  # the exception that ended the process, when one did
        # The attempt's training-health rules (health.HealthMonitor), when the adapter attached them: their verdicts
        # go into the record (``health``) at every checkpoint and at the attempt's end.
        self.health: Any = None

    # --- start or continue --------------------------------------------------------------------------------------
    @classmethod
    def start(cls, *, params: Optional[Mapping[str, Any]] = None, flags: Optional[Mapping[str, Any]] = None,
              seed: Optional[int] = None,
              dataset: Optional[passports.DatasetRef] = None, holdout: Optional[Mapping[str, Any]] = None,
              env: Optional[Mapping[str, str]] = None, s3: Any = None, tracking_uri: Optional[str] = None,
              experiment: Optional[str] = None, run_name: Optional[str] = None, code_directory: Optional[str] = None,
              clock: Callable[[], float] = time.time, prices: Optional[Mapping] = None,
              batch: Any = None, monotonic: Callable[[], float] = time.monotonic) -> "TrackedRun":
        """Continues the run recorded next to the checkpoints when this attempt's configuration is the run's
        (``identity``; SystemExit naming what changed otherwise), or starts one; either way a new attempt begins.
        ``batch``: a Batch client for the times of a lost attempt (default: boto3's, on AWS Batch only). On a
        multi-node job only the main node (``AWS_BATCH_JOB_NODE_INDEX`` equal to ``AWS_BATCH_JOB_MAIN_NODE_INDEX``)
        writes the record and logs to MLflow: the others read it and time their own phases. ``flags``: parameters
        that do not make the run (a logging interval, output paths): recorded, never compared."""
        entered = clock()  # the attempt's paid time inside the job starts here at the latest (before the
        # fingerprint, the passport and MLflow's start): at the process's own start where that is known
        env = dict(os.environ) if env is None else dict(env)
        if "ML_PLATFORM_CHECKPOINT_URI" not in env:
            raise SystemExit("ML_PLATFORM_CHECKPOINT_URI is not set: the run record lives next to the checkpoints "
                             "(./platform job submit sets it; locally, set it to a directory or an s3:// prefix)")
        location = Location(env["ML_PLATFORM_CHECKPOINT_URI"], s3)
        tracking_uri = tracking_uri or env.get("MLFLOW_TRACKING_URI")
        experiment = (experiment or env.get("MLFLOW_EXPERIMENT_NAME") or env.get("ML_PLATFORM_QUEUE_NAME")
                      or env.get("ML_PLATFORM_FLEET_NAME") or "ml-platform")
        existing = location.read(RECORD_NAME)
        writes = main_node(env)
        sink = mlflow_sink(tracking_uri, experiment) if writes else None
        fingerprint, dataset_list = passports.dataset_fingerprint(dataset, s3) if dataset else (None, None)
        passport, packages, diff = passports.collect(env=env, seed=seed, params=params or {},
                                                     code_directory=code_directory, dataset=fingerprint,
                                                     outputs=passports.output_paths(flags or {}, env))
        passport["holdout"] = dict(holdout) if holdout else None
        # Flags (logging interval, output paths): recorded, never part of the run's identity.
        passport["flags"] = passports.redact_params(flags or {})
        identity = passports.run_identity(passport)
        if existing is not None:
            record = json.loads(existing)
            compared = ("code", "image", *(part for part, given in (("params", params), ("seed", seed),
                                                                     ("dataset", dataset), ("holdout", holdout))
                                           if given is not None))
            cls._same_configuration(record, identity, compared)
            if sink and record.get("tracking_uri") != sink.tracking_uri:
                sink = None  # the run was not created in this tracking store: keep to the record
            run = cls(record, location, sink, clock=clock, prices=prices, batch=batch, monotonic=monotonic,
                      writes=writes)
            if run.finished:
                return run
            run._continue(env, packages, run._attempt_start(entered, record, env))
            return run
        now = clock()
        name = run_name or env.get("ML_PLATFORM_JOB_NAME") or f"run-{datetime.fromtimestamp(now, timezone.utc):%Y%m%d-%H%M%S}"
        record = {"format": RECORD_FORMAT, "run_id": None, "run_name": name, "experiment": experiment,
                  "tracking_uri": tracking_uri if sink else None, "status": RUNNING, "created_at": _iso(now),
                  "finished_at": None, "checkpoint_uri": location.uri, "identity": identity, "passport": passport,
                  "metrics": {}, "first_holdout": {}}
        run = cls(record, location, sink, clock=clock, prices=prices, batch=batch, monotonic=monotonic, writes=writes)
        run.record["run_id"] = run._safely(lambda: sink.create(name, run._tags()), None) if sink else None
        run.record["run_id"] = run.record["run_id"] or uuid.uuid4().hex
        artifacts = {PACKAGES_NAME: "\n".join(packages) + "\n"}
        if dataset_list is not None:
            artifacts[passports.DATASET_LIST_NAME] = dataset_list
        if diff is not None:
            artifacts[passports.DIFF_NAME] = diff
        for artifact, text in artifacts.items():  # next to the passport always; in MLflow as well when there is one
            if writes:
                location.write(artifact, text)
        if sink:
            # The passport's parameters, secrets as "<redacted>" (passport.redact_params).
            run._safely(lambda: sink.log(run.run_id, params={**passport["params"], "seed": seed}))
            for artifact, text in artifacts.items():
                run._safely(lambda: sink.artifact(run.run_id, artifact, text))
            if fingerprint:
                run._safely(lambda: sink.dataset(run.run_id, fingerprint))
        run._begin_attempt(env, packages, run._attempt_start(entered, record, env))
        return run

    def _attempt_start(self, entered: float, record: Mapping[str, Any], env: Mapping[str, str]) -> float:
        """The attempt's start, for the first run this process starts on the real clock (every run on an injected
        clock: a test's attempt): AWS Batch's own start of it on Batch (``_batch_started_at``), else the process's
        own start (its imports, the dataset's fingerprint and the passport are paid time too), each only when it is
        not after ``entered`` and not before the run's previous attempt ended; else ``entered``, when ``start`` was
        called (a notebook's second run, off Batch on a fake clock, neither start readable)."""
        global _PROCESS_START_USED
        if self._clock is time.time:
            if _PROCESS_START_USED:
                return entered
            _PROCESS_START_USED = True
            readers: tuple[Callable[[], Optional[float]], ...] = (lambda: self._batch_started_at(env),
                                                                  hosts.process_started_at)
        else:
            readers = (lambda: self._batch_started_at(env),)
        attempts = (record.get("passport") or {}).get("attempts") or []
        previous = max((_epoch(a.get("ended_at") or a.get("last_seen_at") or a["started_at"]) for a in attempts
                        if a.get("started_at")), default=None)
        for read in readers:
            found = read()
            if found is not None and found <= entered and (previous is None or found >= previous):
                return found
        return entered

    @staticmethod
    def _same_configuration(record: Mapping[str, Any], identity: Mapping[str, Any], compared: tuple[str, ...]) -> None:
        """SystemExit, in one line, when this attempt's configuration is not the recorded run's."""
        recorded = record.get("identity")
        if recorded is None:
            return  # a record of format 1 has no identity to compare with
        before, after = recorded["parts"].get("image"), identity["parts"].get("image")
        if not (str(before).startswith("sha256:") and str(after).startswith("sha256:")):
            # A digest on one side and a URI on the other (the ECS metadata endpoint did not answer in time on one
            # attempt) says nothing about a change: images are compared by digest only.
            compared = tuple(part for part in compared if part != "image")
        changes = passports.identity_changes(recorded["parts"], identity["parts"], compared)
        if not changes:
            return
        shown = "; ".join(changes[:3]) + (f" (and {len(changes) - 3} more)" if len(changes) > 3 else "")
        name = record.get("run_name")
        raise SystemExit(f"error: run {record['run_id']} ({name}) was started with another configuration: {shown}. "
                         f"A changed configuration is a new run, with checkpoints of its own: submit it under a new "
                         f"job name (e.g. --name {name}-2; on a fleet, a new ML_PLATFORM_CHECKPOINT_URI), or restore "
                         f"the configuration to continue run {record['run_id']}")

    def _continue(self, env: Mapping[str, str], packages: list[str], started: float) -> None:
        attempts = self.record["passport"]["attempts"]
        if attempts and attempts[-1]["outcome"] == "running":
            # Ended without a word (a hard kill, a lost instance): billed to Batch's end of it where readable, else
            # to its last checkpoint (it ran at least that long: a lower bound).
            lost = attempts[-1]
            stopped = self._batch_stopped_at(lost, env)
            if stopped is not None:
                lost.update(outcome="lost", ended_at=_iso(stopped), end_known=True,
                            reason="ended without stopping cleanly; billed to AWS Batch's stoppedAt for it")
            else:
                lost.update(outcome="lost", ended_at=lost["last_seen_at"], end_known=False,
                            reason="ended without stopping cleanly; AWS Batch's end of it unreadable (batch:"
                                   "DescribeJobs), billed to its last checkpoint: a lower bound")
        self.record["status"] = RUNNING
        if self.sink:
            self._safely(lambda: self.sink.resume(self.run_id))
        self._begin_attempt(env, packages, started)

    def _batch_job(self, job_id: str, env: Mapping[str, str]) -> Optional[Mapping[str, Any]]:
        """AWS Batch's record of a job (``DescribeJobs``), asked once per job id; None where the job cannot read it
        (not on AWS Batch, no batch:DescribeJobs, no network, no such job): never an error."""
        if job_id in self._batch_jobs:
            return self._batch_jobs[job_id]
        try:
            client = self._batch
            if client is None:
                if "AWS_BATCH_JOB_ID" not in env:
                    return None  # not on AWS Batch: nothing to ask
                import boto3
                from botocore.config import Config
                # One try (max_attempts 1 would be one retry): in a subnet with no route to Batch's endpoint the
                # connect times out once, per address tried, and the attempt starts on the process's clock.
                client = boto3.client("batch", config=Config(connect_timeout=2, read_timeout=5,
                                                             retries={"total_max_attempts": 1}))
            jobs = client.describe_jobs(jobs=[job_id])["jobs"]
            found = jobs[0] if jobs and isinstance(jobs[0], Mapping) else None
        except Exception:  # no permission, no network, no such job: the caller's fallback stands
            found = None
        self._batch_jobs[job_id] = found
        return found

    def _batch_stopped_at(self, attempt: Mapping[str, Any], env: Mapping[str, str]) -> Optional[float]:
        """AWS Batch's ``stoppedAt`` (epoch seconds) of a lost attempt, None where the job cannot read it.
        https://docs.aws.amazon.com/batch/latest/APIReference/API_AttemptDetail.html"""
        if not attempt.get("job_id") or not attempt.get("batch_attempt"):
            return None
        job = self._batch_job(attempt["job_id"], env)
        try:
            tried = (job or {}).get("attempts") or []
            stopped = tried[attempt["batch_attempt"] - 1].get("stoppedAt") if len(tried) >= attempt["batch_attempt"] \
                else None
        except Exception:  # an answer of another shape: the lower bound stands
            return None
        return stopped / 1000 if isinstance(stopped, (int, float)) and stopped > 0 else None

    def _batch_started_at(self, env: Mapping[str, str]) -> Optional[float]:
        """AWS Batch's start (epoch seconds) of this process's attempt (``AWS_BATCH_JOB_ATTEMPT`` of
        ``AWS_BATCH_JOB_ID``): its entry's ``startedAt`` where the job's ``attempts`` lists it already, else the job's
        own ``startedAt`` (the running attempt's), unless a listed attempt stopped after it (a previous attempt's
        start). None off AWS Batch or where the job cannot read it.
        https://docs.aws.amazon.com/batch/latest/APIReference/API_JobDetail.html"""
        job_id = batch_job_id(env)
        if not job_id:
            return None
        job = self._batch_job(job_id, env)
        if job is None:
            return None
        try:
            tried = job.get("attempts") or []
            number = int(env["AWS_BATCH_JOB_ATTEMPT"]) if env.get("AWS_BATCH_JOB_ATTEMPT") else len(tried) + 1
            if 1 <= number <= len(tried):
                started = tried[number - 1].get("startedAt")
            else:
                started = job.get("startedAt")
                if any((a.get("stoppedAt") or 0) > (started or 0) for a in tried):
                    started = None
        except Exception:  # an answer of another shape: the process's clock stands
            return None
        return started / 1000 if isinstance(started, (int, float)) and started > 0 else None

    def _begin_attempt(self, env: Mapping[str, str], packages: list[str], started: Optional[float] = None) -> None:
        started = self._clock() if started is None else started
        instance_type, lifecycle = passports.instance(env)
        environment = passports.attempt_environment(env, packages)
        now = _iso(started)
        self.clock.close()
        self.clock = PhaseClock(now=self._monotonic, wall=self._clock)
        self.clock.started_before(self._clock() - started)  # the clock's startup runs from the attempt's start
        self._timing = True
        queue = goodput_queue(env)
        if queue:
            self.clock.emit_windows(queue, instance_type=instance_type, env=env)
        passport = self.record["passport"]
        attempts = passport["attempts"]
        number = len(attempts) + 1
        if environment["packages_sha256"] != passport["packages"]["sha256"]:
            environment["packages_artifact"] = f"packages-attempt-{number}.txt"
            listed = "\n".join(packages) + "\n"
            if self._writes:
                self.location.write(environment["packages_artifact"], listed)
            if self.sink:
                self._safely(lambda: self.sink.artifact(self.run_id, environment["packages_artifact"], listed))
        before = next((a["environment"] for a in reversed(attempts) if a.get("environment")), None)
        changes = passports.environment_changes(before, environment) if before else []
        changes = [c for c in changes if not c.startswith("packages_artifact ")]
        attempts.append({
            "number": number,
            "job_id": job_id_from_environment(env),
            "batch_attempt": int(env["AWS_BATCH_JOB_ATTEMPT"]) if env.get("AWS_BATCH_JOB_ATTEMPT") else None,
            "instance_type": instance_type, "lifecycle": lifecycle,
            "gpu_share": gpu_share(instance_type, environment["gpu"]["count"]) if instance_type else 1.0,
            "nodes": int(env.get("AWS_BATCH_JOB_NUM_NODES") or 1),  # a multi-node job pays for every node
            "environment": environment, "environment_changes": changes,
            "started_at": now, "last_seen_at": now, "ended_at": None, "outcome": "running", "reason": None})
        if self._writes:  # the instance's records: boot, image pull, the jobs before this one (host.py)
            self._host_job = f"{self.run_id}#{number}"
            found = hosts.host_record(env, job=self._host_job, started=started, imds=passports._imds)
            if found is not None:
                attempts[-1]["host"] = found
                attempts[-1]["availability_zone"] = found["availability_zone"]
            _OPEN_RUNS.add(self)
            _install_exit_hooks()
        if changes:
            passport.setdefault("environment_changes", []).append({"attempt": number, "changes": changes})
            print(f"tracking: attempt {number} runs on another environment than attempt {number - 1}: "
                  + "; ".join(changes), file=sys.stderr)
        # The latest attempt's instance and environment are the run's (each attempt keeps its own in attempts).
        passport["instance_type"], passport["lifecycle"] = instance_type, lifecycle
        passport["gpu"], passport["image"] = environment["gpu"], environment["image"]
        passport["frameworks"] = {**environment["frameworks"], "cuda": environment["cuda"]["build"],
                                  "driver": environment["driver"]}
        self._save()

    # --- during the run -----------------------------------------------------------------------------------------
    def loader_settings(self, *, dataset_gb: Optional[float] = None,
                        decodes_images_on_cpu: bool = False) -> LoaderSettings:
        """Data-loader settings for the instance this attempt runs on (``goodput.loader_settings``:
        ``.dataloader_kwargs()`` for ``torch.utils.data.DataLoader``): from the GPU catalog for a known type, else
        from this host's vCPUs, GPUs and memory."""
        instance_type = self.attempt.get("instance_type") if self.record["passport"]["attempts"] else None
        try:
            return loader_settings_for(instance_type or "", dataset_gb=dataset_gb,
                                       decodes_images_on_cpu=decodes_images_on_cpu)
        except ValueError:  # not a catalog type (or run by hand): this host's counts
            gpus = (self.attempt.get("environment") or {}).get("gpu", {}).get("count") \
                if self.record["passport"]["attempts"] else None
            memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
            return loader_settings(vcpus=os.cpu_count() or 1, gpus=gpus or 1, memory_gib=memory_gib,
                                   dataset_gb=dataset_gb, decodes_images_on_cpu=decodes_images_on_cpu)

    @property
    def run_id(self) -> str:
        return self.record["run_id"]

    @property
    def finished(self) -> bool:
        return self.record["status"] == FINISHED

    @property
    def attempt(self) -> dict:
        return self.record["passport"]["attempts"][-1]

    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        """The latest value of each metric goes into the record; every value into MLflow (with ``step``)."""
        clean = {name: float(value) for name, value in metrics.items()}
        self.record["metrics"].update(clean)
        if self.sink:
            self._safely(lambda: self.sink.log(self.run_id, metrics=clean, step=step, timestamp=self._clock()))

    def seed_everything(self, seed: Optional[int] = None, deterministic: bool = False) -> Seeds:
        """Seeds Python's, NumPy's (where installed) and torch's generators, CUDA's on every device (where
        present), turns cuDNN's benchmarking off and, with ``deterministic``, torch's deterministic algorithms on
        (and cuDNN's flag, and ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` if unset), as PyTorch's reproducibility notes
        describe (https://docs.pytorch.org/docs/stable/notes/randomness.html); deterministic kernels are slower.
        Records what it set in the attempt and the passport (``seeds``). ``seed`` defaults to the run's; another
        seed than the run's is refused (a new seed is a new run). Call it again in every attempt, before building
        models and data loaders."""
        recorded = self.record["passport"].get("seed")
        seed = recorded if seed is None else seed
        if seed is None:
            raise ValueError("seed_everything: no seed: pass one (an int), or TrackedRun.start(seed=...)")
        if recorded is not None and seed != recorded:
            raise ValueError(f"seed={seed}: the run was started with seed={recorded}; a different seed is a different "
                             "run (start it under a new job name)")
        random.seed(seed)
        done: dict[str, Any] = {"seed": seed, "python": True, "numpy": False, "torch": False, "cuda": False,
                                "cudnn_benchmark": None, "deterministic": deterministic,
                                # Hashing is seeded when the interpreter starts: only recorded here.
                                "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")}
        try:
            import numpy  # type: ignore[import-not-found]
            numpy.random.seed(seed % 2 ** 32)
            done["numpy"] = True
        except ImportError:
            pass
        generator, worker_init_fn = None, None
        try:
            import torch  # type: ignore[import-not-found]
        except ImportError:
            torch = None
        if torch is not None:
            if deterministic:
                # Deterministic cuBLAS with CUDA 10.2+ needs it (PyTorch releases before the check was dropped raise without
                # it), set before CUDA starts: https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
                done["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
            torch.manual_seed(seed)  # every device's generator, CPU and CUDA
            done["torch"] = True
            if torch.cuda.is_available():
                torch.cuda.manual_seed_all(seed)
                done["cuda"] = True
            torch.backends.cudnn.benchmark = False  # benchmarking picks kernels by timing: another run, others
            done["cudnn_benchmark"] = False
            if deterministic:  # only when asked: never turns off what the job turned on itself
                torch.backends.cudnn.deterministic = True
                torch.use_deterministic_algorithms(True)
            generator = torch.Generator()
            generator.manual_seed(seed)
            worker_init_fn = seed_worker
        self.attempt["seeds"] = done
        self.record["passport"]["seeds"] = done
        self._save()
        return Seeds(seed, generator, worker_init_fn, done)

    def note_determinism(self) -> None:
        """Records whether torch's deterministic algorithms are on now (a framework may have turned them on after
        ``seed_everything``: Lightning's ``Trainer(deterministic=True)``, the Trainer's ``full_determinism``)."""
        torch = sys.modules.get("torch")
        seeds = self.attempt.get("seeds")
        if torch is None or seeds is None:
            return
        on = bool(torch.are_deterministic_algorithms_enabled())
        if seeds.get("deterministic") != on:
            seeds["deterministic"] = on
            self.record["passport"]["seeds"] = seeds
            self._save()

    def log_holdout(self, step: Optional[int] = None, **metrics: float) -> None:
        """Scores on the held-out split, logged as ``holdout_<name>``; the first of each is kept as the run's own
        baseline. ``accuracy`` is a fraction from 0 to 1."""
        accuracy = metrics.get("accuracy")
        if accuracy is not None and not 0 <= accuracy <= 1:
            raise ValueError(f"accuracy={accuracy}: a fraction from 0 to 1 (divide a percentage by 100)")
        prefixed = {f"{HOLDOUT_PREFIX}{name}": value for name, value in metrics.items()}
        for name, value in prefixed.items():
            self.record["first_holdout"].setdefault(name, float(value))
        self.log_metrics(prefixed, step=step)

    def record_model(self, uri: str) -> None:
        """Where the trained model is (e.g. ``model.tar.gz`` next to the checkpoints): what a promotion deploys."""
        self.record["model_uri"] = uri
        if self.sink:
            self._safely(lambda: self.sink.log(self.run_id, tags={f"{TAG_PREFIX}model_uri": uri}))

    def checkpointed(self, step: Optional[int] = None) -> None:
        """The job wrote a checkpoint (of ``step``, when it has one): the attempt was alive until now (the cost of an
        attempt that is lost without a word is counted until then). Writes the record."""
        self.attempt["last_seen_at"] = _iso(self._clock())
        self.attempt["checkpoints"] = self.attempt.get("checkpoints", 0) + 1
        if step is not None:
            self.attempt["checkpoint_step"] = step
        self._note_health()
        self._save()

    def restored(self, step: Optional[int], checkpoint: Optional[str] = None) -> None:
        """The attempt resumed from a checkpoint (of ``step``; ``checkpoint``: where it lies), not from the start:
        ``runs show`` and the rehearsal read it. Writes the record."""
        self.attempt["restored_from"] = {"step": step, "checkpoint": checkpoint}
        self._save()

    def stop(self, reason: str = "stop requested (SIGTERM or the stop file)", *, step: Optional[int] = None,
             saved: Optional[bool] = None) -> dict:
        """The attempt ends early; exit 143 next so the queue retries it. ``step``: the step it stopped at; ``saved``:
        whether a checkpoint of that step is written (the rehearsal checks it; False: the steps since the last
        checkpoint are lost)."""
        fields: dict[str, Any] = {"reason": reason}
        if step is not None:
            fields["stopped_at_step"] = step
        if saved is not None:
            fields["saved_at_stop"] = saved
        return self._close("stopped", STOPPED, "KILLED", fields)

    def resized(self, request: Mapping[str, Any], *, step: Optional[int] = None,
                saved: Optional[bool] = None) -> dict:
        """The job asked to run at another size (``elastic``: ``request`` has ``to``, ``reason`` and the payback's
        figures): the attempt ends ``resized`` and the run waits, as after a stop, for the queue's elastic controller
        to resubmit it at the new size under the same name (the same run, its next attempt); exit 86 next."""
        fields: dict[str, Any] = {"reason": f"resize to {request.get('to')} node(s) requested: {request.get('reason')}",
                                  "resize": dict(request)}
        if step is not None:
            fields["stopped_at_step"] = step
        if saved is not None:
            fields["saved_at_stop"] = saved
        return self._close("resized", STOPPED, "KILLED", fields)

    def finish(self, *, improves_on: Union[None, float, Mapping[str, Any]] = None,
               tokens: Optional[float] = None, final_state_sha256: Optional[str] = None) -> dict:
        """Training is done: the attempt ends, cost and its per-point figures are computed; exit 0 next.
        ``final_state_sha256``: the trained weights' digest (``torch_state.state_digest``), which a rehearsal compares
        with an uninterrupted run's."""
        if final_state_sha256 is not None:
            self.record["final_state_sha256"] = final_state_sha256
        return self._close("finished", FINISHED, "FINISHED", {}, improves_on=improves_on, tokens=tokens)

    def fail(self, reason: str) -> dict:
        """The attempt ended in an error (an exception, an exit without ``finish`` or ``stop``): recorded as
        ``failed`` with ``reason``, its cost counted, the MLflow run ended FAILED. Called at the interpreter's exit
        for an attempt left open; a hard kill (SIGKILL, out of memory) leaves it ``running``, billed to its last
        record."""
        return self._close("failed", FAILED, "FAILED", {"reason": reason})

    def health_stop(self, verdict: Mapping[str, Any], *, saved: Optional[bool] = None) -> dict:
        """A training-health rule stopped the job (``verdict``: ``health.Verdict.to_dict()``: rule, step, values,
        message, fix): the attempt ends ``health_stopped`` and the run FAILED (the queue does not retry exit 85).
        ``saved``: whether a checkpoint of the stop's step is written."""
        fields: dict[str, Any] = {"reason": f"health rule {verdict.get('rule')} at step {verdict.get('step')}: "
                                            f"{verdict.get('message')}",
                                  "health_stop": dict(verdict), "stopped_at_step": verdict.get("step")}
        if saved is not None:
            fields["saved_at_stop"] = saved
        return self._close("health_stopped", FAILED, "FAILED", fields)

    def _note_health(self) -> None:
        """The health rules' verdicts so far, and what the next attempt continues from, into the record."""
        if self.health is None:
            return
        try:
            summary = self.health.summary()
            summary["state"] = self.health.state_dict()
        except Exception as error:  # the record is written whatever the rules' state
            summary = {"error": f"{type(error).__name__}: {error}"}
        self.record["health"] = summary
        self.attempt["health"] = {k: summary[k] for k in ("rules", "stop") if k in summary}

    def _close(self, outcome: str, status: str, mlflow_status: str, fields: Mapping[str, Any],
               **summary: Any) -> dict:
        """Ends the attempt as ``outcome`` (with ``fields``) and the run as ``status``: its cost and per-point
        figures (``summary``: ``_summarize``'s), the record and its artifact written, MLflow's run ended as
        ``mlflow_status``. ``stop``, ``finish`` and ``fail`` end here."""
        self._end_attempt()
        now = _iso(self._clock())
        self.attempt.update(outcome=outcome, ended_at=now, last_seen_at=now, **fields)
        self._note_health()
        self.record["status"] = status
        if status == FINISHED:
            self.record["finished_at"] = now
        self._summarize(**summary)
        self._save(artifacts=True)
        if self.sink:
            self._safely(lambda: self.sink.end(self.run_id, mlflow_status))
        return self.record

    def _end_attempt(self) -> None:
        """The attempt's clock stops publishing; the instance's job lines get its end."""
        _OPEN_RUNS.discard(self)
        self.clock.close()
        if self.health is not None and hasattr(self.health, "close"):
            self.health.close()
        if self._host_job is not None:
            hosts.note_job(hosts.RUN_DIR, self._host_job, "end", self._clock())
            self._host_job = None

    def _at_exit(self) -> None:
        if not self._timing or self.record["status"] != RUNNING or self.attempt.get("outcome") != "running":
            return
        self.fail(f"the process ended in {self._crash}" if self._crash and not self._crash.startswith("SIGTERM")
                  else f"the process ended on a {self._crash}" if self._crash
                  else "the process exited without finish() or stop()")

    # --- cost, interruptions, per-point figures -----------------------------------------------------------------
    def _summarize(self, *, improves_on: Union[None, float, Mapping[str, Any]] = None,
                   tokens: Optional[float] = None) -> None:
        attempts = self.record["passport"]["attempts"]
        region = self.record["passport"]["environment"].get("AWS_REGION") or \
            self.record["passport"]["environment"].get("AWS_DEFAULT_REGION") or "us-east-1"
        prices = self._prices or load_prices(region)
        cost, why = attempts_cost(attempts, prices)
        unseen = [a["number"] for a in attempts if a.get("end_known") is False]
        if cost is not None and unseen:
            why = (f"a lower bound: attempt(s) {', '.join(map(str, unseen))} lost without a word, billed to the last "
                   "checkpoint (AWS Batch's stoppedAt was unreadable: grant the job batch:DescribeJobs)")
        interruptions = sum(1 for a in attempts if a["outcome"] in ("stopped", "lost") and a.get("lifecycle") == "spot")
        self.record.update(cost_usd=None if cost is None else round(cost, 6), cost_note=why,
                           cost_lower_bound=bool(unseen) if cost is not None else None,
                           spot_interruptions=interruptions)
        if tokens is not None:
            self.record["tokens"] = tokens
        if self.record.get("tokens") and cost is not None:
            self.record["usd_per_million_tokens"] = round(cost / (self.record["tokens"] / 1e6), 6)
        final = self.record["metrics"].get(f"{HOLDOUT_PREFIX}accuracy")
        if isinstance(improves_on, Mapping):
            baseline = {"run_id": improves_on.get("run_id"), "holdout_accuracy": improves_on["holdout_accuracy"]}
        elif improves_on is not None:
            baseline = {"run_id": None, "holdout_accuracy": float(improves_on)}
        else:
            baseline = self.record.get("improves_on")
        self.record["improves_on"] = baseline
        points = None if final is None or not baseline else round((final - baseline["holdout_accuracy"]) * 100, 6)
        self.record["accuracy_points"] = points
        self.record["usd_per_accuracy_point"] = (round(cost / points, 6) if cost is not None and points and points > 0
                                                 else None)
        chance = self.record["first_holdout"].get(f"{HOLDOUT_PREFIX}accuracy")
        over = None if final is None or chance is None else round((final - chance) * 100, 6)
        self.record["over_chance"] = None if over is None else {
            "holdout_accuracy": chance, "accuracy_points": over,
            "usd_per_point": round(cost / over, 6) if cost is not None and over > 0 else None,
            "note": "over the run's own first held-out evaluation (the untrained model: chance), not over the model "
                    "it would replace"}
        summary = {k: self.record[k] for k in ("cost_usd", "spot_interruptions", "usd_per_accuracy_point",
                                               "usd_per_million_tokens") if self.record.get(k) is not None}
        if self.sink and summary:
            self._safely(lambda: self.sink.log(self.run_id, metrics=summary, tags=self._tags(),
                                               timestamp=self._clock()))

    # --- persistence --------------------------------------------------------------------------------------------
    def _tags(self) -> dict[str, str]:
        p = self.record["passport"]
        dataset = p.get("dataset") or {}
        tags = {"seed": p.get("seed"), "git_commit": (p.get("git_commit") or {}).get("commit"),
                "image": (p.get("image") or {}).get("uri"), "image_digest": (p.get("image") or {}).get("digest"),
                "instance_type": p.get("instance_type"), "lifecycle": p.get("lifecycle"), "queue": p.get("queue"),
                "job_id": p.get("job_id"), "job_name": p.get("job_name"), "trigger": (p.get("trigger") or {}).get("trigger"),
                "dataset": f"{dataset['name']}@{dataset['version']}" if dataset else None,
                "dataset_sha256": dataset.get("sha256"), "packages_sha256": p["packages"]["sha256"],
                "attempts": len(p["attempts"]), "checkpoint_uri": self.location.uri,
                "identity": (self.record.get("identity") or {}).get("sha256"),
                "git_dirty": (p.get("git_commit") or {}).get("dirty"),
                "environment_changed": bool(p.get("environment_changes")) or None,
                "cost_lower_bound": self.record.get("cost_lower_bound") or None}
        stop = (p["attempts"][-1].get("health_stop") or {}) if p["attempts"] else {}
        if isinstance(stop, Mapping) and stop.get("rule"):
            tags.update(health_stop=stop["rule"], health_stop_step=stop.get("step"))
        return {f"{TAG_PREFIX}{k}": str(v) for k, v in tags.items() if v is not None}

    def _save(self, artifacts: bool = False) -> None:
        if not self._writes:
            if self._timing:
                self.attempt["phases"] = self.clock.summary()
            return
        with self._tracking():
            if self._timing:
                self.attempt["phases"] = self.clock.summary()
            text = json.dumps(self.record, indent=1, sort_keys=True)
            self.location.write(RECORD_NAME, text)
            if artifacts and self.sink:
                self._safely(lambda: self.sink.artifact(self.run_id, RECORD_NAME, text))

    def _tracking(self):
        """The run record's own writes and MLflow calls, timed as the clock's ``tracking`` phase (nested in another
        phase or step, they are that phase's time)."""
        return self.clock.phase("tracking")

    def _safely(self, call: Callable[[], Any], default: Any = None) -> Any:
        """A tracking call that fails is reported once; the record next to the checkpoints carries on."""
        try:
            with self._tracking():
                return call()
        except Exception as error:  # the tracking service must never stop training
            if not self._sink_failed:
                print(f"tracking: MLflow call failed ({type(error).__name__}: {error}); the run is still recorded at "
                      f"{self.location.uri}{RECORD_NAME}", file=sys.stderr)
                self._sink_failed = True
            return default


_HOOKS_INSTALLED = threading.Lock()
_hooked = False


def _install_exit_hooks() -> None:
    """Once per process: an exception that ends the process records each open run's attempt as failed at once (while
    MLflow's uploads still work: at the interpreter's exit its thread pools are gone), an exit without ``finish`` or
    ``stop`` at the interpreter's exit, and a SIGTERM that nothing handles (Batch's terminate-job or timeout, torchrun
    ending a rank whose peer crashed) before the signal ends the process as it would have. A hard kill (SIGKILL, out
    of memory) leaves the attempt ``running``."""
    global _hooked
    with _HOOKS_INSTALLED:
        if _hooked:
            return
        _hooked = True
    previous = sys.excepthook

    def note_exception(kind, value, traceback) -> None:
        for run in list(_OPEN_RUNS):
            run._crash = f"{kind.__name__}: {value}"[:500]
        _record_open_runs()
        previous(kind, value, traceback)

    sys.excepthook = note_exception
    atexit.register(_record_open_runs)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)  # only where nothing else handles it (StopRequest replaces it)


def _terminated(signum, frame) -> None:
    if signal.getsignal(signal.SIGTERM) is not _terminated:
        return  # called by a handler installed since, which chains to it (StopRequest): that handler stops the job
    for run in list(_OPEN_RUNS):
        run._crash = "SIGTERM with no handler (nothing saved since the last checkpoint)"
    _record_open_runs()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # ends the process as the signal would have (exit 143 from a shell)


def _record_open_runs() -> None:
    for run in list(_OPEN_RUNS):
        try:
            run._at_exit()
        except Exception as error:  # the exit must not end in a second traceback; the record says "running"
            print(f"tracking: could not record the attempt's end ({type(error).__name__}: {error})", file=sys.stderr)
