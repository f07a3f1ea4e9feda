"""EvaluationSubmitter: the promotion gate's evaluation jobs run the command deployed for their endpoint, whoever asks.

A queue's evaluation job definition has the role that alone writes the gate's evidence (``evaluations/<queue>/``).
AWS Batch's SubmitJob has no condition key on ``containerOverrides``
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html), so a principal allowed to
submit that definition (``TrainingQueue.grant_evaluate``) may override its command and write any evidence it likes.
This construct's function is the only submitter: a caller names the endpoint, the runs and their models, and the
function submits the endpoint's deployed command, with the evidence path and the held-out split it computes itself.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Mapping, Sequence

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct
from ml_platform_job.holdout import HOLDOUT_FRACTION

from ..data.dataset_bucket import MODELS_PREFIX
from ..errors import ValidationError, refusal_leaves_no_node
from ..foundation.nag_support import nag_arn, stack_arn, suppress_checkov
from ..foundation.runtime_function import runtime_function
from ..runtime.handlers.budget_guard import QUEUE_TAG
from ..runtime.handlers.evaluation_submitter import EVALUATION_TAG
from .queue_jobs import evaluation_prefix

if TYPE_CHECKING:
    from .training_queue import TrainingQueue

FUNCTION_FILES = ("evaluation_submitter.py",)
ENDPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Lambda refuses a function whose environment variables together exceed 4 KB
# (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html). The other variables take at most about
# 900 bytes (their names, the job queue's and the definition's ARNs of generated names up to 128 characters, the
# bucket's name of up to 63 three times); 2,800 leaves a margin for JSON escapes.
MAX_COMMANDS_BYTES = 2800
_JOBS_ARN = "arn:{partition}:batch:{region}:{account}:job/*"


@refusal_leaves_no_node
class EvaluationSubmitter(Construct):
    """The only submitter of a TrainingQueue's evaluation jobs: each runs the command deployed for its endpoint.

    - ``./platform model evaluate`` (or any holder of ``grant_submit``) invokes the function with the endpoint's name,
      the candidate run and its model, and the live run and its model (or none: the configured baseline). The
      function refuses an endpoint without a deployed command, a run id that is not one, and a model outside what the
      evaluation reads (the candidate under the queue's ``checkpoints/<queue>/``, the live model under ``models/``),
      and submits the queue's evaluation definition (its deployed revision) with the endpoint's command, the evidence
      path ``evaluations/<queue>/<run>/<live run or none>/`` and the platform's held-out split
      (``ml_platform_job.holdout``). The caller chooses no command, output or split.
    - A job of the same name, revision, command and variables still waiting or running is returned, not submitted
      again (a job that only shares the name is not followed).
    - A changed command is a deploy (``commands``): no running job ends (the next evaluation runs the new one).

    Attributes: ``function`` (main child ``Resource``), ``queue``, ``commands``.

    :param queue: a TrainingQueue with a dataset bucket (only then has it an evaluation job definition), in the stack the
        submitter is created in (its definition's revision ARN changes on update: no export of it).
    :param commands: endpoint name -> the evaluation job's command (``ml_platform_job.evaluation``'s contract), e.g.
        ``{"classifier": ["python", "/opt/ml/code/train.py", "--evaluate"]}``; 1 or more endpoints, names of 1-64
        letters, digits, ``.``, ``_`` or ``-``, each command a non-empty list of non-empty strings, all of them at most
        2,800 bytes as JSON (Lambda's 4 KB of environment variables).
    :param removal_policy: of the function's log group. Default: RETAIN.
    """

    def __init__(self, scope: Construct, id: str, *, queue: "TrainingQueue", commands: Mapping[str, Sequence[str]],
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("EvaluationSubmitter", prop, value, allowed, fix)

        if getattr(queue, "evaluation_job_definition", None) is None:
            fail("queue", getattr(queue, "queue_name", type(queue).__name__),
                 "a TrainingQueue with a DatasetBucket (only then has it an evaluation job definition)",
                 "pass datasets= to the queue")
        if Stack.of(scope) is not Stack.of(queue):
            fail("queue", queue.queue_name, "a TrainingQueue of the stack the submitter is created in: the function "
                 "names the evaluation definition's revision ARN, which changes on each deploy that revises it, and "
                 "CloudFormation refuses to update an export another stack imports", "create the EvaluationSubmitter "
                 "in the queue's stack")
        if not isinstance(commands, Mapping) or not commands:
            fail("commands", commands, "a mapping of at least one endpoint name to its evaluation command",
                 'e.g. {"classifier": ["python", "/opt/ml/code/train.py", "--evaluate"]}')
        for name, command in commands.items():
            if not isinstance(name, str) or not ENDPOINT_NAME.match(name):
                fail("commands", name, "endpoint names of 1-64 letters, digits, '.', '_' or '-'",
                     "key each command by its endpoint's name")
            if (isinstance(command, (str, bytes)) or not isinstance(command, Sequence) or not command
                    or any(not isinstance(part, str) or not part for part in command)):
                fail(f"commands[{name!r}]", command, "a non-empty list of non-empty strings (the job's argv)",
                     'e.g. ["python", "/opt/ml/code/train.py", "--evaluate"]')
        encoded = json.dumps({name: list(command) for name, command in sorted(commands.items())},
                             separators=(",", ":"))
        if len(encoded.encode()) > MAX_COMMANDS_BYTES:
            fail("commands", f"{len(encoded.encode())} bytes as JSON", f"at most {MAX_COMMANDS_BYTES} bytes (Lambda "
                 "refuses more than 4 KB of environment variables)", "put the arguments in a file the image holds and "
                 "pass its path")
        super().__init__(scope, id)
        self.queue = queue
        self.commands = {name: tuple(command) for name, command in commands.items()}
        bucket = queue.datasets.bucket_name
        environment = {
            "JOB_QUEUE": queue.job_queue_arn,  # (a queue has an evaluation definition only with its single-node queue)
            "JOB_DEFINITION": queue.evaluation_job_definition.job_definition_arn, "QUEUE_NAME": queue.queue_name,
            "COMMANDS": encoded, "CANDIDATE_PREFIX": f"s3://{bucket}/{queue.checkpoint_prefix}",
            "LIVE_PREFIX": f"s3://{bucket}/{MODELS_PREFIX}",
            "EVIDENCE_PREFIX": f"s3://{bucket}/{evaluation_prefix(queue.queue_name)}",
            "HOLDOUT_SALT": "", "HOLDOUT_FRACTION": str(HOLDOUT_FRACTION)}
        self.function = runtime_function(
            self, "Resource", handler="evaluation_submitter.handler", files=FUNCTION_FILES,
            timeout=Duration.seconds(30), environment=environment,
            description=f"Training queue {queue.queue_name}: submits an evaluation job with its endpoint's command",
            log_group=logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_YEAR,
                                    removal_policy=removal_policy, encryption_key=queue.key))
        suppress_checkov(self.function, "CKV_AWS_116", "Invoked synchronously by an operator's command, which gets "
                         "the error itself: a dead-letter queue would hold nothing")
        stack = Stack.of(self)
        # The deployed revision only (its Ref is the revision's ARN) on the queue; tags need TagResource on the new job.
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="SubmitTheEvaluation", actions=["batch:SubmitJob"],
            resources=[environment["JOB_QUEUE"], environment["JOB_DEFINITION"]]))
        # Its two tag keys (the queue's; an evaluation, which the budget guard does not resubmit), no other. No
        # condition on their values: Batch documents no request tags in the TagResource check SubmitJob makes, and
        # a value condition without them would refuse every submission (the values are the function's own code's).
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="TagTheEvaluation", actions=["batch:TagResource"], resources=[stack_arn(stack, _JOBS_ARN)],
            conditions={"ForAllValues:StringEquals": {"aws:TagKeys": [QUEUE_TAG, EVALUATION_TAG[0]]}}))
        # ListJobs and DescribeJobs have no resource-level permissions:
        # https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html
        self.function.add_to_role_policy(iam.PolicyStatement(
            sid="FindTheSameEvaluation", actions=["batch:ListJobs", "batch:DescribeJobs"], resources=["*"]))
        Validations.of(self.function.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason="batch:ListJobs and batch:DescribeJobs have no "
                           "resource-level permissions."),
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_arn(stack, _JOBS_ARN)}]",
                           reason="Tagging the job it submits (its id is not known before) with its two tag keys only."))

    def grant_submit(self, grantee: iam.IGrantable) -> iam.Grant:
        """What ``./platform model evaluate`` needs: invoke the function, and describe the job it submitted (to wait
        for it). No ``batch:SubmitJob``: the grantee chooses no command."""
        grant = self.function.grant_invoke(grantee)
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:DescribeJobs"], resource_arns=["*"])
        return grant
