"""Configuration of run tracking (the environment's MLflow), declared model versions and the promotion gate: every
bad value fails before synth, naming the key, the value, what is allowed and the fix."""

import copy
import re
import tomllib

import pytest

from stacks.config import DEFAULT_CONFIG, ConfigError, MlflowConfig, PromotionConfig, parse

RAW = tomllib.loads(DEFAULT_CONFIG.read_text())


def dev_with(**changes):
    raw = copy.deepcopy(RAW)
    dev = raw["environments"]["dev"]
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = dev
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    return raw


def test_the_shipped_config_declares_the_classifiers_version_and_serverless_mlflow():
    dev = parse(RAW).environments["dev"]
    assert dev.mlflow == MlflowConfig()
    classifier = dev.endpoints[0]
    assert (classifier.model_version, classifier.model_data_key) == ("initial", "models/classifier/{version}/model.tar.gz")
    assert classifier.promotion == PromotionConfig(
        metric="holdout_accuracy", tolerance_points=0.5, alpha=0.05, higher_is_better=True,
        evaluate_command=("python", "/opt/ml/code/train.py", "--evaluate"))
    assert parse(RAW).environments["staging"].mlflow.tracking_server_size is None


def test_a_tracking_server_of_a_size_with_its_version():
    config = parse(dev_with(mlflow={"tracking_server_size": "Small", "mlflow_version": "3.0"}))
    assert config.environments["dev"].mlflow.tracking_server_size == "Small"


@pytest.mark.parametrize("changes, message", [
    ({"mlflow": {"tracking_server_size": "Huge"}},
     "environments.dev.mlflow.tracking_server_size='Huge' is invalid: one of ['Small', 'Medium', 'Large']"),
    ({"mlflow": {"mlflow_version": "3.0"}},
     "environments.dev.mlflow.mlflow_version='3.0' is invalid: only with tracking_server_size"),
    ({"mlflow": {"weekly_maintenance_window_start": "sunday"}},
     "environments.dev.mlflow.weekly_maintenance_window_start='sunday' is invalid: Day:HH:MM in UTC"),
    ({"mlflow": {"size": "Small"}}, "environments.dev.mlflow.size='Small' is invalid: not a known key"),
    ({"endpoints__0__model_version": "v 2"}, "environments.dev.endpoints[0].model_version='v 2' is invalid: 1-64 letters"),
    ({"endpoints__0__model_data_key": "models/classifier/model.tar.gz"},
     "environments.dev.endpoints[0].model_data_key='models/classifier/model.tar.gz' is invalid: a key with one "
     "{version} where model_version is set"),
    ({"endpoints__0__promotion": {"metric": "val_accuracy"}},
     "environments.dev.endpoints[0].promotion.metric='val_accuracy' is invalid: a held-out metric"),
    ({"endpoints__0__promotion": {"tolerance": 0.005}},
     "environments.dev.endpoints[0].promotion.tolerance=0.005 is invalid: no longer a key: the gate judges a "
     "tolerance in points since 0.5.0 (a paired test on the same held-out examples). Fix: replace it with "
     "tolerance_points = 0.5"),
    ({"endpoints__0__promotion": {"tolerance_points": -1}},
     "environments.dev.endpoints[0].promotion.tolerance_points=-1 is invalid: points of accuracy"),
    ({"endpoints__0__promotion": {"alpha": 0.5}}, "environments.dev.endpoints[0].promotion.alpha=0.5 is invalid"),
    ({"endpoints__0__promotion": {"evaluate_command": "python x.py"}},
     "environments.dev.endpoints[0].promotion.evaluate_command='python x.py' is invalid: a list of strings"),
    # 0.13 accepted it and failed at ./platform model evaluate; the queue's evaluation submitter is built at synth.
    ({"endpoints__0__promotion": {"queue": "nosuch"}},
     "environments.dev.endpoints[0].promotion.queue='nosuch' is invalid: a queue of this environment (['training']): "
     "its evaluation jobs score the endpoint's candidates"),
    ({"network__nat_gateways": 0, "mlflow__tracking_server_size": "Small",
      "network__interface_endpoints": ["ssm", "ssmmessages", "ec2messages", "monitoring", "logs", "ec2", "autoscaling",
                                       "ecs", "ecs-agent", "ecs-telemetry", "ecr.api", "ecr.dkr"]},
     "with no NAT gateway, jobs and fleet instances record their runs in SageMaker's MLflow through the interface "
     "endpoints ['sagemaker.experiments', 'sagemaker.api']. Fix: add ['sagemaker.experiments', 'sagemaker.api']"),
    # The serverless app's host has no interface endpoint: without egress its clients never reach it.
    ({"network__nat_gateways": 0},
     "environments.dev.network.nat_gateways=0 is invalid: at least 1 for the serverless MLflow app: jobs and fleet "
     "instances reach it only with egress (no interface endpoint serves it). Fix: set nat_gateways = 1, or "
     "environments.dev.mlflow.tracking_server_size"),
])
def test_bad_tracking_and_promotion_values_fail_with_the_fix(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(dev_with(**changes))


def test_a_versioned_key_without_a_version_is_refused():
    raw = dev_with()
    del raw["environments"]["dev"]["endpoints"][0]["model_version"]
    with pytest.raises(ConfigError, match=re.escape("model_version=None is invalid: 1-64 letters")):
        parse(raw)


def test_with_a_nat_gateway_no_mlflow_endpoint_is_needed():
    parse(dev_with(network__nat_gateways=1, network__interface_endpoints=["ssm"]))


def test_a_tracking_server_without_egress_is_reached_through_its_endpoints():
    parse(dev_with(network__nat_gateways=0, mlflow__tracking_server_size="Small",
                   network__interface_endpoints=[*RAW["environments"]["dev"]["network"]["interface_endpoints"],
                                                 "sagemaker.experiments"]))
