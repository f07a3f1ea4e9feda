"""Every construct that encrypts with a given key arranges the key statements it needs on a key of the app (each
service once, whoever adds it first), and fails at synth with the fix for an imported key: a team key without the
statements for CloudWatch, EventBridge and Budgets would leave the alert topic it encrypts silently empty."""

import pytest
from aws_cdk import Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from ml_platform_constructs import (LOGS_SERVICE, SNS_PUBLISHING_SERVICES, AlertTopic, BudgetGuard, PlatformKey,
                                    PlatformNetwork, ValidationError, key_policy_has)
from tests.conftest import ACCOUNT, new_app

IMPORTED = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
LOGS = "logs.us-east-1.amazonaws.com"


@pytest.fixture
def scope(tmp_path) -> Stack:
    return Stack(new_app(tmp_path, **{f"availability-zones:account={ACCOUNT}:region=us-east-1": ["us-east-1a"]}),
                 "Team", env={"account": ACCOUNT, "region": "us-east-1"})


def statements(scope: Stack) -> list[dict]:
    key = next(iter(Template.from_stack(scope).find_resources("AWS::KMS::Key").values()))
    return key["Properties"]["KeyPolicy"]["Statement"]


def services(scope: Stack) -> list[str]:
    """Every service principal of the key's policy, once per statement that names it."""
    found = []
    for statement in statements(scope):
        principal = statement["Principal"].get("Service", [])
        found += [principal] if isinstance(principal, str) else principal
    return found


def alert_topic(scope, key):
    return AlertTopic(scope, "Alerts", master_key=key)


def guard(scope, key):
    return BudgetGuard(scope, "Budget", monthly_limit=100, alerts=sns.Topic(scope, "GuardAlerts"), key=key,
                       environment="dev")


@pytest.mark.parametrize("order", [(alert_topic, guard), (guard, alert_topic)], ids=["topic-first", "guard-first"])
def test_a_team_key_gets_what_the_alert_topic_and_the_guard_need_each_service_once(scope, order):
    key = kms.Key(scope, "TeamKey", enable_key_rotation=True)
    for build in order:
        build(scope, key)
    assert sorted(services(scope)) == sorted([*SNS_PUBLISHING_SERVICES, LOGS])
    publish = [s for s in statements(scope) if s.get("Action") == ["kms:Decrypt", "kms:GenerateDataKey*"]]
    assert publish and all(s["Effect"] == "Allow" and s["Resource"] == "*" for s in publish)


def test_the_guard_alone_adds_budgets_and_logs_only(scope):
    guard(scope, kms.Key(scope, "TeamKey", enable_key_rotation=True))
    assert sorted(services(scope)) == ["budgets.amazonaws.com", LOGS]


def test_an_eventbridge_target_on_the_topic_shares_the_statement_for_eventbridge(scope):
    """aws-cdk-lib's SNS target grants EventBridge the key itself: the same statement, so one in the template."""
    from aws_cdk import aws_events as events
    from aws_cdk import aws_events_targets as targets

    key = kms.Key(scope, "TeamKey", enable_key_rotation=True)
    topic = alert_topic(scope, key)
    events.Rule(scope, "Rule", event_pattern=events.EventPattern(source=["aws.batch"]),
                targets=[targets.SnsTopic(topic.topic)])
    assert sorted(services(scope)) == sorted(SNS_PUBLISHING_SERVICES)


def test_a_platform_key_has_them_all_so_nothing_is_added(scope):
    key = PlatformKey(scope, "Key")
    alert_topic(scope, key.key)
    guard(scope, key.key)
    PlatformNetwork(scope, "Network", availability_zones=["us-east-1a"], flow_logs_key=key.key, interface_endpoints=[])
    assert sorted(services(scope)) == sorted([*SNS_PUBLISHING_SERVICES, LOGS])  # PlatformKey's own, nothing more


def test_a_team_key_for_flow_logs_gets_the_logs_statement(scope):
    PlatformNetwork(scope, "Network", availability_zones=["us-east-1a"], interface_endpoints=[],
                    flow_logs_key=kms.Key(scope, "TeamKey", enable_key_rotation=True))
    assert services(scope) == [LOGS]


@pytest.mark.parametrize("build, pattern", [
    (alert_topic, r"AlertTopic: master_key=.* is invalid: a key whose policy lets cloudwatch.amazonaws.com, "
                  r"events.amazonaws.com, budgets.amazonaws.com use it: this imported key's policy cannot be changed "
                  r"from this app, and without those statements the encrypted topic silently receives nothing from "
                  r"them. Fix: add the statements .* then declare them: ml_platform_constructs.key_policy_has\(key, "
                  r"'cloudwatch.amazonaws.com', 'events.amazonaws.com', 'budgets.amazonaws.com'\)"),
    (guard, r"BudgetGuard: key=.* a key whose policy lets budgets.amazonaws.com use it"),
], ids=["alert-topic", "guard"])
def test_an_imported_key_fails_synth_with_the_fix(scope, build, pattern):
    with pytest.raises(ValidationError, match=pattern):
        build(scope, kms.Key.from_key_arn(scope, "Imported", IMPORTED))


def test_an_imported_key_declared_to_have_the_statements_is_used_as_it_is(scope):
    key = kms.Key.from_key_arn(scope, "Imported", IMPORTED)
    key_policy_has(key, *SNS_PUBLISHING_SERVICES, LOGS_SERVICE)
    alert_topic(scope, key)
    guard(scope, key)
    assert Template.from_stack(scope).find_resources("AWS::KMS::Key") == {}


def test_an_unknown_service_cannot_be_declared(scope):
    with pytest.raises(ValidationError, match=r"key_policy_has: services='s3.amazonaws.com' is invalid"):
        key_policy_has(kms.Key(scope, "TeamKey"), "s3.amazonaws.com")


def test_an_endpoints_logs_key_gets_the_logs_statement(scope):
    from aws_cdk import aws_ec2 as ec2

    from ml_platform_constructs import DatasetBucket, MonitoredEndpoint

    data = DatasetBucket(scope, "Data")
    vpc = ec2.Vpc(scope, "Vpc", max_azs=1, nat_gateways=0, restrict_default_security_group=False,
                  subnet_configuration=[ec2.SubnetConfiguration(name="c", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
                  gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)})
    MonitoredEndpoint(scope, "Endpoint", endpoint_name="team-clf", model_data_bucket=data.bucket,
                      image_uri="683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
                      model_data_key="m.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(scope, "Alerts"),
                      baseline_bucket=data, vpc=vpc, logs_key=kms.Key(scope, "TeamKey", enable_key_rotation=True))
    keys = Template.from_stack(scope).find_resources("AWS::KMS::Key")
    team = next(v for k, v in keys.items() if k.startswith("TeamKey"))
    assert [s.get("Sid") for s in team["Properties"]["KeyPolicy"]["Statement"]] == [
        None, "AllowCloudWatchLogsToEncryptLogGroups"]
