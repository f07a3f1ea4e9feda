"""The tests behind the decisions (runtime.decisions.stats) against published values and exact sums."""

import math

import pytest

from ml_platform_constructs.runtime.decisions import stats


@pytest.mark.parametrize("p,df,x", [(0.05, 1, 3.841459), (0.001, 9, 27.877165), (0.01, 2, 9.210340),
                                    (0.5, 10, 9.341818), (0.999, 30, 11.587951)])
def test_chi_square_quantiles_are_the_tables(p, df, x):
    assert stats.chi2_isf(p, df) == pytest.approx(x, rel=1e-5)
    assert stats.chi2_sf(x, df) == pytest.approx(p, rel=1e-4)


def test_the_homogeneity_statistic_by_hand():
    statistic, df = stats.homogeneity([30, 10, 0], [20, 20, 0])
    # pooled shares 50/80 and 30/80 (the empty bin dropped): expected 25, 15 and 25, 15
    assert df == 1 and statistic == pytest.approx((5 ** 2 / 25 + 5 ** 2 / 15) * 2)


def test_binomial_upper_tail_is_exact():
    for n, p in ((20, 0.92), (200, 0.5)):
        for k in range(n + 1):
            exact = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))
            assert stats.binomial_sf(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_the_paired_statistic_fits_the_nuisance_under_the_null():
    """At the restricted maximum the margin holds and the likelihood's derivative is 0 (checked numerically)."""
    better, worse, n, margin = 30, 45, 1000, 0.005
    delta = -margin
    b = (better + worse) * (1 - delta) - 2 * delta * (n - better)
    q_worse = (b + math.sqrt(b * b + 8 * n * worse * delta * (1 - delta))) / (4 * n)

    def loglik(t):
        return better * math.log(t + delta) + worse * math.log(t) + (n - better - worse) * math.log(1 - 2 * t - delta)
    assert (loglik(q_worse + 1e-7) - loglik(q_worse - 1e-7)) / 2e-7 == pytest.approx(0, abs=1e-3)
    assert stats.paired_noninferiority(better, worse, n, margin) < stats.paired_noninferiority(better, worse, n, 0.02)


def test_the_two_proportion_statistic_grows_with_the_margin_and_the_samples():
    z = stats.two_proportion_noninferiority(920, 1000, 460, 500, 0.005)
    assert z < stats.two_proportion_noninferiority(920, 1000, 460, 500, 0.02)
    assert z < stats.two_proportion_noninferiority(9200, 10000, 4600, 5000, 0.005)
