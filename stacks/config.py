"""Typed, validated environment configuration (config/environments.toml).

Every value is checked before any construct is created; a bad one raises ConfigError naming the key, the
value, what is allowed and how to fix it.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from ml_platform_constructs.advice.gpu_catalog import GPU_CATALOG
from ml_platform_constructs.operations.jobs import ECR_IMAGE, is_tagged_ecr_image
from ml_platform_constructs.runtime.decisions.quality import holdout_metric
from ml_platform_constructs.runtime.handlers.retrain import COOLDOWN_HOURS

if TYPE_CHECKING:  # the stacks' types; reading and checking the config needs no CDK (operator commands run without it)
    from aws_cdk import RemovalPolicy
    from aws_cdk import aws_ec2 as ec2

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "environments.toml"
ENVIRONMENT_NAMES = ("dev", "staging", "prod")
TOP_LEVEL = ""  # the file's own keys, outside any [table]
# Short names of the interface endpoints an environment may ask for (com.amazonaws.<region>.<name>).
INTERFACE_ENDPOINT_NAMES = frozenset({
    "ssm", "ssmmessages", "ec2messages", "monitoring", "logs", "kms", "sts", "ec2", "autoscaling", "events", "sns",
    "ecr.api", "ecr.dkr", "sagemaker.api", "sagemaker.runtime", "ecs", "ecs-agent", "ecs-telemetry",
    "sagemaker.experiments",
})
# What ECS container instances (AWS Batch) reach without a NAT gateway, besides the S3 gateway endpoint:
# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/vpc-endpoints.html
# and CloudWatch monitoring, where the CloudWatch agent sends the GPU metrics the idle and memory alarms read.
# (QUEUE_INTERFACE_ENDPOINTS' short names, which tests/unit/test_config.py holds equal to the library's.)
QUEUE_ENDPOINTS = ("ecs", "ecs-agent", "ecs-telemetry", "ecr.api", "ecr.dkr", "logs", "monitoring")
# MlflowTracking's tracking_server_size values (data.mlflow_tracking.TRACKING_SERVER_SIZES, held equal by the test).
TRACKING_SERVER_SIZES = ("Small", "Medium", "Large")
# The Regions aws-cdk-lib's region facts know (Fact.regions of the pinned aws-cdk-lib, held equal by the test), so
# that service principals and endpoint names resolve; here as a list, so that reading the config needs no CDK.
REGIONS = frozenset({
    "af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1",
    "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5",
    "ap-southeast-6", "ap-southeast-7", "ca-central-1", "ca-west-1", "cn-north-1", "cn-northwest-1", "eu-central-1",
    "eu-central-2", "eu-isoe-west-1", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3",
    "eusc-de-east-1", "il-central-1", "me-central-1", "me-south-1", "mx-central-1", "sa-east-1", "us-east-1",
    "us-east-2", "us-gov-east-1", "us-gov-west-1", "us-iso-east-1", "us-iso-west-1", "us-isob-east-1",
    "us-isob-west-1", "us-isof-east-1", "us-isof-south-1", "us-west-1", "us-west-2"})
# What jobs and fleet instances reach SageMaker's managed MLflow through without a NAT gateway (MLFLOW_INTERFACE_ENDPOINTS):
# https://docs.aws.amazon.com/sagemaker/latest/dg/mlflow-interface-endpoint.html
MLFLOW_ENDPOINTS = ("sagemaker.experiments", "sagemaker.api")


def queue_output_key(queue: str, what: str) -> str:
    """The Compute stack's output naming a queue's resource (read by ./platform job and model evaluate)."""
    return "Queue" + re.sub(r"[^A-Za-z0-9]", "", queue.title()) + what


def interface_endpoint_service(name: str) -> ec2.InterfaceVpcEndpointAwsService:
    """The service behind a configured short name (com.amazonaws.<region>.<name>); SageMaker MLflow's is
    aws.sagemaker.<region>.experiments."""
    from aws_cdk import aws_ec2 as ec2

    if name == "sagemaker.experiments":
        return ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_EXPERIMENTS
    return ec2.InterfaceVpcEndpointAwsService(name)


class ConfigError(ValueError):
    """A configuration value that cannot be deployed."""

    def __init__(self, key: str, value: Any, allowed: str, fix: str) -> None:
        self.key = key
        super().__init__(f"config: {key}={value!r} is invalid: {allowed}. Fix: {fix}")


class ConfigSyntaxError(ConfigError):
    """The file is not valid TOML: where (file, line, column) and what is wrong."""

    def __init__(self, path: Path, error: tomllib.TOMLDecodeError) -> None:
        # Python 3.11's TOMLDecodeError has no line/column attributes: they end its message.
        where = re.search(r"\(at line (\d+), column (\d+)\)$", str(error))
        what = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)$", "", str(error))
        self.key = "<syntax>"
        self.line, self.column = (int(where[1]), int(where[2])) if where else (None, None)
        position = f"{self.line}:{self.column}" if where else "end of file"
        ValueError.__init__(self, f"config: {path}:{position}: TOML syntax error: {what}. Fix: correct the TOML at "
                                  "that position (strings in double quotes, arrays in [ ], one key = value per line)")


@dataclass(frozen=True)
class CreatedNetworkConfig:
    cidr: str
    nat_gateways: int
    interface_endpoints: tuple[str, ...]


@dataclass(frozen=True)
class ImportedNetworkConfig:
    vpc_id: str
    private_subnet_ids: tuple[str, ...]


@dataclass(frozen=True)
class DatasetsConfig:
    noncurrent_version_days: int
    access_logs_retention_days: int
    snapshot_retention_days: int  # Recycle Bin retention of deleted dataset snapshots


@dataclass(frozen=True)
class DatasetVolumeConfig:
    name: str
    version: str
    size_gib: int
    initialization_rate_mibps: Optional[int]


@dataclass(frozen=True)
class FleetConfig:
    name: str
    instance_types: tuple[str, ...]
    max_capacity: int
    on_demand_base_capacity: int
    scale_to_zero_after_minutes: int  # 0: the idle alarm only notifies
    dataset_volumes: tuple[DatasetVolumeConfig, ...] = ()


@dataclass(frozen=True)
class QueueConfig:
    name: str
    instance_types: tuple[str, ...]
    image: str  # the job definition's default image (ECR)
    max_vcpus: int
    on_demand_max_vcpus: int  # 0: Spot only
    multi_node_instance_types: tuple[str, ...]
    multi_node_max_vcpus: int
    job_attempts: int
    job_timeout_hours: int
    dataset_volumes: tuple[DatasetVolumeConfig, ...] = ()
    multi_node_efa: bool = False  # TrainingQueue(multi_node_efa=...): EFA on the multi-node instances
    elastic_max_nodes: int = 0  # ElasticTraining(max_nodes=...): elastic jobs of 1 to this many nodes; 0: none


@dataclass(frozen=True)
class RetrainConfig:
    """A training job the endpoint's drift alarm starts: one per episode, at most once per cooldown."""
    queue: str
    image: str
    command: tuple[str, ...]
    cooldown_hours: int


