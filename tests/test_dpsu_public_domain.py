"""The vocabulary's public domain (docs/dpne.md, "The public domain of the vocabulary";
``dpne_public_vocabulary``): from DP-SIPS round 2 on, a held word of the public domain P passes an
eta threshold rho_pub,r = sigma_r Phi^-1(1 - p_r), p_r = share_r eta min{1, N_<r/|P|}, instead of
the DPSU threshold, and every word of P with weight 0 in the round passes with probability p_r.

Privacy argument under test: P is public, so on P the round is the Gaussian mechanism over a fixed
domain (a zero weight is noised like any other: that is what the sampling of unheld words does);
only the added user's non-public unique words are the DPSU's catastrophic items, at the DPSU
threshold as before. Same sigma_r and delta_0r events, so the same (epsilon, delta).

These tests run the real release (:func:`dpngram.mechanisms.dpsu.sips_release` with a
:class:`~dpngram.mechanisms.dpsu.PublicDomain`, SQL and noise) many times. Statistical checks use
Clopper-Pearson bounds at a stated false-failure rate (at most 1e-4 each)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from conftest import sentences_warehouse
from scipy import stats

from dpngram.config import RunConfig
from dpngram.core.accounting import gaussian_delta
from dpngram.core.noise import NoiseSource
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import dpsu
from dpngram.mechanisms.dpsu import (
    PublicDomain,
    public_round_shares,
    public_threshold,
    sips_vocabulary_rounds,
)

SCHEMA = "run_public_domain_test"
FALSE_FAILURE = 1e-4

#: The test mechanism: composed sigma 0.7 over 2 rounds with ratio 1 (sigma_r = 0.99), delta_0 =
#: 1e-3, Delta = 4, and an eta large enough that the public threshold is low and measurable.
SIGMA, DELTA0, DELTA_MAX, ETA = 0.7, 1e-3, 4, 0.5
COMMONS = [f"common{j}" for j in range(6)]  # public words 20 users each hold alone: round 1 releases them
UNHELD = [f"spare{j}" for j in range(3)]  # public words nobody holds
PUBLIC = [*COMMONS, "pub", "mid", *UNHELD]  # |P| = 11 per copy
#: Each release holds this many independent copies of the dataset (disjoint words "w@c" and users):
#: the round-1 release N_1 = 6 COPIES (asserted in every run) is the only quantity the copies
#: share, so given it every copy's events are independent trials of the one-copy mechanism (the
#: public tail is eta min{1, N_1/|P|}, the same ratio as for one copy; Binomial-then-uniform
#: sampling of unheld words releases each independently with that probability).
COPIES = 20


def copied(words: list[str]) -> list[str]:
    return [f"{w}@{c}" for c in range(COPIES) for w in words]


def base_rows() -> list[tuple[str, list[str]]]:
    """D (per copy): the commons (20 holders each), "mid" (public) and "midx" (not public) held by
    2 users each who hold nothing else; "pub" is held by nobody."""
    rows = []
    for c in range(COPIES):
        rows += [(f"c{j}_{i}@{c}", [f"{w}@{c}"]) for j, w in enumerate(COMMONS) for i in range(20)]
        rows += [(f"m{i}@{c}", [f"mid@{c}"]) for i in range(2)] + [
            (f"x{i}@{c}", [f"midx@{c}"]) for i in range(2)
        ]
    return rows


def added_rows() -> list[tuple[str, list[str]]]:
    """D' (per copy): D plus a user who holds only "pub", which nobody in D holds."""
    return [*base_rows(), *((f"added@{c}", [f"pub@{c}"]) for c in range(COPIES))]


def count(out: list[set[str]], word: str) -> int:
    """Trials (run x copy) in which ``word`` was released."""
    return sum(f"{word}@{c}" in s for s in out for c in range(COPIES))


def releases(
    rows, runs: int, noise: NoiseSource, *, sample_unheld: bool = True, flags: list[set[str]] | None = None
) -> list[set[str]]:
    """``runs`` complete vocabulary releases (DP-SIPS, 2 rounds, with the public domain) of the
    sentences ``rows``; each run draws fresh salts and noise. Returns the released sets (and, in
    ``flags``, each run's words released by the public threshold only)."""
    rounds = sips_vocabulary_rounds(SIGMA, DELTA0, DELTA_MAX, 2, 1.0)
    wh = sentences_warehouse(SCHEMA, rows)
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    with wh.registered(public_batch=pa.table({"item": pa.array(copied(PUBLIC), pa.string())})):
        wh.execute(load_sql("dpsu/public_words", schema=SCHEMA, target="public_words", words="public_batch"))
    public = PublicDomain(
        "public_words", len(PUBLIC) * COPIES, ETA, sample_unheld=sample_unheld, public_only=[]
    )
    out = []
    try:
        for _ in range(runs):
            assert public.public_only is not None
            public.public_only.clear()
            dpsu.sips_release(
                wh,
                SCHEMA,
                "src",
                "released",
                rounds=rounds,
                max_contribution=DELTA_MAX,
                noise=noise,
                per_user_lists=True,
                public=public,
            )
            out.append({r[0] for r in wh.con.sql(f"SELECT item FROM {SCHEMA}.released").fetchall()})
            if flags is not None:
                flags.append({w for a in public.public_only for w in a.to_pylist()})
    finally:
        wh.close()
    return out


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(stats.beta.isf(alpha / 2, successes + 1, trials - successes))
    return lo, hi


