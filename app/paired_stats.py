"""Paired comparison of two runs task by task: a bootstrap interval for each task's difference of
mean reward, and the sign test across tasks. Pure numpy and the standard library: no database,
no web (app/queries/paired.py reads the rewards, app/views/paired.py builds the page).

Per task t, with A's rewards a_1..a_m and B's rewards b_1..b_n (its rollouts in each run):

    diff_t = mean(b) − mean(a)

The interval is the percentile interval of the stratified (two-sample) bootstrap, Efron &
Tibshirani, *An Introduction to the Bootstrap* (Chapman & Hall, 1993), §8.3 (two-sample
problem) and §13.3 (percentile interval): a replicate draws m rewards from a with replacement
and, independently, n from b, and takes diff* = mean(b*) − mean(a*); the interval is the 2.5th
and 97.5th percentiles of diff* (95 %). The runs are paired by task (each task a stratum,
compared with itself); within a task rollouts are not paired one to one, since the runs rarely
have the same number (a rollout's place in its group means nothing across runs), so each run's
rollouts of the task are resampled on their own, in their own count. A task with fewer than
two rollouts in either run has no interval (`NO_INTERVAL`: one reward has no spread), nor one
whose difference leaves the floats (rewards near ±1.8e308: `TOO_LARGE`). Means are Σ (x / n),
exactly rounded (`math.fsum`): huge finite rewards keep a finite mean, and equal rewards in any
order give equal means (a tie for the sign test, not ±1e-17).

Verdict: `improved` when the whole interval is above 0, `regressed` when below, else `unclear`.

Two paths, both vectorised:
- *Ideal bootstrap* (B → ∞, Efron & Tibshirani §6.3) when both runs' rewards of the task take
  at most two values (pass/fail, the common case in RL): mean(a*) is lo + (hi − lo)·K/m with
  K ~ Binomial(m, p̂), so the law of diff* is exact on (m+1)(n+1) points and its percentiles
  are read off it: no randomness, and the same few laws recur (memoised per call).
- *Sampled* otherwise: `RESAMPLES` replicates (2,000; Efron & Tibshirani advise ≥ 1,000 for
  percentile intervals), each task's replicates drawn as one index array (`CHUNK_DRAWS` draws
  at most at once); past `DRAW_BUDGET` draws per comparison the count falls (never under
  `MIN_RESAMPLES`), and the page says how many were drawn. Each task has its own generator,
  numpy's PCG64 seeded with `SEED` and the CRC-32 of the task key (`task_rng`), over its
  rewards sorted: the same rewards give the same interval on every call, whatever else is
  compared (the side-by-side page of one task repeats the compare page's interval).
Percentiles of the sampled path are numpy's linear interpolation; the ideal path's are the
inverse of the exact CDF (the smallest d with F(d) ≥ q).

*From the rollups' moments* (`moments_interval`), for a task too large to read every reward of
(app/views/paired.py decides which: compare at 200,000 rollouts a run read 400,000 rewards and
drew 200 million, 11-23 s): the same bootstrap law, approximated from each run's n, mean and
power sums Σx², Σx³ (kept at ingest, app/store/rollups.py). mean(a*) over m draws from a has
mean μ_a, variance m2_a/m and third cumulant m3_a/m² (m2, m3 the plug-in central moments), so
diff* has mean diff, variance V = m2_a/m + m2_b/n and third cumulant K3 = m3_b/n² − m3_a/m²;
its quantiles are read off the first-order Cornish-Fisher expansion (Cornish & Fisher 1937;
Hall, *The Bootstrap and Edgeworth Expansion*, Springer 1992, §2.5):
q(p) = diff + √V·(z_p + γ(z_p² − 1)/6), γ = K3 / V^{3/2} (kept within ±`MAX_SKEW` so that
the interval's ends stay in order). The error against the ideal bootstrap shrinks as 1/n (the
sampled path's Monte Carlo error at 2,000 replicates is larger from a few hundred rollouts on;
tests/analytics/test_paired_stats.py measures both). Rewards that all equal one value within
the rounding of the sums (m2 ≤ `FLAT` · mean of x²) have m2 = m3 = 0: the interval is diff itself,
as the ideal path gives.

Sign test across tasks (Dixon & Mood, "The statistical sign test", JASA 41 (1946) 557-566;
Conover, *Practical Nonparametric Statistics*, 3rd ed., 1999, §3.4): n+ tasks with diff > 0,
n− with diff < 0 (ties and tasks without both means left out); under "no difference" n+ ~
Binomial(n+ + n−, ½), and the exact two-sided p = min(1, 2 · Σ_{k ≤ min(n+, n−)} C(N, k) / 2^N),
computed in exact integers.
"""
from __future__ import annotations

