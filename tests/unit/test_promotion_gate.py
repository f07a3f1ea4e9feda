"""The promotion gate (runtime.decisions.promotion.judge_outcomes): paired non-inferiority on the same held-out examples, its
exact error rate at the margin, its power, the baseline path, and the evidence it reads."""

import json
import math
import random
import warnings

import pytest

from ml_platform_constructs.runtime.decisions import promotion, stats


def binomial_pmf(k, n, p):
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
                    + (n - k) * math.log1p(-p))


def trinomial_pmf(a, b, n, pa, pb):
    m = n - a - b
    return math.exp(math.lgamma(n + 1) - math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(m + 1)
                    + a * math.log(pa) + b * math.log(pb) + m * math.log1p(-pa - pb))


def promotion_probability(n, disagreement, difference, tolerance=0.5, alpha=0.05):
    """Exactly: the chance the paired gate promotes a candidate whose true accuracy differs from the live model's by
    ``difference`` (a share), the models disagreeing on ``disagreement`` of the examples."""
    p_better, p_worse = (disagreement + difference) / 2, (disagreement - difference) / 2
    critical = stats.z_quantile(1 - alpha)
    total = 0.0
    span_a, span_b = (8 * math.sqrt(n * p * (1 - p)) + 2 for p in (p_better, p_worse))
    for a in range(max(0, int(n * p_better - span_a)), min(n, int(n * p_better + span_a)) + 1):
        for b in range(max(0, int(n * p_worse - span_b)), min(n - a, int(n * p_worse + span_b)) + 1):
            if stats.paired_noninferiority(a, b, n, tolerance / 100) > critical:
                total += trinomial_pmf(a, b, n, p_better, p_worse)
    return total


@pytest.mark.parametrize("n", [100, 300, 1000])
@pytest.mark.parametrize("disagreement", [0.02, 0.1, 0.3])
def test_a_candidate_worse_by_the_tolerance_is_promoted_at_most_5_percent_of_the_time(n, disagreement):
    """The error the gate guards against, exactly (not simulated): at the margin itself, the worst case."""
    assert promotion_probability(n, disagreement, -0.005) <= 0.05


def test_worse_candidates_are_promoted_less_and_the_0_4_gate_promoted_them_often():
    assert promotion_probability(500, 0.1, -0.01) < 0.025
    # 0.4.0 compared point estimates with tolerance 0: a model 1 point worse on its own 500 examples won whenever
    # it scored higher by chance
    rng = random.Random(4)
    old = 0
    for _ in range(400):
        live = sum(rng.random() < 0.92 for _ in range(600)) / 600
        candidate = sum(rng.random() < 0.91 for _ in range(500)) / 500
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old += promotion.judge("holdout_accuracy", candidate, live).promote
    assert old / 400 > 0.2


def test_a_candidate_2_points_better_on_2000_examples_is_promoted_at_least_90_percent_of_the_time():
    assert promotion_probability(2000, 0.1, 0.02) >= 0.9
    assert promotion_probability(2000, 0.075, 0.0) == pytest.approx(0.19, abs=0.05)  # DECISIONS.md's figure


def outcomes(values, kind="correct"):
    return promotion.read_outcomes(promotion.write_outcomes(values, kind).splitlines())


def paired(n, accuracy, flip, seed):
    """The live model right ``accuracy`` of the time; the candidate disagrees on ``flip`` of the examples."""
    rng = random.Random(seed)
    live = {f"s{i}": rng.random() < accuracy for i in range(n)}
    candidate = {i: (not v) if rng.random() < flip else v for i, v in live.items()}
    return outcomes(candidate), outcomes(live)


