"""The stall watcher (runtime/handlers/stall_watcher.py) against the stateful Batch fake and a small CloudWatch whose metrics
come from the job's own embedded-metric lines (``ml_platform_job.health.metric_line``, as CloudWatch Logs extracts
them, visible after an ingestion delay), every request checked against botocore's model of the API: a stalled job is
stopped once and its HealthStop published once, however often the watcher runs; a healthy job, one without any
heartbeat, a young one, one in a long evaluation that still progresses, one whose metrics arrive late, and one
whose own settings allow a longer stall are never stopped."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Callable, Optional

import botocore.session
import pytest
from botocore.validate import validate_parameters

from ml_platform_constructs.runtime.handlers import stall_watcher
from ml_platform_constructs.runtime.handlers.stall_watcher import (NO_HEARTBEAT, PROGRESSING, READ_FAILED, REASON_PREFIX,
                                                          STALLED,
                                                          WATCHER_TAG, YOUNG, Settings, attempt_start, decide,
                                                          job_environment, watch)
from ml_platform_constructs.training.health_alarms import health_environment
from ml_platform_constructs.training.queue_jobs import container_environment
from ml_platform_job.health import (FIXES, HEALTH_NAMESPACE, HEARTBEAT_METRIC, MODE_ENV, RULES_ENV, STALL_ENV,
                                    STOP_METRIC, WARNING_METRIC, metric_line)
from tests.unit.batch_fake import FakeBatch

NOW = 1_900_000_020.0  # a whole minute (epoch seconds)
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
QUEUE = "training"
_SESSION = botocore.session.get_session()


def _checked(service: str, operation: str, params: dict) -> None:
    """Raises botocore's ParamValidationError for a request the real client would refuse."""
    model = _SESSION.get_service_model(service).operation_model(operation)
    validate_parameters(params, model.input_shape)


