"""BudgetGuard wiring: budget notifications, the stop topic and function, retries, failures and their alarms."""

import json

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match

from ml_platform_constructs import AlertTopic, BudgetGuard, ValidationError


@pytest.fixture(scope="module")
def template(synth_stack):
    def body(stack):
        key = kms.Key(stack, "Key")
        alerts = AlertTopic(stack, "Alerts", master_key=key)
        BudgetGuard(stack, "Guard", monthly_limit=1500, alerts=alerts.topic, key=key, environment="dev",
                    emails=["ops@example.com"])
    return synth_stack(body)


def notifications(template):
    budget = next(iter(template.find_resources("AWS::Budgets::Budget").values()))["Properties"]
    return budget, [(n["Notification"]["NotificationType"], n["Notification"]["Threshold"],
                     json.dumps(n["Subscribers"])) for n in budget["NotificationsWithSubscribers"]]


def test_monthly_cost_budget_over_the_whole_account_named_by_cloudformation(template):
    budget, _ = notifications(template)
    assert budget["Budget"] == {"BudgetType": "COST", "TimeUnit": "MONTHLY",  # no BudgetName: replaceable
                                "BudgetLimit": {"Amount": 1500, "Unit": "USD"}}


def test_changing_an_email_is_deployable(template, synth_stack):
    """Notifications and subscribers are 'Update requires: Replacement'; CloudFormation can replace the budget
    only when it names it, and the guard must follow the new name (its Ref)."""
    def body(stack):
        key = kms.Key(stack, "Key")
        alerts = AlertTopic(stack, "Alerts", master_key=key)
        BudgetGuard(stack, "Guard", monthly_limit=1500, alerts=alerts.topic, key=key, environment="dev",
                    emails=["oncall@example.com"])
    changed = synth_stack(body)
    (before_id, before), = template.find_resources("AWS::Budgets::Budget").items()
    (after_id, after), = changed.find_resources("AWS::Budgets::Budget").items()
    assert before_id == after_id and before != after  # the same resource, replaced
    assert "BudgetName" not in after["Properties"]["Budget"]
    function = next(iter(changed.find_resources("AWS::Lambda::Function").values()))["Properties"]
    assert function["Environment"]["Variables"]["BUDGET_NAME"] == {"Ref": after_id}


def test_a_fixed_budget_name_is_kept_but_warned_about(synth_stack):
    from aws_cdk.assertions import Annotations

    stacks = []

    def body(stack):
        stacks.append(stack)
        key = kms.Key(stack, "Key")
        BudgetGuard(stack, "Guard", budget_name="team-a", monthly_limit=10, alerts=sns.Topic(stack, "T"), key=key,
                    environment="dev")
    template = synth_stack(body)
    template.has_resource_properties("AWS::Budgets::Budget", {"Budget": Match.object_like({"BudgetName": "team-a"})})
    Annotations.from_stack(stacks[0]).has_warning("*", Match.string_like_regexp("fixed budget_name makes changes"))


def test_the_budget_is_created_after_the_topics_and_policies_it_publishes_to(template):
    (_, budget), = template.find_resources("AWS::Budgets::Budget").items()
    depends = set(budget["DependsOn"])
    policies = template.find_resources("AWS::SNS::TopicPolicy")
    assert {k for k in policies if k.startswith(("GuardStopTopic", "Alerts"))} <= depends
    assert {k for k in template.find_resources("AWS::SNS::Topic")} <= depends


def test_the_audit_log_and_warning_state_are_encrypted_and_kept(template):
    template.has_resource_properties("AWS::Logs::LogGroup", {"KmsKeyId": {"Fn::GetAtt": [
        Match.string_like_regexp("^Key"), "Arn"]}})
    template.has_resource_properties("AWS::SSM::Parameter", {"Type": "String", "Value": "never"})


def test_actual_and_forecasted_notifications_at_50_80_100(template):
    _, found = notifications(template)
    assert sorted((kind, threshold) for kind, threshold, _ in found) == sorted(
        (kind, p) for kind in ("ACTUAL", "FORECASTED") for p in (50, 80, 100))
    assert all("ops@example.com" in subscribers for _, _, subscribers in found)


def test_actual_spend_at_80_percent_goes_to_the_stop_topic_not_the_alerts(template):
    _, found = notifications(template)
    stop = next(s for kind, threshold, s in found if (kind, threshold) == ("ACTUAL", 80))
    assert "GuardStopTopic" in stop and "Alerts" not in stop
    forecast = next(s for kind, threshold, s in found if (kind, threshold) == ("FORECASTED", 80))
    assert "Alerts" in forecast and "GuardStopTopic" not in forecast


