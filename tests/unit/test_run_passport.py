"""Issue 27, runs you can reproduce: each defect the issue reproduced with the library's own functions, and the
passport that fixes it (parameters kept, one run per configuration, per-attempt environments, the package list,
seeds, content fingerprints, git state, cost across lost attempts and nodes, cost per point against the live model,
the held-out split's key and groups, ``runs show``)."""

import json
import os
import random
import subprocess
import sys
import types
from datetime import datetime, timezone

import pytest

from ml_platform_job import holdout, passport, tracking
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ops import runs as runs_ops
from tests.unit.test_tracking import Clock, UnreadableBatch, queue_env, T0

PRICES = load_prices("us-east-1")
SPOT_G5 = PRICES["on_demand_hourly"]["g5.xlarge"] * (1 - PRICES["spot_discount"]["g5"])
R = passport.REDACTED


def begin(tmp_path, clock=None, env=None, *, params=None, seed=1234, batch=None, **kwargs):
    kwargs.setdefault("code_directory", str(tmp_path))  # no checkout: a commit elsewhere cannot change the run
    return tracking.TrackedRun.start(params={"lr": 0.1, "epochs": 20} if params is None else params, seed=seed,
                                     env=env or queue_env(tmp_path), clock=clock or Clock(), prices=PRICES,
                                     batch=batch or UnreadableBatch(), **kwargs)


def saved(tmp_path):
    return json.loads((tmp_path / "ckpt" / "passport.json").read_text())


def shown(record, **extra):
    """What ``runs show`` prints for a record, as run_record assembles it."""
    return runs_ops.format_record({**{k: record.get(k) for k in runs_ops.SUMMARY_KEYS}, "run_id": record["run_id"],
                                   "run_name": record["run_name"], "experiment": record["experiment"],
                                   "status": record["status"], "passport": record["passport"],
                                   "metrics": record["metrics"], "promotions": [], "against_live": None, **extra})


# --- 1: hyperparameters are kept; secrets are judged by value and by explicit names ----------------------------

LLM_PARAMS = {"lr": 3e-4, "max_new_tokens": 256, "tokenizer": "meta-llama/Llama-3.1-8B", "pad_token_id": 128001,
              "num_key_value_heads": 8, "key_dim": 128, "session_length": 4096, "authors_weighting": 0.3,
              "max_tokens_per_batch": 65536, "use_auth": True, "private_eval": False}


def test_the_eleven_hyperparameters_the_old_name_filter_dropped_all_reach_the_passport_and_mlflow(tmp_path, monkeypatch):
    logged = {}

    class Sink:
        tracking_uri = "https://mlflow.example"

        def create(self, name, tags):
            return "mlflow-run-1"

        def log(self, run_id, params=None, **kwargs):
            logged.update(params or {})

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    monkeypatch.setattr(tracking, "mlflow_sink", lambda uri, experiment: Sink())
    begin(tmp_path, params=LLM_PARAMS, tracking_uri=Sink.tracking_uri)
    assert saved(tmp_path)["passport"]["params"] == LLM_PARAMS
    assert logged == {**LLM_PARAMS, "seed": 1234}


def test_secrets_are_redacted_by_value_and_by_explicit_names_and_kept_by_name():
    params = {"hf_token": "hf_abcdefghijklmnopqrstuvwxyz012345", "api_key": "short", "db_password": "hunter2",
              "secret": None, "wandb_token": "0123456789abcdef0123456789abcdef01234567",
              "notes": "postgres://admin:s3cret@db.internal:5432/runs", "pad_token": "<pad>", "eos_token": "</s>",
              "bos_token": "<|begin_of_text|>", "lr": 0.1}
    assert passport.redact_params(params) == {
        "hf_token": R, "api_key": R, "db_password": R, "secret": R, "wandb_token": R, "notes": R,
        "pad_token": "<pad>", "eos_token": "</s>", "bos_token": "<|begin_of_text|>", "lr": 0.1}


def test_the_old_filter_name_warns_and_keeps_every_parameter():
    with pytest.warns(DeprecationWarning, match=r"passport.filter_params is redact_params now .* removed in 1.0.0"):
        assert passport.filter_params({"max_new_tokens": 256, "api_key": "x"}) == {"max_new_tokens": 256, "api_key": R}


