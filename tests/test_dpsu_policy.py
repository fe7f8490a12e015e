"""Policy Gaussian DPSU (Gopi, Gulhane, Kulkarni, Shen, Shokouhi & Yekhanin 2020, §5): the update
rule, its non-expansiveness, l2-sensitivity 1, the SQL path against the pure-numpy update, the
data-independent visiting order, the privacy claim on neighbouring datasets (with a power check
against a deliberately broken update), DPNE levels with the policy, and parameter validation.

Privacy argument under test (docs/dpne.md, "Policy Gaussian"): in ``y = cap - H`` coordinates one
user's update is the proximal map of ``||y_+||_2`` on its items, hence non-expansive; adding a user
changes the state at its turn by its own update (norm <= 1) and every later update is
non-expansive, so ||H_D' - H_D||_2 <= 1. Items held only by the added user get <= 1/sqrt(t) each,
so the weighted-Gaussian threshold rho still bounds their release probability by delta_0.

Statistical checks use Clopper-Pearson bounds; each check's false-failure rate is <= 1e-4.
Non-private randomness (datasets, orders) comes from seeded numpy generators."""

from __future__ import annotations

import functools
import itertools
import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
from conftest import sentences_warehouse
from scipy import stats

from dpngram.core.accounting import dpsu_threshold, gaussian_sigma
from dpngram.core.budget import Budget
from dpngram.core.errors import ConfigError
from dpngram.core.noise import simulation_rng
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import dpne, dpne_domain, dpsu, dpsu_policy
from dpngram.mechanisms.dpsu_policy import (
    policy_gaussian_update,
    policy_gaussian_weights,
    policy_histogram_from_stream,
)

SCHEMA = "run_policy_test"
FALSE_FAILURE = 1e-4
RUNS = 20_000  # thresholding draws per dataset (vectorised: the histogram is built once)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Clopper-Pearson interval (as in tests/test_dpne_privacy.py)."""
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(stats.beta.isf(alpha / 2, successes + 1, trials - successes))
    return lo, hi


def warehouse(rows: list[tuple[str, list[str | None]]]) -> Warehouse:
    """In-memory warehouse with ``sentences`` and the DPSU vocabulary source ``src``."""
    wh = sentences_warehouse(SCHEMA, rows)
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    return wh


class PolicyRun:
    """One ``dpsu_histogram`` call with the policy; the private working tables (each user's kept
    items with its visiting order, dense item ids) are copied just before ``dpsu_histogram`` drops them,
    so the test can replay the exact users and order without re-implementing the SQL."""

    def __init__(
        self,
        wh: Warehouse,
        *,
        cap: float,
        max_contribution: int,
        salt: int,
        order_salt: int,
        batch_rows: int | None = None,
    ) -> None:
        self.pairs: list[tuple[int, str, str, int]] = []
        self.iids: dict[str, int] = {}
        original_drop, original_fetch = wh.drop, wh.fetch_batches

        def snapshot_then_drop(schema: str, *names: str) -> None:
            for name in names:
                cols = (
                    [r[0] for r in wh.con.sql(f"DESCRIBE {schema}.{name}").fetchall()]
                    if wh.object_type(schema, name)
                    else []
                )
                if "user_order" in cols:
                    self.pairs = wh.con.sql(
                        f"SELECT user_order, user_id, unnest(kept) AS item, "
                        f"generate_subscripts(kept, 1) AS item_rank FROM {schema}.{name}"
                    ).fetchall()
            original_drop(schema, *names)

        def small_batches(sql, params=None, batch_rows_=1 << 20):
            return original_fetch(sql, params, batch_rows or batch_rows_)

        wh.drop = snapshot_then_drop
        wh.fetch_batches = small_batches
        try:
            dpsu.dpsu_histogram(
                wh,
                SCHEMA,
                "src",
                "hist",
                max_contribution=max_contribution,
                salt=salt,
                cap=cap,
                order_salt=order_salt,
            )
        finally:
            del wh.drop, wh.fetch_batches  # back to the class methods
        assert self.pairs, "the policy's working table was not seen before being dropped"
        # dense ids: positions in the sorted support (sql/dpsu/policy_support.sql)
        self.iids = {item: i for i, item in enumerate(sorted({item for _, _, item, _ in self.pairs}))}
        self.histogram = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.hist").fetchall())

    def order(self) -> list[str]:
        """User ids in visiting order."""
        return list(dict.fromkeys(u for _, u, _, _ in sorted(self.pairs, key=lambda r: (r[0], r[1], r[3]))))

    def kept(self) -> dict[str, list[str]]:
        """Each user's kept items in their kept (item_rank) order."""
        out: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for _, user, item, rank in self.pairs:
            out[user].append((rank, item))
        return {u: [i for _, i in sorted(v)] for u, v in out.items()}

    def user_order(self) -> dict[str, int]:
        return {u: o for o, u, _, _ in self.pairs}


