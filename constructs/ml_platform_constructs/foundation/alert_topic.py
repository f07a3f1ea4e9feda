"""AlertTopic: the environment's one encrypted SNS topic that every alarm and event notifies."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from ..errors import ValidationError, refusal_leaves_no_node
from .platform_key import SNS_PUBLISHING_SERVICES, allow_publishing

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def allow_budgets_to_publish(topic: sns.Topic) -> None:
    """The topic policy AWS Budgets needs to publish, limited to this account's budgets
    (https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-sns-policy.html)."""
    stack = Stack.of(topic)
    topic.add_to_resource_policy(iam.PolicyStatement(
        sid="AllowBudgetsToPublish", principals=[iam.ServicePrincipal("budgets.amazonaws.com")],
        actions=["sns:Publish"], resources=[topic.topic_arn],
        conditions={"StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:budgets::{stack.account}:*"}}))


@refusal_leaves_no_node
class AlertTopic(Construct):
    """An SNS topic encrypted with a customer-managed key, publish over TLS only, with e-mail subscribers.

    :param master_key: the key that encrypts messages at rest, customer-managed: CloudWatch alarms cannot publish
        to a topic encrypted with the AWS managed ``alias/aws/sns`` key. A key of this app gets the statements that
        let CloudWatch, EventBridge and Budgets publish (``SNS_PUBLISHING_SERVICES``, once per key); an imported key
        fails at synth unless ``key_policy_has`` declares them (without them the topic silently receives nothing).
    :param email_addresses: subscribers. Each receives a confirmation e-mail and gets nothing until it confirms.
        Default: none.
    :param display_name: Default: none.

    Its policy lets this account's AWS Budgets publish (CloudWatch alarms need no topic policy; EventBridge
    rule targets add their own statement).
    """

    def __init__(self, scope: Construct, id: str, *, master_key: kms.IKey, email_addresses: Sequence[str] = (),
                 display_name: Optional[str] = None) -> None:
        super().__init__(scope, id)
        for address in email_addresses:
            if not Token.is_unresolved(address) and not _EMAIL.match(address):
                raise ValidationError("AlertTopic", "email_addresses", address, "an e-mail address such as team@example.com",
                                      "correct or remove the address")
        if len(set(email_addresses)) != len(email_addresses):
            raise ValidationError("AlertTopic", "email_addresses", list(email_addresses), "each address once",
                                  "remove the duplicate address")
        allow_publishing(master_key, SNS_PUBLISHING_SERVICES, construct="AlertTopic", prop="master_key")
        self.topic = sns.Topic(self, "Resource", master_key=master_key, enforce_ssl=True, display_name=display_name)
        allow_budgets_to_publish(self.topic)
        for address in email_addresses:
            self.topic.add_subscription(subscriptions.EmailSubscription(address))

    @property
    def topic_arn(self) -> str:
        return self.topic.topic_arn

    def grant_publish(self, grantee: iam.IGrantable) -> iam.Grant:
        """``sns:Publish`` on the topic plus the key use that encrypted publishing needs."""
        return self.topic.grant_publish(grantee)

    def metric_number_of_notifications_failed(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/SNS NumberOfNotificationsFailed`` (Sum over 5 minutes): deliveries SNS gave up on."""
        return self.topic.metric_number_of_notifications_failed(**{"period": Duration.minutes(5), **kwargs})
