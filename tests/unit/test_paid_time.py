"""Paid time from the instance's boot to its end, as the job and the operator see it: the instance's own records
(ml_platform_job.host: kernel boot, image pull, the jobs before this one on the instance), the attempt's start at the
process's start, a crashed attempt recorded as failed, and the instance's end from its GPU metrics
(ops/instance_records.py)."""

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ml_platform_job import host
from ops import instance_records

ROOT = Path(__file__).resolve().parents[2]


def iso(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def test_the_kernels_boot_and_the_processs_start_come_from_proc(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1796208204\nprocesses 5\n")
    assert host.booted_at(str(stat)) == 1796208204.0
    assert host.booted_at(str(tmp_path / "absent")) is None
    started = host.process_started_at()  # this test's own process, on Linux
    assert started is None or started <= datetime.now(timezone.utc).timestamp()


def test_off_the_platforms_instances_there_is_no_host_record(tmp_path):
    """A laptop's boot is no instance's: without the bootstrap's instance-id file nothing is recorded."""
    assert host.host_record({}, job="run#1", started=1000.0, run_dir=str(tmp_path)) is None
    assert not (tmp_path / host.JOBS_FILE).exists()


def test_the_first_job_on_an_instance_pays_its_boot_and_a_later_one_only_the_wait_since_the_previous(tmp_path):
    (tmp_path / host.INSTANCE_ID_FILE).write_text("i-0abc\n")
    (tmp_path / host.AVAILABILITY_ZONE_FILE).write_text("us-east-1b\n")
    stat = tmp_path / "stat"
    stat.write_text("btime 1000\n")
    first = host.host_record({}, job="a#1", started=1200.0, run_dir=str(tmp_path), stat=str(stat))
    assert first["instance_id"] == "i-0abc" and first["availability_zone"] == "us-east-1b"
    assert first["first_on_instance"] is True and first["previous_job_ended_at"] is None
    assert first["booted_at"] == iso(1000)
    # While job a runs, a second job starts on the same instance: the instance was busy until now.
    busy = host.host_record({}, job="b#1", started=1500.0, run_dir=str(tmp_path), stat=str(stat))
    assert busy["first_on_instance"] is False and busy["previous_job_ended_at"] == iso(1500)
    host.note_job(str(tmp_path), "a#1", "end", 1800.0)
    host.note_job(str(tmp_path), "b#1", "end", 1900.0)
    (tmp_path / host.JOBS_FILE).open("a").write('{"job": "cut sh')  # a line a crash cut short is skipped
    later = host.host_record({}, job="c#1", started=2500.0, run_dir=str(tmp_path), stat=str(stat))
    assert later["first_on_instance"] is False and later["previous_job_ended_at"] == iso(1900)


def test_the_image_pull_and_the_containers_start_come_from_the_ecs_task_metadata(monkeypatch):
    answers = {"http://meta/task": {"PullStartedAt": "2026-11-03T10:00:05.123456789Z", "TaskARN": "arn:task/1"},
               "http://meta": {"StartedAt": "2026-11-03T10:01:00Z"}}
    monkeypatch.setattr(host, "_metadata", lambda url: answers.get(url))
    times = host.task_times({"ECS_CONTAINER_METADATA_URI_V4": "http://meta"})
    assert times["image_pull_started_at"] == datetime(2026, 11, 3, 10, 0, 5, 123456, timezone.utc).timestamp()
    assert times["container_started_at"] == datetime(2026, 11, 3, 10, 1, tzinfo=timezone.utc).timestamp()
    assert times["task_arn"] == "arn:task/1"
    assert host.task_times({}) == {"image_pull_started_at": None, "container_started_at": None, "task_arn": None}


SCRIPT = textwrap.dedent("""
    import sys
    from ml_platform_job.tracking import TrackedRun
    run = TrackedRun.start(params={"lr": 0.1}, seed=1)
    with run.clock.step():
        pass
    run.checkpointed(step=1)
    how = sys.argv[1]
    if how == "raise":
        raise RuntimeError("CUDA out of memory")
    if how == "exit":
        sys.exit(3)
    if how == "sigterm":
        import os, signal
        os.kill(os.getpid(), signal.SIGTERM)
    run.finish()
""")


@pytest.mark.parametrize("how, outcome, reason", [
    ("raise", "failed", "the process ended in RuntimeError: CUDA out of memory"),
    ("exit", "failed", "the process exited without finish() or stop()"),
    ("sigterm", "failed", "the process ended on a SIGTERM with no handler (nothing saved since the last checkpoint)"),
    ("finish", "finished", None),
])
def test_a_crashed_attempt_is_recorded_as_failed_with_its_cost(tmp_path, how, outcome, reason):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {"PATH": "/usr/bin:/bin", "ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "checkpoints") + "/",
           "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script), how], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == {"raise": 1, "exit": 3, "finish": 0, "sigterm": -15}[how], done.stderr
    record = json.loads((tmp_path / "checkpoints" / "passport.json").read_text())
    attempt = record["passport"]["attempts"][-1]
    assert attempt["outcome"] == outcome and attempt["reason"] == reason
    assert record["status"] == {"failed": "FAILED", "finished": "FINISHED"}[outcome]
    assert attempt["ended_at"] >= attempt["started_at"] and record["cost_usd"] is not None
    assert "tracking" in attempt["phases"]  # the record's own writes are timed


def test_the_attempt_starts_at_the_processs_start_not_after_the_passport(tmp_path):
    """Imports, the dataset's fingerprint and the passport are paid time: the attempt starts with the process."""
    script = tmp_path / "job.py"
    script.write_text("import time\ntime.sleep(1.0)\n" + SCRIPT)
    env = {"PATH": "/usr/bin:/bin", "ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "checkpoints") + "/",
           "HOME": str(tmp_path)}
    before = datetime.now(timezone.utc)
    subprocess.run([sys.executable, str(script), "finish"], env=env, check=True, capture_output=True, timeout=120)
    attempt = json.loads((tmp_path / "checkpoints" / "passport.json").read_text())["passport"]["attempts"][-1]
    started = datetime.fromisoformat(attempt["started_at"])
    # The process slept a second before TrackedRun.start: the attempt's start is before that second.
    assert (started - before).total_seconds() < 0.9
    assert attempt["phases"]["startup"] >= 1.0  # from the process's start to the first step


class CloudWatch:
    """get_metric_data answering from per-instance timestamps, in pages of one result."""

    def __init__(self, stamps):
        self.stamps, self.calls = stamps, []

    def get_metric_data(self, MetricDataQueries, StartTime, EndTime, NextToken=None):
        self.calls.append((MetricDataQueries, StartTime, EndTime))
        results = []
        for query in MetricDataQueries:
            dims = {d["Name"]: d["Value"] for d in query["MetricStat"]["Metric"]["Dimensions"]}
            assert query["MetricStat"]["Metric"]["MetricName"] == instance_records.METRIC
            assert query["MetricStat"]["Stat"] == "Maximum"
            points = [(t, v) for t, v in self.stamps.get(dims["InstanceId"], [])
                      if StartTime.timestamp() <= t < EndTime.timestamp()]
            results.append({"Id": query["Id"], "Timestamps": [datetime.fromtimestamp(t, timezone.utc) for t, _ in points],
                            "Values": [v for _, v in points]})
        index = int(NextToken or 0)
        page = {"MetricDataResults": results[index:index + 1]}
        if index + 1 < len(results):
            page["NextToken"] = str(index + 1)
        return page


def record(*attempts):
    return {"passport": {"attempts": list(attempts)}}


def attempt(instance, start, end, outcome="finished"):
    return {"host": {"instance_id": instance}, "started_at": iso(start), "ended_at": iso(end),
            "last_seen_at": iso(end), "outcome": outcome}


def test_scale_in_runs_from_the_last_job_on_an_instance_to_its_last_gpu_datapoint():
    now = 2_000_000_000.0
    day = now - 86400
    runs = [record(attempt("i-1", day, day + 3600)),           # another run's later job on i-1 ends the first's claim
            record(attempt("i-1", day + 3700, day + 7200), attempt("i-2", day, day + 600)),
            record(attempt("i-3", day, day + 60), attempt("i-4", day, day + 60))]
    # i-1 idles (GPUs at 0%) until 5 minutes after its last job; i-2 until 11 minutes after; i-3 never publishes
    # after its job; i-4 gets a job of a run the report did not read 2 minutes after (its GPUs busy): no scale-in.
    idle = lambda start, minutes: [(start + 60 * k, 0.0) for k in range(minutes)]  # noqa: E731
    cloudwatch = CloudWatch({"i-1": idle(day + 7200, 5), "i-2": idle(day + 600, 11), "i-3": [(day, 90.0)],
                             "i-4": idle(day + 60, 2) + [(day + 180, 97.0), (day + 240, 0.0)]})
    last = instance_records.last_jobs(runs)
    assert last["i-1"] is runs[1]["passport"]["attempts"][0]
    ends = instance_records.instance_ends(cloudwatch, "training", {
        i: datetime.fromisoformat(a["ended_at"]).timestamp() for i, a in last.items()}, now=now)
    notes = instance_records.scale_in(runs, ends)
    assert runs[1]["passport"]["attempts"][0]["scale_in_seconds"] == 300.0  # last datapoint's minute ends at +5 min
    assert runs[1]["passport"]["attempts"][1]["scale_in_seconds"] == 660.0
    assert "scale_in_seconds" not in runs[0]["passport"]["attempts"][0]
    assert runs[2]["passport"]["attempts"][1]["scale_in_seconds"] == 0.0
    assert notes == ["instance i-3: no GPU metric after its last job: its scale-in is not counted"]
    assert len(cloudwatch.calls) == 4  # paged: one result a page


def test_older_instances_are_read_at_the_period_cloudwatch_still_keeps():
    assert [instance_records.period_for(d * 86400) for d in (1, 20, 100)] == [60, 300, 3600]


def test_the_metric_read_is_the_one_the_queues_instances_publish():
    from ml_platform_constructs.training.instance_bootstrap import GPU_NAMESPACE, gpu_agent_config

    config = gpu_agent_config(("QueueName", "training"), static=True, per_instance_in_group=True)
    assert instance_records.GPU_NAMESPACE == GPU_NAMESPACE == config["metrics"]["namespace"]
    assert ["QueueName", "InstanceId"] in config["metrics"]["aggregation_dimensions"]
    assert "utilization_gpu" in {m["name"] if isinstance(m, dict) else m
                                 for m in config["metrics"]["metrics_collected"]["nvidia_gpu"]["measurement"]}
    assert instance_records.METRIC == "nvidia_smi_utilization_gpu"


def test_a_boot_long_before_the_job_is_not_its_and_a_busy_instance_leaves_it_its_image_pull():
    from ml_platform_job.goodput import BOOT_TO_FIRST_JOB_SECONDS, paid_span

    def attempt_on(**host_fields):
        return {"number": 1, "outcome": "finished", "started_at": iso(10_000), "ended_at": iso(20_000),
                "host": {"instance_id": "i-1", "image_pull_started_at": iso(9_700), **host_fields}}

    # Booted 5 minutes before the image pull: the first job pays the boot.
    assert paid_span(attempt_on(booted_at=iso(9_400), first_on_instance=True)) == (9_400, 20_000)
    # Booted two hours before: something no record names ran there (a job without the helper, a fleet's host).
    late = 9_700 - BOOT_TO_FIRST_JOB_SECONDS - 1
    assert paid_span(attempt_on(booted_at=iso(late), first_on_instance=True)) == (9_700, 20_000)
    # Another job busy on the instance until this one started: its image pull is still its own.
    assert paid_span(attempt_on(booted_at=iso(1_000), first_on_instance=False,
                                previous_job_ended_at=iso(10_000))) == (9_700, 20_000)
    # The previous job ended before the pull: the wait is this job's idle.
    assert paid_span(attempt_on(first_on_instance=False, previous_job_ended_at=iso(9_000))) == (9_000, 20_000)


def test_the_instances_job_lines_are_writable_by_every_jobs_user(tmp_path):
    host.note_job(str(tmp_path), "a#1", "start", 1.0)
    assert (tmp_path / host.JOBS_FILE).stat().st_mode & 0o777 == 0o666


def test_an_attempt_that_never_recorded_its_end_ends_where_aws_batch_stopped_it():
    from ops.runs import BatchEnds, settled

    class Batch:
        def __init__(self):
            self.calls = 0

        def describe_jobs(self, jobs):
            self.calls += 1
            return {"jobs": [{"jobId": jobs[0], "status": "FAILED", "statusReason": "Essential container exited",
                              "attempts": [{"stoppedAt": 1_000_000}, {"stoppedAt": 2_000_000,
                                                                       "statusReason": "OutOfMemoryError: Container killed"}]}]}

    passport = {"attempts": [{"number": 1, "outcome": "stopped"},
                             {"number": 2, "outcome": "running", "job_id": "job-1", "batch_attempt": 2,
                              "started_at": iso(1500), "last_seen_at": iso(1800)}]}
    batch = Batch()
    ended, notes = settled(passport, "RUNNING", now=1900.0, batch_end=BatchEnds(batch))
    last = ended["attempts"][-1]
    assert last["outcome"] == "lost" and last["ended_at"] == iso(2000) and last["end_known"] is True
    assert "OutOfMemoryError" in last["reason"] and "AWS Batch stopped it" in notes[0]
    assert passport["attempts"][-1]["outcome"] == "running"  # the caller's record is not changed
    settled(passport, "RUNNING", now=1900.0, batch_end=BatchEnds(batch))
    assert batch.calls == 2  # one call per job and report

    class Refused:
        def describe_jobs(self, jobs):
            raise PermissionError("AccessDenied")

    refused = BatchEnds(Refused())
    same, notes = settled(passport, "RUNNING", now=1900.0, batch_end=refused)
    assert same is passport and notes == [] and "grant batch:DescribeJobs" in refused.notes[0]


def test_phases_timed_twice_are_scaled_to_the_jobs_span_with_a_note_not_a_traceback():
    from ml_platform_job.goodput import run_ledger
    from ml_platform_job.prices import load_prices

    record = {"number": 1, "outcome": "finished", "started_at": iso(0), "ended_at": iso(120),
              "instance_type": "g5.xlarge", "lifecycle": "on-demand",
              # 120 s of job, 140 s of phases: 20 s of logging counted as tracking and inside the steps' time
              "phases": {"step": 120.0, "data_wait": 20.0, "tracking": 20.0}}
    found, notes = run_ledger([record], load_prices("us-east-1"))
    assert abs(found.paid_seconds - 120) < 1e-6 and abs(found.seconds["other"]) < 1e-6
    assert abs(found.seconds["tracking"] - 20 * 120 / 140) < 1e-6
    assert "attempt 1: its phases add up to 20 s more than its job's span" in notes[-1]


def test_the_records_writes_between_two_steps_are_tracking_not_data_wait():
    """A hook's gap between steps is data wait until known work comes in it: slow MLflow calls there are tracking, so
    they never read as an input-bound job (DataWaitShare)."""
    from ml_platform_job.phase_clock import PhaseClock

    now = [0.0]
    clock = PhaseClock(now=lambda: now[0], wall=lambda: now[0])
    clock.switch("step")
    now[0] += 10
    clock.switch("data_wait")
    now[0] += 1
    with clock.phase("tracking"):  # log_metrics in on_step_end, after the switch
        now[0] += 4
    now[0] += 1
    clock.switch("step")
    phases = clock.summary()
    assert phases["data_wait"] == 2.0 and phases["tracking"] == 4.0 and phases["step"] == 12.0


def test_a_one_gpu_job_first_on_a_four_gpu_instance_pays_the_whole_boot_and_scale_in():
    from ml_platform_job.goodput import Attempt, attempt_ledger

    # 300 s of boot and pull, an hour of job on one GPU of four, 600 s of scale-in; 4 USD an hour for the instance.
    attempt = Attempt(paid_seconds=300 + 3600 + 600, before_job_seconds=300, step_seconds=3600, job_seconds=3600,
                      usd_per_hour=4.0, gpu_share=0.25, gpus=1)
    found = attempt_ledger(attempt)
    assert found.seconds["startup"] == 4 * 300 and found.seconds["idle"] == 4 * 600  # all four GPUs, no job on them
    assert found.seconds["productive"] == 3600  # its one GPU
    assert found.usd["startup"] + found.usd["idle"] == pytest.approx(900 / 3600 * 4.0)  # the whole rate
    assert found.usd["productive"] == pytest.approx(1.0)  # a quarter of the rate for an hour



def test_a_stop_handler_installed_after_the_run_keeps_the_sigterm_and_the_job_goes_on(tmp_path):
    """StopRequest chains to the handler before it: the run's last-resort SIGTERM handler must then do nothing, or a
    job's graceful stop (checkpoint, exit 143) would be cut short."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys
        from ml_platform_job.stop import StopRequest
        from ml_platform_job.tracking import TrackedRun
        run = TrackedRun.start(params={"lr": 0.1}, seed=1)
        stop = StopRequest(dict(os.environ)).install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
        run.stop("stop requested (SIGTERM)", saved=True)
        sys.exit(143)
    """))
    env = {"PATH": "/usr/bin:/bin", "ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "checkpoints") + "/",
           "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"), "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"),
           "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 143, done.stderr
    attempt = json.loads((tmp_path / "checkpoints" / "passport.json").read_text())["passport"]["attempts"][-1]
    assert attempt["outcome"] == "stopped"