# --- production quality, latency scaling and the feature watch of an endpoint (issue 19) ---------------------------
@dataclass(frozen=True)
class QualityConfig:
    """Production quality against ground-truth labels (ModelQuality): the alarm and its retraining trigger."""
    problem_type: str  # binary | multiclass | regression
    baseline: float  # the live model's held-out accuracy (a share) or MAE
    prediction_path: str = ""
    probability_threshold: Optional[float] = None
    baseline_examples: Optional[int] = None  # the held-out examples behind baseline (its noise counts)
    min_labelled: int = 200
    max_drop_points: float = 1.5
    false_alarms_per_90_days: float = 0.25  # a healthy model's expected alarms, baseline noise included
    power: float = 0.9  # one batch detects a drop of max_drop_points with this chance
    max_batch_hours: int = 168
    reference_labels: int = 10_000  # production labels after a promotion: the reference later ones are judged against
    schedule_hours: int = 1
    label_lateness_hours: int = 24
    retrain_cooldown_hours: int = 24  # with the endpoint's retrain: the quality trigger's own cooldown


@dataclass(frozen=True)
class FeatureWatchConfig:
    std_ratio_low: float = 0.5
    std_ratio_high: float = 2.0
    explained_variance_drop_points: float = 5.0


@dataclass(frozen=True)
class PromotionConfig:
    """What ./platform model promote judges: the candidate against the live model on the same held-out examples."""
    metric: str = "holdout_accuracy"
    tolerance_points: float = 0.5  # how much worse a candidate may be: accuracy points, or percent of the live MAE
    alpha: float = 0.05  # the largest chance of promoting a candidate worse by the tolerance or more
    higher_is_better: bool = True
    evaluate_command: tuple[str, ...] = ()  # the evaluation job's command (ml_platform_job.evaluation's contract)
    queue: Optional[str] = None  # whose evaluation job definition runs it; default: the retraining queue, else the first
    holdout_uses: int = 5  # judgements one held-out set serves, each at alpha / holdout_uses (runtime.decisions.promotion.Ledger)
    max_chain_drop_points: Optional[float] = None  # how much worse than the chain's first model; None: tolerance_points


@dataclass(frozen=True)
class EndpointConfig:
    name: str
    image_uri: str
    model_data_key: str  # in the environment's dataset bucket; {version} where the model version is declared
    instance_type: str
    sampling_percentage: int
    max_instances: int  # above 1: target tracking on invocations per instance
    invocations_per_instance: int
    retrain: Optional[RetrainConfig] = None
    model_version: Optional[str] = None  # the initial declared version; ./platform model promote changes it
    promotion: PromotionConfig = PromotionConfig()
    # Issue 19: one latency setting for the p99 alarm and the scale-out policy, quality, feature watch.
    p99_latency_ms: int = 500
    scale_out_on_latency: bool = True
    latency_scale_out_cooldown_minutes: int = 10
    concurrent_requests_per_model: Optional[int] = None  # high-resolution target tracking beside invocations
    quality: Optional[QualityConfig] = None
    feature_watch: FeatureWatchConfig = FeatureWatchConfig()


@dataclass(frozen=True)
class MlflowConfig:
    """SageMaker's managed MLflow for the environment: serverless unless a tracking server size is given."""
    tracking_server_size: Optional[str] = None
    mlflow_version: Optional[str] = None
    weekly_maintenance_window_start: str = "Sun:03:00"
    automatic_model_registration: bool = False


@dataclass(frozen=True)
class BudgetConfig:
    monthly_limit_usd: float
    stop_at_percent: Optional[int]  # None: notify only
    spend_check_minutes: int


