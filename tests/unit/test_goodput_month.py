"""./platform goodput (issue 38 item 4 and the operator side of items 2-3): every run of the store counted (every
page of MLflow's search; --month filters in the query where MLflow can), an attempt crossing a month's bound split at
it, a ragged record noted and skipped (exit 0), a crashed run's record read from next to its checkpoints (its last
attempt ended at its last record), Spot priced from EC2's Spot price history of its zone (ENV), GPU-hours. No AWS:
fake MLflow and EC2 clients, a local MLflow store, moto's in-process S3."""

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import boto3
import pytest
from botocore.exceptions import ClientError
from mlflow.store.entities.paged_list import PagedList
from moto import mock_aws

from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ml_platform_job.prices import hourly_usd
from ops import goodput
from ops import runs as runs_ops

PRICES = load_prices("us-east-1")
SPOT = hourly_usd(PRICES, "g5.xlarge", "spot")
NOV = datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
DEC = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()


def iso(day, hour=0, month=11, minute=0):
    return datetime(2026, month, day, hour, minute, tzinfo=timezone.utc).isoformat()


def attempt(start, end, number=1, outcome="finished", lifecycle="spot", instance_type="g5.xlarge", **extra):
    step = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    found = {"number": number, "started_at": start, "last_seen_at": end, "ended_at": None if outcome == "running"
             else end, "outcome": outcome, "instance_type": instance_type, "lifecycle": lifecycle, "nodes": 1,
             "gpu_share": 1.0, "phases": {"step": step}}
    return {**found, **extra}


def record(run_id, *attempts, name=None, status=None, started_at=None):
    return {"run_id": run_id, "run_name": name or run_id, "experiment": "training", "status": status,
            "started_at": started_at or attempts[0]["started_at"],
            "passport": {"queue": "training", "environment": {"AWS_REGION": "us-east-1"}, "attempts": list(attempts)}}


def run_info(run_id, *, status="FINISHED", end_time=None, start_time=None):
    return SimpleNamespace(info=SimpleNamespace(run_id=run_id, run_name=run_id, status=status, end_time=end_time,
                                                start_time=start_time))


class PagedClient:
    """MLflow's search as MlflowClient answers it: PagedList pages of ``max_results`` with a token while more follow;
    every call kept."""

    def __init__(self, runs):
        self.runs, self.calls = runs, []

    def search_experiments(self, max_results=1000, page_token=None):
        return PagedList([SimpleNamespace(experiment_id="1")], None)

    def search_runs(self, experiments, filter_string="", max_results=1000, order_by=None, page_token=None):
        self.calls.append({"filter_string": filter_string, "max_results": max_results, "page_token": page_token,
                           "order_by": order_by})
        start = int(page_token or 0)
        following = start + max_results
        return PagedList(self.runs[start:following], str(following) if following < len(self.runs) else None)


def served(monkeypatch, records):
    """goodput's run_record answering from ``records``; the ids it was asked for, in order."""
    asked = []

    def run_record(client, run_id, target="ENV|--local", **kwargs):
        asked.append(run_id)
        return records[run_id]

    monkeypatch.setattr(goodput, "run_record", run_record)
    return asked


def out_json(capsys, argv, **kwargs):
    assert goodput.main([*argv, "--json"], **kwargs) == 0
    return json.loads(capsys.readouterr().out)


# --- 1: every page ---------------------------------------------------------------------------------------------------

def test_every_page_of_2500_runs_is_read_and_the_month_is_filtered_in_the_query(monkeypatch, capsys):
    records = {f"run-{i:04d}": record(f"run-{i:04d}", attempt(iso(2 + i % 20, 10), iso(2 + i % 20, 11)))
               for i in range(2500)}
    asked = served(monkeypatch, records)
    client = PagedClient([run_info(run_id) for run_id in records])
    found = out_json(capsys, ["--local", "--month", "2026-11"], client=client)
    assert [c["page_token"] for c in client.calls] == [None, "1000", "2000"]
    assert {c["filter_string"] for c in client.calls} == {f"attributes.start_time < {int(DEC * 1000)}"}
    assert len(asked) == len(found["runs"]) == 2500 and found["total"]["gpu_hours"] == 2500.0
    found = out_json(capsys, ["--local"], client=PagedClient([run_info(run_id) for run_id in records]))
    assert len(found["runs"]) == 2500  # no month: no filter, every run


