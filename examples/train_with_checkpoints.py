#!/usr/bin/env python3
"""A training job that follows the platform's job contract (README, "The job contract") on a SpotGpuFleet and on a
TrainingQueue (AWS Batch) alike, and records its run with the library's job-contract helper.

It trains a real classifier: multinomial logistic regression, by mini-batch SGD with momentum, on a dataset of
labelled feature rows (CSV with ``id,label,f0,f1,...``) under ``$ML_PLATFORM_DATASETS_URI``; ``make_dataset()``
generates one (overlapping Gaussian classes, so held-out accuracy rises from chance to about 85%, not to 100%). Standard
library only, no GPU: it runs anywhere, and shows the contract a framework adapter keeps for a PyTorch job
(``ml_platform_job.TrainingJob``, the Trainer and Lightning callbacks: docs/BRING_YOUR_SCRIPT.md).

1. Write its PID to $ML_PLATFORM_JOB_PID_FILE first thing (before loading data): on a fleet the interruption
   watcher signals that process, and reports the fleet busy while it lives, so scale-to-zero never stops it.
2. Start or continue its run (``TrackedRun.start``): the passport (seed, code, image, packages, GPU, instance,
   dataset content digest, parameters, filtered environment) next to the checkpoints and, where MLflow is set up,
   in MLflow. Every attempt of the job continues the same run while its configuration is the run's; another
   configuration under the same job name stops with one line saying what changed (a new run takes a new name).
   Then seed every generator (``run.seed_everything``): what it set is recorded.
3. Resume: load the newest complete checkpoint under $ML_PLATFORM_CHECKPOINT_URI, if any (on a queue,
   ``./platform job submit`` sets it to checkpoints/<queue>/<job name>/, the same for every attempt), through the job
   side's ``CheckpointStore`` (complete or absent: a marker written last; the newest two kept). Each epoch's shuffle
   comes from (seed, epoch) and the checkpoint holds the batch the epoch had reached (its data position), so a
   resumed run ends with exactly the model an uninterrupted one would, wherever in an epoch it stopped.
4. Stop: on SIGTERM, or when $ML_PLATFORM_STOP_FILE exists, checked between two batches: write a checkpoint of that
   very batch, record the stop in the run and exit 143 (128 + SIGTERM): the queue retries that attempt, which
   resumes at that batch. Exit 0 only when training is finished: AWS Batch records 0 as SUCCEEDED and never runs the
   job again.
5. Checkpoint every epoch: an instance can also vanish without notice (its steps since the last checkpoint are the
   work the interruption lost). Its phases go to the run's clock (``run.clock``): restore, each batch's wait
   (``clock.batches``) and step (``clock.step``), checkpoint saves and evaluations, the attempt's goodput ledger
   (``./platform runs show``). It has no DataLoader (its batches are list slices); a PyTorch job uses the job side's
   ``TrainingJob`` instead, which does all of this for a plain loop (docs/BRING_YOUR_SCRIPT.md).
6. Judge the model on held-out data: 5% of the rows, chosen by a hash of their id column (``ml_platform_job.holdout``,
   keyed by ``id``: a row's side never moves when a column is added), never train it; ``holdout_accuracy`` before training and at the end. At the end the run gets its cost (every
   attempt's instance-hours x prices), Spot interruptions and USD per accuracy point, and the model is written
   next to the checkpoints as model.tar.gz (what ``./platform model promote`` deploys).

With ``--evaluate`` it is the queue's evaluation job instead (``ml_platform_job.evaluation``, started by ``./platform model
evaluate``): it scores the candidate's model and the live model on every held-out example of the dataset and writes
their per-example outcomes, the evidence the promotion gate judges.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import random
import sys
import tarfile
from typing import Any, Optional
from urllib.parse import urlparse

from ml_platform_job import evaluation
from ml_platform_job.checkpoints import CheckpointStore
from ml_platform_job.goodput import PhaseClock
from ml_platform_job.holdout import describe, split
from ml_platform_job.passport import DatasetRef
from ml_platform_job.stop import StopRequest
from ml_platform_job.tracking import Location, TrackedRun

STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: the queue's retry strategy retries it
STATE_FILE = "state.json"
MODEL_NAME = "model.tar.gz"
DATASET_FILE = "data.csv"


# --- data ---------------------------------------------------------------------------------------------------------
def make_dataset(samples: int = 3000, features: int = 8, classes: int = 3, seed: int = 7, spread: float = 1.5) -> str:
    """CSV text of ``samples`` rows: id, label and ``features`` values drawn around a per-class centre."""
    rng = random.Random(seed)
    centres = [[rng.gauss(0, 1.5) for _ in range(features)] for _ in range(classes)]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "label", *(f"f{i}" for i in range(features))])
    for index in range(samples):
        label = rng.randrange(classes)
        writer.writerow([f"s{index:06d}", label, *(round(c + rng.gauss(0, spread), 5) for c in centres[label])])
    return out.getvalue()


def load_rows(text: str) -> list[tuple[str, int, list[float]]]:
    reader = csv.reader(io.StringIO(text))
    next(reader)
    return [(row[0], int(row[1]), [float(v) for v in row[2:]]) for row in reader]


# --- the model: multinomial logistic regression -------------------------------------------------------------------
def new_state(features: int, classes: int) -> dict:
    """Weights, momentum, and where training stands: ``epoch`` (finished epochs), ``batch`` (batches of the current
    epoch trained), ``step`` (batches trained in all) and the current epoch's loss so far."""
    return {"epoch": 0, "batch": 0, "step": 0, "epoch_loss": 0.0,
            "weights": [[0.0] * features for _ in range(classes)], "bias": [0.0] * classes,
            "velocity_w": [[0.0] * features for _ in range(classes)], "velocity_b": [0.0] * classes}


