"""The promotion gate's evidence: per-example held-out outcomes of a candidate and of the live model, written by an
evaluation job (standard library and boto3 only).

Why a job of its own: the gate (``ml_platform_constructs.runtime.decisions.promotion.judge_outcomes``) is only as good as its evidence, and a training job
can write to every run of its queue (checkpoints, MLflow). A TrainingQueue's evaluation job definition runs the
queue's own image (``./platform model evaluate`` overrides no image) with a role that reads datasets, the candidates'
models and the live models, and alone writes ``evaluations/<queue>/``; it cannot read that prefix back, so
``finish`` builds the manifest from what this process scored.

The contract (``./platform model evaluate`` sets it from the platform's settings, never from the candidate run's own
record; README, "Promotion"):

- ``ML_PLATFORM_CANDIDATE_MODEL_URI``: the candidate run's model (``s3://.../model.tar.gz``, or a local path);
- ``ML_PLATFORM_LIVE_MODEL_URI``: the live model, empty when there is none (the first promotion);
- ``ML_PLATFORM_HOLDOUT_SALT`` and ``ML_PLATFORM_HOLDOUT_FRACTION``: the platform's held-out split
  (``ml_platform_job.holdout``'s), which every judged run must have trained with;
- ``ML_PLATFORM_EVALUATION_URI``: where the outcomes go (``evaluations/<queue>/<run id>/<live version>/``);
- ``ML_PLATFORM_EVALUATION_DATASET_URI`` (``DATASET``): never set by ``./platform model evaluate``, whose job reads
  the dataset its command (config ``promotion.evaluate_command``) names; a job run by hand may take its dataset from
  it (the example does).

The job reads each model with ``model`` (which records the artifact's ETag, VersionId and SHA-256: ``./platform model
promote`` deploys only the bytes that were scored), scores it on every held-out example and calls ``write_outcomes``
for each, then ``finish``: ``candidate.jsonl``, ``live.jsonl`` (JSON Lines of ``{"id": ..., "correct": bool}`` or
``{"id": ..., "error": x}``) and ``evaluation.json`` (the artifacts, the ids' digest and counts).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from . import outcomes as evidence

CANDIDATE, LIVE = "candidate", "live"
MANIFEST = "evaluation.json"
CANDIDATE_MODEL = "ML_PLATFORM_CANDIDATE_MODEL_URI"
LIVE_MODEL = "ML_PLATFORM_LIVE_MODEL_URI"
OUTPUT = "ML_PLATFORM_EVALUATION_URI"
SALT, FRACTION = "ML_PLATFORM_HOLDOUT_SALT", "ML_PLATFORM_HOLDOUT_FRACTION"
DATASET = "ML_PLATFORM_EVALUATION_DATASET_URI"
NO_LIVE = "none"  # the live version's place in the evidence path when there is no live model


def evidence_uri(bucket: str, queue: str, run_id: str, live_version: Optional[str]) -> str:
    """Where the evaluation of ``run_id`` against ``live_version`` lives."""
    return f"s3://{bucket}/evaluations/{queue}/{run_id}/{live_version or NO_LIVE}/"


class _Place:
    """A prefix: ``s3://bucket/prefix/`` or a local directory."""

    def __init__(self, uri: str, s3: Any = None) -> None:
        self.uri = uri if uri.endswith("/") else uri + "/"
        self._s3 = s3

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            import boto3
            self._s3 = boto3.client("s3")
        return self._s3

    def _split(self, name: str) -> tuple[str, str]:
        bucket, _, prefix = self.uri[len("s3://"):].partition("/")
        return bucket, prefix + name

    def read(self, name: str) -> Optional[bytes]:
        if self.uri.startswith("s3://"):
            bucket, key = self._split(name)
            try:
                return self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                return None
        path = Path(self.uri) / name
        return path.read_bytes() if path.exists() else None

    def write(self, name: str, body: bytes) -> None:
        if self.uri.startswith("s3://"):
            bucket, key = self._split(name)
            self.s3.put_object(Bucket=bucket, Key=key, Body=body)
            return
        Path(self.uri).mkdir(parents=True, exist_ok=True)
        (Path(self.uri) / name).write_bytes(body)


