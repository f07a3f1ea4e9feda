"""The joins between what a handler publishes and what its alarm reads (issue 42), on an endpoint's checks: each
handler runs on the variables its synthesized function gets (moto S3 for its inputs, a stub CloudWatch that keeps
every PutMetricData), on inputs with a known decision; the alarm that says so is found in the same template (by the
construct that made it), and must read exactly a metric the handler published (namespace, name, dimension set), whose
value breaches the alarm's threshold (its comparison operator) when the decision is an alarm and never otherwise.
The same for a training queue: the lines the job side prints (TrainingJob's health methods, PhaseClock's goodput
windows) against the queue's alarms, and the heartbeat against the stall watcher that reads it.

No metric name is written here: names come from what the code published and what the template holds."""

from __future__ import annotations

import ast
import json
import random
import re
from datetime import datetime, timedelta, timezone
from typing import Optional

import boto3
import pytest
from aws_cdk import Stack
from moto import mock_aws

from bench.cloudwatch_alarms import STATISTICS, CloudWatchAlarm
from ml_platform_constructs import ModelQuality
from ml_platform_constructs.runtime.decisions import drift
from ml_platform_constructs.runtime.handlers import drift_handler, quality_handler
from ml_platform_job.health import RULES
from ml_platform_job.job_metrics import JobMetrics
from ml_platform_job.phase_clock import PhaseClock
from ml_platform_job.tracking import goodput_queue
from tests.conftest import training_queue
from tests.unit.test_endpoint_quality import endpoint
from tests.unit.test_quality import label, record

NOW = datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)


# --- what the template's alarms read, what a handler published -------------------------------------------------------

def metric_key(namespace: str, name: str, dimensions) -> tuple:
    return namespace, name, tuple(sorted((d["Name"], d["Value"]) for d in dimensions))


def read_by(props: dict) -> list[tuple]:
    """The metrics an AWS::CloudWatch::Alarm reads: its own, or every MetricStat of its metric math."""
    if "MetricName" in props:
        return [metric_key(props["Namespace"], props["MetricName"], props.get("Dimensions", []))]
    return [metric_key(m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"],
                       m["MetricStat"]["Metric"].get("Dimensions", []))
            for m in props.get("Metrics", []) if "MetricStat" in m]


def logical_id(construct) -> str:
    return Stack.of(construct).get_logical_id(construct.node.default_child)


class Recording:
    """A CloudWatch client that keeps what is published: ``data`` (metric key, value), ``units`` (metric key, unit,
    None where none was given) in the same order."""

    def __init__(self):
        self.data: list[tuple[tuple, float]] = []
        self.units: list[tuple[tuple, Optional[str]]] = []

    def put_metric_data(self, Namespace, MetricData):  # noqa: N803 (boto3 names)
        for d in MetricData:
            assert isinstance(d["Value"], (int, float)) and not isinstance(d["Value"], bool), d
            key = metric_key(Namespace, d["MetricName"], d["Dimensions"])
            self.data.append((key, d["Value"]))
            self.units.append((key, d.get("Unit")))
        return {}

    def values(self, read: tuple, unit: Optional[str] = None) -> list[float]:
        """The values published under ``read``; where the reader names a unit, only those published with it (an
        alarm with a Unit sees no datapoint of another unit: a unit the publisher does not use leaves it in
        INSUFFICIENT_DATA, https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html)."""
        return [value for (key, value), (_, published) in zip(self.data, self.units)
                if key == read and (unit is None or published == unit)]


MATH_NODES = (ast.Expression, ast.BinOp, ast.BoolOp, ast.Compare, ast.Call, ast.Name, ast.Load, ast.Constant,
              ast.Add, ast.Sub, ast.Mult, ast.Div, ast.And, ast.Or, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq,
              ast.NotEq)


