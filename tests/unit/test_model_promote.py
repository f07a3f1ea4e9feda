"""./platform model evaluate and promote as an AWS review found them (issue 26 findings 2-3, issue 28 items 4, 6 and 7):
the evaluation takes nothing from the candidate's own record but its model; the promoted object is the one that was
scored; a rollout SageMaker took back is recorded as such and the parameters put back; the quality baseline is never
lowered by a candidate not judged against the model it replaces; no rollout starts while a rollback alarm fires."""

import hashlib
import json
import itertools
import random
import re
import shutil
from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import WaiterError
from moto import mock_aws

from ml_platform_job import evaluation
from ops import model as model_ops
from ops.runs import run_record
from tests.unit.test_runs_ops import BASELINE, HOLDOUT, PARAMETER, Batch, CloudFormation, Lambda, decisions
from tests.unit.test_runs_ops import recorded_run as record_run

ENDPOINT = "ml-platform-dev-classifier"
ALARMS = (f"{ENDPOINT}-p99-latency", f"{ENDPOINT}-5xx-error-rate")
CONFIG_ARN = "arn:aws:sagemaker:us-east-1:111111111111:endpoint-config/"


@pytest.fixture(scope="module")
def gate(_mlflow_store_template, tmp_path_factory, config):
    """One store, one bucket pair and one live run for the module (recording a run costs a second of CPU); each test
    records its own candidates under names of their own."""
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("promote")
    shutil.copy(_mlflow_store_template, tmp / "mlflow.db")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="runs")
        s3.create_bucket(Bucket="datasets")
        live = record_run(tmp, uri, "live", 0.85, s3=s3)
        yield {"s3": s3, "client": MlflowClient(uri), "live": live, "tmp": tmp, "uri": uri,
               "env": config.environments["dev"], "endpoint": config.environments["dev"].endpoints[0]}


NAMES = itertools.count()


def recorded_run(tmp, uri, name, accuracy, **kwargs):
    """A candidate under a name no other test of the module uses (its checkpoints and model key are its own)."""
    return record_run(tmp, uri, f"{name}-{next(NAMES)}", accuracy, **kwargs)


class Serving(CloudFormation):
    """The Serving stack as promote reads it: its template (the endpoint, its configuration, its rollback alarms) and
    the configuration's physical id, which each update replaces."""

    def get_template(self, StackName):
        return {"TemplateBody": {"Resources": {
            "classifierModel": {"Type": "AWS::SageMaker::Model", "Properties": {}},
            "classifierEndpointConfig": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {}},
            "classifierResource": {"Type": "AWS::SageMaker::Endpoint", "Properties": {
                "EndpointName": ENDPOINT,
                "EndpointConfigName": {"Fn::GetAtt": ["classifierEndpointConfig", "EndpointConfigName"]},
                "DeploymentConfig": {"AutoRollbackConfiguration": {
                    "Alarms": [{"AlarmName": name} for name in ALARMS]}}}}}}}

    def describe_stack_resource(self, StackName, LogicalResourceId):
        assert LogicalResourceId == "classifierEndpointConfig"
        return {"StackResourceDetail": {"PhysicalResourceId": f"{CONFIG_ARN}{config_name(len(self.updates))}"}}


def config_name(updates):
    return f"classifierEndpointConfig-Rev{updates}"


class SageMaker:
    """The endpoint after the update: on the declared configuration (``rolled_back=False``), or back on the one it
    had before, with the live model."""

    def __init__(self, bucket_key, live_key, rolled_back=False, status="InService"):
        self.bucket_key, self.live_key, self.rolled_back, self.status = bucket_key, live_key, rolled_back, status

    def describe_endpoint(self, EndpointName):
        assert EndpointName == ENDPOINT
        # SageMaker's names may come back lower-cased in ARNs; the live name as SageMaker reports it.
        return {"EndpointStatus": self.status, "EndpointConfigName": config_name(0 if self.rolled_back else 1)}

    def describe_endpoint_config(self, EndpointConfigName):
        return {"ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": f"model-of-{EndpointConfigName}"}]}

    def describe_model(self, ModelName):
        key = self.live_key if ModelName.endswith("Rev0") else self.bucket_key
        return {"PrimaryContainer": {"ModelDataUrl": f"s3://datasets/{key}"}}


