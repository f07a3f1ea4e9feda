"""ml_platform_constructs: the ML training platform's reusable AWS CDK v2 constructs.

The library by domain (docs/ARCHITECTURE.md has the map):

- ``foundation``: the platform key, the alert topic, the network, and the helpers every construct uses;
- ``data``: dataset buckets and S3's rules, dataset snapshots, the run store (managed MLflow);
- ``training``: Spot GPU fleets, training queues (AWS Batch) and their parts, instance bootstrap, GPU alarms;
- ``serving``: monitored endpoints, their scaling, quality, feature watch and retraining;
- ``governance``: the budget guard and the budget scope it governs by;

and, importable without aws-cdk-lib (the standard library and boto3 only):

- ``advice``: the accelerator catalog, throughput, prices, the GPU advisor, job cost, the budget what-if;
- ``operations``: the team CLI (``python -m ml_platform_constructs``) and the job commands;
- ``runtime``: code that runs in Lambda functions, in jobs and on instances.

The public names below load on first use (PEP 562), so importing the package costs nothing until a construct is
used. The module paths of 0.3's flat layout still import, with a DeprecationWarning naming the new path, until 1.0.0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._package import install_moved_paths, lazy_exports

# Public name -> the module that defines it.
_EXPORTS = {
    "ValidationError": "errors",
    # foundation
    "AlertTopic": "foundation.alert_topic",
    "DEFAULT_INTERFACE_ENDPOINTS": "foundation.network",
    "QUEUE_INTERFACE_ENDPOINTS": "foundation.network",
    "ENDPOINTS_WITHOUT_EGRESS": "foundation.network",
    "ImportedNetwork": "foundation.network",
    "PlatformNetwork": "foundation.network",
    "availability_zone_context": "foundation.network",
    "LOGS_SERVICE": "foundation.platform_key",
    "SNS_PUBLISHING_SERVICES": "foundation.platform_key",
    "PlatformKey": "foundation.platform_key",
    "allow_autoscaling_volumes": "foundation.platform_key",
    "allow_log_groups": "foundation.platform_key",
    "allow_publishing": "foundation.platform_key",
    "key_policy_has": "foundation.platform_key",
    # data
    "CHECKPOINTS_PREFIX": "data.dataset_bucket",
    "DATASETS_PREFIX": "data.dataset_bucket",
    "LOGS_PREFIX": "data.dataset_bucket",
    "DatasetBucket": "data.dataset_bucket",
    "default_tiering_rules": "data.dataset_bucket",
    "DatasetSnapshotBuilder": "data.dataset_snapshots",
    "DatasetVolume": "data.dataset_snapshots",
    "filesystem_label": "data.dataset_snapshots",
    "MLFLOW_INTERFACE_ENDPOINTS": "data.mlflow_tracking",
    "MLFLOW_PREFIX": "data.mlflow_tracking",
    "MlflowTracking": "data.mlflow_tracking",
    # training
    "GPU_NAMESPACE": "training.spot_gpu_fleet",
    "JOB_NAMESPACE": "training.spot_gpu_fleet",
    "SpotGpuFleet": "training.spot_gpu_fleet",
    "SpotInterruptionAlerts": "training.spot_gpu_fleet",
    "QUEUE_TAG": "training.training_queue",
    "TrainingQueue": "training.training_queue",
    "ElasticTraining": "training.elastic_training",
    "EvaluationSubmitter": "training.evaluation_submitter",
    # serving
    "DRIFT_NAMESPACE": "serving.monitored_endpoint",
    "MonitoredEndpoint": "serving.monitored_endpoint",
    "EndpointAutoScaling": "serving.endpoint_scaling",
    "QUALITY_NAMESPACE": "serving.endpoint_quality",
    "EndpointQuality": "serving.endpoint_quality",
    "ModelQuality": "serving.endpoint_quality",
    "FeatureWatch": "serving.feature_watch",
    "RetrainOnDrift": "serving.retrain_on_drift",
    # governance
    "BudgetGuard": "governance.budget_guard",
    "ACCOUNT_SCOPE": "governance.scope",
    "BUDGET_SCOPE_TAG": "governance.scope",
    "govern": "governance.scope",
    # advice
    "GPU_CATALOG": "advice.gpu_catalog",
    "GpuInstanceType": "advice.gpu_catalog",
    "PriceTable": "advice.price_table",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
install_moved_paths()

if TYPE_CHECKING:  # type checkers and IDEs see the names eagerly
    from .advice.gpu_catalog import GPU_CATALOG, GpuInstanceType
    from .advice.price_table import PriceTable
    from .data.dataset_bucket import CHECKPOINTS_PREFIX, DATASETS_PREFIX, LOGS_PREFIX, DatasetBucket, default_tiering_rules
    from .data.dataset_snapshots import DatasetSnapshotBuilder, DatasetVolume, filesystem_label
    from .data.mlflow_tracking import MLFLOW_INTERFACE_ENDPOINTS, MLFLOW_PREFIX, MlflowTracking
    from .errors import ValidationError
    from .foundation.alert_topic import AlertTopic
    from .foundation.network import (DEFAULT_INTERFACE_ENDPOINTS, ENDPOINTS_WITHOUT_EGRESS, QUEUE_INTERFACE_ENDPOINTS,
                                     ImportedNetwork,
                                     PlatformNetwork, availability_zone_context)
    from .foundation.platform_key import (LOGS_SERVICE, SNS_PUBLISHING_SERVICES, PlatformKey, allow_autoscaling_volumes,
                                          allow_log_groups, allow_publishing, key_policy_has)
    from .governance.budget_guard import BudgetGuard
    from .governance.scope import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, govern
    from .serving.endpoint_quality import QUALITY_NAMESPACE, EndpointQuality, ModelQuality
    from .serving.endpoint_scaling import EndpointAutoScaling
    from .serving.feature_watch import FeatureWatch
    from .serving.monitored_endpoint import DRIFT_NAMESPACE, MonitoredEndpoint
    from .serving.retrain_on_drift import RetrainOnDrift
    from .training.spot_gpu_fleet import GPU_NAMESPACE, JOB_NAMESPACE, SpotGpuFleet, SpotInterruptionAlerts
    from .training.elastic_training import ElasticTraining
    from .training.evaluation_submitter import EvaluationSubmitter
    from .training.training_queue import QUEUE_TAG, TrainingQueue
