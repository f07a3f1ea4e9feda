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


def test_a_bad_label_file_is_refused_in_one_line_before_any_aws_call(tmp_path, capsys):
    path = tmp_path / "labels.jsonl"
    path.write_text(label("a", 1) + "\n" + '{"label": 0}\n' + label("a", 0) + "\n")
    with pytest.raises(SystemExit, match=r"^error: the label file .*labels.jsonl has 2 problem\(s\) in 3 line\(s\) "
                                         r"\(line 2: a label record has no .*; line 3: 'a' is labelled twice in this "
                                         r"file\); nothing was uploaded. Fix: JSON Lines"):
        labels_command.main(["upload", "dev", "classifier", str(path)])
    assert capsys.readouterr().err == ""  # the one line is the error itself


BAD_LABELS = {  # dev's classifier is binary
    "duplicate": ([label("r1", 1), label("r1", 0)], "line 2: 'r1' is labelled twice in this file"),
    "NaN": (['{"inferenceId": "r1", "label": NaN}'], "line 1: nan is no label (a missing value?"),
    "null": (['{"inferenceId": "r1", "label": null}'], "line 1: a null label"),
    "not a class": ([label("r1", 2)], "line 1: 2 is no binary class (0 or 1)"),
    "infinite text": ([label("r1", "inf")], "line 1: 'inf' is no label"),
    "empty": ([label("r1", " ")], "line 1: an empty label"),
    "object": (['{"inferenceId": "r1", "label": {"a": 1}}'], "line 1: a JSON object where a label goes"),
}


