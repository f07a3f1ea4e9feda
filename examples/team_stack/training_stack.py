"""The team's training stack: a GPU fleet with a dataset volume, a training queue with multi-node jobs, a monitored
endpoint that retrains on drift and a budget guard over the fleet and the queue, with the outputs its operators need
(`python -m ml_platform_constructs ...`, and submit_job.py)."""

from aws_cdk import CfnOutput, Duration, Stack
from constructs import Construct
from ml_platform_constructs import (
    BudgetGuard,
    EndpointAutoScaling,
    MonitoredEndpoint,
    RetrainOnDrift,
    SpotGpuFleet,
    SpotInterruptionAlerts,
    TrainingQueue,
)

from data_stack import DataStack

TRAINING_IMAGE = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
# Four sizes of one GPU shape (one A10G each): Spot capacity is found across types and AZs.
GPU_TYPES = ["g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge"]


class TrainingStack(Stack):
    def __init__(self, scope: Construct, id: str, *, data: DataStack, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        interruptions = SpotInterruptionAlerts(self, "SpotInterruptions", alerts=data.alerts.topic)  # once per account
        SpotGpuFleet(
            self, "interactive", vpc=data.vpc, vpc_subnets=data.compute_subnets, alerts=data.alerts.topic,
            datasets=data.data, instance_types=GPU_TYPES, max_capacity=2, volume_key=data.key,
            scale_to_zero_after=Duration.minutes(30), interruption_alerts=interruptions, tracking=data.tracking,
            dataset_volumes=[data.snapshots.volume("imagenet", "v3", 600, initialization_rate_mibps=300)])

        # Training jobs that finish by themselves: Spot on AWS Batch, resumed from checkpoints after reclaims.
        # Multi-node jobs run On-Demand in one AZ; multi_node_max_vcpus holds at least 2 nodes of the largest type.
        queue = TrainingQueue(
            self, "training", vpc=data.vpc, vpc_subnets=data.compute_subnets, alerts=data.alerts.topic, key=data.key,
            datasets=data.data, image_uri=TRAINING_IMAGE, instance_types=GPU_TYPES, max_vcpus=64,
            multi_node_instance_types=["g5.12xlarge", "g5.24xlarge"], multi_node_max_vcpus=192,
            tracking=data.tracking)

        # The model version is a stack parameter a promotion changes; updates are blue/green, rolled back on alarms.
        endpoint = MonitoredEndpoint(
            self, "classifier", endpoint_name="team-b-prod-classifier",
            image_uri="141502667606.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-xgboost:1.7-1",
            model_data_bucket=data.data.bucket, model_data_key="models/classifier/{version}/model.tar.gz",
            model_version="initial", instance_type="ml.m5.large", alerts=data.alerts.topic, baseline_bucket=data.data,
            vpc=data.vpc, vpc_subnets=data.compute_subnets, volume_key=data.key, logs_key=data.key,
            capture_key=data.key, auto_scaling=EndpointAutoScaling(max_capacity=4, invocations_per_instance=100))
        # Drift (PSI or KL) retrains the model on the queue: one job per episode, at most once a day.
        RetrainOnDrift(self, "Retrain", alarm=endpoint.alarms["drift"], queue=queue, image_uri=TRAINING_IMAGE,
                       command=["python", "train.py"], job_name_prefix="retrain-classifier", alerts=data.alerts.topic)

        # Stops the fleet and the queue (budget scope "account", the default of all three) at 80% of the month;
        # eu-west-1 is priced at its own rates. It lists the endpoint as left running.
        guard = BudgetGuard(self, "Budget", monthly_limit=4000, alerts=data.alerts.topic, key=data.key,
                            environment="prod", emails=["team-b@example.com"])

        # What operators pass to `python -m ml_platform_constructs ...` and submit_job.py.
        CfnOutput(self, "DatasetBucketName", value=data.data.bucket_name)
        CfnOutput(self, "DatasetSnapshotRunbook", value=data.snapshots.runbook_name)
        CfnOutput(self, "MlflowTrackingUri", value=data.tracking.tracking_uri)
        CfnOutput(self, "EndpointName", value=endpoint.endpoint_name)
        CfnOutput(self, "TrainingQueueName", value=queue.queue_name)
        CfnOutput(self, "BudgetStopFunction", value=guard.stop_function.function_name)
