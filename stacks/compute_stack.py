"""Compute: the environment's Spot GPU fleets, its training queues, and the Spot interruption alerts they share."""

from __future__ import annotations

from typing import Any, Optional

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct
from ml_platform_constructs import (DatasetBucket, DatasetSnapshotBuilder, DatasetVolume, EvaluationSubmitter,
                                    MlflowTracking, SpotGpuFleet, SpotInterruptionAlerts, TrainingQueue)

from .config import DatasetVolumeConfig, EnvironmentConfig, queue_output_key  # noqa: F401 (its old home)


def dataset_volumes(volumes: tuple[DatasetVolumeConfig, ...], snapshots: DatasetSnapshotBuilder) -> list[DatasetVolume]:
    return [DatasetVolume(name=v.name, version=v.version, size_gib=v.size_gib, parameter_prefix=snapshots.parameter_prefix,
                          initialization_rate_mibps=v.initialization_rate_mibps) for v in volumes]


class ComputeStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, vpc: ec2.IVpc,
                 subnets: ec2.SubnetSelection, alerts: sns.ITopic, key: kms.IKey, datasets: DatasetBucket,
                 snapshots: DatasetSnapshotBuilder, tracking: Optional[MlflowTracking] = None,
                 machine_image: Optional[ec2.IMachineImage] = None, **kwargs: Any) -> None:
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
                dataset_volumes=dataset_volumes(fleet.dataset_volumes, snapshots), tracking=tracking,
                removal_policy=config.removal_policy)
            for fleet in config.fleets
        }
        self.queues = {
            queue.name: TrainingQueue(
                self, f"{queue.name}Queue", queue_name=queue.name,
                vpc=vpc, vpc_subnets=subnets, alerts=alerts, key=key, datasets=datasets, image_uri=queue.image,
                instance_types=[ec2.InstanceType(name) for name in queue.instance_types],
                max_vcpus=queue.max_vcpus, on_demand_max_vcpus=queue.on_demand_max_vcpus,
                multi_node_instance_types=[ec2.InstanceType(name) for name in queue.multi_node_instance_types],
                multi_node_max_vcpus=queue.multi_node_max_vcpus, multi_node_efa=queue.multi_node_efa, job_attempts=queue.job_attempts,
                elastic_max_nodes=queue.elastic_max_nodes, job_timeout=Duration.hours(queue.job_timeout_hours),
                dataset_volumes=dataset_volumes(queue.dataset_volumes, snapshots),
                removal_policy=config.removal_policy, budget_scope=config.name, tracking=tracking)
            for queue in config.queues
        }
        # The only submitters of the promotion gate's evaluation jobs: each runs the command config deploys for its
        # endpoint (./platform model evaluate invokes them).
        self.evaluation_submitters = {
            name: EvaluationSubmitter(self, f"{name}Evaluations", queue=self.queues[name], commands=commands,
                                      removal_policy=config.removal_policy)
            for name, commands in sorted(config.evaluation_commands().items())}
        for name, submitter in self.evaluation_submitters.items():
            CfnOutput(self, queue_output_key(name, "EvaluationSubmitter"), value=submitter.function.function_name,
                      description=f"Training queue {name}: the evaluation submitter (./platform model evaluate)")
        for name, queue in self.queues.items():
            if queue.job_queue is not None:  # a multi-node-only queue has none
                CfnOutput(self, queue_output_key(name, "JobQueue"), value=queue.job_queue_arn,
                          description=f"Training queue {name}: job queue (./platform job submit)")
                CfnOutput(self, queue_output_key(name, "JobDefinition"), value=queue.job_definition.job_definition_arn,
                          description=f"Training queue {name}: job definition")
            if queue.multi_node_job_queue is not None:
                CfnOutput(self, queue_output_key(name, "MultiNodeJobQueue"),
                          value=queue.multi_node_job_queue_arn,
                          description=f"Training queue {name}: multi-node job queue (On-Demand, one AZ)")
                CfnOutput(self, queue_output_key(name, "MultiNodeJobDefinition"),
                          value=queue.multi_node_job_definition.job_definition_arn,
                          description=f"Training queue {name}: multi-node job definition")
