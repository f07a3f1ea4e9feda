"""What a deploy does to a TrainingQueue's running jobs: every launch-template change is an infrastructure update of
its compute environments (https://docs.aws.amazon.com/batch/latest/userguide/updating-compute-environments.html)."""

import pytest
from aws_cdk import Duration
from ml_platform_job.tracking import TrackedRun
from tests.conftest import training_queue
from tests.unit.test_train_example import PARAMS, batch_decision, example, job_env


def queue_template(synth_stack, **props):
    return synth_stack(lambda stack: training_queue(stack, on_demand_max_vcpus=8, **props))


def update_policies(template):
    return [v["Properties"].get("UpdatePolicy") for v in template.find_resources("AWS::Batch::ComputeEnvironment").values()]


@pytest.fixture(scope="module")
def default_queue(synth_stack):
    return queue_template(synth_stack)


def test_an_update_lets_running_jobs_finish_within_their_own_timeout_and_never_terminates_them(default_queue):
    # Batch's default is 30 minutes, after which it replaces the instances under the running jobs.
    assert update_policies(default_queue) == [{"JobExecutionTimeoutMinutes": 24 * 60, "TerminateJobsOnUpdate": False}] * 2


@pytest.mark.parametrize("timeout,minutes", [(Duration.seconds(90), 2), (Duration.days(10), 7200)])
def test_the_update_timeout_rounds_the_job_timeout_up_and_stops_at_batchs_maximum(synth_stack, timeout, minutes):
    policies = update_policies(queue_template(synth_stack, job_timeout=timeout))
    assert {p["JobExecutionTimeoutMinutes"] for p in policies} == {minutes}


@pytest.fixture(scope="module")
def retry_strategy(default_queue):
    return next(iter(default_queue.find_resources("AWS::Batch::JobDefinition").values()))["Properties"]["RetryStrategy"]


def test_a_job_an_update_ends_is_retried_however_batch_ends_it(retry_strategy):
    # Its instance replaced under it, or its task stopped (SIGTERM, the job checkpoints and exits 143).
    assert batch_decision(retry_strategy, {"statusReason": "Host EC2 (instance i-0abc) terminated."}) == "RETRY"
    assert batch_decision(retry_strategy, {"exitCode": 143, "statusReason": "Essential container in task exited"}) == "RETRY"
    # The job's own failures stay final, whatever reason the container reports.
    assert batch_decision(retry_strategy, {"exitCode": 1, "statusReason": "Essential container in task exited"}) == "EXIT"
    assert batch_decision(retry_strategy, {"exitCode": 2, "reason": "", "statusReason": ""}) == "EXIT"


def test_a_job_ended_by_an_update_resumes_from_its_checkpoint(tmp_path, retry_strategy):
    env = job_env(tmp_path)
    rows = example.load_rows(example.make_dataset(samples=600))
    first = example.Job({**env, "AWS_BATCH_JOB_ATTEMPT": "1"})
    # The code directory is the test's own: a commit elsewhere in the repository between the attempts is no change.
    run = TrackedRun.start(params=PARAMS, env={**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, code_directory=str(tmp_path))

    def stopped_by_the_update_after_epoch_3(state):
        if state["epoch"] == 3:  # past the update's timeout, ECS stops the task: SIGTERM
            first.stop_signalled = True
    stopped, code = example.train(first, run, rows, PARAMS, on_epoch=stopped_by_the_update_after_epoch_3)
    assert (stopped["epoch"], code) == (3, 143)
    assert batch_decision(retry_strategy, {"exitCode": code, "statusReason": "Essential container in task exited"}) == "RETRY"
    second = example.Job({**env, "AWS_BATCH_JOB_ATTEMPT": "2"})
    assert second.resume()["epoch"] == 3
    finished, code = example.train(second, TrackedRun.start(env={**env, "AWS_BATCH_JOB_ATTEMPT": "2"},
                                                           code_directory=str(tmp_path)), rows, PARAMS)
    assert (finished["epoch"], code) == (PARAMS["epochs"], 0)


def test_a_second_deploy_with_the_stall_time_changed_touches_no_compute_environment_or_queue(synth_stack,
                                                                                             default_queue):
    """stalled_minutes 30 -> 60: the job definitions' variable, the watcher's and the stalled alarm's text change; the
    compute environments and job queues, whose updates are what can end a running job, are the same (and no resource
    is added or removed)."""
    changed = queue_template(synth_stack, stalled_minutes=60)
    before, after = default_queue.to_json()["Resources"], changed.to_json()["Resources"]
    assert sorted(before) == sorted(after)
    differ = {before[name]["Type"] for name in before if before[name] != after[name]}
    assert differ and differ <= {"AWS::Batch::JobDefinition", "AWS::Lambda::Function", "AWS::CloudWatch::Alarm"}, differ
    for name, resource in after.items():
        if resource["Type"] == "AWS::Batch::JobDefinition" and resource != before[name]:
            containers = [resource["Properties"].get("ContainerProperties")] + [
                r["Container"] for r in resource["Properties"].get("NodeProperties", {}).get("NodeRangeProperties", [])]
            values = {e["Value"] for c in containers if c for e in c["Environment"]
                      if e["Name"] == "ML_PLATFORM_HEALTH_STALL_SECONDS"}
            assert values == {"3600"}, values