@dataclass(frozen=True)
class EnvironmentConfig:
    name: str
    project: str
    account: str
    region: str
    availability_zones: tuple[str, ...]
    cost_center: str
    alert_emails: tuple[str, ...]
    network: CreatedNetworkConfig | ImportedNetworkConfig
    datasets: DatasetsConfig
    fleets: tuple[FleetConfig, ...]
    endpoints: tuple[EndpointConfig, ...]
    queues: tuple[QueueConfig, ...]
    budget: Optional[BudgetConfig]
    mlflow: MlflowConfig = MlflowConfig()

    @property
    def is_dev(self) -> bool:
        return self.name == "dev"

    @property
    def removal_policy(self) -> RemovalPolicy:
        """dev's stateful resources go with their stack; everywhere else they are retained."""
        from aws_cdk import RemovalPolicy

        return RemovalPolicy.DESTROY if self.is_dev else RemovalPolicy.RETAIN

    @property
    def termination_protection(self) -> bool:
        return self.name == "prod"

    @property
    def tags(self) -> dict[str, str]:
        return {"environment": self.name, "project": self.project, "cost-center": self.cost_center}

    def evaluation_queue(self, endpoint: EndpointConfig) -> Optional[str]:
        """The queue whose evaluation job definition scores the endpoint's candidates: promotion.queue, else the
        endpoint's retraining queue, else the environment's first queue (None without queues)."""
        return endpoint.promotion.queue or (endpoint.retrain.queue if endpoint.retrain else None) or \
            (self.queues[0].name if self.queues else None)

    def evaluation_commands(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """Queue -> endpoint -> the evaluation command deployed for it (promotion.evaluate_command), for the endpoints
        that set one: what each queue's EvaluationSubmitter runs."""
        commands: dict[str, dict[str, tuple[str, ...]]] = {}
        for endpoint in self.endpoints:
            queue = self.evaluation_queue(endpoint)
            if endpoint.promotion.evaluate_command and queue:
                commands.setdefault(queue, {})[endpoint.name] = endpoint.promotion.evaluate_command
        return commands


@dataclass(frozen=True)
class PlatformConfig:
    project: str
    environments: Mapping[str, EnvironmentConfig]

    def select(self, names: Optional[str]) -> list[EnvironmentConfig]:
        """The environments named in a comma-separated list (all when None), in the order given."""
        if names is None:
            return list(self.environments.values())
        selected = []
        for name in (n.strip() for n in names.split(",")):
            if name not in self.environments:
                raise ConfigError("context environments", name, f"one of {sorted(self.environments)}",
                                  "pass -c environments=dev,staging,prod with configured names")
            selected.append(self.environments[name])
        return selected


def load(path: Path = DEFAULT_CONFIG) -> PlatformConfig:
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigSyntaxError(path, error) from None
    except FileNotFoundError:
        raise ConfigError("config file", str(path), "an existing TOML file", "create it (see docs/CONFIGURATION.md)") from None
    return parse(raw)


def parse(raw: Mapping[str, Any]) -> PlatformConfig:
    _keys(TOP_LEVEL, raw, required={"project", "environments"})
    project = _string("project", raw["project"], r"^[a-z][a-z0-9-]{1,30}[a-z0-9]$",
                      "3-32 lowercase letters, digits and hyphens", "use a short name such as 'ml-platform'")
    environments = raw["environments"]
    if not isinstance(environments, Mapping) or not environments:
        raise ConfigError("environments", environments, "a table of environments", "add [environments.dev]")
    parsed = {}
    for name, values in environments.items():
        if name not in ENVIRONMENT_NAMES:
            raise ConfigError(f"environments.{name}", name, f"one of {list(ENVIRONMENT_NAMES)}",
                              "rename the table or remove it")
        parsed[name] = _environment(name, project, values)
    return PlatformConfig(project=project, environments=parsed)


def _environment(name: str, project: str, raw: Any) -> EnvironmentConfig:
    at = f"environments.{name}"
    _keys(at, raw, required={"account", "region", "availability_zones", "cost_center", "alert_emails", "network",
                             "datasets"}, optional={"fleets", "endpoints", "budget", "queues", "mlflow"})
    region = raw["region"]
    if region not in REGIONS:
        raise ConfigError(f"{at}.region", region, "an AWS Region name known to aws-cdk-lib, such as us-east-1",
                          "fix the spelling")
    azs = _string_list(f"{at}.availability_zones", raw["availability_zones"], 1, 6)
    for az in azs:
        if not re.match(rf"^{re.escape(region)}[a-z]$", az):
            raise ConfigError(f"{at}.availability_zones", az, f"an AZ name of {region}, such as {region}a",
                              "use AZ names of the environment's Region")
    if len(set(azs)) != len(azs):
        raise ConfigError(f"{at}.availability_zones", list(azs), "each AZ once", "remove the duplicate")
    emails = _string_list(f"{at}.alert_emails", raw["alert_emails"], 1, 20)
    for email in emails:
        if not re.match(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", email):
            raise ConfigError(f"{at}.alert_emails", email, "an e-mail address", "correct the address")
    network = _network(f"{at}.network", raw["network"], len(azs))
    queues = _queues(f"{at}.queues", raw.get("queues", []), network)
    fleets = _fleets(f"{at}.fleets", raw.get("fleets", []))
    mlflow = _mlflow(f"{at}.mlflow", raw.get("mlflow", {}))
    if (queues or fleets) and isinstance(network, CreatedNetworkConfig) and network.nat_gateways == 0:
        # The serverless app's host (mlflow.sagemaker.<region>.app.aws) has no documented interface endpoint.
        if mlflow.tracking_server_size is None:
            raise ConfigError(f"{at}.network.nat_gateways", 0, "at least 1 for the serverless MLflow app: jobs and "
                              "fleet instances reach it only with egress (no interface endpoint serves it)",
                              f"set nat_gateways = 1, or {at}.mlflow.tracking_server_size (a tracking server is "
                              f"reached through the interface endpoints {list(MLFLOW_ENDPOINTS)})")
        missing = [name for name in MLFLOW_ENDPOINTS if name not in network.interface_endpoints]
        if missing:
            raise ConfigError(f"{at}.network.interface_endpoints", list(network.interface_endpoints),
                              f"with no NAT gateway, jobs and fleet instances record their runs in SageMaker's MLflow "
                              f"through the interface endpoints {list(MLFLOW_ENDPOINTS)}", f"add {missing}, or set "
                              "nat_gateways >= 1")
    endpoints = _endpoints(f"{at}.endpoints", raw.get("endpoints", []))
    for index, endpoint in enumerate(endpoints):
        if endpoint.retrain and endpoint.retrain.queue not in {q.name for q in queues}:
            raise ConfigError(f"{at}.endpoints[{index}].retrain.queue", endpoint.retrain.queue,
                              f"a queue of this environment ({sorted(q.name for q in queues)})",
                              f"add [[{at}.queues]] with that name or name an existing queue")
        if endpoint.promotion.queue and endpoint.promotion.queue not in {q.name for q in queues}:
            raise ConfigError(f"{at}.endpoints[{index}].promotion.queue", endpoint.promotion.queue,
                              f"a queue of this environment ({sorted(q.name for q in queues)}): its evaluation "
                              "jobs score the endpoint's candidates", f"add [[{at}.queues]] with that name or name an "
                              "existing queue")
    return EnvironmentConfig(
        name=name,
        project=project,
        account=_string(f"{at}.account", raw["account"], r"^\d{12}$", "a 12-digit AWS account id (as a string)",
                        'quote it and keep leading zeros, e.g. account = "012345678901"'),
        region=region,
        availability_zones=azs,
        cost_center=_string(f"{at}.cost_center", raw["cost_center"], r"^[\w .:/=+@-]{1,256}$",
                            "1-256 characters allowed in an AWS tag value", "use the finance team's cost-center code"),
        alert_emails=emails,
        network=network,
        datasets=_datasets(f"{at}.datasets", raw["datasets"]),
        fleets=fleets,
        endpoints=endpoints,
        queues=queues,
        budget=_budget(f"{at}.budget", raw["budget"]) if "budget" in raw else None,
        mlflow=mlflow,
    )


def _network(at: str, raw: Any, az_count: int) -> CreatedNetworkConfig | ImportedNetworkConfig:
    if not isinstance(raw, Mapping) or raw.get("mode") not in ("create", "import"):
        raise ConfigError(f"{at}.mode", raw.get("mode") if isinstance(raw, Mapping) else raw, "'create' or 'import'",
                          "set mode = \"create\" for a new VPC or \"import\" with vpc_id and private_subnet_ids")
    if raw["mode"] == "create":
        _keys(at, raw, required={"mode", "cidr", "nat_gateways", "interface_endpoints"})
        endpoints = _string_list(f"{at}.interface_endpoints", raw["interface_endpoints"], 0, 20)
        for endpoint in endpoints:
            if endpoint not in INTERFACE_ENDPOINT_NAMES:
                raise ConfigError(f"{at}.interface_endpoints", endpoint, f"one of {sorted(INTERFACE_ENDPOINT_NAMES)}",
                                  "use the service's endpoint short name")
        return CreatedNetworkConfig(
            cidr=_string(f"{at}.cidr", raw["cidr"], r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$",
                         "an IPv4 CIDR block from /16 to /24", "use for example \"10.10.0.0/16\""),
            nat_gateways=_integer(f"{at}.nat_gateways", raw["nat_gateways"], 0, az_count),
            interface_endpoints=endpoints,
        )
    _keys(at, raw, required={"mode", "vpc_id", "private_subnet_ids"})
    subnets = _string_list(f"{at}.private_subnet_ids", raw["private_subnet_ids"], az_count, az_count)
    for subnet in subnets:
        _string(f"{at}.private_subnet_ids", subnet, r"^subnet-[0-9a-f]{8,17}$", "a subnet id such as subnet-0123456789abcdef0",
                "copy the ids of the VPC's private subnets, one per AZ in availability_zones order")
    return ImportedNetworkConfig(
        vpc_id=_string(f"{at}.vpc_id", raw["vpc_id"], r"^vpc-[0-9a-f]{8,17}$", "a VPC id such as vpc-0123456789abcdef0",
                       "copy the id of the network team's VPC"),
        private_subnet_ids=subnets,
    )


def _datasets(at: str, raw: Any) -> DatasetsConfig:
    _keys(at, raw, required={"noncurrent_version_days", "access_logs_retention_days"},
          optional={"snapshot_retention_days"})
    return DatasetsConfig(
        noncurrent_version_days=_integer(f"{at}.noncurrent_version_days", raw["noncurrent_version_days"], 1, 3650),
        access_logs_retention_days=_integer(f"{at}.access_logs_retention_days", raw["access_logs_retention_days"], 1, 3650),
        snapshot_retention_days=_integer(f"{at}.snapshot_retention_days", raw.get("snapshot_retention_days", 30), 1, 365),
    )


def _dataset_volumes(at: str, raw: Any) -> tuple[DatasetVolumeConfig, ...]:
    if not isinstance(raw, list):
        raise ConfigError(at, raw, "an array of tables", "write dataset_volumes = [{name = ..., version = ..., size_gib = ...}]")
    volumes = []
    for index, volume in enumerate(raw):
        where = f"{at}[{index}]"
        _keys(where, volume, required={"name", "version", "size_gib"}, optional={"initialization_rate_mibps"})
        rate = volume.get("initialization_rate_mibps")
        volumes.append(DatasetVolumeConfig(
            name=_string(f"{where}.name", volume["name"], r"^[a-z0-9][a-z0-9-]{0,39}$",
                         "1-40 lowercase letters, digits and hyphens", "use the dataset's name"),
            version=_string(f"{where}.version", volume["version"], r"^[A-Za-z0-9._-]{1,32}$",
                            "1-32 letters, digits, '.', '_' or '-'", "use the version you built"),
            size_gib=_integer(f"{where}.size_gib", volume["size_gib"], 1, 65536),
            initialization_rate_mibps=None if rate is None else _integer(f"{where}.initialization_rate_mibps", rate, 100, 300),
        ))
    return tuple(volumes)


def _fleets(at: str, raw: Any) -> tuple[FleetConfig, ...]:
    if not isinstance(raw, list):
        raise ConfigError(at, raw, "an array of tables", f"write each fleet as [[{at}]]")
    fleets = []
    for index, fleet in enumerate(raw):
        where = f"{at}[{index}]"
        _keys(where, fleet, required={"name", "instance_types", "max_capacity"},
              optional={"on_demand_base_capacity", "scale_to_zero_after_minutes", "dataset_volumes"})
        types = _catalog_types(f"{where}.instance_types", fleet["instance_types"], 1)
        max_capacity = _integer(f"{where}.max_capacity", fleet["max_capacity"], 1, 1000)
        fleets.append(FleetConfig(
            name=_string(f"{where}.name", fleet["name"], r"^[a-z][a-z0-9-]{0,39}$",
                         "1-40 lowercase letters, digits and hyphens", "use a name such as \"training\""),
            instance_types=types,
            max_capacity=max_capacity,
            on_demand_base_capacity=_integer(f"{where}.on_demand_base_capacity",
                                             fleet.get("on_demand_base_capacity", 0), 0, max_capacity),
            scale_to_zero_after_minutes=_integer(f"{where}.scale_to_zero_after_minutes",
                                                 fleet.get("scale_to_zero_after_minutes", 0), 0, 1440),
            dataset_volumes=_dataset_volumes(f"{where}.dataset_volumes", fleet.get("dataset_volumes", [])),
        ))
    names = [f.name for f in fleets]
    if len(set(names)) != len(names):
        raise ConfigError(at, names, "each fleet name once", "rename the duplicate fleet")
    return tuple(fleets)


def _catalog_types(key: str, raw: Any, low: int) -> tuple[str, ...]:
    types = _string_list(key, raw, low, 40)
    for name in types:
        if name not in GPU_CATALOG:
            raise ConfigError(key, name, "a GPU instance type of the platform's catalog",
                              "use types such as g5.xlarge or g6.2xlarge (see ml_platform_constructs.advice.gpu_catalog)")
    return types


def _ecr_image(key: str, value: Any) -> str:
    if not isinstance(value, str) or not is_tagged_ecr_image(value):
        raise ConfigError(key, value, "an Amazon ECR image with a tag or digest, ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG",
                          "push the image to ECR (AWS Deep Learning Containers are there too) and use its URI")
    return value


def _elastic_max_nodes(where: str, queue: dict, multi_node: tuple[str, ...]) -> int:
    value = _integer(f"{where}.elastic_max_nodes", queue.get("elastic_max_nodes", 0), 0, 8)
    if value == 1:
        raise ConfigError(f"{where}.elastic_max_nodes", value, "0 (no elastic jobs) or 2-8",
                          "an elastic job grows to 2 nodes or more: set 2-8, or 0")
    if value and not multi_node:
        raise ConfigError(f"{where}.elastic_max_nodes", value, "0 without multi_node_instance_types",
                          "add multi_node_instance_types and multi_node_max_vcpus, or remove elastic_max_nodes")
    return value


def _queues(at: str, raw: Any, network: CreatedNetworkConfig | ImportedNetworkConfig) -> tuple[QueueConfig, ...]:
    if not isinstance(raw, list):
        raise ConfigError(at, raw, "an array of tables", f"write each queue as [[{at}]]")
    queues = []
    for index, queue in enumerate(raw):
        where = f"{at}[{index}]"
        _keys(where, queue, required={"name", "instance_types", "image", "max_vcpus"},
              optional={"on_demand_max_vcpus", "multi_node_instance_types", "multi_node_max_vcpus", "multi_node_efa",
                        "job_attempts", "job_timeout_hours", "dataset_volumes", "elastic_max_nodes"})
        multi_node = _catalog_types(f"{where}.multi_node_instance_types", queue.get("multi_node_instance_types", []), 0)
        efa = _boolean(f"{where}.multi_node_efa", queue.get("multi_node_efa", False))
        if efa and not multi_node:
            raise ConfigError(f"{where}.multi_node_efa", True, "false without multi_node_instance_types",
                              "add multi_node_instance_types or remove multi_node_efa")
        queues.append(QueueConfig(
            name=_string(f"{where}.name", queue["name"], r"^[a-z][a-z0-9-]{0,39}$",
                         "1-40 lowercase letters, digits and hyphens", "use a name such as \"training\""),
            instance_types=_catalog_types(f"{where}.instance_types", queue["instance_types"], 1),
            image=_ecr_image(f"{where}.image", queue["image"]),
            max_vcpus=_integer(f"{where}.max_vcpus", queue["max_vcpus"], 1, 100000),
            on_demand_max_vcpus=_integer(f"{where}.on_demand_max_vcpus", queue.get("on_demand_max_vcpus", 0), 0, 100000),
            multi_node_instance_types=multi_node,
            multi_node_max_vcpus=_integer(f"{where}.multi_node_max_vcpus", queue.get("multi_node_max_vcpus", 0), 0, 100000),
            job_attempts=_integer(f"{where}.job_attempts", queue.get("job_attempts", 3), 1, 10),
            job_timeout_hours=_integer(f"{where}.job_timeout_hours", queue.get("job_timeout_hours", 24), 1, 336),
            dataset_volumes=_dataset_volumes(f"{where}.dataset_volumes", queue.get("dataset_volumes", [])),
            multi_node_efa=efa,
            elastic_max_nodes=_elastic_max_nodes(where, queue, multi_node),
        ))
        if isinstance(network, CreatedNetworkConfig) and network.nat_gateways == 0:
            missing = [name for name in QUEUE_ENDPOINTS if name not in network.interface_endpoints]
            if missing:
                raise ConfigError(f"{at.rsplit('.', 1)[0]}.network.interface_endpoints", list(network.interface_endpoints),
                                  f"with no NAT gateway, a queue's instances need the interface endpoints "
                                  f"{list(QUEUE_ENDPOINTS)} (ECS agent, image pulls, job logs)",
                                  f"add {missing}, or set nat_gateways >= 1")
            if efa:
                raise ConfigError(f"{where}.multi_node_efa", True,
                                  "false with no NAT gateway: instances with EFA install its driver from the internet at boot",
                                  "set nat_gateways >= 1 in the network, or remove multi_node_efa")
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        raise ConfigError(at, names, "each queue name once", "rename the duplicate queue")
    return tuple(queues)


def _retrain(at: str, raw: Any) -> RetrainConfig:
    _keys(at, raw, required={"queue", "image", "command"}, optional={"cooldown_hours"})
    command = _string_list(f"{at}.command", raw["command"], 1, 100)
    return RetrainConfig(queue=_string(f"{at}.queue", raw["queue"], r"^[a-z][a-z0-9-]{0,39}$", "a queue name", "name a queue of this environment"),
                         image=_ecr_image(f"{at}.image", raw["image"]), command=command,
                         cooldown_hours=_integer(f"{at}.cooldown_hours", raw.get("cooldown_hours", 24), *COOLDOWN_HOURS))


def _endpoints(at: str, raw: Any) -> tuple[EndpointConfig, ...]:
    if not isinstance(raw, list):
        raise ConfigError(at, raw, "an array of tables", f"write each endpoint as [[{at}]]")
    endpoints = []
    for index, endpoint in enumerate(raw):
        where = f"{at}[{index}]"
        _keys(where, endpoint, required={"name", "image_uri", "model_data_key", "instance_type"},
              optional={"sampling_percentage", "max_instances", "invocations_per_instance", "retrain", "model_version",
                        "promotion", *SERVING_QUALITY_KEYS})
        versioned = _declared_version(where, endpoint)
        endpoints.append(EndpointConfig(
            name=_string(f"{where}.name", endpoint["name"], r"^[a-z][a-z0-9-]{0,39}$",
                         "1-40 lowercase letters, digits and hyphens", "use a name such as \"classifier\""),
            image_uri=_string(f"{where}.image_uri", endpoint["image_uri"], ECR_IMAGE.pattern,
                              "an Amazon ECR image URI (<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>): "
                              "SageMaker pulls endpoint images from ECR",
                              "push the image to an ECR repository (docker tag, docker push) and use that URI"),
            model_data_key=_string(f"{where}.model_data_key", endpoint["model_data_key"], r"^models/\S+\.tar\.gz$",
                                   "a key under models/ ending in .tar.gz", "upload the artifact to models/<name>/model.tar.gz"),
            instance_type=_string(f"{where}.instance_type", endpoint["instance_type"], r"^ml\.[a-z0-9]+\.[a-z0-9]+$",
                                  "a SageMaker instance type such as ml.m5.large", "prefix it with ml."),
            sampling_percentage=_integer(f"{where}.sampling_percentage", endpoint.get("sampling_percentage", 100), 0, 100),
            max_instances=_integer(f"{where}.max_instances", endpoint.get("max_instances", 1), 1, 100),
            invocations_per_instance=_integer(f"{where}.invocations_per_instance",
                                              endpoint.get("invocations_per_instance", 100), 1, 100000),
            retrain=_retrain(f"{where}.retrain", endpoint["retrain"]) if "retrain" in endpoint else None,
            model_version=versioned,
            promotion=_promotion(f"{where}.promotion", endpoint.get("promotion", {})),
            **_serving_quality(where, endpoint),
        ))
        _check_promoted_baseline(where, endpoints[-1])
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(at, names, "each endpoint name once", "rename the duplicate endpoint")
    return tuple(endpoints)


def _declared_version(at: str, endpoint: Mapping[str, Any]) -> Optional[str]:
    """The initial model version, with a model_data_key that says where each version lives ({version})."""
    key, version = endpoint.get("model_data_key"), endpoint.get("model_version")
    placeholder = isinstance(key, str) and key.count("{version}") == 1
    if version is None and not placeholder:
        return None
    if not placeholder:
        raise ConfigError(f"{at}.model_data_key", key, "a key with one {version} where model_version is set",
                          f'e.g. model_data_key = "models/{endpoint.get("name", "NAME")}/{{version}}/model.tar.gz"')
    return _string(f"{at}.model_version", version, r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                   "1-64 letters, digits, '.', '_' or '-' (a model version: a run id after a promotion)",
                   'add model_version = "initial" (the version uploaded under that name first)')


def _promotion(at: str, raw: Any) -> PromotionConfig:
    if isinstance(raw, Mapping) and "tolerance" in raw:
        raise ConfigError(f"{at}.tolerance", raw["tolerance"], "no longer a key: the gate judges a tolerance in "
                          "points since 0.5.0 (a paired test on the same held-out examples)",
                          "replace it with tolerance_points = 0.5 (points of accuracy, or percent of the live MAE)")
    _keys(at, raw, required=set(), optional={"metric", "tolerance_points", "alpha", "higher_is_better",
                                             "evaluate_command", "queue", "holdout_uses", "max_chain_drop_points"})
    uses = raw.get("holdout_uses", 5)
    if not isinstance(uses, int) or isinstance(uses, bool) or not 1 <= uses <= 100:
        raise ConfigError(f"{at}.holdout_uses", uses, "a whole number of judgements from 1 to 100",
                          "e.g. 5 (each judgement at alpha / 5; refresh the held-out set after 5)")
    chain = raw.get("max_chain_drop_points")
    higher = raw.get("higher_is_better", True)
    if not isinstance(higher, bool):
        raise ConfigError(f"{at}.higher_is_better", higher, "true or false", "true for accuracy, false for a loss")
    command = raw.get("evaluate_command", [])
    if not isinstance(command, list) or not all(isinstance(c, str) and c for c in command):
        raise ConfigError(f"{at}.evaluate_command", command, "a list of strings: the evaluation job's command",
                          'e.g. evaluate_command = ["python", "/opt/ml/code/train.py", "--evaluate"]')
    queue = raw.get("queue")
    if queue is not None:
        _string(f"{at}.queue", queue, r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}$", "a queue name of this environment",
                "name one of the environment's queues")
    return PromotionConfig(
        metric=_string(f"{at}.metric", raw.get("metric", "holdout_accuracy"), r"^holdout_[A-Za-z0-9_.-]{1,200}$",
                       "a held-out metric (holdout_<name>, as ml_platform_job.tracking logs it)", 'e.g. "holdout_accuracy"'),
        tolerance_points=_in_range(f"{at}.tolerance_points", raw.get("tolerance_points", 0.5), 0, 100, "[)",
                                   "points of accuracy (or percent of the live MAE) from 0 to under 100", "e.g. 0.5"),
        alpha=_in_range(f"{at}.alpha", raw.get("alpha", 0.05), 0, 0.5, "()",
                        "a one-sided error rate above 0 and under 0.5", "e.g. 0.05 (at most 5% of worse candidates pass)"),
        higher_is_better=higher, evaluate_command=tuple(command), queue=queue, holdout_uses=uses,
        max_chain_drop_points=None if chain is None else _in_range(
            f"{at}.max_chain_drop_points", chain, 0, 100, "[)", "points (or percent of the MAE) from 0 to under 100",
            "e.g. 0.5: a chain of promotions never more than 0.5 points worse than where it started"))


def _mlflow(at: str, raw: Any) -> MlflowConfig:
    _keys(at, raw, required=set(), optional={"tracking_server_size", "mlflow_version", "weekly_maintenance_window_start",
                                             "automatic_model_registration"})
    size = raw.get("tracking_server_size")
    if size is not None and size not in TRACKING_SERVER_SIZES:
        raise ConfigError(f"{at}.tracking_server_size", size, f"one of {list(TRACKING_SERVER_SIZES)}",
                          "remove it for the serverless MLflow app, or pick a size (Small serves about 25 users)")
    version = raw.get("mlflow_version")
    if version is not None:
        if size is None:
            raise ConfigError(f"{at}.mlflow_version", version, "only with tracking_server_size (AWS manages the "
                              "serverless app's version)", "remove mlflow_version, or set tracking_server_size")
        _string(f"{at}.mlflow_version", version, r"^\d+(\.\d+)+$", "an MLflow version such as \"3.0\"",
                "use a version SageMaker offers for tracking servers")
    registration = raw.get("automatic_model_registration", False)
    if not isinstance(registration, bool):
        raise ConfigError(f"{at}.automatic_model_registration", registration, "true or false", "write true or false")
    return MlflowConfig(
        tracking_server_size=size, mlflow_version=version, automatic_model_registration=registration,
        weekly_maintenance_window_start=_string(
            f"{at}.weekly_maintenance_window_start", raw.get("weekly_maintenance_window_start", "Sun:03:00"),
            r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01]\d|2[0-3]):([0-5]\d)$", "Day:HH:MM in UTC", 'e.g. "Sun:03:00"'))


SERVING_QUALITY_KEYS = frozenset({"p99_latency_ms", "scale_out_on_latency", "latency_scale_out_cooldown_minutes",
                                   "concurrent_requests_per_model", "quality", "feature_watch"})


def _serving_quality(where: str, endpoint: Mapping[str, Any]) -> dict[str, Any]:
    """An endpoint's latency scaling, quality and feature-watch settings (EndpointConfig fields)."""
    settings: dict[str, Any] = {
        "p99_latency_ms": _integer(f"{where}.p99_latency_ms", endpoint.get("p99_latency_ms", 500), 1, 60_000),
        "scale_out_on_latency": _boolean(f"{where}.scale_out_on_latency", endpoint.get("scale_out_on_latency", True)),
        "latency_scale_out_cooldown_minutes": _integer(f"{where}.latency_scale_out_cooldown_minutes",
                                                       endpoint.get("latency_scale_out_cooldown_minutes", 10), 1, 1440),
    }
    if "concurrent_requests_per_model" in endpoint:
        settings["concurrent_requests_per_model"] = _integer(
            f"{where}.concurrent_requests_per_model", endpoint["concurrent_requests_per_model"], 1, 10_000)
    if "quality" in endpoint:
        settings["quality"] = _quality(f"{where}.quality", endpoint["quality"])
    if "feature_watch" in endpoint:
        settings["feature_watch"] = _feature_watch(f"{where}.feature_watch", endpoint["feature_watch"])
    return settings


def _check_promoted_baseline(at: str, endpoint: EndpointConfig) -> None:
    """With a declared model version, a promotion makes the promoted run's held-out score the quality baseline: the
    gate must judge that score (accuracy, or MAE with lower better), so the one number means the same in both."""
    if endpoint.quality is None or endpoint.model_version is None:
        return
    metric = holdout_metric(endpoint.quality.problem_type)
    higher = endpoint.quality.problem_type != "regression"
    if (endpoint.promotion.metric, endpoint.promotion.higher_is_better) != (metric, higher):
        raise ConfigError(
            f"{at}.promotion", {"metric": endpoint.promotion.metric, "higher_is_better": endpoint.promotion.higher_is_better},
            f"metric {metric!r} with higher_is_better = {str(higher).lower()}: a promotion makes the run's "
            f"{metric} the baseline of the {endpoint.quality.problem_type} quality check",
            f'set promotion = {{ metric = "{metric}", higher_is_better = {str(higher).lower()} }}, or remove '
            "model_version (the configured quality baseline then stays)")


def _quality(at: str, raw: Any) -> QualityConfig:
    if isinstance(raw, Mapping) and "significance" in raw:
        raise ConfigError(f"{at}.significance", raw["significance"], "no longer a key: since 0.5.0 the check plans "
                          "batches of labels for a stated false-alarm rate (a per-window test level gave a healthy "
                          "model frequent false alarms)",
                          "remove it; false_alarms_per_90_days = 0.25 is the default (the expected false alarms of a "
                          "healthy model in 90 days)")
    _keys(at, raw, required={"problem_type", "baseline"},
          optional={"prediction_path", "probability_threshold", "min_labelled", "max_drop_points",
                    "baseline_examples", "false_alarms_per_90_days", "power", "max_batch_hours", "reference_labels",
                    "schedule_hours", "label_lateness_hours", "retrain_cooldown_hours"})
    problem = raw["problem_type"]
    if problem not in ("binary", "multiclass", "regression"):
        raise ConfigError(f"{at}.problem_type", problem, "binary, multiclass or regression",
                          "binary or multiclass are judged by accuracy, regression by MAE")
    baseline = _number(f"{at}.baseline", raw["baseline"], 0, 1 if problem != "regression" else 1e12,
                       "the live model's held-out accuracy as a share (e.g. 0.92)" if problem != "regression"
                       else "the live model's held-out MAE, above 0")
    threshold = raw.get("probability_threshold")
    if threshold is not None:
        if problem != "binary":
            raise ConfigError(f"{at}.probability_threshold", threshold, "a threshold for problem_type binary only",
                              "remove it")
        threshold = _number(f"{at}.probability_threshold", threshold, 0, 0.999999, "a share between 0 and 1")
    path = raw.get("prediction_path", "")
    if not isinstance(path, str) or not re.match(r"^$|^\d+$|^[A-Za-z0-9_*-]+(\.[A-Za-z0-9_*-]+)*$", path):
        raise ConfigError(f"{at}.prediction_path", path, "a CSV column index or a dotted JSON path of keys, list "
                          "indexes and '*'", 'e.g. prediction_path = "predictions.*.score", or "" for the whole response')
    return QualityConfig(
        problem_type=problem, baseline=baseline, prediction_path=path, probability_threshold=threshold,
        min_labelled=_integer(f"{at}.min_labelled", raw.get("min_labelled", 200), 1, 1_000_000),
        max_drop_points=_number(f"{at}.max_drop_points", raw.get("max_drop_points", 1.5), 0, 100,
                                "percentage points of accuracy (MAE: percent) above 0"),
        baseline_examples=(_integer(f"{at}.baseline_examples", raw["baseline_examples"], 1, 100_000_000)
                           if "baseline_examples" in raw else None),
        false_alarms_per_90_days=_number(f"{at}.false_alarms_per_90_days", raw.get("false_alarms_per_90_days", 0.25),
                                         0, 10, "expected false alarms of a healthy model in 90 days, above 0"),
        power=_in_range(f"{at}.power", raw.get("power", 0.9), 0.5, 1, "[)",
                        "the chance one batch detects a drop of max_drop_points, from 0.5 to under 1", "e.g. 0.9"),
        max_batch_hours=_integer(f"{at}.max_batch_hours", raw.get("max_batch_hours", 168), 1, 744),
        reference_labels=_integer(f"{at}.reference_labels", raw.get("reference_labels", 10_000), 0, 10_000_000),
        schedule_hours=_integer(f"{at}.schedule_hours", raw.get("schedule_hours", 1), 1, 24),
        label_lateness_hours=_integer(f"{at}.label_lateness_hours", raw.get("label_lateness_hours", 24), 0, 168),
        retrain_cooldown_hours=_integer(f"{at}.retrain_cooldown_hours", raw.get("retrain_cooldown_hours", 24),
                                        *COOLDOWN_HOURS))


def _feature_watch(at: str, raw: Any) -> FeatureWatchConfig:
    _keys(at, raw, required=set(), optional={"std_ratio_low", "std_ratio_high", "explained_variance_drop_points"})
    low = _number(f"{at}.std_ratio_low", raw.get("std_ratio_low", 0.5), 0, 0.999999, "a share under 1, e.g. 0.5")
    high = raw.get("std_ratio_high", 2.0)
    if isinstance(high, bool) or not isinstance(high, (int, float)) or not 1 < high <= 1000:
        raise ConfigError(f"{at}.std_ratio_high", high, "a multiple above 1", "e.g. std_ratio_high = 2.0")
    return FeatureWatchConfig(std_ratio_low=low, std_ratio_high=float(high), explained_variance_drop_points=_number(
        f"{at}.explained_variance_drop_points", raw.get("explained_variance_drop_points", 5.0), 0, 99.999,
        "percentage points between 0 and 100"))


def _number(key: str, value: Any, low: float, high: float, allowed: str) -> float:
    """A number in (low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
        raise ConfigError(key, value, allowed, f"set a number above {low:g} and at most {high:g}")
    return float(value)


def _in_range(key: str, value: Any, low: float, high: float, bounds: str, allowed: str, fix: str) -> float:
    """A number between low and high, each end open "(" ")" or closed "[" "]"."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not ((low <= value) if bounds[0] == "[" else (low < value)) or \
            not ((value <= high) if bounds[1] == "]" else (value < high)):
        raise ConfigError(key, value, allowed, fix)
    return float(value)


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false", f"write {key.rsplit('.', 1)[-1]} = true or false (no quotes)")
    return value


def _budget(at: str, raw: Any) -> BudgetConfig:
    _keys(at, raw, required={"monthly_limit_usd"}, optional={"stop_at_percent", "spend_check_minutes"})
    limit = raw["monthly_limit_usd"]
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit <= 10_000_000:
        raise ConfigError(f"{at}.monthly_limit_usd", limit, "a positive amount in USD", "e.g. monthly_limit_usd = 2000")
    stop = raw.get("stop_at_percent", 80)
    return BudgetConfig(
        monthly_limit_usd=float(limit),
        stop_at_percent=None if stop == 0 else _integer(f"{at}.stop_at_percent", stop, 1, 100),
        spend_check_minutes=_integer(f"{at}.spend_check_minutes", raw.get("spend_check_minutes", 15), 1, 1440),
    )


def _keys(at: str, raw: Any, *, required: set[str], optional: set[str] = frozenset()) -> None:
    table = f"[{at}]" if at != TOP_LEVEL else "the file's top level"
    if not isinstance(raw, Mapping):
        raise ConfigError(at, raw, "a table", f"write [{at}] with keys {sorted(required)}")
    # Unknown keys first: a misspelled required key is reported as the misspelling, not as a missing key.
    known = sorted(required | optional)
    unknown = raw.keys() - required - optional
    if unknown:
        key = sorted(unknown)[0]
        # A rename only to a key that is not set already: renaming `environment` to `environments` beside an
        # [environments] table would make a second one.
        unset = difflib.get_close_matches(key, [k for k in known if k not in raw], n=1)
        taken = difflib.get_close_matches(key, [k for k in known if k in raw], n=1)
        if unset:
            fix = f"rename it to {unset[0]!r}"
        elif taken:
            fix = f"remove it ({taken[0]!r}, the known key closest to it, is set already)"
        else:
            fix = "remove it or rename it to a known key"
        raise ConfigError(f"{at}.{key}" if at != TOP_LEVEL else key, raw[key],
                          f"not a known key of {table} (known: {known})", fix)
    missing = required - raw.keys()
    if missing:
        raise ConfigError(f"{at}.{sorted(missing)[0]}" if at != TOP_LEVEL else sorted(missing)[0], None,
                          "a required key", f"add {sorted(missing)} to {table}")


def _string(key: str, value: Any, pattern: str, allowed: str, fix: str) -> str:
    if not isinstance(value, str) or not re.match(pattern, value):
        raise ConfigError(key, value, allowed, fix)
    return value


def _string_list(key: str, value: Any, low: int, high: int) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value) or not low <= len(value) <= high:
        raise ConfigError(key, value, f"a list of {low} to {high} strings", "write it as [\"a\", \"b\"]")
    return tuple(value)


def _integer(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, value, f"a whole number from {low} to {high}", f"set a value between {low} and {high}")
    return value
