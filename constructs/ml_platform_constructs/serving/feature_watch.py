"""The feature watch of a MonitoredEndpoint's drift check: alarms on each numeric feature's spread and on the features'
relations (the variance the baseline's principal components still explain, and pairwise correlations), as
``runtime/decisions/drift.py`` judges them and publishes to ``MLPlatform/Drift``."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..errors import ValidationError


@dataclass(frozen=True)
class FeatureWatch:
    """When the feature watch alarms.

    :param std_ratio_low: a numeric feature's spread in the window (its interquartile range, robust to skew) below
        this share of the baseline's, and beyond the sampling noise of that many values (measured when the baseline
        was built; at the drift check's per-check level, a third of it, over the features). Default: 0.5.
    :param std_ratio_high: ... above this multiple of it. Default: 2.0.
    :param explained_variance_drop: the share of the window's variance that the baseline's top principal components
        (80% of its variance, at most one fewer than the numeric features) explain moves by this many percentage
        points from the baseline's own share (on held-back rows), either way, beyond its noise. A pair of features
        whose correlation moves by 0.3 or more beyond its noise (a broken join) alarms too. Default: 5.
    """
    std_ratio_low: float = 0.5
    std_ratio_high: float = 2.0
    explained_variance_drop: float = 5.0

    def environment(self) -> dict[str, str]:
        """The drift check's settings for the watch."""
        return {"SPREAD_RATIO_LOW": repr(float(self.std_ratio_low)), "SPREAD_RATIO_HIGH": repr(float(self.std_ratio_high)),
                "EXPLAINED_VARIANCE_CHANGE": repr(float(self.explained_variance_drop))}

    def validate(self) -> None:
        if not 0 < self.std_ratio_low < 1 < self.std_ratio_high:
            raise ValidationError("MonitoredEndpoint", "feature_watch", self,
                                  "0 < std_ratio_low < 1 < std_ratio_high (a band around an unchanged spread)",
                                  "e.g. FeatureWatch(std_ratio_low=0.5, std_ratio_high=2.0)")
        if not 0 < self.explained_variance_drop < 100:
            raise ValidationError("MonitoredEndpoint", "feature_watch.explained_variance_drop",
                                  self.explained_variance_drop, "percentage points between 0 and 100", "e.g. 5")


def feature_watch_metric(namespace: str, endpoint_name: str, name: str, period: Duration) -> cloudwatch.Metric:
    """SpreadOutOfBand, MaxSpreadRatio, MinSpreadRatio, ExplainedVariance, ExplainedVarianceDrop, RelationsChanged,
    MaxCorrelationChange or FeatureWatchActive of the endpoint."""
    return cloudwatch.Metric(namespace=namespace, metric_name=name, period=period,
                             statistic="Minimum" if name in ("MinSpreadRatio", "FeatureWatchActive") else "Maximum",
                             dimensions_map={"EndpointName": endpoint_name})


def feature_watch_alarms(scope: Construct, *, namespace: str, endpoint_name: str, settings: FeatureWatch,
                         period: Duration, alerts: sns.ITopic) -> dict[str, cloudwatch.Alarm]:
    """``feature_spread`` (a spread ratio left its band, significantly), ``explained_variance`` (the features'
    relations changed: the explained share or a pairwise correlation, significantly) and ``feature_watch_inactive``
    (the baseline was built before the watch, which then judges nothing), all notifying ``alerts``. A window
    without enough values publishes neither of the first two: missing data, not breaching."""
    low, high = settings.std_ratio_low, settings.std_ratio_high
    alarms = {
        "feature_spread": feature_watch_metric(namespace, endpoint_name, "SpreadOutOfBand", period).create_alarm(
            scope, "FeatureSpreadAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: a numeric feature's spread (interquartile range) left {low:g}-{high:g} "
                              "times the baseline's beyond its sampling noise (the dashboard's spread ratio per "
                              "feature shows which)"),
        "explained_variance": feature_watch_metric(namespace, endpoint_name, "RelationsChanged", period).create_alarm(
            scope, "ExplainedVarianceAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: the features' relations changed: the baseline's principal components "
                              f"explain {settings.explained_variance_drop:g} points more or less of the inputs' variance "
                              "than on held-back training rows, or a pair's correlation moved by 0.3 or more, beyond "
                              "the noise (a broken join, a feature replaced by another)"),
        # FeatureWatchActive is 0 when the baseline predates the watch (its alarms above would otherwise stay quiet
        # for want of data, as on every 0.4 baseline); inputs without a numeric feature to watch publish nothing.
        "feature_watch_inactive": feature_watch_metric(namespace, endpoint_name, "FeatureWatchActive",
                                                       period).create_alarm(
            scope, "FeatureWatchInactiveAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: the feature watch judges nothing: the drift baseline was built "
                              "before it (version < 3: no quartiles, no held-back components). Rebuild the baseline "
                              "from a training sample: "
                              "./platform drift-baseline ENV ENDPOINT SAMPLE.csv in the platform app, or with the "
                              "library only: python -m ml_platform_constructs drift-baseline SAMPLE.csv --endpoint "
                              f"{endpoint_name} --bucket BUCKET (the drift baseline's bucket). The drift check's "
                              "results say why, under feature_watch_inactive"),
    }
    for alarm in alarms.values():
        alarm.add_alarm_action(cw_actions.SnsAction(alerts))
    return alarms


def feature_watch_widgets(namespace: str, endpoint_name: str, period: Duration) -> list[cloudwatch.IWidget]:
    search = (f"SEARCH('{{{namespace},EndpointName,Feature}} MetricName=\"SpreadRatio\" "
              f"EndpointName=\"{endpoint_name}\"', 'Maximum', {int(period.to_seconds())})")
    return [
        cloudwatch.GraphWidget(title="Feature watch: spread ratio per feature (window IQR / baseline IQR)", width=12,
                               left=[cloudwatch.MathExpression(expression=search, label="", period=period)]),
        cloudwatch.GraphWidget(title="Feature watch: variance explained by the baseline's components", width=12,
                               left=[feature_watch_metric(namespace, endpoint_name, "ExplainedVariance", period)],
                               right=[feature_watch_metric(namespace, endpoint_name, "MaxCorrelationChange", period)]),
    ]
