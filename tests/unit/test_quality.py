"""The quality join: captured records decoded as SageMaker writes them, joined with labels, judged against a baseline."""

import base64
import dataclasses
import json
import math
import random
from datetime import datetime, timedelta, timezone

from pathlib import Path

import pytest

from ml_platform_constructs.runtime.decisions import capture, quality


ROOT = Path(__file__).resolve().parents[2]


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


# --- the decision -----------------------------------------------------------------------------------------------

def counts(correct, wrong):
    return quality.Counts.of([0.0] * correct + [1.0] * wrong)


def reference(value=0.92, examples=10_000, source="promotion"):
    return quality.Reference(value, examples, source)


def test_the_join_reports_the_value_and_keeps_the_scores():
    join = quality.Join(settings())
    for i in range(10):
        join.add_capture_line(record("1", inference_id=f"r{i}"))
        join.add_label_line(label(f"r{i}", 1 if i < 9 else 0))
    result = join.result()
    assert (result["labelled"], result["value"], sorted(join.scores)) == (10, 0.9, [0.0] * 9 + [1.0])


def test_the_plan_is_the_shortest_batch_that_detects_the_drop_with_90_percent_power():
    s = settings(min_labelled=200, baseline_examples=10_000)
    plan = quality.plan(s, quality.Reference.of(s), labels_per_hour=1000)
    assert (plan.hours, plan.labels) == (17, 17_000) and plan.power >= 0.9
    shorter = quality.plan(s, quality.Reference.of(s), labels_per_hour=1000 * 17 / 16)
    assert shorter.hours <= 16  # more labels an hour: a shorter batch
    # the critical value spends the batches' 90-day budget (65% of 0.25: the deployment check has the rest) over the
    # batches: 2,160 / 17 of them, 10% of it kept for interim looks
    assert quality.stats.normal_sf(plan.critical_z) == pytest.approx(0.9 * 0.65 * 0.25 * 17 / 2160)


def test_a_reference_too_small_for_the_drop_plans_the_longest_batch_and_says_what_it_can_detect():
    s = settings(min_labelled=200, baseline_examples=150)  # 150 held-out examples: 2.2 points of noise on its own
    plan = quality.plan(s, quality.Reference.of(s), labels_per_hour=1000)
    assert plan.hours == s.max_batch_hours and plan.power < 0.9
    assert plan.detectable_drop > 7  # only a drop of about 8 points is caught 90% of the time


def test_the_test_counts_the_reference_noise():
    batch = counts(9_050, 950)  # 0.905 on 10,000 labels: 1.5 points under 0.92
    exact = quality.judge_batch(settings(), reference(examples=None), batch, hours=10)
    noisy = quality.judge_batch(settings(), reference(examples=150), batch, hours=10)
    assert exact["z"] == pytest.approx(0.015 / math.sqrt(0.92 * 0.08 / 10_000), rel=1e-6)
    assert noisy["z"] < 0.8 and noisy["decision"] == "ok"  # 150 examples cannot tell 0.905 from 0.92
    assert exact["decision"] == "alarm" and exact["shortfall"] == 1.5


def test_regression_is_judged_in_percent_of_the_reference_mae():
    rng = random.Random(3)
    s = settings(problem_type="regression", baseline=2.0, min_labelled=10)
    worse = quality.Counts.of([abs(rng.gauss(0, 2.2 / math.sqrt(2 / math.pi))) for _ in range(20_000)])
    result = quality.judge_batch(s, quality.Reference(2.0, 20_000, "promotion", 2.0 * math.sqrt(math.pi / 2 - 1)),
                                 worse, hours=24)
    assert result["decision"] == "alarm" and result["shortfall"] == pytest.approx(10, abs=1.5)


def monitor_run(monitor, hours, labels_per_hour, accuracy, rng, start):
    """Feeds ``hours`` of labelled outcomes; returns each run's status."""
    statuses = []
    for hour in range(hours):
        now = start + timedelta(hours=hour + 1)
        wrong = sum(1 for _ in range(labels_per_hour) if rng.random() >= accuracy)
        monitor.add(counts(labels_per_hour - wrong, wrong), now)
        statuses.append(monitor.step(now)["status"])
    return statuses


START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_the_monitor_judges_a_full_batch_once_and_fills_the_next():
    monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=10_000, reference_labels=0))
    statuses = monitor_run(monitor, 40, 1000, 0.92, random.Random(1), START)
    judged = [i for i, s in enumerate(statuses) if s in ("ok", "alarm")]
    assert statuses[0] == "filling" and len(judged) == 2  # batches of 15 hours: judged at hours 15 and 30
    assert all(statuses[i] == "ok" for i in judged)


