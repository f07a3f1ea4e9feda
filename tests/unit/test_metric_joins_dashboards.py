"""The joins between what the platform publishes and what its dashboards and alarms read (issue 42, part 2): every
widget metric of a synthesized dashboard, and every metric of a CloudWatch alarm (its own, or each MetricStat of its
metric math), in one of the platform's own namespaces (anything not ``AWS/*``) must name a namespace, metric name and
dimension set that a real code path publishes, collected by running that code as tests/unit/test_metric_joins does
(its fixtures and helpers are reused): the drift check and its feature watch and the quality check (runtime handlers
on the synthesized variables, stub CloudWatch; late labels as tests/unit/test_metric_joins_labels.py sends them), the
job side's embedded-metric lines (TrainingJob's health stops, warnings and heartbeat, PhaseClock's goodput windows),
the queue's stall watcher (its real ``watch`` on its synthesized variables: a stop, and a warning with the stall rule
at warn), the CloudWatch agent's GPU aggregations (the agent configuration the instances' user data writes) and the
interruption watcher's JobRunning (its put-metric-data command line, on the fleet's synthesized variables). A widget
row, a ``...``/``.`` shorthand row, a SEARCH expression (its schema's dimension set, its MetricName and dimension
filters) and a Metrics Insights SELECT (FROM SCHEMA's dimension set, its WHERE filters) each count as a read.
Dimension values are compared where both sides are literal (a token of the template, or an agent variable such as
``${aws:InstanceId}``, stands for any value); a token in what a dashboard or an alarm reads must be a ``Ref`` or
``GetAtt`` of a resource of the same template (never another stack's export, a parameter or a pseudo parameter).
Each sweep asserts a minimum number of reads, so that it cannot pass on nothing.

Covered: the MonitoredEndpoint's dashboard (drift, feature watch, quality) and alarms, the TrainingQueue's (GPU,
goodput, health; the stall watcher's stop and warning are read by the by-rule widgets) and the SpotGpuFleet's (GPU,
JobRunning).

Scaling: no Application Auto Scaling nor EC2 Auto Scaling policy reads a platform metric. The only ones the platform
builds are the endpoint's (serving/endpoint_scaling.py, Application Auto Scaling): predefined SageMaker metrics, and
step policies on alarms over ``AWS/SageMaker`` (the P99 scale-out reads ModelLatency); ``target_metric`` is a metric
of the user's own; the fleet's and the queue's groups have no scaling policy. The test below synthesizes an endpoint
with auto scaling and asserts every metric its scaling policies and their alarms read is ``AWS/*`` (the reader also
reads EC2 Auto Scaling's target tracking, its metric-math form included, and its step policies' alarms, checked on a
group built for it), so a policy that starts reading a platform metric must be tied here first. The one scaling
decision taken on a platform metric is the fleet's scale-to-zero alarm (its state change sets the group to 0 through
an EventBridge rule): its metric math reads the interruption watcher's JobRunning and the agent's GPU utilization,
tied below with the watcher's own values.

Budget guard: runtime/handlers/budget_guard.py publishes ``MLPlatform/Cost`` (EstimatedSpendToDate, ProjectedMonthlySpend,
FleetHourlyCost; tests/unit/test_budget_guard_joins.py checks what it publishes), but no alarm, dashboard widget or
scaling policy of the platform reads that namespace (governance/budget_guard.py only grants PutMetricData to it): there
is no reader to tie, and the test below asserts none of the synthesized dashboards, alarms or policies here reads it.

No metric name is written here: names come from what the code published and what the template holds."""

from __future__ import annotations

import contextlib
import io
import json
import re

import boto3
import pytest
from moto import mock_aws

from ml_platform_job.health import RULES
from tests.unit.test_budget_guard_queues import emulated, world  # noqa: F401 (fixtures)
from tests.unit.test_metric_joins import (BATCH_ENV, NOW, Recording, built, drift_runs, extracted,  # noqa: F401
                                          goodput_job, logical_id, metric_key, metric_lines, metric_math, queue_built,
                                          quality_run, read_by, stub_job)


# --- what a dashboard reads ------------------------------------------------------------------------------------------

def _token(value) -> str:
    """A template token as a string that stands for any value (``${...}``)."""
    if isinstance(value, dict) and "Ref" in value:
        return "${Ref:%s}" % value["Ref"]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "${GetAtt:%s}" % ".".join(value["Fn::GetAtt"])
    return "${Token:%s}" % json.dumps(value, sort_keys=True).replace('"', "'")


