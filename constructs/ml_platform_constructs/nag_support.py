"""Acknowledging cdk-nag findings whose ids are only known once cross-stack references are resolved."""

from __future__ import annotations

import json
from typing import Any, Sequence

import jsii
from aws_cdk import Acknowledgment, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from constructs import IValidation


def flatten_reference(node: Any) -> str:
    """A CloudFormation value rendered the way cdk-nag names it in a finding id (its flattenCfnReference)."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(flatten_reference(item) for item in items)
        if "Fn::Sub" in node:
            return flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten_reference(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


def stack_arn(stack: Stack, arn_template: str) -> str:
    """An ARN of the stack's partition, Region and account: ``{partition}``, ``{region}``, ``{account}`` filled in.

    Use the same template with ``nag_arn`` for the finding id, so a resource and its acknowledgement cannot drift.
    """
    return arn_template.format(partition=stack.partition, region=stack.region, account=stack.account)


def nag_arn(stack: Stack, arn_template: str) -> str:
    """An ARN as cdk-nag names it in a finding: {partition}, {region} and {account} as literals when the stack
    is bound to an environment, else as <AWS::Partition>, <AWS::Region>, <AWS::AccountId>."""
    def rendered(pseudo: str, value: str) -> str:
        return f"<AWS::{pseudo}>" if Token.is_unresolved(value) else value

    return arn_template.format(partition=rendered("Partition", stack.partition), region=rendered("Region", stack.region),
                               account=rendered("AccountId", stack.account))


@jsii.implements(IValidation)
class AcknowledgeWildcardResources:
    """At validation time (after references resolve), acknowledges AwsSolutions-IAM5 for each resource of the
    policy that ends with one of ``suffixes``, e.g. a bucket ARN followed by ``/datasets/*``."""

    def __init__(self, policy: iam.Policy, suffixes: Sequence[str], reason: str) -> None:
        self._policy = policy
        self._suffixes = tuple(suffixes)
        self._reason = reason

    def validate(self) -> list[str]:
        document = Stack.of(self._policy).resolve(self._policy.document)
        resources = set()
        for statement in document.get("Statement", []):
            listed = statement.get("Resource", [])
            for resource in listed if isinstance(listed, list) else [listed]:
                flat = flatten_reference(resource)
                if flat.endswith(self._suffixes):
                    resources.add(flat)
        if resources:
            Validations.of(self._policy).acknowledge(*[
                Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{flat}]", reason=self._reason)
                for flat in sorted(resources)])
        return []
