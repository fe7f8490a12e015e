"""Stage ``lm_counts`` (pipeline/lm_counts.py, docs/lm_privacy.md): the released noisy n-gram
counts and the selected mixture weight.

* The per-user l2 bounding (sql/lm_counts/weighted.sql, or the per-user id lists of
  sql/lm_counts/user_gid_lists.sql summed in the process; run for real on DuckDB, from sentences
  through sql/bayes/_trigrams.sql and the integer counting keys) equals an independent Python
  computation, and one user — however adversarial — moves the summed vector by at most C in l2
  norm (exactly C when the user's own vector is longer than C).
* Statistical privacy test of the Gaussian release on such neighbours, with a power check.
* Selection users and counting users partition the users by id and salt only.
* Report-noisy-max (``select_weight``): accuracy, Laplace scale, and a DP sanity check with power.
* The stage end to end on a small sample run: file, report, retry, fixed weight.
* Whether the weight selection ran must not depend on one user: adding the only selection user to
  a dataset that had none leaves the report's selection part unchanged (a bug found here: the stage
  used to skip report-noisy-max and report ran = False then).

False-failure rates: every statistical check is at most FALSE_FAILURE (Clopper-Pearson bounds
with a Bonferroni split over the comparisons); the noise is seeded, so each run is reproducible.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_through_dpne
from scipy import stats

from dpngram.config.sections import LmConfig
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import add_token_ids
from dpngram.engines.sql import load_sql
from dpngram.lm import open_model
from dpngram.mechanisms import lm_counts, lm_models, lm_selection
from dpngram.mechanisms.bayes import calibrate
from dpngram.release import layout
from dpngram.release.context import read_parts
from dpngram.stages import lm_counts as lm_counts_stage
from dpngram.text.sample import write_sample

SCHEMA = "lm_counts_test"
FALSE_FAILURE = 1e-4
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


# ----------------------------------------------------------------------------------------------
# Running the stage's SQL on hand-made users
# ----------------------------------------------------------------------------------------------
def warehouse(users: dict[str, list[list[str]]]) -> Warehouse:
    """A DuckDB warehouse whose ``sentences`` table holds ``users`` (one document each) and the
    ingest ``tokens`` view over it, with the token ids, as the stage sees them."""
    wh = Warehouse(":memory:", memory_limit="1GB", threads=1)
    wh.con.execute(f"CREATE SCHEMA {SCHEMA}")
    wh.con.execute(
        f"CREATE TABLE {SCHEMA}.sentences (user_id VARCHAR NOT NULL, doc_id BIGINT NOT NULL, "
        "sent_id INTEGER NOT NULL, tokens VARCHAR[] NOT NULL)"
    )
    rows = [(u, i, s) for u, sentences in users.items() for i, s in enumerate(sentences)]
    table = pa.table(
        {
            "user_id": pa.array([r[0] for r in rows], pa.string()),
            "doc_id": pa.array([0] * len(rows), pa.int64()),
            "sent_id": pa.array([r[1] for r in rows], pa.int32()),
            "tokens": pa.array([r[2] for r in rows], pa.list_(pa.string())),
        }
    )
    wh.con.register("sentences_rows", table)
    wh.con.execute(f"INSERT INTO {SCHEMA}.sentences SELECT * FROM sentences_rows")
    wh.con.unregister("sentences_rows")
    add_token_ids(wh, SCHEMA)  # the token ids and dictionary ingest writes, which the counting reads
    wh.execute(load_sql("ingest/tokens_view", schema=SCHEMA))
    return wh


#: How the sums are taken: in the engine (sql/lm_counts/weighted.sql, the Spark engine's way) or
#: in the process from each user's streamed id list (sql/lm_counts/user_gid_lists.sql, DuckDB's).
SUMMING = {"engine": lm_counts.summed_in_engine, "process": lm_counts.summed_in_process}


def weighted_sums(
    users: dict[str, list[list[str]]],
    vocabulary: list[str],
    domain: list[str],
    *,
    clip: float,
    holdout: int = 0,
    salt: int = 1,
    power: float = 1.0,
    way: str = "process",
) -> np.ndarray:
    """The stage's exact weighted sums over ``domain`` (n-grams; gid = position + 1), each user's
    counts to the power ``power``, summed the ``way`` of :data:`SUMMING` (by default the default
    DuckDB engine's)."""
    wh = warehouse(users)
    try:
        frame = pl.DataFrame(
            {"gid": range(1, len(domain) + 1), "n": [len(g.split(" ")) for g in domain], "ngram": domain}
        )
        vocab, dom = lm_counts.counting_tables(vocabulary, frame)
        wh.load_table(SCHEMA, lm_counts.VOCABULARY_TABLE, [vocab], vocab.schema)
        wh.load_table(SCHEMA, lm_counts.DOMAIN_TABLE, [dom], dom.schema)
        params = {"salt": salt, "holdout_per_mille": holdout, **lm_counts.COUNTING_PARAMS}
        return SUMMING[way](wh, SCHEMA, len(domain), params, clip=float(clip), power=power)
    finally:
        wh.close()


def selection_users(users: dict[str, list[list[str]]], *, holdout: int, salt: int) -> list[str]:
    wh = warehouse(users)
    try:
        sql = load_sql("lm_counts/selection_sentences", schema=SCHEMA)
        rows = wh.con.execute(sql, {"salt": salt, "holdout_per_mille": holdout}).fetchall()
        return [r[0] for r in rows]
    finally:
        wh.close()


def user_vector(
    sentences: list[list[str]], vocabulary: set[str], domain: list[str], power: float = 1.0
) -> np.ndarray:
    """A user's count vector over the domain, all orders 1..3 together, computed directly: one
    <s> and one </s> per sentence, tokens outside the vocabulary as <unk>, every n-gram of the
    padded sentence counted (order 1 includes <s>); each count c enters as c**power (0 stays 0)."""
    counts: Counter[str] = Counter()
    for sentence in sentences:
        padded = [BOS, *(t if t in vocabulary else UNK for t in sentence), EOS]
        for n in (1, 2, 3):
            counts.update(" ".join(padded[i : i + n]) for i in range(len(padded) - n + 1))
    return np.array([counts[g] ** power if counts[g] else 0.0 for g in domain], dtype=np.float64)


def bounded_sum(users, vocabulary, domain, clip, power=1.0) -> np.ndarray:
    total = np.zeros(len(domain))
    for sentences in users.values():
        x = user_vector(sentences, set(vocabulary), domain, power)
        norm = float(np.linalg.norm(x))
        if norm > 0:
            total += min(1.0, clip / norm) * x
    return total


VOCAB = ["a", "b", "c", "d", "x"]
DOMAIN = [
    *VOCAB,
    BOS,
    EOS,
    UNK,
    "<s> a",
    "a b",
    "b c",
    "c </s>",
    "x x",
    "<s> x",
    "x </s>",
    "a <unk>",
    "d a",
    "<s> a b",
    "a b c",
    "b c </s>",
    "x x x",
    "<s> x x",
    "x x </s>",
    "<s> a </s>",
    # words outside the vocabulary: the text reads them as <unk>, so these are never counted
    "q",
    "a q",
    "q <unk> </s>",
]
BASE_USERS = {
    "u1": [["a", "b", "c"], ["d", "a"]],
    "u2": [["a", "b"], ["x", "y", "x"]],
    "u3": [["c"], ["b", "c", "a", "b", "c"]],
    "u4": [["z", "z", "a"]],
    "u5": [["d", "a", "b", "c"], ["a"]],
}
ADVERSARIAL = {
    # one n-gram repeated many times (norm ~ 100: scaled down to exactly C)
    "repeat": [["x"] * 60],
    # many distinct n-grams, each a few times
    "distinct": [[w] for w in VOCAB] + [["a", "b", "c", "d", "a", "q"], ["x", "x"]],
    # a mix, with out-of-vocabulary tokens (<unk>)
    "mix": [["x"] * 20, ["a", "b", "c"], ["q", "r"], ["a", "q"]],
    # a light user: (<s>, a, </s>, <s> a, <s> a </s>) once each, norm sqrt(5) < 3
    "light": [["a"]],
    # 5 unigrams, 4 bigrams, 3 trigrams once each: every order below 3, jointly sqrt(12) > 3
    "spread": [["a", "b", "c"]],
}


@pytest.mark.parametrize("way", ["engine", "process", "process, no power table"])
@pytest.mark.parametrize(("clip", "power"), [(1.0, 1.0), (3.0, 1.0), (1.0, 0.5), (3.0, 0.5), (3.0, 0.0)])
def test_weighted_sums_are_the_l2_bounded_sum_and_one_user_moves_them_by_at_most_c(
    clip, power, way, monkeypatch
):
    """Real SQL (summed in the engine, or each user's ids summed in the process) vs a direct
    computation of Σ_u min(1, C/‖x_u‖₂) x_u (x_u: the user's counts to the power p,
    ``lm_count_power``), and the neighbour gap. Both sides sum ≤ 10 float64 terms per coordinate:
    they agree to ~1e-15 relative (rel 1e-12); ‖ΔW‖₂ ≤ C up to the same rounding (factor
    1 + 1e-12), whatever p. "no power table": every count past 1 takes c^p from np.power, the path
    of counts at or past POWER_TABLE_SIZE."""
    if way == "process, no power table":
        monkeypatch.setattr(lm_counts, "POWER_TABLE_SIZE", 2)
        way = "process"
    base = weighted_sums(BASE_USERS, VOCAB, DOMAIN, clip=clip, power=power, way=way)
    assert base == pytest.approx(bounded_sum(BASE_USERS, VOCAB, DOMAIN, clip, power), rel=1e-12, abs=1e-12)
    for name, sentences in ADVERSARIAL.items():
        neighbour = weighted_sums(
            {**BASE_USERS, name: sentences}, VOCAB, DOMAIN, clip=clip, power=power, way=way
        )
        gap = neighbour - base
        x = user_vector(sentences, set(VOCAB), DOMAIN, power)
        norm = float(np.linalg.norm(x))
        assert gap == pytest.approx(min(1.0, clip / norm) * x, rel=1e-12, abs=1e-12), name
        assert np.linalg.norm(gap) <= clip * (1 + 1e-12), name
        if norm > clip:  # the scaling uses the whole vector (all orders): the bound is attained
            assert np.linalg.norm(gap) == pytest.approx(clip, rel=1e-12), name
        else:
            assert np.linalg.norm(gap) == pytest.approx(norm, rel=1e-12), name
    # "spread" has every per-order norm below C = 3 but its joint norm above (sqrt(12)): scaling
    # each order separately would leave its gap above C and fail the checks above
    x = user_vector(ADVERSARIAL["spread"], set(VOCAB), DOMAIN)
    orders = np.array([len(g.split(" ")) for g in DOMAIN])
    assert max(np.linalg.norm(x[orders == n]) for n in (1, 2, 3)) < 3.0 < np.linalg.norm(x)


def test_counting_keys_are_the_word_ids_left_aligned_and_unknown_words_are_left_out(monkeypatch):
    """counting_tables: vocabulary ids from 4 in order, markers 1-3; an n-gram's key packs its word
    ids into 21-bit fields from the left (so orders never collide); an n-gram with a word outside
    V_LM and the markers has no row (the SQL can never match it); too large a vocabulary is
    refused with one line naming the setting."""
    vocab, dom = lm_counts.counting_tables(
        ["b", "a"],
        pl.DataFrame(
            {
                "gid": [1, 2, 3, 4, 5],
                "n": [1, 2, 3, 2, 1],
                "ngram": ["a", "<s> b", "b a </s>", "a q", "<unk>"],
            }
        ),
    )
    assert vocab.to_pydict() == {"token": ["b", "a"], "tid": [4, 5]}
    shift = 1 << lm_counts.WORD_ID_BITS
    assert dom.to_pydict() == {
        "gid": [1, 2, 3, 5],
        "k": [5 * shift * shift, (1 * shift + 4) * shift, (4 * shift + 5) * shift + 2, 3 * shift * shift],
    }
    monkeypatch.setattr(lm_counts, "MAX_COUNTING_VOCABULARY", 1)
    with pytest.raises(ConfigError, match="lm_public_vocab_size"):
        lm_counts.counting_tables(["b", "a"], pl.DataFrame({"gid": [1], "n": [1], "ngram": ["a"]}))


# ----------------------------------------------------------------------------------------------
# Statistical privacy test of the released vector
# ----------------------------------------------------------------------------------------------
def cp_lower(k: int, n: int, beta: float) -> float:
    """One-sided Clopper-Pearson lower bound (fails with probability ≤ beta)."""
    return 0.0 if k == 0 else float(stats.beta.ppf(beta, k, n - k + 1))


def cp_upper(k: int, n: int, beta: float) -> float:
    return 1.0 if k == n else float(stats.beta.isf(beta, k + 1, n - k))


def worst_violation(a: np.ndarray, b: np.ndarray, thresholds, epsilon: float, delta: float) -> float:
    """max over half-spaces S = {y > t}, {y < t} and both orders (A, B) of (a, b) of
    CP_lower(P[A ∈ S]) − e^ε CP_upper(P[B ∈ S]) − δ. A true (ε, δ)-DP mechanism gives a value > 0
    with probability ≤ FALSE_FAILURE: 4·len(thresholds) comparisons, two one-sided bounds each,
    each bound failing with probability ≤ FALSE_FAILURE / (8·len(thresholds)) (union bound)."""
    beta = FALSE_FAILURE / (8 * len(thresholds))
    worst = -math.inf
    for t in thresholds:
        for in_set in (lambda y, t=t: y > t, lambda y, t=t: y < t):
            for x, y in ((a, b), (b, a)):
                kx, ky = int(in_set(x).sum()), int(in_set(y).sum())
                bound = math.exp(epsilon) * cp_upper(ky, y.size, beta) + delta
                worst = max(worst, cp_lower(kx, x.size, beta) - bound)
    return worst


def projected_releases(
    weighted: np.ndarray, direction: np.ndarray, draws: int, *, epsilon, delta, clip, seed
) -> tuple[np.ndarray, float]:
    noise = NoiseSource.seeded_for_tests(seed)
    out = np.empty(draws)
    sigma = 0.0
    for i in range(draws):
        noisy, calibration = lm_counts.noisy_release(
            weighted, epsilon=epsilon, delta=delta, clip=clip, noise=noise
        )
        out[i] = noisy @ direction
        sigma = calibration.sigma
    return out, sigma


@pytest.mark.statistical
def test_released_counts_are_dp_on_adversarial_neighbours_and_the_test_has_power():
    """D = BASE_USERS, D' = D + the "repeat" user (‖ΔW‖₂ = C exactly, the worst case). The
    Gaussian mechanism's privacy loss only depends on the projection of the output on the
    difference direction v (the other coordinates are identically distributed given it), and its
    optimal distinguishing sets are half-spaces ⟨y, v⟩ > t: so checking
    P[S | D] ≤ e^ε P[S | D'] + δ (and the reverse) for a grid of thresholds t spanning the region
    where the two projected distributions differ is a test of the release itself.

    ε = 1, δ = 1e-2 (large, so the probabilities are measurable with 20,000 draws). Power: the
    same check on the mechanism calibrated for C/2 (σ halved) must find a violation: its true
    δ(ε=1) is Φ(C/2σ' − εσ'/C) − e^ε Φ(−C/2σ' − εσ'/C) ≈ 0.15 at σ' ≈ 0.94, far above δ + the
    binomial slack (≤ 0.05 at 20,000 draws and the bounds' level)."""
    epsilon, delta, clip, draws = 1.0, 1e-2, 1.0, 20_000
    power = LmConfig().count_power  # the released default (the worst case is the same for any power)
    d = weighted_sums(BASE_USERS, VOCAB, DOMAIN, clip=clip, power=power)
    d_prime = weighted_sums(
        {**BASE_USERS, "repeat": ADVERSARIAL["repeat"]}, VOCAB, DOMAIN, clip=clip, power=power
    )
    gap = d_prime - d
    assert np.linalg.norm(gap) == pytest.approx(clip, rel=1e-12)
    v = gap / np.linalg.norm(gap)

    a, sigma = projected_releases(d, v, draws, epsilon=epsilon, delta=delta, clip=clip, seed=101)
    b, _ = projected_releases(d_prime, v, draws, epsilon=epsilon, delta=delta, clip=clip, seed=202)
    centre = float(d @ v)
    thresholds = centre + sigma * np.arange(-2.0, 4.01, 0.25)
    assert worst_violation(a, b, thresholds, epsilon, delta) <= 0.0

    # the same check on a mechanism whose noise is calibrated for half the sensitivity
    a_half, sigma_half = projected_releases(
        d, v, draws, epsilon=epsilon, delta=delta, clip=clip / 2, seed=303
    )
    b_half, _ = projected_releases(d_prime, v, draws, epsilon=epsilon, delta=delta, clip=clip / 2, seed=404)
    assert sigma_half < 0.55 * sigma
    assert worst_violation(a_half, b_half, thresholds, epsilon, delta) > 0.0


# ----------------------------------------------------------------------------------------------
# Selection users vs counting users
# ----------------------------------------------------------------------------------------------
def tagged_users(ids: list[int], variant: int = 0) -> dict[str, list[list[str]]]:
    """User i writes their own tag word t{i} (so their presence in the sums is visible) plus text
    that depends on ``variant``."""
    filler = [["a", "b"], ["c", "x", "x"], ["d"]][variant % 3]
    return {f"user{i}": [[f"t{i}", "a"], filler] for i in ids}


def counted_users(users, *, holdout: int, salt: int) -> set[str]:
    ids = sorted(users, key=lambda u: int(u[4:]))
    tags = [f"t{u[4:]}" for u in ids]
    sums = weighted_sums(users, [*VOCAB, *tags], tags, clip=1.0, holdout=holdout, salt=salt)
    assert np.all(sums >= 0)
    return {u for u, s in zip(ids, sums, strict=True) if s > 0}


def test_selection_and_counting_users_partition_the_users_by_id_and_salt():
    ids = list(range(400))
    users = tagged_users(ids)
    holdout, salt = 250, 987_654_321
    counted = counted_users(users, holdout=holdout, salt=salt)
    selected = set(selection_users(users, holdout=holdout, salt=salt))
    assert counted.isdisjoint(selected)
    assert counted | selected == set(users)
    # a keyed hash mod 1000 below 250: Binomial(400, 1/4)-like; 4.5 sd (~1e-5 two-sided)
    assert abs(len(selected) - 100) <= 4.5 * math.sqrt(400 * 0.25 * 0.75)

    # the split depends on the user id and the salt only: users 200..399 keep their side when
    # their own text changes, users 0..199 leave and users 400..599 arrive
    others = tagged_users(list(range(200, 600)), variant=1)
    common = set(users) & set(others)
    assert len(common) == 200
    assert set(selection_users(others, holdout=holdout, salt=salt)) & common == selected & common
    assert counted_users(others, holdout=holdout, salt=salt) & common == counted & common
    # the selection sentences come in user order, every sentence of a selected user
    rows = selection_users(users, holdout=holdout, salt=salt)
    assert rows == sorted(rows) and Counter(rows) == {u: 2 for u in selected}

    # another salt: another split
    assert set(selection_users(users, holdout=holdout, salt=salt + 1)) != selected
    # holdout 0: everyone counted, nobody selected; 1000: the reverse
    assert counted_users(users, holdout=0, salt=salt) == set(users)
    assert selection_users(users, holdout=0, salt=salt) == []
    assert counted_users(users, holdout=1000, salt=salt) == set()
    assert set(selection_users(users, holdout=1000, salt=salt)) == set(users)


def test_adding_a_selection_user_leaves_the_counts_unchanged():
    """Parallel composition: a selection user, however heavy, does not touch the weighted sums."""
    holdout, salt = 500, 42
    candidates = {f"heavy{i}": ADVERSARIAL["repeat"] for i in range(20)}
    chosen = selection_users(candidates, holdout=holdout, salt=salt)
    assert chosen  # with 20 candidates at 1/2 each, one is a selection user (fixed salt)
    heavy = chosen[0]
    base = weighted_sums(BASE_USERS, VOCAB, DOMAIN, clip=1.0, holdout=holdout, salt=salt)
    with_heavy = weighted_sums(
        {**BASE_USERS, heavy: ADVERSARIAL["repeat"]}, VOCAB, DOMAIN, clip=1.0, holdout=holdout, salt=salt
    )
    assert np.array_equal(base, with_heavy)
    counted_heavy = next(u for u in candidates if u not in chosen)
    moved = weighted_sums(
        {**BASE_USERS, counted_heavy: ADVERSARIAL["repeat"]},
        VOCAB,
        DOMAIN,
        clip=1.0,
        holdout=holdout,
        salt=salt,
    )
    assert np.linalg.norm(moved - base) == pytest.approx(1.0, rel=1e-12)


# ----------------------------------------------------------------------------------------------
# Report-noisy-max
# ----------------------------------------------------------------------------------------------
def test_user_mean_logprobs_are_the_mixtures_mean_log_probabilities():
    grid = lm_selection.WEIGHT_GRID
    p = np.log10([0.5, 0.25, 0.1])
    q = np.log10([0.1, 0.5, 0.4])
    got = lm_selection.user_mean_logprobs(p, q)
    for k, lam in enumerate(grid):
        mix = [lam * 10**qi + (1 - lam) * 10**pi for pi, qi in zip(p, q, strict=True)]
        assert got[k] == pytest.approx(sum(math.log(m) for m in mix) / len(mix), rel=1e-12)
    assert np.all(lm_selection.user_mean_logprobs(np.zeros(2), np.zeros(2)) == 0.0)


def test_centred_contributions_lie_in_the_range_and_keep_the_unclipped_argmax():
    """A user's contribution is (deviation from their mean over the candidates, clipped to ±C) − C:
    inside [−2C, 0] whatever the log-probabilities; without a binding clip, the summed scores differ
    from the summed mean log-probabilities by a constant per candidate set, so the argmax is theirs."""
    c, r = lm_selection.SCORE_DEVIATION_CLIP_NATS, lm_selection.SCORE_RANGE_NATS
    assert r == 2 * c
    rng = np.random.default_rng(5)
    means = rng.uniform(-8.0, -2.0, size=(1, 400)) + rng.uniform(-0.4 * c, 0.4 * c, size=(12, 400))
    contributions = lm_selection.centred_contributions(means)
    assert contributions.shape == means.shape
    assert np.all(contributions >= -r) and np.all(contributions <= 0.0)
    unclipped = means - means.mean(axis=0, keepdims=True) - c  # |deviation| ≤ 0.8C: no clip binds
    assert contributions == pytest.approx(unclipped, abs=1e-12)
    assert np.argmax(contributions.sum(axis=1)) == np.argmax(means.sum(axis=1))
    # one user far apart: the clip binds, at both ends of the range
    extreme = lm_selection.centred_contributions(np.array([-1.0, -60.0, -60.0]))
    assert extreme.tolist() == [0.0, -r, -r]
    # a vector per user (1-D) is the same as a column of the 2-D form
    assert lm_selection.centred_contributions(means[:, 7]) == pytest.approx(contributions[:, 7], abs=1e-12)


@pytest.mark.statistical
def test_a_far_ahead_candidate_is_chosen_as_the_laplace_tail_bound_says():
    """Scores 0 for one candidate j and −m for the others, Laplace scale b = R/ε: j wins whenever
    its noise is > −m/2 and every other noise is < m/2. For grid·DiscreteLaplace(b/grid) noise,
    P(noise ≥ x) = e^{−⌈x/grid⌉·grid/b}/(1 + e^{−grid/b}) ≤ e^{−x/b} (x > 0), so
    P(j loses) ≤ k·e^{−m/(2b)} = 0.1 for m = 2b ln(10k). One-sided CP bound at FALSE_FAILURE."""
    epsilon, k, trials = 1.0, len(lm_selection.WEIGHT_GRID), 4000
    b = lm_selection.selection_noise(epsilon)[0]
    assert b == lm_selection.SCORE_RANGE_NATS / epsilon
    m = 2 * b * math.log(10 * k)
    scores = np.full(k, -m)
    scores[4] = 0.0
    noise = NoiseSource.seeded_for_tests(7)
    hits = 0
    for _ in range(trials):
        weight, index = lm_selection.select_weight(scores, epsilon, noise)
        assert weight == lm_selection.WEIGHT_GRID[index]
        hits += index == 4
    assert cp_upper(hits, trials, FALSE_FAILURE) >= 1 - k * math.exp(-m / (2 * b))


@pytest.mark.statistical
def test_the_laplace_scale_is_r_over_epsilon():
    """Two candidates at a gap m = b: the second wins iff L2 − L1 > b. The on-grid noise is
    grid·(⌊E1/grid⌋ − ⌊E2/grid⌋) for exponentials E of mean b, i.e. within 2·grid of a continuous
    Laplace difference, whose density is ≤ 1/(4b): the win probability is within grid/b ≤ 2^-10
    (select_weight's grid is ≤ b/1024) of the continuous P(L2 − L1 > b) = e^{-1}·3/4 ≈ 0.276.
    A scale off by a factor 2 either way gives 0.379 or 0.135; the two-sided CP interval at
    FALSE_FAILURE on 10,000 trials is ±0.016. Also: b = ⌈R/g⌉·g/ε is R/ε whenever the grid g divides
    R, and never below R/ε (R = SCORE_RANGE_NATS; docs/lm_privacy.md, section 4)."""
    big_r = lm_selection.SCORE_RANGE_NATS
    for eps in (1e-4, 1e-3, 0.0024, 0.0025, 0.25, 1.0, 1.036, 8.0, 100.0):
        scale, g = lm_selection.selection_noise(eps)
        assert g <= big_r / (1024 * eps) and scale >= big_r / eps
        assert (scale == big_r / eps) == (big_r / g == math.floor(big_r / g))
        assert scale * eps == pytest.approx(math.ceil(big_r / g) * g, rel=1e-15)
    epsilon, trials = 2.0, 10_000
    b = lm_selection.selection_noise(epsilon)[0]
    assert b == big_r / epsilon
    expected = math.exp(-1.0) * 3 / 4
    noise = NoiseSource.seeded_for_tests(11)
    wins = sum(
        lm_selection.select_weight(np.array([0.0, -b]), epsilon, noise, grid=(0.0, 1.0))[1] == 1
        for _ in range(trials)
    )
    lo, hi = cp_lower(wins, trials, FALSE_FAILURE / 2), cp_upper(wins, trials, FALSE_FAILURE / 2)
    assert lo - 2**-10 <= expected <= hi + 2**-10


def noisy_max_frequencies(scores: np.ndarray, epsilon: float, trials: int, seed: int) -> np.ndarray:
    noise = NoiseSource.seeded_for_tests(seed)
    picks = [lm_selection.select_weight(scores, epsilon, noise)[1] for _ in range(trials)]
    return np.bincount(picks, minlength=len(lm_selection.WEIGHT_GRID))


@pytest.mark.statistical
def test_report_noisy_max_is_epsilon_dp_on_neighbouring_scores():
    """Neighbouring score vectors differ by one user's contribution u ∈ [−R, 0]^k (monotone: every
    score moves down, by at most R = 2C); the adversarial u = (0, −R, …, −R) — a user whose first
    candidate is far ahead — moves candidate 0 up by R relative to every other, the worst case for
    the one-sided Laplace scale R/ε. For each output o:
    P(o | s) ≤ e^ε P(o | s + u) and the reverse, with one-sided CP bounds (4k bounds, each at
    FALSE_FAILURE/(4k)). Power: the same check flags the mechanism run with a quarter of the
    Laplace scale (select_weight at 4ε, the true loss ≈ 5 > e at these scores)."""
    epsilon, trials = 1.0, 20_000
    k, big_r = len(lm_selection.WEIGHT_GRID), lm_selection.SCORE_RANGE_NATS
    s = np.zeros(k)
    u = np.full(k, -big_r)
    u[0] = 0.0
    # u is one user's contribution (centred_contributions): their first candidate far ahead
    far_ahead = np.full(k, -60.0)
    far_ahead[0] = -1.0
    assert lm_selection.centred_contributions(far_ahead).tolist() == u.tolist()
    beta = FALSE_FAILURE / (4 * k)

    def worst(fa: np.ndarray, fb: np.ndarray) -> float:
        out = -math.inf
        for o in range(k):
            for x, y in ((fa, fb), (fb, fa)):
                out = max(
                    out,
                    cp_lower(int(x[o]), trials, beta) - math.exp(epsilon) * cp_upper(int(y[o]), trials, beta),
                )
        return out

    assert (
        worst(noisy_max_frequencies(s, epsilon, trials, 1), noisy_max_frequencies(s + u, epsilon, trials, 2))
        <= 0
    )
    too_little = 4 * epsilon
    assert (
        worst(
            noisy_max_frequencies(s, too_little, trials, 3),
            noisy_max_frequencies(s + u, too_little, trials, 4),
        )
        > 0
    )


# ----------------------------------------------------------------------------------------------
# The selection's ε: a selection user's composed loss stays within the run's total
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 8.0])
@pytest.mark.parametrize(
    "split",
    [
        {"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1},
        {"dpne": 0.5, "lm_counts": 0.5},
        {"dpne": 0.3, "lm_counts": 0.5, "synth": 0.2},
    ],
)
def test_a_selection_user_composes_within_the_runs_total(tmp_path, epsilon, split):
    """A selection user is read by every other stage and by the selection (pure ε_sel), never by
    the stage's Gaussian. The accountant's composition of exactly those events must not exceed the
    total the run reports (``composed_epsilon``); with the stage's own ε in place of ε_sel (the
    previous code) it did, by more than 5%, because joint calibration sizes that ε for a Gaussian.
    In per-stage calibration the stage's own ε stays within the target (basic composition) but
    can exceed the reported total, which composes the Gaussians sub-additively."""
    from dpngram.config import RunConfig
    from dpngram.config.budget_plan import stage_privacy_shapes
    from dpngram.core.accounting import PrivacyEvent, compose

    public = tmp_path / "public.txt"
    public.write_text("a public sentence\n")  # the bayes stage runs only with a public corpus

    def config(calibration: str) -> RunConfig:
        return RunConfig.build(
            dataset="d",
            input=str(tmp_path / "in.jsonl"),
            public=str(public),
            out=str(tmp_path / "out"),
            warehouse=str(tmp_path / "wh.duckdb"),
            epsilon=epsilon,
            delta=1e-7,
            stage_budget=split,
            budget_calibration=calibration,
        )

    for calibration in ("joint", "per-stage"):
        cfg = config(calibration)
        plan = cfg.budget_plan()
        shapes = stage_privacy_shapes(cfg.dpne.threshold_delta, cfg.dpne.vocabulary_method)
        others = [
            e
            for s, b in plan.calibrated.items()
            if s != lm_counts_stage.STAGE
            for e in shapes[s].events(s, b)
        ]
        eps_sel = lm_counts_stage.selection_epsilon(cfg)
        stage_eps = plan.calibrated[lm_counts_stage.STAGE].epsilon

        def total(pure: float, others=others, plan=plan) -> float:
            event = PrivacyEvent(stage=lm_counts_stage.STAGE, mechanism="laplace", epsilon=pure)
            return compose([*others, event], plan.target.delta)["epsilon"]

        assert 0 < eps_sel <= stage_eps
        assert total(eps_sel) <= plan.composed_epsilon * (1 + 1e-12)
        assert eps_sel == stage_eps or total(eps_sel) == pytest.approx(plan.composed_epsilon, rel=1e-9)
        if calibration == "joint":
            assert plan.multiplier > 1
            assert total(stage_eps) > plan.composed_epsilon * 1.05  # what the stage's ε would spend
        else:  # the stage's ε stays within the target by basic composition, not within the reported total
            assert total(stage_eps) <= plan.target.epsilon * (1 + 1e-12)


# ----------------------------------------------------------------------------------------------
# The stage end to end
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample_files(tmp_path_factory):
    return write_sample(
        tmp_path_factory.mktemp("lm-counts-sample"),
        n_users=300,
        seed=5,
        vocab_size=300,
        public_sentences=3000,
    )


def counts_run(tmp_path, files, **overrides):
    settings = {
        "epsilon": 8.0,
        "delta": 1e-4,
        "max_n": 3,
        "stage_budget": {"dpne": 0.5, "lm_counts": 0.5},
        "memory_limit": "1GB",
        "lm_public_vocab_size": 400,
        "lm_count_domain": 800,
        **overrides,
    }
    return run_through_dpne(tmp_path, files, **settings)


def lm_ledger_rows(ctx) -> list[dict]:
    with ctx.ledger() as ledger:
        entries = ledger.entries(ctx.config.dataset)
    return [e for e in entries if e["run_id"] == ctx.run_id and e["stage"] == lm_counts_stage.STAGE]


def test_run_lm_counts_end_to_end(tmp_path, sample_files):
    from dpngram.lm.open_model import MARKERS

    ctx = counts_run(tmp_path, sample_files)
    config = ctx.config
    summary = lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(5))
    root = ctx.release.root
    path = root / layout.LM_COUNTS
    table = pq.read_table(path)
    assert table.schema.names == ["n", "ngram", "noisy_count"]
    assert (
        table.schema.field("n").type == pa.int8() and table.schema.field("noisy_count").type == pa.float64()
    )
    assert summary["released_rows"] == table.num_rows and not summary["reused"]

    part = read_parts(ctx)[lm_counts_stage.STAGE]
    epsilon, delta = config.stage_share(lm_counts_stage.STAGE)
    sigma, threshold = part["sigma"], part["threshold"]
    assert sigma > 0 and threshold == pytest.approx(config.lm.count_threshold * sigma, rel=1e-12)
    # σ is the public calibration for l2-sensitivity C over the whole domain
    calibration = calibrate(epsilon, delta, config.lm.count_clip, part["domain_size"])
    assert sigma == pytest.approx(calibration.sigma, rel=1e-12)
    assert part["snapped_sensitivity"] == pytest.approx(calibration.snapped_sensitivity, rel=1e-12)
    assert [e["mechanism"] for e in part["privacy"]["events"]] == ["gaussian"]
    assert part["privacy"]["epsilon"] <= epsilon * (1 + 1e-9)

    # the domain is public: rebuild it from the released vocabulary, the k-grams and the corpus
    dp_vocab = [t for t in pq.read_table(root / layout.VOCABULARY)["token"].to_pylist() if t]
    domain = lm_counts.build_domain(
        dp_vocab,
        config.public,
        order=config.lm.order,
        public_cap=config.lm.public_vocab_size,
        domain_cap=config.lm.count_domain,
        kgrams={n: lm_counts.released_kgrams(root, n) for n in range(2, config.lm.order + 1)},
        lowercase=config.lowercase,
    )
    assert domain.size == part["domain_size"]
    rows = table.to_pylist()
    order1 = {r["ngram"] for r in rows if r["n"] == 1}
    assert order1 == {*domain.vocabulary, *MARKERS} and set(dp_vocab) <= order1
    assert len([r for r in rows if r["n"] == 1]) == len(order1) == part["domain_by_order"]["1"]
    higher = [r for r in rows if r["n"] >= 2]
    assert higher and all(r["noisy_count"] >= threshold for r in higher)
    for n in range(2, config.lm.order + 1):
        allowed = set(domain.frame.filter(domain.frame["n"] == n)["ngram"].to_list())
        released = [r["ngram"] for r in higher if r["n"] == n]
        assert set(released) <= allowed and len(released) == part["released_by_order"][str(n)]
        assert all(len(g.split(" ")) == n for g in released)
    # released values lie on the power-of-two noise grid (docs/noise.md)
    on_grid = np.asarray(table["noisy_count"]) / part["grid"]
    assert np.array_equal(on_grid, np.round(on_grid))

    assert part["mix_weight"] in lm_selection.WEIGHT_GRID
    assert part["unigram_adaptation"] in lm_selection.ADAPTATION_GRID
    # step lm rebuilds Q with the spread the stage used (lm/build.py reads this key back)
    assert part["unresolved_unigrams"] == lm_models.UNRESOLVED_UNIGRAMS == "empirical_bayes"
    assert "ran" not in part["weight_selection"]  # whether anyone was selected is private
    # the selection runs at the pure ε the run's total leaves it (docs/lm_privacy.md, section 4)
    eps_selection = part["weight_selection"]["epsilon"]
    assert eps_selection == pytest.approx(lm_counts_stage.selection_epsilon(config), rel=1e-12)
    assert 0 < eps_selection < epsilon
    assert part["weight_selection"]["laplace_scale"] == lm_selection.selection_noise(eps_selection)[0]

    # a retry reuses the file byte for byte (fresh noise would change it) and charges once
    before = path.read_bytes()
    spent = lm_ledger_rows(ctx)
    assert len(spent) == 1 and spent[0]["epsilon"] == pytest.approx(part["privacy"]["charged_epsilon"])
    again = lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(6))
    assert again["reused"] and path.read_bytes() == before
    assert lm_ledger_rows(ctx) == spent
    assert read_parts(ctx)[lm_counts_stage.STAGE] == part