def joined(value) -> str:
    """A template string: literal, or an Fn::Join whose tokens become ``${...}`` stand-ins; an Fn::Base64 (user data,
    a MIME part of it) is read as its text."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Base64" in value:
        return joined(value["Fn::Base64"])
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(joined(p) if isinstance(p, str) or "Fn::Join" in p or "Fn::Base64" in p
                              else _token(p) for p in parts)
    return _token(value)


def dashboards(template) -> dict[str, dict]:
    return {k: json.loads(joined(d["Properties"]["DashboardBody"]))
            for k, d in template.find_resources("AWS::CloudWatch::Dashboard").items()}


def literal(value) -> bool:
    return isinstance(value, str) and "${" not in value


SEARCH = re.compile(r"SEARCH\(\s*'\{([^}]*)\}\s*(.*?)'\s*,")
FILTER = re.compile(r"(\w+)\s*=\s*\"([^\"]*)\"")
SELECT = re.compile(r"SELECT\s+\w+\((\w+)\)\s+FROM\s+SCHEMA\(([^)]*)\)(?:\s+WHERE\s+(.*?))?(?:\s+GROUP BY.*|\s+ORDER BY.*)?$",
                    re.S)
WHERE = re.compile(r"(\w+)\s*=\s*'([^']*)'")


def expression_reads(expression: str) -> list[tuple]:
    """The metrics a SEARCH or a Metrics Insights SELECT reads: (namespace, name, ((dimension, value or None), ...))."""
    found = []
    for schema, terms in SEARCH.findall(expression):
        namespace, *names = [part.strip().strip('"') for part in schema.split(",")]
        filters = dict(FILTER.findall(terms))
        assert "MetricName" in filters, f"a SEARCH without a MetricName reads anything: {expression}"
        found.append((namespace, filters["MetricName"], tuple(sorted((n, filters.get(n)) for n in names))))
    match = SELECT.search(expression.strip())
    if match:
        name, schema, where = match.groups()
        namespace, *names = [part.strip().strip('"') for part in schema.split(",")]
        filters = dict(WHERE.findall(where or ""))
        found.append((namespace, name, tuple(sorted((n, filters.get(n)) for n in names))))
    return found


def widget_reads(body: dict) -> list[tuple[str, tuple]]:
    """Every metric a dashboard's widgets read: (widget title, read), a row's ``...`` and ``.`` shorthand expanded
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html)."""
    reads = []
    for widget in body["widgets"]:
        properties = widget.get("properties", {})
        title = properties.get("title", widget.get("type"))
        previous: list = []
        for row in properties.get("metrics", []):
            options = row[-1] if row and isinstance(row[-1], dict) else {}
            values = [v for v in row if not isinstance(v, dict)]
            if "expression" in options and not values:
                reads += [(title, r) for r in expression_reads(options["expression"])]
                assert expression_reads(options["expression"]) or not re.search(
                    r"SEARCH|SELECT", options["expression"]), f"an expression this test cannot read: {options}"
                continue
            if values and values[0] == "...":
                values = previous[:len(previous) - (len(values) - 1)] + values[1:]
            values = [previous[i] if v == "." else v for i, v in enumerate(values)]
            previous = values
            namespace, name, *dimensions = values
            reads.append((title, (namespace, name, tuple(sorted(zip(dimensions[::2], dimensions[1::2]))))))
    return reads


def own(reads: list[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
    return [(title, read) for title, read in reads if not read[0].startswith("AWS/")]


def is_published(read: tuple, published: set[tuple]) -> bool:
    """A read names a published metric: namespace, name and dimension names equal, and each dimension value equal
    where both are literal."""
    namespace, name, dimensions = read
    for key in published:
        if key[:2] != (namespace, name) or [n for n, _ in key[2]] != [n for n, _ in dimensions]:
            continue
        if all(not (literal(a) and literal(b)) or a == b for (_, a), (_, b) in zip(key[2], dimensions)):
            return True
    return False


def unpublished(template, published: set[tuple]) -> list[tuple[str, str, tuple]]:
    return [(dashboard, title, read) for dashboard, body in dashboards(template).items()
            for title, read in own(widget_reads(body)) if not is_published(read, published)]


def alarm_reads(template) -> list[tuple[str, tuple]]:
    """Every metric the template's alarms read in the platform's namespaces: (alarm's logical id, read), a token
    dimension value as its ``${...}`` stand-in (as a dashboard body holds it)."""
    return [(alarm_id, (namespace, name, tuple((n, joined(v)) for n, v in dimensions)))
            for alarm_id, alarm in template.find_resources("AWS::CloudWatch::Alarm").items()
            for namespace, name, dimensions in read_by(alarm["Properties"]) if not namespace.startswith("AWS/")]


OWN_TOKEN = re.compile(r"\$\{(?:Ref|GetAtt):([A-Za-z0-9]+)[.}]")


def foreign_tokens(template, read: tuple) -> list[str]:
    """The dimension values of ``read`` holding a token that is not a Ref or GetAtt of a resource of ``template``
    (another stack's export, a parameter, a pseudo parameter, any other function): such a value matches any
    published one in ``is_published``, so it must at least name this template's own resource."""
    resources = template.to_json()["Resources"]
    found = []
    for _, value in read[2]:
        for start in [m.start() for m in re.finditer(r"\$\{", value or "")]:
            match = OWN_TOKEN.match(value, start)
            if not match or match.group(1) not in resources:
                found.append(value)
                break
    return found


def tokens(read: tuple) -> int:
    return sum("${" in (value or "") for _, value in read[2])


# --- what the platform publishes ------------------------------------------------------------------------------------

def agent_published(template) -> set[tuple]:
    """What the CloudWatch agent publishes on the instances of ``template``: the configuration their user data writes
    (``nvidia_smi_<measurement>``, one series per aggregation dimension set, values from its append_dimensions)."""
    found = set()
    for resource in template.find_resources("AWS::EC2::LaunchTemplate").values():
        user_data = joined(resource["Properties"].get("LaunchTemplateData", {}).get("UserData", ""))
        for text in re.findall(r"cloudwatch-agent\.json <<'EOF'\n(.*?)\nEOF", user_data, re.S):
            metrics = json.loads(text)["metrics"]
            for plugin, config in metrics["metrics_collected"].items():
                prefix = {"nvidia_gpu": "nvidia_smi"}[plugin]
                values = {**metrics.get("append_dimensions", {}), **config.get("append_dimensions", {})}
                for measurement in config["measurement"]:
                    name = measurement if isinstance(measurement, str) else measurement["name"]
                    for names in metrics["aggregation_dimensions"]:
                        found.add((metrics["namespace"], f"{prefix}_{name}",
                                   tuple(sorted((n, values.get(n, "${agent}")) for n in names))))
    assert found, "no CloudWatch agent configuration in the instances' user data"
    return found


@pytest.fixture(scope="module")
def endpoint_published(built, drift_runs) -> set[tuple]:
    """What the drift check (every window of test_metric_joins) and the quality check (a first run, a
    batch at the baseline, a batch with a real drop; labels 30 hours after their predictions, past the lateness the
    check joins, as test_metric_joins_labels sends them) publish on the endpoint's synthesized variables."""
    from tests.unit.test_metric_joins_labels import Check, hour_before

    template, _ = built
    published = {key for _, recording in drift_runs.values() for key, _ in recording.data}
    for right_per_100 in (92, 70, None):
        with pytest.MonkeyPatch.context() as patch, mock_aws():
            patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
            s3 = boto3.client("s3")
            for bucket in ("capture", "datasets"):
                s3.create_bucket(Bucket=bucket)
            if right_per_100 is None:  # late labels
                check = Check(template, s3)
                ids = [f"late-{i}" for i in range(300)]
                check.captured(hour_before(40), ids)
                check.labelled(hour_before(10), ids)
                summary, recording = check.run(NOW)
                assert summary["too_late"] and summary["too_late"]["too_late"], summary["too_late"]
            else:
                summary, recording = quality_run(template, s3, right_per_100)
                assert summary["judged"], summary
            published |= {key for key, _ in recording.data}
    return published


@pytest.fixture(scope="module")
def job_published(queue_built) -> set[tuple]:
    """What a queue's job prints: each rule's stop and warning, its heartbeat, its goodput windows (a healthy job and
    a bound one)."""
    from ml_platform_job.health import Verdict
    from ml_platform_job.job import TrainingJob

    _, _, job_env = queue_built
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        job = stub_job(job_env, BATCH_ENV)  # the first heartbeat
        job.health.emit(10)
        for rule in RULES:
            TrainingJob._publish_warning(job, Verdict(rule, "warn", 120, {"loss": 1.0}, "warned"))
            TrainingJob.health_stopped(job, Verdict(rule, "stop", 120, {"loss": 1.0}, "stopped"), saved=False)
    lines = metric_lines(out.getvalue())
    for shape in ({"wait": 0.05, "compute": 1.95, "save_every": 600, "save_seconds": 5},
                  {"wait": 1.0, "compute": 1.0, "save_every": 300, "save_seconds": 60}):
        lines += goodput_job(job_env, job_env["ML_PLATFORM_QUEUE_NAME"], **shape)[0]
    return {key for line in lines for key, _, _ in extracted(line)}


@pytest.fixture(scope="module")
def stall_watcher_runs(queue_built) -> dict[str, tuple[dict, list[tuple]]]:
    """The queue's stall watcher (runtime/handlers/stall_watcher.py: its real ``watch`` on the variables of its
    synthesized function, with tests/unit/test_stall_watcher.py's checked Batch and CloudWatch fakes) on a job of the
    queue's job definition whose heartbeat (the job side's own line, health.metric_line) went silent two hours ago:
    with the stall rule as the queue synthesizes it (stop), and at warn (``ML_PLATFORM_HEALTH_RULES=stalled=warn``
    on the watcher and the job, the health mode variable of that rule). Its report and what it published (keys)."""
    from ml_platform_constructs.runtime.handlers.stall_watcher import RULE, Settings, watch
    from ml_platform_job.health import HEARTBEAT_METRIC, RULES_ENV, metric_line
    from tests.unit.test_stall_watcher import HOUR, MINUTE, NOW as WATCH_NOW, CheckedBatch, FakeCloudWatch

    template, queue, job_env = queue_built
    (variables,) = [f["Properties"]["Environment"]["Variables"] for k, f in
                    template.find_resources("AWS::Lambda::Function").items() if k == logical_id(queue.stall_watcher)]
    runs = {}
    for action, override in (("stop", {}), ("warn", {RULES_ENV: f"{RULE}=warn"})):
        batch, cloudwatch = CheckedBatch(), FakeCloudWatch(lambda: WATCH_NOW)
        queue_arn = batch.add_queue("training-queue", tags={})
        environment = {**job_env, **override}
        job_id = batch.add_job("job", queue_arn, "RUNNING", definition=batch.register("training-definition"),
                               environment=tuple(environment.items()), started_at=int((WATCH_NOW - 3 * HOUR) * 1000))
        for minute in range(60):  # a heartbeat a minute for the job's first hour, then silence
            cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, environment["ML_PLATFORM_QUEUE_NAME"], job_id=job_id,
                                          value=10, wall=WATCH_NOW - 3 * HOUR + minute * MINUTE))
        settings = Settings.from_env({**{k: v for k, v in variables.items() if isinstance(v, str)}, **override,
                                      "JOB_QUEUES": queue_arn})
        with contextlib.redirect_stdout(io.StringIO()):
            report = watch(batch, cloudwatch, settings, now=WATCH_NOW)
        runs[action] = report, [metric_key(p["Namespace"], p["MetricName"], p["Dimensions"])
                                for p in cloudwatch.published]
    return runs