def test_a_run_started_before_the_month_is_read_unless_mlflow_shows_it_ended_before_the_month(monkeypatch, capsys):
    records = {
        # started in September, resumed in November: its November attempt counts
        "resumed": record("resumed", attempt(iso(20, 10, month=9), iso(20, 11, month=9), outcome="stopped"),
                          attempt(iso(3, 10), iso(3, 12), number=2)),
        # ended in September: not read at all
        "september": record("september", attempt(iso(20, 10, month=9), iso(20, 11, month=9))),
        # ended in October, but MLflow's end is within a day of November: read, nothing in November
        "late-october": record("late-october", attempt(iso(31, 10, month=10), iso(31, 11, month=10))),
    }
    asked = served(monkeypatch, records)
    ms = lambda text: int(datetime.fromisoformat(text).timestamp() * 1000)  # noqa: E731
    client = PagedClient([run_info("resumed", status="FINISHED", end_time=ms(iso(3, 12))),
                          run_info("september", status="FINISHED", end_time=ms(iso(20, 11, month=9))),
                          run_info("late-october", status="KILLED", end_time=ms(iso(31, 11, month=10)))])
    found = out_json(capsys, ["--local", "--month", "2026-11"], client=client)
    assert asked == ["resumed", "late-october"]
    assert [r["run_id"] for r in found["runs"]] == ["resumed"]
    assert found["runs"][0]["ledger"]["gpu_hours"] == 2.0 and found["runs"][0]["ledger"]["attempts"] == 1


# --- 2: split at the month's bounds ----------------------------------------------------------------------------------

@pytest.mark.parametrize("month,hours", [("2026-10", 1.0), ("2026-11", 1.0), ("2026-12", None)])
def test_an_attempt_crossing_midnight_of_the_month_is_split_at_it(month, hours, monkeypatch, capsys):
    records = {"crossing": record("crossing", attempt(iso(31, 23, month=10), iso(1, 1)))}
    served(monkeypatch, records)
    found = out_json(capsys, ["--local", "--month", month], client=PagedClient([run_info("crossing")]))
    if hours is None:
        assert found["runs"] == []
        return
    [run] = found["runs"]
    assert run["ledger"]["gpu_hours"] == hours
    assert run["ledger"]["paid_usd"] == pytest.approx(SPOT * hours, abs=1e-4)
    assert any("window" in note or "inside the window" in note for note in run["ledger"]["notes"])
    assert goodput.main(["--local", "--month", month], client=PagedClient([run_info("crossing")])) == 0
    out = capsys.readouterr().out
    assert f"{month} UTC (attempts cut at the month's bounds)" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 100


# --- 3: a bad record is noted and skipped ----------------------------------------------------------------------------

RAGGED = {
    "good": record("good", attempt(iso(3, 10), iso(3, 11)), name="good-run"),
    "no-start": {**record("no-start", attempt(iso(3, 10), iso(3, 11)), name="cut-short"),
                 "passport": {"attempts": [{"number": 1, "outcome": "finished", "ended_at": iso(3, 11)}]}},
    "garbage": {**record("garbage", attempt(iso(3, 10), iso(3, 11)), name="hand-edited"), "passport": "garbage"},
    "bad-phases": record("bad-phases", {**attempt(iso(3, 10), iso(3, 11)), "phases": {"step": "an hour"}}),
    "not-a-list": {**record("not-a-list", attempt(iso(3, 10), iso(3, 11))),
                   "passport": {"attempts": 5, "environment": {}}},
}