class FakeCloudWatch:
    """GetMetricData (statistic Sum per period, each metric its exact dimension set, as CloudWatch keeps them) and
    PutMetricData. ``ingest`` takes an embedded-metric line as CloudWatch Logs extracts it: every metric of each
    dimension set, at the line's Timestamp, visible ``delay`` seconds after it."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.points: list[tuple[str, str, frozenset, float, float, float]] = []
        self.published: list[dict] = []
        self.requests: list[dict] = []

    def ingest(self, line: str, delay: float = 2 * MINUTE) -> None:
        document = json.loads(line)
        at = document["_aws"]["Timestamp"] / 1000
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dimensions = frozenset((name, str(document[name])) for name in dimension_set)
                for metric in directive["Metrics"]:
                    self.points.append((directive["Namespace"], metric["Name"], dimensions, at,
                                        float(document[metric["Name"]]), at + delay))

    def get_metric_data(self, **request) -> dict:
        _checked("cloudwatch", "GetMetricData", request)
        self.requests.append(request)
        assert len(request["MetricDataQueries"]) <= 500
        # Start times under 15 days ago round down to the minute; data points only up to EndTime.
        start = request["StartTime"].timestamp() // 60 * 60
        end = request["EndTime"].timestamp()
        results = []
        for query in request["MetricDataQueries"]:
            stat = query["MetricStat"]
            assert stat["Stat"] in ("Sum", "SampleCount") and stat["Period"] % 60 == 0
            metric = stat["Metric"]
            dimensions = frozenset((d["Name"], d["Value"]) for d in metric["Dimensions"])
            buckets: dict[float, float] = {}
            for namespace, name, dims, at, value, visible in self.points:
                if (namespace, name, dims) == (metric["Namespace"], metric["MetricName"], dimensions) \
                        and start <= at < end and visible <= self.now():
                    bucket = start + (at - start) // stat["Period"] * stat["Period"]
                    buckets[bucket] = buckets.get(bucket, 0.0) + (value if stat["Stat"] == "Sum" else 1.0)
            stamps = sorted(buckets, reverse=True)  # TimestampDescending, CloudWatch's default
            results.append({"Id": query["Id"], "Label": metric["MetricName"], "StatusCode": "Complete",
                            "Timestamps": [datetime.fromtimestamp(s, timezone.utc) for s in stamps],
                            "Values": [buckets[s] for s in stamps]})
        return {"MetricDataResults": results}

    def put_metric_data(self, **request) -> dict:
        _checked("cloudwatch", "PutMetricData", request)
        for datum in request["MetricData"]:
            self.published.append({"Namespace": request["Namespace"], **datum})
        return {}


class CheckedBatch(FakeBatch):
    """The Batch fake, each of the watcher's requests checked against botocore's model; ``hung`` jobs stay RUNNING
    after TerminateJob (a container that ignores SIGTERM until ECS kills it)."""

    def __init__(self) -> None:
        super().__init__()
        self.hung: set[str] = set()

    def list_jobs(self, **request):
        _checked("batch", "ListJobs", request)
        return super().list_jobs(**request)

    def describe_jobs(self, jobs):
        _checked("batch", "DescribeJobs", {"jobs": jobs})
        assert len(jobs) <= 100
        return super().describe_jobs(jobs)

    def terminate_job(self, jobId, reason):  # noqa: N803
        _checked("batch", "TerminateJob", {"jobId": jobId, "reason": reason})
        if jobId in self.hung:
            self.calls.append(("terminate", jobId))
            self.jobs[jobId]["statusReason"] = reason
            return {}
        return super().terminate_job(jobId=jobId, reason=reason)

    def tag_resource(self, resourceArn, tags):  # noqa: N803
        _checked("batch", "TagResource", {"resourceArn": resourceArn, "tags": tags})
        return super().tag_resource(resourceArn=resourceArn, tags=tags)

    def terminated(self) -> list[str]:
        return [call[1] for call in self.calls if call[0] == "terminate"]


class World:
    """A queue, its jobs (with the job definition's environment, as the construct builds it) and their heartbeats."""

    def __init__(self, **queue_settings) -> None:
        self.clock = [NOW]
        self.batch = CheckedBatch()
        self.cloudwatch = FakeCloudWatch(lambda: self.clock[0])
        self.queue_arn = self.batch.add_queue("training-queue", tags={})
        self.definition = self.batch.register("training-definition")
        self.health = health_environment(**queue_settings)
        self.environment = container_environment(QUEUE, None, **{
            "health_mode": queue_settings.get("mode", "stop"),
            "stalled_minutes": queue_settings.get("stall_minutes", 30),
            "health_rules": queue_settings.get("rules")})
        self.settings = Settings.from_env({"JOB_QUEUES": self.queue_arn, "QUEUE_NAME": QUEUE, **self.health})

    def job(self, name: str, *, started: float, beats: tuple = (), every: float = MINUTE, count: int = 20,
            delay: float = 2 * MINUTE, environment: Optional[dict] = None, alive: Optional[float] = None) -> str:
        """A RUNNING job started at ``started`` that sent a heartbeat every ``every`` seconds in each (from, to)
        of ``beats``, each ``count`` steps, visible ``delay`` after it; ``alive``: when its helper's line of 0 was
        printed (None: no such line, a script without the helper)."""
        env = {**self.environment, **(environment or {})}
        job_id = self.batch.add_job(name, self.queue_arn, "RUNNING", definition=self.definition,
                                    environment=tuple(env.items()), started_at=int(started * 1000))
        if alive is not None:
            self.cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, env["ML_PLATFORM_QUEUE_NAME"], job_id=job_id,
                                               value=0, wall=alive), delay=delay)
        for begin, end in beats:
            at = begin
            while at < end:
                self.cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, env["ML_PLATFORM_QUEUE_NAME"], job_id=job_id,
                                                   value=count, wall=at), delay=delay)
                at += every
        return job_id

    def run(self, after: float = 0.0) -> dict:
        self.clock[0] += after
        return watch(self.batch, self.cloudwatch, self.settings, now=self.clock[0])

    def stops(self) -> list[dict]:
        return [p for p in self.cloudwatch.published if p["MetricName"] == STOP_METRIC]


