"""BudgetGuard: an environment's monthly budget, its notifications, and a stop that halts GPU spend by itself."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from aws_cdk import (Acknowledgment, Annotations, AspectPriority, Aspects, Duration, IAspect, Names, RemovalPolicy,
                     Stack, Token, Validations)
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
from aws_cdk import aws_ssm as ssm
import jsii
from constructs import Construct, IConstruct, IValidation

from ..foundation.alert_topic import allow_budgets_to_publish
from ..errors import ValidationError, refusal_leaves_no_node
from .scope import (ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, display_path, endpoints_carrying, governs_something,
                    register_guard, validate_budget_scope)
from ..foundation.nag_support import nag_arn, stack_arn, suppress_checkov
from ..foundation.platform_key import allow_log_groups, allow_publishing
from ..advice.price_table import TABLE_FILE, PriceTable
from ..runtime.handlers.budget_guard import DEFAULT_BUDGET_AGE_HOURS, DEFAULT_GRACE_MINUTES, QUEUE_TAG
from ..runtime.handlers.pending_jobs import PENDING_PATH
from ..operations.jobs import DEFINITION_TAG, EVALUATION
from ..foundation.runtime_function import runtime_function
from ..training.spot_gpu_fleet import AUTO_SCALING_GROUPS_ARN

# One SNS and up to 10 e-mail subscribers per notification, up to 10 notifications per budget:
# https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_NotificationWithSubscribers.html
MAX_EMAIL_SUBSCRIBERS = 10
# AWS Batch resources of the stack's account and Region (changes limited by the budget-scope tag condition).
BATCH_QUEUE_ARNS = ("arn:{partition}:batch:{region}:{account}:job-queue/*",
                    "arn:{partition}:batch:{region}:{account}:compute-environment/*",
                    "arn:{partition}:batch:{region}:{account}:job-definition/*")
BATCH_JOBS_ARN = "arn:{partition}:batch:{region}:{account}:job/*"
INSTANCES_ARN = "arn:{partition}:ec2:{region}:{account}:instance/*"
PENDING_JOBS_ARN = "arn:{partition}:ssm:{region}:{account}:parameter" + PENDING_PATH.rstrip("/") + "*"
MAX_NOTIFICATIONS = 10
# Why the stop function's policy has wildcards (cdk-nag's AwsSolutions-IAM5 acknowledgments).
_POLICY_REASON = ("Describe/List calls and PutMetricData have no resource-level permissions (metrics limited by "
                  "namespace); fleet and queue changes are limited by the budget-scope tag (fleets also by the "
                  "fleet tag, instances also by the queue tag); jobs are ended and marked by id, from the governed "
                  "queues only; pending-job records are parameters under one path, decrypted only through Parameter "
                  "Store for that path.")
# The stop function's code: the handler and what it imports (in Lambda, each sits at the top of the package).
STOP_FUNCTION_FILES = ("budget_guard.py", "pending_jobs.py", "prices.py", "prices.json")


@refusal_leaves_no_node
class BudgetGuard(Construct):
    """A monthly cost budget with notifications, and a guard that stops the environment's GPU fleets.

    - The budget (``monthly_limit`` USD; named by CloudFormation, so that notification changes, which replace
      it, deploy) notifies the alert topic and ``emails`` when actual
      or forecasted spend crosses each of ``notify_at_percent`` (50, 80, 100). It covers the whole account
      unless ``cost_filters`` narrow it (tag filters count only once the tags are activated for cost
      allocation: constructs/docs/BudgetGuard.md).
    - At ``stop_at_percent`` (80) of actual spend, Budgets notifies a stop topic of its own; a Lambda
      (retries 2, failures to an encrypted queue, alarms on its errors and on that queue) stops every fleet
      governed by this guard's ``budget_scope`` (see ``ml_platform_constructs.governance``): Launch suspended,
      desired capacity 0, and every governed training queue: job queues and compute environments disabled, running
      jobs ended with their checkpoint signal after each is recorded (encrypted with ``key``) as the submission
      that runs it again. Every ``spend_check_every``
      (15 minutes) the same function estimates the spend to now (the budget's actual spend, taken as
      ``budget_data_age`` old, plus what the running GPU capacity has cost since, from the price table of the
      stack's Region, Spot at its assumed discount) and stops when it reaches the same line; when the month,
      projected at the current hourly cost, would reach it, it warns the alert topic at most once a day with the
      date. After a stop, the check ends the instances a stopped queue still runs ``stopped_instance_grace`` later
      (a disabled compute environment may keep them, and their bill) and tells the alert topic.
      ``python -m ml_platform_constructs budget resume --function <stop_function name>`` (the platform app:
      ``./platform budget resume ENV``) resumes and submits every recorded job (and any submission a stopped queue
      refused meanwhile, such as a retraining); ``./platform budget what-if ENV`` runs the same decision.

    Attributes: ``budget`` (main child ``Resource``), ``budget_name``, ``budget_scope``, ``stop_topic``,
    ``stop_function`` (None without a stop).

    :param monthly_limit: USD.
    :param budget_name: Default: generated by CloudFormation (its Ref is the name). A fixed name makes every
        notification or subscriber change fail to deploy (they replace the budget, and CloudFormation cannot
        replace a custom-named resource): adds a warning.
    :param alerts: the alert topic; it must allow Budgets to publish (``AlertTopic`` does).
    :param key: encrypts the stop topic, the failure queue, the audit log group and the records of the jobs a stop
        ends. A key of this app gets the statements that let Budgets publish to the stop topic and CloudWatch Logs
        encrypt the audit log (once per key, as ``PlatformKey`` has them); an imported key fails at synth unless
        ``key_policy_has`` declares them.
    :param environment: names the environment in descriptions, messages and the ``Environment`` dimension of the cost
        metrics. What a stop lists as left running is found by ``budget_scope`` (the endpoints tagged
        ``ml-platform:budget-scope=<budget_scope>``); ``environment=<environment>`` only finds an endpoint deployed
        by 0.2, whose Stage tagged it so.
    :param budget_scope: governs every resource tagged ``ml-platform:budget-scope=<budget_scope>``, which each
        governed construct sets on itself (``SpotGpuFleet(budget_scope=...)``, ``TrainingQueue(budget_scope=...)``).
        Default: ``"account"``, the constructs' default: all of this account and Region that chose no other scope.
        Where the scope holds only endpoints in the app (``MonitoredEndpoint``: listed by a stop, never stopped),
        the guard warns so and gets no right to end Batch jobs (``batch:TerminateJob`` cannot be bound to a scope).
    :param emails: budget notification e-mails (at most 10). Default: none.
    :param notify_at_percent: Default: (50, 80, 100).
    :param stop_at_percent: Default: 80. None: notify only, no stop and no spend check.
    :param spend_check_every: Default: 15 minutes.
    :param budget_data_age: how old the spend check takes Budgets' figure to be. Default: 24 hours (Budgets
        gives no as-of time; capacity running in that window may be counted twice, erring towards stopping).
    :param stopped_instance_grace: how long after a stop a stopped queue's instances may still run before the
        guard ends them (5 minutes to 2 hours). Default: 10 minutes.
    :param cost_filters: AWS::Budgets CostFilters, e.g. {"TagKeyValue": ["user:environment$dev"]}. Default: the account.
    :param removal_policy: for the audit log group. Default: RETAIN.
    :param price_table: the GPU prices the spend check uses, e.g. a team's own refresh
        (``PriceTable.from_file("prices.json")``). Default: the table the library ships, every Region that offers
        catalog types. A Region the table lacks is priced at the dearest rate it has, with a warning.
    """

    def __init__(self, scope: Construct, id: str, *, monthly_limit: float, alerts: sns.ITopic,
                 key: kms.IKey, environment: str, budget_name: Optional[str] = None,
                 budget_scope: str = ACCOUNT_SCOPE, emails: Sequence[str] = (),
                 notify_at_percent: Sequence[float] = (50, 80, 100), stop_at_percent: Optional[float] = 80,
                 spend_check_every: Duration = Duration.minutes(15),
                 budget_data_age: Duration = Duration.hours(DEFAULT_BUDGET_AGE_HOURS),
                 stopped_instance_grace: Duration = Duration.minutes(DEFAULT_GRACE_MINUTES),
                 cost_filters: Optional[dict[str, Sequence[str]]] = None,
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
                 price_table: Optional[PriceTable] = None) -> None:
        super().__init__(scope, id)
        if price_table is not None and not isinstance(price_table, PriceTable):
            raise ValidationError("BudgetGuard", "price_table", type(price_table).__name__, "a PriceTable",
                                  "pass ml_platform_constructs.PriceTable.from_file('prices.json')")
        self._price_table = price_table
        self._validate(budget_name, monthly_limit, emails, notify_at_percent, stop_at_percent, spend_check_every,
                       stopped_instance_grace)
        validate_budget_scope("BudgetGuard", budget_scope)
        self.budget_scope = budget_scope
        self._removal_policy = removal_policy
        self._budget_data_age = budget_data_age
        self._stopped_instance_grace = stopped_instance_grace
        if stop_at_percent is not None:  # the stop topic (Budgets publishes) and the audit log (CloudWatch Logs)
            allow_publishing(key, ["budgets.amazonaws.com"], construct="BudgetGuard", prop="key")
            allow_log_groups(key, construct="BudgetGuard", prop="key")
        stack = Stack.of(self)
        if budget_name is not None:
            Annotations.of(self).add_warning_v2("ml-platform:budget-name", (
                "A fixed budget_name makes changes to notifications and subscribers undeployable: they replace "
                "the budget, and CloudFormation cannot replace a custom-named resource. Leave it unset."))
        if not Token.is_unresolved(stack.region) and stack.region not in (price_table or PriceTable.shipped()).regions:
            Annotations.of(self).add_warning_v2("ml-platform:budget-unpriced-region", (
                f"The price table has no {stack.region} rates: the guard prices GPU capacity at the dearest rate of "
                f"any Region it has, so it stops early. For {stack.region}'s own rates (with AWS credentials): python "
                f"-m ml_platform_constructs prices refresh --region {stack.region} --output prices.json, then pass "
                "price_table=PriceTable.from_file('prices.json')"))

        self.stop_function: Optional[lambda_.Function] = None
        if stop_at_percent is not None:
            # Its own topic: forecasts and e-mails are not stop orders.
            self.stop_topic = sns.Topic(self, "StopTopic", master_key=key, enforce_ssl=True,
                                        display_name=f"{environment} budget: stop GPU spend")
            allow_budgets_to_publish(self.stop_topic)

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
        # Ref is the budget's name, generated when budget_name is unset:
        # https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-budgets-budget.html
        self.budget_name = budget_name or self.budget.ref
        # Budgets checks that it may publish to each SNS subscriber when the budget is created: the topics and
        # their policies first, explicitly (a topic in another stack is ordered by the stack dependency).
        for topic in (alerts, getattr(self, "stop_topic", None)):
            if topic is not None and Stack.of(topic) is stack:
                self.budget.node.add_dependency(topic)
        if stop_at_percent is not None:
            self.stop_function = self._stop_function(alerts, key, environment, monthly_limit, stop_at_percent,
                                                     spend_check_every)
            self.node.add_validation(_GovernsSomething(self))
            register_guard(self)
            self.stop_function.add_to_role_policy(iam.PolicyStatement(
                actions=["budgets:ViewBudget"],
                resources=[f"arn:{stack.partition}:budgets::{stack.account}:budget/{self.budget_name}"]))

    @staticmethod
    def _validate(budget_name, monthly_limit, emails, notify_at_percent, stop_at_percent, spend_check_every,
                  stopped_instance_grace) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("BudgetGuard", prop, value, allowed, fix)

        if budget_name is not None and not re.match(r"^[^:\\]{1,100}$", budget_name):
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
        # At least the longest stop timeout of a queue's jobs (115 s) and a scale-in; at most what a leak may cost.
        if not 5 <= stopped_instance_grace.to_seconds() / 60 <= 120:
            fail("stopped_instance_grace", stopped_instance_grace.to_human_string(), "5 minutes to 2 hours",
                 "e.g. Duration.minutes(10)")

    def _stop_function(self, alerts, key, environment, monthly_limit, stop_at_percent, every) -> lambda_.Function:
        stack = Stack.of(self)
        # The day the last early warning went out: at most one a day.
        self.warning_parameter = ssm.StringParameter(
            self, "LastWarning", string_value="never",
            parameter_name=f"/ml-platform/budget-guard/{Names.unique_id(self)}/last-warning",
            description=f"The day the {environment} budget guard last warned of the month's projected spend")
        failures = sqs.Queue(self, "StopFailures", encryption=sqs.QueueEncryption.KMS, encryption_master_key=key,
                             enforce_ssl=True, retention_period=Duration.days(14))
        Validations.of(failures).acknowledge(Acknowledgment(
            id="AwsSolutions-SQS3", reason="This queue is itself the failure destination of the stop function."))
        function = runtime_function(
            self, "StopFunction", handler="budget_guard.handler", files=STOP_FUNCTION_FILES,
            replace={TABLE_FILE: self._price_table.to_json()} if self._price_table else None,
            description=f"Stops the {environment} GPU fleets when the environment's budget runs out",
            timeout=Duration.minutes(2), memory_size=256,
            log_group=logs.LogGroup(self, "AuditLog", retention=logs.RetentionDays.ONE_YEAR, encryption_key=key,
                                    removal_policy=self._removal_policy),
            retry_attempts=2, on_failure=destinations.SqsDestination(failures),
            environment={"ENVIRONMENT": environment, "BUDGET_SCOPE": self.budget_scope, "BUDGET_NAME": self.budget_name,
                         "ACCOUNT_ID": stack.account,
                         "MONTHLY_LIMIT": str(monthly_limit), "STOP_AT_PERCENT": str(stop_at_percent),
                         "ALERT_TOPIC_ARN": alerts.topic_arn, "PRICE_REGION": stack.region,
                         "BUDGET_AGE_HOURS": str(self._budget_data_age.to_hours()),
                         "WARNING_PARAMETER": self.warning_parameter.parameter_name, "RECORD_KEY_ID": key.key_arn,
                         "STOPPED_INSTANCE_GRACE_MINUTES": str(int(self._stopped_instance_grace.to_minutes()))})
        suppress_checkov(function, "CKV_AWS_116", "Failed asynchronous invocations go to the StopFailures queue "
                         "through an on-failure destination, which also carries the error; a DLQ would duplicate it")
        self.stop_topic.add_subscription(subscriptions.LambdaSubscription(function))
        events.Rule(self, "SpendCheck", schedule=events.Schedule.rate(every),
                    description=f"Estimates the {environment} month's spend from its running GPU fleets and queues",
                    targets=[targets.LambdaFunction(function, retry_attempts=2)])
        alerts.grant_publish(function)
        self.warning_parameter.grant_read(function)
        self.warning_parameter.grant_write(function)
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
        # Training queues (AWS Batch): find them and their jobs; disable and enable only the governed ones.
        function.add_to_role_policy(iam.PolicyStatement(
            sid="FindQueuesAndTheirJobs",
            actions=["batch:DescribeJobQueues", "batch:ListJobs", "batch:DescribeJobs", "batch:DescribeComputeEnvironments",
                     "batch:DescribeJobDefinitions"], resources=["*"]))
        function.add_to_role_policy(iam.PolicyStatement(
            sid="StopAndResumeOnlyGovernedQueues",
            actions=["batch:UpdateJobQueue", "batch:UpdateComputeEnvironment", "batch:TagResource",
                     "batch:UntagResource", "batch:SubmitJob"],
            resources=[stack_arn(stack, arn) for arn in BATCH_QUEUE_ARNS],
            conditions={"StringEquals": {f"aws:ResourceTag/{BUDGET_SCOPE_TAG}": self.budget_scope}}))
        # Never the promotion gate's evaluation definition, whose role writes the gate's evidence: its only submitter is
        # an EvaluationSubmitter, with the command deployed for the endpoint (a resumed record could carry another).
        # Batch evaluates a definition's tags when it is submitted by revision, as the guard submits:
        # https://docs.aws.amazon.com/batch/latest/userguide/iam-example-restrict-job-submission-by-tags.html
        # (nor may it change that tag, which the denial keys on)
        function.add_to_role_policy(iam.PolicyStatement(
            sid="NeverTheEvaluationDefinition", effect=iam.Effect.DENY,
            actions=["batch:SubmitJob", "batch:TagResource", "batch:UntagResource"],
            resources=[stack_arn(stack, BATCH_QUEUE_ARNS[2])],
            conditions={"StringEquals": {f"aws:ResourceTag/{DEFINITION_TAG}": EVALUATION}}))
        # Ending jobs has no scope condition to bind it (a Batch job carries only its submitter's tags: queue tags do
        # not propagate, https://docs.aws.amazon.com/batch/latest/userguide/using-tags.html), so it is granted only
        # where the scope may hold a queue: added at synth, when every construct of the app exists.
        Aspects.of(self).add(_EndsJobsUnlessServingOnly(self, function), priority=AspectPriority.MUTATING)
        # What a stopped queue still runs after the grace period: only governed queue instances.
        function.add_to_role_policy(iam.PolicyStatement(
            sid="EndOnlyGovernedQueueInstances", actions=["ec2:TerminateInstances"],
            resources=[stack_arn(stack, INSTANCES_ARN)],
            conditions={"StringEquals": {f"aws:ResourceTag/{BUDGET_SCOPE_TAG}": self.budget_scope},
                        "Null": {f"aws:ResourceTag/{QUEUE_TAG}": "false"}}))
        # The record of pending jobs: written encrypted with this key, read whatever key a writer (a retraining)
        # used, but only through Parameter Store and only for these parameters (encryption context PARAMETER_ARN):
        # https://docs.aws.amazon.com/kms/latest/developerguide/services-parameter-store.html
        function.add_to_role_policy(iam.PolicyStatement(
            sid="RecordPendingJobs", actions=["ssm:PutParameter", "ssm:GetParametersByPath", "ssm:DeleteParameter"],
            resources=[stack_arn(stack, PENDING_JOBS_ARN)]))
        key.grant_encrypt(function)
        function.add_to_role_policy(iam.PolicyStatement(
            sid="ReadPendingJobRecords", actions=["kms:Decrypt"], resources=["*"],
            conditions={"StringEquals": {"kms:ViaService": f"ssm.{stack.region}.{stack.url_suffix}"},
                        "StringLike": {"kms:EncryptionContext:PARAMETER_ARN": stack_arn(stack, PENDING_JOBS_ARN)}}))
        Validations.of(function.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=_POLICY_REASON),
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, AUTO_SCALING_GROUPS_ARN)}]",
                           reason=_POLICY_REASON),
            *[Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, arn)}]", reason=_POLICY_REASON)
              for arn in (*BATCH_QUEUE_ARNS, INSTANCES_ARN, PENDING_JOBS_ARN)],
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

    def _listed_only(self) -> list[IConstruct]:
        """The SageMaker endpoints of the app with this guard's scope when they are all the scope holds in the app (a
        serving-only scope: nothing ``govern()`` recorded), which a stop lists and never stops; else none."""
        if governs_something(self, self.budget_scope):
            return []
        return endpoints_carrying(self, self.budget_scope)


@jsii.implements(IAspect)
class _EndsJobsUnlessServingOnly:
    """Grants the stop function ``batch:TerminateJob`` and ``batch:TagResource`` on the account's jobs (it ends and
    marks only jobs it listed in a governed job queue), unless the guard's scope is serving-only in its app: there is
    no queue to end jobs of, so it gets no right to end any job of the account. Where nothing in the app carries the
    scope the governed queues may be another app's, so the right stays. An aspect: it decides once the app is built."""

    def __init__(self, guard: BudgetGuard, function: lambda_.Function) -> None:
        self._guard, self._function, self._done = guard, function, False

    def visit(self, node: IConstruct) -> None:
        if node is not self._guard or self._done:
            return
        self._done = True
        if self._guard._listed_only():
            return
        stack = Stack.of(self._guard)
        self._function.add_to_role_policy(iam.PolicyStatement(
            sid="EndAndMarkQueueJobs", actions=["batch:TerminateJob", "batch:TagResource"],
            resources=[stack_arn(stack, BATCH_JOBS_ARN)]))
        Validations.of(self._function.role).acknowledge(Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, BATCH_JOBS_ARN)}]", reason=_POLICY_REASON))


