"""What every environment's constructs stand on: the platform key, the alert topic, the network, and the helpers the
other folders share (cdk-nag and checkov acknowledgements, the runtime's Lambda functions)."""

from .._package import lazy_exports

_EXPORTS = {
    "AlertTopic": "alert_topic",
    "DEFAULT_INTERFACE_ENDPOINTS": "network",
    "QUEUE_INTERFACE_ENDPOINTS": "network",
    "ENDPOINTS_WITHOUT_EGRESS": "network",
    "ImportedNetwork": "network",
    "PlatformNetwork": "network",
    "availability_zone_context": "network",
    "LOGS_SERVICE": "platform_key",
    "SNS_PUBLISHING_SERVICES": "platform_key",
    "PlatformKey": "platform_key",
    "allow_autoscaling_volumes": "platform_key",
    "allow_log_groups": "platform_key",
    "allow_publishing": "platform_key",
    "key_policy_has": "platform_key",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