@pytest.fixture
def world() -> World:
    return World()


# --- the decision, a pure function --------------------------------------------------------------------------------

@pytest.mark.parametrize("running, sent, progressed, last_line, expected", [
    (20 * MINUTE, False, 0, None, YOUNG), (20 * MINUTE, True, 100, 30 * MINUTE, YOUNG),
    (3 * HOUR, False, 0, None, NO_HEARTBEAT), (3 * HOUR, True, 500, MINUTE, PROGRESSING),
    (3 * HOUR, True, 500, 50 * MINUTE, STALLED), (45 * MINUTE, True, 10, 45 * MINUTE, STALLED),
    # the helper started (its line of 0, or a save's or restore's), nothing progressed yet: 75 minutes, then stalled
    (80 * MINUTE, True, 0, 60 * MINUTE, YOUNG), (80 * MINUTE, True, 0, 75 * MINUTE, STALLED)])
def test_the_decision_waits_the_threshold_never_judges_a_job_without_heartbeat_and_stops_a_silent_one(
        running, sent, progressed, last_line, expected):
    since = math.inf if last_line is None else last_line
    assert decide(running_seconds=running, threshold_seconds=45 * MINUTE, startup_seconds=75 * MINUTE, sent=sent,
                  progressed=progressed, since_last_line=since) == expected
    # a read that did not complete (InternalError, Forbidden) is no silence: never stopped on it
    assert decide(running_seconds=running, threshold_seconds=45 * MINUTE, startup_seconds=75 * MINUTE, sent=sent,
                  progressed=progressed, since_last_line=since, complete=False) in (YOUNG, READ_FAILED)


# --- one queue, every kind of job ---------------------------------------------------------------------------------

def test_a_stalled_job_is_stopped_once_with_the_rule_and_fix_and_its_stop_published_once(world):
    stalled = world.job("stalled", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)])
    healthy = world.job("healthy", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW)])
    first = world.run()
    assert first["stopped"] == [stalled] and first[PROGRESSING] == [healthy]
    assert world.batch.terminated() == [stalled]
    job = world.batch.jobs[stalled]
    assert job["status"] == "FAILED" and job["statusReason"].startswith(f"{REASON_PREFIX} stalled")
    assert "no progress heartbeat for 61 min (limit 45)" in job["statusReason"] and "Fix: " in job["statusReason"]
    assert len(job["statusReason"]) <= 255
    assert job["tags"][WATCHER_TAG].startswith("stop stalled ")
    (stop,) = world.stops()
    assert (stop["Namespace"], stop["Value"], stop["Unit"]) == (HEALTH_NAMESPACE, 1.0, "Count")
    assert stop["Dimensions"] == [{"Name": "Queue", "Value": QUEUE}, {"Name": "Rule", "Value": "stalled"}]
    # the next runs: the job is FAILED (Batch lists it no more as RUNNING), nothing is done twice
    world.run(after=5 * MINUTE)
    world.run(after=5 * MINUTE)
    assert world.batch.terminated() == [stalled] and len(world.stops()) == 1


def test_a_job_batch_has_not_ended_yet_is_neither_stopped_nor_counted_twice(world):
    stalled = world.job("hung", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)])
    world.batch.hung.add(stalled)
    assert world.run()["stopped"] == [stalled]
    again = world.run(after=5 * MINUTE)
    assert again["already handled"] == [stalled] and again["stopped"] == []
    assert world.batch.terminated() == [stalled] and len(world.stops()) == 1


