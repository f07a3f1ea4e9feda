"""What a TrainingQueue tells its operators: Batch job events (failed jobs to the alert topic, Spot retries and
every state change to the job log group), the metrics of those rules, and the queue's dashboard. The GPU alarms are
gpu_alarms.py's, shared with SpotGpuFleet.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jsii

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from .goodput_alarms import goodput_widget
from .instance_bootstrap import GPU_NAMESPACE


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


def triggered_rules(rule: events.IRule, period: Duration, **kwargs) -> cloudwatch.Metric:
    """``AWS/Events TriggeredRules`` of one rule (Sum)."""
    options = {"period": period, "statistic": "Sum", **kwargs}
    return cloudwatch.Metric(namespace="AWS/Events", metric_name="TriggeredRules",
                             dimensions_map={"RuleName": rule.rule_name}, **options)


def queue_dashboard(scope: Construct, *, queue_name: str, log_group: logs.ILogGroup, period: Duration,
                    idle_threshold: float, spot_retries: cloudwatch.IMetric, failed_jobs: cloudwatch.IMetric,
                    gpu_utilization: cloudwatch.IMetric) -> cloudwatch.Dashboard:
    """Jobs by state, Spot retries and failed jobs, the queue's GPU utilization and each instance's, and the jobs'
    goodput shares (productive, data wait, checkpoint saves)."""
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
    ]])