def round2() -> tuple[float, float, float]:
    """(sigma_2, rho_2 (DPSU), rho_pub,2) of the test mechanism after round 1 released the 6 commons."""
    rnd = sips_vocabulary_rounds(SIGMA, DELTA0, DELTA_MAX, 2, 1.0)[1]
    rho_pub = public_threshold(rnd.sigma, PublicDomain("p", len(PUBLIC), ETA), 1.0, len(COMMONS))
    assert rnd.threshold is not None and rho_pub is not None
    return rnd.sigma, rnd.threshold, rho_pub


# ----------------------------------------------------------------------------------------------
# the threshold rule
# ----------------------------------------------------------------------------------------------
def test_public_threshold_is_the_eta_tail_of_the_round_noise():
    public = PublicDomain("p", 1000, 0.01)
    rho = public_threshold(2.0, public, 1.0, 50)
    assert stats.norm.sf(rho / 2.0) == pytest.approx(0.01 * 50 / 1000, rel=1e-9)
    # more released before round r: a lower threshold, capped at eta itself
    assert public_threshold(2.0, public, 1.0, 500) < rho
    assert public_threshold(2.0, public, 1.0, 5000) == pytest.approx(2.0 * stats.norm.isf(0.01))
    # no reference size, or no domain: no public threshold
    assert public_threshold(2.0, public, 1.0, 0) is None
    assert public_threshold(2.0, PublicDomain("p", 0, 0.01), 1.0, 50) is None
    assert public_round_shares(1) == [0.0]
    assert public_round_shares(3) == [0.0, 0.5, 0.5]


def test_expected_unheld_words_are_at_most_eta_times_the_round_one_release():
    """Over rounds 2..R, sum_r p_r |P| <= eta N_1 whatever N_<r (>= N_1) is."""
    public = PublicDomain("p", 10_000, 0.01)
    shares = public_round_shares(4)
    for n1 in (1, 10, 300, 20_000):
        total = sum(
            stats.norm.sf(public_threshold(1.0, public, shares[r], n1 * (r + 1)) / 1.0) * public.size
            for r in range(1, 4)
        )
        assert total <= 0.01 * max(n1 * 4, 1) + 1e-9
        assert total <= 0.01 * public.size + 1e-9


def test_configuration_enables_the_domain_only_where_it_applies(tmp_path):
    from dpngram.stages.vocabulary import uses_public_domain

    public = tmp_path / "public.txt"
    public.write_text("a b c\n", encoding="utf-8")
    base = {"input": str(tmp_path / "in.jsonl"), "out": str(tmp_path / "out")}
    assert RunConfig.build(**base, public=str(public)).dpne.public_vocabulary == 100_000
    assert uses_public_domain(RunConfig.build(**base, public=str(public)))
    assert not uses_public_domain(RunConfig.build(**base))  # no public corpus
    assert not uses_public_domain(RunConfig.build(**base, public=str(public), dpne_public_vocabulary=0))
    assert not uses_public_domain(RunConfig.build(**base, public=str(public), dpsu_sips_rounds=1))
    assert not uses_public_domain(RunConfig.build(**base, public=str(public), dpsu_policy="weighted"))


# ----------------------------------------------------------------------------------------------
# the release, run for real
# ----------------------------------------------------------------------------------------------
RUNS = 25  # releases per dataset; x COPIES = 500 trials


def check_round_one(out: list[set[str]]) -> None:
    """Every run released all commons in round 1 (20 users each, far above rho_1), so N_1 = 6 COPIES
    and round 2's public tail is p = eta min{1, 6/11} in every run."""
    assert all(set(copied(COMMONS)) <= s for s in out)


