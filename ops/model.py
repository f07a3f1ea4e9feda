"""The promotion gate: a model version reaches an endpoint only when it is shown, on the same held-out examples as
the live model, not to be worse than it by more than a tolerance, and then through a blue/green rollout that takes
itself back on the endpoint's alarms.

  ./platform model judge CANDIDATE LIVE [--tolerance POINTS] [--alpha A] [--json]
  ./platform model judge CANDIDATE --baseline VALUE [--baseline-n N] [--tolerance POINTS] [--json]
  ./platform model evaluate ENV ENDPOINT RUN_ID [--no-wait]
  ./platform model promote ENV ENDPOINT RUN_ID [--no-wait]
  ./platform model status ENV ENDPOINT

Try judge on the samples: ./platform model judge examples/decisions/judge/candidate.jsonl
examples/decisions/judge/live.jsonl

`judge` (no AWS): CANDIDATE and LIVE are JSON Lines of per-example held-out outcomes, `{"id": ..., "correct": true}`
(classifiers) or `{"id": ..., "error": 0.3}` (regressors), of the same ids. The answer says whether to promote, why,
on how many paired examples, and the difference the examples can resolve (--json: promote, judged, reason, examples,
difference, bound, resolvable, examples_needed, ...). It guards against promoting a candidate truly worse by the
tolerance (0.5 accuracy points, or percent of the live MAE) or more: at most alpha (5%) of such candidates pass.
Exit: 0 PROMOTE, 3 REFUSE, 4 NOT JUDGED (too few examples, or not the same ids), 1 an error, 2 a bad argument.

`evaluate`, in ENV's account (credentials checked first, as every operator command): asks the training queue's
evaluation submitter (a Lambda function, `EvaluationSubmitter`) to submit its evaluation job definition as deployed
(the queue's image, no other) with the endpoint's command as deployed (config `promotion.evaluate_command`, which names
the dataset, as of the last deploy: a changed command says so and needs a deploy), which scores the candidate run's
model and the live model on the platform's held-out split and writes their outcomes under
`evaluations/<queue>/<run id>/<live version>/` of the dataset bucket. Its role alone writes there, and only the
submitter submits it, with a command no caller chooses: no training job, and no operator, can write evidence of its
own. An evaluation of the same run and live run still waiting or running is followed, not submitted again.
Nothing the evaluation does comes from the candidate run's own record but its model: the split is the platform's
(the library's held-out salt and fraction), and a run (candidate or live) whose passport declares another split is
refused (it may have trained on the examples it would be judged on).

`promote`: refuses while a rollback alarm of the endpoint is in ALARM (a rollout would roll itself back); checks that
the evidence scored this run's model on the platform's split and that the model is still the object that was scored
(its ETag, and VersionId in a versioned bucket); judges it as `judge` does (config `promotion`: tolerance_points,
alpha; when the live version is not a recorded run, against the quality baseline its promotion set, else the
configured one: the first promotion); records the decision in the candidate run either way (tag
`ml_platform.promotion.<env>.<endpoint>.<time>`); copies exactly the scored object to the endpoint's model key for
that version; and updates the Serving stack with its deployed template and only the version parameter changed (and,
with a quality check, its baseline: the candidate's score and the number of examples it was judged on). CloudFormation
replaces the model and endpoint configuration and SageMaker shifts the traffic blue/green, rolling back if a rollback
alarm fires while it bakes. After the update, the endpoint's live configuration and model are compared with what the
stack declares: a rollout SageMaker took back is recorded "rolled back" and the parameters are put back. A candidate
the gate refuses (its judgement, the chain's, or a score the quality check cannot take) exits 3, its line on standard
output; any other refusal (a rollback alarm in ALARM, evidence of another model, a spent held-out set) is an error,
exit 1.

`status`: the declared version, the endpoint's state and the configuration it serves, with "ROLLED BACK" when that is
another configuration or model than the stack declares (after `promote --no-wait`, the one place that says so).

Calls: cloudformation:DescribeStacks, GetTemplate, DescribeStackResource and UpdateStack (with iam:PassRole for the
stack's CloudFormation role), cloudwatch:DescribeAlarms, sagemaker:DescribeEndpoint, DescribeEndpointConfig and
DescribeModel, lambda:InvokeFunction and batch:DescribeJobs (evaluate: `EvaluationSubmitter.grant_submit`), s3:GetObject on the
evidence and the run's model (HeadObject included) and s3:PutObject under models/, the MLflow read and SetTag API.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ml_platform_constructs.operations import jobs
from ml_platform_job import evaluation
from ml_platform_job.holdout import HOLDOUT_FRACTION
from ml_platform_constructs.runtime.decisions.promotion import (DEFAULT_ALPHA, DEFAULT_TOLERANCE, EvidenceError, Judgement,
                                                      Ledger, Outcomes, baseline_value, judge_chain, judge_outcomes,
                                                      model_key, model_version_parameter, quality_baseline_parameter,
                                                      read_outcomes, split_problem)
from ml_platform_constructs.runtime.decisions.quality import Settings as QualitySettings
from ml_platform_constructs.runtime.decisions.quality import parse_baseline
from ml_platform_job.tracking import PROMOTION_TAG_PREFIX

from ops.aws_access import environment, require_known, session_for
from ops.cli import DecidedAgainst, Parser, aws_errors_in_one_line, fit, read_text, verdict_exit, verdicts
from ops.dataset import stack_output
from ops.runs import RunsError, environment_tracking_uri, run_record
from stacks.config import EndpointConfig, EnvironmentConfig, queue_output_key

CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
EVALUATION_POLL_SECONDS = 30
# The held-out split every judged run is evaluated on: ml_platform_job.holdout's (TrackedRun records it, the example trains with
# it). Never a run's own record: a candidate could name the split, or the dataset, it looks best on.
PLATFORM_HOLDOUT = {"salt": "", "fraction": HOLDOUT_FRACTION}


class PromotionError(SystemExit):
    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


def versioned_endpoint(env: EnvironmentConfig, name: str) -> EndpointConfig:
    require_known("endpoint", name, [e.name for e in env.endpoints], env)
    endpoint = next(e for e in env.endpoints if e.name == name)
    if endpoint.model_version is None:
        raise PromotionError(
            f"{env.name}'s endpoint {name} does not declare a model version: set model_data_key = "
            f'"models/{name}/{{version}}/model.tar.gz" and model_version = "initial" in config/environments.toml, '
            f"upload the current model there, deploy, then promote")
    return endpoint


def serving_stack(cloudformation: Any, env: EnvironmentConfig, endpoint: EndpointConfig) -> tuple[dict, str, str]:
    """(the deployed Serving stack, its model version parameter's name, the live version)."""
    name = f"{env.name}-Serving"
    stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    stack = stacks[0]
    parameter = model_version_parameter(f"{env.project}-{env.name}-{endpoint.name}")
    values = {p["ParameterKey"]: p.get("ParameterValue") for p in stack.get("Parameters", [])}
    if parameter not in values:
        raise PromotionError(f"{name} has no parameter {parameter}: deploy {env.name} with this endpoint's declared "
                             "model version first (./platform deploy " + env.name + ")")
    if not stack["StackStatus"].endswith("_COMPLETE") or "ROLLBACK_IN_PROGRESS" in stack["StackStatus"]:
        raise PromotionError(f"{name} is {stack['StackStatus']}: wait until its update ends, then promote")
    return stack, parameter, values[parameter]


def baseline_parameter(stack: dict, env: EnvironmentConfig, endpoint: EndpointConfig) -> Optional[tuple[str, str]]:
    """(the quality baseline parameter's name, its deployed value: empty before any promotion), for an endpoint with
    a quality check; None without one."""
    if endpoint.quality is None:
        return None
    parameter = quality_baseline_parameter(f"{env.project}-{env.name}-{endpoint.name}")
    values = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    if parameter not in values:
        raise PromotionError(f"{stack['StackName']} has no parameter {parameter}: deploy {env.name} with this "
                             f"endpoint's quality check first (./platform deploy {env.name})")
    return parameter, values[parameter]


def live_run(client: Any, version: str) -> Optional[dict]:
    """The live version's run record, or None when the version is not a recorded run (the initial upload)."""
    try:
        return run_record(client, version)
    except RunsError:
        return None


def evaluation_queue(env: EnvironmentConfig, endpoint: EndpointConfig) -> str:
    """The queue whose evaluation job definition scores candidates: config promotion.queue, else the endpoint's
    retraining queue, else the environment's first queue."""
    name = env.evaluation_queue(endpoint)
    if name is None:
        raise PromotionError(f"{env.name} has no training queue to evaluate candidates on: add one (its evaluation "
                             "job scores the candidate and the live model), or set promotion.queue")
    require_known("queue", name, [q.name for q in env.queues], env)
    return name


def configured_baseline(env: EnvironmentConfig, endpoint: EndpointConfig,
                        promoted: str = "") -> tuple[float, Optional[int]]:
    """What a candidate is judged against when the live version is not a recorded run: the quality baseline a
    promotion set (``promoted``, the parameter's value: the live model's judged score), else the endpoint's configured
    one (the first promotion). Never the configured one over a promoted one: the baseline would be lowered by a
    candidate never judged against the model it replaces."""
    value, examples = parse_baseline(promoted)
    if value is not None:
        return value, examples
    if endpoint.quality is None:
        raise PromotionError(f"the live version of {endpoint.name} in {env.name} is not a recorded run and the "
                             "endpoint has no quality baseline to judge the candidate against: set quality = { "
                             "problem_type, baseline, baseline_examples } for it")
    return endpoint.quality.baseline, endpoint.quality.baseline_examples


def candidate_run(client: Any, run_id: str) -> dict:
    candidate = run_record(client, run_id)
    if candidate["status"] != "FINISHED":
        raise PromotionError(f"run {run_id} is {candidate['status']}: only a finished run can be promoted")
    if not (candidate.get("model_uri") or "").startswith("s3://"):
        raise PromotionError(f"run {run_id} recorded no model in S3 (TrackedRun.record_model with the model.tar.gz "
                             "next to its checkpoints)")
    return candidate


def platform_split_problem(holdout: Optional[dict]) -> Optional[str]:
    """Why a run's recorded held-out split is not the platform's, or None."""
    if not holdout:
        return "it recorded no held-out split (log it with holdout.describe)"
    for key in ("salt", "fraction"):
        if holdout.get(key) != PLATFORM_HOLDOUT[key]:
            return (f"it was split with {key} {holdout.get(key)!r} and the platform evaluates on {key} "
                    f"{PLATFORM_HOLDOUT[key]!r} (ml_platform_job.holdout's split): it may have trained on the examples it would "
                    "be judged on. Train it with the platform's split")
    return None


def check_splits(candidate: dict, live: Optional[dict], run_id: str) -> None:
    if live is not None:
        problem = split_problem(candidate["passport"].get("holdout"), live["passport"].get("holdout"))
        if problem:
            raise PromotionError(f"run {run_id} cannot be judged against the live run {live['run_id']}: {problem}")
    # With the live run's split the candidate's, the candidate's being the platform's covers both.
    problem = platform_split_problem(candidate["passport"].get("holdout"))
    if problem:
        raise PromotionError(f"run {run_id} cannot be judged on the platform's held-out split: {problem}")


# --- evaluate -----------------------------------------------------------------------------------------------------

def evaluate(env: EnvironmentConfig, endpoint: EndpointConfig, run_id: str, *, client: Any, cloudformation: Any,
             batch: Any, lambda_client: Any, wait: bool = True, out: Callable[[str], None] = print,
             sleep: Callable[[float], None] = time.sleep) -> str:
    """Asks the queue's evaluation submitter to score ``run_id`` against the live version; returns where its evidence
    goes. The submitter runs the command deployed for the endpoint (config ``promotion.evaluate_command`` as of the
    last deploy), the platform's split and evidence path: nothing here chooses them."""
    command = list(endpoint.promotion.evaluate_command)
    if not command:
        raise PromotionError(f"{endpoint.name} in {env.name} has no promotion.evaluate_command: set the command that "
                             'scores a candidate and the live model (e.g. ["python", "train.py", "--evaluate"]; '
                             "ml_platform_job.evaluation's contract), then deploy")
    queue = evaluation_queue(env, endpoint)
    candidate = candidate_run(client, run_id)
    _, _, live = serving_stack(cloudformation, env, endpoint)
    if live == run_id:
        raise PromotionError(f"{endpoint.name} in {env.name} already serves run {run_id}: nothing to evaluate")
    live_record = live_run(client, live)
    check_splits(candidate, live_record, run_id)
    bucket = stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName")
    expected = evaluation.evidence_uri(bucket, queue, run_id, live if live_record else None)
    submitter = stack_output(cloudformation, f"{env.name}-Compute", queue_output_key(queue, "EvaluationSubmitter"))
    # The candidate's model and the live one; nothing else from the candidate's own record (promote later checks the
    # model is the object that was scored). The submitter refuses a model outside what the evaluation reads.
    try:
        job = jobs.invoke_evaluation(lambda_client, submitter, endpoint=endpoint.name, run_id=run_id,
                                     candidate_model=candidate["model_uri"], live_run_id=live if live_record else "",
                                     live_model=live_model_uri(bucket, endpoint, live) if live_record else "",
                                     expected_output=expected)
    except jobs.JobError as error:  # (its message is the line already)
        raise PromotionError(str(error).removeprefix("error: ")) from None
    where = job.get("output")
    if where != expected:  # (a submitter of 0.14 refuses such a request before submitting)
        raise PromotionError(f"the evaluation submitter sent job {job.get('job_id')}'s evidence to {where}, not "
                             f"{expected} (where promote reads it): deploy {env.name} with this version "
                             f"(./platform deploy {env.name})")
    if list(job.get("command") or []) != command:
        out(f"  note: it runs the deployed command {' '.join(job.get('command') or [])}, not config's "
            f"{' '.join(command)}: ./platform deploy {env.name} to run config's")
    again = "" if job.get("submitted", True) else " (already waiting or running: not submitted again)"
    out(f"evaluating run {run_id} against {'the live run ' + live if live_record else 'the configured baseline'}: "
        f"job {job['job_id']} on {queue}{again}; its evidence goes to {where}")
    if not wait:
        out(f"  not waiting: promote when it succeeds (./platform job logs {env.name} {job['job_id']} shows its output)")
        return where
    started = time.monotonic()
    while True:
        status = batch.describe_jobs(jobs=[job["job_id"]])["jobs"][0]
        if status["status"] in jobs.FINISHED:
            break
        out(f"  {status['status'].lower()} ({time.monotonic() - started:.0f} s)")
        sleep(EVALUATION_POLL_SECONDS)
    if status["status"] != "SUCCEEDED":
        raise PromotionError(f"the evaluation job {job['job_id']} {status['status']}: {status.get('statusReason', '')}"
                             f" (./platform job logs {env.name} {job['job_id']})")
    out(f"  evaluated: ./platform model promote {env.name} {endpoint.name} {run_id}")
    return where


def live_model_uri(bucket: str, endpoint: EndpointConfig, live: str) -> str:
    return f"s3://{bucket}/{model_key(endpoint.model_data_key, live)}"


# --- promote ------------------------------------------------------------------------------------------------------

def record_decision(client: Any, run_id: str, env: EnvironmentConfig, endpoint: EndpointConfig, decision: dict,
                    at: str) -> None:
    stamp = at.replace("-", "").replace(":", "").split("+")[0].split(".")[0]
    client.set_tag(run_id, f"{PROMOTION_TAG_PREFIX}{env.name}.{endpoint.name}.{stamp}Z", json.dumps(decision))


def update_parameters(cloudformation: Any, stack: dict, values: dict[str, str]) -> None:
    """UpdateStack with the deployed template, every other parameter as it is, these set to their values."""
    parameters = [{"ParameterKey": p["ParameterKey"], "UsePreviousValue": True}
                  for p in stack.get("Parameters", []) if p["ParameterKey"] not in values]
    parameters.extend({"ParameterKey": key, "ParameterValue": value} for key, value in values.items())
    request = {"StackName": stack["StackName"], "UsePreviousTemplate": True, "Parameters": parameters,
               "Capabilities": CAPABILITIES}
    if stack.get("RoleARN"):
        request["RoleARN"] = stack["RoleARN"]
    cloudformation.update_stack(**request)


def wait_for_update(cloudformation: Any, stack: dict) -> Optional[str]:
    """Waits for the stack's update (up to 4 hours: a blue/green shift bakes 20 minutes a step); None once it completed,
    else the stack's status (rolled back, failed, or still in progress when the wait ran out)."""
    from botocore.exceptions import WaiterError

    from botocore.exceptions import BotoCoreError, ClientError

    try:
        cloudformation.get_waiter("stack_update_complete").wait(
            StackName=stack["StackName"], WaiterConfig={"Delay": 30, "MaxAttempts": 480})
    except WaiterError:
        try:
            return cloudformation.describe_stacks(StackName=stack["StackName"])["Stacks"][0]["StackStatus"]
        except (BotoCoreError, ClientError) as error:  # e.g. credentials that expired during the hours of waiting
            return f"unknown ({error.__class__.__name__}: renew the credentials and look at the stack)"
    return None


def judge_evidence(env: EnvironmentConfig, endpoint: EndpointConfig, candidate: Outcomes,
                   live: Optional[Outcomes], promoted_baseline: str = "", alpha: Optional[float] = None) -> Judgement:
    """The gate at ``alpha`` (default: the endpoint's; a promotion passes its ledger's level)."""
    promotion = endpoint.promotion
    alpha = promotion.alpha if alpha is None else alpha
    if live is not None:
        return judge_outcomes(candidate, live, tolerance=promotion.tolerance_points, alpha=alpha)
    value, examples = configured_baseline(env, endpoint, promoted_baseline)
    return judge_outcomes(candidate, baseline=value, baseline_examples=examples,
                          tolerance=promotion.tolerance_points, alpha=alpha)


def ledger_key(env: EnvironmentConfig, endpoint: EndpointConfig) -> str:
    """Where an endpoint's held-out ledger lives in the environment's dataset bucket."""
    return f"evaluations/ledger/{env.name}/{endpoint.name}.json"


def load_ledger(s3: Any, bucket: str, key: str) -> tuple[Ledger, Optional[str]]:
    """The ledger and its ETag (None: none yet)."""
    try:
        answer = s3.get_object(Bucket=bucket, Key=key)
    except s3.exceptions.NoSuchKey:
        return Ledger(), None
    try:
        return Ledger.parse(answer["Body"].read().decode()), answer["ETag"]
    except (ValueError, UnicodeDecodeError) as error:
        raise PromotionError(f"the held-out ledger s3://{bucket}/{key} is unreadable ({error}): look at it, then "
                             f"./platform model ledger {key.split('/')[-2]} {key.split('/')[-1][:-5]} --refresh") from None


def save_ledger(s3: Any, bucket: str, key: str, ledger: Ledger, etag: Optional[str]) -> None:
    """A conditional write: of two promotions judging on the same set at once, one records, the other stops (S3
    answers 412 PreconditionFailed, or 409 ConditionalRequestConflict to two writes at once, and 404 NoSuchKey to
    IfMatch on an object deleted meanwhile: https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html)."""
    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=ledger.to_text().encode(), ContentType="application/json",
                      **condition)
    except s3.exceptions.NoSuchKey:  # IfMatch on a ledger a --refresh deleted meanwhile
        raise PromotionError(f"the held-out ledger s3://{bucket}/{key} was refreshed meanwhile: run this promotion "
                             "again") from None
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict",
                                                          "NoSuchKey"):
            raise PromotionError(f"another promotion recorded a judgement in s3://{bucket}/{key} meanwhile: run this "
                                 "promotion again (it is judged at the ledger's next level)") from None
        raise


