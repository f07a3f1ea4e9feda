"""The quality check's baseline is the live model's held-out score: a promotion sets it (a Serving-stack parameter
beside the model version), the configured value applies before any promotion, and a refused candidate changes
nothing."""

import copy
import tomllib

import pytest

from ml_platform_constructs import DatasetBucket, ModelQuality, MonitoredEndpoint
from ml_platform_constructs.runtime.handlers import quality_handler
from ml_platform_constructs.runtime.decisions.promotion import baseline_value, quality_baseline_parameter
from ml_platform_constructs.runtime.decisions.quality import Settings
from ops import model as model_ops
from stacks.config import DEFAULT_CONFIG, ConfigError, parse
from tests.unit.test_quality_handler import (ENV, NOW, aws, captured, first_run, hours_before,  # noqa: F401
                                             labels, metric)
from tests.unit.test_model_promote import CloudWatch, SageMaker, Serving, evaluated, live_key
from tests.unit.test_model_promote import promote as promote_checked
from tests.unit.test_runs_ops import BASELINE, decisions, gate, recorded_run  # noqa: F401

SETTINGS_KEYS = ("PROBLEM_TYPE", "BASELINE", "PROMOTED_BASELINE", "PREDICTION_PATH", "PROBABILITY_THRESHOLD",
                 "MIN_LABELLED", "MAX_DROP")


def quality_function(template):
    return next(v["Properties"] for v in template.find_resources("AWS::Lambda::Function").values()
                if v["Properties"]["Handler"] == "quality_handler.handler")


def function_settings(template, parameters: dict[str, str]) -> Settings:
    """The settings the deployed quality function reads, with the stack's parameters at these values (a
    parameter's default where absent), as CloudFormation resolves its environment."""
    declared = template.to_json().get("Parameters", {})
    variables = quality_function(template)["Environment"]["Variables"]

    def resolve(value):
        if isinstance(value, dict):
            [(function, name)] = value.items()
            assert function == "Ref" and name in declared, value
            return parameters.get(name, declared[name].get("Default"))
        return value
    return Settings.from_environment({k: resolve(variables[k]) for k in SETTINGS_KEYS if k in variables})


def deployed(cloudformation: Serving) -> dict[str, str]:
    """The Serving stack's parameter values after the fake's updates (UsePreviousValue keeps what was there)."""
    values = {BASELINE: cloudformation.baseline}
    for update in cloudformation.updates:
        values.update({p["ParameterKey"]: p["ParameterValue"] for p in update["Parameters"] if "ParameterValue" in p})
    return values


# --- the template: a parameter the function reads, empty by default -------------------------------------------

def test_dev_classifier_declares_its_quality_baseline_beside_its_model_version(templates):
    template = templates["dev/Serving"]
    name = quality_baseline_parameter("ml-platform-dev-classifier")
    assert name == BASELINE
    parameter = template.to_json()["Parameters"][name]
    assert (parameter["Type"], parameter["Default"]) == ("String", "")
    variables = quality_function(template)["Environment"]["Variables"]
    assert (variables["PROMOTED_BASELINE"], variables["BASELINE"]) == ({"Ref": name}, "0.92")


def test_before_any_promotion_the_function_judges_against_the_configured_baseline(templates):
    settings = function_settings(templates["dev/Serving"], {})
    assert (settings.baseline, settings.baseline_source) == (0.92, "config")


def test_an_endpoint_without_a_declared_version_has_no_baseline_parameter(synth_stack):
    from aws_cdk import aws_sns as sns

    from tests.unit.endpoint_vpc import endpoint_vpc

    def body(stack):
        datasets = DatasetBucket(stack, "Datasets")
        MonitoredEndpoint(stack, "Classifier", endpoint_name="classifier-dev",
                          image_uri="683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
                          model_data_bucket=datasets.bucket, model_data_key="models/classifier/model.tar.gz",
                          instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"), baseline_bucket=datasets,
                          vpc=endpoint_vpc(stack), quality=ModelQuality(problem_type="binary", baseline=0.92))
    template = synth_stack(body)
    assert "Parameters" not in template.to_json() or not any(
        k.endswith("QualityBaseline") for k in template.to_json()["Parameters"])
    assert "PROMOTED_BASELINE" not in quality_function(template)["Environment"]["Variables"]
    assert function_settings(template, {}).baseline == 0.92


