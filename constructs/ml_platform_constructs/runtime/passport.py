"""A training run's passport: what it takes to reproduce and compare a run (standard library and boto3 only).

Collected by ``runtime.tracking.TrackedRun`` when a job starts; each reader falls back quietly where the
information is not there (no GPU on a laptop, no container metadata outside ECS) and says so with ``None``.

- ``environment``: only the platform's, NCCL's, CUDA's and seed variables, and never one whose name or value
  looks like a secret (``filter_environment``).
- ``params``: the job's parameters (often ``vars(args)``), minus any whose name or value looks like a secret by the
  same test (``filter_params``): a ``--hf-token`` never reaches the passport or MLflow.
- ``packages``: ``name==version`` of every installed distribution (a pip freeze without pip), kept as an artifact;
  the passport holds its SHA-256.
- ``dataset``: the URI (``s3://`` prefix or a mounted snapshot's directory) with the count, bytes and SHA-256 of
  its object list (keys, sizes and ETags; paths and sizes for a directory), not of the contents: cheap for
  hundreds of GB, and any added, removed or rewritten object changes it.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Optional

from .benchmark import IMDS, INSTANCE_TYPE_FILE

# Written by the platform's instance bootstrap (instance_bootstrap.py); /run/ml-platform is mounted into queue jobs'
# containers.
LIFECYCLE_FILE = "/run/ml-platform/instance-life-cycle"

# Variables worth recording: the platform's, NCCL's and CUDA's, and seeds.
RECORDED_PREFIXES = ("ML_PLATFORM_", "AWS_BATCH_", "NCCL_", "CUDA_", "CUDNN_", "CUBLAS_", "NVIDIA_", "TORCH_",
                     "PYTORCH_", "OMP_", "MLFLOW_")
RECORDED_NAMES = frozenset({"PYTHONHASHSEED", "AWS_REGION", "AWS_DEFAULT_REGION"})
SEED_NAME = re.compile(r"SEED", re.I)
# A name that says secret, whatever its prefix (MLFLOW_TRACKING_PASSWORD, ML_PLATFORM_API_KEY, ...).
SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW|PASSPHRASE|PWD|CREDENTIAL|PRIVATE|AUTH|SESSION|COOKIE|SIGNATURE|DSN|WEBHOOK"
                         r"|(^|_)KEY($|_)|APIKEY", re.I)
# A value that looks like one: AWS access key ids, JWTs, PEM blocks, credentials in URLs (a user or token before the
# host, a password even with a '/' in it), and the token formats of GitHub, Slack, Hugging Face and OpenAI-style APIs.
SECRET_VALUE = re.compile(
    r"\b(AKIA|ASIA)[0-9A-Z]{16}\b|eyJ[\w-]{8,}\.[\w-]{8,}\.|-----BEGIN [A-Z ]*PRIVATE KEY"
    r"|://[^/\s@]+@|://[^/\s:@]+:[^\s@]+@"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}|\bxox[abpr]-[A-Za-z0-9-]{10,}|hooks\.slack\.com/services/"
    r"|\bhf_[A-Za-z0-9]{20,}|\bsk-[A-Za-z0-9_-]{20,}")
# A URL query that signs or authorizes it: presigned S3 URLs, Azure SAS, ?token=, ?api_key= ...
SECRET_QUERY = re.compile(r"[?&][\w.-]*(sig|signature|token|key|secret|password|credential)[\w.-]*=", re.I)
# An AWS secret access key: 40 base64 characters in mixed case (a git commit, 40 lowercase hex digits, is not one).
BASE64_40 = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])")


def looks_secret(name: str, value: str) -> bool:
    if SECRET_NAME.search(name) or SECRET_VALUE.search(value) or SECRET_QUERY.search(value):
        return True
    return any(re.search("[A-Z]", m) and re.search("[a-z]", m) for m in BASE64_40.findall(value))


def filter_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a passport records: platform, NCCL, CUDA and seed variables, minus anything secret-looking."""
    kept = {}
    for name, value in env.items():
        wanted = name.startswith(RECORDED_PREFIXES) or name in RECORDED_NAMES or SEED_NAME.search(name)
        if wanted and not looks_secret(name, value):
            kept[name] = value
    return dict(sorted(kept.items()))