def test_fixed_mix_weight_skips_the_selection(tmp_path, sample_files, monkeypatch):
    def no_selection(*args, **kwargs):
        raise AssertionError("a fixed weight must not score selection users")

    monkeypatch.setattr(lm_selection, "score_selection_users", no_selection)
    ctx = counts_run(tmp_path, sample_files, lm_mix_weight=0.4, lm_unigram_adaptation=0.25)
    lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(8))
    part = read_parts(ctx)[lm_counts_stage.STAGE]
    assert part["mix_weight"] == 0.4 and part["unigram_adaptation"] == 0.25
    assert part["weight_selection"] == {"method": "fixed (configuration)"}
    assert (ctx.release.root / layout.LM_COUNTS).is_file()


def selection_in_run(ctx, salt: int, holdout: int) -> list[str]:
    with ctx.warehouse() as wh:
        sql = load_sql("lm_counts/selection_sentences", schema=ctx.schema)
        rows = wh.con.execute(sql, {"salt": salt, "holdout_per_mille": holdout}).fetchall()
    return sorted({r[0] for r in rows})


def test_whether_the_selection_ran_does_not_depend_on_one_user(tmp_path, sample_files):
    """Neighbours D (no selection user under the stage's salt) and D' = D + one selection user.
    The report's weight_selection part is meant to hold public parameters only: a value in it that
    differs with probability 1 between neighbours breaks ε-DP. (Preconditions raise RuntimeError.)"""
    import gzip
    import json

    holdout_fraction = 0.001  # holdout_per_mille = 1
    users = {}
    with gzip.open(sample_files["users"], "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        users[json.loads(line)["user_id"]] = [["a"]]
    # the stage's salt is the first draw of its noise source: find a seed whose salt selects nobody
    seed = next(
        s
        for s in range(1, 200)
        if not selection_users(users, holdout=1, salt=NoiseSource.seeded_for_tests(s).salt())
    )
    salt = NoiseSource.seeded_for_tests(seed).salt()
    pool = {f"extra{i}": [["a"]] for i in range(20_000)}
    extra = selection_users(pool, holdout=1, salt=salt)[0]

    neighbour = tmp_path / "neighbour"
    neighbour.mkdir()
    users_prime = neighbour / "users.jsonl.gz"
    with gzip.open(users_prime, "wt", encoding="utf-8") as fh:
        fh.write(
            "\n".join([*lines, json.dumps({"user_id": extra, "text": "Ka ki ul vo. Dast pu ka."})]) + "\n"
        )

    parts = []
    for name, files in (("d", sample_files), ("d_prime", {**sample_files, "users": users_prime})):
        ctx = counts_run(tmp_path / name, files, lm_holdout=holdout_fraction)
        lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(seed))
        expected = [] if name == "d" else [extra]
        if selection_in_run(ctx, salt, 1) != expected:
            raise RuntimeError("precondition: the stage's salt did not split the users as planned")
        parts.append(read_parts(ctx)[lm_counts_stage.STAGE]["weight_selection"])
    assert parts[0] == parts[1]


