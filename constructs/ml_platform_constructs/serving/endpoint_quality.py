"""EndpointQuality: a MonitoredEndpoint's production quality, its captured predictions joined with ground-truth labels
on a schedule, and an alarm when it falls below the live model's baseline.

SageMaker Model Monitor's model-quality jobs would do the join, but Model Monitor is no longer open to new customers
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor.html), so a scheduled Lambda (``runtime/quality.py``
and ``runtime/quality_handler.py``, standard library and boto3) does it, as the drift check does for inputs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from aws_cdk import Acknowledgment, CfnParameter, Duration, RemovalPolicy, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..data.dataset_bucket import DatasetBucket
from ..errors import ValidationError
from ..foundation.nag_support import AcknowledgeWildcardResources, suppress_checkov
from ..runtime.promotion import BASELINE, quality_baseline_parameter
from ..runtime.quality import DEFAULT_SIGNIFICANCE, PROBLEM_TYPES, holdout_metric
from ..foundation.runtime_function import runtime_function

QUALITY_NAMESPACE = "MLPlatform/Quality"
GROUND_TRUTH_PREFIX = "ground-truth/"
# The quality check's code: the handler and what it imports (in Lambda, each sits at the top of the package).
FUNCTION_FILES = ("capture.py", "quality.py", "quality_handler.py")
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
    :param min_labelled: the quality is judged only from this many labelled predictions in a window. Default: 200.
    :param max_drop: alarm when accuracy is this many percentage points under the baseline (MAE: this many percent
        over it) and the shortfall is significant (``significance``). Default: 1.5.
    :param significance: the level of the one-sided test a shortfall must pass to alarm: its p-value, the chance that
        a model exactly as good as the baseline scores this badly or worse on this many labels, is at most this
        (accuracy: exact binomial test; MAE: normal test with the window's spread of absolute errors). A healthy model
        alarms in at most this share of its windows. Default: 0.001 (with hourly windows, at most one false alarm in
        about six weeks; an observed 1.5-point shortfall under a 0.92 baseline is significant from about 3,200 labels).
    :param schedule: how often the check runs; also the length of the judged window. Default: 1 hour.
    :param label_lateness: how long labels may take: each run judges the predictions of the window that ended this
        long ago, with every label uploaded since. Default: 24 hours.
    :param max_records_per_run: the sample bound of one run (captured records, and label records). Default: 10,000.
    """
    problem_type: str
    baseline: float
    prediction_path: str = ""
    probability_threshold: Optional[float] = None
    min_labelled: int = 200
    max_drop: float = 1.5
    significance: float = DEFAULT_SIGNIFICANCE
    schedule: Duration = Duration.hours(1)
    label_lateness: Duration = Duration.hours(24)
    max_records_per_run: int = 10_000

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
        if not (isinstance(self.significance, (int, float)) and 0 < self.significance <= 0.5):
            fail("significance", self.significance, "a one-sided test level above 0 and at most 0.5",
                 "e.g. 0.001 (0.01 alarms on smaller samples, and on a healthy model in up to 1% of windows)")
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


