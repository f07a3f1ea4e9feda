"""What a TrainingQueue tells its operators: Batch job events (failed jobs to the alert topic, Spot retries and
every state change to the job log group), the metrics of those rules, the health alarms and the stall watcher, and the
queue's dashboard. The GPU alarms are gpu_alarms.py's, shared with SpotGpuFleet; the health alarms' shape is
health_alarms.py's.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jsii

from aws_cdk import Acknowledgment, ArnFormat, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..foundation.nag_support import nag_arn, stack_arn, suppress_checkov
from ..foundation.runtime_function import runtime_function
from .goodput_alarms import goodput_widget
from .health_alarms import HEALTH_NAMESPACE, health_alarms, health_widgets
from .instance_bootstrap import GPU_NAMESPACE
from ..runtime.handlers.stall_watcher import WATCHER_TAG

# The account's Batch jobs: TerminateJob and TagResource take the job resource type and no narrower condition (a job
# carries only its submitter's tags: queue tags do not propagate, https://docs.aws.amazon.com/batch/latest/userguide/
# using-tags.html): https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html
JOBS_ARN = "arn:{partition}:batch:{region}:{account}:job/*"
WATCH_EVERY = Duration.minutes(5)


@jsii.implements(events.IRuleTarget)
class LogGroupTarget:
    """A log group as a rule target, with the resource policy made by the queue: aws-cdk-lib's CloudWatchLogGroup
    target writes its policy through a custom resource and a Lambda function."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._log_group = log_group

    def bind(self, rule: events.IRule, id: Optional[str] = None) -> events.RuleTargetConfig:
        # The target is the log group's ARN without the ":*" its Arn attribute ends with; with it, nothing arrives.
        arn = Stack.of(rule).format_arn(service="logs", resource="log-group",
                                        resource_name=self._log_group.log_group_name,
                                        arn_format=ArnFormat.COLON_RESOURCE_NAME)
        return events.RuleTargetConfig(arn=arn)


def job_event_rules(scope: Construct, *, queue_name: str, job_queue_arns: Sequence[str], alerts: sns.ITopic,
                    log_group: logs.ILogGroup) -> tuple[events.Rule, events.Rule]:
    """The failed-job rule (to ``alerts``) and the Spot-retry rule (to ``log_group``, counted by its metric); every
    state change of the queues' jobs also goes to ``log_group``."""
    queues = list(job_queue_arns)
    # https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html
    detail_type = ["Batch Job State Change"]
    field = events.EventField.from_path
    failed = events.Rule(
        scope, "FailedJobs", description=f"Training queue {queue_name}: a job failed after its last attempt",
        event_pattern=events.EventPattern(source=["aws.batch"], detail_type=detail_type,
                                          detail={"jobQueue": queues, "status": ["FAILED"]}),
        targets=[targets.SnsTopic(alerts, message=events.RuleTargetInput.from_text(
            f"Training queue {queue_name}: job {field('$.detail.jobName')} ({field('$.detail.jobId')}) FAILED: "
            f"{field('$.detail.statusReason')}. Attempts: {field('$.detail.attempts')}. Logs: "
            f"./platform job logs ENV {field('$.detail.jobId')} (or the job's log stream in "
            f"{log_group.log_group_name})."))])
    # A job back in RUNNABLE after an attempt that Spot ended: counted by the rule's TriggeredRules metric.
    retries = events.Rule(
        scope, "SpotRetries", description=f"Training queue {queue_name}: a job retried after a Spot reclaim",
        event_pattern=events.EventPattern(source=["aws.batch"], detail_type=detail_type, detail={
            "jobQueue": queues, "status": ["RUNNABLE"],
            "$or": [{"attempts": {"statusReason": [{"prefix": "Host EC2"}]}},
                    {"attempts": {"container": {"exitCode": [143]}}}]}),
        targets=[LogGroupTarget(log_group)])
    # Every state change of the queue's jobs, for the dashboard's jobs-by-state chart and as an audit trail.
    states = events.Rule(scope, "JobStateChanges", description=f"Training queue {queue_name}: job state changes",
                         event_pattern=events.EventPattern(source=["aws.batch"], detail_type=detail_type,
                                                           detail={"jobQueue": queues}),
                         targets=[LogGroupTarget(log_group)])
    # EventBridge writes to a log group through the account's Logs resource policy (at most 10 per Region), here
    # for these two rules only:
    # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-cloudwatchlogs-permissions
    logs.ResourcePolicy(scope, "EventsToLogs", policy_statements=[iam.PolicyStatement(
        principals=[iam.ServicePrincipal("events.amazonaws.com"), iam.ServicePrincipal("delivery.logs.amazonaws.com")],
        actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn],
        conditions={"ArnEquals": {"aws:SourceArn": [retries.rule_arn, states.rule_arn]}})])
    return failed, retries


