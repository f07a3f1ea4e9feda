"""A queue's training health as synthesized: one alarm per rule on the job's HealthStop metric (5-minute Sum >= 1, 1
of 1, missing data not breaching) to the alert topic with the rule's fix; the joins that make them work (the job's
own embedded-metric lines read as CloudWatch extracts them reach exactly the rule's alarm, a warning none; the job
definitions' variables read back by the job side; the stall watcher's settings and metric); the stall watcher's
schedule, rights and log; the props' validation; the retry strategy that ends a health stop (exit 85)."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys

import pytest
from aws_cdk.assertions import Capture, Match

from bench.cloudwatch_alarms import ALARM, OK, CloudWatchAlarm
from ml_platform_constructs.errors import ValidationError
from ml_platform_constructs.foundation.runtime_function import runtime_source
from ml_platform_constructs.runtime.handlers.stall_watcher import WATCHER_TAG, Settings, watch
from ml_platform_constructs.training.health_alarms import (DESCRIPTION_LIMIT, MEANINGS, health_environment,
                                                           rule_meanings, stop_description)
from ml_platform_job import health
from ml_platform_job.health import (DEFAULT_ACTIONS, FIXES, HEALTH_STOPPED_EXIT_CODE, HEARTBEAT_METRIC, RULES,
                                    STOP_METRIC, WARNING_METRIC, HealthRules, metric_line)
from tests.conftest import training_queue
from tests.unit.test_stall_watcher import HOUR, NOW, CheckedBatch, FakeCloudWatch

ALARM_KEYS = ("Namespace", "MetricName", "Dimensions", "Statistic", "Period", "Threshold", "EvaluationPeriods",
              "DatapointsToAlarm", "ComparisonOperator", "TreatMissingData")


@pytest.fixture(scope="module")
def built(synth_stack):
    queues = {}

    def body(name, **props):
        def make(stack):
            queues[name] = training_queue(stack, queue_name="training", **props)
        return make

    return {name: (synth_stack(body(name, **props)), queues) for name, props in (
        ("default", {}),
        ("tuned", {"health_mode": "warn", "stalled_minutes": 60, "health_rules": {"overfit": "stop"}}),
        ("no stall", {"stalled_minutes": None}),
        ("off", {"health_mode": "off"}),
        ("stall rule off", {"health_rules": {"stalled": "off"}}),
    )}


def template(built, name="default"):
    return built[name][0]


def alarms(template_) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in template_.find_resources("AWS::CloudWatch::Alarm").items()}


def health_alarms(template_) -> dict[str, dict]:
    """The health alarms by their Rule dimension."""
    found = {}
    for props in alarms(template_).values():
        dimensions = {d["Name"]: d["Value"] for d in props.get("Dimensions", [])}
        if props.get("Namespace") == health.HEALTH_NAMESPACE:
            found[dimensions["Rule"]] = props
    return found


# --- the alarms -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
def test_each_rule_has_an_alarm_on_its_stops_in_5_minute_sums_1_of_1_to_the_alerts(built, rule):
    alerts = next(k for k in template(built).find_resources("AWS::SNS::Topic") if k.startswith("Alerts"))
    template(built).has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Health", "MetricName": "HealthStop", "Statistic": "Sum", "Period": 300,
        "Dimensions": [{"Name": "Queue", "Value": "training"}, {"Name": "Rule", "Value": rule}],
        "Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold", "EvaluationPeriods": 1,
        "DatapointsToAlarm": 1, "TreatMissingData": "notBreaching", "AlarmActions": [{"Ref": alerts}]})


def test_every_rule_and_only_the_stops_have_alarms_whatever_the_mode(built):
    for name in built:
        found = health_alarms(template(built, name))
        assert sorted(found) == sorted(RULES), name
        assert {props["MetricName"] for props in found.values()} == {"HealthStop"}
    assert set(built["default"][1]["default"].health_alarms) == set(RULES)


@pytest.mark.parametrize("rule", RULES)
def test_each_alarm_says_the_rule_what_it_means_its_fix_and_where_the_values_are(built, rule):
    description = Capture()
    template(built).has_resource_properties("AWS::CloudWatch::Alarm", {
        "Dimensions": [Match.any_value(), {"Name": "Rule", "Value": rule}], "AlarmDescription": description})
    text = description.as_string()
    assert len(text) <= DESCRIPTION_LIMIT
    assert f"health rule {rule}:" in text and "Training queue training" in text
    assert f"Fix: {FIXES[rule]}." in text  # whole: every fix fits
    assert "./platform runs show ENV RUN_ID" in text and "./platform job logs ENV JOB_ID" in text
    assert f"exited {HEALTH_STOPPED_EXIT_CODE}, which the queue does not retry" in text
    assert ("only warns by default" in text) == (DEFAULT_ACTIONS[rule] == "warn")
    if rule != "stalled":
        assert MEANINGS[rule] in text
    # the log line it names is the one the job prints (health.Verdict.line)
    quoted = re.search(r"'(ml_platform_job health: [^']*) at step N'", text).group(1)
    assert health.Verdict(rule, "stop", 1200, {}, "why").line().startswith(f"{quoted} at step 1200: why")


def test_the_stalled_alarm_names_the_queues_stall_time_and_the_watchers(built):
    assert "for 30 minutes" in health_alarms(template(built))["stalled"]["AlarmDescription"]
    assert "no progress heartbeat for 45 minutes" in health_alarms(template(built))["stalled"]["AlarmDescription"]
    tuned = health_alarms(template(built, "tuned"))["stalled"]["AlarmDescription"]
    assert "for 60 minutes" in tuned and "for 75 minutes" in tuned


def test_each_rules_meaning_comes_from_the_job_sides_table():
    assert all(not text.startswith("see the rules' table") for text in MEANINGS.values()), MEANINGS
    assert "NaN or inf" in MEANINGS["non_finite"] and "``" not in " ".join(MEANINGS.values())
    assert rule_meanings(None)["overfit"] == "see the rules' table of ml_platform_job.health"


def test_a_long_fix_is_shortened_to_fit_1024_characters(monkeypatch):
    monkeypatch.setitem(FIXES, "overfit", "x " * 600)
    text = stop_description("a-queue-name-of-forty-characters-at-most", "overfit")
    assert len(text) <= DESCRIPTION_LIMIT and "...  The job exited 85" not in text and text.endswith(
        "RunId is in the stop's log line).")


# --- the join: the job's own lines, read as CloudWatch extracts them --------------------------------------------

def extracted(line: str) -> list[dict]:
    """The metrics CloudWatch Logs extracts from an embedded-metric-format line: per dimension set of each directive,
    each metric with its value, unit and the line's timestamp."""
    document = json.loads(line)
    metrics = []
    for directive in document["_aws"]["CloudWatchMetrics"]:
        for dimension_set in directive["Dimensions"]:
            for metric in directive["Metrics"]:
                metrics.append({"Namespace": directive["Namespace"], "MetricName": metric["Name"],
                                "Dimensions": sorted(({"Name": d, "Value": str(document[d])} for d in dimension_set),
                                                     key=lambda d: d["Name"]),
                                "Unit": metric.get("Unit"), "Value": document[metric["Name"]],
                                "Timestamp": document["_aws"]["Timestamp"] / 1000})
    return metrics


