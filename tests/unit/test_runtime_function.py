"""A Lambda function's asset from several runtime rooms (foundation/runtime_function.py): staged once per content in
the temporary folder, and staged again where that shared folder no longer holds exactly its files (a /tmp cleaner
removed one, another user planted one), so that a synth never ships a function that cannot import."""

from pathlib import Path

import pytest

from ml_platform_constructs.foundation import runtime_function as rf

TEXTS = {"quality_handler.py": b"import quality\n", "quality.py": b"X = 1\n"}


@pytest.fixture
def tmp(monkeypatch, tmp_path):
    monkeypatch.setattr(rf.tempfile, "tempdir", str(tmp_path))
    return tmp_path


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_the_same_content_is_staged_once_and_reused(tmp):
    first = rf._staged(TEXTS)
    assert files(first) == TEXTS and rf._staged(TEXTS) == first


@pytest.mark.parametrize("damage", ["removed", "emptied", "changed", "planted"])
def test_a_damaged_shared_folder_is_never_shipped(tmp, damage):
    shared = rf._staged(TEXTS)
    if damage == "removed":
        (shared / "quality.py").unlink()
    elif damage == "emptied":
        for path in shared.iterdir():
            path.unlink()
    elif damage == "changed":
        (shared / "quality.py").write_bytes(b"X = 2\n")
    else:
        (shared / "boto3.py").write_bytes(b"raise SystemExit\n")
    assert files(rf._staged(TEXTS)) == TEXTS
