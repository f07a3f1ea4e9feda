"""Configuration: every bad value fails before synth, naming the key, the value and what is allowed."""

import copy
import re
import tomllib
from pathlib import Path

import pytest
from aws_cdk import RemovalPolicy

from stacks import config as platform_config
from stacks.config import DEFAULT_CONFIG, ConfigError, ConfigSyntaxError, CreatedNetworkConfig, ImportedNetworkConfig, load, parse

RAW = tomllib.loads(DEFAULT_CONFIG.read_text())
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/classifier:1"


def with_change(path: str, value):
    raw = copy.deepcopy(RAW)
    *parents, last = path.split(".")
    node = raw
    for part in parents:
        node = node[part]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return raw


DELETE = object()


def test_shipped_configuration_is_valid():
    config = parse(RAW)
    assert list(config.environments) == ["dev", "staging", "prod"]
    assert isinstance(config.environments["dev"].network, CreatedNetworkConfig)
    assert isinstance(config.environments["prod"].network, ImportedNetworkConfig)


def test_only_dev_is_destroyable_and_only_prod_is_termination_protected():
    envs = parse(RAW).environments
    assert [e.removal_policy for e in envs.values()] == [RemovalPolicy.DESTROY, RemovalPolicy.RETAIN, RemovalPolicy.RETAIN]
    assert [e.termination_protection for e in envs.values()] == [False, False, True]


def test_tags_carry_environment_project_and_cost_center():
    assert parse(RAW).environments["prod"].tags == {"environment": "prod", "project": "ml-platform",
                                                    "cost-center": "ml-production"}


@pytest.mark.parametrize("path,value,message", [
    ("environments.qa", RAW["environments"]["dev"], "environments.qa='qa' is invalid: one of ['dev', 'staging', 'prod']"),
    ("environments.dev.account", "12345", "environments.dev.account='12345' is invalid: a 12-digit AWS account id"),
    ("environments.dev.account", 111111111111, "environments.dev.account=111111111111"),
    ("environments.dev.region", "us-middle-1", "environments.dev.region='us-middle-1' is invalid: an AWS Region name"),
    ("environments.dev.availability_zones", ["us-west-2a"], "environments.dev.availability_zones='us-west-2a'"),
    ("environments.dev.availability_zones", [], "a list of 1 to 6 strings"),
    ("environments.dev.network.nat_gateways", -1, "environments.dev.network.nat_gateways=-1 is invalid: a whole number from 0 to 2"),
    ("environments.dev.network.nat_gateways", 3, "nat_gateways=3"),
    ("environments.dev.network.cidr", "10.0.0.0/8", "environments.dev.network.cidr='10.0.0.0/8' is invalid: an IPv4 CIDR block from /16 to /24"),
    ("environments.dev.network.interface_endpoints", ["s3"], "interface_endpoints='s3' is invalid: one of"),
    ("environments.dev.network.mode", "borrow", "environments.dev.network.mode='borrow' is invalid: 'create' or 'import'"),
    ("environments.prod.network.private_subnet_ids", ["subnet-0a1b2c3d4e5f60711"], "a list of 3 to 3 strings"),
    ("environments.prod.network.vpc_id", "vpc-1", "environments.prod.network.vpc_id='vpc-1'"),
    ("environments.dev.alert_emails", ["nobody"], "environments.dev.alert_emails='nobody' is invalid: an e-mail address"),
    ("environments.dev.datasets.noncurrent_version_days", 0, "noncurrent_version_days=0 is invalid: a whole number from 1 to 3650"),
    ("environments.dev.cost_center", "", "environments.dev.cost_center=''"),
    ("environments.dev.colour", "blue", "environments.dev.colour='blue' is invalid: not a known key of [environments.dev]"),
    ("environments.dev.account", DELETE, "environments.dev.account=None is invalid: a required key"),
    ("project", "ML Platform", "project='ML Platform'"),
    ("environments.dev.fleets", {"name": "x"}, "environments.dev.fleets={'name': 'x'} is invalid: an array of tables"),
    ("environments.dev.fleets", [{"name": "training", "instance_types": ["m5.large"], "max_capacity": 1}],
     "environments.dev.fleets[0].instance_types='m5.large' is invalid: a GPU instance type of the platform's catalog"),
    ("environments.dev.fleets", [{"name": "training", "instance_types": ["g5.xlarge"], "max_capacity": 0}],
     "environments.dev.fleets[0].max_capacity=0 is invalid: a whole number from 1 to 1000"),
    ("environments.dev.fleets", [{"name": "training", "instance_types": ["g5.xlarge"], "max_capacity": 2,
                                  "on_demand_base_capacity": 3}], "on_demand_base_capacity=3 is invalid: a whole number from 0 to 2"),
    ("environments.dev.fleets", [{"name": "Training", "instance_types": ["g5.xlarge"], "max_capacity": 1}],
     "environments.dev.fleets[0].name='Training'"),
    ("environments.dev.fleets", [{"name": "a", "instance_types": ["g5.xlarge"], "max_capacity": 1},
                                 {"name": "a", "instance_types": ["g5.xlarge"], "max_capacity": 1}], "each fleet name once"),
    ("environments.dev.fleets", [{"name": "a", "instance_types": ["g5.xlarge"], "max_capacity": 1, "spot": True}],
     "environments.dev.fleets[0].spot=True is invalid: not a known key"),
])
def test_bad_value_names_key_value_and_what_is_allowed(path, value, message):
    with pytest.raises(ConfigError) as error:
        parse(with_change(path, value))
    assert message in str(error.value)
    assert "Fix: " in str(error.value)


