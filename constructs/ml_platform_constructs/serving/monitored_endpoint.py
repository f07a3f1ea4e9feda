"""MonitoredEndpoint: a SageMaker real-time endpoint that captures its traffic and watches drift, latency and errors."""

from __future__ import annotations

import math
import re
from typing import Optional, Sequence

from aws_cdk import (Acknowledgment, Annotations, CfnParameter, Duration, RemovalPolicy, Stack, Tags, Token,
                     Validations)
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..data.dataset_bucket import DatasetBucket
from .endpoint_quality import GROUND_TRUTH_PREFIX, EndpointQuality, ModelQuality
from .endpoint_scaling import EndpointAutoScaling, scale_endpoint
from ..errors import ValidationError, refusal_leaves_no_node
from .feature_watch import FeatureWatch, feature_watch_alarms, feature_watch_widgets
from ..governance.scope import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, validate_budget_scope
from ..operations.jobs import ECR_IMAGE
from ..foundation.nag_support import AcknowledgeWildcardResources, nag_arn, stack_arn, suppress_checkov
from ..foundation.network import require_endpoints, require_private_subnets
from ..foundation.platform_key import allow_log_groups
from ..runtime.decisions.drift import DEFAULT_FALSE_ALARMS as DRIFT_FALSE_ALARMS, per_check_significance
from ..runtime.decisions.promotion import VERSION, VERSION_PLACEHOLDER, model_version_parameter
from ..foundation.runtime_function import runtime_function

DRIFT_NAMESPACE = "MLPlatform/Drift"
# A p99 from fewer samples is noise: CloudWatch's own rule for percentile alarms is 10 / (1 - 0.99) samples a period
# (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/percentiles-with-low-samples.html).
P99_MIN_REQUESTS = 1000
# The rollback alarms (p99 latency, 5xx rate) go to ALARM after this many breaching periods of this length.
ENDPOINT_ALARM_PERIOD = Duration.minutes(5)
ROLLBACK_ALARM_PERIODS = 3
# A rollout step must be watched long enough for them to get there: their breaching periods, plus one period, as a
# traffic shift rarely falls on a period's start and a period's data arrives after it ends. Shorter, a regression
# cannot roll back before SageMaker ends the bake and terminates the old fleet.
MIN_ROLLOUT_BAKE_TIME = Duration.minutes(int(ENDPOINT_ALARM_PERIOD.to_minutes()) * (ROLLBACK_ALARM_PERIODS + 1))
DRIFT_FUNCTION_FILES = ("capture.py", "drift.py", "drift_handler.py", "stats.py")  # the drift check's handler and its imports
CAPTURE_PREFIX = "capture/"
# Nitro instance families with local (instance store) volumes: their storage is encrypted by hardware and
# CreateEndpointConfig fails when KmsKeyId is set. https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpointConfig.html
INSTANCE_STORAGE_FAMILIES = frozenset({
    "m5d", "c5d", "r5d", "m6id", "c6id", "r6id", "g4dn", "g5", "g6", "g6e", "p3dn", "p4d", "p4de", "p5", "p5e",
    "trn1", "trn1n",
})


def drift_day_periods(schedule: Duration) -> int:
    """The drift-not-judged alarm's evaluation periods: about a day of checks, within CloudWatch's limit on an alarm's
    evaluation range (period x periods at most 1 day for periods under an hour, 7 days otherwise:
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html, Period). Under an hour,
    the whole periods of a day (floor: a 7-minute schedule gets 205, 23.9 hours; ceil would be 24 hours 2 minutes,
    which PutMetricAlarm refuses); from an hour, the periods that cover a day."""
    seconds = int(schedule.to_seconds())
    if seconds < 3600:
        return 86400 // seconds
    return max(1, math.ceil(86400 / seconds))


