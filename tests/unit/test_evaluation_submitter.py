"""EvaluationSubmitter (issue 41): the promotion gate's evaluation runs the command deployed for its endpoint, whoever
asks. grant_evaluate let its grantee override the command (SubmitJob has no condition key on containerOverrides) and
so write any run's evidence with the evaluation role; the function is now the only submitter."""

import json
import shutil
import subprocess
import sys
import warnings

import boto3
import pytest
from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match
from botocore.stub import Stubber

from ml_platform_constructs import EvaluationSubmitter, ValidationError, runtime
from ml_platform_constructs.operations import jobs
from ml_platform_constructs.runtime.handlers import evaluation_submitter as handler_module
from ml_platform_constructs.training.evaluation_submitter import FUNCTION_FILES
from ml_platform_job import evaluation
from ml_platform_job.holdout import HOLDOUT_FRACTION
from tests.conftest import ACCOUNT, new_app
from test_training_queue import queue_stack

COMMAND = ["python", "/opt/ml/code/train.py", "--evaluate"]
QUEUE_ARN = "arn:aws:batch:us-east-1:111111111111:job-queue/training"
DEFINITION_ARN = "arn:aws:batch:us-east-1:111111111111:job-definition/evaluate:3"
ENVIRON = {"JOB_QUEUE": QUEUE_ARN, "JOB_DEFINITION": DEFINITION_ARN, "QUEUE_NAME": "training",
           "COMMANDS": json.dumps({"classifier": COMMAND}), "CANDIDATE_PREFIX": "s3://data/checkpoints/training/",
           "LIVE_PREFIX": "s3://data/models/", "EVIDENCE_PREFIX": "s3://data/evaluations/training/",
           "HOLDOUT_SALT": "", "HOLDOUT_FRACTION": "0.05"}
RUN, LIVE = "a" * 32, "b" * 32
REQUEST = {"endpoint": "classifier", "run_id": RUN, "candidate_model": f"s3://data/checkpoints/training/{RUN}/model.tar.gz",
           "live_run_id": LIVE, "live_model": f"s3://data/models/classifier/{LIVE}/model.tar.gz"}


# --- the function ---------------------------------------------------------------------------------------------------

def stubbed_batch(*, waiting=(), submits=True):
    """A real botocore Batch client whose calls are checked against the service's model (no network)."""
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    for status in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"):  # every state before an end
        stubber.add_response("list_jobs", {"jobSummaryList": [
            {"jobName": name, "jobId": job_id} for name, job_id, _ in waiting if status == "RUNNABLE"]},
            {"jobQueue": QUEUE_ARN, "jobStatus": status})
    if waiting:
        stubber.add_response("describe_jobs", {"jobs": [job for _, _, job in waiting]},
                             {"jobs": [job_id for _, job_id, _ in waiting]})
    if submits:
        stubber.add_response("submit_job", {"jobName": "n", "jobId": "job-new", "jobArn": "arn:job"}, {
            "jobName": f"evaluate-{RUN[:24]}-{LIVE[:24]}", "jobQueue": QUEUE_ARN, "jobDefinition": DEFINITION_ARN,
            "containerOverrides": {"command": COMMAND, "environment": [
                {"name": "ML_PLATFORM_CANDIDATE_MODEL_URI", "value": REQUEST["candidate_model"]},
                {"name": "ML_PLATFORM_EVALUATION_URI", "value": f"s3://data/evaluations/training/{RUN}/{LIVE}/"},
                {"name": "ML_PLATFORM_HOLDOUT_FRACTION", "value": "0.05"},
                {"name": "ML_PLATFORM_HOLDOUT_SALT", "value": ""},
                {"name": "ML_PLATFORM_LIVE_MODEL_URI", "value": REQUEST["live_model"]}]},
            "tags": {"ml-platform:queue": "training", "ml-platform:job-definition": "evaluation"},
            "propagateTags": True})
    stubber.activate()
    return client, stubber