@pytest.fixture(scope="module")
def queue_published(queue_built, job_published, stall_watcher_runs) -> set[tuple]:
    """What a queue's job prints, what its stall watcher publishes (its stop, its warning) and what the queue
    instances' agent publishes."""
    watcher = {key for _, keys in stall_watcher_runs.values() for key in keys}
    return job_published | watcher | agent_published(queue_built[0])


FLEET: dict = {}  # the fleet fleet_built synthesized (its alarms' logical ids)


@pytest.fixture(scope="module")
def fleet_built(synth_stack):
    from aws_cdk import Duration
    from aws_cdk import aws_sns as sns

    from ml_platform_constructs import SpotGpuFleet
    from tests.conftest import isolated_vpc
    from tests.unit.test_isolated_network import TYPES

    def body(stack):
        FLEET["fleet"] = SpotGpuFleet(stack, "Fleet", vpc=isolated_vpc(stack, endpoints_for=["SpotGpuFleet"]),
                     alerts=sns.Topic(stack, "Alerts"), instance_types=TYPES, scale_to_zero_after=Duration.hours(1))
    return synth_stack(body)


def fleet_environment(template) -> dict[str, str]:
    """The variables the fleet's user data writes for the interruption watcher (its EnvironmentFile)."""
    from ml_platform_constructs.training.instance_bootstrap import ENV_FILE

    ((resource),) = template.find_resources("AWS::EC2::LaunchTemplate").values()
    user_data = joined(resource["Properties"]["LaunchTemplateData"]["UserData"])
    (text,) = re.findall(rf"cat > {re.escape(ENV_FILE)} <<'EOF'\n(.*?)\nEOF", user_data, re.S)
    return dict(line.split("=", 1) for line in text.splitlines())


