"""./platform drift check: the scheduled check's own code on a local baseline and capture files."""

import json
import random

import pytest

from ml_platform_constructs.runtime import drift
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


def run(capsys, *argv):
    assert drift_command.main(["check", "dev", "classifier", *argv]) == 0
    return capsys.readouterr().out


def test_a_shifted_feature_alarms_and_the_json_says_which(files, capsys):
    tmp_path, baseline, rng = files
    capture_file(tmp_path / "capture" / "AllTraffic" / "2026" / "11" / "29" / "20" / "a.jsonl",
                 [training(rng, shift=0.8) for _ in range(1000)])
    result = json.loads(run(capsys, "--baseline", str(baseline), "--capture", str(tmp_path / "capture"), "--json"))
    assert (result["alarm"], result["judged"], result["drifted"]) == (True, True, ["a"])
    assert result["scores"]["a"]["significant"] and result["records_read"] == 1000


def test_a_small_window_is_not_judged_and_says_so_in_words(files, capsys):
    tmp_path, baseline, rng = files
    capture_file(tmp_path / "capture" / "x.jsonl", [training(rng) for _ in range(10)])
    text = run(capsys, "--baseline", str(baseline), "--capture", str(tmp_path / "capture"))
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
