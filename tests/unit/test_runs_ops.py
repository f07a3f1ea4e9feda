"""./platform runs (list, show, --json) over a local MLflow store, and ./platform model promote: the gate's refusal
and acceptance, the rollout's parameter update and its rollback, each recorded in the run."""

import io
import json
import random
from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import WaiterError
from moto import mock_aws

from ml_platform_constructs.runtime.decisions import promotion
from ml_platform_job import evaluation
from ml_platform_constructs.runtime.handlers import evaluation_submitter
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ml_platform_job.tracking import TrackedRun
from ops import model as model_ops
from ops import runs as runs_ops

PASSPORT_KEYS = {"seed", "git_commit", "image", "python", "packages", "frameworks", "gpu", "instance_type", "lifecycle",
                 "queue", "job_id", "attempts", "dataset", "params", "environment"}


HOLDOUT = {"fraction": 0.05, "salt": "", "samples": 2000, "ids_sha256": "a" * 64}



def fits(text, width=100):
    """Every line within ``width``, but a line of one word (a path, a URL: fit keeps it whole, to copy): a path's
    length is the test machine's (pytest-xdist's workers' temporary paths are longer)."""
    return all(len(line) <= width or " " not in line.strip() for line in text.splitlines())

def recorded_run(tmp_path, uri, name, accuracy, *, s3=None, model=True, holdout=HOLDOUT):
    """A finished run of two attempts (one Spot interruption) with a held-out accuracy and, in S3, a model."""
    checkpoints = f"s3://runs/checkpoints/training/{name}/" if s3 else str(tmp_path / name)
    env = {"ML_PLATFORM_CHECKPOINT_URI": checkpoints, "ML_PLATFORM_QUEUE_NAME": "training", "AWS_REGION": "us-east-1",
           "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "ML_PLATFORM_JOB_NAME": name}
    clock = iter(range(1_800_000_000, 1_800_100_000, 900)).__next__
    first = TrackedRun.start(params={"lr": 0.1}, seed=7, env=env, s3=s3, tracking_uri=uri, clock=clock,
                             prices=load_prices("us-east-1"), holdout=holdout)
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
        [(run_id, "FINISHED", 2, 0.9)]  # a count, not MLflow's tag text
    assert runs_ops.main(["show", "--local", run_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert PASSPORT_KEYS <= set(record["passport"])
    assert record["metrics"]["holdout_accuracy"] == 0.9 and record["cost_usd"] > 0
    # No live model: no cost per accuracy point; the figure over chance is apart and labelled as such.
    assert record["spot_interruptions"] == 1 and record["usd_per_accuracy_point"] is None
    assert record["over_chance"]["usd_per_point"] == pytest.approx(record["cost_usd"] / 40, rel=1e-3)
    assert [a["outcome"] for a in record["passport"]["attempts"]] == ["stopped", "finished"]
    assert runs_ops.main(["show", "--local", run_id]) == 0
    text = capsys.readouterr().out
    assert fits(text)  # long lines folded (fit), continued two spaces further in
    unfolded = " ".join(line.strip() for line in text.splitlines())
    assert "USD per accuracy point over chance, the chance baseline: +40.00 points over the untrained model (0.5000), " \
        "not over a live model" in unfolded
    assert "1 Spot interruption(s)" in unfolded and "seed 7" in unfolded
    assert runs_ops.main(["list", "--local"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert fits("\n".join(listed)) and any(line.startswith(f"  {run_id}  ") for line in listed)
    assert runs_ops.main(["list", "--local", "--wide"]) == 0
    assert "experiment" in capsys.readouterr().out


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

def test_the_deprecated_point_estimate_gate_still_answers():
    with pytest.warns(DeprecationWarning):
        assert promotion.judge("holdout_accuracy", 0.9, 0.85).promote


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
        if StackName == "dev-Compute":
            return {"Stacks": [{"StackName": StackName, "Outputs": [
                {"OutputKey": "QueueTrainingEvaluationSubmitter", "OutputValue": SUBMITTER}]}]}
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

    def get_template(self, StackName):
        """The endpoint as the deployed Serving template declares it: its configuration and rollback alarms."""
        return {"TemplateBody": {"Resources": {"classifierResource": {"Type": "AWS::SageMaker::Endpoint", "Properties": {
            "EndpointName": ENDPOINT, "EndpointConfigName": {"Fn::GetAtt": ["classifierConfig", "EndpointConfigName"]},
            "DeploymentConfig": {"AutoRollbackConfiguration": {"Alarms": [{"AlarmName": f"{ENDPOINT}-p99-latency"}]}}}}}}}

    def describe_stack_resource(self, StackName, LogicalResourceId):
        return {"StackResourceDetail": {"PhysicalResourceId": f"arn:aws:sagemaker:us-east-1:111111111111:endpoint-config/"
                                                              f"config-{len(self.updates)}"}}


ENDPOINT = "ml-platform-dev-classifier"


class SageMaker:
    """The endpoint after an update: on the declared configuration, serving the promoted model."""

    def __init__(self, run_id, config="config-1"):
        self.run_id, self.config = run_id, config

    def describe_endpoint(self, EndpointName):
        return {"EndpointStatus": "InService", "EndpointConfigName": self.config}

    def describe_endpoint_config(self, EndpointConfigName):
        return {"ProductionVariants": [{"ModelName": "model-1"}]}

    def describe_model(self, ModelName):
        return {"PrimaryContainer": {"ModelDataUrl": f"s3://datasets/models/classifier/{self.run_id}/model.tar.gz"}}


class CloudWatch:
    def describe_alarms(self, AlarmNames):
        return {"MetricAlarms": [{"AlarmName": name, "StateValue": "OK"} for name in AlarmNames]}


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
    gate["s3"].delete_object(Bucket="datasets", Key=model_ops.ledger_key(gate["env"], gate["endpoint"]))
    return model_ops.promote(gate["env"], gate["endpoint"], run_id, client=gate["client"], cloudformation=cloudformation,
                             s3=gate["s3"], sagemaker=SageMaker(run_id), cloudwatch=CloudWatch(),
                             caller="arn:aws:iam::111111111111:user/ops", out=lines.append,
                             now=lambda: datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc))


def evidence(gate, run_id, live, *, candidate=0.90, reference=0.85, n=2000, against_live=True):
    """What the evaluation job writes: per-example outcomes of both models on the same held-out ids (the candidate
    right on ``candidate`` of them, the live model on ``reference``), where ./platform model promote reads them."""
    rng = random.Random(run_id)
    ids = [f"s{i}" for i in range(n)]
    live_right = {i: k < reference * n for k, i in enumerate(ids)}
    extra = round((candidate - reference) * n)
    order = sorted(ids, key=lambda i: (live_right[i], rng.random()))  # the live model's misses first
    candidate_right = dict(live_right)
    for i in (order[:extra] if extra > 0 else order[extra:]):
        candidate_right[i] = extra > 0
    where = evaluation.evidence_uri("datasets", "training", run_id, live if against_live else None)
    live_model = f"s3://datasets/models/classifier/{live}/model.tar.gz" if against_live else None
    if against_live:
        gate["s3"].put_object(Bucket="datasets", Key=live_model[len("s3://datasets/"):], Body=b"live model")
    out = evaluation.Evaluation(runs_ops.run_record(gate["client"], run_id)["model_uri"], live_model,
                                evaluation._Place(where, gate["s3"]))
    out.model(evaluation.CANDIDATE)  # as the job reads it: the manifest names the object scored
    out.write_outcomes(evaluation.CANDIDATE, candidate_right)
    if against_live:
        out.model(evaluation.LIVE)
        out.write_outcomes(evaluation.LIVE, live_right)
    out.finish()
    return where


def decisions(gate, run_id):
    tags = gate["client"].get_run(run_id).data.tags
    return [json.loads(v) for k, v in sorted(tags.items()) if k.startswith("ml_platform.promotion.dev.classifier.")]


def test_a_worse_candidate_is_refused_with_the_judgement_and_the_refusal_is_recorded(gate):
    worse = recorded_run(gate["tmp"], gate["uri"], "worse", 0.80, s3=gate["s3"])
    evidence(gate, worse, gate["live"], candidate=0.80)
    cloudformation = CloudFormation(live=gate["live"])
    with pytest.raises(SystemExit, match=r"^refusing to promote run \w+ to classifier in dev: not shown to be "
                                         r"within 0.5 points of the live model: on 2000 paired examples the difference "
                                         r"is -5.00") as refused:
        promote(gate, worse, cloudformation, [])
    assert refused.value.code == 3  # a verdict against, not an error (docs/COMMANDS.md, "Exit codes")
    assert cloudformation.updates == []  # nothing reaches the endpoint
    [refused] = decisions(gate, worse)
    assert refused["outcome"] == "refused" and refused["examples"] == 2000 and refused["test"].startswith("paired")
    assert refused["evidence"].endswith(f"/evaluations/training/{worse}/{gate['live']}/")
    assert f"models/classifier/{worse}/" not in str(gate["s3"].list_objects_v2(Bucket="datasets"))


def test_a_better_candidate_is_copied_and_rolled_out_through_the_declared_parameter(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evidence(gate, better, gate["live"])
    cloudformation = CloudFormation(live=gate["live"])
    lines = []
    assert promote(gate, better, cloudformation, lines) == 0
    assert gate["s3"].get_object(Bucket="datasets", Key=f"models/classifier/{better}/model.tar.gz")["Body"].read() == \
        b"model"
    [update] = cloudformation.updates
    assert update["UsePreviousTemplate"] is True and update["StackName"] == "dev-Serving"
    assert update["Parameters"] == [{"ParameterKey": "BootstrapVersion", "UsePreviousValue": True},
                                    {"ParameterKey": PARAMETER, "ParameterValue": better},
                                    {"ParameterKey": BASELINE, "ParameterValue": "0.9:2000"}]
    assert update["RoleARN"].endswith("cdk-cfn-exec-role")
    assert [d["outcome"] for d in decisions(gate, better)] == ["promoting", "rolled out"] or \
        {d["outcome"] for d in decisions(gate, better)} == {"rolled out"}
    last = decisions(gate, better)[-1]
    assert (last["reference"], last["candidate"], last["examples"]) == (0.85, 0.9, 2000)
    assert any("not worse than the live model by 0.5 points or more: on 2000 paired examples" in line for line in lines)


def test_a_rollout_that_rolls_back_is_reported_and_recorded(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    evidence(gate, better, gate["live"])
    with pytest.raises(SystemExit, match=r"did not complete \(dev-Serving is UPDATE_ROLLBACK_COMPLETE\): the endpoint "
                                         rf"keeps serving {gate['live']}"):
        promote(gate, better, CloudFormation(live=gate["live"], rollout_fails=True), [])
    assert decisions(gate, better)[-1]["outcome"] == "rolled back"


def test_without_an_evaluation_the_promotion_says_how_to_get_one(gate):
    better = recorded_run(gate["tmp"], gate["uri"], "better", 0.90, s3=gate["s3"])
    with pytest.raises(SystemExit, match=rf"no evaluation of run {better} against the live run {gate['live']} at "
                                         rf"s3://datasets/evaluations/training/{better}/{gate['live']}/: run ./platform "
                                         rf"model evaluate dev classifier {better}"):
        promote(gate, better, CloudFormation(live=gate["live"]), [])


def test_a_run_split_another_way_than_the_live_run_is_refused_with_the_digests(gate):
    other = recorded_run(gate["tmp"], gate["uri"], "resalted", 0.95, s3=gate["s3"], holdout={**HOLDOUT, "salt": "v2"})
    evidence(gate, other, gate["live"], candidate=0.95)
    with pytest.raises(SystemExit, match=r"cannot be judged against the live run \w+: the held-out splits differ in salt "
                                         r"\('v2' against ''; ids sha256 aaaaaaaaaaaa and aaaaaaaaaaaa\)"):
        promote(gate, other, CloudFormation(live=gate["live"]), [])


def test_the_first_promotion_is_judged_against_the_configured_baseline_never_waved_through(gate):
    """0.4.0 let any candidate through over the documented model_version = "initial", 0.40 included."""
    poor = recorded_run(gate["tmp"], gate["uri"], "poor", 0.40, s3=gate["s3"])
    evidence(gate, poor, "initial", candidate=0.40, against_live=False)
    with pytest.raises(SystemExit, match=r"not shown to be within 0.5 points of the baseline 0.92 \(measured on 5000 "
                                         r"examples\)"):
        promote(gate, poor, CloudFormation(live="initial"), [])
    good = recorded_run(gate["tmp"], gate["uri"], "good", 0.95, s3=gate["s3"])
    evidence(gate, good, "initial", candidate=0.95, against_live=False)
    lines = []
    assert promote(gate, good, CloudFormation(live="initial"), lines) == 0
    assert "not worse than the baseline 0.92 (measured on 5000 examples)" in lines[0]


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


# --- ./platform model evaluate ------------------------------------------------------------------------------------

class Batch:
    """The queue as find_queue sees it, and the evaluation job's life."""

    def __init__(self, ends="SUCCEEDED", waiting=()):
        self.submitted, self.ends, self.waiting = [], ends, list(waiting)

    def get_paginator(self, operation):
        pages = {"describe_job_queues": [{"jobQueues": [{
                     "jobQueueArn": "arn:aws:batch:us-east-1:111111111111:job-queue/q", "tags": {"ml-platform:queue": "training"},
                     "computeEnvironmentOrder": [{"computeEnvironment": "ce"}]}]}],
                 "describe_job_definitions": [{"jobDefinitions": [
                     {"jobDefinitionName": "train", "jobDefinitionArn": "arn:def/train:1", "revision": 1,
                      "tags": {"ml-platform:queue": "training", "ml-platform:job-definition": kind},
                      "containerProperties": {"image": IMAGE}} for kind in ("single-node", "evaluation")]}]}

        class Paginator:
            def paginate(self, **kwargs):
                return pages[operation]
        return Paginator()

    def describe_compute_environments(self, computeEnvironments):
        return {"computeEnvironments": [{"computeEnvironmentArn": "ce", "computeResources": {
            "instanceTypes": ["g5.xlarge"], "maxvCpus": 16}}]}

    def describe_job_definitions(self, jobDefinitions):
        return {"jobDefinitions": [{"jobDefinitionName": "train", "jobDefinitionArn": jobDefinitions[0],
                                    "containerProperties": {"image": IMAGE}, "type": "container"}]}

    def submit_job(self, **request):
        self.submitted.append(request)
        return {"jobId": f"job-{len(self.submitted)}"}

    def list_jobs(self, jobQueue, jobStatus, nextToken=None):
        """``waiting``: the submissions (SubmitJob requests) of jobs RUNNABLE on the queue, ids job-w1, job-w2..."""
        return {"jobSummaryList": [{"jobName": r["jobName"], "jobId": f"job-w{n}"}
                                   for n, r in enumerate(self.waiting, 1) if jobStatus == "RUNNABLE"]}

    def describe_jobs(self, jobs):
        waiting = {f"job-w{n}": r for n, r in enumerate(self.waiting, 1)}
        if all(job_id in waiting for job_id in jobs):
            return {"jobs": [{"jobId": job_id, "jobName": waiting[job_id]["jobName"], "status": "RUNNABLE",
                              "jobDefinition": waiting[job_id]["jobDefinition"],
                              "container": waiting[job_id]["containerOverrides"]} for job_id in jobs]}
        return {"jobs": [{"status": self.ends, "statusReason": "Essential container in task exited"}]}


IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1.0"
SUBMITTER = "dev-Compute-trainingEvaluations-ABC"


class Lambda:
    """The queue's EvaluationSubmitter: its handler in this process, deployed with config's commands, submitting to
    the test's Batch (the candidates' models lie under s3://runs/checkpoints/training/ in these tests)."""

    def __init__(self, batch, env, deployed=None):
        commands = env.evaluation_commands()["training"] if deployed is None else deployed
        self.batch, self.calls = batch, []
        self.environ = {"JOB_QUEUE": "arn:aws:batch:us-east-1:111111111111:job-queue/q",
                        "JOB_DEFINITION": "arn:def/train:1", "QUEUE_NAME": "training",
                        "COMMANDS": json.dumps({k: list(v) for k, v in commands.items()}),
                        "CANDIDATE_PREFIX": "s3://runs/checkpoints/training/", "LIVE_PREFIX": "s3://datasets/models/",
                        "EVIDENCE_PREFIX": "s3://datasets/evaluations/training/", "HOLDOUT_SALT": "",
                        "HOLDOUT_FRACTION": "0.05"}

    def invoke(self, FunctionName, InvocationType, Payload):
        assert (FunctionName, InvocationType) == (SUBMITTER, "RequestResponse")
        self.calls.append(json.loads(Payload))
        answer = evaluation_submitter.handler(json.loads(Payload), None, batch=self.batch, environ=self.environ)
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(answer).encode())}


def test_evaluate_submits_the_queues_evaluation_job_with_the_contract(gate):
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    batch, lines = Batch(), []
    where = model_ops.evaluate(gate["env"], gate["endpoint"], candidate, client=gate["client"],
                               cloudformation=CloudFormation(live=gate["live"]), batch=batch,
                               lambda_client=Lambda(batch, gate["env"]), out=lines.append, sleep=lambda seconds: None)
    assert where == f"s3://datasets/evaluations/training/{candidate}/{gate['live']}/"
    [job] = batch.submitted
    assert job["jobDefinition"] == "arn:def/train:1" and job["containerOverrides"]["command"] == \
        ["python", "/opt/ml/code/train.py", "--evaluate"]
    variables = {v["name"]: v["value"] for v in job["containerOverrides"]["environment"]}
    assert variables == {
        "ML_PLATFORM_CANDIDATE_MODEL_URI": "s3://runs/checkpoints/training/candidate/model.tar.gz",
        "ML_PLATFORM_LIVE_MODEL_URI": f"s3://datasets/models/classifier/{gate['live']}/model.tar.gz",
        "ML_PLATFORM_EVALUATION_URI": where, "ML_PLATFORM_HOLDOUT_SALT": "", "ML_PLATFORM_HOLDOUT_FRACTION": "0.05"}
    assert lines[-1] == f"  evaluated: ./platform model promote dev classifier {candidate}"


def test_a_failed_evaluation_says_where_its_logs_are(gate):
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    with pytest.raises(SystemExit, match=r"the evaluation job job-1 FAILED: Essential container in task exited "
                                         r"\(./platform job logs dev job-1\)"):
        batch = Batch(ends="FAILED")
        model_ops.evaluate(gate["env"], gate["endpoint"], candidate, client=gate["client"],
                           cloudformation=CloudFormation(live=gate["live"]), batch=batch,
                           lambda_client=Lambda(batch, gate["env"]), out=[].append, sleep=lambda seconds: None)


def evaluate_with(gate, candidate, batch, submitter, cloudformation=None, lines=None, wait=True):
    return model_ops.evaluate(gate["env"], gate["endpoint"], candidate, client=gate["client"],
                              cloudformation=cloudformation or CloudFormation(live=gate["live"]), batch=batch,
                              lambda_client=submitter, out=(lines if lines is not None else []).append,
                              sleep=lambda seconds: None, wait=wait)


def test_evaluate_asks_the_submitter_and_chooses_no_command_output_or_split(gate):
    """0.13 submitted the evaluation definition itself with config's command: any holder of grant_evaluate could
    override it and write any run's evidence. The caller now names the endpoint, the runs and their models."""
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    batch = Batch()
    submitter = Lambda(batch, gate["env"])
    evaluate_with(gate, candidate, batch, submitter)
    assert submitter.calls == [{
        "endpoint": "classifier", "run_id": candidate,
        "candidate_model": "s3://runs/checkpoints/training/candidate/model.tar.gz", "live_run_id": gate["live"],
        "live_model": f"s3://datasets/models/classifier/{gate['live']}/model.tar.gz",
        "expected_output": f"s3://datasets/evaluations/training/{candidate}/{gate['live']}/"}]


def test_evaluate_runs_the_deployed_command_and_says_config_changed_it_until_a_deploy(gate):
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    batch, lines = Batch(), []
    evaluate_with(gate, candidate, batch, Lambda(batch, gate["env"], deployed={"classifier": ["python", "old.py"]}),
                  lines=lines)
    assert batch.submitted[0]["containerOverrides"]["command"] == ["python", "old.py"]
    assert lines[0] == ("  note: it runs the deployed command python old.py, not config's python "
                        "/opt/ml/code/train.py --evaluate: ./platform deploy dev to run config's")


def test_evaluate_again_follows_the_same_evaluation_still_waiting_instead_of_submitting_it_twice(gate):
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    first = Batch()
    evaluate_with(gate, candidate, first, Lambda(first, gate["env"]))
    again, lines = Batch(waiting=first.submitted), []
    evaluate_with(gate, candidate, again, Lambda(again, gate["env"]), lines=lines, wait=False)
    assert again.submitted == []
    assert "job job-w1 on training (already waiting or running: not submitted again)" in lines[0]


@pytest.mark.parametrize("change", ["command", "definition", "output"])
def test_a_job_that_only_shares_the_evaluations_name_is_not_followed(gate, change):
    """Another submitter (a training job named like the evaluation, or a grant_evaluate holder's own command) must
    not stand in for the evaluation: it is submitted all the same."""
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    first = Batch()
    evaluate_with(gate, candidate, first, Lambda(first, gate["env"]))
    [impostor] = json.loads(json.dumps(first.submitted))
    if change == "command":
        impostor["containerOverrides"]["command"] = ["python", "-c", "write_my_own_evidence()"]
    elif change == "definition":
        impostor["jobDefinition"] = "arn:def/train-submitted:7"
    else:
        impostor["containerOverrides"]["environment"][0]["value"] = "s3://runs/checkpoints/training/other/model.tar.gz"
    again = Batch(waiting=[impostor])
    evaluate_with(gate, candidate, again, Lambda(again, gate["env"]))
    assert len(again.submitted) == 1 and again.submitted[0] == first.submitted[0]


def test_evaluate_on_an_environment_deployed_before_the_submitter_says_deploy_in_one_line(gate):
    class Before(CloudFormation):
        def describe_stacks(self, StackName):
            if StackName == "dev-Compute":
                return {"Stacks": [{"StackName": StackName, "Outputs": []}]}
            return super().describe_stacks(StackName)
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    batch = Batch()
    with pytest.raises(SystemExit, match=r"^error: dev-Compute has no QueueTrainingEvaluationSubmitter output: deploy "
                                         r"it first \(./platform deploy dev\)$"):
        evaluate_with(gate, candidate, batch, Lambda(batch, gate["env"]), cloudformation=Before(live=gate["live"]))
    assert batch.submitted == []


def test_a_candidate_model_outside_what_the_evaluation_reads_is_refused_in_one_line(gate):
    """A candidate trained on another queue than the one that evaluates it: its evaluation role could not read the
    model (0.13 failed inside the job, AccessDenied)."""
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    batch = Batch()
    submitter = Lambda(batch, gate["env"])
    submitter.environ.update(QUEUE_NAME="ranker", CANDIDATE_PREFIX="s3://runs/checkpoints/ranker/")
    with pytest.raises(SystemExit, match=r"^error: the evaluation submitter refused: candidate_model "
                                         r"'s3://runs/checkpoints/training/candidate/model.tar.gz' is not under "
                                         r"s3://runs/checkpoints/ranker/ \(the queue's checkpoints, which the "
                                         r"evaluation reads\): evaluate it on the queue it trained on "
                                         r"\(promotion.queue\), not ranker$"):
        evaluate_with(gate, candidate, batch, submitter)
    assert batch.submitted == []


def test_a_submitter_that_would_write_the_evidence_elsewhere_refuses_before_submitting(gate):
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    batch = Batch()
    submitter = Lambda(batch, gate["env"])
    submitter.environ["EVIDENCE_PREFIX"] = "s3://datasets/evidence/training/"
    with pytest.raises(SystemExit, match=rf"^error: the evaluation submitter refused: the deployed submitter writes "
                                         rf"the evidence to s3://datasets/evidence/training/{candidate}/{gate['live']}/"
                                         rf", not s3://datasets/evaluations/training/{candidate}/{gate['live']}/ "):
        evaluate_with(gate, candidate, batch, submitter)
    assert batch.submitted == []


def test_a_failing_submitter_is_one_line_that_says_where_to_look(gate):
    class Failing:
        def invoke(self, **request):
            return {"StatusCode": 200, "FunctionError": "Unhandled",
                    "Payload": io.BytesIO(b'{"errorMessage": "Task timed out after 30.00 seconds"}')}
    candidate = recorded_run(gate["tmp"], gate["uri"], "candidate", 0.90, s3=gate["s3"])
    with pytest.raises(SystemExit, match=rf"^error: the evaluation submitter {SUBMITTER} failed \(Task timed out "
                                         r"after 30.00 seconds\): see its log group, then evaluate again$"):
        evaluate_with(gate, candidate, Batch(), Failing())


# --- ./platform model judge ---------------------------------------------------------------------------------------

def outcome_file(path, values, kind="correct"):
    path.write_text(promotion.write_outcomes(values, kind))
    return str(path)


def test_model_judge_on_files_says_promote_with_the_numbers(tmp_path, capsys):
    live = {f"s{i}": i % 10 != 0 for i in range(2000)}
    better = {**live, **{f"s{i}": True for i in range(0, 400, 10)}}
    args = [outcome_file(tmp_path / "candidate.jsonl", better), outcome_file(tmp_path / "live.jsonl", live)]
    assert model_ops.main(["judge", *args, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["promote"], answer["judged"], answer["examples"]) == (True, True, 2000)
    assert answer["difference"] == pytest.approx(2.0) and answer["resolvable"] > 0
    assert model_ops.main(["judge", *args, "--tolerance", "0"]) == 0
    assert capsys.readouterr().out.startswith("PROMOTE: not worse than the live model by 0 points")


def test_model_judge_against_a_baseline_and_its_examples_refuses_with_exit_3(tmp_path, capsys):
    candidate = outcome_file(tmp_path / "c.jsonl", {f"s{i}": i % 10 != 0 for i in range(300)})
    assert model_ops.main(["judge", candidate, "--baseline", "0.92", "--baseline-n", "1000"]) == 3
    text = capsys.readouterr().out
    assert text.startswith("REFUSE: not shown to be within 0.5 points of the baseline 0.92 (measured on 1000 examples)")


def test_model_judge_on_too_few_examples_is_not_judged_with_exit_4(tmp_path, capsys):
    candidate = outcome_file(tmp_path / "c.jsonl", {f"s{i}": True for i in range(5)})
    assert model_ops.main(["judge", candidate, candidate, "--json"]) == 4
    answer = json.loads(capsys.readouterr().out)
    assert (answer["promote"], answer["judged"]) == (False, False) and "5 paired examples, needs" in answer["reason"]


@pytest.mark.parametrize("argv, message", [
    (["judge", "c.jsonl"], "judge against the live model's outcomes (LIVE) or a baseline"),
    (["judge", "c.jsonl", "l.jsonl", "--baseline", "0.9"], "LIVE and --baseline exclude each other"),
    (["judge", "c.jsonl", "--baseline", "0.9", "--baseline-n", "0"], "--baseline-n 0: the number of examples"),
    (["judge", "c.jsonl", "--baseline", "nan"], "--baseline nan: an accuracy share (0 to 1) or an MAE"),
    (["judge", "c.jsonl", "l.jsonl", "--tolerance", "-1"], "--tolerance -1.0: points of accuracy"),
    (["judge", "c.jsonl", "l.jsonl", "--tolerance", "1e309"], "--tolerance inf: points of accuracy"),
    (["judge", "c.jsonl", "l.jsonl", "--alpha", "0.7"], "--alpha 0.7: a one-sided error rate"),
    (["judge", "c.jsonl", "l.jsonl", "--alpha", "nan"], "--alpha nan: a one-sided error rate"),
    (["judge", "c.jsonl", "--baseline-n", "x"], "argument --baseline-n: invalid int value: 'x'"),
])
def test_model_judge_refuses_a_bad_argument_first_in_one_line_with_exit_2(argv, message, capsys):
    """0.7 exited 1 for these, as for an error; COMMANDS.md said 2."""
    with pytest.raises(SystemExit) as done:
        model_ops.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.startswith(f"error: ./platform model judge: {message}") and err.count("\n") == 1
    assert err.endswith(" (usage: ./platform model judge --help)\n")


def test_model_judge_against_a_baseline_out_of_the_metrics_range_is_a_bad_argument(tmp_path, capsys):
    candidate = outcome_file(tmp_path / "c.jsonl", {f"s{i}": True for i in range(300)})
    with pytest.raises(SystemExit) as done:
        model_ops.main(["judge", candidate, "--baseline", "1.5", "--baseline-n", "100"])
    assert done.value.code == 2
    assert capsys.readouterr().err.startswith("error: ./platform model judge: --baseline 1.5: an accuracy share in")


def test_model_judge_on_a_missing_outcomes_file_is_an_error_in_one_line():
    with pytest.raises(SystemExit, match=r"^error: CANDIDATE nosuch.jsonl does not exist"):
        model_ops.main(["judge", "nosuch.jsonl", "--baseline", "0.9"])


def test_model_judge_refuses_an_outcomes_file_that_is_not_evidence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "correct": 1}\n')
    with pytest.raises(SystemExit, match=r"bad.jsonl line 1: \"correct\" is 1, not true or false"):
        model_ops.main(["judge", str(bad), "--baseline", "0.9"])
