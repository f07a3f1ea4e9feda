"""Issue 41's review leftovers on the run record: nested parameters are judged by name at every depth (not by value
only), and an attempt starts where AWS Batch started it (DescribeJobs), whatever the job did before
``TrackedRun.start``, falling back to the process's clock where Batch's record is unreadable."""

import json
import sys
import time
import types
from datetime import datetime, timezone

import pytest

from ml_platform_job import passport, tracking
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from tests.unit.test_tracking import Clock, UnreadableBatch, queue_env, T0

PRICES = load_prices("us-east-1")
R = passport.REDACTED
MINUTE = 60.0


def iso(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def saved(tmp_path):
    return json.loads((tmp_path / "ckpt" / "passport.json").read_text())


# --- 1: nested parameters -----------------------------------------------------------------------------------------

def test_nested_secret_names_are_redacted_at_every_depth_and_the_structure_and_other_values_are_kept():
    params = {"db": {"password": "x", "host": "db.internal", "port": 5432},
              "auth": {"api_key": "y", "use_auth": True},
              "list": [{"token": "0123456789abcdef0123"}, {"hf_token": "abc"}, {"lr": 0.1}],
              "deep": {"a": {"b": [{"access_token": "t", "steps": 3}]}},
              "credentials": {"user": "admin", "pass": "p"},  # a name that says secret: the whole mapping
              "stop_tokens": ("</s>", "<|eot_id|>"),
              "lr": 0.1}
    assert passport.redact_params(params) == {
        "db": {"password": R, "host": "db.internal", "port": 5432},
        "auth": {"api_key": R, "use_auth": True},
        "list": [{"token": R}, {"hf_token": R}, {"lr": 0.1}],
        "deep": {"a": {"b": [{"access_token": R, "steps": 3}]}},
        "credentials": R,
        "stop_tokens": ("</s>", "<|eot_id|>"),
        "lr": 0.1}


def test_nested_hyperparameters_with_secret_sounding_substrings_are_kept_as_they_are():
    generation = {"max_new_tokens": 256, "tokenizer": "meta-llama/Llama-3.1-8B", "pad_token_id": 128001,
                  "num_key_value_heads": 8, "key_dim": 128, "session_length": 4096, "use_auth": True,
                  "pad_token": "<pad>", "eos_token": "</s>", "token": "short"}
    params = {"model": {"generation": generation, "layers": [generation]}}
    assert passport.redact_params(params) == params


def test_a_secret_value_in_a_mapping_redacts_that_value_alone_and_in_a_list_the_whole_list():
    """A mapping's other keys are kept; a list's items may be parts of one secret (a key's lines): all go."""
    params = {"data": {"uri": "postgres://admin:s3cret@db.internal:5432/runs", "batch_size": 32},
              "hub": ["gpt2", "hf_abcdefghijklmnopqrstuvwxyz012345"]}
    assert passport.redact_params(params) == {"data": {"uri": R, "batch_size": 32}, "hub": R}


def test_a_private_key_given_as_its_lines_is_redacted_whole_and_any_sequence_is_judged_by_its_items():
    """A review of the nested rules: a key as a list of lines (0.12 redacted it whole; item by item kept its body), a
    sequence that is not a list (a Hydra ListConfig, here a UserList) recursed into like a list."""
    from collections import UserList

    lines = ["-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAx3", "-----END RSA PRIVATE KEY-----"]
    assert passport.redact_params({"signing": lines, "ssh": tuple(lines)}) == {"signing": "<redacted>",
                                                                              "ssh": "<redacted>"}
    assert passport.redact_params({"hosts": UserList([{"password": "pw"}, {"port": 5432}])}) == {
        "hosts": [{"password": "<redacted>"}, {"port": 5432}]}


@pytest.mark.parametrize("params, redacted", [
    ({"secrets": {"wandb": "x" * 8}}, {"secrets": "<redacted>"}),
    ({"passwords": ["a", "b"]}, {"passwords": "<redacted>"}),
    ({"api_keys": ["k1"]}, {"api_keys": "<redacted>"}),
    ({"apiKey": "k"}, {"apiKey": "<redacted>"}),
    ({"api-key": "k"}, {"api-key": "<redacted>"}),
    ({"SecretAccessKey": "k"}, {"SecretAccessKey": "<redacted>"}),
    ({"headers": {"Authorization": "Bearer abc"}}, {"headers": {"Authorization": "<redacted>"}}),
    ({"db": {"pwd": "p"}}, {"db": {"pwd": "<redacted>"}}),
    ({"env": [{"name": "DB_PASSWORD", "value": "p"}, {"name": "LR", "value": "0.1"}]},
     {"env": [{"name": "DB_PASSWORD", "value": "<redacted>"}, {"name": "LR", "value": "0.1"}]}),
])
def test_secret_names_in_any_case_plural_or_as_a_name_value_pair_are_redacted(params, redacted):
    assert passport.redact_params(params) == redacted


def test_hyperparameters_named_near_a_secret_are_kept():
    kept = {"tokenizer_name": "bert", "num_tokens": 10, "token_budget": 100, "max_tokens": 5, "auth_mode": "none",
            "secret_sauce_ratio": 0.5, "password_len": 12, "optimizer": {"betas": [0.9, 0.99]},
            "maxNewTokens": 64, "pad_token": "<pad>", "padTokenId": 0}
    assert passport.redact_params(kept) == kept


def test_a_runs_passport_and_flags_record_nested_parameters_redacted_by_name(tmp_path):
    run = tracking.TrackedRun.start(params={"lr": 0.1, "db": {"password": "hunter2", "host": "h"}}, seed=1,
                                    flags={"hub": {"api_key": "k", "log_every": 10}}, env=queue_env(tmp_path),
                                    clock=Clock(), prices=PRICES, batch=UnreadableBatch(),
                                    code_directory=str(tmp_path))
    run.finish()
    text = (tmp_path / "ckpt" / "passport.json").read_text()
    assert "hunter2" not in text
    record = json.loads(text)
    assert record["passport"]["params"] == {"lr": 0.1, "db": {"password": R, "host": "h"}}
    assert record["passport"]["flags"] == {"hub": {"api_key": R, "log_every": 10}}


# --- 2: an attempt starts where AWS Batch started it -----------------------------------------------------------------

class Batch:
    """DescribeJobs of the job: its startedAt (the running attempt's) and its ended attempts (epoch seconds)."""

    def __init__(self, started=None, *attempts):
        self.started, self.attempts, self.calls = started, attempts, 0

    def describe_jobs(self, jobs):
        self.calls += 1
        assert jobs == ["4f1c-job"]
        job = {"jobId": "4f1c-job", "status": "RUNNING",
               "attempts": [{"startedAt": int(a * 1000), "stoppedAt": int(b * 1000)} for a, b in self.attempts]}
        if self.started is not None:
            job["startedAt"] = int(self.started * 1000)
        return {"jobs": [job]}


def slow_fingerprint(monkeypatch, clock, seconds):
    """The dataset's fingerprint takes ``seconds`` of the injected clock."""
    real = passport.dataset_fingerprint

    def fingerprint(dataset, s3=None):
        clock.now += seconds
        return real(dataset, s3)

    monkeypatch.setattr(passport, "dataset_fingerprint", fingerprint)


def dataset(tmp_path):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "part-0.csv").write_text("x,y\n1,0\n")
    return passport.DatasetRef("blobs", "v1", str(data))


