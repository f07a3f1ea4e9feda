"""Where an app has a BudgetGuard, a fleet or queue that no guard of the app governs (another scope, account or
Region) is named in a warning with the guards' scopes; one the guard governs, or an app without a guard, is not."""

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match

from ml_platform_constructs import BudgetGuard, SpotGpuFleet, TrainingQueue
from tests.conftest import ACCOUNT, isolated_vpc, new_app, queue_vpc

TYPES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"
UNGOVERNED = "ml-platform:ungoverned-compute"


def team(tmp_path, *, guard_scope="vision-prod", guard_region="us-east-1", fleet_scope="account", queue=False):
    app = new_app(tmp_path)
    compute = Stack(app, "Training", env={"account": ACCOUNT, "region": "us-east-1"})
    alerts = sns.Topic(compute, "Alerts")
    if queue:
        TrainingQueue(compute, "queue", vpc=queue_vpc(compute), alerts=alerts, key=kms.Key(compute, "Key"),
                      image_uri=IMAGE, instance_types=[ec2.InstanceType(t) for t in TYPES], budget_scope=fleet_scope)
    else:
        SpotGpuFleet(compute, "training", vpc=isolated_vpc(compute, endpoints_for=["SpotGpuFleet"]), alerts=alerts, instance_types=TYPES,
                     budget_scope=fleet_scope)
    if guard_scope is not None:
        governance = Stack(app, "Governance", env={"account": ACCOUNT, "region": guard_region})
        BudgetGuard(governance, "Budget", monthly_limit=100, alerts=sns.Topic(governance, "Alerts"),
                    key=kms.Key(governance, "Key"), environment="prod", budget_scope=guard_scope)
    app.synth()
    return Annotations.from_stack(compute)


def test_a_fleet_left_at_the_default_scope_next_to_a_scoped_guard_is_named(tmp_path):
    team(tmp_path).has_warning("/Training/training/Resource", Match.string_like_regexp(
        r"Training/training has budget_scope 'account' \(us-east-1\), which no BudgetGuard of this app governs: the "
        r"guards here govern 'vision-prod' \(Governance/Budget, us-east-1\), so a budget stop would leave it running"
        r".*\[ack: ml-platform:ungoverned-compute\]"))


def test_a_queue_left_at_the_default_scope_is_named(tmp_path):
    team(tmp_path, queue=True).has_warning("/Training/queue", Match.string_like_regexp(
        r"Training/queue has budget_scope 'account'.*'vision-prod'"))


def test_a_guard_of_the_same_scope_in_another_region_does_not_govern(tmp_path):
    team(tmp_path, fleet_scope="vision-prod", guard_region="eu-west-1").has_warning(
        "*", Match.string_like_regexp(r"budget_scope 'vision-prod' \(us-east-1\).*\(Governance/Budget, eu-west-1\)"))


@pytest.mark.parametrize("guard_scope", ["vision-prod", None], ids=["governed", "no-guard"])
def test_a_governed_fleet_or_an_app_without_a_guard_gets_no_warning(tmp_path, guard_scope):
    team(tmp_path, guard_scope=guard_scope, fleet_scope="vision-prod").has_no_warning(
        "*", Match.string_like_regexp(UNGOVERNED))