@dataclass(frozen=True)
class DeclaredEndpoint:
    """What the deployed Serving template declares for one endpoint: its configuration's logical id and the alarms a
    rollout rolls back on."""
    name: str
    config_logical_id: str
    rollback_alarms: tuple[str, ...]


def declared_endpoint(cloudformation: Any, stack: dict, name: str) -> DeclaredEndpoint:
    body = cloudformation.get_template(StackName=stack["StackName"])["TemplateBody"]
    template = json.loads(body) if isinstance(body, str) else body  # botocore decodes a JSON template itself
    for resource in template.get("Resources", {}).values():
        properties = resource.get("Properties", {})
        if resource.get("Type") != "AWS::SageMaker::Endpoint" or properties.get("EndpointName") != name:
            continue
        config = properties.get("EndpointConfigName")
        if not (isinstance(config, dict) and "Fn::GetAtt" in config):
            break
        alarms = (properties.get("DeploymentConfig", {}).get("AutoRollbackConfiguration", {}).get("Alarms", []))
        names = tuple(_physical_id(cloudformation, stack, a["AlarmName"]["Ref"]) if isinstance(a["AlarmName"], dict)
                      else a["AlarmName"] for a in alarms)
        return DeclaredEndpoint(name, config["Fn::GetAtt"][0], names)
    raise PromotionError(f"{stack['StackName']} does not declare endpoint {name} with an endpoint configuration of its "
                         "own: deploy the environment with this version first (./platform deploy ENV)")


