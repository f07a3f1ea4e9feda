"""The retraining function's claims and entry point where mutation testing found them unchecked: the flight claim as
stored, the 15-minute edge of a dead claim, a second job in the same minute, the claim loop's tries, errors that are
not DynamoDB's condition, the clients and time the Lambda entry point makes itself, what it publishes and logs."""

import json
import time
from datetime import datetime, timezone

import boto3
import pytest

from ml_platform_constructs.runtime.handlers import retrain
from ml_platform_constructs.runtime.handlers.pending_jobs import PendingJobs
from test_retrain import HOUR, NOW, emulated, world  # noqa: F401 (fixtures)

ARN = "arn:aws:sns:us-east-1:123456789012:alerts"


def flight(world):
    item = world["dynamodb"].get_item(TableName=world["table"], Key={"pk": {"S": "flight"}})["Item"]
    return retrain.Claims._decode(item)


def dead_claim(world, at):
    """A flight claim whose function died after claiming, before submitting."""
    world["dynamodb"].put_item(TableName=world["table"], Item={
        "pk": {"S": "flight"}, "event": {"S": "died"}, "state": {"S": "claimed"}, "trigger": {"S": "quality"},
        "at": {"N": str(at)}, "job_name": {"S": "retrain-classifier-202611291940"}})


def test_the_flight_claim_as_stored_names_its_event_trigger_state_time_and_job(world):
    result = world["fire"](event_id="e1")
    assert flight(world) == {"pk": "flight", "event": "e1", "trigger": "drift", "state": "submitted", "at": NOW,
                             "job_name": "retrain-classifier-202611292000", "job_id": result["jobId"]}


@pytest.mark.parametrize("age, held", [(899, True), (900, False)])
def test_a_dead_claim_holds_the_flight_for_exactly_15_minutes(world, age, held):
    dead_claim(world, NOW - age)
    result = world["fire"]()
    assert result["submitted"] is not held
    if held:
        assert result["skipped"] == "in flight" and "retrain-classifier-202611291940 (started by quality) is still " \
            "claimed" in world["sns"].messages[-1]


def test_a_claim_of_a_finished_job_does_not_hold_the_flight_however_recent(world):
    first = world["fire"]("drift")
    world["batch"].finish(first["jobId"])
    assert world["fire"]("quality", at=NOW + 60)["submitted"]


def test_a_second_retraining_in_the_same_minute_gets_a_name_of_its_own(world):
    first = world["fire"]("drift")
    world["batch"].finish(first["jobId"])
    second = world["fire"]("quality", at=NOW + 30)
    assert second["jobName"] == "retrain-classifier-202611292000-2"
    assert world["batch"].submitted()[-1]["jobName"] == "retrain-classifier-202611292000-2"


class Vanishing:
    """DynamoDB whose flight claim is answered 'condition failed' with no item (gone between write and answer)
    for the first `times` writes."""

    def __init__(self, dynamodb, times):
        self.dynamodb, self.times, self.flight_writes = dynamodb, times, []

    def __getattr__(self, name):
        return getattr(self.dynamodb, name)

    def put_item(self, **kwargs):
        if kwargs["Item"]["pk"]["S"] == "flight":
            self.flight_writes.append(kwargs["ConditionExpression"])
            if len(self.flight_writes) <= self.times:
                raise _conditional_check_failed()
        return self.dynamodb.put_item(**kwargs)


def _conditional_check_failed():
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": "failed"}}, "PutItem")


def fire_with(world, dynamodb, event_id="e1", trigger="drift"):
    event = {"trigger": trigger, "alarm": "drift", "time": "2026-11-29T20:00:00Z", "eventId": event_id}
    return retrain.handler(event, None, batch=world["batch"], sns=world["sns"], dynamodb=dynamodb, ssm=world["ssm"],
                           now=NOW)


def test_a_claim_that_vanished_is_tried_again_as_new(world):
    dynamodb = Vanishing(world["dynamodb"], times=2)
    assert fire_with(world, dynamodb)["submitted"]
    assert dynamodb.flight_writes == ["attribute_not_exists(#pk)"] * 3


def test_the_flight_is_tried_three_times_then_the_function_fails_and_gives_the_cooldown_back(world):
    dynamodb = Vanishing(world["dynamodb"], times=3)
    with pytest.raises(RuntimeError, match="^could not claim the retraining flight after 3 tries "
                                           r"\(other events keep taking it\)$"):
        fire_with(world, dynamodb)
    assert len(dynamodb.flight_writes) == 3
    assert world["fire"]("drift", at=NOW + 60)["submitted"]  # the cooldown was given back


class Failing:
    def __init__(self, dynamodb, error):
        self.dynamodb, self.error = dynamodb, error

    def __getattr__(self, name):
        return getattr(self.dynamodb, name)

    def put_item(self, **kwargs):
        raise self.error


class NoResponse(Exception):
    pass


