"""Drift math on known distributions, and the parsing of captured records (empty, unseen, malformed)."""

import base64
import json
import math
import random
from statistics import NormalDist

import pytest

from ml_platform_constructs.runtime.decisions import drift


def normal_sample(mean, n=20000):
    """n evenly spaced quantiles of N(mean, 1): a deterministic, exactly normal 'sample'."""
    dist = NormalDist(mean, 1)
    return [dist.inv_cdf((i + 0.5) / n) for i in range(n)]


def counts(baseline, feature, values):
    window = drift.Window(baseline)
    for value in values:
        window.add_row({feature: value})
    return window.counts[feature]


def random_sample(mean, n, seed):
    rng = random.Random(seed)
    return [rng.gauss(mean, 1) for _ in range(n)]


def test_identical_distributions_have_zero_psi_and_kl():
    assert drift.psi([10, 20, 30], [10, 20, 30]) == pytest.approx(0.0, abs=1e-12)
    assert drift.kl_divergence([10, 20, 30], [10, 20, 30]) == pytest.approx(0.0, abs=1e-12)


def test_two_bin_example_by_hand():
    # Smoothed: baseline (50.5, 50.5)/101 = (0.5, 0.5); actual (90.5, 10.5)/101.
    a1, a2 = 90.5 / 101, 10.5 / 101
    assert drift.psi([90, 10], [50, 50]) == pytest.approx((a1 - .5) * math.log(a1 / .5) + (a2 - .5) * math.log(a2 / .5))
    assert drift.psi([90, 10], [50, 50]) == pytest.approx(0.8530, abs=1e-4)
    assert drift.kl_divergence([90, 10], [50, 50]) == pytest.approx(a1 * math.log(2 * a1) + a2 * math.log(2 * a2))


def test_empty_bins_are_smoothed_not_infinite():
    assert math.isfinite(drift.psi([0, 100], [100, 0]))
    assert math.isfinite(drift.kl_divergence([0, 100], [100, 0]))


def test_half_sigma_mean_shift_of_a_normal_is_about_the_psi_alarm_threshold():
    # For N(mu,1) against N(0,1): PSI = mu^2 and KL = mu^2/2 in the continuum; 20 quantile bins come close.
    baseline = drift.build_baseline(({"x": v} for v in normal_sample(0)), ["x"], bins=20)
    shifted = counts(baseline, "x", normal_sample(0.5))
    assert drift.psi(shifted, baseline["features"]["x"]["counts"]) == pytest.approx(0.25, rel=0.1)
    assert drift.kl_divergence(shifted, baseline["features"]["x"]["counts"]) == pytest.approx(0.125, rel=0.1)


def test_no_shift_scores_near_zero():
    baseline = drift.build_baseline(({"x": v} for v in normal_sample(0)), ["x"], bins=10)
    same = counts(baseline, "x", normal_sample(0, n=5000))
    assert drift.psi(same, baseline["features"]["x"]["counts"]) < 0.001


def test_baseline_uses_quantile_bins_for_numbers_and_top_categories_plus_other():
    rows = [{"age": str(a), "color": c} for a, c in zip(range(100), ["red"] * 60 + ["blue"] * 30 + ["green"] * 10)]
    baseline = drift.build_baseline(rows, ["age", "color"], bins=4, max_categories=2)
    age = baseline["features"]["age"]
    assert {k: age[k] for k in ("type", "edges", "counts", "mean", "std", "q25", "q75")} == {
        "type": "numeric", "edges": [25.0, 50.0, 75.0], "counts": [26, 25, 25, 24], "mean": 49.5,
        "std": pytest.approx(29.0115, abs=1e-4), "q25": 24.75, "q75": 74.25}
    assert set(age["iqr_log_sd"]) == {"50", "100"}  # the spread ratio's noise, resampled at the sizes it can
    assert baseline["features"]["color"] == {"type": "categorical", "categories": ["red", "blue"], "counts": [60, 30, 10]}
    assert (baseline["sample_size"], baseline["feature_order"]) == (100, ["age", "color"])


def test_empty_training_sample_is_refused():
    with pytest.raises(ValueError, match="empty"):
        drift.build_baseline([], ["x"])