def test_the_command_line_is_recorded_with_its_secret_values_redacted(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz012345", "--lr", "0.1",
                                      "--api-key=abc", "--use-auth", "--pad-token", "<pad>"])
    begin(tmp_path)
    assert saved(tmp_path)["passport"]["command"] == ["train.py", "--hf-token", R, "--lr", "0.1", f"--api-key={R}",
                                                      "--use-auth", "--pad-token", "<pad>"]


# --- 2: one run per configuration ---------------------------------------------------------------------------------

def test_a_resubmission_with_a_new_configuration_under_the_same_name_stops_with_one_line_naming_the_change(tmp_path):
    clock = Clock()
    first = begin(tmp_path, clock)
    first.stop()
    with pytest.raises(SystemExit) as raised:
        begin(tmp_path, clock, params={"lr": 0.2, "epochs": 20}, seed=7)
    assert str(raised.value) == (
        f"error: run {first.run_id} (resnet-run-1) was started with another configuration: params.lr 0.1 -> 0.2; "
        "seed 1234 -> 7. A changed configuration is a new run, with checkpoints of its own: submit it under a new "
        "job name (e.g. --name resnet-run-1-2; on a fleet, a new ML_PLATFORM_CHECKPOINT_URI), or restore the "
        f"configuration to continue run {first.run_id}")
    assert len(saved(tmp_path)["passport"]["attempts"]) == 1  # the refused attempt records nothing


def test_images_are_compared_by_digest_only_so_a_retry_without_one_continues(tmp_path):
    """The ECS metadata endpoint may not answer on one attempt: a URI beside a digest is no change; two digests are."""
    image = {"ML_PLATFORM_IMAGE": "repo/train:1"}
    first = begin(tmp_path, env=queue_env(tmp_path, **image, ML_PLATFORM_IMAGE_DIGEST="sha256:" + "a" * 64))
    first.stop()
    second = begin(tmp_path, env=queue_env(tmp_path, attempt="2", **image))
    assert second.run_id == first.run_id
    second.stop()
    with pytest.raises(SystemExit, match=r"another configuration: image sha256:a+ -> sha256:b+\. "):
        begin(tmp_path, env=queue_env(tmp_path, attempt="3", **image, ML_PLATFORM_IMAGE_DIGEST="sha256:" + "b" * 64))


