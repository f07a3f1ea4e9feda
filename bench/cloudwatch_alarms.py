"""A CloudWatch metric alarm's evaluation, small enough to read: the rules a queue's goodput alarms are replayed
through (tests/unit/test_goodput_alarm_replay.py tests it on the tables of AWS's documentation, then replays stand-in
jobs; ``./platform bench goodput-alarms`` measures the alarms' false-alarm rate and detection time with it).
Standard library only.

The rules, from the CloudWatch user guide (Evaluating an alarm; Configuring how CloudWatch alarms treat missing data):
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html

- Each period's datapoint is the statistic of the values whose timestamps fall in it (periods aligned to the clock).
- An evaluation retrieves more periods than EvaluationPeriods (N), the evaluation range (the guide's tables: 5 for
  N = 3; here N + 2). With N or more real datapoints in it, the most recent N real ones decide and the missing-data
  setting is not used. With fewer, missing ones are filled per TreatMissingData as few times as possible, every
  real datapoint of the range counting: ALARM when DatapointsToAlarm (M) of the N breach, else OK.
- notBreaching / breaching: a filled point is good / bad. missing: a range with no real point is INSUFFICIENT_DATA;
  ignore: it keeps the current state. With some real points, fewer than N, and only breaching ones below M, the
  guide's tables give INSUFFICIENT_DATA (missing) or the current state (ignore), except that a breaching oldest
  point of the range (missing) goes to ALARM ("X - - - -"); a non-breaching real point gives OK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Sequence

OK, ALARM, INSUFFICIENT = "OK", "ALARM", "INSUFFICIENT_DATA"
STATISTICS: Mapping[str, Callable[[Sequence[float]], float]] = {
    "Maximum": max, "Minimum": min, "Sum": sum, "SampleCount": len, "Average": lambda v: sum(v) / len(v)}
COMPARISONS = {"GreaterThanThreshold": lambda v, t: v > t, "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
               "LessThanThreshold": lambda v, t: v < t, "LessThanOrEqualToThreshold": lambda v, t: v <= t}


@dataclass(frozen=True)
class CloudWatchAlarm:
    period: int
    statistic: str
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    comparison: str
    treat_missing_data: str = "missing"

    @classmethod
    def from_template(cls, props: Mapping) -> "CloudWatchAlarm":
        """The rule of an AWS::CloudWatch::Alarm's properties (DatapointsToAlarm absent: N of N)."""
        return cls(period=props["Period"], statistic=props["Statistic"], evaluation_periods=props["EvaluationPeriods"],
                   datapoints_to_alarm=props.get("DatapointsToAlarm", props["EvaluationPeriods"]),
                   threshold=props["Threshold"], comparison=props["ComparisonOperator"],
                   treat_missing_data=props.get("TreatMissingData", "missing"))

    @property
    def evaluation_range(self) -> int:
        return self.evaluation_periods + 2

    def breaches(self, value: float) -> bool:
        return COMPARISONS[self.comparison](value, self.threshold)

    def decide(self, points: Sequence[Optional[float]], state: str = INSUFFICIENT) -> str:
        """The state after one evaluation of ``points``, the evaluation range's datapoints oldest first (None:
        missing), from ``state``."""
        n, m = self.evaluation_periods, self.datapoints_to_alarm
        real = [v for v in points if v is not None]
        if len(real) >= n:
            return ALARM if sum(map(self.breaches, real[-n:])) >= m else OK
        breaching, filled = sum(map(self.breaches, real)), n - len(real)
        if self.treat_missing_data == "breaching":
            return ALARM if breaching + filled >= m else OK
        if self.treat_missing_data == "notBreaching":
            return ALARM if breaching >= m else OK
        if not real:
            return INSUFFICIENT if self.treat_missing_data == "missing" else state
        if breaching >= m:
            return ALARM
        if breaching < len(real):
            return OK
        if self.treat_missing_data == "missing":
            return ALARM if points[0] is not None else INSUFFICIENT
        return state

    def datapoints(self, samples: Iterable[tuple[float, float]]) -> dict[int, float]:
        """Period start (epoch seconds) -> the statistic of the samples (epoch seconds, value) in that period."""
        buckets: dict[int, list[float]] = {}
        for at, value in samples:
            buckets.setdefault(int(at // self.period) * self.period, []).append(value)
        return {start: STATISTICS[self.statistic](values) for start, values in buckets.items()}

    def states(self, samples: Iterable[tuple[float, float]], start: float, end: float) -> list[tuple[int, str]]:
        """(time, state) at the end of each period from ``start`` to ``end``, evaluated on the periods then ended."""
        points, state, out = self.datapoints(samples), INSUFFICIENT, []
        at = int(start // self.period) * self.period + self.period
        while at <= end:
            state = self.decide([points.get(at - (self.evaluation_range - i) * self.period)
                                 for i in range(self.evaluation_range)], state)
            out.append((at, state))
            at += self.period
        return out


def transitions(timeline: Sequence[tuple[float, str]], to: str = ALARM) -> list[float]:
    """The times at which ``timeline`` ((time, state), as ``states`` gives it) enters ``to`` from another state."""
    entered, before = [], None
    for at, state in timeline:
        if state == to and before != to:
            entered.append(at)
        before = state
    return entered
