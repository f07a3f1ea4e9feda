"""AlertTopic: encrypted with a customer-managed key, TLS-only, e-mail subscribers."""

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match

from ml_platform_constructs import AlertTopic, ValidationError


@pytest.fixture(scope="module")
def template(synth_stack):
    def body(stack):
        AlertTopic(stack, "Alerts", master_key=kms.Key(stack, "Key"), email_addresses=["a@example.com", "b@example.com"])
    return synth_stack(body)


def test_encrypted_with_the_given_key(template):
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [Match.string_like_regexp("^Key"), "Arn"]}})


def test_publish_requires_tls(template):
    template.has_resource_properties("AWS::SNS::TopicPolicy", {"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Effect": "Deny", "Action": "sns:Publish", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})])}})


def test_one_email_subscription_per_address(template):
    template.resource_count_is("AWS::SNS::Subscription", 2)
    template.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "b@example.com"})


def test_invalid_address_is_rejected():
    stack = Stack(App(), "S")
    with pytest.raises(ValidationError, match="email_addresses='not-an-address'.*an e-mail address"):
        AlertTopic(stack, "A", master_key=kms.Key(stack, "K"), email_addresses=["not-an-address"])


def test_duplicate_address_is_rejected():
    stack = Stack(App(), "S")
    with pytest.raises(ValidationError, match="each address once"):
        AlertTopic(stack, "A", master_key=kms.Key(stack, "K"), email_addresses=["a@example.com", "a@example.com"])