@pytest.mark.statistical
def test_words_that_passed_the_public_threshold_only_do_not_seed_kgrams(secure_noise):
    """The public-only flag is a post-processing of the same noisy weight: a released "mid"
    (weight 2) is flagged when its noisy weight is at most the DPSU threshold rho_2, i.e. with
    probability [Phi((rho_2 - 2)/sigma_2) - Phi((rho_pub - 2)/sigma_2)] / sf((rho_pub - 2)/sigma_2)
    given a round-2 release (round 1 releases it with probability below 1e-3: ignored in the band by
    widening it by that much); a released unheld word is flagged unless its conditional noisy
    weight exceeds rho_2 (probability below 1e-4). Non-public and round-1 words are never flagged.
    Two-sided, false failure 1e-4."""
    flags: list[set[str]] = []
    out = releases(base_rows(), RUNS, secure_noise, flags=flags)
    sigma, rho, rho_pub = round2()
    assert all(f <= s for f, s in zip(flags, out, strict=True))
    assert not any(f & set(copied([*COMMONS, "midx"])) for f in flags)
    released_mid = count(out, "mid")
    flagged_mid = sum(f"mid@{c}" in f for f in flags for c in range(COPIES))
    a, b = stats.norm.cdf((rho - 2.0) / sigma), stats.norm.cdf((rho_pub - 2.0) / sigma)
    expected = (a - b) / (1 - b)
    lo, hi = clopper_pearson(flagged_mid, released_mid, FALSE_FAILURE)
    assert lo - 1e-3 <= expected <= hi + 1e-3
    unheld = sum(count(out, w) for w in ("pub", *UNHELD))
    flagged_unheld = sum(f"{w}@{c}" in f for f in flags for w in ("pub", *UNHELD) for c in range(COPIES))
    assert unheld > 0 and flagged_unheld == unheld


@pytest.mark.statistical
def test_unheld_public_words_are_released_at_the_public_tail(secure_noise):
    """Under D the 4 unheld public words of each copy ("pub" and the spares) are released
    Binomial(4 trials, p) times in all (round 1 adds a probability below 1e-6, negligible here).
    "mid" (public, weight 2) and "midx" (same weight, not public) are released at their closed-form
    rates: round 1 at the DPSU threshold, then round 2 at rho_pub (over 0.9) and at the DPSU
    threshold (under 0.1). Two-sided, false failure 1e-4 each."""
    out = releases(base_rows(), RUNS, secure_noise)
    check_round_one(out)
    trials = RUNS * COPIES
    sigma, rho, rho_pub = round2()
    p = ETA * len(COMMONS) / len(PUBLIC)
    assert stats.norm.sf(rho_pub / sigma) == pytest.approx(p)
    hits = sum(count(out, w) for w in ("pub", *UNHELD))
    lo, hi = clopper_pearson(hits, 4 * trials, FALSE_FAILURE)
    assert lo <= p <= hi
    first = sips_vocabulary_rounds(SIGMA, DELTA0, DELTA_MAX, 2, 1.0)[0]
    assert first.threshold is not None
    in_round_1 = stats.norm.sf((first.threshold - 2.0) / first.sigma)
    for word, cut in (("mid", rho_pub), ("midx", rho)):
        expected = 1 - (1 - in_round_1) * stats.norm.cdf((cut - 2.0) / sigma)
        lo, hi = clopper_pearson(count(out, word), trials, FALSE_FAILURE)
        assert lo <= expected <= hi, word
    assert stats.norm.sf((rho_pub - 2.0) / sigma) > 0.9 > 0.1 > stats.norm.sf((rho - 2.0) / sigma)


def _violation(p_in: tuple[int, int], p_out: tuple[int, int], alpha: float) -> float:
    """How far the counts exceed P_out <= e^eps P_in + delta_G(eps) + delta_0 (the claim) for the
    worst eps of a grid: the lower confidence bound of the left side minus the upper bound of the
    right side (> 0: a detected violation)."""
    lo_out, _ = clopper_pearson(*p_out, 2 * alpha)
    _, hi_in = clopper_pearson(*p_in, 2 * alpha)
    return max(
        lo_out - (math.exp(eps) * hi_in + gaussian_delta(eps, SIGMA) + DELTA0) for eps in (0.25, 0.5, 1, 2, 3)
    )


@pytest.mark.statistical
def test_neighbouring_datasets_pass_and_skipping_the_unheld_words_fails(secure_noise):
    """D' adds (per copy) a user who holds only "pub", a public word nobody in D holds. The event
    "pub is released" must satisfy the claimed (epsilon', delta_G(epsilon') + delta_0) bound both
    ways for every epsilon' of a grid (Bonferroni over 2 directions x 2 bounds; false failure 1e-4).
    The deliberately broken variant that does not release unheld public words fails the same check:
    under D "pub" is then (almost) never released, under D' with probability
    Phi((1 - rho_pub)/sigma_2) (about 0.69), far above any delta the claim allows. Designed on the
    closed forms: correct margin above 0.2 at every epsilon', broken violation about 0.6 (at
    epsilon' = 3: delta_G = 0.034 and e^3 times the upper bound of 0/500), both beyond the CP
    widths at 500 trials."""
    alpha = FALSE_FAILURE / 4
    trials = RUNS * COPIES
    without, added = releases(base_rows(), RUNS, secure_noise), releases(added_rows(), RUNS, secure_noise)
    check_round_one(without)
    check_round_one(added)
    d, d2 = count(without, "pub"), count(added, "pub")
    assert _violation((d, trials), (d2, trials), alpha) <= 0
    assert _violation((d2, trials), (d, trials), alpha) <= 0
    assert d2 > d  # the added user does move the event (the check is not vacuous)
    broken_d = count(releases(base_rows(), RUNS, secure_noise, sample_unheld=False), "pub")
    broken_d2 = count(releases(added_rows(), RUNS, secure_noise, sample_unheld=False), "pub")
    assert _violation((broken_d, trials), (broken_d2, trials), alpha) > 0


