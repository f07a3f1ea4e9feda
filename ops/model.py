"""The promotion gate: a model version reaches an endpoint only when its run's held-out score is no worse than the
live model's, and then through a blue/green rollout that takes itself back on the endpoint's alarms.

  ./platform model promote ENV ENDPOINT RUN_ID [--no-wait]
  ./platform model status ENV ENDPOINT

`promote`, in ENV's account (credentials checked first, as every operator command):

1. reads the candidate run from the environment's MLflow (finished, with a model and the endpoint's promotion
   metric, ``holdout_accuracy`` unless config says otherwise) and the live version: the Serving stack's model
   version parameter;
2. refuses, saying both numbers, when the candidate's score is worse than the live run's by more than the
   endpoint's tolerance (config ``promotion``, default 0); records the decision in the candidate run either way
   (tag ``ml_platform.promotion.<env>.<endpoint>.<time>``);
3. copies the run's model.tar.gz to the endpoint's model key for that version (``models/<name>/<run id>/...``);
4. updates the Serving stack with its deployed template and only that parameter changed (and, for an endpoint with a
   quality check, its quality baseline parameter set to the run's held-out score, which the check then judges
   production against): CloudFormation replaces
   the model and endpoint configuration and SageMaker shifts the traffic blue/green, rolling back if the latency or
   error alarm fires while it bakes; a failed rollout rolls the stack back to the live version. The parameter is
   what CloudFormation declares, so the next ``cdk deploy`` (which keeps a parameter's previous value) serves the
   promoted version too.

Calls: cloudformation:DescribeStacks and UpdateStack (with iam:PassRole for the stack's CloudFormation role),
s3:GetObject on the run's model and s3:PutObject under models/, the MLflow read and SetTag API.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from ml_platform_constructs.runtime.promotion import (baseline_value, judge, model_key, model_version_parameter,
                                                      quality_baseline_parameter)
from ml_platform_constructs.runtime.quality import Settings as QualitySettings
from ml_platform_constructs.runtime.tracking import PROMOTION_TAG_PREFIX

from ops.aws_access import environment, require_known, session_for
from ops.cli import Parser
from ops.dataset import stack_output
from ops.runs import RunsError, environment_tracking_uri, run_record
from stacks.config import EndpointConfig, EnvironmentConfig

CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]


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


def live_score(client: Any, version: str, metric: str) -> tuple[Optional[float], bool]:
    """(the live run's score, whether the live version is a recorded run)."""
    try:
        record = run_record(client, version)
    except RunsError:
        return None, False
    return record["metrics"].get(metric), True


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


def promote(env: EnvironmentConfig, endpoint: EndpointConfig, run_id: str, *, client: Any, cloudformation: Any,
            s3: Any, caller: str, wait: bool = True, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
            out: Callable[[str], None] = print) -> int:
    candidate = run_record(client, run_id)
    if candidate["status"] != "FINISHED":
        raise PromotionError(f"run {run_id} is {candidate['status']}: only a finished run can be promoted")
    model_uri = candidate.get("model_uri") or ""
    if not model_uri.startswith("s3://"):
        raise PromotionError(f"run {run_id} recorded no model in S3 (TrackedRun.record_model with the model.tar.gz "
                             "next to its checkpoints)")
    stack, parameter, live = serving_stack(cloudformation, env, endpoint)
    baseline = baseline_parameter(stack, env, endpoint)
    if live == run_id:
        out(f"{endpoint.name} in {env.name} already serves run {run_id}: nothing to do")
        return 0
    promotion = endpoint.promotion
    live_value, live_is_run = live_score(client, live, promotion.metric)
    decision = judge(promotion.metric, candidate["metrics"].get(promotion.metric), live_value,
                     tolerance=promotion.tolerance, higher_is_better=promotion.higher_is_better)
    if baseline is not None and decision.promote:
        # The promoted score becomes the quality check's baseline: one the check refuses would stop every run of it.
        try:
            QualitySettings(problem_type=endpoint.quality.problem_type, baseline=decision.candidate)
        except ValueError as error:
            decision = replace(decision, promote=False, reason=f"{promotion.metric} {decision.candidate:g} cannot be "
                                                               f"the quality check's baseline ({error})")
    at = now().isoformat(timespec="seconds")
    entry = {**decision.to_json(), "environment": env.name, "endpoint": endpoint.name, "candidate_run": run_id,
             "live_version": live, "live_run": live if live_is_run else None, "at": at, "by": caller,
             "outcome": "promoting" if decision.promote else "refused"}
    # The gate judged the quality check's own held-out metric (config checks it): the promoted score is its baseline.
    updates = {parameter: run_id}
    if baseline is not None and decision.promote:
        updates[baseline[0]] = baseline_value(decision.candidate)
        entry["quality_baseline"] = {"parameter": baseline[0], "from": baseline[1] or None, "to": updates[baseline[0]]}
    record_decision(client, run_id, env, endpoint, entry, at)
    if not decision.promote:
        raise PromotionError(f"refusing to promote run {run_id} to {endpoint.name} in {env.name}: {decision.reason}; "
                             f"live version {live}. Recorded in the run.")
    out(f"promoting run {run_id} to {endpoint.name} in {env.name}: {decision.reason}")
    source_bucket, _, source_key = model_uri[len("s3://"):].partition("/")
    bucket = stack_output(cloudformation, f"{env.name}-Data", "DatasetBucketName")
    key = model_key(endpoint.model_data_key, run_id)
    s3.copy({"Bucket": source_bucket, "Key": source_key}, bucket, key)
    out(f"  model: {model_uri} -> s3://{bucket}/{key}")
    update_parameters(cloudformation, stack, updates)
    out(f"  {stack['StackName']}: {parameter} {live} -> {run_id}; CloudFormation replaces the model and endpoint "
        "configuration, SageMaker shifts the traffic blue/green and rolls back if the latency or error alarm fires")
    if baseline is not None:
        out(f"  {baseline[0]} {baseline[1] or '(configured ' + format(endpoint.quality.baseline, 'g') + ')'} -> "
            f"{updates[baseline[0]]}: the quality check's baseline, {promotion.metric} of run {run_id}")
    if not wait:
        out(f"  not waiting: follow it with ./platform model status {env.name} {endpoint.name}")
        return 0
    from botocore.exceptions import WaiterError

    try:
        cloudformation.get_waiter("stack_update_complete").wait(
            StackName=stack["StackName"], WaiterConfig={"Delay": 30, "MaxAttempts": 480})
    except WaiterError:
        status = cloudformation.describe_stacks(StackName=stack["StackName"])["Stacks"][0]["StackStatus"]
        record_decision(client, run_id, env, endpoint, {**entry, "outcome": "rolled back", "stack_status": status,
                                                        "at": now().isoformat(timespec="seconds")},
                        now().isoformat(timespec="seconds"))
        raise PromotionError(f"the rollout of run {run_id} to {endpoint.name} did not complete ({stack['StackName']} "
                             f"is {status}): the endpoint keeps serving {live}. See the stack's events and the "
                             "endpoint's alarms. Recorded in the run.") from None
    record_decision(client, run_id, env, endpoint, {**entry, "outcome": "rolled out",
                                                    "at": now().isoformat(timespec="seconds")},
                    now().isoformat(timespec="seconds"))
    out(f"  rolled out: {endpoint.name} serves run {run_id}")
    return 0


def status(env: EnvironmentConfig, endpoint: EndpointConfig, *, client: Any, cloudformation: Any,
           sagemaker: Any) -> str:
    stack, parameter, live = serving_stack(cloudformation, env, endpoint)
    name = f"{env.project}-{env.name}-{endpoint.name}"
    described = sagemaker.describe_endpoint(EndpointName=name)
    value, is_run = live_score(client, live, endpoint.promotion.metric)
    baseline = baseline_parameter(stack, env, endpoint)
    return (f"{name}: {described['EndpointStatus']}; declared version {live} ({stack['StackName']} parameter "
            f"{parameter}, stack {stack['StackStatus']})"
            + (f"; run {live}: {endpoint.promotion.metric} {value}" if is_run else "; not a recorded run")
            + ("" if baseline is None else f"; quality baseline {baseline[1]} (promoted)" if baseline[1] else
               f"; quality baseline {endpoint.quality.baseline:g} (configured: no promotion yet)"))


def main(argv: list[str]) -> int:
    parser = Parser("./platform model", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    promote_parser = commands.add_parser("promote", help="judge a run against the live model and roll it out")
    promote_parser.add_argument("env")
    promote_parser.add_argument("endpoint")
    promote_parser.add_argument("run_id")
    promote_parser.add_argument("--no-wait", action="store_true", help="start the rollout and return")
    status_parser = commands.add_parser("status", help="the declared model version and the endpoint's state")
    status_parser.add_argument("env")
    status_parser.add_argument("endpoint")
    args = parser.parse_args(argv)
    env = environment(args.env)
    endpoint = versioned_endpoint(env, args.endpoint)
    session = session_for(env)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(environment_tracking_uri(env, session))
    cloudformation = session.client("cloudformation")
    if args.command == "status":
        print(status(env, endpoint, client=client, cloudformation=cloudformation, sagemaker=session.client("sagemaker")))
        return 0
    caller = session.client("sts").get_caller_identity()["Arn"]
    return promote(env, endpoint, args.run_id, client=client, cloudformation=cloudformation, s3=session.client("s3"),
                   caller=caller, wait=not args.no_wait)


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