def read_artifact(uri: str, s3: Any = None) -> tuple[bytes, dict]:
    """The bytes of one object (``s3://``) or file, and what identifies them: ``uri``, ``sha256``, ``bytes`` and, in
    S3, the ``etag`` and the ``version_id`` (a versioned bucket's; None otherwise) of the very object read."""
    if uri.startswith("s3://"):
        bucket, _, key = uri[len("s3://"):].partition("/")
        if s3 is None:
            import boto3
            s3 = boto3.client("s3")
        response = s3.get_object(Bucket=bucket, Key=key)
        body = response["Body"].read()
        extra = {"etag": response["ETag"], "version_id": response.get("VersionId")}
    else:
        body, extra = Path(uri).read_bytes(), {}
    return body, {"uri": uri, "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body), **extra}


CHUNK_BYTES = 8 * 1024 * 1024  # what streaming a model to disk holds in memory at once


def download_artifact(uri: str, path: Path, s3: Any = None) -> dict:
    """One object (``s3://``) or file copied to ``path`` in chunks (a model of any size: never whole in memory), and
    what identifies it, as ``read_artifact`` says: ``uri``, ``sha256``, ``bytes``, and in S3 ``etag``, ``version_id``."""
    digest, size = hashlib.sha256(), 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        if uri.startswith("s3://"):
            bucket, _, key = uri[len("s3://"):].partition("/")
            if s3 is None:
                import boto3
                s3 = boto3.client("s3")
            response = s3.get_object(Bucket=bucket, Key=key)
            chunks = response["Body"].iter_chunks(CHUNK_BYTES)
            extra = {"etag": response["ETag"], "version_id": response.get("VersionId")}
        else:
            source = open(uri, "rb")
            chunks, extra = iter(lambda: source.read(CHUNK_BYTES), b""), {}
        try:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        finally:
            if not uri.startswith("s3://"):
                source.close()
    return {"uri": uri, "sha256": digest.hexdigest(), "bytes": size, **extra}


@dataclass
class Evaluation:
    """One evaluation job's contract, from its environment."""
    candidate_model_uri: str
    live_model_uri: Optional[str]
    output: _Place
    holdout_salt: str = ""
    holdout_fraction: float = 0.05
    # What this process read and scored: the manifest is built from these (the role cannot read its output back).
    _artifacts: dict = field(default_factory=dict, init=False, repr=False)
    _outcomes: dict = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_environment(cls, env: Optional[Mapping[str, str]] = None, s3: Any = None) -> "Evaluation":
        env = dict(os.environ) if env is None else env
        missing = [name for name in (CANDIDATE_MODEL, OUTPUT) if not env.get(name)]
        if missing:
            raise SystemExit(f"{', '.join(missing)} not set: an evaluation job is started by ./platform model evaluate "
                             "(or set them, and ML_PLATFORM_LIVE_MODEL_URI, by hand)")
        return cls(env[CANDIDATE_MODEL], env.get(LIVE_MODEL) or None, _Place(env[OUTPUT], s3),
                   env.get(SALT, ""), float(env.get(FRACTION) or 0.05))

    def model(self, which: str, s3: Any = None) -> Optional[bytes]:
        """The candidate's or the live model's archive (None: no live model), its identity kept for the manifest."""
        _check_which(which)
        uri = self.candidate_model_uri if which == CANDIDATE else self.live_model_uri
        if uri is None:
            return None
        body, self._artifacts[which] = read_artifact(uri, s3 or self.output._s3)
        return body

    def model_file(self, which: str, directory: Any, s3: Any = None) -> Optional[Path]:
        """The candidate's or the live model's archive streamed to a file under ``directory`` (a large model: never
        whole in memory; ``model`` reads it into memory), its identity kept for the manifest; None: no live model."""
        _check_which(which)
        uri = self.candidate_model_uri if which == CANDIDATE else self.live_model_uri
        if uri is None:
            return None
        path = Path(directory) / which / (uri.rstrip("/").rsplit("/", 1)[-1] or "model")
        self._artifacts[which] = download_artifact(uri, path, s3 or self.output._s3)
        return path

    def write_outcomes(self, which: str, outcomes: Mapping[Any, Any], kind: str = "correct") -> None:
        _check_which(which)
        text = evidence.write_outcomes(outcomes, kind)
        self._outcomes[which] = evidence.read_outcomes(text.splitlines(), source=f"{which}.jsonl")
        self.output.write(f"{which}.jsonl", text.encode())

    def finish(self, **details: Any) -> dict:
        """Writes the manifest: which artifacts were scored (``artifacts``), on what (ids digest, counts), and
        ``details`` (e.g. the dataset). Built from this process's own reads and outcomes: the evaluation role writes
        ``evaluations/<queue>/`` and cannot read it."""
        expected = [CANDIDATE, *([LIVE] if self.live_model_uri else [])]
        for which in expected:
            if which not in self._artifacts:
                raise ValueError(f"the {which} model was not read with Evaluation.model: the manifest must name the "
                                 "artifact that was scored (its ETag is what promote deploys); read it with model()")
            if which not in self._outcomes:
                raise ValueError(f"no {which} outcomes: call write_outcomes({which!r}, ...) before finish()")
        manifest = {"candidate_model_uri": self.candidate_model_uri, "live_model_uri": self.live_model_uri,
                    "holdout": {"salt": self.holdout_salt, "fraction": self.holdout_fraction},
                    "artifacts": {which: self._artifacts[which] for which in expected}, **details}
        for which, outcomes in self._outcomes.items():
            manifest[which] = {"examples": len(outcomes.values), "ids_sha256": outcomes.digest(),
                               "score": outcomes.score()}
        self.output.write(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        return manifest


def _check_which(which: str) -> None:
    if which not in (CANDIDATE, LIVE):
        raise ValueError(f"which={which!r}: {CANDIDATE!r} or {LIVE!r}")


def read_evidence(uri: str, s3: Any = None) -> tuple[evidence.Outcomes, Optional[evidence.Outcomes], dict]:
    """(candidate outcomes, live outcomes or None, manifest) of an evaluation; SystemExit when it is not there."""
    place = _Place(uri, s3)
    manifest = place.read(MANIFEST)
    if manifest is None:
        raise SystemExit(f"error: no evaluation at {uri} (run ./platform model evaluate first, and wait for it)")
    outcomes = {}
    for which in (CANDIDATE, LIVE):
        body = place.read(f"{which}.jsonl")
        outcomes[which] = None if body is None else evidence.read_outcomes(body.decode().splitlines(),
                                                                            source=f"{uri}{which}.jsonl")
    if outcomes[CANDIDATE] is None:
        raise SystemExit(f"error: the evaluation at {uri} has no {CANDIDATE}.jsonl: run it again")
    return outcomes[CANDIDATE], outcomes[LIVE], json.loads(manifest)
