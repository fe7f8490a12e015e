"""LDP TrieHH stage (pipeline/triehh.py): local datasets in SQL (known vocabulary, alphabet and
length rules, learned words of earlier passes), disjoint user groups, the local samplers, the
protocol end to end on a generated corpus with planted OOV words, the vocabulary hook, the GX
suite, configuration errors and retry safety. Privacy checks live in tests/test_triehh_privacy.py.

False-failure rates: the chi-square sampler test fails by chance with probability <= 1e-4; the
end-to-end recovery test fails by chance with probability < 1e-4 (derivation at the test).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.core.noise import simulation_rng
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import add_token_ids
from dpngram.mechanisms import triehh
from dpngram.orchestration.plan import release_steps
from dpngram.release import layout
from dpngram.release.context import RunContext, read_parts
from dpngram.release.publish import prepare
from dpngram.stages import ingest as ingest_stage
from dpngram.stages import triehh as triehh_stage
from dpngram.stages import validate as validate_stage
from dpngram.stages import vocabulary as vocabulary_stage
from dpngram.text import public as public_text

SCHEMA = "run_triehh_test"
PLANTED = ["zorblax", "quibbit", "frobnic"]
COMMON = ["the", "cat", "sat", "on", "mat", "and", "dog"]


def params(**kw) -> triehh.TrieParameters:
    base = {"epsilon0": 2.0, "users_per_layer": 10, "max_depth": 5}
    return triehh.TrieParameters(**{**base, **kw})


def warehouse_with(users: dict[str, list[list[str]]]) -> Warehouse:
    wh = Warehouse(":memory:", memory_limit="1GB")
    wh.execute(f"CREATE SCHEMA {SCHEMA}")
    wh.execute(
        f"CREATE TABLE {SCHEMA}.sentences (user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
    )
    rows = [(u, 0, i, toks) for u, sents in users.items() for i, toks in enumerate(sents)]
    wh.con.executemany(f"INSERT INTO {SCHEMA}.sentences VALUES (?, ?, ?, ?)", rows)
    add_token_ids(wh, SCHEMA)
    return wh


# ----------------------------------------------------------------------------------------------
# SQL: local datasets and layer prefixes
# ----------------------------------------------------------------------------------------------
def test_user_words_apply_known_vocabulary_alphabet_and_length():
    wh = warehouse_with(
        {
            "a": [["the", "zorb", "zorb", "Caps", "toolongword"], ["zorb", "x1"]],
            "b": [["the", "café", "it's"]],
            "c": [["the"]],  # only known words: still part of the population
        }
    )
    triehh.prepare_user_words(wh, SCHEMA, ["the"], params(max_depth=6))
    got = sorted(
        wh.con.execute(
            f"SELECT u.user_id, w.word, w.cnt FROM {SCHEMA}.triehh_user_words w "
            f"JOIN {SCHEMA}.triehh_users u USING (uidx)"
        ).fetchall()
    )
    # 'the' is known; 'Caps' (upper case) and 'café' use characters outside the alphabet;
    # 'toolongword' exceeds max_depth - 1 = 5 characters.
    assert got == [("a", "x1", 1), ("a", "zorb", 3), ("b", "it's", 1)]
    assert wh.fetch_scalar(f"SELECT count(*) FROM {SCHEMA}.triehh_users") == 3


def test_layer_prefixes_follow_broadcast_and_skip_learned_words():
    wh = warehouse_with({"a": [["zorb", "zorb", "zap", "quip"]], "b": [["zorb", "zo"]], "c": [["zap"]]})
    triehh.prepare_user_words(wh, SCHEMA, [], params(max_depth=6))
    uidx = dict(wh.con.execute(f"SELECT user_id, uidx FROM {SCHEMA}.triehh_users").fetchall())
    source = triehh.WarehouseSource(wh, SCHEMA, "$")
    group = np.array([uidx["a"], uidx["b"]])  # c is not in this group
    pos, prefixes, counts = source(group, ["z"], 2, [])
    got = sorted(zip(pos.tolist(), prefixes, counts.tolist(), strict=True))
    assert got == [(0, "za", 1), (0, "zo", 2), (1, "zo", 2)]
    pos, prefixes, counts = source(group, ["zo"], 3, [])  # 'zo' + end symbol is a word
    assert sorted(zip(pos.tolist(), prefixes, counts.tolist(), strict=True)) == [
        (0, "zor", 2),
        (1, "zo$", 1),
        (1, "zor", 1),
    ]
    pos, prefixes, _ = source(group, ["zo"], 3, ["zorb"])  # a later pass: 'zorb' was learned
    assert sorted(zip(pos.tolist(), prefixes, strict=True)) == [(1, "zo$")]


# ----------------------------------------------------------------------------------------------
# Groups and local samplers
# ----------------------------------------------------------------------------------------------
def test_groups_are_disjoint_across_layers_and_passes(secure_noise):
    p = params(users_per_layer=7, max_depth=4, passes=3)
    groups = triehh.assign_groups(100, p, secure_noise)
    assert groups.shape == (3, 4, 7)
    flat = groups.ravel()
    assert len(set(flat.tolist())) == flat.size and flat.min() >= 0 and flat.max() < 100
    with pytest.raises(ConfigError, match="fewer users"):
        triehh.assign_groups(83, p, secure_noise)  # 3 x 4 x 7 = 84 needed


def test_run_trie_never_asks_a_user_twice(secure_noise):
    """Every layer of every pass that runs gets a fresh group: the protocol's fetches (one per
    layer) never see a user twice, and the groups recorded are exactly the ones queried."""
    rng = simulation_rng(3)
    words = {u: list(rng.choice(PLANTED, 2)) for u in range(800)}
    seen: list[np.ndarray] = []

    def fetch(group, broadcast, depth, learned):
        seen.append(group.copy())
        pos, pre, cnt = [], [], []
        for i, u in enumerate(group.tolist()):
            for w in set(words[u]) - set(learned):
                full = w + "$"
                if len(full) >= depth and full[: depth - 1] in broadcast:
                    pos.append(i), pre.append(full[:depth]), cnt.append(1)
        return np.array(pos, dtype=np.int64), pre, np.array(cnt)

    p = params(epsilon0=6.0, users_per_layer=40, max_depth=8, passes=2, max_words=2)
    result = triehh.run_trie(fetch, 800, p, secure_noise)
    assert len(seen) == len(result.groups) and len(seen) >= 2 * 2
    everyone = np.concatenate(seen)
    assert len(set(everyone.tolist())) == everyone.size  # no user in two layers or passes
    assert all(g.size == 40 for g in seen)
    assert {layer.pass_index for layer in result.layers} == {0, 1}


def test_greedy_sampling_keeps_the_most_frequent_and_pads(secure_noise):
    positions = np.array([0, 0, 0, 1, 2, 2])
    prefix = np.array([5, 6, 7, 5, 8, 9])
    counts = np.array([1, 9, 4, 2, 3, 3])
    out = triehh.select_prefixes(
        positions, prefix, counts, n=4, m=2, dummy=99, sampling="greedy", noise=secure_noise
    )
    rows = out.reshape(4, 2)
    assert sorted(rows[0].tolist()) == [6, 7]  # counts 9 and 4
    assert sorted(rows[1].tolist()) == [5, 99]  # one prefix, padded with the dummy
    assert sorted(rows[2].tolist()) == [8, 9]
    assert rows[3].tolist() == [99, 99]  # a user without eligible words reports only padding


def test_random_sampling_is_uniform_over_distinct_prefixes(secure_noise):
    """One user with 4 distinct prefixes of very different counts, m = 1: each is chosen with
    probability 1/4 regardless of counts (chi-square, false failure 1e-4)."""
    trials = 8000
    positions = np.repeat(np.arange(trials), 4)
    prefix = np.tile(np.arange(4), trials)
    counts = np.tile(np.array([100, 1, 1, 1]), trials)
    out = triehh.select_prefixes(
        positions, prefix, counts, n=trials, m=1, dummy=4, sampling="random", noise=secure_noise
    )
    observed = np.bincount(out, minlength=4)
    _, p_value = stats.chisquare(observed, np.full(4, trials / 4))
    assert p_value > 1e-4


# ----------------------------------------------------------------------------------------------
# The stage end to end
# ----------------------------------------------------------------------------------------------
def write_corpus(root: Path, n_users: int = 3000, seed: int = 11) -> dict[str, Path]:
    """Users typing common (known) words; 60% of them also type one of three planted OOV words;
    30% a unique random token (a long tail nobody shares); 'cat' is known but frequent."""
    rng = simulation_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    users = root / "users.jsonl"
    with users.open("w", encoding="utf-8") as fh:
        for u in range(n_users):
            words = list(rng.choice(COMMON, 6))
            if rng.random() < 0.6:
                words.append(PLANTED[int(rng.integers(3))])
            if rng.random() < 0.3:
                words.append("x" + str(int(rng.integers(10**7))))
            fh.write(json.dumps({"user_id": f"user{u}", "text": " ".join(words)}) + "\n")
    known = root / "known.txt"
    known.write_text("\n".join(COMMON) + "\n", encoding="utf-8")
    return {"users": users, "known": known}


def triehh_context(tmp_path: Path, files: dict[str, Path], **values) -> RunContext:
    base = {
        "input": str(files["users"]),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "vocabulary_method": "triehh",
        "stage_budget": {"dpne": 0.5, "triehh": 0.5},
        "epsilon": 20.0,
        "delta": 1e-6,
        "known_vocabulary": str(files["known"]),
        "triehh_users_per_layer": 300,
        "triehh_max_depth": 9,
        "triehh_max_words": 1,
        "triehh_epsilon0": 8.0,
        "max_n": 2,
    }
    ctx = RunContext(prepare(RunConfig.build(**{**base, **values})))
    ingest_stage.run_ingest(ctx)
    return ctx


def test_stage_finds_planted_oov_words_and_feeds_the_vocabulary(tmp_path):
    """eps0 = 8, m = 1, n = 300 users per layer, depth 9. Each planted word is held by ~60 of a
    layer's users (Binomial(300, 0.2)); with d <= 391 candidates and s = 1, a report keeps its
    prefix with p >= 0.99 and votes for any given other candidate with q < 4e-4, so the noise
    threshold is at most 4 votes and each planted prefix collects >= 30 votes except with
    probability far below 1e-6 per layer (binomial tails), over 8 layers x 3 words < 1e-4 in all.
    The planted prefixes outvote the unique random tokens' prefixes (each held by <= a handful of
    users), so they are among the k = 10 kept."""
    files = write_corpus(tmp_path / "data")
    ctx = triehh_context(tmp_path, files)
    summary = triehh_stage.run_triehh(ctx)
    words = pq.read_table(ctx.release.root / layout.OOV_WORDS).column("word").to_pylist()
    assert set(PLANTED) <= set(words)
    assert not set(words) & set(COMMON)  # OOV mode: known words never come out
    assert summary["released_rows"] == len(words) and summary["reused"] is False
    part = read_parts(ctx)["triehh"]
    assert part["epsilon0"] == 8.0 and part["unit_of_privacy"] == "user"
    assert part["central_epsilon"] <= part["budget_epsilon"]
    assert part["privacy"]["events"][0]["mechanism"] == "approx"
    assert "cnt" not in json.dumps(part)  # no exact statistics in the report fragment

    # vocabulary_method = triehh: S_1 = TrieHH words + known vocabulary, no DPSU spend.
    vocabulary_stage.run_vocabulary(ctx)
    vocabulary = set(pq.read_table(ctx.release.root / layout.VOCABULARY).column("token").to_pylist())
    assert vocabulary == set(words) | set(COMMON)
    events = read_parts(ctx)["dpne.k1"]["privacy"]["events"]
    assert [(e["mechanism"], e["epsilon"], e["delta"]) for e in events] == [("approx", 0.0, 0.0)]
    assert vocabulary_stage.run_vocabulary(ctx)["reused"] is True  # a retried vocabulary stage reloads

    outcome = validate_stage.validate_run(ctx, suites=["released.oov_words"])
    assert outcome["success"] is True


def test_nothing_is_found_with_tiny_groups(tmp_path):
    """n = 3 users per layer at eps0 = 1: the noise threshold needs more votes than 3 users'
    single reports can carry for any prefix a planted word could get through all layers."""
    files = write_corpus(tmp_path / "data", n_users=200)
    ctx = triehh_context(tmp_path, files, triehh_users_per_layer=3, triehh_epsilon0=1.0)
    triehh_stage.run_triehh(ctx)
    assert pq.read_table(ctx.release.root / layout.OOV_WORDS).num_rows == 0


def test_retry_reuses_the_release_and_charges_once(tmp_path):
    files = write_corpus(tmp_path / "data", n_users=400)
    ctx = triehh_context(tmp_path, files, triehh_users_per_layer=40, triehh_max_depth=8)
    first = triehh_stage.run_triehh(ctx)
    words = pq.read_table(ctx.release.root / layout.OOV_WORDS).column("word").to_pylist()
    with ctx.ledger() as ledger:
        spent = ledger.spent(ctx.config.dataset, ctx.run_id)
    second = triehh_stage.run_triehh(ctx)
    assert first["reused"] is False and second["reused"] is True
    assert pq.read_table(ctx.release.root / layout.OOV_WORDS).column("word").to_pylist() == words
    with ctx.ledger() as ledger:
        assert ledger.spent(ctx.config.dataset, ctx.run_id) == spent
    assert spent.epsilon == pytest.approx(first["epsilon"])


def test_too_few_users_is_a_clear_error(tmp_path):
    files = write_corpus(tmp_path / "data", n_users=50)
    ctx = triehh_context(tmp_path, files, triehh_users_per_layer=10, triehh_max_depth=9)
    with pytest.raises(ConfigError, match="triehh_users_per_layer: the input has fewer users") as err:
        triehh_stage.run_triehh(ctx)
    assert "50" not in str(err.value)  # the population size is not disclosed
    assert not (ctx.release.root / layout.OOV_WORDS).exists()


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"vocabulary_method": "triehh"}, "vocabulary_method: 'triehh' needs a budget share"),
        ({"vocabulary_method": "both", "stage_budget": {"dpne": 1.0}}, "needs a budget share"),
        ({"stage_budget": {"dpne": 0.5, "triehh": 0.5}}, "vocabulary_method is 'dpsu'"),
        ({"triehh_end_symbol": "a"}, "triehh_end_symbol: must be a non-space character outside"),
        ({"triehh_alphabet": "abca"}, "triehh_alphabet: must not repeat"),
        ({"triehh_max_depth": 1}, "triehh_max_depth"),
        ({"triehh_sampling": "weighted"}, "triehh_sampling"),
        ({"triehh_epsilon0": 0}, "triehh_epsilon0"),
        ({"triehh_spurious_rate": 1.0}, "triehh_spurious_rate"),
    ],
)
def test_config_errors_are_one_line(values, message):
    with pytest.raises(ConfigError, match=message) as err:
        RunConfig.build(input="x.jsonl", out="out", **values)
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)


def test_epsilon0_above_the_budget_is_refused_and_default_fits():
    config = RunConfig.build(
        input="x.jsonl",
        out="out",
        run_id="r1",
        vocabulary_method="both",
        stage_budget={"dpne": 0.5, "triehh": 0.5},
        epsilon=2.0,
        triehh_users_per_layer=2000,
        triehh_epsilon0=5.0,
    )
    with pytest.raises(ConfigError, match="triehh_epsilon0: 5 gives user-level central epsilon"):
        triehh_stage.privacy_plan(config)
    plan = triehh_stage.privacy_plan(config.with_values(**{"triehh_epsilon0": None}))
    share = config.stage_share("triehh").epsilon  # the triehh half, jointly calibrated with dpne
    assert plan["central_epsilon"] <= share * (1 + 1e-9)
    assert plan["central_epsilon"] == pytest.approx(share, rel=1e-3)  # the default epsilon0 spends it
    assert plan["user_ldp_epsilon"] == pytest.approx(4 * plan["epsilon0"])
    assert plan["central_delta"] < plan["budget_delta"]


def test_release_plan_runs_triehh_between_ingest_and_vocabulary():
    config = RunConfig.build(
        input="x.jsonl", out="out", vocabulary_method="both", stage_budget={"dpne": 0.5, "triehh": 0.5}
    )
    names = [step.name for step in release_steps(config)]
    assert names[:3] == ["ingest", "triehh", "dpne.k1"]
    assert "triehh" not in [step.name for step in release_steps(RunConfig.build(input="x.jsonl", out="out"))]


def test_known_vocabulary_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="known_vocabulary: .* does not exist"):
        public_text.load_known_vocabulary(tmp_path / "nope.txt")
    path = tmp_path / "known.txt.gz"
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("The\nCat's\n")
    assert public_text.load_known_vocabulary(path) == ["cat's", "the"]  # tokenized like private text
    assert pa.array(public_text.load_known_vocabulary(None), pa.string()).to_pylist() == []