def job_running_published(fleet_built) -> dict[bool, tuple[tuple, float]]:
    """The interruption watcher's JobRunning (its put-metric-data command line) on the fleet's own variables, while a
    job runs and while none does: (metric key, value) of each."""
    from ml_platform_constructs.runtime.agents import interruption_watcher

    settings = interruption_watcher.Settings.from_env(fleet_environment(fleet_built))
    published = {}
    for running in (True, False):
        commands = []
        interruption_watcher.publish_job_running(settings, running, run=lambda command, **_: commands.append(command))
        ((command),) = commands
        options = dict(zip(command[3::2], command[4::2]))
        assert command[:3] == ["aws", "cloudwatch", "put-metric-data"], command
        dimensions = [dict(zip(("Name", "Value"), d.split("=", 1))) for d in options["--dimensions"].split(",")]
        published[running] = (metric_key(options["--namespace"], options["--metric-name"], dimensions),
                              float(options["--value"]))
    return published


@pytest.fixture(scope="module")
def fleet_published(fleet_built) -> set[tuple]:
    """The interruption watcher's JobRunning (run and not running) and the fleet instances' agent."""
    return {key for key, _ in job_running_published(fleet_built).values()} | agent_published(fleet_built)


# --- the joins -------------------------------------------------------------------------------------------------------

