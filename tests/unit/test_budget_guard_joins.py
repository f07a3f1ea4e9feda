"""The budget guard's entry point where mutation testing found it unchecked: a scope with queues and no fleet, what
its reports carry (the Region priced, a leftover instance's launch, compute environments that want nothing, errors
cut to size)."""

from datetime import timedelta

from ml_platform_constructs.runtime import budget_guard
from ml_platform_constructs.runtime.pending_jobs import PendingJobs
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
