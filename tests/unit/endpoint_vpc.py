"""The VPC the MonitoredEndpoint tests build in: isolated subnets with the S3 gateway endpoint an endpoint needs there
(PlatformNetwork has one; without it MonitoredEndpoint refuses the subnets)."""

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2

from ml_platform_constructs.foundation.network import missing_interface_endpoints
from tests.conftest import isolated_vpc


def endpoint_vpc(stack: Stack) -> ec2.Vpc:
    vpc = isolated_vpc(stack)
    if missing_interface_endpoints(vpc, None, ["s3"]):  # the shared helper may come to have one
        vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
    return vpc
