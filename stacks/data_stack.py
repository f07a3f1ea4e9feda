"""Data: the environment's DatasetBucket (datasets/, checkpoints/<fleet>/, logs/, mlflow/) and the run tracking
(SageMaker's managed MLflow) whose artifact store it is."""

from __future__ import annotations

from typing import Any, Optional

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from constructs import Construct
from ml_platform_constructs import DatasetBucket, DatasetSnapshotBuilder, MlflowTracking

from .config import EnvironmentConfig


class DataStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, key: kms.IKey, vpc: ec2.IVpc,
                 subnets: ec2.SubnetSelection, tracking: bool = True, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        self.datasets = DatasetBucket(
            self, "Datasets",
            encryption_key=key,
            noncurrent_version_expiration=Duration.days(config.datasets.noncurrent_version_days),
            access_logs_retention=Duration.days(config.datasets.access_logs_retention_days),
            removal_policy=config.removal_policy,
        )
        self.snapshots = DatasetSnapshotBuilder(
            self, "DatasetSnapshots", vpc=vpc, vpc_subnets=subnets, source_buckets=[self.datasets.bucket], key=key,
            environment=config.name, parameter_prefix=f"/{config.project}/{config.name}/datasets/",
            retention=Duration.days(config.datasets.snapshot_retention_days))
        CfnOutput(self, "DatasetSnapshotRunbook", value=self.snapshots.document.ref,
                  description="SSM Automation runbook that builds dataset snapshots (./platform dataset build)")
        # Operators' commands (drift baselines, model uploads) find the bucket by this output.
        CfnOutput(self, "DatasetBucketName", value=self.datasets.bucket_name,
                  description="The environment's dataset bucket (datasets/, checkpoints/, models/, drift/)")
        # The tracking service sits with its artifact store: stateful like the bucket (retained outside dev), and
        # deployed before the Compute and Serving stacks that log to it and read from it.
        self.tracking: Optional[MlflowTracking] = None
        if tracking:
            self.tracking = MlflowTracking(
                self, "Tracking", datasets=self.datasets, name=f"{config.project}-{config.name}",
                tracking_server_size=config.mlflow.tracking_server_size, mlflow_version=config.mlflow.mlflow_version,
                weekly_maintenance_window_start=config.mlflow.weekly_maintenance_window_start,
                automatic_model_registration=config.mlflow.automatic_model_registration,
                vpc=vpc, vpc_subnets=subnets, removal_policy=config.removal_policy,
                uri_parameter_name=f"/{config.project}/{config.name}/mlflow/tracking-uri")
            if config.mlflow.tracking_server_size is None:
                # Kept for one release (remove in 0.7): Compute and Serving stacks deployed with 0.5 import the
                # app's ARN, and CloudFormation refuses to delete an export another stack still imports, so the
                # Data stack's update would fail before they are redeployed without it.
                self.export_value(self.tracking.arn)
            # ./platform runs and model promote find the environment's MLflow by this output.
            CfnOutput(self, "MlflowTrackingUri", value=self.tracking.tracking_uri,
                      description="SageMaker MLflow ARN: mlflow.set_tracking_uri(it) with the sagemaker-mlflow plugin")