def test_the_dashboard_reader_expands_shorthand_and_reads_expressions():
    """The reader itself: ``...`` and ``.`` rows, a SEARCH and a SELECT, each give the metric the console would
    chart (hand-written rows: the format, not the platform's names)."""
    body = {"widgets": [{"type": "metric", "properties": {"title": "t", "metrics": [
        ["N/a", "M", "A", "1", "B", "2", {"stat": "Sum"}], ["...", "3"], [".", "K", ".", "1", ".", "4"],
        [{"expression": "SEARCH('{N/a,A,B} MetricName=\"M\" A=\"1\"', 'Sum', 300)"}],
        [{"expression": "SELECT AVG(M) FROM SCHEMA(\"N/a\", B, A) WHERE A = '1' GROUP BY B"}],
        [{"expression": "m1 / m2", "id": "e1"}]]}}]}
    assert [read for _, read in widget_reads(body)] == [
        ("N/a", "M", (("A", "1"), ("B", "2"))), ("N/a", "M", (("A", "1"), ("B", "3"))),
        ("N/a", "K", (("A", "1"), ("B", "4"))), ("N/a", "M", (("A", "1"), ("B", None))),
        ("N/a", "M", (("A", "1"), ("B", None)))]
    published = {("N/a", "M", (("A", "1"), ("B", "2")))}
    assert is_published(("N/a", "M", (("A", "1"), ("B", None))), published)
    assert is_published(("N/a", "M", (("A", "${Ref:X}"), ("B", "2"))), published)
    assert not is_published(("N/a", "M", (("A", "1"), ("B", "3"))), published)
    assert not is_published(("N/a", "M", (("A", "1"),)), published)


def test_a_token_read_must_name_a_resource_of_its_own_template(fleet_built):
    """The token check itself, on the fleet's template: a Ref or GetAtt of one of its resources passes; another
    stack's export, a logical id it does not hold, a pseudo parameter or any other function does not; and the fleet
    dashboard's group dimension, rewritten as an import of another stack's group, is found."""
    (group,) = fleet_built.find_resources("AWS::AutoScaling::AutoScalingGroup")
    read = ("N/a", "M", (("A", f"${{Ref:{group}}}"), ("B", f"x-${{GetAtt:{group}.Arn}}"), ("C", "1"), ("D", None)))
    assert foreign_tokens(fleet_built, read) == []
    for value in ("${Token:{'Fn::ImportValue': 'Other-Group'}}", "${Ref:OtherStackGroup1234}",
                  "${Ref:AWS::Region}", f"${{Ref:{group}}}-${{Token:{{'Fn::Select': [0, 1]}}}}"):
        assert foreign_tokens(fleet_built, ("N/a", "M", (("A", value),))) == [value], value
    (dashboard,) = dashboards(fleet_built).values()
    imported = json.loads(json.dumps(dashboard).replace(f"${{Ref:{group}}}",
                                                        "${Token:{'Fn::ImportValue': 'Other-Group'}}"))
    found = [read for _, read in own(widget_reads(imported)) if foreign_tokens(fleet_built, read)]
    assert len(found) == len([r for _, r in own(widget_reads(dashboard)) if tokens(r)]) >= 1, found


def test_the_endpoints_dashboard_reads_only_what_the_drift_and_quality_checks_publish(built, endpoint_published):
    """drift_handler (drift, feature watch) and quality_handler -> MonitoredEndpoint's dashboard (monitored_endpoint.py
    _dashboard, feature_watch.py feature_watch_widgets, endpoint_quality.py widgets): every widget metric in the
    platform's namespaces, per-feature SEARCHes included, is one the checks published."""
    template, _ = built
    reads = [read for body in dashboards(template).values() for _, read in own(widget_reads(body))]
    assert len({r[0] for r in reads}) >= 2 and len(reads) >= 20, reads  # drift, feature watch and quality widgets
    assert unpublished(template, endpoint_published) == []
    assert [r for r in reads if foreign_tokens(template, r)] == []


def test_the_queues_dashboard_reads_only_what_its_jobs_watcher_and_agent_publish(queue_built, queue_published):
    """The job side's lines (health stops and warnings per rule, the progress heartbeat, goodput shares) and the queue
    instances' agent (GPU per queue and per queue and instance) -> TrainingQueue's dashboard (queue_monitoring.py
    queue_dashboard, goodput_alarms.py goodput_widget, health_alarms.py health_widgets): every widget metric in the
    platform's namespaces, the heartbeat SEARCH and the per-instance SELECT included, is one of those."""
    template, _, _ = queue_built
    reads = [read for body in dashboards(template).values() for _, read in own(widget_reads(body))]
    # GPU (2), goodput (3 shares), health (a stop and a warning per rule: 16, the heartbeat)
    assert len({r[0] for r in reads}) >= 3 and len(reads) >= 22, reads
    assert unpublished(template, queue_published) == []
    assert [r for r in reads if foreign_tokens(template, r)] == []