def test_a_finished_run_with_new_data_under_its_name_is_refused_not_exited_0_without_training(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.csv").write_text("id,label\ns1,0\ns2,1\n")
    dataset = passport.DatasetRef("blobs", "v1", str(data))
    begin(tmp_path, dataset=dataset).finish()
    (data / "data.csv").write_text("id,label\ns1,1\ns2,0\n")  # labels flipped, same size
    with pytest.raises(SystemExit, match=r"another configuration: dataset\.sha256 [0-9a-f]{64} -> [0-9a-f]{64}\. "):
        begin(tmp_path, dataset=dataset)


def test_a_spot_retry_with_the_same_configuration_continues_the_run_on_another_gpu(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(passport, "gpus", fake_gpus("NVIDIA A10G"))
    first = begin(tmp_path, clock)
    first.stop()
    monkeypatch.setattr(passport, "gpus", fake_gpus("NVIDIA L4"))
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2", ML_PLATFORM_INSTANCE_TYPE="g6.xlarge"))
    assert second.run_id == first.run_id and not second.finished
    # A part this attempt does not state is not compared (the old helper's callers pass only env).
    third = tracking.TrackedRun.start(env=queue_env(tmp_path, attempt="3"), clock=clock, prices=PRICES,
                                      batch=UnreadableBatch(), code_directory=str(tmp_path))
    assert third.run_id == first.run_id and len(third.record["passport"]["attempts"]) == 3
    identity = third.record["identity"]
    assert set(identity["parts"]) == {"params", "seed", "dataset", "code", "image", "holdout"}
    assert identity["sha256"] == passport.run_identity(third.record["passport"])["sha256"]


# --- 3: each attempt's environment --------------------------------------------------------------------------------

def fake_gpus(model, count=1):
    return lambda: {"model": model, "count": count, "memory_mib": 23028, "driver": "550.54.15", "cuda_driver": "12.4"}


def test_each_attempt_records_its_gpu_and_a_change_is_flagged_in_the_passport_and_runs_show(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(passport, "gpus", fake_gpus("NVIDIA A10G"))
    first = begin(tmp_path, clock)
    first.stop()
    monkeypatch.setattr(passport, "gpus", fake_gpus("NVIDIA L4"))
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2", ML_PLATFORM_INSTANCE_TYPE="g6.xlarge"))
    p = saved(tmp_path)["passport"]
    assert [a["environment"]["gpu"]["model"] for a in p["attempts"]] == ["NVIDIA A10G", "NVIDIA L4"]
    assert (p["instance_type"], p["gpu"]["model"]) == ("g6.xlarge", "NVIDIA L4")  # the latest attempt's, paired
    assert p["environment_changes"] == [{"attempt": 2, "changes": ["gpu.model NVIDIA A10G -> NVIDIA L4"]}]
    assert second._tags()["ml_platform.environment_changed"] == "True"
    text = shown(second.record)
    assert "    1. g5.xlarge spot " in text and "1 x NVIDIA A10G (23028 MiB), driver 550.54.15, CUDA - (driver " \
        "supports 12.4)" in text
    assert "       CHANGED from the attempt before: gpu.model NVIDIA A10G -> NVIDIA L4" in text


def test_attempts_on_the_same_environment_flag_nothing(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(passport, "gpus", fake_gpus("NVIDIA A10G"))
    begin(tmp_path, clock).stop()
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"))
    assert "environment_changes" not in second.record["passport"]
    assert [a["environment_changes"] for a in second.record["passport"]["attempts"]] == [[], []]
    assert "CHANGED" not in shown(second.record)


def test_the_gpu_reader_takes_the_cuda_version_the_driver_supports_from_nvidia_smis_header(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nif [ -n \"$1\" ]; then echo 'NVIDIA A10G, 23028, 550.54.15'; echo 'NVIDIA A10G, 23028, "
                   "550.54.15'; else echo '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |'; "
                   "fi\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    assert passport.gpus() == {"model": "NVIDIA A10G", "count": 2, "memory_mib": 23028, "driver": "550.54.15",
                               "cuda_driver": "12.4"}


# --- 4: the package list is always next to the passport -----------------------------------------------------------

def test_without_mlflow_the_package_list_is_written_next_to_the_passport(tmp_path):
    run = begin(tmp_path)
    listed = (tmp_path / "ckpt" / "packages.txt").read_text().splitlines()
    assert passport.packages_digest(listed) == run.record["passport"]["packages"]["sha256"]
    assert run.record["passport"]["packages"]["artifact"] == "packages.txt"


class ArtifactSink:
    """An MLflow sink that keeps the artifacts it is sent."""
    tracking_uri = "https://mlflow.example"

    def __init__(self):
        self.artifacts = {}

    def create(self, name, tags):
        return "mlflow-run-1"

    def artifact(self, run_id, name, text):
        self.artifacts[name] = text

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def test_an_attempt_with_other_packages_keeps_its_own_list_and_is_flagged(tmp_path, monkeypatch):
    clock = Clock()
    sink = ArtifactSink()
    monkeypatch.setattr(tracking, "mlflow_sink", lambda uri, experiment: sink)
    monkeypatch.setattr(passport, "installed_packages", lambda: ["boto3==1.35.0", "torch==2.5.1"])
    begin(tmp_path, clock, tracking_uri=sink.tracking_uri).stop()
    monkeypatch.setattr(passport, "installed_packages", lambda: ["boto3==1.35.0", "torch==2.6.0"])
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"), tracking_uri=sink.tracking_uri)
    assert sink.artifacts["packages.txt"] == "boto3==1.35.0\ntorch==2.5.1\n"
    assert sink.artifacts["packages-attempt-2.txt"] == "boto3==1.35.0\ntorch==2.6.0\n"
    attempt = second.record["passport"]["attempts"][1]
    assert attempt["environment"]["packages_artifact"] == "packages-attempt-2.txt"
    assert (tmp_path / "ckpt" / "packages-attempt-2.txt").read_text() == "boto3==1.35.0\ntorch==2.6.0\n"
    assert [c.split(" ")[0] for c in attempt["environment_changes"]] == ["packages_sha256"]
    assert (tmp_path / "ckpt" / "packages.txt").read_text() == "boto3==1.35.0\ntorch==2.5.1\n"  # the run's, kept


# --- 5: seeds -----------------------------------------------------------------------------------------------------

def fake_torch(calls):
    torch = types.ModuleType("torch")
    torch.manual_seed = lambda seed: calls.append(("manual_seed", seed))
    torch.use_deterministic_algorithms = lambda on: calls.append(("use_deterministic_algorithms", on))
    torch.initial_seed = lambda: 2 ** 40 + 5
    torch.cuda = types.SimpleNamespace(is_available=lambda: True,
                                       manual_seed_all=lambda seed: calls.append(("manual_seed_all", seed)))
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(benchmark=True, deterministic=False))

    class Generator:
        def manual_seed(self, seed):
            self.seed = seed
            return self
    torch.Generator = Generator
    return torch


def test_seed_everything_seeds_torch_and_cuda_sets_the_determinism_flags_and_records_them(tmp_path, monkeypatch):
    calls = []
    torch = fake_torch(calls)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "numpy", None)
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"})
    run = begin(tmp_path)
    seeds = run.seed_everything(1234, deterministic=True)
    assert calls == [("manual_seed", 1234), ("manual_seed_all", 1234), ("use_deterministic_algorithms", True)]
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic) == (False, True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert seeds.generator.seed == 1234 and seeds.worker_init_fn is tracking.seed_worker
    recorded = saved(tmp_path)["passport"]["seeds"]
    assert {k: recorded[k] for k in ("seed", "python", "numpy", "torch", "cuda", "deterministic", "cudnn_benchmark")} \
        == {"seed": 1234, "python": True, "numpy": False, "torch": True, "cuda": True, "deterministic": True,
            "cudnn_benchmark": False}
    assert saved(tmp_path)["passport"]["attempts"][0]["seeds"] == recorded
    assert "    seed 1234; seeds: 1234 set for python, torch, cuda; deterministic algorithms on, cuDNN benchmark off" \
        in shown(run.record)
    tracking.seed_worker(3)  # a DataLoader worker: Python's generator from torch's per-worker seed
    assert random.random() == random.Random((2 ** 40 + 5) % 2 ** 32).random()


def test_seed_everything_leaves_determinism_alone_unless_asked(tmp_path, monkeypatch):
    calls = []
    torch = fake_torch(calls)
    torch.backends.cudnn.deterministic = True  # the job's own setting
    monkeypatch.setitem(sys.modules, "torch", torch)
    begin(tmp_path).seed_everything()
    assert calls == [("manual_seed", 1234), ("manual_seed_all", 1234)]
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic) == (False, True)


def test_seed_everything_without_torch_seeds_python_and_refuses_another_seed_than_the_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "numpy", None)
    run = begin(tmp_path)
    seeds = run.seed_everything()
    assert random.random() == random.Random(1234).random()
    assert seeds.recorded["deterministic"] is False
    assert (seeds.generator, seeds.worker_init_fn, seeds.recorded["torch"]) == (None, None, False)
    with pytest.raises(ValueError, match=r"^seed=7: the run was started with seed=1234; a different seed is a "
                                         r"different run \(start it under a new job name\)$"):
        run.seed_everything(7)


# --- 6: dataset fingerprints from content -------------------------------------------------------------------------

def test_a_directory_datasets_fingerprint_changes_when_labels_flip_at_the_same_size(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.csv").write_text("id,label\ns1,0\ns2,1\n")
    before, listed = passport.dataset_fingerprint(passport.DatasetRef("blobs", "v1", str(data)))
    (data / "data.csv").write_text("id,label\ns1,1\ns2,0\n")
    after, _ = passport.dataset_fingerprint(passport.DatasetRef("blobs", "v1", str(data)))
    assert before["bytes"] == after["bytes"] and before["sha256"] != after["sha256"]
    assert before["method"] == "SHA-256 of every file"
    first = passport.hashlib.sha256(b"id,label\ns1,0\ns2,1\n").hexdigest()
    assert listed == f"{first}  data.csv\n"  # the list the fingerprint digests, kept next to the passport


def test_a_snapshot_is_fingerprinted_by_its_id_and_the_manifest_built_with_it_without_reading_the_data(tmp_path,
                                                                                                         monkeypatch):
    mounted = tmp_path / "data" / "blobs"
    mounted.mkdir(parents=True)
    (mounted / "data.csv").write_text("id,label\ns1,0\n")
    (mounted / passport.MANIFEST_NAME).write_text("0" * 64 + "  ./data.csv\n")

    def read_all_data(path):
        raise AssertionError(f"read {path}")
    monkeypatch.setattr(passport, "_file_sha256", read_all_data)
    one, listed = passport.dataset_fingerprint(passport.DatasetRef("blobs", "v1", str(mounted), "snap-0123"))
    other, _ = passport.dataset_fingerprint(passport.DatasetRef("blobs", "v1", str(mounted), "snap-4567"))
    assert one["method"] == "snapshot snap-0123 and its MANIFEST.sha256" and one["sha256"] != other["sha256"]
    assert listed == "snapshot snap-0123\n" + "0" * 64 + "  ./data.csv\n"


# --- 7: git state with untracked files, the diff as an artifact ---------------------------------------------------

def git(directory, *args):
    subprocess.run(["git", "-C", str(directory), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    git(code, "init", "-q")
    (code / "train.py").write_text("import model\n")
    git(code, "add", "train.py")
    git(code, "commit", "-q", "-m", "first")
    return code


def test_an_untracked_module_makes_the_code_dirty_and_is_in_the_diff_kept_next_to_the_passport(tmp_path, checkout):
    (checkout / "model.py").write_text("LAYERS = 12\n")
    run = begin(tmp_path, code_directory=str(checkout))
    commit = run.record["passport"]["git_commit"]
    assert (commit["dirty"], commit["changes"], commit["diff_artifact"]) == (True, ["?? model.py"], "code.diff")
    diff = (tmp_path / "ckpt" / "code.diff").read_text()
    assert "+LAYERS = 12" in diff and commit["diff_sha256"] == passport.hashlib.sha256(diff.encode()).hexdigest()


def test_an_untracked_file_that_may_hold_secrets_is_listed_never_copied_into_the_diff(tmp_path, checkout):
    (checkout / ".env").write_text("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    (checkout / "model.py").write_text("LAYERS = 12\n")
    state, diff = passport.git_commit({}, str(checkout))
    assert state["dirty"] and "+LAYERS = 12" in diff
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in diff and "may hold secrets): .env" in diff


def test_a_clean_checkout_is_clean_and_keeps_no_diff(tmp_path, checkout):
    state, diff = passport.git_commit({}, str(checkout))
    assert (state["dirty"], state["changes"], diff) == (False, [], None)


def test_a_commit_from_the_environment_takes_the_builds_dirty_state_or_the_checkouts(tmp_path, checkout):
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    elsewhere = str(tmp_path)  # no checkout of that commit here (an image's code)
    assert passport.git_commit({"ML_PLATFORM_GIT_COMMIT": head, "ML_PLATFORM_GIT_DIRTY": "true"}, elsewhere)[0]["dirty"] \
        is True
    assert passport.git_commit({"ML_PLATFORM_GIT_COMMIT": head}, elsewhere)[0]["dirty"] is None  # unknown, said
    (checkout / "model.py").write_text("LAYERS = 12\n")
    state, _ = passport.git_commit({"ML_PLATFORM_GIT_COMMIT": head}, str(checkout))
    assert (state["commit"], state["dirty"], state["source"]) == (head, True, "ML_PLATFORM_GIT_COMMIT")


def test_what_the_first_attempt_wrote_to_its_output_paths_does_not_refuse_the_retry(tmp_path, checkout):
    """A job that writes next to its script (its output_dir flag, a local checkpoint directory) leaves untracked
    files: they are not code, so the retry is the same run; an untracked module is still dirty."""
    clock = Clock()
    env = {**queue_env(tmp_path), "ML_PLATFORM_CHECKPOINT_URI": str(checkout / "ckpt") + "/"}
    flags = {"output_dir": str(checkout / "outputs")}
    first = begin(tmp_path, clock, env, code_directory=str(checkout), flags=flags)
    assert first.record["passport"]["git_commit"]["dirty"] is False  # its own record in ckpt/ is not code either
    (checkout / "outputs").mkdir()
    (checkout / "outputs" / "model.pt").write_bytes(b"weights")
    first.stop()
    second = begin(tmp_path, clock, {**env, "AWS_BATCH_JOB_ATTEMPT": "2"}, code_directory=str(checkout), flags=flags)
    assert second.run_id == first.run_id and second.record["passport"]["git_commit"]["dirty"] is False
    second.stop()
    (checkout / "helper.py").write_text("X = 1\n")
    state, _ = passport.git_commit({}, str(checkout), passport.output_paths(flags, env))
    assert state["dirty"] and state["changes"] == ["?? helper.py"]


def test_a_commit_elsewhere_in_the_repository_is_not_a_new_configuration_a_commit_to_the_code_is(tmp_path, checkout):
    job = checkout / "job"
    job.mkdir()
    (job / "train.py").write_text("EPOCHS = 3\n")
    git(checkout, "add", "job")
    git(checkout, "commit", "-q", "-m", "the job")
    clock = Clock()
    first = begin(tmp_path, clock, code_directory=str(job))
    first.stop()
    (checkout / "README").write_text("docs\n")  # another part of the repository moves on
    git(checkout, "add", "README")
    git(checkout, "commit", "-q", "-m", "docs")
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"), code_directory=str(job))
    assert second.run_id == first.run_id and second.record["passport"]["git_commit"]["dirty"] is False
    second.stop()
    (job / "train.py").write_text("EPOCHS = 4\n")
    git(checkout, "commit", "-q", "-am", "more epochs")
    with pytest.raises(SystemExit, match=r"another configuration: code\.tree [0-9a-f]{40} -> [0-9a-f]{40}\. "):
        begin(tmp_path, clock, queue_env(tmp_path, attempt="3"), code_directory=str(job))


# --- 8: cost across lost attempts and nodes -----------------------------------------------------------------------

class Batch:
    """DescribeJobs of the job, with Batch's times of its attempts (milliseconds)."""

    def __init__(self, *attempts):
        self.attempts = attempts

    def describe_jobs(self, jobs):
        assert jobs == ["4f1c-job"]
        return {"jobs": [{"jobId": "4f1c-job", "attempts": [
            {"startedAt": int(start * 1000), "stoppedAt": int(stop * 1000)} for start, stop in self.attempts]}]}


def test_a_lost_attempt_is_billed_to_batchs_end_of_it_not_to_its_last_checkpoint(tmp_path):
    clock = Clock()
    begin(tmp_path, clock).checkpointed()  # at T0, then nothing: the instance went 45 minutes later
    clock.now += 3600
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"), batch=Batch((T0, T0 + 2700)))
    lost = second.record["passport"]["attempts"][0]
    assert (lost["outcome"], lost["end_known"]) == ("lost", True)
    assert lost["ended_at"] == datetime.fromtimestamp(T0 + 2700, timezone.utc).isoformat(timespec="milliseconds")
    clock.now += 900
    record = second.finish()
    assert record["cost_usd"] == pytest.approx((2700 + 900) / 3600 * SPOT_G5, rel=1e-4)
    assert record["cost_lower_bound"] is False and record["cost_note"] is None


def test_where_batchs_times_are_unseen_the_cost_says_it_is_a_lower_bound(tmp_path):
    clock = Clock()
    begin(tmp_path, clock)  # lost before its first checkpoint: at least nothing, say so
    clock.now += 3600
    second = begin(tmp_path, clock, queue_env(tmp_path, attempt="2"))
    clock.now += 900
    record = second.finish()
    assert record["cost_usd"] == pytest.approx(0.25 * SPOT_G5, rel=1e-4) and record["cost_lower_bound"] is True
    assert record["cost_note"] == ("a lower bound: attempt(s) 1 lost without a word, billed to the last checkpoint "
                                   "(AWS Batch's stoppedAt was unreadable: grant the job batch:DescribeJobs)")
    assert "cost: " in shown(record) and "Spot interruption(s) (a lower bound: " in shown(record)


def test_a_multi_node_job_pays_for_every_node(tmp_path):
    clock = Clock()
    run = begin(tmp_path, clock, queue_env(tmp_path, AWS_BATCH_JOB_NUM_NODES="4"))
    clock.now += 1800
    record = run.finish()
    assert record["passport"]["attempts"][0]["nodes"] == 4
    assert record["cost_usd"] == pytest.approx(4 * 0.5 * SPOT_G5, rel=1e-4)


# --- 9: cost per accuracy point against the live model ------------------------------------------------------------

def manifest(candidate, live, live_ids="a" * 64):
    return {"candidate": {"examples": 2000, "ids_sha256": "a" * 64, "score": candidate},
            "live": {"examples": 2000, "ids_sha256": live_ids, "score": live}}


def test_the_cost_per_point_is_over_the_live_model_on_the_same_ids_and_never_over_chance(tmp_path):
    clock = Clock()
    run = begin(tmp_path, clock)
    run.log_holdout(accuracy=0.40, step=0)  # the untrained model: chance
    clock.now += 3600
    run.log_holdout(accuracy=0.86, step=20)
    record = run.finish()
    assert record["usd_per_accuracy_point"] is None  # nothing says what it would replace
    assert record["over_chance"]["accuracy_points"] == pytest.approx(46.0)
    gain = tracking.gain_over_live(record, manifest(0.86, 0.84))
    assert gain["accuracy_points"] == pytest.approx(2.0)
    assert gain["usd_per_accuracy_point"] == pytest.approx(SPOT_G5 / 2.0, rel=1e-4)
    assert tracking.gain_over_live(record, manifest(0.86, 0.84, live_ids="b" * 64)) == {
        "live_score": None, "candidate_score": None, "examples": None, "accuracy_points": None,
        "usd_per_accuracy_point": None, "reason": "the candidate and the live model were scored on different ids"}
    assert tracking.gain_over_live(record, manifest(0.83, 0.84))["reason"] == "no gain over the live model"
    text = shown(record, against_live={**gain, "evidence": "s3://b/evaluations/x/", "live_run": "live-run"})
    assert (f"  against the live model (live-run): {SPOT_G5 / 2:.6f} USD per accuracy point: +2.00 points (0.8600 vs "
            "0.8400 on the same 2000 held-out examples)") in text
    assert "USD per accuracy point over chance, the chance baseline: +46.00 points over the untrained model" in text


def test_runs_show_takes_the_gain_over_the_live_model_from_the_latest_promotions_evaluation(tmp_path):
    record = begin(tmp_path).finish()
    decision = {"metric": "holdout_accuracy", "at": "2026-12-01T09:30:00+00:00", "outcome": "refused",
                "evidence": "s3://b/evaluations/training/r/live/", "live_run": "live-run",
                "evidence_manifest": manifest(0.86, 0.84)}
    client = FakeClient(record, {"ml_platform.promotion.dev.classifier.20261201T093000Z": json.dumps(decision)})
    shown_record = runs_ops.run_record(client, record["run_id"], "--local")
    assert shown_record["against_live"]["accuracy_points"] == pytest.approx(2.0)
    assert shown_record["against_live"]["live_run"] == "live-run"


class FakeClient:
    """The MlflowClient calls run_record makes, over one run."""

    def __init__(self, record, tags):
        self.record, self.tags = record, tags

    def get_run(self, run_id):
        from mlflow.exceptions import MlflowException
        if run_id != self.record["run_id"]:
            raise MlflowException("not found")
        info = types.SimpleNamespace(run_id=run_id, run_name="resnet-run-1", experiment_id="1", status="FINISHED",
                                     start_time=None)
        return types.SimpleNamespace(info=info, data=types.SimpleNamespace(metrics={}, tags=self.tags))

    def download_artifacts(self, run_id, name, directory):
        path = os.path.join(directory, name)
        with open(path, "w") as handle:
            json.dump(self.record, handle)
        return path

    def get_experiment(self, experiment_id):
        return types.SimpleNamespace(name="training")


# --- 10: the held-out split's key and groups ----------------------------------------------------------------------

def rows(columns, users=464):
    rng = random.Random(3)
    return [{"id": f"r{i:05d}", "user": f"u{i % users:03d}", **{f"f{c}": rng.random() for c in range(columns)}}
            for i in range(20000)]


def test_the_split_needs_a_key_and_keyed_by_id_a_new_column_moves_no_row():
    with pytest.raises(TypeError):
        holdout.split(["a", "b"])  # no default: the whole sample as its key moved 919 of 966 rows on a new column
    by_id = lambda row: row["id"]  # noqa: E731
    before = [r["id"] for r in holdout.split(rows(3), key=by_id)[1]]
    after = [r["id"] for r in holdout.split(rows(4), key=by_id)[1]]
    assert before == after and len(before) > 900
    with pytest.raises(TypeError, match=r"key='id': a function from a sample to its stable id"):
        holdout.split(rows(3), key="id")


def test_group_keeps_every_row_of_a_user_on_one_side():
    data = rows(2)
    train, held = holdout.split(data, key=lambda r: r["id"], group=lambda r: r["user"])
    assert {r["user"] for r in train}.isdisjoint({r["user"] for r in held}) and held
    ungrouped_train, ungrouped_held = holdout.split(data, key=lambda r: r["id"])
    # The defect: by row, most users (412 of 464 here) have rows on both sides.
    assert len({r["user"] for r in ungrouped_train} & {r["user"] for r in ungrouped_held}) == 412


# --- 11: small items ----------------------------------------------------------------------------------------------

def test_runs_show_names_the_target_in_its_hint_for_an_unknown_run(tmp_path):
    client = FakeClient(begin(tmp_path).record, {})
    with pytest.raises(SystemExit, match=r"^error: no run nope in this store \(\./platform runs list --local shows "
                                         r"the runs\)$"):
        runs_ops.run_record(client, "nope", "--local")


def test_runs_show_local_says_where_up_kept_the_runs_files(tmp_path):
    record = begin(tmp_path).finish()
    assert runs_ops.with_local_copy(record, tmp_path)["kept_at"] is None
    (tmp_path / "runs" / record["run_id"]).mkdir(parents=True)
    kept = runs_ops.with_local_copy(record, tmp_path)
    assert f"  kept: {tmp_path / 'runs' / record['run_id']}/ (model, passport, package list, dataset;" in shown(
        record, kept_at=kept["kept_at"])


def test_runs_show_prints_the_digest_the_package_list_path_and_the_seeds(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    run = begin(tmp_path)
    run.seed_everything()
    text = shown(run.record)
    assert f"    run digest {run.record['identity']['sha256']}: params, seed, dataset content, code, image" in text
    assert f"): {tmp_path / 'ckpt'}/packages.txt;" in text
    assert "seeds: 1234 set for python" in text
    assert "  rerun: the code at (unknown commit), the packages of packages.txt, the dataset above;" in text


def test_runs_show_still_reads_a_record_of_format_1(tmp_path):
    """Runs recorded before the identity (a store ./platform up filled earlier) show as they were recorded."""
    record = begin(tmp_path).finish()
    old = json.loads(json.dumps(record))
    for key in ("identity", "over_chance", "cost_lower_bound", "checkpoint_uri"):
        old.pop(key)
    old["passport"]["dataset"] = {"name": "blobs", "version": "v1", "uri": "s3://b/d/", "objects": 1, "bytes": 9,
                                  "list_sha256": "c" * 64}
    for attempt in old["passport"]["attempts"]:
        for key in ("environment", "environment_changes", "nodes"):
            attempt.pop(key)
    text = shown(old)
    assert "run digest none (a record of format 1)" in text
    assert "sha256 cccccccccccccccc... of the object list (keys and sizes)" in text
