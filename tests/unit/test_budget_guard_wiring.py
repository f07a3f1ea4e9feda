"""BudgetGuard's wiring where mutation testing found it unchecked: the stop-only notification goes to the stop topic
alone (no e-mails), and the failure queue takes TLS requests only (its policy, as SQS evaluates it)."""

import json

from aws_cdk import aws_kms as kms

from iam_policy import Request, statement_matches
from ml_platform_constructs import AlertTopic, BudgetGuard


def test_a_stop_line_apart_from_the_thresholds_notifies_the_stop_topic_only(synth_stack):
    def body(stack):
        key = kms.Key(stack, "Key")
        BudgetGuard(stack, "Guard", monthly_limit=1500, alerts=AlertTopic(stack, "Alerts", master_key=key).topic,
                    key=key, environment="dev", emails=["ops@example.com"], stop_at_percent=90)
    template = synth_stack(body)
    budget = next(iter(template.find_resources("AWS::Budgets::Budget").values()))["Properties"]
    stop_topic = next(k for k, r in template.find_resources("AWS::SNS::Topic").items() if k.startswith("GuardStopTopic"))
    (stop,) = [n for n in budget["NotificationsWithSubscribers"] if n["Notification"]["Threshold"] == 90]
    assert stop["Notification"]["NotificationType"] == "ACTUAL"
    assert stop["Subscribers"] == [{"SubscriptionType": "SNS", "Address": {"Ref": stop_topic}}]
    others = [n for n in budget["NotificationsWithSubscribers"] if n["Notification"]["Threshold"] != 90]
    assert all({"SubscriptionType": "EMAIL", "Address": "ops@example.com"} in n["Subscribers"] for n in others)


def test_the_failure_queue_refuses_requests_without_tls(synth_stack):
    def body(stack):
        key = kms.Key(stack, "Key")
        BudgetGuard(stack, "Guard", monthly_limit=1500, alerts=AlertTopic(stack, "Alerts", master_key=key).topic,
                    key=key, environment="dev")
    template = synth_stack(body)
    (policy,) = [r for k, r in template.find_resources("AWS::SQS::QueuePolicy").items() if "StopFailures" in k]
    denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]

    def refused(secure):
        request = Request("sqs:SendMessage", "${GuardStopFailures.Arn}", principal={"AWS": "*"},
                          context={"aws:SecureTransport": secure})
        return any(statement_matches({**s, "Resource": "*"}, request) for s in denies)
    assert refused("false") and not refused("true"), json.dumps(denies)
