"""A training queue's health alarms: a job that stopped itself because it diverged, produced NaN, or stalled
(``ml_platform_job.health``), told to the queue's alert topic with the rule's fix. The job side prints one
embedded-metric-format line per stop (``HealthStop``, dimensions Queue and Rule; ``health.metric_line``), which
CloudWatch Logs turns into a metric; the queue's stall watcher (runtime/handlers/stall_watcher.py) publishes the same metric for
a job it stopped. Warnings (``HealthWarning``) reach the dashboard only: a warning trains on, so nobody needs to act.

The alarms' shape, replayed against the job's own lines in tests/unit/test_health_alarms.py:

- One alarm per rule of ``health.RULES``, the warn-by-default rules included: a job (or the queue's ``health_rules``)
  may turn one to stop, and its stop must reach the topic with its own fix. Seven alarms rather than one metric-math
  alarm over a SEARCH: an alarm's description is static text, and only one alarm per rule can carry that rule's fix;
  an alarm cannot be based on a SEARCH expression either
  (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Create-alarm-on-metric-math-expression.html).
- Statistic Sum, threshold >= 1, 1 of 1 datapoint: one stop is an event to act on, never noise to average.
- Period 5 minutes, not 1: the metric comes from the job's log, and CloudWatch's page on alarms from embedded metrics
  warns that a late log makes an alarm evaluate partial or missing data
  (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Alarms.html). A
  line that arrives a few minutes late still lands in a period the alarm evaluates (it retrieves more periods than it
  evaluates: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html), where a 1-minute
  period would have been judged already. The cost: the notice comes up to 5 minutes later, for a job that has
  already stopped (nothing runs meanwhile). The alarm stays in ALARM while the stop's period is in that range (about
  15 minutes: the most recent real datapoint decides), so further stops of the rule meanwhile notify no more; each
  stopped job also reaches the topic through the queue's failed-job rule.
- Missing data not breaching: no line is no stop
  (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html).
"""

from __future__ import annotations

import functools
import re
from typing import Mapping, Optional

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from ..errors import ValidationError
from ml_platform_job import health
from ml_platform_job.health import (ACTIONS, DEFAULT_ACTIONS, FIXES, HEALTH_NAMESPACE, HEALTH_STOPPED_EXIT_CODE,
                                    HEARTBEAT_METRIC, JOB_DIMENSION, MODE_ENV, QUEUE_DIMENSION, RULE_DIMENSION,
                                    RULES, RULES_ENV, STALL_ENV, STALL_SECONDS, STOP_METRIC, WARNING_METRIC,
                                    WATCHER_GRACE_SECONDS, HealthRules)

HEALTH_MODES = ACTIONS  # stop, warn, off: the queue's default for every job (the job's ML_PLATFORM_HEALTH)
HEALTH_MODE = "stop"
STALLED_MINUTES = int(STALL_SECONDS // 60)  # 30: Debugger's StalledTrainingRule
STALLED_MINUTES_RANGE = (10, 1440)
ALARM_PERIOD_MINUTES = 5
# An alarm's description: at most 1024 characters (PutMetricAlarm's AlarmDescription length constraint):
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
DESCRIPTION_LIMIT = 1024

def rule_meanings(table: Optional[str]) -> dict[str, str]:
    """Each rule's "fires when (defaults)" text, read from the rules' table in ``ml_platform_job.health``'s docstring
    (the one place that states them, thresholds included); a rule the table lacks says where to look."""
    meanings: dict[str, list[str]] = {}
    lines = (table or "").splitlines()
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"=+( +=+)+", line.strip())]
    if len(borders) >= 3:
        columns = [m.start() for m in re.finditer(r"=+", lines[borders[0]])]
        current = None
        for line in lines[borders[1] + 1:borders[2]]:
            name = line[:columns[1]].strip().strip("`")
            text = line[columns[1]:columns[2]].strip() if len(columns) > 2 else line[columns[1]:].strip()
            current = name or current
            if current:
                meanings.setdefault(current, []).append(text)
    found = {rule: re.sub(r"\s+", " ", " ".join(parts).replace("``", "")).strip() for rule, parts in meanings.items()}
    return {rule: found.get(rule) or "see the rules' table of ml_platform_job.health" for rule in RULES}


MEANINGS = rule_meanings(health.__doc__)