def test_a_ragged_record_is_noted_after_the_table_and_the_others_listed_exit_0(monkeypatch, capsys):
    served(monkeypatch, RAGGED)
    client = PagedClient([run_info(run_id) for run_id in RAGGED])
    assert goodput.main(["--local"], client=client) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    text = " ".join(out.split())
    assert "good-run" in out and "Goodput ledger of 1 run(s)" in text
    assert "run no-start (cut-short): record unreadable (ValueError: attempt 1: started_at: missing): skipped" in text
    assert "run garbage (hand-edited): record unreadable (AttributeError:" in text
    assert "run bad-phases (bad-phases): record unreadable (ValueError: attempt 1: phases.step='an hour'" in text
    assert "run not-a-list (not-a-list): record unreadable (TypeError: passport.attempts is a int" in text
    assert text.index("total by bucket") < text.index("record unreadable")  # after the table
    found = out_json(capsys, ["--local"], client=PagedClient([run_info(run_id) for run_id in RAGGED]))
    assert [r["run_id"] for r in found["runs"]] == ["good"]
    assert {s["run_id"] for s in found["skipped"]} == {"no-start", "garbage", "bad-phases", "not-a-list"}
    assert all(set(s) == {"run_id", "run_name", "reason"} for s in found["skipped"])


def test_every_record_ragged_still_exits_0_with_the_notes(monkeypatch, capsys):
    bad = {k: v for k, v in RAGGED.items() if k != "good"}
    served(monkeypatch, bad)
    assert goodput.main(["--local"], client=PagedClient([run_info(run_id) for run_id in bad])) == 0
    out = capsys.readouterr().out
    assert out.startswith("No recorded runs with attempts") and out.count("record unreadable") == 4
    assert goodput.main(["--local", "--csv"], client=PagedClient([run_info(run_id) for run_id in bad])) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["run_id,run_name,queue,started_at,bucket,usd,share,gpu_hours"]
    assert err.count("record unreadable") == 4  # the CSV stays parseable; the notes go to stderr


def test_a_run_that_vanished_between_the_search_and_its_read_is_noted(monkeypatch, capsys):
    def run_record(client, run_id, *args, **kwargs):
        raise runs_ops.RunsError(f"no run {run_id} in this store (./platform runs list --local shows the runs)")

    monkeypatch.setattr(goodput, "run_record", run_record)
    found = out_json(capsys, ["--local"], client=PagedClient([run_info("gone")]))
    assert found["runs"] == [] and found["skipped"][0]["reason"].startswith("no run gone in this store")


# --- 4: crashed runs counted -----------------------------------------------------------------------------------------

def crashed_record(run_id, last_seen, *, outcome="running"):
    last = attempt(iso(3, 10), last_seen, outcome=outcome, lifecycle="on-demand")
    last["phases"] = {"step": 1800.0, "since_checkpoint": 600.0}
    return {"format": 2, "run_id": run_id, "run_name": "crashed", "experiment": "training", "status": "RUNNING",
            "checkpoint_uri": None, "passport": {"queue": "training", "environment": {"AWS_REGION": "us-east-1"},
                                                 "attempts": [last]}, "metrics": {}}


def mlflow_run(client, checkpoint_uri, name="crashed"):
    experiment = client.get_experiment_by_name("training") or client.get_experiment(
        client.create_experiment("training"))
    return client.create_run(experiment.experiment_id, run_name=name,
                             tags={"ml_platform.checkpoint_uri": checkpoint_uri}).info.run_id