def metric_math(expression: str, values: dict):
    """A CloudWatch metric-math expression of arithmetic, IF, FILL, AND/OR and comparisons on ``values`` (None: no
    datapoint) (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html)."""
    tree = ast.parse(re.sub(r"\bAND\b", "and", re.sub(r"\bOR\b", "or", expression)), mode="eval")
    assert all(isinstance(n, MATH_NODES) for n in ast.walk(tree)), f"an expression this evaluator does not read: " \
                                                                  f"{expression}"
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert calls <= {"IF", "FILL"}, f"a function this evaluator does not know: {expression}"
    functions = {"IF": lambda condition, then, otherwise: then if condition else otherwise,
                 "FILL": lambda value, filler: filler if value is None else value}
    return eval(compile(tree, "<math>", "eval"), {"__builtins__": {}}, {**functions, **values})  # noqa: S307


def published_to(template, alarm_id: str, recording: Recording) -> list[float]:
    """The values ``recording`` holds of the one metric the alarm reads (the alarm reads exactly one), in the alarm's
    unit where it names one."""
    props = template.find_resources("AWS::CloudWatch::Alarm")[alarm_id]["Properties"]
    (read,) = read_by(props)
    return recording.values(read, props.get("Unit"))


def breaches(template, alarm_id: str, value: float) -> bool:
    return CloudWatchAlarm.from_template(template.find_resources("AWS::CloudWatch::Alarm")[alarm_id]["Properties"]
                                         ).breaches(value)


def handler_environment(template, handler: str, buckets: dict[str, str]) -> dict[str, str]:
    """The synthesized function's variables; a bucket's name (a reference in the template) is the named stand-in."""
    (variables,) = [f["Properties"]["Environment"]["Variables"] for f in
                    template.find_resources("AWS::Lambda::Function").values() if f["Properties"]["Handler"] == handler]
    resolved = {}
    for key, value in variables.items():
        if not isinstance(value, str):
            assert key in buckets, f"{key} is a reference the test does not stand in for: {value}"
            value = buckets[key]
        resolved[key] = value
    return resolved


@pytest.fixture(scope="module")
def built(synth_stack):
    """A MonitoredEndpoint (drift check, feature watch) with its quality check, synthesized once."""
    parts = {}

    def body(stack):
        parts["endpoint"] = endpoint(stack, quality=ModelQuality(problem_type="binary", baseline=0.92,
                                                                 baseline_examples=5000, min_labelled=150,
                                                                 max_batch_hours=2))
    return synth_stack(body), parts["endpoint"]


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        for bucket in ("capture", "datasets"):
            client.create_bucket(Bucket=bucket)
        yield client


# --- drift and the feature watch (runtime/handlers/drift_handler.py <-> MonitoredEndpoint) -----------------------------------

DRIFT_BUCKETS = {"CAPTURE_BUCKET": "capture", "BASELINE_BUCKET": "datasets"}


def row(rng, i, *, spread=15.0, related=True, shift=False, offset=0.0):
    if shift:
        return {"age": "95", "income": "190", "color": "green"}
    x = rng.gauss(50, spread) + offset
    y = 2 * x + rng.gauss(0, 5) if related else rng.gauss(100, 31)
    return {"age": f"{x:.2f}", "income": f"{y:.2f}", "color": "red" if i % 2 else "blue"}


def capture_line(r):
    return json.dumps({"captureData": {"endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                                                         "data": f"{r['age']},{r['income']},{r['color']}",
                                                         "encoding": "CSV"}}})


WINDOWS = {"calm": {}, "narrow": {"spread": 3.0}, "unrelated": {"related": False}, "shifted": {"shift": True},
           "mild": {"offset": 8.0}, "sparse": {"records": 10}, "old_baseline": {"baseline_version": 2}}


