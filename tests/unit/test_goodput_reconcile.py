"""./platform goodput --reconcile FILE (issue 38): the ledger's dollars against a Cost and Usage Report (CUR 2.0 with
split cost allocation data) matched by the attempt's ECS task, else its instance and hours; the totals and the scale
factor; a file that is not such an export ends in one line, exit 2, before the store is opened."""

import gzip
import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from mlflow.store.entities.paged_list import PagedList

from ops import goodput

TASK = "arn:aws:ecs:us-east-1:111122223333:task/training/0123456789abcdef"


def iso(day, hour):
    return datetime(2026, 11, day, hour, tzinfo=timezone.utc).isoformat()


def attempt(start, end, host=None):
    found = {"number": 1, "started_at": start, "ended_at": end, "last_seen_at": end, "outcome": "finished",
             "instance_type": "g5.xlarge", "lifecycle": "on-demand", "nodes": 1, "gpu_share": 1.0,
             "phases": {"step": (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()}}
    return {**found, "host": host} if host else found


RECORDS = {
    "by-task": attempt(iso(3, 10), iso(3, 12), {"instance_id": "i-0aaa", "task_arn": TASK}),
    "by-instance": attempt(iso(4, 10), iso(4, 12), {"instance_id": "i-0bbb"}),
    "unbilled": attempt(iso(5, 10), iso(5, 11)),
}
HEADER = ("bill_billing_period_start_date,line_item_product_code,line_item_resource_id,line_item_usage_start_date,"
          "line_item_usage_end_date,split_line_item_parent_resource_id,split_line_item_split_cost,"
          "split_line_item_unused_cost,line_item_unblended_cost")
ROWS = [
    # the task's two hours
    f"2026-11-01T00:00:00.000Z,AmazonECS,{TASK},2026-11-03T10:00:00.000Z,2026-11-03T11:00:00.000Z,i-0aaa,0.9,0.1,",
    f"2026-11-01T00:00:00.000Z,AmazonECS,{TASK},2026-11-03T11:00:00.000Z,2026-11-03T12:00:00.000Z,i-0aaa,0.9,0.1,",
    # the instance's tasks during the second run's hours, and one after them (another job's)
    "2026-11-01T00:00:00.000Z,AmazonECS,arn:aws:ecs:task/other,2026-11-04T10:00:00.000Z,2026-11-04T11:00:00.000Z,"
    "i-0bbb,1.2,0.0,",
    "2026-11-01T00:00:00.000Z,AmazonECS,arn:aws:ecs:task/other,2026-11-04T11:00:00.000Z,2026-11-04T12:00:00.000Z,"
    "i-0bbb,1.2,0.0,",
    "2026-11-01T00:00:00.000Z,AmazonECS,arn:aws:ecs:task/later,2026-11-04T15:00:00.000Z,2026-11-04T16:00:00.000Z,"
    "i-0bbb,5.0,0.0,",
    # the instance's own line item: no split columns
    "2026-11-01T00:00:00.000Z,AmazonEC2,i-0aaa,2026-11-03T10:00:00.000Z,2026-11-03T11:00:00.000Z,,,,1.006",
]


def bill(tmp_path, rows=ROWS, header=HEADER, name="cur.csv"):
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return str(path)


class Client:
    def search_experiments(self, max_results=1000, page_token=None):
        return PagedList([SimpleNamespace(experiment_id="1")], None)

    def search_runs(self, experiments, filter_string="", max_results=1000, order_by=None, page_token=None):
        return PagedList([SimpleNamespace(info=SimpleNamespace(run_id=k, run_name=k)) for k in RECORDS], None)


@pytest.fixture(autouse=True)
def records(monkeypatch):
    def run_record(client, run_id, *args, **kwargs):
        return {"run_id": run_id, "run_name": run_id, "experiment": "training", "status": None,
                "started_at": RECORDS[run_id]["started_at"],
                "passport": {"environment": {"AWS_REGION": "us-east-1"}, "attempts": [RECORDS[run_id]]}}

    monkeypatch.setattr(goodput, "run_record", run_record)


def test_each_run_against_the_bill_by_its_task_else_its_instance_and_hours_with_the_scale(tmp_path, capsys):
    path = bill(tmp_path)
    assert goodput.main(["--local", "--reconcile", path, "--json"], client=Client()) == 0
    found = json.loads(capsys.readouterr().out)["reconcile"]
    runs = {r["run_id"]: r for r in found["runs"]}
    assert runs["by-task"]["billed_usd"] == pytest.approx(2.0) and runs["by-task"]["matched_by"] == "task"
    assert runs["by-instance"]["billed_usd"] == pytest.approx(2.4) and runs["by-instance"]["rows"] == 2
    assert runs["unbilled"]["billed_usd"] is None and runs["unbilled"]["matched_by"] is None
    assert (found["rows"], found["rows_matched"]) == (5, 4)  # the instance's own line item is no split row
    ledger = runs["by-task"]["matched_ledger_usd"] + runs["by-instance"]["matched_ledger_usd"]
    assert found["billed_usd"] == pytest.approx(4.4) and found["scale"] == pytest.approx(4.4 / ledger)
    assert goodput.main(["--local", "--reconcile", path], client=Client()) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert f"scale factor {4.4 / ledger:.3f}" in " ".join(out.split())
    row = next(line for line in out.splitlines() if line.startswith("  by-instance") and "billed" not in line
               and "instance (2 rows)" in line)
    assert row.split()[2] == "2.40"


def test_a_gzipped_export_reads_as_the_csv_and_the_month_keeps_its_rows(tmp_path, capsys):
    path = tmp_path / "cur.csv.gz"
    path.write_bytes(gzip.compress(("\n".join([HEADER, *ROWS]) + "\n").encode()))
    assert goodput.main(["--local", "--reconcile", str(path), "--json", "--month", "2026-12"], client=Client()) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["runs"] == [] and found["reconcile"]["rows"] == 0  # November's rows are outside December


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"\x00\x01\xfe\xff" * 64, "is not UTF-8 text"),
    (b"\x1f\x8b\x08\x00garbage", "a gzip file cut short or damaged"),
    ((HEADER + "\n" + ROWS[0].rsplit(",", 2)[0] + "\n").encode(), "line 2 has 7 fields, the header 9"),
    (("line_item_resource_id,line_item_usage_start_date\nx,2026-11-03T10:00:00Z\n").encode(),
     "no column split_line_item_parent_resource_id, split_line_item_split_cost"),
    ((HEADER + "\n" + ROWS[0].replace(",0.9,", ",lots,") + "\n").encode(), "line 2: a cost or a usage date"),
    ((HEADER + "\n" + ROWS[0].replace("2026-11-03T10:00:00.000Z", "yesterday") + "\n").encode(),
     "line 2: a cost or a usage date"),
])
def test_a_file_that_is_no_such_export_is_one_line_exit_2_before_the_store_is_opened(content, message, tmp_path,
                                                                                    capsys, monkeypatch):
    monkeypatch.setattr(goodput, "open_store_session", lambda target: pytest.fail("the store was opened"))
    path = tmp_path / "bill.csv"
    path.write_bytes(content)
    with pytest.raises(SystemExit) as exit:
        goodput.main(["--local", "--reconcile", str(path)])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: ./platform goodput: --reconcile {path}") and message in err, err


