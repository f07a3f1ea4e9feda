"""The budget guard's stop, resume and spend projection, against moto (Auto Scaling, EC2, SageMaker, SNS)."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from ml_platform_constructs.runtime import budget_guard

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
                   "sns": session.client("sns"), "cloudwatch": session.client("cloudwatch")}
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

    def inbox():
        return [json.loads(m["Body"])["Message"]
                for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])]
    return {**clients, "budgets": FakeBudgets(0)}, topic, inbox, env


def group(autoscaling, name):
    return autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def settings(env, topic):
    return {"ENVIRONMENT": env, "BUDGET_NAME": "ml-platform-dev-monthly", "ACCOUNT_ID": "123456789012",
            "MONTHLY_LIMIT": "1000", "STOP_AT_PERCENT": "80", "ALERT_TOPIC_ARN": topic}


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


def test_a_resumed_fleet_is_not_stopped_again_that_month(aws):
    clients, topic, inbox, env = aws
    budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "test", NOW)
    budget_guard.resume(clients["autoscaling"], env, "ops", NOW)
    clients["budgets"] = FakeBudgets(900)
    report = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert "stop" not in report
    assert group(clients["autoscaling"], f"{env}-training")["SuspendedProcesses"] == []
    next_month = budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "december",
                                   datetime(2026, 12, 1, 1, tzinfo=timezone.utc))
    assert [e["fleet"] for e in next_month["stopped"]] == ["training"]


def test_checks_after_a_stop_do_not_repeat_the_message(aws):
    clients, topic, inbox, env = aws
    clients["budgets"] = FakeBudgets(760)
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


def test_hourly_rate_prices_running_instances_from_the_table(aws):
    clients, _, _, env = aws
    rate, details = budget_guard.hourly_rate(clients["autoscaling"], clients["ec2"], env, PRICES)
    assert len(details) == 2 and rate == pytest.approx(2.0)  # two On-Demand g5.xlarge at 1.0


def test_spot_and_unknown_types_are_priced_from_the_table():
    assert budget_guard.price_instance("g5.xlarge", True, PRICES)["hourly"] == pytest.approx(0.5)
    assert budget_guard.price_instance("p5.48xlarge", False, PRICES)["hourly"] == 1.0  # unknown: the dearest known


def test_month_projection_by_hand():
    # 29 Nov 20:00 UTC: 28 hours left in November.
    assert budget_guard.hours_left_in_month(NOW) == pytest.approx(28)
    assert budget_guard.projected_month_spend(500, 10, NOW) == pytest.approx(780)


def test_spend_check_below_the_threshold_only_publishes_metrics(aws):
    clients, topic, inbox, env = aws
    clients["budgets"] = FakeBudgets(100)  # 100 + 2 USD/h * 28 h = 156 < 800
    report = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert report["projected_month"] == pytest.approx(156) and "stop" not in report
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 2
    assert inbox() == []


def test_spend_check_over_the_threshold_stops_and_reports(aws, monkeypatch):
    clients, topic, inbox, env = aws
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "team-guard-fn")  # set by Lambda in the function
    clients["budgets"] = FakeBudgets(760)  # 760 + 56 = 816 >= 80% of 1000
    report = budget_guard.handle({"source": "aws.events"}, clients, settings(env, topic), NOW, PRICES)
    assert report["stop"]["stopped"][0]["fleet"] == "training"
    message = inbox()[0]
    assert "stopped fleet training" in message and f"./platform budget resume {env}" in message
    assert "python -m ml_platform_constructs budget resume --function team-guard-fn" in message  # without the app


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


def test_shipped_price_table_covers_every_catalog_type():
    from ml_platform_constructs import GPU_CATALOG

    table = budget_guard.load_prices()
    assert set(GPU_CATALOG) <= set(table["on_demand_hourly"])
    assert table["source"] and table["retrieved"] and table["region"] == "us-east-1"


def test_the_functions_budget_scope_selects_the_fleets_not_the_environment_name(aws, monkeypatch):
    clients, _, _, env = aws
    monkeypatch.setenv("BUDGET_SCOPE", f"{env}-x")  # the guard's function gets its scope from the construct
    report = budget_guard.stop(clients["autoscaling"], clients["sagemaker"], env, "test", NOW)
    assert [e["group"] for e in report["stopped"]] == [f"{env}-x-training"]
    assert group(clients["autoscaling"], f"{env}-training")["DesiredCapacity"] == 2
