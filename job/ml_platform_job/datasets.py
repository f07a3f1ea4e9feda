"""A dataset as a local directory, for frameworks that read files (torchvision, Hugging Face datasets): the EBS
preload when the instance has one, else the dataset's prefix under ``ML_PLATFORM_DATASETS_URI`` brought to local disk
once (standard library; boto3 for ``s3://``).

    from ml_platform_job.datasets import local_dataset
    root = local_dataset("mnist", "v1")        # /data/mnist, or a local copy of s3://.../datasets/mnist/v1/
    datasets.MNIST(root, train=True, download=False, ...)

1. A ``DatasetVolume`` (``DatasetSnapshotBuilder``'s snapshot) is mounted read-only at ``/data/<name>``; it holds the
   prefix it was built from and its ``MANIFEST.sha256``: used as it is, nothing is copied.
2. A local ``ML_PLATFORM_DATASETS_URI`` (a laptop, the rehearsal): ``<it>/<name>/<version>/`` as it is.
3. ``s3://``: every object of ``<uri>/<name>/<version>/`` is downloaded to ``<cache>/<name>/<version>/`` (``cache``:
   ``ML_PLATFORM_DATASET_CACHE``, default ``/tmp/ml-platform-datasets``), then a marker records the listing (keys,
   sizes, ETags). The next call that sees the same cache (another rank of the job, the job run again on the same
   machine) finds the marker of the same listing and copies nothing; an object whose size or ETag changed is fetched
   again. The processes that share the cache take turns through a file lock: the first downloads, the others wait.
   On a queue the default cache is the container's own disk: each attempt (a retry lands on another instance)
   downloads once. Datasets over about 50 GB belong on EBS (the first case): a copy from S3 at every start costs more
   than the volume.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from .storage import Location

MOUNTS = "/data"
MANIFEST = "MANIFEST.sha256"
MARKER = ".ml-platform-complete.json"
DEFAULT_CACHE = "/tmp/ml-platform-datasets"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def local_dataset(name: str, version: str, *, env: Optional[Mapping[str, str]] = None, s3: Any = None,
                  mounts: str = MOUNTS, cache: Optional[str] = None) -> Path:
    """The dataset ``name`` at ``version`` as a local directory (see the module docstring)."""
    for label, value in (("name", name), ("version", version)):
        if not isinstance(value, str) or not _NAME.match(value):
            raise ValueError(f"{label}={value!r}: 1-128 letters, digits, '.', '_' or '-' (a dataset's {label} under "
                             "ML_PLATFORM_DATASETS_URI)")
    env = os.environ if env is None else env
    mounted = Path(mounts) / name
    if (mounted / MANIFEST).is_file():
        return mounted
    uri = env.get("ML_PLATFORM_DATASETS_URI")
    if not uri:
        raise SystemExit(f"dataset {name}: no volume at {mounted} and ML_PLATFORM_DATASETS_URI is not set (the queue "
                         "and the fleet set it; locally, set it to a directory or an s3:// prefix)")
    source = Location(uri, s3).child(f"{name}/{version}")
    if not source.is_s3:
        path = Path(source.uri)
        if not path.is_dir():
            raise SystemExit(f"dataset {name}/{version}: {path} is not a directory")
        return path
    target = Path(cache or env.get("ML_PLATFORM_DATASET_CACHE") or DEFAULT_CACHE) / name / version
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process of the host downloads; the others wait, then find it there
        listing = _listing(source)
        if not listing:
            raise SystemExit(f"dataset {name}/{version}: nothing under {source.uri}")
        digest = hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()
        marker = target / MARKER
        try:
            before = json.loads(marker.read_text())
        except (OSError, ValueError):
            before = {}
        if before.get("sha256") == digest:
            return target
        marker.unlink(missing_ok=True)
        objects = before.get("objects")
        had = {key: tuple(value) for key, value in objects.items()} if isinstance(objects, dict) else {}
        for key, (size, etag) in sorted(listing.items()):
            local = target / key
            # Kept only when the last complete copy had this very object (size and ETag) and the file is whole.
            if had.get(key) != (size, etag) or not (local.is_file() and local.stat().st_size == size):
                source.download_file(key, local)
        marker.write_text(json.dumps({"sha256": digest, "source": source.uri, "objects": listing}))
    return target


def _listing(source: Location) -> dict[str, tuple[int, str]]:
    """Every object under the prefix: its size and ETag."""
    pages = source.s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=source.prefix)
    return {o["Key"][len(source.prefix):]: (o["Size"], o.get("ETag", "")) for page in pages
            for o in page.get("Contents", []) if not o["Key"].endswith("/")}
