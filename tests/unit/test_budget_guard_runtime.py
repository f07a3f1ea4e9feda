"""The budget guard's stop, resume and spend projection, against moto (Auto Scaling, EC2, SageMaker, SNS)."""

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from moto import mock_aws

from botocore.exceptions import ClientError

from ml_platform_constructs.runtime.handlers import budget_guard
from ml_platform_constructs.runtime.handlers.budget_guard import ON_DEMAND, SPOT, RunningCapacity

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc)
PRICES = {"on_demand_hourly": {"g5.xlarge": 1.0, "g6.xlarge": 0.8}, "spot_discount": {"g5": 0.5}}


class FakeBudgets:
    def __init__(self, actual):
        self.actual = actual

    def describe_budget(self, AccountId, BudgetName):  # noqa: N803 (boto3 names)
        return {"Budget": {"CalculatedSpend": {"ActualSpend": {"Amount": str(self.actual), "Unit": "USD"}}}}


@pytest.fixture(scope="module")
def world():
    """One emulated account for the module (client setup is most of the cost); each test gets its own environment."""
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="testing",
                                        aws_secret_access_key="testing")
        ec2 = session.client("ec2")
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        ec2.create_launch_template(LaunchTemplateName="fleet-lt", LaunchTemplateData={"ImageId": "ami-12c6146b",
                                                                                      "InstanceType": "g5.xlarge"})
        clients = {"autoscaling": session.client("autoscaling"), "ec2": ec2, "sagemaker": session.client("sagemaker"),
                   "sns": session.client("sns"), "cloudwatch": session.client("cloudwatch"), "ssm": session.client("ssm")}
        yield clients, subnet, session.client("sqs")


@pytest.fixture
def aws(world, request):
    """This test's environment: a platform fleet with 2 instances, a non-platform group, and another environment."""
    clients, subnet, sqs = world
    env = request.node.name.replace("_", "-")[5:40]
    topic = clients["sns"].create_topic(Name=f"alerts-{env}")["TopicArn"]
    queue = sqs.create_queue(QueueName=f"inbox-{env}")["QueueUrl"]
    clients["sns"].subscribe(TopicArn=topic, Protocol="sqs", Endpoint=sqs.get_queue_attributes(
        QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])
    for name, environment, fleet, desired in ((f"{env}-training", env, "training", 2), (f"{env}-other", env, None, 1),
                                              (f"{env}-x-training", f"{env}-x", "training", 1)):
        tags = [{"Key": "ml-platform:budget-scope", "Value": environment, "PropagateAtLaunch": True}]
        if fleet:
            tags.append({"Key": "ml-platform:fleet", "Value": fleet, "PropagateAtLaunch": True})
        clients["autoscaling"].create_auto_scaling_group(
            AutoScalingGroupName=name, MinSize=0, MaxSize=4, DesiredCapacity=desired, VPCZoneIdentifier=subnet,
            LaunchTemplate={"LaunchTemplateName": "fleet-lt"}, Tags=tags)

    clients["ssm"].put_parameter(Name=f"/guard/{env}/last-warning", Value="never", Type="String")

    def inbox():
        return [json.loads(m["Body"])["Message"]
                for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])]
    return {**clients, "budgets": FakeBudgets(0)}, topic, inbox, env


def group(autoscaling, name):
    return autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def settings(env, topic):
    return {"ENVIRONMENT": env, "BUDGET_NAME": "ml-platform-dev-monthly", "ACCOUNT_ID": "123456789012",
            "MONTHLY_LIMIT": "1000", "STOP_AT_PERCENT": "80", "ALERT_TOPIC_ARN": topic,
            "WARNING_PARAMETER": f"/guard/{env}/last-warning"}


def test_stop_suspends_launch_and_zeroes_only_this_environments_fleets(aws):
    clients, _, _, env = aws
    report = budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "test", NOW)
    assert [e["fleet"] for e in report["stopped"]] == ["training"]
    stopped = group(clients["autoscaling"], f"{env}-training")
    assert stopped["DesiredCapacity"] == 0 and "Launch" in {p["ProcessName"] for p in stopped["SuspendedProcesses"]}
    assert any(t["Key"] == "ml-platform:budget-stop" and "test" in t["Value"] for t in stopped["Tags"])
    assert group(clients["autoscaling"], f"{env}-x-training")["DesiredCapacity"] == 1  # another environment
    assert group(clients["autoscaling"], f"{env}-other")["DesiredCapacity"] == 1  # not a platform fleet


def test_stop_is_idempotent(aws):
    clients, _, _, env = aws
    budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "first", NOW)
    again = budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "second", NOW)
    assert again["stopped"] == [] and [e["fleet"] for e in again["already_stopped"]] == ["training"]


