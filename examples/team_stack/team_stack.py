"""Another team's stack built only from ml_platform_constructs: key, alerts, network, data, run tracking (managed
MLflow), a GPU fleet with a dataset volume, a training queue, a monitored endpoint that retrains on drift and a
budget guard, with the outputs its operators need."""

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct
from ml_platform_constructs import (
    DEFAULT_INTERFACE_ENDPOINTS,
    MLFLOW_INTERFACE_ENDPOINTS,
    QUEUE_INTERFACE_ENDPOINTS,
    AlertTopic,
    BudgetGuard,
    DatasetBucket,
    DatasetSnapshotBuilder,
    EndpointAutoScaling,
    MlflowTracking,
    MonitoredEndpoint,
    PlatformKey,
    PlatformNetwork,
    RetrainOnDrift,
    SpotGpuFleet,
    SpotInterruptionAlerts,
    TrainingQueue,
)

AVAILABILITY_ZONES = ["us-east-1a", "us-east-1b"]
TRAINING_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"


class TeamStack(Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        # One key for everything; a fleet using it as its volume key adds the Auto Scaling statements itself.
        key = PlatformKey(self, "Key", alias="team-a/dev")
        alerts = AlertTopic(self, "Alerts", master_key=key.key, email_addresses=["team-a@example.com"])
        # No NAT gateway: the queue's instances reach ECS and ECR, and jobs reach MLflow, through interface endpoints.
        network = PlatformNetwork(self, "Network", availability_zones=AVAILABILITY_ZONES, flow_logs_key=key.key,
                                  interface_endpoints=[*DEFAULT_INTERFACE_ENDPOINTS, *QUEUE_INTERFACE_ENDPOINTS,
                                                       *MLFLOW_INTERFACE_ENDPOINTS])
        data = DatasetBucket(self, "Data", encryption_key=key.key)
        # Every run recorded: serverless MLflow, artifacts under mlflow/ of the dataset bucket (encrypted by its key).
        tracking = MlflowTracking(self, "Tracking", datasets=data, name="team-a-dev", vpc=network.vpc,
                                  vpc_subnets=network.compute_subnets)

        builder = DatasetSnapshotBuilder(self, "DatasetSnapshots", vpc=network.vpc,
                                         vpc_subnets=network.compute_subnets, source_buckets=[data.bucket],
                                         key=key.key, environment="dev", parameter_prefix="/team-a/dev/datasets/")
        interruptions = SpotInterruptionAlerts(self, "SpotInterruptions", alerts=alerts.topic)  # once per account
        SpotGpuFleet(
            self, "training",
            vpc=network.vpc, vpc_subnets=network.compute_subnets, alerts=alerts.topic, datasets=data,
            instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")],
            max_capacity=4, volume_key=key.key, scale_to_zero_after=Duration.minutes(30),
            interruption_alerts=interruptions, tracking=tracking,
            dataset_volumes=[builder.volume("imagenet", "v3", 600, initialization_rate_mibps=300)])

        # Training jobs that finish by themselves: Spot on AWS Batch, resumed from checkpoints after reclaims.
        queue = TrainingQueue(
            self, "queue", vpc=network.vpc, vpc_subnets=network.compute_subnets, alerts=alerts.topic, key=key.key,
            datasets=data, image_uri=TRAINING_IMAGE, max_vcpus=32, tracking=tracking,
            instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")])

        # The model version is a stack parameter a promotion changes; updates are blue/green, rolled back on alarms.
        endpoint = MonitoredEndpoint(
            self, "classifier", endpoint_name="team-a-dev-classifier",
            image_uri="683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
            model_data_bucket=data.bucket, model_data_key="models/classifier/{version}/model.tar.gz",
            model_version="initial",
            instance_type="ml.m5.large", alerts=alerts.topic, baseline_bucket=data,
            vpc=network.vpc, vpc_subnets=network.compute_subnets, volume_key=key.key,
            auto_scaling=EndpointAutoScaling(max_capacity=4, invocations_per_instance=100))
        # Drift (PSI or KL) retrains the model on the queue: one job per episode, at most once a day.
        RetrainOnDrift(self, "Retrain", alarm=endpoint.alarms["drift"], queue=queue, image_uri=TRAINING_IMAGE,
                       command=["python", "train.py"], job_name_prefix="retrain-classifier", alerts=alerts.topic)

        # Stops every fleet of this account and Region whose budget_scope is the default, "account".
        guard = BudgetGuard(self, "Budget", budget_name="team-a-dev-monthly", monthly_limit=1500, alerts=alerts.topic,
                            key=key.key, environment="dev", emails=["team-a@example.com"])

        # What operators pass to `python -m ml_platform_constructs ...`.
        CfnOutput(self, "DatasetBucketName", value=data.bucket_name)
        CfnOutput(self, "MlflowTrackingUri", value=tracking.tracking_uri)
        CfnOutput(self, "DatasetSnapshotRunbook", value=builder.runbook_name)
        CfnOutput(self, "EndpointName", value=endpoint.endpoint_name)
        CfnOutput(self, "TrainingJobQueue", value=queue.job_queue_arn)
        CfnOutput(self, "TrainingJobDefinition", value=queue.job_definition.job_definition_arn)
        CfnOutput(self, "BudgetStopFunction", value=guard.stop_function.function_name)
