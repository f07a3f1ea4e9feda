"""Code that runs away from the CDK app, standard library and boto3 only, in rooms by who runs it:

- ``handlers``: the platform's Lambda functions (budget guard, drift and quality checks, retraining, the elastic
  controller, the stall watcher, scale-to-zero) and the records they share (pending jobs);
- ``agents``: what runs on the GPU instances themselves (the interruption watcher, a systemd service);
- ``decisions``: the statistics the platform decides by (drift, production quality, promotion, their tests in
  ``stats``) and the capture records they read: pure functions an operator command, a bench or a test calls as the
  handlers do.

A Lambda function's asset is a flat set of these files (``foundation.runtime_function``): each module imports its
neighbours relatively, and as top-level modules where it runs in Lambda. 0.12's flat paths
(``ml_platform_constructs.runtime.quality``) import the moved modules, with a warning, until 0.14."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Optional

ROOMS = ("handlers", "agents", "decisions")


def __getattr__(name: str):
    """0.12's ``runtime.<module>`` as an attribute (``ml_platform_constructs.runtime.quality``), with the warning of
    its import path (PEP 562)."""
    from .._package import RUNTIME_MOVED

    if f"runtime.{name}" in RUNTIME_MOVED:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def source(name: str) -> Optional[Path]:
    """The file ``name`` (``quality_handler.py``) in its room, or None where no room holds it."""
    for room in ROOMS:
        path = Path(str(resources.files(f"{__name__}.{room}"))) / name
        if path.is_file():
            return path
    return None