def begin(tmp_path, clock, env=None, batch=None, **kwargs):
    return tracking.TrackedRun.start(params={"lr": 0.1}, seed=1, env=env or queue_env(tmp_path), clock=clock,
                                     prices=PRICES, batch=batch if batch is not None else UnreadableBatch(),
                                     code_directory=str(tmp_path), **kwargs)


def test_the_attempt_starts_at_batchs_startedat_not_at_the_processs_clock_after_a_five_minute_fingerprint(
        tmp_path, monkeypatch):
    clock = Clock(T0 + 2 * MINUTE)  # the process reached TrackedRun.start 2 minutes after Batch started the job
    slow_fingerprint(monkeypatch, clock, 5 * MINUTE)
    run = begin(tmp_path, clock, batch=Batch(T0), dataset=dataset(tmp_path))
    assert run.attempt["started_at"] == iso(T0) == saved(tmp_path)["passport"]["attempts"][0]["started_at"]
    clock.now = T0 + 60 * MINUTE
    record = run.finish()
    assert record["cost_usd"] == pytest.approx(tracking.attempts_cost(record["passport"]["attempts"], PRICES)[0])
    assert record["passport"]["attempts"][0]["ended_at"] == iso(T0 + 60 * MINUTE)


def test_a_retry_starts_at_batchs_start_of_it_and_its_lost_predecessor_ends_at_batchs_stop_with_one_call(tmp_path):
    clock = Clock()
    begin(tmp_path, clock, batch=Batch(T0)).checkpointed()  # lost without a word 45 minutes later
    clock.now = T0 + 60 * MINUTE
    batch = Batch(T0 + 50 * MINUTE, (T0, T0 + 45 * MINUTE))
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"), batch=batch)
    first, current = second.record["passport"]["attempts"]
    assert (first["outcome"], first["ended_at"], first["end_known"]) == ("lost", iso(T0 + 45 * MINUTE), True)
    assert current["started_at"] == iso(T0 + 50 * MINUTE)
    assert batch.calls == 1  # one DescribeJobs for both times


