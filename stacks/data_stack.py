"""Data: the environment's DatasetBucket (datasets/, checkpoints/<fleet>/, logs/)."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from constructs import Construct
from ml_platform_constructs import DatasetBucket, DatasetSnapshotBuilder

from .config import EnvironmentConfig


class DataStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, key: kms.IKey, vpc: ec2.IVpc,
                 subnets: ec2.SubnetSelection, **kwargs: Any) -> None:
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
