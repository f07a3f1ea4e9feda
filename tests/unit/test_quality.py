"""The quality join: captured records decoded as SageMaker writes them, joined with labels, judged against a baseline."""

import base64
import json

import pytest

from ml_platform_constructs.runtime import capture, quality


def record(output, *, encoding="CSV", content_type="text/csv", inference_id=None, event_id="event-1"):
    """A data capture record as SageMaker writes it (a JSON body is a string inside data)."""
    data = base64.b64encode(output.encode()).decode() if encoding == "BASE64" else output
    metadata = {"eventId": event_id, "inferenceTime": "2026-11-28T20:10:00Z"}
    if inference_id is not None:
        metadata["inferenceId"] = inference_id
    return json.dumps({
        "captureData": {
            "endpointInput": {"observedContentType": "text/csv", "mode": "INPUT", "data": "1,2", "encoding": "CSV"},
            "endpointOutput": {"observedContentType": content_type, "mode": "OUTPUT", "data": data, "encoding": encoding}},
        "eventMetadata": metadata, "eventVersion": "0"})


def label(key, value):
    return json.dumps({"inferenceId": key, "label": value})


def settings(**overrides):
    return quality.Settings(**{"problem_type": "binary", "baseline": 0.92, "min_labelled": 1, **overrides})


def output_of(line):
    return json.loads(line)["captureData"]["endpointOutput"]


# --- decoding ---------------------------------------------------------------------------------------------------

def test_csv_output_one_prediction_per_line_at_the_column():
    assert quality.predictions_of(output_of(record("1\n0\n")), "") == ["1", "0"]
    assert quality.predictions_of(output_of(record("0.2,0.8")), "1") == ["0.8"]


def test_json_output_is_a_string_inside_data_and_is_parsed():
    line = record('{"predictions": [{"score": 0.81}, {"score": 0.12}]}', encoding="JSON", content_type="application/json")
    assert isinstance(output_of(line)["data"], str)
    assert quality.predictions_of(output_of(line), "predictions.*.score") == [0.81, 0.12]
    scalar = record("0.81", encoding="JSON", content_type="application/json")
    assert quality.predictions_of(output_of(scalar), "") == [0.81]  # the number, not the text "0.81"
    labelled = record('{"predicted_label": "cat"}', encoding="JSON", content_type="application/json")
    assert quality.predictions_of(output_of(labelled), "predicted_label") == ["cat"]


def test_json_list_response_is_one_prediction_per_element():
    line = record("[0.9, 0.1, 0.7]", encoding="JSON", content_type="application/json")
    assert quality.predictions_of(output_of(line), "") == [0.9, 0.1, 0.7]
    assert quality.predictions_of(output_of(line), "1") == [0.1]


@pytest.mark.parametrize("content_type,body,path,expected", [
    ("application/json", '{"predictions": [1]}', "predictions", [1]),
    ("text/csv", "0\n1", "", ["0", "1"]),
    ("application/jsonlines", '{"p": 1}\n{"p": 0}', "*.p", [1, 0]),
])
def test_base64_output_is_read_by_its_content_type(content_type, body, path, expected):
    line = record(body, encoding="BASE64", content_type=content_type)
    assert output_of(line)["data"] == base64.b64encode(body.encode()).decode()
    assert quality.predictions_of(output_of(line), path) == expected


def test_a_base64_body_of_another_content_type_is_malformed_not_guessed():
    join = quality.Join(settings())
    join.add_capture_line(record("\x00\x01", encoding="BASE64", content_type="application/x-npy", inference_id="a"))
    assert (join.malformed_records, join.predictions) == (1, {})


def test_a_path_to_objects_is_refused():
    line = record('{"predictions": [{"score": 1}]}', encoding="JSON", content_type="application/json")
    with pytest.raises(ValueError, match="objects or lists"):
        quality.predictions_of(output_of(line), "predictions")


def test_hour_prefixes_cover_both_ends_newest_first():
    from datetime import datetime, timezone

    first, last = datetime(2026, 11, 28, 23, 10, tzinfo=timezone.utc), datetime(2026, 11, 29, 1, 59, tzinfo=timezone.utc)
    assert capture.hour_prefixes("ground-truth/e/", first, last) == [
        "ground-truth/e/2026/11/29/01/", "ground-truth/e/2026/11/29/00/", "ground-truth/e/2026/11/28/23/"]


