"""TrainingQueue: training jobs that run to completion on Spot GPUs, on AWS Batch.

AWS Batch is the scheduler (we never write one): it scales the compute environments from zero, places each
job on an instance its GPUs, vCPUs and memory fit, and retries an attempt by its exit reason. This construct
adds what a training job needs around it: the platform's instance bootstrap (GPU metrics, interruption
watcher, dataset volumes; shared with SpotGpuFleet), a retry strategy that brings a job back from its last
checkpoint after every Spot reclaim, alerts on failed jobs, GPU alarms and a dashboard.

This module is the queue itself (props, the job queues, metrics and grants); its parts read on their own, as
aws-cdk-lib's aws-batch module splits them:
- queue_compute.py: the launch template and the compute environments;
- queue_jobs.py: the job role, containers, job definitions and their retry strategy;
- queue_monitoring.py: job events, their metrics and the dashboard (the GPU alarms are gpu_alarms.py's).
AWS Batch facts used here: ../../../shared/BATCH.md and the pages linked next to each use.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Optional, Sequence, Union

from aws_cdk import Annotations, ArnFormat, Duration, RemovalPolicy, Size, Stack, Tags, Token
from aws_cdk import aws_batch as batch
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..data.dataset_bucket import DatasetBucket
from ..data.dataset_snapshots import DatasetVolume
from ..errors import ValidationError, refusal_leaves_no_node
from ..governance.scope import ACCOUNT_SCOPE, govern, validate_budget_scope
from .goodput_alarms import (BOUND_MINUTES, CHECKPOINT_BOUND_PERCENT, INPUT_BOUND_PERCENT, goodput_alarms,
                             validate_goodput_props)
from .health_alarms import (HEALTH_MODE, STALLED_MINUTES, health_environment, validate_health_props,
                            watcher_needed)
from .gpu_alarms import (as_instance_types, gpu_alarms, gpu_memory_used_ratio, gpu_metric, validate_alarm_props,
                         validate_gpu_types)
from .elastic_training import ElasticTraining, validate_elastic
from .queue_jobs import definition_name
from .instance_bootstrap import validate_dataset_volumes
from ..operations.jobs import (CHECKPOINT_ROOT_TAG, DEFINITION_TAG, EVALUATION, MULTI_NODE, SINGLE_NODE, image_problem,
                               is_tagged_ecr_image)
from ..data.mlflow_tracking import MlflowTracking
from ..foundation.network import require_private_subnets
from ..foundation.platform_key import allow_log_groups
from .queue_compute import (EFA_INSTALL, ROOT_DEVICE, STOP_TIMEOUT_SECONDS, ComputeSettings, attach_efa,
                            check_default_security_group, ecs_agent_config, multi_node_network, multi_node_subnet,
                            omit_state, own_tags_only, require_endpoints_without_egress, require_x86,
                            validate_capacity,
                            update_timeout_for, validate_multi_node)
from .queue_jobs import (ATTEMPTS, EFA_DEVICE, JOB_NAMESPACE, MEMORY_HEADROOM, MULTI_NODE_NODES, JobSettings,
                         container_environment, evaluation_role, job_role, job_size, job_volumes,
                         smallest_fit, validate_job_props)
from .queue_jobs import retry_strategies as _retry_strategies
from .queue_monitoring import (LogGroupTarget, job_event_rules, queue_dashboard, queue_health_alarms, stall_watcher,
                               triggered_rules)
from ..runtime.handlers.budget_guard import BUDGET_SCOPE_TAG, QUEUE_TAG

# The names this module has always offered, wherever they live now.
__all__ = ["ATTEMPTS", "EFA_DEVICE", "EFA_INSTALL", "JOB_NAMESPACE", "MEMORY_HEADROOM", "MULTI_NODE_NODES", "QUEUE_TAG",
           "ROOT_DEVICE", "STOP_TIMEOUT_SECONDS", "LogGroupTarget", "TrainingQueue", "definitions_of",
           "ecs_agent_config", "is_tagged_ecr_image", "smallest_fit"]


@refusal_leaves_no_node
class TrainingQueue(Construct):
    """An AWS Batch job queue that runs GPU training jobs to completion on Spot, resuming from checkpoints.

    Defaults, and why (README, "TrainingQueue"):

    - a managed EC2 (ECS) compute environment on Spot with ``SPOT_PRICE_CAPACITY_OPTIMIZED``, 0 vCPUs when idle,
      across every given type (one GPU shape, at least 4 types, validated like a fleet's), on the NVIDIA ECS
      image ``ECS_AL2023_NVIDIA`` set explicitly (aws-cdk-lib's default for GPU types is still AL2);
    - optional On-Demand environment behind Spot (``on_demand_max_vcpus``). Batch does not fail over by itself:
      a job waits RUNNABLE in the first environment that has room, and goes to the On-Demand one only while the
      Spot one is at its ``max_vcpus`` (https://docs.aws.amazon.com/batch/latest/userguide/job_queues.html);
    - its own launch template (IMDSv2, encrypted gp3 root, the platform bootstrap shared with SpotGpuFleet:
      GPU metrics with the queue as a dimension, interruption watcher, dataset volumes);
    - on a Spot notice the watcher sends the job's container SIGTERM and ECS waits ``stop_timeout`` before
      SIGKILL; the attempt ends as "Host EC2 ... terminated" (or with exit code 143) and is retried; the job's
      own non-zero exit is not;
    - a job definition sized to the smallest type (all its GPUs, its vCPUs, 90% of its memory), logs in a log
      group encrypted with ``key``, a timeout;
    - a deploy that changes the instances (an infrastructure update) lets running jobs go on for their own timeout
      (at most 5 days) and terminates none; new jobs get the new instances;
    - failed jobs reach ``alerts`` with their status reason and attempts; Spot retries are counted; GPU idle and
      memory alarms per queue notify ``alerts``; a dashboard;
    - training health (``ml_platform_job.health``): the job definitions tell every job the queue's health settings, so
      a job that uses the platform's helper stops itself when it diverges, produces NaN or stalls (exit 85, which the
      retry strategy does not retry: its EXIT entry on "*"); each stop notifies ``alerts`` through the rule's alarm,
      with the fix; a stall watcher stops a job whose progress heartbeat stopped and which could not stop itself.

    :param vpc: where the instances run.
    :param instance_types: Spot GPU types from ``gpu_catalog.GPU_CATALOG``: x86_64, one GPU count, GPU memory
        within 2x, at least 4 types. Empty for a multi-node-only queue (``multi_node_instance_types`` given): no Spot
        environment, single-node job queue, job definition or evaluation definition (those attributes are None),
        and ``max_vcpus``, ``on_demand_max_vcpus``, ``job_vcpus`` and ``job_memory`` do not apply. Default: none,
        which needs ``multi_node_instance_types``.
    :param image_uri: the job definition's container image, in Amazon ECR (``ACCOUNT.dkr.ecr.REGION.amazonaws.com/
        REPO:TAG`` or ``@sha256:``). ``./platform job submit --image`` registers a revision with another image.
    :param alerts: the environment's alert topic.
    :param key: encrypts the job log group (kept as ``.key``: RetrainOnDrift encrypts its logs with it too). A
        key of this app gets the CloudWatch Logs statement (once per key); an imported key fails at synth unless
        ``key_policy_has(key, LOGS_SERVICE)`` declares it.
    :param vpc_subnets: Default: the VPC's private subnets, every AZ. Subnets whose instances would get public
        addresses (public subnets, subnets of this app that map public IPs or route to an internet gateway) fail
        synth unless ``allow_public_subnets``.
    :param allow_public_subnets: accept such subnets, with a warning. Default: False.
    :param datasets: the environment's DatasetBucket: jobs read ``datasets/`` and read and write
        ``checkpoints/<queue_name>/``. With it, the queue also has an evaluation job definition
        (``.evaluation_job_definition``, tag ``ml-platform:job-definition=evaluation``) whose role
        (``.evaluation_role``) reads datasets, candidates' models and ``models/``, and alone writes
        ``evaluations/<queue_name>/``: the promotion gate's evidence (``./platform model evaluate``). Default: no
        bucket access (and no evaluation definition).
    :param queue_name: names the checkpoint prefix, the queue tag and the QueueName dimension. Default: the construct id.
    :param max_vcpus: Spot vCPUs at most (Batch may exceed it by one instance). Default: 256.
    :param on_demand_max_vcpus: an On-Demand environment behind Spot with this cap; 0 for none. Default: 0.
    :param multi_node_instance_types: EFA-capable types for multi-node parallel jobs (On-Demand only, one AZ,
        cluster placement group), in a job queue of their own. Default: none.
    :param multi_node_max_vcpus: vCPUs of the multi-node environment, room for at least 2 nodes. Default: 0.
    :param multi_node_efa: attach an EFA to each multi-node instance. Batch then refuses the environment's security
        groups, so each node's container interface is in the VPC's default security group (a warning; a synth error
        where CDK emptied that group); the boot installs the EFA driver (needs a NAT gateway). Default: False: the
        nodes talk over the VPC network in the queue's own multi-node security group.
    :param elastic_max_nodes: elastic jobs (``job submit --nodes MIN:MAX``) of up to this many nodes (2-8): the queue
        gets their controller (``.elastic``, an ``ElasticTraining``) and its jobs the sizes they may run at
        (``ML_PLATFORM_ELASTIC_SIZES``). Synth fails where ``multi_node_max_vcpus`` cannot hold this many of the
        largest multi-node type, or the queue has no multi-node environment or dataset bucket. Default: 0, none.
    :param elastic_sizes: the sizes an elastic job may run at. Default: 1, 2, 4, 8 up to ``elastic_max_nodes``.
    :param job_attempts: attempts per job (1-10), Spot reclaims included. Default: 3.
    :param job_timeout: an attempt running longer is stopped (and not retried). Default: 24 hours.
    :param job_vcpus: vCPUs per job. Default: the smallest type's.
    :param job_memory: memory per job. Default: 90% of the smallest type's.
    :param stop_timeout: SIGTERM to SIGKILL (30-115 s, inside the 2-minute Spot notice). Default: 110 seconds.
    :param root_volume_size: Default: 200 GiB (training images are large).
    :param dataset_volumes: dataset snapshots each instance mounts read-only at ``/data/<name>``, passed into the
        job's container at the same path. Default: none.
    :param idle_threshold_percent / idle_evaluation_periods / alarm_period / memory_pressure_threshold: as
        SpotGpuFleet's (40, 3, 5 minutes, 0.7).
    :param input_bound_percent / checkpoint_bound_percent / bound_minutes: the goodput alarms
        (``alarms["input_bound"]``, ``alarms["checkpoint_bound"]``, to ``alerts``): a job's data wait over
        ``input_bound_percent`` of its step time, or its checkpoint saves over ``checkpoint_bound_percent`` of its
        time, over the trailing ``bound_minutes`` (a multiple of the alarms' 5-minute period). The job-contract helper
        prints those shares every minute, also while a job is blocked in its loader or a save
        (``ml_platform_job.phase_clock``; the job definition tells it the window and thresholds); an alarm needs the
        largest job's share over the threshold in all but one of the ``bound_minutes`` / 5 periods (5 of 6 by
        default: one late or lost log line does not reset it). No job stepping, no data, no alarm. Each alarm's
        text carries the fix for each of the queue's instance types. Default: 30, 10 and 30 (measured: no false alarm in 500 simulated healthy job-days; a 35% input-bound job
        alarms in about 52 minutes, a stalled loader 31 minutes into the stall). A threshold of None
        switches that alarm off (it is then absent from ``alarms``, and the job prints no hint for it).
    :param health_mode: the training-health rules' default for every job of the queue (``ML_PLATFORM_HEALTH``;
        a submission's own environment, or the script's ``TrainingJob.start(health=...)``, overrides it): "stop" (each
        rule's own action, ``ml_platform_job.health.DEFAULT_ACTIONS``: NaN, divergence, exploding or vanishing
        gradients, a loss that never falls and a stall stop the job with exit 85, which the queue never retries; a
        plateau and overfitting warn), "warn" (every stop becomes a warning in the
        job's log and on the dashboard, the job trains on, the stall watcher stops nothing: a team's first runs) or
        "off" (no rule, no stall watcher). A stop notifies ``alerts`` through the rule's alarm
        (``health_alarms[rule]``: ``MLPlatform/Health HealthStop`` {Queue, Rule} >= 1 in a 5-minute period), whose
        text holds the rule's fix; warnings are charted only. Every rule has its alarm, whatever the mode: a job may
        turn a rule to stop by itself. Default: "stop".
    :param stalled_minutes: the stall rule's time without a step, evaluation batch or ``progress()`` (10-1440 whole
        minutes; ``ML_PLATFORM_HEALTH_STALL_SECONDS``). The queue's stall watcher (a function every 5 minutes,
        ``.stall_watcher``) stops a RUNNING job whose progress heartbeat was silent for ``stalled_minutes`` + 15
        minutes after it sent one before (TerminateJob, not retried; ``HealthStop`` {Rule=stalled}): a job that hung
        where its own rule could not act. A job that never sent a heartbeat (no platform helper) is never stopped.
        None turns the stall rule and the watcher off. Default: 30 (Debugger's StalledTrainingRule).
    :param health_rules: a rule's own action over its default (``{"overfit": "stop", "vanishing_gradients": "off"}``;
        ``ML_PLATFORM_HEALTH_RULES``), rules of ``ml_platform_job.health.RULES``, actions stop, warn or off. Default:
        none (each rule's default).
    :param allow_low_diversity / allow_mixed_gpu_memory: as SpotGpuFleet's. Default: False.
    :param removal_policy: of the log group. Default: RETAIN.
    :param budget_scope: the ``BudgetGuard`` scope that may stop this queue (tag ``ml-platform:budget-scope`` on
        its job queues, compute environments and instances). Default: ``"account"``, as the guard's.
    :param tracking: the environment's MlflowTracking: jobs may record runs in it (``grant_log_runs``) and find it
        as ``MLFLOW_TRACKING_URI``. Default: none.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        image_uri: str,
        alerts: sns.ITopic,
        key: kms.IKey,
        instance_types: Sequence[Union[ec2.InstanceType, str]] = (),
        vpc_subnets: Optional[ec2.SubnetSelection] = None,
        datasets: Optional[DatasetBucket] = None,
        queue_name: Optional[str] = None,
        max_vcpus: int = 256,
        on_demand_max_vcpus: int = 0,
        multi_node_instance_types: Sequence[Union[ec2.InstanceType, str]] = (),
        multi_node_max_vcpus: int = 0,
        multi_node_efa: bool = False,
        job_attempts: int = 3,
        job_timeout: Duration = Duration.hours(24),
        job_vcpus: Optional[int] = None,
        job_memory: Optional[Size] = None,
        stop_timeout: Duration = Duration.seconds(110),
        root_volume_size: Size = Size.gibibytes(200),
        dataset_volumes: Sequence[DatasetVolume] = (),
        idle_threshold_percent: float = 40,
        idle_evaluation_periods: int = 3,
        alarm_period: Duration = Duration.minutes(5),
        memory_pressure_threshold: Optional[float] = 0.7,
        input_bound_percent: Optional[float] = INPUT_BOUND_PERCENT,
        checkpoint_bound_percent: Optional[float] = CHECKPOINT_BOUND_PERCENT,
        bound_minutes: int = BOUND_MINUTES,
        health_mode: str = HEALTH_MODE,
        stalled_minutes: Optional[int] = STALLED_MINUTES,
        health_rules: Optional[Mapping[str, str]] = None,
        allow_low_diversity: bool = False,
        allow_public_subnets: bool = False,
        allow_mixed_gpu_memory: bool = False,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        budget_scope: str = ACCOUNT_SCOPE,
        tracking: Optional[MlflowTracking] = None,
        elastic_max_nodes: int = 0,
        elastic_sizes: Optional[Sequence[int]] = None,
    ) -> None:
        super().__init__(scope, id)
        # --- every prop is checked before anything is created ---
        self.queue_name = queue_name or id
        instance_types = as_instance_types("TrainingQueue", "instance_types", instance_types)
        multi_node_instance_types = as_instance_types("TrainingQueue", "multi_node_instance_types",
                                                      multi_node_instance_types)
        validate_budget_scope("TrainingQueue", budget_scope)
        self.budget_scope = budget_scope
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$", self.queue_name):
            raise ValidationError("TrainingQueue", "queue_name", self.queue_name,
                                  "1-40 letters, digits, '_' or '-', starting with a letter or digit", "rename the queue")
        validate_job_props(image_uri, job_attempts, job_timeout)
        stop_timeout_seconds = validate_capacity(max_vcpus, on_demand_max_vcpus, stop_timeout)
        self.multi_node_only = not instance_types and bool(multi_node_instance_types)
        if self.multi_node_only:
            for prop, value in (("on_demand_max_vcpus", on_demand_max_vcpus), ("job_vcpus", job_vcpus),
                                ("job_memory", job_memory)):
                if value:
                    raise ValidationError("TrainingQueue", prop, value if not isinstance(value, Size) else
                                          f"{value.to_mebibytes():g} MiB",
                                          "unset on a multi-node-only queue (instance_types empty): it sizes the "
                                          "single-node environment and jobs, which such a queue has not",
                                          f"remove {prop}, or give instance_types for single-node jobs too")
        self.multi_node_entries = validate_multi_node(self, multi_node_instance_types, multi_node_max_vcpus)
        if self.multi_node_only:
            self.catalog_entries = self.multi_node_entries
        else:
            self.catalog_entries = validate_gpu_types(self, "TrainingQueue", instance_types,
                                                      allow_low_diversity=allow_low_diversity,
                                                      allow_mixed_gpu_memory=allow_mixed_gpu_memory,
                                                      fix_if_empty="give Spot GPU types, or "
                                                      "multi_node_instance_types for a multi-node-only queue")
            require_x86("instance_types", self.catalog_entries)
        if multi_node_efa and not self.multi_node_entries:
            raise ValidationError("TrainingQueue", "multi_node_efa", True, "False without multi_node_instance_types",
                                  "add EFA types or leave multi_node_efa unset")
        self.elastic_sizes: list[int] = []
        if elastic_max_nodes:
            self.elastic_sizes = validate_elastic(
                "TrainingQueue", max_nodes=elastic_max_nodes, sizes=elastic_sizes, queue_name=self.queue_name,
                multi_node_entries=self.multi_node_entries, multi_node_max_vcpus=multi_node_max_vcpus,
                single_node=not self.multi_node_only, checkpoints=datasets is not None)
        elif elastic_sizes is not None:
            raise ValidationError("TrainingQueue", "elastic_sizes", list(elastic_sizes), "unset without "
                                  "elastic_max_nodes", "set elastic_max_nodes (2-8) too, or remove elastic_sizes")
        one_az = None
        if self.multi_node_entries:
            one_az = multi_node_subnet(vpc, vpc_subnets, self.multi_node_entries, efa=multi_node_efa)
            if multi_node_efa:
                check_default_security_group(self, vpc)
        require_private_subnets(self, "TrainingQueue", vpc, vpc_subnets, allow_public_subnets)
        require_endpoints_without_egress(vpc, vpc_subnets, self)
        if tracking is not None:
            tracking.check_clients("TrainingQueue", vpc, vpc_subnets)
        validate_alarm_props("TrainingQueue", idle_threshold_percent=idle_threshold_percent,
                             idle_evaluation_periods=idle_evaluation_periods, alarm_period=alarm_period,
                             memory_pressure_threshold=memory_pressure_threshold)
        validate_dataset_volumes(self, "TrainingQueue", dataset_volumes)
        validate_goodput_props("TrainingQueue", input_bound_percent=input_bound_percent,
                               checkpoint_bound_percent=checkpoint_bound_percent, bound_minutes=bound_minutes)
        health_rules = validate_health_props("TrainingQueue", health_mode=health_mode, stalled_minutes=stalled_minutes,
                                             health_rules=health_rules)
        self.gpus_per_job = self.catalog_entries[0].gpu_count
        self.multi_node_job_size = smallest_fit(self.multi_node_entries) if self.multi_node_entries else None
        self.job_vcpus = self.job_memory_mib = None
        if not self.multi_node_only:
            self.job_vcpus, self.job_memory_mib = job_size(self, self.catalog_entries, job_vcpus, job_memory)
        self.checkpoint_prefix = DatasetBucket.checkpoint_prefix(self.queue_name)
        self._period = alarm_period
        allow_log_groups(key, construct="TrainingQueue", prop="key")
        self.key = key
        self.datasets = datasets
        self.multi_node_max_vcpus = multi_node_max_vcpus
        self._checkpoint_root = f"s3://{datasets.bucket_name}/{self.checkpoint_prefix}" if datasets else None
        Tags.of(self).add(QUEUE_TAG, self.queue_name)
        govern(self, budget_scope)

        # --- compute (queue_compute.py) and jobs (queue_jobs.py) ---
        self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                description=f"Training queue {self.queue_name}: no inbound")
        self.log_group = logs.LogGroup(self, "JobLogs", encryption_key=key, retention=logs.RetentionDays.THREE_MONTHS,
                                       removal_policy=removal_policy)
        self.job_role = job_role(self, self.queue_name, datasets, self.checkpoint_prefix, tracking)
        compute = ComputeSettings(
            queue_name=self.queue_name, budget_scope=budget_scope, stop_timeout_seconds=stop_timeout_seconds,
            environment={"AWS_REGION": Stack.of(self).region, "ML_PLATFORM_SIGNAL_CONTAINERS": "ecs",
                         "ML_PLATFORM_QUEUE_NAME": self.queue_name},
            root_volume_size=root_volume_size, dataset_volumes=tuple(dataset_volumes),
            update_timeout_minutes=update_timeout_for(job_timeout))
        # The Spot and On-Demand environments' template (a multi-node-only queue has none: its nodes have their own).
        self.launch_template = None if self.multi_node_only else compute.launch_template(self, "LaunchTemplate")

        self.spot_environment = self.on_demand_environment = self.job_queue = self.job_queue_arn = None
        self.job_definition = self.evaluation_role = self.evaluation_job_definition = None
        self._jobs = JobSettings(
            queue_name=self.queue_name, job_role=self.job_role, log_group=self.log_group,
            environment=container_environment(self.queue_name, datasets, stop_timeout_seconds,
                                              input_bound_percent=input_bound_percent,
                                              checkpoint_bound_percent=checkpoint_bound_percent,
                                              bound_minutes=bound_minutes, health_mode=health_mode,
                                              stalled_minutes=stalled_minutes, health_rules=health_rules,
                                              elastic_sizes=self.elastic_sizes,
                                              elastic_node_types=";".join(
                                                  f"{kind}:{','.join(t.to_string() for t in types)}"
                                                  for kind, types in (("spot", instance_types),
                                                                      ("on-demand", multi_node_instance_types))
                                                  if types)),
            volumes=job_volumes(dataset_volumes), attempts=job_attempts, timeout=job_timeout, tracking=tracking)
        if not self.multi_node_only:
            self._single_node(compute, vpc, vpc_subnets, instance_types, max_vcpus, on_demand_max_vcpus, image_uri)
        if datasets is not None and not self.multi_node_only:
            # The promotion gate's evidence (README, "Promotion"): the same container, a role of its own.
            self.evaluation_role = evaluation_role(self, self.queue_name, datasets, self.checkpoint_prefix)
            evaluation = replace(self._jobs, job_role=self.evaluation_role)
            container = evaluation.container(self, "EvaluationContainer", image_uri,
                                             (self.gpus_per_job, self.job_vcpus, self.job_memory_mib))
            self.evaluation_job_definition = evaluation.single_node(self, "EvaluationJobDefinition", container)
            self._own_definition(self.evaluation_job_definition, EVALUATION)

        self.multi_node_environment = self.multi_node_job_queue = self.multi_node_job_definition = None
        self.multi_node_job_queue_arn = None
        if self.multi_node_entries:
            self._multi_node(compute, vpc, one_az, multi_node_instance_types, multi_node_max_vcpus, image_uri,
                             efa=multi_node_efa)

        # --- events, alarms and the dashboard (queue_monitoring.py, gpu_alarms.py) ---
        self.failed_jobs_rule, self.spot_retries_rule = job_event_rules(
            self, queue_name=self.queue_name, job_queue_arns=self._job_queue_arns(), alerts=alerts,
            log_group=self.log_group)
        self.idle_alarm, self.memory_alarm = gpu_alarms(
            self, subject=f"Training queue {self.queue_name}", utilization=self.metric_gpu_utilization(),
            memory_used_ratio=self.metric_gpu_memory_used_ratio(), idle_threshold_percent=idle_threshold_percent,
            evaluation_periods=idle_evaluation_periods, memory_pressure_threshold=memory_pressure_threshold,
            actions=[cw_actions.SnsAction(alerts)],
            idle_note="A running job whose GPUs sit this low is starved by its input pipeline (data loading, "
                      "preprocessing): see the TrainingQueue page of the library docs. An empty queue publishes nothing and does not alarm.")
        input_bound, checkpoint_bound = goodput_alarms(
            self, queue_name=self.queue_name, instance_types=[e.name for e in self.catalog_entries],
            input_bound_percent=input_bound_percent,
            checkpoint_bound_percent=checkpoint_bound_percent, bound_minutes=bound_minutes)
        # The queue's alarms by name (memory: absent with memory_pressure_threshold=None).
        self.alarms = {name: alarm for name, alarm in (("idle", self.idle_alarm), ("memory", self.memory_alarm),
                                                       ("input_bound", input_bound),
                                                       ("checkpoint_bound", checkpoint_bound)) if alarm is not None}
        for alarm in filter(None, (input_bound, checkpoint_bound)):
            alarm.add_alarm_action(cw_actions.SnsAction(alerts))
        # The health alarms by rule (every rule, whatever health_mode: a job may turn a rule to stop by itself), and
        # the stall watcher where the queue's jobs stall-check by default (None otherwise).
        self.health_alarms = queue_health_alarms(self, queue_name=self.queue_name, alerts=alerts,
                                                 stalled_minutes=stalled_minutes)
        self.stall_watcher = None
        if watcher_needed(mode=health_mode, stall_minutes=stalled_minutes, rules=health_rules):
            self.stall_watcher = stall_watcher(
                self, queue_name=self.queue_name, job_queue_arns=self._job_queue_arns(), key=key,
                removal_policy=removal_policy,
                environment=health_environment(mode=health_mode, stall_minutes=stalled_minutes, rules=health_rules))
        # Elastic jobs: their controller resubmits a job that asks for another size (exit 86).
        self.elastic: Optional[ElasticTraining] = None
        if self.elastic_sizes:
            self.elastic = ElasticTraining(self, "Elastic", queue=self, alerts=alerts, max_nodes=elastic_max_nodes,
                                           sizes=elastic_sizes, removal_policy=removal_policy)
        self.dashboard = queue_dashboard(
            self, queue_name=self.queue_name, log_group=self.log_group, period=alarm_period,
            idle_threshold=idle_threshold_percent, spot_retries=self.metric_spot_retries(),
            failed_jobs=self.metric_failed_jobs(), gpu_utilization=self.metric_gpu_utilization())

    def _own_queue_tags(self, job_queue: batch.JobQueue) -> None:
        """Only the tags the queue needs (``jobs.find_queue`` and the budget guard find it by them). The resource schema
        lets a job queue's Tags change in place, but the CloudFormation reference says "Update requires: Replacement"
        (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-batch-jobqueue.html), and
        a replaced queue ends its jobs and comes back enabled under a budget stop. A job queue costs nothing: no cost
        tag is lost."""
        own_tags_only(job_queue, {QUEUE_TAG: self.queue_name, BUDGET_SCOPE_TAG: self.budget_scope})

    def _own_definition(self, definition: batch.IJobDefinition, kind: str) -> None:
        """Tags a definition of the queue's own, by which ``jobs.find_queue`` finds it and its checkpoint root."""
        Tags.of(definition).add(DEFINITION_TAG, kind)
        if self._checkpoint_root:
            Tags.of(definition).add(CHECKPOINT_ROOT_TAG, self._checkpoint_root)

    def _single_node(self, compute: ComputeSettings, vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection],
                     instance_types: Sequence[ec2.InstanceType], max_vcpus: int, on_demand_max_vcpus: int,
                     image_uri: str) -> None:
        self.spot_environment = compute.compute_environment(
            self, "SpotEnvironment", vpc, vpc_subnets, instance_types, max_vcpus, spot=True,
            launch_template=self.launch_template, security_group=self.security_group)
        order = [batch.OrderedComputeEnvironment(compute_environment=self.spot_environment, order=1)]
        if on_demand_max_vcpus:
            self.on_demand_environment = compute.compute_environment(
                self, "OnDemandEnvironment", vpc, vpc_subnets, instance_types, on_demand_max_vcpus, spot=False,
                launch_template=self.launch_template, security_group=self.security_group)
            order.append(batch.OrderedComputeEnvironment(compute_environment=self.on_demand_environment, order=2))
        self.job_queue = batch.JobQueue(self, "Resource", compute_environments=order)
        omit_state(self.job_queue)
        self._own_queue_tags(self.job_queue)
        # Ref of a job queue is its ARN (the CloudFormation return values), the same value as aws-cdk-lib's GetAtt.
        self.job_queue_arn = self.job_queue.node.default_child.ref
        self.job_definition = self.add_job_definition("JobDefinition", image_uri=image_uri)
        self._own_definition(self.job_definition, SINGLE_NODE)

    def _multi_node(self, compute: ComputeSettings, vpc: ec2.IVpc, subnet: ec2.ISubnet,
                    instance_types: Sequence[ec2.InstanceType], max_vcpus: int, image_uri: str, *, efa: bool) -> None:
        # Multi-node parallel jobs: On-Demand only, one AZ, a cluster placement group, and a security group that
        # lets the nodes talk to each other only: https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html
        self.multi_node_security_group, self.placement_group = multi_node_network(self, vpc, self.queue_name)
        template = compute.launch_template(self, "MultiNodeLaunchTemplate", extra_commands=[EFA_INSTALL] if efa else [])
        # The jobs run in awsvpc mode: each node's container gets an interface of its own with the environment's
        # security groups, or the VPC's default group where it has none (the page above).
        self.multi_node_environment = compute.compute_environment(
            self, "MultiNodeEnvironment", vpc, ec2.SubnetSelection(subnets=[subnet]), instance_types, max_vcpus,
            spot=False, launch_template=template, security_group=self.multi_node_security_group,
            placement_group=self.placement_group)
        if efa:
            attach_efa(template, self.multi_node_environment, self.multi_node_security_group)
        self.multi_node_job_queue = batch.JobQueue(self, "MultiNodeJobQueue", compute_environments=[
            batch.OrderedComputeEnvironment(compute_environment=self.multi_node_environment, order=1)])
        omit_state(self.multi_node_job_queue)
        self._own_queue_tags(self.multi_node_job_queue)
        self.multi_node_job_queue_arn = self.multi_node_job_queue.node.default_child.ref
        container = self._jobs.container(self, "MultiNodeContainer", image_uri, self.multi_node_job_size, efa=efa)
        self.multi_node_job_definition = self._jobs.multi_node(self, "MultiNodeJobDefinition", container)
        self._own_definition(self.multi_node_job_definition, MULTI_NODE)

    def _job_queue_arns(self) -> list[str]:
        return [arn for arn in (self.job_queue_arn, self.multi_node_job_queue_arn) if arn is not None]

    # --- job definitions --------------------------------------------------------------------------------------
    def add_job_definition(self, id: str, *, image_uri: str, command: Sequence[str] = (),
                           scope: Optional[Construct] = None) -> batch.EcsJobDefinition:
        """A single-node job definition of this queue (its size, retries, timeout, volumes, logs and job role) with
        another image and, optionally, a default command: e.g. an endpoint's retraining job.

        :param scope: where the definition lives. Default: the queue. Pass the construct that submits it when that is
            in another stack: a changed definition registers a new revision (a new Ref), and CloudFormation refuses
            to change a value another stack imports. It carries the queue's tags either way."""
        if self.multi_node_only:
            raise ValidationError("TrainingQueue", "add_job_definition", id,
                                  "a queue with single-node instance_types: this one is multi-node only",
                                  "give the queue instance_types (Spot GPU types) too, or use a queue that has them")
        problem = None if id == "JobDefinition" or Token.is_unresolved(image_uri) else image_problem(image_uri)
        if problem:
            raise ValidationError("TrainingQueue", "add_job_definition image_uri", image_uri,
                                  f"an Amazon ECR image with a tag or digest: {problem}",
                                  "add the tag or digest, or push the image to ECR and use its URI")
        owner = scope or self
        container = self._jobs.container(owner, f"{id}Container" if id != "JobDefinition" else "Container", image_uri,
                                         (self.gpus_per_job, self.job_vcpus, self.job_memory_mib), command=command)
        definition = self._jobs.single_node(owner, id, container)
        if scope is not None:  # the budget guard resubmits only definitions of its scope
            Tags.of(definition).add(QUEUE_TAG, self.queue_name)
            Tags.of(definition).add(BUDGET_SCOPE_TAG, self.budget_scope)
        return definition

    @property
    def checkpoint_root(self) -> Optional[str]:
        """``s3://BUCKET/checkpoints/<queue>/`` when the queue has a dataset bucket; a job's checkpoints go under
        ``<root><job name>/`` (its ``ML_PLATFORM_CHECKPOINT_URI``, set at submission). Also the
        ``ml-platform:checkpoint-root`` tag of the queue's own job definitions."""
        return self._checkpoint_root

    @staticmethod
    def retry_strategies() -> list[batch.RetryStrategy]:
        """At most 5 entries (Batch's limit); the first that matches decides, and EXIT ends the list."""
        return _retry_strategies()

    # --- metrics ----------------------------------------------------------------------------------------------
    def metric_gpu_utilization(self, **kwargs) -> cloudwatch.Metric:
        """``MLPlatform/GPU nvidia_smi_utilization_gpu`` averaged over the queue's GPUs (percent)."""
        return gpu_metric("nvidia_smi_utilization_gpu", ("QueueName", self.queue_name), self._period, **kwargs)

    def metric_gpu_memory_used_ratio(self, **kwargs) -> cloudwatch.MathExpression:
        """GPU memory used / total over the queue's instances (0-1)."""
        return gpu_memory_used_ratio(("QueueName", self.queue_name), self._period, **kwargs)

    def metric_spot_retries(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/Events TriggeredRules`` of the Spot-retry rule: jobs sent back to RUNNABLE after a reclaim (Sum).
        The rule matches a job's whole attempt history, so after one reclaim each later return to RUNNABLE of that
        job counts again: an upper bound."""
        return triggered_rules(self.spot_retries_rule, self._period, **kwargs)

    def metric_failed_jobs(self, **kwargs) -> cloudwatch.Metric:
        """``AWS/Events TriggeredRules`` of the failed-job rule (Sum)."""
        return triggered_rules(self.failed_jobs_rule, self._period, **kwargs)

    # --- grants -----------------------------------------------------------------------------------------------
    def grant_submit_jobs(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets a pipeline or operator submit, list, describe and terminate the queue's jobs, as ``jobs.submit_job``
        and ``python -m ml_platform_constructs job submit|list|cancel`` do (another image included). Not the
        evaluation job definition: its role writes the promotion gate's evidence, so a submitter who could run it
        (or register a revision of it with their own image and pass its role) could write any run's evidence;
        an ``EvaluationSubmitter`` alone submits it."""
        stack = Stack.of(self)
        # Every revision of the queue's training definitions, and the "-submitted" revisions ./platform job registers.
        definitions = [d for d in definitions_of(self) if d is not self.evaluation_job_definition]
        families = [stack.format_arn(service="batch", resource="job-definition", resource_name=f"{name}*",
                                     arn_format=ArnFormat.SLASH_RESOURCE_NAME)
                    for name in [definition_name(d) for d in definitions]]
        grant = iam.Grant.add_to_principal(grantee=grantee, actions=["batch:SubmitJob", "batch:TagResource"],
                                           resource_arns=[*self._job_queue_arns(), *families])
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:TerminateJob", "batch:CancelJob"],
                                   resource_arns=[f"arn:{stack.partition}:batch:{stack.region}:{stack.account}:job/*"])
        self._grant_find_jobs(grantee)
        # Another image is a "-submitted" revision of the definition, with its job and execution roles.
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:RegisterJobDefinition"], resource_arns=families)
        roles = [self.job_role, *{id(r): r for r in (_execution_role(d) for d in definitions)}.values()]
        iam.Grant.add_to_principal(grantee=grantee, actions=["iam:PassRole"], resource_arns=[r.role_arn for r in roles])
        return grant

    def grant_evaluate(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets an operator run the promotion gate's evaluation jobs, as ``./platform model evaluate`` does: submit the
        deployed evaluation definition (this revision only, with the queue's image: no revision of another image can
        be registered or submitted) to the queue, find the queue and describe the job. Submitting passes no role
        (the definition names it; a role is passed when a definition is registered:
        https://docs.aws.amazon.com/batch/latest/userguide/iam-example-job-def.html), so no ``iam:PassRole``: the
        evaluation role cannot be put into another definition. Raises ``ValidationError`` without an evaluation
        definition (a queue without ``datasets``).

        Deprecated since 0.14.0, removed in 0.16.0: a trust grant. SubmitJob has no condition key on
        ``containerOverrides``, so the grantee may run any command with the evaluation role and write any run's
        evidence. Use ``EvaluationSubmitter(queue=..., commands=...).grant_submit(grantee)``: its function submits the
        command deployed for the endpoint. The synth warns (``ml-platform:grantEvaluateTrusts``)."""
        if self.evaluation_job_definition is None:
            raise ValidationError("TrainingQueue", "grant_evaluate datasets", None,
                                  "a queue with a DatasetBucket (only then has it an evaluation job definition)",
                                  "pass datasets= to the queue, or grant_submit_jobs for training jobs alone")
        Annotations.of(self).add_warning_v2(
            "ml-platform:grantEvaluateTrusts",
            f"TrainingQueue {self.queue_name}: grant_evaluate is deprecated (removed in 0.16.0): its grantee can "
            "override the evaluation's command and write any run's promotion evidence (SubmitJob has no condition on "
            "containerOverrides). Use EvaluationSubmitter(queue=..., commands=...).grant_submit(grantee) instead")
        # The definition's Ref is its revision ARN: a later revision (a deploy) comes with its own grant.
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["batch:SubmitJob", "batch:TagResource"],
            resource_arns=[self.job_queue_arn, self.evaluation_job_definition.job_definition_arn])
        self._grant_find_jobs(grantee)
        return grant

    @staticmethod
    def _grant_find_jobs(grantee: iam.IGrantable) -> None:
        # Finding the queue by its tags, and listing and describing jobs: actions without resource-level permissions
        # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html).
        iam.Grant.add_to_principal(grantee=grantee, resource_arns=["*"], actions=[
            "batch:DescribeJobQueues", "batch:DescribeComputeEnvironments", "batch:DescribeJobDefinitions",
            "batch:DescribeJobs", "batch:ListJobs"])


def definitions_of(queue: TrainingQueue) -> list[batch.IJobDefinition]:
    return [d for d in (queue.job_definition, queue.multi_node_job_definition, queue.evaluation_job_definition)
            if d is not None]


def _execution_role(definition: batch.IJobDefinition) -> iam.IRole:
    if isinstance(definition, batch.MultiNodeJobDefinition):
        return definition.containers[0].container.execution_role
    return definition.container.execution_role