def reading(template_, metric: dict) -> list[dict]:
    """The alarms of the template that read exactly this metric (namespace, name and dimension set)."""
    return [props for props in alarms(template_).values()
            if (props.get("Namespace"), props.get("MetricName")) == (metric["Namespace"], metric["MetricName"])
            and sorted(props.get("Dimensions", []), key=lambda d: d["Name"]) == metric["Dimensions"]
            and props.get("Unit") in (None, metric["Unit"])]


@pytest.mark.parametrize("rule", RULES)
def test_a_stop_line_of_the_job_reaches_exactly_its_rules_alarm_and_breaches_it(built, rule):
    queue = built["default"][1]["default"]
    line = metric_line(STOP_METRIC, queue.queue_name, rule, wall=NOW + 17,
                       fields={"Step": 1200, "RunId": "abc", "Values": {"loss": "nan"}})
    (metric,) = extracted(line)
    (props,) = reading(template(built), metric)
    assert props is health_alarms(template(built))[rule] or props == health_alarms(template(built))[rule]
    assert {d["Name"]: d["Value"] for d in props["Dimensions"]} == {
        d["Name"]: d["Value"] for d in metric["Dimensions"]}
    evaluator = CloudWatchAlarm.from_template(props)
    assert evaluator.breaches(metric["Value"])
    timeline = evaluator.states([(metric["Timestamp"], metric["Value"])], NOW - 600, NOW + 1500)
    # ALARM from the end of the period that holds the stop, while that period is in the evaluation range (the most
    # recent real datapoint decides): 3 periods, so further stops of the rule in those 15 minutes notify no more
    assert [state for _, state in timeline] == [OK, OK, ALARM, ALARM, ALARM, OK, OK]