def test_jobs_that_progress_never_sent_a_heartbeat_or_are_young_are_never_stopped(world, capsys):
    ids = {
        "healthy": world.job("healthy", started=NOW - 5 * HOUR, beats=[(NOW - 5 * HOUR, NOW)]),
        "without helper": world.job("without-helper", started=NOW - 5 * HOUR),
        "young": world.job("young", started=NOW - 20 * MINUTE),
        "young after beats": world.job("young-silent", started=NOW - 40 * MINUTE,
                                       beats=[(NOW - 40 * MINUTE, NOW - 39 * MINUTE)]),
        # 50 minutes of validation: evaluation batches are progress too, a few a minute
        "long evaluation": world.job("evaluating", started=NOW - 3 * HOUR,
                                     beats=[(NOW - 3 * HOUR, NOW - 50 * MINUTE)]),
        # lines that reach CloudWatch 20 minutes late land at their own time
        "late metrics": world.job("late", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW)], delay=20 * MINUTE),
    }
    for at in range(int(NOW - 50 * MINUTE), int(NOW), 60):
        world.cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, QUEUE, job_id=ids["long evaluation"], value=3, wall=at))
    report = world.run()
    assert world.batch.terminated() == [] and world.stops() == []
    assert sorted(report[PROGRESSING]) == sorted([ids["healthy"], ids["long evaluation"], ids["late metrics"]])
    assert report[NO_HEARTBEAT] == [ids["without helper"]]
    assert sorted(report[YOUNG]) == sorted([ids["young"], ids["young after beats"]])
    out = capsys.readouterr().out
    assert f"1 running job(s) not judged: no heartbeat ({ids['without helper']})" in out


def test_a_retried_jobs_current_attempt_is_judged_on_its_own_heartbeats(world):
    # Attempt 1 sent heartbeats and was reclaimed 3 hours ago; attempt 2 has restored for 50 minutes, no step yet.
    job_id = world.job("retried", started=NOW - 5 * HOUR, beats=[(NOW - 5 * HOUR, NOW - 3 * HOUR)])
    world.batch.jobs[job_id]["attempts"] = [{"startedAt": int((NOW - 5 * HOUR) * 1000),
                                             "stoppedAt": int((NOW - 50 * MINUTE) * 1000)}]
    assert attempt_start(world.batch.jobs[job_id]) == NOW - 50 * MINUTE
    report = world.run()
    assert report[NO_HEARTBEAT] == [job_id] and world.batch.terminated() == []


def test_the_startup_allowance_runs_from_the_helpers_first_line_not_the_containers_start(world):
    # 20 minutes of data preparation before TrainingJob.start, then 56 minutes to the first step: within the job's
    # own allowance (2 x 30 minutes from the helper's start), so the watcher waits too.
    preparing = world.job("prepares", started=NOW - 76 * MINUTE, alive=NOW - 56 * MINUTE)
    report = world.run()
    assert report[YOUNG] == [preparing] and world.batch.terminated() == []


def test_the_attempt_before_a_retry_neither_starts_nor_shortens_the_retrys_allowance(world):
    # Attempt 1 progressed until 30 s before attempt 2 started; attempt 2 restores, its helper's line at its start.
    job_id = world.job("retried", started=NOW - 5 * HOUR, beats=[(NOW - 5 * HOUR, NOW - 50 * MINUTE - 30)])
    world.batch.jobs[job_id]["attempts"] = [{"startedAt": int((NOW - 5 * HOUR) * 1000),
                                             "stoppedAt": int((NOW - 50 * MINUTE) * 1000)}]
    world.cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, QUEUE, job_id=job_id, value=0, wall=NOW - 49 * MINUTE))
    assert world.run()[YOUNG] == [job_id] and world.batch.terminated() == []


def test_a_helper_line_in_the_minute_the_container_started_counts_and_a_hung_start_is_stopped(world):
    # The container started 5 s into a minute and the helper printed its line 20 s later: same minute bucket.
    hung = world.job("quick-start", started=NOW - 80 * MINUTE + 5, alive=NOW - 80 * MINUTE + 25)
    assert world.run()["stopped"] == [hung]