def weighted_histogram(wh: Warehouse, max_contribution: int, salt: int) -> dict[str, float]:
    dpsu.dpsu_histogram(wh, SCHEMA, "src", "whist", max_contribution=max_contribution, salt=salt)
    return dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.whist").fetchall())


def random_rows(seed: int, users: int, vocab: int, prefix: str = "user") -> list[tuple[str, list[str]]]:
    """Users with 1-3 sentences of 1-6 tokens from a skewed vocabulary (popular tokens saturate)."""
    rng = simulation_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    rows = []
    for u in range(users):
        for _ in range(int(rng.integers(1, 4))):
            size = int(rng.integers(1, 7))
            rows.append((f"{prefix}{u}", [f"tok{j}" for j in rng.choice(vocab, size=size, p=p)]))
    return rows


def _numpy_update_only(monkeypatch) -> None:
    """Make the SQL path use the numpy update (which a test replaces), never the compiled one."""
    numpy_only = functools.partial(dpsu_policy.policy_histogram_from_stream, compiled_after=10**12)
    monkeypatch.setattr(dpsu_policy, "policy_histogram_from_stream", numpy_only)


def broken_update(weights: np.ndarray, items: np.ndarray, cap: float) -> None:
    """A deliberately non-private variant: a user holding a single item adds its whole gap
    (no projection onto the unit ball); users with several items are projected as usual."""
    gap = np.maximum(cap - weights[items], 0.0)
    norm = float(np.sqrt(gap @ gap))
    if norm > 1.0 and items.size > 1:
        gap /= norm
    weights[items] += gap


def release_counts(weights: dict[str, float], watched: set[str], sigma: float, rho: float, noise) -> int:
    """Runs (of RUNS) in which any ``watched`` item passes ``H + N(0, sigma^2) > rho``: the release
    rule of :func:`dpsu.threshold_histogram` (``NoiseSource.above_threshold``) applied RUNS times to
    the whole histogram at once. Items outside the histogram are never released (Prop. 2.2)."""
    items = sorted(weights)
    cols = [j for j, item in enumerate(items) if item in watched]
    if not cols:
        return 0
    values = np.broadcast_to(np.array([weights[i] for i in items]), (RUNS, len(items)))
    passed = noise.above_threshold(values, sigma, rho)
    return int(passed[:, cols].any(axis=1).sum())


# ----------------------------------------------------------------------------------------------
# 1. the update formula
# ----------------------------------------------------------------------------------------------
def test_update_formula_on_hand_computed_cases():
    # three empty items, cap 1: gap (1,1,1) has norm sqrt(3) > 1, projected to 1/sqrt(3) each
    w = np.zeros(5)
    policy_gaussian_update(w, np.array([0, 2, 4]), 1.0)
    assert w[[0, 2, 4]] == pytest.approx([1 / math.sqrt(3)] * 3, abs=1e-15)
    assert w[1] == 0 and w[3] == 0  # items outside the user's set are untouched

    # an item at/above the cap gets nothing (and is not decreased); gap (0, 1, 0.5) has norm
    # sqrt(1.25): the others get 1/sqrt(1.25) and 0.5/sqrt(1.25)
    w = np.array([2.0, 0.0, 0.5, 1.0])
    policy_gaussian_update(w, np.array([0, 1, 2, 3]), 1.0)
    assert w == pytest.approx([2.0, 1 / math.sqrt(1.25), 0.5 + 0.5 / math.sqrt(1.25), 1.0], abs=1e-15)

    # gap norm < 1: every item reaches the cap exactly (Sterbenz: cap - w is exact for
    # w in [cap/2, cap], so w + (cap - w) == cap in floating point)
    w = np.array([0.75, 0.9, 0.6])
    policy_gaussian_update(w, np.array([0, 1, 2]), 1.0)
    assert w.tolist() == [1.0, 1.0, 1.0]
    # gap norm exactly 1 (boundary): no scaling either
    w = np.zeros(2)
    policy_gaussian_update(w, np.array([0, 1]), math.sqrt(0.5))
    assert w == pytest.approx([math.sqrt(0.5)] * 2, abs=1e-15)
    # a cap <= 0 gives nothing to anybody
    w = np.zeros(3)
    policy_gaussian_update(w, np.array([0, 1, 2]), -0.5)
    assert w.tolist() == [0.0, 0.0, 0.0]


