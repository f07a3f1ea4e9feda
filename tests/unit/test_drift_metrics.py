"""Every metric the drift check publishes, with CloudWatch's units and the names its alarms read, and the Lambda
entry point's own clients (mutation survivors of drift_handler.py)."""

import boto3

from ml_platform_constructs.runtime.handlers import drift_handler
from test_drift_handler import ENV, NOW, aws, line, put_capture  # noqa: F401 (fixture)

UNITS = {"Count", "None"}  # CloudWatch refuses a unit it does not know


class Recording:
    def __init__(self, cloudwatch):
        self.cloudwatch, self.data = cloudwatch, []

    def put_metric_data(self, Namespace, MetricData):  # noqa: N803 (boto3 names)
        self.data += MetricData
        return self.cloudwatch.put_metric_data(Namespace=Namespace, MetricData=MetricData)


def test_every_metric_has_its_name_and_a_unit_cloudwatch_knows(aws):
    s3, cloudwatch = aws
    put_capture(s3, "2026/11/29/20", "a", [line(95, "green")] * 20 + [line(3, "red")] * 20)
    recording = Recording(cloudwatch)
    summary = drift_handler.run(ENV, s3, recording, NOW)
    assert summary["endpoint"] == "classifier"
    names = {(d["MetricName"], tuple(x["Value"] for x in d["Dimensions"])) for d in recording.data}
    assert {"RecordsRead", "RecordsMalformed", "ObjectsSkipped", "MissingValues", "MaxPSI", "MaxKL"} <= {
        name for name, dims in names if dims == ("classifier",)}
    assert {("PSI", ("classifier", "age")), ("KL", ("classifier", "color"))} <= names
    assert {d["Unit"] for d in recording.data} <= UNITS
    assert {d["MetricName"]: d["Unit"] for d in recording.data}["MaxKL"] == "None"


def test_the_entry_point_makes_its_s3_and_cloudwatch_clients(aws, monkeypatch):
    s3, cloudwatch = aws
    asked = []
    monkeypatch.setattr(boto3, "client", lambda name: asked.append(name) or {"s3": s3, "cloudwatch": cloudwatch}[name])
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert drift_handler.handler({}, None)["endpoint"] == "classifier"
    assert asked == ["s3", "cloudwatch"]
