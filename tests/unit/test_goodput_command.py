"""./platform goodput (ops/goodput.py): per run and in total, the buckets in hours, dollars and percent with a bar,
from the recorded runs; --month and --queue select, --json and --csv carry the same numbers; bad arguments fail in
one line before any store is opened."""

import csv
import io
import json
from types import SimpleNamespace

import pytest

from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ml_platform_job.prices import hourly_usd
from ops import goodput

SPOT = hourly_usd(load_prices("us-east-1"), "g5.xlarge", "spot")


def attempt(start, end, **phases):
    return {"number": 1, "started_at": start, "ended_at": end, "outcome": "finished", "instance_type": "g5.xlarge",
            "lifecycle": "spot", "nodes": 1, "gpu_share": 1.0, "phases": phases}


RECORDS = {
    # an hour: 30 min productive, 18 min waiting on data, 6 min startup, 6 min in the job no phase timed (other)
    "r1": {"run_id": "r1", "run_name": "input-bound", "experiment": "training", "started_at": "2026-11-03T10:00:00+00:00",
           "passport": {"queue": "training", "environment": {"AWS_REGION": "us-east-1"}, "attempts": [
               attempt("2026-11-03T10:00:00+00:00", "2026-11-03T11:00:00+00:00", startup=360.0, step=2880.0,
                       data_wait=1080.0)]}},
    "r2": {"run_id": "r2", "run_name": "compute-bound", "experiment": "research", "started_at": "2026-11-20T10:00:00+00:00",
           "passport": {"queue": "research", "environment": {"AWS_REGION": "us-east-1"}, "attempts": [
               attempt("2026-11-20T10:00:00+00:00", "2026-11-20T10:30:00+00:00", step=1800.0)]}},
    "r3": {"run_id": "r3", "run_name": "october", "experiment": "training", "started_at": "2026-10-31T23:00:00+00:00",
           "passport": {"queue": "training", "environment": {"AWS_REGION": "us-east-1"}, "attempts": [
               attempt("2026-10-31T23:00:00+00:00", "2026-11-01T00:00:00+00:00", step=3600.0)]}},
    "r4": {"run_id": "r4", "run_name": "no-helper", "experiment": "training", "started_at": "2026-11-05T10:00:00+00:00",
           "passport": {}},
}


class Client:
    """MLflow's calls goodput makes, over RECORDS: one page of experiments and of runs."""

    def search_experiments(self, max_results=1000, page_token=None):
        return [SimpleNamespace(experiment_id="1")]

    def search_runs(self, experiments, filter_string="", max_results=1000, order_by=None, page_token=None):
        return [SimpleNamespace(info=SimpleNamespace(run_id=k)) for k in RECORDS]


@pytest.fixture(autouse=True)
def records(monkeypatch):
    monkeypatch.setattr(goodput, "run_record", lambda client, run_id, *args, **kwargs: RECORDS[run_id])


def test_by_default_each_run_is_one_line_within_100_columns_with_its_bar(capsys):
    assert goodput.main(["--local", "--month", "2026-11"], client=Client()) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ") and " USD  " in line}
    assert set(rows) == {"input-bound", "compute-bound", "total"}
    assert rows["input-bound"][1:5] == ["1.000", "GPU-h", f"{SPOT:.2f}", "USD"]
    assert rows["input-bound"][5] == "#" * 25 + "d" * 15 + "s" * 5 + "o" * 5
    assert "data_wait 0.300 GPU-h" in out and "(startup is a lower bound" in out.replace("\n   ", " ")


def test_wide_shows_each_run_and_the_total_with_every_buckets_share(capsys):
    assert goodput.main(["--local", "--month", "2026-11", "--wide"], client=Client()) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[2:5]}
    assert set(rows) == {"input-bound", "compute-bound", "total"}  # october and the run without attempts left out
    fields = rows["input-bound"].split()
    assert fields[1:3] == ["1.000", f"{SPOT:.4f}"]
    assert fields[3:13] == ["50.0%", "30.0%", "10.0%", "0.0%", "0.0%", "0.0%", "0.0%", "0.0%", "10.0%", "0.0%"]
    assert fields[13] == "#" * 25 + "d" * 15 + "s" * 5 + "o" * 5
    assert rows["total"].split()[1] == "1.500" and rows["compute-bound"].split()[13] == "#" * 50
    assert "startup is a lower bound" in out and "bar: #=productive d=data_wait" in out