def test_visiting_order_matters_and_is_followed():
    """cap 1. Order A: {0,1} gives 1/sqrt(2) each, then {0} adds min(1, 1 - 1/sqrt(2)).
    Order B: {0} fills item 0 to 1, then {0,1} has gap (0, 1): item 1 gets 1."""
    a = policy_gaussian_weights([np.array([0, 1]), np.array([0])], 2, 1.0)
    b = policy_gaussian_weights([np.array([0]), np.array([0, 1])], 2, 1.0)
    assert a == pytest.approx([1.0, 1 / math.sqrt(2)], abs=1e-15)
    assert b == pytest.approx([1.0, 1.0], abs=1e-15)
    assert policy_gaussian_weights([], 3, 1.0).tolist() == [0.0, 0.0, 0.0]


def test_update_norm_is_at_most_one_and_never_overshoots_the_cap():
    """Random states (some above the cap, some negative), random item sets and caps: the update
    has l2 norm <= 1, is >= 0 coordinate-wise, leaves other items alone and never lifts an item
    above max(cap, its old weight). Tolerance 1e-12: a few roundings of numbers of size <= 10."""
    rng = np.random.default_rng(101)
    for _ in range(3000):
        m = int(rng.integers(1, 10))
        cap = float(rng.choice([rng.uniform(0.01, 0.3), rng.uniform(0.3, 4.0)]))
        w = rng.uniform(-0.5, cap + 1.0, m)
        w[rng.random(m) < 0.3] = 0.0
        w[rng.random(m) < 0.2] = cap
        items = rng.choice(m, size=int(rng.integers(1, m + 1)), replace=False)
        new = w.copy()
        policy_gaussian_update(new, items, cap)
        step = new - w
        assert np.linalg.norm(step) <= 1 + 1e-12
        assert (step >= 0).all()
        others = np.setdiff1d(np.arange(m), items)
        assert (step[others] == 0).all()
        assert (new[items] <= np.maximum(cap, w[items]) + 1e-12).all()


# ----------------------------------------------------------------------------------------------
# 2. non-expansiveness
# ----------------------------------------------------------------------------------------------
def test_update_is_non_expansive():
    """||F(a) - F(b)|| <= ||a - b|| for one user's update F (a proximal map), and for a sequence
    of users. States: above the cap, exactly at it, zero on different items (partially
    overlapping supports), nearby and far apart. 1e-12: rounding of O(10)-sized sums."""
    rng = np.random.default_rng(202)
    for trial in range(4000):
        m = int(rng.integers(1, 10))
        cap = float(rng.choice([rng.uniform(0.01, 0.3), rng.uniform(0.3, 3.0)]))
        a = rng.uniform(0.0, cap + 1.5, m)
        a[rng.random(m) < 0.25] = 0.0
        a[rng.random(m) < 0.15] = cap
        if trial % 2:  # nearby states
            b = a + rng.normal(0, float(rng.choice([1e-6, 1e-2, 0.3])), m)
        else:  # unrelated states with their own zeros
            b = rng.uniform(0.0, cap + 1.5, m)
            b[rng.random(m) < 0.25] = 0.0
        users = [rng.choice(m, size=int(rng.integers(1, m + 1)), replace=False) for _ in range(3)]
        fa, fb = a.copy(), b.copy()
        policy_gaussian_update(fa, users[0], cap)
        policy_gaussian_update(fb, users[0], cap)
        assert np.linalg.norm(fa - fb) <= np.linalg.norm(a - b) + 1e-12
        for items in users[1:]:
            policy_gaussian_update(fa, items, cap)
            policy_gaussian_update(fb, items, cap)
        assert np.linalg.norm(fa - fb) <= np.linalg.norm(a - b) + 1e-12


# ----------------------------------------------------------------------------------------------
# 3. sensitivity
# ----------------------------------------------------------------------------------------------
def test_adding_one_user_anywhere_moves_the_histogram_by_at_most_one():
    """D vs D + u inserted at a random position of the visiting order, over random small
    datasets: ||H_D' - H_D||_2 <= 1 (items absent from D are 0 in H_D). 1e-9: rounding over
    <= 13 updates. The largest difference seen is close to 1: the bound is nearly attained."""
    rng = np.random.default_rng(303)
    worst = 0.0
    for _ in range(3000):
        m = int(rng.integers(1, 9))
        n = int(rng.integers(0, 12))
        cap = float(rng.choice([rng.uniform(0.05, 0.5), rng.uniform(0.5, 3.0), 50.0]))
        users = [rng.choice(m, size=int(rng.integers(1, m + 1)), replace=False) for _ in range(n)]
        new = rng.choice(m, size=int(rng.integers(1, m + 1)), replace=False)
        pos = int(rng.integers(0, n + 1))
        h = policy_gaussian_weights(users, m, cap)
        h2 = policy_gaussian_weights(users[:pos] + [new] + users[pos:], m, cap)
        diff = float(np.linalg.norm(h2 - h))
        assert diff <= 1 + 1e-9
        worst = max(worst, diff)
    assert worst > 0.999


