"""./platform bench decisions runs each decision through the code the handlers and commands call (a few trials
here: the rates are measured by the bench itself, docs/BENCHMARKS.md)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("bench_decisions", ROOT / "bench" / "decisions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quick_bench_prints_every_decision_against_its_target(capsys):
    bench = load()
    assert bench.main(["--quick", "--seed", "1"]) == 0
    table = capsys.readouterr().out
    for decision, target in (("promotion", "<= 5%"), ("promotion", ">= 90%"), ("promotion ledger", "<= 5%"),
                             ("quality", ">= 90% within 48 h"), ("quality", "<= 0.25 per 90 days"),
                             ("drift over time", "<= 0.25 per 90 days"), ("drift", ">= 90%"),
                             ("feature watch", "<= 1%"), ("quality, per class", ">= 90% within 48 h"),
                             ("promotion baseline", "same as without a promotion")):
        assert any(row.startswith(f"| {decision} |") and f"| {target} |" in row for row in table.splitlines()), \
            (decision, target)


def test_a_missed_target_fails_the_bench():
    bench = load()
    table = bench.Table()
    table.add("x", "case", "6%", "<= 5%", False)
    assert "| **no** |" in table.markdown()