def test_it_submits_the_deployed_revision_with_the_endpoints_command_its_own_output_and_the_platforms_split():
    batch, stubber = stubbed_batch()
    answer = handler_module.handler(REQUEST, None, batch=batch, environ=ENVIRON)
    stubber.assert_no_pending_responses()
    assert answer == {"job_id": "job-new", "job_name": f"evaluate-{RUN[:24]}-{LIVE[:24]}", "submitted": True,
                      "output": f"s3://data/evaluations/training/{RUN}/{LIVE}/", "command": COMMAND}


def test_its_evidence_path_and_contract_are_the_evaluation_jobs():
    """The names the function writes are the ones ml_platform_job.evaluation reads, and the path is the one promote
    reads (evaluation.evidence_uri)."""
    job = handler_module.request(REQUEST, ENVIRON)
    assert job["output"] == evaluation.evidence_uri("data", "training", RUN, LIVE)
    assert handler_module.request({**REQUEST, "live_run_id": "", "live_model": ""}, ENVIRON)["output"] == \
        evaluation.evidence_uri("data", "training", RUN, None)
    assert set(job["environment"]) == {evaluation.CANDIDATE_MODEL, evaluation.LIVE_MODEL, evaluation.OUTPUT,
                                       evaluation.SALT, evaluation.FRACTION}
    assert handler_module.NO_LIVE == evaluation.NO_LIVE


def described(job_id, *, command=COMMAND, definition=DEFINITION_ARN, status="RUNNABLE", **variables):
    job = handler_module.request(REQUEST, ENVIRON)
    environment = {**job["environment"], **variables}
    return {"jobId": job_id, "jobName": job["name"], "jobQueue": QUEUE_ARN, "status": status,
            "jobDefinition": definition, "startedAt": 0,
            "container": {"command": command, "environment": [{"name": k, "value": v} for k, v in environment.items()]}}


def test_an_evaluation_already_waiting_is_returned_not_submitted_again():
    name = f"evaluate-{RUN[:24]}-{LIVE[:24]}"
    batch, stubber = stubbed_batch(waiting=[(name, "job-earlier", described("job-earlier"))], submits=False)
    answer = handler_module.handler(REQUEST, None, batch=batch, environ=ENVIRON)
    stubber.assert_no_pending_responses()
    assert (answer["job_id"], answer["submitted"], answer["command"]) == ("job-earlier", False, COMMAND)


def test_an_evaluation_waiting_whose_empty_variables_batch_left_out_is_still_the_same():
    name = f"evaluate-{RUN[:24]}-{LIVE[:24]}"
    job = described("job-earlier")
    job["container"]["environment"] = [v for v in job["container"]["environment"] if v["value"]]  # the salt ""
    batch, stubber = stubbed_batch(waiting=[(name, "job-earlier", job)], submits=False)
    assert handler_module.handler(REQUEST, None, batch=batch, environ=ENVIRON)["job_id"] == "job-earlier"


@pytest.mark.parametrize("impostor", [
    described("job-x", command=["python", "-c", "write_my_own_evidence()"]),
    described("job-x", definition=DEFINITION_ARN.replace(":3", ":2")),
    described("job-x", ML_PLATFORM_HOLDOUT_SALT="mine"),
    described("job-x", status="SUCCEEDED"),
], ids=["another command", "another revision", "another split", "ended since it was listed"])
def test_a_job_that_only_shares_the_name_is_not_the_evaluation(impostor):
    name = f"evaluate-{RUN[:24]}-{LIVE[:24]}"
    batch, stubber = stubbed_batch(waiting=[(name, "job-x", impostor)])
    assert handler_module.handler(REQUEST, None, batch=batch, environ=ENVIRON)["submitted"] is True
    stubber.assert_no_pending_responses()


def test_what_else_a_request_holds_is_ignored():
    """The caller chooses no command, output, split, image or definition, whatever it sends."""
    batch, stubber = stubbed_batch()
    answer = handler_module.handler({**REQUEST, "command": ["python", "-c", "forge()"], "output": "s3://x/y/",
                                     "environment": {"ML_PLATFORM_HOLDOUT_SALT": "mine"}, "salt": "mine",
                                     "job_definition": "arn:other", "image": "mine:1"}, None, batch=batch,
                                    environ=ENVIRON)
    stubber.assert_no_pending_responses()  # the one submission the stub expects: the deployed command, its split
    assert answer["command"] == COMMAND and answer["output"] == f"s3://data/evaluations/training/{RUN}/{LIVE}/"


