"""Submits a promotion gate's evaluation job with the command deployed for its endpoint (standard library and boto3):
the Lambda function of ``EvaluationSubmitter``, invoked by ``./platform model evaluate``.

Why a function: the evaluation job's role alone writes the gate's evidence, and AWS Batch's SubmitJob has no condition
key on ``containerOverrides`` (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html),
so whoever may submit the evaluation definition may run any command with that role and write any run's evidence. The
caller names the endpoint, the runs and their models; the command, the output place and the held-out split are this
function's, fixed at deploy:

1. ``endpoint`` must be one of ``COMMANDS`` (endpoint name -> command, JSON); the job runs that command;
2. the run ids are 1-64 letters, digits, ``-`` or ``_`` (an MLflow run id is 32 hex digits);
3. the candidate's model lies under ``CANDIDATE_PREFIX`` (``s3://BUCKET/checkpoints/<queue>/``: what the evaluation
   role reads) and the live model, when there is one, under ``LIVE_PREFIX`` (``s3://BUCKET/models/``);
4. the evidence goes to ``s3://BUCKET/evaluations/<queue>/<run>/<live run or none>/`` (``EVIDENCE_PREFIX``:
   ``ml_platform_job.evaluation.evidence_uri``), with the platform's held-out split (``HOLDOUT_SALT``,
   ``HOLDOUT_FRACTION``);
5. a job of the same name still waiting or running on the queue, of the deployed revision, with the command and the
   variables this request would submit, is that evaluation: it is returned, not submitted again (an evaluation asked
   for twice runs once, unless the second ask comes before ListJobs shows the first job); a job that only shares the
   name (another submitter's) is not followed;
6. ``expected_output``, when the caller gives it, must be the evidence path computed here (a caller and a deployed
   function that disagree on where promote reads the evidence refuse before anything is submitted).

Whatever else the request holds (a ``command``, an ``output``, a split) is ignored.

A refused request returns ``{"refused": "<why, and what to do>"}``; a submitted (or found) one ``{"job_id",
"job_name", "output", "command", "submitted"}``.

Environment: JOB_QUEUE, JOB_DEFINITION (ARNs: the queue's evaluation definition, its deployed revision), QUEUE_NAME,
COMMANDS, CANDIDATE_PREFIX, LIVE_PREFIX, EVIDENCE_PREFIX, HOLDOUT_SALT, HOLDOUT_FRACTION.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional

RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
NO_LIVE = "none"  # ml_platform_job.evaluation.NO_LIVE: the live version's place in the evidence path without one
QUEUE_TAG = "ml-platform:queue"
# Its jobs' tag (the budget guard ends them at a stop without recording them: it may not submit them again).
EVALUATION_TAG = ("ml-platform:job-definition", "evaluation")
# ml_platform_job.evaluation's contract: what the evaluation job reads
CANDIDATE_MODEL, LIVE_MODEL, OUTPUT = ("ML_PLATFORM_CANDIDATE_MODEL_URI", "ML_PLATFORM_LIVE_MODEL_URI",
                                       "ML_PLATFORM_EVALUATION_URI")
SALT, FRACTION = "ML_PLATFORM_HOLDOUT_SALT", "ML_PLATFORM_HOLDOUT_FRACTION"
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")


class Refused(ValueError):
    """A request this function does not submit: the message says why and what to do."""


def job_name(run_id: str, live_run_id: str) -> str:
    """The evaluation's job name (``./platform model evaluate`` used it before 0.14 too)."""
    return f"evaluate-{run_id[:24]}-{(live_run_id or 'baseline')[:24]}"


def _text(event: dict, key: str, required: bool = True) -> str:
    value = event.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise Refused(f"{key} is {type(value).__name__}, not text")
    if required and not value:
        raise Refused(f"{key} is missing")
    return value


def _model(event: dict, key: str, prefix: str, what: str, fix: str) -> str:
    uri = _text(event, key)
    if len(uri) > 1024 or _UNSAFE.search(uri) or not uri.startswith(prefix) or uri == prefix:
        raise Refused(f"{key} {uri[:200]!r} is not under {prefix} ({what}, which the evaluation reads): {fix}")
    return uri


