"""A training run's passport: what it takes to reproduce and compare a run (standard library and boto3 only).

Collected by ``ml_platform_job.tracking.TrackedRun`` when a job starts; each reader falls back quietly where the
information is not there (no GPU on a laptop, no container metadata outside ECS) and says so with ``None``.

- ``environment``: only the platform's, NCCL's, CUDA's and seed variables, and never one whose name or value
  looks like a secret (``filter_environment``).
- ``params``: the job's parameters (often ``vars(args)``), every one by name; a value is ``"<redacted>"`` when it
  looks like a secret (the token and key shapes of ``SECRET_VALUE``), or when the name says secret outright
  (``password``, ``secret``, ``api_key``, ``hf_token``, ... and a ``*_token`` whose value is token-shaped):
  ``redact_params``. Nested mappings and lists are judged the same way at every depth, each value under its own
  key's name (``{"db": {"password": ...}}`` redacts the password alone; structure and other values are kept). Names
  alone are not judged by substrings: ``max_new_tokens``, ``tokenizer``, ``pad_token_id``, ``num_key_value_heads``,
  ``session_length`` and ``use_auth`` are hyperparameters, and they are the run.
- ``packages``: ``name==version`` of every installed distribution (a pip freeze without pip), written next to the
  passport (``packages.txt``) and to MLflow; the passport holds its SHA-256.
- ``dataset``: the URI (``s3://`` prefix or a directory) with a SHA-256 over its contents (``dataset_fingerprint``):
  for S3 the keys, sizes and ETags (S3's own content tag: a rewritten object gets a new one), for a directory the
  SHA-256 of every file, for a mounted snapshot its snapshot id and the manifest of content hashes written when
  the snapshot was built (``MANIFEST.sha256``). The list it was computed from is an artifact of its own.
- ``git_commit``: the commit, and ``git status --porcelain`` with untracked files (a new module the job imports is
  the usual form of dirty); the diff, untracked files included, is an artifact (``code.diff``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.request
import warnings
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .benchmark import IMDS, INSTANCE_TYPE_FILE
from .job_metrics import job_id_from_environment

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


# A parameter's name says secret only when it names one outright; every other parameter is judged by its value.
PARAM_SECRET_NAME = re.compile(r"(^|_)(passwords?|passwd|pwd|passphrases?|secrets?|secret_keys?|api_keys?|apikeys?"
                               r"|access_keys?|private_keys?|credentials?|authorization|hf_token|auth_token"
                               r"|access_token|refresh_token)$", re.I)
# A ``*_token`` parameter is a secret when its value is token-shaped (16+ characters of letters, digits and
# ``_-.=+/``, with a digit): ``pad_token="<pad>"`` and ``eos_token="</s>"`` are vocabulary, not credentials.
TOKEN_PARAM = re.compile(r"(^|_)token$", re.I)
TOKEN_SHAPE = re.compile(r"^(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9_.=+/-]{16,}$")
REDACTED = "<redacted>"


def secret_value(value: str) -> bool:
    """A value in one of the shapes credentials come in (SECRET_VALUE, a signed URL query, an AWS secret key)."""
    if SECRET_VALUE.search(value) or SECRET_QUERY.search(value):
        return True
    return any(re.search("[A-Z]", m) and re.search("[a-z]", m) for m in BASE64_40.findall(value))


def looks_secret(name: str, value: str) -> bool:
    """The environment's test: a secret-sounding name (variables are named by convention) or a secret value."""
    return bool(SECRET_NAME.search(name)) or secret_value(value)


def snake_name(name: str) -> str:
    """A parameter's name as the rules read it: camelCase and kebab-case in snake_case (``apiKey``, ``api-key`` and
    ``SecretAccessKey`` are ``api_key``, ``api_key`` and ``secret_access_key``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_").lower()


def param_is_secret(name: str, value: Any) -> bool:
    """The parameters' test: the value, or a name that says secret outright (see PARAM_SECRET_NAME, TOKEN_PARAM)."""
    name = snake_name(name)
    text = str(value)
    return bool(PARAM_SECRET_NAME.search(name) or (TOKEN_PARAM.search(name) and TOKEN_SHAPE.match(text))
                or secret_value(text))


