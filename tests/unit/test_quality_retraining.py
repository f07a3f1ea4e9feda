"""The quality alarm's path into retraining, from dev's synthesized Serving stack: its ALARM event matches the quality
trigger's rule, the rule's input reaches the retraining function, and that starts the same single-flight retraining
as drift, tagged with its trigger and under its own cooldown (runtime/handlers/retrain.py with DynamoDB on moto, Batch faked)."""

import json
import re
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from batch_fake import FakeBatch
from ml_platform_constructs.runtime.handlers import retrain

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def serving(templates):
    return templates["dev/Serving"].to_json()["Resources"]


def logical_id(resources, resource_type, **properties):
    [found] = [k for k, v in resources.items() if v["Type"] == resource_type
               and all(v["Properties"].get(p) == value for p, value in properties.items())]
    return found


def alarm_event(alarm_name, event_id="ev-1"):
    """A CloudWatch alarm state change as EventBridge delivers it."""
    return {"id": event_id, "source": "aws.cloudwatch", "detail-type": "CloudWatch Alarm State Change",
            "time": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "detail": {"alarmName": alarm_name, "state": {"value": "ALARM", "reason": "Threshold Crossed: 5.6 >= 1.5"}}}


def rule_for(resources, alarm_id):
    return next(v["Properties"] for v in resources.values() if v["Type"] == "AWS::Events::Rule"
                and v["Properties"].get("EventPattern", {}).get("detail", {}).get("alarmName") == [{"Ref": alarm_id}])


def render(transformer, event):
    """EventBridge's input transformer: each <name> of the template replaced by the JSON of its path's value."""
    values = {}
    for name, path in transformer["InputPathsMap"].items():
        value = event
        for part in path.removeprefix("$.").split("."):
            value = value[part]
        values[name] = value
    return json.loads(re.sub(r"<([\w-]+)>", lambda m: json.dumps(values[m.group(1)]), transformer["InputTemplate"]))


def test_the_quality_alarm_has_a_trigger_of_its_own_on_the_drift_retraining(serving):
    quality_alarm = logical_id(serving, "AWS::CloudWatch::Alarm", MetricName="SignificantShortfall")
    rule = rule_for(serving, quality_alarm)
    assert rule["EventPattern"]["detail"]["state"] == {"value": ["ALARM"]}
    [target] = rule["Targets"]
    function = target["Arn"]["Fn::GetAtt"][0]
    assert serving[function]["Properties"]["Handler"] == "retrain.handler"
    drift_rule = rule_for(serving, logical_id(serving, "AWS::CloudWatch::CompositeAlarm"))
    assert drift_rule["Targets"][0]["Arn"]["Fn::GetAtt"][0] == function  # one retraining, two triggers
    triggers = json.loads(serving[function]["Properties"]["Environment"]["Variables"]["TRIGGERS"])
    assert triggers == {"drift": 24 * 3600, "quality": 24 * 3600}  # each with its own cooldown (config)


@pytest.fixture
def retraining(serving, monkeypatch):
    """The retraining function's environment from the template, with its claims table on moto and Batch faked."""
    quality_alarm = logical_id(serving, "AWS::CloudWatch::Alarm", MetricName="SignificantShortfall")
    [target] = rule_for(serving, quality_alarm)["Targets"]
    variables = serving[target["Arn"]["Fn::GetAtt"][0]]["Properties"]["Environment"]["Variables"]
    batch = FakeBatch()
    queue = batch.add_queue("dev-training", tags={"ml-platform:queue": "training"})
    batch.register("dev-retrain-classifier", tags={"ml-platform:queue": "training"})
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        dynamodb = session.client("dynamodb")
        dynamodb.create_table(TableName="claims", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                              BillingMode="PAY_PER_REQUEST")
        for key, value in {"JOB_QUEUE": queue, "JOB_DEFINITION": "dev-retrain-classifier",
                           "JOB_NAME_PREFIX": variables["JOB_NAME_PREFIX"], "TOPIC_ARN": "arn:aws:sns:us-east-1:1:alerts",
                           "CLAIMS_TABLE": "claims", "TRIGGERS": variables["TRIGGERS"], "RECORD_KEY_ID": "key"}.items():
            monkeypatch.setenv(key, value)

        class Sns:
            messages = []

            def publish(self, **kwargs):
                self.messages.append(kwargs["Message"])

        def deliver(event, at):
            return retrain.handler(render(target["InputTransformer"], event), None, batch=batch, sns=Sns(),
                                   dynamodb=dynamodb, ssm=session.client("ssm"), now=at)
        yield batch, deliver


def test_a_quality_alarm_starts_one_retraining_tagged_quality(retraining):
    batch, deliver = retraining
    result = deliver(alarm_event("dev-Serving-classifierQualityAlarm-ABC"), NOW.timestamp())
    assert result["submitted"] and result["trigger"] == "quality"
    [request] = batch.submitted()
    assert request["tags"]["ml-platform:retrain-trigger"] == "quality"
    assert request["tags"]["ml-platform:retrain-alarm"] == "dev-Serving-classifierQualityAlarm-ABC"
    # The same event delivered again (EventBridge delivers at least once) starts nothing more.
    deliver(alarm_event("dev-Serving-classifierQualityAlarm-ABC"), NOW.timestamp() + 30)
    assert len(batch.submitted()) == 1


def test_a_second_quality_episode_within_its_cooldown_starts_nothing(retraining):
    batch, deliver = retraining
    first = deliver(alarm_event("q", event_id="ev-1"), NOW.timestamp())
    batch.finish(first["jobId"])  # the flight is free again
    again = deliver(alarm_event("q", event_id="ev-2"), NOW.timestamp() + 6 * 3600)
    assert again["skipped"] == "cooldown" and len(batch.submitted()) == 1
    later = deliver(alarm_event("q", event_id="ev-3"), NOW.timestamp() + 25 * 3600)
    assert later["submitted"] and len(batch.submitted()) == 2
