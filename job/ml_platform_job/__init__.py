"""ml_platform_job: the job side of the ML training platform, installable in a training image without the AWS CDK.

A training script joins the platform in a few lines and survives a Spot reclaim exactly: its checkpoints hold the
model, optimizer, scheduler, AMP scaler, every random generator and the data position; SIGTERM or the stop file saves
and exits 143 (the queue retries it), and the retry resumes mid-epoch where the last one stopped. Each job is one
recorded run (passport, metrics, held-out scores, cost) and times where its GPU time went (goodput).

    from ml_platform_job import TrainingJob                     # a plain PyTorch loop (docs/BRING_YOUR_SCRIPT.md)
    from ml_platform_job.transformers import PlatformCallback   # Hugging Face Trainer
    from ml_platform_job.lightning import PlatformCallback      # PyTorch Lightning

``python -m ml_platform_job rehearse -- COMMAND...`` proves, before the first real reclaim, that a job survives one.

Training health (``health``): a job that produces NaN, diverges, stops learning or stalls stops itself (a checkpoint
unless the state is NaN, the rule and its values in the run, exit 85, which the queue does not retry); the plain loop
gives its loss with ``job.observe(loss=loss)``, the callbacks read their framework's. docs/HEALTH.md.

The modules, by what they do:

- ``job``: ``TrainingJob``, a plain loop's few lines; ``data``: the resumable sampler and loader;
  ``torch_state``: random generators and a state's digest; ``checkpoints``: complete-or-absent checkpoints;
  ``stop``: SIGTERM, the stop file and the PID file; ``rehearse``: the rehearsal;
- ``health``: the training-health rules and their stop (exit 85);
- ``tracking``, ``passport``, ``holdout``: the run record; ``goodput``: phase timing and the ledger;
  ``prices``, ``instances``: what an attempt cost; ``storage``: ``s3://`` or a directory;
- ``evaluation``, ``outcomes``: the promotion gate's evaluation job; ``benchmark``, ``job_metrics``: throughput and
  progress metrics.

Public names load on first use, so importing the package imports neither torch nor boto3.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.15.1"

# 128 + SIGTERM: the queue's retry strategy retries an attempt that ends with it (and no other code of the job's).
STOPPED_EXIT_CODE = 143

_EXPORTS = {
    "TrainingJob": "job",
    "CheckpointStore": "checkpoints",
    "Location": "storage",
    "TrackedRun": "tracking",
    "DatasetRef": "passport",
    "split": "holdout",
    "describe": "holdout",
    "PhaseClock": "phase_clock",
    "JobSampler": "data",
    "HealthRules": "health",
    "HealthMonitor": "health",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ml_platform_job' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
