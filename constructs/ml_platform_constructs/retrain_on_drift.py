"""RetrainOnDrift: an endpoint's drift alarms submit its retraining job to a TrainingQueue, at most once per cooldown."""

from __future__ import annotations

import re
from typing import Sequence

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_batch as batch
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from .errors import ValidationError
from .nag_support import suppress_checkov
from .runtime_function import runtime_function
from .training_queue import TrainingQueue


MAX_COOLDOWN_DAYS = 7


class RetrainOnDrift(Construct):
    """When one of ``alarms`` changes to ALARM, an EventBridge rule invokes a small function that submits
    ``job_definition`` to ``queue`` as ``<job_name_prefix>-<UTC minute>`` (its checkpoints under the queue's
    ``checkpoints/<queue>/<job name>/``) unless a job of that prefix was created within ``cooldown``, and tells
    ``alerts`` either way. EventBridge has no rate limit, so the cooldown lives in the function.

    :param alarms: the drift alarms (``MonitoredEndpoint.alarms["psi"]``, ``["kl"]``).
    :param queue: the TrainingQueue the job runs on.
    :param job_definition: from ``queue.add_job_definition(...)`` (image and command of the retraining job).
    :param job_name_prefix: 1-100 letters, digits, '-' or '_'.
    :param alerts: told of every submission or skip.
    :param cooldown: at most one retraining job per this period (1 hour to 7 days). Default: 24 hours.
    :param removal_policy: of the function's log group. Default: RETAIN.
    """

    def __init__(self, scope: Construct, id: str, *, alarms: Sequence[cloudwatch.IAlarm], queue: TrainingQueue,
                 job_definition: batch.IJobDefinition, job_name_prefix: str, alerts: sns.ITopic,
                 cooldown: Duration = Duration.hours(24), removal_policy: RemovalPolicy = RemovalPolicy.RETAIN) -> None:
        super().__init__(scope, id)
        if not alarms:
            raise ValidationError("RetrainOnDrift", "alarms", [], "at least one alarm", "pass the endpoint's drift alarms")
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", job_name_prefix):
            raise ValidationError("RetrainOnDrift", "job_name_prefix", job_name_prefix,
                                  "1-100 letters, digits, '-' or '_' (Batch job names), starting with a letter or digit",
                                  "e.g. retrain-classifier")
        # The cooldown is read from the queue's job list, which keeps finished jobs for days, not weeks.
        if not 3600 <= cooldown.to_seconds() <= MAX_COOLDOWN_DAYS * 86400:
            raise ValidationError("RetrainOnDrift", "cooldown", cooldown.to_human_string(),
                                  f"1 hour to {MAX_COOLDOWN_DAYS} days (AWS Batch lists finished jobs for a limited "
                                  "time only)", "e.g. Duration.hours(24)")
        environment = {"JOB_QUEUE": queue.job_queue_arn, "JOB_DEFINITION": job_definition.job_definition_arn,
                       "JOB_NAME_PREFIX": job_name_prefix, "COOLDOWN_SECONDS": str(int(cooldown.to_seconds())),
                       "TOPIC_ARN": alerts.topic_arn}
        if queue.checkpoint_root:
            environment["CHECKPOINT_ROOT"] = queue.checkpoint_root
        self.function = runtime_function(
            self, "Resource", handler="retrain.handler", files=["retrain.py"], timeout=Duration.seconds(60),
            description=f"Submits {job_name_prefix} when a drift alarm fires, at most once per cooldown",
            environment=environment, log_group=logs.LogGroup(
                self, "Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=removal_policy,
                encryption_key=queue.key))  # the queue's key, which already lets CloudWatch Logs use it
        suppress_checkov(self.function, "CKV_AWS_116",
                         "EventBridge retries it twice; the drift alarm that triggers it also notifies the alert "
                         "topic, so a failed submission is never silent")
        self.function.add_to_role_policy(iam.PolicyStatement(
            actions=["batch:SubmitJob", "batch:TagResource"],
            resources=[queue.job_queue_arn, job_definition.job_definition_arn]))
        self.function.add_to_role_policy(iam.PolicyStatement(actions=["batch:ListJobs"], resources=["*"]))
        alerts.grant_publish(self.function)
        Validations.of(self.function.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason="batch:ListJobs has no resource-level permissions."),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                           reason="Publishing to the KMS-encrypted alert topic; CDK's grant on the topic's own key."))
        # https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html
        self.rule = events.Rule(
            self, "DriftAlarm", description=f"Drift alarm to ALARM: submit {job_name_prefix}",
            event_pattern=events.EventPattern(source=["aws.cloudwatch"], detail_type=["CloudWatch Alarm State Change"],
                                              detail={"alarmName": [a.alarm_name for a in alarms],
                                                      "state": {"value": ["ALARM"]}}),
            targets=[targets.LambdaFunction(self.function, retry_attempts=2)])