@pytest.mark.parametrize("t,cap", [(1, 0.4), (1, 3.0), (4, 0.25), (4, 2.0), (9, 1 / 3), (5, 0.1)])
def test_user_with_unique_items_moves_the_histogram_by_exactly_min_1_sqrt_t_cap(t, cap):
    """A user whose t items nobody else holds (others hold items 0..3): each of its items gets
    min(cap, 1/sqrt(t)), so ||H_D' - H_D|| = min(1, sqrt(t) cap) wherever it is visited."""
    others = [np.array([0, 1]), np.array([1, 2, 3]), np.array([0]), np.array([3, 2])]
    mine = np.arange(4, 4 + t)
    h = policy_gaussian_weights(others, 4 + t, cap)
    for pos in range(len(others) + 1):
        h2 = policy_gaussian_weights(others[:pos] + [mine] + others[pos:], 4 + t, cap)
        assert np.linalg.norm(h2 - h) == pytest.approx(min(1.0, math.sqrt(t) * cap), rel=1e-12)
        assert h2[mine] == pytest.approx(np.full(t, min(cap, 1 / math.sqrt(t))), rel=1e-12)


# ----------------------------------------------------------------------------------------------
# 4. stream splitting
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compiled_after", [0, 7, 10**9])
def test_stream_histogram_is_independent_of_batches_and_of_the_compiled_switch(compiled_after):
    """Users streamed as one row each (a list of item ids), cut into batches every possible way,
    through the numpy update, the compiled one, or numpy then compiled from user 7 on: the same
    weights as the reference numpy loop (the compiled kernel runs the same operations in the same
    order, so they agree to rounding)."""
    rng = simulation_rng(3)
    users = [rng.choice(12, size=int(rng.integers(1, 6)), replace=False).astype(np.int64) for _ in range(11)]
    reference = policy_gaussian_weights(users, 12, 0.9)
    full = pa.Table.from_arrays(
        [pa.array([u.tolist() for u in users], type=pa.list_(pa.int64()))], names=["iids"]
    ).to_batches()[0]
    empty = full.slice(0, 0)
    n = len(users)
    for cut_mask in range(1 << (n - 1)):
        cuts = [0] + [i + 1 for i in range(n - 1) if cut_mask >> i & 1] + [n]
        batches = [empty]
        for a, b in itertools.pairwise(cuts):
            batches += [full.slice(a, b - a), empty]
        weights = policy_histogram_from_stream(iter(batches), 12, 0.9, compiled_after)
        np.testing.assert_allclose(weights, reference, rtol=0, atol=1e-12)
    assert not policy_histogram_from_stream([], 12, 0.9, compiled_after).any()


# ----------------------------------------------------------------------------------------------
# 5. SQL path vs pure numpy
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_rows", [None, 3])
def test_sql_policy_histogram_equals_numpy_replay(batch_rows):
    """dpsu_histogram(cap=...) against policy_gaussian_weights on the very users, kept items and
    order the SQL produced (read from its working tables), with the default stream batches and
    with 3-row batches (users straddle batches in the real stream). Also: the kept subsets are the
    weighted policy's (the weighted SQL's histogram is recomputed from them), and the invariants
    (per-user step <= 1, no item above the cap, total <= sum sqrt|U_i|) hold."""
    delta_max, cap, salt = 4, 1.3, 99
    rows = random_rows(7, users=30, vocab=15) + [("nulls", [None, "tok0"])]
    wh = warehouse(rows)
    run = PolicyRun(wh, cap=cap, max_contribution=delta_max, salt=salt, order_salt=5, batch_rows=batch_rows)

    held = defaultdict(set)
    for user, toks in rows:
        held[user] |= {t for t in toks if t is not None}
    kept = run.kept()
    assert set(kept) == set(held)
    for user, items in kept.items():
        assert set(items) <= held[user] and len(items) == len(set(items)) == min(len(held[user]), delta_max)
    # same kept subsets as the weighted policy (same salt): its histogram from these subsets
    expected = defaultdict(float)
    for items in kept.values():
        for item in items:
            expected[item] += 1 / math.sqrt(len(items))
    weighted = weighted_histogram(wh, delta_max, salt)
    assert set(weighted) == set(expected)
    assert all(weighted[i] == pytest.approx(expected[i], abs=1e-12) for i in expected)

    # numpy replay in the SQL's visiting order: same floating-point operations, same result
    assert sorted(run.iids.values()) == list(range(len(run.iids)))
    users = [np.array([run.iids[i] for i in kept[u]], dtype=np.int64) for u in run.order()]
    replay = policy_gaussian_weights(users, len(run.iids), cap)
    assert set(run.histogram) == set(run.iids)  # support = items some user kept
    for item, iid in run.iids.items():
        assert run.histogram[item] == pytest.approx(replay[iid], abs=1e-12)

    state = np.zeros(len(run.iids))
    for items in users:
        before = state.copy()
        policy_gaussian_update(state, items, cap)
        assert np.linalg.norm(state - before) <= 1 + 1e-12
    weights = np.array(list(run.histogram.values()))
    assert weights.max() <= cap + 1e-12
    assert weights.max() == pytest.approx(cap)  # popular tokens do saturate: the cap binds
    assert weights.sum() <= sum(math.sqrt(len(k)) for k in kept.values()) + 1e-9


