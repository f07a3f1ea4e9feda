"""The library in a plain stack (no platform Stage, tags or context): what the constructs need from each other
they arrange themselves, or fail at synth with the fix."""

import json

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template

from ml_platform_constructs import (
    BUDGET_SCOPE_TAG, BudgetGuard, PlatformKey, PlatformNetwork, SpotGpuFleet, ValidationError)
from tests.conftest import isolated_vpc

TYPES = [ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")]
ENV = Environment(account="111122223333", region="us-east-1")
AUTOSCALING_SIDS = {"AllowAutoScalingToUseKeyForInstanceVolumes", "AllowAutoScalingToAttachEncryptedVolumes"}


def plain_stack(tmp_path, **context) -> Stack:
    app = App(outdir=str(tmp_path), context=context)
    return Stack(app, "Team", env=ENV)


def key_sids(template: Template) -> list[str]:
    key = next(iter(template.find_resources("AWS::KMS::Key").values()))
    return [s.get("Sid") for s in key["Properties"]["KeyPolicy"]["Statement"]]


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """A PlatformKey without the Auto Scaling flag, two fleets on it and a guard, all with their defaults."""
    app = App(outdir=str(tmp_path_factory.mktemp("team")))
    stack = Stack(app, "Team")
    key = PlatformKey(stack, "Key", alias="team-a/dev")
    vpc = isolated_vpc(stack, endpoints_for=["SpotGpuFleet"])
    topic = sns.Topic(stack, "Alerts", master_key=key.key)
    for name in ("a", "b"):
        SpotGpuFleet(stack, name, vpc=vpc, alerts=topic, instance_types=TYPES, volume_key=key.key)
    guard = BudgetGuard(stack, "Budget", budget_name="team-a-dev", monthly_limit=100, alerts=topic, key=key.key,
                        environment="dev")
    return stack, Template.from_stack(stack), guard


def test_a_platform_key_used_as_fleet_volume_key_gets_the_autoscaling_statements_once(team):
    _, template, _ = team
    sids = [sid for sid in key_sids(template) if sid]
    assert AUTOSCALING_SIDS <= set(sids)
    assert len(sids) == len(set(sids))  # two fleets on one key: added once


def test_an_imported_volume_key_fails_synth_with_the_fix(tmp_path):
    stack = plain_stack(tmp_path)
    key = kms.Key.from_key_arn(stack, "Imported", "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    with pytest.raises(ValidationError, match=r"SpotGpuFleet: volume_key=.* cannot be changed from this app.*"
                                              r"Fix: add the statements .*volume_key_allows_autoscaling=True"):
        SpotGpuFleet(stack, "Fleet", vpc=isolated_vpc(stack, endpoints_for=["SpotGpuFleet"]), alerts=sns.Topic(stack, "T"), instance_types=TYPES,
                     volume_key=key)


def test_an_imported_volume_key_is_accepted_when_its_policy_is_declared_ready(tmp_path):
    stack = plain_stack(tmp_path)
    key = kms.Key.from_key_arn(stack, "Imported", "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    fleet = SpotGpuFleet(stack, "Fleet", vpc=isolated_vpc(stack, endpoints_for=["SpotGpuFleet"]), alerts=sns.Topic(stack, "T"), instance_types=TYPES,
                         volume_key=key, volume_key_allows_autoscaling=True)
    assert fleet.launch_template is not None


def test_guard_and_fleet_in_a_plain_stack_select_each_other_by_the_scope_tag(team):
    _, template, _ = team
    for group in template.find_resources("AWS::AutoScaling::AutoScalingGroup").values():
        assert {"Key": BUDGET_SCOPE_TAG, "Value": "account", "PropagateAtLaunch": True} in group["Properties"]["Tags"]
    function = next(f for f in template.find_resources("AWS::Lambda::Function").values()
                    if "BUDGET_SCOPE" in json.dumps(f))
    assert function["Properties"]["Environment"]["Variables"]["BUDGET_SCOPE"] == "account"
    statements = [s for p in template.find_resources("AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]
                  if s.get("Sid") == "StopAndResumeOnlyThisEnvironmentsFleets"]
    assert statements[0]["Condition"]["StringEquals"] == {f"autoscaling:ResourceTag/{BUDGET_SCOPE_TAG}": "account"}


def test_a_guard_that_finds_its_fleets_does_not_warn(team):
    stack, _, _ = team
    Annotations.from_stack(stack).has_no_warning("*", Match.string_like_regexp("budget-guard-governs-nothing"))


def test_a_guard_whose_scope_no_resource_carries_warns(tmp_path):
    stack = plain_stack(tmp_path)
    key = kms.Key(stack, "Key")
    topic = sns.Topic(stack, "Alerts", master_key=key)
    SpotGpuFleet(stack, "Fleet", vpc=isolated_vpc(stack, endpoints_for=["SpotGpuFleet"]), alerts=topic, instance_types=TYPES, budget_scope="prod")
    BudgetGuard(stack, "Budget", budget_name="b", monthly_limit=100, alerts=topic, key=key, environment="dev",
                budget_scope="dev")
    Annotations.from_stack(stack).has_warning(
        "/Team/Budget", Match.string_like_regexp("no resource in this app is tagged ml-platform:budget-scope=dev"))


def test_budget_scope_is_validated():
    stack = Stack(App(), "S")
    with pytest.raises(ValidationError, match=r"BudgetGuard: budget_scope='a b' is invalid: .*Fix: use 'account'"):
        BudgetGuard(stack, "Budget", budget_name="b", monthly_limit=100, alerts=sns.Topic(stack, "T"),
                    key=kms.Key(stack, "K"), environment="dev", budget_scope="a b")


def test_network_in_an_account_bound_stack_without_context_fails_before_any_lookup(tmp_path):
    stack = plain_stack(tmp_path)
    with pytest.raises(ValidationError, match=r"PlatformNetwork: availability_zones=\['us-east-1a'\] is invalid: .*"
                                              r"bound to account 111122223333.*Fix: pin them in the app"):
        PlatformNetwork(stack, "Net", availability_zones=["us-east-1a"], flow_logs_key=kms.Key(stack, "K"))
    assert stack.node.try_find_child("Net") is None  # nothing of the network was created, not even its node


@pytest.mark.parametrize("how", ["context", "stack_override"])
def test_network_with_pinned_azs_synthesizes_without_a_lookup(tmp_path, how):
    azs = ["us-east-1a", "us-east-1b"]
    if how == "context":
        stack = plain_stack(tmp_path, **PlatformNetwork.availability_zone_context(
            account=ENV.account, region=ENV.region, availability_zones=azs))
    else:
        class TeamStack(Stack):
            @property
            def availability_zones(self):
                return azs
        stack = TeamStack(App(outdir=str(tmp_path)), "Team", env=ENV)
    PlatformNetwork(stack, "Net", availability_zones=azs, flow_logs_key=kms.Key(stack, "K"))
    stack.node.root.synth()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest.get("missing", []) == []
    assert sorted(s["Properties"]["AvailabilityZone"]
                  for s in Template.from_stack(stack).find_resources("AWS::EC2::Subnet").values()) == azs
