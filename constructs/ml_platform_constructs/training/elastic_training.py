"""ElasticTraining: a TrainingQueue's jobs grow from 1 to 8 nodes when it pays, and shrink when their GPUs idle.

A running AWS Batch job cannot change its node count (there is no UpdateJob); a submission can, through
``nodeOverrides.numNodes`` on a job definition whose node range is open (the queue's multi-node definition has
``"0:"``): https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeOverrides.html. So a resize is a restart from
a checkpoint, as in torchrun (``--nnodes=MIN:MAX``), Ray Train and SageMaker HyperPod: the job (``ml_platform_job``)
judges the policy, saves, writes its request and exits 86; this construct's function resubmits it at the new size
under the same name. Facts used: ../../../shared/BATCH.md ("Resizing a job").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from aws_cdk import Acknowledgment, Duration, Fn, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import ArnFormat
from constructs import Construct

from ..errors import ValidationError, refusal_leaves_no_node
from ..foundation.nag_support import AcknowledgeOwnWildcards, nag_arn, stack_arn, suppress_checkov
from ..foundation.runtime_function import runtime_function
from ..operations.jobs import MULTI_NODE_NODES
from ..runtime.handlers.elastic_controller import DECISION_PREFIX, REQUEST_FILE
from ..runtime.handlers.pending_jobs import PENDING_PATH
from ..runtime.handlers.retrain import EXPIRES_ATTRIBUTE
from .queue_jobs import definition_name

if TYPE_CHECKING:
    from .training_queue import TrainingQueue

FUNCTION_FILES = ("elastic_controller.py", "retrain.py", "pending_jobs.py")
DEFAULT_SIZES = (1, 2, 4, 8)
_JOBS_ARN = "arn:{partition}:batch:{region}:{account}:job/*"


def fitting_sizes(sizes: Sequence[int], node_vcpus: int, max_vcpus: int) -> list[int]:
    """The sizes whose nodes fit the multi-node environment together (1 runs on the single-node queue)."""
    return [s for s in sizes if s == 1 or s * node_vcpus <= max_vcpus]


def validate_elastic(owner: str, *, max_nodes: int, sizes: Optional[Sequence[int]], queue_name: str,
                     multi_node_entries: Sequence, multi_node_max_vcpus: int, single_node: bool, checkpoints: bool,
                     props: tuple[str, str] = ("elastic_max_nodes", "elastic_sizes")) -> list[int]:
    """The sizes an elastic job of the queue may run at (the ones its environments fit), or a ValidationError
    naming ``props`` (max nodes, sizes): what AWS Batch would leave RUNNABLE for ever fails at synth."""
    def fail(prop, value, allowed, fix):
        raise ValidationError(owner, prop, value, allowed, fix)

    max_prop, sizes_prop = props
    if not multi_node_entries:
        fail(max_prop, max_nodes, "unset (0) on a queue without a multi-node environment (a job grows past 1 node "
             "only there)", "give the queue multi_node_instance_types and multi_node_max_vcpus")
    if not checkpoints:
        fail(max_prop, max_nodes, "unset (0) on a queue without a dataset bucket (the resize requests lie beside the "
             "checkpoints)", "pass datasets= to the queue")
    low, high = MULTI_NODE_NODES
    if not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or not low <= max_nodes <= high:
        fail(max_prop, max_nodes, f"a whole number from {low} to {high}", "e.g. 8")
    sizes = tuple(s for s in DEFAULT_SIZES if s <= max_nodes) if sizes is None else tuple(sizes)
    if (not sizes or any(not isinstance(s, int) or isinstance(s, bool) or not 1 <= s <= max_nodes for s in sizes)
            or list(sizes) != sorted(set(sizes))):
        fail(sizes_prop, list(sizes), f"increasing whole numbers from 1 to {max_prop} ({max_nodes}), without "
             "repeats", "e.g. (1, 2, 4, 8)")
    node_vcpus = max(e.vcpus for e in multi_node_entries)
    if max_nodes * node_vcpus > multi_node_max_vcpus:
        fits = multi_node_max_vcpus // node_vcpus
        fail(max_prop, max_nodes, f"at most {fits}: queue {queue_name}'s multi_node_max_vcpus ({multi_node_max_vcpus}) "
             f"holds {fits} of its largest multi-node type ({node_vcpus} vCPUs), and a job of more nodes would wait "
             f"RUNNABLE for ever", f"lower {max_prop} to {fits}, or raise the queue's multi_node_max_vcpus to "
             f"{max_nodes * node_vcpus}")
    allowed = [s for s in fitting_sizes(sizes, node_vcpus, multi_node_max_vcpus) if s > 1 or single_node]
    if len(allowed) < 2:
        fail(sizes_prop, list(sizes), "at least two sizes the queue can run (1 needs single-node instance_types)",
             "e.g. (1, 2) on a queue with both environments, or (2, 4)")
    return allowed


@refusal_leaves_no_node
class ElasticTraining(Construct):
    """Elastic jobs on a TrainingQueue: a job submitted with ``--nodes MIN:MAX`` (``jobs.submit_job(nodes=(1, 8))``)
    runs at the size its policy chooses among ``sizes``, and this construct resubmits it at each resize.

    - One node runs on the queue's single-node Spot environment (the cheapest, for what one GPU node can do), two or
      more on its multi-node On-Demand environment with the placement group; a move between them is a resubmission
      from the same checkpoint, under the same name (the same run).
    - The function runs on the queue's jobs that end FAILED, acts on exit 86 only (the job's resize request: the
      queue's retry strategy ends it, it matches none of its RETRY entries), resubmits once per ended job (a claim in
      DynamoDB: an event delivered twice resubmits once), at the asked size where the multi-node environment's max
      vCPUs fit it (``fitting_sizes``; the size asked is never exceeded), never growing while a budget stop holds (the
      submission is kept pending for the guard's resume: no queue is turned on), and writes each decision beside the
      job's checkpoints (``resizes/<job id>.json``); ``alerts`` is told of each. Its errors alarm ``alerts``.
    - The policy (when a job asks) lives in the job, in plain Python: ``ml_platform_job.elastic`` (scale out on a
      validation plateau with busy GPUs, in on idle ones, snooze, payback against the measured restart).

    Attributes: ``function`` (main child ``Resource``), ``rule``, ``claims`` (the table), ``sizes`` (the sizes the
    queue fits, 1 included where it has single-node types).

    :param queue: a TrainingQueue of this app with a dataset bucket (the requests and decisions lie beside the
        checkpoints) and a multi-node environment (``multi_node_instance_types``, ``multi_node_max_vcpus``).
    :param alerts: told of every resize, refusal and pending record.
    :param max_nodes: the largest size a job may reach (2-8, Batch's and this platform's multi-node range). Synth
        fails where the multi-node environment cannot hold this many of its largest nodes. Default: 8.
    :param sizes: the sizes a job may run at (from 1 or 2 up to ``max_nodes``, increasing). Default: 1, 2, 4, 8 up
        to ``max_nodes``.
    :param removal_policy: of the claims table and the function's log group. Default: RETAIN.
    """

    def __init__(self, scope: Construct, id: str, *, queue: "TrainingQueue", alerts: sns.ITopic, max_nodes: int = 8,
                 sizes: Optional[Sequence[int]] = None, removal_policy: RemovalPolicy = RemovalPolicy.RETAIN) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("ElasticTraining", prop, value, allowed, fix)

        if not hasattr(queue, "multi_node_entries"):  # a TrainingQueue (this module cannot import its own user)
            fail("queue", type(queue).__name__, "a TrainingQueue of this app", "pass the TrainingQueue the jobs run on")
        allowed = validate_elastic("ElasticTraining", max_nodes=max_nodes, sizes=sizes, queue_name=queue.queue_name,
                                   multi_node_entries=queue.multi_node_entries,
                                   multi_node_max_vcpus=queue.multi_node_max_vcpus,
                                   single_node=queue.job_queue is not None,
                                   checkpoints=queue.checkpoint_root is not None, props=("max_nodes", "sizes"))
        super().__init__(scope, id)
        self.queue, self.sizes = queue, allowed
        self.claims = dynamodb.Table(
            self, "Claims", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=EXPIRES_ATTRIBUTE, billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=queue.key,
            removal_policy=removal_policy, point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True))
        environment = {"JOB_QUEUE": queue.job_queue_arn or "", "MULTI_NODE_JOB_QUEUE": queue.multi_node_job_queue_arn,
                       "SIZES": ",".join(map(str, allowed)), "CHECKPOINT_ROOT": queue.checkpoint_root,
                       "CLAIMS_TABLE": self.claims.table_name, "TOPIC_ARN": alerts.topic_arn,
                       "RECORD_KEY_ID": queue.key.key_arn}
        self.function = runtime_function(
            self, "Resource", handler="elastic_controller.handler", files=FUNCTION_FILES, timeout=Duration.seconds(60),
            description=f"Training queue {queue.queue_name}: resubmits an elastic job at the size it asked for",
            environment=environment, log_group=logs.LogGroup(
                self, "Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=removal_policy,
                encryption_key=queue.key))
        suppress_checkov(self.function, "CKV_AWS_116",
                         "EventBridge retries it; a failure gives its claim back and the errors alarm tells the alert "
                         "topic, so a resize that was not resubmitted is never silent")
        # https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html; the event's id survives
        # EventBridge's retries (the claims name it).
        self.rule = events.Rule(
            self, "ResizeRequests", description=f"Training queue {queue.queue_name}: a job ended (a resize asks 86)",
            event_pattern=events.EventPattern(source=["aws.batch"], detail_type=["Batch Job State Change"], detail={
                "jobQueue": [a for a in (queue.job_queue_arn, queue.multi_node_job_queue_arn) if a],
                "status": ["FAILED"]}),
            targets=[targets.LambdaFunction(self.function, retry_attempts=2)])
        self._grant(queue, alerts)
        self.function.metric_errors(period=Duration.minutes(5)).create_alarm(
            self, "FailingAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"Training queue {queue.queue_name}: the elastic controller fails (an elastic job may "
                              "not have been resubmitted: see its log group)",
        ).add_alarm_action(cw_actions.SnsAction(alerts))

    def _grant(self, queue: "TrainingQueue", alerts: sns.ITopic) -> None:
        stack = Stack.of(self)
        queues = [a for a in (queue.job_queue_arn, queue.multi_node_job_queue_arn) if a]
        # Every revision of the queue's two training definitions and of their "-submitted" copies (another image):
        # https://docs.aws.amazon.com/batch/latest/userguide/iam-example-restrict-job-submission.html
        definitions = [d for d in (queue.job_definition, queue.multi_node_job_definition) if d is not None]
        families = [stack.format_arn(service="batch", resource="job-definition", resource_name=f"{definition_name(d)}*",
                                     arn_format=ArnFormat.SLASH_RESOURCE_NAME) for d in definitions]
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="ResubmitTheJob", actions=["batch:SubmitJob"], resources=[*queues, *families]))
        # SubmitJob with tags (the job's own, carried over) needs TagResource on the new job, whose id is not known.
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="TagItAsItWas", actions=["batch:TagResource"], resources=[stack_arn(stack, _JOBS_ARN)]))
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="SeeTheJobAndItsQueues", actions=["batch:DescribeJobs", "batch:ListJobs", "batch:DescribeJobQueues",
                                                  "batch:DescribeJobDefinitions"],
            resources=["*"]))
        # The request the job wrote and the decision beside it, under the queue's checkpoints only (objects alone: no
        # listing of the bucket), with the bucket key's use for them.
        bucket = queue.datasets.bucket
        prefix = queue.checkpoint_prefix
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="ReadTheResizeRequest", actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(f"{prefix}*/{REQUEST_FILE}")]))
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="WriteItsDecision", actions=["s3:PutObject"],
            resources=[bucket.arn_for_objects(f"{prefix}*/{DECISION_PREFIX}*")]))
        if bucket.encryption_key is not None:
            bucket.encryption_key.grant(self.function, "kms:Decrypt", "kms:GenerateDataKey")
        # Its own pending records (resize-<job name>) under each of the queue's job queues' paths.
        names = [Fn.select(1, Fn.split("/", arn)) for arn in queues]
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="KeepItPendingWhileTheQueueIsStopped", actions=["ssm:PutParameter"],
            resources=[stack.format_arn(service="ssm", resource="parameter",
                                        resource_name=f"{PENDING_PATH.strip('/')}/{name}/resize-*") for name in names]))
        queue.key.grant_encrypt_decrypt(self.function)
        self.claims.grant(self.function, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
        alerts.grant_publish(self.function)
        Validations.of(self.function.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason="batch:DescribeJobs, batch:ListJobs and "
                           "batch:DescribeJobQueues have no resource-level permissions."),
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, _JOBS_ARN)}]",
                           reason="Tagging the job it resubmits with the ended job's tags: its id is not known before."),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                           reason="The queue's key encrypts the claims, the pending record and the alert topic."),
            Acknowledgment(id="AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
                           reason="CDK's encrypt-decrypt grant on the queue's key (claims table, pending record)."))
        policy = self.function.role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeOwnWildcards(policy, (
            ("job-definition/", "Every revision of the queue's two training definitions and their '-submitted' copies "
                                "(a job of another image): the ones an elastic job was submitted with."),
            (PENDING_PATH, "Its own pending records (resize-<job name>) in its queue's paths only."),
            (f"/{REQUEST_FILE}", "The resize requests under the queue's checkpoints only (one per job)."),
            (f"/{DECISION_PREFIX}", "Its decisions beside each job's checkpoints, under the queue's only."))))
