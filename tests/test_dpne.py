"""DPNE k-gram levels (Kim et al. 2021, Alg. 1; supplement Alg. 1-4): valid-gram counting and
sampling, spurious-k-gram statistics for the exact and scalable variants, downward closure,
keys-only outputs, stage contracts, retries and baselines.

Statistical checks use bands at a stated false-failure rate (FALSE_FAILURE per check)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import create_sentences, sentences_warehouse
from dpne_steps import run_dpne
from scipy import stats

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant, PrivacyEvent, dpne_sigmas
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.engines.duckdb import Warehouse
from dpngram.mechanisms import dpne, dpne_domain
from dpngram.release import layout
from dpngram.release.context import RunContext, read_parts
from dpngram.release.publish import prepare
from dpngram.stages import dpne as dpne_stage
from dpngram.stages import vocabulary as vocabulary_stage

SCHEMA = "run_dpne_test"
FALSE_FAILURE = 1e-4
Z = float(stats.norm.isf(FALSE_FAILURE / 2))  # two-sided normal band


# ----------------------------------------------------------------------------------------------
# fixtures and helpers
# ----------------------------------------------------------------------------------------------
def markov_corpus(
    seed: int,
    users: int,
    vocab: int = 8,
    successors: int = 3,
    sentences: int = 1,
    length: tuple[int, int] = (4, 7),
) -> list[tuple[str, list[str]]]:
    """Synthetic sentences from a sparse Markov chain (each token has few successors), so that
    many valid k-grams are held by nobody. Non-private randomness: simulation_rng."""
    rng = simulation_rng(seed)
    nxt = {i: rng.choice(vocab, size=successors, replace=False) for i in range(vocab)}
    rows = []
    for u in range(users):
        for _ in range(sentences):
            tok = int(rng.integers(vocab))
            sent = [tok]
            for _ in range(int(rng.integers(length[0], length[1] + 1)) - 1):
                tok = int(rng.choice(nxt[tok]))
                sent.append(tok)
            rows.append((f"user{u}", [f"w{t}" for t in sent]))
    return rows


def corpus_grams(rows, k: int) -> set[str]:
    return {" ".join(toks[i : i + k]) for _, toks in rows for i in range(len(toks) - k + 1)}


def make_warehouse(rows) -> Warehouse:
    return sentences_warehouse(SCHEMA, rows)


def install_levels(wh: Warehouse, tmp_path, levels: dict[int, set[str]], pruning: str = "both") -> None:
    """Install fixed released sets S_1.. (as if released) through the restore path."""
    wh.con.register("s1_list", pa.table({"item": sorted(levels[1])}))
    wh.con.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.s1_items AS SELECT item FROM s1_list")
    wh.con.unregister("s1_list")
    dpne_domain.install_vocabulary(wh, SCHEMA, "s1_items")
    for k in sorted(levels)[1:]:
        path = tmp_path / f"level{k}.parquet"
        pq.write_table(
            pa.table({"k": pa.array([k] * len(levels[k]), pa.int32()), "ngram": sorted(levels[k])}), path
        )
        dpne.restore_level(wh, SCHEMA, k, pruning, path)


def brute_valid(s1: set[str], prev: set[str], k: int, pruning: str) -> set[str]:
    """V_k by definition: (S_1 x S_(k-1)) n (S_(k-1) x S_1), or S_(k-1) x S_1."""
    out = set()
    for g in prev:
        for t in s1:
            w = f"{g} {t}"
            toks = w.split(" ")
            if pruning == "single" or (" ".join(toks[1:]) in prev and toks[0] in s1):
                out.add(w)
    return out


def key_to_ngram(wh: Warehouse, k: int, pruning: str):
    """Map level-k keys to n-gram strings using the (public) level tables."""
    prev = dict(wh.con.sql(f"SELECT gid, ngram FROM {SCHEMA}.dpne_s{k - 1}").fetchall())
    right = (
        prev if pruning == "both" else dict(wh.con.sql(f"SELECT gid, ngram FROM {SCHEMA}.dpne_s1").fetchall())
    )

    def name(key: int) -> str:
        left, r = int(key) >> 32, int(key) & 0xFFFFFFFF
        return f"{prev[left]} {right[r].split(' ')[-1]}"

    return name


def make_context(tmp_path, rows, **overrides) -> RunContext:
    settings = {
        "epsilon": 20.0,
        "delta": 1e-3,
        "max_n": 4,
        "max_contribution": 20,
        "eta": 0.5,
        "memory_limit": "1GB",
        "stage_budget": {"dpne": 1.0},  # the DPNE steps alone, with the run's whole budget
        **overrides,
    }
    config = RunConfig.build(
        input=str(tmp_path / "in.jsonl"),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        **settings,
    )
    ctx = RunContext(prepare(config))
    with ctx.warehouse() as wh:
        create_sentences(wh, ctx.schema, rows)
    return ctx


def released(ctx: RunContext) -> dict[int, set[str]]:
    vocab = pq.read_table(ctx.release.root / layout.VOCABULARY).column("token").to_pylist()
    out = {1: set(vocab)} | {k: set() for k in range(2, ctx.config.dpne.max_n + 1)}
    table = pq.read_table(ctx.release.root / layout.KGRAMS).to_pylist()
    for row in table:
        out.setdefault(row["k"], set()).add(row["ngram"])
    return out


# ----------------------------------------------------------------------------------------------
# |V_k|, the valid-gram index, EstimateValidKgrams
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pruning", ["both", "single"])
def test_valid_count_and_index_match_the_definition(tmp_path, secure_noise, pruning):
    rows = markov_corpus(1, users=15, vocab=7)
    s1 = {t for _, toks in rows for t in toks} | {"lonely"}
    s2 = set(sorted(corpus_grams(rows, 2))[::2]) | {"lonely w1"}  # an arbitrary released S_2
    wh = make_warehouse(rows)
    install_levels(wh, tmp_path, {1: s1, 2: s2}, pruning)
    for k, prev in ((2, s1), (3, s2)):
        expected = brute_valid(s1, prev, k, pruning)
        assert dpne_domain.count_valid_kgrams(wh, SCHEMA, k, pruning) == len(expected)
        inputs = dpne.prepare_level(wh, SCHEMA, k, pruning=pruning, max_contribution=50, noise=secure_noise)
        index = dpne_domain.valid_kgram_index(wh, SCHEMA, inputs)
        keys = index.keys(np.arange(index.size))
        name = key_to_ngram(wh, k, pruning)
        assert index.size == inputs.valid == len(expected)
        assert np.unique(keys).size == keys.size  # a bijection
        assert {name(x) for x in keys} == expected
        # the histogram's support is exactly the valid k-grams some user holds
        support = {name(x) for (x,) in wh.con.sql(f"SELECT item FROM {SCHEMA}.{inputs.histogram}").fetchall()}
        assert support == corpus_grams(rows, k) & expected
        dpne.drop_level_inputs(wh, SCHEMA, inputs)


@pytest.mark.statistical
def test_estimate_valid_kgrams_is_unbiased(tmp_path, secure_noise):
    """Supplement Alg. 2: count ~ Binomial(N, |V_k| / (|S_1||S_(k-1)|)); band at 1e-4."""
    rows = markov_corpus(2, users=20, vocab=8)
    s1 = {t for _, toks in rows for t in toks}
    s2 = corpus_grams(rows, 2)
    wh = make_warehouse(rows)
    install_levels(wh, tmp_path, {1: s1, 2: s2})
    exact = dpne_domain.count_valid_kgrams(wh, SCHEMA, 3, "both")
    p = 0.5
    draws = int(np.ceil(p * len(s1) * len(s2)))
    q = exact / (len(s1) * len(s2))
    total = sum(
        round(dpne_domain.estimate_valid_kgrams(wh, SCHEMA, 3, "both", p, secure_noise) * p)
        for _ in range(50)
    )
    lo, hi = (
        stats.binom.ppf(FALSE_FAILURE / 2, 50 * draws, q),
        stats.binom.isf(FALSE_FAILURE / 2, 50 * draws, q),
    )
    assert lo <= total <= hi
    assert dpne_domain.estimate_valid_kgrams(wh, SCHEMA, 2, "both", p, secure_noise) == len(s1) ** 2


# ----------------------------------------------------------------------------------------------
# Spurious k-grams: exact vs scalable (Prop. 2.2; supplement Alg. 1)
# ----------------------------------------------------------------------------------------------
@pytest.mark.statistical
@pytest.mark.parametrize("k", [2, 3])
def test_spurious_kgrams_exact_and_scalable_match_theory(tmp_path, secure_noise, k):
    """For both variants, over R runs:
    * #spurious ~ Binomial(R |V_k \\ supp(H_k)|, Phi(-rho/sigma)) (Prop. 2.2, exact in law);
    * the output size has the mean and variance computed from the weights, and the two
      variants' totals agree (two-sample z-test);
    * every zero-weight valid k-gram is released with the same probability: chi-square over
      V_k \\ supp(H_k) (two-sided, per-run indicators are i.i.d. Bernoulli(p) in law);
    * held k-grams are released at exactly their threshold rate (none re-added as spurious);
    * every released key is valid and distinct.
    Each check has false-failure rate <= 1e-4."""
    rows = markov_corpus(3, users=12, vocab=8)
    levels = {1: {t for _, toks in rows for t in toks}}
    if k == 3:
        levels[2] = corpus_grams(rows, 2)
    wh = make_warehouse(rows)
    install_levels(wh, tmp_path, levels)
    inputs = dpne.prepare_level(wh, SCHEMA, k, pruning="both", max_contribution=100, noise=secure_noise)
    valid = set(dpne_domain.valid_kgram_index(wh, SCHEMA, inputs).keys(np.arange(inputs.valid)).tolist())
    weights = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.{inputs.histogram}").fetchall())
    zero = sorted(valid - set(weights))
    m = len(zero)
    assert m >= 20 and set(weights) <= valid
    sigma, p = 1.0, 0.15
    rho = sigma * float(stats.norm.isf(p))
    q = stats.norm.sf((rho - np.array(list(weights.values()))) / sigma)
    assert 1 < q.sum() < len(q) - 1  # some held k-grams fail the threshold
    mean = q.sum() + m * p
    var = (q * (1 - q)).sum() + m * p * (1 - p)
    runs = 250
    totals = {}
    for variant in ("exact", "scalable"):
        hits = dict.fromkeys(zero, 0)
        spurious = size = held = 0
        for _ in range(runs):
            keys = dpne.draw_level_keys(
                wh, SCHEMA, inputs, sigma=sigma, rho=rho, variant=variant, noise=secure_noise
            )
            assert np.unique(keys).size == keys.size and set(keys.tolist()) <= valid
            size += keys.size
            for key in keys.tolist():
                if key in weights:
                    held += 1
                else:
                    hits[key] += 1
                    spurious += 1
        n = runs * m
        assert (
            stats.binom.ppf(FALSE_FAILURE / 2, n, p) <= spurious <= stats.binom.isf(FALSE_FAILURE / 2, n, p)
        ), variant
        assert abs(size - runs * mean) <= Z * np.sqrt(runs * var), variant
        # held k-grams are released at their own rate only: a sampler that excluded only the
        # released k-grams (not supp(H_k)) would re-add failed held ones as "spurious"
        assert abs(held - runs * q.sum()) <= Z * np.sqrt(runs * (q * (1 - q)).sum()), variant
        counts = np.array(list(hits.values()), dtype=float)
        chi2 = float(((counts - runs * p) ** 2).sum() / (runs * p * (1 - p)))
        assert stats.chi2.ppf(FALSE_FAILURE / 2, m) <= chi2 <= stats.chi2.isf(FALSE_FAILURE / 2, m), variant
        totals[variant] = size
    assert abs(totals["exact"] - totals["scalable"]) <= Z * np.sqrt(2 * runs * var)


def test_scalable_variant_extremes(tmp_path, secure_noise):
    """When every zero-weight valid k-gram passes (p = 1) the scalable variant outputs exactly
    V_k, each once; when nothing can pass it outputs nothing."""
    rows = markov_corpus(4, users=10, vocab=6)
    wh = make_warehouse(rows)
    install_levels(wh, tmp_path, {1: {t for _, toks in rows for t in toks}})
    inputs = dpne.prepare_level(wh, SCHEMA, 2, pruning="both", max_contribution=100, noise=secure_noise)
    valid = set(dpne_domain.valid_kgram_index(wh, SCHEMA, inputs).keys(np.arange(inputs.valid)).tolist())
    keys = dpne.draw_level_keys(
        wh, SCHEMA, inputs, sigma=1e-9, rho=-1e-3, variant="scalable", noise=secure_noise
    )
    assert set(keys.tolist()) == valid and keys.size == len(valid)
    keys = dpne.draw_level_keys(
        wh, SCHEMA, inputs, sigma=1e-9, rho=1e3, variant="scalable", noise=secure_noise
    )
    assert keys.size == 0


# ----------------------------------------------------------------------------------------------
# Stage functions: closure, keys-only output, no structural tell, accounting, retries
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pruning,variant", [("both", "exact"), ("both", "scalable"), ("single", "exact"), ("single", "scalable")]
)
def test_release_is_closed_and_has_no_structural_tell(tmp_path, pruning, variant):
    """Prop. 2.1: both-side releases are downward closed (both (k-1)-subgrams and all tokens
    released); single-side releases are prefix-closed with the last token in S_1. The structural
    features an analyst can compute from the release are the same for spurious and real
    k-grams (ground truth known only to the test)."""
    rows = markov_corpus(5, users=60, vocab=12, sentences=2)
    ctx = make_context(tmp_path, rows, pruning=pruning, dpne_variant=variant)
    run_dpne(ctx)
    s = released(ctx)
    spurious_total = 0
    for k in range(2, 5):
        truth = corpus_grams(rows, k)
        features = {"real": set(), "spurious": set()}
        for gram in s[k]:
            toks = gram.split(" ")
            left, right = " ".join(toks[:-1]), " ".join(toks[1:])
            feats = (
                left in s[k - 1],
                right in s[k - 1],
                toks[0] in s[1],
                toks[-1] in s[1],
                all(t in s[1] for t in toks),
            )
            features["real" if gram in truth else "spurious"].add(feats)
            assert left in s[k - 1] and toks[-1] in s[1]
            if pruning == "both":
                assert right in s[k - 1] and all(t in s[1] for t in toks)
                assert set(
                    itertools.chain.from_iterable(
                        (" ".join(toks[i : i + j]) for i in range(k - j + 1)) for j in range(1, k)
                    )
                ) <= set().union(*s.values())
        spurious_total += sum(g not in truth for g in s[k])
        if pruning == "both":
            assert features["spurious"] <= {(True,) * 5} and features["real"] <= {(True,) * 5}
    assert spurious_total > 0  # eta = 0.5: expected spurious count is large, so the check bites
    assert s[1] <= {t for _, toks in rows for t in toks}  # no spurious 1-grams (Prop. 2.2)


def test_outputs_are_keys_only_and_sorted(tmp_path):
    rows = markov_corpus(6, users=40, vocab=8)
    ctx = make_context(tmp_path, rows, max_n=3)
    out = run_dpne(ctx)
    root = ctx.release.root
    vocab = pq.read_table(root / layout.VOCABULARY)
    kgrams = pq.read_table(root / layout.KGRAMS)
    assert vocab.schema.names == ["token", "kgram_seed"] and vocab.schema.field("token").type == pa.string()
    assert vocab.schema.field("kgram_seed").type == pa.bool_()
    assert all(vocab.column("kgram_seed").to_pylist())  # no public domain: every word seeds k-grams
    assert kgrams.schema.names == ["k", "ngram"]
    assert kgrams.schema.field("k").type == pa.int32() and kgrams.schema.field("ngram").type == pa.string()
    rows_out = [(r["k"], r["ngram"]) for r in kgrams.to_pylist()]
    assert rows_out == sorted(rows_out) and len(set(rows_out)) == len(rows_out)
    assert {k for k, _ in rows_out} <= {2, 3}
    for k in (2, 3):
        level = pq.read_table(root / layout.level_path(k))
        assert level.schema.names == ["k", "ngram"]
        assert sorted(level.column("ngram").to_pylist()) == [g for kk, g in rows_out if kk == k]
    assert out["released_rows"] == {"vocabulary": vocab.num_rows, "kgrams": kgrams.num_rows}
    # the report parts carry public facts only: no weights, supports or spurious counts
    for k in (2, 3):
        part = read_parts(ctx)[f"dpne.k{k}"]
        assert set(part) >= {"k", "released", "valid", "sigma", "rho", "variant"}
        keys = _all_keys(part)
        assert not any(word in key for key in keys for word in ("support", "spurious", "weight")), keys
        assert part["policy"] == ctx.config.dpne.policy  # a policy's name may say 'weighted': not a weight


def _all_keys(value) -> set[str]:
    """Every key of a nested JSON-like value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _all_keys(v)}
    return set()