def queue_health_alarms(scope: Construct, *, queue_name: str, alerts: sns.ITopic,
                        stalled_minutes: Optional[int]) -> dict[str, cloudwatch.Alarm]:
    """The health alarms (one per rule, ``health_alarms.health_alarms``), each notifying ``alerts``."""
    alarms = health_alarms(scope, queue_name=queue_name, stalled_minutes=stalled_minutes)
    for alarm in alarms.values():
        alarm.add_alarm_action(cw_actions.SnsAction(alerts))
    return alarms


def stall_watcher(scope: Construct, *, queue_name: str, job_queue_arns: Sequence[str], environment: dict[str, str],
                  key: kms.IKey, removal_policy: RemovalPolicy) -> lambda_.Function:
    """The stall watcher (runtime/handlers/stall_watcher.py) of the queue's job queues, every 5 minutes: stops a RUNNING job
    whose progress heartbeat stopped for the stall rule's time + 15 minutes. ``environment``: the queue's health
    variables (``health_environment``), a job's settings where its own environment has none. Its log (one year,
    encrypted with ``key``) is the record of every job it stopped."""
    stack = Stack.of(scope)
    function = runtime_function(
        scope, "StallWatcher", handler="stall_watcher.handler", files=["stall_watcher.py", "health.py"],
        description=f"Training queue {queue_name}: stops a job whose progress heartbeat stopped (health rule stalled)",
        # A run takes seconds (a 1-minute timeout, a 5-minute schedule). Lambda retries a failed run twice, 1 and 2
        # minutes later (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html): each
        # retry lists and describes the jobs afresh, and acts only on a job still RUNNING without its tag.
        timeout=Duration.minutes(1),
        environment={"JOB_QUEUES": ",".join(job_queue_arns), "QUEUE_NAME": queue_name, **environment},
        log_group=logs.LogGroup(scope, "StallWatcherLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=key,
                                removal_policy=removal_policy))
    suppress_checkov(function, "CKV_AWS_116", "A scheduled check every 5 minutes: Lambda retries a failed run and the "
                     "next run judges afresh; a dead-letter queue would hold only stale schedule events")
    events.Rule(scope, "StallWatch", schedule=events.Schedule.rate(WATCH_EVERY),
                description=f"Training queue {queue_name}: the stall watcher, every 5 minutes",
                # an event EventBridge could not deliver is not kept: the next one comes 5 minutes later
                targets=[targets.LambdaFunction(function, retry_attempts=0)])
    # ListJobs and DescribeJobs have no resource-level permissions: "*" is the only resource they take
    # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html); the function lists
    # only its own job queues (JOB_QUEUES).
    function.add_to_role_policy(iam.PolicyStatement(
        sid="ListQueueJobs", actions=["batch:ListJobs", "batch:DescribeJobs"], resources=["*"]))
    # Only jobs it listed in its own job queues and found stalled; the tag it may put is its own record only.
    function.add_to_role_policy(iam.PolicyStatement(
        sid="StopStalledJobs", actions=["batch:TerminateJob"], resources=[stack_arn(stack, JOBS_ARN)]))
    function.add_to_role_policy(iam.PolicyStatement(
        sid="MarkStalledJobs", actions=["batch:TagResource"], resources=[stack_arn(stack, JOBS_ARN)],
        conditions={"ForAllValues:StringEquals": {"aws:TagKeys": [WATCHER_TAG]}}))
    # GetMetricData has no resource-level permissions; PutMetricData none either, bound to the namespace by its
    # condition key (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html).
    function.add_to_role_policy(iam.PolicyStatement(
        sid="ReadHeartbeats", actions=["cloudwatch:GetMetricData"], resources=["*"]))
    function.add_to_role_policy(iam.PolicyStatement(
        sid="PublishHealthStops", actions=["cloudwatch:PutMetricData"], resources=["*"],
        conditions={"StringEquals": {"cloudwatch:namespace": HEALTH_NAMESPACE}}))
    reason = ("ListJobs, DescribeJobs and GetMetricData have no resource-level permissions (reads); PutMetricData is "
              "bound to the MLPlatform/Health namespace by condition. TerminateJob and TagResource take only the job "
              "resource type, with no condition that names a queue; the function stops only RUNNING jobs it listed "
              "in its own job queues, and may put only its own tag.")
    Validations.of(function.role).acknowledge(
        Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=reason),
        Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, JOBS_ARN)}]", reason=reason))
    return function


