"""RetrainOnDrift: an endpoint's drift alarm (and any other trigger added) starts its retraining job on a TrainingQueue:
one job per episode, one at a time."""

from __future__ import annotations

import json
import re
from typing import Sequence

import jsii
from aws_cdk import (Acknowledgment, Duration, Fn, IStableStringProducer, Lazy, RemovalPolicy, Stack, Token,
                     Validations)
from aws_cdk import aws_batch as batch
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..errors import ValidationError, refusal_leaves_no_node
from ..foundation.nag_support import AcknowledgeOwnWildcards, nag_arn, stack_arn, suppress_checkov
from ..runtime.handlers.pending_jobs import PENDING_PATH
from ..runtime.handlers.retrain import COOLDOWN_HOURS, EXPIRES_ATTRIBUTE, TRIGGER_TAG
from ..foundation.runtime_function import runtime_function
from ..training.training_queue import TrainingQueue

# The retraining function's code: the handler and what it imports (in Lambda, each sits at the top of the package).
FUNCTION_FILES = ("retrain.py", "pending_jobs.py")
_JOBS_ARN = "arn:{partition}:batch:{region}:{account}:job/*"


@refusal_leaves_no_node
class RetrainOnDrift(Construct):
    """Retrains an endpoint's model on a TrainingQueue when its drift alarm changes to ALARM, and when any trigger
    added with ``add_trigger`` does (e.g. a production-quality alarm).

    - The retraining job definition (``image_uri``, ``command``; the queue's size, retries, volumes, logs and role)
      lives here, with what submits it: a changed image registers a new revision without touching what another
      stack imports. The function submits it by name (its latest active revision).
    - One job per episode: an EventBridge rule per trigger invokes a small function, which claims the trigger's
      cooldown and the single retraining flight in a DynamoDB table (``claims``: conditional writes, so events
      that arrive together or twice start one job) before it submits ``<job_name_prefix>-<UTC minute>`` (its
      checkpoints under the queue's ``checkpoints/<queue>/<job name>/``), tagged ``ml-platform:retrain-trigger``
      (and the alarm and time). One job at a time, whatever triggered it; each trigger at most once per its
      cooldown.
    - While a budget stop has disabled the queue, the submission is kept as a pending record (Parameter Store,
      encrypted with the queue's key) that the ``BudgetGuard``'s resume submits.
    - ``alerts`` is told of every submission, skip and pending record; the function's errors alarm it.

    Attributes: ``function`` (main child ``Resource``), ``job_definition``, ``claims`` (the table), ``rules``
    (trigger name -> rule).

    :param alarm: the drift alarm (``MonitoredEndpoint.alarms["drift"]``, PSI or KL: one alarm, one event per
        episode); its trigger is named ``drift``.
    :param queue: the TrainingQueue the job runs on: one of this app, in this construct's account and Region (the job
        definition is built with it, and the function submits to it with its own role). A queue by reference (an
        imported job queue, another account's) is refused: for a shared training account, build ``RetrainOnDrift``
        in the app that deploys the queue and send the alarm's state changes to that account's event bus.
    :param image_uri: the retraining image, in Amazon ECR.
    :param job_name_prefix: 1-100 letters, digits, '-' or '_'.
    :param alerts: told of every submission or skip.
    :param command: the container's command. Default: the image's.
    :param cooldown: the drift trigger starts at most one retraining per this period (1 hour to 30 days).
        Default: 24 hours.
    :param removal_policy: of the function's log group and the claims table. Default: RETAIN.
    """

    def __init__(self, scope: Construct, id: str, *, alarm: cloudwatch.IAlarm, queue: TrainingQueue, image_uri: str,
                 job_name_prefix: str, alerts: sns.ITopic, command: Sequence[str] = (),
                 cooldown: Duration = Duration.hours(24), removal_policy: RemovalPolicy = RemovalPolicy.RETAIN) -> None:
        # Every check before super().__init__: a refused construct leaves nothing in the tree.
        if alarm is None:
            raise ValidationError("RetrainOnDrift", "alarm", None, "an alarm", "pass the endpoint's drift alarm")
        _validate_queue(scope, queue)
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", job_name_prefix):
            raise ValidationError("RetrainOnDrift", "job_name_prefix", job_name_prefix,
                                  "1-100 letters, digits, '-' or '_' (Batch job names), starting with a letter or digit",
                                  "e.g. retrain-classifier")
        self._validate_cooldown("cooldown", cooldown)
        if getattr(queue, "multi_node_only", False):
            raise ValidationError("RetrainOnDrift", "queue", queue.queue_name,
                                  "a TrainingQueue with single-node instance_types (a retraining is a single-node job)",
                                  "pass a queue with instance_types")
        super().__init__(scope, id)
        self._cooldowns: dict[str, int] = {}
        self.rules: dict[str, events.Rule] = {}
        self.job_definition: batch.EcsJobDefinition = queue.add_job_definition(
            "Job", image_uri=image_uri, command=command, scope=self)
        # A few items per retraining; on demand and encrypted with the queue's key. Each event's alert mark expires
        # (time to live); the claims themselves do not.
        self.claims = dynamodb.Table(
            self, "Claims", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=EXPIRES_ATTRIBUTE,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=queue.key, removal_policy=removal_policy,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True))
        environment = {"JOB_QUEUE": queue.job_queue_arn, "JOB_DEFINITION": self.job_definition.job_definition_name,
                       "JOB_NAME_PREFIX": job_name_prefix, "TOPIC_ARN": alerts.topic_arn,
                       "CLAIMS_TABLE": self.claims.table_name, "RECORD_KEY_ID": queue.key.key_arn,
                       "TRIGGERS": Lazy.string(_Cooldowns(self._cooldowns))}  # add_trigger adds to it
        if queue.checkpoint_root:
            environment["CHECKPOINT_ROOT"] = queue.checkpoint_root
        self.function = runtime_function(
            self, "Resource", handler="retrain.handler", files=FUNCTION_FILES, timeout=Duration.seconds(60),
            description=f"Starts {job_name_prefix} when a trigger alarms: one job per episode, one at a time",
            environment=environment, log_group=logs.LogGroup(
                self, "Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=removal_policy,
                encryption_key=queue.key))  # the queue's key, which already lets CloudWatch Logs use it
        suppress_checkov(self.function, "CKV_AWS_116",
                         "EventBridge and Lambda retry it; a failure gives its claims back and the errors alarm tells "
                         "the alert topic, so a failed submission is never silent")
        self._grant(queue, alerts, job_name_prefix)
        self.function.metric_errors(period=Duration.minutes(5)).create_alarm(
            self, "FailingAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{job_name_prefix}: the retraining function fails (see its log group)",
        ).add_alarm_action(cw_actions.SnsAction(alerts))
        self.add_trigger("drift", alarm, cooldown=cooldown)

    @staticmethod
    def _validate_cooldown(prop: str, cooldown: Duration) -> None:
        low, high = COOLDOWN_HOURS
        if not low * 3600 <= cooldown.to_seconds() <= high * 3600:
            raise ValidationError("RetrainOnDrift", prop, cooldown.to_human_string(),
                                  f"{low} hour to {high // 24} days", "e.g. Duration.hours(24)")

    def add_trigger(self, name: str, alarm: cloudwatch.IAlarm, *, cooldown: Duration) -> events.Rule:
        """Starts the same single-flight retraining when ``alarm`` changes to ALARM, at most once per ``cooldown``
        (its own, beside the other triggers'). ``name`` (e.g. ``quality``) tags the jobs it starts."""
        if not re.match(r"^[a-z][a-z0-9-]{0,31}$", name):
            raise ValidationError("RetrainOnDrift", "add_trigger name", name, "1-32 lower-case letters, digits or '-', "
                                  "starting with a letter", "e.g. quality")
        if name in self._cooldowns:
            raise ValidationError("RetrainOnDrift", "add_trigger name", name, "a name not used yet on this retraining",
                                  f"pick another name than {sorted(self._cooldowns)}")
        self._validate_cooldown(f"add_trigger({name!r}) cooldown", cooldown)
        self._cooldowns[name] = int(cooldown.to_seconds())
        field = events.EventField.from_path
        # https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html; the event's
        # id is kept through EventBridge's and Lambda's retries: the function's claims name it.
        rule = events.Rule(
            self, f"{name.title().replace('-', '')}Trigger", description=f"{name} alarm to ALARM: retrain",
            # The alarm's own account too: an event forwarded from another account's bus keeps its source account,
            # and an alarm of the same name here (or in a third account forwarding to this bus) must not retrain.
            event_pattern=events.EventPattern(source=["aws.cloudwatch"], detail_type=["CloudWatch Alarm State Change"],
                                              account=[_alarm_account(alarm)],
                                              detail={"alarmName": [alarm.alarm_name], "state": {"value": ["ALARM"]}}),
            targets=[targets.LambdaFunction(self.function, retry_attempts=2, event=events.RuleTargetInput.from_object({
                "trigger": name, "alarm": field("$.detail.alarmName"), "reason": field("$.detail.state.reason"),
                "time": field("$.time"), "eventId": field("$.id")}))])
        self.rules[name] = rule
        return rule

    def _grant(self, queue: TrainingQueue, alerts: sns.ITopic, job_name_prefix: str) -> None:
        stack = Stack.of(self)
        definitions = stack.format_arn(service="batch", resource="job-definition",
                                       resource_name=f"{self.job_definition.job_definition_name}:*")
        # Submitting by name is authorised against job-definition/NAME:REVISION:
        # https://docs.aws.amazon.com/batch/latest/userguide/iam-example-restrict-job-submission.html
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="SubmitTheRetrainingJob", actions=["batch:SubmitJob"], resources=[queue.job_queue_arn, definitions]))
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="TagItWithItsTrigger", actions=["batch:TagResource"], resources=[stack_arn(stack, _JOBS_ARN)],
            conditions={"ForAllValues:StringLike": {"aws:TagKeys": [TRIGGER_TAG.rsplit("-", 1)[0] + "-*"]}}))
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="SeeTheQueueAndItsJobs", actions=["batch:ListJobs", "batch:DescribeJobQueues"], resources=["*"]))
        # Its own pending records while the queue is stopped (runtime/handlers/retrain.py: retrain-<job name> under the
        # queue's path), encrypted with the queue's key; it reads only whether its record is still there, without
        # decryption, so the queue's other records (the budget guard's, under the guard's key) need no key of it.
        # The queue's name from its ARN (arn:...:job-queue/NAME), the value the queue already exports.
        queue_name = Fn.select(1, Fn.split("/", queue.job_queue_arn))
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="KeepItPendingWhileTheQueueIsStopped", actions=["ssm:PutParameter", "ssm:GetParameter"],
            resources=[stack.format_arn(service="ssm", resource="parameter", resource_name=(
                f"{PENDING_PATH.strip('/')}/{queue_name}/retrain-{job_name_prefix}-*"))]))
        queue.key.grant_encrypt_decrypt(self.function)
        self.claims.grant(self.function, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
        alerts.grant_publish(self.function)
        Validations.of(self.function.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason="batch:ListJobs and batch:DescribeJobQueues have "
                           "no resource-level permissions."),
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, _JOBS_ARN)}]",
                           reason="Tagging the job it submits with its trigger: job ids are not known before; only "
                                  "the retraining tag keys."),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                           reason="The queue's key encrypts the claims, the pending record and the alert topic."),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
                           reason="CDK's encrypt-decrypt grant on the queue's key (claims table, pending record)."))
        policy = self.function.role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeOwnWildcards(policy, (
            ("job-definition/", "Every revision of this retraining's own job definition (submitted by name)."),
            (PENDING_PATH, "Its own pending records in its queue's path only (one parameter per refused retraining)."))))