def filter_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a run records (passport and MLflow), minus any whose name or value looks like a secret: the
    environment's test (``looks_secret``) on the name and the value as text."""
    return {name: value for name, value in params.items() if not looks_secret(str(name), str(value))}


def installed_packages() -> list[str]:
    """``name==version`` of every installed distribution, sorted (what ``pip freeze`` lists, without pip)."""
    found = {}
    for distribution in metadata.distributions():
        name, version = _name_and_version(distribution)
        if name:
            found[name.lower()] = f"{name}=={version}"
    return [found[key] for key in sorted(found)]


def _name_and_version(distribution: metadata.Distribution) -> tuple[Optional[str], Optional[str]]:
    """Name and Version from the headers of the distribution's metadata file alone: ``distribution.metadata`` and
    ``distribution.version`` each parse the whole file, long description included (5x the time)."""
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    return headers["Name"], headers["Version"]


def packages_digest(packages: list[str]) -> str:
    return hashlib.sha256("\n".join(packages).encode()).hexdigest()


def _run(command: list[str], timeout: float = 10) -> Optional[str]:
    if not shutil.which(command[0]):
        return None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def gpus() -> dict:
    """Model, count and memory of the GPUs this process sees (``nvidia-smi``), and the driver version."""
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    rows = [[c.strip() for c in line.split(",")] for line in (out or "").splitlines() if line.strip()]
    if not rows:
        return {"model": None, "count": 0, "memory_mib": None, "driver": None}
    return {"model": rows[0][0], "count": len(rows), "memory_mib": int(float(rows[0][1])), "driver": rows[0][2]}