def test_the_judgement_names_its_test_its_bound_and_what_it_guards():
    candidate, live = paired(2000, 0.92, 0.05, seed=1)
    judgement = promotion.judge_outcomes(candidate, live)
    assert judgement.judged and judgement.examples == 2000 and judgement.reference_kind == "live"
    assert judgement.test == "paired score test (Tango)"
    assert judgement.bound < judgement.difference and judgement.alpha == 0.05 and judgement.tolerance == 0.5
    assert judgement.guards.startswith("promoting a candidate truly worse")
    d = judgement.disagreements
    assert judgement.difference == pytest.approx((d["candidate_only_right"] - d["live_only_right"]) / 20)
    assert judgement.ids_sha256 == candidate.digest() == live.digest()


def test_a_refusal_says_what_the_examples_resolve_and_how_many_would_do():
    _, live = paired(150, 0.92, 0.0, seed=2)
    same = outcomes({i: bool(v) for i, v in live.values.items()})  # the live model itself, on 150 examples
    judgement = promotion.judge_outcomes(same, live)
    assert not judgement.promote and judgement.difference == 0  # 150 examples cannot show "within 0.5 points"
    assert "these examples resolve about" in judgement.reason
    assert judgement.examples_needed > 150 and f"about {judgement.examples_needed} paired examples" in judgement.reason
    _, big = paired(2000, 0.92, 0.0, seed=3)
    assert promotion.judge_outcomes(outcomes({i: bool(v) for i, v in big.values.items()}), big).promote


def test_different_examples_are_not_judged_and_the_digests_say_so():
    candidate, live = paired(300, 0.9, 0.05, seed=3)
    other = outcomes({f"t{i}": True for i in range(300)})
    judgement = promotion.judge_outcomes(candidate, other)
    assert (judgement.judged, judgement.promote) == (False, False)
    assert judgement.reason.startswith("not judged: the two models were scored on different examples (300 only the "
                                       "candidate's, 300 only the live model's; ids sha256 ")


def test_too_few_examples_are_not_judged():
    candidate, live = paired(99, 0.9, 0.05, seed=4)
    judgement = promotion.judge_outcomes(candidate, live)
    assert (judgement.judged, judgement.reason) == (False, "not judged: 99 paired examples, needs 100")


def test_without_a_live_model_the_candidate_is_judged_against_the_baseline_and_its_sample():
    rng = random.Random(5)
    candidate = outcomes({f"s{i}": rng.random() < 0.40 for i in range(500)})
    # 0.4.0 let any candidate through when the live model had no recorded score: 0.40 included
    judgement = promotion.judge_outcomes(candidate, baseline=0.92, baseline_examples=1000)
    assert not judgement.promote and judgement.reference_kind == "baseline" and judgement.baseline_examples == 1000
    assert judgement.test == "Farrington-Manning score test against a baseline measured on other examples"
    good = outcomes({f"s{i}": rng.random() < 0.95 for i in range(3000)})
    assert promotion.judge_outcomes(good, baseline=0.92, baseline_examples=5000).promote
    exact = promotion.judge_outcomes(good, baseline=0.92)
    assert exact.promote and exact.test == "exact binomial test against a fixed requirement"


def test_the_baseline_path_keeps_its_error_rate_exactly():
    """Farrington-Manning with its continuity correction: a candidate worse than the baseline by the tolerance is
    promoted at most alpha of the time, summed over both binomials."""
    critical = stats.z_quantile(0.95)
    for n, n0, p0 in ((300, 1000, 0.92), (1000, 150, 0.85)):
        p = p0 - 0.005
        total = 0.0
        for x1 in range(n + 1):
            w1 = binomial_pmf(x1, n, p)
            if w1 < 1e-12:
                continue
            for x0 in range(n0 + 1):
                w0 = binomial_pmf(x0, n0, p0)
                if w0 > 1e-12 and stats.two_proportion_noninferiority(x1, n, x0, n0, 0.005) > critical:
                    total += w1 * w0
        assert total <= 0.05, (n, n0, p0, total)


