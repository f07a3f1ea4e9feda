"""Compute: the environment's Spot GPU fleets and the Spot interruption alerts they share."""

from __future__ import annotations

from typing import Any, Optional

from aws_cdk import Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct
from ml_platform_constructs import DatasetBucket, DatasetSnapshotBuilder, DatasetVolume, SpotGpuFleet, SpotInterruptionAlerts

from .config import EnvironmentConfig


class ComputeStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, vpc: ec2.IVpc,
                 subnets: ec2.SubnetSelection, alerts: sns.ITopic, key: kms.IKey, datasets: DatasetBucket,
                 snapshots: DatasetSnapshotBuilder, machine_image: Optional[ec2.IMachineImage] = None,
                 **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        self.interruption_alerts = SpotInterruptionAlerts(self, "SpotInterruptions", alerts=alerts)
        self.fleets = {
            fleet.name: SpotGpuFleet(
                self, fleet.name,
                vpc=vpc, vpc_subnets=subnets, alerts=alerts, datasets=datasets, volume_key=key,
                budget_scope=config.name,  # each environment's guard governs its own fleets, even in a shared account
                instance_types=[ec2.InstanceType(name) for name in fleet.instance_types],
                max_capacity=fleet.max_capacity, on_demand_base_capacity=fleet.on_demand_base_capacity,
                scale_to_zero_after=Duration.minutes(fleet.scale_to_zero_after_minutes)
                if fleet.scale_to_zero_after_minutes else None,
                machine_image=machine_image, interruption_alerts=self.interruption_alerts,
                dataset_volumes=[DatasetVolume(name=v.name, version=v.version, size_gib=v.size_gib,
                                               parameter_prefix=snapshots.parameter_prefix,
                                               initialization_rate_mibps=v.initialization_rate_mibps)
                                 for v in fleet.dataset_volumes])
            for fleet in config.fleets
        }