def test_selecting_an_unknown_environment_fails():
    with pytest.raises(ConfigError, match="context environments='qa'"):
        parse(RAW).select("dev,qa")


def test_selection_keeps_the_given_order():
    assert [e.name for e in parse(RAW).select("prod,dev")] == ["prod", "dev"]


def test_fleets_are_optional_and_default_to_all_spot_and_notify_only():
    raw = with_change("environments.dev.fleets", [{"name": "training", "instance_types": ["g5.xlarge"], "max_capacity": 1}])
    fleet = parse(raw).environments["dev"].fleets[0]
    assert (fleet.on_demand_base_capacity, fleet.scale_to_zero_after_minutes) == (0, 0)
    assert parse(with_change("environments.dev.fleets", DELETE)).environments["dev"].fleets == ()


@pytest.mark.parametrize("endpoint,message", [
    ({"name": "c", "image_uri": "img", "model_data_key": "models/c.tar.gz", "instance_type": "ml.m5.large"},
     "image_uri='img' is invalid: an Amazon ECR image URI"),
    ({"name": "c", "image_uri": "docker.io/library/nginx:1", "model_data_key": "models/c.tar.gz",
      "instance_type": "ml.m5.large"}, "image_uri='docker.io/library/nginx:1' is invalid: an Amazon ECR image URI"),
    ({"name": "c", "image_uri": ECR, "model_data_key": "c.tar.gz", "instance_type": "ml.m5.large"},
     "model_data_key='c.tar.gz' is invalid: a key under models/"),
    ({"name": "c", "image_uri": ECR, "model_data_key": "models/c.tar.gz", "instance_type": "m5.large"},
     "instance_type='m5.large' is invalid"),
    ({"name": "c", "image_uri": ECR, "model_data_key": "models/c.tar.gz", "instance_type": "ml.m5.large",
      "sampling_percentage": 150}, "sampling_percentage=150 is invalid: a whole number from 0 to 100"),
    ({"name": "c", "image_uri": ECR, "model_data_key": "models/c.tar.gz", "instance_type": "ml.m5.large",
      "retrain": {"queue": "training", "image": ECR, "command": ["python", "t.py"], "cooldown_hours": 721}},
     "cooldown_hours=721 is invalid: a whole number from 1 to 720"),
])
def test_bad_endpoint_values_name_the_key(endpoint, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(with_change("environments.dev.endpoints", [endpoint]))


def test_endpoints_default_to_full_capture_and_one_instance():
    minimal = {"name": "c", "image_uri": ECR, "model_data_key": "models/c.tar.gz", "instance_type": "ml.m5.large"}
    endpoint = parse(with_change("environments.dev.endpoints", [minimal])).environments["dev"].endpoints[0]
    assert (endpoint.sampling_percentage, endpoint.max_instances) == (100, 1)
    assert (endpoint.p99_latency_ms, endpoint.scale_out_on_latency, endpoint.quality) == (500, True, None)
    assert (endpoint.feature_watch.std_ratio_low, endpoint.feature_watch.std_ratio_high,
            endpoint.feature_watch.explained_variance_drop_points) == (0.5, 2.0, 5.0)


def test_shipped_dev_endpoint_judges_quality_and_scales_on_latency():
    endpoint = parse(RAW).environments["dev"].endpoints[0]
    assert (endpoint.max_instances, endpoint.p99_latency_ms) == (2, 500)
    quality = endpoint.quality
    assert (quality.problem_type, quality.baseline, quality.baseline_examples, quality.min_labelled,
            quality.max_drop_points, quality.false_alarms_per_90_days, quality.power, quality.reference_labels,
            quality.label_lateness_hours, quality.retrain_cooldown_hours) == (
        "binary", 0.92, 5000, 200, 1.5, 0.25, 0.9, 10_000, 24, 24)


QUALITY = {"problem_type": "binary", "baseline": 0.92}


@pytest.mark.parametrize("change,message", [
    ({"p99_latency_ms": 0}, "p99_latency_ms=0 is invalid: a whole number from 1 to 60000"),
    ({"scale_out_on_latency": "yes"}, "scale_out_on_latency='yes' is invalid: true or false"),
    ({"concurrent_requests_per_model": 0}, "concurrent_requests_per_model=0 is invalid"),
    ({"quality": {"problem_type": "ranking", "baseline": 0.9}}, "quality.problem_type='ranking' is invalid"),
    ({"quality": {"problem_type": "binary", "baseline": 92}}, "quality.baseline=92 is invalid: the live model's held-out accuracy"),
    ({"quality": {**QUALITY, "probability_threshold": 1.5}}, "quality.probability_threshold=1.5 is invalid"),
    ({"quality": {"problem_type": "multiclass", "baseline": 0.9, "probability_threshold": 0.5}},
     "quality.probability_threshold=0.5 is invalid: a threshold for problem_type binary only"),
    ({"quality": {**QUALITY, "prediction_path": "a[0]"}}, "quality.prediction_path='a[0]' is invalid"),
    ({"quality": {**QUALITY, "max_drop": 2}}, "quality.max_drop=2 is invalid: not a known key"),
    ({"quality": {**QUALITY, "significance": 0.001}}, "quality.significance=0.001 is invalid: no longer a key: since "
                                                       "0.5.0 the check plans batches"),
    ({"quality": {**QUALITY, "baseline_examples": 0}}, "quality.baseline_examples=0 is invalid"),
    ({"quality": {**QUALITY, "power": 1}}, "quality.power=1 is invalid: the chance one batch detects"),
    ({"quality": {**QUALITY, "false_alarms_per_90_days": 0}}, "quality.false_alarms_per_90_days=0 is invalid"),
    ({"quality": {**QUALITY, "label_lateness_hours": 200}}, "quality.label_lateness_hours=200 is invalid"),
    ({"quality": {**QUALITY, "retrain_cooldown_hours": 0}}, "quality.retrain_cooldown_hours=0 is invalid: a whole number from 1"),
    ({"feature_watch": {"std_ratio_low": 1.5}}, "feature_watch.std_ratio_low=1.5 is invalid"),
    ({"feature_watch": {"std_ratio_high": 0.9}}, "feature_watch.std_ratio_high=0.9 is invalid: a multiple above 1"),
])
def test_bad_quality_and_scaling_values_name_the_key(change, message):
    endpoint = {**RAW["environments"]["dev"]["endpoints"][0], **change}
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(with_change("environments.dev.endpoints", [endpoint]))



@pytest.mark.parametrize("budget,message", [
    ({"monthly_limit_usd": 0}, "environments.dev.budget.monthly_limit_usd=0 is invalid: a positive amount in USD"),
    ({"monthly_limit_usd": 100, "stop_at_percent": 120}, "stop_at_percent=120 is invalid: a whole number from 1 to 100"),
    ({"monthly_limit_usd": 100, "cap": 1}, "environments.dev.budget.cap=1 is invalid: not a known key"),
])
def test_bad_budget_values_name_the_key(budget, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(with_change("environments.dev.budget", budget))


def test_budget_defaults_stop_at_80_percent_checked_every_15_minutes_and_0_means_notify_only():
    budget = parse(with_change("environments.dev.budget", {"monthly_limit_usd": 100})).environments["dev"].budget
    assert (budget.stop_at_percent, budget.spend_check_minutes) == (80, 15)
    notify_only = parse(with_change("environments.dev.budget", {"monthly_limit_usd": 100, "stop_at_percent": 0}))
    assert notify_only.environments["dev"].budget.stop_at_percent is None



@pytest.mark.parametrize("volumes,message", [
    ([{"name": "imagenet", "version": "v3"}], "dataset_volumes[0].size_gib=None is invalid: a required key"),
    ([{"name": "imagenet", "version": "v3", "size_gib": 200, "initialization_rate_mibps": 50}],
     "dataset_volumes[0].initialization_rate_mibps=50 is invalid: a whole number from 100 to 300"),
    ([{"name": "ImageNet", "version": "v3", "size_gib": 200}], "dataset_volumes[0].name='ImageNet' is invalid"),
])
def test_bad_dataset_volumes_name_the_key(volumes, message):
    fleet = {"name": "training", "instance_types": ["g5.xlarge"], "max_capacity": 1, "dataset_volumes": volumes}
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(with_change("environments.dev.fleets", [fleet]))


def test_snapshot_retention_defaults_to_30_days():
    assert parse(RAW).environments["dev"].datasets.snapshot_retention_days == 30


def test_a_toml_syntax_error_names_the_file_line_column_and_what_is_wrong(tmp_path):
    path = tmp_path / "environments.toml"
    path.write_text('project = "ml-platform"\n\n[environments.dev]\naccount = "111111111111\n')
    with pytest.raises(ConfigSyntaxError) as error:
        load(path)
    assert (error.value.line, error.value.column) == (4, 24)
    assert str(error.value).startswith(f"config: {path}:4:24: TOML syntax error: Illegal character")


def test_a_misspelled_required_key_is_reported_as_unknown_with_the_closest_known_key():
    raw = copy.deepcopy(RAW)
    fleet = raw["environments"]["dev"]["fleets"][0]
    fleet["max_capacty"] = fleet.pop("max_capacity")
    with pytest.raises(ConfigError) as error:
        parse(raw)
    message = str(error.value)
    assert message.startswith("config: environments.dev.fleets[0].max_capacty=2 is invalid: not a known key")
    assert message.endswith("Fix: rename it to 'max_capacity'") and "missing" not in message


def _dev_queue_with(**changes):
    """dev without a NAT gateway: a tracking server, reached through its interface endpoints."""
    raw = copy.deepcopy(RAW)
    raw["environments"]["dev"]["queues"][0].update(changes)
    dev = raw["environments"]["dev"]
    dev["network"]["nat_gateways"] = 0
    dev["network"]["interface_endpoints"] = [*dev["network"]["interface_endpoints"], "sagemaker.experiments"]
    dev["mlflow"] = {**dev.get("mlflow", {}), "tracking_server_size": "Small"}
    return raw


def test_multi_node_without_efa_needs_no_nat_gateway():
    # No NAT gateway (_dev_queue_with); without EFA nothing installs a driver from the internet at boot.
    queue = parse(_dev_queue_with(multi_node_instance_types=["g5.8xlarge", "g6.8xlarge"],
                                  multi_node_max_vcpus=64)).environments["dev"].queues[0]
    assert queue.multi_node_instance_types == ("g5.8xlarge", "g6.8xlarge") and queue.multi_node_efa is False


def test_multi_node_efa_without_a_nat_gateway_is_refused_with_the_fix():
    raw = _dev_queue_with(multi_node_instance_types=["g5.8xlarge", "g6.8xlarge"], multi_node_max_vcpus=64,
                          multi_node_efa=True)
    with pytest.raises(ConfigError, match=r"multi_node_efa=True is invalid.*install its driver from the internet.*"
                                          r"set nat_gateways >= 1"):
        parse(raw)


def test_multi_node_efa_without_multi_node_types_is_refused():
    with pytest.raises(ConfigError, match=r"multi_node_efa=True is invalid: false without multi_node_instance_types"):
        parse(_dev_queue_with(multi_node_efa=True))


def test_staging_may_opt_into_efa_behind_its_nat_gateway():
    raw = copy.deepcopy(RAW)
    raw["environments"]["staging"]["queues"][0]["multi_node_efa"] = True
    assert parse(raw).environments["staging"].queues[0].multi_node_efa is True


@pytest.mark.parametrize("key,fix", [
    ("environment", "remove it ('environments', the known key closest to it, is set already)"),
    ("projects", "remove it ('project', the known key closest to it, is set already)"),
    ("colour", "remove it or rename it to a known key"),
])
def test_an_unknown_top_level_key_is_never_to_be_renamed_to_a_key_already_set(key, fix):
    raw = copy.deepcopy(RAW)
    raw[key] = "x"
    with pytest.raises(ConfigError) as error:
        parse(raw)
    assert str(error.value) == (f"config: {key}='x' is invalid: not a known key of the file's top level (known: "
                                f"['environments', 'project']). Fix: {fix}")


def test_an_unknown_key_beside_a_missing_one_is_to_be_renamed_to_it():
    raw = copy.deepcopy(RAW)
    raw["environments"]["dev"]["fleet"] = raw["environments"]["dev"].pop("fleets")
    with pytest.raises(ConfigError, match=r"environments.dev.fleet=.* Fix: rename it to 'fleets'$"):
        parse(raw)
    raw = copy.deepcopy(RAW)
    raw["projects"] = raw.pop("project")
    with pytest.raises(ConfigError, match=r"^config: projects='ml-platform' is invalid: .* Fix: rename it to 'project'$"):
        parse(raw)


# --- reading the config needs no CDK (issue 41): the operator's commands run without aws-cdk-lib or Node.js --------

def test_the_operators_commands_and_the_config_import_without_the_cdk():
    """0.13's stacks.config imported aws-cdk-lib and started its jsii kernel (Node.js): about 2 s before any operator
    command did anything, against the house rule. Every module under ops/ (those that synthesize import the CDK only
    when they run it) and the config, imported in a fresh interpreter, load none of it."""
    import subprocess
    import sys

    code = ("import importlib, pkgutil, sys; import ops, stacks.config\n"
            "for m in pkgutil.walk_packages(ops.__path__, 'ops.'): importlib.import_module(m.name)\n"
            "print(sorted(k for k in ('aws_cdk', 'jsii', 'constructs', 'cdk_nag') if k in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.strip() == "[]"


def test_the_configs_copies_of_the_librarys_facts_are_the_same():
    """What stacks.config keeps as plain values so that it needs no CDK, held equal to where they come from."""
    from aws_cdk.region_info import Fact
    from ml_platform_constructs.data.dataset_snapshots import DEFAULT_BUILDER_INSTANCE_TYPE
    from ml_platform_constructs.data.mlflow_tracking import TRACKING_SERVER_SIZES
    from ml_platform_constructs.foundation.network import QUEUE_INTERFACE_ENDPOINTS
    from ops import fleet

    assert platform_config.REGIONS == frozenset(Fact.regions)
    assert platform_config.TRACKING_SERVER_SIZES == TRACKING_SERVER_SIZES
    assert platform_config.QUEUE_ENDPOINTS == (*(e.short_name for e in QUEUE_INTERFACE_ENDPOINTS), "logs",
                                               "monitoring")
    assert fleet.SNAPSHOT_BUILDER_TYPE == DEFAULT_BUILDER_INSTANCE_TYPE