def test_regressors_are_judged_on_paired_errors():
    rng = random.Random(6)
    live = {f"s{i}": abs(rng.gauss(0, 1)) for i in range(1000)}
    better = {i: e * 0.9 + abs(rng.gauss(0, 0.05)) for i, e in live.items()}
    worse = {i: e * 1.1 + abs(rng.gauss(0, 0.05)) for i, e in live.items()}
    assert promotion.judge_outcomes(outcomes(better, "error"), outcomes(live, "error"), tolerance=1).promote
    refused = promotion.judge_outcomes(outcomes(worse, "error"), outcomes(live, "error"), tolerance=1)
    assert not refused.promote and refused.metric == "mae" and refused.bound < -1


@pytest.mark.parametrize("line,message", [
    ("not json", "line 1: not JSON"),
    ('{"correct": true}', 'line 1: no "id"'),
    ('{"id": "a", "score": 1}', 'line 1: neither "correct"'),
    ('{"id": "a", "correct": 1}', "line 1: \"correct\" is 1, not true or false"),
    ('{"id": "a", "error": -1}', 'line 1: "error" is -1, not a finite number of at least 0'),
])
def test_an_outcomes_file_that_cannot_be_evidence_is_refused_with_the_line(line, message):
    with pytest.raises(promotion.EvidenceError, match=message):
        promotion.read_outcomes([line], source="outcomes")


def test_an_id_twice_or_two_kinds_are_refused():
    with pytest.raises(promotion.EvidenceError, match="line 2: id 'a' again"):
        promotion.read_outcomes(['{"id": "a", "correct": true}', '{"id": "a", "correct": false}'])
    with pytest.raises(promotion.EvidenceError, match='line 2: "error" after "correct" lines'):
        promotion.read_outcomes(['{"id": "a", "correct": true}', '{"id": "b", "error": 1.0}'])


def test_split_settings_must_match_for_a_paired_judgement():
    same = {"salt": "", "fraction": 0.05, "ids_sha256": "a" * 64}
    assert promotion.split_problem(same, dict(same)) is None
    problem = promotion.split_problem(same, {**same, "salt": "v2"})
    assert problem.startswith("the held-out splits differ in salt ('' against 'v2'") and "same salt and fraction" in problem


def test_the_old_gate_still_works_and_warns():
    with pytest.warns(DeprecationWarning, match="judge_outcomes"):
        assert promotion.judge("holdout_accuracy", 0.9, 0.8).promote
    assert json.loads(json.dumps(promotion.judge_outcomes(*paired(200, 0.9, 0.05, seed=7)).to_json()))["judged"]


def _abs_t3(rng):
    return abs(rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3))


def _errors(values):
    return promotion.Outcomes("error", {f"s{i}": float(v) for i, v in enumerate(values)})


def test_a_regressor_slightly_better_often_and_much_worse_rarely_is_promoted_at_most_5_percent_of_the_time():
    # Worse on 5% of examples by a lognormal amount, a little better on the rest, its MAE exactly 1.005 x the live
    # model's: the differences are right-skewed and a plain z on their mean promoted 15% of such candidates at 300
    # examples; the skew-corrected test holds its level.
    rng, trials, n = random.Random(11), 500, 300
    live_mae = 0.1 + 2 * math.sqrt(3) / math.pi
    better_by = (0.05 * 0.5 - 0.005 * live_mae) / 0.95
    promoted = 0
    for _ in range(trials):
        live = [0.1 + _abs_t3(rng) for _ in range(n)]
        candidate = [e + 0.5 * rng.lognormvariate(0, 1) / math.exp(0.5) if rng.random() < 0.05 else e - better_by
                     for e in live]
        promoted += promotion.judge_outcomes(_errors(candidate), _errors(live)).promote
    assert promoted / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials), promoted


