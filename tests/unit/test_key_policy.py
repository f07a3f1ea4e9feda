"""The environments' KMS key policies asked as KMS would ask them (iam_policy.py): who may use each key, for what,
and under which conditions. A new principal or a dropped condition fails here whatever the statement looks like."""

import pytest

from iam_policy import ACCOUNT, REGION, Request, allowed
from ml_platform_constructs import PlatformKey
from ml_platform_constructs.foundation.platform_key import allow_autoscaling_volumes

PUBLISHERS = ("budgets.amazonaws.com", "cloudwatch.amazonaws.com", "events.amazonaws.com")
OTHER = "210987654321"


@pytest.fixture(scope="module")
def unit_key(synth_stack):
    """A PlatformKey alone, with the statements a fleet adds for its volumes."""
    def body(stack):
        allow_autoscaling_volumes(PlatformKey(stack, "Key").key)
    body = synth_stack(body).to_json()
    (key,) = [r for r in body["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    return [("PlatformKey", ACCOUNT, REGION, key["Properties"]["KeyPolicy"]["Statement"])]


@pytest.fixture(scope="module")
def app_keys(templates, config):
    """(environment, account, Region, key policy statements) of each environment's platform key."""
    found = []
    for name, env in config.environments.items():
        body = templates[f"{name}/Core"].to_json()
        (key,) = [r for r in body["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
        found.append((name, env.account, env.region, key["Properties"]["KeyPolicy"]["Statement"]))
    return found


@pytest.fixture(params=["unit_key", "app_keys"], ids=["alone", "whole-app"])
def keys(request):
    return request.getfixturevalue(request.param)


def use(statements, principal, action, account, region, **context):
    return allowed(statements, Request(action, "*", context=context, principal=principal))


def autoscaling(account):
    return {"AWS": f"arn:aws:iam::{account}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"}


def test_the_account_administers_its_key_and_no_other_account_does(keys):
    for name, account, region, statements in keys:
        root = {"AWS": f"arn:aws:iam::{account}:root"}
        for action in ("kms:Decrypt", "kms:PutKeyPolicy", "kms:ScheduleKeyDeletion"):
            assert use(statements, root, action, account, region), (name, action)  # IAM policies decide within
            assert not use(statements, {"AWS": f"arn:aws:iam::{OTHER}:root"}, action, account, region), (name, action)


def test_publishing_services_may_encrypt_for_topics_and_nothing_more(keys):
    for name, account, region, statements in keys:
        for service in PUBLISHERS:
            principal = {"Service": service}
            assert use(statements, principal, "kms:GenerateDataKey", account, region), (name, service)
            assert use(statements, principal, "kms:Decrypt", account, region), (name, service)
            for action in ("kms:Encrypt", "kms:CreateGrant", "kms:ReEncryptFrom", "kms:PutKeyPolicy"):
                assert not use(statements, principal, action, account, region), (name, service, action)


def test_cloudwatch_logs_may_use_it_only_for_log_groups_of_its_account_and_region(keys):
    for name, account, region, statements in keys:
        logs = {"Service": f"logs.{region}.amazonaws.com"}
        own = f"arn:aws:logs:{region}:{account}:log-group:/aws/lambda/guard"
        context = "kms:EncryptionContext:aws:logs:arn"
        assert use(statements, logs, "kms:Encrypt", account, region, **{context: own}), name
        assert not use(statements, logs, "kms:Encrypt", account, region), name  # no log group named
        assert not use(statements, logs, "kms:Encrypt", account, region,
                       **{context: own.replace(account, OTHER)}), name
        assert not use(statements, {"Service": "logs.ap-south-2.amazonaws.com"}, "kms:Encrypt", account, region,
                       **{context: own.replace(region, "ap-south-2")}), name


def test_auto_scaling_may_encrypt_instance_volumes_and_grant_only_to_aws_resources(keys):
    for name, account, region, statements in keys:
        role = autoscaling(account)
        assert use(statements, role, "kms:GenerateDataKeyWithoutPlaintext", account, region), name
        assert use(statements, role, "kms:CreateGrant", account, region, **{"kms:GrantIsForAWSResource": "true"}), name
        assert not use(statements, role, "kms:CreateGrant", account, region), name
        assert not use(statements, role, "kms:CreateGrant", account, region, **{"kms:GrantIsForAWSResource": "false"})
        assert not use(statements, autoscaling(OTHER), "kms:Decrypt", account, region), name


def test_no_one_else_may_use_the_key(keys):
    strangers = [{"Service": s} for s in ("sns.amazonaws.com", "s3.amazonaws.com", "lambda.amazonaws.com",
                                          "ec2.amazonaws.com", "sagemaker.amazonaws.com")]
    for name, account, region, statements in keys:
        principals = [principal for s in statements for principal in
                      ([s["Principal"]] if isinstance(s["Principal"], dict) else [])]
        assert {"AWS": "*"} not in principals and "*" not in principals, name
        for principal in strangers + [{"AWS": f"arn:aws:iam::{account}:role/anyone"}]:
            assert not use(statements, principal, "kms:Decrypt", account, region), (name, principal)