def frameworks(driver: Optional[str] = None) -> dict:
    """torch, CUDA, cuDNN and NCCL versions where torch is installed, and the GPU driver; None where absent."""
    found: dict[str, Any] = {"torch": None, "cuda": None, "cudnn": None, "nccl": None, "driver": driver}
    try:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            return found
        import torch  # type: ignore[import-not-found]
    except Exception:  # a broken install must not stop the job
        return found
    found["torch"] = torch.__version__
    found["cuda"] = getattr(torch.version, "cuda", None)
    try:
        found["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()
            found["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        pass
    return found


def container_image(env: Mapping[str, str], timeout: float = 2.0) -> dict:
    """The image and its digest: from the ECS task metadata endpoint (AWS Batch on ECS sets
    ECS_CONTAINER_METADATA_URI_V4), else ``ML_PLATFORM_IMAGE``.
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4.html"""
    url = env.get("ECS_CONTAINER_METADATA_URI_V4")
    if url:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                container = json.loads(response.read())
            return {"uri": container.get("Image"), "digest": container.get("ImageID")}
        except (OSError, ValueError):
            pass
    return {"uri": env.get("ML_PLATFORM_IMAGE"), "digest": env.get("ML_PLATFORM_IMAGE_DIGEST")}


def git_commit(env: Mapping[str, str], directory: Optional[str] = None) -> dict:
    """``ML_PLATFORM_GIT_COMMIT`` (set it when the image is built), else the commit of the code's checkout and
    whether it had uncommitted changes."""
    if env.get("ML_PLATFORM_GIT_COMMIT"):
        return {"commit": env["ML_PLATFORM_GIT_COMMIT"], "dirty": None}
    where = ["-C", directory] if directory else []
    commit = _run(["git", *where, "rev-parse", "HEAD"])
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _run(["git", *where, "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(status)}


def _imds(path: str, timeout: float = 1.0) -> Optional[str]:
    try:
        token_request = urllib.request.Request(f"{IMDS}/latest/api/token", method="PUT",
                                               headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with urllib.request.urlopen(token_request, timeout=timeout) as response:
            token = response.read().decode()
        request = urllib.request.Request(f"{IMDS}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read().decode().strip()
    except OSError:
        return None


def _first_line(path: str) -> Optional[str]:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def instance(env: Mapping[str, str]) -> tuple[Optional[str], Optional[str]]:
    """(instance type, "spot" | "on-demand"): ``ML_PLATFORM_INSTANCE_TYPE`` / ``ML_PLATFORM_LIFECYCLE``, else the
    files the platform's boot writes (a queue job's container cannot reach the metadata service), else the
    metadata service itself on a fleet's host."""
    instance_type = env.get("ML_PLATFORM_INSTANCE_TYPE") or _first_line(INSTANCE_TYPE_FILE)
    lifecycle = env.get("ML_PLATFORM_LIFECYCLE") or _first_line(LIFECYCLE_FILE)
    if env.get("ML_PLATFORM_FLEET_NAME"):
        instance_type = instance_type or _imds("instance-type")
        lifecycle = lifecycle or _imds("instance-life-cycle")
    if lifecycle is not None:
        lifecycle = "spot" if lifecycle.lower() == "spot" else "on-demand"
    return instance_type, lifecycle


@dataclass(frozen=True)
class DatasetRef:
    """A dataset a run trains on: ``uri`` is an ``s3://bucket/prefix/`` or a directory (a mounted snapshot)."""
    name: str
    version: str
    uri: str


def dataset_fingerprint(dataset: DatasetRef, s3: Any = None) -> dict:
    """name, version, uri, and the count, bytes and SHA-256 of the object list (see the module docstring)."""
    digest = hashlib.sha256()
    count = size = 0
    if dataset.uri.startswith("s3://"):
        bucket, _, prefix = dataset.uri[len("s3://"):].partition("/")
        if s3 is None:
            import boto3
            s3 = boto3.client("s3")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):  # S3 lists keys in UTF-8 binary order: stable
                digest.update(f"{item['Key']}\t{item['Size']}\t{item.get('ETag', '')}\n".encode())
                count, size = count + 1, size + item["Size"]
    else:
        root = Path(dataset.uri)
        if not root.is_dir():
            raise ValueError(f"dataset {dataset.name}: {dataset.uri} is neither an s3:// prefix nor a directory")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(f"{path.relative_to(root)}\t{path.stat().st_size}\n".encode())
            count, size = count + 1, size + path.stat().st_size
    return {"name": dataset.name, "version": dataset.version, "uri": dataset.uri, "objects": count, "bytes": size,
            "list_sha256": digest.hexdigest()}


def collect(*, env: Mapping[str, str], seed: Optional[int], params: Mapping[str, Any],
            dataset: Optional[dict], code_directory: Optional[str] = None) -> tuple[dict, list[str]]:
    """The passport's fields known at the start of a run, and the package list (an artifact of its own)."""
    packages = installed_packages()
    gpu = gpus()
    instance_type, lifecycle = instance(env)
    job_id = env.get("AWS_BATCH_JOB_ID", "").split("#", 1)[0] or env.get("ML_PLATFORM_JOB_ID")
    passport = {
        "seed": seed,
        "git_commit": git_commit(env, code_directory),
        "image": container_image(env),
        "python": platform.python_version(),
        "python_implementation": sys.implementation.name,
        "packages": {"count": len(packages), "sha256": packages_digest(packages), "artifact": "packages.txt"},
        "frameworks": frameworks(gpu["driver"]),
        "gpu": {k: gpu[k] for k in ("model", "count", "memory_mib")},
        "instance_type": instance_type,
        "lifecycle": lifecycle,
        "queue": env.get("ML_PLATFORM_QUEUE_NAME") or env.get("AWS_BATCH_JQ_NAME"),
        "fleet": env.get("ML_PLATFORM_FLEET_NAME"),
        "job_id": job_id,
        "job_name": env.get("ML_PLATFORM_JOB_NAME"),
        # What started a retraining job (RetrainOnDrift tells the job in its environment); None for other jobs.
        "trigger": ({"trigger": env["ML_PLATFORM_RETRAIN_TRIGGER"], "alarm": env.get("ML_PLATFORM_RETRAIN_ALARM")}
                    if env.get("ML_PLATFORM_RETRAIN_TRIGGER") else None),
        "attempts": [],
        "dataset": dataset,
        "params": filter_params(params),
        "environment": filter_environment(env),
    }
    return passport, packages
