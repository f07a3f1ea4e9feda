"""Progress metrics a training job reports, so a job's cost can be read per accuracy point and per million tokens.

    from ml_platform_constructs.job_metrics import JobMetrics

    metrics = JobMetrics()                      # job id from AWS_BATCH_JOB_ID (or ML_PLATFORM_JOB_ID)
    metrics.report(validation_accuracy=84.7)    # at the start: the baseline the gain is measured from
    ...
    metrics.report(tokens=tokens_since_last_report)
    metrics.report(validation_accuracy=92.3)    # after each evaluation

Each call is one CloudWatch PutMetricData in namespace MLPlatform/Training (the namespace SpotGpuFleet's
instance role may already write) with the dimension JobId:

- ValidationAccuracy (Unit None, percent 0-100): the first and the last value of a job are its gain;
- TokensProcessed (Unit Count): tokens since the previous report; their Sum is the job's total;
- SamplesProcessed (Unit Count): the same for images or sequences.

`python -m ops.job_cost ENV JOB_ID` reads them back. The job's role needs cloudwatch:PutMetricData (condition
cloudwatch:namespace = MLPlatform/Training). For a multi-node Batch job every node's AWS_BATCH_JOB_ID is
"<job id>#<node index>": the node suffix is dropped, so all nodes report to the job (report tokens from every
node, accuracy from one). Metric names: https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricData.html
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Mapping, Optional

NAMESPACE = "MLPlatform/Training"
VALIDATION_ACCURACY = "ValidationAccuracy"
TOKENS_PROCESSED = "TokensProcessed"
SAMPLES_PROCESSED = "SamplesProcessed"
JOB_ID_DIMENSION = "JobId"


def batch_job_id(env: Mapping[str, str]) -> Optional[str]:
    """This process's AWS Batch job id from AWS_BATCH_JOB_ID, without a multi-node job's "#<node index>" suffix (every
    node of one job reports the one job); None off AWS Batch.
    https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html"""
    return env.get("AWS_BATCH_JOB_ID", "").split("#", 1)[0] or None


def job_id_from_environment(env: Mapping[str, str]) -> Optional[str]:
    """The Batch job id (batch_job_id), else ML_PLATFORM_JOB_ID (a job run elsewhere: ./platform job run-local)."""
    return batch_job_id(env) or env.get("ML_PLATFORM_JOB_ID") or None


class JobMetrics:
    """Reports a job's progress to CloudWatch. `cloudwatch` defaults to a boto3 client of the instance's Region."""

    def __init__(self, job_id: Optional[str] = None, *, cloudwatch: Any = None,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.job_id = job_id or job_id_from_environment(os.environ if env is None else env)
        if not self.job_id:
            raise ValueError("JobMetrics: job_id is unset and neither AWS_BATCH_JOB_ID nor ML_PLATFORM_JOB_ID is in "
                             "the environment; pass job_id= (the id ./platform job cost will be asked about)")
        if cloudwatch is None:
            import boto3
            cloudwatch = boto3.client("cloudwatch")
        self.cloudwatch = cloudwatch

    def report(self, *, validation_accuracy: Optional[float] = None, tokens: Optional[int] = None,
               samples: Optional[int] = None, timestamp: Optional[datetime] = None) -> None:
        """One PutMetricData with whatever is given; nothing given is an error (a silent no-op hides a bug)."""
        if validation_accuracy is not None and not 0 <= validation_accuracy <= 100:
            raise ValueError(f"validation_accuracy={validation_accuracy}: a percentage from 0 to 100 "
                             "(multiply a 0-1 fraction by 100)")
        for name, value in (("tokens", tokens), ("samples", samples)):
            if value is not None and value < 0:
                raise ValueError(f"{name}={value}: a count since the previous report, 0 or more")
        when = timestamp or datetime.now(timezone.utc)
        dimensions = [{"Name": JOB_ID_DIMENSION, "Value": self.job_id}]
        data = [{"MetricName": name, "Dimensions": dimensions, "Timestamp": when, "Value": float(value), "Unit": unit}
                for name, value, unit in ((VALIDATION_ACCURACY, validation_accuracy, "None"),
                                          (TOKENS_PROCESSED, tokens, "Count"),
                                          (SAMPLES_PROCESSED, samples, "Count")) if value is not None]
        if not data:
            raise ValueError("report() needs validation_accuracy, tokens or samples")
        self.cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=data)
