"""The joins between what the platform publishes and what its dashboards read (issue 42, part 2): every widget metric of
a synthesized dashboard in one of the platform's own namespaces (anything not ``AWS/*``) must name a namespace, metric
name and dimension set that a real code path publishes, collected by running that code as tests/unit/test_metric_joins
does (its fixtures and helpers are reused): the drift check and its feature watch and the quality check (runtime
handlers on the synthesized variables, stub CloudWatch), the job side's embedded-metric lines (TrainingJob's health
stops, warnings and heartbeat, PhaseClock's goodput windows), the CloudWatch agent's GPU
aggregations (the agent configuration the instances' user data writes) and the interruption watcher's JobRunning (its
put-metric-data command line, on the fleet's synthesized variables). A widget row, a ``...``/``.`` shorthand row, a
SEARCH expression (its schema's dimension set, its MetricName and dimension filters) and a Metrics Insights SELECT
(FROM SCHEMA's dimension set, its WHERE filters) each count as a read. Dimension values are compared where both sides
are literal (a token of the template, or an agent variable such as ``${aws:InstanceId}``, stands for any value).

Dashboards covered: the MonitoredEndpoint's (drift, feature watch, quality), the TrainingQueue's (GPU, goodput,
health) and the SpotGpuFleet's (GPU, JobRunning).

Scaling: no Application Auto Scaling policy reads a platform metric. The only ones the platform builds are the
endpoint's (serving/endpoint_scaling.py): predefined SageMaker metrics, and step policies on alarms over ``AWS/SageMaker``
(the P99 scale-out reads ModelLatency); ``target_metric`` is a metric of the user's own. The test below synthesizes an
endpoint with auto scaling and asserts every metric its scaling policies and their alarms read is ``AWS/*``, so a
policy that starts reading a platform metric must be tied here first. The one scaling decision taken on a platform
metric is the fleet's scale-to-zero alarm (its state change sets the group to 0 through an EventBridge rule): its
metric math reads the interruption watcher's JobRunning and the agent's GPU utilization, tied below with the
watcher's own values.

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
                                          goodput_job, logical_id, metric_key, metric_lines, queue_built, quality_run,
                                          read_by, stub_job)


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
    batch at the baseline, a batch with a real drop) publish on the endpoint's synthesized variables."""
    template, _ = built
    published = {key for _, recording in drift_runs.values() for key, _ in recording.data}
    for right_per_100 in (92, 70):
        with pytest.MonkeyPatch.context() as patch, mock_aws():
            patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
            s3 = boto3.client("s3")
            for bucket in ("capture", "datasets"):
                s3.create_bucket(Bucket=bucket)
            summary, recording = quality_run(template, s3, right_per_100)
            assert summary["judged"], summary
            published |= {key for key, _ in recording.data}
    return published


@pytest.fixture(scope="module")
def queue_published(queue_built) -> set[tuple]:
    """What a queue's job prints (each rule's stop and warning, its heartbeat, its goodput windows: a healthy job and
    a bound one) and what the queue instances' agent publishes. (The stall watcher publishes the job's own stop
    metric; tests/unit/test_metric_joins.py ties the two.)"""
    from ml_platform_job.health import Verdict
    from ml_platform_job.job import TrainingJob

    template, _, job_env = queue_built
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
    published = {key for line in lines for key, _, _ in extracted(line)}
    return published | agent_published(template)


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


def test_the_endpoints_dashboard_reads_only_what_the_drift_and_quality_checks_publish(built, endpoint_published):
    """drift_handler (drift, feature watch) and quality_handler -> MonitoredEndpoint's dashboard (monitored_endpoint.py
    _dashboard, feature_watch.py feature_watch_widgets, endpoint_quality.py widgets): every widget metric in the
    platform's namespaces, per-feature SEARCHes included, is one the checks published."""
    template, _ = built
    reads = [read for body in dashboards(template).values() for _, read in own(widget_reads(body))]
    assert len({r[0] for r in reads}) >= 2 and len(reads) >= 20, reads  # drift, feature watch and quality widgets
    assert unpublished(template, endpoint_published) == []


def test_the_queues_dashboard_reads_only_what_its_jobs_watcher_and_agent_publish(queue_built, queue_published):
    """The job side's lines (health stops and warnings per rule, the progress heartbeat, goodput shares) and the queue
    instances' agent (GPU per queue and per queue and instance) -> TrainingQueue's dashboard (queue_monitoring.py
    queue_dashboard, goodput_alarms.py goodput_widget, health_alarms.py health_widgets): every widget metric in the
    platform's namespaces, the heartbeat SEARCH and the per-instance SELECT included, is one of those."""
    template, _, _ = queue_built
    reads = [read for body in dashboards(template).values() for _, read in own(widget_reads(body))]
    assert len({r[0] for r in reads}) >= 3, reads  # GPU, goodput, health
    assert unpublished(template, queue_published) == []


def test_the_fleets_dashboard_reads_only_what_its_watcher_and_agent_publish(fleet_built, fleet_published):
    """The interruption watcher's JobRunning (on the fleet's user-data variables) and the fleet instances' agent
    (GPU per group) -> SpotGpuFleet's dashboard (spot_gpu_fleet.py _dashboard): every widget metric in the
    platform's namespaces, the memory ratio's metric-math inputs included, is one of those."""
    reads = [read for body in dashboards(fleet_built).values() for _, read in own(widget_reads(body))]
    assert len({r[0] for r in reads}) >= 2, reads  # GPU, JobRunning
    assert unpublished(fleet_built, fleet_published) == []


def metric_math(expression: str, values: dict):
    """A CloudWatch metric-math expression of IF, FILL, AND/OR and comparisons on ``values`` (None: no datapoint)
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html)."""
    import ast

    python = re.sub(r"\bAND\b", "and", re.sub(r"\bOR\b", "or", expression))
    tree = ast.parse(python, mode="eval")
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert calls <= {"IF", "FILL"}, f"a function this evaluator does not know: {expression}"
    functions = {"IF": lambda condition, then, otherwise: then if condition else otherwise,
                 "FILL": lambda value, filler: filler if value is None else value}
    return eval(compile(tree, "<math>", "eval"), {"__builtins__": {}}, {**functions, **values})  # noqa: S307


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
    """What the template's Application Auto Scaling policies read: a target tracking policy's customized metric (or its
    metric math), and the alarms whose actions invoke a policy."""
    policies = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    reads = []
    for policy in policies.values():
        tracking = policy["Properties"].get("TargetTrackingScalingPolicyConfiguration", {})
        custom = tracking.get("CustomizedMetricSpecification")
        if custom:
            metrics = [m["MetricStat"]["Metric"] for m in custom.get("Metrics", []) if "MetricStat" in m] or [custom]
            reads += [metric_key(m["Namespace"], m["MetricName"], m.get("Dimensions", [])) for m in metrics]
    for alarm in template.find_resources("AWS::CloudWatch::Alarm").values():
        if any(isinstance(a, dict) and a.get("Ref") in policies for a in alarm["Properties"].get("AlarmActions", [])):
            reads += read_by(alarm["Properties"])
    return reads


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