def digest(state: dict) -> str:
    """SHA-256 of the trained weights: the same digest, the same model (a rehearsal compares it)."""
    return hashlib.sha256(json.dumps([state["weights"], state["bias"]]).encode()).hexdigest()


def probabilities(state: dict, x: list[float]) -> list[float]:
    scores = [sum(w * v for w, v in zip(row, x)) + b for row, b in zip(state["weights"], state["bias"])]
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def predicted(state: dict, x: list[float]) -> int:
    return max(enumerate(probabilities(state, x)), key=lambda p: p[1])[0]


def accuracy(state: dict, rows: list) -> float:
    right = sum(1 for _, label, x in rows if predicted(state, x) == label)
    return right / len(rows) if rows else 0.0


def outcomes(state: dict, rows: list) -> dict[str, bool]:
    """Per held-out example: did the model get it right (the promotion gate's evidence)."""
    return {sample_id: predicted(state, x) == label for sample_id, label, x in rows}


def train_epoch(state: dict, rows: list, *, seed: int, lr: float, momentum: float, batch_size: int,
                clock: PhaseClock, should_stop=lambda: False) -> Optional[float]:
    """The rest of the current epoch, from the batch it had reached (``state["batch"]``), by SGD with momentum; the
    shuffle depends only on (seed, epoch). Returns the epoch's mean log loss, or None when ``should_stop`` turned true
    between two batches: ``state`` then holds every batch trained so far and where the epoch stands, so a checkpoint of
    it resumes at the next batch. ``clock`` times each batch's wait (``clock.batches``: here a list slice; with
    PyTorch, the DataLoader) and each step (``clock.step``)."""
    order = list(range(len(rows)))
    random.Random(seed * 100_003 + state["epoch"]).shuffle(order)
    classes, features = len(state["bias"]), len(state["weights"][0])
    starts = range(state["batch"] * batch_size, len(order), batch_size)
    loader = ([rows[i] for i in order[start:start + batch_size]] for start in starts)
    for batch in clock.batches(loader):
        if should_stop():
            return None
        with clock.step():
            grad_w = [[0.0] * features for _ in range(classes)]
            grad_b = [0.0] * classes
            for _, label, x in batch:
                p = probabilities(state, x)
                state["epoch_loss"] -= math.log(max(p[label], 1e-12))
                for k in range(classes):
                    error = p[k] - (1.0 if k == label else 0.0)
                    grad_b[k] += error
                    row = grad_w[k]
                    for j, v in enumerate(x):
                        row[j] += error * v
            for k in range(classes):
                state["velocity_b"][k] = momentum * state["velocity_b"][k] - lr * grad_b[k] / len(batch)
                state["bias"][k] += state["velocity_b"][k]
                for j in range(features):
                    state["velocity_w"][k][j] = momentum * state["velocity_w"][k][j] - lr * grad_w[k][j] / len(batch)
                    state["weights"][k][j] += state["velocity_w"][k][j]
            state["batch"] += 1
            state["step"] += 1
    loss = state["epoch_loss"] / len(rows)
    state.update(epoch=state["epoch"] + 1, batch=0, epoch_loss=0.0)
    return loss