def test_against_a_baseline_skewed_errors_are_corrected_for_and_the_rate_holds():
    # Lognormal errors (sigma 1, skewness 6): the sample mean comes out low more often than high; a plain z promoted
    # 7.8% of candidates worse by the tolerance at 1000 examples, the skew-corrected test at most 5%.
    rng, trials = random.Random(12), 1000
    promoted = 0
    for _ in range(trials):
        errors = [rng.lognormvariate(0, 1.0) for _ in range(300)]
        promoted += promotion.judge_outcomes(_errors(errors), baseline=math.exp(0.5) / 1.005).promote
    assert promoted / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials), promoted


def test_an_mae_carried_by_a_few_examples_is_not_judged_against_a_baseline():
    rng = random.Random(13)
    errors = [rng.lognormvariate(0, 2.0) for _ in range(3000)]
    judgement = promotion.judge_outcomes(_errors(errors), baseline=math.exp(2.0) * 2)
    assert not judgement.judged and not judgement.promote
    assert "errors carry" in judgement.reason and "judge against the live model on the same examples" in judgement.reason


def test_a_live_model_with_no_error_is_not_judged_rather_than_divided_by():
    zero = _errors([0.0] * 400)
    judgement = promotion.judge_outcomes(_errors([0.0] * 399 + [1.0]), zero)
    assert not judgement.judged and "the live model's MAE is 0" in judgement.reason


def test_a_bound_beyond_the_search_says_so_rather_than_printing_the_end_of_the_search():
    live = _errors([1.0 + (i % 7) / 10 for i in range(400)])
    candidate = _errors([30.0 + (i % 5) for i in range(400)])  # an MAE 20x the live model's: past the 1000% searched
    judgement = promotion.judge_outcomes(candidate, live)
    assert not judgement.promote and judgement.bound is None and "beyond the range searched" in judgement.reason
    assert "not shown to be within 0.5% of the live model's MAE:" in judgement.reason


# --- the winner's curse: the baseline a promotion sets -----------------------------------------------------------

def test_a_difference_far_above_the_threshold_keeps_its_value_and_one_that_barely_passed_is_pulled_back():
    from ml_platform_constructs.runtime.decisions.promotion import selected_median
    assert selected_median(0.05, 0.0, 0.005) == pytest.approx(0.05, abs=1e-6)  # 10 SE above: no selection to undo
    barely = selected_median(0.001, 0.0, 0.005)
    assert barely < 0.0  # it passed because it drew well: what it would draw again is lower than the threshold
    assert selected_median(0.001, 0.0, 0.005) < selected_median(0.004, 0.0, 0.005) < 0.004  # monotone, pulled back
    assert selected_median(-0.01, 0.0, 0.005) == -0.01  # not selected: nothing to correct


def test_the_selection_adjusted_score_of_promoted_equal_candidates_is_unbiased():
    """An equally good candidate promoted on 2,000 paired examples (7.5% disagreement) scores about 0.5 points above
    its truth (0.7 made that the quality baseline); the selection-adjusted score does not."""
    rng = random.Random(7)
    raw, adjusted = [], []
    for _ in range(600):
        n, both_right = 2000, (0.92 - 0.0375) / (1 - 0.075)
        live, candidate = {}, {}
        for i in range(n):
            u = rng.random()
            c = 1.0 if u < 0.0375 else 0.0 if u < 0.075 else (1.0 if rng.random() < both_right else 0.0)
            l_ = (1.0 - c) if u < 0.075 else c
            candidate[f"s{i}"], live[f"s{i}"] = c, l_
        judgement = promotion.judge_outcomes(promotion.Outcomes("correct", candidate),
                                             promotion.Outcomes("correct", live))
        if judgement.promote:
            raw.append(judgement.candidate - 0.92)
            adjusted.append(judgement.selection_adjusted - 0.92)
    assert len(raw) > 60
    bias, corrected = sum(raw) / len(raw), sum(adjusted) / len(adjusted)
    assert bias > 0.003  # the winner's curse, in shares
    # median-unbiased, not mean-unbiased: within about 2 Monte Carlo errors (0.06 points) of 0, slightly low if at all
    assert abs(corrected) < 0.0025 and abs(corrected) < bias / 2