def _physical_id(cloudformation: Any, stack: dict, logical_id: str) -> str:
    return cloudformation.describe_stack_resource(StackName=stack["StackName"], LogicalResourceId=logical_id)[
        "StackResourceDetail"]["PhysicalResourceId"]


def check_rollback_alarms(cloudwatch: Any, declared: DeclaredEndpoint, refusal: str, env: EnvironmentConfig) -> None:
    """A rollout while a rollback alarm is in ALARM is rolled back at its first check: refuse it before anything
    changes. An alarm that is missing would stop nothing: refuse that too. INSUFFICIENT_DATA (an idle endpoint) is no
    reason to wait."""
    if not declared.rollback_alarms:
        raise PromotionError(f"{refusal}: the deployed endpoint declares no rollback alarms, so nothing would stop a bad "
                             f"rollout: deploy {env.name} with this version first (./platform deploy {env.name})")
    described = cloudwatch.describe_alarms(AlarmNames=list(declared.rollback_alarms))
    found = {a["AlarmName"]: a for a in [*described.get("MetricAlarms", []), *described.get("CompositeAlarms", [])]}
    for name in declared.rollback_alarms:
        if name not in found:
            raise PromotionError(f"{refusal}: its rollback alarm {name} does not exist, so nothing would stop a bad "
                                 f"rollout: deploy {env.name} (./platform deploy {env.name}), then promote")
        if found[name]["StateValue"] == "ALARM":
            since = found[name].get("StateUpdatedTimestamp")
            raise PromotionError(f"{refusal}: its rollback alarm {name} is in ALARM"
                                 + (f" (since {since:%Y-%m-%d %H:%M} UTC)" if isinstance(since, datetime) else "")
                                 + ", so the rollout would roll itself back: fix what it reports (aws cloudwatch "
                                 f"describe-alarms --alarm-names {name}) or wait until it is OK, then promote again")