def filter_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a passport records: platform, NCCL, CUDA and seed variables, minus anything secret-looking."""
    kept = {}
    for name, value in env.items():
        wanted = name.startswith(RECORDED_PREFIXES) or name in RECORDED_NAMES or SEED_NAME.search(name)
        if wanted and not looks_secret(name, value):
            kept[name] = value
    return dict(sorted(kept.items()))


def redact_command(argv: list[str]) -> list[str]:
    """The command line as a passport records it: a secret value, and the value of an option whose name says
    secret (``--hf-token X``, ``--api-key=X``), replaced by ``"<redacted>"``."""
    out = list(argv)
    for index, arg in enumerate(argv):
        if secret_value(arg):
            out[index] = REDACTED
        elif arg.startswith("--"):
            name, equals, value = arg[2:].partition("=")
            key = name.replace("-", "_")
            if equals and param_is_secret(key, value):
                out[index] = f"--{name}={REDACTED}"
            elif (not equals and index + 1 < len(argv) and not argv[index + 1].startswith("--")
                  and param_is_secret(key, argv[index + 1])):
                out[index + 1] = REDACTED
    return out


def redact_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a run records (passport and MLflow): every name, with ``"<redacted>"`` for a value
    ``param_is_secret`` judges one, so a dropped parameter is seen to be dropped. Nested mappings and lists keep
    their structure and are judged at every depth by the same rules (``_redact``)."""
    return {name: _redact(str(name), value) for name, value in params.items()}


