"""The benchmark script and docs/BENCHMARKS.md state the same targets."""

import importlib.util
import re
from pathlib import Path

import pytest

from ops import terminal

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_benchmark", ROOT / "bench" / "benchmark.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_the_benchmarks_doc_states_the_synth_and_suite_targets_the_bench_measures_against():
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    targets = re.search(r"^Targets: (.*?)\n\n", text, re.MULTILINE | re.DOTALL)
    assert targets, "docs/BENCHMARKS.md has a 'Targets:' paragraph"
    stated = " ".join(targets.group(1).split())
    assert f"full / floor <= {bench.SYNTH_RATIO_TARGET}" in stated
    assert f"the whole test suite under {bench.SUITE_TARGET_SECONDS} s" in stated
    assert f"any single test file run alone under {bench.FILE_TARGET_SECONDS} s" in stated
    # The newest measurement of each is the bench's own output, with the same target in its row.
    sections = text.split("\n## ")[1:]
    for row in (f"ratio full / floor, wall / CPU (target <= {bench.SYNTH_RATIO_TARGET})",
                f"whole test suite, wall time (target < {bench.SUITE_TARGET_SECONDS} s) / CPU",
                f"slowest, wall / CPU (target < {bench.FILE_TARGET_SECONDS} s each)"):
        label = row.split(" (target")[0]
        newest = next((section for section in sections if label in section), "")
        assert row in newest, f"the newest section that measures {label!r} states another target"


def test_each_test_file_is_timed_alone_and_the_slow_ones_are_named(monkeypatch, capsys):
    monkeypatch.setenv("CI", "true")  # progress as plain lines
    files = [bench.ROOT / "tests" / "unit" / name for name in ("test_a.py", "test_b.py", "test_c.py")]
    times = {"tests/unit/test_a.py": (3.0, 2.5, True), "tests/unit/test_b.py": (21.5, 12.0, True),
             "tests/unit/test_c.py": (16.0, 9.0, False)}
    seconds = bench.file_seconds(files, run=lambda arguments: times[arguments[0]])
    assert capsys.readouterr().err.splitlines() == [
        "running each test file alone ...", "  [1/3] tests/unit/test_a.py", "  [2/3] tests/unit/test_b.py",
        "  [3/3] tests/unit/test_c.py"]
    assert bench.file_rows(seconds, slowest=2) == [
        ("test files run alone: 3 files, slowest, wall / CPU (target < 15 s each)",
         "`tests/unit/test_b.py` 21.5 / 12.0 s, `tests/unit/test_c.py` 16.0 / 9.0 s (tests failed)"),
        ("files over 15 s alone", "`tests/unit/test_b.py` 21.5 / 12.0 s, `tests/unit/test_c.py` 16.0 / 9.0 s (tests "
                                  "failed)"),
        ("median file alone, wall / CPU", "16.0 / 9.0 s"),
        ("files whose tests failed alone", "`tests/unit/test_c.py`")]


def test_every_test_file_is_found_as_pytest_collects_them():
    files = bench.test_files()
    assert bench.ROOT / "tests" / "unit" / "test_bench.py" in files
    assert bench.ROOT / "tests" / "emulator" / "test_local_deploy.py" in files
    assert not [path for path in files if "frameworks" in path.parts]  # pytest.ini ignores the frameworks tier
    assert all(path.name.startswith("test_") for path in files) and len(files) > 90


def test_the_synth_command_selects_every_environment_or_one():
    assert bench.synth(None, "out")[-1] == "**"
    assert bench.synth(None, "out", "dev")[-4:] == ["out", "dev/*", "-c", "environments=dev"]


def test_the_suite_is_timed_as_platform_test_runs_it(monkeypatch, capsys):
    runs = []
    monkeypatch.setattr(bench, "timed_tests", lambda arguments: runs.append(arguments) or (1.0, 1.0, True))
    monkeypatch.setattr(bench, "reference_seconds", lambda: 2.25)
    bench.main(["--skip-synth", "--skip-files", "--skip-cold"])
    assert runs == [terminal.PARALLEL]
    rows = capsys.readouterr().out.splitlines()
    assert "| this machine's speed: 20,000,000 Python additions, CPU s (best of 3) | 2.25 s |" in rows
    assert "| whole test suite, wall time (target < 180 s) / CPU | 1.0 / 1.0 s |" in rows


def test_the_machines_speed_is_the_best_of_three_timed_loops():
    assert 0 < bench.reference_seconds(20_000) < 1


@pytest.mark.parametrize("args,parallel", [
    ([], True), (["-k", "dataset", "tests/unit"], True), (["-x"], True),
    (["-n", "4"], False), (["-n4"], False), (["--numprocesses=3"], False), (["--dist", "load"], False),
    (["-p", "no:xdist"], False), (["-pno:xdist"], False), (["--no-header"], True),
    (["tests/unit/test_bench.py"], False), (["tests/unit/test_bench.py::test_x", "-x"], False),
    (["tests/unit/test_bench.py", "tests/unit/test_tco.py"], True), (["tests/unit/test_bench.py", "tests/unit"], True)])
def test_platform_test_runs_on_xdist_workers_unless_told_how_to_run(args, parallel):
    assert terminal.suite_arguments(args) == ([*terminal.PARALLEL, *args] if parallel else args)
