"""The retraining function (runtime/handlers/retrain.py) through its Lambda entry point: the claims in DynamoDB and the pending
record in Parameter Store (moto), AWS Batch in a stateful fake (batch_fake.py)."""

import itertools
import json
import threading
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from batch_fake import FakeBatch
from ml_platform_constructs.runtime.handlers import budget_guard, retrain
from ml_platform_constructs.runtime.handlers.pending_jobs import PendingJobs

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc).timestamp()
HOUR = 3600


class Sns:
    def __init__(self):
        self.messages = []

    def publish(self, **kwargs):
        self.messages.append(kwargs["Message"])


@pytest.fixture(scope="module")
def emulated():
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="testing",
                                        aws_secret_access_key="testing")
        yield session.client("dynamodb"), session.client("ssm"), itertools.count(1)


@pytest.fixture
def world(emulated, monkeypatch):
    """A retraining of 'classifier' on a queue of its own budget scope, triggered by drift (24 h) and quality (6 h)."""
    dynamodb, ssm, counter = emulated
    n = next(counter)
    table = f"claims-{n}"
    dynamodb.create_table(TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    batch = FakeBatch()
    tags = {"ml-platform:queue": "training", "ml-platform:budget-scope": f"env{n}"}
    queue = batch.add_queue(f"env{n}-training", tags=tags)
    batch.register(f"env{n}-retrain", tags=tags)
    settings = {"JOB_QUEUE": queue, "JOB_DEFINITION": f"env{n}-retrain", "JOB_NAME_PREFIX": "retrain-classifier",
                "TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:alerts", "CLAIMS_TABLE": table,
                "TRIGGERS": json.dumps({"drift": 24 * HOUR, "quality": 6 * HOUR}),
                "RECORD_KEY_ID": "arn:aws:kms:us-east-1:123456789012:key/queue",
                "CHECKPOINT_ROOT": "s3://bucket/checkpoints/training/"}
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    sns = Sns()
    ids = itertools.count(1)

    def fire(trigger="drift", at=NOW, event_id=None, alarm="serving-classifier-drift"):
        event = {"trigger": trigger, "alarm": alarm, "reason": "Threshold Crossed",
                 "time": datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "eventId": event_id or f"event-{next(ids)}"}
        return retrain.handler(event, None, batch=batch, sns=sns, dynamodb=dynamodb, ssm=ssm, now=at)
    return {"batch": batch, "queue": queue, "fire": fire, "sns": sns, "ssm": ssm, "scope": f"env{n}",
            "dynamodb": dynamodb, "table": table}


def test_a_drift_alarm_submits_one_job_with_its_name_checkpoints_definition_and_trigger(world):
    result = world["fire"]()
    (request,) = world["batch"].submitted()
    assert result["submitted"] and request["jobName"] == "retrain-classifier-202611292000"
    assert request["jobQueue"] == world["queue"]
    assert request["jobDefinition"] == f"{world['scope']}-retrain"  # by name: its latest active revision
    assert request["containerOverrides"]["environment"] == [
        {"name": "ML_PLATFORM_JOB_NAME", "value": "retrain-classifier-202611292000"},
        {"name": "ML_PLATFORM_RETRAIN_TRIGGER", "value": "drift"},
        {"name": "ML_PLATFORM_RETRAIN_ALARM", "value": "serving-classifier-drift"},
        {"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://bucket/checkpoints/training/retrain-classifier-202611292000/"}]
    assert request["tags"] == {"ml-platform:retrain-trigger": "drift", "ml-platform:retrain-alarm": "serving-classifier-drift",
                               "ml-platform:retrain-time": "2026-11-29T20:00:00Z"}
    assert request["propagateTags"] is True
    assert "retraining job retrain-classifier-202611292000" in world["sns"].messages[0]


def test_two_events_at_once_submit_one_job(world):
    """Both events pass every read before either claims: only the atomic claim can tell them apart (the old
    list-then-submit cooldown submitted two jobs here)."""
    both_read = threading.Barrier(2, timeout=10)
    dynamodb, lock = world["dynamodb"], threading.Lock()

    class Racing:
        """DynamoDB as both functions see it: each waits for the other before it writes; the service applies one
        conditional write at a time."""

        def __getattr__(self, name):
            return getattr(dynamodb, name)

        def put_item(self, **kwargs):
            if kwargs["Item"]["pk"]["S"].startswith("cooldown#"):
                both_read.wait()
            with lock:
                return dynamodb.put_item(**kwargs)
    results = []

    def fire(event_id):
        event = {"trigger": "drift", "alarm": "drift", "time": "2026-11-29T20:00:00Z", "eventId": event_id}
        results.append(retrain.handler(event, None, batch=world["batch"], sns=world["sns"], dynamodb=Racing(),
                                       ssm=world["ssm"], now=NOW))
    threads = [threading.Thread(target=fire, args=(f"psi-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(world["batch"].submitted()) == 1
    assert sorted(r["submitted"] for r in results) == [False, True]


def test_the_same_event_delivered_twice_submits_once(world):
    world["fire"](event_id="once")
    again = world["fire"](event_id="once", at=NOW + 60)
    assert len(world["batch"].submitted()) == 1 and again["submitted"]  # the retry finds its own job


def test_the_same_event_delivered_again_after_its_job_was_submitted_tells_the_topic_once(world):
    first = world["fire"](event_id="once")
    again = world["fire"](event_id="once", at=NOW + 60)
    assert again["jobId"] == first["jobId"] and len(world["batch"].submitted()) == 1
    assert len(world["sns"].messages) == 1


def test_the_same_event_delivered_again_after_its_job_finished_starts_no_second_job(world):
    first = world["fire"](event_id="once")
    world["batch"].finish(first["jobId"])  # a short job, done before the event's late redelivery
    again = world["fire"](event_id="once", at=NOW + 2 * HOUR)
    assert len(world["batch"].submitted()) == 1 and again["jobId"] == first["jobId"]
    assert len(world["sns"].messages) == 1


def test_a_late_redelivery_does_not_extend_the_cooldown(world):
    first = world["fire"](event_id="once")
    world["batch"].finish(first["jobId"])
    world["fire"](event_id="once", at=NOW + 2 * HOUR)
    later = world["fire"](at=NOW + 25 * HOUR)  # 24 h after the episode, whenever its event came again
    assert later["submitted"] and len(world["batch"].submitted()) == 2


def test_the_same_event_delivered_again_while_its_retraining_waits_keeps_one_record_and_tells_once(world):
    batch, ssm = world["batch"], world["ssm"]
    batch.queues[world["queue"]]["state"] = "DISABLED"  # a budget stop
    first = world["fire"](event_id="once")
    again = world["fire"](event_id="once", at=NOW + 60)
    assert again["pending"] == first["pending"] and len(PendingJobs(ssm).of_queue(world["queue"])) == 1
    assert len(world["sns"].messages) == 1 and batch.submitted() == []


def test_a_skipped_event_delivered_again_tells_the_topic_once(world):
    world["fire"]("drift", event_id="first")
    world["fire"]("quality", at=NOW + HOUR, event_id="skipped")
    world["fire"]("quality", at=NOW + HOUR + 60, event_id="skipped")
    assert len(world["sns"].messages) == 2 and "is still submitted" in world["sns"].messages[1]


def test_an_alert_that_failed_to_publish_is_published_by_the_events_retry(world):
    sns, real = world["sns"], world["sns"].publish
    calls = []

    def failing_once(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("Throttling on Publish")
        real(**kwargs)
    sns.publish = failing_once
    with pytest.raises(RuntimeError, match="Throttling"):
        world["fire"](event_id="retried")
    world["fire"](event_id="retried", at=NOW + 30)  # Lambda retries the same event
    assert len(world["batch"].submitted()) == 1 and len(sns.messages) == 1
    assert "submitted" in sns.messages[0]


def test_a_new_episode_within_the_cooldown_starts_nothing_and_says_so(world):
    first = world["fire"]()
    world["batch"].finish(first["jobId"])
    later = world["fire"](at=NOW + 23 * HOUR)
    assert later["skipped"] == "cooldown" and len(world["batch"].submitted()) == 1
    assert "within its cooldown of 24 h" in world["sns"].messages[-1]


def test_after_the_cooldown_a_new_episode_starts_a_new_job(world):
    first = world["fire"]()
    world["batch"].finish(first["jobId"])
    world["batch"].forget_finished()  # Batch's job list is no record; the claim is
    later = world["fire"](at=NOW + 25 * HOUR)
    assert later["submitted"] and later["jobName"] == "retrain-classifier-202611302100"


def test_one_retraining_at_a_time_whatever_triggered_it(world):
    drift = world["fire"]("drift")
    quality = world["fire"]("quality", at=NOW + HOUR)  # its own cooldown is free, the flight is not
    assert quality["skipped"] == "in flight" and quality["jobName"] == drift["jobName"]
    assert "is still submitted" in world["sns"].messages[-1]
    world["batch"].finish(drift["jobId"])
    again = world["fire"]("quality", at=NOW + 2 * HOUR)  # quality's cooldown was claimed by the skipped episode
    assert again["skipped"] == "cooldown"
    later = world["fire"]("quality", at=NOW + 8 * HOUR)
    assert later["submitted"] and world["batch"].jobs[later["jobId"]]["tags"]["ml-platform:retrain-trigger"] == "quality"


def throttled_once(world):
    calls = []

    def throttled(request):
        calls.append(request)
        if len(calls) == 1:
            raise RuntimeError("TooManyRequestsException")
    world["batch"].before_submit = throttled


def test_a_failed_submission_fails_the_function_and_its_retry_submits(world):
    throttled_once(world)
    with pytest.raises(RuntimeError, match="TooManyRequests"):
        world["fire"](event_id="retried")
    retried = world["fire"](event_id="retried", at=NOW + 30)  # EventBridge / Lambda retry the same event
    assert retried["submitted"] and len(world["batch"].submitted()) == 1


def test_a_failed_submission_gives_its_claims_back_for_the_next_event(world):
    throttled_once(world)
    with pytest.raises(RuntimeError, match="TooManyRequests"):
        world["fire"](event_id="failed for good")  # and its retries, say, too
    later = world["fire"]("drift", at=NOW + HOUR)  # the alarm's next change to ALARM is not held back
    assert later["submitted"] and len(world["batch"].submitted()) == 1


def test_a_failure_while_claiming_the_flight_gives_the_cooldown_back(world):
    calls = []
    real = world["batch"].get_paginator

    def failing_once(name):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("ThrottlingException on ListJobs")
        return real(name)
    first = world["fire"]()  # a retraining in flight, so the next event must look at it
    world["batch"].finish(first["jobId"])
    world["batch"].get_paginator = failing_once
    with pytest.raises(RuntimeError, match="Throttling"):
        world["fire"]("quality", at=NOW + HOUR)
    assert world["fire"]("quality", at=NOW + HOUR + 60)["submitted"]


def test_a_claim_whose_function_died_before_submitting_frees_the_flight_after_15_minutes(world):
    dynamodb = world["dynamodb"]
    dynamodb.put_item(TableName=world["table"], Item={
        "pk": {"S": "flight"}, "event": {"S": "died"}, "state": {"S": "claimed"}, "trigger": {"S": "quality"},
        "at": {"N": str(NOW - 20 * 60)}, "job_name": {"S": "retrain-classifier-202611291940"}})
    result = world["fire"]()
    assert result["submitted"] and result["jobName"] == "retrain-classifier-202611292000"


def test_while_the_queue_is_stopped_the_retraining_waits_and_resume_submits_it(world):
    batch, ssm = world["batch"], world["ssm"]
    batch.queues[world["queue"]]["state"] = "DISABLED"  # a budget stop
    batch.queues[world["queue"]]["tags"]["ml-platform:budget-stop"] = "2026-11-29T19:00Z line"
    result = world["fire"]()
    assert not result["submitted"] and batch.submitted() == []
    assert "kept pending" in world["sns"].messages[-1] and "budget resume" in world["sns"].messages[-1]
    (entry,) = PendingJobs(ssm).of_queue(world["queue"])
    assert entry["source"] == "retraining" and entry["request"]["jobName"] == result["jobName"]
    assert world["fire"]("quality", at=NOW + HOUR)["skipped"] == "in flight"  # still one retraining

    report = budget_guard.resume_queues(batch, PendingJobs(ssm), world["scope"], datetime.fromtimestamp(
        NOW + 2 * HOUR, timezone.utc))  # the guard's resume path
    (submitted,) = batch.submitted()
    assert submitted["jobName"] == result["jobName"] and submitted["tags"]["ml-platform:retrain-trigger"] == "drift"
    # As a revision, so that the guard's scope condition is evaluated on the definition's tags.
    assert submitted["jobDefinition"] == f"arn:aws:batch:us-east-1:123456789012:job-definition/{world['scope']}-retrain:1"
    assert report["jobs_resubmitted"][0]["source"] == "retraining" and PendingJobs(ssm).of_queue(world["queue"]) == []
    assert world["fire"]("quality", at=NOW + 8 * HOUR)["skipped"] == "in flight"  # it runs now


def test_a_queue_stopped_between_the_check_and_the_submission_keeps_it_pending(world):
    batch = world["batch"]

    def stopped_meanwhile(request):
        batch.queues[world["queue"]]["state"] = "DISABLED"
    batch.before_submit = stopped_meanwhile
    result = world["fire"]()
    assert result["pending"] and len(PendingJobs(world["ssm"]).of_queue(world["queue"])) == 1


def test_an_unknown_trigger_fails_loudly(world):
    with pytest.raises(ValueError, match="unknown trigger 'latency': this retraining has \\['drift', 'quality'\\]"):
        world["fire"]("latency")


def test_tag_values_keep_to_what_batch_accepts(world):
    world["fire"](alarm="drift (PSI > 0.2) & more")
    assert world["batch"].submitted()[0]["tags"]["ml-platform:retrain-alarm"] == "drift _PSI _ 0.2_ _ more"


class KeyBoundSsm:
    """Parameter Store as a role allowed to decrypt with one KMS key only sees it: a read WithDecryption of a record
    that another key encrypted is refused (AccessDeniedException, as KMS refuses the Decrypt), one without decryption
    is not."""

    def __init__(self, ssm, readable_key):
        self.ssm, self.readable_key, self.keys = ssm, readable_key, {}

    def __getattr__(self, name):
        return getattr(self.ssm, name)

    def put_parameter(self, **kwargs):
        self.keys[kwargs["Name"]] = kwargs.get("KeyId", "alias/aws/ssm")
        return self.ssm.put_parameter(**kwargs)

    def _refuse_foreign(self, names, operation):
        from botocore.exceptions import ClientError
        for name in names:
            if self.keys.get(name, self.readable_key) != self.readable_key:
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": f"not allowed to decrypt {name} "
                                             f"(its key {self.keys[name]})"}}, operation)

    def get_parameter(self, **kwargs):
        if kwargs.get("WithDecryption"):
            self._refuse_foreign([kwargs["Name"]], "GetParameter")
        return self.ssm.get_parameter(**kwargs)

    def get_parameters(self, **kwargs):
        if kwargs.get("WithDecryption"):
            self._refuse_foreign(kwargs["Names"], "GetParameters")
        return self.ssm.get_parameters(**kwargs)

    def get_paginator(self, name):
        paginator = self.ssm.get_paginator(name)
        outer = self

        class Checked:
            def paginate(self, **kwargs):
                for page in paginator.paginate(**kwargs):
                    if kwargs.get("WithDecryption"):
                        outer._refuse_foreign([p["Name"] for p in page.get("Parameters", [])], "GetParametersByPath")
                    yield page
        return Checked()


def test_a_trigger_during_a_budget_stop_needs_no_key_but_the_queues(world):
    """A team app whose budget guard has a key of its own: the guard's records of the jobs it ended are encrypted
    with that key, which the retraining function may not use. A second trigger while the first retraining waits
    must still see that one is pending (it raised AccessDenied on every trigger of the stop)."""
    batch, ssm = world["batch"], world["ssm"]
    queue_key = "arn:aws:kms:us-east-1:123456789012:key/queue"
    batch.queues[world["queue"]]["state"] = "DISABLED"  # a budget stop, which kept a job it ended
    bound = KeyBoundSsm(ssm, queue_key)
    ended = {"jobName": "nightly-train", "jobQueue": world["queue"], "jobDefinition": f"{world['scope']}-retrain"}
    PendingJobs(bound, "arn:aws:kms:us-east-1:123456789012:key/guard").record(
        ended, leaf="job-1234", source="budget-stop", now=datetime.fromtimestamp(NOW, timezone.utc))

    def fire(trigger, at, event_id):
        event = {"trigger": trigger, "alarm": f"{trigger} alarm", "time": "2026-11-29T20:00:00Z", "eventId": event_id}
        return retrain.handler(event, None, batch=batch, sns=world["sns"], dynamodb=world["dynamodb"], ssm=bound, now=at)
    first = fire("drift", NOW, "drift-1")
    assert first["pending"] and bound.keys[first["pending"]] == queue_key
    second = fire("quality", NOW + HOUR, "quality-1")
    assert second["skipped"] == "in flight" and second["jobName"] == first["jobName"]
    assert batch.submitted() == []