@pytest.fixture(scope="module")
def drift_runs(built, tmp_path_factory):
    """The drift check on the template's variables, once per window: calm, narrowed spreads, features that no longer
    move together, a shifted distribution, a mild shift (significant, its PSI over the threshold but not its lower
    bound: no drift), too few records to judge, and a calm window against a baseline built before the feature watch
    (version 2). Each: (summary, what it published)."""
    template, _ = built
    rng = random.Random(42)
    baseline = drift.build_baseline([row(rng, i) for i in range(2000)], ["age", "income", "color"])
    runs = {}
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        s3 = boto3.client("s3")
        for bucket in DRIFT_BUCKETS.values():
            s3.create_bucket(Bucket=bucket)
        env = handler_environment(template, "drift_handler.handler", DRIFT_BUCKETS)
        s3.put_object(Bucket=env["BASELINE_BUCKET"], Key=env["BASELINE_KEY"], Body=json.dumps(baseline).encode())
        for n, (name, shape) in enumerate(WINDOWS.items()):
            now = NOW + timedelta(days=n)  # each window in hours of its own
            (prefix,) = drift_handler.capture_prefixes(env["CAPTURE_PREFIX"], env["VARIANT_NAME"], now, 1)
            shape = dict(shape)
            records = shape.pop("records", 1500)
            version = shape.pop("baseline_version", None)
            s3.put_object(Bucket=env["BASELINE_BUCKET"], Key=env["BASELINE_KEY"], Body=json.dumps(
                baseline if version is None else {**baseline, "version": version}).encode())
            s3.put_object(Bucket=env["CAPTURE_BUCKET"], Key=f"{prefix}{name}.jsonl", Body="\n".join(
                capture_line(row(rng, i, **shape)) for i in range(records)).encode())
            recording = Recording()
            runs[name] = drift_handler.run({**env, "WINDOW_HOURS": "1"}, s3, recording, now), recording
    return runs


def test_drift_windows_have_the_decisions_the_joins_are_judged_on(drift_runs):
    """The inputs' decisions (what each join below is checked against): a calm window decides nothing; each other
    window decides what it was made for; the mild shift is significant and its PSI over the threshold, its lower
    bound (what decides) under it; the sparse window is not judged."""
    decided = {name: (s["alarm"], bool(s["spread_out_of_band"]), s["relations_changed"], s["judged"])
               for name, (s, _) in drift_runs.items()}
    assert decided["calm"] == (False, False, False, True)
    assert decided["narrow"][:2] == (True, True)
    assert decided["unrelated"] == (False, False, True, True)
    assert decided["shifted"][0] is True
    mild = drift_runs["mild"][0]
    threshold = mild["thresholds"]["psi"]
    assert decided["mild"][0] is False and mild["psi_lower_bound"] < threshold <= mild["significant_psi"]
    assert decided["sparse"][3] is False
    assert drift_runs["old_baseline"][0]["feature_watch_inactive"] and not any(
        s["feature_watch_inactive"] for name, (s, _) in drift_runs.items() if name != "old_baseline")


def test_the_drift_alarm_reads_exactly_what_the_drift_check_publishes_and_breaches_only_on_drift(built, drift_runs):
    """drift_handler -> MonitoredEndpoint's drift alarm: the composite alarm's child reads the namespace, name and
    dimensions the check published, in every judged window (its missing data is ignored: an unpublished value
    would keep a stale state), and that value breaches the child's threshold exactly when the check decided drift
    (not on a significant PSI whose lower bound is under the threshold); an unjudged window publishes nothing it
    reads (missing data, not calm)."""
    template, monitored = built
    rule = json.dumps(template.find_resources("AWS::CloudWatch::CompositeAlarm")[
        logical_id(monitored.alarms["drift"])]["Properties"]["AlarmRule"])
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    children = [k for k in re.findall(r'"Fn::GetAtt": \["(\w+)"', rule) if k in alarms]
    assert children
    for name, (summary, recording) in drift_runs.items():
        for child in children:
            values = published_to(template, child, recording)
            if not summary["judged"]:
                assert values == [], (name, child)
                continue
            assert len(values) == 1, (name, child, read_by(alarms[child]["Properties"]))
            assert breaches(template, child, values[0]) is summary["alarm"], (name, values, summary["reason"])


def test_the_not_judged_alarm_reads_the_checks_judged_flag(built, drift_runs):
    """drift_handler -> MonitoredEndpoint's not-judged alarm: it reads the metric the check publishes every run,
    which does not breach in a judged window (a breach every check would fire it after a day of judged windows) and
    breaches in one with too few records to judge."""
    template, monitored = built
    alarm = logical_id(monitored.alarms["drift_not_judged"])
    for name, (summary, recording) in drift_runs.items():
        (value,) = published_to(template, alarm, recording)
        assert breaches(template, alarm, value) is (not summary["judged"]), name


