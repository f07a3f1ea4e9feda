"""PlatformKey: rotation and the key-policy statements each AWS service needs."""

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Match

from ml_platform_constructs import PlatformKey, ValidationError


@pytest.fixture(scope="module")
def template(synth_stack):
    return synth_stack(lambda stack: PlatformKey(stack, "Key", alias="ml-platform/test"))


def statement(template, sid):
    key = next(iter(template.find_resources("AWS::KMS::Key").values()))
    return next(s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == sid)


def test_rotation_enabled_and_retained_by_default(template):
    template.has_resource("AWS::KMS::Key", {"Properties": Match.object_like({"EnableKeyRotation": True}),
                                            "DeletionPolicy": "Retain"})


def test_alias(template):
    template.has_resource_properties("AWS::KMS::Alias", {"AliasName": "alias/ml-platform/test"})


def test_cloudwatch_eventbridge_and_budgets_may_use_it_for_encrypted_topics(template):
    key = next(iter(template.find_resources("AWS::KMS::Key").values()))
    publish = [s for s in key["Properties"]["KeyPolicy"]["Statement"]
               if sorted(s["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"] and "Condition" not in s]
    services = sorted(p for s in publish for p in ([s["Principal"]["Service"]] if isinstance(s["Principal"]["Service"], str)
                                                   else s["Principal"]["Service"]))
    assert services == ["budgets.amazonaws.com", "cloudwatch.amazonaws.com", "events.amazonaws.com"]


def test_cloudwatch_logs_of_this_account_and_region_only(template):
    allow = statement(template, "AllowCloudWatchLogsToEncryptLogGroups")
    assert allow["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert allow["Condition"] == {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:us-east-1:123456789012:*"}}


def test_main_child_is_resource():
    key = PlatformKey(Stack(App(), "S"), "Key")
    assert key.node.default_child is key.key


@pytest.mark.parametrize("alias", ["aws/mine", "has space", ""])
def test_bad_alias_is_rejected(alias):
    with pytest.raises(ValidationError, match=f"PlatformKey: alias={alias!r}"):
        PlatformKey(Stack(App(), "S"), "Key", alias=alias)
