"""Data: the environment's DatasetBucket (datasets/, checkpoints/<fleet>/, logs/)."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_kms as kms
from constructs import Construct
from ml_platform_constructs import DatasetBucket

from .config import EnvironmentConfig


class DataStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, key: kms.IKey, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        self.datasets = DatasetBucket(
            self, "Datasets",
            encryption_key=key,
            noncurrent_version_expiration=Duration.days(config.datasets.noncurrent_version_days),
            access_logs_retention=Duration.days(config.datasets.access_logs_retention_days),
            removal_policy=config.removal_policy,
        )
        # Operators' commands (drift baselines, model uploads) find the bucket by this output.
        CfnOutput(self, "DatasetBucketName", value=self.datasets.bucket_name,
                  description="The environment's dataset bucket (datasets/, checkpoints/, models/, drift/)")
