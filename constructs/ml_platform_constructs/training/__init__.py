"""Where models train: Spot GPU fleets (Auto Scaling) and training queues (AWS Batch) with their parts (compute
environments, job definitions, job events and dashboard), the instance bootstrap both share, and the GPU alarms."""

from .._package import lazy_exports

_EXPORTS = {
    "GPU_NAMESPACE": "spot_gpu_fleet",
    "JOB_NAMESPACE": "spot_gpu_fleet",
    "SpotGpuFleet": "spot_gpu_fleet",
    "SpotInterruptionAlerts": "spot_gpu_fleet",
    "QUEUE_TAG": "training_queue",
    "TrainingQueue": "training_queue",
    "ElasticTraining": "elastic_training",
    "EvaluationSubmitter": "evaluation_submitter",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