def test_batchs_listed_attempt_is_that_attempts_start():
    run = tracking.TrackedRun({}, None, None, batch=Batch(T0 + 90 * MINUTE, (T0, T0 + 45 * MINUTE),
                                                          (T0 + 50 * MINUTE, T0 + 80 * MINUTE)))
    env = {"AWS_BATCH_JOB_ID": "4f1c-job#0"}
    assert run._batch_started_at({**env, "AWS_BATCH_JOB_ATTEMPT": "2"}) == T0 + 50 * MINUTE
    assert run._batch_started_at({**env, "AWS_BATCH_JOB_ATTEMPT": "3"}) == T0 + 90 * MINUTE
    assert run._batch_started_at(env) == T0 + 90 * MINUTE  # no attempt number: the running one


class Broken:
    """Answers of other shapes than DescribeJobs'."""

    def __init__(self, answer):
        self.answer = answer

    def describe_jobs(self, jobs):
        return self.answer


@pytest.mark.parametrize("batch", [
    UnreadableBatch(),                                                        # no batch:DescribeJobs
    Broken({"jobs": []}),                                                     # no such job
    Broken({"jobs": [{"jobId": "4f1c-job", "startedAt": "soon"}]}),           # not milliseconds
    Broken({"jobs": [{"jobId": "4f1c-job", "startedAt": None, "attempts": [None]}]}),
    Broken({}),
    Batch(T0 + 10 * MINUTE),                                                  # after the process's clock: not taken
], ids=["refused", "no-job", "not-a-number", "garbage", "empty", "later-than-the-process"])
def test_where_batchs_start_is_unreadable_or_unlikely_the_attempt_starts_at_the_processs_clock(tmp_path, batch):
    clock = Clock()
    run = begin(tmp_path, clock, batch=batch)
    assert run.attempt["started_at"] == iso(T0) and run.attempt["outcome"] == "running"


def test_a_stale_startedat_of_a_previous_attempt_is_not_the_retrys_start(tmp_path):
    clock = Clock()
    begin(tmp_path, clock).stop()
    clock.now = T0 + 60 * MINUTE
    # Batch's startedAt still the first attempt's (before that attempt's stop): the process's clock stands.
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"), batch=Batch(T0, (T0, T0 + 1)))
    assert second.attempt["started_at"] == iso(T0 + 60 * MINUTE)


def test_off_batch_nothing_is_asked(tmp_path, monkeypatch):
    env = {k: v for k, v in queue_env(tmp_path).items() if not k.startswith("AWS_BATCH_")}
    monkeypatch.setitem(sys.modules, "boto3", types.SimpleNamespace(client=lambda *a, **k: pytest.fail("asked")))
    run = tracking.TrackedRun.start(params={"lr": 0.1}, seed=1, env=env, clock=Clock(), prices=PRICES,
                                    code_directory=str(tmp_path))
    assert run.attempt["started_at"] == iso(T0)


def test_on_batch_a_client_that_cannot_be_made_or_called_never_fails_the_job(tmp_path, monkeypatch):
    def no_client(*args, **kwargs):
        raise RuntimeError("NoRegionError: You must specify a region")

    monkeypatch.setitem(sys.modules, "boto3", types.SimpleNamespace(client=no_client))
    run = tracking.TrackedRun.start(params={"lr": 0.1}, seed=1, env=queue_env(tmp_path), clock=Clock(),
                                    prices=PRICES, code_directory=str(tmp_path))
    assert run.attempt["started_at"] == iso(T0)


def test_on_the_real_clock_batchs_start_comes_before_the_processs_own(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "_PROCESS_START_USED", False)
    monkeypatch.setattr(tracking.hosts, "process_started_at", lambda: time.time() - 60)
    started = time.time() - 10 * MINUTE
    run = tracking.TrackedRun.start(params={"lr": 0.1}, seed=1, env=queue_env(tmp_path), prices=PRICES,
                                    batch=Batch(started), code_directory=str(tmp_path))
    assert run.attempt["started_at"] == iso(int(started * 1000) / 1000)
    run.finish()