def record(data, encoding="CSV", content_type="text/csv"):
    return json.dumps({"captureData": {"endpointInput": {"observedContentType": content_type, "mode": "INPUT",
                                                         "data": data, "encoding": encoding}},
                       "eventMetadata": {"eventId": "e1", "inferenceTime": "2026-11-29T20:00:00Z"}, "eventVersion": "0"})


@pytest.fixture
def baseline():
    rows = [{"age": str(a), "color": c} for a, c in zip(range(100), ["red"] * 50 + ["blue"] * 50)]
    return drift.build_baseline(rows, ["age", "color"], bins=4)


def test_csv_json_and_base64_records_are_binned(baseline):
    window = drift.Window(baseline)
    window.add_record(record("10,red"))
    window.add_record(record(json.dumps({"age": 90, "color": "blue"}), encoding="JSON", content_type="application/json"))
    window.add_record(record(base64.b64encode(b"60,red").decode(), encoding="BASE64"))
    window.add_record(record(json.dumps({"instances": [[30, "blue"], [31, "blue"]]}), encoding="JSON",
                             content_type="application/json"))
    assert window.records == 5 and window.malformed == 0
    assert sum(window.counts["age"]) == 5 and sum(window.counts["color"]) == 5


def test_unseen_category_lands_in_other_and_is_counted(baseline):
    window = drift.Window(baseline)
    window.add_record(record("10,purple"))
    assert window.counts["color"] == [0, 0, 1] and window.other_category_values == 1


def test_malformed_records_are_counted_not_dropped_silently(baseline):
    window = drift.Window(baseline)
    for line in ("not json", json.dumps({"captureData": {}}), record("1,2,3"), record("{", encoding="JSON",
                                                                                      content_type="application/json")):
        window.add_record(line)
    assert (window.malformed, window.records) == (4, 0)


def test_missing_and_non_numeric_values_are_counted(baseline):
    window = drift.Window(baseline)
    window.add_record(record(",red"))
    window.add_record(record("abc,red"))
    assert window.missing_values == 2 and sum(window.counts["age"]) == 0


def test_empty_window_scores_nothing(baseline):
    assert drift.Window(baseline).scores() == {}


# --- the decision: real and large ----------------------------------------------------------------------------------

def window_of(baseline, values):
    window = drift.Window(baseline)
    for value in values:
        window.add_row({"x": value})
    return window


def test_a_feature_with_too_few_values_per_bin_is_not_judged_and_says_why():
    """20 records from the training distribution scored PSI above 0.25 in every window in 0.4.0 (and retrained)."""
    baseline = drift.build_baseline(({"x": v} for v in normal_sample(0)), ["x"])
    small = drift.decide(window_of(baseline, random_sample(0, 20, seed=1)))
    assert small["scores"]["x"]["psi"] > 0.25  # the noise of 20 values
    assert (small["judged"], small["alarm"]) == (False, False)
    assert small["features_not_judged"] == {"x": "20 values, needs 100 (10 expected in its smallest bin)"}
    assert small["reason"].startswith("not judged: 20 records")


def test_a_large_significant_shift_alarms_and_a_tiny_significant_one_does_not():
    baseline = drift.build_baseline(({"x": v} for v in normal_sample(0)), ["x"])
    large = drift.decide(window_of(baseline, random_sample(0.65, 5000, seed=2)))
    assert large["alarm"] and large["drifted"] == ["x"] and large["significant_psi"] > 0.25
    assert large["psi_lower_bound"] >= 0.25 and large["psi_lower_bound"] == large["scores"]["x"]["psi_lower"]
    tiny = drift.decide(window_of(baseline, random_sample(0.15, 5000, seed=3)))
    assert tiny["scores"]["x"]["significant"] and not tiny["alarm"]  # real, but under PSI 0.25: no retraining