# Per feature watch alarm: its decision, and whether a window has what it reads (the watch's own values).
FEATURE_WATCH = {
    "feature_spread": (lambda s: bool(s["spread_out_of_band"]), lambda s: bool(s["feature_watch"]["spread_ratio"])),
    "explained_variance": (lambda s: s["relations_changed"],
                           lambda s: s["feature_watch"]["explained_variance"] is not None),
    "feature_watch_inactive": (lambda s: s["feature_watch_inactive"] is not None,
                               lambda s: s["feature_watch_inactive"] is None or s["baseline_version"] < 3),
}


@pytest.mark.parametrize("alarm", FEATURE_WATCH)
def test_each_feature_watch_alarm_reads_what_the_drift_check_publishes_and_breaches_on_its_decision(
        built, drift_runs, alarm):
    """drift_handler's feature watch -> MonitoredEndpoint's feature watch alarms (serving/feature_watch.py): each
    alarm reads a metric the check published in every window whose values it can judge (most windows here), and its
    value breaches the alarm's threshold exactly when the watch decided so: the inactive-watch alarm on the old
    baseline only; a window without those values (too small, or an old baseline the watch cannot read) publishes
    nothing the alarm reads (missing data, not a calm window)."""
    template, monitored = built
    decided, has_values = FEATURE_WATCH[alarm]
    alarm_id = logical_id(monitored.alarms[alarm])
    published = 0
    for name, (summary, recording) in drift_runs.items():
        values = published_to(template, alarm_id, recording)
        if not has_values(summary):
            assert values == [], (name, alarm)
            continue
        assert len(values) == 1, (name, alarm)
        assert breaches(template, alarm_id, values[0]) is decided(summary), (name, values)
        published += 1
    assert published >= len(drift_runs) - 2, (alarm, published)


# --- quality (runtime/handlers/quality_handler.py <-> EndpointQuality) --------------------------------------------------------

QUALITY_BUCKETS = {"CAPTURE_BUCKET": "capture", "RESULTS_BUCKET": "datasets"}