def test_budgets_may_publish_to_both_topics(template):
    for prefix in ("Alerts", "GuardStopTopic"):
        policy = next(v for k, v in template.find_resources("AWS::SNS::TopicPolicy").items() if k.startswith(prefix))
        statement = next(s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "AllowBudgetsToPublish")
        assert statement["Principal"] == {"Service": "budgets.amazonaws.com"}
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}


def test_stop_function_is_subscribed_retried_and_sends_failures_to_a_queue(template):
    template.has_resource_properties("AWS::SNS::Subscription", {
        "Protocol": "lambda", "TopicArn": {"Ref": Match.string_like_regexp("^GuardStopTopic")}})
    template.has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "MaximumRetryAttempts": 2, "DestinationConfig": {"OnFailure": {"Destination": {
            "Fn::GetAtt": [Match.string_like_regexp("^GuardStopFailures"), "Arn"]}}}})
    template.has_resource_properties("AWS::SQS::Queue", {"KmsMasterKeyId": Match.any_value()})


def test_spend_check_runs_every_15_minutes(template):
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(15 minutes)"})


def test_stop_function_settings(template):
    function = next(iter(template.find_resources("AWS::Lambda::Function").values()))["Properties"]
    assert function["Handler"] == "budget_guard.handler" and function["Runtime"] == "python3.14"
    assert function["Environment"]["Variables"]["ENVIRONMENT"] == "dev"
    assert function["Environment"]["Variables"]["STOP_AT_PERCENT"] == "80"
    assert function["Environment"]["Variables"]["PRICE_REGION"] == "us-east-1"  # the stack's Region
    assert function["Environment"]["Variables"]["BUDGET_AGE_HOURS"] == "24"


def test_a_region_the_price_table_lacks_is_warned_about(synth_stack):
    from aws_cdk.assertions import Annotations

    stacks = []

    def body(stack):
        stacks.append(stack)
        BudgetGuard(stack, "Guard", monthly_limit=10, alerts=sns.Topic(stack, "T"), key=kms.Key(stack, "Key"),
                    environment="dev")
    synth_stack(body, region="mx-central-1")
    Annotations.from_stack(stacks[0]).has_warning("*", Match.string_like_regexp("price table has no mx-central-1 rates"))


def test_stop_function_may_change_only_this_environments_fleets(template):
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("GuardStopFunction"))
    change = next(s for s in policy["Properties"]["PolicyDocument"]["Statement"]
                  if s.get("Sid") == "StopAndResumeOnlyThisEnvironmentsFleets")
    assert change["Condition"] == {"StringEquals": {"autoscaling:ResourceTag/ml-platform:budget-scope": "account"},
                                   "Null": {"autoscaling:ResourceTag/ml-platform:fleet": "false"}}
    assert "autoscaling:SuspendProcesses" in change["Action"]


STOPPING_ACTIONS = {"autoscaling:SuspendProcesses", "autoscaling:UpdateAutoScalingGroup", "batch:UpdateJobQueue",
                    "batch:UpdateComputeEnvironment", "batch:SubmitJob", "ec2:TerminateInstances"}