def test_non_finite_values_are_missing_on_both_sides_and_a_mostly_numeric_column_stays_numeric():
    """One nan in a numeric training column made it categorical, after which a 3-SD shift scored PSI 0.0002."""
    values = [str(v) for v in normal_sample(0)]
    values[7], values[8] = "nan", "inf"
    baseline = drift.build_baseline(({"x": v} for v in values), ["x"])
    assert baseline["features"]["x"]["type"] == "numeric" and sum(baseline["features"]["x"]["counts"]) == len(values) - 2
    shifted = drift.decide(window_of(baseline, [v + 3 for v in normal_sample(0, n=500)] + [float("nan")]))
    assert shifted["alarm"] and shifted["scores"]["x"]["psi"] > 5
    assert drift.is_numeric(["1", "2", "x"] + ["3"] * 297) and not drift.is_numeric(["1", "red", "blue"])


def test_the_chi_square_level_is_shared_over_the_judged_features():
    rows = [{"a": x, "b": y} for x, y in zip(normal_sample(0), reversed(normal_sample(0)))]
    baseline = drift.build_baseline(rows, ["a", "b"])
    window = drift.Window(baseline)
    for row in rows[::4]:
        window.add_row(row)
    scores = window.scores(significance=0.01)
    # significant means p <= 0.01 / 2 here (Bonferroni over the two judged features)
    assert all(score["significant"] == (score["p_value"] <= 0.005) for score in scores.values())


def test_hourly_checks_share_a_budget_of_false_alarms_per_90_days():
    assert drift.per_check_significance(0.25, 60) == pytest.approx(0.25 / 2160)
    assert drift.per_check_significance(0.25, 24 * 60) == pytest.approx(0.25 / 90)
    assert drift.DEFAULT_SIGNIFICANCE == drift.Thresholds().significance == pytest.approx(0.25 / 2160)


def test_the_psi_is_corrected_for_its_small_sample_bias():
    """Under no drift a window of 100 values scores PSI about (bins - 1)(1/n + 1/m) = 0.09 on average; corrected,
    about 0."""
    baseline = drift.build_baseline(({"x": v} for v in normal_sample(0)), ["x"])
    base = baseline["features"]["x"]["counts"]
    raw, corrected = [], []
    for seed in range(300):
        window = counts(baseline, "x", random_sample(0, 100, seed=seed))
        raw.append(drift.psi(window, base))
        corrected.append(drift.psi_bound(window, base, 0.0)[0])
    assert sum(raw) / len(raw) == pytest.approx(9 * (1 / 100 + 1 / 20000), rel=0.15)
    assert abs(sum(corrected) / len(corrected)) < 0.01


@pytest.mark.parametrize("n", [100, 300, 1000, 5000])
def test_a_shift_under_the_threshold_does_not_alarm_at_any_window_size(n):
    """A 0.5-SD shift (true PSI 0.24 over 10 quantile bins, under 0.25): the uncorrected PSI of a small window
    clears 0.25 in a third of windows or more (0.6's rule, significant and PSI >= 0.25, alarmed on them); the
    decision does not, at any size."""
    baseline = drift.build_baseline(({"x": v} for v in random_sample(0, 5000, seed=99)), ["x"])
    old_rule = alarms = 0
    for seed in range(60):
        decision = drift.decide(window_of(baseline, random_sample(0.5, n, seed=1000 * n + seed)))
        score = decision["scores"]["x"]
        old_rule += score["p_value"] <= 0.01 and score["psi"] >= 0.25
        alarms += decision["alarm"]
    assert alarms == 0
    if n <= 1000:
        assert old_rule >= 10  # what the decision no longer does


def test_a_shift_over_the_threshold_is_caught_once_the_window_resolves_it():
    """0.65 SD (true PSI 0.4): a window of 1,000 values cannot tell it from 0.25 at the 90-day budget (it says what it
    could detect); 10,000 values can."""
    baseline = drift.build_baseline(({"x": v} for v in random_sample(0, 5000, seed=98)), ["x"])
    small = drift.decide(window_of(baseline, random_sample(0.65, 1000, seed=5)))
    assert small["scores"]["x"]["significant"] and not small["alarm"]
    assert small["detectable_psi"] > 0.4 and "no drift" in small["reason"]
    caught = sum(drift.decide(window_of(baseline, random_sample(0.65, 10000, seed=s)))["alarm"] for s in range(10))
    assert caught == 10