import math
import sys
import zlib
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from statistics import NormalDist

import numpy as np

RESAMPLES = 2_000  # replicates per sampled task (Efron & Tibshirani: ≥ 1,000 for percentile intervals)
MIN_RESAMPLES = 500  # never fewer, however many rollouts
DRAW_BUDGET = 64_000_000  # draws per comparison: 1,000 tasks × 16 rollouts × 2 runs × 2,000 replicates
IDEAL_MAX_POINTS = 40_000  # exact law of a pass/fail task's difference up to (m+1)(n+1) points
LEVEL = 0.95
SEED = 20_240_924  # fixed: the same rewards give the same intervals
CHUNK_DRAWS = 4_000_000  # draws held at once on the sampled path (~64 MB of indices and values)
NO_INTERVAL = "fewer than 2 rollouts in a run: no interval"
TOO_LARGE = "rewards too large for a finite difference: no interval"
VERDICTS = ("regressed", "improved", "unclear")
MAX_SKEW = 1.5  # |γ| of the Cornish-Fisher expansion: 1 + 2·(γ/6)·z > 0 on |z| ≤ 1.96, so q(p) rises with p
FLAT = 8 * sys.float_info.epsilon  # a variance this small against the mean square is rounding: 0
_FLAT = Fraction(FLAT)
BOOTSTRAP, MOMENTS = "bootstrap", "moments"  # `TaskDiff.method`: from every reward, or from the rollups


@dataclass(frozen=True)
class TaskDiff:
    """One task: rollouts scored in each run, their mean rewards, diff = mean_b − mean_a, the
    95 % bootstrap interval (None with `note` when there is none) and the verdict."""

    n_a: int
    n_b: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str | None
    note: str | None = None
    method: str | None = BOOTSTRAP  # BOOTSTRAP (every reward), MOMENTS (the rollups), None: not compared


@dataclass(frozen=True)
class SignTest:
    """Tasks better in B (`n_plus`), worse (`n_minus`), equal (`ties`), exact two-sided `p`
    (None when no task differs)."""

    n_plus: int
    n_minus: int
    ties: int
    p: float | None


def sign_test(n_plus: int, n_minus: int, ties: int = 0) -> SignTest:
    """The exact two-sided sign test of n+ against n− (ties dropped); p in exact integers, so
    it is right at any number of tasks (10,000 tasks: a sum of 10,000-bit integers, milliseconds)."""
    n = n_plus + n_minus
    if n == 0:
        return SignTest(n_plus, n_minus, ties, None)
    k = min(n_plus, n_minus)
    tail = term = 1  # C(n, 0); then C(n, i+1) = C(n, i)·(n − i)/(i + 1), exact: no C(n, i) from scratch
    for i in range(k):
        term = term * (n - i) // (i + 1)
        tail += term
    return SignTest(n_plus, n_minus, ties, min(1.0, 2 * tail / 2**n))


def verdict(ci_low: float | None, ci_high: float | None) -> str:
    """`improved` when the interval lies above 0, `regressed` below, `unclear` otherwise."""
    if ci_low is not None and ci_low > 0:
        return "improved"
    if ci_high is not None and ci_high < 0:
        return "regressed"
    return "unclear"


def mean(x: np.ndarray | None) -> float | None:
    """Σ x/n, exactly rounded (`math.fsum`): huge finite rewards keep a finite mean. None for no
    rewards (None or empty)."""
    return math.fsum((x / x.size).tolist()) if x is not None and x.size else None


def _two_valued(x: np.ndarray) -> tuple[float, float, int] | None:
    """(lo, hi, count of hi) when `x` takes at most two values, else None."""
    lo, hi = float(x.min()), float(x.max())
    c = int(np.count_nonzero(x == hi))
    return (lo, hi, c) if c + int(np.count_nonzero(x == lo)) == x.size else None


