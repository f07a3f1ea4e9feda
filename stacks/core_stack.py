"""Core: the environment's KMS key, alert topic and network, which every other stack uses."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct
from ml_platform_constructs import AlertTopic, ImportedNetwork, PlatformKey, PlatformNetwork

from .config import CreatedNetworkConfig, EnvironmentConfig, interface_endpoint_service


class CoreStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        # GPU fleets encrypt their volumes with this key, launched by Auto Scaling's service-linked role.
        self.platform_key = PlatformKey(self, "PlatformKey", alias=f"{config.project}/{config.name}",
                                        allow_autoscaling_service_linked_role=bool(config.fleets),
                                        removal_policy=config.removal_policy)
        self.alerts = AlertTopic(self, "Alerts", master_key=self.platform_key.key, email_addresses=config.alert_emails,
                                 display_name=f"{config.project} {config.name} alerts")
        network = config.network
        if isinstance(network, CreatedNetworkConfig):
            self.network: PlatformNetwork | ImportedNetwork = PlatformNetwork(
                self, "Network",
                availability_zones=config.availability_zones,
                flow_logs_key=self.platform_key.key,
                cidr=network.cidr,
                nat_gateways=network.nat_gateways,
                interface_endpoints=[interface_endpoint_service(name) for name in network.interface_endpoints],
                removal_policy=config.removal_policy,
            )
        else:
            self.network = ImportedNetwork(self, "Network", vpc_id=network.vpc_id,
                                           availability_zones=config.availability_zones,
                                           private_subnet_ids=network.private_subnet_ids)