def check_evidence(manifest: dict, candidate: dict, live_model: Optional[str], where: str, again: str) -> dict:
    """The evaluation scored this run's model (and the live one) on the platform's split, and says which object it
    scored; returns that object's identity (uri, etag, version_id, sha256)."""
    holdout = manifest.get("holdout") or {}
    artifact = (manifest.get("artifacts") or {}).get(evaluation.CANDIDATE) or {}
    problem = None
    if manifest.get("candidate_model_uri") != candidate["model_uri"]:
        problem = (f"scored the model {manifest.get('candidate_model_uri')}, not the run's {candidate['model_uri']}")
    elif manifest.get("live_model_uri") != live_model:
        problem = f"scored the live model {manifest.get('live_model_uri')}, not {live_model}"
    elif {k: holdout.get(k) for k in PLATFORM_HOLDOUT} != PLATFORM_HOLDOUT:
        problem = (f"used the held-out split salt {holdout.get('salt')!r}, fraction {holdout.get('fraction')!r}, not the "
                   f"platform's salt {PLATFORM_HOLDOUT['salt']!r}, fraction {PLATFORM_HOLDOUT['fraction']!r}")
    elif artifact.get("uri") != candidate["model_uri"] or not artifact.get("etag"):
        problem = "does not say which object of the candidate's model it scored (no ETag: an older evaluation job)"
    if problem:
        raise PromotionError(f"the evaluation at {where} {problem}: evaluate the run again ({again})")
    return artifact