def test_a_missing_file_and_csv_output_are_one_line_exit_2(tmp_path, capsys):
    for argv, message in ((["--reconcile", str(tmp_path / "nope.csv")], "cannot be read"),
                          (["--reconcile", bill(tmp_path), "--csv"], "--reconcile with --csv")):
        with pytest.raises(SystemExit) as exit:
            goodput.main(["--local", *argv])
        err = capsys.readouterr().err
        assert exit.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_multi_node_attempt_is_compared_per_node_as_only_its_main_node_is_matched(tmp_path, capsys, monkeypatch):
    """Four nodes: the record names the main node's task; the bill's rows are that task's; the ledger's dollars (all
    four nodes) are compared per node, so the scale is the bill's over one node's, not a quarter of it."""
    four = {**RECORDS["by-task"], "nodes": 4}
    monkeypatch.setitem(RECORDS, "by-task", four)
    monkeypatch.delitem(RECORDS, "by-instance")
    monkeypatch.delitem(RECORDS, "unbilled")
    assert goodput.main(["--local", "--reconcile", bill(tmp_path), "--json"], client=Client()) == 0
    found = json.loads(capsys.readouterr().out)["reconcile"]
    [run] = found["runs"]
    per_node = run["ledger_usd"] / 4
    assert run["matched_ledger_usd"] == pytest.approx(per_node) and found["scale"] == pytest.approx(2.0 / per_node)