@pytest.mark.statistical
def test_a_run_without_a_round_one_release_uses_the_dpsu_threshold_only(secure_noise):
    """Nothing released in round 1 (no reference size): round 2 thresholds every word at the DPSU
    threshold and releases no unheld public word. One user holding one non-public word: round 1
    releases it with probability at most delta_01 = 5e-4 (then round 2 may release unheld words,
    about 0.18 of them in expectation), so a run fails with probability under 1e-4 and the 10 runs
    under 1e-3 (1e-6 with the statistical re-run)."""
    out = releases([("solo", ["solo@0"])], 10, secure_noise)
    assert not any(s & set(copied(["pub", *UNHELD, *COMMONS])) for s in out)


# ----------------------------------------------------------------------------------------------
# the stage: released flags, seeds of the k-gram levels, restore from the released files
# ----------------------------------------------------------------------------------------------
def test_stage_releases_the_seed_flag_and_seeds_the_levels_without_public_only_words(tmp_path):
    """A whole dpne run at a large epsilon with a public corpus: 60 users hold "a b", 60 "c d"
    (public words, released in round 1), and each of the public words "e".."l" is held by 2
    users. At eps 8 with 2 rounds, sigma_2 is small enough that 2 users clear rho_pub but not the
    DPSU threshold: those words are released with kgram_seed false, the level tables are built
    from the seeds only, so no bigram with them can be released, and a retry in a fresh warehouse
    rebuilds the same seeds from the released file."""
    import pyarrow.parquet as pq
    from conftest import create_sentences

    from dpngram.mechanisms import dpne as dpne_mechanism
    from dpngram.release import layout
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages import dpne as dpne_stage
    from dpngram.stages import vocabulary as vocabulary_stage

    rare = list("efghijkl")
    public = tmp_path / "public.txt"
    public.write_text("a b c d " + " ".join(rare) + " m n o\n", encoding="utf-8")
    rows = [(f"u{i}", ["a", "b"]) for i in range(60)] + [(f"v{i}", ["c", "d"]) for i in range(60)]
    rows += [(f"r{w}{i}", [w, w]) for w in rare for i in range(2)]
    config = RunConfig.build(
        input=str(tmp_path / "in.jsonl"),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        memory_limit="1GB",
        public=str(public),
        stage_budget={"dpne": 1.0},
        epsilon=8.0,
        delta=1e-5,
        max_n=2,
        eta=0.5,
    )
    ctx = RunContext(prepare(config))
    with ctx.warehouse() as wh:
        create_sentences(wh, ctx.schema, rows)
    vocabulary_stage.run_vocabulary(ctx)
    vocab = pq.read_table(ctx.release.root / layout.VOCABULARY)
    flags = dict(zip(vocab.column("token").to_pylist(), vocab.column("kgram_seed").to_pylist(), strict=True))
    assert {"a", "b", "c", "d"} <= {w for w, seed in flags.items() if seed}
    public_only = {w for w, seed in flags.items() if not seed}
    assert public_only and public_only <= set(rare) | {"m", "n", "o"}
    part = json.loads((ctx.release.root / "report.parts" / "dpne.k1.json").read_text(encoding="utf-8"))
    assert part["public_domain"]["released_public_only"] == len(public_only)
    seeds = sum(flags.values())
    with ctx.warehouse() as wh:
        assert dpne_mechanism.level_size(wh, ctx.schema, 1) == seeds
    dpne_stage.run_level(ctx, 2)
    bigrams = pq.read_table(ctx.release.root / layout.level_path(2)).column("ngram").to_pylist()
    assert not any(set(b.split(" ")) & public_only for b in bigrams)
    # a fresh warehouse (a retried task elsewhere) rebuilds the level-1 tables from the file
    with ctx.warehouse() as wh:
        wh.drop(ctx.schema, dpne_mechanism.level_table(1))
        dpne_stage._ensure_level_state(wh, ctx, 1)
        assert dpne_mechanism.level_size(wh, ctx.schema, 1) == seeds