class EndpointQuality(Construct):
    """The quality check of one endpoint (MonitoredEndpoint creates it from its ``quality`` prop).

    Ground-truth labels go to ``capture_bucket`` under ``ground-truth/<endpoint>/yyyy/mm/dd/hh/`` (JSON Lines, next to
    the captured requests they label, expiring with them): ``grant_label_upload(grantee)`` lets a labelling job
    write them. Each run's result goes to ``results_bucket`` under ``quality/results/<endpoint>/``.

    The baseline is ``settings.baseline``, or, with ``promoted_baseline=True``, the live model's held-out score: a
    stack parameter (``runtime.promotion.quality_baseline_parameter(endpoint_name)``, ``.baseline_parameter``),
    empty by default, that a promotion sets to the promoted run's ``holdout_accuracy`` (``holdout_mae`` for
    regression) in the same stack update as the model version (``./platform model promote``); ``cdk deploy`` keeps
    its value. While it is empty (before the first promotion) ``settings.baseline`` applies.

    Attributes: ``.function`` (main child ``Resource``), ``.rule``, ``.alarm`` (quality under the baseline),
    ``.check_failing_alarm``, ``.labels_prefix``, ``.results_prefix``, ``.baseline_parameter`` (or None).
    """

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, variant_name: str,
                 capture_bucket: DatasetBucket, capture_prefix: str, results_bucket: DatasetBucket,
                 settings: ModelQuality, alerts: sns.ITopic, logs_key: Optional[kms.IKey] = None,
                 removal_policy: RemovalPolicy = RemovalPolicy.RETAIN, promoted_baseline: bool = False) -> None:
        super().__init__(scope, id)
        settings.validate()
        self.settings = settings
        self.endpoint_name = endpoint_name
        self.capture_bucket = capture_bucket
        self.labels_prefix = f"{GROUND_TRUTH_PREFIX}{endpoint_name}/"
        self.results_prefix = f"quality/results/{endpoint_name}/"
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
            "ENDPOINT_NAME": endpoint_name, "METRIC_NAMESPACE": QUALITY_NAMESPACE,
            "WINDOW_HOURS": str(int(settings.schedule.to_hours())),
            "LATENESS_HOURS": str(int(settings.label_lateness.to_hours())),
            "MAX_RECORDS": str(settings.max_records_per_run), "PROBLEM_TYPE": settings.problem_type,
            "BASELINE": repr(float(settings.baseline)), "PREDICTION_PATH": settings.prediction_path,
            "MIN_LABELLED": str(settings.min_labelled), "MAX_DROP": repr(float(settings.max_drop)),
            "SIGNIFICANCE": repr(float(settings.significance)),
        }
        if settings.probability_threshold is not None:
            environment["PROBABILITY_THRESHOLD"] = repr(float(settings.probability_threshold))
        self.baseline_parameter: Optional[CfnParameter] = None
        if promoted_baseline:
            self.baseline_parameter = CfnParameter(
                self, "PromotedBaseline", type="String", default="", allowed_pattern=BASELINE.pattern,
                description=f"{endpoint_name}: the promoted model's {holdout_metric(settings.problem_type)}, the "
                            f"quality check's baseline; empty: {settings.baseline:g} (configured). Set by ./platform "
                            "model promote")
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
            policy, [f"/{capture_endpoint_prefix}*", f"/{self.labels_prefix}*", f"/{self.results_prefix}*"], reason))
        self.rule = events.Rule(self, "Schedule", description=f"Runs the quality check of {endpoint_name}",
                                schedule=events.Schedule.rate(settings.schedule),
                                targets=[targets.LambdaFunction(self.function, retry_attempts=2)])

        notify = cw_actions.SnsAction(alerts)
        below = (f"{settings.max_drop:g} percentage points under" if settings.problem_type != "regression"
                 else f"{settings.max_drop:g}% over")
        baseline = (f"the promoted model's {holdout_metric(settings.problem_type)} (configured {settings.baseline:g} "
                    "before any promotion)" if promoted_baseline else f"the baseline {settings.baseline:g}")
        # Judged runs only publish SignificantShortfall (0 for a shortfall that may be noise): a window with too few
        # labels leaves the alarm where it was.
        self.alarm = self.metric_significant_shortfall().create_alarm(
            self, "Alarm", threshold=settings.max_drop, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.IGNORE,
            alarm_description=f"{endpoint_name}: {'MAE' if settings.problem_type == 'regression' else 'accuracy'} "
                              f"{below} {baseline}, significant at {settings.significance:g} (one-sided), from at "
                              f"least {settings.min_labelled} labelled predictions (results under "
                              f"{self.results_prefix})")
        self.check_failing_alarm = self.function.metric_errors(period=Duration.hours(1)).create_alarm(
            self, "CheckFailingAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: the quality check fails (its logs say why)")
        for alarm in (self.alarm, self.check_failing_alarm):
            alarm.add_alarm_action(notify)

    def _metric(self, name: str, statistic: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(namespace=QUALITY_NAMESPACE, metric_name=name, statistic=statistic,
                                 period=self.settings.schedule, dimensions_map={"EndpointName": self.endpoint_name})

    def metric_quality(self) -> cloudwatch.Metric:
        """``Accuracy`` (a share) or ``MAE`` of the labelled predictions of each judged window."""
        return self._metric("MAE" if self.settings.problem_type == "regression" else "Accuracy", "Average")

    def metric_labelled(self) -> cloudwatch.Metric:
        """``LabelledPredictions``: how many predictions of the window had a usable label."""
        return self._metric("LabelledPredictions", "Sum")

    def metric_shortfall(self) -> cloudwatch.Metric:
        """``QualityShortfall``: points of accuracy under the baseline (MAE: percent over it), judged windows only,
        significant or not."""
        return self._metric("QualityShortfall", "Maximum")

    def metric_significant_shortfall(self) -> cloudwatch.Metric:
        """``SignificantShortfall``: the shortfall of a window that alarms (at least ``max_drop`` and significant),
        else 0; judged windows only. What ``.alarm`` watches."""
        return self._metric("SignificantShortfall", "Maximum")

    def metric_p_value(self) -> cloudwatch.Metric:
        """``ShortfallPValue``: the one-sided p-value of each judged window's shortfall (0 under 1e-100)."""
        return self._metric("ShortfallPValue", "Minimum")

    def grant_label_upload(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets ``grantee`` put label files under ``ground-truth/<endpoint>/`` (with the capture bucket's key)."""
        return self.capture_bucket.grant_write_prefix(grantee, self.labels_prefix)

    def widgets(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(title=f"Quality: {self.metric_quality().metric_name} against the baseline",
                                   width=12, left=[self.metric_quality(), self._metric("QualityBaseline", "Average")]),
            cloudwatch.GraphWidget(title="Quality: shortfall, significant shortfall (alarms) and p-value", width=12,
                                   left=[self.metric_shortfall(), self.metric_significant_shortfall()],
                                   right=[self.metric_p_value()]),
            cloudwatch.GraphWidget(title="Quality: labelled predictions and what did not join", width=12,
                                   left=[self.metric_labelled(), self._metric("UnmatchedLabels", "Sum"),
                                         self._metric("UnmatchedPredictions", "Sum")]),
        ]