def test_a_crashed_local_run_appears_in_goodput_local_as_lost(tmp_path, mlflow_store, capsys):
    """The whole way: a job that raises after its checkpoint records its attempt failed, in its record and in MLflow
    (the local store), and ./platform goodput --local lists the run with its steps since the checkpoint as lost."""
    from mlflow.tracking import MlflowClient

    from ops import goodput

    store = mlflow_store  # a migrated store (the session's template): the job only connects
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import time
        from ml_platform_job.tracking import TrackedRun
        run = TrackedRun.start(params={"lr": 0.1}, seed=1, run_name="crashes")
        with run.clock.step():
            time.sleep(0.05)
        run.clock.checkpoint_saved()
        run.checkpointed(step=1)
        with run.clock.step():
            time.sleep(0.3)  # after the checkpoint: lost when the job crashes
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    """))
    env = {"PATH": "/usr/bin:/bin", "ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "checkpoints") + "/",
           "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "HOME": str(tmp_path),
           "MLFLOW_TRACKING_URI": store, "MLFLOW_EXPERIMENT_NAME": "training"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 1 and "illegal memory access" in done.stderr
    client = MlflowClient(store)
    [run] = client.search_runs([client.get_experiment_by_name("training").experiment_id])
    assert run.info.status == "FAILED"
    assert goodput.main(["--local", "--json"], client=client) == 0
    [shown] = json.loads(capsys.readouterr().out)["runs"]
    assert shown["run_name"] == "crashes"
    assert shown["ledger"]["buckets"]["lost"]["gpu_hours"] * 3600 >= 0.3
