"""The job side's checkpoints are complete or absent (issue 35): a folder counts only once its marker, written last,
names every file with its size and digest; a torn save, a half-uploaded folder or changed bytes are never loaded; the
newest K are kept, and older ones go only after a newer one is complete. The same on a directory and on S3."""

import hashlib
import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from ml_platform_job.checkpoints import CheckpointStore, CorruptCheckpoint
from ml_platform_job.storage import Location


@pytest.fixture(params=["directory", "s3"])
def location(request, tmp_path, monkeypatch):
    if request.param == "directory":
        yield Location(str(tmp_path / "ckpt"))
        return
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="datasets")
        yield Location("s3://datasets/checkpoints/training/job-1/", s3)


def test_a_checkpoint_counts_once_its_marker_names_every_file(location):
    store = CheckpointStore(location)
    assert store.latest() is None
    saved = store.save(40, {"state.pt": b"weights", "rng-rank-1.pt": b"rng"}, meta={"epoch": 2})
    latest = store.latest()
    assert (latest.step, latest.meta, sorted(latest.files)) == (40, {"epoch": 2}, ["rng-rank-1.pt", "state.pt"])
    assert latest.files["state.pt"] == {"bytes": 7, "sha256": hashlib.sha256(b"weights").hexdigest()}
    assert store.read(latest, "state.pt") == b"weights" and saved.step == 40


def test_a_folder_without_its_marker_or_with_a_file_missing_is_never_loaded(location):
    store = CheckpointStore(location)
    store.save(10, {"state.pt": b"ten"})
    location.write("checkpoints/step-000000000020/state.pt", b"torn")  # SIGKILL before the marker
    assert store.latest().step == 10
    # A marker naming a file that never arrived (an upload cut short between files).
    location.write("checkpoints/step-000000000030/COMPLETE.json", json.dumps(
        {"step": 30, "files": {"state.pt": {"bytes": 4, "sha256": "0" * 64}}, "meta": {}}))
    assert store.latest().step == 10


def test_changed_bytes_are_refused_and_the_one_before_is_there_to_fall_back_on(location):
    store = CheckpointStore(location)
    store.save(10, {"state.pt": b"ten"})
    newest = store.save(20, {"state.pt": b"twenty"})
    location.write(newest.folder + "state.pt", b"twentX")
    with pytest.raises(CorruptCheckpoint, match="its bytes are not the ones its marker names"):
        store.read(newest, "state.pt")
    assert [c.step for c in store.complete()] == [10, 20]
    assert store.read(store.complete()[0], "state.pt") == b"ten"


def test_the_newest_k_are_kept_and_older_ones_go_only_after_a_newer_one_is_complete(location):
    store = CheckpointStore(location, keep=2)
    for step in (1, 2, 3):
        store.save(step, {"state.pt": str(step).encode()})
    assert [c.step for c in store.complete()] == [2, 3]
    assert not any("step-000000000001" in name for name in location.list())
    # A save in progress (newer than the newest complete one) is left alone; a torn older one is removed.
    location.write("checkpoints/step-000000000009/state.pt", b"in progress")
    location.write("checkpoints/step-000000000002x/ignored", b"not a step folder")
    location.write("checkpoints/step-000000000000/state.pt", b"torn, older")
    store.save(4, {"state.pt": b"4"})
    names = location.list("checkpoints/")
    assert "checkpoints/step-000000000009/state.pt" in names
    assert "checkpoints/step-000000000000/state.pt" not in names
    assert [c.step for c in store.complete()] == [3, 4]


def test_a_failed_save_removes_nothing(location, monkeypatch):
    store = CheckpointStore(location, keep=1)
    store.save(1, {"state.pt": b"one"})

    def fails(*_, **__):
        raise OSError("disk full")
    monkeypatch.setattr(CheckpointStore, "mark_complete", fails)
    with pytest.raises(OSError):
        store.save(2, {"state.pt": b"two"})
    monkeypatch.undo()
    assert store.latest().step == 1 and store.read(store.latest(), "state.pt") == b"one"


def test_a_framework_folder_is_saved_whole_and_a_torn_one_never(tmp_path, location):
    folder = tmp_path / "checkpoint-8"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"m")
    (folder / "sub" / "optimizer.pt").write_bytes(b"o")
    store = CheckpointStore(location)
    store.save_directory(8, folder)
    assert sorted(store.latest().files) == ["model.safetensors", "sub/optimizer.pt"]
    restored = store.download(store.latest(), tmp_path / "restored")
    assert (restored / "sub" / "optimizer.pt").read_bytes() == b"o"
    (folder / "checkpoint-is-incomplete.txt").write_text("in progress")  # transformers' own torn-save marker
    with pytest.raises(CorruptCheckpoint, match="checkpoint-is-incomplete.txt"):
        store.save_directory(16, folder)


