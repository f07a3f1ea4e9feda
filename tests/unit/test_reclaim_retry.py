"""A Spot reclaim of a queue job, end to end: the example job in a process of its own gets a real SIGTERM mid-run,
AWS Batch's decision on that attempt comes from the queue's rendered retry strategy matched as Batch matches it, and
the retried attempt resumes from the checkpoint and finishes.

Batch's matching (https://docs.aws.amazon.com/batch/latest/APIReference/API_EvaluateOnExit.html): an entry applies
when all of its conditions (onStatusReason, onReason, onExitCode) match; each is a pattern that matches the whole
value, or only its start when it ends with an asterisk, the only wildcard; onExitCode holds digits only, the reasons
letters, digits, periods, colons and white space; up to 512 characters. If no entry matches, the job is retried.
Entries are tried in order and the first that matches decides
(https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html), up to 5 of them.
"""

import os
import re
import sys

import pytest

from ops.local.run import run_attempt
from test_train_example import EXAMPLE, job_env, queue_retry_strategy, record  # noqa: F401 (fixture)

FIELDS = {"OnExitCode": ("exitCode", r"[0-9]*\*?"), "OnReason": ("reason", r"[A-Za-z0-9.: \t]*\*?"),
          "OnStatusReason": ("statusReason", r"[A-Za-z0-9.: \t]*\*?")}
ESSENTIAL_EXITED = "Essential container in task exited"


class InvalidPattern(ValueError):
    pass


def batch_matches(condition: str, pattern: str, value) -> bool:
    """One condition as Batch evaluates it; a pattern Batch would refuse raises InvalidPattern."""
    _, allowed = FIELDS[condition]
    if len(pattern) > 512 or not re.fullmatch(allowed, pattern):
        raise InvalidPattern(f"{condition}={pattern!r}")
    if value is None:  # the attempt has no such value (a reclaimed host leaves no exit code)
        return False
    value = str(value)
    return value.startswith(pattern[:-1]) if pattern.endswith("*") else value == pattern


def batch_decision(strategy: dict, attempt: dict) -> str:
    entries = strategy["EvaluateOnExit"]
    assert len(entries) <= 5
    for entry in entries:
        conditions = {k: v for k, v in entry.items() if k != "Action"}
        if all(batch_matches(k, v, attempt.get(FIELDS[k][0])) for k, v in conditions.items()):
            return entry["Action"].upper()
    return "RETRY"


def test_the_matcher_is_batchs_not_a_shell_glob():
    assert batch_matches("OnStatusReason", "Host EC2*", "Host EC2 (instance i-0abc) terminated.")
    assert not batch_matches("OnStatusReason", "Host EC2", "Host EC2 (instance i-0abc) terminated.")  # whole value
    assert not batch_matches("OnExitCode", "143", "1430") and batch_matches("OnExitCode", "14*", "143")
    assert batch_matches("OnReason", "*", "") and not batch_matches("OnReason", "*", None)
    for condition, pattern in (("OnExitCode", "1?3"), ("OnExitCode", "*3"), ("OnReason", "Cannot*Error"),
                               ("OnReason", "[Cc]annot*"), ("OnStatusReason", "Host-EC2*"), ("OnReason", "x" * 513)):
        with pytest.raises(InvalidPattern):
            batch_matches(condition, pattern, "anything")
    assert batch_decision({"EvaluateOnExit": [{"Action": "exit", "OnExitCode": "1"}]}, {"exitCode": 2}) == "RETRY"
    assert batch_decision({"EvaluateOnExit": [{"Action": "exit", "OnExitCode": "1*"},
                                              {"Action": "RETRY", "OnExitCode": "13*"}]}, {"exitCode": 137}) == "EXIT"


def test_every_rendered_pattern_is_one_batch_accepts(queue_retry_strategy):
    for entry in queue_retry_strategy["EvaluateOnExit"]:
        for condition, pattern in entry.items():
            if condition != "Action":
                batch_matches(condition, pattern, "")  # raises on a pattern Batch refuses


@pytest.mark.parametrize("attempt, decision", [
    ({"statusReason": "Host EC2 (instance i-0abc) terminated."}, "RETRY"),  # the reclaim took the host
    ({"exitCode": 143, "statusReason": ESSENTIAL_EXITED}, "RETRY"),  # the job checkpointed on SIGTERM
    ({"reason": "CannotPullContainerError: pull rate limit", "statusReason": "Task failed to start"}, "RETRY"),
    ({"reason": "CannotStartContainerError: Error response from daemon", "statusReason": "Task failed"}, "RETRY"),
    # The job's own failure: a container that exits by itself has an exit code and no reason, and the page promises
    # nothing about a pattern matched against a value the attempt lacks, so only an onExitCode entry can end it.
    ({"exitCode": 1, "statusReason": ESSENTIAL_EXITED}, "EXIT"),
    ({"exitCode": 137, "reason": "OutOfMemoryError: Container killed due to memory usage",
      "statusReason": ESSENTIAL_EXITED}, "EXIT"),
])
def test_the_queue_retries_what_a_reclaim_leaves_and_ends_what_the_job_did(queue_retry_strategy, attempt, decision):
    assert batch_decision(queue_retry_strategy, attempt) == decision


def test_a_real_sigterm_mid_run_is_retried_by_the_queue_and_the_next_attempt_finishes(tmp_path, queue_retry_strategy):
    env = {**os.environ, **job_env(tmp_path, samples=300)}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, str(EXAMPLE), "--epochs", "8"]
    code, lines = run_attempt(command, {**env, "AWS_BATCH_JOB_ATTEMPT": "1"}, sigterm_after_epoch=2)
    assert code == 143, lines  # 128 + SIGTERM: the process checkpointed and stopped itself
    decision = batch_decision(queue_retry_strategy, {"exitCode": code, "statusReason": ESSENTIAL_EXITED})
    assert decision == "RETRY"
    code, lines = run_attempt(command, {**env, "AWS_BATCH_JOB_ATTEMPT": "2"})
    assert code == 0, lines
    assert any(line.startswith("resuming from the checkpoint of epoch") for line in lines)
    assert [a["outcome"] for a in record(tmp_path)["passport"]["attempts"]] == ["stopped", "finished"]