@functools.cache
def _alarm_period() -> Duration:
    """The alarms' period, made once per process (a Duration is immutable; each one made is a jsii round trip)."""
    return Duration.minutes(ALARM_PERIOD_MINUTES)


def health_metric(queue_name: str, metric_name: str, rule: str, *, label: Optional[str] = None) -> cloudwatch.Metric:
    """``HealthStop`` or ``HealthWarning`` of one rule, the queue's jobs' sum in each 5-minute period (a label is for
    charts: an alarm on a labelled metric is rendered as a metric-math alarm)."""
    return cloudwatch.Metric(namespace=HEALTH_NAMESPACE, metric_name=metric_name, statistic="Sum",
                             dimensions_map={QUEUE_DIMENSION: queue_name, RULE_DIMENSION: rule},
                             period=_alarm_period(), label=label, unit=None)


def validate_health_props(construct: str, *, health_mode: str, stalled_minutes: Optional[int],
                          health_rules: Optional[Mapping[str, str]]) -> dict[str, str]:
    """ValidationError naming the prop unless ``health_mode`` is stop, warn or off, ``stalled_minutes`` whole minutes
    from 10 to 1440 (or None: no stall rule), and ``health_rules`` maps rules of ``health.RULES`` to stop, warn or
    off; returns the rules as a plain dict."""
    if health_mode not in HEALTH_MODES:
        raise ValidationError(construct, "health_mode", health_mode, "one of 'stop', 'warn', 'off'",
                              "set health_mode='warn' to see what the rules would stop without stopping it, or "
                              "'off'")
    low, high = STALLED_MINUTES_RANGE
    if stalled_minutes is not None and not (isinstance(stalled_minutes, int) and not isinstance(stalled_minutes, bool)
                                            and low <= stalled_minutes <= high):
        raise ValidationError(construct, "stalled_minutes", stalled_minutes,
                              f"whole minutes from {low} to {high}, or None (no stall rule, no stall watcher)",
                              f"set stalled_minutes to e.g. {STALLED_MINUTES}, longer than the job's longest step, "
                              "save or evaluation without progress() calls")
    rules = dict(health_rules or {})
    for rule, action in rules.items():
        if rule not in RULES:
            raise ValidationError(construct, f"health_rules[{rule!r}]", action, f"a rule of {', '.join(RULES)}",
                                  "use one of those names (ml_platform_job.health.RULES)")
        if action not in ACTIONS:
            raise ValidationError(construct, f"health_rules[{rule!r}]", action, "one of 'stop', 'warn', 'off'",
                                  f"e.g. {{{rule!r}: 'warn'}} (its default is {DEFAULT_ACTIONS[rule]!r})")
    if stalled_minutes is None and rules.get("stalled", "off") != "off":
        raise ValidationError(construct, "health_rules['stalled']", rules["stalled"],
                              "absent or 'off' when stalled_minutes=None (which turns the stall rule off)",
                              "remove health_rules['stalled'], or give stalled_minutes")
    return rules


