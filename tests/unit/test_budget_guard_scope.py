"""A guard whose scope holds only endpoints (issue 28, item 14): it says what carries its scope (the endpoints a stop
lists, never stops) instead of "nothing is tagged", and gets no right to end the account's Batch jobs; where its scope
may hold queues (its app's, or another app's when nothing here carries it) the right stays."""

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template

from ml_platform_constructs import BudgetGuard, DatasetBucket, MonitoredEndpoint, TrainingQueue
from ml_platform_constructs.governance.scope import endpoints_carrying
from tests.conftest import ACCOUNT, isolated_vpc, new_app, queue_vpc

ENV = {"account": ACCOUNT, "region": "us-east-1"}
ENDPOINT_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
TRAINING_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
SCOPE = "vision-prod"
WARNING = "ml-platform:budget-guard-governs-nothing"


def endpoint(stack, budget_scope=SCOPE):
    vpc = isolated_vpc(stack)
    vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)  # an endpoint's isolated subnets need it
    data = DatasetBucket(stack, "Data")
    return MonitoredEndpoint(stack, "Endpoint", endpoint_name="team-clf", image_uri=ENDPOINT_IMAGE,
                             model_data_bucket=data.bucket, model_data_key="m.tar.gz", instance_type="ml.m5.large",
                             alerts=sns.Topic(stack, "EndpointAlerts"), baseline_bucket=data, vpc=vpc,
                             budget_scope=budget_scope)


def guard(stack, budget_scope=SCOPE, **props):
    key = kms.Key(stack, "GuardKey")
    return BudgetGuard(stack, "Guard", monthly_limit=500, alerts=sns.Topic(stack, "GuardAlerts"), key=key,
                       environment="prod", budget_scope=budget_scope, **props)


def ends_jobs(template: Template) -> bool:
    statements = [s for p in template.find_resources("AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    return any("batch:TerminateJob" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
               for s in statements)


def warnings(stack) -> list[str]:
    return [w.entry.data for w in Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(WARNING))]


@pytest.mark.parametrize("guard_first", [True, False])
def test_a_serving_only_scope_names_its_endpoints_and_may_end_no_job(tmp_path, guard_first):
    """The guard in a stack synthesized before the endpoint's (its tag not applied yet when the guard decides), and
    after it."""
    app = new_app(tmp_path)
    order = ("Governance", "Serving") if guard_first else ("Serving", "Governance")
    stacks = {name: Stack(app, name, env=ENV) for name in order}  # synthesized in this order
    governance, serving = stacks["Governance"], stacks["Serving"]
    guard(governance)
    endpoint(serving)
    assert not ends_jobs(Template.from_stack(governance))
    [warning] = warnings(governance)
    assert warning.startswith(f"BudgetGuard: only SageMaker endpoints carry ml-platform:budget-scope={SCOPE} in this "
                              "app (Serving/Endpoint): a stop lists them as left running and never stops "
                              "them, so the stop would stop nothing, and the guard gets no right to end Batch jobs. "
                              "For the budget's notifications alone pass stop_at_percent=None")


def test_a_serving_only_scope_with_notifications_alone_is_quiet(tmp_path):
    """The warning's fix: no stop, so no stop function, no Batch rights and nothing to warn of."""
    app = new_app(tmp_path)
    governance, serving = Stack(app, "Governance", env=ENV), Stack(app, "Serving", env=ENV)
    guard(governance, stop_at_percent=None)
    endpoint(serving)
    assert not ends_jobs(Template.from_stack(governance)) and warnings(governance) == []


def test_with_nothing_of_its_scope_in_the_app_the_guard_keeps_the_right_for_another_apps_queues(tmp_path):
    app = new_app(tmp_path)
    stack = Stack(app, "Governance", env=ENV)
    guard(stack)
    endpoint(Stack(app, "Serving", env=ENV), budget_scope="another-team")  # not its scope
    assert ends_jobs(Template.from_stack(stack))
    [warning] = warnings(stack)
    assert warning.startswith(f"BudgetGuard: no resource in this app is tagged ml-platform:budget-scope={SCOPE}, so "
                              "the stop would stop nothing.")
    assert "acknowledge this warning if they are deployed from another app" in warning


def test_a_scope_with_a_queue_and_an_endpoint_ends_the_queues_jobs_and_warns_of_nothing(tmp_path):
    app = new_app(tmp_path, **{f"availability-zones:account={ACCOUNT}:region=us-east-1": ["us-east-1a", "us-east-1b"]})
    stack = Stack(app, "Team", env=ENV)
    key = kms.Key(stack, "Key")
    TrainingQueue(stack, "Queue", vpc=queue_vpc(stack), image_uri=TRAINING_IMAGE, key=key,
                  instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")],
                  alerts=sns.Topic(stack, "Alerts"), datasets=DatasetBucket(stack, "Datasets", encryption_key=key),
                  queue_name="training", budget_scope=SCOPE)
    guard(stack)
    assert ends_jobs(Template.from_stack(stack))
    assert warnings(stack) == []


def test_endpoints_carrying_reads_a_tag_that_synthesis_has_not_applied_yet(tmp_path):
    app = new_app(tmp_path)
    stack = Stack(app, "Serving", env=ENV)
    built = endpoint(stack)
    other = Stack(app, "Other", env=ENV)
    endpoint(other, budget_scope="another-team")
    assert [e.node.path for e in endpoints_carrying(stack, SCOPE)] == ["Serving/Endpoint/Resource"]
    Template.from_stack(stack)  # applies the tags
    assert endpoints_carrying(stack, SCOPE) == [built.endpoint]
    assert [e.node.path for e in endpoints_carrying(stack, "another-team")] == ["Other/Endpoint/Resource"]
    assert endpoints_carrying(stack, "nobody") == []