@jsii.implements(IValidation)
class _GovernsSomething:
    """Warns when nothing in the app that a stop can stop carries the guard's scope tag: a guard that governs nothing
    is silent. Endpoints with its scope are named: a stop lists them, never stops them.

    Runs at validation time, when every construct of the app exists; ``govern()`` recorded what it tagged.
    Acknowledge the warning when the governed resources are deployed from another app."""

    def __init__(self, guard: BudgetGuard) -> None:
        self._guard = guard

    def validate(self) -> list[str]:
        if governs_something(self._guard, self._guard.budget_scope):
            return []
        tag = f"{BUDGET_SCOPE_TAG}={self._guard.budget_scope}"
        endpoints = self._guard._listed_only()
        if endpoints:
            named = ", ".join(display_path(endpoint) for endpoint in endpoints)
            message = (
                f"BudgetGuard: only SageMaker endpoints carry {tag} in this app ({named}): a stop lists them as left "
                "running and never stops them, so the stop would stop nothing, and the guard gets no right to end "
                "Batch jobs. For the budget's notifications alone pass stop_at_percent=None; to stop training spend, "
                "pass the same budget_scope to the SpotGpuFleets and TrainingQueues it must stop, in this app.")
        else:
            message = (
                f"BudgetGuard: no resource in this app is tagged {tag}, so the stop would stop nothing. Pass the same "
                "budget_scope to the guard and to the SpotGpuFleets and TrainingQueues it must stop, or acknowledge "
                "this warning if they are deployed from another app.")
        Annotations.of(self._guard).add_warning_v2("ml-platform:budget-guard-governs-nothing", message)
        return []