def test_a_drop_after_the_reference_alarms_within_two_batches():
    monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=5000))  # production reference of 10,000
    rng = random.Random(2)
    healthy = monitor_run(monitor, 48, 1000, 0.92, rng, START)
    assert monitor.reference().source == "production" and "alarm" not in healthy
    dropped = monitor_run(monitor, 48, 1000, 0.905, rng, START + timedelta(hours=48))
    assert "alarm" in dropped


def test_too_few_labels_in_the_longest_batch_is_not_judged_and_says_why():
    monitor = quality.Monitor(settings(min_labelled=200, max_batch_hours=24, reference_labels=0))
    statuses = monitor_run(monitor, 24, 5, 0.92, random.Random(3), START)
    assert statuses[-1] == "not_judged"
    step = monitor.step(START + timedelta(hours=25))
    assert step["judged"] is False and step["last"]["reason"] == "120 labelled predictions in 24 h, needs 200"


def test_a_new_model_version_restarts_the_batch_and_the_reference():
    s = settings(min_labelled=200)
    monitor = quality.Monitor(s, model_version="a")
    monitor.add(counts(900, 100), START)
    again = quality.Monitor(s, monitor.state, model_version="a")
    assert again.state["batch"]["counts"]["n"] == 1000
    fresh = quality.Monitor(s, monitor.state, model_version="b")
    assert fresh.state["batch"] is None and fresh.state["production"]["n"] == 0


def test_a_resumed_version_ages_only_while_it_is_live():
    """A rollback after 30 days: the version's batch is not closed unjudged, nor its last judgement taken as overdue,
    for the days another version was live."""
    s = settings(min_labelled=200, max_batch_hours=24, reference_labels=0)
    monitor = quality.Monitor(s, model_version="a")
    hours = next(h for h in range(1, 25)  # until the first batch is judged
                 if monitor_run(monitor, 1, 1000, 0.92, random.Random(h), START + timedelta(hours=h - 1)) == ["ok"])
    monitor.add(counts(5, 0), START + timedelta(hours=hours + 1))  # the next batch starts filling
    later = START + timedelta(days=30, hours=hours + 1)
    back = quality.Monitor(s, json.loads(json.dumps(monitor.state)), model_version="a")
    assert back.step(later)["status"] == "not_judged"  # unpaused, the 30-day-old batch closes unjudged
    monitor.resume(timedelta(days=30))
    resumed = monitor.step(later)
    assert (resumed["status"], resumed["judged"], resumed["batch_labels"]) == ("filling", True, 5)


def test_the_label_rate_says_what_it_was_measured_on():
    s = settings(min_labelled=200, max_batch_hours=24, reference_labels=0)
    monitor = quality.Monitor(s)
    monitor.add(counts(10, 0), START)
    first = monitor.step(START + timedelta(hours=4))["rate"]
    assert (first["measured_on"], first["labelled"], first["hours"]) == ("this batch", 10, 5.0)
    monitor_run(monitor, 30, 5, 0.92, random.Random(5), START + timedelta(hours=4))
    closed = monitor.step(START + timedelta(hours=40))["rate"]
    assert closed["measured_on"] == "previous batch" and closed["labels_per_hour"] == pytest.approx(closed[
        "labelled"] / closed["hours"], rel=0.01)


# A safety device has two tests: it fires when it must, and never on legitimate work. The rates themselves are
# simulated in ./platform bench decisions (docs/BENCHMARKS.md); these runs are short and seeded.

def test_a_healthy_model_with_a_noisy_reference_stays_quiet():
    alarms = 0
    for seed in range(20):
        rng = random.Random(seed)
        held_out = sum(1 for _ in range(5000) if rng.random() < 0.92) / 5000  # the baseline's own noise
        s = settings(baseline=held_out, baseline_examples=5000, min_labelled=200)
        statuses = monitor_run(quality.Monitor(s), 24 * 14, 1000, 0.92, rng, START)
        judged = [status for status in statuses if status != "filling"]
        alarms += sum(1 for i, status in enumerate(judged) if status == "alarm" and (i == 0 or judged[i - 1] != "alarm"))
    assert alarms <= 1  # 20 models x 14 days, episodes: about 0.8 expected at 0.25 per 90 days


def test_a_3_point_drop_is_caught_by_the_first_full_batch():
    caught = 0
    for seed in range(20):
        monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=10_000, reference_labels=0))
        statuses = monitor_run(monitor, 30, 1000, 0.89, random.Random(100 + seed), START)
        caught += "alarm" in statuses[:16]
    assert caught == 20


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


# The deployment check: from the first label, every label of the version pooled against the held-out score.