# --- the join ---------------------------------------------------------------------------------------------------

def test_join_prefers_the_inference_id_and_falls_back_to_the_event_id():
    join = quality.Join(settings())
    join.add_capture_line(record("1", inference_id="order-7", event_id="ev-a"))
    join.add_capture_line(record("0", event_id="ev-b"))  # the caller passed no InferenceId
    join.add_label_line(label("order-7", 1))
    join.add_label_line(json.dumps({"eventId": "ev-b", "label": 0}))
    join.add_label_line(label("ev-a", 0))  # an event id whose record has an inference id: no match
    result = join.result()
    assert (result["matched"], result["labelled"], result["value"]) == (2, 2, 1.0)
    assert (result["unmatched_labels"], result["unmatched_predictions"]) == (1, 0)


def test_model_monitor_ground_truth_form_is_accepted():
    join = quality.Join(settings())
    join.add_capture_line(record("1", inference_id="order-7"))
    join.add_capture_line(record("1", event_id="ev-b"))
    # Model Monitor's form: eventMetadata.eventId holds the inference id, or the event id without one.
    join.add_label_line(json.dumps({"groundTruthData": {"data": "1", "encoding": "CSV"},
                                    "eventMetadata": {"eventId": "order-7"}, "eventVersion": "0"}))
    join.add_label_line(json.dumps({"groundTruthData": {"data": "0", "encoding": "JSON"},
                                    "eventMetadata": {"eventId": "ev-b"}, "eventVersion": "0"}))
    result = join.result()
    assert (result["matched"], result["labelled"], result["value"]) == (2, 2, 0.5)


def test_unmatched_records_are_counted_on_both_sides():
    join = quality.Join(settings())
    for i in range(5):
        join.add_capture_line(record("1", inference_id=f"r{i}"))
    for key in ("r0", "r1", "lost-1", "lost-2"):
        join.add_label_line(label(key, 1))
    result = join.result()
    assert (result["matched"], result["unmatched_labels"], result["unmatched_predictions"]) == (2, 2, 3)


def test_malformed_lines_and_duplicates_are_counted_and_the_later_label_wins():
    join = quality.Join(settings())
    join.add_capture_line("not json")
    join.add_capture_line(record("1", inference_id="a"))
    join.add_label_line('{"label": 1}')  # no id
    join.add_label_line(label("a", 0))
    join.add_label_line(label("a", 1))  # a correction
    result = join.result()
    assert (result["malformed_records"], result["malformed_labels"], result["duplicate_labels"]) == (1, 1, 1)
    assert result["value"] == 1.0


def test_a_request_of_several_rows_needs_as_many_labels():
    join = quality.Join(settings(problem_type="multiclass", baseline=0.9))
    join.add_capture_line(record("cat\ndog\n", inference_id="batch"))
    join.add_capture_line(record("cat\ndog\n", inference_id="short"))
    join.add_label_line(label("batch", ["cat", "cat"]))
    join.add_label_line(label("short", ["cat"]))
    result = join.result()
    assert (result["labelled"], result["value"], result["unusable_pairs"]) == (2, 0.5, 1)


def test_binary_scores_are_thresholded_and_class_names_compare_as_text():
    join = quality.Join(settings())
    for key, score, truth in (("a", "0.7", 1), ("b", "0.3", 1), ("c", "0.5", "1.0"), ("d", "yes", "yes")):
        join.add_capture_line(record(score, inference_id=key))
        join.add_label_line(label(key, truth))
    assert join.result()["value"] == 0.75
    strict = quality.Join(settings(probability_threshold=0.8))
    strict.add_capture_line(record("0.7", inference_id="a"))
    strict.add_label_line(label("a", 1))
    assert strict.result()["value"] == 0.0


def test_a_number_against_a_class_name_is_unusable_not_wrong():
    join = quality.Join(settings(problem_type="multiclass", baseline=0.9))
    join.add_capture_line(record("2", inference_id="a"))
    join.add_label_line(label("a", "dog"))
    assert (join.result()["labelled"], join.result()["unusable_pairs"]) == (0, 1)