# --- the job contract ---------------------------------------------------------------------------------------------
class Job:
    """Checkpoints under $ML_PLATFORM_CHECKPOINT_URI (``s3://`` or a directory, through the job side's
    ``CheckpointStore``), the stop request (SIGTERM or the stop file) and the PID file (``StopRequest``)."""

    def __init__(self, env: dict[str, str], s3: Any = None) -> None:
        if "ML_PLATFORM_CHECKPOINT_URI" not in env:
            raise SystemExit("ML_PLATFORM_CHECKPOINT_URI is not set: submit with ./platform job submit (it sets "
                             "checkpoints/<queue>/<job name>/), or set it to an s3:// prefix or a directory of your own")
        self.env = env
        self.checkpoints = Location(env["ML_PLATFORM_CHECKPOINT_URI"], s3)
        self.store = CheckpointStore(self.checkpoints)
        self.stop = StopRequest(env)
        self.stop_file, self.pid_file = self.stop.stop_file, self.stop.pid_file

    def install(self) -> None:
        self.stop.install()

    @property
    def stop_signalled(self) -> bool:
        return self.stop.signalled_at is not None

    @stop_signalled.setter
    def stop_signalled(self, value: bool) -> None:
        if value:
            self.stop.request("SIGTERM")

    def should_stop(self) -> bool:
        return self.stop.requested

    def resume(self) -> Optional[dict]:
        """The newest complete checkpoint's state (with ``checkpoint``: where it lies), or None."""
        latest = self.store.latest()
        if latest is None:
            return None
        state = json.loads(self.store.read(latest, STATE_FILE))
        state["checkpoint"] = f"{self.store.location.uri}{latest.folder}"
        return state

    def save(self, state: dict) -> int:
        """A checkpoint of ``state`` as it stands (its step: the batches trained in all); returns the step."""
        saved = {k: v for k, v in state.items() if k != "checkpoint"}
        self.store.save(state["step"], {STATE_FILE: json.dumps(saved).encode()},
                        meta={"epoch": state["epoch"], "batch": state["batch"]})
        return state["step"]

    def save_model(self, state: dict, params: dict) -> str:
        """model.tar.gz (model.json inside) next to the checkpoints: the artifact a promotion deploys."""
        model = json.dumps({"kind": "multinomial-logistic-regression", "weights": state["weights"],
                            "bias": state["bias"], "params": params}).encode()
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            info = tarfile.TarInfo("model.json")
            info.size = len(model)
            archive.addfile(info, io.BytesIO(model))
        if self.checkpoints.uri.startswith("s3://"):
            self.checkpoints.s3.put_object(Bucket=self.checkpoints.bucket, Key=self.checkpoints.prefix + MODEL_NAME,
                                           Body=buffer.getvalue())
        else:
            with open(os.path.join(self.checkpoints.uri, MODEL_NAME), "wb") as handle:
                handle.write(buffer.getvalue())
        return self.checkpoints.uri + MODEL_NAME


def load_model(archive: bytes) -> dict:
    """The weights of a model.tar.gz that save_model wrote."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return json.loads(tar.extractfile("model.json").read())


def evaluate(env: dict[str, str], rows: list, s3: Any = None) -> dict:
    """The evaluation job: both models on the candidate's held-out split, per example."""
    contract = evaluation.Evaluation.from_environment(env, s3)
    _, holdout_rows = split(rows, key=lambda row: row[0], fraction=contract.holdout_fraction, salt=contract.holdout_salt)
    for which in (evaluation.CANDIDATE, evaluation.LIVE):
        archive = contract.model(which, s3)
        if archive is not None:
            contract.write_outcomes(which, outcomes(load_model(archive), holdout_rows))
    return contract.finish(dataset_rows=len(rows))


def read_dataset(uri: str, s3: Any = None) -> str:
    if uri.startswith("s3://"):
        parsed = urlparse(uri)
        if s3 is None:
            import boto3
            s3 = boto3.client("s3")
        return s3.get_object(Bucket=parsed.netloc, Key=parsed.path.lstrip("/") + DATASET_FILE)["Body"].read().decode()
    with open(os.path.join(uri, DATASET_FILE)) as handle:
        return handle.read()


def where(state: dict) -> str:
    return f"epoch {state['epoch']}" + (f" (batch {state['batch']} of epoch {state['epoch'] + 1})" if state["batch"] else "")