def test_a_caller_expecting_the_evidence_elsewhere_is_refused_before_anything_is_submitted():
    answer = handler_module.handler({**REQUEST, "expected_output": "s3://data/evidence/"}, None, batch=object(),
                                    environ=ENVIRON)
    assert answer["refused"].startswith(f"the deployed submitter writes the evidence to s3://data/evaluations/training/"
                                        f"{RUN}/{LIVE}/, not s3://data/evidence/")
    assert handler_module.handler({**REQUEST, "expected_output": f"s3://data/evaluations/training/{RUN}/{LIVE}/"},
                                  None, batch=stubbed_batch()[0], environ=ENVIRON)["submitted"] is True


def test_the_function_reads_exactly_the_variables_the_construct_sets(built):
    """The construct, the function and the operator tests' stand-in (test_runs_ops.Lambda) name the same variables."""
    import ast
    import inspect
    from tests.unit.test_runs_ops import Lambda

    tree = ast.parse(inspect.getsource(handler_module))
    read = {node.slice.value for node in ast.walk(tree) if isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name) and node.value.id == "environ" and isinstance(node.slice, ast.Constant)}
    template, _ = built
    [function] = template.find_resources("AWS::Lambda::Function", {
        "Properties": {"Handler": "evaluation_submitter.handler"}}).values()
    assert read == set(function["Properties"]["Environment"]["Variables"]) == set(ENVIRON)
    assert set(Lambda(None, None, deployed={}).environ) == read


def test_its_jobs_carry_the_tag_the_budget_guard_reads():
    from ml_platform_constructs.runtime.handlers import budget_guard

    assert handler_module.EVALUATION_TAG == budget_guard.EVALUATION_TAG == (jobs.DEFINITION_TAG, jobs.EVALUATION)
    assert handler_module.QUEUE_TAG == budget_guard.QUEUE_TAG


@pytest.mark.parametrize("change, message", [
    ({"endpoint": "other"}, "endpoint 'other' has no deployed evaluation command on queue training (deployed: "
                            "classifier): set its promotion.evaluate_command and deploy"),
    ({"endpoint": None}, "endpoint is missing"),
    ({"run_id": "../x"}, "run_id '../x' is not a run id (1-64 letters, digits, '-' or '_')"),
    ({"run_id": 7}, "run_id is int, not text"),
    ({"live_run_id": RUN}, f"run {RUN} is the live run: nothing to evaluate"),
    ({"candidate_model": "s3://data/evaluations/training/x/model.tar.gz"},
     "candidate_model 's3://data/evaluations/training/x/model.tar.gz' is not under s3://data/checkpoints/training/ "
     "(the queue's checkpoints, which the evaluation reads): evaluate it on the queue it trained on (promotion.queue), "
     "not training"),
    ({"candidate_model": "s3://data/checkpoints/training/"}, "is not under s3://data/checkpoints/training/"),
    ({"candidate_model": "s3://data/checkpoints/training/a b"}, "is not under s3://data/checkpoints/training/"),
    ({"live_model": "s3://other/models/x"}, "live_model 's3://other/models/x' is not under s3://data/models/"),
    ({"live_run_id": ""}, "live_model is given without live_run_id"),
])
def test_a_request_it_would_not_run_as_asked_is_refused_with_what_to_do(change, message):
    answer = handler_module.handler({**REQUEST, **change}, None, batch=object(), environ=ENVIRON)
    assert set(answer) == {"refused"} and message in answer["refused"]


@pytest.mark.parametrize("event", [None, [], "x"])
def test_a_request_that_is_not_an_object_is_refused(event):
    assert "not a JSON object" in handler_module.handler(event, None, batch=object(), environ=ENVIRON)["refused"]


def test_the_functions_code_imports_as_lambda_packages_it(tmp_path):
    for name in FUNCTION_FILES:
        shutil.copy(runtime.source(name), tmp_path / name)
    subprocess.run([sys.executable, "-c", "import evaluation_submitter; evaluation_submitter.handler"], cwd=tmp_path,
                   check=True)


