"""The team's data stack, from ml_platform_constructs and its own AWS resources: the team's KMS key and VPC (not
PlatformKey or PlatformNetwork), the alert topic, the dataset bucket, run tracking and dataset snapshots. Each
construct adds to the team's key the statements it needs."""

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct
from ml_platform_constructs import (
    AlertTopic,
    DatasetBucket,
    DatasetSnapshotBuilder,
    MlflowTracking,
    allow_log_groups,
)


class DataStack(Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        # The team's own key: AlertTopic, BudgetGuard, TrainingQueue and SpotGpuFleet add what they need to its policy.
        self.key = kms.Key(self, "Key", alias="alias/team-b/prod", enable_key_rotation=True,
                           removal_policy=RemovalPolicy.RETAIN)
        self.alerts = AlertTopic(self, "Alerts", master_key=self.key, email_addresses=["team-b@example.com"])

        # The team's own VPC: private subnets with a NAT gateway (multi-node jobs download their EFA driver), public
        # ones for the gateway only. The constructs below pick the private ones and refuse the public ones.
        self.vpc = ec2.Vpc(self, "Vpc", max_azs=2, nat_gateways=1, restrict_default_security_group=False,
                           subnet_configuration=[
                               ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=26),
                               ec2.SubnetConfiguration(name="compute", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)])
        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        allow_log_groups(self.key)  # the flow-log group below is encrypted with the team key
        flow_logs = logs.LogGroup(self, "FlowLogs", encryption_key=self.key, retention=logs.RetentionDays.ONE_YEAR)
        self.vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                              traffic_type=ec2.FlowLogTrafficType.REJECT)
        self.compute_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)

        self.data = DatasetBucket(self, "Data", encryption_key=self.key)
        # Every run recorded: serverless MLflow, artifacts under mlflow/ of the dataset bucket (encrypted by its key).
        self.tracking = MlflowTracking(self, "Tracking", datasets=self.data, name="team-b-prod", vpc=self.vpc,
                                       vpc_subnets=self.compute_subnets)
        self.snapshots = DatasetSnapshotBuilder(
            self, "DatasetSnapshots", vpc=self.vpc, vpc_subnets=self.compute_subnets, source_buckets=[self.data.bucket],
            key=self.key, environment="prod", parameter_prefix="/team-b/prod/datasets/")