def test_a_refused_candidate_has_no_selection_adjusted_score():
    refused = promotion.judge_outcomes(promotion.Outcomes("correct", {f"s{i}": float(i % 5 != 0) for i in range(500)}),
                                       promotion.Outcomes("correct", {f"s{i}": float(i % 20 != 0) for i in range(500)}))
    assert not refused.promote and refused.selection_adjusted is None


# --- the held-out ledger -----------------------------------------------------------------------------------------

def outcomes_of(right):
    return promotion.Outcomes("correct", {f"s{i}": float(r) for i, r in enumerate(right)})


def test_a_set_is_fresh_only_when_it_shares_few_examples_with_the_ledgers():
    ledger = promotion.Ledger()
    assert ledger.is_fresh([f"s{i}" for i in range(100)])
    ledger.start([f"s{i}" for i in range(100)], "2026-12-01T00:00:00+00:00")
    assert not ledger.is_fresh([f"s{i}" for i in range(1000)])  # a bigger set with the old one inside: another look
    assert not ledger.is_fresh([f"s{i}" for i in range(50)])
    assert ledger.is_fresh([f"t{i}" for i in range(100)])  # new examples
    ledger.record({"run": "on the superset"}, [f"s{i}" for i in range(1000)])
    assert not ledger.is_fresh([f"s{i}" for i in range(100, 1000)])  # judged already: kept, not fresh
    assert not ledger.is_fresh([f"s{i}" for i in range(100_000)])  # ten times bigger, the old inside: another look
    ledger.state["uses"].clear()
    assert ledger.level(0.05, 5) == 0.01 and not ledger.spent(5)
    for use in range(5):
        ledger.record({"run": f"r{use}"})
    assert ledger.spent(5) and promotion.Ledger.parse(ledger.to_text()).state == ledger.state


def test_a_candidate_within_the_tolerance_of_the_live_model_but_not_of_the_chains_first_is_refused():
    """A chain of small losses: the live model is 0.4 points under the anchor, the candidate 0.4 under the live one."""
    n = 10_000
    anchor = [i < 9200 for i in range(n)]
    live = [i < 9160 for i in range(n)]
    candidate = [i < 9120 for i in range(n)]
    ledger = promotion.Ledger()
    ledger.start([f"s{i}" for i in range(n)], "2026-12-01T00:00:00+00:00", ("anchor-run", outcomes_of(anchor)))
    assert promotion.judge_chain(outcomes_of(candidate), ledger, "anchor-run", max_chain_drop=0.5, alpha=0.01) is None
    chain = promotion.judge_chain(outcomes_of(candidate), ledger, "live-run", max_chain_drop=0.5, alpha=0.01)
    assert not chain.promote and chain.difference == pytest.approx(-0.8)
    fine = promotion.judge_chain(outcomes_of(anchor), ledger, "live-run", max_chain_drop=0.5, alpha=0.01)
    assert fine.promote  # back where the chain started
    other = promotion.judge_chain(promotion.Outcomes("correct", {"x": 1.0}), ledger, "live-run", max_chain_drop=0.5,
                                  alpha=0.01)
    assert not other.judged and "refresh the held-out ledger" in other.reason


def test_a_spent_set_stays_spent_after_another_set_was_judged():
    ledger = promotion.Ledger()
    a, b = [f"a{i}" for i in range(500)], [f"b{i}" for i in range(500)]
    ledger.start(a, "t0")
    for use in range(5):
        ledger.record({"run": f"r{use}"}, a)
    assert ledger.spent(5) and ledger.is_fresh(b)
    ledger.start(b, "t1")  # a fresh set: its own budget
    ledger.record({"run": "on b"}, b)
    assert not ledger.is_fresh(a)  # alternating splits does not reset A's budget
