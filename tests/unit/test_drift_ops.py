"""./platform drift check: the scheduled check's own code on a local baseline and capture files."""

import json
import random
import re

import pytest

from ml_platform_constructs.runtime.decisions import drift
from ops import drift as drift_command

FEATURES = ["a", "b", "color"]


def training(rng, shift=0.0):
    return {"a": rng.gauss(shift, 1), "b": rng.gauss(0, 1), "color": rng.choice("rgb")}


def capture_file(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps({"captureData": {"endpointInput": {
        "observedContentType": "text/csv", "mode": "INPUT", "encoding": "CSV",
        "data": ",".join(str(row[f]) for f in FEATURES)}}}) for row in rows))


@pytest.fixture
def files(tmp_path):
    rng = random.Random(1)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(drift.build_baseline([training(rng) for _ in range(3000)], FEATURES)))
    return tmp_path, baseline, rng


def run(capsys, *argv, code=0):
    assert drift_command.main(["check", "dev", "classifier", *argv]) == code
    return capsys.readouterr().out


def test_a_shifted_feature_alarms_exits_3_and_the_json_says_which(files, capsys):
    tmp_path, baseline, rng = files
    capture_file(tmp_path / "capture" / "AllTraffic" / "2026" / "11" / "29" / "20" / "a.jsonl",
                 [training(rng, shift=0.8) for _ in range(1000)])
    result = json.loads(run(capsys, "--baseline", str(baseline), "--capture", str(tmp_path / "capture"), "--json",
                            code=3))
    assert (result["alarm"], result["judged"], result["drifted"]) == (True, True, ["a"])
    assert result["scores"]["a"]["significant"] and result["records_read"] == 1000
    assert result["records_unusable"] == {"count": 0, "reasons": []}


def test_no_drift_exits_0(files, capsys):
    tmp_path, baseline, rng = files
    capture_file(tmp_path / "capture" / "a.jsonl", [training(rng) for _ in range(1000)])
    text = run(capsys, "--baseline", str(baseline), "--capture", str(tmp_path / "capture"), code=0)
    assert "1000 records; 3 feature(s) judged: no drift" in text and "unusable" not in text


def test_a_small_window_is_not_judged_exits_4_and_says_so_in_words(files, capsys):
    tmp_path, baseline, rng = files
    capture_file(tmp_path / "capture" / "x.jsonl", [training(rng) for _ in range(10)])
    text = run(capsys, "--baseline", str(baseline), "--capture", str(tmp_path / "capture"), code=4)
    assert "10 records; 0 feature(s) judged: not judged" in text and "a: not judged (10 values, needs 100" in text
    assert text.splitlines()[-1].startswith("not judged: 10 records")


@pytest.mark.parametrize("args,message", [
    (["--baseline", "nosuch.json", "--capture", "."], "error: --baseline nosuch.json does not exist (build one: "
                                                      "./platform drift-baseline dev classifier SAMPLE.csv"),
    (["--capture", "nosuch"], "error: --capture nosuch is not a directory"),
])
def test_bad_arguments_are_one_line_before_any_work(files, args, message):
    _, baseline, _ = files
    argv = ["check", "dev", "classifier", *(args if "--baseline" in args else ["--baseline", str(baseline), *args])]
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        drift_command.main(argv)


def test_records_of_the_wrong_width_or_garbage_are_counted_and_named_in_the_text_as_in_the_json(files, capsys):
    """0.7: "0 records" in words, the malformed count only in --json, and no reason anywhere."""
    tmp_path, baseline, rng = files
    capture_file(tmp_path / "capture" / "good.jsonl", [training(rng) for _ in range(1000)])
    wide = json.dumps({"captureData": {"endpointInput": {"encoding": "CSV", "data": "1,2,r,9"}}})
    (tmp_path / "capture" / "bad.jsonl").write_text("\n".join([wide, wide, "not json", '{"other": 1}']) + "\n")
    argv = ["--baseline", str(baseline), "--capture", str(tmp_path / "capture")]
    text = run(capsys, *argv, code=0)
    assert all(len(line) <= 100 for line in text.splitlines())
    text = " ".join(text.split())  # folded at 100 columns
    assert "1000 records; 3 feature(s) judged: no drift" in text
    assert ("4 record(s) unusable: 2 a CSV row has 4 values, the baseline 3 features (first: bad.jsonl:1); 1 not "
            "JSON") in text
    assert "no 'captureData' in it (not SageMaker's data capture) (first: bad.jsonl:4)" in text
    result = json.loads(run(capsys, *argv, "--json", code=0))
    assert result["records_malformed"] == 4 and result["records_unusable"]["count"] == 4
    assert result["records_unusable"]["reasons"][0] == {
        "reason": "a CSV row has 4 values, the baseline 3 features", "records": 2, "first": "bad.jsonl:1"}


def test_a_capture_of_no_usable_record_is_one_line_not_a_clean_not_judged(files, capsys):
    tmp_path, baseline, _ = files
    (tmp_path / "capture").mkdir()
    wide = json.dumps({"captureData": {"endpointInput": {"encoding": "CSV", "data": "1,2"}}})
    (tmp_path / "capture" / "x.jsonl").write_text(f"{wide}\n{wide}\n")
    with pytest.raises(SystemExit, match=r"^error: --capture .*: no record the check can use; 2 record\(s\) unusable: "
                                         r"2 a CSV row has 2 values, the baseline 3 features \(first: x.jsonl:1\): "
                                         r"give SageMaker's data capture of classifier, whose requests have the "
                                         r"baseline's 3 features \(a, b, color\)$"):
        drift_command.main(["check", "dev", "classifier", "--baseline", str(baseline), "--capture",
                            str(tmp_path / "capture")])


@pytest.mark.parametrize("content, problem", [
    ("[1, 2]", "a JSON array, not a baseline object"),
    ('{"features": {}, "feature_order": []}', "no features"),
    ('{"features": {"a": {"type": "numeric"}}, "feature_order": ["a"]}', "feature 'a' is not a numeric"),
    ('{"features": {"a": {"type": "numeric", "counts": [], "edges": []}}, "feature_order": ["b"]}',
     "its feature_order is not its features"),
    ("{", "not JSON: Expecting property name"),
])
def test_a_file_that_is_no_drift_baseline_is_one_line(files, content, problem):
    tmp_path, baseline, rng = files
    baseline.write_text(content)
    capture_file(tmp_path / "capture" / "x.jsonl", [training(rng) for _ in range(10)])
    with pytest.raises(SystemExit, match=r"^error: --baseline .* is not a drift baseline \(" + re.escape(problem)):
        drift_command.main(["check", "dev", "classifier", "--baseline", str(baseline), "--capture",
                            str(tmp_path / "capture")])
