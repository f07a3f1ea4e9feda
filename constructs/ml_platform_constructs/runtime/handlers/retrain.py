"""Starts a model's retraining job on its training queue when one of its triggers (an alarm) changes to ALARM:
exactly one job per episode, one at a time, and tells the alert topic what it did (standard library and boto3).

Two claims, each an atomic DynamoDB conditional write made before anything is submitted, so that events that
arrive together or twice (EventBridge delivers at least once and retries) start one job:

- ``cooldown#<trigger>``: each trigger (drift, quality, ...) starts at most one retraining per its cooldown;
- ``flight``: one retraining job at a time, whatever triggered it; a new one may start once the last one is no
  longer waiting or running.

A claim that expires takes a compare-and-set on time and owner in one write: a DynamoDB condition expression does
that (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html);
S3's conditional PutObject compares only existence or an ETag, so an expired claim would take a read and a
second write. A claim names the event that made it, so the retry of that event goes on where it stopped, and a
redelivery of an event whose job is submitted (or kept pending) does nothing again; a failed submission gives both
claims back before the function fails (and is retried). While a budget stop has disabled the queue, the submission
is kept as a pending record (``pending_jobs``) that the budget guard's resume submits.

Each event tells the alert topic once: ``alert#<event id>`` is claimed before the message is published (given back
if the publish fails, so the retry publishes it), and expires (the table's time to live) after ALERT_MARK_SECONDS.

Environment: JOB_QUEUE (ARN), JOB_DEFINITION (name: submitted as its latest active revision), JOB_NAME_PREFIX,
TOPIC_ARN, CLAIMS_TABLE, TRIGGERS (JSON: trigger name -> cooldown seconds), RECORD_KEY_ID, CHECKPOINT_ROOT (optional).
Event (the rule's input): {"trigger", "alarm", "reason", "time", "eventId"}.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timezone
from typing import Any, Optional

try:
    from .pending_jobs import PendingJobs, active_job, parameter_name
except ImportError:  # in Lambda the module sits at the top of the package
    from pending_jobs import PendingJobs, active_job, parameter_name  # type: ignore[no-redef]

# A trigger's cooldown, in hours: at least one (an alarm that flaps), at most 30 days (a retraining that did not
# cure the drift within a month needs a person, not another job).
COOLDOWN_HOURS = (1, 30 * 24)
# A claim whose function died between claiming and submitting (timeout, crash) no longer holds the flight after this.
STALE_CLAIM_SECONDS = 900
# An event's alert mark outlives its redeliveries: EventBridge retries an event for up to 24 hours (the rule
# target's default maximum event age: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html).
ALERT_MARK_SECONDS = 2 * 24 * 3600
EXPIRES_ATTRIBUTE = "expires"  # the claims table's time-to-live attribute (epoch seconds)
TRIGGER_TAG = "ml-platform:retrain-trigger"  # on the job: what started it (drift, quality, ...)
ALARM_TAG = "ml-platform:retrain-alarm"
TIME_TAG = "ml-platform:retrain-time"
# Batch tag values: letters, digits, spaces and + - = . _ : / @, up to 256 characters:
# https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html
_TAG_VALUE = re.compile(r"[^\w\s+\-=.:/@]")


class ConditionFailed(Exception):
    def __init__(self, item: Optional[dict]) -> None:
        super().__init__("held")
        self.item = item


def _failed_condition(error: Exception) -> bool:
    return getattr(error, "response", {}).get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class Claims:
    """The two claims in one DynamoDB table (partition key ``pk``), as plain dicts of strings and numbers."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self.dynamodb, self.table = dynamodb, table

    @staticmethod
    def _encode(item: dict) -> dict:
        return {k: {"N": str(v)} if isinstance(v, (int, float)) else {"S": str(v)} for k, v in item.items()}

    @staticmethod
    def _decode(item: dict) -> dict:
        return {k: float(v["N"]) if "N" in v else v["S"] for k, v in item.items()}

    def put(self, item: dict, condition: str, values: dict) -> None:
        """Writes ``item`` if ``condition`` holds; otherwise raises ConditionFailed with the item that holds it."""
        try:
            self.dynamodb.put_item(
                TableName=self.table, Item=self._encode(item), ConditionExpression=condition,
                ExpressionAttributeNames={f"#{name}": name for name in re.findall(r"#(\w+)", condition)},
                **({"ExpressionAttributeValues": self._encode(values)} if values else {}),
                ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except Exception as error:
            if not _failed_condition(error):
                raise
            old = getattr(error, "response", {}).get("Item")
            raise ConditionFailed(self._decode(old) if old else None) from None

    def update(self, key: str, event_id: str, **values: Any) -> None:
        names = {f"#{k}": k for k in values}
        self.dynamodb.update_item(
            TableName=self.table, Key={"pk": {"S": key}}, ConditionExpression="#event = :event",
            UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in values),
            ExpressionAttributeNames={**names, "#event": "event"},
            ExpressionAttributeValues=self._encode({**{f":{k}": v for k, v in values.items()}, ":event": event_id}))

    def release(self, key: str, event_id: str) -> None:
        try:
            self.dynamodb.delete_item(TableName=self.table, Key={"pk": {"S": key}}, ConditionExpression="#event = :event",
                                      ExpressionAttributeNames={"#event": "event"},
                                      ExpressionAttributeValues={":event": {"S": event_id}})
        except Exception as error:
            if not _failed_condition(error):  # another event holds it now: not ours to give back
                raise