def test_a_crashed_runs_record_is_read_from_next_to_its_checkpoints_and_its_attempt_ends_lost(tmp_path, mlflow_store,
                                                                                              capsys):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_store)
    checkpoints = tmp_path / "checkpoints" / "crashed"
    run_id = mlflow_run(client, str(checkpoints))
    checkpoints.mkdir(parents=True)
    (checkpoints / "passport.json").write_text(json.dumps(crashed_record(run_id, iso(3, 10, minute=40))))
    client.set_terminated(run_id, "FAILED")  # what the job's end marks, or Batch's failure seen by nobody
    shown = runs_ops.run_record(client, run_id, "--local")
    assert shown["record_from"] == "checkpoints" and shown["record_note"] is None
    assert shown["passport"]["attempts"][0]["outcome"] == "running"  # the record as it lies
    assert shown["ledger"]["buckets"]["lost"]["gpu_hours"] == pytest.approx(600 / 3600, abs=1e-4)
    assert "MLflow's run is FAILED but its last attempt never recorded an end" in shown["ledger"]["notes"][0]
    found = out_json(capsys, ["--local"], client=client)
    [run] = found["runs"]
    assert run["run_id"] == run_id and run["ledger"]["gpu_hours"] == pytest.approx(40 / 60, abs=1e-4)
    # MLflow's own store takes the month's filter (attributes.start_time) and its page tokens
    later = out_json(capsys, ["--local", "--month", "2026-11"], client=client)["runs"]
    assert [r["run_id"] for r in later] == ([run_id] if client.get_run(run_id).info.start_time < DEC * 1000 else [])
    assert run["ledger"]["buckets"]["lost"]["gpu_hours"] == pytest.approx(600 / 3600, abs=1e-4)


def test_a_running_run_not_recorded_for_hours_is_taken_as_ended_a_recent_one_as_running(tmp_path, mlflow_store,
                                                                                       capsys):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_store)
    checkpoints = tmp_path / "silent"
    run_id = mlflow_run(client, str(checkpoints), "silent")  # MLflow: RUNNING, no passport artifact
    checkpoints.mkdir()
    (checkpoints / "passport.json").write_text(json.dumps(crashed_record(run_id, iso(3, 10, minute=40))))
    seen = datetime.fromisoformat(iso(3, 10, minute=40)).timestamp()
    [run] = out_json(capsys, ["--local"], client=client, now=seen + (runs_ops.STALE_AFTER_HOURS + 1) * 3600)["runs"]
    assert run["ledger"]["buckets"]["lost"]["gpu_hours"] == pytest.approx(600 / 3600, abs=1e-4)
    assert any("has not recorded for 7 h while MLflow's run is still RUNNING" in note for note in run["ledger"]["notes"])
    [run] = out_json(capsys, ["--local"], client=client, now=seen + 600)["runs"]
    assert run["ledger"]["buckets"]["lost"]["gpu_hours"] == 0
    assert any("still running: billed to the last record" in note for note in run["ledger"]["notes"])


class Session:
    """ENV's boto3 Session as goodput uses it: S3 (moto's, in-process) and EC2 (``ec2``, a fake)."""

    def __init__(self, ec2=None):
        self.ec2, self.asked = ec2, []

    def client(self, name, region_name=None):
        self.asked.append((name, region_name))
        if name == "ec2":
            return self.ec2
        if name == "s3":  # moto's, inside the tests' mock_aws (never a real endpoint)
            return boto3.client(name, region_name="us-east-1")
        if name == "cloudwatch":  # no GPU datapoints: every instance's end unknown
            return NoMetrics()
        if name == "batch":  # no job descriptions: every running attempt stays billed to its last record
            return NoJobs()
        raise AssertionError(f"goodput asked for a {name} client: a test session has none (no real AWS)")


class NoJobs:
    def describe_jobs(self, jobs):
        return {"jobs": []}


class NoMetrics:
    def get_metric_data(self, **kwargs):
        return {"MetricDataResults": []}


def test_an_environments_crashed_run_is_read_from_s3_through_its_session(mlflow_store, capsys):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_store)
    run_id = mlflow_run(client, "s3://runs/checkpoints/training/crashed/")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="runs")
        s3.put_object(Bucket="runs", Key="checkpoints/training/crashed/passport.json",
                      Body=json.dumps(crashed_record(run_id, iso(3, 10, minute=40), outcome="failed")).encode())
        assert runs_ops.run_record(client, run_id, "dev")["record_note"] == (
            "its record next to the checkpoints (s3://runs/checkpoints/training/crashed/) is read for ENV only (S3)")
        found = out_json(capsys, ["dev"], client=client, session=Session())
    [run] = found["runs"]
    assert run["ledger"]["buckets"]["lost"]["gpu_hours"] == pytest.approx(600 / 3600, abs=1e-4)


