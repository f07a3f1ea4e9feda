"""Compliance helpers: cdk-nag acknowledgements whose ids are only known once cross-stack references are
resolved, and checkov suppressions recorded next to the resource (``suppress_checkov``)."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

import jsii
from aws_cdk import Acknowledgment, CfnResource, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct, IValidation


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


def _environment(stack: Stack) -> tuple[str, str, str, bool, bool, bool]:
    """The stack's partition, Region and account, and whether each is a token: read once per stack, since each
    read is a round trip to the jsii kernel (synth time, docs/BENCHMARKS.md). Kept on the stack's proxy object, so
    a proxy that jsii recreates only reads them again."""
    cached = getattr(stack, "_ml_platform_environment", None)
    if cached is None:
        values = (stack.partition, stack.region, stack.account)
        cached = (*values, *(Token.is_unresolved(v) for v in values))
        setattr(stack, "_ml_platform_environment", cached)
    return cached


def stack_arn(stack: Stack, arn_template: str) -> str:
    """An ARN of the stack's partition, Region and account: ``{partition}``, ``{region}``, ``{account}`` filled in.

    Use the same template with ``nag_arn`` for the finding id, so a resource and its acknowledgement cannot drift.
    """
    partition, region, account, *_ = _environment(stack)
    return arn_template.format(partition=partition, region=region, account=account)


def nag_arn(stack: Stack, arn_template: str) -> str:
    """An ARN as cdk-nag names it in a finding: {partition}, {region} and {account} as literals when the stack
    is bound to an environment, else as <AWS::Partition>, <AWS::Region>, <AWS::AccountId>."""
    partition, region, account, *tokens = _environment(stack)
    rendered = [f"<AWS::{pseudo}>" if token else value
                for pseudo, value, token in zip(("Partition", "Region", "AccountId"), (partition, region, account), tokens)]
    return arn_template.format(partition=rendered[0], region=rendered[1], account=rendered[2])


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


# --- checkov ----------------------------------------------------------------------------------------------------

CHECKOV_METADATA = "checkov"


def suppress_checkov(construct: IConstruct, check_id: str, reason: str) -> None:
    """Records, in the template next to the resource, that checkov's ``check_id`` does not apply to it and why.

    ``construct`` is the resource (a CfnResource) or an L2 construct whose default child is one. checkov reads
    ``Metadata: {"checkov": {"skip": [{"id": ..., "comment": ...}]}}`` on a CloudFormation resource as a
    suppression with its reason (checkov/cloudformation/context_parser.py, ``collect_skip_comments``). Call it
    once per check, next to the code that creates the resource, with a one-line reason specific to it.
    """
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"suppress_checkov: {construct.node.path} is not a CloudFormation resource and has none as "
                        "its default child; pass the resource itself")
    if not re.match(r"^CKV2?_AWS_\d+$", check_id) or len(reason.strip()) < 20:
        raise ValueError(f"suppress_checkov({check_id!r}, {reason!r}): a check id such as CKV_AWS_116 and a reason "
                         "of at least 20 characters saying why it does not apply to this resource")
    entries = list((resource.get_metadata(CHECKOV_METADATA) or {}).get("skip", []))
    entries = [e for e in entries if e["id"] != check_id] + [{"id": check_id, "comment": reason}]
    resource.add_metadata(CHECKOV_METADATA, {"skip": entries})


@jsii.implements(IValidation)
class AcknowledgeOwnWildcards:
    """cdk-nag's AwsSolutions-IAM5 for the wildcards of this construct's own resources, whose ids hold cross-stack
    references known only once they resolve (the queue's name, the definition's name)."""

    def __init__(self, policy: iam.Policy, markers: Sequence[tuple[str, str]]) -> None:
        self._policy, self._markers = policy, markers

    def validate(self) -> list[str]:
        document = Stack.of(self._policy).resolve(self._policy.document)
        found = []
        for statement in document.get("Statement", []):
            listed = statement.get("Resource", [])
            for resource in listed if isinstance(listed, list) else [listed]:
                flat = flatten_reference(resource)
                found += [Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{flat}]", reason=reason)
                          for marker, reason in self._markers if marker in flat and "*" in flat]
        if found:
            Validations.of(self._policy).acknowledge(*found)
        return []
