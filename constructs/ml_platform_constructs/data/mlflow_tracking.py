"""MlflowTracking: an environment's run tracking on SageMaker's managed MLflow, its artifacts in the dataset bucket."""

from __future__ import annotations

import re
from typing import Optional

from aws_cdk import Acknowledgment, Annotations, Duration, Names, RemovalPolicy, Stack, Token, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from .dataset_bucket import DatasetBucket
from ..errors import ValidationError, refusal_leaves_no_node
from ..foundation.network import missing_interface_endpoints, selected_subnets
from ..foundation.nag_support import AcknowledgeWildcardResources

MLFLOW_PREFIX = "mlflow/"
TRACKING_SERVER_SIZES = ("Small", "Medium", "Large")
# What a client in a private subnet needs to reach a tracking server without a NAT gateway: the MLflow endpoint
# (aws.sagemaker.<region>.experiments) and the SageMaker API, "Connecting to an MLflow tracking server through an
# Interface VPC Endpoint": https://docs.aws.amazon.com/sagemaker/latest/dg/mlflow-interface-endpoint.html
# (artifacts go to S3 directly: the S3 gateway endpoint, which PlatformNetwork creates). The serverless app is not
# served by it: the sagemaker-mlflow client sends app calls to https://mlflow.sagemaker.<region>.app.aws, and no
# interface endpoint for that host is documented (December 2026; the endpoint policy page names tracking servers
# only: https://docs.aws.amazon.com/sagemaker/latest/dg/mlflow-private-link-policy.html). Its clients need egress.
MLFLOW_INTERFACE_ENDPOINTS = (ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_EXPERIMENTS,
                              ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API)
# The MLflow API a training job uses to record runs (https://docs.aws.amazon.com/service-authorization/latest/
# reference/list_sagemaker-mlflow.html): nothing that deletes, nothing of the model registry. A tracking server
# checks these actions one by one (their resource type is mlflow-tracking-server). A serverless app authorizes its
# whole MLflow REST API with one action, sagemaker:CallMlflowAppApi, deletes included: there these actions narrow
# nothing, and no documented action or condition does
# (https://docs.aws.amazon.com/sagemaker/latest/dg/mlflow-app-setup-prerequisites-iam.html).
LOG_RUN_ACTIONS = ("CreateExperiment", "GetExperiment", "GetExperimentByName", "SearchExperiments", "CreateRun",
                   "UpdateRun", "GetRun", "SearchRuns", "LogMetric", "LogParam", "LogBatch", "LogInputs", "SetTag",
                   "GetMetricHistory", "ListArtifacts")
READ_RUN_ACTIONS = ("GetExperiment", "GetExperimentByName", "SearchExperiments", "GetRun", "SearchRuns",
                    "GetMetricHistory", "ListArtifacts")
_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,255}$")
_WINDOW = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01]\d|2[0-3]):([0-5]\d)$")
_VERSION = re.compile(r"^\d+(\.\d+)+$")