def test_huge_cap_gives_the_weighted_histogram():
    """cap -> infinity: every gap is ~cap, so each user gives 1/sqrt(|U_i|) to each kept item,
    exactly the weighted policy. With weights <= W (<= number of users, 31) and cap C, each
    normalised gap is within 2W/C of 1/sqrt(t): over 31 users the error is <= 2*31^2/1e12 < 2e-9,
    so 1e-8 is a safe tolerance (float rounding of C - w is relative, ~1e-16)."""
    rows = random_rows(8, users=31, vocab=12)
    wh = warehouse(rows)
    weighted = weighted_histogram(wh, 3, salt=4242)
    run = PolicyRun(wh, cap=1e12, max_contribution=3, salt=4242, order_salt=17)
    assert set(run.histogram) == set(weighted)
    for item, weight in weighted.items():
        assert run.histogram[item] == pytest.approx(weight, abs=1e-8)


# ----------------------------------------------------------------------------------------------
# 6. the order is data-independent
# ----------------------------------------------------------------------------------------------
def test_adding_a_user_keeps_the_others_order_and_subsets():
    """Fixed salts: in D' = D + u the other users keep their order keys, their relative order and
    their kept subsets, and the SQL histograms differ by <= 1 in l2. A different order salt
    reorders the users (and does not change the kept subsets); the order is not the user-id
    order (a chance coincidence has probability 1/20!)."""
    rows = random_rows(9, users=20, vocab=10)
    added = ("zz_added", ["tok0", "tok1", "tok5", "tok9", "fresh"])
    runs = {}
    for name, data in (("D", rows), ("D'", rows + [added])):
        runs[name] = PolicyRun(warehouse(data), cap=1.0, max_contribution=4, salt=3, order_salt=1234)
    d, d2 = runs["D"], runs["D'"]
    assert [u for u in d2.order() if u != "zz_added"] == d.order()
    assert {u: o for u, o in d2.user_order().items() if u != "zz_added"} == d.user_order()
    assert {u: k for u, k in d2.kept().items() if u != "zz_added"} == d.kept()
    items = set(d.histogram) | set(d2.histogram)
    diff = np.array([d2.histogram.get(i, 0.0) - d.histogram.get(i, 0.0) for i in items])
    assert np.linalg.norm(diff) <= 1 + 1e-9
    assert set(d2.order()) == set(d.order()) | {"zz_added"}

    other = PolicyRun(warehouse(rows), cap=1.0, max_contribution=4, salt=3, order_salt=98765)
    assert other.order() != d.order() and sorted(other.order()) == sorted(d.order())
    assert other.kept() == d.kept()
    assert d.order() != sorted(d.order())


# ----------------------------------------------------------------------------------------------
# 7. privacy on neighbouring datasets
# ----------------------------------------------------------------------------------------------
def _order_salt_with_user_late(rows, user: str, after: int, **kw) -> int:
    """A public order salt under which ``user`` is visited after at least ``after`` others (found by
    trying salts 1, 2, ...: each works with probability ~ 1 - after/len(users))."""
    for order_salt in range(1, 40):
        if PolicyRun(warehouse(rows), order_salt=order_salt, **kw).order().index(user) >= after:
            return order_salt
    raise AssertionError("no order salt puts the user late")


