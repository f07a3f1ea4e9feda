"""ml_platform_constructs: the ML training platform's reusable AWS CDK v2 constructs.

The public names below load on first use (PEP 562), so that code running in a job, a Lambda function or an
operator's shell imports ``ml_platform_constructs.runtime`` with the standard library and boto3 alone, without
aws-cdk-lib and Node.js.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module that defines it.
_EXPORTS = {
    "AlertTopic": "alert_topic",
    "BudgetGuard": "budget_guard",
    "CHECKPOINTS_PREFIX": "dataset_bucket",
    "DATASETS_PREFIX": "dataset_bucket",
    "LOGS_PREFIX": "dataset_bucket",
    "DatasetBucket": "dataset_bucket",
    "default_tiering_rules": "dataset_bucket",
    "DatasetSnapshotBuilder": "dataset_snapshots",
    "DatasetVolume": "dataset_snapshots",
    "filesystem_label": "dataset_snapshots",
    "ValidationError": "errors",
    "ACCOUNT_SCOPE": "governance",
    "BUDGET_SCOPE_TAG": "governance",
    "govern": "governance",
    "GPU_CATALOG": "gpu_catalog",
    "GpuInstanceType": "gpu_catalog",
    "DRIFT_NAMESPACE": "monitored_endpoint",
    "EndpointAutoScaling": "endpoint_scaling",
    "EndpointQuality": "endpoint_quality",
    "FeatureWatch": "feature_watch",
    "ModelQuality": "endpoint_quality",
    "MonitoredEndpoint": "monitored_endpoint",
    "MLFLOW_INTERFACE_ENDPOINTS": "mlflow_tracking",
    "MLFLOW_PREFIX": "mlflow_tracking",
    "MlflowTracking": "mlflow_tracking",
    "QUALITY_NAMESPACE": "endpoint_quality",
    "DEFAULT_INTERFACE_ENDPOINTS": "network",
    "QUEUE_INTERFACE_ENDPOINTS": "network",
    "ImportedNetwork": "network",
    "availability_zone_context": "network",
    "PlatformNetwork": "network",
    "LOGS_SERVICE": "platform_key",
    "SNS_PUBLISHING_SERVICES": "platform_key",
    "PlatformKey": "platform_key",
    "allow_autoscaling_volumes": "platform_key",
    "allow_log_groups": "platform_key",
    "allow_publishing": "platform_key",
    "key_policy_has": "platform_key",
    "PriceTable": "price_table",
    "RetrainOnDrift": "retrain_on_drift",
    "GPU_NAMESPACE": "spot_gpu_fleet",
    "JOB_NAMESPACE": "spot_gpu_fleet",
    "SpotGpuFleet": "spot_gpu_fleet",
    "SpotInterruptionAlerts": "spot_gpu_fleet",
    "QUEUE_TAG": "training_queue",
    "TrainingQueue": "training_queue",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # type checkers and IDEs see the names eagerly
    from .alert_topic import AlertTopic
    from .budget_guard import BudgetGuard
    from .dataset_bucket import CHECKPOINTS_PREFIX, DATASETS_PREFIX, LOGS_PREFIX, DatasetBucket, default_tiering_rules
    from .dataset_snapshots import DatasetSnapshotBuilder, DatasetVolume, filesystem_label
    from .errors import ValidationError
    from .governance import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, govern
    from .gpu_catalog import GPU_CATALOG, GpuInstanceType
    from .endpoint_quality import QUALITY_NAMESPACE, EndpointQuality, ModelQuality
    from .endpoint_scaling import EndpointAutoScaling
    from .feature_watch import FeatureWatch
    from .mlflow_tracking import MLFLOW_INTERFACE_ENDPOINTS, MLFLOW_PREFIX, MlflowTracking
    from .monitored_endpoint import DRIFT_NAMESPACE, MonitoredEndpoint
    from .network import (DEFAULT_INTERFACE_ENDPOINTS, QUEUE_INTERFACE_ENDPOINTS, ImportedNetwork, PlatformNetwork,
                          availability_zone_context)
    from .platform_key import (LOGS_SERVICE, SNS_PUBLISHING_SERVICES, PlatformKey, allow_autoscaling_volumes,
                               allow_log_groups, allow_publishing, key_policy_has)
    from .price_table import PriceTable
    from .retrain_on_drift import RetrainOnDrift
    from .spot_gpu_fleet import GPU_NAMESPACE, JOB_NAMESPACE, SpotGpuFleet, SpotInterruptionAlerts
    from .training_queue import QUEUE_TAG, TrainingQueue
