"""Deliberate breaks at the joins between parts, one at a time: each is applied to the source, the tests that guard
that join run, and the script reports the first that failed. A break no test notices fails the script.

  ./platform bench joins [NAME...]   every break (or those whose name contains a NAME), as a Markdown table
  ./platform bench joins --list      the breaks' names and the tests that guard each

A benchmark, not part of the suite: it edits source files while it runs (each is restored, also on Ctrl-C).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as bench/join_breaks.py: the app's modules by their names
from ops import terminal  # noqa: E402
from ops.cli import Parser  # noqa: E402

LIB = "constructs/ml_platform_constructs"
QUALITY_HANDLER = f"{LIB}/runtime/handlers/quality_handler.py"
DRIFT_HANDLER = f"{LIB}/runtime/handlers/drift_handler.py"
JOINS = ("tests/unit/test_metric_joins.py",)
LABEL_JOINS = ("tests/unit/test_metric_joins_labels.py",)
DASHBOARD_JOINS = ("tests/unit/test_metric_joins_dashboards.py",)


class Break(NamedTuple):
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BREAKS = [
    Break("guard: the spend check ignores queue instances", f"{LIB}/runtime/handlers/budget_guard.py",
          'capacity += queue_capacity(clients["ec2"], env["ENVIRONMENT"], now)', "pass",
          ("tests/unit/test_budget_guard_joins.py", "tests/unit/test_budget_guard_queues.py")),
    Break("guard: the Budgets-notification stop skips queues", f"{LIB}/runtime/handlers/budget_guard.py",
          "    if batch is not None:\n        report.update(stop_queues(",
          "    if batch is None:\n        report.update(stop_queues(",
          ("tests/unit/test_budget_guard_joins.py",)),
    Break("guard IAM: the Batch stop statement loses its scope condition", f"{LIB}/governance/budget_guard.py",
          "resources=[stack_arn(stack, arn) for arn in BATCH_QUEUE_ARNS],\n"
          "            conditions={\"StringEquals\": {f\"aws:ResourceTag/{BUDGET_SCOPE_TAG}\": self.budget_scope}}))",
          "resources=[stack_arn(stack, arn) for arn in BATCH_QUEUE_ARNS]))",
          ("tests/unit/test_guard_iam.py",)),
    Break("compliance: a new acknowledgement of a known rule on another resource", f"{LIB}/data/dataset_bucket.py",
          '            id="AwsSolutions-S1",\n',
          '            id="AwsSolutions-IAM5",\n            reason="x" * 20,\n        ), Acknowledgment(\n'
          '            id="AwsSolutions-S1",\n',
          ("tests/compliance/test_cdk_nag.py::test_every_acknowledgement_is_expected_by_construct_and_finding",)),
    Break("retraining: the cooldown inverted", f"{LIB}/runtime/handlers/retrain.py",
          '"attribute_not_exists(#pk) OR #until <= :now"', '"attribute_not_exists(#pk) OR #until > :now"',
          ("tests/unit/test_retrain.py", "tests/unit/test_retrain_claims.py")),
    Break("watcher: completes the lifecycle action on a Spot notice instead of a scale-in",
          f"{LIB}/runtime/agents/interruption_watcher.py",
          'if stop["reason"] == "scale-in" and settings.lifecycle_hook:',
          'if stop["reason"] != "scale-in" and settings.lifecycle_hook:',
          ("tests/unit/test_interruption_watcher_loop.py",)),
    Break("watcher: signals containers on a fleet host, PID files on a Batch host",
          f"{LIB}/runtime/agents/interruption_watcher.py",
          'signal_containers=env.get("ML_PLATFORM_SIGNAL_CONTAINERS") == "ecs")',
          'signal_containers=env.get("ML_PLATFORM_SIGNAL_CONTAINERS") != "ecs")',
          ("tests/unit/test_interruption_watcher_loop.py",)),
    Break("watcher: completing the lifecycle action without a timeout", f"{LIB}/runtime/agents/interruption_watcher.py",
          '"--lifecycle-action-result", "CONTINUE"], check=True, timeout=CALL_TIMEOUT_SECONDS)',
          '"--lifecycle-action-result", "CONTINUE"], check=True)',
          ("tests/unit/test_interruption_watcher_loop.py",)),
    Break("job submit: --gpus 0 accepted", f"{LIB}/operations/jobs.py",
          "if not 1 <= gpus <= per_instance:", "if not 0 <= gpus <= per_instance:",
          ("tests/unit/test_job_commands.py", "tests/unit/test_job_ops.py", "tests/unit/test_job_ops_commands.py")),
    Break("job submit: a fixed node count for multi-node jobs", f"{LIB}/operations/jobs.py",
          'request["nodeOverrides"] = {"numNodes": submission.nodes,',
          'request["nodeOverrides"] = {"numNodes": 2,',
          ("tests/unit/test_job_commands.py", "tests/unit/test_job_ops.py", "tests/unit/test_job_ops_commands.py")),
    Break("advisor: sharding decided without the activations", f"{LIB}/advice/advisor.py",
          "if state + item > usable and gpus > 1:", "if state > usable and gpus > 1:",
          ("tests/unit/test_advisor.py",)),
    Break("cost estimate: alarm costs dropped", "ops/cost_estimate.py",
          '+ len(alarms) * prices["alarm_month"]', '+ 0 * prices["alarm_month"]',
          ("tests/unit/test_cost_estimate_lines.py",)),
    Break("emulator report: SNS subscriptions always read back as declared", "ops/local/report.py",
          'findings.append(Finding("subscriptions", found == wanted,',
          'findings.append(Finding("subscriptions", True,',
          ("tests/emulator/test_local_deploy.py",)),
    Break("job side: SIGTERM no longer stops the run", "job/ml_platform_job/stop.py",
          'self.request("SIGTERM")', "pass",
          ("tests/unit/test_job_stop.py", "tests/unit/test_train_example.py", "tests/unit/test_rehearsal.py")),
    # Round three (issue 42): what a handler publishes is exactly what its alarm reads.
    Break("metric join: the drift check publishes its alarmed bound as PsiLowerBound", DRIFT_HANDLER,
          'datum("PSILowerBound"', 'datum("PsiLowerBound"', JOINS),
    Break("metric join: the quality check publishes its shortfall when it is not significant",
          QUALITY_HANDLER,
          'datum("SignificantShortfall", last["shortfall"] if last["decision"] == "alarm" else 0.0)',
          'datum("SignificantShortfall", last["shortfall"])', JOINS),
    Break("metric join: the feature watch's relations flag published without its endpoint",
          DRIFT_HANDLER,
          'datum("RelationsChanged", 1.0 if summary["relations_changed"] else 0.0)',
          'datum("RelationsChanged", 1.0 if summary["relations_changed"] else 0.0, feature="all")',
          JOINS),
    Break("metric join: the drift check says it judged a window too small to judge", DRIFT_HANDLER,
          'datum("DriftJudged", 1.0 if summary["judged"] else 0.0)', 'datum("DriftJudged", 1.0)',
          JOINS),
    Break("metric join: the drift alarm's bound published as the significant PSI", DRIFT_HANDLER,
          'datum("PSILowerBound", summary["psi_lower_bound"])', 'datum("PSILowerBound", summary["significant_psi"])',
          JOINS),
    Break("metric join: a batch closed unjudged published as judged", QUALITY_HANDLER,
          'data.append(datum("QualityJudged", 0.0))', 'data.append(datum("QualityJudged", 1.0))', LABEL_JOINS),
    Break("metric join: the label backlog published as LabelFilesPending", QUALITY_HANDLER,
          '("LabelObjectsPending", "label_objects_pending")', '("LabelFilesPending", "label_objects_pending")', LABEL_JOINS),
    Break("metric join: unreadable labels published as LabelsMalformedCount", QUALITY_HANDLER,
          '("LabelsMalformed", "malformed_labels")', '("LabelsMalformedCount", "malformed_labels")', LABEL_JOINS),
    Break("metric join: the labelled predictions per batch published per hour", QUALITY_HANDLER,
          'datum("LabelledPerBatch", summary["labelled_per_batch"], "Count")',
          'datum("LabelledPerBatch", summary["labelled_per_batch"] / settings.max_batch_hours, "Count")', LABEL_JOINS),
    Break("metric join: the late labels' share published as a percentage", QUALITY_HANDLER,
          'data.append(datum("LabelsTooLateShare", late))', 'data.append(datum("LabelsTooLateShare", late / 100))',
          LABEL_JOINS),
    Break("metric join: a run stopped by another publishes its counts per endpoint variant", QUALITY_HANDLER,
          'dimensions = [{"Name": "EndpointName", "Value": env["ENDPOINT_NAME"]}]',
          'dimensions = [{"Name": "EndpointName", "Value": env["ENDPOINT_NAME"]}, '
          '{"Name": "Variant", "Value": env["VARIANT_NAME"]}]', LABEL_JOINS),
    Break("metric join: the job prints its health stop under another name", "job/ml_platform_job/job.py",
          "_print_line(metric_line(STOP_METRIC, self._health_queue", '_print_line(metric_line("HealthStopped", '
          "self._health_queue", JOINS),
    Break("metric join: the goodput lines' Queue dimension renamed", "job/ml_platform_job/phase_clock.py",
          '"Namespace": GOODPUT_NAMESPACE, "Dimensions": [["Queue"]],',
          '"Namespace": GOODPUT_NAMESPACE, "Dimensions": [["QueueName"]],', JOINS),
    Break("metric join: the job's stall heartbeat renamed", "job/ml_platform_job/job.py",
          "_print_line(metric_line(HEARTBEAT_METRIC, self._health_queue",
          '_print_line(metric_line("Heartbeat", self._health_queue', JOINS),
    Break("metric join: a job's goodput windows named by Batch's generated queue name", "job/ml_platform_job/tracking.py",
          'return env.get("ML_PLATFORM_QUEUE_NAME") or env["AWS_BATCH_JQ_NAME"]', 'return env["AWS_BATCH_JQ_NAME"]',
          JOINS),
    Break("metric join: the cost report reads a job's progress per JobID", f"{LIB}/advice/job_cost.py",
          'dims = [{"Name": JOB_ID_DIMENSION, "Value": job_id}]', 'dims = [{"Name": "JobID", "Value": job_id}]',
          JOINS),
    Break("metric join: the job role may no longer write the job's namespace", f"{LIB}/training/queue_jobs.py",
          '"cloudwatch:namespace": [JOB_NAMESPACE, BENCHMARK_NAMESPACE]', '"cloudwatch:namespace": [BENCHMARK_NAMESPACE]',
          JOINS),
    # Round three, its second review: what the first round of join tests did not model.
    Break("metric join: the quality alarms read their metrics in Percent", f"{LIB}/serving/endpoint_quality.py",
          'period=self.settings.schedule, dimensions_map={"EndpointName": self.endpoint_name})',
          'period=self.settings.schedule, dimensions_map={"EndpointName": self.endpoint_name}, '
          'unit=cloudwatch.Unit.PERCENT)', ("tests/unit/test_metric_joins.py", "tests/unit/test_metric_joins_labels.py")),
    Break("metric join: the health lines print their value as a string", "job/ml_platform_job/health.py",
          "QUEUE_DIMENSION: queue, metric: value}", "QUEUE_DIMENSION: queue, metric: str(value)}", JOINS),
    Break("metric join: the goodput lines' timestamps in seconds", "job/ml_platform_job/phase_clock.py",
          'document = {"_aws": {"Timestamp": int(wall * 1000),', 'document = {"_aws": {"Timestamp": int(wall),', JOINS),
    Break("metric join: the goodput alarms sum their jobs' shares", f"{LIB}/training/goodput_alarms.py",
          'statistic="Maximum", period=Duration.minutes(ALARM_PERIOD_MINUTES), unit=None)',
          'statistic="Sum", period=Duration.minutes(ALARM_PERIOD_MINUTES), unit=None)', JOINS),
    Break("metric join: a deploy's first quality run publishes a shortfall", QUALITY_HANDLER,
          '        data.append(datum("SignificantShortfall", 0.0))\n    cloudwatch.put_metric_data',
          '        data.append(datum("SignificantShortfall", 1.0))\n    cloudwatch.put_metric_data', JOINS),
    Break("metric join: expired label files published as skipped records", QUALITY_HANDLER,
          '("LabelObjectsExpired", "label_objects_expired")', '("LabelObjectsExpired", "records_skipped")', LABEL_JOINS),
    Break("metric join: an old baseline reported as one the feature watch can read",
          DRIFT_HANDLER,
          'data.append(datum("FeatureWatchActive", 0.0))', 'data.append(datum("FeatureWatchActive", 1.0))', JOINS),
    Break("metric join: a run stopped by another publishes zeros", QUALITY_HANDLER,
          '"Value": float(saved_run[key]), "Unit": "Count",', '"Value": 0.0, "Unit": "Count",', LABEL_JOINS),
    Break("metric join: the labels-lost alarm no longer counts expired files", f"{LIB}/serving/endpoint_quality.py",
          'expression="malformed + expired"', 'expression="malformed + 0 * expired"', LABEL_JOINS),
    Break("metric join: the late share is the sample's, not the run's", QUALITY_HANDLER,
          'return late["share"] * summary["unmatched_labels"] / total', 'return late["share"]', LABEL_JOINS),
    Break("metric join: a job's progress reported at a fixed time", "job/ml_platform_job/job_metrics.py",
          "when = timestamp or datetime.now(timezone.utc)", "when = datetime(2020, 1, 1, tzinfo=timezone.utc)", JOINS),
    Break("alarm join: the queue's GPU idle alarm reads per Queue", f"{LIB}/training/training_queue.py",
          'gpu_metric("nvidia_smi_utilization_gpu", ("QueueName", self.queue_name)',
          'gpu_metric("nvidia_smi_utilization_gpu", ("Queue", self.queue_name)',
          DASHBOARD_JOINS),
    Break("alarm join: the stall watcher's warning loses its rule", f"{LIB}/runtime/handlers/stall_watcher.py",
          '"Dimensions": [{"Name": QUEUE_DIMENSION, "Value": settings.queue_name},\n'
          '                       {"Name": RULE_DIMENSION, "Value": RULE}]}])',
          '"Dimensions": [{"Name": QUEUE_DIMENSION, "Value": settings.queue_name}] + (\n'
          '                       [{"Name": RULE_DIMENSION, "Value": RULE}] if metric == STOP_METRIC else [])}])',
          DASHBOARD_JOINS),
    # Round three, part 2 (issue 42): what the platform publishes is what its dashboards read.
    Break("metric join: the watcher publishes JobRunning inverted", f"{LIB}/runtime/agents/interruption_watcher.py",
          '"--value", "1" if running else "0"', '"--value", "0" if running else "1"',
          DASHBOARD_JOINS),
    Break("metric join: the scale-to-zero alarm counts a silent watcher as no job", f"{LIB}/training/spot_gpu_fleet.py",
          "FILL(job, 1) == 0", "FILL(job, 0) == 0", DASHBOARD_JOINS),
    Break("dashboard join: the endpoint's drift widget reads MaxKl", f"{LIB}/serving/monitored_endpoint.py",
          'self.metric_drift("MaxKL", schedule)', 'self.metric_drift("MaxKl", schedule)',
          DASHBOARD_JOINS),
    Break("dashboard join: the quality check publishes its detectable drop under another name",
          QUALITY_HANDLER,
          'datum("DetectableDrop", plan["detectable_drop"])', 'datum("DetectableDropPercent", plan["detectable_drop"])',
          DASHBOARD_JOINS),
    Break("dashboard join: the queue's heartbeat SEARCH groups by JobName", f"{LIB}/training/health_alarms.py",
          "{JOB_DIMENSION}}} ", "JobName}} ", DASHBOARD_JOINS),
    Break("dashboard join: the queue's per-instance GPU SELECT drops QueueName from its schema",
          f"{LIB}/training/queue_monitoring.py",
          'InstanceId, "\n                           f"QueueName) WHERE',
          '"\n                           f"InstanceId) WHERE', DASHBOARD_JOINS),
    Break("dashboard join: the GPU agent no longer aggregates per fleet or queue", f"{LIB}/training/instance_bootstrap.py",
          '"aggregation_dimensions": [[key], per_instance]', '"aggregation_dimensions": [per_instance]',
          DASHBOARD_JOINS),
    Break("dashboard join: the interruption watcher publishes JobRunning per fleet as Fleet",
          f"{LIB}/runtime/agents/interruption_watcher.py",
          '"--dimensions", f"FleetName={settings.fleet_name}"', '"--dimensions", f"Fleet={settings.fleet_name}"',
          DASHBOARD_JOINS),
]


def run(item: Break) -> tuple[list[str], float]:
    """The tests that fail with the break applied (node ids), and the seconds the run took."""
    path = ROOT / item.path
    source = path.read_text()
    if source.count(item.old) != 1:
        raise SystemExit(f"join_breaks: {item.name}: the code to break is not in {item.path} exactly once; "
                         "update BREAKS to the source")
    started = time.monotonic()
    try:
        path.write_text(source.replace(item.old, item.new))
        # -x: the first test that notices is the answer (a broken loop may otherwise wait out its timeouts).
        # No bytecode written: a break and its undoing could share a second and a size, which a cached .pyc of the
        # broken module would not tell apart (./platform keeps bytecode under .venv/pycache).
        result = terminal.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header",
                               "-rf", *item.tests], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    finally:
        path.write_text(source)  # also on Ctrl-C or SIGTERM: the pytest run has been ended first
    return re.findall(r"^FAILED (\S+)", result.stdout, re.M), time.monotonic() - started


def parser() -> Parser:
    joins = Parser("./platform bench joins", description=__doc__)
    joins.add_argument("names", nargs="*", metavar="NAME", help="run the breaks whose name contains NAME")
    joins.add_argument("--list", action="store_true", help="list the breaks and the tests that guard each, run none")
    return joins


def main(argv: list[str]) -> int:
    joins = parser()
    args = joins.parse_args(argv)
    unmatched = [name for name in args.names if not any(name in b.name for b in BREAKS)]
    if unmatched:
        joins.error(f"no break's name contains {unmatched[0]!r}: ./platform bench joins --list names them")
    chosen = [b for b in BREAKS if not args.names or any(name in b.name for name in args.names)]
    if args.list:
        print("| break | the tests that guard it |\n|---|---|")
        for item in chosen:
            print(f"| {item.name} | {', '.join(f'`{t}`' for t in item.tests)} |")
        return 0
    print("| break | the first test that fails | seconds |\n|---|---|---|", flush=True)
    unnoticed = 0
    with terminal.progress("applying each break and running its tests", total=len(chosen)) as shown:
        for item in chosen:
            shown.advance(item.name)
            failed, seconds = run(item)
            unnoticed += not failed
            listed = ", ".join(f"`{f}`" for f in failed)
            print(f"| {item.name} | {listed or '**none: unnoticed**'} | {seconds:.0f} |", flush=True)
    return 1 if unnoticed else 0


if __name__ == "__main__":
    terminal.entry_point(main)
