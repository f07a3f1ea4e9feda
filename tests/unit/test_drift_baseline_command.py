"""The baseline command: a CSV training sample becomes the baseline the drift check reads."""

import json

import boto3
import pytest
from moto import mock_aws

from ops import drift_baseline


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "sample.csv"
    path.write_text("age,color,label\n" + "".join(f"{i},{'red' if i % 2 else 'blue'},{i % 3}\n" for i in range(200)))
    return path


def test_baseline_to_a_file_excludes_the_label(sample, tmp_path):
    out = tmp_path / "baseline.json"
    assert drift_baseline.main(["dev", "classifier", str(sample), "--exclude", "label", "--bins", "4",
                                "--output", str(out)]) == 0
    baseline = json.loads(out.read_text())
    assert baseline["feature_order"] == ["age", "color"] and baseline["sample_size"] == 200
    assert baseline["features"]["age"]["type"] == "numeric" and len(baseline["features"]["age"]["counts"]) == 4


def test_baseline_is_uploaded_where_the_drift_check_reads_it(sample, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "111111111111")  # dev's configured account: the command checks it
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="datasets")
        assert drift_baseline.main(["dev", "classifier", str(sample), "--exclude", "label", "--bucket", "datasets"]) == 0
        body = s3.get_object(Bucket="datasets", Key="drift/baselines/ml-platform-dev-classifier/baseline.json")["Body"]
        assert json.loads(body.read())["feature_order"] == ["age", "color"]


def test_unknown_endpoint_is_refused(sample):
    with pytest.raises(SystemExit, match="dev has no endpoint 'ranker'"):
        drift_baseline.main(["dev", "ranker", str(sample), "--output", "/dev/null"])