def test_a_stopped_fleet_does_not_launch_when_scaled_again(aws):
    clients, _, _, env = aws
    autoscaling = clients["autoscaling"]
    budget_guard.stop(autoscaling, clients["sagemaker"], env, "test", NOW)
    autoscaling.set_desired_capacity(AutoScalingGroupName=f"{env}-training", DesiredCapacity=2)
    assert "Launch" in {p["ProcessName"] for p in group(autoscaling, f"{env}-training")["SuspendedProcesses"]}


def test_resume_lets_fleets_launch_again_and_removes_the_stop_tag(aws):
    clients, _, _, env = aws
    autoscaling = clients["autoscaling"]
    budget_guard.stop(autoscaling, clients["sagemaker"], env, "test", NOW)
    report = budget_guard.resume(autoscaling, env, "arn:aws:iam::123456789012:user/ops", NOW)
    resumed = group(autoscaling, f"{env}-training")
    assert [e["fleet"] for e in report["resumed"]] == ["training"]
    assert resumed["SuspendedProcesses"] == [] and resumed["DesiredCapacity"] == 0
    assert not any(t["Key"] == "ml-platform:budget-stop" for t in resumed["Tags"])
    assert {"Key": "ml-platform:budget-resumed", "Value": "2026-11"} in [
        {"Key": t["Key"], "Value": t["Value"]} for t in resumed["Tags"]]


def running(monkeypatch, *capacity):
    """The spend check sees exactly this capacity (fleet_capacity itself is tested against moto below)."""
    monkeypatch.setattr(budget_guard, "fleet_capacity", lambda autoscaling, ec2, environment, now: list(capacity))


def test_a_resumed_fleet_is_not_stopped_again_that_month(aws, monkeypatch):
    clients, topic, inbox, env = aws
    running(monkeypatch)
    budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "test", NOW)
    budget_guard.resume(clients["autoscaling"], env, "ops", NOW)
    clients["budgets"] = FakeBudgets(900)
    report = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert "stop" not in report
    assert group(clients["autoscaling"], f"{env}-training")["SuspendedProcesses"] == []
    next_month = budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "december",
                                   datetime(2026, 12, 1, 1, tzinfo=timezone.utc))
    assert [e["fleet"] for e in next_month["stopped"]] == ["training"]


def test_checks_after_a_stop_do_not_repeat_the_message(aws, monkeypatch):
    clients, topic, inbox, env = aws
    running(monkeypatch)
    clients["budgets"] = FakeBudgets(800)
    budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert len(inbox()) == 1
    again = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert "stop" not in again and inbox() == []


def test_endpoints_are_reported_as_not_stopped(aws):
    clients, _, _, env = aws
    sagemaker = clients["sagemaker"]
    sagemaker.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
                           PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"})
    sagemaker.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.large", "InitialInstanceCount": 1}])
    sagemaker.create_endpoint(EndpointName="classifier", EndpointConfigName="c",
                              Tags=[{"Key": "environment", "Value": env}])
    report = budget_guard.stop(clients["autoscaling"], sagemaker, env, "test", NOW)
    assert report["not_stopped"][0].startswith("SageMaker endpoint classifier")


def test_budget_notification_through_the_stop_topic_stops(aws):
    clients, topic, inbox, env = aws
    event = {"Records": [{"Sns": {"Message": "AWS Budget Notification: actual 80% of ml-platform-dev-monthly"}}]}
    report = budget_guard.handle(event, clients, settings(env, topic), NOW, PRICES)
    assert report["reason"].startswith("AWS Budgets: AWS Budget Notification")
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 0
    assert "why: AWS Budgets" in inbox()[0]


def test_resume_event(aws):
    clients, topic, inbox, env = aws
    budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "test", NOW)
    report = budget_guard.handle({"action": "resume", "operator": "ops"}, clients, settings(env, topic), NOW, PRICES)
    assert report["resumed"] and "resumed fleet training" in inbox()[0]




# --- what runs, and what it has cost --------------------------------------------------------------------------------

def test_fleet_capacity_reads_type_lifecycle_and_launch_time_of_this_environments_fleets(aws):
    clients, _, _, env = aws
    capacity = budget_guard.fleet_capacity(clients["autoscaling"], clients["ec2"], env, NOW)
    assert len(capacity) == 2  # the fleet's two instances; not the other environment's, not the non-fleet group
    assert {(c.instance_type, c.lifecycle, c.owner) for c in capacity} == {("g5.xlarge", ON_DEMAND, "fleet training")}
    assert all(c.launch_time.tzinfo is not None for c in capacity)


