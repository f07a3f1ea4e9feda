"""bench/join_breaks.py stays in step with the source: each break names code that is there exactly once, and tests
that exist (a break whose code moved would fail the script; one whose test moved would run nothing)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("join_breaks", ROOT / "bench" / "join_breaks.py")
join_breaks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(join_breaks)


@pytest.mark.parametrize("item", join_breaks.BREAKS, ids=lambda item: item.name)
def test_each_break_names_code_that_is_there_once_and_tests_that_exist(item):
    source = (ROOT / item.path).read_text()
    assert source.count(item.old) == 1
    assert item.new != item.old
    for test in item.tests:
        path, _, name = test.partition("::")
        assert (ROOT / path).is_file()
        assert not name or f"def {name}(" in (ROOT / path).read_text()