def quality_run(template, s3, right_per_100: int, first: Optional[Recording] = None) -> tuple[dict, Recording]:
    """The quality check on the template's variables: a deploy's first run (what it publishes into ``first``), then
    300 predictions labelled an hour later, right_per_100 of each 100 right (baseline 0.92), judged once their batch
    closes."""
    env = handler_environment(template, "quality_handler.handler", QUALITY_BUCKETS)
    s3.put_object(Bucket=env["RESULTS_BUCKET"], Key=f"{env['STATE_PREFIX']}delays.json",
                  Body=json.dumps({"delays": [0, 1000]}).encode())
    quality_handler.run(env, s3, Recording() if first is None else first, NOW - timedelta(hours=48))
    hour = (NOW - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    ids = [f"p{i}" for i in range(300)]
    s3.put_object(Bucket=env["CAPTURE_BUCKET"],
                  Key=f"{env['CAPTURE_PREFIX']}{env['VARIANT_NAME']}/{hour:%Y/%m/%d/%H}/capture.jsonl",
                  Body="\n".join(record("1", inference_id=i) for i in ids).encode())
    s3.put_object(Bucket=env["CAPTURE_BUCKET"],
                  Key=f"{env['LABELS_PREFIX']}{hour + timedelta(hours=1):%Y/%m/%d/%H}/labels.jsonl",
                  Body="\n".join(label(i, 1 if n % 100 < right_per_100 else 0) for n, i in enumerate(ids)).encode())
    recording = Recording()
    return quality_handler.run(env, s3, recording, NOW), recording


@pytest.mark.parametrize("right_per_100", [92, 90, 70])
def test_the_quality_alarm_reads_what_the_check_publishes_and_breaches_only_on_a_significant_shortfall(
        built, s3, right_per_100):
    """quality_handler -> EndpointQuality's alarm: it reads the namespace, name and dimensions the check published
    for the judged batch, and that value breaches the alarm's threshold only when the batch's decision is an alarm:
    never at the baseline, nor on a shortfall within the noise (90 right of 100 against 0.92, not significant on 300
    labels), and on a real drop (70 of 100); nor after a deploy, before anything is judged (the first run publishes
    the value that releases a previous version's alarm)."""
    template, monitored = built
    first = Recording()
    summary, recording = quality_run(template, s3, right_per_100, first)
    last = summary["last"]
    assert summary["judged"] and last["decision"] == {92: "ok", 90: "ok", 70: "alarm"}[right_per_100]
    if right_per_100 == 90:
        assert last["shortfall"] > 0  # a shortfall there is, within the noise
    alarm = logical_id(monitored.quality.alarm)
    (value,) = published_to(template, alarm, recording)
    assert breaches(template, alarm, value) is (last["decision"] == "alarm"), (value, last)
    (released,) = published_to(template, alarm, first)
    assert not breaches(template, alarm, released)
    not_judged = logical_id(monitored.quality.not_judged_alarm)
    (judged,) = published_to(template, not_judged, recording)
    assert not breaches(template, not_judged, judged)


# --- the training queue: the job side's lines <-> the queue's alarms and stall watcher -------------------------------
# The job side prints embedded-metric-format lines (CloudWatch Logs extracts the metrics); here TrainingJob's own
# methods print them (its collaborators stubbed: no torch), with the variables of the queue's synthesized job
# definition, and PhaseClock prints the goodput windows.

@pytest.fixture(scope="module")
def queue_built(synth_stack):
    parts = {}

    def body(stack):
        parts["queue"] = training_queue(stack, queue_name="training")
    template = synth_stack(body)
    (job_env,) = [{e["Name"]: e["Value"] for e in d["Properties"]["ContainerProperties"]["Environment"]}
                  for d in template.find_resources("AWS::Batch::JobDefinition").values()
                  if "ContainerProperties" in d["Properties"]]
    return template, parts["queue"], job_env


def extracted(line: str) -> list[tuple[tuple, float, float]]:
    """What CloudWatch Logs extracts from an embedded-metric-format line: (metric key, value, timestamp) per metric of
    each dimension set; a dimension set that names a key the line lacks is dropped, as CloudWatch drops it. What
    CloudWatch would not extract fails here: a value that is not a number, a dimension value that is not a string, a
    timestamp not in epoch milliseconds (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/
    CloudWatch_Embedded_Metric_Format_Specification.html)."""
    document = json.loads(line)
    timestamp = document["_aws"]["Timestamp"]
    assert isinstance(timestamp, int) and 946_684_800_000 <= timestamp < 4_102_444_800_000, line  # 2000-2100, in ms
    found = []
    for directive in document["_aws"]["CloudWatchMetrics"]:
        for dimension_set in directive["Dimensions"]:
            if not all(name in document for name in dimension_set):
                continue
            assert all(isinstance(document[name], str) for name in dimension_set), line
            dimensions = [{"Name": name, "Value": document[name]} for name in dimension_set]
            for metric in directive["Metrics"]:
                if metric["Name"] in document:
                    value = document[metric["Name"]]
                    assert isinstance(value, (int, float)) and not isinstance(value, bool), line
                    found.append((metric_key(directive["Namespace"], metric["Name"], dimensions),
                                  float(document[metric["Name"]]), document["_aws"]["Timestamp"] / 1000))
    return found


def metric_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith('{"_aws"')]


class StubHealth:
    """The job's HealthMonitor as _watch_health and health_stopped use it; ``watch`` keeps the heartbeat emitter."""

    def __init__(self, rules):
        self.rules, self.stop_verdict, self.emit = rules, None, None

    def watch(self, step, emit=None):
        self.emit = emit

    def close(self):
        pass


def stub_job(job_env: dict, batch_env: dict):
    """A TrainingJob's state as its health methods read it, set up by its own _watch_health on a Batch host."""
    from types import SimpleNamespace

    from ml_platform_job.health import HealthRules
    from ml_platform_job.job import TrainingJob

    env = {**job_env, **batch_env}
    job = SimpleNamespace(health=StubHealth(HealthRules.from_env(env)), clock=SimpleNamespace(_active={}), step=0,
                          run_id="run-1", _last_save_step=None, store=SimpleNamespace(complete=lambda: []),
                          run=SimpleNamespace(health_stop=lambda *args, **kwargs: None), _stalled=lambda verdict: None)
    job._publish_warning = lambda verdict: TrainingJob._publish_warning(job, verdict)
    TrainingJob._watch_health(job, env)
    return job