def queue_enabled(batch: Any, job_queue: str) -> bool:
    queues = batch.describe_job_queues(jobQueues=[job_queue])["jobQueues"]
    return bool(queues) and queues[0]["state"] == "ENABLED"


def _tag_value(value: str) -> str:
    return _TAG_VALUE.sub("_", value)[:256] or "-"


def submission(env: dict, job_name: str, trigger: str, alarm: str, at: str) -> dict:
    """SubmitJob's arguments: the job under its own name and checkpoint prefix, tagged (and told in its environment)
    with what triggered it."""
    environment = [{"name": "ML_PLATFORM_JOB_NAME", "value": job_name},
                   {"name": "ML_PLATFORM_RETRAIN_TRIGGER", "value": trigger},
                   {"name": "ML_PLATFORM_RETRAIN_ALARM", "value": alarm}]
    if env.get("CHECKPOINT_ROOT"):
        environment.append({"name": "ML_PLATFORM_CHECKPOINT_URI", "value": f"{env['CHECKPOINT_ROOT']}{job_name}/"})
    return {"jobName": job_name, "jobQueue": env["JOB_QUEUE"], "jobDefinition": env["JOB_DEFINITION"],
            "containerOverrides": {"environment": environment}, "propagateTags": True,
            "tags": {TRIGGER_TAG: _tag_value(trigger), ALARM_TAG: _tag_value(alarm), TIME_TAG: _tag_value(at)}}


def handler(event: dict, context: object, batch: Any = None, sns: Any = None, dynamodb: Any = None, ssm: Any = None,
            now: Optional[float] = None) -> dict:
    import boto3

    batch = batch or boto3.client("batch")
    sns = sns or boto3.client("sns")
    claims = Claims(dynamodb or boto3.client("dynamodb"), os.environ["CLAIMS_TABLE"])
    pending = PendingJobs(ssm or boto3.client("ssm"), os.environ.get("RECORD_KEY_ID"))
    now = time.time() if now is None else now
    result = retrain(event, dict(os.environ), batch, claims, pending, now)
    alert_once(claims, sns, result, f"Retraining: {result['trigger']}", now)
    print(json.dumps(result))
    return result


def alert_once(claims: Claims, sns: Any, result: dict, subject: str, now: float) -> None:
    """Publishes ``result["message"]`` once per event (``result["event"]``): ``alert#<event>`` is claimed first
    (a redelivery finds it: ``result["alerted"] = "before"``), given back if the publish fails (the retry publishes)."""
    mark = f"alert#{result['event']}"
    try:
        claims.put({"pk": mark, "event": result["event"], "at": now, EXPIRES_ATTRIBUTE: int(now) + ALERT_MARK_SECONDS},
                   "attribute_not_exists(#pk)", {})
    except ConditionFailed:  # a redelivery: this event's alert went out already
        result["alerted"] = "before"
        return
    try:
        sns.publish(TopicArn=os.environ["TOPIC_ARN"], Subject=subject[:100], Message=result["message"])
    except Exception:
        claims.release(mark, result["event"])  # the event's retry publishes it
        raise