# --- the construct ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        parts.update(queue_stack(stack))
        parts["submitter"] = EvaluationSubmitter(stack, "Evaluations", queue=parts["queue"],
                                                 commands={"classifier": COMMAND, "ranker": ["python", "rank.py"]})
        parts["submitter"].grant_submit(iam.Role(stack, "Operator", assumed_by=iam.AccountRootPrincipal()))
    return synth_stack(body), parts


def statements(template, prefix):
    policy = next(p for k, p in template.find_resources("AWS::IAM::Policy").items() if k.startswith(prefix))
    return policy["Properties"]["PolicyDocument"]["Statement"]


def logical_id(template, kind, **tags):
    return next(k for k, r in template.find_resources(kind).items()
                if all(r["Properties"].get("Tags", {}).get(t) == v for t, v in tags.items()))


def test_the_function_knows_the_deployed_commands_the_evaluation_revision_and_the_places(built):
    template, parts = built
    definition = logical_id(template, "AWS::Batch::JobDefinition", **{"ml-platform:job-definition": "evaluation"})
    template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "evaluation_submitter.handler", "Runtime": "python3.14", "Environment": {"Variables": {
            "COMMANDS": json.dumps({"classifier": COMMAND, "ranker": ["python", "rank.py"]}, separators=(",", ":")),
            "JOB_DEFINITION": {"Ref": definition}, "QUEUE_NAME": "training", "HOLDOUT_SALT": "",
            "HOLDOUT_FRACTION": str(HOLDOUT_FRACTION),
            "CANDIDATE_PREFIX": {"Fn::Join": ["", ["s3://", {"Ref": Match.string_like_regexp("^Datasets")},
                                                  "/checkpoints/training/"]]},
            "LIVE_PREFIX": {"Fn::Join": ["", ["s3://", {"Ref": Match.any_value()}, "/models/"]]},
            "EVIDENCE_PREFIX": {"Fn::Join": ["", ["s3://", {"Ref": Match.any_value()}, "/evaluations/training/"]]}}}})
    assert parts["submitter"].commands == {"classifier": tuple(COMMAND), "ranker": ("python", "rank.py")}


def test_the_function_submits_the_evaluation_revision_alone_and_passes_no_role(built):
    template, _ = built
    found = statements(template, "EvaluationsServiceRoleDefaultPolicy")
    submit = next(s for s in found if s.get("Sid") == "SubmitTheEvaluation")
    definition = logical_id(template, "AWS::Batch::JobDefinition", **{"ml-platform:job-definition": "evaluation"})
    assert submit["Action"] == "batch:SubmitJob" and {"Ref": definition} in submit["Resource"]
    assert len(submit["Resource"]) == 2  # the job queue and that revision: no training definition, no family wildcard
    assert not any("iam:PassRole" in str(s["Action"]) or "RegisterJobDefinition" in str(s["Action"]) for s in found)


def test_an_operator_granted_to_submit_may_invoke_it_and_follow_the_job_but_not_submit_jobs_itself(built):
    template, _ = built
    found = statements(template, "OperatorDefaultPolicy")
    actions = sorted(a for s in found for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    assert actions == ["batch:DescribeJobs", "lambda:InvokeFunction"]


def test_its_log_group_is_kept_a_year_under_the_queues_key(built):
    template, _ = built
    [function] = template.find_resources("AWS::Lambda::Function", {
        "Properties": {"Handler": "evaluation_submitter.handler"}}).values()
    group = template.find_resources("AWS::Logs::LogGroup")[function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]]
    assert group["Properties"]["RetentionInDays"] == 365
    assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [logical_id(template, "AWS::KMS::Key"), "Arn"]}


def test_it_tags_the_jobs_it_submits_with_its_two_tag_keys_only(built):
    template, _ = built
    [tagging] = [s for s in statements(template, "EvaluationsServiceRoleDefaultPolicy") if s.get("Sid") == "TagTheEvaluation"]
    assert tagging["Action"] == "batch:TagResource"
    assert tagging["Condition"] == {  # (no condition on the values: see the construct)
        "ForAllValues:StringEquals": {"aws:TagKeys": ["ml-platform:queue", "ml-platform:job-definition"]}}