BATCH_ENV = {"AWS_BATCH_JQ_NAME": "batch-queue-name", "AWS_BATCH_JOB_ID": "job-1"}


def test_every_health_rule_is_joined():
    """The parametrized join below runs once per rule: a shrunk or empty RULES would drop its cases silently."""
    assert len(RULES) >= 7 and set(RULES) >= {"non_finite", "stalled"}, RULES


@pytest.mark.parametrize("rule", RULES)
def test_a_health_stop_the_job_prints_reaches_its_rules_alarm_and_breaches_it_a_warning_none(
        queue_built, capsys, rule):
    """TrainingJob.health_stopped / _publish_warning (job.py, the adapters' stops too) -> the queue's health alarms
    (training/health_alarms.py): the stop line's metric, namespace and dimensions (the queue from the job
    definition's variables) are read by that rule's alarm only, and its value breaches it; a warning's line (the
    job trains on) is read by no alarm of the queue."""
    from ml_platform_job.health import Verdict
    from ml_platform_job.job import TrainingJob

    template, queue, job_env = queue_built
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    job = stub_job(job_env, BATCH_ENV)
    capsys.readouterr()
    TrainingJob._publish_warning(job, Verdict(rule, "warn", 120, {"loss": 1.0}, "warned"))
    TrainingJob.health_stopped(job, Verdict(rule, "stop", 120, {"loss": 1.0}, "stopped"), saved=False)
    warning, stop = (extracted(line) for line in metric_lines(capsys.readouterr().out))
    ((stopped, value, _),) = stop
    readers = [k for k, a in alarms.items() if stopped in read_by(a["Properties"])]
    assert readers == [logical_id(queue.health_alarms[rule])]
    assert breaches(template, readers[0], value)
    ((warned, _, _),) = warning
    assert warned != stopped and not [k for k, a in alarms.items() if warned in read_by(a["Properties"])]


def test_the_stall_watcher_reads_the_heartbeat_the_job_prints(queue_built, capsys, monkeypatch):
    """TrainingJob._watch_health's heartbeat lines (job.py) -> the stall watcher (runtime/handlers/stall_watcher.py, on its
    synthesized variables): a job whose heartbeat goes on is left running, the same job silent past the threshold is
    stopped (a heartbeat under another name or dimensions would leave it 'not judged', never stopped), and the stop
    it publishes is read by the queue's stalled alarm and breaches it."""
    from types import SimpleNamespace

    from ml_platform_constructs.runtime.handlers.stall_watcher import Settings, watch
    from ml_platform_job import health
    from tests.unit.test_stall_watcher import HOUR, NOW as WATCH_NOW, CheckedBatch, FakeCloudWatch

    template, queue, job_env = queue_built
    (variables,) = [f["Properties"]["Environment"]["Variables"] for k, f in
                    template.find_resources("AWS::Lambda::Function").items() if k == logical_id(queue.stall_watcher)]
    decided = {}
    for silent_after in (None, 60):
        batch, cloudwatch = CheckedBatch(), FakeCloudWatch(lambda: WATCH_NOW)
        queue_arn = batch.add_queue("training-queue", tags={})
        definition = batch.register("training-definition")
        job_id = batch.add_job("job", queue_arn, "RUNNING", definition=definition,
                               environment=tuple(job_env.items()), started_at=int((WATCH_NOW - 3 * HOUR) * 1000))
        wall = {"now": WATCH_NOW - 3 * HOUR}
        monkeypatch.setattr(health, "time", SimpleNamespace(time=lambda: wall["now"]))
        job = stub_job(job_env, {**BATCH_ENV, "AWS_BATCH_JOB_ID": job_id})  # prints the first heartbeat
        for minute in range(1, 180 if silent_after is None else silent_after):
            wall["now"] = WATCH_NOW - 3 * HOUR + minute * 60
            job.health.emit(10)
        for line in metric_lines(capsys.readouterr().out):
            cloudwatch.ingest(line)
        settings = Settings.from_env({**{k: v for k, v in variables.items() if isinstance(v, str)},
                                      "JOB_QUEUES": queue_arn})
        decided[silent_after] = watch(batch, cloudwatch, settings, now=WATCH_NOW), cloudwatch.published, job_id
    assert decided[None][0]["stopped"] == [] and decided[None][1] == []
    report, published, job_id = decided[60]
    assert report["stopped"] == [job_id]
    (stop,) = published
    stalled = logical_id(queue.health_alarms["stalled"])
    assert read_by(template.find_resources("AWS::CloudWatch::Alarm")[stalled]["Properties"]) == [
        metric_key(stop["Namespace"], stop["MetricName"], stop["Dimensions"])]
    assert breaches(template, stalled, stop["Value"])