def train(job: Job, run: TrackedRun, rows: list, params: dict, *, on_epoch=None) -> tuple[dict, int]:
    """Trains from the newest checkpoint to params["epochs"]; returns (state, exit code). Its phases go to the
    run's clock (``run.clock``: restore, steps and their data wait, checkpoint saves, evaluations), the attempt's
    goodput ledger."""
    clock = run.clock
    train_rows, holdout_rows = split(rows, key=lambda row: row[0])
    features, classes = len(rows[0][2]), max(label for _, label, _ in rows) + 1
    with clock.phase("restore"):
        state = job.resume()
    if state is None:
        state = new_state(features, classes)
        with clock.phase("evaluation"):
            run.log_holdout(accuracy=accuracy(state, holdout_rows), step=0)  # the untrained model: chance
    else:
        run.restored(state["step"], state.pop("checkpoint"))
        print(f"resuming from the checkpoint of {where(state)}", flush=True)
    while state["epoch"] < params["epochs"]:
        loss = None
        if not job.should_stop():
            loss = train_epoch(state, train_rows, seed=params["seed"], lr=params["lr"], momentum=params["momentum"],
                               batch_size=params["batch_size"], clock=clock, should_stop=job.should_stop)
        if loss is None:  # stopped between two batches (or before the epoch): a checkpoint of that very batch
            with clock.phase("checkpoint_save"):
                job.save(state)
            clock.checkpoint_saved()
            run.stop(f"stop requested ({job.stop.reason}) at {where(state)}", step=state["step"], saved=True)
            return state, STOPPED_EXIT_CODE
        with clock.phase("checkpoint_save"):
            job.save(state)
        clock.checkpoint_saved()
        run.checkpointed(step=state["step"])
        with clock.phase("evaluation"):  # the training-set accuracy: a pass over the data that trains nothing
            train_accuracy = accuracy(state, train_rows)
        run.log_metrics({"train_loss": loss, "train_accuracy": train_accuracy}, step=state["epoch"])
        print(f"epoch {state['epoch']}/{params['epochs']}: loss {loss:.4f}", flush=True)
        if on_epoch:
            on_epoch(state)
    with clock.phase("evaluation"):
        final = accuracy(state, holdout_rows)
    run.log_holdout(accuracy=final, step=state["epoch"])
    with clock.phase("checkpoint_save"):  # the model artifact: a save like a checkpoint's
        uri = job.save_model(state, params)
    run.record_model(uri)
    run.finish(final_state_sha256=digest(state))
    return state, 0


def main(argv: list[str], env: Optional[dict[str, str]] = None, s3: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dataset", default="blobs", help="name under $ML_PLATFORM_DATASETS_URI")
    parser.add_argument("--dataset-version", default="v1")
    parser.add_argument("--evaluate", action="store_true",
                        help="the promotion's evaluation job: score the candidate and the live model (ml_platform_job.evaluation)")
    args = parser.parse_args(argv)
    env = dict(os.environ) if env is None else env
    datasets = env.get("ML_PLATFORM_DATASETS_URI")
    if not datasets:
        raise SystemExit("ML_PLATFORM_DATASETS_URI is not set: the queue and the fleet set it to the dataset bucket's "
                         "datasets/ prefix; locally, set it to an s3:// prefix or a directory")
    dataset = DatasetRef(args.dataset, args.dataset_version,
                         f"{datasets.rstrip('/')}/{args.dataset}/{args.dataset_version}/")
    if args.evaluate:  # the candidate's own dataset when the evaluation names it
        uri = env.get(evaluation.DATASET) or dataset.uri
        manifest = evaluate(env, load_rows(read_dataset(uri, s3)), s3)
        scored = ", ".join(f"{which} {manifest[which]['score']:.3f}" for which in ("candidate", "live") if which in manifest)
        print(f"evaluated on {manifest['candidate']['examples']} held-out examples: {scored}", flush=True)
        return 0
    job = Job(env, s3)
    job.install()
    rows = load_rows(read_dataset(dataset.uri, s3))
    params = {"epochs": args.epochs, "lr": args.lr, "momentum": args.momentum, "batch_size": args.batch_size,
              "seed": args.seed, "model": "multinomial-logistic-regression"}
    holdout_ids = [row[0] for row in split(rows, key=lambda row: row[0])[1]]
    run = TrackedRun.start(params=params, seed=args.seed, dataset=dataset, holdout=describe(holdout_ids), env=env,
                           s3=s3, code_directory=os.path.dirname(os.path.abspath(__file__)))
    if run.finished:  # an earlier attempt finished and only its exit was lost
        print(f"run {run.run_id} already finished", flush=True)
        return 0
    run.seed_everything(args.seed)  # the shuffles below draw from (seed, epoch) themselves; torch jobs need this
    print(f"run {run.run_id}, attempt {run.attempt['number']}", flush=True)
    state, code = train(job, run, rows, params)
    if code:
        batch = f" (batch {state['batch']} of the next)" if state["batch"] else ""
        print(f"attempt {run.attempt['number']}: stopped at epoch {state['epoch']} of {args.epochs}{batch}; checkpoint "
              "written, exit 143 (the queue retries it)", flush=True)
    else:
        record = run.record
        cost = (f"cost {record['cost_usd']} USD" + (" (a lower bound)" if record.get("cost_lower_bound") else "")
                if record["cost_usd"] is not None else f"cost unknown: {record['cost_note']}")
        print(f"run {run.run_id} finished: holdout accuracy {record['metrics']['holdout_accuracy']:.3f}, "
              f"{len(record['passport']['attempts'])} attempt(s), {cost}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