def test_theorem_2_1_accounting(tmp_path):
    """The composed spend of all levels + the DPSU (0, delta/2) part is (eps, delta) (Thm. 2.1),
    and the ledger's incremental charges add up to it."""
    for decay in (0.7, 1.0, 1.4):
        _, sigmas = dpne_sigmas(4.0, 1e-7, 5, decay)
        events = [
            PrivacyEvent(stage=f"dpne.k{k + 1}", mechanism="gaussian", sigma=s) for k, s in enumerate(sigmas)
        ]
        events.append(PrivacyEvent(stage="dpne.k1", mechanism="approx", delta=0.5e-7))
        assert Accountant(events).total_epsilon(1e-7) == pytest.approx(4.0, rel=1e-6)
    rows = markov_corpus(7, users=30, vocab=6)
    ctx = make_context(tmp_path, rows, epsilon=3.0, delta=1e-4, max_n=4, sigma_decay=0.8)
    run_dpne(ctx)
    summary = read_parts(ctx)["dpne.kgrams"]
    assert summary["composed_epsilon"] == pytest.approx(3.0, rel=1e-6)
    with ctx.ledger() as ledger:
        spent_eps, spent_delta = ledger.spent(ctx.config.dataset, ctx.run_id)
    assert spent_eps == pytest.approx(3.0, rel=1e-6)
    assert spent_delta <= 1e-4 * (1 + 1e-9)