def guard_statements(template):
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("GuardStopFunction"))
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_every_statement_that_can_stop_or_start_something_is_bound_to_the_guards_scope(template):
    scoped = [s for s in guard_statements(template) if s["Effect"] == "Allow"
              and STOPPING_ACTIONS & set([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
    assert {"StopAndResumeOnlyThisEnvironmentsFleets", "StopAndResumeOnlyGovernedQueues",
            "EndOnlyGovernedQueueInstances"} == {s["Sid"] for s in scoped}
    for statement in scoped:
        condition = statement["Condition"]["StringEquals"]
        assert condition in ({"autoscaling:ResourceTag/ml-platform:budget-scope": "account"},
                             {"aws:ResourceTag/ml-platform:budget-scope": "account"}), statement["Sid"]
    instances = next(s for s in scoped if s["Sid"] == "EndOnlyGovernedQueueInstances")
    assert instances["Action"] == "ec2:TerminateInstances"  # and only instances Batch launched for a queue:
    assert instances["Condition"]["Null"] == {"aws:ResourceTag/ml-platform:queue": "false"}


def test_the_guard_may_never_submit_the_promotion_gates_evaluation_definition(template):
    """Its role writes the gate's evidence and its only submitter is an EvaluationSubmitter (issue 41): a record the
    guard resubmits could carry any command. Batch evaluates the definition's tags on a submission by revision."""
    [deny] = [s for s in guard_statements(template) if s["Effect"] == "Deny"]
    assert deny["Sid"] == "NeverTheEvaluationDefinition"  # nor untag it, which would lift the denial
    assert deny["Action"] == ["batch:SubmitJob", "batch:TagResource", "batch:UntagResource"]
    assert deny["Resource"] == "arn:aws:batch:us-east-1:123456789012:job-definition/*"
    assert deny["Condition"] == {"StringEquals": {"aws:ResourceTag/ml-platform:job-definition": "evaluation"}}


def test_pending_job_records_are_read_only_through_parameter_store_for_their_path(template):
    statements = {s.get("Sid"): s for s in guard_statements(template)}
    read = statements["ReadPendingJobRecords"]
    assert read["Action"] == "kms:Decrypt" and read["Resource"] == "*"
    assert read["Condition"]["StringEquals"]["kms:ViaService"] == {"Fn::Join": ["", [
        "ssm.us-east-1.", {"Ref": "AWS::URLSuffix"}]]}
    assert read["Condition"]["StringLike"] == {
        "kms:EncryptionContext:PARAMETER_ARN": "arn:aws:ssm:us-east-1:123456789012:parameter/ml-platform/pending-jobs*"}
    assert statements["RecordPendingJobs"]["Resource"] == \
        "arn:aws:ssm:us-east-1:123456789012:parameter/ml-platform/pending-jobs*"


def test_records_are_encrypted_with_the_guards_key_and_stopped_instances_get_10_minutes(template):
    variables = next(iter(template.find_resources("AWS::Lambda::Function").values()))["Properties"]["Environment"]["Variables"]
    key = next(iter(template.find_resources("AWS::KMS::Key")))
    assert variables["RECORD_KEY_ID"] == {"Fn::GetAtt": [key, "Arn"]}
    assert variables["STOPPED_INSTANCE_GRACE_MINUTES"] == "10"


def test_the_stop_functions_code_imports_as_lambda_packages_it(tmp_path):
    import shutil
    import subprocess
    import sys
    from ml_platform_constructs.foundation.runtime_function import runtime_source
    from ml_platform_constructs.governance.budget_guard import STOP_FUNCTION_FILES

    for name in STOP_FUNCTION_FILES:
        shutil.copy(runtime_source(name), tmp_path / name)
    subprocess.run([sys.executable, "-c", "import budget_guard; budget_guard.load_table(); budget_guard.PendingJobs"],
                   cwd=tmp_path, check=True)


def test_audit_log_is_kept_a_year(template):
    template.has_resource("AWS::Logs::LogGroup", {"Properties": {"RetentionInDays": 365}, "DeletionPolicy": "Retain"})


def test_errors_and_failed_stops_alarm_the_alert_topic(template):
    template.has_resource_properties("AWS::CloudWatch::Alarm", {"MetricName": "Errors", "Namespace": "AWS/Lambda",
                                                               "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})
    template.has_resource_properties("AWS::CloudWatch::Alarm", {"MetricName": "ApproximateNumberOfMessagesVisible",
                                                               "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})


def test_notify_only_creates_no_stop(synth_stack):
    def body(stack):
        key = kms.Key(stack, "Key")
        BudgetGuard(stack, "Guard", monthly_limit=10, alerts=sns.Topic(stack, "T"), key=key,
                    environment="dev", stop_at_percent=None)
    template = synth_stack(body)
    template.resource_count_is("AWS::Lambda::Function", 0)
    template.resource_count_is("AWS::SNS::Topic", 1)


@pytest.mark.parametrize("overrides,message", [
    ({"monthly_limit": 0}, "monthly_limit=0 is invalid: a positive amount in USD"),
    ({"budget_name": "a:b"}, "budget_name='a:b' is invalid"),
    ({"emails": [f"u{i}@example.com" for i in range(11)]}, "at most 10 e-mail subscribers"),
    ({"stop_at_percent": 150}, "stop_at_percent=150 is invalid"),
    ({"notify_at_percent": (50, 50)}, "each threshold once"),
    ({"notify_at_percent": (10, 20, 30, 40, 50, 60)}, "at most 10 budget notifications"),
    ({"spend_check_every": Duration.seconds(30)}, "spend_check_every='30 seconds' is invalid"),
    ({"stopped_instance_grace": Duration.minutes(2)}, "stopped_instance_grace='2 minutes' is invalid: 5 minutes to 2 hours"),
    ({"stopped_instance_grace": Duration.hours(3)}, "stopped_instance_grace='3 hours' is invalid: 5 minutes to 2 hours"),
])
def test_invalid_props(overrides, message):
    stack = Stack(App(), "S")
    props = {"monthly_limit": 10, "alerts": sns.Topic(stack, "T"), "key": kms.Key(stack, "K"),
             "environment": "dev", **overrides}
    with pytest.raises(ValidationError) as error:
        BudgetGuard(stack, "G", **props)
    assert message in str(error.value) and "Fix: " in str(error.value)