@pytest.mark.statistical
def test_unique_token_of_added_user_is_released_with_probability_at_most_delta0(secure_noise, monkeypatch):
    """D' adds a user holding one token nobody else holds and 3 tokens the others have already
    filled to the cap. The policy gives the unique token 1/sqrt(1) (the saturated ones take
    nothing), where the weighted policy would give 1/sqrt(4); t = 1 is the worst t of rho here,
    so P_D'(released) = delta0 exactly (the token is absent from D, so P_D = 0 and the DP
    inequality reads P_D' <= delta0): the bound holds and is attained (two-sided check). The
    order is conditioned on (a public salt putting the added user late); the bound holds for
    every order. Power: when the added user holds only the secret and single-item users skip
    the projection (broken_update), the token gets the cap and is released with probability
    Phi(alpha) ~ 0.98 >> delta0: the same check rejects it."""
    delta0, sigma, delta_max, alpha = 0.1, 0.5, 8, 2.0
    rho = dpsu_threshold(sigma, delta0, delta_max)
    ts = np.arange(1, delta_max + 1)
    p_t = 1 - stats.norm.cdf((rho - 1 / np.sqrt(ts)) / sigma) ** ts
    assert int(np.argmax(p_t)) == 0 and p_t[0] == pytest.approx(delta0, rel=1e-6)
    cap = rho + alpha * sigma
    shared = ["common0", "common1", "common2"]
    rows = [(f"u{i:02d}", shared + [f"own{i % 4}"]) for i in range(20)] + [("added", shared + ["secret"])]
    kw = dict(cap=cap, max_contribution=delta_max, salt=1)
    # 4 items per user: 1/2 each, so the shared tokens reach cap ~ 2.64 after 6 users
    order_salt = _order_salt_with_user_late(rows, "added", 6, **kw)
    run = PolicyRun(warehouse(rows), order_salt=order_salt, **kw)
    assert all(run.histogram[t] == pytest.approx(cap, abs=1e-12) for t in shared)
    assert run.histogram["secret"] == pytest.approx(1.0, abs=1e-12)
    hits = release_counts(run.histogram, {"secret"}, sigma, rho, secure_noise)
    lo, hi = clopper_pearson(hits, RUNS, FALSE_FAILURE)
    assert lo <= delta0 <= hi

    monkeypatch.setattr(dpsu_policy, "policy_gaussian_update", broken_update)
    _numpy_update_only(monkeypatch)
    broken = PolicyRun(warehouse(rows[:-1] + [("added", ["secret"])]), order_salt=order_salt, **kw)
    assert broken.histogram["secret"] == pytest.approx(cap)
    hits = release_counts(broken.histogram, {"secret"}, sigma, rho, secure_noise)
    assert clopper_pearson(hits, RUNS, FALSE_FAILURE)[0] > delta0


def _dp_violated(freq_d: int, freq_d2: int, epsilon: float, delta: float) -> bool:
    """Both directions of P(E) <= e^eps P'(E) + delta, each tested with the lower confidence bound
    of the left side against the upper bound of the right side (four one-sided bounds share
    FALSE_FAILURE, as in tests/test_dpne_privacy.py)."""
    alpha = FALSE_FAILURE / 4
    d_lo, d_hi = clopper_pearson(freq_d, RUNS, 2 * alpha)
    n_lo, n_hi = clopper_pearson(freq_d2, RUNS, 2 * alpha)
    return n_lo > math.exp(epsilon) * d_hi + delta or d_lo > math.exp(epsilon) * n_hi + delta


@pytest.mark.statistical
@pytest.mark.parametrize("holders", [1, 3, 12])
def test_release_probability_ratio_is_bounded_and_broken_update_is_caught(secure_noise, monkeypatch, holders):
    """A token held by ``holders`` users of D (with 3 pads each); D' adds a user holding only it.
    With sigma for (eps, delta/2) and rho at delta/2 the policy histogram (cap rho + 2 sigma)
    passes the (eps, delta) check in both directions (holders = 12 fills the token to the cap
    before or after the added user, depending on its place in the order). The same check flags
    the mechanism whose single-item users skip the projection (broken_update, applied to D and D'
    alike), whose sensitivity is the cap, for holders 1 and 3 (release probability ~0.98 vs
    <= 0.16: far outside e * P + delta)."""
    epsilon, delta, delta_max = 1.0, 0.2, 4
    sigma = gaussian_sigma(epsilon, delta / 2)
    rho = dpsu_threshold(sigma, delta / 2, delta_max)
    cap = dpsu.policy_fill_level("policy-gaussian", rho, sigma, 2.0)
    base = [(f"u{i:02d}", ["word", f"pad{i}a", f"pad{i}b", f"pad{i}c"]) for i in range(holders)]
    base += [(f"o{i}", ["other"]) for i in range(5)]
    neighbour = base + [("added", ["word"])]
    kw = dict(cap=cap, max_contribution=delta_max, salt=1, order_salt=77)

    def frequencies() -> tuple[int, int, float]:
        h = PolicyRun(warehouse(base), **kw).histogram
        h2 = PolicyRun(warehouse(neighbour), **kw).histogram
        counts = [release_counts(x, {"word"}, sigma, rho, secure_noise) for x in (h, h2)]
        return counts[0], counts[1], h2["word"] - h["word"]

    freq_d, freq_d2, step = frequencies()
    assert 0 <= step <= 1 + 1e-12
    assert not _dp_violated(freq_d, freq_d2, epsilon, delta)
    if holders < 12:
        assert freq_d2 > freq_d  # the neighbours differ in the tested event: the check is not vacuous
        monkeypatch.setattr(dpsu_policy, "policy_gaussian_update", broken_update)
        _numpy_update_only(monkeypatch)
        bad_d, bad_d2, bad_step = frequencies()
        assert bad_step > 1.5
        assert _dp_violated(bad_d, bad_d2, epsilon, delta)