@refusal_leaves_no_node
class MonitoredEndpoint(Construct):
    """A SageMaker real-time endpoint, its endpoint configuration with data capture, and its monitoring.

    The construct owns the model, the endpoint configuration (immutable in SageMaker: a change creates a new
    one and updates the endpoint) and the endpoint, so capture cannot be switched off behind its back.

    Captured requests and responses are users' raw data: they go to a bucket of their own (``.capture_bucket``,
    a DatasetBucket under ``capture/``, expiring after ``capture_retention``), readable only by the drift check.

    Drift: SageMaker Model Monitor is no longer open to new customers
    (https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor.html), so a scheduled Lambda (standard
    library and boto3 only) reads a bounded sample of the last window of captured inputs, computes PSI and KL
    divergence per feature against the baseline at ``drift/baselines/<endpoint>/baseline.json`` in
    ``baseline_bucket``, publishes them to ``MLPlatform/Drift`` and stores each result under
    ``drift/results/<endpoint>/``.

    :param endpoint_name: the SageMaker endpoint name (1-63 letters, digits and hyphens).
    :param image_uri: the inference container image, in Amazon ECR (``<account>.dkr.ecr.<region>.amazonaws.com/
        <repository>[:tag|@digest]``): the only registry this construct lets SageMaker pull from.
    :param model_data_bucket: where the model artifact is; read access to ``model_data_key`` only.
    :param model_data_key: the model artifact (``model.tar.gz``) key; with ``model_version``, a key with one
        ``{version}`` (e.g. ``models/classifier/{version}/model.tar.gz``) and read access to every version.
    :param model_version: declares the model version in CloudFormation: a stack parameter
        (``runtime.decisions.promotion.model_version_parameter(endpoint_name)``, this value its default) fills ``{version}``.
        A promotion (``./platform model promote``) updates the parameter, the template staying as deployed, and a
        later ``cdk deploy`` keeps the parameter's value, so it never undoes a promotion. Default: none (a fixed key).
    :param instance_type: e.g. ``ml.m5.large``. With ``auto_scaling``, SageMaker refuses to change it in place (the
        variant is a scaling target): deploy once with ``auto_scaling=None``, then with the new type and
        ``auto_scaling`` again (constructs/README.md, "Changing the instance type of an autoscaled endpoint").
    :param alerts: the alert topic.
    :param baseline_bucket: the environment's DatasetBucket (drift baselines and results).
    :param vpc: the model runs in its private subnets (``vpc_subnets``), with a security group without inbound rules.
        Public subnets (or subnets of this app that map public IPs or route to an internet gateway) fail synth, and so
        do isolated subnets of a VPC of this app without an S3 VPC endpoint (SageMaker loads the artifact through it).
    :param allow_public_subnets: accept such subnets, with a warning. Default: False.
    :param budget_scope: the ``BudgetGuard`` scope whose stop lists this endpoint as left running (a guard never
        stops an endpoint: it serves users); tag ``ml-platform:budget-scope`` on the endpoint. Default: ``"account"``.
    :param capture_key: encrypts captured data. Default: the capture bucket's own new key.
    :param volume_key: encrypts the endpoint's storage volume; must be None for instance types with local NVMe
        storage (hardware-encrypted). Default: none (SageMaker's AWS managed key).
    :param initial_instance_count: the instances the endpoint starts with. With ``auto_scaling``, only at creation:
        an update keeps the instances scaling set (``RetainAllVariantProperties``). Default: 1.
    :param variant_name: Default: ``AllTraffic``. A new name needs a new ``endpoint_name`` in the same deploy: every
        update is blue/green, which needs the same variant name (constructs/docs/MonitoredEndpoint.md, "Renaming the
        variant"; a synth cannot see the deployed name).
    :param environment: container environment variables. Default: none.
    :param sampling_percentage: share of requests captured, 0-100. Default: 100.
    :param csv_content_types: Default: ``text/csv``.
    :param json_content_types: Default: ``application/json``.
    :param capture_retention: Default: 30 days.
    :param drift_schedule: how often the drift check runs, 1 minute to 1 day. Default: 1 hour.
    :param drift_window: the most hours of capture one run pools (capture files are grouped by hour): it reads the
        newest hours first until it holds ``max_records_per_run`` records, so a busy endpoint is judged on its last
        hour and a quiet one on up to this many. Default: 24 hours (0.6 and before: 1 hour, which left a quiet
        endpoint's windows too small to resolve the PSI threshold).
    :param max_records_per_run: the sample bound of one run. Default: 10,000.
    :param psi_threshold: a feature drifted when its shift is significant (chi-square over the features judged) and
        its PSI, corrected for its small-sample bias, is at least this by its own sampling noise (the lower bound at
        the same level), so the threshold means the same at every window size; a feature with fewer than 10 window
        values expected in its smallest bin is not judged. Default: 0.25.
    :param drift_false_alarms_per_90_days: the error the drift alarm guards against, a false drift alarm (each one
        starts a retraining with ``RetrainOnDrift``): expected alarms in 90 days of checks on inputs drawn from the
        training distribution, or shifted by less than ``psi_threshold``, whatever the traffic; each check's level is
        this divided by the checks in 90 days (``drift_schedule``). Above 0, at most 10. Default: 0.25.
    :param drift_significance: deprecated since 0.8.0 (a warning says so; removed in 1.0): a level per check, which
        gave about 20% false drift alarms a day with hourly checks. When set, it is still each check's level.
        Use ``drift_false_alarms_per_90_days``. Default: none.
    :param kl_threshold: no effect since 0.5.0 (a warning says so): KL is about PSI / 2 for a symmetric shift, so its
        alarm fired only after the PSI alarm. KL is still published (``MaxKL``).
    :param p99_latency_threshold: Default: 500 ms (ModelLatency is published in microseconds). The alarm reads the
        p99 of 5-minute periods with at least ``P99_MIN_REQUESTS`` (1000) requests and 0 in quieter ones
        (``metric_judged_p99_latency``): at low traffic it returns to OK and neither scales out nor rolls back.
    :param error_rate_threshold: share of 5xx responses. Default: 0.01.
    :param rollout_bake_time: every update of the endpoint (a new model version, a new configuration) is a
        blue/green deployment: the new fleet takes the traffic (a canary of one instance first when the endpoint has
        2 or more), the endpoint's latency and error alarms are watched this long at each step, and SageMaker rolls
        back to the old fleet if one goes to ALARM. 0-60 minutes. Default: 20 minutes, ``MIN_ROLLOUT_BAKE_TIME``:
        the alarms need 3 breaching periods of 5 minutes, and a shift rarely starts a period. A shorter bake warns
        (``ml-platform:rollout-bake-time``): a regression could not roll back before the old fleet is gone.
    :param auto_scaling: target tracking, and scale-out on the p99 latency with a scale-in that agrees with it
        (``EndpointAutoScaling``); updates keep the instance count scaling set. Default: none (fixed instance count).
    :param quality: production quality against ground-truth labels, and its alarm (``ModelQuality``, see
        ``EndpointQuality``). With ``model_version``, a promotion also sets the quality baseline to the promoted
        run's held-out score (a second stack parameter, ``runtime.decisions.promotion.quality_baseline_parameter``); until
        then ``quality.baseline`` applies. Default: none.
    :param feature_watch: when the drift check's feature watch (spread and explained variance) alarms.
        Default: ``FeatureWatch()``.
    :param removal_policy: for the capture bucket and the log groups. Default: RETAIN.
    :param logs_key: encrypts the construct's log groups: the endpoint's own (``/aws/sagemaker/Endpoints/<name>``,
        created here with 3 months' retention, before the endpoint), the drift check's and, with ``quality``, the
        quality check's. A key of this app gets the CloudWatch Logs statement (once per key); an imported key fails at
        synth unless ``key_policy_has`` declares it. Default: none (CloudWatch Logs' own encryption at rest).
    :param network_isolation: no network calls to or from the model container (SageMaker still loads the model
        artifact and captures data itself). Default: True; set False only for a container that must call out
        (e.g. to fetch features), which adds a warning.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        endpoint_name: str,
        image_uri: str,
        model_data_bucket: s3.IBucket,
        model_data_key: str,
        instance_type: str,
        alerts: sns.ITopic,
        baseline_bucket: DatasetBucket,
        vpc: ec2.IVpc,
        vpc_subnets: Optional[ec2.SubnetSelection] = None,
        allow_public_subnets: bool = False,
        budget_scope: str = ACCOUNT_SCOPE,
        capture_key: Optional[kms.IKey] = None,
        volume_key: Optional[kms.IKey] = None,
        initial_instance_count: int = 1,
        variant_name: str = "AllTraffic",
        environment: Optional[dict[str, str]] = None,
        sampling_percentage: int = 100,
        csv_content_types: Sequence[str] = ("text/csv",),
        json_content_types: Sequence[str] = ("application/json",),
        capture_retention: Duration = Duration.days(30),
        drift_schedule: Duration = Duration.hours(1),
        drift_window: Duration = Duration.hours(24),
        max_records_per_run: int = 10_000,
        psi_threshold: float = 0.25,
        drift_false_alarms_per_90_days: float = DRIFT_FALSE_ALARMS,
        drift_significance: Optional[float] = None,
        kl_threshold: Optional[float] = None,
        p99_latency_threshold: Duration = Duration.millis(500),
        error_rate_threshold: float = 0.01,
        auto_scaling: Optional[EndpointAutoScaling] = None,
        quality: Optional[ModelQuality] = None,
        feature_watch: FeatureWatch = FeatureWatch(),
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        network_isolation: bool = True,
        logs_key: Optional[kms.IKey] = None,
        model_version: Optional[str] = None,
        rollout_bake_time: Duration = MIN_ROLLOUT_BAKE_TIME,
    ) -> None:
        super().__init__(scope, id)
        self._validate_image(image_uri)
        self._validate(endpoint_name, instance_type, volume_key, initial_instance_count, sampling_percentage,
                       csv_content_types, json_content_types, drift_schedule, drift_window, max_records_per_run,
                       psi_threshold, drift_significance, p99_latency_threshold, error_rate_threshold, auto_scaling,
                       drift_false_alarms_per_90_days)
        if drift_significance is not None:
            Annotations.of(self).add_warning_v2("ml-platform:drift-significance-deprecated", (
                f"MonitoredEndpoint(drift_significance={drift_significance!r}) is deprecated since 0.8.0 and removed in "
                "1.0: a level per check gives hourly checks about 20% false drift alarms a day at 0.01. Set "
                "drift_false_alarms_per_90_days (default 0.25) instead, and remove drift_significance."))
        if kl_threshold is not None:
            Annotations.of(self).add_warning_v2("ml-platform:kl-threshold-ignored", (
                f"MonitoredEndpoint(kl_threshold={kl_threshold!r}) has no effect since 0.5.0: KL is about PSI / 2 for "
                "a symmetric shift, so its alarm fired only after the PSI alarm had. Remove kl_threshold."))
        for settings in (auto_scaling, quality, feature_watch):
            if settings is not None:
                settings.validate()
        require_private_subnets(self, "MonitoredEndpoint", vpc, vpc_subnets, allow_public_subnets)
        self._require_s3_route(vpc, vpc_subnets)
        validate_budget_scope("MonitoredEndpoint", budget_scope)
        Tags.of(self).add(BUDGET_SCOPE_TAG, budget_scope, include_resource_types=["AWS::SageMaker::Endpoint"])
        if logs_key is not None:  # the construct's log groups
            allow_log_groups(logs_key, construct="MonitoredEndpoint", prop="logs_key")
        self.endpoint_name = endpoint_name
        self.variant_name = variant_name
        self._removal_policy = removal_policy
        self._logs_key = logs_key
        self.baseline_key = f"drift/baselines/{endpoint_name}/baseline.json"
        self.baseline_bucket = baseline_bucket
        self.results_prefix = f"drift/results/{endpoint_name}/"

        self.capture_bucket = DatasetBucket(
            self, "CaptureBucket", encryption_key=capture_key, direct_read_prefixes=(CAPTURE_PREFIX,),
            lifecycle_rules=[s3.LifecycleRule(id="expire-captured-requests", prefix=CAPTURE_PREFIX,
                                              expiration=capture_retention),
                             s3.LifecycleRule(id="expire-ground-truth", prefix=GROUND_TRUTH_PREFIX,
                                              expiration=capture_retention)],
            # Versioned: expiry only adds a delete marker, so the expired version must go promptly too.
            noncurrent_version_expiration=Duration.days(1),
            removal_policy=removal_policy)

        self.role = iam.Role(self, "ModelRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                             description=f"SageMaker endpoint {endpoint_name}: model, capture, logs")
        model_data_url, readable_key = self._declared_model(model_data_bucket, model_data_key, model_version,
                                                            rollout_bake_time)
        self._grant_model_role(model_data_bucket, readable_key, image_uri)
        self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
                                                description=f"SageMaker endpoint {endpoint_name}: no inbound")
        selection = vpc_subnets or ec2.SubnetSelection()
        subnet_ids = vpc.select_subnets(
            subnet_type=selection.subnet_type, subnets=selection.subnets, subnet_group_name=selection.subnet_group_name,
            availability_zones=selection.availability_zones, one_per_az=selection.one_per_az).subnet_ids
        self.model = sagemaker.CfnModel(
            self, "Model", execution_role_arn=self.role.role_arn,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image_uri, model_data_url=model_data_url,
                environment=environment),
            vpc_config=sagemaker.CfnModel.VpcConfigProperty(security_group_ids=[self.security_group.security_group_id],
                                                            subnets=subnet_ids),
            # https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateModel.html (EnableNetworkIsolation)
            enable_network_isolation=network_isolation)
        if not network_isolation:
            Annotations.of(self).add_warning_v2("ml-platform:endpoint-network-access", (
                "network_isolation=False lets the model container make network calls from the VPC; keep it True "
                "unless the container must call out."))
        self.model.node.add_dependency(self.role)
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self, "EndpointConfig",
            kms_key_id=volume_key.key_arn if volume_key else None,
            production_variants=[sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant_name, model_name=self.model.attr_model_name, instance_type=instance_type,
                initial_instance_count=initial_instance_count, initial_variant_weight=1)],
            data_capture_config=sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
                enable_capture=True, initial_sampling_percentage=sampling_percentage,
                destination_s3_uri=f"s3://{self.capture_bucket.bucket_name}/{CAPTURE_PREFIX.rstrip('/')}",
                kms_key_id=self.capture_bucket.encryption_key.key_arn,
                capture_options=[sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode="Input"),
                                 sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode="Output")],
                capture_content_type_header=sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                    csv_content_types=list(csv_content_types), json_content_types=list(json_content_types))))
        if volume_key is None:
            Validations.of(self.endpoint_config).acknowledge(Acknowledgment(
                id="AwsSolutions-SM2",
                reason="The storage volume is encrypted with SageMaker's AWS managed key (or by hardware on instance "
                       "types with local NVMe storage, where a KMS key is rejected); captured data uses a CMK."))
        # An autoscaled variant keeps the instance count Application Auto Scaling set when a new configuration rolls
        # out; without this every update (a promotion) would start InitialInstanceCount instances
        # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateEndpoint.html). Nothing is excluded:
        # DesiredInstanceCount would undo scaling, DesiredWeight is 1 for the one variant, and DataCaptureConfig is
        # "not currently supported" there (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_VariantProperty.html),
        # so a capture change on an autoscaled endpoint is checked after the deploy (constructs/docs/MonitoredEndpoint.md).
        self.endpoint = sagemaker.CfnEndpoint(self, "Resource", endpoint_name=endpoint_name,
                                              endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
                                              retain_all_variant_properties=True if auto_scaling is not None else None)
        self.endpoint_log_group = self._endpoint_log_group()

        schedule_minutes = int(drift_schedule.to_minutes())
        significance = (drift_significance if drift_significance is not None else
                        per_check_significance(drift_false_alarms_per_90_days, schedule_minutes))
        self.drift_function = self._drift_check(baseline_bucket, drift_schedule, drift_window, max_records_per_run, {
            "PSI_THRESHOLD": repr(float(psi_threshold)), "SIGNIFICANCE": repr(float(significance)),
            "FALSE_ALARMS_PER_90_DAYS": repr(float(drift_false_alarms_per_90_days)),
            "SCHEDULE_MINUTES": str(schedule_minutes), **feature_watch.environment()})
        self._drift_budget = drift_false_alarms_per_90_days
        self.alarms = self._alarms(alerts, psi_threshold, p99_latency_threshold, error_rate_threshold, drift_schedule)
        self.alarms.update(feature_watch_alarms(self, namespace=DRIFT_NAMESPACE, endpoint_name=endpoint_name,
                                                settings=feature_watch, period=drift_schedule, alerts=alerts))
        self.scalable_target = scale_endpoint(
            self, endpoint=self.endpoint, variant_name=variant_name, config=auto_scaling,
            metric=self._endpoint_metric, judged_p99=self.metric_judged_p99_latency(),
            p99_threshold=p99_latency_threshold.to_milliseconds() * 1000) if auto_scaling is not None else None
        self.quality = EndpointQuality(
            self, "Quality", endpoint_name=endpoint_name, variant_name=variant_name, capture_bucket=self.capture_bucket,
            capture_prefix=CAPTURE_PREFIX, results_bucket=baseline_bucket, settings=quality, alerts=alerts,
            logs_key=logs_key, removal_policy=removal_policy,
            promoted_baseline=self.model_version_parameter is not None,
            model_version=self.model_version_parameter.value_as_string if self.model_version_parameter else None
        ) if quality is not None else None
        if self.quality is not None:
            self.alarms["quality"] = self.quality.alarm
            self.alarms["quality_not_judged"] = self.quality.not_judged_alarm
            self.alarms["quality_labels_backlog"] = self.quality.labels_backlog_alarm
            self.alarms["quality_labels_lost"] = self.quality.labels_lost_alarm
            self.alarms["quality_labels_starved"] = self.quality.labels_starved_alarm
            self.alarms["quality_check"] = self.quality.check_failing_alarm
        self.dashboard = self._dashboard(drift_schedule)
        self.dashboard.add_widgets(*feature_watch_widgets(DRIFT_NAMESPACE, endpoint_name, drift_schedule))
        if self.quality is not None:
            self.dashboard.add_widgets(*self.quality.widgets())
        self._blue_green_rollout(initial_instance_count, rollout_bake_time)

    @staticmethod
    def accepts_volume_key(instance_type: str) -> bool:
        """False for instance types with local NVMe storage, whose volumes SageMaker will not encrypt with a key."""
        match = re.match(r"^ml\.([a-z0-9]+)\.", instance_type)
        return not (match and match.group(1) in INSTANCE_STORAGE_FAMILIES)

    # --- validation -------------------------------------------------------------------------------------------
    @staticmethod
    def _validate_image(image_uri: str) -> None:
        # SageMaker pulls inference images from ECR, or from a private registry only with ImageConfig
        # RepositoryAccessMode=Vpc, which this construct does not set:
        # https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ImageConfig.html
        if not Token.is_unresolved(image_uri) and not ECR_IMAGE.match(image_uri):
            raise ValidationError(
                "MonitoredEndpoint", "image_uri", image_uri,
                "an Amazon ECR image (<account>.dkr.ecr.<region>.amazonaws.com/<repository>[:tag]): SageMaker pulls "
                "endpoint images only from ECR here",
                "push it to ECR: aws ecr create-repository --repository-name NAME, docker tag IMAGE "
                "<account>.dkr.ecr.<region>.amazonaws.com/NAME:TAG, docker push it, then use that URI")

    @staticmethod
    def _validate(endpoint_name, instance_type, volume_key, initial_instance_count, sampling_percentage,
                  csv_content_types, json_content_types, drift_schedule, drift_window, max_records_per_run,
                  psi_threshold, drift_significance, p99_latency_threshold, error_rate_threshold,
                  auto_scaling, drift_false_alarms_per_90_days=DRIFT_FALSE_ALARMS) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("MonitoredEndpoint", prop, value, allowed, fix)

        if not re.match(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$", endpoint_name):
            fail("endpoint_name", endpoint_name, "1-63 letters, digits and hyphens, not starting or ending with a hyphen",
                 "e.g. 'classifier-prod'")
        match = re.match(r"^ml\.([a-z0-9]+)\.[a-z0-9]+$", instance_type)
        if not match:
            fail("instance_type", instance_type, "a SageMaker instance type such as ml.m5.large", "prefix it with 'ml.'")
        if volume_key is not None and not MonitoredEndpoint.accepts_volume_key(instance_type):
            fail("volume_key", f"a key with instance_type {instance_type}",
                 f"no KMS key for instance types with local NVMe storage ({match.group(1)}): "
                 "their volumes are encrypted by hardware and CreateEndpointConfig rejects a key",
                 "leave volume_key unset for this instance type")
        if not isinstance(initial_instance_count, int) or initial_instance_count < 1:
            fail("initial_instance_count", initial_instance_count, "at least 1", "set 1 or more")
        if not isinstance(sampling_percentage, int) or not 0 <= sampling_percentage <= 100:
            fail("sampling_percentage", sampling_percentage, "a whole percentage 0-100", "e.g. 100 (capture all)")
        for prop, types in (("csv_content_types", csv_content_types), ("json_content_types", json_content_types)):
            if not 1 <= len(types) <= 10:
                fail(prop, list(types), "1 to 10 content types (SageMaker's limit)", "e.g. ['text/csv']")
        schedule_minutes = drift_schedule.to_seconds() / 60
        # At most a day: the drift alarms' period is the schedule, and the not-judged alarm watches about a day of it.
        if not 1 <= schedule_minutes <= 1440 or schedule_minutes != int(schedule_minutes):
            fail("drift_schedule", drift_schedule.to_human_string(), "whole minutes, 1 minute to 1 day",
                 "e.g. Duration.hours(1)")
        window_hours = drift_window.to_seconds() / 3600
        if window_hours != int(window_hours) or not 1 <= window_hours <= 24:
            fail("drift_window", drift_window.to_human_string(), "1 to 24 whole hours (capture files are grouped by hour)",
                 "e.g. Duration.hours(1)")
        if not 1 <= max_records_per_run <= 1_000_000:
            fail("max_records_per_run", max_records_per_run, "1 to 1,000,000 records", "e.g. 10000")
        for prop, value in (("psi_threshold", psi_threshold), ("error_rate_threshold", error_rate_threshold)):
            if value <= 0:
                fail(prop, value, "a positive number", "e.g. the defaults 0.25, 0.01")
        if drift_significance is not None and not 0 < drift_significance <= 0.2:
            fail("drift_significance", drift_significance, "above 0 and at most 0.2 (a share of checks)",
                 "remove it and set drift_false_alarms_per_90_days (e.g. 0.25)")
        if not 0 < drift_false_alarms_per_90_days <= 10:
            fail("drift_false_alarms_per_90_days", drift_false_alarms_per_90_days,
                 "above 0 and at most 10 false drift alarms in 90 days", "e.g. 0.25 (the default)")
        if p99_latency_threshold.to_milliseconds() <= 0:
            fail("p99_latency_threshold", p99_latency_threshold.to_human_string(), "a positive duration",
                 "e.g. Duration.millis(500)")
        if auto_scaling is not None and not 1 <= auto_scaling.min_capacity <= auto_scaling.max_capacity:
            fail("auto_scaling", auto_scaling, "1 <= min_capacity <= max_capacity",
                 "e.g. EndpointAutoScaling(max_capacity=4, invocations_per_instance=100)")

    @staticmethod
    def _require_s3_route(vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection]) -> None:
        """In isolated subnets of a VPC of this app, the model reaches its artifact only through an S3 VPC endpoint
        (https://docs.aws.amazon.com/sagemaker/latest/dg/host-vpc.html#host-vpc-s3): without one, CreateEndpoint fails
        at deploy. (An imported VPC's endpoints cannot be seen from here.)"""
        require_endpoints("MonitoredEndpoint", vpc, vpc_subnets,
                          uses="SageMaker loads the model artifact through it, and CreateEndpoint fails without one",
                          fix="PlatformNetwork (it has an S3 gateway endpoint), vpc.add_gateway_endpoint('S3', "
                              "service=ec2.GatewayVpcEndpointAwsService.S3), or subnets with a NAT gateway")

    # --- the declared model version and its rollout ------------------------------------------------------------
    def _declared_model(self, bucket: s3.IBucket, key: str, version: Optional[str],
                        bake_time: Duration) -> tuple[str, str]:
        """(ModelDataUrl, the key pattern the model role may read); with a version, the stack parameter that
        declares it (``.model_version_parameter``)."""
        def fail(prop, value, allowed, fix):
            raise ValidationError("MonitoredEndpoint", prop, value, allowed, fix)

        if not bake_time.is_unresolved() and not 0 <= bake_time.to_seconds() <= 3600:
            fail("rollout_bake_time", bake_time.to_human_string(), "0 to 60 minutes (SageMaker's wait interval)",
                 f"e.g. Duration.minutes({int(MIN_ROLLOUT_BAKE_TIME.to_minutes())})")
        if not bake_time.is_unresolved() and bake_time.to_seconds() < MIN_ROLLOUT_BAKE_TIME.to_seconds():
            Annotations.of(self).add_warning_v2("ml-platform:rollout-bake-time", (
                f"rollout_bake_time={bake_time.to_human_string()} is shorter than the rollback alarms can fire: they "
                f"need {ROLLBACK_ALARM_PERIODS} breaching periods of {ENDPOINT_ALARM_PERIOD.to_human_string()} "
                f"({MIN_ROLLOUT_BAKE_TIME.to_human_string()} with the period a traffic shift starts in), so a latency "
                "or error regression would not roll back before SageMaker ends the bake and terminates the old fleet. "
                f"Fix: rollout_bake_time=Duration.minutes({int(MIN_ROLLOUT_BAKE_TIME.to_minutes())}) (the default), "
                "or acknowledge this warning if updates need no rollback."))
        self.model_version_parameter: Optional[CfnParameter] = None
        if version is None:
            if VERSION_PLACEHOLDER in key:
                fail("model_data_key", key, "a fixed key, or model_version set to fill its {version}",
                     "pass model_version (e.g. 'initial'), or a key without {version}")
            return f"s3://{bucket.bucket_name}/{key}", key
        if key.count(VERSION_PLACEHOLDER) != 1:
            fail("model_data_key", key, "one {version} where the declared model version goes",
                 f"e.g. 'models/{self.endpoint_name}/{{version}}/model.tar.gz'")
        if not VERSION.match(version):
            fail("model_version", version, "1-64 letters, digits, '.', '_' or '-'", "e.g. 'initial' or a run id")
        self.model_version_parameter = CfnParameter(
            self, "ModelVersion", type="String", default=version, allowed_pattern=VERSION.pattern,
            description=f"Model version served by {self.endpoint_name} ({key}); ./platform model promote changes it")
        self.model_version_parameter.override_logical_id(model_version_parameter(self.endpoint_name))
        before, after = key.split(VERSION_PLACEHOLDER)
        return (f"s3://{bucket.bucket_name}/{before}{self.model_version_parameter.value_as_string}{after}",
                f"{before}*{after}")

    def _blue_green_rollout(self, instance_count: int, bake_time: Duration) -> None:
        """Blue/green updates with automatic rollback on the endpoint's own latency and error alarms.
        https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-blue-green.html"""
        seconds = int(bake_time.to_seconds())
        # A canary may be at most half the fleet: with one instance the traffic moves at once, then bakes.
        routing = (sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type="CANARY", wait_interval_in_seconds=seconds,
            canary_size=sagemaker.CfnEndpoint.CapacitySizeProperty(type="INSTANCE_COUNT", value=1))
            if instance_count >= 2 else
            sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(type="ALL_AT_ONCE", wait_interval_in_seconds=seconds))
        rollback_alarms = [self.alarms["latency"], self.alarms["errors"]]
        # Referenced (Ref is the alarm's name), so CloudFormation creates the alarms before the endpoint. Whether
        # CreateEndpoint checks that the rollback alarms exist is not documented (AutoRollbackConfig says only
        # "CloudWatch alarms in your account": https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_AutoRollbackConfig.html):
        # with the alarms created first, it cannot matter. They have no scaling actions (the step policies have
        # alarms of their own, endpoint_scaling.py), so the reference makes no dependency cycle. They watch the
        # variant, old and new fleet together during an update (the guardrails page's own example, "Monitor
        # invocation errors on both old and new fleets": https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-configuration.html).
        names = [self._rollback_alarm_names[kind] for kind in ("latency", "errors")]
        # Each baking period (WaitIntervalInSeconds: a canary's, or all traffic's) and the wait before the old fleet
        # is terminated (TerminationWaitInSeconds: a canary's final baking period) last the bake time; the
        # deployment's timeout must exceed the waits (600-28800 s):
        # https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_BlueGreenUpdatePolicy.html
        self.endpoint.deployment_config = sagemaker.CfnEndpoint.DeploymentConfigProperty(
            blue_green_update_policy=sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(
                traffic_routing_configuration=routing, termination_wait_in_seconds=seconds,
                maximum_execution_timeout_in_seconds=max(600, min(14400, 4 * seconds + 1800))),
            auto_rollback_configuration=sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
                alarms=[sagemaker.CfnEndpoint.AlarmProperty(alarm_name=alarm.alarm_name) for alarm in rollback_alarms]))
        # SageMaker reads the rollback alarms with the endpoint's execution role:
        # https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-configuration.html
        alarm_arn = stack_arn(Stack.of(self), "arn:{partition}:cloudwatch:{region}:{account}:alarm:")
        self.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["cloudwatch:DescribeAlarms"], resources=[alarm_arn + name for name in names]))
        self.rollback_alarms = rollback_alarms

    def _endpoint_log_group(self) -> logs.LogGroup:
        """The log group SageMaker writes the containers' logs to (``/aws/sagemaker/Endpoints/<endpoint_name>``,
        https://docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html). Created here, before the endpoint,
        with a retention and ``logs_key``: left to SageMaker, it would create it on first start, never expiring
        and under CloudWatch Logs' own key. An endpoint deployed before 0.6 has this group already (SageMaker made
        it): delete it or `cdk import` it before the first deploy of 0.6 (MonitoredEndpoint page)."""
        log_group = logs.LogGroup(self, "EndpointLogs", log_group_name=f"/aws/sagemaker/Endpoints/{self.endpoint_name}",
                                  retention=logs.RetentionDays.THREE_MONTHS, encryption_key=self._logs_key,
                                  removal_policy=self._removal_policy)
        if self._logs_key is None:
            suppress_checkov(log_group, "CKV_AWS_158", "No logs_key was given: CloudWatch Logs encrypts the endpoint's "
                             "container logs with its own keys")
        self.endpoint.node.add_dependency(log_group)
        return log_group

    # --- permissions ------------------------------------------------------------------------------------------
    def _grant_model_role(self, model_data_bucket: s3.IBucket, model_data_key: str, image_uri: str) -> None:
        stack = Stack.of(self)
        model_data_bucket.grant_read(self.role, model_data_key)
        self.capture_bucket.grant_write_prefix(self.role, CAPTURE_PREFIX)
        ecr = ECR_IMAGE.match(image_uri)
        if ecr:
            account, region, repository = ecr.groups()[:3]
            self.role.add_to_principal_policy(iam.PolicyStatement(
                actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                resources=[f"arn:{stack.partition}:ecr:{region}:{account}:repository/{repository}"]))
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        # The endpoint's log group is the construct's (EndpointLogs, created before the endpoint). CreateLogGroup
        # stays, on that group only: AWS's execution-role policy lists it and does not say SageMaker tolerates its
        # absence; the group exists, so the call changes nothing, and if the group were deleted the containers'
        # logs would still have somewhere to go. https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html
        log_groups = "arn:{partition}:logs:{region}:{account}:log-group:/aws/sagemaker/Endpoints/" + self.endpoint_name
        self.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[stack_arn(stack, log_groups), stack_arn(stack, f"{log_groups}:*")]))
        # SageMaker creates the network interfaces of a model in a VPC with the execution role.
        self.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface",
                     "ec2:DeleteNetworkInterfacePermission", "ec2:DescribeNetworkInterfaces", "ec2:DescribeVpcs",
                     "ec2:DescribeDhcpOptions", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups"],
            resources=["*"]))
        reason = ("Actions without resource-level permissions (ECR authorization token, VPC network interfaces), "
                  "the endpoint's own log streams, and objects under its model artifact and capture prefix.")
        findings = ["Resource::*", f"Resource::{nag_arn(stack, log_groups + ':*')}",
                    "Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*", "Action::s3:Abort*",
                    "Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"]
        Validations.of(self.role).acknowledge(*[Acknowledgment(id=f"AwsSolutions-IAM5[{f}]", reason=reason)
                                                for f in findings])
        policy = self.role.node.find_child("DefaultPolicy")
        wildcards = [f"/{CAPTURE_PREFIX}*", *([f"/{model_data_key}"] if "*" in model_data_key else [])]
        policy.node.add_validation(AcknowledgeWildcardResources(policy, wildcards, reason))
        vpc_reason = ("SageMaker creates the model's network interfaces in the VPC with this role; EC2 offers no ARN "
                      "to scope them to before they exist (the documented execution-role policy uses *)")
        suppress_checkov(policy, "CKV_AWS_111", vpc_reason)
        suppress_checkov(policy, "CKV_AWS_109", vpc_reason)

    # --- drift check ------------------------------------------------------------------------------------------
    def _drift_check(self, baseline_bucket: DatasetBucket, schedule: Duration, window: Duration,
                     max_records: int, thresholds: dict[str, str]) -> lambda_.Function:
        log_group = logs.LogGroup(self, "DriftCheckLogs", retention=logs.RetentionDays.THREE_MONTHS,
                                  encryption_key=self._logs_key, removal_policy=self._removal_policy)
        if self._logs_key is None:
            suppress_checkov(log_group, "CKV_AWS_158", "No logs_key was given: CloudWatch Logs encrypts the drift "
                             "check's logs (feature statistics, no raw requests) with its own keys")
        function = runtime_function(
            self, "DriftCheck", handler="drift_handler.handler", files=DRIFT_FUNCTION_FILES,
            description=f"Drift of {self.endpoint_name}'s captured inputs against its training baseline (PSI, chi-square)",
            timeout=Duration.minutes(5), memory_size=1024, log_group=log_group,
            environment={
                "CAPTURE_BUCKET": self.capture_bucket.bucket_name,
                "CAPTURE_PREFIX": f"{CAPTURE_PREFIX}{self.endpoint_name}/",
                "VARIANT_NAME": self.variant_name,
                "BASELINE_BUCKET": baseline_bucket.bucket_name, "BASELINE_KEY": self.baseline_key,
                "RESULTS_PREFIX": self.results_prefix, "ENDPOINT_NAME": self.endpoint_name,
                "METRIC_NAMESPACE": DRIFT_NAMESPACE, "WINDOW_HOURS": str(int(window.to_hours())),
                "MAX_RECORDS": str(max_records), **thresholds,
            })
        suppress_checkov(function, "CKV_AWS_116", "A scheduled check: the next run repeats a failed one, and the "
                         "drift-check-failing alarm reports errors; a queue of missed schedule events helps no one")
        self.capture_bucket.grant_read(function, f"{CAPTURE_PREFIX}{self.endpoint_name}/")
        baseline_bucket.grant_read(function, f"drift/baselines/{self.endpoint_name}/")
        baseline_bucket.grant_write_prefix(function, self.results_prefix)
        function.add_to_role_policy(iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": DRIFT_NAMESPACE}}))
        reason = ("PutMetricData has no resource-level permissions (limited to MLPlatform/Drift by condition); object "
                  "access is limited to this endpoint's capture, baseline and results prefixes.")
        Validations.of(function.role).acknowledge(
            *[Acknowledgment(id=f"AwsSolutions-IAM5[{f}]", reason=reason)
              for f in ("Resource::*", "Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*",
                        "Action::s3:Abort*", "Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")])
        policy = function.role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeWildcardResources(
            policy, [f"/{CAPTURE_PREFIX}{self.endpoint_name}/*", f"/drift/baselines/{self.endpoint_name}/*",
                     f"/{self.results_prefix}*"], reason))
        events.Rule(self, "DriftSchedule", description=f"Runs the drift check of {self.endpoint_name}",
                    schedule=events.Schedule.rate(schedule),
                    targets=[targets.LambdaFunction(function, retry_attempts=2)])
        return function

    # --- metrics, alarms, scaling, dashboard ------------------------------------------------------------------
    def _endpoint_metric(self, name: str, statistic: str, period: Duration = ENDPOINT_ALARM_PERIOD) -> cloudwatch.Metric:
        return cloudwatch.Metric(namespace="AWS/SageMaker", metric_name=name, statistic=statistic, period=period,
                                 dimensions_map={"EndpointName": self.endpoint_name, "VariantName": self.variant_name})

    def metric_model_latency(self, statistic: str = "p99") -> cloudwatch.Metric:
        """``AWS/SageMaker ModelLatency`` in microseconds (5-minute periods)."""
        return self._endpoint_metric("ModelLatency", statistic)

    def metric_invocations(self) -> cloudwatch.Metric:
        return self._endpoint_metric("Invocations", "Sum")

    def metric_judged_p99_latency(self) -> cloudwatch.MathExpression:
        """What the p99 latency alarm reads: ``ModelLatency`` p99 (microseconds) in 5-minute periods of at least
        ``P99_MIN_REQUESTS`` (1000) requests, 0 in quieter ones (and in periods without traffic)."""
        return cloudwatch.MathExpression(
            expression=f"IF(FILL(requests, 0) >= {P99_MIN_REQUESTS}, p99, 0)",
            label=f"p99 model latency (0 under {P99_MIN_REQUESTS} requests)", period=ENDPOINT_ALARM_PERIOD,
            using_metrics={"p99": self.metric_model_latency(), "requests": self.metric_model_latency("SampleCount")})

    def metric_5xx_error_rate(self) -> cloudwatch.MathExpression:
        """Invocation5XXErrors / Invocations (0 when there is no traffic)."""
        return cloudwatch.MathExpression(
            expression="IF(invocations > 0, errors / invocations, 0)", label="5xx error rate",
            period=ENDPOINT_ALARM_PERIOD,
            using_metrics={"errors": self._endpoint_metric("Invocation5XXErrors", "Sum"),
                           "invocations": self.metric_invocations()})

    def metric_drift(self, name: str, period: Duration, statistic: str = "Maximum") -> cloudwatch.Metric:
        """``MLPlatform/Drift`` metrics of the endpoint: ``PSILowerBound`` (the largest bias-corrected PSI lower bound
        among features whose shift is significant; what the drift alarm watches: at least the threshold exactly when a
        feature drifted), ``SignificantPSI`` (their largest PSI as measured), ``MaxPSI``, ``MaxKL``, ``DriftJudged``,
        ..."""
        return cloudwatch.Metric(namespace=DRIFT_NAMESPACE, metric_name=name, statistic=statistic, period=period,
                                 dimensions_map={"EndpointName": self.endpoint_name})

    @property
    def _rollback_alarm_names(self) -> dict[str, str]:
        """The rollback alarms' names, fixed so that operators and the model role's DescribeAlarms grant can name
        them (the endpoint itself references the alarms)."""
        return {"latency": f"{self.endpoint_name}-p99-latency", "errors": f"{self.endpoint_name}-5xx-error-rate"}

    def _alarms(self, alerts, psi_threshold, latency, error_rate, schedule) -> dict[str, cloudwatch.IAlarm]:
        notify = cw_actions.SnsAction(alerts)
        day = drift_day_periods(schedule)
        alarms = {
            # SignificantPSI is published only by judged windows: a window too small to judge leaves the alarm as
            # it was (missing data ignored: "not breaching" would return it to OK on a window nobody judged, and the
            # composite DriftAlarm, and RetrainOnDrift with it, would see a new episode on the next judged drift),
            # and the not-judged alarm speaks for it.
            # One period: the level of each check already spends the 90-day budget over every check.
            "psi": self.metric_drift("PSILowerBound", schedule).create_alarm(
                self, "PsiDriftAlarm", threshold=psi_threshold, evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.IGNORE,
                alarm_description=f"{self.endpoint_name}: a feature drifted: a significant shift whose PSI against the "
                                  f"training baseline is at least {psi_threshold:g} beyond its sampling noise "
                                  f"(inputs from the training distribution, or shifted less, alarm about "
                                  f"{self._drift_budget:g} times in 90 days)"),
            "drift_not_judged": self.metric_drift("DriftJudged", schedule, "Maximum").create_alarm(
                self, "DriftNotJudgedAlarm", threshold=1, evaluation_periods=day,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{self.endpoint_name}: drift not judged for {day} checks in a row (about a day): "
                                  "no feature had 10 expected "
                                  "captured values in its smallest bin in a window (little traffic, a low sampling "
                                  "percentage, or requests that do not match the baseline's features; the results say "
                                  "which)"),
            # A p99 over a handful of requests is noise, so a quiet period reads 0 (metric math). Not the alarm's
            # EvaluateLowSampleCountPercentile "ignore": that freezes the state at low traffic, so an alarm in ALARM
            # when traffic falls would stay there, and CloudWatch re-invokes Auto Scaling actions every period an
            # alarm stays in ALARM: the step policy would add instances to an idle endpoint up to max_capacity.
            # https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html
            "latency": self.metric_judged_p99_latency().create_alarm(
                self, "P99LatencyAlarm", alarm_name=self._rollback_alarm_names["latency"],
                threshold=latency.to_milliseconds() * 1000, evaluation_periods=ROLLBACK_ALARM_PERIODS,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{self.endpoint_name}: p99 model latency above {latency.to_milliseconds():g} ms "
                                  f"for 15 minutes, judged in 5-minute periods of at least {P99_MIN_REQUESTS} "
                                  "requests (a quieter period reads 0: low traffic returns the alarm to OK)"),
            "errors": self.metric_5xx_error_rate().create_alarm(
                self, "ErrorRateAlarm", alarm_name=self._rollback_alarm_names["errors"], threshold=error_rate,
                evaluation_periods=ROLLBACK_ALARM_PERIODS,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{self.endpoint_name}: more than {error_rate:.1%} of requests end in a 5xx error"),
            "drift_check": self.drift_function.metric_errors(period=Duration.hours(1)).create_alarm(
                self, "DriftCheckFailingAlarm", threshold=1, evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{self.endpoint_name}: the drift check fails (is the baseline at "
                                  f"{self.baseline_key} built? Build it from a training sample: ./platform "
                                  "drift-baseline ENV ENDPOINT SAMPLE.csv in the platform app, or with the library "
                                  "only: python -m ml_platform_constructs drift-baseline SAMPLE.csv --endpoint "
                                  f"{self.endpoint_name} --bucket {self.baseline_bucket.bucket_name})"),
        }
        for alarm in alarms.values():
            alarm.add_alarm_action(notify)
        # The alarm retraining listens to (RetrainOnDrift): one state change per drift episode. A composite, so that
        # what it combines can change without touching what listens to it. No actions of its own: its child notifies.
        alarms["drift"] = cloudwatch.CompositeAlarm(
            self, "DriftAlarm", alarm_rule=cloudwatch.AlarmRule.any_of(alarms["psi"]),
            alarm_description=f"{self.endpoint_name}: input drift (a significant shift whose bias-corrected PSI is at "
                              f"least {psi_threshold:g} beyond its noise), one state change per episode (RetrainOnDrift "
                              "listens to it)")
        return alarms

    def _dashboard(self, schedule: Duration) -> cloudwatch.Dashboard:
        search = (f"SEARCH('{{{DRIFT_NAMESPACE},EndpointName,Feature}} MetricName=\"PSI\" "
                  f"EndpointName=\"{self.endpoint_name}\"', 'Maximum', {int(schedule.to_seconds())})")
        return cloudwatch.Dashboard(self, "Dashboard", widgets=[
            [cloudwatch.GraphWidget(title="Invocations", left=[self.metric_invocations()], width=12),
             cloudwatch.GraphWidget(title="Model latency (microseconds)", width=12,
                                    left=[self.metric_model_latency(s) for s in ("p50", "p90", "p99")])],
            [cloudwatch.GraphWidget(title="5xx error rate", left=[self.metric_5xx_error_rate()], width=12),
             cloudwatch.GraphWidget(title="Drift: max PSI, its lower bound (alarms), significant PSI, KL", width=12,
                                    left=[self.metric_drift("MaxPSI", schedule),
                                          self.metric_drift("PSILowerBound", schedule),
                                          self.metric_drift("SignificantPSI", schedule),
                                          self.metric_drift("MaxKL", schedule)],
                                    right=[self.metric_drift("FeaturesNotJudged", schedule)])],
            [cloudwatch.GraphWidget(title="Drift: PSI per feature", width=24,
                                    left=[cloudwatch.MathExpression(expression=search, label="", period=schedule)])],
        ])
