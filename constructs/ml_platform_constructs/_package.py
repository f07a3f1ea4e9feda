"""How the package and its domain folders present themselves: names that load on first use, the module paths of
0.3 that moved in 0.4, and the job side's modules that left ``runtime`` for their own distribution in 0.7
(``ml-platform-job``, import ``ml_platform_job``), and the runtime room's modules that moved to its rooms (handlers,
agents, decisions) in 0.13 (their old paths removed in 0.14). Standard library only: importing ``ml_platform_constructs`` (or its CDK-free folders
``advice``, ``operations``, ``runtime``) must not import aws-cdk-lib."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any, Callable, Mapping

PACKAGE = "ml_platform_constructs"
MOVED_IN, REMOVED_IN = "0.4.0", "1.0.0"

# Every module of 0.3's flat layout that moved, and where it lives now. ``governance`` and ``operations`` kept their
# paths: they became the folders of their domain and still export what the old modules did.
MOVED = {
    "advisor": "advice.advisor",
    "alert_topic": "foundation.alert_topic",
    "budget_guard": "governance.budget_guard",
    "budget_what_if": "advice.budget_what_if",
    "dataset_bucket": "data.dataset_bucket",
    "dataset_snapshots": "data.dataset_snapshots",
    "endpoint_quality": "serving.endpoint_quality",
    "endpoint_scaling": "serving.endpoint_scaling",
    "feature_watch": "serving.feature_watch",
    "gpu_alarms": "training.gpu_alarms",
    "gpu_catalog": "advice.gpu_catalog",
    "instance_bootstrap": "training.instance_bootstrap",
    "job_cost": "advice.job_cost",
    "job_metrics": "ml_platform_job.job_metrics",  # the job side's own distribution since 0.7.0
    "jobs": "operations.jobs",
    "mlflow_tracking": "data.mlflow_tracking",
    "monitored_endpoint": "serving.monitored_endpoint",
    "nag_support": "foundation.nag_support",
    "network": "foundation.network",
    "platform_key": "foundation.platform_key",
    "price_table": "advice.price_table",
    "queue_compute": "training.queue_compute",
    "queue_jobs": "training.queue_jobs",
    "queue_monitoring": "training.queue_monitoring",
    "retrain_on_drift": "serving.retrain_on_drift",
    "runtime_function": "foundation.runtime_function",
    "s3_rules": "data.s3_rules",
    "spot_gpu_fleet": "training.spot_gpu_fleet",
    "throughput": "advice.throughput",
    "training_queue": "training.training_queue",
}


# The job side (what runs inside a training container) left the runtime room for its own distribution in 0.7.0, which
# installs without aws-cdk-lib; its old paths imported the new modules, with a warning, until 0.9.0, which removed
# them: importing one now fails naming the new path.
JOB_SIDE_MOVED_IN, JOB_SIDE_REMOVED_IN = "0.7.0", "0.9.0"
JOB_PACKAGE = "ml_platform_job"
REMOVED_JOB_SIDE_PATHS = {
    "runtime.benchmark": "benchmark",
    "runtime.evaluation": "evaluation",
    "runtime.goodput": "goodput",
    "runtime.holdout": "holdout",
    "runtime.job_metrics": "job_metrics",
    "runtime.passport": "passport",
    "runtime.run_cost": "prices",
    "runtime.tracking": "tracking",
}


# The runtime room split by who runs its code in 0.13.0 (runtime/__init__.py): the flat paths imported the moved
# modules, with a warning, in 0.13; 0.14.0 removed them: importing one (or reading it as an attribute of ``runtime``)
# fails naming the new path.
RUNTIME_MOVED_IN, RUNTIME_REMOVED_IN = "0.13.0", "0.14.0"
RUNTIME_MOVED = {
    **{f"runtime.{name}": f"runtime.handlers.{name}" for name in (
        "budget_guard", "drift_handler", "elastic_controller", "pending_jobs", "quality_handler", "retrain",
        "scale_to_zero", "stall_watcher")},
    "runtime.interruption_watcher": "runtime.agents.interruption_watcher",
    **{f"runtime.{name}": f"runtime.decisions.{name}" for name in ("capture", "drift", "promotion", "quality", "stats")},
}


def runtime_removed(old: str) -> str:
    """Why 0.12's flat runtime path ``old`` (``runtime.quality``) does not import, and the path to use."""
    new = f"{PACKAGE}.{RUNTIME_MOVED[old]}"
    return (f"{PACKAGE}.{old} moved to {new} in {RUNTIME_MOVED_IN} and its old path was removed in "
            f"{RUNTIME_REMOVED_IN}: import {new}")


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` (PEP 562) for ``exports`` (public name -> the module, relative to
    ``package``, that defines it): a name's module is imported when the name is first used."""
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{source}", package), name)
        setattr(module, name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *exports})

    return __getattr__, __dir__


class _MovedModule(importlib.abc.Loader):
    """Loads an old path as the module it moved to (the same object: its names, its state), with a warning."""

    def __init__(self, new: str, moved_in: str = MOVED_IN, removed_in: str = REMOVED_IN) -> None:
        self.new, self.moved_in, self.removed_in = new, moved_in, removed_in

    def create_module(self, spec):  # the default: a placeholder, replaced in exec_module
        return None

    def get_code(self, fullname: str):
        """What ``python -m <old path>`` runs: the new module's code, with the warning."""
        warnings.warn(f"{fullname} moved to {self.new} in {self.moved_in}; run it from there (the old path is removed "
                      f"in {self.removed_in})", DeprecationWarning, stacklevel=2)
        return importlib.util.find_spec(self.new).loader.get_code(self.new)

    def exec_module(self, module) -> None:
        warnings.warn(f"{module.__name__} moved to {self.new} in {self.moved_in}; import it from there (the old path "
                      f"is removed in {self.removed_in})", DeprecationWarning, stacklevel=2)
        # The import system hands out whatever sys.modules holds under the name once this returns.
        sys.modules[module.__name__] = importlib.import_module(self.new)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package == PACKAGE and name in MOVED:
            new = MOVED[name]
            return importlib.util.spec_from_loader(fullname, _MovedModule(
                new if new.startswith(f"{JOB_PACKAGE}.") else f"{PACKAGE}.{new}"))
        if package == PACKAGE and name in RUNTIME_MOVED:
            raise ModuleNotFoundError(runtime_removed(name), name=fullname)
        if package == PACKAGE and name in REMOVED_JOB_SIDE_PATHS:
            new = f"{JOB_PACKAGE}.{REMOVED_JOB_SIDE_PATHS[name]}"
            raise ModuleNotFoundError(f"{fullname} moved to {new} in {JOB_SIDE_MOVED_IN} and its old path was removed "
                                      f"in {JOB_SIDE_REMOVED_IN}: import {new} (pip install ml-platform-job)",
                                      name=fullname)
        return None


def install_moved_paths() -> None:
    """Makes 0.3's module paths, and 0.12's runtime paths, importable (idempotent). After the normal finders: a real
    module always wins."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
