"""examples/pytorch_loop.py as a job runs it, with a failure injected from outside (the example stays clean): what
``./platform bench health --examples`` runs in the frameworks venv (.venv/frameworks: torch), once per case.

Usage (``ML_PLATFORM_CHECKPOINT_URI`` set; PYTHONPATH holding job/):
    python bench/health_example.py [--inject nan|stall] [--at SAMPLES] [the example's own arguments: --seed 3, --lr 100]

- ``--inject nan``: ``Digits.__getitem__`` returns an all-NaN image from the ``--at``-th sample each loader process
  serves on (every batch after it is NaN: the first one's update poisons the weights anyway).
- ``--inject stall``: the ``--at``-th sample a loader process serves never returns (the worker sleeps until the job's
  process is gone: a hung DataLoader worker, an S3 read that never answers); run it with
  ``ML_PLATFORM_HEALTH_STALL_SECONDS=20``.

The injection is set up at import (the module's top level), so a loader worker started by fork, or by spawn (which
imports this file again as __mp_main__), serves the patched dataset. The first step whose loss is not finite, and the
time the stall began, go to ``<ML_PLATFORM_CHECKPOINT_URI>.fault.json``: the fault's start, for the bench's table.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INJECT_ENV, AT_ENV = "HEALTH_BENCH_INJECT", "HEALTH_BENCH_AT"
DEFAULT_AT = 1600  # samples per loader process: with the example's 2 workers and batches of 32, about step 100


def _load_example():
    """examples/pytorch_loop.py as the module ``pytorch_loop`` (registered, so a spawned worker unpickles its
    dataset)."""
    if "pytorch_loop" in sys.modules:
        return sys.modules["pytorch_loop"]
    spec = importlib.util.spec_from_file_location("pytorch_loop", ROOT / "examples" / "pytorch_loop.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pytorch_loop"] = module
    spec.loader.exec_module(module)
    return module


def _fault_file() -> Path:
    return Path(os.environ["ML_PLATFORM_CHECKPOINT_URI"].rstrip("/") + ".fault.json")


def _note(**values) -> None:
    path = _fault_file()
    known = json.loads(path.read_text()) if path.exists() else {}
    if not any(key in known for key in values):
        path.write_text(json.dumps({**known, **values}))


def _inject(example, what: str, at: int) -> None:
    """Patches the example's dataset: NaN images, or a sample that never returns, from the ``at``-th sample a process
    serves."""
    original = example.Digits.__getitem__
    served = {"count": 0}

    def getitem(self, index):
        served["count"] += 1
        image, label = original(self, index)
        if not self.train or served["count"] < at:
            return image, label
        if what == "nan":
            return image * math.nan, label
        _note(stalled_at=time.time())
        parent = os.getppid()  # in a loader worker: the job's process
        while os.getppid() == parent:
            time.sleep(0.5)  # "forever": until the job's process is gone (then the worker ends with it)
        os._exit(0)

    example.Digits.__getitem__ = getitem


def _watch_losses(job_class) -> None:
    """Notes the first optimizer step whose loss is not finite (one sync a step: the bench's runner only)."""
    observe = job_class.observe

    def observed(self, loss=None, **kwargs):
        if loss is not None and not math.isfinite(float(loss.detach().float().item() if hasattr(loss, "detach")
                                                       else loss)):
            _note(first_non_finite_step=self._optimizer_steps + 1)
        return observe(self, loss, **kwargs)

    job_class.observe = observed


EXAMPLE = _load_example()
if os.environ.get(INJECT_ENV):
    _inject(EXAMPLE, os.environ[INJECT_ENV], int(os.environ.get(AT_ENV) or DEFAULT_AT))


def main(argv: list[str]) -> None:
    inject, at, rest = None, None, []
    items = iter(argv)
    for item in items:
        if item == "--inject":
            inject = next(items)
        elif item == "--at":
            at = int(next(items))
        else:
            rest.append(item)
    if inject not in (None, "nan", "stall"):
        raise SystemExit(f"bench/health_example.py: --inject {inject}: nan or stall")
    if inject and os.environ.get(INJECT_ENV) != inject:  # set for this process and the loader's workers
        os.environ[INJECT_ENV] = inject
        os.environ[AT_ENV] = str(at or DEFAULT_AT)
        _inject(EXAMPLE, inject, at or DEFAULT_AT)
    from ml_platform_job import TrainingJob

    _watch_losses(TrainingJob)
    EXAMPLE.main(rest)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's ops/, as a script too
    from ops import terminal

    terminal.entry_point(main)