# ----------------------------------------------------------------------------------------------
# 8. DPNE levels with the policy
# ----------------------------------------------------------------------------------------------
def markov_rows(seed: int, users: int, vocab: int = 8, successors: int = 3) -> list[tuple[str, list[str]]]:
    """Sentences from a sparse Markov chain (minimal copy of tests/test_dpne.py::markov_corpus):
    many valid k-grams are held by nobody."""
    rng = simulation_rng(seed)
    nxt = {i: rng.choice(vocab, size=successors, replace=False) for i in range(vocab)}
    rows = []
    for u in range(users):
        tok = int(rng.integers(vocab))
        sent = [tok]
        for _ in range(int(rng.integers(3, 7))):
            tok = int(rng.choice(nxt[tok]))
            sent.append(tok)
        rows.append((f"user{u}", [f"w{t}" for t in sent]))
    return rows


def grams(rows, k: int) -> set[str]:
    return {" ".join(toks[i : i + k]) for _, toks in rows for i in range(len(toks) - k + 1)}


def valid_kgrams(s1: set[str], prev: set[str]) -> set[str]:
    """V_k, both-side pruning, by definition: (S_1 x S_(k-1)) n (S_(k-1) x S_1)."""
    out = set()
    for g in prev:
        for t in s1:
            toks = f"{g} {t}".split(" ")
            if " ".join(toks[1:]) in prev and toks[0] in s1:
                out.add(" ".join(toks))
    return out


def level_warehouse(rows) -> tuple[Warehouse, set[str]]:
    wh = warehouse(rows)
    s1 = {t for _, toks in rows for t in toks}
    wh.con.register("s1_list", pa.table({"item": sorted(s1)}))
    wh.con.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.s1_items AS SELECT item FROM s1_list")
    wh.con.unregister("s1_list")
    dpne_domain.install_vocabulary(wh, SCHEMA, "s1_items")
    return wh, s1


@pytest.mark.parametrize("variant", ["exact", "scalable"])
def test_dpne_levels_with_the_policy(secure_noise, monkeypatch, variant):
    """Levels 2 and 3 with policy-gaussian at a huge epsilon: the fill level handed to the
    histogram is rho_k + alpha sigma_k (rho_k = level_threshold of the public sizes), the release is
    inside V_k, and every held valid k-gram is released: it is filled to >= min(cap, 1/sqrt(Delta))
    >= rho_k + 8 sigma_k (asserted), so it misses with probability < Phi(-8) ~ 6e-16."""
    alpha, eta, delta_max = 10.0, 0.5, 100
    sigmas = dpne.level_sigmas(Budget(50_000.0, 1e-3), 3, 1.0)
    rows = markov_rows(11, users=30)
    wh, s1 = level_warehouse(rows)
    caps: list[float | None] = []
    real = dpne.secret_histogram

    def spy(*args, **kwargs):
        caps.append(kwargs.get("cap"))
        return real(*args, **kwargs)

    monkeypatch.setattr(dpne, "secret_histogram", spy)
    prev = s1
    for k in (2, 3):
        sigma = sigmas[k]
        out = dpne.release_level(
            wh,
            SCHEMA,
            k,
            sigma=sigma,
            eta=eta,
            max_contribution=delta_max,
            pruning="both",
            variant=variant,
            exact_max_valid=10**6,
            noise=secure_noise,
            policy="policy-gaussian",
            policy_cap=alpha,
        )
        rho = dpne.level_threshold(sigma, eta, len(prev), out.valid)
        assert out.rho == rho and caps[-1] == pytest.approx(rho + alpha * sigma, rel=1e-12)
        assert min(caps[-1], 1 / math.sqrt(delta_max)) - rho >= 8 * sigma  # the miss bound above
        assert out.variant == variant
        valid = valid_kgrams(s1, prev)
        assert out.valid == len(valid)
        released = {r[0] for r in wh.con.sql(f"SELECT ngram FROM {SCHEMA}.dpne_s{k}").fetchall()}
        assert len(released) == out.released
        assert released <= valid
        assert grams(rows, k) & valid <= released
        prev = released
    assert len(caps) == 2


