"""A TrainingQueue's job definitions: the container a job runs in, its size, retries, timeout, volumes and logs.

The single-node definition, the multi-node one and every ``add_job_definition`` share one ``JobSettings``, so they
differ only in image, command and size. The retry strategy is what brings a job back from its last checkpoint
after a Spot reclaim. AWS Batch facts used here: ../../../shared/BATCH.md and the pages linked next to each use.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from aws_cdk import Acknowledgment, Annotations, Duration, Fn, Size, Stack, Token, Validations
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from ..data.dataset_bucket import DATASETS_PREFIX, EVALUATIONS_PREFIX, DatasetBucket
from ..data.dataset_snapshots import DatasetVolume
from ..errors import ValidationError
from .instance_bootstrap import RUN_DIR
from .goodput_alarms import BOUND_MINUTES, CHECKPOINT_BOUND_PERCENT, INPUT_BOUND_PERCENT, goodput_environment
from .health_alarms import HEALTH_MODE, STALLED_MINUTES, health_environment
from ..data.mlflow_tracking import MlflowTracking
from ..operations.jobs import MULTI_NODE_NODES, image_problem
from ml_platform_job.benchmark import BENCHMARK_NAMESPACE, BENCHMARK_PREFIX
from ml_platform_job.job_metrics import NAMESPACE as JOB_METRICS_NAMESPACE

JOB_NAMESPACE = JOB_METRICS_NAMESPACE  # what the job side publishes to (one name, the job's own)
# Batch retries: 1-10 attempts: https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html
ATTEMPTS = (1, 10)
# EFA device of the host passed into the container: https://docs.aws.amazon.com/batch/latest/userguide/efa.html
EFA_DEVICE = "/dev/infiniband/uverbs0"
# Memory the ECS agent and the OS keep back from an instance (jobs asking for all of it never start):
# https://docs.aws.amazon.com/batch/latest/userguide/memory-management.html
MEMORY_HEADROOM = 0.1


def smallest_fit(entries) -> tuple[int, int, int]:
    """GPUs, vCPUs and memory (MiB) a job can ask for and still fit every one of the types."""
    return (entries[0].gpu_count, min(e.vcpus for e in entries),
            int(min(e.memory_gib for e in entries) * 1024 * (1 - MEMORY_HEADROOM)))


def validate_job_props(image_uri: str, job_attempts: int, job_timeout: Duration) -> None:
    def fail(prop, value, allowed, fix):
        raise ValidationError("TrainingQueue", prop, value, allowed, fix)

    problem = None if Token.is_unresolved(image_uri) else image_problem(image_uri)
    if problem:
        fail("image_uri", image_uri, "an Amazon ECR image with a tag or digest (ACCOUNT.dkr.ecr.REGION.amazonaws.com/"
             f"REPO:TAG or @sha256:DIGEST): {problem}",
             "add the tag or digest, or push the image to ECR (AWS Deep Learning Containers are there too)")
    if not isinstance(job_attempts, int) or not ATTEMPTS[0] <= job_attempts <= ATTEMPTS[1]:
        fail("job_attempts", job_attempts, f"{ATTEMPTS[0]}-{ATTEMPTS[1]} (AWS Batch's range)",
             "e.g. 3: each Spot reclaim uses one attempt")
    if job_timeout.to_seconds() < 60:
        fail("job_timeout", job_timeout.to_human_string(), "at least 60 seconds (AWS Batch's minimum)",
             "e.g. Duration.hours(24)")


def job_size(scope: Construct, entries, job_vcpus: Optional[int], job_memory: Optional[Size]) -> tuple[int, int]:
    """vCPUs and memory (MiB) of a single-node job: the smallest type's unless given, and at most the largest's."""
    _, smallest_vcpus, smallest_memory = smallest_fit(entries)
    largest_vcpus = max(e.vcpus for e in entries)
    largest_memory = int(max(e.memory_gib for e in entries) * 1024 * (1 - MEMORY_HEADROOM))
    vcpus = job_vcpus or smallest_vcpus
    memory = int(job_memory.to_mebibytes()) if job_memory is not None else smallest_memory
    if not isinstance(vcpus, int) or not 1 <= vcpus <= largest_vcpus:
        raise ValidationError("TrainingQueue", "job_vcpus", job_vcpus, f"1-{largest_vcpus} (the largest type's "
                              "vCPUs): a job that fits no type waits RUNNABLE forever", "lower it or add larger types")
    if not 1024 <= memory <= largest_memory:
        raise ValidationError("TrainingQueue", "job_memory", f"{memory} MiB", f"1024-{largest_memory} MiB (90% of "
                              "the largest type's memory)", "lower it or add larger types")
    if vcpus > smallest_vcpus or memory > smallest_memory:
        Annotations.of(scope).add_warning_v2(
            "ml-platform:job-fits-some-types",
            f"job_vcpus={vcpus}, job_memory={memory} MiB fit only the larger types: Spot has fewer pools to use.")
    return vcpus, memory


def retry_strategies() -> list[batch.RetryStrategy]:
    """At most 5 entries (Batch's limit); the first that matches decides, and none matching means RETRY
    (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html)."""
    return list(_retry_strategies())


@functools.lru_cache(maxsize=None)
def _retry_strategies() -> tuple[batch.RetryStrategy, ...]:
    # Immutable values, made once per process: each is a round trip to the jsii kernel (docs/BENCHMARKS.md).
    return (
        # The host went away under the attempt: "Host EC2 (instance i-...) terminated." A Spot reclaim, and an
        # infrastructure update (a deploy that changed the launch template) that replaces an instance whose job ran
        # past the update policy's timeout. The Batch guide names no other reason for jobs an update ends:
        # https://docs.aws.amazon.com/batch/latest/userguide/updating-compute-environments.html
        batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.SPOT_INSTANCE_RECLAIMED),
        # The job checkpointed and exited on SIGTERM (128 + 15): the watcher's Spot signal, or ECS stopping the task
        # when Batch ends it for an update. Jobs stopped by TerminateJob or their own timeout are never retried.
        batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.custom(on_exit_code="143")),
        # Start-up failures on the instance (ECR throttling, agent or Docker trouble).
        batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.CANNOT_PULL_CONTAINER),
        batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.custom(on_reason="CannotStartContainerError*")),
        # Any other exit code of the job's own is final. An attempt that Batch ended without one (a reason no page
        # names) matches nothing here and is retried. A health stop (ml_platform_job.health: divergence, NaN, a
        # stall) exits 85 (HEALTH_STOPPED_EXIT_CODE) and ends the job here: none of the entries above matches it, and
        # Batch takes no more than these 5 entries, so it has no entry of its own (the order is tested with exit 85
        # and 143 in tests/unit/test_health_alarms.py).
        batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_exit_code="*")),
    )


def job_role(scope: Construct, queue_name: str, datasets: Optional[DatasetBucket],
             checkpoint_prefix: str, tracking: Optional[MlflowTracking] = None) -> iam.Role:
    """The role a job's container runs with: its progress and benchmark metrics, with a dataset bucket the
    datasets, its own checkpoints and the benchmark records, and with MLflow tracking its runs."""
    role = iam.Role(scope, "JobRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                    description=f"Training queue {queue_name} jobs")
    # Progress (job_metrics) and measured throughput (examples/gpu_benchmark.py) metrics.
    role.add_to_principal_policy(iam.PolicyStatement(
        sid="PublishJobProgress", actions=["cloudwatch:PutMetricData"], resources=["*"],
        conditions={"StringEquals": {"cloudwatch:namespace": [JOB_NAMESPACE, BENCHMARK_NAMESPACE]}}))
    Validations.of(role).acknowledge(Acknowledgment(
        id="AwsSolutions-IAM5[Resource::*]",
        reason="PutMetricData has no resource-level permissions; limited to the platform's training and "
               "benchmark namespaces by condition. DescribeJobs (ReadOwnJobAttempts) has none either: a read of job "
               "records, for the job's own lost attempt's end."))
    # The job-contract helper reads AWS Batch's stoppedAt of its own lost attempt, to bill it to its real end (not
    # its last checkpoint). DescribeJobs has no resource-level permissions: "*" is the only resource it takes
    # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html); it reads, changes nothing.
    role.add_to_principal_policy(iam.PolicyStatement(sid="ReadOwnJobAttempts", actions=["batch:DescribeJobs"],
                                                     resources=["*"]))
    if datasets is not None:
        datasets.grant_training(role, checkpoint_prefix=checkpoint_prefix, write_prefixes=[BENCHMARK_PREFIX],
                                owner="the queue's")
    if tracking is not None:
        tracking.grant_log_runs(role)
    return role


def evaluation_prefix(queue_name: str) -> str:
    """Where a queue's evaluation jobs write the promotion gate's evidence: ``evaluations/<queue>/``."""
    return f"{EVALUATIONS_PREFIX}{queue_name}/"


def evaluation_role(scope: Construct, queue_name: str, datasets: DatasetBucket, checkpoint_prefix: str) -> iam.Role:
    """The role of a queue's evaluation jobs: they score a candidate and the live model on the candidate's held-out
    examples and write the outcomes, the evidence ``./platform model promote`` judges. A training job's role cannot
    write there, so no training job can write its own (or another run's) evidence."""
    role = iam.Role(scope, "EvaluationRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                    description=f"Training queue {queue_name} evaluation jobs (promotion evidence)")
    datasets.grant_evaluation(role, checkpoint_prefix=checkpoint_prefix,
                              evaluation_prefix=evaluation_prefix(queue_name), owner="the queue's evaluation")
    return role


def container_environment(queue_name: str, datasets: Optional[DatasetBucket],
                          stop_timeout_seconds: Optional[int] = None, *,
                          input_bound_percent: Optional[float] = INPUT_BOUND_PERCENT,
                          checkpoint_bound_percent: Optional[float] = CHECKPOINT_BOUND_PERCENT,
                          bound_minutes: int = BOUND_MINUTES, health_mode: str = HEALTH_MODE,
                          stalled_minutes: Optional[int] = STALLED_MINUTES,
                          health_rules: Optional[Mapping[str, str]] = None,
                          elastic_sizes: Sequence[int] = (), elastic_node_types: str = "") -> dict[str, str]:
    """The job contract's variables every job of the queue gets (constructs/docs/JobContract.md; MLFLOW_TRACKING_URI
    is added per job definition, ``JobSettings.container``). A submission adds the job's own,
    ML_PLATFORM_CHECKPOINT_URI and ML_PLATFORM_JOB_NAME (ml_platform_constructs.operations.jobs).
    ``stop_timeout_seconds``: the instances' SIGTERM-to-SIGKILL time (the ECS agent's ECS_CONTAINER_STOP_TIMEOUT), told
    to the job as ML_PLATFORM_STOP_TIMEOUT_SECONDS: the job side saves on a stop only when the save fits in it.
    ``input_bound_percent``, ``checkpoint_bound_percent``, ``bound_minutes``: the queue's goodput alarms' (the same
    props), told to the job as its metrics' window and the thresholds past which it prints the fix
    (ML_PLATFORM_GOODPUT_WINDOW_SECONDS, ML_PLATFORM_INPUT_BOUND_PERCENT, ML_PLATFORM_CHECKPOINT_BOUND_PERCENT).
    ``health_mode``, ``stalled_minutes``, ``health_rules``: the queue's training-health settings (the same props),
    told to the job as ML_PLATFORM_HEALTH, ML_PLATFORM_HEALTH_STALL_SECONDS and ML_PLATFORM_HEALTH_RULES
    (``health_alarms.health_environment``)."""
    environment = {"ML_PLATFORM_QUEUE_NAME": queue_name, "ML_PLATFORM_STOP_FILE": f"{RUN_DIR}/stop-requested",
                   "ML_PLATFORM_JOB_NAMESPACE": JOB_NAMESPACE,
                   **goodput_environment(input_bound_percent=input_bound_percent,
                                         checkpoint_bound_percent=checkpoint_bound_percent,
                                         bound_minutes=bound_minutes),
                   **health_environment(mode=health_mode, stall_minutes=stalled_minutes, rules=health_rules)}
    if elastic_sizes:  # the queue's elastic controller resubmits at these sizes (the job's policy chooses among them)
        environment["ML_PLATFORM_ELASTIC_SIZES"] = ",".join(map(str, elastic_sizes))
        # what a node costs at each size: 1 node on the Spot types, 2 or more on the multi-node On-Demand ones
        environment["ML_PLATFORM_ELASTIC_NODE_TYPES"] = elastic_node_types
    if stop_timeout_seconds is not None:
        environment["ML_PLATFORM_STOP_TIMEOUT_SECONDS"] = str(stop_timeout_seconds)
    if datasets is not None:
        environment["ML_PLATFORM_DATASETS_URI"] = f"s3://{datasets.bucket_name}/{DATASETS_PREFIX}"
        environment["ML_PLATFORM_DATASET_BUCKET"] = datasets.bucket_name  # e.g. gpu_benchmark.py's records
    return environment


def job_volumes(dataset_volumes: Sequence[DatasetVolume]) -> list[batch.EcsVolume]:
    """The host's run directory (stop file, PID file, instance type) and each dataset volume, read-only."""
    return [batch.EcsVolume.host(name="ml-platform-run", host_path=RUN_DIR, container_path=RUN_DIR)] + [
        batch.EcsVolume.host(name=f"dataset-{v.name}", host_path=v.mount_point, container_path=v.mount_point,
                             readonly=True) for v in dataset_volumes]


def grant_image_pull(container: batch.EcsEc2ContainerDefinition, image_uri: str) -> None:
    """The execution role pulls the image from its ECR repository, in whatever account it lives (AWS Deep
    Learning Containers are in AWS's): https://docs.aws.amazon.com/AmazonECR/latest/userguide/ECR_on_ECS.html"""
    role = container.execution_role
    role.add_to_principal_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
    if Token.is_unresolved(image_uri):
        repository = "*"
    else:
        registry, path = image_uri.split("/", 1)
        account, _, _, region = registry.split(".")[:4]
        name = re.split(r"[:@]", path, maxsplit=1)[0]
        repository = f"arn:{Stack.of(container).partition}:ecr:{region}:{account}:repository/{name}"
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
        resources=[repository]))
    Annotations.of(container).acknowledge_warning(
        "@aws-cdk/aws-ecs:ecrImageRequiresPolicy", "The execution role is granted pulls from the image's repository.")
    Validations.of(role).acknowledge(Acknowledgment(
        id="AwsSolutions-IAM5[Resource::*]", reason="ecr:GetAuthorizationToken has no resource-level permissions."))


@dataclass(frozen=True)
class JobSettings:
    """What every job definition of one queue shares.

    :param queue_name: the log stream prefix.
    :param job_role: the role of the job's container.
    :param log_group: where the containers log (awslogs).
    :param environment: from ``container_environment``.
    :param volumes: from ``job_volumes``.
    :param attempts: attempts per job, Spot reclaims included.
    :param timeout: per attempt.
    :param tracking: where ml_platform_job.tracking records runs (``MLFLOW_TRACKING_URI``), as the stack of each job
        definition reads it (a definition may live in another stack: an endpoint's retraining job).
    """
    queue_name: str
    job_role: iam.IRole
    log_group: logs.ILogGroup
    environment: Mapping[str, str]
    volumes: Sequence[batch.EcsVolume]
    attempts: int
    timeout: Duration
    tracking: Optional[MlflowTracking] = None

    def container(self, scope: Construct, id: str, image_uri: str, size: tuple[int, int, int], *,
                  efa: bool = False, command: Sequence[str] = ()) -> batch.EcsEc2ContainerDefinition:
        """A container of ``size`` (GPUs, vCPUs, memory MiB) with the queue's role, variables, volumes and logs."""
        gpus, vcpus, memory_mib = size
        environment = dict(self.environment)
        if self.tracking is not None:
            environment["MLFLOW_TRACKING_URI"] = self.tracking.tracking_uri_for(scope)
        linux = batch.LinuxParameters(scope, f"{id}Linux", init_process_enabled=True,
                                      # PyTorch's DataLoader workers share tensors through /dev/shm (64 MiB by default).
                                      shared_memory_size=Size.mebibytes(memory_mib // 4))
        if efa:
            linux.add_devices(batch.Device(host_path=EFA_DEVICE, container_path=EFA_DEVICE, permissions=[
                batch.DevicePermission.READ, batch.DevicePermission.WRITE, batch.DevicePermission.MKNOD]))
        container = batch.EcsEc2ContainerDefinition(
            scope, id, image=ecs.ContainerImage.from_registry(image_uri), cpu=vcpus,
            memory=Size.mebibytes(memory_mib), gpu=gpus, job_role=self.job_role, command=list(command) or None,
            environment=environment, volumes=list(self.volumes), linux_parameters=linux,
            logging=ecs.LogDriver.aws_logs(stream_prefix=self.queue_name, log_group=self.log_group))
        grant_image_pull(container, image_uri)
        return container

    def single_node(self, scope: Construct, id: str, container: batch.EcsEc2ContainerDefinition) -> batch.EcsJobDefinition:
        return batch.EcsJobDefinition(scope, id, container=container, retry_attempts=self.attempts,
                                      retry_strategies=retry_strategies(), timeout=self.timeout, propagate_tags=True)

    def multi_node(self, scope: Construct, id: str, container: batch.EcsEc2ContainerDefinition) -> batch.MultiNodeJobDefinition:
        """A multi-node definition whose node range stays open: a submission picks 2-8 nodes."""
        definition = batch.MultiNodeJobDefinition(
            scope, id, main_node=0, retry_attempts=self.attempts, retry_strategies=retry_strategies(),
            timeout=self.timeout, propagate_tags=True,
            containers=[batch.MultiNodeContainer(container=container, start_node=0, end_node=MULTI_NODE_NODES[0] - 1)])
        resource = definition.node.default_child
        # An open node range ("0:") lets a submission choose 2-8 nodes with nodeOverrides.numNodes:
        # https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeOverrides.html
        resource.add_property_override("NodeProperties.NodeRangeProperties.0.TargetNodes", "0:")
        resource.add_property_override("NodeProperties.NumNodes", MULTI_NODE_NODES[0])
        return definition


def definition_name(definition: batch.IJobDefinition) -> str:
    """A job definition's name, from its ARN (``arn:PARTITION:batch:REGION:ACCOUNT:job-definition/NAME:REVISION``):
    aws-cdk-lib's ``MultiNodeJobDefinition.job_definition_name`` is its Ref, which is the whole ARN."""
    arn = definition.job_definition_arn
    return Fn.select(1, Fn.split("/", Fn.select(5, Fn.split(":", arn))))
