"""Where models serve: monitored SageMaker endpoints with their scaling, production quality, feature watch, drift
check and retraining."""

from .._package import lazy_exports

_EXPORTS = {
    "DRIFT_NAMESPACE": "monitored_endpoint",
    "MonitoredEndpoint": "monitored_endpoint",
    "EndpointAutoScaling": "endpoint_scaling",
    "QUALITY_NAMESPACE": "endpoint_quality",
    "EndpointQuality": "endpoint_quality",
    "ModelQuality": "endpoint_quality",
    "FeatureWatch": "feature_watch",
    "RetrainOnDrift": "retrain_on_drift",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