class CloudWatch:
    def __init__(self, states=None, missing=()):
        self.states = {name: "OK" for name in ALARMS} | (states or {})
        self.missing = set(missing)

    def describe_alarms(self, AlarmNames):
        assert sorted(AlarmNames) == sorted(ALARMS)
        return {"MetricAlarms": [{"AlarmName": n, "StateValue": self.states[n],
                                  "StateUpdatedTimestamp": datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)}
                                 for n in AlarmNames if n not in self.missing], "CompositeAlarms": []}


def live_key(gate):
    return f"models/classifier/{gate['live']}/model.tar.gz"


def evaluated(gate, run_id, live, *, candidate=0.90, reference=0.85, n=2000, against_live=True):
    """What the queue's evaluation job writes, through runtime.evaluation as the job does: both models read from S3
    (their identity kept), per-example outcomes on the same ids, the manifest."""
    rng = random.Random(run_id)
    ids = [f"s{i}" for i in range(n)]
    live_right = {i: k < reference * n for k, i in enumerate(ids)}
    extra = round((candidate - reference) * n)
    order = sorted(ids, key=lambda i: (live_right[i], rng.random()))
    candidate_right = dict(live_right)
    for i in (order[:extra] if extra > 0 else order[extra:]):
        candidate_right[i] = extra > 0
    where = evaluation.evidence_uri("datasets", "training", run_id, live if against_live else None)
    gate["s3"].put_object(Bucket="datasets", Key=live_key(gate), Body=b"live model")
    job = evaluation.Evaluation(run_record(gate["client"], run_id)["model_uri"],
                                f"s3://datasets/{live_key(gate)}" if against_live else None,
                                evaluation._Place(where, gate["s3"]))
    job.model(evaluation.CANDIDATE)
    job.write_outcomes(evaluation.CANDIDATE, candidate_right)
    if against_live:
        job.model(evaluation.LIVE)
        job.write_outcomes(evaluation.LIVE, live_right)
    job.finish()
    return where


def promote(gate, run_id, cloudformation, *, sagemaker=None, cloudwatch=None, lines=None, ledger=False):
    """``ledger``: keep the held-out ledger the module's earlier promotions wrote (each test judges afresh by default:
    the module shares one bucket and one held-out set)."""
    if not ledger:
        gate["s3"].delete_object(Bucket="datasets", Key=model_ops.ledger_key(gate["env"], gate["endpoint"]))
    return model_ops.promote(
        gate["env"], gate["endpoint"], run_id, client=gate["client"], cloudformation=cloudformation, s3=gate["s3"],
        sagemaker=sagemaker or SageMaker(f"models/classifier/{run_id}/model.tar.gz", live_key(gate)),
        cloudwatch=cloudwatch or CloudWatch(), caller="arn:aws:iam::111111111111:user/ops",
        out=(lines if lines is not None else []).append, now=lambda: datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc))


def set_parameters(cloudformation):
    return [{p["ParameterKey"]: p.get("ParameterValue") for p in update["Parameters"] if "ParameterValue" in p}
            for update in cloudformation.updates]


# --- a rollout that rolled back is not "rolled out" (issue 28 item 4) ---------------------------------------------