def test_regression_is_judged_by_mean_absolute_error():
    join = quality.Join(settings(problem_type="regression", baseline=2.0))
    for key, predicted, actual in (("a", "10", 12), ("b", "5.5", 5)):
        join.add_capture_line(record(predicted, inference_id=key))
        join.add_label_line(label(key, actual))
    result = join.result()
    assert (result["metric"], result["value"], result["labelled"]) == ("MAE", 1.25, 2)
    assert result["decision"] == "ok" and result["shortfall"] == -37.5


# --- the decision -----------------------------------------------------------------------------------------------

def judged(correct, wrong, **overrides):
    join = quality.Join(settings(min_labelled=200, **overrides))
    for i in range(correct + wrong):
        join.add_capture_line(record("1", inference_id=f"r{i}"))
        join.add_label_line(label(f"r{i}", 1 if i < correct else 0))
    return join.result()


def test_too_few_labels_is_not_judged():
    result = judged(100, 99)  # 199 labelled: far under the baseline, but below the sample floor
    assert (result["decision"], result["shortfall"], result["labelled"]) == ("too_few_labels", None, 199)


def test_from_the_sample_floor_on_a_drop_of_1_5_points_alarms():
    result = judged(181, 19)  # 0.905 against 0.92: 1.5 points under
    assert (result["labelled"], result["value"]) == (200, 0.905)
    assert (result["decision"], result["shortfall"]) == ("alarm", 1.5)


def test_a_smaller_drop_is_ok():
    result = judged(1812, 188)  # 0.906: 1.4 points under
    assert (result["decision"], result["shortfall"]) == ("ok", pytest.approx(1.4))


def test_the_drop_is_configurable():
    assert judged(181, 19, max_drop=2.0)["decision"] == "ok"


def test_regression_alarms_on_mae_percent_over_the_baseline():
    assert quality.decide(settings(problem_type="regression", baseline=2.0, min_labelled=1), 2.03, 10) == ("alarm", 1.5)
    assert quality.decide(settings(problem_type="regression", baseline=2.0, min_labelled=1), 2.02, 10)[0] == "ok"


@pytest.mark.parametrize("overrides,message", [
    ({"problem_type": "ranking"}, "problem_type"),
    ({"baseline": 92}, "accuracy, a share"),
    ({"problem_type": "multiclass", "probability_threshold": 0.5}, "binary problem type only"),
    ({"problem_type": "regression", "baseline": 0}, "MAE, above 0"),
])
def test_settings_are_checked(overrides, message):
    with pytest.raises(ValueError, match=message):
        settings(**overrides)


# --- label files ------------------------------------------------------------------------------------------------

def test_a_label_file_is_checked_line_by_line():
    good = "\n".join([label("a", 1), json.dumps({"groundTruthData": {"data": "0", "encoding": "CSV"},
                                                  "eventMetadata": {"eventId": "b"}, "eventVersion": "0"}), ""])
    assert quality.validate_labels(good) == (2, [])
    records, problems = quality.validate_labels("\n".join([label("a", 1), "{oops", '{"inferenceId": "b"}',
                                                           label("a", 0)]))
    assert records == 4
    assert problems[0].startswith("line 2: ") and problems[1].startswith("line 3: ")
    assert problems[2] == "line 4: 'a' is labelled twice in this file"
    assert quality.validate_labels("\n") == (0, ["the file has no label records"])


def test_check_files_joins_local_files(tmp_path):
    hour = tmp_path / "capture" / "AllTraffic" / "2026" / "11" / "28" / "20"
    hour.mkdir(parents=True)
    (hour / "a.jsonl").write_text("\n".join(record("1", inference_id=f"r{i}") for i in range(3)))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(label(f"r{i}", 1) for i in range(2)))
    result = quality.check_files(settings(), sorted((tmp_path / "capture").rglob("*.jsonl")), [labels])
    assert (result["value"], result["labelled"], result["unmatched_predictions"], result["decision"]) == (1.0, 2, 1, "ok")