# --- 5: Spot at the price paid ---------------------------------------------------------------------------------------

class EC2:
    """describe_spot_price_history's paginator over ``history`` per (type, zone), two pages each; each paginate kept."""

    def __init__(self, history, error=None):
        self.history, self.error, self.calls = history, error, []

    def get_paginator(self, operation):
        assert operation == "describe_spot_price_history"
        ec2 = self

        class Paginator:
            def paginate(self, **request):
                ec2.calls.append(request)
                if ec2.error:
                    raise ClientError({"Error": {"Code": ec2.error, "Message": "no"}}, "DescribeSpotPriceHistory")
                entries = [{"Timestamp": datetime.fromisoformat(when), "SpotPrice": price, "InstanceType": t,
                            "AvailabilityZone": z, "ProductDescription": "Linux/UNIX"}
                           for (t, z), points in ec2.history.items() for when, price in points
                           if t == request["InstanceTypes"][0] and z == request["AvailabilityZone"]]
                return iter([{"SpotPriceHistory": entries[:1]}, {"SpotPriceHistory": entries[1:]}])

        return Paginator()


HISTORY = {("g5.xlarge", "us-east-1a"): [(iso(1, 0, month=10), "0.5"), (iso(3, 11), "1.0")]}
SPOT_RUNS = {
    # 10:00-12:00 on the 3rd: an hour at 0.5, an hour at 1.0
    "a": record("a", attempt(iso(3, 10), iso(3, 12), availability_zone="us-east-1a")),
    # the zone in the host record only: an hour at 1.0
    "b": record("b", attempt(iso(4, 10), iso(4, 11), host={"availability_zone": "us-east-1a"})),
    "no-zone": record("no-zone", attempt(iso(5, 10), iso(5, 11))),
}


def test_spot_is_priced_from_its_zones_price_history_one_call_per_type_and_zone(monkeypatch, capsys):
    served(monkeypatch, SPOT_RUNS)
    ec2 = EC2(HISTORY)
    session = Session(ec2)
    found = out_json(capsys, ["dev"], client=PagedClient([run_info(k) for k in SPOT_RUNS]), session=session)
    usd = {r["run_id"]: r["ledger"]["paid_usd"] for r in found["runs"]}
    assert usd["a"] == pytest.approx(1.5) and usd["b"] == pytest.approx(1.0)
    assert usd["no-zone"] == pytest.approx(SPOT, abs=1e-4)  # the list price
    [call] = ec2.calls
    assert call["InstanceTypes"] == ["g5.xlarge"] and call["AvailabilityZone"] == "us-east-1a"
    assert call["ProductDescriptions"] == ["Linux/UNIX"]
    assert call["StartTime"] == datetime.fromisoformat(iso(3, 10)) and call["EndTime"] == datetime.fromisoformat(
        iso(4, 11))
    assert ("ec2", "us-east-1") in session.asked
    notes = " ".join(found["notes"])
    assert "2 Spot attempt(s) at the price paid" in notes
    assert "1 Spot attempt(s) without an Availability Zone in their record: at the list price" in notes
    assert any("Spot price history us-east-1a" in n for r in found["runs"] for n in r["ledger"]["notes"])


def test_spot_of_an_attempt_crossing_the_month_is_priced_over_its_part_inside_it(monkeypatch, capsys):
    records = {"crossing": record("crossing", attempt(iso(31, 23, month=10), iso(1, 1), availability_zone="us-east-1a"))}
    served(monkeypatch, records)
    history = {("g5.xlarge", "us-east-1a"): [(iso(1, 0, month=10), "0.5"), (iso(1, 0), "1.0")]}
    found = out_json(capsys, ["dev", "--month", "2026-11"], client=PagedClient([run_info("crossing")]),
                     session=Session(EC2(history)))
    assert found["runs"][0]["ledger"]["paid_usd"] == pytest.approx(1.0)  # November's hour, at November's price