# --- the promotion sets it; a refusal does not ------------------------------------------------------------------

def test_a_promotion_sets_the_promoted_runs_held_out_score_and_the_function_judges_against_it(gate, templates):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.9, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    cloudformation = Serving(live=gate["live"])
    lines = []
    assert promote_checked(gate, better, cloudformation, lines=lines) == 0
    assert deployed(cloudformation)[BASELINE] == "0.9:2000"  # the judged score and the examples it was judged on
    settings = function_settings(templates["dev/Serving"], deployed(cloudformation))
    assert (settings.baseline, settings.baseline_examples, settings.baseline_source) == (0.9, 2000, "promotion")
    assert decisions(gate, better)[-1]["quality_baseline"] == {"parameter": BASELINE, "from": None, "to": "0.9:2000"}
    assert any(f"{BASELINE} (configured 0.92) -> 0.9:2000: the quality check's baseline" in line for line in lines)


def test_a_refused_candidate_leaves_the_baseline_as_it_was(gate, templates):
    worse = recorded_run(gate["tmp"], gate["uri"], "worse", 0.8, s3=gate["s3"])
    evaluated(gate, worse, gate["live"], candidate=0.8)
    cloudformation = Serving(live=gate["live"], baseline="0.85")  # set by the live model's promotion
    with pytest.raises(SystemExit, match="refusing to promote"):
        promote_checked(gate, worse, cloudformation)
    assert cloudformation.updates == []
    assert function_settings(templates["dev/Serving"], deployed(cloudformation)).baseline == 0.85
    assert "quality_baseline" not in decisions(gate, worse)[-1]


def test_a_score_the_quality_check_cannot_take_as_its_baseline_is_not_promoted(gate):
    """An MAE of 0 passes the gate but leaves the check nothing to measure a shortfall in percent of: it would refuse
    the baseline on every run, so the promotion is refused before anything changes."""
    from dataclasses import replace

    from ml_platform_job import evaluation

    endpoint = gate["endpoint"]
    regression = replace(endpoint, quality=replace(endpoint.quality, problem_type="regression", baseline=3.2),
                         promotion=replace(endpoint.promotion, metric="holdout_mae", higher_is_better=False))
    from ops.runs import run_record

    perfect = recorded_run(gate["tmp"], gate["uri"], "perfect", 0.9, s3=gate["s3"])
    where = evaluation.evidence_uri("datasets", "training", perfect, gate["live"])
    gate["s3"].put_object(Bucket="datasets", Key=live_key(gate), Body=b"live model")
    job = evaluation.Evaluation(run_record(gate["client"], perfect)["model_uri"], f"s3://datasets/{live_key(gate)}",
                                evaluation._Place(where, gate["s3"]))
    job.model(evaluation.CANDIDATE)
    job.write_outcomes(evaluation.CANDIDATE, {f"s{i}": 0.0 for i in range(500)}, kind="error")
    job.model(evaluation.LIVE)
    job.write_outcomes(evaluation.LIVE, {f"s{i}": 3.0 for i in range(500)}, kind="error")
    job.finish()
    cloudformation = Serving(live=gate["live"])
    with pytest.raises(SystemExit, match=r"refusing to promote run \w+ to classifier in dev: the candidate's score 0 "
                                         r"cannot be the quality check's baseline \(baseline=0.0: the live model's MAE, "
                                         r"above 0\)"):
        model_ops.promote(gate["env"], regression, perfect, client=gate["client"], cloudformation=cloudformation,
                          s3=gate["s3"], sagemaker=SageMaker(f"models/classifier/{perfect}/model.tar.gz",
                                                             live_key(gate)),
                          cloudwatch=CloudWatch(), caller="arn:aws:iam::111111111111:user/ops", out=[].append)
    assert cloudformation.updates == []
    assert [d["outcome"] for d in decisions(gate, perfect)] == ["refused"]


def test_a_serving_stack_deployed_before_the_quality_check_must_be_deployed_first(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.9, s3=gate["s3"])

    class Older(Serving):
        def describe_stacks(self, StackName):
            described = super().describe_stacks(StackName)
            for stack in described["Stacks"]:
                stack["Parameters"] = [p for p in stack.get("Parameters", []) if p["ParameterKey"] != BASELINE]
            return described
    older = Older(live=gate["live"])
    with pytest.raises(SystemExit, match=rf"^error: dev-Serving has no parameter {BASELINE}: deploy dev"):
        promote_checked(gate, better, older)
    assert older.updates == []