def goodput_job(job_env: dict, queue: str, *, wait: float, compute: float, save_every: float, save_seconds: float):
    """A job of an hour on PhaseClock (a fake clock, the timer's ticks run by hand) with the job definition's
    window and thresholds: each batch waits ``wait`` s in the loader and computes ``compute`` s; a save of
    ``save_seconds`` every ``save_every`` s. Its metric lines and its stderr (the hints it prints when bound)."""
    import io
    from contextlib import redirect_stderr

    from tests.unit.test_goodput_alarm_replay import EPOCH, FakeTime

    fake = FakeTime()
    clock = PhaseClock(now=fake, wall=lambda: EPOCH + fake.now)
    fake.clock = clock
    out, err = io.StringIO(), io.StringIO()
    clock.emit_windows(queue, out, instance_type="g5.xlarge", env=job_env, interval=0)

    def loader():
        while True:
            fake.advance(wait)
            yield None

    saved_at = 0.0
    with redirect_stderr(err):
        for _ in clock.batches(loader()):
            with clock.step():
                fake.advance(compute)
            if fake.now - saved_at >= save_every:
                with clock.phase("checkpoint_save"):
                    fake.advance(save_seconds)
                clock.checkpoint_saved()
                saved_at = fake.now
            if fake.now >= 60 * 60:
                break
    return metric_lines(out.getvalue()), err.getvalue()


@pytest.mark.parametrize("alarm, bound, near", [
    ("input_bound", {"wait": 1.0, "compute": 1.0, "save_every": 600, "save_seconds": 5},
     {"wait": 0.4, "compute": 1.6, "save_every": 600, "save_seconds": 5}),
    ("checkpoint_bound", {"wait": 0.05, "compute": 1.95, "save_every": 300, "save_seconds": 60},
     {"wait": 0.05, "compute": 1.95, "save_every": 600, "save_seconds": 40}),
], ids=["input_bound", "checkpoint_bound"])
def test_a_goodput_alarm_reads_the_jobs_window_lines_and_breaches_only_for_a_bound_job(queue_built, alarm, bound,
                                                                                      near):
    """PhaseClock's window lines (ml_platform_job.goodput, the queue TrackedRun names on a Batch host with the job
    definition's variables: tracking.goodput_queue) -> the
    queue's input-bound and checkpoint-bound alarms (training/goodput_alarms.py): the alarm reads a metric the job
    prints, with its namespace and dimension set; a bound job's lines breach its threshold, and the job says so
    itself (its hint); a healthy job's lines never do, and it says nothing, nor do those of a job at two thirds of
    the threshold. The lines are replayed through the alarm's own rules (period, statistic, M of N, missing data:
    bench/cloudwatch_alarms.py): the bound job's reach ALARM, the others' never do."""
    template, queue, job_env = queue_built
    alarm_id = logical_id(queue.alarms[alarm])
    props = template.find_resources("AWS::CloudWatch::Alarm")[alarm_id]["Properties"]
    (read,) = read_by(props)
    rules = CloudWatchAlarm.from_template(props)
    healthy = {"wait": 0.05, "compute": 1.95, "save_every": 600, "save_seconds": 5}
    for shape, is_bound in ((bound, True), (healthy, False), (near, False)):
        lines, hints = goodput_job(job_env, goodput_queue({**job_env, **BATCH_ENV}), **shape)
        samples = [(at, value) for line in lines for key, value, at in extracted(line) if key == read]
        assert len(samples) >= 10, (alarm, shape, lines[:1])
        timeline = rules.states(samples, samples[0][0], samples[-1][0] + rules.period)
        assert any(state == "ALARM" for _, state in timeline) is is_bound, (alarm, timeline)
        assert bool(hints.strip()) is is_bound, hints