def test_empty_previous_level_still_charges(tmp_path):
    """If S_(k-1) is empty, S_k is empty; the level is still charged (Thm. 2.1 composes all T)."""
    rows = [(f"u{i}", [f"only{i}"]) for i in range(20)]  # every token unique: P(any released) <= 1e-7
    ctx = make_context(tmp_path, rows, epsilon=1.0, delta=1e-8, max_n=3)
    run_dpne(ctx)
    parts = read_parts(ctx)
    for k in (1, 2, 3):
        assert parts[f"dpne.k{k}"]["released"] == 0
    assert parts["dpne.k2"]["valid"] == 0 and parts["dpne.k2"]["rho"] is None
    assert parts["dpne.kgrams"]["composed_epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert pq.read_table(ctx.release.root / layout.KGRAMS).num_rows == 0


def test_seeded_runs_are_reproducible(tmp_path):
    rows = markov_corpus(8, users=50, vocab=10, sentences=2)
    for variant in ("exact", "scalable"):
        outputs = []
        for name in ("a", "b"):
            ctx = make_context(tmp_path / variant / name, rows, dpne_variant=variant)
            run_dpne(ctx, noise=NoiseSource.seeded_for_tests(99))
            outputs.append(
                (
                    pq.read_table(ctx.release.root / layout.VOCABULARY),
                    pq.read_table(ctx.release.root / layout.KGRAMS),
                )
            )
        assert outputs[0][0].equals(outputs[1][0]) and outputs[0][1].equals(outputs[1][1])
        assert outputs[0][1].num_rows > 0


def test_retry_reuses_and_restore_rebuilds_private_state(tmp_path):
    """A retried level reuses its persisted output; a level whose predecessor's private tables
    are gone rebuilds them from the released files and gives the same result."""
    rows = markov_corpus(9, users=50, vocab=10, sentences=2)
    outputs = []
    for name, wipe in (("kept", False), ("wiped", True)):
        ctx = make_context(tmp_path / name, rows, max_n=3)
        vocabulary_stage.run_vocabulary(ctx, noise=NoiseSource.seeded_for_tests(5))
        first = dpne_stage.run_level(ctx, 2, noise=NoiseSource.seeded_for_tests(6))
        again = dpne_stage.run_level(ctx, 2, noise=NoiseSource.seeded_for_tests(7))
        assert not first["reused"] and again["reused"] and again["released_rows"] == first["released_rows"]
        if wipe:
            with ctx.warehouse() as wh:
                wh.drop_run_schema(ctx.run_id)
                wh.run_schema(ctx.run_id)
                create_sentences(wh, ctx.schema, rows)
        dpne_stage.run_level(ctx, 3, noise=NoiseSource.seeded_for_tests(8))
        outputs.append(pq.read_table(ctx.release.root / layout.level_path(3)))
    assert outputs[0].equals(outputs[1])


def test_parameter_validation(tmp_path):
    rows = markov_corpus(10, users=5)
    ctx = make_context(tmp_path, rows, max_n=3)
    for bad in (1, 13, "3", 2.0):
        with pytest.raises(ConfigError, match="k: must be an integer"):
            dpne_stage.run_level(ctx, bad)
    assert dpne_stage.run_level(ctx, 4) == {"skipped": True, "k": 4}
    with pytest.raises(ConfigError, match="vocabulary"):
        dpne_stage.run_level(ctx, 2)
    vocabulary_stage.run_vocabulary(ctx)
    with pytest.raises(ConfigError, match="level 2 must be released"):
        dpne_stage.run_level(ctx, 3)
    with pytest.raises(ConfigError, match="levels not released"):
        dpne_stage.finalize_kgrams(ctx)
    with pytest.raises(ConfigError, match="method"):
        dpne_stage.run_baseline(ctx, "dpsu-some")
    with pytest.raises(ConfigError, match="k: dpsu-single"):
        dpne_stage.run_baseline(ctx, "dpsu-single", k=9)
    with pytest.raises(ConfigError, match="already spent"):
        dpne_stage.run_baseline(ctx, "dpsu-all")
    with pytest.raises(ConfigError, match="dpne_variant"):
        dpne.choose_variant("fast", 10, 5)
    with pytest.raises(ConfigError, match="eta"):
        dpne.level_threshold(1.0, 1.5, 3, 10)
    wh = make_warehouse(rows)
    install_levels(wh, tmp_path, {1: {"w1", "w2"}})
    with pytest.raises(ConfigError, match="pruning"):
        dpne.prepare_level(wh, SCHEMA, 2, pruning="left", max_contribution=5, noise=NoiseSource.secure())
    with pytest.raises(ConfigError, match="valid_count"):
        dpne.prepare_level(
            wh, SCHEMA, 2, pruning="both", max_contribution=5, noise=NoiseSource.secure(), valid_count="guess"
        )


def test_level_threshold_controls_expected_spurious():
    """rho_k makes the expected number of spurious k-grams <= eta min{|S_(k-1)|, |V_k|} (§2)."""
    for prev, valid in ((10, 5), (10, 1000), (1, 1)):
        rho = dpne.level_threshold(2.0, 0.05, prev, valid)
        assert valid * stats.norm.sf(rho / 2.0) == pytest.approx(0.05 * min(prev, valid))
    assert dpne.level_threshold(2.0, 0.05, 0, 0) is None


@pytest.mark.parametrize("method,k", [("dpsu-all", None), ("dpsu-even", None), ("dpsu-single", 2)])
def test_baselines(tmp_path, method, k):
    rows = markov_corpus(11, users=80, vocab=6)
    ctx = make_context(tmp_path, rows, epsilon=4.0, delta=1e-4, max_n=3, max_contribution=10)
    out = dpne_stage.run_baseline(ctx, method, k)
    table = pq.read_table(ctx.release.root / f"released/baseline_{method}.parquet")
    assert table.schema.names == ["k", "ngram"] and out["released_rows"] == table.num_rows > 0
    pairs = [(r["k"], r["ngram"]) for r in table.to_pylist()]
    assert pairs == sorted(pairs)
    lengths = {kk for kk, _ in pairs}
    assert lengths <= ({k} if k else {1, 2, 3})
    for kk, gram in pairs:  # DPSU never outputs an n-gram nobody holds
        assert len(gram.split(" ")) == kk and gram in corpus_grams(rows, kk)
    part = read_parts(ctx)["dpne"]
    assert part["method"] == method
    assert part["privacy"]["epsilon"] == pytest.approx(4.0, rel=1e-6)  # whole dpne budget
    with pytest.raises(ConfigError, match="already spent"):
        dpne_stage.run_baseline(ctx, "dpsu-all" if method != "dpsu-all" else "dpsu-even")