@pytest.mark.parametrize("case", BAD_LABELS)
def test_labels_upload_and_quality_check_refuse_the_same_label_files_with_the_same_line(case, local_files, tmp_path):
    """0.7: quality check --labels took duplicates, NaN and strings and said OK or "0 labelled predictions" with no
    reason, while labels upload refused duplicates. One function checks both."""
    lines, problem = BAD_LABELS[case]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    capture_dir, _ = local_files
    for argv, consequence in ((["upload", "dev", "classifier", str(path)], "nothing was uploaded"),
                              (["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(path)],
                               "nothing was judged")):
        module = labels_command if argv[0] == "upload" else quality_command
        with pytest.raises(SystemExit) as done:
            module.main(argv)
        assert done.value.code.startswith("error: ") and f"({problem}" in done.value.code
        assert f"); {consequence}. Fix: " in done.value.code and "\n" not in done.value.code


def test_a_label_value_check_per_problem_type():
    problem = labels_command.label_value_problem
    assert [problem(v, "regression") for v in (1.5, "2.5", 0)] == [None, None, None]
    assert problem("cat", "regression") == "'cat' is no number (a regression's label is its true value)"
    assert problem(True, "regression").startswith("true is no number")
    assert [problem(v, "multiclass") for v in ("cat", 7, "7", True)] == [None] * 4
    assert [problem(v, "binary") for v in (0, 1, "1", 1.0, "spam", False)] == [None] * 6
    assert problem(0.5, "binary") == "0.5 is no binary class (0 or 1)"
    assert all(problem(v, kind) for v in (None, float("nan"), "NaN", "-inf", "", [1]) for kind in
               ("binary", "multiclass", "regression"))


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
    assert quality_command.main([*argv, "--baseline", "0.99", "--baseline-n", "100000"]) == 3
    strict = json.loads(capsys.readouterr().out)
    assert (strict["baseline"], strict["baseline_examples"], strict["decision"]) == (0.99, 100_000, "alarm")
    assert quality_command.main([*argv, "--baseline", "0.99", "--baseline-n", "20"]) == 0
    noisy = json.loads(capsys.readouterr().out)
    assert noisy["decision"] == "ok"  # 0.99 from 20 examples could be 0.86: 9 points under is not shown
    for bad, message in ((["--baseline-n", "5"], "--baseline-n 5: the examples --baseline was measured on"),
                         (["--baseline", "nan"], "--baseline nan: an accuracy share (0 to 1) or an MAE"),
                         (["--baseline", "1.5"], "--baseline 1.5: "),
                         (["--labels-per-hour", "0"], "--labels-per-hour 0.0: the labels' rate per hour"),
                         (["--labels-per-hour", "inf"], "--labels-per-hour inf: the labels' rate per hour")):
        with pytest.raises(SystemExit) as done:
            quality_command.main([*argv, *bad])
        err = capsys.readouterr().err
        assert done.value.code == 2 and err.startswith(f"error: ./platform quality check: {message}"), err
        assert err.count("\n") == 1


def test_quality_check_in_words_exits_0_on_ok(local_files, capsys):
    capture_dir, labels = local_files
    assert quality_command.main(["check", "dev", "classifier", "--capture", str(capture_dir), "--labels",
                                 str(labels)]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 100 for line in out.splitlines())
    assert out.splitlines()[:3] == ["ml-platform-dev-classifier: Accuracy 0.9 from 200 labelled predictions",
                                    "  labels: 201 read, 200 matched a captured prediction, 1 matched none",
                                    "  predictions: 250 captured, 50 without a label"]
    assert "2 points under the baseline 0.92 (measured on 5000 examples): z 1.02 against" in " ".join(out.split())
    assert out.strip().endswith(": OK")


def test_labels_that_match_no_prediction_are_not_judged_exit_4_and_say_why(local_files, tmp_path, capsys):
    """0.7 read "Accuracy no labelled prediction from 0 labelled predictions" and gave no reason."""
    capture_dir, _ = local_files
    labels = tmp_path / "other.jsonl"
    labels.write_text("\n".join(label(f"x{i}", 1) for i in range(3)) + "\n")
    argv = ["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(labels)]
    assert quality_command.main(argv) == 4
    out = capsys.readouterr().out
    assert out.startswith("ml-platform-dev-classifier: no Accuracy: 0 labelled predictions\n")
    assert "no labelled prediction from" not in out and out.strip().endswith(": NOT JUDGED")
    assert "not judged: 0 labelled predictions, needs 200: none of the 3 labels' ids" in " ".join(out.split())
    assert quality_command.main([*argv, "--json"]) == 4
    assert json.loads(capsys.readouterr().out)["decision"] == "not_judged"


def test_labels_that_cannot_be_compared_with_their_predictions_are_counted_and_named(local_files, tmp_path, capsys):
    capture_dir, _ = local_files
    labels = tmp_path / "names.jsonl"
    labels.write_text("\n".join(label(f"r{i}", "spam") for i in range(3)) + "\n")  # against numeric predictions
    argv = ["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(labels)]
    assert quality_command.main(argv) == 4
    out = " ".join(capsys.readouterr().out.split())
    assert ("unusable: 3 labelled prediction(s), not counted: 3 a label that cannot be compared with its "
            "prediction (a class name against a number) (first: r0: 'spam' against '1')") in out
    assert "needs 200: the 3 labelled prediction(s) cannot be scored" in out
    assert quality_command.main([*argv, "--json"]) == 4
    assert json.loads(capsys.readouterr().out)["pairs_unusable"]["count"] == 3


def test_capture_records_it_cannot_read_are_counted_and_named_and_none_readable_is_one_line(local_files, capsys):
    capture_dir, labels = local_files
    (capture_dir / "bad.jsonl").write_text('{"captureData": {}}\nnot json\n')
    argv = ["check", "dev", "classifier", "--capture", str(capture_dir), "--labels", str(labels)]
    assert quality_command.main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("unusable: 2 capture record(s), not counted: 1 no 'endpointOutput' in it (not SageMaker's data capture) "
            "(first: bad.jsonl:1); 1 not JSON (Expecting value) (first: bad.jsonl:2)") in out
    assert quality_command.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records_unusable"]["count"] == 2
    for part in capture_dir.rglob("part-1.jsonl"):
        part.unlink()
    with pytest.raises(SystemExit, match=r"^error: --capture .*: no record the check can use; 2 record\(s\) "
                                         r"unusable: .*: give SageMaker's data capture of classifier"):
        quality_command.main(argv)


def test_quality_check_alarms_on_a_significant_drop(tmp_path, capsys):
    hour = tmp_path / "capture" / "AllTraffic" / "2026" / "11" / "28" / "20"
    hour.mkdir(parents=True)
    (hour / "part-1.jsonl").write_text("\n".join(record("1", inference_id=f"r{i}") for i in range(400)) + "\n")
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(label(f"r{i}", 1 if i < 340 else 0) for i in range(400)) + "\n")  # 0.85
    assert quality_command.main(["check", "dev", "classifier", "--capture", str(tmp_path / "capture"), "--labels",
                                 str(labels), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["decision"] == "alarm"


def test_quality_check_without_capture_files_says_where_they_come_from(tmp_path, local_files):
    _, labels = local_files
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="holds no .jsonl capture files"):
        quality_command.main(["check", "dev", "classifier", "--capture", str(tmp_path / "empty"), "--labels", str(labels)])