@pytest.mark.parametrize("rule", RULES)
def test_a_warning_line_and_the_heartbeat_reach_no_alarm(built, rule):
    warning = extracted(metric_line(WARNING_METRIC, "training", rule, wall=NOW))
    heartbeat = extracted(metric_line(HEARTBEAT_METRIC, "training", job_id="job-1", value=40, wall=NOW))
    for metric in warning + heartbeat:
        assert reading(template(built), metric) == []
    # the warning is charted: the dashboard's health row holds it per rule
    charted = [m[:6] for w in dashboard_widgets(template(built)) for m in w.get("properties", {}).get("metrics", [])]
    (metric,) = warning
    assert [metric["Namespace"], metric["MetricName"], "Queue", "training", "Rule", rule] in charted


def dashboard_widgets(template_) -> list[dict]:
    """The dashboard's widgets, its body's references replaced by a placeholder."""
    body = next(iter(template_.find_resources("AWS::CloudWatch::Dashboard").values()))["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return json.loads("".join(p if isinstance(p, str) else "REF" for p in parts))["widgets"]


def test_the_dashboard_row_charts_stops_warnings_and_each_jobs_progress(built):
    widgets = {w["properties"]["title"]: w["properties"] for w in dashboard_widgets(template(built))
               if "title" in w.get("properties", {})}
    stops = widgets[f"training: health stops by rule (jobs stopped, exit {HEALTH_STOPPED_EXIT_CODE})"]["metrics"]
    warnings = widgets["training: health warnings by rule (jobs train on)"]["metrics"]
    assert [m[:6] for m in stops] == [["MLPlatform/Health", "HealthStop", "Queue", "training", "Rule", r]
                                      for r in RULES]
    assert [m[1:6] for m in warnings] == [[WARNING_METRIC, "Queue", "training", "Rule", r] for r in RULES]
    assert all(m[-1]["stat"] == "Sum" and m[-1].get("period", 300) == 300 for m in stops + warnings)
    (progress,) = widgets["training: progress per job (steps and evaluation batches)"]["metrics"]
    assert progress[0]["expression"] == ("SEARCH('{MLPlatform/Health,Queue,JobId} MetricName=\"Progress\" "
                                         "Queue=\"training\"', 'Sum', 300)")


# --- the job definitions' variables, read back by the job side ---------------------------------------------------

def definition_environments(template_) -> list[dict]:
    return [{e["Name"]: e["Value"] for e in d["Properties"]["ContainerProperties"]["Environment"]}
            for d in template_.find_resources("AWS::Batch::JobDefinition").values()]


@pytest.mark.parametrize("name, expected, actions", [
    ("default", {"ML_PLATFORM_HEALTH": "stop", "ML_PLATFORM_HEALTH_STALL_SECONDS": "1800"},
     {"stalled": "stop", "overfit": "warn"}),
    ("tuned", {"ML_PLATFORM_HEALTH": "warn", "ML_PLATFORM_HEALTH_STALL_SECONDS": "3600",
               "ML_PLATFORM_HEALTH_RULES": "overfit=stop"}, {"stalled": "warn", "overfit": "warn"}),
    ("no stall", {"ML_PLATFORM_HEALTH": "stop", "ML_PLATFORM_HEALTH_RULES": "stalled=off"},
     {"stalled": "off", "non_finite": "stop"}),
    ("off", {"ML_PLATFORM_HEALTH": "off", "ML_PLATFORM_HEALTH_STALL_SECONDS": "1800"}, {"non_finite": "off"}),
])
def test_every_job_definition_gives_the_jobs_the_queues_health_settings(built, name, expected, actions):
    environments = definition_environments(template(built, name))
    assert environments
    for environment in environments:
        assert {k: v for k, v in environment.items() if k.startswith("ML_PLATFORM_HEALTH")} == expected
        rules = HealthRules.from_env(environment)  # what the job reads
        assert {rule: rules.action(rule) for rule in actions} == actions
        assert rules.stall_seconds == float(expected.get("ML_PLATFORM_HEALTH_STALL_SECONDS", 1800))


def test_health_environment_lists_rules_in_the_job_sides_order():
    assert health_environment(mode="stop", stall_minutes=20, rules={"overfit": "stop", "non_finite": "warn"}) == {
        "ML_PLATFORM_HEALTH": "stop", "ML_PLATFORM_HEALTH_STALL_SECONDS": "1200",
        "ML_PLATFORM_HEALTH_RULES": "non_finite=warn,overfit=stop"}
    assert health_environment() == {"ML_PLATFORM_HEALTH": "stop", "ML_PLATFORM_HEALTH_STALL_SECONDS": "1800"}


# --- the stall watcher ------------------------------------------------------------------------------------------

def watcher(template_) -> dict:
    functions = template_.find_resources("AWS::Lambda::Function")
    return next((v["Properties"] for k, v in functions.items() if "StallWatcher" in k), None)


def test_the_watcher_runs_every_5_minutes_and_logs_a_year_encrypted(built):
    t = template(built)
    function = watcher(t)
    assert (function["Handler"], function["Timeout"], function["Runtime"]) == ("stall_watcher.handler", 60,
                                                                               "python3.14")
    name = next(k for k in t.find_resources("AWS::Lambda::Function") if "StallWatcher" in k)
    t.has_resource_properties("AWS::Events::Rule", {
        "ScheduleExpression": "rate(5 minutes)", "State": "ENABLED",
        "Targets": [Match.object_like({"Arn": {"Fn::GetAtt": [name, "Arn"]},
                                       "RetryPolicy": {"MaximumRetryAttempts": 0}})]})
    t.resource_count_is("AWS::Lambda::EventInvokeConfig", 0)  # Lambda's own retries: each run judges afresh
    log_group = function["LoggingConfig"]["LogGroup"]["Ref"]
    logs = t.find_resources("AWS::Logs::LogGroup")[log_group]["Properties"]
    assert logs["RetentionInDays"] == 365 and "KmsKeyId" in logs


def test_the_watcher_may_list_its_jobs_stop_and_mark_jobs_read_metrics_and_publish_health_only(built):
    t = template(built)
    role = watcher(t)["Role"]["Fn::GetAtt"][0]
    statements = Capture()
    t.has_resource_properties("AWS::IAM::Policy", {
        "Roles": [{"Ref": role}], "PolicyDocument": {"Statement": statements}})
    by_sid = {s.get("Sid"): s for s in statements.as_array()}
    assert set(by_sid) == {"ListQueueJobs", "StopStalledJobs", "MarkStalledJobs", "ReadHeartbeats",
                           "PublishHealthStops"}
    assert (by_sid["ListQueueJobs"]["Action"], by_sid["ListQueueJobs"]["Resource"]) == (
        ["batch:DescribeJobs", "batch:ListJobs"], "*")
    jobs = "arn:aws:batch:us-east-1:123456789012:job/*"  # the stack's partition, Region and account
    assert (by_sid["StopStalledJobs"]["Action"], by_sid["StopStalledJobs"]["Resource"]) == ("batch:TerminateJob", jobs)
    assert by_sid["MarkStalledJobs"]["Condition"] == {"ForAllValues:StringEquals": {"aws:TagKeys": [WATCHER_TAG]}}
    assert by_sid["MarkStalledJobs"]["Resource"] == jobs
    assert by_sid["ReadHeartbeats"]["Action"] == "cloudwatch:GetMetricData"
    assert by_sid["PublishHealthStops"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": health.HEALTH_NAMESPACE}}
    assert all("Condition" not in s for sid, s in by_sid.items()
               if sid in ("ListQueueJobs", "StopStalledJobs", "ReadHeartbeats"))


@pytest.mark.parametrize("name, present", [("default", True), ("tuned", True), ("no stall", False), ("off", False),
                                           ("stall rule off", False)])
def test_the_watcher_exists_only_where_the_jobs_stall_check_by_default(built, name, present):
    assert (watcher(template(built, name)) is not None) == present
    queue = built[name][1][name]
    assert (queue.stall_watcher is not None) == present


def test_the_watchers_settings_are_the_job_definitions_and_its_stop_reaches_the_stalled_alarm(built):
    """The function's synthesized environment, run against a Batch job of the queue that heartbeats then goes
    silent: it is stopped, and the metric the watcher publishes is read by exactly the stalled alarm."""
    variables = dict(watcher(template(built))["Environment"]["Variables"])
    batch = CheckedBatch()
    cloudwatch = FakeCloudWatch(lambda: NOW)
    assert variables.pop("JOB_QUEUES") == {"Ref": next(k for k in template(built).find_resources(
        "AWS::Batch::JobQueue"))}
    queue_arn = batch.add_queue("training-queue", tags={})
    definition = batch.register("training-definition")
    (job_environment,) = definition_environments(template(built))
    assert {k: v for k, v in variables.items() if k.startswith("ML_PLATFORM_HEALTH")} == {
        k: v for k, v in job_environment.items() if k.startswith("ML_PLATFORM_HEALTH")}
    job = batch.add_job("stuck", queue_arn, "RUNNING", definition=definition,
                        environment=tuple(job_environment.items()), started_at=int((NOW - 3 * HOUR) * 1000))
    for minute in range(120):
        cloudwatch.ingest(metric_line(HEARTBEAT_METRIC, job_environment["ML_PLATFORM_QUEUE_NAME"], job_id=job,
                                      value=10, wall=NOW - 3 * HOUR + minute * 60))
    report = watch(batch, cloudwatch, Settings.from_env({**variables, "JOB_QUEUES": queue_arn}), now=NOW)
    assert report["stopped"] == [job]
    (published,) = cloudwatch.published
    metric = {"Namespace": published["Namespace"], "MetricName": published["MetricName"], "Unit": published["Unit"],
              "Dimensions": sorted(published["Dimensions"], key=lambda d: d["Name"])}
    (props,) = reading(template(built), metric)
    assert props == health_alarms(template(built))["stalled"]
    assert CloudWatchAlarm.from_template(props).breaches(published["Value"])


def test_the_functions_files_import_without_the_job_side_package(tmp_path):
    """In Lambda, stall_watcher.py finds the job side's health.py beside it (no ml_platform_job package)."""
    for name in ("stall_watcher.py", "health.py"):
        (tmp_path / name).write_bytes(runtime_source(name).read_bytes())
    code = ("import sys; import stall_watcher; assert 'ml_platform_job' not in sys.modules; "
            "print(stall_watcher.HEALTH_NAMESPACE, stall_watcher.decide(running_seconds=3000, threshold_seconds=2700, "
            "startup_seconds=4500, sent=True, progressed=5, since_last_line=2800), stall_watcher.STARTUP_FACTOR)")
    result = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "MLPlatform/Health stalled 2.0"


# --- the props ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("props, message", [
    ({"health_mode": "halt"}, r"health_mode='halt' is invalid: one of 'stop', 'warn', 'off'\. Fix: set "
                              r"health_mode='warn'"),
    ({"stalled_minutes": 5}, r"stalled_minutes=5 is invalid: whole minutes from 10 to 1440, or None .*Fix: set "
                             r"stalled_minutes to e\.g\. 30"),
    ({"stalled_minutes": 1441}, r"stalled_minutes=1441 is invalid: whole minutes from 10 to 1440"),
    ({"stalled_minutes": 30.5}, r"stalled_minutes=30\.5 is invalid"),
    ({"stalled_minutes": True}, r"stalled_minutes=True is invalid"),
    ({"health_rules": {"nan": "stop"}}, r"health_rules\['nan'\]='stop' is invalid: a rule of non_finite, "
                                        r"exploding_gradients.*Fix: use one of those names"),
    ({"health_rules": {"overfit": "kill"}}, r"health_rules\['overfit'\]='kill' is invalid: one of 'stop', 'warn', "
                                            r"'off'\. Fix: e\.g\. \{'overfit': 'warn'\} \(its default is 'warn'\)"),
    ({"stalled_minutes": None, "health_rules": {"stalled": "stop"}},
     r"health_rules\['stalled'\]='stop' is invalid: absent or 'off' when stalled_minutes=None.*Fix: remove "
     r"health_rules\['stalled'\], or give stalled_minutes"),
])
def test_bad_health_props_fail_at_synth_naming_the_prop_value_range_and_fix(synth_stack, props, message):
    with pytest.raises(ValidationError, match=message):
        synth_stack(lambda stack: training_queue(stack, **props))