# How a team whose training queue is in another account retrains: the construct in that account's app, fed by the
# alarm's state changes that this account's default event bus forwards to that account's
# (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-cross-account.html).
_OTHER_ACCOUNT_FIX = (
    "pass a TrainingQueue of this app in this construct's account and Region. For a queue in another account (a "
    "shared training account), build RetrainOnDrift in the app that deploys that queue, on the alarm imported there "
    "(cloudwatch.Alarm.from_alarm_arn), and send this account's alarm state changes to that account's default event "
    "bus (here: an events.Rule on source aws.cloudwatch with targets.EventBus; there: the bus's policy allows this "
    "account): constructs/docs/RetrainOnDrift.md, 'A queue in another account'")


def _validate_queue(scope: Construct, queue: TrainingQueue) -> None:
    """The retraining builds its job definition with the queue (``add_job_definition``) and submits with its own role,
    so the queue must be a TrainingQueue of this app in the account and Region the function runs in."""
    if not isinstance(queue, TrainingQueue):
        arn = getattr(queue, "job_queue_arn", None)
        value = arn if isinstance(arn, str) and not Token.is_unresolved(arn) else type(queue).__name__
        raise ValidationError("RetrainOnDrift", "queue", value,
                              "a TrainingQueue (an imported job queue has no job definition to build or key to share)",
                              _OTHER_ACCOUNT_FIX)
    here, there = Stack.of(scope), Stack.of(queue)
    for what, mine, theirs in (("account", here.account, there.account), ("Region", here.region, there.region)):
        if not Token.is_unresolved(mine) and not Token.is_unresolved(theirs) and mine != theirs:
            raise ValidationError("RetrainOnDrift", "queue", queue.node.path,
                                  f"a queue in this construct's {what} ({mine}), not {theirs}: the function submits "
                                  "with its own role, and the job definition would be built in the queue's stack",
                                  _OTHER_ACCOUNT_FIX)


def _alarm_account(alarm: cloudwatch.IAlarm) -> str:
    """The account an alarm's state changes come from: the one in its ARN where the ARN is known (an alarm imported by
    ARN: ``env.account`` is this stack's then), else the alarm's stack's."""
    arn = alarm.alarm_arn
    if not Token.is_unresolved(arn) and arn.count(":") >= 5:
        return arn.split(":")[4]
    return alarm.env.account


@jsii.implements(IStableStringProducer)
class _Cooldowns:
    """The function's TRIGGERS variable, rendered at synth with every trigger added by then."""

    def __init__(self, cooldowns: dict[str, int]) -> None:
        self._cooldowns = cooldowns

    def produce(self) -> str:
        return json.dumps(self._cooldowns, sort_keys=True)