def test_level_histogram_respects_the_fill_level(secure_noise):
    """prepare_level with a cap: the level histogram never exceeds it and popular 2-grams reach it;
    with cap None it is the weighted histogram (some weights above that cap)."""
    rows = markov_rows(12, users=40)
    wh, _ = level_warehouse(rows)
    inputs = dpne.prepare_level(
        wh, SCHEMA, 2, pruning="both", max_contribution=5, noise=secure_noise, cap=lambda prev, valid: 0.6
    )
    weights = [w for (w,) in wh.con.sql(f"SELECT weight FROM {SCHEMA}.{inputs.histogram}").fetchall()]
    assert max(weights) <= 0.6 + 1e-12 and max(weights) == pytest.approx(0.6)
    dpne.drop_level_inputs(wh, SCHEMA, inputs)
    inputs = dpne.prepare_level(
        wh, SCHEMA, 2, pruning="both", max_contribution=5, noise=secure_noise, cap=lambda prev, valid: None
    )
    weights = [w for (w,) in wh.con.sql(f"SELECT weight FROM {SCHEMA}.{inputs.histogram}").fetchall()]
    assert max(weights) > 0.6


# ----------------------------------------------------------------------------------------------
# 9. parameters
# ----------------------------------------------------------------------------------------------
def test_vocabulary_parameters_with_the_policy():
    """The policy only adds the fill level rho + policy_cap sigma: sigma, rho and the privacy
    events are those of the weighted policy (same sensitivity, same threshold)."""
    budget = Budget(2.0, 1e-5)
    weighted = dpsu.vocabulary_parameters(budget, 3, 1.0, 5)
    policy = dpsu.vocabulary_parameters(budget, 3, 1.0, 5, policy="policy-gaussian", policy_cap=1.5)
    assert weighted.policy == "weighted" and weighted.cap is None
    assert policy.policy == "policy-gaussian"
    assert (policy.sigma, policy.threshold, policy.threshold_delta) == (
        weighted.sigma,
        weighted.threshold,
        weighted.threshold_delta,
    )
    assert policy.cap == pytest.approx(policy.threshold + 1.5 * policy.sigma, rel=1e-12)
    assert policy.events("s") == weighted.events("s")


@pytest.mark.parametrize("alpha", [-0.1, float("nan"), float("inf"), float("-inf")])
def test_bad_policy_cap_is_refused(alpha):
    with pytest.raises(ConfigError, match="dpsu_policy_cap"):
        dpsu.policy_fill_level("policy-gaussian", 1.0, 1.0, alpha)
    with pytest.raises(ConfigError, match="dpsu_policy_cap"):
        dpsu.vocabulary_parameters(Budget(1.0, 1e-5), 2, 1.0, 3, policy="policy-gaussian", policy_cap=alpha)
    assert dpsu.policy_fill_level("policy-gaussian", 1.0, 0.5, 0.0) == 1.0  # alpha = 0 is allowed


@pytest.mark.parametrize("policy", ["policy_gaussian", "gaussian", "", "Weighted"])
def test_unknown_policy_is_refused(policy):
    with pytest.raises(ConfigError, match="dpsu_policy"):
        dpsu.check_policy(policy)
    with pytest.raises(ConfigError, match="dpsu_policy"):
        dpsu.policy_fill_level(policy, 1.0, 1.0, 2.0)
    with pytest.raises(ConfigError, match="dpsu_policy"):
        dpsu.vocabulary_parameters(Budget(1.0, 1e-5), 2, 1.0, 3, policy=policy)
    # refused before any work: this warehouse has none of the level tables
    wh = Warehouse(":memory:", memory_limit="1GB")
    with pytest.raises(ConfigError, match="dpsu_policy"):
        dpne.release_level(
            wh,
            SCHEMA,
            2,
            sigma=1.0,
            eta=0.5,
            max_contribution=3,
            pruning="both",
            variant="exact",
            exact_max_valid=10,
            noise=None,
            policy=policy,
        )


def test_policy_histogram_needs_an_order_salt():
    wh = warehouse([("u", ["a"])])
    with pytest.raises(ValueError, match="order salt"):
        dpsu.dpsu_histogram(wh, SCHEMA, "src", "hist", max_contribution=1, salt=1, cap=1.0)
