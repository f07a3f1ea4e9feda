"""The budget guard's entry points where mutation testing found them unchecked: a scope with queues and no fleet, what
its reports and messages carry (the Region priced, a leftover instance's launch, compute environments that want
nothing, errors cut to size), its cost metrics, the clients its Lambda handler makes, resubmissions, batches of 100."""

from datetime import timedelta

from ml_platform_constructs.runtime.handlers import budget_guard
from ml_platform_constructs.runtime.handlers.pending_jobs import PendingJobs
from test_budget_guard_queues import KEY, NOW, PRICES, FakeBudgets, emulated, world  # noqa: F401 (fixtures)


def without_fleet(world):
    world["clients"]["autoscaling"].delete_auto_scaling_group(AutoScalingGroupName=f"{world['name']}-training",
                                                              ForceDelete=True)


def test_a_scope_with_queues_only_is_stopped_by_the_spend_check_and_told_once(world):
    without_fleet(world)
    world["clients"]["budgets"] = FakeBudgets(900)
    first = budget_guard.handle({}, world["clients"], world["env"], NOW, PRICES)
    assert first["stop"]["stopped"] == [] and first["stop"]["queues_stopped"][0]["queue"] == "training"
    assert "stopped training queue training" in world["messages"]()[0]
    again = budget_guard.handle({}, world["clients"], world["env"], NOW + timedelta(minutes=1), PRICES)
    assert again["decision"] == "stop" and "stop" not in again and world["messages"]() == []


def test_the_spend_check_names_the_region_it_priced(world):
    report = budget_guard.handle({}, world["clients"], world["env"], NOW, {**PRICES, "region": "eu-west-1"})
    assert report["region_priced"] == "eu-west-1"


def test_a_leftover_instance_is_reported_with_its_launch_and_only_environments_that_want_vcpus(world):
    budget_guard.handle({"Records": [{"Sns": {"Message": "AWS Budget Notification"}}]}, world["clients"],
                        world["env"], NOW, PRICES)
    world["batch"].environments[next(a for a in world["batch"].environments if a.endswith("-od"))][
        "computeResources"] = {}  # an environment Batch reports without a desired count
    (entry,) = budget_guard.queue_leftovers(world["batch"], world["clients"]["ec2"], world["name"])
    launched = world["clients"]["ec2"].describe_instances(InstanceIds=[world["instance"]])[
        "Reservations"][0]["Instances"][0]["LaunchTime"]
    assert entry["instances"] == [{"id": world["instance"], "type": "g6.xlarge", "lifecycle": "on-demand",
                                   "launched": str(launched)}]
    assert entry["wanted_vcpus"] == [{"environment": f"{world['name']}-spot", "desired_vcpus": 4}]


def test_a_failed_look_at_leftovers_is_reported_cut_to_300_characters(world, monkeypatch):
    def failing(*args):
        raise RuntimeError("x" * 400)
    monkeypatch.setattr(budget_guard, "queue_leftovers", failing)
    report = budget_guard.handle({}, world["clients"], world["env"], NOW, PRICES)
    (entry,) = report["leftovers"]
    assert entry["error"] == ("could not check the stopped queues' instances: " + "x" * 400)[:300]
    assert "could not check the stopped queues' instances" in world["messages"]()[0]


def test_a_job_that_cannot_be_recorded_is_reported_with_its_error_cut_to_300_characters(world):
    class BrokenSsm:
        def put_parameter(self, **kwargs):
            raise RuntimeError("y" * 400)
    report = budget_guard.stop_queues(world["batch"], PendingJobs(BrokenSsm(), KEY), world["name"], "line", NOW)
    assert {len(j["error"]) for j in report["jobs_not_recorded"]} == {300}


def test_the_scheduled_check_prices_the_region_the_stack_names_not_the_functions_own(world, monkeypatch):
    asked = []
    monkeypatch.setattr(budget_guard, "load_prices", lambda region, table=None: asked.append(region) or {
        **PRICES, "region": region})
    env = {**world["env"], "PRICE_REGION": "eu-west-1", "AWS_REGION": "us-east-1"}
    assert budget_guard.handle({}, world["clients"], env, NOW)["region_priced"] == "eu-west-1"
    assert asked == ["eu-west-1"]