def test_queue_selects_and_json_and_csv_carry_the_same_numbers(capsys):
    goodput.main(["--local", "--queue", "training", "--json"], client=Client())
    found = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in found["runs"]] == ["r1", "r3"]
    assert found["runs"][0]["ledger"]["buckets"]["data_wait"] == {"gpu_hours": 0.3,
                                                                  "usd": round(0.3 * SPOT, 4), "share": 0.3}
    assert found["runs"][0]["ledger"]["gpu_hours"] == 1.0 and found["skipped"] == []
    assert found["total"]["gpu_hours"] == 2.0 and "paid_hours" not in found["total"]
    goodput.main(["--local", "--month", "2026-11", "--queue", "training", "--csv"], client=Client())
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == len(goodput.BUCKETS) and {r["run_id"] for r in rows} == {"r1"}
    assert next(r for r in rows if r["bucket"] == "other")["gpu_hours"] == "0.1"
    assert next(r for r in rows if r["bucket"] == "idle")["gpu_hours"] == "0.0" and "hours" not in rows[0]


def test_bars_are_always_full_width():
    from ml_platform_job.goodput import Ledger

    thirds = Ledger({**dict.fromkeys(goodput.BUCKETS, 0.0), "productive": 1.0, "lost": 1.0, "idle": 1.0},
                    dict.fromkeys(goodput.BUCKETS, 0.0), 1)
    assert len(goodput.bar(thirds)) == goodput.BAR_WIDTH and goodput.bar(thirds).count("#") == 17


@pytest.mark.parametrize("argv,message", [
    (["--local", "--month", "2026-13"], "--month 2026-13: a month as YYYY-MM, e.g. 2026-11"),
    (["--local", "--month", "Nov"], "--month Nov: a month as YYYY-MM"),
    (["--local", "--json", "--csv"], "not allowed with argument"),
    (["--local", "--queue", " "], "--queue: a queue's name"),
])
def test_bad_arguments_fail_in_one_line_before_the_store_is_opened(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(goodput, "open_store_session", lambda target: pytest.fail("the store was opened"))
    with pytest.raises(SystemExit) as exit:
        goodput.main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert err.startswith("error: ./platform goodput: ")


def test_an_unknown_environment_is_one_line_before_any_aws_call(monkeypatch):
    import boto3

    monkeypatch.setattr(boto3, "Session", lambda *a, **k: pytest.fail("an AWS session was opened"))
    with pytest.raises(SystemExit) as exit:
        goodput.main(["nosuch"])
    assert "nosuch" in str(exit.value.code) and len(str(exit.value.code).splitlines()) == 1


def test_the_platform_script_dispatches_and_lists_goodput():
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = (root / "platform").read_text()
    assert "  goodput)\n    setup\n    exec python -m ops.goodput" in script
    listed = subprocess.run([str(root / "platform"), "help"], capture_output=True, text=True, timeout=30).stdout
    assert "./platform goodput ENV|--local [--month YYYY-MM] [--queue Q] [--json|--csv]" in listed
    assert "`./platform goodput ENV\\|--local" in (root / "docs" / "COMMANDS.md").read_text()


def test_the_readmes_excerpt_is_this_commands_output(capsys):
    """README.md's goodput block shows lines of the real output (the fixture's input-bound run and the legend)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [block] = re.findall(r"<!-- goodput-excerpt -->\n```\n(.*?)```", readme, flags=re.S)
    goodput.main(["--local", "--month", "2026-11"], client=Client())
    out = capsys.readouterr().out.splitlines()
    assert block.splitlines() and all(line in out for line in block.splitlines()), block
