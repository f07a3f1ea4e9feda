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


@pytest.mark.parametrize("content, extra, message", [
    ("", [], r"has 0 rows and 0 feature columns: give a CSV with a header, or JSON Lines"),
    ("age,color,label\n", [], r"has 0 rows and 3 feature columns"),
    (bytes(range(256)), [], r"is not UTF-8 text \(byte \d+ is not: a binary file\?\)"),
    (None, ["--exclude", "lable"], r"--exclude lable: no such column in .* \(its columns: age, color, label\)$"),
    (None, ["--output", "{tmp}/missing/baseline.json"], r"--output .*: its directory does not exist"),
    (None, ["--output", "{tmp}"], r"--output .*: a directory; give a file path"),
    ("age,color,label\n1,red,0\n2,blue\n3,red,1,extra\n", [],
     r"has 2 row\(s\) it cannot use \(row 2 \(line 3\): 2 values, the header 3 columns; row 3 \(line 4\): 4 values, "
     r"the header 3 columns\): fix or drop them \(one value per column of the header"),
    ("age,color\n" + "1,red\n" * 5 + "".join(f"{i}\n" for i in range(5)), [],
     r"has 5 row\(s\) it cannot use \(row 6 \(line 7\): 1 values, the header 2 columns; row 7 .*; row 8 .*; 2 more\)"),
], ids=["empty", "header only", "binary", "unknown exclude", "output in a missing directory", "output a directory",
        "ragged rows", "many ragged rows"])
def test_a_sample_or_option_it_cannot_use_is_one_line(sample, tmp_path, content, extra, message):
    """0.7: a traceback (empty, header-only, binary, --output), or silently a baseline with the label as a feature
    (an --exclude that names no column), after which every check said "not judged" and exited 0."""
    if content is not None:
        (sample.write_bytes if isinstance(content, bytes) else sample.write_text)(content)
    argv = ["dev", "classifier", str(sample), *[a.format(tmp=tmp_path) for a in extra]]
    if "--output" not in extra:
        argv += ["--output", str(tmp_path / "baseline.json")]
    with pytest.raises(SystemExit, match=message):
        drift_baseline.main(argv)
    assert not (tmp_path / "baseline.json").exists()


@pytest.mark.parametrize("lines, message", [
    (['{"age": 1, "color": "red"}', "5"], r"record 2: a JSON number, not an object"),
    (['{"age": 1, "color": "red"}', '{"age": 2, "colour": "blue"}'], r"record 2: has colour, which the first record "
                                                                     r"lacks"),
    (['{"age": 1, "color": ["red"]}'], r"record 1: color holds a JSON array, not a number or a category"),
    (['{"age": 1', ], r"is not JSON Lines \(line 1: Expecting"),
])
def test_a_json_lines_sample_whose_records_are_not_rows_is_one_line(tmp_path, lines, message):
    """A record that is not an object (0.7: a traceback), or names a column the first lacks (0.7: dropped
    silently)."""
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit, match=message) as done:
        drift_baseline.main(["dev", "classifier", str(sample), "--output", str(tmp_path / "baseline.json")])
    assert str(done.value.code).startswith("error: the sample ") and "\n" not in str(done.value.code)
    assert not (tmp_path / "baseline.json").exists()


def test_a_json_lines_record_without_a_column_is_a_missing_value_not_a_refusal(tmp_path):
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(['{"age": 1, "color": "red"}', '{"age": 2}'] * 50) + "\n")
    assert drift_baseline.main(["dev", "classifier", str(sample), "--output", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["sample_size"] == 100


def test_a_sample_that_is_a_directory_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: the sample .* is a directory \(give a CSV with a header"):
        drift_baseline.main(["dev", "classifier", str(tmp_path), "--output", str(tmp_path / "b.json")])