def test_the_check_publishes_its_three_cost_metrics(world):
    class Cloudwatch:
        def __init__(self):
            self.data = []

        def put_metric_data(self, Namespace, MetricData):  # noqa: N803 (boto3 names)
            self.data.append((Namespace, MetricData))
    cloudwatch = Cloudwatch()
    report = budget_guard.handle({}, {**world["clients"], "cloudwatch": cloudwatch}, world["env"], NOW, PRICES)
    ((namespace, data),) = cloudwatch.data
    assert namespace == "MLPlatform/Cost"
    assert [(d["MetricName"], d["Value"], d["Unit"]) for d in data] == [
        ("EstimatedSpendToDate", report["estimated_to_date"], "None"),
        ("ProjectedMonthlySpend", report["projected_month"], "None"),
        ("FleetHourlyCost", report["hourly_cost"], "None")]
    assert {json_dimension(d) for d in data} == {("Environment", world["name"])}


def json_dimension(datum):
    (dimension,) = datum["Dimensions"]
    return dimension["Name"], dimension["Value"]


def test_the_lambda_entry_point_makes_every_client_it_needs(world, monkeypatch):
    import boto3

    asked = []
    monkeypatch.setattr(boto3, "client", lambda name: asked.append(name) or world["clients"][name])
    for key, value in world["env"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(budget_guard, "load_prices", lambda region, table=None: PRICES)
    assert budget_guard.handler({}, None)["action"] == "spend-check"
    assert sorted(asked) == ["autoscaling", "batch", "budgets", "cloudwatch", "ec2", "sagemaker", "sns", "ssm"]


def test_a_resubmission_keeps_tags_propagating_when_the_job_said_nothing():
    job = {"jobId": "j-1", "jobName": "resnet", "jobQueue": "q", "jobDefinition": "arn:d:1", "tags": {"team": "a"},
           "container": {"command": ["python"], "environment": []}}
    request = budget_guard._resubmission(job)
    assert request["propagateTags"] is True
    assert request["tags"] == {"team": "a", budget_guard.RESUBMISSION_OF_TAG: "j-1"}


def test_instances_are_ended_once_each_in_batches_of_100(world):
    ended = []

    class Ec2:
        def terminate_instances(self, InstanceIds):  # noqa: N803
            ended.append(list(InstanceIds))
    ids = [f"i-{n:03d}" for n in range(150)]
    (item,) = budget_guard.end_leftovers(Ec2(), [{"queue": "training", "stopped_at": None, "wanted_vcpus": [],
                                                 "instances": [{"id": i} for i in ids]}], timedelta(minutes=10), NOW)
    assert ended == [ids[:100], ids[100:]] and item["ended"] == ids


def test_the_stop_message_names_what_it_left_running_and_could_not_stop():
    sent = []

    class Sns:
        def publish(self, **kwargs):
            sent.append(kwargs["Message"])
    budget_guard._announce(Sns(), "topic", {
        "action": "stop", "environment": "dev", "reason": "line", "time": NOW.isoformat(), "stopped": [],
        "resumed_by_operator": [{"fleet": "training"}], "not_stopped": ["SageMaker endpoint classifier"],
        "leftovers": [{"queue": "training", "instances": [], "wanted_vcpus": [], "error": "denied"}]})
    assert "left running (resumed by an operator this month): training" in sent[0]
    assert "NOT stopped: SageMaker endpoint classifier" in sent[0]
    assert "STILL RUNNING after the stop of training queue training: ?; could not end them (denied)" in sent[0]


def test_a_node_range_without_a_container_is_resubmitted_with_no_overrides():
    job = {"jobId": "mnp-1", "jobName": "llm", "jobQueue": "q", "jobDefinition": "arn:mnp:1",
           "nodeProperties": {"numNodes": 2, "nodeRangeProperties": [{"targetNodes": "0:"}]}}
    (node,) = budget_guard._resubmission(job)["nodeOverrides"]["nodePropertyOverrides"]
    assert node == {"targetNodes": "0:", "containerOverrides": budget_guard._overrides({})}
