"""What the platform stores: dataset buckets (and the S3 rules they follow), dataset snapshots on EBS, and the run
store, SageMaker managed MLflow."""

from .._package import lazy_exports

_EXPORTS = {
    "CHECKPOINTS_PREFIX": "dataset_bucket",
    "DATASETS_PREFIX": "dataset_bucket",
    "LOGS_PREFIX": "dataset_bucket",
    "DatasetBucket": "dataset_bucket",
    "default_tiering_rules": "dataset_bucket",
    "DatasetSnapshotBuilder": "dataset_snapshots",
    "DatasetVolume": "dataset_snapshots",
    "filesystem_label": "dataset_snapshots",
    "MLFLOW_INTERFACE_ENDPOINTS": "mlflow_tracking",
    "MLFLOW_PREFIX": "mlflow_tracking",
    "MlflowTracking": "mlflow_tracking",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