def test_a_model_worse_from_deployment_is_caught_and_never_becomes_its_own_reference():
    """0.6 made the first 10,000 production labels the reference unless significantly worse at the batches' level: a
    model 1.5 points worse from deployment became its own standard in most trials."""
    monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=5000))
    statuses = monitor_run(monitor, 48, 1000, 0.905, random.Random(11), START)
    assert "alarm" in statuses and monitor.state["last"]["check"] == "deployment"
    assert monitor.state["deployment"]["decision"] == "alarm" and monitor.reference().source == "config"
    monitor_run(monitor, 24, 1000, 0.905, random.Random(12), START + timedelta(hours=48))
    assert monitor.reference().source == "config" and monitor.state["production"]["n"] < 60_000  # stopped pooling


def test_a_healthy_model_passes_the_deployment_check_and_the_reference_pools_held_out_and_production():
    """The pooled mean (held-out and production counts added) is independent of their difference, so adopting it
    after a check of that difference does not bias it (0.6 adopted production alone, biased upward by the choice)."""
    s = settings(min_labelled=200, baseline_examples=5000)
    monitor = quality.Monitor(s)
    statuses = monitor_run(monitor, 30, 1000, 0.92, random.Random(13), START)
    assert "alarm" not in statuses and monitor.state["deployment"]["decision"] == "passed"
    reference, production = monitor.reference(), quality.Counts(**monitor.state["production"])
    assert reference.source == "production" and reference.examples == production.n + 5000 >= 25_600
    assert reference.value == pytest.approx((production.n - production.total + 0.92 * 5000) / reference.examples)
    not_yet = quality.Monitor(s)  # the check not passed yet: the held-out reference
    monitor_run(not_yet, 12, 1000, 0.92, random.Random(13), START)
    assert not_yet.reference().source == "config" and not_yet.step(START + timedelta(hours=13))["deployment"][
        "decision"] == "filling"


def test_an_exact_baseline_stays_the_reference():
    monitor = quality.Monitor(settings(min_labelled=200))
    monitor_run(monitor, 30, 1000, 0.92, random.Random(16), START)
    assert monitor.state["deployment"]["decision"] == "passed" and monitor.reference() == quality.Reference(
        0.92, None, "config")


def test_the_deployment_check_looks_at_doubling_label_counts_and_spends_its_share_over_them():
    s = settings(min_labelled=200, baseline_examples=5000)
    # until a look detects max_drop (1.5 points) with 95% power against 5,000 held-out examples
    looks = quality.deployment_looks(s)
    assert looks == (200, 400, 800, 1600, 3200, 6400, 12800, 25600)
    # in proportion to the square of the labels: the last look about three quarters of the pooled looks' 25%
    squares = sum(n * n for n in looks)
    assert quality.deployment_level(s) == pytest.approx(0.25 * 0.25 * 25_600 ** 2 / squares)
    assert quality.deployment_level(s, 200) == pytest.approx(0.25 * 0.25 * 200 ** 2 / squares)
    assert sum(quality.deployment_level(s, n) for n in looks) == pytest.approx(0.25 * 0.25)  # Bonferroni
    assert sum(quality.recent_level(s, n) for n in looks[1:]) == pytest.approx(0.1 * 0.25)
    assert quality.deployment_looks(settings(min_labelled=200))[-1] == 6400  # an exact baseline: sooner
    assert quality.deployment_looks(settings(min_labelled=200, baseline_examples=1000))[-1] == 8000  # 8 x held-out


def test_a_held_out_set_too_small_for_the_allowed_drop_says_so_at_deployment():
    small = quality.Monitor(settings(min_labelled=200, baseline_examples=1000)).step(START)["deployment"]
    assert not small["resolves_max_drop"] and small["detectable_drop"] > 2.5
    assert 4000 < small["held_out_needed"] < 8000
    enough = quality.Monitor(settings(min_labelled=200, baseline_examples=small["held_out_needed"]))
    assert enough.step(START)["deployment"]["resolves_max_drop"]


def exact_hours(monitor, hours, wrong_per_thousand, start):
    """``hours`` of 1,000 labels each with exactly this many wrong; each run's status."""
    statuses = []
    for hour in range(hours):
        now = start + timedelta(hours=hour + 1)
        monitor.add(counts(1000 - wrong_per_thousand, wrong_per_thousand), now)
        statuses.append(monitor.step(now)["status"])
    return statuses


