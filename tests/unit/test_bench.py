"""The benchmark script and docs/BENCHMARKS.md state the same targets."""

import importlib.util
import re
from pathlib import Path

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
    assert f"under {bench.SUITE_TARGET_SECONDS} s" in stated
    # The latest measurement table is the bench's own output, with the same target in its row.
    latest = text.split("\n## ", 2)[1]
    assert f"ratio full / floor, wall / CPU (target <= {bench.SYNTH_RATIO_TARGET})" in latest


def test_the_synth_command_selects_every_environment_or_one():
    assert bench.synth(None, "out")[-1] == "**"
    assert bench.synth(None, "out", "dev")[-4:] == ["out", "dev/*", "-c", "environments=dev"]