def retrain(event: dict, env: dict, batch: Any, claims: Claims, pending: PendingJobs, now: float) -> dict:
    triggers = json.loads(env["TRIGGERS"])
    trigger = event.get("trigger", "")
    if trigger not in triggers:
        raise ValueError(f"unknown trigger {trigger!r}: this retraining has {sorted(triggers)}")
    alarm = event.get("alarm") or f"the {trigger} alarm"
    # EventBridge keeps an event's id through its retries and Lambda's: the claims' owner.
    event_id = event.get("eventId") or f"{alarm}@{event.get('time', '')}"
    queue = env["JOB_QUEUE"]
    base = {"trigger": trigger, "alarm": alarm, "event": event_id, "submitted": False}

    cooldown = int(triggers[trigger])
    holder = None
    try:
        claims.put({"pk": f"cooldown#{trigger}", "event": event_id, "until": now + cooldown, "at": now},
                   "attribute_not_exists(#pk) OR #until <= :now", {":now": now})
    except ConditionFailed as held:
        if (held.item or {}).get("event") != event_id:  # its own claim: a redelivery, whose cooldown stays as it was
            holder = held.item or {}
    if holder is not None:
        since = datetime.fromtimestamp(holder.get("at", now), timezone.utc)
        return {**base, "skipped": "cooldown",
                "message": f"{alarm} is in ALARM; retraining not started: {trigger} started one at {since:%Y-%m-%d %H:%M} "
                           f"UTC, within its cooldown of {cooldown // 3600} h."}

    try:
        flight = _claim_flight(claims, batch, pending, queue, env, event_id, trigger, now)
    except Exception:
        claims.release(f"cooldown#{trigger}", event_id)
        raise
    if flight.get("event") != event_id:
        return {**base, "skipped": "in flight", "jobName": flight["job_name"],
                "message": f"{alarm} is in ALARM; retraining not started: {flight['job_name']} (started by "
                           f"{flight.get('trigger', '?')}) is still {flight.get('state', 'waiting or running')}."}
    name = flight["job_name"]
    if flight.get("state") == "submitted":  # a redelivery of this event: its job was submitted (may be over by now)
        return {**_submitted(base, flight["job_id"], name, queue, trigger), "redelivered": True}
    if flight.get("state") == "pending":  # a redelivery: its submission waits in the record (or resume took it)
        return {**_pending(base, parameter_name(queue, _pending_leaf(name)), name), "redelivered": True}
    request = submission(env, name, trigger, alarm, event.get("time") or
                         f"{datetime.fromtimestamp(now, timezone.utc):%Y-%m-%dT%H:%M:%SZ}")
    try:
        already = active_job(batch, queue, name)  # this event's earlier attempt got as far as submitting
        if already is not None:
            job_id = already["jobId"]
        elif not queue_enabled(batch, queue):
            return _keep_pending(claims, pending, request, event_id, base, now)
        else:
            try:
                job_id = batch.submit_job(**request)["jobId"]
            except Exception:
                if queue_enabled(batch, queue):
                    raise
                return _keep_pending(claims, pending, request, event_id, base, now)  # stopped meanwhile
        claims.update("flight", event_id, state="submitted", job_id=job_id)
    except Exception:  # give the claims back, so that the retry of this event (or the next one) can start it
        claims.release("flight", event_id)
        claims.release(f"cooldown#{trigger}", event_id)
        raise
    return _submitted(base, job_id, name, queue, trigger)


def _submitted(base: dict, job_id: str, name: str, queue: str, trigger: str) -> dict:
    return {**base, "submitted": True, "jobId": job_id, "jobName": name,
            "message": f"{base['alarm']} is in ALARM: retraining job {name} ({job_id}) submitted to {queue}, tagged "
                       f"{TRIGGER_TAG}={trigger}. Follow it with ./platform job list ENV (or aws batch describe-jobs "
                       f"--jobs {job_id})."}


def _pending_leaf(job_name: str) -> str:
    return f"retrain-{job_name}"


def _keep_pending(claims: Claims, pending: PendingJobs, request: dict, event_id: str, base: dict, now: float) -> dict:
    parameter = pending.record(request, leaf=_pending_leaf(request["jobName"]), source="retraining",
                               now=datetime.fromtimestamp(now, timezone.utc))
    claims.update("flight", event_id, state="pending")
    return _pending(base, parameter, request["jobName"])


def _pending(base: dict, parameter: str, name: str) -> dict:
    return {**base, "pending": parameter, "jobName": name,
            "message": f"{base['alarm']} is in ALARM, but the training queue is disabled (a budget stop): retraining "
                       f"job {name} is kept pending in {parameter} and is submitted when the queue runs again "
                       "(./platform budget resume ENV, or python -m ml_platform_constructs budget resume)."}


def _claim_flight(claims: Claims, batch: Any, pending: PendingJobs, queue: str, env: dict, event_id: str,
                  trigger: str, now: float) -> dict:
    """This event's flight claim, or the claim of the retraining still waiting or running."""
    mine = {"pk": "flight", "event": event_id, "trigger": trigger, "state": "claimed", "at": now,
            "job_name": f"{env['JOB_NAME_PREFIX']}-{datetime.fromtimestamp(now, timezone.utc):%Y%m%d%H%M}"}
    condition, values = "attribute_not_exists(#pk)", {}
    for _ in range(3):
        try:
            claims.put(mine, condition, values)
            return mine
        except ConditionFailed as held:
            old = held.item
            if old is None:  # gone between the write and its answer: try again
                condition, values = "attribute_not_exists(#pk)", {}
                continue
            if old["event"] == event_id or _in_flight(old, batch, pending, queue, now):
                return old  # this event's own claim (a retry), or the retraining still waiting or running
            # The last retraining is over: take the claim from it, and only from it.
            condition, values = "#event = :old", {":old": old["event"]}
            if mine["job_name"] == old["job_name"]:
                mine["job_name"] += "-2"
    raise RuntimeError("could not claim the retraining flight after 3 tries (other events keep taking it)")


def _in_flight(claim: dict, batch: Any, pending: PendingJobs, queue: str, now: float) -> bool:
    if active_job(batch, queue, claim["job_name"]) is not None:
        return True
    if claim.get("state") == "pending":  # waiting for the queue; the guard's resume submits and deletes the record
        # Its own record only, and undecrypted: the queue's other records (the jobs a budget stop ended) are
        # encrypted with the guard's key, which this function may not use.
        return pending.exists(queue, _pending_leaf(claim["job_name"]))
    return claim.get("state") == "claimed" and now - float(claim.get("at", 0)) < STALE_CLAIM_SECONDS