def test_a_save_in_progress_says_alive_and_is_not_stopped(world):
    # Progressed for two hours, then a 50-minute save: its timer prints 0 ("alive") each minute.
    saving = world.job("saving", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - 50 * MINUTE)])
    for at in range(int(NOW - 50 * MINUTE), int(NOW), 60):
        world.cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, QUEUE, job_id=saving, value=0, wall=at))
    assert world.run()[PROGRESSING] == [saving] and world.batch.terminated() == []


def test_a_metric_read_that_failed_is_no_silence(world):
    stalled = world.job("stalled", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)])
    original = world.cloudwatch.get_metric_data

    def failing(**request):
        page = original(**request)
        if request["MetricDataQueries"][0]["MetricStat"]["Period"] == 60:
            for result in page["MetricDataResults"]:
                result.update(StatusCode="InternalError", Timestamps=[], Values=[])
        return page
    world.cloudwatch.get_metric_data = failing
    report = world.run()
    assert report[READ_FAILED] == [stalled] and world.batch.terminated() == []
    world.cloudwatch.get_metric_data = original
    assert world.run(after=5 * MINUTE)["stopped"] == [stalled]


def test_a_job_hung_before_its_first_step_is_stopped_after_the_startup_allowance_and_not_before(world):
    # The helper printed its line of 0 at the start; then a restore (or NCCL's start) hung with the interpreter held.
    hung = world.job("hung-restore", started=NOW - 80 * MINUTE, alive=NOW - 79 * MINUTE)
    starting = world.job("slow-start", started=NOW - 60 * MINUTE, alive=NOW - 59 * MINUTE)
    report = world.run()
    assert report["stopped"] == [hung] and report[YOUNG] == [starting]
    assert "no progress heartbeat for over 75 min (limit 45)" in world.batch.jobs[hung]["statusReason"]
    # The same start, then progress: progressing, whatever its first minutes were.
    stepping = world.job("stepping", started=NOW - 80 * MINUTE, alive=NOW - 79 * MINUTE,
                         beats=[(NOW - 70 * MINUTE, NOW)])
    assert world.run(after=MINUTE)[PROGRESSING] == [stepping]


def test_a_jobs_own_settings_decide_its_threshold_and_whether_it_is_judged(world):
    # silent for an hour: past the queue's 30 + 15 minutes, within this job's own 2 hours + 15
    patient = world.job("patient", started=NOW - 4 * HOUR, beats=[(NOW - 4 * HOUR, NOW - HOUR)],
                        environment={STALL_ENV: "7200"})
    unwatched = world.job("unwatched", started=NOW - 4 * HOUR, beats=[(NOW - 4 * HOUR, NOW - HOUR)],
                          environment={RULES_ENV: "stalled=off"})
    off = world.job("off", started=NOW - 4 * HOUR, beats=[(NOW - 4 * HOUR, NOW - HOUR)],
                    environment={MODE_ENV: "off"})
    report = world.run()
    assert report[PROGRESSING] == [patient] and sorted(report["stall rule off"]) == sorted([unwatched, off])
    assert world.batch.terminated() == []


def test_in_warn_mode_a_stalled_job_trains_on_and_its_warning_is_published_once():
    world = World(mode="warn")
    stalled = world.job("stalled", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)])
    assert world.run()["warned"] == [stalled]
    world.run(after=5 * MINUTE)
    assert world.batch.terminated() == [] and world.batch.jobs[stalled]["status"] == "RUNNING"
    assert [p["MetricName"] for p in world.cloudwatch.published] == [WARNING_METRIC]
    assert world.batch.jobs[stalled]["tags"][WATCHER_TAG].startswith("warn stalled ")


def test_a_bad_setting_in_a_jobs_environment_leaves_it_alone(world):
    odd = world.job("odd", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)],
                    environment={STALL_ENV: "soon"})
    assert world.run()["bad settings"] == [odd] and world.batch.terminated() == []