def test_without_a_public_corpus_the_model_says_its_public_part_is_uniform(tmp_path, sample_files):
    """No ``public``: V_LM is the DP vocabulary, P is uniform over it, and the model's description
    (report part, model card) says so instead of naming a public Kneser-Ney model."""
    from dpngram.lm.open_model import MARKERS
    from dpngram.stages import lm as lm_stage

    ctx = counts_run(tmp_path, sample_files, public=False)
    assert ctx.config.public is None
    lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(9))
    lm_stage.run_lm(ctx)
    part = read_parts(ctx)["lm"]
    dp_vocab = {t for t in pq.read_table(ctx.release.root / layout.VOCABULARY)["token"].to_pylist() if t}
    assert part["vocabulary"]["model"] == len(dp_vocab)
    assert "public_corpus" not in part["sources"] and "lm_counts" in part["sources"]
    assert "uniform (no public corpus)" in part["smoothing"] and "Kneser-Ney" not in part["smoothing"]
    card = (ctx.release.root / "model" / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "uniform (no public corpus)" in card and "public Kneser-Ney" not in card
    released_unigrams = [
        r for r in pq.read_table(ctx.release.root / layout.LM_COUNTS).to_pylist() if r["n"] == 1
    ]
    assert {r["ngram"] for r in released_unigrams} == dp_vocab | set(MARKERS)


@pytest.mark.parametrize("cap", [0, 1, 7, 40, 200])
def test_the_domain_keeps_the_most_frequent_ngrams_ties_by_string(cap):
    """most_frequent is the first ``cap`` rows of the counts sorted by (count descending, n-gram),
    with many ties at every boundary (counts 1-4 over 150 n-grams)."""
    rng = random.Random(cap)
    grams = sorted({" ".join(rng.choice("abcdefghij") for _ in range(3)) for _ in range(400)})
    counts = pl.DataFrame({"ngram": grams, "count": [float(rng.randint(1, 4)) for _ in grams]}).sample(
        fraction=1.0, shuffle=True, seed=cap
    )
    expected = counts.sort(["count", "ngram"], descending=[True, False]).head(cap)["ngram"].to_list()
    got = open_model.most_frequent(counts, cap)["ngram"].to_list()
    assert sorted(got) == sorted(expected) and len(got) == min(cap, counts.height)


def test_domain_keys_from_cached_word_codes_equal_the_keys_of_the_strings(tmp_path):
    """build_domain turns the public picks' cached word codes into counting keys by array
    arithmetic; they must be the keys counting_tables derives from the strings, on a first run
    (the picks computed) and on a cache hit, with released k-grams that repeat a pick, that are
    new, and that hold a word outside V_LM (kept in the domain, never counted). Each order lists
    every n-gram once: the picks sorted, then the new k-grams sorted."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(60)]
    lines = [
        " ".join(rng.choice(words[: rng.randint(5, 60)]) for _ in range(rng.randint(1, 12)))
        for _ in range(400)
    ]
    public = tmp_path / "public.txt"
    public.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dp_vocab = ["w1", "w2", "private"]
    plain = lm_counts.build_domain(dp_vocab, str(public), order=3, public_cap=40, domain_cap=30, kgrams={})
    pick = {n: plain.frame.filter(pl.col("n") == n)["ngram"][0] for n in (2, 3)}
    kgrams = {2: [pick[2], "private w1", "w1 nowhere"], 3: [pick[3], "private private w2"]}
    for attempt in ("computed", "cached"):
        domain = lm_counts.build_domain(
            dp_vocab,
            str(public),
            order=3,
            public_cap=40,
            domain_cap=30,
            kgrams=kgrams,
            cache_dir=tmp_path / "cache",
        )
        assert domain.keys is not None and len(domain.keys) == domain.size, attempt
        _, from_codes = lm_counts.counting_tables(domain.vocabulary, domain.frame, domain.keys)
        _, from_strings = lm_counts.counting_tables(domain.vocabulary, domain.frame)
        assert from_codes.equals(from_strings), attempt
        frame = domain.frame
        assert frame["gid"].to_list() == list(range(1, domain.size + 1))
        for n in (2, 3):
            grams = frame.filter(pl.col("n") == n)["ngram"].to_list()
            assert len(grams) == len(set(grams)) == 30 + (2 if n == 2 else 1), (attempt, n)
            assert grams[:30] == sorted(grams[:30]) and set(kgrams[n]) <= set(grams)
        uncounted = set(frame["gid"].to_list()) - set(from_codes["gid"].to_pylist())
        assert frame.filter(pl.col("gid").is_in(list(uncounted)))["ngram"].to_list() == ["w1 nowhere"]
