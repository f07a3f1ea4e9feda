"""Code that runs away from the CDK app, standard library and boto3 only, in rooms by who runs it:

- ``handlers``: the platform's Lambda functions (budget guard, drift and quality checks, retraining, the elastic
  controller, the stall watcher, scale-to-zero) and the records they share (pending jobs);
- ``agents``: what runs on the GPU instances themselves (the interruption watcher, a systemd service);
- ``decisions``: the statistics the platform decides by (drift, production quality, promotion, their tests in
  ``stats``) and the capture records they read: pure functions an operator command, a bench or a test calls as the
  handlers do.

A Lambda function's asset is a flat set of these files (``foundation.runtime_function``): each module imports its
neighbours relatively, and as top-level modules where it runs in Lambda. 0.12's flat paths
(``ml_platform_constructs.runtime.quality``) imported the moved modules, with a warning, in 0.13; since 0.14 they fail
naming the new path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Optional

ROOMS = ("handlers", "agents", "decisions")


def __getattr__(name: str):
    """0.12's ``runtime.<module>`` as an attribute (``ml_platform_constructs.runtime.quality``): removed in 0.14, the
    error names the new path (PEP 562)."""
    from .._package import RUNTIME_MOVED, runtime_removed

    if f"runtime.{name}" in RUNTIME_MOVED:
        raise AttributeError(runtime_removed(f"runtime.{name}"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def source(name: str) -> Optional[Path]:
    """The file ``name`` (``quality_handler.py``) in its room, or None where no room holds it."""
    for room in ROOMS:
        path = Path(str(resources.files(f"{__name__}.{room}"))) / name
        if path.is_file():
            return path
    return None