def test_a_drop_after_deployment_is_seen_in_the_labels_since_the_previous_look():
    """Healthy for 12,800 labels, then 1.2 points worse: pooled since deployment it is 0.6 points (not significant at
    the look of 25,600); the labels since the previous look alone show it."""
    monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=5000))
    assert "alarm" not in exact_hours(monitor, 13, 80, START)
    statuses = exact_hours(monitor, 13, 92, START + timedelta(hours=13))
    assert statuses[-1] == "alarm" and "alarm" not in statuses[:-1]
    last = monitor.state["last"]
    assert (last["check"], last["labels"], last["labelled"]) == ("deployment", "since the previous look", 13_000)
    pooled = quality.judge_batch(monitor.settings, quality.Reference.of(monitor.settings),
                                 quality.Counts(**monitor.state["production"]), 26,
                                 level=quality.deployment_level(monitor.settings))
    assert pooled["decision"] == "ok"  # what the pooled look alone would have said


def test_the_deployment_checks_verdict_stands_as_one_episode_until_another_version():
    monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=5000, reference_labels=0),
                              model_version="a")
    statuses = exact_hours(monitor, 40, 110, START)  # 3 points worse from the start
    first = statuses.index("alarm")
    judged = [status for status in statuses[first:] if status != "filling"]
    assert set(judged) == {"alarm"} and len(judged) >= 2  # later batches restate it: the alarm never returns to OK
    assert monitor.state["last"]["standing"] and monitor.state["last"]["latest_batch"]["decision"] == "alarm"
    fresh = quality.Monitor(monitor.settings, monitor.state, model_version="b")
    assert fresh.state["deployment"]["decision"] == "filling"


# Imbalanced classes: a class's recall beside accuracy.

def class_hours(monitor, hours, start, rng, recall, labels_per_hour=200, positive=0.02, negative_accuracy=0.9235):
    statuses = []
    for hour in range(hours):
        now = start + timedelta(hours=hour + 1)
        batch = quality.Counts()
        for _ in range(labels_per_hour):
            if rng.random() < positive:
                batch.add(0.0 if rng.random() < recall else 1.0, "1")
            else:
                batch.add(0.0 if rng.random() < negative_accuracy else 1.0, "0")
        monitor.add(batch, now)
        statuses.append(monitor.step(now)["status"])
    return statuses


def test_a_rare_class_that_stops_being_found_alarms_where_accuracy_hardly_moves():
    """2% positives, recall 0.75 falling to 0: accuracy falls 1.5 points at most, the class's recall by 75."""
    monitor = quality.Monitor(settings(min_labelled=200, baseline_examples=5000))
    rng = random.Random(21)
    assert "alarm" not in class_hours(monitor, 60, START, rng, recall=0.75)
    statuses = class_hours(monitor, 48, START + timedelta(hours=60), rng, recall=0.0)
    assert "alarm" in statuses
    last = monitor.state["last"]
    assert "recall of class 1" in last["alarmed_by"] and last["classes"]["1"]["recall"] == 0.0
    # what SignificantShortfall publishes: the class's recall shortfall, in points
    assert last["check"] == "class recall" and last["shortfall"] == pytest.approx(
        last["classes"]["1"]["reference_recall"] * 100)


def test_class_counts_merge_and_survive_the_state():
    counts = quality.Counts()
    for score, label in ((0.0, "1"), (1.0, "1"), (0.0, "0")):
        counts.add(score, label)
    assert counts.classes == {"1": [2, 1.0], "0": [1, 0.0]}
    counts.merge(counts.__class__(1, 0.0, 0.0, {"2": [1, 0.0]}))
    assert counts.classes == {"1": [2, 1.0], "0": [1, 0.0], "2": [1, 0.0]} and counts.n == 4
    again = quality.Counts(**json.loads(json.dumps(dataclasses.asdict(counts))))
    assert again == counts
    s = settings(problem_type="binary")
    assert [quality.class_of(s, v) for v in (1, 1.0, "1", " 0 ", "spam")] == ["1", "1", "1", "0", "spam"]


def test_a_production_reference_adopted_by_0_7_is_pooled_with_the_held_out_examples():
    s = settings(min_labelled=200, baseline_examples=5000)
    old = {"model_version": "static", "settings": quality.settings_key(s), "batch": None,
           "production": {"n": 10_000, "total": 700.0, "squares": 700.0}, "reference": {
               "value": 0.93, "examples": 10_000, "source": "production", "spread": None},
           "reference_rejected": None, "last": None, "previous_rate": None, "previous_hours": None,
           "paused_hours": 0.0}
    monitor = quality.Monitor(s, old)
    assert monitor.reference() == quality.Reference((9300 + 0.92 * 5000) / 15_000, 15_000, "production")
    again = quality.Monitor(s, json.loads(json.dumps(monitor.state)))
    assert again.reference() == monitor.reference()  # once
