"""PlatformKey: the environment's customer-managed KMS key, with a policy that lets the platform's AWS services use it."""

from __future__ import annotations

import re
from typing import Optional

from aws_cdk import RemovalPolicy, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from ..errors import ValidationError, refusal_leaves_no_node

# Services that publish to an SNS topic encrypted with this key. An encrypted topic silently receives nothing
# from them unless the key policy allows kms:GenerateDataKey* and kms:Decrypt; the AWS managed alias/aws/sns key
# cannot be edited, so a customer-managed key is required:
# https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services
SNS_PUBLISHING_SERVICES = (
    "cloudwatch.amazonaws.com",  # alarm actions
    "events.amazonaws.com",  # EventBridge rules
    "budgets.amazonaws.com",  # budget notifications: https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-sns-policy.html
)


@refusal_leaves_no_node
class PlatformKey(Construct):
    """A KMS key with rotation for one environment, shared by the platform's topics, buckets and log groups.

    Its policy (besides the account-root administration statement CDK adds) lets:

    - CloudWatch alarms, EventBridge and AWS Budgets publish to SNS topics encrypted with it
      (``kms:GenerateDataKey*``, ``kms:Decrypt``);
    - CloudWatch Logs in this account and Region encrypt log groups with it (the ``logs.<region>.amazonaws.com``
      principal, limited by the ``kms:EncryptionContext:aws:logs:arn`` condition):
      https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html

    The constructs that encrypt with a key add what they need of these to a key of the app themselves (each
    service once, whoever adds it first); a team that brings an imported key adds them to its policy and declares
    them with ``key_policy_has``.

    :param alias: alias name without the ``alias/`` prefix, e.g. ``ml-platform/dev``. Default: no alias.
    :param allow_autoscaling_service_linked_role: let EC2 Auto Scaling's service-linked role use the key for
        encrypted volumes of the instances it launches (GPU fleets). The role must exist when the key policy is
        set (KMS rejects unknown principals): it exists once any Auto Scaling group was created in the account,
        or create it with ``aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com``.
        https://docs.aws.amazon.com/autoscaling/ec2/userguide/key-policy-requirements-EBS-encryption.html
        Default: False. A ``SpotGpuFleet`` given this key as ``volume_key`` adds the statements itself.
    :param removal_policy: Default: RETAIN. DESTROY schedules deletion after the 7-day minimum pending window.
    """

    def __init__(self, scope: Construct, id: str, *, alias: Optional[str] = None,
                 allow_autoscaling_service_linked_role: bool = False,
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN) -> None:
        super().__init__(scope, id)
        if alias is not None and not Token.is_unresolved(alias) and (
                not re.match(r"^[A-Za-z0-9/_-]{1,250}$", alias) or alias.startswith("aws/")):
            raise ValidationError("PlatformKey", "alias", alias,
                                  "1-250 letters, digits, '/', '_' or '-', not starting with 'aws/' (reserved by AWS)",
                                  "use a name such as 'ml-platform/dev' (without the 'alias/' prefix)")
        stack = Stack.of(self)
        self.key = kms.Key(
            self, "Resource",
            description=f"ML platform key ({stack.stack_name}): alert topics, dataset buckets, log groups",
            enable_key_rotation=True,
            alias=f"alias/{alias}" if alias else None,
            removal_policy=removal_policy,
        )
        allow_publishing(self.key, SNS_PUBLISHING_SERVICES)
        allow_log_groups(self.key)

        if allow_autoscaling_service_linked_role:
            allow_autoscaling_volumes(self.key)

    @property
    def key_arn(self) -> str:
        return self.key.key_arn

    def grant_encrypt_decrypt(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.key.grant_encrypt_decrypt(grantee)


# Marks a key whose policy already has the Auto Scaling statements, so several fleets sharing it add them once.
_AUTOSCALING_MARKER = "AllowsAutoScalingServiceLinkedRole"


def allow_autoscaling_volumes(key: kms.IKey) -> bool:
    """Lets EC2 Auto Scaling's service-linked role use ``key`` for the encrypted volumes of instances it launches.

    Without these statements every launch with a volume encrypted by ``key`` fails at run time:
    https://docs.aws.amazon.com/autoscaling/ec2/userguide/key-policy-requirements-EBS-encryption.html
    Returns False when the key's policy cannot be changed from this app (an imported key). Idempotent.
    """
    if key.node.try_find_child(_AUTOSCALING_MARKER) is not None:
        return True
    stack = Stack.of(key)
    service_linked_role = iam.ArnPrincipal(
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/autoscaling.amazonaws.com/"
        "AWSServiceRoleForAutoScaling")
    added = key.add_to_resource_policy(iam.PolicyStatement(
        sid="AllowAutoScalingToUseKeyForInstanceVolumes", principals=[service_linked_role],
        actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
        resources=["*"])).statement_added
    if not added:
        return False
    key.add_to_resource_policy(iam.PolicyStatement(
        sid="AllowAutoScalingToAttachEncryptedVolumes", principals=[service_linked_role],
        actions=["kms:CreateGrant"], resources=["*"],
        conditions={"Bool": {"kms:GrantIsForAWSResource": True}}))
    Construct(key, _AUTOSCALING_MARKER)
    return True


# What the key policies of this module let each service do. Each is added to a key once (recorded per key path on the
# app's root construct: an imported key is a jsii proxy that takes no children), so constructs sharing a key, and a
# PlatformKey that has them all, never add a service twice.
LOGS_SERVICE = "logs"  # CloudWatch Logs of the key's Region: logs.<region>.amazonaws.com
_PUBLISH_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey*"]  # as aws-cdk-lib's Topic.grant_publish grants them
_README_STATEMENTS = "README, 'PlatformKey'"


_KEY_SERVICES = "_ml_platform_key_services"


def _allowed(key: kms.IKey) -> set[str]:
    # The set is also kept on the key's proxy object: reading the root and path again is three jsii round trips.
    found = getattr(key, _KEY_SERVICES, None)
    if found is None:
        root = key.node.root
        if not hasattr(root, _KEY_SERVICES):
            setattr(root, _KEY_SERVICES, {})
        found = getattr(root, _KEY_SERVICES).setdefault(key.node.path, set())
        try:
            setattr(key, _KEY_SERVICES, found)
        except AttributeError:  # an imported key's jsii proxy takes no new attributes: read again next time
            pass
    return found


def key_policy_has(key: kms.IKey, *services: str) -> None:
    """Declares that ``key``'s policy already lets ``services`` use it as this module's statements do: for an
    imported key, whose policy the app cannot change, after adding them there. ``services``: any of
    ``SNS_PUBLISHING_SERVICES`` and ``LOGS_SERVICE``."""
    for service in services:
        if service not in (*SNS_PUBLISHING_SERVICES, LOGS_SERVICE):
            raise ValidationError("key_policy_has", "services", service,
                                  f"one of {[*SNS_PUBLISHING_SERVICES, LOGS_SERVICE]}", "name the service as listed")
    _allowed(key).update(services)


def _missing(key: kms.IKey, services) -> list[str]:
    return [service for service in services if service not in _allowed(key)]


def _imported(construct: str, prop: str, key: kms.IKey, principals: list[str], services: list[str],
              consequence: str) -> ValidationError:
    return ValidationError(
        construct, prop, key.key_arn,
        f"a key whose policy lets {', '.join(principals)} use it: this imported key's policy cannot be changed from "
        f"this app, and without those statements {consequence}",
        f"add the statements ({_README_STATEMENTS}) to the key's policy, then declare them: "
        f"ml_platform_constructs.key_policy_has(key, {', '.join(repr(s) for s in services)}); or pass a key created "
        "in this app (the construct adds them itself)")


def allow_publishing(key: kms.IKey, services=SNS_PUBLISHING_SERVICES, *, construct: str = "PlatformKey",
                     prop: str = "key") -> None:
    """Lets ``services`` publish to SNS topics encrypted with ``key`` (``kms:GenerateDataKey*``, ``kms:Decrypt``):
    without it an encrypted topic silently receives nothing from them
    (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services). Adds, for
    each service the key's policy does not have yet, the statement aws-cdk-lib's own ``topic.grant_publish`` adds
    for a service principal (an EventBridge rule's SNS target adds it for EventBridge), so the two are one statement
    in the template. An imported key raises ``ValidationError`` naming ``construct`` and ``prop``, unless
    ``key_policy_has`` declared them."""
    missing = _missing(key, services)
    for service in missing:
        added = key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal(service)], actions=_PUBLISH_ACTIONS, resources=["*"]),
            allow_no_op=True).statement_added
        if not added:
            raise _imported(construct, prop, key, missing, missing,
                            "the encrypted topic silently receives nothing from them")
    key_policy_has(key, *missing)


def allow_log_groups(key: kms.IKey, *, construct: str = "PlatformKey", prop: str = "key") -> None:
    """Lets CloudWatch Logs of the key's account and Region encrypt log groups with ``key`` (condition on
    ``kms:EncryptionContext:aws:logs:arn``): https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html
    Once per key; an imported key raises ``ValidationError`` unless ``key_policy_has(key, LOGS_SERVICE)``."""
    if not _missing(key, [LOGS_SERVICE]):
        return
    stack = Stack.of(key)
    added = key.add_to_resource_policy(iam.PolicyStatement(
        sid="AllowCloudWatchLogsToEncryptLogGroups",
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
        resources=["*"],
        conditions={"ArnLike": {
            "kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:*"}},
    ), allow_no_op=True).statement_added
    if not added:
        raise _imported(construct, prop, key, [f"logs.{stack.region}.amazonaws.com"], [LOGS_SERVICE],
                        "CloudWatch Logs cannot create the encrypted log group (the deploy fails)")
    key_policy_has(key, LOGS_SERVICE)