def health_environment(*, mode: str = HEALTH_MODE, stall_minutes: Optional[int] = STALLED_MINUTES,
                       rules: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The variables that give a queue's jobs its health settings, as ``health.HealthRules.from_env`` reads them:
    ``ML_PLATFORM_HEALTH`` (the mode), ``ML_PLATFORM_HEALTH_STALL_SECONDS`` (absent with ``stall_minutes=None``)
    and ``ML_PLATFORM_HEALTH_RULES`` (``rule=action,...`` in ``health.RULES``' order, ``stalled=off`` with
    ``stall_minutes=None``; absent when there is nothing to say). A submission's own variables override them."""
    actions = dict(rules or {})
    if stall_minutes is None:
        actions["stalled"] = "off"
    environment = {MODE_ENV: mode}
    if stall_minutes is not None:
        environment[STALL_ENV] = str(stall_minutes * 60)
    listed = ",".join(f"{rule}={actions[rule]}" for rule in RULES if rule in actions)
    if listed:
        environment[RULES_ENV] = listed
    return environment


def watcher_needed(*, mode: str, stall_minutes: Optional[int], rules: Optional[Mapping[str, str]]) -> bool:
    """Whether the queue's jobs stall-check by default (the stall watcher then backs them up): the stall rule's
    action as the job takes it (``HealthRules.action``) is stop or warn."""
    return stall_minutes is not None and HealthRules(mode=mode, actions=dict(rules or {})).action("stalled") != "off"


def watcher_threshold_seconds(stall_minutes: int) -> int:
    """The stall watcher's threshold: the stall rule's plus ``health.WATCHER_GRACE_SECONDS`` (the job's own stop,
    which records its run, comes first)."""
    return int(stall_minutes * 60 + WATCHER_GRACE_SECONDS)


def stop_description(queue_name: str, rule: str, stalled_minutes: Optional[int] = STALLED_MINUTES) -> str:
    """A rule's alarm text: what stopped, what the rule means (the job side's defaults; the job's log line has its
    own values), the fix (``health.FIXES``), where the values are; at most DESCRIPTION_LIMIT characters."""
    if rule == "stalled" and stalled_minutes is not None:
        meaning = (f"no step, evaluation batch nor progress() for {stalled_minutes} minutes. The job stopped itself, "
                   "or the queue's stall watcher stopped it where it could not (no progress heartbeat for "
                   f"{watcher_threshold_seconds(stalled_minutes) // 60} minutes; its status reason then says so)")
    else:
        meaning = f"{MEANINGS[rule]} (at the job side's defaults)"
    head = f"Training queue {queue_name}: a job stopped on the health rule {rule}: {meaning}. "
    if DEFAULT_ACTIONS[rule] == "warn":
        head += "This rule only warns by default: the job or the queue's health_rules turned it to stop. "
    tail = (f" The job exited {HEALTH_STOPPED_EXIT_CODE}, which the queue does not retry. Values: the job's log line "
            f"'ml_platform_job health: {rule} at step N' (./platform job logs ENV JOB_ID) and the health stop in its "
            "run record (./platform runs show ENV RUN_ID; RunId is in the stop's log line).")
    fix = f"Fix: {FIXES[rule]}."
    room = DESCRIPTION_LIMIT - len(head) - len(tail)
    if len(fix) > room:
        fix = fix[:max(0, room - 3)].rstrip() + "..."
    return (head + fix + tail)[:DESCRIPTION_LIMIT]


def health_alarms(scope: Construct, *, queue_name: str,
                  stalled_minutes: Optional[int] = STALLED_MINUTES) -> dict[str, cloudwatch.Alarm]:
    """One alarm per rule of ``health.RULES`` on ``HealthStop`` {Queue, Rule}, keyed by rule (see the module's
    docstring for their shape); the caller adds their actions (the queue: its alert topic)."""
    alarms = {}
    for rule in RULES:
        name = "".join(part.capitalize() for part in rule.split("_"))
        alarms[rule] = cloudwatch.Alarm(
            scope, f"HealthStop{name}Alarm", metric=health_metric(queue_name, STOP_METRIC, rule), threshold=1,
            evaluation_periods=1, datapoints_to_alarm=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=stop_description(queue_name, rule, stalled_minutes))
    return alarms


def health_widgets(queue_name: str) -> list[cloudwatch.IWidget]:
    """The dashboard's health row: stops and warnings per rule (sums per 5 minutes), and each running job's progress
    heartbeat (steps and evaluation batches per 5 minutes, what the stall watcher reads)."""
    progress = cloudwatch.MathExpression(
        label="", period=_alarm_period(),
        expression=f"SEARCH('{{{HEALTH_NAMESPACE},{QUEUE_DIMENSION},{JOB_DIMENSION}}} "
                   f"MetricName=\"{HEARTBEAT_METRIC}\" {QUEUE_DIMENSION}=\"{queue_name}\"', "
                   f"'Sum', {ALARM_PERIOD_MINUTES * 60})")
    return [
        cloudwatch.GraphWidget(title=f"{queue_name}: health stops by rule (jobs stopped, exit "
                                     f"{HEALTH_STOPPED_EXIT_CODE})", width=8,
                               left=[health_metric(queue_name, STOP_METRIC, rule, label=rule) for rule in RULES]),
        cloudwatch.GraphWidget(title=f"{queue_name}: health warnings by rule (jobs train on)", width=8,
                               left=[health_metric(queue_name, WARNING_METRIC, rule, label=rule) for rule in RULES]),
        cloudwatch.GraphWidget(title=f"{queue_name}: progress per job (steps and evaluation batches)", width=8,
                               left=[progress]),
    ]