def _redact(name: str, value: Any) -> Any:
    """One parameter as recorded. A mapping or a sequence under a name that says secret outright (``credentials``,
    ``db_password``, ``secrets``) is ``"<redacted>"`` whole; any other mapping keeps its keys, each value judged under
    its own key's name (``{"db": {"password": ...}}``), a ``{"name": N, "value": V}`` pair's value under N; a
    sequence (a list, a tuple, a Hydra ListConfig) keeps its items, each judged under the sequence's name
    (``[{"api_key": ...}]``, ``stop_tokens``), unless one item is a secret value: then the whole sequence is (a
    private key given as its lines); a leaf is judged by ``param_is_secret`` (its name and value)."""
    snake = snake_name(name)
    if isinstance(value, Mapping):
        if PARAM_SECRET_NAME.search(snake):
            return REDACTED
        keys = {str(k).lower(): k for k in value}
        if set(keys) == {"name", "value"}:  # an environment-style pair: the value under the name it gives
            pair_name = str(value[keys["name"]])
            return {**value, keys["value"]: _redact(pair_name, value[keys["value"]])}
        return {key: _redact(str(key), item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        if PARAM_SECRET_NAME.search(snake) or any(isinstance(item, str) and secret_value(item) for item in value):
            return REDACTED
        items = [_redact(name, item) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    return REDACTED if param_is_secret(name, value) else value


def filter_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Deprecated (0.6.0; removed in 1.0.0): it dropped every parameter whose name contained TOKEN, AUTH, SESSION,
    PRIVATE or KEY. Use ``redact_params``, which this now is."""
    warnings.warn("passport.filter_params is redact_params now (parameters are kept by name, secret values as "
                  "'<redacted>'): call redact_params (filter_params is removed in 1.0.0)", DeprecationWarning, stacklevel=2)
    return redact_params(params)


def installed_packages() -> list[str]:
    """``name==version`` of every installed distribution, sorted (what ``pip freeze`` lists, without pip).

    Read again only when a distribution's metadata changed: parsing every distribution's metadata takes tens of
    milliseconds, and a process that starts many runs (a notebook, a sweep, the tests) would pay it each time. The
    state compared is each distribution's metadata directory and its metadata file's modification time (listing
    them takes about a millisecond): an install, upgrade or removal adds or removes a directory, and metadata
    rewritten in place (an editable install's ``egg-info`` after a version bump) changes the file's time. A
    distribution found some other way (a finder of its own on ``sys.meta_path``) has no such directory: then the
    list is read every time."""
    found: list[metadata.Distribution] = list(metadata.distributions())
    state: Optional[tuple] = _metadata_state(found)
    if state is None or _PACKAGES_READ.get("state") != state:
        named = {}
        for distribution in found:
            name, version = _name_and_version(distribution)
            if name:
                named[name.lower()] = f"{name}=={version}"
        _PACKAGES_READ.update(state=state, packages=[named[key] for key in sorted(named)])
    return list(_PACKAGES_READ["packages"])


_PACKAGES_READ: dict[str, Any] = {}


def _metadata_state(distributions: list[metadata.Distribution]) -> Optional[tuple]:
    """(metadata directory, its metadata file's modification time) of each distribution; None when one has no
    directory of its own to look at."""
    state = []
    for distribution in distributions:
        path = getattr(distribution, "_path", None)  # a PathDistribution's .dist-info or .egg-info
        if not isinstance(path, Path):
            return None
        state.append((str(path), _modified(path / "METADATA") or _modified(path / "PKG-INFO") or _modified(path)))
    return tuple(state)


def _modified(path: Path) -> Optional[int]:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _name_and_version(distribution: metadata.Distribution) -> tuple[Optional[str], Optional[str]]:
    """Name and Version from the headers of the distribution's metadata file alone: ``distribution.metadata`` and
    ``distribution.version`` each parse the whole file, long description included (5x the time)."""
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    return headers["Name"], headers["Version"]


def packages_digest(packages: list[str]) -> str:
    return hashlib.sha256("\n".join(packages).encode()).hexdigest()


def _run(command: list[str], timeout: float = 10, ok: tuple[int, ...] = (0,), strip: bool = True) -> Optional[str]:
    if not shutil.which(command[0]):
        return None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode not in ok:
        return None
    return result.stdout.strip() if strip else result.stdout


# nvidia-smi's header names the newest CUDA version the driver supports ("CUDA Version: 12.4"); no --query-gpu
# field carries it.
CUDA_DRIVER = re.compile(r"CUDA Version:\s*([0-9.]+)")


def gpus() -> dict:
    """Model, count and memory of the GPUs this process sees (``nvidia-smi``), the driver version and the newest
    CUDA version that driver supports."""
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    rows = [[c.strip() for c in line.split(",")] for line in (out or "").splitlines() if line.strip()]
    if not rows:
        return {"model": None, "count": 0, "memory_mib": None, "driver": None, "cuda_driver": None}
    header = CUDA_DRIVER.search(_run(["nvidia-smi"]) or "")
    return {"model": rows[0][0], "count": len(rows), "memory_mib": int(float(rows[0][1])), "driver": rows[0][2],
            "cuda_driver": header[1] if header else None}


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


DIFF_NAME = "code.diff"
UNTRACKED_DIFF_BYTES = 256 * 1024  # an untracked file larger than this is listed, not copied into the diff
# Untracked files the diff never copies: they usually hold credentials (.env, keys, credential files).
SECRET_FILE = re.compile(r"^\.env|credential|secret|\.pem$|\.key$|^id_(rsa|ed25519|ecdsa)|\.p12$|\.pfx$", re.I)
CHANGES_LISTED = 50


def git_commit(env: Mapping[str, str], directory: Optional[str] = None,
               outputs: Sequence[str] = ()) -> tuple[dict, Optional[str]]:
    """(state, diff) of the code in ``directory`` (the working directory when None): the commit, the tree of that
    directory at the commit, whether the directory differs from it, and the diff (None when clean or unknown).

    The commit is ``ML_PLATFORM_GIT_COMMIT`` (set it when the image is built, with ``ML_PLATFORM_GIT_DIRTY`` true or
    false from ``git status --porcelain`` there), else the checkout's. A checkout at that commit is read for its
    state, within ``directory``: ``git status --porcelain --untracked-files=all`` (untracked files count: a new
    module the job imports is the usual form of dirty) and ``git diff HEAD`` plus each untracked file as a new one.
    The tree (``git rev-parse HEAD:<directory>``) names the code's content: a commit elsewhere in the repository
    leaves it as it is. Untracked files under ``outputs`` (the run's output paths: what it writes next to its script,
    a local checkpoint directory) are not code: a retry after the first attempt wrote them is not "dirty"."""
    where = ["-C", directory] if directory else []
    checkout = _run(["git", *where, "rev-parse", "HEAD"])
    commit = env.get("ML_PLATFORM_GIT_COMMIT") or checkout
    built_dirty = env.get("ML_PLATFORM_GIT_DIRTY", "").strip().lower()
    state: dict[str, Any] = {"commit": commit, "tree": None, "dirty": {"true": True, "1": True, "false": False,
                                                                        "0": False}.get(built_dirty),
                             "source": "ML_PLATFORM_GIT_COMMIT" if env.get("ML_PLATFORM_GIT_COMMIT") else "checkout",
                             "changes": [], "diff_sha256": None}
    if checkout is None or checkout != commit:
        return state, None  # no checkout of this commit here: the build's word, or unknown (None)
    inside = _run(["git", *where, "rev-parse", "--show-prefix"]) or ""
    state["tree"] = _run(["git", *where, "rev-parse", f"HEAD:{inside}"])
    status = _run(["git", *where, "status", "--porcelain", "--untracked-files=all", "--", "."], strip=False) or ""
    lines = [line for line in status.splitlines() if line.strip()]  # paths from the repository's root
    top = Path(_run(["git", *where, "rev-parse", "--show-toplevel"]) or directory or ".")
    if outputs and lines:
        roots = [Path(p).resolve() for p in outputs]

        def output(line: str) -> bool:
            path = (top / line[3:].strip('"')).resolve()
            return line.startswith("?? ") and any(path == root or root in path.parents for root in roots)

        lines = [line for line in lines if not output(line)]
    state.update(dirty=bool(lines), changes=lines[:CHANGES_LISTED], changed_files=len(lines))
    if not lines:
        return state, None
    parts = [_run(["git", *where, "diff", "HEAD", "--no-color", "--", "."], strip=False) or ""]
    for line in lines:
        if line.startswith("?? "):
            path = top / line[3:].strip('"')
            if SECRET_FILE.search(path.name):
                parts.append(f"# untracked, not copied (its name says it may hold secrets): {line[3:]}\n")
            elif path.is_file() and path.stat().st_size <= UNTRACKED_DIFF_BYTES:
                # --no-index exits 1 when the files differ, which they always do here.
                parts.append(_run(["git", "-C", str(top), "diff", "--no-color", "--no-index", "--", "/dev/null",
                                   line[3:].strip('"')], ok=(0, 1), strip=False) or "")
            else:
                parts.append(f"# untracked, not copied (over {UNTRACKED_DIFF_BYTES} bytes or not a file): {line[3:]}\n")
    diff = "".join(parts)
    state["diff_sha256"] = hashlib.sha256(diff.encode()).hexdigest()
    return state, diff


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


MANIFEST_NAME = "MANIFEST.sha256"  # a snapshot's manifest: sha256sum's format, "<sha256>  <path>" a line
DATASET_LIST_NAME = "dataset-manifest.txt"  # what a fingerprint was computed from, next to the passport


@dataclass(frozen=True)
class DatasetRef:
    """A dataset a run trains on: ``uri`` is an ``s3://bucket/prefix/`` or a directory; ``snapshot_id`` for a mounted
    EBS snapshot (immutable: its id and the manifest written when it was built fingerprint it without reading it)."""
    name: str
    version: str
    uri: str
    snapshot_id: Optional[str] = None


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dataset_fingerprint(dataset: DatasetRef, s3: Any = None) -> tuple[dict, str]:
    """(fingerprint, the list it digests): name, version, uri, objects, bytes, ``sha256`` and ``method``.

    - ``s3://``: every object's key, size and ETag (S3 gives a rewritten object a new ETag; nothing is downloaded);
    - a directory with ``snapshot_id`` and the snapshot's ``MANIFEST.sha256``: the id and that manifest;
    - any other directory: the SHA-256 of every file's content (flipped labels of the same size change it)."""
    lines: list[str] = []
    count = size = 0
    if dataset.uri.startswith("s3://"):
        bucket, _, prefix = dataset.uri[len("s3://"):].partition("/")
        if s3 is None:
            import boto3
            s3 = boto3.client("s3")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):  # S3 lists keys in UTF-8 binary order: stable
                lines.append(f"{item.get('ETag', '').strip(chr(34))}  {item['Size']}  {item['Key']}")
                count, size = count + 1, size + item["Size"]
        method = "S3 keys, sizes and ETags"
    else:
        root = Path(dataset.uri)
        if not root.is_dir():
            raise ValueError(f"dataset {dataset.name}: {dataset.uri} is neither an s3:// prefix nor a directory")
        files = sorted(p for p in root.rglob("*") if p.is_file())
        count, size = len(files), sum(p.stat().st_size for p in files)
        manifest = root / MANIFEST_NAME
        if dataset.snapshot_id and manifest.is_file():
            lines = [f"snapshot {dataset.snapshot_id}", *manifest.read_text().splitlines()]
            method = f"snapshot {dataset.snapshot_id} and its {MANIFEST_NAME}"
        else:
            lines = [f"{_file_sha256(path)}  {path.relative_to(root).as_posix()}" for path in files]
            method = "SHA-256 of every file"
    text = "\n".join(lines) + "\n"
    return ({"name": dataset.name, "version": dataset.version, "uri": dataset.uri, "snapshot_id": dataset.snapshot_id,
             "objects": count, "bytes": size, "sha256": hashlib.sha256(text.encode()).hexdigest(), "method": method,
             "artifact": DATASET_LIST_NAME}, text)


def attempt_environment(env: Mapping[str, str], packages: list[str]) -> dict:
    """What an attempt ran on, read at its start: GPUs, driver, CUDA (torch's build and the newest the driver
    supports), frameworks, image, Python and the package list's digest. Spot retries can land on another type."""
    gpu = gpus()
    found = frameworks(gpu["driver"])
    return {"gpu": {k: gpu[k] for k in ("model", "count", "memory_mib")}, "driver": gpu["driver"],
            "cuda": {"build": found["cuda"], "driver_supports": gpu["cuda_driver"]},
            "frameworks": {k: found[k] for k in ("torch", "cudnn", "nccl")}, "image": container_image(env),
            "python": platform.python_version(), "packages_sha256": packages_digest(packages)}


def environment_changes(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``"gpu.model NVIDIA A10G -> NVIDIA L4"`` for every leaf that differs between two attempt environments."""
    changes = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changes += environment_changes(old, new, f"{prefix}{key}.")
        elif old != new:
            changes.append(f"{prefix}{key} {old} -> {new}")
    return changes


def run_identity(passport: Mapping[str, Any]) -> dict:
    """What makes a run this run: parameters, seed, dataset content, code (commit and dirty state), image, held-out
    split; ``sha256`` over them. A retry continues the run only when these match (``TrackedRun.start``)."""
    dataset = passport.get("dataset")
    commit = passport.get("git_commit") or {}
    image = passport.get("image") or {}
    holdout = passport.get("holdout")
    parts = {"params": dict(passport.get("params") or {}), "seed": passport.get("seed"),
             "dataset": {"uri": dataset["uri"], "sha256": dataset["sha256"]} if dataset else None,
             # The code directory's tree where a checkout shows it, else the commit: an unrelated commit elsewhere in
             # the repository between two attempts is not a new configuration.
             "code": {"tree": commit.get("tree") or commit.get("commit"), "dirty": commit.get("dirty")},
             "image": image.get("digest") or image.get("uri"),
             "holdout": {k: holdout.get(k) for k in ("fraction", "salt", "samples", "ids_sha256")} if holdout else None}
    text = json.dumps(parts, sort_keys=True, default=str)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "parts": json.loads(text)}


def identity_changes(before: Mapping[str, Any], after: Mapping[str, Any], compared: tuple[str, ...]) -> list[str]:
    """What differs between two identities' parts, in ``compared`` only: ``"params.lr 0.1 -> 0.2"``."""
    return environment_changes({k: before.get(k) for k in compared}, {k: after.get(k) for k in compared})


def output_paths(flags: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The run's output paths: the flags' values that are local paths (``output_dir``, ``checkpoint_dir``, ...; flags
    never make the run) and a local ``ML_PLATFORM_CHECKPOINT_URI``."""
    found = [str(v) for v in flags.values() if isinstance(v, (str, os.PathLike)) and str(v).strip()
             and "://" not in str(v) and not str(v).startswith("-")]
    uri = env.get("ML_PLATFORM_CHECKPOINT_URI", "")
    if uri and "://" not in uri:
        found.append(uri)
    return found


def collect(*, env: Mapping[str, str], seed: Optional[int], params: Mapping[str, Any],
            dataset: Optional[dict], code_directory: Optional[str] = None,
            outputs: Sequence[str] = ()) -> tuple[dict, list[str], Optional[str]]:
    """The passport's fields known at the start of a run, the package list and the code's diff (artifacts of
    their own). ``gpu``, ``frameworks`` and ``image`` here are the first attempt's; each attempt records its own."""
    packages = installed_packages()
    gpu = gpus()
    instance_type, lifecycle = instance(env)
    job_id = job_id_from_environment(env)
    commit, diff = git_commit(env, code_directory, outputs)
    if diff is not None:
        commit["diff_artifact"] = DIFF_NAME
    passport = {
        "seed": seed,
        "command": redact_command(list(sys.argv)),
        # What runs the command, and where: a rerun needs both ("python" alone may be another interpreter).
        "interpreter": sys.executable,
        "working_directory": os.getcwd(),
        "git_commit": commit,
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
        "params": redact_params(params),
        "environment": filter_environment(env),
    }
    return passport, packages, diff
