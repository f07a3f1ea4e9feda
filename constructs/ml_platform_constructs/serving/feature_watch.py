"""The feature watch of a MonitoredEndpoint's drift check: alarms on each numeric feature's spread and on the variance
the baseline's principal components still explain (what ``runtime/drift.py`` publishes to ``MLPlatform/Drift``)."""

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

    :param std_ratio_low: a numeric feature's standard deviation in the window below this share of the baseline's.
        Default: 0.5.
    :param std_ratio_high: ... above this multiple of it. Default: 2.0.
    :param explained_variance_drop: the share of the window's variance that the baseline's top principal components
        explain falls by this many percentage points below the baseline's own share. Default: 5.
    """
    std_ratio_low: float = 0.5
    std_ratio_high: float = 2.0
    explained_variance_drop: float = 5.0

    def validate(self) -> None:
        if not 0 < self.std_ratio_low < 1 < self.std_ratio_high:
            raise ValidationError("MonitoredEndpoint", "feature_watch", self,
                                  "0 < std_ratio_low < 1 < std_ratio_high (a band around an unchanged spread)",
                                  "e.g. FeatureWatch(std_ratio_low=0.5, std_ratio_high=2.0)")
        if not 0 < self.explained_variance_drop < 100:
            raise ValidationError("MonitoredEndpoint", "feature_watch.explained_variance_drop",
                                  self.explained_variance_drop, "percentage points between 0 and 100", "e.g. 5")


def feature_watch_metric(namespace: str, endpoint_name: str, name: str, period: Duration) -> cloudwatch.Metric:
    """MaxStdRatio, MinStdRatio, ExplainedVariance or ExplainedVarianceDrop of the endpoint."""
    return cloudwatch.Metric(namespace=namespace, metric_name=name, period=period,
                             statistic="Minimum" if name == "MinStdRatio" else "Maximum",
                             dimensions_map={"EndpointName": endpoint_name})


def feature_watch_alarms(scope: Construct, *, namespace: str, endpoint_name: str, settings: FeatureWatch,
                         period: Duration, alerts: sns.ITopic) -> dict[str, cloudwatch.Alarm]:
    """``feature_spread`` (a ratio left its band) and ``explained_variance`` (the explained share dropped), both
    notifying ``alerts``. A window without enough values publishes no ratio or share: missing data, not breaching."""
    low, high = settings.std_ratio_low, settings.std_ratio_high
    spread = cloudwatch.MathExpression(
        expression=f"IF(highest > {high:g} OR lowest < {low:g}, 1, 0)", label="std ratio out of band", period=period,
        using_metrics={"highest": feature_watch_metric(namespace, endpoint_name, "MaxStdRatio", period),
                       "lowest": feature_watch_metric(namespace, endpoint_name, "MinStdRatio", period)})
    alarms = {
        "feature_spread": spread.create_alarm(
            scope, "FeatureSpreadAlarm", threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: a numeric feature's standard deviation left {low:g}-{high:g} times the "
                              "baseline's (the dashboard's std ratio per feature shows which)"),
        "explained_variance": feature_watch_metric(namespace, endpoint_name, "ExplainedVarianceDrop", period).create_alarm(
            scope, "ExplainedVarianceAlarm", threshold=settings.explained_variance_drop, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{endpoint_name}: the baseline's principal components explain "
                              f"{settings.explained_variance_drop:g} points less of the inputs' variance than in "
                              "training (the features' relations changed)"),
    }
    for alarm in alarms.values():
        alarm.add_alarm_action(cw_actions.SnsAction(alerts))
    return alarms


def feature_watch_widgets(namespace: str, endpoint_name: str, period: Duration) -> list[cloudwatch.IWidget]:
    search = (f"SEARCH('{{{namespace},EndpointName,Feature}} MetricName=\"StdRatio\" "
              f"EndpointName=\"{endpoint_name}\"', 'Maximum', {int(period.to_seconds())})")
    return [
        cloudwatch.GraphWidget(title="Feature watch: std ratio per feature (window / baseline)", width=12,
                               left=[cloudwatch.MathExpression(expression=search, label="", period=period)]),
        cloudwatch.GraphWidget(title="Feature watch: variance explained by the baseline's components", width=12,
                               left=[feature_watch_metric(namespace, endpoint_name, "ExplainedVariance", period)]),
    ]
