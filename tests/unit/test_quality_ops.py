"""The operator commands: ./platform labels upload (checked, then put where the quality check reads labels) and
./platform quality check (the function's join on local files)."""

import dataclasses
import json
from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from ops import labels as labels_command
from ops import quality as quality_command
from stacks import config as platform_config
from tests.unit.test_quality import label, record

NOW = datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)


@pytest.fixture
def label_file(tmp_path):
    path = tmp_path / "orders-2026-11-29.jsonl"
    path.write_text("\n".join(label(f"order-{i}", i % 2) for i in range(3)) + "\n")
    return path


@pytest.fixture
def dev_account(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "111111111111")  # dev's configured account: the command checks it
    with mock_aws():
        sagemaker, s3 = boto3.client("sagemaker"), boto3.client("s3")
        s3.create_bucket(Bucket="dev-serving-capture")
        sagemaker.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::111111111111:role/r",
                               PrimaryContainer={"Image": "683313688378.dkr.ecr.us-east-1.amazonaws.com/x:1"})
        sagemaker.create_endpoint_config(
            EndpointConfigName="classifier-config",
            ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": "m", "InitialInstanceCount": 1,
                                 "InstanceType": "ml.m5.large"}],
            DataCaptureConfig={"EnableCapture": True, "InitialSamplingPercentage": 100,
                               "DestinationS3Uri": "s3://dev-serving-capture/capture",
                               "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}]})
        sagemaker.create_endpoint(EndpointName="ml-platform-dev-classifier", EndpointConfigName="classifier-config")
        yield s3


def test_labels_go_to_the_capture_bucket_under_the_upload_hour(dev_account, label_file, capsys):
    assert labels_command.main(["upload", "dev", "classifier", str(label_file)], now=NOW) == 0
    key = "ground-truth/ml-platform-dev-classifier/2026/11/29/21/20261129T213000Z-orders-2026-11-29.jsonl"
    body = dev_account.get_object(Bucket="dev-serving-capture", Key=key)["Body"].read().decode()
    assert body == label_file.read_text()
    assert capsys.readouterr().out.strip() == f"3 labels -> s3://dev-serving-capture/{key}"


def test_a_bad_label_file_is_refused_before_any_aws_call(tmp_path, capsys):
    path = tmp_path / "labels.jsonl"
    path.write_text(label("a", 1) + "\n" + '{"label": 0}\n' + label("a", 0) + "\n")
    with pytest.raises(SystemExit, match=r"labels.jsonl has 2 problem\(s\) \(above\); nothing was uploaded"):
        labels_command.main(["upload", "dev", "classifier", str(path)])
    err = capsys.readouterr().err
    assert "line 2: a label record has no" in err and "line 3: 'a' is labelled twice" in err


def test_labels_of_an_unknown_endpoint_or_one_without_quality_are_refused(label_file, monkeypatch):
    with pytest.raises(SystemExit, match="dev has no endpoint 'ranker'"):
        labels_command.main(["upload", "dev", "ranker", str(label_file)])
    dev = platform_config.load().environments["dev"]
    without = dataclasses.replace(dev, endpoints=tuple(dataclasses.replace(e, quality=None) for e in dev.endpoints))
    monkeypatch.setattr(labels_command, "environment", lambda name: without)
    with pytest.raises(SystemExit, match="has no quality settings, so nothing would read its labels"):
        labels_command.main(["upload", "dev", "classifier", str(label_file)])


def test_a_missing_label_file_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="the label file .* does not exist"):
        labels_command.main(["upload", "dev", "classifier", str(tmp_path / "nope.jsonl")])


@pytest.fixture
def local_files(tmp_path):
    hour = tmp_path / "capture" / "AllTraffic" / "2026" / "11" / "28" / "20"
    hour.mkdir(parents=True)
    (hour / "part-1.jsonl").write_text("\n".join(record("1", inference_id=f"r{i}") for i in range(250)) + "\n")
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(label(f"r{i}", 1 if i < 180 else 0) for i in range(200)) + "\n"
                      + label("never-captured", 1) + "\n")
    return tmp_path / "capture", labels


def test_quality_check_json_has_the_documented_fields(local_files, capsys):
    capture_dir, labels = local_files
    assert quality_command.main(["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(labels),
                                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {k: result[k] for k in ("metric", "value", "labelled", "matched", "unmatched_labels",
                                   "unmatched_predictions", "baseline", "baseline_examples", "decision")} == {
        "metric": "Accuracy", "value": 0.9, "labelled": 200, "matched": 200, "unmatched_labels": 1,
        "unmatched_predictions": 50, "baseline": 0.92, "baseline_examples": 5000, "decision": "ok"}
    # 2 points under on 200 labels: a healthy model does that in 1 batch of 7; judged at a day's batch level
    assert result["shortfall"] == 2.0 and result["z"] == pytest.approx(1.02, abs=0.01)
    assert result["plan"]["power"] < 0.9 and result["reference_examples"] == 5000


def test_the_baseline_and_its_examples_from_the_command_line(local_files, capsys):
    capture_dir, labels = local_files
    argv = ["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(labels), "--json"]
    quality_command.main([*argv, "--baseline", "0.99", "--baseline-n", "100000"])
    strict = json.loads(capsys.readouterr().out)
    assert (strict["baseline"], strict["baseline_examples"], strict["decision"]) == (0.99, 100_000, "alarm")
    quality_command.main([*argv, "--baseline", "0.99", "--baseline-n", "20"])
    noisy = json.loads(capsys.readouterr().out)
    assert noisy["decision"] == "ok"  # 0.99 from 20 examples could be 0.86: 9 points under is not shown
    with pytest.raises(SystemExit, match=r"^error: --baseline-n 5: the examples --baseline was measured on"):
        quality_command.main([*argv, "--baseline-n", "5"])


def test_quality_check_in_words(local_files, capsys):
    capture_dir, labels = local_files
    quality_command.main(["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(labels)])
    out = capsys.readouterr().out
    assert "ml-platform-dev-classifier: Accuracy 0.9 from 200 labelled predictions" in out
    assert "2 points under the baseline 0.92 (measured on 5000 examples): z 1.02 against" in out
    assert out.strip().endswith(": OK")


def test_quality_check_alarms_on_a_significant_drop(tmp_path, capsys):
    hour = tmp_path / "capture" / "AllTraffic" / "2026" / "11" / "28" / "20"
    hour.mkdir(parents=True)
    (hour / "part-1.jsonl").write_text("\n".join(record("1", inference_id=f"r{i}") for i in range(400)) + "\n")
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(label(f"r{i}", 1 if i < 340 else 0) for i in range(400)) + "\n")  # 0.85
    quality_command.main(["check", "dev", "classifier", "--capture", str(tmp_path / "capture"), "--labels",
                          str(labels), "--json"])
    assert json.loads(capsys.readouterr().out)["decision"] == "alarm"


def test_quality_check_without_capture_files_says_where_they_come_from(tmp_path, local_files):
    _, labels = local_files
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="holds no .jsonl capture files"):
        quality_command.main(["check", "dev", "classifier", "--capture", str(tmp_path / "empty"), "--labels", str(labels)])