def test_the_fleets_dashboard_reads_only_what_its_watcher_and_agent_publish(fleet_built, fleet_published):
    """The interruption watcher's JobRunning (on the fleet's user-data variables) and the fleet instances' agent
    (GPU per group) -> SpotGpuFleet's dashboard (spot_gpu_fleet.py _dashboard): every widget metric in the
    platform's namespaces, the memory ratio's metric-math inputs included, is one of those."""
    reads = [read for body in dashboards(fleet_built).values() for _, read in own(widget_reads(body))]
    # GPU (utilization, memory used and total), JobRunning
    assert len({r[0] for r in reads}) >= 2 and len(reads) >= 4, reads
    assert unpublished(fleet_built, fleet_published) == []
    assert [r for r in reads if foreign_tokens(fleet_built, r)] == [] and sum(map(tokens, reads)) >= 3, reads


# The alarms' reads: (at least) how many metric reads in the platform's namespaces each template's alarms hold.
ALARM_READS = {"endpoint": 12,  # drift 5, quality 7 (the labels-lost alarm's math reads two)
               "queue": 13,  # GPU idle, memory used and total, 2 goodput, a stop per rule
               "fleet": 5}  # GPU idle, memory used and total, scale to zero's GPU and JobRunning


def test_every_alarm_reads_only_what_a_code_path_publishes(built, queue_built, fleet_built, endpoint_published,
                                                           queue_published, fleet_published):
    """Every metric a CloudWatch alarm reads in the platform's namespaces (its own, or each MetricStat of its metric
    math) -> what the code paths above publish for that template: the endpoint's drift, feature watch and quality
    alarms, the queue's GPU (gpu_alarms.py, on the agent's QueueName series), goodput and health alarms, the fleet's
    GPU alarms (on its group's series) and scale-to-zero alarm; each token in a read names a resource of the
    template."""
    templates = {"endpoint": (built[0], endpoint_published), "queue": (queue_built[0], queue_published),
                 "fleet": (fleet_built, fleet_published)}
    for name, (template, published) in templates.items():
        reads = alarm_reads(template)
        assert len(reads) >= ALARM_READS[name], (name, reads)
        assert [(alarm, read) for alarm, read in reads if not is_published(read, published)] == [], name
        assert [(alarm, read) for alarm, read in reads if foreign_tokens(template, read)] == [], name


def test_the_stall_watchers_stop_and_warning_are_read_by_the_queues_by_rule_widgets(queue_built, job_published,
                                                                                   stall_watcher_runs):
    """The stall watcher -> the queue's dashboard: stopped (the stall rule at stop) it publishes the job's own stall
    stop (one key, one alarm: test_metric_joins ties it to the stalled alarm); at warn it stops nothing and publishes
    a warning that the dashboard reads in the same widget as the job's own warnings by rule, as its stop is read
    with the job's stops: a warning under other dimensions (no Rule) would be read by no widget."""
    from ml_platform_constructs.runtime.handlers.stall_watcher import RULE
    from ml_platform_job.health import RULE_DIMENSION

    template, _, _ = queue_built
    reads = [(title, read) for body in dashboards(template).values() for title, read in own(widget_reads(body))]
    (stopping, (stop,)), (warning, (warned,)) = stall_watcher_runs["stop"], stall_watcher_runs["warn"]
    assert len(stopping["stopped"]) == 1 and stopping["warned"] == [], stopping
    assert len(warning["warned"]) == 1 and warning["stopped"] == [], warning
    assert stop in job_published
    (job_warning,) = [k for k in job_published if k[:2] == warned[:2] and (RULE_DIMENSION, RULE) in k[2]]
    for key, jobs in ((stop, stop), (warned, job_warning)):
        titles = {title for title, read in reads if is_published(read, {key})}
        assert titles and titles == {title for title, read in reads if is_published(read, {jobs})}, (key, titles)


