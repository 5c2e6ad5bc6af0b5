"""app/paired_stats.py on data whose answers are known: the exact sign test against binomial
sums worked by hand, the ideal bootstrap's interval against its law worked by hand, intervals
that exclude 0 and one that does not, the sampled path against the ideal one, and the rules
(no interval from one rollout, a task's interval independent of the others and of row order)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from app import paired_stats as ps


@pytest.mark.parametrize(("n_plus", "n_minus", "p"), [
    (8, 2, 2 * (1 + 10 + 45) / 1024),  # 0.109375
    (1, 9, 2 * (1 + 10) / 1024),  # 0.021484375
    (15, 5, 2 * (1 + 20 + 190 + 1140 + 4845 + 15504) / 2**20),  # 0.0413894...
    (5, 5, 1.0),  # 2·Σ_{k≤5} C(10, k)/1024 > 1: capped
    (0, 6, 2 / 64),
])
def test_sign_test_is_the_exact_binomial_two_sided_p(n_plus, n_minus, p):
    got = ps.sign_test(n_plus, n_minus, ties=3)
    assert (got.n_plus, got.n_minus, got.ties) == (n_plus, n_minus, 3)
    assert got.p == pytest.approx(p, rel=1e-12)


def test_sign_test_without_a_difference_has_no_p_and_is_exact_at_ten_thousand_tasks():
    assert ps.sign_test(0, 0, ties=4).p is None
    big = ps.sign_test(5100, 4900)
    # normal approximation with continuity correction: z = (5100 − 5000 − 0.5)/50
    z = (5100 - 5000 - 0.5) / 50
    assert big.p == pytest.approx(math.erfc(z / math.sqrt(2)), rel=0.02)
    assert ps.sign_test(10_000, 0).p == 2 / 2**10_000 or ps.sign_test(10_000, 0).p == 0.0


def test_ideal_bootstrap_interval_is_read_off_the_exact_law():
    # A = (0, 0, 0, 1): mean(a*) = K/4, K ~ Binomial(4, 1/4); B = (1, 1, 1, 1): diff* = 1 − K/4.
    # P(diff* ≤ 0) = P(K=4) = 0.0039 < 0.025 ≤ P(diff* ≤ 0.25) = 0.0508: the low end is 0.25;
    # P(diff* ≤ 0.75) = 0.6836 < 0.975: the high end is 1.
    (d,), _ = ps.paired_differences(["t"], [np.array([0.0, 0, 0, 1])], [np.ones(4)])
    assert (d.n_a, d.n_b, d.mean_a, d.mean_b, d.diff) == (4, 4, 0.25, 1.0, 0.75)
    assert (d.ci_low, d.ci_high) == (0.25, 1.0)
    assert d.verdict == "improved" and d.note is None


def test_an_interval_excluding_zero_either_way_and_one_that_does_not():
    rng = np.random.default_rng(7)
    low, high = rng.uniform(0.0, 0.3, 20), rng.uniform(0.6, 0.9, 24)  # many values: the sampled path
    passed = np.array([1.0] * 14 + [0.0] * 2)
    failed = np.array([1.0] * 3 + [0.0] * 13)
    coin = np.array([1.0, 0.0] * 8)
    keys = ["up", "down", "flat", "pass-fail-down"]
    diffs, resamples = ps.paired_differences(keys, [low, high, coin, passed], [high, low, coin[::-1], failed])
    assert resamples == ps.RESAMPLES
    up, down, flat, pf = diffs
    assert up.verdict == "improved" and 0 < up.ci_low < up.diff < up.ci_high
    assert down.verdict == "regressed" and down.ci_low < down.diff < down.ci_high < 0
    assert flat.diff == 0.0 and flat.ci_low < 0 < flat.ci_high and flat.verdict == "unclear"
    assert pf.verdict == "regressed" and pf.diff == pytest.approx(3 / 16 - 14 / 16)
    sign = ps.sign_test_of(diffs)
    assert (sign.n_plus, sign.n_minus, sign.ties) == (1, 2, 1)


def test_the_sampled_path_agrees_with_the_ideal_one_on_pass_fail_rewards(monkeypatch):
    a, b = np.array([1.0, 1, 0, 0, 1, 0, 1, 1]), np.array([1.0, 1, 1, 1, 0, 1, 1, 1])
    (ideal,), _ = ps.paired_differences(["t"], [a], [b])
    monkeypatch.setattr(ps, "IDEAL_MAX_POINTS", 0)
    (sampled,), n = ps.paired_differences(["t"], [a], [b], resamples=20_000)
    assert n == 20_000
    # the law lives on multiples of 1/8; interpolated percentiles stay within one step
    assert abs(sampled.ci_low - ideal.ci_low) <= 0.125 and abs(sampled.ci_high - ideal.ci_high) <= 0.125
    assert (ideal.ci_low, ideal.ci_high) == (-0.125, 0.625)


def test_one_rollout_gives_no_interval_and_a_missing_run_no_diff():
    diffs, _ = ps.paired_differences(["one", "only-b"], [np.array([1.0]), np.empty(0)],
                                     [np.array([0.0, 1.0, 1.0]), np.array([0.5, 0.5])])
    one, only_b = diffs
    assert one.diff == pytest.approx(2 / 3 - 1) and one.ci_low is None and one.ci_high is None
    assert one.note == ps.NO_INTERVAL and one.verdict == "unclear"
    assert only_b.diff is None and only_b.mean_b == 0.5 and only_b.note == "not in run A"
    assert ps.sign_test_of(diffs).n_minus == 1


def test_a_tasks_interval_does_not_depend_on_other_tasks_or_row_order():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.4, 0.2, 12), rng.normal(0.5, 0.2, 9)
    (alone,), _ = ps.paired_differences(["t"], [a], [b])
    many, _ = ps.paired_differences(["s", "t", "u"], [rng.random(5), a[::-1], rng.random(7)],
                                    [rng.random(6), rng.permutation(b), rng.random(3)])
    assert many[1] == alone
    (other,), _ = ps.paired_differences(["another key"], [a], [b])
    assert other.diff == alone.diff and other.ci_low != alone.ci_low  # each task its own draws


def test_huge_finite_rewards_keep_a_mean_and_non_finite_ones_are_refused():
    (d,), _ = ps.paired_differences(["t"], [np.full(3, 1e308)], [np.full(3, -1e308)])
    assert d.mean_a == 1e308 and d.mean_b == -1e308  # Σ x/n: no overflow on the way
    assert d.diff is None and d.ci_low is None and d.note == ps.TOO_LARGE and d.verdict == "unclear"
    with pytest.raises(ValueError):
        ps.paired_differences(["t"], [np.array([1.0, math.nan])], [np.array([1.0, 0.0])])
    with pytest.raises(ValueError):
        ps.paired_differences(["t", "u"], [np.ones(2)], [np.ones(2)])


def test_past_the_draw_budget_fewer_replicates_never_under_the_floor():
    assert ps.replicates_for(16 * 2 * 1000) == ps.RESAMPLES
    assert ps.replicates_for(16 * 2 * 4000) == ps.RESAMPLES // 4
    assert ps.replicates_for(10**9) == ps.MIN_RESAMPLES


def test_sign_test_matches_the_binomial_sum_at_every_split():
    for n in (1, 2, 7, 30):
        for k in range(n + 1):
            tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
            assert ps.sign_test(k, n - k).p == min(1.0, 2 * tail / 2**n), (k, n)


def _moments(x: np.ndarray) -> ps.Moments:
    """What the rollups keep of these rewards (ingest/stats.py): n, the exactly rounded mean, Σx², Σx³."""
    from fractions import Fraction

    from ingest.stats import _mean, power_sum

    v = x.tolist()
    return ps.Moments(len(v), _mean(v), Fraction(power_sum(v, 2)), Fraction(power_sum(v, 3)))


@pytest.mark.parametrize("kind", ["pass/fail", "partial credit, skewed", "pass/fail, ideal law"])
def test_the_moments_interval_is_the_bootstraps_from_a_few_hundred_rollouts(kind):
    """Compare reads a large task's moments, not its rewards: the Cornish-Fisher interval agrees
    with the bootstrap on every reward (20,000 replicates, Monte Carlo error ~0.02 SE; the ideal
    law's ends on its lattice of steps 1/n) within 0.08 of the interval's standard error."""
    rng = np.random.default_rng(11)
    if kind == "pass/fail":
        a, b = (rng.random(300) < 0.55).astype(float), (rng.random(420) < 0.63).astype(float)
    elif kind == "partial credit, skewed":  # heavy right tail: skewness ~1.6 per reward
        a, b = np.round(rng.beta(0.5, 3.0, 250), 3), np.round(rng.beta(0.6, 3.0, 350), 3)
    else:
        a, b = (rng.random(150) < 0.4).astype(float), (rng.random(150) < 0.5).astype(float)
    (boot,), _ = ps.paired_differences(["t"], [a], [b], resamples=20_000)
    got = ps.moments_difference(_moments(a), _moments(b))
    se = math.sqrt(a.var() / a.size + b.var() / b.size)
    tolerance = 0.08 * se + (1 / 150 if kind.endswith("ideal law") else 0.0)
    assert got.method == ps.MOMENTS and boot.method == ps.BOOTSTRAP
    assert got.diff == pytest.approx(boot.diff, abs=1e-15) and (got.n_a, got.n_b) == (a.size, b.size)
    assert abs(got.ci_low - boot.ci_low) < tolerance and abs(got.ci_high - boot.ci_high) < tolerance
    assert got.verdict == boot.verdict


def test_the_moments_of_one_value_give_the_difference_itself_and_no_sums_no_interval():
    from fractions import Fraction

    flat = ps.moments_difference(_moments(np.full(500, 0.1)), _moments(np.full(400, 0.3)))
    assert flat.ci_low == flat.ci_high == flat.diff == pytest.approx(0.2) and flat.verdict == "improved"
    same = ps.moments_difference(_moments(np.full(500, 0.7)), _moments(np.full(400, 0.7)))
    assert same.diff == 0 and same.verdict == "unclear"
    one = ps.moments_difference(ps.Moments(1, 0.5, Fraction(1, 4), Fraction(1, 8)), _moments(np.ones(9)))
    assert one.ci_low is None and one.note == ps.NO_INTERVAL
    none = ps.moments_difference(ps.Moments(300, 1e100, None, None), _moments(np.ones(9)))
    assert none.ci_low is None and none.note == ps.TOO_LARGE and none.verdict == "unclear"