def request(event: Any, environ: dict) -> dict:
    """The job this event asks for, or Refused."""
    if not isinstance(event, dict):
        raise Refused("the request is not a JSON object: invoke with {\"endpoint\", \"run_id\", \"candidate_model\", "
                      "\"live_run_id\", \"live_model\"}")
    commands = json.loads(environ["COMMANDS"])
    endpoint = _text(event, "endpoint")
    if endpoint not in commands:
        raise Refused(f"endpoint {endpoint!r} has no deployed evaluation command on queue {environ['QUEUE_NAME']} "
                      f"(deployed: {', '.join(sorted(commands)) or 'none'}): set its promotion.evaluate_command and "
                      "deploy")
    run_id, live = _text(event, "run_id"), _text(event, "live_run_id", required=False)
    for key, value in (("run_id", run_id), ("live_run_id", live)):
        if value and not RUN_ID.match(value):
            raise Refused(f"{key} {value[:80]!r} is not a run id (1-64 letters, digits, '-' or '_')")
    if live and live == run_id:
        raise Refused(f"run {run_id} is the live run: nothing to evaluate")
    candidate = _model(event, "candidate_model", environ["CANDIDATE_PREFIX"], "the queue's checkpoints",
                       f"evaluate it on the queue it trained on (promotion.queue), not {environ['QUEUE_NAME']}")
    live_model = ""
    if live:
        live_model = _model(event, "live_model", environ["LIVE_PREFIX"], "the live models",
                            "the live model is the endpoint's, under models/")
    elif _text(event, "live_model", required=False):
        raise Refused("live_model is given without live_run_id: name the live run, or leave both out (the configured "
                      "baseline)")
    output = f"{environ['EVIDENCE_PREFIX']}{run_id}/{live or NO_LIVE}/"
    expected = _text(event, "expected_output", required=False)
    if expected and expected != output:
        raise Refused(f"the deployed submitter writes the evidence to {output}, not {expected} (where this caller "
                      "reads it): deploy the environment and the operator's tools with the same version")
    return {"name": job_name(run_id, live), "command": list(commands[endpoint]), "output": output,
            "environment": {CANDIDATE_MODEL: candidate, LIVE_MODEL: live_model, OUTPUT: output,
                            SALT: environ["HOLDOUT_SALT"], FRACTION: environ["HOLDOUT_FRACTION"]}}


def _same(job: dict, definition: str, wanted: dict) -> bool:
    """Whether a described job is the evaluation ``wanted`` would submit: the deployed revision, the command, and each
    of its variables with the same value."""
    container = job.get("container") or {}
    variables = {v.get("name"): v.get("value") or "" for v in container.get("environment") or []}
    return (job.get("jobDefinition") == definition and container.get("command") == wanted["command"]
            and all(variables.get(k, "") == v for k, v in wanted["environment"].items()))  # (an empty value may go)


def _running(batch: Any, queue: str, definition: str, wanted: dict) -> Optional[str]:
    """The id of the job ``wanted`` describes, still waiting or running on the queue (found by name, then checked)."""
    named = []
    for status in ACTIVE:
        token = None
        while True:
            page = batch.list_jobs(jobQueue=queue, jobStatus=status, **({"nextToken": token} if token else {}))
            named += [job["jobId"] for job in page.get("jobSummaryList", []) if job.get("jobName") == wanted["name"]]
            token = page.get("nextToken")
            if not token:
                break
    for start in range(0, len(named), 100):  # DescribeJobs takes up to 100 ids
        for job in batch.describe_jobs(jobs=named[start:start + 100]).get("jobs", []):
            if job.get("status") in ACTIVE and _same(job, definition, wanted):
                return job["jobId"]
    return None


def handler(event: Any, context: object, batch: Any = None, environ: Optional[dict] = None) -> dict:
    environ = dict(os.environ) if environ is None else environ
    try:
        job = request(event, environ)
    except Refused as refused:
        print(f"refused: {refused}")
        return {"refused": str(refused)}
    if batch is None:
        import boto3

        batch = boto3.client("batch")
    answer = {"job_name": job["name"], "output": job["output"], "command": job["command"]}
    found = _running(batch, environ["JOB_QUEUE"], environ["JOB_DEFINITION"], job)
    if found:
        print(f"{job['name']}: already waiting or running as {found}; not submitted again")
        return {**answer, "job_id": found, "submitted": False}
    submitted = batch.submit_job(
        jobName=job["name"], jobQueue=environ["JOB_QUEUE"], jobDefinition=environ["JOB_DEFINITION"],
        containerOverrides={"command": job["command"], "environment": [
            {"name": k, "value": v} for k, v in sorted(job["environment"].items())]},
        tags={QUEUE_TAG: environ["QUEUE_NAME"], EVALUATION_TAG[0]: EVALUATION_TAG[1]}, propagateTags=True)
    print(f"{job['name']}: submitted {submitted['jobId']} (evidence to {job['output']})")
    return {**answer, "job_id": submitted["jobId"], "submitted": True}