def triggered_rules(rule: events.IRule, period: Duration, **kwargs) -> cloudwatch.Metric:
    """``AWS/Events TriggeredRules`` of one rule (Sum)."""
    options = {"period": period, "statistic": "Sum", **kwargs}
    return cloudwatch.Metric(namespace="AWS/Events", metric_name="TriggeredRules",
                             dimensions_map={"RuleName": rule.rule_name}, **options)


def queue_dashboard(scope: Construct, *, queue_name: str, log_group: logs.ILogGroup, period: Duration,
                    idle_threshold: float, spot_retries: cloudwatch.IMetric, failed_jobs: cloudwatch.IMetric,
                    gpu_utilization: cloudwatch.IMetric) -> cloudwatch.Dashboard:
    """Jobs by state, Spot retries and failed jobs, the queue's GPU utilization and each instance's, the jobs'
    goodput shares (productive, data wait, checkpoint saves), and their health (stops and warnings by rule, each job's
    progress heartbeat)."""
    return cloudwatch.Dashboard(scope, "Dashboard", widgets=[[
        cloudwatch.LogQueryWidget(
            title="Job state changes by state (Batch events logged by the queue)", width=12,
            log_group_names=[log_group.log_group_name],
            query_lines=["fields detail.status", "filter ispresent(detail.status)",
                         "stats count(*) by detail.status, bin(5m)"]),
        cloudwatch.GraphWidget(title="Spot retries and failed jobs", width=12, left=[spot_retries, failed_jobs]),
    ], [
        cloudwatch.GraphWidget(title="GPU utilization (%)", left=[gpu_utilization], width=12,
                               left_annotations=[cloudwatch.HorizontalAnnotation(value=idle_threshold,
                                                                                 label="idle threshold")]),
        # The {QueueName, InstanceId} aggregation the queue's CloudWatch agent publishes (gpu_agent_config).
        cloudwatch.GraphWidget(title="Instances (GPU utilization per instance)", width=12, left=[
            cloudwatch.MathExpression(
                label="", period=period,
                expression=f"SELECT AVG(nvidia_smi_utilization_gpu) FROM SCHEMA(\"{GPU_NAMESPACE}\", InstanceId, "
                           f"QueueName) WHERE QueueName = '{queue_name}' GROUP BY InstanceId")]),
    ], [
        goodput_widget(queue_name),  # the jobs' own shares: what no GPU counter says (why a GPU waits)
    ], health_widgets(queue_name)])  # stops and warnings by rule, each job's progress