@refusal_leaves_no_node
class MlflowTracking(Construct):
    """SageMaker's managed MLflow for one environment: where every training run is recorded.

    Serverless by default (``AWS::SageMaker::MlflowApp``: no size to choose, nothing running between requests,
    its MLflow version managed by AWS); ``tracking_server_size`` makes it a tracking server of a fixed size
    (``AWS::SageMaker::MlflowTrackingServer``, billed per hour, its MLflow version pinned by ``mlflow_version``).

    Artifacts (models, run records, package lists) go to ``artifact_prefix`` (``mlflow/``) of the environment's
    ``DatasetBucket``. Neither resource takes a KMS key: the bucket's default encryption (its key, with S3 Bucket
    Keys) encrypts every artifact, whoever writes it. The prefix is tiered like ``datasets/``: Intelligent-Tiering
    after 7 days, never a class that needs a restore before a read.

    Who may do what in MLflow: a tracking server checks each MLflow call's own ``sagemaker-mlflow`` action, so
    ``grant_log_runs`` can exclude deletes and ``grant_read_runs`` can be read-only. The serverless app authorizes
    its whole REST API with one action, ``sagemaker:CallMlflowAppApi``: on it every grant lets the grantee delete
    runs and experiments too (``grant_read_runs`` warns). Where that matters, use a tracking server.

    The service role may read, write and delete objects under that prefix only, and use the bucket's key for them.
    The SageMaker documentation suggests AmazonS3FullAccess; this narrower role is what the service needs to read
    and write its artifact store (constructs/docs/MlflowTracking.md).

    :param datasets: the environment's DatasetBucket (the artifact store).
    :param name: the app's or tracking server's name (1-256 letters, digits and hyphens); unique per account and
        Region, e.g. ``<project>-<env>``.
    :param tracking_server_size: ``Small``, ``Medium`` or ``Large`` for a tracking server. Default: none
        (serverless MLflow app).
    :param mlflow_version: the tracking server's MLflow version (a tracking server cannot be upgraded in place; the
        clients' MLflow must match). Default: SageMaker's default. Not allowed for the serverless app.
    :param weekly_maintenance_window_start: ``Day:HH:MM`` in UTC. Default: ``Sun:03:00``.
    :param automatic_model_registration: register logged models in the SageMaker Model Registry. Default: False.
    :param artifact_prefix: Default: ``mlflow/``.
    :param vpc: where clients log from. In isolated subnets (no NAT gateway), the serverless app fails at synth (no
        documented interface endpoint serves it: give the subnets egress, or use a tracking server), and a tracking
        server fails unless a VPC of this app has the ``MLFLOW_INTERFACE_ENDPOINTS``. Default: none (no check).
    :param vpc_subnets: the clients' subnets in ``vpc``. Default: the VPC's private subnets.
    :param removal_policy: of the app or server (its runs) and its role. Default: RETAIN.
    :param uri_parameter_name: the SSM parameter that holds the tracking URI for stacks other than this one: they
        read it at deploy time rather than importing an export, so switching kinds or renaming (both replace the
        resource, a new ARN) deploys. Default: ``/ml-platform/mlflow/<unique id of this construct>/tracking-uri``.

    Each kind has its own logical id (the app ``Resource``, a tracking server ``TrackingServer``): CloudFormation
    cannot change a resource's type in place, so a switch creates the new one and removes (or, retained, orphans) the
    old. A tracking server deployed by 0.4 under ``Resource`` keeps its id with
    ``tracking.resource.override_logical_id("<its logical id>")``.
    """

    def __init__(self, scope: Construct, id: str, *, datasets: DatasetBucket, name: str,
                 tracking_server_size: Optional[str] = None, mlflow_version: Optional[str] = None,
                 weekly_maintenance_window_start: str = "Sun:03:00", automatic_model_registration: bool = False,
                 artifact_prefix: str = MLFLOW_PREFIX, vpc: Optional[ec2.IVpc] = None,
                 vpc_subnets: Optional[ec2.SubnetSelection] = None,
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
                 uri_parameter_name: Optional[str] = None) -> None:
        super().__init__(scope, id)
        self._validate(name, tracking_server_size, mlflow_version, weekly_maintenance_window_start, artifact_prefix)
        if uri_parameter_name is not None and not re.match(r"^/[A-Za-z0-9_./-]{1,1010}$", uri_parameter_name):
            raise ValidationError("MlflowTracking", "uri_parameter_name", uri_parameter_name,
                                  "an SSM parameter path starting with '/' (letters, digits, _ . - /)",
                                  "e.g. '/ml-platform/dev/mlflow/tracking-uri'")
        if vpc is not None:
            if tracking_server_size is None:
                self._refuse_isolated_subnets_for_the_app(vpc, vpc_subnets)
            else:
                self._require_endpoints_without_egress(vpc, vpc_subnets)
        self.name = name
        self.datasets = datasets
        self.artifact_prefix = artifact_prefix
        self.artifact_store_uri = f"s3://{datasets.bucket_name}/{artifact_prefix}"
        self.serverless = tracking_server_size is None
        datasets.add_lifecycle_rule(s3.LifecycleRule(
            id=f"{artifact_prefix.rstrip('/').replace('/', '-')}-warm-intelligent-tiering", prefix=artifact_prefix,
            transitions=[s3.Transition(storage_class=s3.StorageClass.INTELLIGENT_TIERING,
                                       transition_after=Duration.days(7))]))

        self.role = iam.Role(self, "ServiceRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                             description=f"SageMaker MLflow {name}: its artifact store ({artifact_prefix}) only")
        datasets.grant_read_write(self.role, artifact_prefix)
        self._acknowledge_prefix_grant(self.role, "The MLflow service role's object access is its artifact store "
                                                  f"prefix ({artifact_prefix}) of the dataset bucket, with its key")
        if self.serverless:
            self.resource = sagemaker.CfnMlflowApp(
                self, "Resource", name=name, artifact_store_uri=self.artifact_store_uri, role_arn=self.role.role_arn,
                weekly_maintenance_window_start=weekly_maintenance_window_start,
                model_registration_mode="AutoModelRegistrationEnabled" if automatic_model_registration
                else "AutoModelRegistrationDisabled")
            self.arn = self.resource.attr_arn
            self.mlflow_version = self.resource.attr_mlflow_version
        else:
            self.resource = sagemaker.CfnMlflowTrackingServer(
                self, "TrackingServer", tracking_server_name=name, artifact_store_uri=self.artifact_store_uri,
                role_arn=self.role.role_arn, tracking_server_size=tracking_server_size, mlflow_version=mlflow_version,
                weekly_maintenance_window_start=weekly_maintenance_window_start,
                automatic_model_registration=automatic_model_registration)
            self.arn = self.resource.attr_tracking_server_arn
            self.mlflow_version = mlflow_version
        # SageMaker checks the role's access to the artifact store when it creates the app or server.
        self.resource.node.add_dependency(self.role)
        self.resource.apply_removal_policy(removal_policy)
        self.role.apply_removal_policy(removal_policy)
        self.tracking_uri = self.arn  # mlflow.set_tracking_uri(ARN) with the sagemaker-mlflow plugin
        self.uri_parameter_name = uri_parameter_name or f"/ml-platform/mlflow/{Names.unique_id(self)}/tracking-uri"
        self.uri_parameter = ssm.StringParameter(
            self, "TrackingUri", parameter_name=self.uri_parameter_name, string_value=self.arn,
            description=f"The tracking URI (ARN) of MLflow {name}, for stacks that log to it")

    def tracking_uri_for(self, scope: Construct) -> str:
        """The tracking URI as ``scope``'s stack should use it: the ARN itself in this stack; in another, the SSM
        parameter's value, resolved by CloudFormation at each deploy of that stack (no export: an imported export
        cannot change, and a kind switch or a rename gives a new ARN). The other stack then deploys after this one."""
        consumer = Stack.of(scope)
        if consumer is Stack.of(self):
            return self.arn
        consumer.add_stack_dependency(Stack.of(self), "reads the MLflow tracking URI parameter")
        return ssm.StringParameter.value_for_string_parameter(consumer, self.uri_parameter_name)
    # --- validation -------------------------------------------------------------------------------------------
    @staticmethod
    def _validate(name, size, version, window, prefix) -> None:
        def fail(prop, value, allowed, fix):
            raise ValidationError("MlflowTracking", prop, value, allowed, fix)

        if not Token.is_unresolved(name) and not _NAME.match(name):
            fail("name", name, "1-256 letters, digits and hyphens, starting and ending with a letter or digit",
                 "e.g. 'ml-platform-dev'")
        if size is not None and size not in TRACKING_SERVER_SIZES:
            fail("tracking_server_size", size, f"one of {list(TRACKING_SERVER_SIZES)}, or None for the serverless app",
                 "Small serves up to about 25 users; leave it unset for the serverless app")
        if version is not None and size is None:
            fail("mlflow_version", version, "only with a tracking server (the serverless app's version is managed by "
                 "AWS)", "drop mlflow_version, or set tracking_server_size")
        if version is not None and not _VERSION.match(version):
            fail("mlflow_version", version, "an MLflow version such as 3.0", "use a version SageMaker offers")
        if not _WINDOW.match(window):
            fail("weekly_maintenance_window_start", window, "Day:HH:MM in UTC, Day one of Mon-Sun", "e.g. 'Sun:03:00'")
        if not re.match(r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*/$", prefix) or prefix.startswith(
                ("datasets/", "checkpoints/", "logs/", "capture/")):
            fail("artifact_prefix", prefix, "an S3 prefix of its own ending in '/', not datasets/, checkpoints/, logs/ "
                 "or capture/", "use the default 'mlflow/'")

    def check_clients(self, construct: str, vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection]) -> None:
        """Fails synth when ``construct``'s instances, in these subnets, could not reach this tracking: isolated
        subnets (of any VPC) for the serverless app, which no interface endpoint serves; isolated subnets of a VPC of
        this app without ``MLFLOW_INTERFACE_ENDPOINTS`` for a tracking server. SpotGpuFleet and TrainingQueue call
        it for their ``tracking``: without it every run's record would time out, with no error at deploy."""
        if self.serverless:
            self._refuse_isolated_subnets_for_the_app(vpc, vpc_subnets, construct)
        else:
            self._require_endpoints_without_egress(vpc, vpc_subnets, construct)

    @staticmethod
    def _refuse_isolated_subnets_for_the_app(vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection],
                                             construct: str = "MlflowTracking") -> None:
        isolated = {s.subnet_id for s in vpc.isolated_subnets}
        subnets = selected_subnets(vpc, vpc_subnets)
        if subnets and all(s.subnet_id in isolated for s in subnets):
            raise ValidationError(
                construct, "vpc", vpc.node.path,
                "subnets with egress (a NAT gateway) for the serverless MLflow app"
                + ("" if construct == "MlflowTracking" else " it records runs to (its tracking)") + ": its clients call "
                "https://mlflow.sagemaker.<region>.app.aws, and no documented interface endpoint serves it (the "
                "sagemaker.experiments endpoint serves tracking servers)",
                "give the clients' subnets a NAT gateway, or set tracking_server_size (a tracking server is reached "
                "through MLFLOW_INTERFACE_ENDPOINTS)")

    def _require_endpoints_without_egress(self, vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection],
                                          construct: str = "MlflowTracking") -> None:
        """Clients in isolated subnets of a VPC of this app reach MLflow only through its interface endpoints:
        without them every tracking call times out. (An imported VPC's endpoints cannot be seen from here.)"""
        needed = [e.short_name for e in MLFLOW_INTERFACE_ENDPOINTS]
        missing = missing_interface_endpoints(vpc, vpc_subnets, needed)
        if missing:
            raise ValidationError(
                construct, "vpc", vpc.node.path,
                f"isolated subnets with interface endpoints for {needed} (no NAT gateway: jobs reach MLflow only "
                f"through them); missing: {missing}",
                "PlatformNetwork(interface_endpoints=[..., *MLFLOW_INTERFACE_ENDPOINTS]), or subnets with a NAT gateway")

    # --- grants -----------------------------------------------------------------------------------------------
    def _api_grant(self, grantee: iam.IGrantable, actions: tuple[str, ...]) -> iam.Grant:
        sagemaker_actions = (["sagemaker:CallMlflowAppApi", "sagemaker:DescribeMlflowApp"] if self.serverless
                             else ["sagemaker:DescribeMlflowTrackingServer"])
        principal = grantee.grant_principal
        arn = self.tracking_uri_for(principal) if isinstance(principal, Construct) else self.arn
        return iam.Grant.add_to_principal(grantee=grantee, resource_arns=[arn],
                                          actions=[*sagemaker_actions, *(f"sagemaker-mlflow:{a}" for a in actions)])

    def grant_log_runs(self, grantee: iam.IGrantable) -> iam.Grant:
        """What a training job needs to record its runs: the MLflow API to create and log runs, and writing and
        reading artifacts under the prefix (MLflow clients put them in S3 themselves; no S3 delete), with the
        bucket's key. On a tracking server the API is ``LOG_RUN_ACTIONS``: nothing that deletes, nothing of the
        model registry. On the serverless app it is ``sagemaker:CallMlflowAppApi``, which SageMaker checks for every
        MLflow call on the app: the grantee may also delete runs and experiments and use the registry. Adds the
        cdk-nag acknowledgements to a role it changes."""
        grant = self._api_grant(grantee, LOG_RUN_ACTIONS)
        self.datasets.grant_read(grantee, self.artifact_prefix)
        self.datasets.grant_write_prefix(grantee, self.artifact_prefix)
        self._acknowledge_prefix_grant(grantee, "Runs' artifacts: objects under the MLflow artifact prefix "
                                                f"({self.artifact_prefix}) of the dataset bucket, with its key")
        return grant

    def grant_read_runs(self, grantee: iam.IGrantable) -> iam.Grant:
        """Reading runs, their metrics and artifacts (a promotion gate, a report). Read-only on a tracking server
        (``READ_RUN_ACTIONS``). On the serverless app reading takes ``sagemaker:CallMlflowAppApi``, which allows
        every MLflow call, deletes included: a warning (``ml-platform:mlflow-app-read-is-full-access``) says so."""
        if self.serverless:
            Annotations.of(self).add_warning_v2("ml-platform:mlflow-app-read-is-full-access", (
                f"grant_read_runs({grantee.node.path if isinstance(grantee, Construct) else 'a grantee'}) on the "
                "serverless MLflow app grants "
                "sagemaker:CallMlflowAppApi, which SageMaker checks for every MLflow call on the app: the grantee may "
                "also log, change and delete runs and experiments. Fix: a tracking server (tracking_server_size) "
                "checks each call's own sagemaker-mlflow action, so a reader there reads only; or acknowledge this "
                "warning if the reader may write."))
        grant = self._api_grant(grantee, READ_RUN_ACTIONS)
        self.datasets.grant_read(grantee, self.artifact_prefix)
        self._acknowledge_prefix_grant(grantee, "Reading runs' artifacts under the MLflow artifact prefix "
                                                f"({self.artifact_prefix}) of the dataset bucket, with its key")
        return grant

    def _acknowledge_prefix_grant(self, grantee: iam.IGrantable, reason: str) -> None:
        role = grantee.grant_principal
        if not isinstance(role, iam.Role):
            return
        Validations.of(role).acknowledge(*[
            Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason)
            for finding in ("Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*", "Action::s3:Abort*",
                            "Action::s3:DeleteObject*", "Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")])
        policy = role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeWildcardResources(policy, [f"/{self.artifact_prefix}*"], reason))