# --- a job's progress metrics (ml_platform_job.job_metrics <-> advice/job_cost.py, the job role's grant) --------------

class Stored(Recording):
    """A CloudWatch that keeps what is published, with its timestamps, and answers GetMetricData from it as
    CloudWatch does: a query's metric (namespace, name, dimension set) gets the datapoints published under exactly
    that key between StartTime and EndTime, in periods of its Period from StartTime, each its Stat of them
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html)."""

    def __init__(self):
        super().__init__()
        self.times: list[datetime] = []

    def put_metric_data(self, Namespace, MetricData):  # noqa: N803 (boto3 names)
        self.times += [d["Timestamp"] for d in MetricData]
        return super().put_metric_data(Namespace=Namespace, MetricData=MetricData)

    def get_metric_data(self, MetricDataQueries, StartTime, EndTime, **_):  # noqa: N803 (boto3 names)
        results = []
        for query in MetricDataQueries:
            stat = query["MetricStat"]
            metric, period = stat["Metric"], stat["Period"]
            read = metric_key(metric["Namespace"], metric["MetricName"], metric.get("Dimensions", []))
            periods: dict[datetime, list[float]] = {}
            for (key, value), at in zip(self.data, self.times):
                if key == read and StartTime <= at < EndTime:
                    start = StartTime + timedelta(seconds=(at - StartTime).total_seconds() // period * period)
                    periods.setdefault(start, []).append(value)
            ordered = sorted(periods)
            results.append({"Id": query["Id"], "Timestamps": ordered,
                            "Values": [STATISTICS[stat["Stat"]](periods[at]) for at in ordered]})
        return {"MetricDataResults": results}


def test_the_cost_report_reads_the_progress_a_job_reports_under_the_namespace_its_role_may_write(queue_built):
    """JobMetrics.report (in the job) -> advice/job_cost.progress (``./platform job cost``): the accuracy and tokens
    a job reported, on the queue's Batch host variables, come back as its gain and its tokens; and the namespace
    it publishes to is one the queue's job role may write (its PutMetricData condition), else AccessDenied."""
    from ml_platform_constructs.advice import job_cost

    template, _, job_env = queue_built
    cloudwatch = Stored()
    metrics = JobMetrics(cloudwatch=cloudwatch, env={**job_env, **BATCH_ENV, "AWS_BATCH_JOB_ID": "job-7#0"})
    started = NOW - timedelta(hours=2)  # a job of two hours, reporting as it goes
    metrics.report(validation_accuracy=81.0, tokens=1000, timestamp=started + timedelta(minutes=1))
    metrics.report(tokens=400, timestamp=started + timedelta(minutes=30))
    metrics.report(tokens=100, timestamp=started + timedelta(minutes=30, seconds=20))
    metrics.report(validation_accuracy=88.5, samples=64, timestamp=started + timedelta(minutes=110))
    progress = job_cost.progress(cloudwatch, "job-7", started, NOW, NOW)
    assert (progress.accuracy_start, progress.accuracy_end, progress.tokens, progress.samples) == (81.0, 88.5, 1500, 64)
    namespaces = {key[0] for key, _ in cloudwatch.data}
    (role,) = [d["Properties"]["ContainerProperties"]["JobRoleArn"]["Fn::GetAtt"][0]
               for d in template.find_resources("AWS::Batch::JobDefinition").values()
               if "ContainerProperties" in d["Properties"]]
    allowed = [s.get("Condition", {}).get("StringEquals", {}).get("cloudwatch:namespace")
               for p in template.find_resources("AWS::IAM::Policy").values()
               if any(r.get("Ref") == role for r in p["Properties"]["Roles"])
               for s in p["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "cloudwatch:PutMetricData"]
    assert allowed and all(namespaces <= set(a if isinstance(a, list) else [a]) for a in allowed), (namespaces, allowed)