class NotFoundEc2:
    """EC2 that does not know one just-launched instance yet (eventual consistency)."""

    def __init__(self, known):
        self.known = known

    def describe_instances(self, InstanceIds):  # noqa: N803 (boto3 names)
        if any(i not in self.known for i in InstanceIds):
            raise ClientError({"Error": {"Code": "InvalidInstanceID.NotFound", "Message": "nope"}}, "DescribeInstances")
        return {"Reservations": [{"Instances": [
            {"InstanceId": i, "InstanceType": "g5.xlarge", "InstanceLifecycle": "spot",
             "LaunchTime": NOW - timedelta(hours=3)} for i in InstanceIds]}]}


class OneGroup:
    def get_paginator(self, name):
        return self

    def paginate(self, Filters):  # noqa: N803 (boto3 names)
        return [{"AutoScalingGroups": [{"AutoScalingGroupName": "g", "Tags": [{"Key": "ml-platform:fleet", "Value": "t"}],
                                        "Instances": [{"InstanceId": "i-old", "LifecycleState": "InService",
                                                       "InstanceType": "g5.xlarge"},
                                                      {"InstanceId": "i-new", "LifecycleState": "Pending",
                                                       "InstanceType": "g6.xlarge"}]}]}]


def test_an_instance_ec2_does_not_know_yet_is_counted_on_demand_from_now_and_hides_no_other():
    capacity = budget_guard.fleet_capacity(OneGroup(), NotFoundEc2({"i-old"}), "dev", NOW)
    assert sorted((c.instance_type, c.lifecycle, c.launch_time) for c in capacity) == [
        ("g5.xlarge", SPOT, NOW - timedelta(hours=3)), ("g6.xlarge", ON_DEMAND, NOW)]


def test_spot_and_unknown_types_are_priced_from_the_table():
    assert budget_guard.price_per_hour("g5.xlarge", SPOT, PRICES) == pytest.approx(0.5)
    assert budget_guard.price_per_hour("g5.xlarge", ON_DEMAND, PRICES) == 1.0
    assert budget_guard.price_per_hour("p5.48xlarge", ON_DEMAND, PRICES) == 1.0  # unknown: the dearest known


def test_month_hours_by_hand():
    assert budget_guard.hours_left_in_month(NOW) == pytest.approx(28)  # 29 Nov 20:00 UTC


# --- the decision: it fires when it must, and never on legitimate work ----------------------------------------------

DEC_1 = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def prod(config):
    env = config.environments["prod"]
    prices = budget_guard.load_prices(env.region)
    fleet = env.fleets[0]
    dearest = max(fleet.instance_types, key=lambda t: prices["on_demand_hourly"][t])

    def at_max(launched):
        return ([RunningCapacity(dearest, ON_DEMAND, launched)] * fleet.on_demand_base_capacity
                + [RunningCapacity(dearest, SPOT, launched)] * (fleet.max_capacity - fleet.on_demand_base_capacity))

    def decide(capacity, now, actual=0.0, age=0.0):
        return budget_guard.decide(actual=actual, budget_age_hours=age, capacity=capacity, prices=prices,
                                   monthly_limit=env.budget.monthly_limit_usd,
                                   stop_at_percent=env.budget.stop_at_percent, now=now)
    return at_max, decide


def test_the_shipped_prod_fleet_at_max_on_day_one_is_not_stopped_but_warned_with_the_date(prod):
    at_max, decide = prod
    decision = decide(at_max(DEC_1), DEC_1 + timedelta(minutes=15))
    assert decision.decision == "warn"
    assert decision.projected_month > decision.stop_line == 10_800  # the old projection rule stopped here
    assert decision.estimated_to_date < 20 and decision.crossing_date.startswith("2026-12-")


def test_the_same_fleet_is_stopped_within_one_check_once_its_accrued_cost_crosses_the_line(prod):
    at_max, decide = prod
    fleet = at_max(DEC_1)
    crossing = DEC_1 + timedelta(hours=10_800 / decide(fleet, DEC_1).hourly_cost)
    stale = 24 * 31  # Budgets has counted none of it yet: everything since the month began is accrued cost
    assert decide(fleet, crossing - timedelta(minutes=1), age=stale).decision == "warn"
    assert decide(fleet, crossing + timedelta(minutes=15), age=stale).decision == "stop"  # the next 15-minute check


def test_a_budgets_figure_a_day_old_is_bridged_by_accrued_cost(prod):
    at_max, decide = prod
    now = DEC_1 + timedelta(days=10)
    fleet = at_max(now - timedelta(hours=30))
    hourly = decide(fleet, now).hourly_cost
    actual = 10_800 - 20 * hourly  # Budgets last counted 20 hours short of the line
    assert decide(fleet, now, actual=actual, age=24).decision == "stop"  # 24 h of GPU since the figure: over
    assert decide(fleet, now, actual=actual, age=0).decision == "warn"  # had the figure been fresh: not yet