def test_a_better_candidate_rolls_out_when_the_endpoint_serves_the_declared_configuration(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    cloudformation, lines = Serving(live=gate["live"]), []
    assert promote(gate, better, cloudformation, lines=lines) == 0
    assert set_parameters(cloudformation) == [{PARAMETER: better, BASELINE: "0.9:2000"}]
    assert [d["outcome"] for d in decisions(gate, better)][-1] == "rolled out"
    assert lines[-1] == f"  rolled out: classifier serves run {better} ({config_name(1)})"


def test_the_old_configuration_after_the_update_fails_the_promotion_records_rolled_back_and_puts_the_parameters_back(
        gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    cloudformation = Serving(live=gate["live"], baseline="0.85:2000")  # the live model's own judged score
    sagemaker = SageMaker(f"models/classifier/{better}/model.tar.gz", live_key(gate), rolled_back=True)
    with pytest.raises(SystemExit, match=rf"^error: the rollout of run {better} to classifier rolled back: SageMaker "
                                         rf"serves {config_name(0)} \(s3://datasets/{live_key(gate)}\), not the "
                                         rf"declared {config_name(1)} .*the parameters are put back to {gate['live']}"):
        promote(gate, better, cloudformation, sagemaker=sagemaker)
    promoted, put_back = set_parameters(cloudformation)
    assert promoted == {PARAMETER: better, BASELINE: "0.9:2000"}
    assert put_back == {PARAMETER: gate["live"], BASELINE: "0.85:2000"}  # the served model's baseline, not the candidate's
    last = decisions(gate, better)[-1]
    assert last["outcome"] == "rolled back" and last["served"]["config"] == config_name(0)
    assert last["parameters_put_back"] == put_back


class Awaited(Serving):
    """Records each wait on a stack update with the updates started before it; the put-back's update (the second)
    ends in ``put_back_status`` (its waiter fails) unless that is None."""

    def __init__(self, *args, put_back_status=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.put_back_status, self.waits = put_back_status, []

    def describe_stacks(self, StackName):
        described = super().describe_stacks(StackName)
        if len(self.updates) > 1 and self.put_back_status and StackName != "dev-Data":
            described["Stacks"][0]["StackStatus"] = self.put_back_status
        return described

    def get_waiter(self, name):
        outer, waiter = self, super().get_waiter(name)

        class Waiter:
            def wait(self, **kwargs):
                outer.waits.append((len(outer.updates), kwargs))
                if len(outer.updates) > 1 and outer.put_back_status:
                    raise WaiterError(name, "Waiter encountered a terminal failure state", {})
                waiter.wait(**kwargs)
        return Waiter()


def rolled_back_promotion(gate, cloudformation):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    sagemaker = SageMaker(f"models/classifier/{better}/model.tar.gz", live_key(gate), rolled_back=True)
    with pytest.raises(SystemExit) as failed:
        promote(gate, better, cloudformation, sagemaker=sagemaker)
    return better, str(failed.value.code)


def test_the_put_back_update_is_awaited_like_the_rollout_and_the_decision_says_it_completed(gate):
    """Issue 41: the put-back is a second stack update; the command returned on it UPDATE_IN_PROGRESS."""
    cloudformation = Awaited(live=gate["live"], baseline="0.85:2000")
    better, message = rolled_back_promotion(gate, cloudformation)
    config = {"StackName": "dev-Serving", "WaiterConfig": {"Delay": 30, "MaxAttempts": 480}}
    assert cloudformation.waits == [(1, config), (2, config)]  # the rollout's update, then the put-back's
    assert "the parameters are put back to " + gate["live"] + " (the stack update completed) so that" in message
    assert message.count("\n") == 0 and message.endswith("Recorded in the run.")
    last = decisions(gate, better)[-1]
    assert (last["outcome"], last["put_back"]) == ("rolled back", "complete")


def test_a_put_back_update_that_fails_is_reported_with_the_stacks_status_and_what_to_do(gate):
    cloudformation = Awaited(live=gate["live"], baseline="0.85:2000", put_back_status="UPDATE_ROLLBACK_COMPLETE")
    better, message = rolled_back_promotion(gate, cloudformation)
    assert len(cloudformation.waits) == 2 and "are put back" not in message
    assert re.search(rf"rolled back: SageMaker serves {config_name(0)} .*; putting the parameters back to "
                     rf"{gate['live']} did not complete \(dev-Serving is UPDATE_ROLLBACK_COMPLETE\), so the stack may "
                     rf"still declare run {better}: see the stack's events, then once it is settled follow "
                     rf"./platform model status dev classifier and put {PARAMETER} \(and the quality baseline\) back "
                     r"to what is served. Recorded in the run.$", message), message
    last = decisions(gate, better)[-1]
    assert (last["outcome"], last["put_back"]) == ("rolled back", "UPDATE_ROLLBACK_COMPLETE")
    assert last["parameters_put_back"] == {PARAMETER: gate["live"], BASELINE: "0.85:2000"}


def test_an_endpoint_not_in_service_after_the_update_is_not_called_rolled_out(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    cloudformation = Serving(live=gate["live"])
    sagemaker = SageMaker(f"models/classifier/{better}/model.tar.gz", live_key(gate), status="Updating")
    with pytest.raises(SystemExit, match=rf"dev-Serving updated, but {ENDPOINT} is Updating: follow it with "
                                         r"./platform model status dev classifier"):
        promote(gate, better, cloudformation, sagemaker=sagemaker)
    assert decisions(gate, better)[-1]["outcome"] == "unsettled" and len(cloudformation.updates) == 1


# --- no rollout while a rollback alarm fires (issue 28 item 7) ----------------------------------------------------

def test_a_rollback_alarm_in_alarm_refuses_the_promotion_before_anything_changes(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    cloudformation = Serving(live=gate["live"])
    with pytest.raises(SystemExit, match=rf"^error: refusing to promote run {better} to classifier in dev: its rollback "
                                         rf"alarm {ALARMS[0]} is in ALARM \(since 2026-12-01 09:00 UTC\), so the rollout "
                                         r"would roll itself back: fix what it reports \(aws cloudwatch describe-alarms "
                                         rf"--alarm-names {ALARMS[0]}\) or wait until it is OK, then promote again$"):
        promote(gate, better, cloudformation, cloudwatch=CloudWatch({ALARMS[0]: "ALARM"}))
    assert cloudformation.updates == [] and decisions(gate, better) == []
    assert "models/classifier/" + better not in str(gate["s3"].list_objects_v2(Bucket="datasets"))


def test_an_idle_endpoints_insufficient_data_does_not_hold_a_promotion_back(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    idle = CloudWatch({name: "INSUFFICIENT_DATA" for name in ALARMS})
    assert promote(gate, better, Serving(live=gate["live"]), cloudwatch=idle) == 0


def test_a_rollback_alarm_that_does_not_exist_refuses_the_promotion(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    cloudformation = Serving(live=gate["live"])
    with pytest.raises(SystemExit, match=rf"its rollback alarm {ALARMS[1]} does not exist, so nothing would stop a bad "
                                         r"rollout: deploy dev"):
        promote(gate, better, cloudformation, cloudwatch=CloudWatch(missing={ALARMS[1]}))
    assert cloudformation.updates == []


# --- the promoted object is the scored one (issue 26 finding 3) ---------------------------------------------------

def test_the_manifest_names_the_scored_objects_etag_and_digest(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    where = evaluated(gate, better, gate["live"])
    _, _, manifest = evaluation.read_evidence(where, gate["s3"])
    model = run_record(gate["client"], better)["model_uri"]
    head = gate["s3"].head_object(Bucket="runs", Key=model[len("s3://runs/"):])
    assert manifest["artifacts"]["candidate"] == {"uri": model, "etag": head["ETag"], "version_id": None, "bytes": 5,
                                                  "sha256": hashlib.sha256(b"model").hexdigest()}
    assert manifest["artifacts"]["live"]["uri"] == f"s3://datasets/{live_key(gate)}"


def test_a_model_swapped_after_its_evaluation_is_refused_in_one_line_and_nothing_is_deployed(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    model = run_record(gate["client"], better)["model_uri"]
    gate["s3"].put_object(Bucket="runs", Key=model[len("s3://runs/"):], Body=b"another model")
    cloudformation = Serving(live=gate["live"])
    with pytest.raises(SystemExit, match=rf"^error: run {better}'s model {model} is not the object that was evaluated "
                                         r"\(its ETag is \"\w+\", the evaluation scored \"\w+\"\): evaluate it again "
                                         rf"\(./platform model evaluate dev classifier {better}\), then promote$"):
        promote(gate, better, cloudformation)
    assert cloudformation.updates == []
    assert f"models/classifier/{better}/" not in str(gate["s3"].list_objects_v2(Bucket="datasets"))


def test_a_model_swapped_between_the_check_and_the_copy_is_not_copied(gate):
    """The copy itself carries the scored ETag (CopySourceIfMatch): S3 refuses a changed source."""
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    model = run_record(gate["client"], better)["model_uri"]
    real = gate["s3"]

    class SwapBeforeCopy:
        def __getattr__(self, name):
            return getattr(real, name)

        def copy(self, source, bucket, key, ExtraArgs):
            real.put_object(Bucket="runs", Key=model[len("s3://runs/"):], Body=b"swapped")
            return real.copy(source, bucket, key, ExtraArgs=ExtraArgs)
    cloudformation = Serving(live=gate["live"])
    with pytest.raises(SystemExit, match=r"is not the object that was evaluated \(S3 refused to copy it \(412\): it "
                                         r"changed\)"):
        model_ops.promote(gate["env"], gate["endpoint"], better, client=gate["client"], cloudformation=cloudformation,
                          s3=SwapBeforeCopy(), sagemaker=None, cloudwatch=CloudWatch(), caller="ops", out=[].append)
    assert cloudformation.updates == [] and decisions(gate, better)[-1]["outcome"] == "refused"
    assert f"models/classifier/{better}/" not in str(real.list_objects_v2(Bucket="datasets"))


def test_evidence_of_another_model_or_split_is_refused(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    where = evaluation.evidence_uri("datasets", "training", better, gate["live"])
    gate["s3"].put_object(Bucket="runs", Key="checkpoints/training/other/model.tar.gz", Body=b"other")
    gate["s3"].put_object(Bucket="datasets", Key=live_key(gate), Body=b"live model")
    job = evaluation.Evaluation("s3://runs/checkpoints/training/other/model.tar.gz", f"s3://datasets/{live_key(gate)}",
                                evaluation._Place(where, gate["s3"]))
    for which in (evaluation.CANDIDATE, evaluation.LIVE):
        job.model(which)
        job.write_outcomes(which, {f"s{i}": True for i in range(2000)})
    job.finish()
    with pytest.raises(SystemExit, match=rf"the evaluation at {where} scored the model s3://runs/checkpoints/training/"
                                         r"other/model.tar.gz, not the run's s3://runs/checkpoints/training/better-"):
        promote(gate, better, Serving(live=gate["live"]))
    job.candidate_model_uri = run_record(gate["client"], better)["model_uri"]
    job.holdout_salt = "v2"
    job.model(evaluation.CANDIDATE)
    job.finish()
    with pytest.raises(SystemExit, match=r"used the held-out split salt 'v2', fraction 0.05, not the platform's salt "
                                         rf"'', fraction 0.05: evaluate the run again \(./platform model evaluate dev "
                                         rf"classifier {better}\)$"):
        promote(gate, better, Serving(live=gate["live"]))


# --- the quality baseline is never lowered by a promotion that was not judged (issue 28 item 6) --------------------

def test_an_unrecorded_live_version_with_a_promoted_baseline_is_judged_against_that_baseline_not_the_configured_one(
        gate):
    """The live version's run record is gone (another tracking store, a deleted run), but its promotion set the
    baseline 0.95 (5,000 examples). Judged against the configured 0.92, a 0.93 candidate passed and lowered the
    baseline to 0.93 without being compared with the model it replaced."""
    lesser = recorded_run(gate["tmp"], gate["uri"], "lesser", 0.93, s3=gate["s3"])
    evaluated(gate, lesser, "lost-run", candidate=0.93, against_live=False)
    cloudformation = Serving(live="lost-run", baseline="0.95:5000")
    with pytest.raises(SystemExit, match=r"not shown to be within 0.5 points of the baseline 0.95 \(measured on 5000 "
                                         r"examples\)") as refused:
        promote(gate, lesser, cloudformation)
    assert refused.value.code == 3 and str(refused.value).startswith("refusing to promote run ")  # a verdict
    assert cloudformation.updates == []
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.97, s3=gate["s3"])
    evaluated(gate, better, "lost-run", candidate=0.97, against_live=False)
    assert promote(gate, better, cloudformation) == 0
    value, examples = set_parameters(cloudformation)[0][BASELINE].split(":")
    # far above the gate's threshold: its score, hardly corrected for the selection (the winner's curse)
    assert (float(value), examples) == (pytest.approx(0.97, abs=1e-4), "2000") and float(value) < 0.97


def test_without_a_promoted_baseline_an_unrecorded_live_version_is_judged_against_the_configured_one(gate):
    good = recorded_run(gate["tmp"], gate["uri"], "good", 0.95, s3=gate["s3"])
    evaluated(gate, good, "initial", candidate=0.95, against_live=False)
    lines = []
    assert promote(gate, good, Serving(live="initial"), lines=lines) == 0
    assert "not worse than the baseline 0.92 (measured on 5000 examples)" in lines[0]


# --- the evaluation takes nothing from the candidate's own record but its model (issue 26 finding 2) ---------------

def test_evaluate_uses_the_platforms_split_and_the_definitions_own_image_whatever_the_run_recorded(gate, monkeypatch):
    """The candidate's passport names an image, a dataset and a split of its own choosing (a run writes its own
    record); none of them reaches the evaluation job, and no revision with another image is registered."""
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    real = model_ops.run_record

    def self_written(client, run_id):
        record = real(client, run_id)
        if run_id == candidate:
            record["passport"]["image"] = {"uri": "999999999999.dkr.ecr.us-east-1.amazonaws.com/mine:1"}
            record["passport"]["dataset"] = {"uri": "s3://datasets/datasets/easy/v1/"}
        return record
    monkeypatch.setattr(model_ops, "run_record", self_written)
    batch = Batch()
    batch.register_job_definition = lambda **request: pytest.fail(f"registered {request}")
    model_ops.evaluate(gate["env"], gate["endpoint"], candidate, client=gate["client"],
                       cloudformation=Serving(live=gate["live"]), batch=batch,
                       lambda_client=Lambda(batch, gate["env"]), out=[].append, sleep=lambda s: None)
    [job] = batch.submitted
    assert job["jobDefinition"] == "arn:def/train:1"  # the deployed evaluation revision as it is
    variables = {v["name"]: v["value"] for v in job["containerOverrides"]["environment"]}
    assert (variables[evaluation.SALT], variables[evaluation.FRACTION]) == ("", "0.05")
    assert evaluation.DATASET not in variables and "easy" not in str(job)


@pytest.mark.parametrize("live_salt", [None, "v2"])
def test_a_run_split_otherwise_than_the_platform_is_refused_even_when_the_live_run_agrees(gate, live_salt):
    """The first promotion (no live run: 0.5.0 checked nothing) and a live run split the same other way."""
    other = {**HOLDOUT, "salt": "v2"}
    live = (recorded_run(gate["tmp"], gate["uri"], "live-v2", 0.85, s3=gate["s3"], holdout=other) if live_salt
            else "initial")
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate-v2", 0.90, s3=gate["s3"], holdout=other)
    batch = Batch()
    with pytest.raises(SystemExit, match=rf"^error: run {candidate} cannot be judged on the platform's held-out split: "
                                         r"it was split with salt 'v2' and the platform evaluates on salt '' "
                                         r"\(ml_platform_job.holdout's split\)"):
        model_ops.evaluate(gate["env"], gate["endpoint"], candidate, client=gate["client"],
                           cloudformation=Serving(live=live), batch=batch, lambda_client=Lambda(batch, gate["env"]),
                           out=[].append, sleep=lambda s: None)
    assert batch.submitted == []


# --- model status tells a rolled-back rollout (promote --no-wait) -------------------------------------------------

def test_model_status_says_when_the_endpoint_serves_another_configuration_than_the_stack_declares(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "status", 0.90, s3=gate["s3"])
    cloudformation = Serving(live=better)
    cloudformation.updates.append({})  # the promotion's update: the stack declares revision 1 and the run's model

    def status(rolled_back):
        return model_ops.status(gate["env"], gate["endpoint"], client=gate["client"], cloudformation=cloudformation,
                                sagemaker=SageMaker(f"models/classifier/{better}/model.tar.gz", live_key(gate),
                                                    rolled_back=rolled_back))
    assert f"; serves {config_name(1)}; run {better}" in status(False) and "ROLLED BACK" not in status(False)
    assert (f"; ROLLED BACK: it serves {config_name(0)} (s3://datasets/{live_key(gate)}), not the declared "
            f"{config_name(1)} (s3://datasets/models/classifier/{better}/model.tar.gz): promote the run again, or put "
            f"{PARAMETER} (and the quality baseline) back to what is served") in status(True)


def test_in_a_versioned_bucket_the_scored_version_is_deployed_even_after_the_key_was_overwritten(gate):
    s3 = gate["s3"]
    s3.create_bucket(Bucket="versioned")
    s3.put_bucket_versioning(Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="versioned", Key="model.tar.gz", Body=b"scored")
    _, artifact = evaluation.read_artifact("s3://versioned/model.tar.gz", s3)
    assert artifact["version_id"]
    s3.put_object(Bucket="versioned", Key="model.tar.gz", Body=b"overwritten")
    assert model_ops.changed_artifact(s3, artifact) is None  # that version is still the scored object
    assert model_ops.copy_scored_model(s3, artifact, "datasets", "models/versioned/model.tar.gz") is None
    assert s3.get_object(Bucket="datasets", Key="models/versioned/model.tar.gz")["Body"].read() == b"scored"


# --- one held-out set, judged again and again (issue 36 item 4) ---------------------------------------------------

def test_a_held_out_set_serves_its_budget_of_judgements_each_at_alpha_over_the_budget_then_is_refused(gate):
    key = model_ops.ledger_key(gate["env"], gate["endpoint"])
    gate["s3"].delete_object(Bucket="datasets", Key=key)
    runs = []
    for step in range(5):
        run = recorded_run(gate["tmp"], gate["uri"], "again", 0.90, s3=gate["s3"])
        evaluated(gate, run, gate["live"])
        runs.append(run)
        assert promote(gate, run, Serving(live=gate["live"]), ledger=True) == 0
        assert decisions(gate, run)[-1]["ledger"] == {"key": key, "use": step + 1, "of": 5, "level": 0.01,
                                                      "chain": None}
    ledger = json.loads(gate["s3"].get_object(Bucket="datasets", Key=key)["Body"].read())
    assert [use["run"] for use in ledger["uses"]] == runs and ledger["anchor"]["run"] == gate["live"]
    sixth = recorded_run(gate["tmp"], gate["uri"], "again", 0.90, s3=gate["s3"])
    evaluated(gate, sixth, gate["live"])
    cloudformation = Serving(live=gate["live"])
    with pytest.raises(SystemExit, match=r"has been judged 5 times, its budget \(promotion.holdout_uses = 5, each at "
                                         r"alpha / 5\): judge on fresh held-out examples no model trained on, then "
                                         r"./platform model ledger dev classifier --refresh$"):
        promote(gate, sixth, cloudformation, ledger=True)
    assert cloudformation.updates == []
    lines = []
    assert model_ops.ledger(gate["env"], gate["endpoint"], s3=gate["s3"], bucket="datasets", out=lines.append) == 0
    assert lines[0].startswith("held-out set ") and "5 of 5 judgements used: spent" in lines[0]
    assert all(len(line) <= 100 for line in lines) and len(lines) == 7, lines  # the set, the anchor, five judgements
    assert model_ops.ledger(gate["env"], gate["endpoint"], s3=gate["s3"], bucket="datasets", refresh=True,
                            out=lines.append) == 0
    assert lines[-1] == ("refreshed: the next judgement starts a new ledger for this endpoint's held-out set "
                         "(5 judgements)")
    assert promote(gate, sixth, Serving(live=gate["live"]), ledger=True) == 0


def test_an_unreadable_ledger_is_refused_in_one_line_and_refresh_clears_it(gate):
    key = model_ops.ledger_key(gate["env"], gate["endpoint"])
    gate["s3"].put_object(Bucket="datasets", Key=key, Body=b"\x00not json")
    with pytest.raises(SystemExit, match=r"is unreadable .*: look at it, then ./platform model ledger dev classifier "
                                         r"--refresh$"):
        model_ops.ledger(gate["env"], gate["endpoint"], s3=gate["s3"], bucket="datasets", out=[].append)
    lines = []
    assert model_ops.ledger(gate["env"], gate["endpoint"], s3=gate["s3"], bucket="datasets", refresh=True,
                            out=lines.append) == 0
    assert lines[0].startswith("refreshed") and "Contents" not in gate["s3"].list_objects_v2(
        Bucket="datasets", Prefix=key)
    assert model_ops.ledger(gate["env"], gate["endpoint"], s3=gate["s3"], bucket="datasets", refresh=True,
                            out=lines.append) == 0
    assert lines[-1] == "no ledger of classifier in dev yet: nothing to refresh"


# --- exit codes: a refusal is a verdict (3), an alarm or bad evidence an error (1) (issue 37 item 4) ---------------

def test_the_gates_refusal_is_the_commands_output_and_exit_3_not_an_error(monkeypatch, capsys):
    """What main does with the refusal promote raises after recording it: the line on standard output, exit 3."""
    line = "refusing to promote run r1 to classifier in dev: not shown to be within 0.5 points; live version v0."

    def refuse(*args, **kwargs):
        raise model_ops.DecidedAgainst(line)

    monkeypatch.setattr(model_ops, "judge_files", refuse)
    assert model_ops.main(["judge", "c.jsonl", "--baseline", "0.9"]) == 3
    assert capsys.readouterr() == (line + "\n", "")


def test_a_refusal_for_an_alarm_stays_an_error_exit_1(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "alarmed", 0.90, s3=gate["s3"])
    evaluated(gate, better, gate["live"])
    with pytest.raises(SystemExit) as refused:
        promote(gate, better, Serving(live=gate["live"]), cloudwatch=CloudWatch(states={ALARMS[0]: "ALARM"}))
    assert not isinstance(refused.value, model_ops.DecidedAgainst)
    assert str(refused.value.code).startswith("error: refusing to promote")  # SystemExit(str): exit 1