def test_the_heartbeat_is_read_per_minute_over_the_startup_window_and_per_hour_since_the_attempt_started(world):
    job_id = world.job("reader", started=NOW - 3 * DAY - 30, beats=[(NOW - 3 * DAY, NOW)], every=HOUR)
    world.run()
    recent, sent = world.cloudwatch.requests
    for request, period, stat in ((recent, 60, "Sum"), (sent, 3600, "SampleCount")):
        (query,) = request["MetricDataQueries"]
        assert query["MetricStat"]["Metric"] == {"Namespace": HEALTH_NAMESPACE, "MetricName": HEARTBEAT_METRIC,
                                                 "Dimensions": [{"Name": "Queue", "Value": QUEUE},
                                                                {"Name": "JobId", "Value": job_id}]}
        assert (query["MetricStat"]["Period"], query["MetricStat"]["Stat"]) == (period, stat)
        assert request["EndTime"].timestamp() == NOW
    # per minute only over the longest window a job needs (2 x 30 + 15 minutes and one) and an hour, whatever the
    # job's age
    assert recent["StartTime"].timestamp() == NOW - 136 * MINUTE
    assert sent["StartTime"].timestamp() == NOW - 3 * DAY - 60


def test_many_jobs_are_read_500_queries_a_call_and_described_100_at_a_time(world):
    for i in range(620):
        world.job(f"j{i}", started=NOW - 3 * HOUR, beats=[(NOW - 10 * MINUTE, NOW)], every=5 * MINUTE)
    report = world.run()
    assert len(report[PROGRESSING]) == 620
    assert [len(r["MetricDataQueries"]) for r in world.cloudwatch.requests] == [500, 120, 500, 120]


def test_next_token_pages_are_followed():
    calls = []

    class Paged:
        def get_metric_data(self, **request):
            calls.append(request.get("NextToken"))
            stamp = datetime.fromtimestamp(NOW - (5 * MINUTE if "NextToken" in request else HOUR), timezone.utc)
            page = {"MetricDataResults": [{"Id": "job0", "Timestamps": [stamp], "Values": [4.0]}]}
            return page if "NextToken" in request else {**page, "NextToken": "more"}

    judged = stall_watcher.Judged("job-9", "n", "arn", QUEUE, NOW - 3 * HOUR, 2700.0, "stop")
    series = stall_watcher.read_series(Paged(), [judged], start=NOW - 3 * HOUR, end=NOW, period=60, stat="Sum")
    assert calls == [None, "more"] and sorted(series["job-9"]) == [(NOW - HOUR, 4.0), (NOW - 5 * MINUTE, 4.0)]


def test_a_multi_node_parents_environment_is_its_first_node_ranges():
    job = {"nodeProperties": {"nodeRangeProperties": [{"targetNodes": "0:", "container": {
        "environment": [{"name": STALL_ENV, "value": "3600"}]}}]}}
    assert job_environment(job) == {STALL_ENV: "3600"}
    assert job_environment({}) == {}


def test_the_handler_reads_its_settings_from_the_environment(world, monkeypatch):
    stalled = world.job("stalled", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)])
    monkeypatch.setenv("JOB_QUEUES", world.queue_arn)
    monkeypatch.setenv("QUEUE_NAME", QUEUE)
    for name, value in world.health.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(stall_watcher.time, "time", lambda: NOW)
    report = stall_watcher.handler({}, None, batch=world.batch, cloudwatch=world.cloudwatch)
    assert report["stopped"] == [stalled]


def test_the_fix_in_the_log_is_the_job_sides(world, capsys):
    world.job("stalled", started=NOW - 3 * HOUR, beats=[(NOW - 3 * HOUR, NOW - HOUR)])
    world.run()
    assert f"Fix: {FIXES['stalled']}" in capsys.readouterr().out