def test_model_status_says_which_baseline_the_check_uses(gate):
    def status(baseline):
        return model_ops.status(gate["env"], gate["endpoint"], client=gate["client"],
                                cloudformation=Serving(live=gate["live"], baseline=baseline),
                                sagemaker=SageMaker(live_key(gate), live_key(gate)))
    assert status("").endswith("; quality baseline 0.92 (configured: no promotion yet)")
    assert status("0.85").endswith("; quality baseline 0.85 (promoted)")


def test_baseline_values_are_what_the_parameter_allows():
    assert [baseline_value(v) for v in (0.9, 1, 3.25e-05)] == ["0.9", "1.0", "3.25e-05"]
    assert baseline_value(0.9213, 5000) == "0.9213:5000"
    for bad in (float("nan"), float("inf"), -0.5):
        with pytest.raises(ValueError):
            baseline_value(bad)


# --- the function -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("promoted, decision, reference", [("", "ok", (0.92, 10_000, "config")),
                                                       ("0.98:5000", "alarm", (0.98, 5000, "promotion"))])
def test_the_scheduled_check_judges_against_the_promoted_baseline_when_there_is_one(aws, promoted, decision,  # noqa: F811
                                                                                     reference):
    s3, cloudwatch = aws
    env = {**ENV, "PROMOTED_BASELINE": promoted}
    first_run(s3, cloudwatch, env)
    ids = [f"r{i}" for i in range(20_000)]
    captured(s3, hours_before(5), ids)  # predicts 1 for all; 93% of the labels are 1
    labels(s3, hours_before(4), [(i, 1 if n % 100 < 93 else 0) for n, i in enumerate(ids)])
    summary = quality_handler.run(env, s3, cloudwatch, NOW)
    assert summary["last"]["value"] == pytest.approx(0.93)
    got = summary["reference"]
    assert (got["value"], got["examples"], got["source"], summary["status"]) == (*reference, decision)
    assert metric(cloudwatch, "QualityBaseline") == [pytest.approx(reference[0])] * 2


# --- config: the gate judges the score that becomes the baseline ------------------------------------------------

RAW = tomllib.loads(DEFAULT_CONFIG.read_text())


def dev_classifier(**changes):
    raw = copy.deepcopy(RAW)
    raw["environments"]["dev"]["endpoints"][0].update(changes)
    return raw


def test_the_shipped_gate_judges_the_quality_checks_metric():
    classifier = parse(RAW).environments["dev"].endpoints[0]
    assert (classifier.promotion.metric, classifier.quality.problem_type) == ("holdout_accuracy", "binary")


@pytest.mark.parametrize("changes, message", [
    ({"promotion": {"metric": "holdout_f1"}},
     r"promotion=.*holdout_f1.* is invalid: metric 'holdout_accuracy' with higher_is_better = true: a promotion makes "
     r"the run's holdout_accuracy the baseline of the binary quality check"),
    ({"quality": {"problem_type": "regression", "baseline": 3.2}},
     r"promotion=.* is invalid: metric 'holdout_mae' with higher_is_better = false.*Fix: set promotion = "
     r"\{ metric = \"holdout_mae\", higher_is_better = false \}"),
])
def test_a_gate_on_another_metric_than_the_quality_baseline_is_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        parse(dev_classifier(**changes))


def test_regression_promotes_on_mae_and_an_unversioned_endpoint_keeps_any_gate():
    regression = {"quality": {"problem_type": "regression", "baseline": 3.2},
                  "promotion": {"metric": "holdout_mae", "higher_is_better": False}}
    assert parse(dev_classifier(**regression)).environments["dev"].endpoints[0].promotion.metric == "holdout_mae"
    unversioned = dev_classifier(model_data_key="models/classifier/model.tar.gz", promotion={"metric": "holdout_f1"})
    del unversioned["environments"]["dev"]["endpoints"][0]["model_version"]
    assert parse(unversioned).environments["dev"].endpoints[0].quality.baseline == 0.92