class EmptyResponse(Exception):
    response = {}


@pytest.mark.parametrize("error", [NoResponse("network down"), EmptyResponse("odd answer")])
def test_an_error_that_is_not_a_failed_condition_is_raised_as_it_is(world, error):
    with pytest.raises(type(error), match=str(error)):
        fire_with(world, Failing(world["dynamodb"], error))


def test_giving_back_a_claim_another_event_holds_now_is_not_an_error(world):
    claims = retrain.Claims(world["dynamodb"], world["table"])
    claims.put({"pk": "flight", "event": "other"}, "attribute_not_exists(#pk)", {})
    claims.release("flight", "mine")
    assert flight(world)["event"] == "other"
    with pytest.raises(Exception, match="ResourceNotFound"):
        retrain.Claims(world["dynamodb"], "no-such-table").release("flight", "mine")


class Recorder:
    """boto3.client as the Lambda entry point calls it: the test's clients by service name."""

    def __init__(self, clients):
        self.clients, self.asked = clients, []

    def __call__(self, service, *args, **kwargs):
        self.asked.append(service)
        return self.clients[service]


def test_the_entry_point_makes_its_own_clients_and_time_and_publishes_to_the_topic(world, monkeypatch, capsys):
    recorder = Recorder({"batch": world["batch"], "sns": world["sns"], "dynamodb": world["dynamodb"],
                         "ssm": world["ssm"]})
    monkeypatch.setattr(boto3, "client", recorder)
    monkeypatch.setattr(time, "time", lambda: NOW)
    published = []
    world["sns"].publish = lambda **kwargs: published.append(kwargs)
    result = retrain.handler({"trigger": "drift", "alarm": "a", "eventId": "e1"}, None)
    assert sorted(recorder.asked) == ["batch", "dynamodb", "sns", "ssm"]
    assert result["submitted"] and result["jobName"] == "retrain-classifier-202611292000"
    assert published == [{"TopicArn": ARN, "Subject": "Retraining: drift", "Message": result["message"]}]
    assert json.loads(capsys.readouterr().out) == result  # the function's log line


def test_the_subject_keeps_to_sns_100_characters(world, monkeypatch):
    trigger = "t" * 120
    monkeypatch.setenv("TRIGGERS", json.dumps({trigger: HOUR}))
    published = []
    world["sns"].publish = lambda **kwargs: published.append(kwargs)
    world["fire"](trigger)
    assert published[0]["Subject"] == ("Retraining: " + trigger)[:100]


def test_a_pending_retraining_is_recorded_under_its_name_with_the_queues_key(world, monkeypatch):
    recorded = []
    monkeypatch.setattr(PendingJobs, "record", lambda self, request, **kwargs: recorded.append(
        (self.key_id, kwargs["leaf"], kwargs["source"], kwargs["now"])) or "/ml-platform/pending-jobs/q/x")
    world["batch"].queues[world["queue"]]["state"] = "DISABLED"
    world["fire"]()
    assert recorded == [("arn:aws:kms:us-east-1:123456789012:key/queue", "retrain-retrain-classifier-202611292000",
                         "retraining", datetime.fromtimestamp(NOW, timezone.utc))]
    assert world["sns"].messages[-1].endswith("submitted when the queue runs again (./platform budget resume ENV, or "
                                              "python -m ml_platform_constructs budget resume).")


def test_names_and_times_are_utc_whatever_the_machines_zone(world, monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        world["batch"].queues[world["queue"]]["state"] = "DISABLED"
        result = world["fire"](at=NOW)
        assert result["jobName"] == "retrain-classifier-202611292000"
        (entry,) = PendingJobs(world["ssm"]).of_queue(world["queue"])
        assert entry["recorded"].startswith("2026-11-29T20:00")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_tag_values_are_cut_at_256_and_never_empty():
    request = retrain.submission({"JOB_QUEUE": "q", "JOB_DEFINITION": "d"}, "job", "", "a" * 300, "")
    assert request["tags"] == {retrain.TRIGGER_TAG: "-", retrain.ALARM_TAG: "a" * 256, retrain.TIME_TAG: "-"}


def test_a_failed_submission_frees_the_flight_at_once_not_after_15_minutes(world):
    world["batch"].before_submit = lambda request: (_ for _ in ()).throw(RuntimeError("TooManyRequestsException"))
    with pytest.raises(RuntimeError, match="TooManyRequests"):
        world["fire"]("drift")
    world["batch"].before_submit = None
    assert world["fire"]("quality", at=NOW + 60)["submitted"]  # within the 15 minutes a dead claim would hold


def test_the_cooldown_message_says_when_the_episode_started(world):
    world["fire"]("drift")
    held = world["fire"]("drift", at=NOW + 2 * HOUR)
    assert held["skipped"] == "cooldown"
    assert "drift started one at 2026-11-29 20:00 UTC, within its cooldown of 24 h." in held["message"]
