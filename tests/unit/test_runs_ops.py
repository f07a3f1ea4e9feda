"""./platform runs (list, show, --json) over a local MLflow store, and ./platform model promote: the gate's refusal
and acceptance, the rollout's parameter update and its rollback, each recorded in the run."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import WaiterError
from moto import mock_aws

from ml_platform_constructs.runtime import promotion
from ml_platform_constructs.runtime.budget_guard import load_prices
from ml_platform_constructs.runtime.tracking import TrackedRun
from ops import model as model_ops
from ops import runs as runs_ops

PASSPORT_KEYS = {"seed", "git_commit", "image", "python", "packages", "frameworks", "gpu", "instance_type", "lifecycle",
                 "queue", "job_id", "attempts", "dataset", "params", "environment"}


def recorded_run(tmp_path, uri, name, accuracy, *, s3=None, model=True):
    """A finished run of two attempts (one Spot interruption) with a held-out accuracy and, in S3, a model."""
    checkpoints = f"s3://runs/checkpoints/training/{name}/" if s3 else str(tmp_path / name)
    env = {"ML_PLATFORM_CHECKPOINT_URI": checkpoints, "ML_PLATFORM_QUEUE_NAME": "training", "AWS_REGION": "us-east-1",
           "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "ML_PLATFORM_JOB_NAME": name}
    clock = iter(range(1_800_000_000, 1_800_100_000, 900)).__next__
    first = TrackedRun.start(params={"lr": 0.1}, seed=7, env=env, s3=s3, tracking_uri=uri, clock=clock,
                             prices=load_prices("us-east-1"))
    first.log_holdout(accuracy=0.5, step=0)
    first.stop()
    second = TrackedRun.start(env=env, s3=s3, tracking_uri=uri, clock=clock, prices=load_prices("us-east-1"))
    second.log_holdout(accuracy=accuracy, step=10)
    if model and s3:
        s3.put_object(Bucket="runs", Key=f"checkpoints/training/{name}/model.tar.gz", Body=b"model")
        second.record_model(f"{checkpoints}model.tar.gz")
    second.finish()
    return second.run_id


# --- ./platform runs ---------------------------------------------------------------------------------------------

def test_runs_list_and_show_from_the_local_store(tmp_path, mlflow_store, monkeypatch, capsys):
    run_id = recorded_run(tmp_path, mlflow_store, "resnet-1", 0.9)
    monkeypatch.setattr(runs_ops, "LOCAL_STORE", tmp_path / "store")
    assert runs_ops.main(["list", "--local", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["status"], r["attempts"], r["holdout_accuracy"]) for r in listed] == \
        [(run_id, "FINISHED", "2", 0.9)]
    assert runs_ops.main(["show", "--local", run_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert PASSPORT_KEYS <= set(record["passport"])
    assert record["metrics"]["holdout_accuracy"] == 0.9 and record["cost_usd"] > 0
    assert record["spot_interruptions"] == 1 and record["usd_per_accuracy_point"] == pytest.approx(
        record["cost_usd"] / 40, rel=1e-3)
    assert [a["outcome"] for a in record["passport"]["attempts"]] == ["stopped", "finished"]
    assert runs_ops.main(["show", "--local", run_id]) == 0
    text = capsys.readouterr().out
    assert "USD per accuracy point: +40.00 points over the run's own first held-out evaluation" in text
    assert "1 Spot interruption(s)" in text and "seed 7" in text


def test_runs_say_what_to_do_when_there_is_nothing_to_read(tmp_path, mlflow_store, monkeypatch):
    monkeypatch.setattr(runs_ops, "LOCAL_STORE", tmp_path / "nothing")
    with pytest.raises(SystemExit, match=r"^error: no local runs yet .*: ./platform up runs the example"):
        runs_ops.main(["list", "--local"])
    monkeypatch.setattr(runs_ops, "LOCAL_STORE", tmp_path / "store")
    with pytest.raises(SystemExit, match=r"^error: no run 0123abc in this store"):
        runs_ops.main(["show", "--local", "0123abc"])


def test_runs_of_an_environment_need_its_credentials_first(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(SystemExit, match=r"^error: no AWS credentials found for dev"):
        runs_ops.main(["list", "dev"])


# --- the gate -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("candidate, live, tolerance, higher, promote", [
    (0.90, 0.85, 0.0, True, True),
    (0.85, 0.85, 0.0, True, True),
    (0.84, 0.85, 0.0, True, False),
    (0.845, 0.85, 0.01, True, True),
    (0.30, 0.25, 0.0, False, False),  # a loss: lower is better
    (None, 0.85, 0.0, True, False),
    (0.80, None, 0.0, True, True),    # a live model never judged by the gate: nothing to compare
    (float("nan"), 0.85, 0.0, True, False),  # NaN is never "worse by more than the tolerance"
    (float("nan"), 3.0, 0.0, False, False),
    (float("inf"), 0.85, 0.0, True, False),
    (92.0, 0.85, 0.0, True, False),   # a percentage against a fraction
    (0.80, float("nan"), 0.0, True, True),  # a live score that is not a number: nothing to compare
])
def test_the_gate(candidate, live, tolerance, higher, promote):
    decision = promotion.judge("holdout_accuracy", candidate, live, tolerance=tolerance, higher_is_better=higher)
    assert decision.promote is promote
    if live is not None and live != live:
        assert "live model's holdout_accuracy is nan, not a number" in decision.reason


def test_model_versions_have_one_parameter_and_key_per_endpoint():
    assert promotion.model_version_parameter("ml-platform-dev-classifier") == "MlPlatformDevClassifierModelVersion"
    assert promotion.model_key("models/classifier/{version}/model.tar.gz", "abc123") == "models/classifier/abc123/model.tar.gz"
    with pytest.raises(ValueError, match="one {version}"):
        promotion.model_key("models/classifier/model.tar.gz", "abc123")


# --- ./platform model promote -------------------------------------------------------------------------------------

PARAMETER = "MlPlatformDevClassifierModelVersion"
BASELINE = "MlPlatformDevClassifierQualityBaseline"  # dev's classifier has a quality check


class CloudFormation:
    def __init__(self, live, rollout_fails=False, baseline=""):
        self.live, self.rollout_fails, self.updates, self.baseline = live, rollout_fails, [], baseline

    def describe_stacks(self, StackName):
        if StackName == "dev-Data":
            return {"Stacks": [{"StackName": StackName, "Outputs": [
                {"OutputKey": "DatasetBucketName", "OutputValue": "datasets"}]}]}
        status = "UPDATE_ROLLBACK_COMPLETE" if self.updates and self.rollout_fails else "UPDATE_COMPLETE"
        return {"Stacks": [{"StackName": StackName, "StackStatus": status,
                            "RoleARN": "arn:aws:iam::111111111111:role/cdk-cfn-exec-role",
                            "Parameters": [{"ParameterKey": PARAMETER, "ParameterValue": self.live},
                                           {"ParameterKey": BASELINE, "ParameterValue": self.baseline},
                                           {"ParameterKey": "BootstrapVersion", "ParameterValue": "/cdk-bootstrap/v"}]}]}

    def update_stack(self, **request):
        self.updates.append(request)

    def get_waiter(self, name):
        assert name == "stack_update_complete"
        outer = self

        class Waiter:
            def wait(self, **kwargs):
                if outer.rollout_fails:
                    raise WaiterError(name, "Waiter encountered a terminal failure state", {})
        return Waiter()


@pytest.fixture
def gate(tmp_path, mlflow_store, config, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="runs")
        s3.create_bucket(Bucket="datasets")
        live = recorded_run(tmp_path, mlflow_store, "live", 0.85, s3=s3)
        yield {"s3": s3, "client": MlflowClient(mlflow_store), "live": live, "tmp": tmp_path, "uri": mlflow_store,
               "env": config.environments["dev"], "endpoint": config.environments["dev"].endpoints[0]}


def promote(gate, run_id, cloudformation, lines):
    return model_ops.promote(gate["env"], gate["endpoint"], run_id, client=gate["client"], cloudformation=cloudformation,
                             s3=gate["s3"], caller="arn:aws:iam::111111111111:user/ops", out=lines.append,
                             now=lambda: datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc))


def decisions(gate, run_id):
    tags = gate["client"].get_run(run_id).data.tags
    return [json.loads(v) for k, v in sorted(tags.items()) if k.startswith("ml_platform.promotion.dev.classifier.")]


def test_a_worse_candidate_is_refused_with_both_numbers_and_the_refusal_is_recorded(gate):
    worse = recorded_run(gate["tmp"], gate["uri"], "worse", 0.80, s3=gate["s3"])
    cloudformation = CloudFormation(live=gate["live"])
    with pytest.raises(SystemExit, match=r"^error: refusing to promote run \w+ to classifier in dev: holdout_accuracy "
                                         r"0.8 is worse than the live model's 0.85 \(by 0.05; tolerance 0\)"):
        promote(gate, worse, cloudformation, [])
    assert cloudformation.updates == []  # nothing reaches the endpoint
    assert [d["outcome"] for d in decisions(gate, worse)] == ["refused"]
    assert "models/classifier/" not in str(gate["s3"].list_objects_v2(Bucket="datasets"))


def test_a_better_candidate_is_copied_and_rolled_out_through_the_declared_parameter(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    cloudformation = CloudFormation(live=gate["live"])
    lines = []
    assert promote(gate, better, cloudformation, lines) == 0
    assert gate["s3"].get_object(Bucket="datasets", Key=f"models/classifier/{better}/model.tar.gz")["Body"].read() == \
        b"model"
    [update] = cloudformation.updates
    assert update["UsePreviousTemplate"] is True and update["StackName"] == "dev-Serving"
    assert update["Parameters"] == [{"ParameterKey": "BootstrapVersion", "UsePreviousValue": True},
                                    {"ParameterKey": PARAMETER, "ParameterValue": better},
                                    {"ParameterKey": BASELINE, "ParameterValue": "0.9"}]
    assert update["RoleARN"].endswith("cdk-cfn-exec-role")
    assert [d["outcome"] for d in decisions(gate, better)] == ["promoting", "rolled out"] or \
        {d["outcome"] for d in decisions(gate, better)} == {"rolled out"}
    assert decisions(gate, better)[-1]["live"] == 0.85 and decisions(gate, better)[-1]["candidate"] == 0.9
    assert any("holdout_accuracy 0.9 against the live model's 0.85" in line for line in lines)


def test_a_rollout_that_rolls_back_is_reported_and_recorded(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    with pytest.raises(SystemExit, match=r"did not complete \(dev-Serving is UPDATE_ROLLBACK_COMPLETE\): the endpoint "
                                         rf"keeps serving {gate['live']}"):
        promote(gate, better, CloudFormation(live=gate["live"], rollout_fails=True), [])
    assert decisions(gate, better)[-1]["outcome"] == "rolled back"


@pytest.mark.parametrize("score, says", [(float("nan"), "holdout_accuracy is nan, not a number"),
                                          (92.0, "holdout_accuracy is 92, not a fraction from 0 to 1")])
def test_a_candidate_whose_score_cannot_be_compared_is_refused(gate, score, says):
    candidate = recorded_run(gate["tmp"], gate["uri"], "odd", 0.90, s3=gate["s3"])
    gate["client"].log_metric(candidate, "holdout_accuracy", score, step=100)  # logged outside log_holdout
    cloudformation = CloudFormation(live=gate["live"])
    with pytest.raises(SystemExit, match=f"refusing to promote run {candidate} to classifier in dev: the candidate's "
                                         f"{says}"):
        promote(gate, candidate, cloudformation, [])
    assert cloudformation.updates == []
    assert [d["outcome"] for d in decisions(gate, candidate)] == ["refused"]


def test_the_first_promotion_over_an_unjudged_model_is_allowed_and_says_so(gate):
    lines = []
    assert promote(gate, gate["live"], CloudFormation(live="initial"), lines) == 0
    assert "the live model has no recorded holdout_accuracy" in lines[0]


def test_promotion_needs_a_finished_run_with_a_model_and_a_versioned_endpoint(gate, config):
    unfinished = TrackedRun.start(env={"ML_PLATFORM_CHECKPOINT_URI": str(gate["tmp"] / "running")},
                                  tracking_uri=gate["uri"]).run_id
    with pytest.raises(SystemExit, match=rf"^error: run {unfinished} is RUNNING"):
        promote(gate, unfinished, CloudFormation(live=gate["live"]), [])
    nomodel = recorded_run(gate["tmp"], gate["uri"], "nomodel", 0.95, s3=gate["s3"], model=False)
    with pytest.raises(SystemExit, match=r"recorded no model in S3"):
        promote(gate, nomodel, CloudFormation(live=gate["live"]), [])
    with pytest.raises(SystemExit, match=r"dev has no endpoint 'nosuch'"):
        model_ops.versioned_endpoint(config.environments["dev"], "nosuch")