def test_capacity_is_never_counted_before_the_month_began(prod):
    at_max, decide = prod
    fleet = at_max(DEC_1 - timedelta(days=5))
    decision = decide(fleet, DEC_1 + timedelta(hours=1), age=24)
    assert decision.accrued_since_budget == pytest.approx(decision.hourly_cost, abs=0.01)  # one hour, not 121


def test_nothing_running_and_little_spent_decides_nothing(prod):
    _, decide = prod
    decision = decide([], DEC_1 + timedelta(days=3), actual=500)
    assert (decision.decision, decision.crossing_date, decision.projected_month) == ("none", None, 500)


# --- the Lambda's spend check ---------------------------------------------------------------------------------------

def test_spend_check_under_the_line_only_publishes_metrics(aws, monkeypatch):
    clients, topic, inbox, env = aws
    running(monkeypatch, RunningCapacity("g5.xlarge", ON_DEMAND, NOW - timedelta(hours=2)))
    clients["budgets"] = FakeBudgets(100)  # 100 + 2 h x 1 USD; 28 h left: projected 130 < 800
    report = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert (report["decision"], report["estimated_to_date"], report["projected_month"]) == ("none", 102, 130)
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 2
    assert inbox() == []


def test_spend_check_over_the_line_stops_and_reports(aws, monkeypatch):
    clients, topic, inbox, env = aws
    running(monkeypatch, RunningCapacity("g5.xlarge", ON_DEMAND, NOW - timedelta(hours=10)))
    clients["budgets"] = FakeBudgets(790)  # Budgets' figure taken 24 h ago + 10 h x 1 USD = 800: the line
    report = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert report["decision"] == "stop" and report["stop"]["stopped"][0]["fleet"] == "training"
    message = inbox()[0]
    assert "stopped fleet training" in message and f"./platform budget resume {env}" in message
    assert "python -m ml_platform_constructs budget resume --function" in message  # the library alone


def test_the_early_warning_goes_out_once_a_day_and_stops_nothing(aws, monkeypatch):
    clients, topic, inbox, env = aws
    running(monkeypatch, *[RunningCapacity("g5.xlarge", ON_DEMAND, NOW)] * 10)  # 10 USD/h x 28 h = 280
    clients["budgets"] = FakeBudgets(600)
    first = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert first["decision"] == "warn" and "2026-11-30 16:00 UTC" in first["warning"]  # 200 USD at 10 USD/h
    assert "early warning" in inbox()[0]
    later = budget_guard.handle({}, clients, settings(env, topic), NOW + timedelta(minutes=15), PRICES)
    assert later["decision"] == "warn" and "warning" not in later and inbox() == []
    tomorrow = budget_guard.handle({}, clients, settings(env, topic), NOW + timedelta(hours=5), PRICES)
    assert "warning" in tomorrow and len(inbox()) == 1
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 2


class BrokenSageMaker:
    def get_paginator(self, name):
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "ListEndpoints")


def test_the_stop_happens_first_and_a_failing_report_does_not_undo_or_block_it(aws):
    clients, _, _, env = aws
    report = budget_guard.stop(clients["autoscaling"], BrokenSageMaker(), env, "test", NOW)
    assert [e["fleet"] for e in report["stopped"]] == ["training"]
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 0
    assert "could not list" in report["not_stopped"][0]


# --- prices per Region ----------------------------------------------------------------------------------------------

def test_every_configured_region_is_priced_for_every_catalog_type(config):
    from ml_platform_constructs import GPU_CATALOG

    for env in config.environments.values():
        prices = budget_guard.load_prices(env.region)
        assert prices["region"] == env.region and not prices.get("unpriced_region")
        assert set(GPU_CATALOG) <= set(prices["on_demand_hourly"])
        assert prices["source"] and prices["retrieved"] and prices["spot_discount_note"]


def test_a_region_the_table_lacks_is_priced_at_the_dearest_region_it_has():
    table = {"regions": {"a": {"on_demand_hourly": {"g5.xlarge": 1.0}, "spot_discount": {"g5": 0.5}},
                         "b": {"on_demand_hourly": {"g5.xlarge": 1.2}, "spot_discount": {"g5": 0.3}}}}
    prices = budget_guard.load_prices("c", table)
    assert prices["unpriced_region"] and prices["on_demand_hourly"] == {"g5.xlarge": 1.2}
    assert prices["spot_discount"] == {"g5": 0.3}


def test_the_functions_budget_scope_selects_the_fleets_not_the_environment_name(aws, monkeypatch):
    clients, _, _, env = aws
    monkeypatch.setenv("BUDGET_SCOPE", f"{env}-x")  # the guard's function gets its scope from the construct
    report = budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "test", NOW)
    assert [e["group"] for e in report["stopped"]] == [f"{env}-x-training"]
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 2