def test_grant_evaluate_is_deprecated_with_a_warning_that_says_what_to_use(tmp_path):
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    queue_stack(stack)["queue"].grant_evaluate(iam.Role(stack, "Pipeline", assumed_by=iam.AccountRootPrincipal()))
    Annotations.from_stack(stack).has_warning("/Test/Queue", Match.string_like_regexp(
        r"grant_evaluate is deprecated \(removed in 0.16.0\): its grantee can override the evaluation's command .* "
        r"Use EvaluationSubmitter\(queue=..., commands=...\).grant_submit\(grantee\) instead"))


def test_submit_evaluation_is_deprecated():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit):  # a target without an evaluation definition: refused after the warning
            jobs.submit_evaluation(object(), jobs.QueueTarget(name="q", job_queue="", job_definition="", instance_types=()), name="e",
                                   command=["x"], environment={})
    assert any(issubclass(w.category, DeprecationWarning) and "invoke the queue's EvaluationSubmitter" in
               str(w.message) for w in caught)


@pytest.mark.parametrize("commands, message", [
    ({}, "EvaluationSubmitter: commands={} is invalid: a mapping of at least one endpoint name"),
    ({"bad name": COMMAND}, "commands='bad name' is invalid: endpoint names of 1-64 letters"),
    ({"classifier": "python eval.py"}, "commands['classifier']='python eval.py' is invalid: a non-empty list of "
                                       "non-empty strings (the job's argv)"),
    ({"classifier": []}, "commands['classifier']=[] is invalid"),
    ({"classifier": ["python", ""]}, "commands['classifier']=['python', ''] is invalid"),
    ({"classifier": ["x" * 2782]}, "commands='2801 bytes as JSON' is invalid: at most 2800 bytes (Lambda refuses more "
                                   "than 4 KB of environment variables). Fix: put the arguments in a file"),
])
def test_commands_aws_or_the_job_would_refuse_fail_at_synth(tmp_path, commands, message):
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    queue = queue_stack(stack)["queue"]
    with pytest.raises(ValidationError) as refused:
        EvaluationSubmitter(stack, "Evaluations", queue=queue, commands=commands)
    assert message in str(refused.value)
    assert stack.node.try_find_child("Evaluations") is None


def test_commands_of_2800_bytes_are_taken(tmp_path):
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    submitter = EvaluationSubmitter(stack, "Evaluations", queue=queue_stack(stack)["queue"],
                                    commands={"classifier": ["x" * 2781]})
    assert len(json.dumps({"classifier": ["x" * 2781]}, separators=(",", ":"))) == 2800 and submitter.function


def test_a_queue_without_an_evaluation_definition_is_refused(tmp_path):
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    queue = queue_stack(stack, datasets=None, queue_name="plain")["queue"]
    with pytest.raises(ValidationError, match=r"^EvaluationSubmitter: queue='plain' is invalid: a TrainingQueue with "
                                              r"a DatasetBucket .* Fix: pass datasets= to the queue$"):
        EvaluationSubmitter(stack, "Evaluations", queue=queue, commands={"classifier": COMMAND})


def test_a_queue_of_another_stack_is_refused_since_the_revision_arn_would_be_an_export_that_changes(tmp_path):
    """The second deploy that revises the definition would fail: CloudFormation cannot update an export in use."""
    app = new_app(tmp_path)
    stack = Stack(app, "Test", env={"account": ACCOUNT, "region": "us-east-1"})
    queue = queue_stack(stack)["queue"]
    other = Stack(app, "Promotion", env={"account": ACCOUNT, "region": "us-east-1"})
    with pytest.raises(ValidationError, match=r"^EvaluationSubmitter: queue='training' is invalid: a TrainingQueue of "
                                              r"the stack the submitter is created in: .* Fix: create the "
                                              r"EvaluationSubmitter in the queue's stack$"):
        EvaluationSubmitter(other, "Evaluations", queue=queue, commands={"classifier": COMMAND})