def _split_uri(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key


def changed_artifact(s3: Any, artifact: dict) -> Optional[str]:
    """Why the object at the candidate's model URI is not the one that was scored, or None."""
    from botocore.exceptions import ClientError

    bucket, key = _split_uri(artifact["uri"])
    version = {"VersionId": artifact["version_id"]} if artifact.get("version_id") else {}
    try:
        head = s3.head_object(Bucket=bucket, Key=key, **version)
    except ClientError as error:
        return f"it cannot be read ({error.response.get('Error', {}).get('Code', error)})"
    if head["ETag"] != artifact["etag"]:
        return f"its ETag is {head['ETag']}, the evaluation scored {artifact['etag']}"
    return None


def copy_scored_model(s3: Any, artifact: dict, bucket: str, key: str) -> Optional[str]:
    """Copies exactly the scored object (its version, and only while its ETag is the scored one: S3 refuses the copy
    with 412 otherwise, https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html); why not, or None."""
    from botocore.exceptions import ClientError

    source_bucket, source_key = _split_uri(artifact["uri"])
    source = {"Bucket": source_bucket, "Key": source_key,
              **({"VersionId": artifact["version_id"]} if artifact.get("version_id") else {})}
    try:
        s3.copy(source, bucket, key, ExtraArgs={"CopySourceIfMatch": artifact["etag"]})
    except ClientError as error:
        return f"S3 refused to copy it ({error.response.get('Error', {}).get('Code', error)}): it changed"
    return None


def served_model(sagemaker: Any, cloudformation: Any, stack: dict, declared: DeclaredEndpoint) -> dict:
    """What the endpoint serves against what the stack declares: status, configurations and model data."""
    described = sagemaker.describe_endpoint(EndpointName=declared.name)
    config = described.get("EndpointConfigName", "")
    variants = sagemaker.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"] if config else []
    models = [sagemaker.describe_model(ModelName=v["ModelName"]).get("PrimaryContainer", {}).get("ModelDataUrl")
              for v in variants]
    # The endpoint configuration's physical id is its ARN (.../endpoint-config/NAME); SageMaker ARNs may lower-case
    # the name, so the two are compared without case.
    physical = _physical_id(cloudformation, stack, declared.config_logical_id)
    return {"status": described.get("EndpointStatus"), "config": config, "models": models,
            "declared_config": physical.rsplit("endpoint-config/", 1)[-1]}


def promote(env: EnvironmentConfig, endpoint: EndpointConfig, run_id: str, *, client: Any, cloudformation: Any,
            s3: Any, sagemaker: Any, cloudwatch: Any, caller: str, wait: bool = True,
            now: Callable[[], datetime] = lambda: datetime.now(timezone.utc), out: Callable[[str], None] = print) -> int:
    candidate = candidate_run(client, run_id)
    stack, parameter, live = serving_stack(cloudformation, env, endpoint)
    baseline = baseline_parameter(stack, env, endpoint)
    if live == run_id:
        out(f"{endpoint.name} in {env.name} already serves run {run_id}: nothing to do")
        return 0
    declared = declared_endpoint(cloudformation, stack, f"{env.project}-{env.name}-{endpoint.name}")
    check_rollback_alarms(cloudwatch, declared, f"refusing to promote run {run_id} to {endpoint.name} in {env.name}", env)
    live_record = live_run(client, live)
    check_splits(candidate, live_record, run_id)
    bucket = stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName")
    where = evaluation.evidence_uri(bucket, evaluation_queue(env, endpoint), run_id, live if live_record else None)
    try:
        candidate_outcomes, live_outcomes, manifest = evaluation.read_evidence(where, s3)
    except SystemExit:
        against = f"the live run {live}" if live_record else "the configured baseline"
        raise PromotionError(f"no evaluation of run {run_id} against {against} at {where}: run ./platform model "
                             f"evaluate {env.name} {endpoint.name} {run_id} and promote when it succeeds") from None
    if live_record is not None and live_outcomes is None:
        raise PromotionError(f"the evaluation at {where} has no outcomes of the live model: evaluate again")
    artifact = check_evidence(manifest, candidate, live_model_uri(bucket, endpoint, live) if live_record else None,
                              where, f"./platform model evaluate {env.name} {endpoint.name} {run_id}")
    changed = changed_artifact(s3, artifact)
    if changed:
        raise PromotionError(f"run {run_id}'s model {candidate['model_uri']} is not the object that was evaluated "
                             f"({changed}): evaluate it again (./platform model evaluate {env.name} {endpoint.name} "
                             f"{run_id}), then promote")
    # The held-out set's ledger: each judgement on it spends alpha / holdout_uses, a spent set is refused, and a
    # candidate must stay within max_chain_drop_points of the chain's first model (runtime.decisions.promotion.Ledger).
    settings = endpoint.promotion
    key = ledger_key(env, endpoint)
    ledger, etag = load_ledger(s3, bucket, key)
    stamp = now().isoformat(timespec="seconds")
    if ledger.is_fresh(candidate_outcomes.values):
        ledger.start(candidate_outcomes.values, stamp,
                     (live, live_outcomes) if live_record is not None and live_outcomes is not None else None)
    elif ledger.anchor() is None and live_record is not None and live_outcomes is not None:
        ledger.set_anchor(live, live_outcomes)
    if ledger.spent(settings.holdout_uses):
        raise PromotionError(
            f"refusing to promote run {run_id} to {endpoint.name} in {env.name}: its held-out set (ids sha256 "
            f"{str(ledger.state['ids_sha256'])[:12]}) has been judged {len(ledger.uses)} times, its budget "
            f"(promotion.holdout_uses = {settings.holdout_uses}, each at alpha / {settings.holdout_uses}): judge on "
            f"fresh held-out examples no model trained on, then ./platform model ledger {env.name} {endpoint.name} "
            "--refresh")
    level = ledger.level(settings.alpha, settings.holdout_uses)
    judgement = judge_evidence(env, endpoint, candidate_outcomes, live_outcomes,
                               baseline[1] if baseline is not None and live_record is None else "", alpha=level)
    promoted = judgement.promote
    reason = judgement.reason
    chain = judge_chain(candidate_outcomes, ledger, live if live_record is not None else None,
                        max_chain_drop=(settings.max_chain_drop_points if settings.max_chain_drop_points is not None
                                        else settings.tolerance_points), alpha=level) if promoted else None
    if chain is not None and not chain.promote:
        promoted, reason = False, (f"{reason}; but against {ledger.anchor()[0]}, the model this chain of promotions "
                                   f"started from on these examples: {chain.reason}")
    if judgement.judged:  # a judgement that did not test (too few examples, other ids) spends nothing
        ledger.record({"run": run_id, "live": live, "at": stamp, "level": level, "promote": promoted,
                       "difference": judgement.difference, "bound": judgement.bound, "examples": judgement.examples,
                       "ids_sha256": candidate_outcomes.digest(),
                       "chain_bound": None if chain is None else chain.bound}, candidate_outcomes.values)
        save_ledger(s3, bucket, key, ledger, etag)
    # The judged score, corrected for the gate's own selection (the winner's curse: a candidate promoted because it
    # drew well would hold its healthy successor to a score it cannot keep), becomes the quality check's baseline.
    quality_score = judgement.selection_adjusted if judgement.selection_adjusted is not None else judgement.candidate
    if baseline is not None and promoted:
        # One the check refuses would stop every run of it.
        try:
            QualitySettings(problem_type=endpoint.quality.problem_type, baseline=quality_score,
                            baseline_examples=judgement.examples)
        except ValueError as error:
            promoted, reason = False, (f"the candidate's score {quality_score:g} cannot be the quality check's "
                                       f"baseline ({error})")
    at = now().isoformat(timespec="seconds")
    entry = {**judgement.to_json(), "promote": promoted, "reason": reason, "environment": env.name,
             "ledger": {"key": key, "use": len(ledger.uses), "of": settings.holdout_uses, "level": level,
                        "chain": None if chain is None else chain.to_json()},
             "endpoint": endpoint.name, "candidate_run": run_id, "live_version": live,
             "live_run": live if live_record else None, "evidence": where,
             "evidence_manifest": {k: manifest.get(k) for k in ("candidate", "live", "artifacts")}, "at": at,
             "by": caller,
             "outcome": "promoting" if promoted else "refused"}
    updates = {parameter: run_id}
    if baseline is not None and promoted:
        updates[baseline[0]] = baseline_value(round(quality_score, 6), judgement.examples)
        entry["quality_baseline"] = {"parameter": baseline[0], "from": baseline[1] or None, "to": updates[baseline[0]]}
    record_decision(client, run_id, env, endpoint, entry, at)
    if not promoted:  # the gate's verdict, not an error: exit 3 (main prints the line)
        raise DecidedAgainst(f"refusing to promote run {run_id} to {endpoint.name} in {env.name}: {reason}; "
                             f"live version {live}. Recorded in the run.")
    out(f"promoting run {run_id} to {endpoint.name} in {env.name}: {reason}")
    key = model_key(endpoint.model_data_key, run_id)
    refused = copy_scored_model(s3, artifact, bucket, key)
    if refused:
        record_decision(client, run_id, env, endpoint, {**entry, "outcome": "refused", "reason": refused},
                        now().isoformat(timespec="seconds"))
        raise PromotionError(f"run {run_id}'s model {candidate['model_uri']} is not the object that was evaluated "
                             f"({refused}): evaluate it again, then promote. Recorded in the run.")
    out(f"  model: {candidate['model_uri']} (ETag {artifact['etag']}) -> s3://{bucket}/{key}")
    update_parameters(cloudformation, stack, updates)
    out(f"  {stack['StackName']}: {parameter} {live} -> {run_id}; CloudFormation replaces the model and endpoint "
        "configuration, SageMaker shifts the traffic blue/green and rolls back if the latency or error alarm fires")
    if baseline is not None:
        configured = f"(configured {endpoint.quality.baseline:g})"
        out(f"  {baseline[0]} {baseline[1] or configured} -> {updates[baseline[0]]}: the quality check's baseline, "
            f"the candidate's score on the {judgement.examples} examples it was judged on")
    if not wait:
        out(f"  not waiting: follow it with ./platform model status {env.name} {endpoint.name}")
        return 0
    status = wait_for_update(cloudformation, stack)
    if status is not None:
        record_decision(client, run_id, env, endpoint, {**entry, "outcome": "rolled back", "stack_status": status,
                                                        "at": now().isoformat(timespec="seconds")},
                        now().isoformat(timespec="seconds"))
        raise PromotionError(f"the rollout of run {run_id} to {endpoint.name} did not complete ({stack['StackName']} "
                             f"is {status}): the endpoint keeps serving {live}. See the stack's events and the "
                             "endpoint's alarms. Recorded in the run.") from None
    # How CloudFormation reports a SageMaker auto-rollback is not documented (December 2026): the stack update may fail
    # and roll back (the waiter above raises), or complete while SageMaker serves the old configuration again. So the
    # update is not taken as the rollout: the endpoint must be InService on the configuration the stack declares, with
    # the promoted model. Otherwise it rolled back: recorded so, and the parameters are put back, so that the stack
    # declares the model that is served and the quality check judges it against its own baseline.
    served = served_model(sagemaker, cloudformation, stack, declared)
    promoted_uri = f"s3://{bucket}/{key}"
    if served["status"] != "InService":
        record_decision(client, run_id, env, endpoint, {**entry, "outcome": "unsettled", "served": served,
                                                        "at": now().isoformat(timespec="seconds")},
                        now().isoformat(timespec="seconds"))
        raise PromotionError(f"{stack['StackName']} updated, but {declared.name} is {served['status']}: follow it with "
                             f"./platform model status {env.name} {endpoint.name}. Recorded in the run.")
    if served["config"].lower() != served["declared_config"].lower() or served["models"] != [promoted_uri]:
        back = {parameter: live, **({baseline[0]: baseline[1]} if baseline is not None else {})}
        rolled_back = {**entry, "outcome": "rolled back", "served": served, "parameters_put_back": back}
        update_parameters(cloudformation, stack, back)
        # The put-back is another stack update (and endpoint update): recorded as under way before it is awaited (a
        # wait cut short leaves that much), then with how it ended, so that the command returns on a settled stack.
        # One decision: the second record replaces the first (the same tag, stamped when the rollback was found).
        found_at = now().isoformat(timespec="seconds")
        record_decision(client, run_id, env, endpoint, {**rolled_back, "put_back": "in progress", "at": found_at},
                        found_at)
        put_back = wait_for_update(cloudformation, stack)
        record_decision(client, run_id, env, endpoint, {**rolled_back, "put_back": put_back or "complete",
                                                        "at": found_at,
                                                        "put_back_at": now().isoformat(timespec="seconds")}, found_at)
        rolled = (f"the rollout of run {run_id} to {endpoint.name} rolled back: SageMaker serves {served['config']} "
                  f"({', '.join(str(m) for m in served['models'])}), not the declared {served['declared_config']} "
                  f"({promoted_uri})")
        if put_back is not None:
            raise PromotionError(f"{rolled}; putting the parameters back to {live} did not complete "
                                 f"({stack['StackName']} is {put_back}), so the stack may still declare run {run_id}: "
                                 f"see the stack's events, then once it is settled follow ./platform model status "
                                 f"{env.name} {endpoint.name} and put {parameter} (and the quality baseline) back to "
                                 "what is served. Recorded in the run.")
        raise PromotionError(f"{rolled}; the parameters are put back to {live} (the stack update completed) so that "
                             "the stack declares what is served. See the endpoint's rollback alarms. Recorded in the "
                             "run.")
    record_decision(client, run_id, env, endpoint, {**entry, "outcome": "rolled out",
                                                    "at": now().isoformat(timespec="seconds")},
                    now().isoformat(timespec="seconds"))
    out(f"  rolled out: {endpoint.name} serves run {run_id} ({served['config']})")
    return 0


def status(env: EnvironmentConfig, endpoint: EndpointConfig, *, client: Any, cloudformation: Any,
           sagemaker: Any) -> str:
    stack, parameter, live = serving_stack(cloudformation, env, endpoint)
    name = f"{env.project}-{env.name}-{endpoint.name}"
    served = served_model(sagemaker, cloudformation, stack, declared_endpoint(cloudformation, stack, name))
    declared_model = live_model_uri(stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName"), endpoint, live)
    record = live_run(client, live)
    baseline = baseline_parameter(stack, env, endpoint)
    value = record["metrics"].get(endpoint.promotion.metric) if record else None
    # After `promote --no-wait`, the one place that tells a rollout SageMaker took back (see promote) from one that took.
    drifted = served["status"] == "InService" and (served["config"].lower() != served["declared_config"].lower()
                                                   or served["models"] != [declared_model])
    return (f"{name}: {served['status']}; declared version {live} ({stack['StackName']} parameter "
            f"{parameter}, stack {stack['StackStatus']})"
            + (f"; ROLLED BACK: it serves {served['config']} ({', '.join(str(m) for m in served['models'])}), not the "
               f"declared {served['declared_config']} ({declared_model}): promote the run again, or put {parameter} "
               "(and the quality baseline) back to what is served" if drifted else f"; serves {served['config']}")
            + (f"; run {live}: {endpoint.promotion.metric} {value}" if record else "; not a recorded run")
            + ("" if baseline is None else f"; quality baseline {baseline[1]} (promoted)" if baseline[1] else
               f"; quality baseline {endpoint.quality.baseline:g} (configured: no promotion yet)"))


# --- judge (files) ------------------------------------------------------------------------------------------------

def read_outcomes_file(path: Path, flag: str) -> Outcomes:
    if not path.is_file():
        state = "is a directory" if path.is_dir() else "does not exist"
        raise PromotionError(f"{flag} {path} {state} (JSON Lines of per-example held-out outcomes: "
                             '{"id": ..., "correct": true} or {"id": ..., "error": 0.3})')
    try:
        return read_outcomes(read_text(path, flag, "per-example outcomes, JSON Lines").splitlines(),
                             source=str(path))
    except EvidenceError as error:
        raise PromotionError(str(error)) from None


def describe(judgement: Judgement) -> str:
    verdict = "PROMOTE" if judgement.promote else "NOT JUDGED" if not judgement.judged else "REFUSE"
    return f"{verdict}: {judgement.reason}"


def judge_files(args: Any, usage: Optional[Callable[[str], Any]] = None) -> Judgement:
    """``model judge``: every argument checked before the files are read; a bad one is ``usage``'s (the parser's
    error: one line, exit 2)."""
    def bad(message: str) -> None:
        if usage is not None:
            usage(message)
        raise PromotionError(message)

    if args.live is None and args.baseline is None:
        bad("judge against the live model's outcomes (LIVE) or a baseline (--baseline VALUE --baseline-n N)")
    if args.live is not None and (args.baseline is not None or args.baseline_n is not None):
        bad("LIVE and --baseline exclude each other: a paired judgement needs no baseline")
    if args.baseline is not None and not math.isfinite(args.baseline):
        bad(f"--baseline {args.baseline}: an accuracy share (0 to 1) or an MAE, a finite number")
    if args.baseline_n is not None and args.baseline_n < 1:
        bad(f"--baseline-n {args.baseline_n}: the number of examples the baseline was measured on, 1 or more")
    if not 0 <= args.tolerance < 100:
        bad(f"--tolerance {args.tolerance}: points of accuracy (or percent of the live MAE), from 0 to under 100")
    if not 0 < args.alpha < 0.5:
        bad(f"--alpha {args.alpha}: a one-sided error rate above 0 and under 0.5, e.g. 0.05")
    candidate = read_outcomes_file(args.candidate, "CANDIDATE")
    live = read_outcomes_file(args.live, "LIVE") if args.live is not None else None
    if live is not None and live.kind != candidate.kind:
        raise PromotionError(f"CANDIDATE holds {candidate.kind!r} outcomes and LIVE {live.kind!r}: score both "
                             "models the same way")
    try:
        return judge_outcomes(candidate, live, baseline=args.baseline, baseline_examples=args.baseline_n,
                              tolerance=args.tolerance, alpha=args.alpha)
    except EvidenceError as error:  # the files: an error
        raise PromotionError(str(error)) from None
    except ValueError as error:  # the settings against the outcomes: an accuracy baseline above 1, an MAE of 0
        bad(f"--baseline {args.baseline}: {error}".replace(f"baseline={args.baseline!r}: ", ""))
        raise


def verdict(judgement: Judgement) -> Optional[bool]:
    """For (promote), against (refuse) or None (not judged: too few examples, other ids)."""
    return True if judgement.promote else False if judgement.judged else None


def ledger(env: EnvironmentConfig, endpoint: EndpointConfig, *, s3: Any, bucket: str, refresh: bool = False,
           out: Callable[[str], None] = print) -> int:
    """The endpoint's held-out ledger: its set, the model its chain started from and every judgement; ``refresh``
    starts a new one (the operator vouches that the next evaluations use held-out examples no model trained on)."""
    key = ledger_key(env, endpoint)
    uses = endpoint.promotion.holdout_uses
    if refresh:  # whatever the ledger holds, readable or not
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except s3.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
            out(f"no ledger of {endpoint.name} in {env.name} yet: nothing to refresh")
            return 0
        s3.delete_object(Bucket=bucket, Key=key)
        out(f"refreshed: the next judgement starts a new ledger for this endpoint's held-out set ({uses} judgements)")
        return 0
    book, _ = load_ledger(s3, bucket, key)
    if not book.state["ids"]:
        out(f"no judgement of {endpoint.name} in {env.name} recorded yet")
        out(f"  (its ledger: {key} in the dataset bucket)")
        return 0
    state, used = book.state, len(book.uses)
    out(f"held-out set {str(state['ids_sha256'])[:12]} ({len(state['ids'])} examples, since "
        f"{str(state['started'])[:10]}): {used} of {uses} judgements used{': spent' if used >= uses else ''}")
    anchor = book.anchor()
    out(f"  chain started from: {anchor[0] if anchor else 'no live model scored yet'}")
    for use in book.uses:
        difference = "n/a" if use.get("difference") is None else f"{use['difference']:+.2f}"
        out(f"  {str(use['at'])[:16]}  {str(use['run'])[:32]:<32}  level {use['level']:.4g}  difference {difference}  "
            f"{'promoted' if use['promote'] else 'refused'}")
    return 0


@verdicts
@aws_errors_in_one_line
def main(argv: list[str]) -> int:
    parser = Parser("./platform model", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    judge_parser = commands.add_parser("judge", help="the gate on local outcome files (no AWS)",
                                       epilog="Try it on the samples: ./platform model judge "
                                              "examples/decisions/judge/candidate.jsonl "
                                              "examples/decisions/judge/live.jsonl")
    judge_parser.add_argument("candidate", type=Path, metavar="CANDIDATE")
    judge_parser.add_argument("live", type=Path, nargs="?", metavar="LIVE")
    judge_parser.add_argument("--baseline", type=float, metavar="VALUE", help="without LIVE: an accuracy share or MAE")
    judge_parser.add_argument("--baseline-n", type=int, metavar="N", help="the examples the baseline was measured on "
                                                                          "(without it: a fixed requirement)")
    judge_parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="POINTS",
                              help=f"accuracy points (or percent of the MAE) the candidate may be worse by "
                                   f"(default {DEFAULT_TOLERANCE:g})")
    judge_parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                              help=f"the largest chance of promoting a worse candidate (default {DEFAULT_ALPHA:g})")
    judge_parser.add_argument("--json", action="store_true")
    for name, text in (("evaluate", "score a run and the live model on the run's held-out examples (a queue job)"),
                       ("promote", "judge a run's evaluation against the live model and roll it out")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("env")
        sub.add_argument("endpoint")
        sub.add_argument("run_id")
        sub.add_argument("--no-wait", action="store_true", help="start it and return")
    ledger_parser = commands.add_parser("ledger", help="the held-out set's judgements (each at alpha / holdout_uses)")
    ledger_parser.add_argument("env")
    ledger_parser.add_argument("endpoint")
    ledger_parser.add_argument("--refresh", action="store_true",
                               help="start a new ledger: the next evaluations use fresh held-out examples")
    status_parser = commands.add_parser("status", help="the declared model version and the endpoint's state")
    status_parser.add_argument("env")
    status_parser.add_argument("endpoint")
    args = parser.parse_args(argv)
    if args.command == "judge":
        judgement = judge_files(args, judge_parser.error)
        print(json.dumps(judgement.to_json(), indent=1) if args.json else fit(describe(judgement)))
        return verdict_exit(verdict(judgement))
    env = environment(args.env)
    endpoint = versioned_endpoint(env, args.endpoint)
    if args.command in ("evaluate", "promote"):
        evaluation_queue(env, endpoint)  # a config without a queue to evaluate on fails before sign-in
    session = session_for(env)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(environment_tracking_uri(env, session))
    cloudformation = session.client("cloudformation")
    if args.command == "ledger":
        return ledger(env, endpoint, s3=session.client("s3"), refresh=args.refresh,
                      bucket=stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName"))
    if args.command == "status":
        print(fit(status(env, endpoint, client=client, cloudformation=cloudformation,
                         sagemaker=session.client("sagemaker"))))
        return 0
    if args.command == "evaluate":
        from botocore.config import Config

        # One attempt: a retried invocation could submit before the first one's job is listed (the function follows
        # an evaluation already waiting, but ListJobs may not show one seconds old); run it again instead.
        lambda_client = session.client("lambda", config=Config(retries={"total_max_attempts": 1}, read_timeout=90))
        evaluate(env, endpoint, args.run_id, client=client, cloudformation=cloudformation,
                 batch=session.client("batch"), lambda_client=lambda_client, wait=not args.no_wait)
        return 0
    caller = session.client("sts").get_caller_identity()["Arn"]
    return promote(env, endpoint, args.run_id, client=client, cloudformation=cloudformation, s3=session.client("s3"),
                   sagemaker=session.client("sagemaker"), cloudwatch=session.client("cloudwatch"), caller=caller,
                   wait=not args.no_wait)


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