def test_without_the_permission_spot_stays_at_the_list_price_and_one_note_names_the_action(monkeypatch, capsys):
    served(monkeypatch, SPOT_RUNS)
    ec2 = EC2(HISTORY, error="UnauthorizedOperation")
    found = out_json(capsys, ["dev"], client=PagedClient([run_info(k) for k in SPOT_RUNS]), session=Session(ec2))
    assert len(ec2.calls) == 1
    assert [n for n in found["notes"] if "ec2:DescribeSpotPriceHistory" in n] == [
        "Spot attempts at the list price (not the price paid): the credentials lack ec2:DescribeSpotPriceHistory "
        "(UnauthorizedOperation)"]
    assert {r["run_id"]: r["ledger"]["paid_usd"] for r in found["runs"]}["a"] == pytest.approx(2 * SPOT, abs=1e-4)


def test_local_prices_spot_at_the_list_price_and_says_so(monkeypatch, capsys):
    served(monkeypatch, SPOT_RUNS)
    found = out_json(capsys, ["--local"], client=PagedClient([run_info(k) for k in SPOT_RUNS]))
    assert found["notes"] == ["--local reads no Spot price history: Spot attempts at the list price"]
    assert {r["run_id"]: r["ledger"]["paid_usd"] for r in found["runs"]}["a"] == pytest.approx(2 * SPOT, abs=1e-4)


# --- 6: GPU-hours ----------------------------------------------------------------------------------------------------

def test_an_eight_gpu_hour_is_eight_gpu_hours_in_the_table_json_and_csv(monkeypatch, capsys):
    eight = attempt(iso(3, 10), iso(3, 11), lifecycle="on-demand", instance_type="p4d.24xlarge",
                    environment={"gpu": {"count": 8}})
    served(monkeypatch, {"big": record("big", eight, name="eight-gpus")})
    assert goodput.main(["--local"], client=PagedClient([run_info("big")])) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("  eight-gpus"))
    assert row.split()[1:5] == ["8.000", "GPU-h", f"{hourly_usd(PRICES, 'p4d.24xlarge', 'on-demand'):.2f}", "USD"]
    assert max(len(line) for line in out.splitlines()) <= 100
    found = out_json(capsys, ["--local"], client=PagedClient([run_info("big")]))
    assert found["runs"][0]["ledger"]["gpu_hours"] == 8.0
    assert found["runs"][0]["ledger"]["buckets"]["productive"]["gpu_hours"] == 8.0


def test_large_figures_never_widen_a_row_past_100_columns():
    from ml_platform_job.goodput import Ledger

    huge = Ledger({**dict.fromkeys(goodput.BUCKETS, 0.0), "productive": 3600.0 * 123456.0},
                  {**dict.fromkeys(goodput.BUCKETS, 0.0), "productive": 98765432.1}, 1)
    runs = [{"run_id": "r", "run_name": "a-very-long-run-name-indeed", "ledger": huge, "notes": []}]
    assert max(len(line) for line in goodput.format_table(runs, "the given store").splitlines()) <= 100


def test_an_error_of_the_store_is_one_line():
    from mlflow.exceptions import MlflowException

    class Refusing(PagedClient):
        def search_runs(self, *args, **kwargs):
            raise MlflowException("INVALID_PARAMETER_VALUE: the filter\nis not\nvalid")

    with pytest.raises(SystemExit) as exit:
        goodput.main(["--local", "--month", "2026-11"], client=Refusing([]))
    assert str(exit.value.code).startswith("error: the given store answered with an error: INVALID_PARAMETER_VALUE")
    assert len(str(exit.value.code).splitlines()) == 1