def test_a_local_write_is_whole_or_absent(tmp_path):
    location = Location(str(tmp_path))
    location.write("a/state.pt", b"old")
    (tmp_path / "a" / ".state.pt.x.partial").write_bytes(b"half")  # what a SIGKILL mid-write leaves
    assert location.list() == ["a/state.pt"] and location.read_bytes("a/state.pt") == b"old"
    location.write("a/state.pt", "text")
    assert location.read("a/state.pt") == "text"


@pytest.mark.parametrize("keep", [0, -1, 1.5, True])
def test_keep_must_be_a_whole_number_of_one_or_more(tmp_path, keep):
    with pytest.raises(ValueError, match=rf"keep={keep!r}: a whole number of checkpoints of 1 or more"):
        CheckpointStore(str(tmp_path), keep=keep)


def test_the_budget_guard_function_ships_the_job_sides_price_reader(tmp_path):
    """The price table left the runtime room for the job side; the guard's function still gets it beside itself."""
    from ml_platform_constructs.foundation.runtime_function import runtime_source

    assert runtime_source("prices.py") == Path(__import__("ml_platform_job.prices").prices.__file__)
    assert runtime_source("budget_guard.py").parent.name == "handlers"


def test_a_complete_step_is_never_rewritten_and_needs_no_delete(location, monkeypatch):
    store = CheckpointStore(location)
    first = store.save(5, {"state.pt": b"first"})
    deletes = []
    monkeypatch.setattr(type(location), "delete", lambda self, names: deletes.append(names))
    again = store.save(5, {"state.pt": b"second"})
    assert again.files == first.files and store.read(store.latest(), "state.pt") == b"first"
    assert deletes == []  # a role without s3:DeleteObject saves as well


def test_a_refused_delete_is_one_warning_and_the_save_stands(tmp_path, capsys, monkeypatch):
    location = Location(str(tmp_path / "ckpt"))
    store = CheckpointStore(location, keep=1)

    def refused(names):
        if names:
            raise OSError(f"{len(names)} of {len(names)} objects not deleted under {location.uri}: AccessDenied on x")
    monkeypatch.setattr(location, "delete", refused)
    for step in (1, 2, 3):
        store.save(step, {"state.pt": b"x"})
    assert store.latest().step == 3
    err = capsys.readouterr().err
    assert err.count("old checkpoints not removed") == 1 and "AccessDenied" in err


def test_a_health_stops_checkpoint_never_evicts_the_good_ones_and_is_never_resumed_from(location, capsys):
    """A health rule's stop writes the state it judged bad (a diverging loss): kept for inspection beside the ``keep``
    good ones, passed over on resume, rewritten by a good save of the same step, and removed once a newer good one
    exists."""
    store = CheckpointStore(location, keep=2)
    store.save(10, {"state.pt": b"ten"})
    store.save(20, {"state.pt": b"twenty"})
    stopped = store.save(30, {"state.pt": b"diverged"}, meta={"health_stop": "loss_diverging"})
    assert stopped.health_stop == "loss_diverging"
    assert [c.step for c in store.complete()] == [10, 20, 30]  # both good ones stay
    assert store.latest().step == 20
    loaded = store.load_newest(lambda checkpoint: store.read(checkpoint, "state.pt"))
    assert (loaded[0].step, loaded[1]) == (20, b"twenty")
    assert "written by the health rule loss_diverging's stop" in capsys.readouterr().err
    # The job resubmitted with the fix reaches step 30 again: its good save replaces the stop's.
    again = store.save(30, {"state.pt": b"fixed"})
    assert again.health_stop is None and store.read(store.latest(), "state.pt") == b"fixed"
    assert [c.step for c in store.complete()] == [20, 30]
    # A stop's checkpoint older than the newest good one goes at the next purge.
    store.save(35, {"state.pt": b"bad"}, meta={"health_stop": "exploding_gradients"})
    store.save(40, {"state.pt": b"forty"})
    assert [c.step for c in store.complete()] == [30, 40]


def test_a_checkpoint_saved_at_the_stops_step_before_the_rule_fired_is_marked_as_the_stops(location):
    store = CheckpointStore(location, keep=2)
    store.save(10, {"state.pt": b"ten"})
    store.save(20, {"state.pt": b"twenty"}, meta={"epoch": 2})  # the periodic save, then the rule fires at step 20
    marked = store.mark_health_stop(20, "overfit")
    assert (marked.health_stop, marked.meta["epoch"]) == ("overfit", 2)
    assert store.latest().step == 10 and store.read(store.complete()[-1], "state.pt") == b"twenty"
    assert store.mark_health_stop(20, "loss_diverging").health_stop == "overfit"  # marked once
    assert store.mark_health_stop(30, "overfit") is None
