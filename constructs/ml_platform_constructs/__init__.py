"""ml_platform_constructs: the ML training platform's reusable AWS CDK v2 constructs."""

from .alert_topic import AlertTopic
from .dataset_bucket import (
    CHECKPOINTS_PREFIX,
    DATASETS_PREFIX,
    LOGS_PREFIX,
    DatasetBucket,
    default_tiering_rules,
)
from .errors import ValidationError
from .network import DEFAULT_INTERFACE_ENDPOINTS, ImportedNetwork, PlatformNetwork
from .platform_key import SNS_PUBLISHING_SERVICES, PlatformKey

__all__ = [
    "AlertTopic",
    "CHECKPOINTS_PREFIX",
    "DATASETS_PREFIX",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "DatasetBucket",
    "ImportedNetwork",
    "LOGS_PREFIX",
    "PlatformKey",
    "PlatformNetwork",
    "SNS_PUBLISHING_SERVICES",
    "ValidationError",
    "default_tiering_rules",
]
