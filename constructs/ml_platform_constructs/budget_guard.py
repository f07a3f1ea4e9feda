"""BudgetGuard: an environment's monthly budget, its notifications, and a stop that halts GPU spend by itself."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from aws_cdk import Acknowledgment, Annotations, CfnResource, Duration, RemovalPolicy, Stack, TagManager, Validations
from aws_cdk import aws_budgets as budgets
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
import jsii
from constructs import Construct, IValidation

from .alert_topic import allow_budgets_to_publish
from .errors import ValidationError
from .governance import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, validate_budget_scope
from .nag_support import nag_arn, stack_arn
from .runtime_function import runtime_function
from .spot_gpu_fleet import AUTO_SCALING_GROUPS_ARN

# One SNS and up to 10 e-mail subscribers per notification, up to 10 notifications per budget:
# https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_NotificationWithSubscribers.html
MAX_EMAIL_SUBSCRIBERS = 10
MAX_NOTIFICATIONS = 10


class BudgetGuard(Construct):
    """A monthly cost budget with notifications, and a guard that stops the environment's GPU fleets.

    - The budget (``budget_name``, ``monthly_limit`` USD) notifies the alert topic and ``emails`` when actual
      or forecasted spend crosses each of ``notify_at_percent`` (50, 80, 100). It covers the whole account
      unless ``cost_filters`` narrow it (tag filters count only once the tags are activated for cost
      allocation: see README).
    - At ``stop_at_percent`` (80) of actual spend, Budgets notifies a stop topic of its own; a Lambda
      (retries 2, failures to an encrypted queue, alarms on its errors and on that queue) stops every fleet
      governed by this guard's ``budget_scope`` (see ``ml_platform_constructs.governance``): Launch suspended, desired capacity 0. Every ``spend_check_every``
      (15 minutes) the same function projects the month's spend from the budget's actual spend and the running
      fleets' hourly cost (price table in the library, Spot at an assumed discount) and stops when the
      projection crosses the same threshold. ``python -m ml_platform_constructs budget resume --function
      <stop_function name>`` (the platform app: ``./platform budget resume ENV``) resumes.

    Attributes: ``budget`` (main child ``Resource``), ``budget_name``, ``budget_scope``, ``stop_topic``,
    ``stop_function`` (None without a stop).

    :param budget_name: unique in the account. :param monthly_limit: USD.
    :param alerts: the alert topic; it must allow Budgets to publish (``AlertTopic`` does).
    :param key: encrypts the stop topic and the failure queue (must allow Budgets, like ``PlatformKey``).
    :param environment: names the environment in descriptions and messages; the SageMaker endpoints tagged
        ``environment=<environment>`` are listed as what the stop cannot stop.
    :param budget_scope: governs every resource tagged ``ml-platform:budget-scope=<budget_scope>``, which each
        governed construct sets on itself (``SpotGpuFleet(budget_scope=...)``). Default: ``"account"``, the
        fleets' default: every fleet of this account and Region that chose no other scope.
    :param emails: budget notification e-mails (at most 10). Default: none.
    :param notify_at_percent: Default: (50, 80, 100).
    :param stop_at_percent: Default: 80. None: notify only, no stop and no spend check.
    :param spend_check_every: Default: 15 minutes.
    :param cost_filters: AWS::Budgets CostFilters, e.g. {"TagKeyValue": ["user:environment$dev"]}. Default: the account.
    :param removal_policy: for the audit log group. Default: RETAIN.
    """

    def __init__(self, scope: Construct, id: str, *, budget_name: str, monthly_limit: float, alerts: sns.ITopic,
                 key: kms.IKey, environment: str, budget_scope: str = ACCOUNT_SCOPE, emails: Sequence[str] = (),
                 notify_at_percent: Sequence[float] = (50, 80, 100), stop_at_percent: Optional[float] = 80,
                 spend_check_every: Duration = Duration.minutes(15),
                 cost_filters: Optional[dict[str, Sequence[str]]] = None,
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN) -> None:
        super().__init__(scope, id)
        self._validate(budget_name, monthly_limit, emails, notify_at_percent, stop_at_percent, spend_check_every)
        validate_budget_scope("BudgetGuard", budget_scope)
        self.budget_name = budget_name
        self.budget_scope = budget_scope
        self._removal_policy = removal_policy
        stack = Stack.of(self)

        self.stop_function: Optional[lambda_.Function] = None
        if stop_at_percent is not None:
            # Its own topic: forecasts and e-mails are not stop orders.
            self.stop_topic = sns.Topic(self, "StopTopic", master_key=key, enforce_ssl=True,
                                        display_name=f"{budget_name}: stop GPU spend")
            allow_budgets_to_publish(self.stop_topic)
            self.stop_function = self._stop_function(alerts, key, environment, monthly_limit, stop_at_percent,
                                                     spend_check_every)
            self.node.add_validation(_GovernsSomething(self))

        def notification(kind: str, percent: float, topic_arn: str, with_emails: bool = True):
            return budgets.CfnBudget.NotificationWithSubscribersProperty(
                notification=budgets.CfnBudget.NotificationProperty(
                    comparison_operator="GREATER_THAN", notification_type=kind, threshold=percent,
                    threshold_type="PERCENTAGE"),
                subscribers=[budgets.CfnBudget.SubscriberProperty(subscription_type="SNS", address=topic_arn),
                             *[budgets.CfnBudget.SubscriberProperty(subscription_type="EMAIL", address=e)
                               for e in (emails if with_emails else ())]])

        # A notification has one SNS subscriber and must be unique: at the stop threshold the actual-spend
        # notification goes to the stop topic, and the stop function tells the alert topic what it did.
        notifications = [notification("FORECASTED", p, alerts.topic_arn) for p in notify_at_percent]
        notifications += [notification("ACTUAL", p, self.stop_topic.topic_arn if p == stop_at_percent
                                        else alerts.topic_arn) for p in notify_at_percent]
        if stop_at_percent is not None and stop_at_percent not in notify_at_percent:
            notifications.append(notification("ACTUAL", stop_at_percent, self.stop_topic.topic_arn, with_emails=False))
        self.budget = budgets.CfnBudget(
            self, "Resource",
            budget=budgets.CfnBudget.BudgetDataProperty(
                budget_name=budget_name, budget_type="COST", time_unit="MONTHLY",
                budget_limit=budgets.CfnBudget.SpendProperty(amount=monthly_limit, unit="USD"),
                cost_filters=cost_filters),
            notifications_with_subscribers=notifications)
        if self.stop_function is not None:
            self.stop_function.add_to_role_policy(iam.PolicyStatement(
                actions=["budgets:ViewBudget"],
                resources=[f"arn:{stack.partition}:budgets::{stack.account}:budget/{budget_name}"]))

    @staticmethod
    def _validate(budget_name, monthly_limit, emails, notify_at_percent, stop_at_percent, spend_check_every) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("BudgetGuard", prop, value, allowed, fix)

        if not re.match(r"^[^:\\]{1,100}$", budget_name):
            fail("budget_name", budget_name, "1-100 characters without ':' or '\\'", "e.g. 'ml-platform-dev-monthly'")
        if not monthly_limit > 0:
            fail("monthly_limit", monthly_limit, "a positive amount in USD", "e.g. 2000")
        if len(emails) > MAX_EMAIL_SUBSCRIBERS:
            fail("emails", list(emails), f"at most {MAX_EMAIL_SUBSCRIBERS} e-mail subscribers per notification",
                 "use a distribution list")
        for percent in notify_at_percent:
            if not 0 < percent <= 1000:
                fail("notify_at_percent", percent, "percentages above 0 (forecasts may exceed 100)", "e.g. (50, 80, 100)")
        if len(set(notify_at_percent)) != len(notify_at_percent):
            fail("notify_at_percent", list(notify_at_percent), "each threshold once", "remove the duplicate")
        count = 2 * len(notify_at_percent) + (stop_at_percent is not None and stop_at_percent not in notify_at_percent)
        if count > MAX_NOTIFICATIONS:
            fail("notify_at_percent", list(notify_at_percent), f"at most {MAX_NOTIFICATIONS} budget notifications "
                 f"(two per threshold, actual and forecasted, plus the stop): this needs {count}", "drop a threshold")
        if stop_at_percent is not None and not 0 < stop_at_percent <= 100:
            fail("stop_at_percent", stop_at_percent, "a percentage of actual spend in (0, 100], or None",
                 "e.g. 80; None disables the stop")
        minutes = spend_check_every.to_seconds() / 60
        if minutes < 1 or minutes != int(minutes):
            fail("spend_check_every", spend_check_every.to_human_string(), "whole minutes, at least 1",
                 "e.g. Duration.minutes(15)")

    def _stop_function(self, alerts, key, environment, monthly_limit, stop_at_percent, every) -> lambda_.Function:
        stack = Stack.of(self)
        failures = sqs.Queue(self, "StopFailures", encryption=sqs.QueueEncryption.KMS, encryption_master_key=key,
                             enforce_ssl=True, retention_period=Duration.days(14))
        Validations.of(failures).acknowledge(Acknowledgment(
            id="AwsSolutions-SQS3", reason="This queue is itself the failure destination of the stop function."))
        function = runtime_function(
            self, "StopFunction", handler="budget_guard.handler", files=["budget_guard.py", "prices.json"],
            description=f"Stops the {environment} GPU fleets when the budget {self.budget_name} runs out",
            timeout=Duration.minutes(2), memory_size=256,
            log_group=logs.LogGroup(self, "AuditLog", retention=logs.RetentionDays.ONE_YEAR,
                                    removal_policy=self._removal_policy),
            retry_attempts=2, on_failure=destinations.SqsDestination(failures),
            environment={"ENVIRONMENT": environment, "BUDGET_SCOPE": self.budget_scope, "BUDGET_NAME": self.budget_name, "ACCOUNT_ID": stack.account,
                         "MONTHLY_LIMIT": str(monthly_limit), "STOP_AT_PERCENT": str(stop_at_percent),
                         "ALERT_TOPIC_ARN": alerts.topic_arn})
        self.stop_topic.add_subscription(subscriptions.LambdaSubscription(function))
        events.Rule(self, "SpendCheck", schedule=events.Schedule.rate(every),
                    description=f"Projects the {environment} month's spend from the running GPU fleets",
                    targets=[targets.LambdaFunction(function, retry_attempts=2)])
        alerts.grant_publish(function)
        function.add_to_role_policy(iam.PolicyStatement(
            sid="FindFleetsAndPriceThem",
            actions=["autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances", "sagemaker:ListEndpoints",
                     "sagemaker:ListTags"], resources=["*"]))
        function.add_to_role_policy(iam.PolicyStatement(
            sid="StopAndResumeOnlyThisEnvironmentsFleets",
            actions=["autoscaling:SuspendProcesses", "autoscaling:ResumeProcesses", "autoscaling:UpdateAutoScalingGroup",
                     "autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"],
            resources=[stack_arn(stack, AUTO_SCALING_GROUPS_ARN)],
            conditions={"StringEquals": {f"autoscaling:ResourceTag/{BUDGET_SCOPE_TAG}": self.budget_scope},
                        "Null": {"autoscaling:ResourceTag/ml-platform:fleet": "false"}}))
        function.add_to_role_policy(iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": "MLPlatform/Cost"}}))
        reason = ("Describe/List calls and PutMetricData have no resource-level permissions (metrics limited by "
                  "namespace); fleet changes are limited by the budget-scope and fleet tags.")
        Validations.of(function.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=reason),
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, AUTO_SCALING_GROUPS_ARN)}]", reason=reason),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                           reason="Publishing to the encrypted alert topic needs data keys of its key."),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
                           reason="CDK's encrypt grant for the failure queue's key."))
        notify = cw_actions.SnsAction(alerts)
        for alarm in (
            function.metric_errors(period=Duration.minutes(5)).create_alarm(
                self, "StopErrorsAlarm", threshold=1, evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"The {environment} budget guard failed: GPU spend may not have been stopped"),
            failures.metric_approximate_number_of_messages_visible(period=Duration.minutes(5)).create_alarm(
                self, "StopFailuresAlarm", threshold=1, evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"A {environment} budget stop failed after retries: see the StopFailures queue"),
        ):
            alarm.add_alarm_action(notify)
        return function


@jsii.implements(IValidation)
class _GovernsSomething:
    """Warns when nothing in the app carries the guard's scope tag: a guard that governs nothing is silent.

    Runs at validation time, after the tag aspects have applied. Acknowledge the warning when the governed
    resources are deployed from another app."""

    def __init__(self, guard: BudgetGuard) -> None:
        self._guard = guard

    def validate(self) -> list[str]:
        for construct in self._guard.node.root.node.find_all():
            if not isinstance(construct, CfnResource):  # only resources carry tags; skips a jsii call per construct
                continue
            tags = TagManager.of(construct)
            if tags is not None and tags.tag_values().get(BUDGET_SCOPE_TAG) == self._guard.budget_scope:
                return []
        Annotations.of(self._guard).add_warning_v2(
            "ml-platform:budget-guard-governs-nothing",
            f"BudgetGuard: no resource in this app is tagged {BUDGET_SCOPE_TAG}={self._guard.budget_scope}, so the "
            "stop would stop nothing. Pass the same budget_scope to the guard and to the SpotGpuFleets it must "
            "stop, or acknowledge this warning if they are deployed from another app.")
        return []