def test_the_fleets_scale_to_zero_alarm_reads_the_watchers_job_running_and_the_agents_gpus(fleet_built):
    """The interruption watcher's JobRunning and the agent's GPU utilization -> SpotGpuFleet's scale-to-zero alarm
    (its state change sets the group to 0: the one scaling decision taken on the platform's own metrics): each
    metric of its expression is one they publish, and with the watcher's own values it breaches only with idle GPUs
    and no job: never while a job runs, on busy GPUs, or with either metric missing (an instance still booting, a
    watcher silent)."""
    from bench.cloudwatch_alarms import COMPARISONS

    published = job_running_published(fleet_built)
    alarm = fleet_built.find_resources("AWS::CloudWatch::Alarm")[logical_id(FLEET["fleet"].scale_to_zero_alarm)][
        "Properties"]
    ids = {}
    for metric in alarm["Metrics"]:
        if "MetricStat" in metric:
            stat = metric["MetricStat"]["Metric"]
            read = metric_key(stat["Namespace"], stat["MetricName"], stat.get("Dimensions", []))
            assert is_published(read, {k for k, _ in published.values()} | agent_published(fleet_built)), read
            ids[metric["Id"]] = read
    (job,) = [i for i, read in ids.items() if read == published[True][0]]
    (gpu,) = [i for i in ids if i != job]
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData", True) and "Expression" in m]

    def breaches(utilization, running):
        value = metric_math(expression, {gpu: utilization, job: None if running is None else published[running][1]})
        return COMPARISONS[alarm["ComparisonOperator"]](value, alarm["Threshold"])

    assert breaches(3.0, running=False)
    assert not any(breaches(u, r) for u, r in ((3.0, True), (95.0, False), (None, False), (3.0, None)))


def test_a_dashboard_reading_a_metric_nobody_publishes_fails_the_join(built, endpoint_published):
    """The check itself: the endpoint's dashboard with one platform widget's metric name changed (one letter's case)
    is found unpublished, and only that read."""
    template, _ = built
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard")
    body = dashboards(template)[dashboard]
    (title, read) = own(widget_reads(body))[0]
    for widget in body["widgets"]:
        for row in widget.get("properties", {}).get("metrics", []):
            if row[:2] == list(read[:2]):
                row[1] = row[1].swapcase()
                break
        else:
            continue
        break
    broken = [r for _, r in own(widget_reads(body)) if not is_published(r, endpoint_published)]
    assert broken == [(read[0], read[1].swapcase(), read[2])], broken


def scaling_reads(template) -> list[tuple]:
    """What the template's scaling policies read, Application Auto Scaling's and EC2 Auto Scaling's: a target tracking
    policy's customized metric (or each MetricStat of its metric math), and the alarms whose actions invoke a policy
    (a Ref of it, or its GetAtt Arn)."""
    policies = {**template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy"),
                **template.find_resources("AWS::AutoScaling::ScalingPolicy")}
    reads = []
    for policy in policies.values():
        properties = policy["Properties"]
        tracking = (properties.get("TargetTrackingScalingPolicyConfiguration")  # Application Auto Scaling
                    or properties.get("TargetTrackingConfiguration") or {})  # EC2 Auto Scaling
        custom = tracking.get("CustomizedMetricSpecification")
        if custom:
            metrics = [m["MetricStat"]["Metric"] for m in custom.get("Metrics", []) if "MetricStat" in m] or [custom]
            reads += [metric_key(m["Namespace"], m["MetricName"], m.get("Dimensions", [])) for m in metrics]

    def invokes(action) -> bool:
        return isinstance(action, dict) and (action.get("Ref") in policies
                                             or action.get("Fn::GetAtt", [None])[0] in policies)
    for alarm in template.find_resources("AWS::CloudWatch::Alarm").values():
        if any(invokes(a) for a in alarm["Properties"].get("AlarmActions", [])):
            reads += read_by(alarm["Properties"])
    return reads


