"""ml_platform_constructs: the ML training platform's reusable AWS CDK v2 constructs."""

from .alert_topic import AlertTopic
from .budget_guard import BudgetGuard
from .dataset_bucket import (
    CHECKPOINTS_PREFIX,
    DATASETS_PREFIX,
    LOGS_PREFIX,
    DatasetBucket,
    default_tiering_rules,
)
from .dataset_snapshots import DatasetSnapshotBuilder, DatasetVolume, filesystem_label
from .errors import ValidationError
from .governance import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, govern
from .gpu_catalog import GPU_CATALOG, GpuInstanceType
from .monitored_endpoint import DRIFT_NAMESPACE, EndpointAutoScaling, MonitoredEndpoint
from .network import DEFAULT_INTERFACE_ENDPOINTS, QUEUE_INTERFACE_ENDPOINTS, ImportedNetwork, PlatformNetwork
from .platform_key import SNS_PUBLISHING_SERVICES, PlatformKey, allow_autoscaling_volumes
from .retrain_on_drift import RetrainOnDrift
from .spot_gpu_fleet import GPU_NAMESPACE, JOB_NAMESPACE, SpotGpuFleet, SpotInterruptionAlerts
from .training_queue import QUEUE_TAG, TrainingQueue

__all__ = [
    "ACCOUNT_SCOPE",
    "BUDGET_SCOPE_TAG",
    "AlertTopic",
    "BudgetGuard",
    "CHECKPOINTS_PREFIX",
    "DATASETS_PREFIX",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "DRIFT_NAMESPACE",
    "DatasetBucket",
    "DatasetSnapshotBuilder",
    "DatasetVolume",
    "EndpointAutoScaling",
    "GPU_CATALOG",
    "GPU_NAMESPACE",
    "GpuInstanceType",
    "JOB_NAMESPACE",
    "ImportedNetwork",
    "LOGS_PREFIX",
    "MonitoredEndpoint",
    "PlatformKey",
    "PlatformNetwork",
    "QUEUE_INTERFACE_ENDPOINTS",
    "QUEUE_TAG",
    "RetrainOnDrift",
    "SNS_PUBLISHING_SERVICES",
    "SpotGpuFleet",
    "SpotInterruptionAlerts",
    "TrainingQueue",
    "ValidationError",
    "allow_autoscaling_volumes",
    "default_tiering_rules",
    "filesystem_label",
    "govern",
]
