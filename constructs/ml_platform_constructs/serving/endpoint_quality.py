"""EndpointQuality: a MonitoredEndpoint's production quality, its captured predictions joined with ground-truth labels
on a schedule, and an alarm when it falls below the live model's baseline.

SageMaker Model Monitor's model-quality jobs would do the join, but Model Monitor is no longer open to new customers
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor.html), so a scheduled Lambda (``runtime/decisions/quality.py``
and ``runtime/handlers/quality_handler.py``, standard library and boto3) does it, as the drift check does for inputs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from aws_cdk import Acknowledgment, Annotations, CfnParameter, Duration, RemovalPolicy, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..data.dataset_bucket import DatasetBucket
from ..errors import ValidationError, refusal_leaves_no_node
from ..foundation.nag_support import AcknowledgeWildcardResources, suppress_checkov
from ..runtime.decisions.promotion import BASELINE, quality_baseline_parameter
from ..runtime.decisions.quality import (DEFAULT_FALSE_ALARMS, DEFAULT_MAX_BATCH_HOURS, DEFAULT_POWER, DEFAULT_REFERENCE_LABELS,
                               GROUND_TRUTH_PREFIX, PROBLEM_TYPES, holdout_metric)
from ..foundation.runtime_function import runtime_function

QUALITY_NAMESPACE = "MLPlatform/Quality"
LABELS_TOO_LATE_SHARE = 0.05  # of a run's labels, estimated too late to join: the too-late alarm's threshold
# The quality check's code: the handler and what it imports (in Lambda, each sits at the top of the package).
FUNCTION_FILES = ("capture.py", "quality.py", "quality_handler.py", "stats.py")
# A dotted path of keys, list indexes and '*', or a CSV column index (Model Monitor's InferenceAttribute).
_PREDICTION_PATH = re.compile(r"^$|^\d+$|^[A-Za-z0-9_*-]+(\.[A-Za-z0-9_*-]+)*$")


@dataclass(frozen=True)
class ModelQuality:
    """What a MonitoredEndpoint's quality check compares, and when it alarms.

    :param problem_type: ``binary`` or ``multiclass`` (metric: accuracy) or ``regression`` (metric: MAE).
    :param baseline: the live model's score on held-out data: an accuracy share (0.92) or an MAE. With a declared
        model version (``MonitoredEndpoint(model_version=...)``), the score of the last promoted run replaces it
        (``EndpointQuality``'s ``promoted_baseline``); until the first promotion, this value applies.
    :param prediction_path: where the prediction sits in a response: a column index for CSV responses, a dotted path
        of keys, list indexes and ``*`` for JSON ones (``predictions.*.score``). Default: the whole response.
    :param probability_threshold: binary only: a numeric prediction at or above it is class 1. Default: 0.5.
    :param baseline_examples: the number of held-out examples ``baseline`` was measured on: the quality test counts the
        baseline's own noise (0.92 from 1,000 examples is 0.92 +/- 0.86 points). Without it the baseline is taken as
        exact, and a healthy model alarms more often than stated when it came from a small held-out set (a synth
        warning says so). A promotion passes its own number. Default: none.
    :param min_labelled: a batch that closes after ``max_batch_hours`` with fewer labelled predictions is not judged
        (published as such: ``QualityJudged`` 0, and ``.not_judged_alarm``); a label rate at which the longest batch
        would hold fewer alarms before that (``.labels_starved_alarm``). Default: 200.
    :param max_drop: the drop to detect: accuracy this many percentage points under the reference (MAE: this many
        percent over it). Default: 1.5 (the seed's retraining trigger).
    :param false_alarms_per_90_days: the error the check guards against: a healthy model's alarms expected in 90
        days, baseline noise included. Each batch's critical value is set from it and the batch's length (about
        2,160 / hours batches share it). Default: 0.25 (simulated: 0.2-0.4 over label rates of 100-50,000 an hour
        and references of 1,000-50,000 examples, ./platform bench decisions).
    :param power: the chance that one batch detects a drop of ``max_drop``; the batch is the shortest (in whole hours)
        that reaches it at the observed label rate, up to ``max_batch_hours``. Default: 0.9.
    :param max_batch_hours: the longest batch. Default: 168 (7 days).
    :param reference_labels: after a new model version, this many labelled production predictions become the
        reference the later ones are judged against (they are judged against the baseline meanwhile). 0: the
        baseline only. Default: 10,000 (0.27 points of noise at 92%, under a fifth of a 1.5-point drop).
    :param significance: no effect since 0.5.0 (a warning says so): the per-window test it set gave a healthy model
        0.3-0.45 alarms on day one with a 150-example baseline. Use ``false_alarms_per_90_days``.
    :param schedule: how often the check runs (it joins every new label file and judges a full batch). Default: 1 hour.
    :param label_lateness: how long labels may take: a label file is joined with the predictions of this many hours
        before it was uploaded. Default: 24 hours.
    :param max_records_per_run: captured records indexed per capture hour (a random sample of its files beyond:
        counted as CaptureRecordsSkipped). Default: 100,000.
    :param max_labels_per_run: label records one run joins; files beyond wait for the next run
        (``LabelObjectsPending``, alarmed after 6 runs; a file waiting the ~3 hours for its capture hours' index is
        not pending). Default: 200,000.
    """
    problem_type: str
    baseline: float
    prediction_path: str = ""
    probability_threshold: Optional[float] = None
    baseline_examples: Optional[int] = None
    min_labelled: int = 200
    max_drop: float = 1.5
    false_alarms_per_90_days: float = DEFAULT_FALSE_ALARMS
    power: float = DEFAULT_POWER
    max_batch_hours: int = DEFAULT_MAX_BATCH_HOURS
    reference_labels: int = DEFAULT_REFERENCE_LABELS
    significance: Optional[float] = None
    schedule: Duration = Duration.hours(1)
    label_lateness: Duration = Duration.hours(24)
    max_records_per_run: int = 100_000
    max_labels_per_run: int = 200_000

    def validate(self) -> None:
        def fail(prop: str, value, allowed: str, fix: str) -> None:
            raise ValidationError("MonitoredEndpoint", f"quality.{prop}", value, allowed, fix)

        if self.problem_type not in PROBLEM_TYPES:
            fail("problem_type", self.problem_type, f"one of {', '.join(PROBLEM_TYPES)}", "e.g. 'binary'")
        if self.problem_type == "regression":
            if not (isinstance(self.baseline, (int, float)) and self.baseline > 0 and math.isfinite(self.baseline)):
                fail("baseline", self.baseline, "the live model's MAE on held-out data, above 0", "e.g. 3.2")
        elif not (isinstance(self.baseline, (int, float)) and 0 < self.baseline <= 1):
            fail("baseline", self.baseline, "the live model's held-out accuracy as a share in (0, 1]", "e.g. 0.92")
        if not _PREDICTION_PATH.match(self.prediction_path):
            fail("prediction_path", self.prediction_path, "a CSV column index or a dotted path of keys, list indexes "
                 "and '*'", "e.g. '0' or 'predictions.*.score'")
        if self.probability_threshold is not None and (self.problem_type != "binary"
                                                       or not 0 < self.probability_threshold < 1):
            fail("probability_threshold", self.probability_threshold, "a share in (0, 1), for problem_type 'binary' "
                 "only", "remove it, or e.g. 0.5")
        if not 1 <= self.min_labelled <= 1_000_000:
            fail("min_labelled", self.min_labelled, "1 to 1,000,000 labelled predictions", "e.g. 200")
        if not 0 < self.max_drop <= 100:
            fail("max_drop", self.max_drop, "above 0 and at most 100 points (or percent for MAE)", "e.g. 1.5")
        if self.baseline_examples is not None and not (isinstance(self.baseline_examples, int)
                                                      and 1 <= self.baseline_examples <= 100_000_000):
            fail("baseline_examples", self.baseline_examples, "the held-out examples behind the baseline, 1 or more",
                 "e.g. 5000 (the run's held-out set size), or leave it out to take the baseline as exact")
        if not (isinstance(self.false_alarms_per_90_days, (int, float)) and 0 < self.false_alarms_per_90_days <= 10):
            fail("false_alarms_per_90_days", self.false_alarms_per_90_days, "above 0 and at most 10 expected false "
                 "alarms of a healthy model in 90 days", "e.g. 0.25")
        if not (isinstance(self.power, (int, float)) and 0.5 <= self.power < 1):
            fail("power", self.power, "0.5 to under 1 (the chance one batch detects a drop of max_drop)", "e.g. 0.9")
        if not (isinstance(self.max_batch_hours, int) and 1 <= self.max_batch_hours <= 744):
            fail("max_batch_hours", self.max_batch_hours, "1 to 744 whole hours (31 days)", "e.g. 168")
        if not (isinstance(self.reference_labels, int) and 0 <= self.reference_labels <= 10_000_000):
            fail("reference_labels", self.reference_labels, "0 (judge against the baseline only) to 10,000,000",
                 "e.g. 10000")
        if not 1 <= self.max_labels_per_run <= 10_000_000:
            fail("max_labels_per_run", self.max_labels_per_run, "1 to 10,000,000 label records", "e.g. 200000")
        hours = self.schedule.to_seconds() / 3600
        if hours != int(hours) or not 1 <= hours <= 24:
            fail("schedule", self.schedule.to_human_string(), "1 to 24 whole hours (capture files are grouped by hour)",
                 "e.g. Duration.hours(1)")
        lateness = self.label_lateness.to_seconds() / 3600
        if lateness != int(lateness) or not 0 <= lateness <= 168:
            fail("label_lateness", self.label_lateness.to_human_string(), "0 to 168 whole hours (7 days)",
                 "e.g. Duration.hours(24)")
        if not 1 <= self.max_records_per_run <= 1_000_000:
            fail("max_records_per_run", self.max_records_per_run, "1 to 1,000,000 records", "e.g. 10000")


@refusal_leaves_no_node
class EndpointQuality(Construct):
    """The quality check of one endpoint (MonitoredEndpoint creates it from its ``quality`` prop).

    Ground-truth labels go to ``capture_bucket`` under ``ground-truth/<endpoint>/yyyy/mm/dd/hh/`` (JSON Lines, next to
    the captured requests they label, expiring with them): ``grant_label_upload(grantee)`` lets a labelling job
    write them. Each run's result goes to ``results_bucket`` under ``quality/results/<endpoint>/``.

    The baseline is ``settings.baseline`` (with ``settings.baseline_examples``), or, with ``promoted_baseline=True``,
    the live model's held-out score: a stack parameter (``runtime.decisions.promotion.quality_baseline_parameter(endpoint_name)``,
    ``.baseline_parameter``), empty by default, that a judged promotion sets to the promoted run's score and its number
    of held-out examples ("0.92:5000") in the same stack update as the model version (``./platform model promote``);
    ``cdk deploy`` keeps its value. While it is empty (before the first promotion) ``settings.baseline`` applies.
    ``model_version`` (the endpoint's declared version) starts the batch and the production reference afresh when a
    new version goes live, and resumes them when an earlier version comes back (a rollback). The check's state
    (capture indexes, label files joined, the batch) is under ``quality/state/<endpoint>/``, each version's in
    ``state/<version>/monitor.json``, written with conditional writes (two overlapping runs count each label once).

    Attributes: ``.function`` (main child ``Resource``), ``.rule``, ``.alarm`` (a batch significantly under the
    reference), ``.not_judged_alarm``, ``.labels_backlog_alarm``, ``.labels_lost_alarm`` (malformed or expired
    labels), ``.labels_starved_alarm`` (too few labels for any batch to be judged), ``.labels_too_late_alarm``
    (labels that came after ``label_lateness`` and joined nothing), ``.check_failing_alarm``,
    ``.labels_prefix``, ``.results_prefix``, ``.state_prefix``,
    ``.baseline_parameter`` (or None).
    """

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, variant_name: str,
                 capture_bucket: DatasetBucket, capture_prefix: str, results_bucket: DatasetBucket,
                 settings: ModelQuality, alerts: sns.ITopic, logs_key: Optional[kms.IKey] = None,
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN, promoted_baseline: bool = False,
                 model_version: Optional[str] = None) -> None:
        super().__init__(scope, id)
        settings.validate()
        if settings.significance is not None:
            Annotations.of(self).add_warning_v2("ml-platform:quality-significance-ignored", (
                f"{endpoint_name}: ModelQuality(significance={settings.significance!r}) has no effect since 0.5.0 "
                "(a per-window test gave a healthy model frequent false alarms): the check plans each batch for "
                f"false_alarms_per_90_days ({settings.false_alarms_per_90_days:g}). Remove significance."))
        if settings.baseline_examples is None:
            Annotations.of(self).add_warning_v2("ml-platform:quality-baseline-exact", (
                f"{endpoint_name}: ModelQuality has no baseline_examples, so the baseline {settings.baseline:g} is "
                "taken as exact until a promotion or the production reference replaces it: from a small held-out set "
                "a healthy model alarms more often than stated. Pass the number of held-out examples."))
        self.settings = settings
        self.endpoint_name = endpoint_name
        self.capture_bucket = capture_bucket
        self.labels_prefix = f"{GROUND_TRUTH_PREFIX}{endpoint_name}/"
        self.results_prefix = f"quality/results/{endpoint_name}/"
        self.state_prefix = f"quality/state/{endpoint_name}/"
        capture_endpoint_prefix = f"{capture_prefix}{endpoint_name}/"

        log_group = logs.LogGroup(self, "Logs", retention=logs.RetentionDays.THREE_MONTHS, encryption_key=logs_key,
                                  removal_policy=removal_policy)
        if logs_key is None:
            suppress_checkov(log_group, "CKV_AWS_158", "No logs_key was given: CloudWatch Logs encrypts the quality "
                             "check's logs (counts and scores, no raw requests) with its own keys")
        environment = {
            "CAPTURE_BUCKET": capture_bucket.bucket_name, "CAPTURE_PREFIX": capture_endpoint_prefix,
            "VARIANT_NAME": variant_name, "LABELS_PREFIX": self.labels_prefix,
            "RESULTS_BUCKET": results_bucket.bucket_name, "RESULTS_PREFIX": self.results_prefix,
            "STATE_PREFIX": self.state_prefix, "ENDPOINT_NAME": endpoint_name, "METRIC_NAMESPACE": QUALITY_NAMESPACE,
            "LATENESS_HOURS": str(int(settings.label_lateness.to_hours())),
            "MAX_RECORDS": str(settings.max_records_per_run), "MAX_LABELS": str(settings.max_labels_per_run),
            "PROBLEM_TYPE": settings.problem_type, "BASELINE": repr(float(settings.baseline)),
            "PREDICTION_PATH": settings.prediction_path, "MIN_LABELLED": str(settings.min_labelled),
            "MAX_DROP": repr(float(settings.max_drop)),
            "FALSE_ALARMS_PER_90_DAYS": repr(float(settings.false_alarms_per_90_days)),
            "POWER": repr(float(settings.power)), "MAX_BATCH_HOURS": str(settings.max_batch_hours),
            "REFERENCE_LABELS": str(settings.reference_labels), "MODEL_VERSION": model_version or "static",
            "SCHEDULE_HOURS": str(round(settings.schedule.to_seconds() / 3600)),
        }
        if settings.baseline_examples is not None:
            environment["BASELINE_EXAMPLES"] = str(settings.baseline_examples)
        if settings.probability_threshold is not None:
            environment["PROBABILITY_THRESHOLD"] = repr(float(settings.probability_threshold))
        self.baseline_parameter: Optional[CfnParameter] = None
        if promoted_baseline:
            self.baseline_parameter = CfnParameter(
                self, "PromotedBaseline", type="String", default="", allowed_pattern=BASELINE.pattern,
                description=f"{endpoint_name}: the promoted model's {holdout_metric(settings.problem_type)} and its "
                            f"held-out examples (VALUE:N), the quality check's baseline; empty: {settings.baseline:g} "
                            "(configured). Set by ./platform model promote")
            self.baseline_parameter.override_logical_id(quality_baseline_parameter(endpoint_name))
            environment["PROMOTED_BASELINE"] = self.baseline_parameter.value_as_string
        self.function = runtime_function(
            self, "Resource", handler="quality_handler.handler", files=FUNCTION_FILES,
            description=f"Quality of {endpoint_name}'s predictions against ground-truth labels",
            timeout=Duration.minutes(5), memory_size=1024, log_group=log_group, environment=environment)
        suppress_checkov(self.function, "CKV_AWS_116", "A scheduled check: the next run judges the next window, and "
                         "the quality-check-failing alarm reports errors")
        capture_bucket.grant_read(self.function, capture_endpoint_prefix)
        capture_bucket.grant_read(self.function, self.labels_prefix)
        results_bucket.grant_write_prefix(self.function, self.results_prefix)
        results_bucket.grant_read(self.function, self.state_prefix)
        results_bucket.grant_write_prefix(self.function, self.state_prefix)
        # A capture hour's index is read while the hour is within the join's horizon (label lateness, the index's
        # two hours' delay, the two days a label file may wait): expired after it, since at volume each is megabytes
        # an hour (https://docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-expire-general-considerations.html).
        index_days = math.ceil((settings.label_lateness.to_hours() + 2 + 48) / 24) + 1
        results_bucket.add_lifecycle_rule(s3.LifecycleRule(
            id=f"expire-quality-index-{endpoint_name}", prefix=f"{self.state_prefix}index/",
            expiration=Duration.days(index_days)))
        self.function.add_to_role_policy(iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": QUALITY_NAMESPACE}}))
        reason = (f"PutMetricData has no resource-level permissions (limited to {QUALITY_NAMESPACE} by condition); "
                  "object access is limited to this endpoint's capture, ground-truth and quality results prefixes.")
        Validations.of(self.function.role).acknowledge(
            *[Acknowledgment(id=f"AwsSolutions-IAM5[{f}]", reason=reason)
              for f in ("Resource::*", "Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*",
                        "Action::s3:Abort*", "Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")])
        policy = self.function.role.node.find_child("DefaultPolicy")
        policy.node.add_validation(AcknowledgeWildcardResources(
            policy, [f"/{capture_endpoint_prefix}*", f"/{self.labels_prefix}*", f"/{self.results_prefix}*",
                     f"/{self.state_prefix}*"], reason))
        self.rule = events.Rule(self, "Schedule", description=f"Runs the quality check of {endpoint_name}",
                                schedule=events.Schedule.rate(settings.schedule),
                                targets=[targets.LambdaFunction(self.function, retry_attempts=2)])

        notify = cw_actions.SnsAction(alerts)
        below = (f"under the reference (designed to catch a drop of {settings.max_drop:g} points"
                 if settings.problem_type != "regression" else
                 f"over the reference (designed to catch a rise of {settings.max_drop:g}%")
        pooled = (f", then pooled with {settings.reference_labels} or more production labels once the deployment check "
                  "has passed" if settings.reference_labels else "")
        baseline = (f"the promoted model's {holdout_metric(settings.problem_type)} (selection-adjusted){pooled}"
                    if promoted_baseline else f"the baseline {settings.baseline:g}{pooled}")
        # Every run republishes the latest judged batch's SignificantShortfall (0 when it was fine), so the alarm
        # changes state once per judged batch; a version (or settings) with nothing judged yet publishes 0, so a
        # promotion releases the previous version's alarm (missing data would keep it).
        self.alarm = self.metric_significant_shortfall().create_alarm(
            self, "Alarm", threshold=0, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.IGNORE,
            alarm_description=f"{endpoint_name}: {'MAE' if settings.problem_type == 'regression' else 'accuracy'} of a "
                              f"judged batch significantly {below} with {settings.power:.0%} power) against "
                              f"{baseline}; a healthy model alarms about {settings.false_alarms_per_90_days:g} times "
                              f"in 90 days (results under {self.results_prefix})")
        self.not_judged_alarm = self._metric("QualityJudged", "Minimum").create_alarm(
            self, "NotJudgedAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: quality not judged: a batch closed after "
                              f"{settings.max_batch_hours} hours with fewer than {settings.min_labelled} labelled "
                              "predictions (a deploy or a promotion is not: its first batch is still filling). Upload "
                              "labels (./platform labels upload), or check that callers pass InferenceId; the results "
                              "say how many labels came and how many a batch needs")
        self.labels_backlog_alarm = self._metric("LabelObjectsPending", "Minimum").create_alarm(
            self, "LabelsBacklogAlarm", threshold=1, evaluation_periods=6,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: label files held back for 6 runs: more labels arrive than "
                              f"max_labels_per_run ({settings.max_labels_per_run}) a run, the run's time runs out, or "
                              "the capture index is behind (hours due but not indexed: CaptureHoursPending); raise "
                              "the limit (files still waiting two days on are dropped, counted as "
                              "LabelObjectsExpired). Files waiting the ~3 hours for their hours' index are not "
                              "counted")
        # A label that cannot be read, or that waited past the two-day horizon, is missing from the judgement: any
        # is an alarm (a wrong upload format or a starved check biases what is judged, silently otherwise).
        self.labels_lost_alarm = cloudwatch.MathExpression(
            expression="malformed + expired", label="Labels unreadable or expired", period=self.settings.schedule,
            using_metrics={"malformed": self._metric("LabelsMalformed", "Sum"),
                           "expired": self._metric("LabelObjectsExpired", "Sum")}).create_alarm(
            self, "LabelsLostAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: labels the quality check could not use: malformed lines "
                              "(LabelsMalformed: upload with ./platform labels upload, which checks each line) or label "
                              "files that "
                              "waited two days unjoined (LabelObjectsExpired: see the backlog alarm)")
        # The join starves: at the observed label rate even the longest batch would close unjudged. Published once
        # labels have had time to come (not right after a deploy); 3 runs, so one run's estimate does not page.
        self.labels_starved_alarm = self.metric_labelled_per_batch().create_alarm(
            self, "LabelsStarvedAlarm", threshold=settings.min_labelled, evaluation_periods=3,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: too few labelled predictions for the quality check: at the observed "
                              f"label rate a batch of {settings.max_batch_hours} hours holds fewer than "
                              f"min_labelled ({settings.min_labelled}), so no batch will be judged. Label more "
                              "requests (./platform labels upload), check that callers pass InferenceId and that "
                              "labels name it (UnmatchedLabels), or raise max_records_per_run if captures are "
                              "sampled (CaptureRecordsSkipped)")
        # Labels that came after label_lateness_hours join nothing: a sample of the unmatched ones is looked for in
        # the hours before their window every 6 runs (LabelsTooLateShare: the share of the run's labels estimated too
        # late; published only by a run that looked, so the alarm keeps its state in between).
        self.labels_too_late_alarm = self._metric("LabelsTooLateShare", "Maximum").create_alarm(
            self, "LabelsTooLateAlarm", threshold=LABELS_TOO_LATE_SHARE, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.IGNORE,
            alarm_description=f"{endpoint_name}: {LABELS_TOO_LATE_SHARE:.0%} or more of the labels came after "
                              f"label_lateness_hours ({int(settings.label_lateness.to_hours())}) and joined nothing: "
                              "raise label_lateness_hours beyond the delays the results show (too_late.hours_late, "
                              "label_delay_hours), up to 168")
        self.check_failing_alarm = self.function.metric_errors(period=Duration.hours(1)).create_alarm(
            self, "CheckFailingAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: the quality check fails (its logs say why)")
        for alarm in (self.alarm, self.not_judged_alarm, self.labels_backlog_alarm, self.labels_lost_alarm,
                      self.labels_starved_alarm, self.labels_too_late_alarm, self.check_failing_alarm):
            alarm.add_alarm_action(notify)

    def _metric(self, name: str, statistic: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(namespace=QUALITY_NAMESPACE, metric_name=name, statistic=statistic,
                                 period=self.settings.schedule, dimensions_map={"EndpointName": self.endpoint_name})

    def metric_quality(self) -> cloudwatch.Metric:
        """``Accuracy`` (a share) or ``MAE`` of the latest judged batch (republished every run)."""
        return self._metric("MAE" if self.settings.problem_type == "regression" else "Accuracy", "Average")

    def metric_labelled(self) -> cloudwatch.Metric:
        """``LabelledPredictions``: labels joined with their prediction in each run."""
        return self._metric("LabelledPredictions", "Sum")

    def metric_shortfall(self) -> cloudwatch.Metric:
        """``QualityShortfall``: points of accuracy under the reference (MAE: percent over it) of the latest judged
        batch, significant or not."""
        return self._metric("QualityShortfall", "Maximum")

    def metric_significant_shortfall(self) -> cloudwatch.Metric:
        """``SignificantShortfall``: the latest judged batch's shortfall when it alarmed, else 0. What ``.alarm``
        watches."""
        return self._metric("SignificantShortfall", "Maximum")

    def metric_labelled_per_batch(self) -> cloudwatch.Metric:
        """``LabelledPerBatch``: the labelled predictions a batch of ``max_batch_hours`` collects at the observed label
        rate (what ``.labels_starved_alarm`` compares with ``min_labelled``); not published until the rate is known."""
        return self._metric("LabelledPerBatch", "Minimum")

    def metric_judged(self) -> cloudwatch.Metric:
        """``QualityJudged``: 1 after a recent judgement, 0 when the latest batch closed unjudged; not published while a
        version's first batch fills."""
        return self._metric("QualityJudged", "Minimum")

    def metric_detection_delay(self) -> cloudwatch.Metric:
        """``DetectionDelayHours``: the planned batch's hours at the observed label rate (how long a drop of
        ``max_drop`` takes to be judged)."""
        return self._metric("DetectionDelayHours", "Maximum")

    def grant_label_upload(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets ``grantee`` put label files under ``ground-truth/<endpoint>/`` (with the capture bucket's key)."""
        return self.capture_bucket.grant_write_prefix(grantee, self.labels_prefix)

    def widgets(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(title=f"Quality: {self.metric_quality().metric_name} against the baseline",
                                   width=12, left=[self.metric_quality(), self._metric("QualityBaseline", "Average")]),
            cloudwatch.GraphWidget(title="Quality: shortfall and significant shortfall (alarms) of judged batches",
                                   width=12, left=[self.metric_shortfall(), self.metric_significant_shortfall()]),
            cloudwatch.GraphWidget(title="Quality: labels joined, unmatched and waiting", width=12,
                                   left=[self.metric_labelled(), self._metric("UnmatchedLabels", "Sum"),
                                         self._metric("LabelObjectsPending", "Maximum")]),
            cloudwatch.GraphWidget(title="Quality: batch (labels, target) and detection delay (hours)", width=12,
                                   left=[self._metric("BatchLabels", "Maximum"), self._metric("BatchTarget", "Maximum")],
                                   right=[self.metric_detection_delay(), self._metric("DetectableDrop", "Maximum")]),
            cloudwatch.GraphWidget(title="Quality: labelled predictions per longest batch against min_labelled",
                                   width=12, left=[self.metric_labelled_per_batch()],
                                   left_annotations=[cloudwatch.HorizontalAnnotation(
                                       value=self.settings.min_labelled, label="min_labelled")]),
        ]