def _mean_law(n: int, lo: float, hi: float, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and probabilities of the mean of n draws with replacement from n rewards, c of
    them `hi` and the rest `lo`: lo + (hi − lo)·K/n with K ~ Binomial(n, c/n)."""
    k = np.arange(n + 1)
    if c in (0, n):
        return np.array([hi if c else lo]), np.array([1.0])
    p = c / n
    logpmf = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k]) \
        + k * math.log(p) + (n - k) * math.log1p(-p)
    return lo * (1 - k / n) + hi * (k / n), np.exp(logpmf)


def _ideal_interval(a: tuple, b: tuple, level: float) -> tuple[float, float]:
    """The ideal bootstrap's percentile interval (B → ∞) of mean(b*) − mean(a*), `a` and `b`
    as (n, lo, hi, count of hi): the exact law of the difference, inverted at (1 ± level)/2."""
    xa, pa = _mean_law(*a)
    xb, pb = _mean_law(*b)
    d = (xb[None, :] - xa[:, None]).ravel()
    w = (pa[:, None] * pb[None, :]).ravel()
    order = np.argsort(d, kind="stable")
    d, cdf = d[order], np.cumsum(w[order])
    cdf /= cdf[-1]
    tail = (1 - level) / 2
    lo = d[min(int(np.searchsorted(cdf, tail - 1e-12)), d.size - 1)]
    hi = d[min(int(np.searchsorted(cdf, 1 - tail - 1e-12)), d.size - 1)]
    return float(lo), float(hi)


def _replicates(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """`resamples` bootstrap replicates of the mean of `x` (≥ 1 reward): one (replicates × n)
    index array per chunk of ≤ `CHUNK_DRAWS` draws."""
    out = np.empty(resamples)
    scaled = x / x.size  # Σ x/n, not Σ x / n: a mean of huge finite rewards stays finite
    step = max(1, CHUNK_DRAWS // x.size)
    for c in range(0, resamples, step):
        r = min(step, resamples - c)
        out[c:c + r] = scaled[rng.integers(0, x.size, size=(r, x.size))].sum(axis=1)
    return out


def task_rng(key: str, seed: int = SEED) -> np.random.Generator:
    """The task's own generator (PCG64 seeded with `seed` and the CRC-32 of its key): a task's
    interval is the same whichever other tasks, or runs, it is compared with."""
    return np.random.default_rng([seed, zlib.crc32(key.encode("utf-8", "surrogatepass"))])


def replicates_for(rollouts: int) -> int:
    """Replicates of the sampled path for this many rollouts (both runs, sampled tasks only):
    `RESAMPLES`, fewer past `DRAW_BUDGET` draws, never under `MIN_RESAMPLES`."""
    return max(MIN_RESAMPLES, min(RESAMPLES, DRAW_BUDGET // max(rollouts, 1)))


def paired_differences(keys: list[str], a: list[np.ndarray], b: list[np.ndarray], *,
                       resamples: int | None = None, seed: int = SEED,
                       level: float = LEVEL) -> tuple[list[TaskDiff], int]:
    """Per task i (key `keys[i]`), the difference of mean reward B − A and its bootstrap
    interval, from A's rewards `a[i]` and B's `b[i]` (1-D float arrays in any order, possibly
    empty: a task one run lacks has no diff); and the replicates drawn per sampled task
    (`resamples`, else `replicates_for`). Raises ValueError on non-finite rewards (the caller
    leaves them out) or lists of different lengths."""
    if not len(keys) == len(a) == len(b):
        raise ValueError("keys, a and b must list the same tasks")
    a = [np.sort(x) for x in a]  # the draws must not depend on the order rows came back in
    b = [np.sort(x) for x in b]
    for x in (*a, *b):
        if x.size and not np.isfinite(x).all():
            raise ValueError("rewards must be finite")
    ci: dict[int, tuple[float, float]] = {}
    ideal: dict[tuple, tuple[float, float]] = {}  # pass/fail tasks repeat the same few laws
    sampled = []
    for i in range(len(a)):
        if a[i].size < 2 or b[i].size < 2:
            continue
        ta, tb = _two_valued(a[i]), _two_valued(b[i])
        if ta and tb and (a[i].size + 1) * (b[i].size + 1) <= IDEAL_MAX_POINTS:
            key = ((a[i].size, *ta), (b[i].size, *tb))
            if key not in ideal:
                with np.errstate(over="ignore", invalid="ignore"):  # ±inf: TOO_LARGE below
                    ideal[key] = _ideal_interval(*key, level)
            ci[i] = ideal[key]
        else:
            sampled.append(i)
    n_rep = resamples or replicates_for(sum(a[i].size + b[i].size for i in sampled))
    for i in sampled:
        rng = task_rng(keys[i], seed)
        with np.errstate(over="ignore", invalid="ignore"):  # ±inf: TOO_LARGE below
            reps = _replicates(b[i], rng, n_rep) - _replicates(a[i], rng, n_rep)
            lo, hi = np.quantile(reps, [(1 - level) / 2, 1 - (1 - level) / 2])
        ci[i] = (float(lo), float(hi))
    out = []
    for i in range(len(a)):
        ma, mb = mean(a[i]), mean(b[i])
        diff = mb - ma if ma is not None and mb is not None else None
        lo, hi = ci.get(i, (None, None))
        note = None
        if diff is None:
            note = "not in run A" if ma is None else "not in run B"
        elif i not in ci:
            note = NO_INTERVAL
        elif not math.isfinite(diff) or not (math.isfinite(lo) and math.isfinite(hi)):
            diff = diff if math.isfinite(diff) else None
            lo = hi = None
            note = TOO_LARGE
        out.append(TaskDiff(int(a[i].size), int(b[i].size), ma, mb, diff, lo, hi, verdict(lo, hi), note))
    return out, n_rep


@dataclass(frozen=True)
class Moments:
    """One run's scored rewards of a task, summarised: `n` rewards, their `mean` (the rollups'
    exactly rounded mean) and exact power sums `sum_sq` = Σx², `sum_cube` = Σx³ (None when the
    rollups have none: a power beyond the floats)."""

    n: int
    mean: float
    sum_sq: Fraction | None
    sum_cube: Fraction | None

    @cached_property
    def central(self) -> tuple[float, float] | None:
        """(m2, m3): the plug-in variance Σ(x − mean)²/n and third central moment, computed
        exactly from the sums and rounded once; (0, 0) for rewards that are one value within the
        sums' rounding (`FLAT`); None without sums or with a mean beyond the floats. In integers
        (the sums' numerators and denominators; Python's int / int is correctly rounded): the
        same figures as with Fraction objects, ten times faster (compare does 1,000 tasks a run)."""
        if self.sum_sq is None or self.sum_cube is None or self.n <= 0 or not math.isfinite(self.mean):
            return None
        n = self.n
        a, b = float(self.mean).as_integer_ratio()  # mean = a/b
        p2, q2 = self.sum_sq.numerator, self.sum_sq.denominator
        p3, q3 = self.sum_cube.numerator, self.sum_cube.denominator
        # m2 = Σx²/n − mean² = num2 / (n·q2·b²)
        num2 = p2 * b * b - n * q2 * a * a
        # flat: m2 ≤ FLAT · Σx²/n, both sides times n·q2·b² > 0
        if num2 * _FLAT.denominator <= _FLAT.numerator * p2 * b * b:
            return 0.0, 0.0
        # m3 = Σx³/n − 3·mean·Σx²/n + 2·mean³ = num3 / (n·q3·q2·b³)
        b3 = b * b * b
        num3 = p3 * q2 * b3 - 3 * a * p2 * q3 * b * b + 2 * a * a * a * n * q3 * q2
        try:
            return num2 / (n * q2 * b * b), num3 / (n * q3 * q2 * b3)
        except OverflowError:
            return None


def moments_interval(a: Moments, b: Moments, level: float = LEVEL) -> tuple[float, float] | None:
    """The bootstrap's percentile interval of mean(b*) − mean(a*) at `level`, from the moments
    of each run's rewards (Cornish-Fisher, see the module): (low, high), or None when a run
    has no sums or the figures leave the floats."""
    ca, cb = a.central, b.central
    if ca is None or cb is None:
        return None
    diff = b.mean - a.mean
    with np.errstate(over="ignore", invalid="ignore"):
        var = ca[0] / a.n + cb[0] / b.n
        if not (math.isfinite(diff) and math.isfinite(var)):
            return None
        if var == 0:
            return diff, diff
        k3 = cb[1] / b.n ** 2 - ca[1] / a.n ** 2
        gamma = max(-MAX_SKEW, min(MAX_SKEW, k3 / var ** 1.5)) if math.isfinite(k3) else 0.0
        z = NormalDist().inv_cdf(1 - (1 - level) / 2)
        sd = math.sqrt(var)
        lo = diff + sd * (-z + gamma * (z * z - 1) / 6)
        hi = diff + sd * (z + gamma * (z * z - 1) / 6)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def moments_difference(a: Moments, b: Moments, level: float = LEVEL) -> TaskDiff:
    """One task compared from its moments: diff = mean_b − mean_a, the interval of
    `moments_interval` (method MOMENTS), NO_INTERVAL for fewer than 2 rewards in a run,
    TOO_LARGE when the figures leave the floats."""
    diff = b.mean - a.mean
    if a.n < 2 or b.n < 2:
        return TaskDiff(a.n, b.n, a.mean, b.mean, diff if math.isfinite(diff) else None, None, None,
                        verdict(None, None), NO_INTERVAL, MOMENTS)
    ci = moments_interval(a, b, level)
    if ci is None or not math.isfinite(diff):
        return TaskDiff(a.n, b.n, a.mean, b.mean, diff if math.isfinite(diff) else None, None, None,
                        verdict(None, None), TOO_LARGE, MOMENTS)
    return TaskDiff(a.n, b.n, a.mean, b.mean, diff, ci[0], ci[1], verdict(*ci), None, MOMENTS)


def sign_test_of(diffs: list[TaskDiff]) -> SignTest:
    """The sign test over the tasks with a diff (> 0: B better)."""
    d = [t.diff for t in diffs if t.diff is not None]
    return sign_test(sum(x > 0 for x in d), sum(x < 0 for x in d), sum(x == 0 for x in d))