def test_the_scaling_reader_reads_ec2_auto_scaling_policies(synth_stack):
    """The reader itself on EC2 Auto Scaling (no platform group scales on a policy; this group is built for the
    check, with hand-written metrics: the format, not the platform's names): a step policy's alarms, a target
    tracking policy's customized metric, and one in its metric-math form (each MetricStat)."""
    from aws_cdk import aws_autoscaling as autoscaling
    from aws_cdk import aws_cloudwatch as cloudwatch
    from aws_cdk import aws_ec2 as ec2

    from tests.conftest import isolated_vpc

    def metric(name: str):
        return cloudwatch.Metric(namespace="N/a", metric_name=name, dimensions_map={"A": "1"})

    def body(stack):
        group = autoscaling.AutoScalingGroup(stack, "Group", vpc=isolated_vpc(stack),
                                             instance_type=ec2.InstanceType("t3.micro"),
                                             machine_image=ec2.MachineImage.generic_linux({"us-east-1": "ami-1234"}))
        # A step policy as scale_on_metric synthesizes it (a policy and an alarm each way, the alarm's action a Ref of
        # its policy), written out: scale_on_metric passes aws-cdk-lib's own StepScalingAction a deprecated prop
        # (cooldown), which the suite's JSII_DEPRECATED=fail refuses (tests/conftest.py).
        for way, comparison, threshold, change in (("Lower", "LESS_THAN_OR_EQUAL_TO_THRESHOLD", 10, -1),
                                                   ("Upper", "GREATER_THAN_OR_EQUAL_TO_THRESHOLD", 50, 1)):
            step = autoscaling.CfnScalingPolicy.StepAdjustmentProperty(
                scaling_adjustment=change, **({"metric_interval_upper_bound": 0} if change < 0 else
                                              {"metric_interval_lower_bound": 0}))
            policy = autoscaling.CfnScalingPolicy(
                stack, f"Step{way}", auto_scaling_group_name=group.auto_scaling_group_name, policy_type="StepScaling",
                adjustment_type="ChangeInCapacity", step_adjustments=[step])
            alarm = cloudwatch.Alarm(stack, f"Step{way}Alarm", metric=metric("Step"), threshold=threshold,
                                     comparison_operator=getattr(cloudwatch.ComparisonOperator, comparison),
                                     evaluation_periods=1)
            alarm.node.default_child.alarm_actions = [policy.ref]
        group.scale_to_track_metric("Track", metric=metric("Track"), target_value=50)
        dimension = autoscaling.CfnScalingPolicy.MetricDimensionProperty(name="A", value="1")
        autoscaling.CfnScalingPolicy(
            stack, "Math", auto_scaling_group_name=group.auto_scaling_group_name, policy_type="TargetTrackingScaling",
            target_tracking_configuration=autoscaling.CfnScalingPolicy.TargetTrackingConfigurationProperty(
                target_value=50, customized_metric_specification=autoscaling.CfnScalingPolicy.
                CustomizedMetricSpecificationProperty(metrics=[
                    autoscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
                        id=f"m{i}", return_data=False, metric_stat=autoscaling.CfnScalingPolicy.
                        TargetTrackingMetricStatProperty(stat="Sum", metric=autoscaling.CfnScalingPolicy.
                                                         MetricProperty(namespace="N/a", metric_name=name,
                                                                        dimensions=[dimension])))
                    for i, name in enumerate(("Math1", "Math2"))] + [
                    autoscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
                        id="e", expression="m0 / m1", return_data=True)])))
    template = synth_stack(body)
    assert template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy") == {}
    assert sorted(scaling_reads(template)) == sorted(
        ("N/a", name, (("A", "1"),)) for name in ("Step", "Step", "Track", "Math1", "Math2"))


def test_no_scaling_policy_reads_a_platform_metric(synth_stack, built, queue_built, fleet_built):
    """An endpoint with auto scaling (every policy: target tracking on invocations, the latency step policies) and the
    templates above: the metrics their scaling policies and policy alarms read are all AWS/*. A policy that reads a
    platform metric must first get a join test here (see the module's docstring)."""
    from ml_platform_constructs import EndpointAutoScaling
    from tests.unit.test_endpoint_quality import endpoint

    scaled = synth_stack(lambda stack: endpoint(stack, auto_scaling=EndpointAutoScaling(
        min_capacity=1, max_capacity=4, invocations_per_instance=100)))
    reads = scaling_reads(scaled)
    assert reads, "the endpoint's scaling synthesized no policy alarm to check"
    for template in (scaled, built[0], queue_built[0], fleet_built):
        assert [r for r in scaling_reads(template) if not r[0].startswith("AWS/")] == []


def budget_guard_built(synth_stack):
    from aws_cdk import aws_kms as kms

    from ml_platform_constructs import AlertTopic, BudgetGuard

    def body(stack):
        key = kms.Key(stack, "Key")
        BudgetGuard(stack, "Guard", monthly_limit=1500, alerts=AlertTopic(stack, "Alerts", master_key=key).topic,
                    key=key, environment="dev")
    return synth_stack(body)


def test_nothing_reads_the_budget_guards_metrics(world, synth_stack, built, queue_built, fleet_built,
                                                 endpoint_published, queue_published, fleet_published):
    """runtime/handlers/budget_guard.py's spend check (on tests/unit/test_budget_guard_queues.py's world) publishes its cost
    metrics; none of what it published is read by these templates' dashboards, alarms or scaling policies, the
    BudgetGuard's own among them (no join to tie: a reader added later must be tied like the others), and no other
    code path here publishes to its namespace."""
    from ml_platform_constructs.runtime.handlers import budget_guard
    from tests.unit.test_budget_guard_queues import NOW as GUARD_NOW, PRICES

    recording = Recording()
    budget_guard.handle({}, {**world["clients"], "cloudwatch": recording}, world["env"], GUARD_NOW, PRICES)
    namespaces = {key[0] for key, _ in recording.data}
    assert len(namespaces) == 1 and len(recording.data) >= 3, recording.data
    readers = []
    for template in (built[0], queue_built[0], fleet_built, budget_guard_built(synth_stack)):
        readers += [read for body in dashboards(template).values() for _, read in widget_reads(body)]
        readers += [read for alarm in template.find_resources("AWS::CloudWatch::Alarm").values()
                    for read in read_by(alarm["Properties"])]
        readers += scaling_reads(template)
    assert [r for r in readers if r[0] in namespaces] == []
    assert not [k for k in endpoint_published | queue_published | fleet_published if k[0] in namespaces]
