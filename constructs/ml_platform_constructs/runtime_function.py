"""The platform's Lambda functions: Python from the library's runtime/ folder, standard library and boto3 only."""

from __future__ import annotations

from importlib import resources
from typing import Any, Sequence

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_lambda as lambda_
from constructs import Construct


def runtime_function(scope: Construct, id: str, *, handler: str, files: Sequence[str], **options: Any) -> lambda_.Function:
    """A Python 3.14 arm64 function whose asset holds only ``files`` of ``ml_platform_constructs/runtime``."""
    code = str(resources.files("ml_platform_constructs.runtime"))
    function = lambda_.Function(
        scope, id, runtime=lambda_.Runtime.PYTHON_3_14, architecture=lambda_.Architecture.ARM_64, handler=handler,
        code=lambda_.Code.from_asset(code, exclude=["*", *[f"!{name}" for name in files]]), **options)
    Validations.of(function.role).acknowledge(Acknowledgment(
        id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        reason="The AWS-managed basic execution policy only writes the function's own logs."))
    return function