# --- the retry strategy ends a health stop ----------------------------------------------------------------------

def batch_decides(entries: list[dict], *, exit_code=None, reason="", status_reason="") -> str:
    """Batch's choice for an ended attempt: the first EvaluateOnExit entry whose every given pattern matches (a
    pattern may end with "*"), RETRY when none does (https://docs.aws.amazon.com/batch/latest/userguide/
    job_retries.html)."""
    values = {"OnExitCode": "" if exit_code is None else str(exit_code), "OnReason": reason,
              "OnStatusReason": status_reason}
    for entry in entries:
        patterns = {k: v for k, v in entry.items() if k in values}
        if all(fnmatch.fnmatchcase(values[k], v) for k, v in patterns.items()):
            return entry["Action"].upper()
    return "RETRY"


def test_a_health_stop_is_not_retried_and_a_spot_stop_is(built):
    t = template(built)
    definitions = [d["Properties"] for d in t.find_resources("AWS::Batch::JobDefinition").values()]
    for definition in definitions:
        entries = definition["RetryStrategy"]["EvaluateOnExit"]
        assert len(entries) <= 5 and all(re.fullmatch(r"[^*]*\*?", v) for e in entries for k, v in e.items()
                                         if k != "Action")
        exited = "Essential container in task exited"
        assert batch_decides(entries, exit_code=HEALTH_STOPPED_EXIT_CODE, status_reason=exited) == "EXIT"
        assert batch_decides(entries, exit_code=143, status_reason=exited) == "RETRY"
        assert batch_decides(entries, exit_code=1, status_reason=exited) == "EXIT"
        assert batch_decides(entries, status_reason="Host EC2 (instance i-0abc) terminated.") == "RETRY"
