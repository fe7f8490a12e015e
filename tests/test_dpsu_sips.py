"""DP-SIPS (Swanberg, Desfontaines & Haney 2023), the parallel DPSU policy ``dpsu_policy=dp-sips``:
the budget split and its accounting, the SQL rounds against a numpy reference, rounds = 1 against
the weighted policy, l2-sensitivity 1 per round, DPNE levels (exact and scalable variants, the
spurious bound of Prop. 2.2), the privacy claim on neighbouring datasets with a power check, and
the SQL on Spark.

Privacy argument under test (docs/dpne.md, "DP-SIPS"): round r is a weighted DPSU histogram of the
users' items not released by rounds < r (public), thresholded at (sigma_r = sigma / sqrt(f_r),
rho_r). Given the earlier releases a round has l2-sensitivity 1, so the R rounds compose exactly
(adaptively) to one Gaussian of noise sigma; an item held only by the added user passes round r
with probability <= delta_0r, and sum_r delta_0r = delta_0.

Admission (dpsu_sips_admission; docs/dpne.md, "Admission by the first round"): round 1's noisy
values also admit the items at or above z sigma_1; rounds r >= 2 keep each user's round-1 subset
(one salt) within the admitted items. Given round 1's output a round still has l2-sensitivity 1 (the
added user's own vector), so the same composition and the same delta_0r hold. Each section has its
admission test: the SQL against a reference, the sensitivity, neighbouring datasets with a power
check (admission by the exact weights fails), delta_0, levels, the stages, Spark and the config.

Statistical checks use Clopper-Pearson bounds; each test's false-failure rate is stated in it
(at most 1e-4). Non-private randomness (datasets) comes from seeded numpy generators."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
from conftest import sentences_warehouse
from scipy import stats

from dpngram.config import RunConfig
from dpngram.core.accounting import (
    Accountant,
    PrivacyEvent,
    compose_gaussian_sigmas,
    gaussian_delta,
    gaussian_epsilon,
)
from dpngram.core.budget import Budget
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import add_token_ids
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import dpne, dpne_domain, dpsu, dpsu_rounds
from dpngram.mechanisms.dpsu_rounds import SipsRound, sips_fractions, sips_sigmas, sips_vocabulary_rounds

SCHEMA = "run_sips_test"
FALSE_FAILURE = 1e-4
RUNS = 20_000


# ----------------------------------------------------------------------------------------------
# helpers: the numpy reference of one round
# ----------------------------------------------------------------------------------------------
def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Clopper-Pearson interval (as in tests/test_dpne_privacy.py)."""
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(stats.beta.isf(alpha / 2, successes + 1, trials - successes))
    return lo, hi


def warehouse(rows: list[tuple[str, list[str | None]]]) -> Warehouse:
    """In-memory warehouse with ``sentences`` and the DPSU vocabulary source ``src`` (a table)."""
    wh = sentences_warehouse(SCHEMA, rows)
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src_view"))
    wh.con.execute(f"CREATE TABLE {SCHEMA}.src AS SELECT * FROM {SCHEMA}.src_view")
    return wh


def user_items(rows) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for user, tokens in rows:
        out[user].update(t for t in tokens if t is not None)
    return dict(out)


def subset_keys(wh: Warehouse, salt: int) -> dict[str, int]:
    """The subset rule's sort key of every item for one salt, computed by the engine with the
    expression of sql/dpsu/_user_items.sql + _user_kept.sql (the hash is the rule's randomness; the reference
    below re-implements the rest: remaining items, the Delta smallest keys, 1/sqrt(#kept))."""
    rows = wh.con.execute(
        f"SELECT DISTINCT item, hash(xor(hash(item), CAST($salt AS UBIGINT))) FROM {SCHEMA}.src",
        {"salt": salt},
    ).fetchall()
    return dict(rows)


def reference_round(
    items: dict[str, set[str]],
    released: set[str],
    max_contribution: int,
    keys: dict[str, int] | None = None,
    exponent: float = 0.5,
) -> dict[str, float]:
    """One DP-SIPS round in numpy terms: each user drops the released items, keeps the
    ``max_contribution`` remaining ones with the smallest ``keys`` (ties by item) and gives each
    kept item 1/#kept^exponent (exponent 1/2: the mechanism; other exponents: broken variants)."""
    hist: dict[str, float] = defaultdict(float)
    for own in items.values():
        remaining = sorted(own - released, key=lambda i: ((keys or {}).get(i, 0), i))
        kept = remaining[:max_contribution]
        for item in kept:
            hist[item] += 1.0 / len(kept) ** exponent
    return dict(hist)


def sql_round(wh: Warehouse, released: set[str], max_contribution: int, salt: int) -> dict[str, float]:
    """The round histogram through the mechanism's SQL (sql/dpsu/sips_remaining.sql, then the
    shared sql/dpsu/histogram.sql) for a given public history ``released``."""
    source = "src"
    if released:
        dpsu._store_items(wh, SCHEMA, "t_done", pa.table({"item": sorted(released)}))
        wh.execute(
            load_sql("dpsu/sips_remaining", schema=SCHEMA, target="t_rem", source="src", released="t_done")
        )
        source = "t_rem"
    wh.execute(
        load_sql("dpsu/histogram", schema=SCHEMA, source=source, histogram="t_hist"),
        {"salt": salt, "max_contribution": max_contribution},
    )
    out = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.t_hist").fetchall())
    wh.drop(SCHEMA, "t_hist", "t_rem", "t_done")
    return out


def reference_admitted_round(
    items: dict[str, set[str]],
    admitted: set[str],
    released: set[str],
    max_contribution: int,
    keys: dict[str, int] | None = None,
) -> dict[str, float]:
    """A round r >= 2 with admission (docs/dpne.md, "Admission by the first round") in numpy terms:
    each user keeps its ROUND-1 subset (the ``max_contribution`` smallest ``keys`` of all its items:
    one salt for every round), then only the kept items that are ``admitted`` and not ``released``,
    each with weight 1/sqrt(#such items)."""
    hist: dict[str, float] = defaultdict(float)
    for own in items.values():
        kept = sorted(own, key=lambda i: ((keys or {}).get(i, 0), i))[:max_contribution]
        live = [i for i in kept if i in admitted and i not in released]
        for item in live:
            hist[item] += 1.0 / math.sqrt(len(live))
    return dict(hist)


def sql_admitted_round(
    wh: Warehouse,
    admitted: set[str],
    max_contribution: int,
    salt: int,
    per_user_lists: bool = False,
) -> dict[str, float]:
    """The admitted round's histogram through the mechanism's SQL (sql/dpsu/histogram_admitted.sql,
    or histogram_kept_admitted.sql over the kept lists of user_kept_lists.sql) for a given admitted
    set (already minus the released items, as sips_rounds_release stores it)."""
    dpsu._store_items(wh, SCHEMA, "t_adm", pa.table({"item": pa.array(sorted(admitted), pa.string())}))
    params = {"salt": salt, "max_contribution": max_contribution}
    if per_user_lists:
        wh.execute(load_sql("dpsu/user_kept_lists", schema=SCHEMA, target="t_lists", source="src"), params)
        statement = load_sql(
            "dpsu/histogram_kept_admitted",
            schema=SCHEMA,
            kept_lists="t_lists",
            admitted="t_adm",
            histogram="t_hist",
        )
        wh.execute(statement)
    else:
        statement = load_sql(
            "dpsu/histogram_admitted", schema=SCHEMA, source="src", admitted="t_adm", histogram="t_hist"
        )
        wh.execute(statement, params)
    out = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.t_hist").fetchall())
    wh.drop(SCHEMA, "t_hist", "t_adm", "t_lists")
    return out


class Salts:
    """A stand-in noise source for deterministic tests: ``salt()`` and ``selection_salt()`` return
    the given salts in turn."""

    def __init__(self, salts: list[int]) -> None:
        self.salts = list(salts)

    def salt(self) -> int:
        return self.salts.pop(0)

    selection_salt = salt


class RecordingSalts(Salts):
    """:class:`Salts` that also records the salts handed out (admission: one for every round)."""

    def __init__(self, salts: list[int]) -> None:
        super().__init__(salts)
        self.drawn: list[int] = []

    def salt(self) -> int:
        self.drawn.append(super().salt())
        return self.drawn[-1]

    selection_salt = salt


def random_rows(seed: int, users: int, vocab: int, max_len: int = 12) -> list[tuple[str, list[str]]]:
    """Users with 1-3 sentences from a skewed vocabulary (popular tokens are released early)."""
    rng = simulation_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    rows = []
    for u in range(users):
        for _ in range(int(rng.integers(1, 4))):
            size = int(rng.integers(1, max_len + 1))
            rows.append((f"user{u}", [f"tok{j}" for j in rng.choice(vocab, size=size, p=p)]))
    return rows


def l2_diff(a: dict[str, float], b: dict[str, float]) -> float:
    keys = set(a) | set(b)
    return float(np.sqrt(sum((a.get(k, 0.0) - b.get(k, 0.0)) ** 2 for k in keys)))


# ----------------------------------------------------------------------------------------------
# 1. the budget split and the accountant
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rounds", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("ratio", [0.3, 0.5, 1.0, 2.0, 10.0])
def test_fractions_and_sigmas_compose_to_one_gaussian(rounds, ratio):
    fractions = sips_fractions(rounds, ratio)
    assert len(fractions) == rounds and math.fsum(fractions) == pytest.approx(1.0, abs=1e-15)
    assert all(
        b / a == pytest.approx(ratio, rel=1e-12) for a, b in zip(fractions[:-1], fractions[1:], strict=True)
    )
    for sigma in (0.37, 1.0, 2.589, 11.0):
        sigmas = sips_sigmas(sigma, rounds, ratio)
        composed = compose_gaussian_sigmas(sigmas)
        # 1/sigma^2 = sum_r f_r / sigma^2: exact up to rounding, and never above sigma (safe side)
        assert composed <= sigma and composed == pytest.approx(sigma, rel=1e-14)
    assert sips_sigmas(1.7, 1, ratio) == [1.7]


@pytest.mark.parametrize("rounds,ratio", [(1, 1.0), (2, 0.5), (3, 1.0), (4, 2.0), (10, 0.7)])
def test_accountant_composes_the_round_events_to_the_one_gaussian_epsilon(rounds, ratio):
    """The vocabulary's R Gaussian events + R (0, delta_0r) events compose, in the project's
    accountant (Gaussians merged exactly, deltas added), to the epsilon of the weighted policy's
    one Gaussian + one (0, delta_0) event: equal up to rounding and never below it. Levels: R
    Gaussian events against one."""
    budget = Budget(4.0, 1e-7)
    weighted = dpsu.vocabulary_parameters(budget, 5, 1.2, 100, threshold_delta=0.1)
    sips = dpsu.vocabulary_parameters(
        budget, 5, 1.2, 100, threshold_delta=0.1, policy="dp-sips", sips_rounds=rounds, sips_ratio=ratio
    )
    assert (sips.sigma, sips.threshold, sips.threshold_delta) == (
        weighted.sigma,
        weighted.threshold,
        weighted.threshold_delta,
    )
    events = sips.events("dpne.k1")
    assert [e.mechanism for e in events] == ["gaussian", "approx"] * rounds
    assert math.fsum(r.threshold_delta for r in sips.rounds) == pytest.approx(
        weighted.threshold_delta, rel=1e-14
    )
    assert sum(e.delta for e in events) <= weighted.threshold_delta * (1 + 1e-15)
    for delta in (1e-7, 1e-5):
        one = Accountant(weighted.events("dpne.k1")).total_epsilon(delta)
        many = Accountant(events).total_epsilon(delta)
        assert many >= one * (1 - 1e-13) and many == pytest.approx(one, rel=1e-12)
    sigma_k = 3.1
    level = [PrivacyEvent("dpne.k2", "gaussian", sigma=s) for s in sips_sigmas(sigma_k, rounds, ratio)]
    one = gaussian_epsilon(sigma_k, 1e-7)
    many = Accountant(level).total_epsilon(1e-7)
    assert many >= one and many == pytest.approx(one, rel=1e-12)


def test_round_thresholds_cover_delta0_with_the_round_sigmas():
    """rho_r = dpsu_threshold(sigma_r, delta_0 f_r, Delta); the deltas add up to delta_0."""
    rounds = sips_vocabulary_rounds(2.0, 1e-6, 100, 3, 0.5)
    f = sips_fractions(3, 0.5)
    for rnd, fr in zip(rounds, f, strict=True):
        assert rnd.sigma == pytest.approx(2.0 / math.sqrt(fr), rel=1e-14)
        assert rnd.threshold_delta == pytest.approx(1e-6 * fr, rel=1e-12)
        ts = np.arange(1, 101)
        p_t = 1 - stats.norm.cdf((rnd.threshold - 1 / np.sqrt(ts)) / rnd.sigma) ** ts
        assert p_t.max() == pytest.approx(rnd.threshold_delta, rel=1e-5)
    assert math.fsum(r.threshold_delta for r in rounds) == pytest.approx(1e-6, rel=1e-15)


def test_level_rounds_split_eta():
    """Level k: rho_r = sigma_r Phi^-1(1 - f_r eta min{1, |S_(k-1)|/|V_k|}); rounds = 1 is rho_k."""
    sigma, eta, prev, valid = 2.5, 0.01, 300, 90_000
    assert dpne.sips_level_rounds(sigma, eta, prev, valid, 1, 1.0)[0] == SipsRound(
        sigma, dpne.level_threshold(sigma, eta, prev, valid)
    )
    rounds = dpne.sips_level_rounds(sigma, eta, prev, valid, 4, 2.0)
    tails = [stats.norm.sf(r.threshold / r.sigma) for r in rounds]
    assert math.fsum(tails) == pytest.approx(eta * prev / valid, rel=1e-9)
    assert all(r.threshold is None for r in dpne.sips_level_rounds(sigma, eta, 0, 0, 3, 1.0))


@pytest.mark.parametrize("rounds", [0, -1, 11, 2.5, True])
def test_bad_rounds_are_refused(rounds):
    with pytest.raises(ConfigError, match="dpsu_sips_rounds"):
        sips_fractions(rounds, 1.0)


@pytest.mark.parametrize("ratio", [0.0, -1.0, float("nan"), float("inf"), 1000.5])
def test_bad_ratio_is_refused(ratio):
    with pytest.raises(ConfigError, match="dpsu_sips_ratio"):
        sips_fractions(2, ratio)


def test_configuration_accepts_the_policy_and_its_parameters():
    config = RunConfig.build(
        input="x", out="y", dpsu_policy="dp-sips", dpsu_sips_rounds=4, dpsu_sips_ratio=0.5
    )
    assert (config.dpne.policy, config.dpne.sips_rounds, config.dpne.sips_ratio) == ("dp-sips", 4, 0.5)
    for bad in (
        {"dpsu_sips_rounds": 0},
        {"dpsu_sips_rounds": 11},
        {"dpsu_sips_ratio": 0},
        {"dpsu_sips_ratio": 1001},
    ):
        with pytest.raises(ConfigError):
            RunConfig.build(input="x", out="y", dpsu_policy="dp-sips", **bad)
    schema = RunConfig.param_schema()
    assert "dp-sips" in str(schema["dpsu_policy"]) and "dpsu_sips_rounds" in schema
    assert dpsu.policy_fill_level("dp-sips", 1.0, 1.0, 10.0) is None


def test_configuration_accepts_the_admission_and_refuses_bad_values():
    """Admission is on by default (dpsu_sips_admission, a switch) with the floor
    dpsu_sips_admission_floor z = 1 (a number in [-10, 10]); out-of-range and non-finite floors are
    refused naming the parameter (config and check_admission). The run's vocabulary parameters
    carry the floor z sigma_1 on round 1 only (none when switched off), one round is unchanged, and
    the ledger events are those of plain DP-SIPS. The CLI has --dpsu-sips-admission /
    --no-dpsu-sips-admission and a float floor flag (negative too); the Airflow Params are a boolean
    and a number, both allowing null (an emptied field: the default), the floor with its bounds."""
    from dpngram.cli.parser import build_parser
    from dpngram.orchestration.form import form_params
    from dpngram.stages.vocabulary import dpsu_parameters

    base = {"input": "x", "out": "y", "dpsu_policy": "dp-sips"}
    default = RunConfig.build(**base)
    assert default.dpne.sips_admission is True and default.dpne.sips_plan(1) == (3.0, 1.0)
    # admission for the vocabulary and the levels k <= dpsu_sips_admission_max_n (2), plain beyond
    assert default.dpne.sips_plan(2) == (3.0, 1.0) and default.dpne.sips_plan(3) == (16.0, None)
    off = RunConfig.build(**base, dpsu_sips_admission=False)
    assert off.dpne.sips_plan(1) == (16.0, None)
    for good in (-10, 10, 0, "2.5"):
        assert RunConfig.build(**base, dpsu_sips_admission_floor=good).dpne.sips_plan(1)[1] == float(good)
    for bad in (10.5, -11, float("nan"), float("inf"), -float("inf"), "abc"):
        with pytest.raises(ConfigError, match="dpsu_sips_admission_floor"):
            RunConfig.build(**base, dpsu_sips_admission_floor=bad)
    for bad in (10.5, -11, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ConfigError, match="dpsu_sips_admission"):
            dpsu_rounds.check_admission(bad)
    dpsu_rounds.check_admission(None)
    dpsu_rounds.check_admission(-10)

    on = dpsu_parameters(default)
    plain = dpsu_parameters(RunConfig.build(**base, dpsu_sips_admission=False, dpsu_sips_ratio=3.0))
    assert on.rounds[0].admit_floor == 1.0 * on.rounds[0].sigma
    assert [r.admit_floor for r in plain.rounds] == [None] * len(plain.rounds)
    assert [dataclasses.replace(r, admit_floor=None) for r in on.rounds] == list(plain.rounds)
    assert on.events("dpne.k1") == plain.events("dpne.k1")
    assert dpsu_rounds.with_admission(plain.rounds[:1], 1.5) == plain.rounds[:1]
    assert dpsu_rounds.with_admission(plain.rounds, None) == plain.rounds
    level = dpne.sips_level_rounds(2.0, 0.01, 30, 900, 2, 1.0, -0.5)
    assert [r.admit_floor for r in level] == [-0.5 * level[0].sigma, None]
    with pytest.raises(ConfigError, match="dpsu_sips_admission"):
        dpsu.vocabulary_parameters(
            Budget(4.0, 1e-5), 5, 1.2, 100, policy="dp-sips", sips_rounds=2, sips_admission=11.0
        )

    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    run = action.choices["run"]
    args = run.parse_args(["--input", "x", "--out", "y", "--dpsu-sips-admission-floor", "-1.5"])
    assert args.dpsu_sips_admission_floor == -1.5 and args.dpsu_sips_admission is None
    args = run.parse_args(["--input", "x", "--out", "y", "--no-dpsu-sips-admission"])
    assert args.dpsu_sips_admission is False
    params = form_params({})
    switch, floor = params["dpsu_sips_admission"], params["dpsu_sips_admission_floor"]
    assert switch["default"] is True and switch["type"] == ["boolean", "null"]
    assert floor["default"] == 1.0 and floor["type"] == ["number", "null"] and "examples" not in floor
    assert (floor["minimum"], floor["maximum"]) == (-10, 10) and "-10" in floor["description"]


# ----------------------------------------------------------------------------------------------
# 2. the SQL rounds against the numpy reference
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_user_lists", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sql_rounds_equal_the_numpy_reference(seed, per_user_lists):
    """sips_rounds_release over random users (more distinct items than Delta, so the subset rule
    binds), three rounds with fresh salts and a deterministic stand-in for the noisy step (release
    the items with weight >= 1.2): every round's histogram equals the reference for the same
    history (1e-12: sums of <= 60 terms), and the released sets agree round by round. Both ways of
    building the rounds (re-reading the source each round; the vocabulary's per-user list table)."""
    rows = random_rows(seed, users=60, vocab=80)
    wh = warehouse(rows)
    items, salts, max_contribution = user_items(rows), [11 + seed, 2**61 + 7, 123456789], 5
    seen: list[dict[str, float]] = []

    def draw(histogram: str, released: str | None, count: int, rnd: SipsRound, admitted) -> pa.Array:
        assert admitted is None  # no admission floor in these rounds
        hist = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.{histogram}").fetchall())
        seen.append(hist)
        return pa.array(sorted(i for i, w in hist.items() if w >= 2.0), type=pa.string())

    rounds = [SipsRound(1.0, 1.0)] * 3
    out = dpsu.sips_rounds_release(
        wh,
        SCHEMA,
        "src",
        "t",
        rounds=rounds,
        max_contribution=max_contribution,
        noise=Salts(salts),
        draw=draw,
        per_user_lists=per_user_lists,
    )
    released: set[str] = set()
    for r, salt in enumerate(salts):
        ref = reference_round(items, released, max_contribution, subset_keys(wh, salt))
        assert set(seen[r]) == set(ref)
        assert all(seen[r][i] == pytest.approx(ref[i], abs=1e-12) for i in ref)
        new = {i for i, w in ref.items() if w >= 2.0}
        assert not new & released
        released |= new
    assert set().union(*[set(a.to_pylist()) for a in out]) == released
    assert len(released) > 5 and len(seen[2]) > 0  # the rounds did drop items and go on
    assert not any(wh.object_type(SCHEMA, n) for n in ("t_done", "t_remaining", "t_histogram", "t_lists"))


def test_rounds_one_equals_the_weighted_policy():
    """Same salt: the one-round histogram is the weighted histogram; same seeded noise: the
    release equals dpsu_release's, for the vocabulary and for a DPNE level (both variants)."""
    rows = random_rows(5, users=80, vocab=50)
    wh = warehouse(rows)
    dpsu.dpsu_histogram(wh, SCHEMA, "src", "whist", max_contribution=4, salt=99)
    weighted = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.whist").fetchall())
    one_round = sql_round(wh, set(), 4, 99)
    # the same terms summed by a parallel hash aggregate, in any order: equal up to float rounding
    # (at most ~n ulps for n terms; 80 users here, so rel 1e-12 is generous and still fails on any
    # real difference, which is at least 1/sqrt(4) = 0.5)
    assert weighted.keys() == one_round.keys()
    assert all(weighted[i] == pytest.approx(one_round[i], rel=1e-12) for i in weighted)

    params = dpsu.vocabulary_parameters(Budget(3.0, 1e-5), 3, 1.2, 4, threshold_delta=0.1)
    sips = dpsu.vocabulary_parameters(Budget(3.0, 1e-5), 3, 1.2, 4, threshold_delta=0.1, policy="dp-sips")
    assert sips.rounds == (SipsRound(params.sigma, params.threshold, params.threshold_delta),)
    a = dpsu.dpsu_release(
        wh, SCHEMA, "src", "ra", sigma=params.sigma, threshold=0.8, max_contribution=4,
        noise=NoiseSource.seeded_for_tests(7),
    )  # fmt: skip
    b = dpsu.sips_release(
        wh, SCHEMA, "src", "rb", rounds=[SipsRound(params.sigma, 0.8)], max_contribution=4,
        noise=NoiseSource.seeded_for_tests(7),
    )  # fmt: skip
    ra = sorted(r[0] for r in wh.con.sql(f"SELECT item FROM {SCHEMA}.ra").fetchall())
    rb = sorted(r[0] for r in wh.con.sql(f"SELECT item FROM {SCHEMA}.rb").fetchall())
    assert a == b == len(ra) and ra == rb and 0 < a < len(weighted)

    for variant in ("exact", "scalable"):
        released = {}
        for policy in ("weighted", "dp-sips"):
            wl, _ = level_warehouse(markov_rows(21, users=40))
            dpne.release_level(
                wl, SCHEMA, 2, sigma=0.6, eta=0.3, max_contribution=3, pruning="both", variant=variant,
                exact_max_valid=10**6, noise=NoiseSource.seeded_for_tests(3), policy=policy, sips_rounds=1,
            )  # fmt: skip
            released[policy] = sorted(
                r[0] for r in wl.con.sql(f"SELECT ngram FROM {SCHEMA}.dpne_s2").fetchall()
            )
        assert released["weighted"] == released["dp-sips"] and released["weighted"]


@pytest.mark.parametrize("lists", ["none", "plain", "coded", "coded-tokens"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sql_rounds_with_admission_equal_the_numpy_reference(seed, lists):
    """Admission (round 1's admit_floor set), three rounds, a deterministic stand-in for the noisy
    step: round 1 releases the items with weight >= 2 and admits those in [0.6, 2) (appended to
    ``admitted`` in two arrays, plus one released item, which must be dropped); rounds 2 and 3
    release weight >= 2 too. Only one selection salt is drawn (every user keeps its round-1 subset);
    round 1's histogram is the plain reference, rounds 2 and 3 equal the admitted reference (round-1
    subset, minus the released items, restricted to the admitted items plus the public
    ``always_admitted`` keys, weight 1/sqrt(#left)) to 1e-12, and the reference with another salt
    differs (the same-salt check is sharp). Every way of building the rounds: from the source, from
    per-user kept lists of the items, from kept lists of the items' codes (``coded_items``), and
    from those codes read through the sentences' token ids (``token_items``: the vocabulary's path)."""
    rows = random_rows(seed, users=60, vocab=80)
    wh = warehouse(rows)
    items, max_contribution = user_items(rows), 5
    noise = RecordingSalts([101 + seed, 2**60 + 3, 99])
    always = {f"tok{j}" for j in range(40, 80, 4)} | {"nobody-holds-this"}
    seen: list[dict[str, float]] = []
    chosen: set[str] = set()

    def draw(histogram: str, released: str | None, count: int, rnd: SipsRound, admitted) -> pa.Array:
        hist = dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.{histogram}").fetchall())
        seen.append(hist)
        if len(seen) == 1:
            assert admitted == [] and rnd.admit_floor == 0.6 and released is None
            band = sorted(i for i, w in hist.items() if 0.6 <= w < 2.0)
            chosen.update(band)
            out = sorted(i for i, w in hist.items() if w >= 2.0)
            admitted.append(pa.array(band[: len(band) // 2], type=pa.string()))
            admitted.append(pa.array(band[len(band) // 2 :] + out[:1], type=pa.string()))
            return pa.array(out, type=pa.string())
        assert admitted is None and rnd.admit_floor is None
        return pa.array(sorted(i for i, w in hist.items() if w >= 2.0), type=pa.string())

    rounds = [SipsRound(1.0, 1.0, admit_floor=0.6), SipsRound(1.0, 1.0), SipsRound(1.0, 1.0)]
    out = dpsu.sips_rounds_release(
        wh, SCHEMA, "src", "t", rounds=rounds, max_contribution=max_contribution, noise=noise, draw=draw,
        per_user_lists=lists != "none", always_admitted=pa.array(sorted(always), type=pa.string()),
        coded_items=lists.startswith("coded"), token_items=lists == "coded-tokens",
    )  # fmt: skip
    (salt,) = noise.drawn
    keys = subset_keys(wh, salt)
    assert seen[0] == pytest.approx(reference_round(items, set(), max_contribution, keys), abs=1e-12)
    released = {i for i, w in seen[0].items() if w >= 2.0}
    admitted = (chosen | always) - released
    by_public_only = admitted - chosen
    for r in (1, 2):
        ref = reference_admitted_round(items, admitted, released, max_contribution, keys)
        assert set(seen[r]) == set(ref) and set(ref) <= admitted - released
        assert all(seen[r][i] == pytest.approx(ref[i], abs=1e-12) for i in ref)
        if r == 1:
            other = reference_admitted_round(items, admitted, released, max_contribution, subset_keys(wh, 7))
            assert other.keys() != ref.keys() or any(abs(other[i] - ref[i]) > 0.01 for i in ref)
        released |= {i for i, w in ref.items() if w >= 2.0}
    assert set().union(*[set(a.to_pylist()) for a in out]) == released
    assert len(seen[1]) > 5 and len(seen[2]) > 0 and set(seen[1]) != set(seen[2])
    assert by_public_only & set(seen[1])  # public keys below the band are admitted all the same
    work = ("t_done", "t_admitted", "t_histogram", "t_lists", "t_codes", "t_admitted_codes")
    assert not any(wh.object_type(SCHEMA, n) for n in work)


def random_neighbours(rng) -> tuple[int, int, dict[str, set[str]], set[str]]:
    """A random small dataset for the sensitivity checks: m items, the contribution bound Delta,
    0..9 users' item sets, and the item set of the user added in the neighbouring dataset."""
    m = int(rng.integers(2, 12))
    n = int(rng.integers(0, 10))
    delta_max = int(rng.integers(1, 6))
    users = {f"u{i}": {f"i{j}" for j in rng.choice(m, size=int(rng.integers(1, m + 1)), replace=False)}
             for i in range(n)}  # fmt: skip
    new = {f"i{j}" for j in rng.choice(m, size=int(rng.integers(1, m + 1)), replace=False)}
    return m, delta_max, users, new


# ----------------------------------------------------------------------------------------------
# 3. sensitivity
# ----------------------------------------------------------------------------------------------
def test_each_round_moves_the_histogram_by_at_most_one():
    """D vs D + u with the same public history (a random released set) and salt: the round
    histograms (numpy reference, 3000 random datasets; SQL, 30 of them) differ by <= 1 in l2
    (1e-9: rounding). The reference's largest difference is ~1: the bound is attained. The broken
    exponent 1/4 exceeds it (so the check can fail)."""
    rng = np.random.default_rng(404)
    worst, worst_broken = 0.0, 0.0
    for trial in range(3000):
        m, delta_max, users, new = random_neighbours(rng)
        released = {f"i{j}" for j in range(m) if rng.random() < 0.3}
        keys = {f"i{j}": int(rng.integers(0, 2**62)) for j in range(m)}
        h = reference_round(users, released, delta_max, keys)
        h2 = reference_round({**users, "added": new}, released, delta_max, keys)
        diff = l2_diff(h, h2)
        assert diff <= 1 + 1e-9
        assert not set(h2) & released
        worst = max(worst, diff)
        bh = reference_round(users, released, delta_max, keys, exponent=0.25)
        bh2 = reference_round({**users, "added": new}, released, delta_max, keys, exponent=0.25)
        worst_broken = max(worst_broken, l2_diff(bh, bh2))
        if trial < 30:
            rows = [(u, sorted(s)) for u, s in users.items()]
            salt = int(rng.integers(0, 2**62))
            a = sql_round(
                warehouse(rows) if rows else warehouse([("nobody", [None])]), released, delta_max, salt
            )
            b = sql_round(warehouse(rows + [("added", sorted(new))]), released, delta_max, salt)
            assert l2_diff(a, b) <= 1 + 1e-9
    assert worst == pytest.approx(1.0, abs=1e-9)
    assert worst_broken > 1.4  # up to 5^(1/4) = 1.495 with Delta <= 5


def test_an_admitted_round_moves_the_histogram_by_exactly_the_added_users_vector():
    """Admission, given round 1's output (a fixed admitted set A and released set R, random) and
    salt: D vs D + u, the round-2 histograms (numpy reference, 3000 random datasets) differ by
    exactly u's own vector (its round-1 subset minus R, within A, weight 1/sqrt(#)), so by l2 norm 1
    (0 when none of u's kept items is admitted): no other user's weight moves. The SQL (30 of them,
    both statements) equals the reference on D and D + u. Contrast: admission decided from the
    EXACT round-1 weights (A_D = {H_1 >= c} on each dataset) moves the other users' weights too,
    and the l2 difference exceeds 1 (so the check can fail)."""
    rng = np.random.default_rng(405)
    worst_broken = 0.0
    norms = set()
    for trial in range(3000):
        m, delta_max, users, new = random_neighbours(rng)
        both = {**users, "added": new}
        released = {f"i{j}" for j in range(m) if rng.random() < 0.2}
        admitted = {f"i{j}" for j in range(m) if rng.random() < 0.6} - released
        keys = {f"i{j}": int(rng.integers(0, 2**62)) for j in range(m)}
        h = reference_admitted_round(users, admitted, released, delta_max, keys)
        h2 = reference_admitted_round(both, admitted, released, delta_max, keys)
        own = reference_admitted_round({"added": new}, admitted, released, delta_max, keys)
        assert all(abs(h2.get(i, 0.0) - h.get(i, 0.0) - own.get(i, 0.0)) <= 1e-12 for i in set(h) | set(h2))
        norm = float(np.sqrt(sum(w * w for w in own.values())))
        assert norm == pytest.approx(1.0 if own else 0.0, abs=1e-12)
        assert l2_diff(h, h2) <= 1 + 1e-9
        norms.add(bool(own))
        # broken: admission from the exact round-1 weights of each dataset
        c = float(rng.uniform(0.3, 2.5))
        exact = {
            name: {i for i, w in reference_round(d, set(), delta_max, keys).items() if w >= c} - released
            for name, d in (("D", users), ("D'", both))
        }
        bh = reference_admitted_round(users, exact["D"], released, delta_max, keys)
        bh2 = reference_admitted_round(both, exact["D'"], released, delta_max, keys)
        worst_broken = max(worst_broken, l2_diff(bh, bh2))
        if trial < 30:
            salt = int(rng.integers(0, 2**62))
            rows = [(u, sorted(s)) for u, s in users.items()]
            whs = {"D": warehouse(rows) if rows else warehouse([("nobody", [None])]),
                   "D'": warehouse(rows + [("added", sorted(new))])}  # fmt: skip
            keys = subset_keys(whs["D'"], salt)
            for lists in (False, True):
                a = sql_admitted_round(whs["D"], admitted, delta_max, salt, lists)
                b = sql_admitted_round(whs["D'"], admitted, delta_max, salt, lists)
                assert a == pytest.approx(
                    reference_admitted_round(users, admitted, released, delta_max, keys)
                )
                assert b == pytest.approx(reference_admitted_round(both, admitted, released, delta_max, keys))
                assert l2_diff(a, b) <= 1 + 1e-9
    assert norms == {False, True}
    assert worst_broken > 2.0  # 5.4 with this seed: one user flips many admissions


# ----------------------------------------------------------------------------------------------
# 4. privacy on neighbouring datasets
# ----------------------------------------------------------------------------------------------
def _simulate(histogram_of, rounds: list[SipsRound], items: list[str], noise: NoiseSource) -> np.ndarray:
    """RUNS releases of a DP-SIPS run: round r thresholds ``histogram_of(released)`` (the round
    histogram for that public history) at (sigma_r, rho_r) with NoiseSource.above_threshold, the
    rule of threshold_histogram; runs with the same history share one histogram. Returns a
    (RUNS, len(items)) boolean matrix: item released in some round."""
    index = {item: j for j, item in enumerate(items)}
    released = np.zeros((RUNS, len(items)), dtype=bool)
    for rnd in rounds:
        patterns, inverse = np.unique(released, axis=0, return_inverse=True)
        new = np.zeros_like(released)
        for g, pattern in enumerate(patterns):
            runs = np.flatnonzero(inverse.ravel() == g)
            hist = histogram_of(frozenset(items[j] for j in np.flatnonzero(pattern)))
            cols = [index[i] for i in hist]
            if not cols:
                continue
            values = np.broadcast_to(np.array([hist[i] for i in hist]), (runs.size, len(cols)))
            passed = noise.above_threshold(values, rnd.sigma, rnd.threshold)
            new[np.ix_(runs, cols)] = passed
        released |= new & ~released
    return released


def _violations(a: np.ndarray, b: np.ndarray, sigma: float, delta0: float, epsilons) -> list[float]:
    """For every event "at least j of the targets released" and every epsilon' of ``epsilons``,
    how far the counts exceed the claim P <= e^eps' P' + delta(eps') in either direction, with
    delta(eps') = gaussian_delta(eps', sigma) + delta0 (the composed Gaussian plus the threshold
    events): the lower confidence bound of the left side minus the upper bound of the right side.
    > 0 is a detected violation. Bonferroni over 4 one-sided bounds x events x epsilons."""
    n = a.shape[1]
    alpha = FALSE_FAILURE / (4 * n * len(epsilons))
    ca, cb = a.sum(axis=1), b.sum(axis=1)
    out = []
    for eps in epsilons:
        slack = gaussian_delta(eps, sigma) + delta0
        for j in range(1, n + 1):
            fa, fb = int((ca >= j).sum()), int((cb >= j).sum())
            a_lo, a_hi = clopper_pearson(fa, RUNS, 2 * alpha)
            b_lo, b_hi = clopper_pearson(fb, RUNS, 2 * alpha)
            out.append(max(b_lo - (math.exp(eps) * a_hi + slack), a_lo - (math.exp(eps) * b_hi + slack)))
    return out


EPSILONS = (0.5, 1.0, 1.5, 2.0, 3.0)


@pytest.mark.statistical
def test_neighbouring_datasets_through_the_sql_rounds(secure_noise):
    """D: 4 target tokens, each held by 2 users who hold nothing else; D' adds a user holding the 4
    targets. Two rounds (ratio 1) of the mechanism's SQL (one histogram per public history, at most
    16), composed sigma 0.5, delta_0 = 1e-3, Delta = 4. For every event "at least j targets
    released" (j = 1..4) and epsilon' in EPSILONS, the (epsilon', delta_G(epsilon') + delta_0) bound
    holds both ways (false-failure rate <= 1e-4, Bonferroni), and the datasets differ in the event
    (the check is not vacuous)."""
    sigma, delta0, delta_max = 0.5, 1e-3, 4
    rounds = list(sips_vocabulary_rounds(sigma, delta0, delta_max, 2, 1.0))
    targets = [f"target{j}" for j in range(4)]
    base = [(f"u{j}{i}", [t]) for j, t in enumerate(targets) for i in range(2)] + [("o", ["other"])]
    released = {}
    for name, rows in (("D", base), ("D'", base + [("added", list(targets))])):
        wh, cache = warehouse(rows), {}

        def histogram_of(history, wh=wh, cache=cache):
            if history not in cache:
                hist = sql_round(wh, set(history), delta_max, 5)
                cache[history] = {i: w for i, w in hist.items() if i in targets}
            return cache[history]

        released[name] = _simulate(histogram_of, rounds, targets, secure_noise)
    assert max(_violations(released["D"], released["D'"], sigma, delta0, EPSILONS)) <= 0
    assert released["D'"].sum() > released["D"].sum() * 1.05


def _targets_data(targets: int, holders: int):
    base = {f"u{j}_{i}": {f"target{j}"} for j in range(targets) for i in range(holders)}
    return base, {**base, "added": {f"target{j}" for j in range(targets)}}


@pytest.mark.statistical
def test_neighbouring_datasets_pass_and_a_broken_weighting_fails(secure_noise):
    """16 targets, each held by 3 users of D who hold nothing else; D' adds a user holding all 16
    (Delta = 16). Two rounds, composed sigma 0.5, delta_0 = 1e-3, histograms from the numpy
    reference (equal to the SQL: test_sql_rounds_equal_the_numpy_reference). The DP-SIPS weighting
    (1/sqrt(#kept)) passes every (epsilon', delta_G(epsilon') + delta_0) check; the broken weighting
    1/#kept^(1/4) (the added user moves the histogram by 16^(1/4) = 2 in l2 in round 1) fails one of
    the same checks. Designed by simulation before the test was written: correct margin ~0.18,
    broken violation ~0.26 (with 20,000 runs). False failure <= 1e-4 (the correct check); the
    power check fails to detect with a probability the simulation put far below that."""
    sigma, delta0, delta_max, n = 0.5, 1e-3, 16, 16
    rounds = list(sips_vocabulary_rounds(sigma, delta0, delta_max, 2, 1.0))
    d, d2 = _targets_data(n, 3)
    targets = sorted({t for s in d2.values() for t in s})

    def run(items, exponent):
        return _simulate(
            lambda history: reference_round(items, set(history), delta_max, exponent=exponent),
            rounds,
            targets,
            secure_noise,
        )

    good = _violations(run(d, 0.5), run(d2, 0.5), sigma, delta0, EPSILONS)
    assert max(good) <= 0
    broken = _violations(run(d, 0.25), run(d2, 0.25), sigma, delta0, EPSILONS)
    assert max(broken) > 0


def _simulate_admission(
    users: dict[str, set[str]],
    items: list[str],
    rounds: list[SipsRound],
    noise: NoiseSource,
    exact_admission: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """RUNS releases of DP-SIPS with admission, vectorised over runs (every user keeps all its
    items: at most Delta of them). Round 1: the weighted histogram H_1 drawn with
    NoiseSource.threshold_bands (the rule of threshold_histogram with an admit floor): released
    R_1, admitted A. Round r >= 2: per run, each user's items in A not released yet, weight
    1/sqrt(#), thresholded at (sigma_r, rho_r) where the weight is positive. ``exact_admission``:
    the deliberately BROKEN variant, A = {H_1 >= floor} minus R_1 (exact weights, not the noisy
    ones). Returns (released, A, R_1, round 2's histograms), each (RUNS, len(items))."""
    index = {item: j for j, item in enumerate(items)}
    holds = np.zeros((len(users), len(items)))
    for u, own in enumerate(users.values()):
        holds[u, [index[i] for i in own]] = 1.0
    h1 = (holds / np.sqrt(holds.sum(axis=1, keepdims=True))).sum(axis=0)
    first, *later = rounds
    assert first.admit_floor is not None and later
    values = np.broadcast_to(h1, (RUNS, len(items)))
    released, admitted = noise.threshold_bands(values, first.sigma, first.threshold, first.admit_floor)
    if exact_admission:
        admitted = np.broadcast_to(h1 >= first.admit_floor, released.shape) & ~released
    first_released, second = released.copy(), None
    for rnd in later:
        live = (admitted & ~released).astype(np.float64)
        counts = live @ holds.T  # (runs, users): each user's admitted, unreleased items
        weights = np.where(counts > 0, 1.0 / np.sqrt(np.maximum(counts, 1.0)), 0.0)
        hist = (weights @ holds) * live
        second = hist if second is None else second
        released = released | (noise.above_threshold(hist, rnd.sigma, rnd.threshold) & (hist > 0))
    assert second is not None
    return released, admitted, first_released, second


@pytest.mark.statistical
def test_neighbouring_datasets_with_admission_pass_and_exact_weight_admission_fails(secure_noise):
    """Admission on neighbouring datasets. D: for each of 5 targets T_j, one user holding T_j only
    and 4 "partners" holding T_j and 3 words X_j1..X_j3; D' adds a user holding the 15 X words
    (Delta = 16). Two rounds (ratio 1), composed sigma 0.5, delta_0 = 1e-3, z = 3 (floor
    3 sigma_1 = 2.12). Round 1: T_j at 1 + 4/2 = 3 (rho_1 = 3.33), X at 2 in D and 2.26 in D'.

    The mechanism (admission by the noisy round-1 value) passes every (epsilon',
    delta_G(epsilon') + delta_0) check of ``_violations`` on the events "at least j targets
    released". The BROKEN variant admits by the exact round-1 weight: the X words are admitted in
    D' only (2.26 >= 2.12 > 2), so in round 2 each partner puts 1/2 instead of 1 on T_j (T_j at 3
    instead of 5): the targets are released far less often in D', through other users' weights,
    and a check fails. Numpy simulation (``_simulate_admission``, its round-2 histograms checked
    against ``reference_admitted_round`` on 40 runs each), round 1 through
    NoiseSource.threshold_bands. Designed by simulation before the test was written, then measured
    over 300 repetitions: correct largest check value <= -0.66 (never failed); broken 0.276 +- 0.004,
    at least 0.264 (a violation every time: ~60 standard deviations above 0). False failure
    <= 1e-4 (the correct check)."""
    sigma, delta0, delta_max, k = 0.5, 1e-3, 16, 5
    rounds = list(sips_vocabulary_rounds(sigma, delta0, delta_max, 2, 1.0, admission=3.0))
    d: dict[str, set[str]] = {}
    for j in range(k):
        d[f"b{j}"] = {f"T{j}"}
        d.update({f"p{j}_{i}": {f"T{j}", *(f"X{j}_{x}" for x in range(3))} for i in range(4)})
    d2 = {**d, "added": {f"X{j}_{x}" for j in range(k) for x in range(3)}}
    items = sorted(set().union(*d2.values()))
    targets = [items.index(f"T{j}") for j in range(k)]
    assert max(len(s) for s in d2.values()) <= delta_max

    def run(users, exact):
        released, admitted, first, hist = _simulate_admission(users, items, rounds, secure_noise, exact)
        for i in range(40):
            ref = reference_admitted_round(
                users, {items[j] for j in np.flatnonzero(admitted[i])},
                {items[j] for j in np.flatnonzero(first[i])}, delta_max,
            )  # fmt: skip
            assert {items[j]: hist[i, j] for j in np.flatnonzero(hist[i])} == pytest.approx(ref, abs=1e-12)
        return released[:, targets]

    good = _violations(run(d, False), run(d2, False), sigma, delta0, EPSILONS)
    assert max(good) <= 0
    broken = _violations(run(d, True), run(d2, True), sigma, delta0, EPSILONS)
    assert max(broken) > 0


@pytest.mark.statistical
def test_unique_items_of_the_added_user_are_released_with_probability_at_most_delta0(secure_noise):
    """Items held only by the added user: over all rounds the probability that one of them is
    released is at most delta_0 = sum_r delta_0r. The added user holds the t items that are the
    worst t of rho_r (the same t in every round: ratio 1), so as long as none is released it keeps
    all t and each round releases one with probability delta_0r exactly; the total is
    1 - prod_r (1 - delta_0r), just below delta_0: checked two-sided (false failure 1e-4)."""
    delta0, sigma, delta_max = 0.2, 0.8, 8
    rounds = list(sips_vocabulary_rounds(sigma, delta0, delta_max, 3, 1.0))
    ts = np.arange(1, delta_max + 1)
    worst = set()
    for rnd in rounds:
        p_t = 1 - stats.norm.cdf((rnd.threshold - 1 / np.sqrt(ts)) / rnd.sigma) ** ts
        assert p_t.max() == pytest.approx(rnd.threshold_delta, rel=1e-6)
        worst.add(int(ts[np.argmax(p_t)]))
    (t,) = worst
    expected = 1 - math.prod(1 - r.threshold_delta for r in rounds)
    assert expected <= delta0
    secret = [f"secret{j}" for j in range(t)]
    rows = [(f"u{i}", ["common", f"c{i % 3}"]) for i in range(10)] + [("added", secret)]
    wh = warehouse(rows)
    cache = {}

    def histogram_of(history):
        if history not in cache:
            hist = sql_round(wh, set(history), delta_max, 3)
            cache[history] = {i: w for i, w in hist.items() if i in secret}
        return cache[history]

    hits = int(_simulate(histogram_of, rounds, secret, secure_noise).any(axis=1).sum())
    lo, hi = clopper_pearson(hits, RUNS, FALSE_FAILURE)
    assert lo <= expected <= hi


@pytest.mark.statistical
def test_unique_items_of_the_added_user_with_admission_are_released_with_probability_at_most_delta0(
    secure_noise,
):
    """Admission (z = 0), 3 rounds: items held only by the added user, which holds the worst t of
    rho_1 (t = Delta = 8) and nothing else. Round 1 (NoiseSource.threshold_bands on the SQL
    histogram) releases one with probability p_t(rho_1) = delta_01; if it does not, each is admitted
    independently with probability a = P(0 <= Y <= rho_1 | Y <= rho_1), and rounds 2 and 3 (the
    admitted rounds' SQL, one histogram per admitted set) give each of the m admitted items weight
    1/sqrt(m), so round r releases one with probability p_m(rho_r) <= delta_0r whatever m. The
    total, 1 - (1 - delta_01) sum_m Binomial(m; t, a) prod_r>=2 (1 - p_m(rho_r)), is at most delta_0
    (and below plain DP-SIPS's here: admission concentrates the weight on fewer items, which rho_r
    covers): checked two-sided (false failure 1e-4)."""
    delta0, sigma, delta_max = 0.2, 0.8, 8
    rounds = list(sips_vocabulary_rounds(sigma, delta0, delta_max, 3, 1.0, admission=0.0))
    first = rounds[0]
    assert first.admit_floor == 0.0 and all(r.admit_floor is None for r in rounds[1:])
    ts = np.arange(1, delta_max + 1)

    def p_release(rnd: SipsRound, t):
        return 1 - stats.norm.cdf((rnd.threshold - 1 / np.sqrt(t)) / rnd.sigma) ** t

    t = int(ts[np.argmax(p_release(first, ts))])
    below = stats.norm.cdf((first.threshold - 1 / math.sqrt(t)) / first.sigma)
    a = (below - stats.norm.cdf((first.admit_floor - 1 / math.sqrt(t)) / first.sigma)) / below
    assert 0.3 < a < 0.9  # admission does sort the items
    no_hit = (1 - first.threshold_delta) * math.fsum(
        stats.binom.pmf(m, t, a) * math.prod(1 - (p_release(r, m) if m else 0.0) for r in rounds[1:])
        for m in range(t + 1)
    )
    expected = 1 - no_hit
    assert p_release(first, t) == pytest.approx(first.threshold_delta, rel=1e-6)
    assert expected <= delta0 and expected < 1 - math.prod(1 - r.threshold_delta for r in rounds)
    secret = [f"secret{j}" for j in range(t)]
    rows = [(f"u{i}", ["common", f"c{i % 3}"]) for i in range(10)] + [("added", secret)]
    wh, salt = warehouse(rows), 3
    h1 = sql_round(wh, set(), delta_max, salt)
    released, admitted = secure_noise.threshold_bands(
        np.broadcast_to([h1[s] for s in secret], (RUNS, t)), first.sigma, first.threshold, first.admit_floor
    )
    cache: dict[frozenset, dict[str, float]] = {}
    for rnd in rounds[1:]:
        live = admitted & ~released
        patterns, inverse = np.unique(live, axis=0, return_inverse=True)
        new = np.zeros_like(released)
        for g, pattern in enumerate(patterns):
            keep = frozenset(secret[j] for j in np.flatnonzero(pattern))
            if not keep:
                continue
            if keep not in cache:
                hist = sql_admitted_round(wh, set(keep) | {"common"}, delta_max, salt)
                cache[keep] = {i: w for i, w in hist.items() if i in secret}
                assert cache[keep] == pytest.approx({i: 1 / math.sqrt(len(keep)) for i in keep}, rel=1e-12)
            runs = np.flatnonzero(inverse.ravel() == g)
            cols = [secret.index(i) for i in cache[keep]]
            values = np.broadcast_to([cache[keep][i] for i in cache[keep]], (runs.size, len(cols)))
            new[np.ix_(runs, cols)] = secure_noise.above_threshold(values, rnd.sigma, rnd.threshold)
        released |= new
    hits = int(released.any(axis=1).sum())
    lo, hi = clopper_pearson(hits, RUNS, FALSE_FAILURE)
    assert lo <= expected <= hi, (hits / RUNS, expected)


# ----------------------------------------------------------------------------------------------
# 5. DPNE levels
# ----------------------------------------------------------------------------------------------
def markov_rows(seed: int, users: int, vocab: int = 8, successors: int = 3) -> list[tuple[str, list[str]]]:
    """Sentences from a sparse Markov chain (as tests/test_dpsu_policy.py): many valid k-grams are
    held by nobody."""
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


def level_warehouse(rows) -> tuple[Warehouse, set[str]]:
    wh = sentences_warehouse(SCHEMA, rows)
    s1 = {t for _, toks in rows for t in toks}
    wh.con.register("s1_list", pa.table({"item": sorted(s1)}))
    wh.con.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.s1_items AS SELECT item FROM s1_list")
    wh.con.unregister("s1_list")
    dpne_domain.install_vocabulary(wh, SCHEMA, "s1_items")
    return wh, s1


def grams(rows, k: int) -> set[str]:
    return {" ".join(toks[i : i + k]) for _, toks in rows for i in range(len(toks) - k + 1)}


def _spy_admission(monkeypatch) -> list[tuple[float | None, bool]]:
    """Record (admit_floor, collects admitted keys) of every threshold_histogram call of a level."""
    calls: list[tuple[float | None, bool]] = []
    real = dpne.threshold_histogram

    def spy(*args, **kwargs):
        calls.append((kwargs.get("admit_floor"), kwargs.get("admitted") is not None))
        return real(*args, **kwargs)

    monkeypatch.setattr(dpne, "threshold_histogram", spy)
    return calls


@pytest.mark.statistical
@pytest.mark.parametrize("admission", [None, 0.0])
def test_level_spurious_rate_matches_the_split_eta_in_both_variants(secure_noise, admission, monkeypatch):
    """Level 2 on a sparse Markov corpus (S_1 = all tokens, V_2 = S_1^2), 3 rounds, ratio 0.5, a
    large sigma so held bigrams rarely pass. A valid bigram nobody holds has weight 0 in every
    round; round r releases it with probability q_r = f_r eta min(1, |S_1|/|V_2|) if not released
    before, so its total probability is 1 - prod_r (1 - q_r) <= eta min(...) (Prop. 2.2 unchanged).
    Over 60 runs per variant the number of released unheld bigrams is Binomial(60 * N_unheld, that
    probability) (independent across bigrams and runs): two-sided check at false failure 1e-4 for
    each variant; every release is inside V_2 and has no duplicate (the scalable sampler rejects the
    earlier rounds' releases). With admission (z = 0: about half of V_2 admitted after round 1) the
    unheld bigrams' rate is the same: rounds 2 and 3 still threshold every unreleased valid bigram
    (weight 0 unless some user's admitted kept bigram), and round 1 did draw with the floor."""
    rows = markov_rows(31, users=25)
    runs, eta, sigma = 60, 0.4, 50.0
    counts = {}
    calls = _spy_admission(monkeypatch)
    for variant in ("exact", "scalable"):
        total, n_unheld = 0, None
        for _ in range(runs):
            wh, s1 = level_warehouse(rows)
            out = dpne.release_level(
                wh, SCHEMA, 2, sigma=sigma, eta=eta, max_contribution=100, pruning="both", variant=variant,
                exact_max_valid=10**6, noise=secure_noise, policy="dp-sips", sips_rounds=3, sips_ratio=0.5,
                sips_admission=admission,
            )  # fmt: skip
            floor = None if admission is None else admission * out.rounds[0].sigma
            assert calls == [(floor, admission is not None), (None, False), (None, False)]
            calls.clear()
            released = [r[0] for r in wh.con.sql(f"SELECT ngram FROM {SCHEMA}.dpne_s2").fetchall()]
            assert len(released) == len(set(released)) == out.released
            valid = {f"{a} {b}" for a in s1 for b in s1}
            assert set(released) <= valid and out.valid == len(valid)
            unheld = valid - grams(rows, 2)
            n_unheld = len(unheld)
            total += len(set(released) & unheld)
            assert len(out.rounds) == 3
        f = sips_fractions(3, 0.5)
        p = eta * min(1.0, len(s1) / len(valid))
        q = 1 - math.prod(1 - fr * p for fr in f)
        assert q <= p
        lo, hi = stats.binom.ppf([FALSE_FAILURE / 2, 1 - FALSE_FAILURE / 2], runs * n_unheld, q)
        assert lo <= total <= hi, (variant, total, lo, hi)
        counts[variant] = total
    assert all(c > 0 for c in counts.values())


@pytest.mark.parametrize("admission", [None, 1.5])
@pytest.mark.parametrize("variant", ["exact", "scalable"])
def test_levels_with_dp_sips_release_every_held_kgram_at_a_huge_epsilon(secure_noise, variant, admission):
    """Levels 2 and 3 with dp-sips at a huge epsilon: releases are inside V_k, every held valid
    k-gram is released (its weight >= 1/sqrt(Delta) is many sigma_r above rho_r in round 1), the
    stage's events are one Gaussian per round composing to sigma_k. With admission (z = 1.5) the
    same, round 1 carries the floor z sigma_1 and the events are unchanged."""
    sigmas = dpne.level_sigmas(Budget(50_000.0, 1e-3), 3, 1.0)
    rows = markov_rows(11, users=30)
    wh, s1 = level_warehouse(rows)
    prev = s1
    for k in (2, 3):
        out = dpne.release_level(
            wh, SCHEMA, k, sigma=sigmas[k], eta=0.5, max_contribution=100, pruning="both", variant=variant,
            exact_max_valid=10**6, noise=secure_noise, policy="dp-sips", sips_rounds=3, sips_ratio=1.0,
            sips_admission=admission,
        )  # fmt: skip
        assert out.variant == variant and len(out.rounds) == 3
        floor = None if admission is None else admission * out.rounds[0].sigma
        assert [r.admit_floor for r in out.rounds] == [floor, None, None]
        released = {r[0] for r in wh.con.sql(f"SELECT ngram FROM {SCHEMA}.dpne_s{k}").fetchall()}
        assert grams(rows, k) & {g for g in grams(rows, k) if set(g.split()) <= s1} <= released | set()
        held_valid = {
            g for g in grams(rows, k) if " ".join(g.split()[:-1]) in prev and " ".join(g.split()[1:]) in prev
        }
        assert held_valid <= released
        assert out.sigma == sigmas[k]
        events = out.events(f"dpne.k{k}")
        assert len(events) == 3
        assert compose_gaussian_sigmas(e.sigma for e in events) == pytest.approx(sigmas[k], rel=1e-14)
        assert out.report()["sips_rounds"][0]["sigma"] == out.rounds[0].sigma
        prev = released


# ----------------------------------------------------------------------------------------------
# 6. the stages
# ----------------------------------------------------------------------------------------------
def test_a_run_with_dp_sips_charges_per_round_events_and_the_same_epsilon(tmp_path, monkeypatch):
    """run_dpne with dpsu_policy=dp-sips on a small generated corpus: the vocabulary's part lists
    R Gaussian + R threshold events, each level R Gaussians, and every stage's composed epsilon
    equals the weighted run's (same sigma_k, same delta split). With dpsu_sips_admission set the
    stages do draw round 1 with the floor (the vocabulary and every level whose V_k is not empty,
    up to dpsu_sips_admission_max_n) and charge the same events (at the same budget ratio)."""
    from conftest import run_through_dpne

    from dpngram.release.context import read_parts
    from dpngram.text.sample import write_sample

    floors: list[float] = []
    real = dpsu.threshold_histogram

    def spy(*args, **kwargs):
        if kwargs.get("admit_floor") is not None:
            floors.append(kwargs["admit_floor"])
        return real(*args, **kwargs)

    monkeypatch.setattr(dpsu, "threshold_histogram", spy)
    monkeypatch.setattr(dpne, "threshold_histogram", spy)
    files = write_sample(tmp_path / "corpus", n_users=150, seed=4, public_sentences=50)
    eps, charged = {}, {}
    for policy, admission in (("weighted", None), ("dp-sips", None), ("dp-sips", 1.0)):
        name = policy if admission is None else "admission"
        ctx = run_through_dpne(
            tmp_path / name, files, public=False, dpsu_policy=policy, dpsu_sips_rounds=3, max_n=3,
            dpsu_sips_admission=admission is not None, dpsu_sips_admission_floor=admission,
            dpsu_sips_ratio=2.0, dpsu_sips_admission_ratio=2.0, dpsu_sips_admission_max_n=3,
            noise=NoiseSource.seeded_for_tests(8),
        )  # fmt: skip
        parts = read_parts(ctx)
        eps[name] = {s: parts[s]["privacy"]["epsilon"] for s in ("dpne.k1", "dpne.k2", "dpne.k3")}
        charged[name] = [parts[s]["privacy"]["events"] for s in ("dpne.k1", "dpne.k2", "dpne.k3")]
        # the vocabulary and each level whose V_k is not empty (seeded noise: the same every time)
        drawing = ["dpne.k1", *(f"dpne.k{k}" for k in (2, 3) if parts[f"dpne.k{k}"]["valid"] > 0)]
        assert len(drawing) >= 2
        expected = (
            [admission * parts[s]["sips_rounds"][0]["sigma"] for s in drawing]
            if admission is not None
            else []
        )
        assert floors == pytest.approx(expected, rel=1e-12)
        floors.clear()
        if policy == "dp-sips":
            events = parts["dpne.k1"]["privacy"]["events"]
            assert [e["mechanism"] for e in events] == ["gaussian", "approx"] * 3
            assert len(parts["dpne.k2"]["privacy"]["events"]) == 3
            assert len(parts["dpne.k1"]["sips_rounds"]) == 3
    for stage, value in eps["weighted"].items():
        assert eps["dp-sips"][stage] == pytest.approx(value, rel=1e-12)
    assert eps["admission"] == eps["dp-sips"] and charged["admission"] == charged["dp-sips"]


# ----------------------------------------------------------------------------------------------
# 7. Spark: the same SQL text, transpiled
# ----------------------------------------------------------------------------------------------
def _sentences_on(engine, rows) -> None:
    table = pa.table(
        {
            "user_id": [u for u, _ in rows],
            "doc_id": pa.array([1] * len(rows), type=pa.int64()),
            "sent_id": pa.array(list(range(len(rows))), type=pa.int32()),
            "tokens": [list(t) for _, t in rows],
        }
    )
    engine.create_schema(SCHEMA)
    with engine.registered(sips_sentences=table):
        engine.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.sentences AS SELECT * FROM sips_sentences")
    add_token_ids(engine, SCHEMA)
    engine.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src_view"))
    engine.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.src AS SELECT user_id, item FROM {SCHEMA}.src_view")


@pytest.mark.spark
@pytest.mark.slow
def test_sips_sql_runs_on_spark_and_agrees_with_duckdb(spark, tmp_path):
    """The rounds' SQL (anti-join view, shared histogram, released-keys table) and the level path
    (exact and scalable variants, the exclusion view) on Spark local mode. Delta exceeds every
    user's items, so no subsetting (the engines' hashes differ) and the histograms are
    deterministic: with a deterministic stand-in for the noisy step the three rounds' histograms
    agree to 1e-9 and so do the released sets; a DP-SIPS level at a huge epsilon releases the same
    held valid k-grams on both engines. Admission: the admitted statements (from the source and
    from the per-user lists; a stand-in admitting weights in [0.5, 2) plus public keys) give the
    same histograms and releases on both engines, a real vocabulary release and levels (both
    variants) run with admission on Spark too."""
    from dpngram.engines.spark import SparkEngine

    rows = random_rows(7, users=50, vocab=60)
    engines = {
        "duckdb": Warehouse(":memory:", memory_limit="1GB"),
        "spark": SparkEngine(spark, str(tmp_path / "spark")),
    }
    seen: dict[str, list[dict]] = {}
    released: dict[str, set] = {}
    for name, engine in engines.items():
        _sentences_on(engine, rows)
        seen[name] = []

        def draw(histogram, done, count, rnd, admitted, engine=engine, name=name):
            table = engine.fetch_arrow(load_sql("dpsu/histogram_scan", schema=SCHEMA, histogram=histogram))
            hist = dict(
                zip(table.column("item").to_pylist(), table.column("weight").to_pylist(), strict=True)
            )
            seen[name].append(hist)
            return pa.array(sorted(i for i, w in hist.items() if w >= 2.0), type=pa.string())

        out = dpsu.sips_rounds_release(
            engine, SCHEMA, "src", "t", rounds=[SipsRound(1.0, 1.0)] * 3, max_contribution=10_000,
            noise=Salts([1, 2, 3]), draw=draw,
        )  # fmt: skip
        released[name] = set().union(*[set(a.to_pylist()) for a in out])
        # admission: the admitted statements (from the source and from per-user lists)
        admit_rounds = [SipsRound(1.0, 1.0, admit_floor=0.5), SipsRound(1.0, 1.0), SipsRound(1.0, 1.0)]
        for lists, coded in ((False, False), (True, False), (True, True)):

            def admit_draw(histogram, done, count, rnd, admitted, engine=engine, name=name):
                hist = dict(zip(*engine.fetch_arrow(load_sql(
                    "dpsu/histogram_scan", schema=SCHEMA, histogram=histogram
                )).to_pydict().values(), strict=True))  # fmt: skip
                seen[name].append(hist)
                if admitted is not None:
                    band = sorted(i for i, w in hist.items() if 0.5 <= w < 2.0)
                    admitted.append(pa.array(band, type=pa.string()))
                return pa.array(sorted(i for i, w in hist.items() if w >= 2.0), type=pa.string())

            out = dpsu.sips_rounds_release(
                engine, SCHEMA, "src", "t", rounds=admit_rounds,
                max_contribution=10_000, noise=Salts([4]), draw=admit_draw, per_user_lists=lists,
                always_admitted=pa.array(["tok59", "tok58"], type=pa.string()), coded_items=coded,
            )  # fmt: skip
            released[f"{name} admission {lists} {coded}"] = set().union(*[set(a.to_pylist()) for a in out])
        n = dpsu.sips_release(
            engine, SCHEMA, "src", "real", rounds=sips_vocabulary_rounds(0.5, 1e-3, 10_000, 2, 2.0),
            max_contribution=10_000, noise=NoiseSource.secure(),
        )  # fmt: skip
        assert n == engine.fetch_scalar(f"SELECT count(*) FROM {SCHEMA}.real") and n > 0
        n = dpsu.sips_release(
            engine, SCHEMA, "src", "real", rounds=sips_vocabulary_rounds(0.5, 1e-3, 10_000, 2, 2.0, 1.5),
            max_contribution=10_000, noise=NoiseSource.secure(), per_user_lists=True, coded_items=True,
        )  # fmt: skip
        assert n == engine.fetch_scalar(f"SELECT count(*) FROM {SCHEMA}.real") and n > 0
    assert released["duckdb"] == released["spark"] and len(released["duckdb"]) > 5
    for lists, coded in ((False, False), (True, False), (True, True)):
        assert released[f"duckdb admission {lists} {coded}"] == released[f"spark admission {lists} {coded}"]
    assert released["duckdb admission True True"] == released["duckdb admission True False"]
    assert len(seen["duckdb"]) == 12 and all(seen["duckdb"][r] for r in range(12))
    for a, b in zip(seen["duckdb"], seen["spark"], strict=True):
        assert set(a) == set(b) and all(abs(a[i] - b[i]) <= 1e-9 for i in a)

    level_rows = markov_rows(11, users=30)
    s1 = sorted({t for _, toks in level_rows for t in toks})
    sigma = dpne.level_sigmas(Budget(50_000.0, 1e-3), 3, 1.0)[2]
    for variant, admission in (("exact", None), ("scalable", None), ("exact", 1.5), ("scalable", 0.0)):
        found = {}
        for name, engine in engines.items():
            _sentences_on(engine, level_rows)
            dpsu._store_items(engine, SCHEMA, "s1_items", pa.table({"item": s1}))
            dpne_domain.install_vocabulary(engine, SCHEMA, "s1_items")
            out = dpne.release_level(
                engine, SCHEMA, 2, sigma=sigma, eta=1e-3, max_contribution=10_000, pruning="both",
                variant=variant, exact_max_valid=10**6, noise=NoiseSource.secure(), policy="dp-sips",
                sips_rounds=3, sips_ratio=2.0, sips_admission=admission,
            )  # fmt: skip
            assert out.variant == variant and out.valid == len(s1) ** 2
            assert (out.rounds[0].admit_floor is None) == (admission is None)
            ngrams = engine.fetch_arrow(f"SELECT ngram FROM {SCHEMA}.dpne_s2").column("ngram").to_pylist()
            found[name] = set(ngrams) & grams(level_rows, 2)
        assert found["duckdb"] == found["spark"] == grams(level_rows, 2)
    engines["duckdb"].close()


def test_a_release_of_nothing_writes_an_empty_table_of_the_item_type():
    """No round releases anything (thresholds far above every weight): the target exists, empty,
    with the source's item type, and the rounds' working tables are gone."""
    wh = warehouse(random_rows(3, users=10, vocab=10))
    rounds = [SipsRound(0.1, 1e6), SipsRound(0.1, 1e6)]
    n = dpsu.sips_release(
        wh, SCHEMA, "src", "none", rounds=rounds, max_contribution=3, noise=NoiseSource.secure()
    )
    assert n == 0 and wh.con.sql(f"SELECT count(*) FROM {SCHEMA}.none").fetchall() == [(0,)]
    assert wh.con.sql(f"DESCRIBE {SCHEMA}.none").fetchall()[0][1] == "VARCHAR"
    assert not any(wh.object_type(SCHEMA, f"none_sips_{t}") for t in ("done", "remaining", "histogram"))


def test_coded_kept_lists_keep_the_same_items_and_fall_back_when_codes_collide(monkeypatch):
    """The coded kept lists (sql/dpsu/user_kept_lists_coded.sql) keep, for every user and salt, the
    same items as the plain ones (sql/dpsu/user_kept_lists.sql), also for the users holding more than
    Delta items (where the salted order decides); and when two items share a code (forced here by mapping
    every item to one of three codes) the release takes the plain lists, whose statements run."""
    rows = random_rows(5, users=40, vocab=200, max_len=30)
    wh = warehouse(rows)
    cut = sum(len(own) > 4 for own in user_items(rows).values())
    assert cut >= 20
    for salt in (3, 2**63 + 11):
        params = {"salt": salt, "max_contribution": 4}
        wh.execute(load_sql("dpsu/user_kept_lists", schema=SCHEMA, target="t_plain", source="src"), params)
        wh.execute(load_sql("dpsu/item_codes", schema=SCHEMA, target="t_codes", source="src"))
        wh.execute(
            load_sql("dpsu/user_kept_lists_coded", schema=SCHEMA, target="t_coded", source="src"), params
        )
        decoded = wh.con.sql(
            f"SELECT l.user_id, list_sort(list(c.item)) FROM (SELECT user_id, unnest(kept) AS code "
            f"FROM {SCHEMA}.t_coded) AS l JOIN {SCHEMA}.t_codes AS c USING (code) GROUP BY l.user_id"
        ).fetchall()
        plain = wh.con.sql(f"SELECT user_id, list_sort(kept) FROM {SCHEMA}.t_plain").fetchall()
        assert sorted(decoded) == sorted(plain)
        assert sum(len(k) == 4 for _, k in plain) >= cut
    wh.drop(SCHEMA, "t_plain", "t_coded", "t_codes")

    wh.con.execute(f"CREATE TABLE {SCHEMA}.t_clash AS SELECT 'a' AS item, 1 AS code UNION ALL SELECT 'b', 1")
    row = wh.fetch_arrow(load_sql("dpsu/item_codes_distinct", schema=SCHEMA, codes="t_clash")).to_pylist()
    assert row == [{"items": 2, "codes": 1}]

    ran: list[str] = []
    real_load = dpsu.load_sql

    def clashing(name: str, **identifiers: str) -> str:
        ran.append(name)
        if name == "dpsu/item_codes":  # three codes for every item: collisions
            return real_load(name, **identifiers).replace("hash(item) AS code", "hash(item) % 3 AS code")
        return real_load(name, **identifiers)

    monkeypatch.setattr(dpsu, "load_sql", clashing)
    rounds = sips_vocabulary_rounds(0.5, 1e-3, 10, 2, 2.0, 1.5)
    n = dpsu.sips_release(
        wh, SCHEMA, "src", "real", rounds=rounds, max_contribution=10, noise=NoiseSource.secure(),
        per_user_lists=True, coded_items=True,
    )  # fmt: skip
    assert n > 0 and "dpsu/user_kept_lists" in ran and "dpsu/histogram_kept" in ran
    assert not {"dpsu/user_kept_lists_coded", "dpsu/histogram_kept_coded"} & set(ran)
    assert not wh.object_type(SCHEMA, "real_sips_codes")


def _token_kept_sets(rows, salt: int, max_contribution: int) -> dict[str, list[str]]:
    """Each user's kept items (decoded) from the vocabulary's token-id path
    (sql/dpsu/item_codes_tokens.sql + user_kept_lists_coded_tokens.sql) over ``rows``."""
    wh = warehouse(rows)
    params = {"salt": salt, "max_contribution": max_contribution}
    wh.execute(load_sql("dpsu/item_codes_tokens", schema=SCHEMA, target="t_codes"))
    wh.execute(load_sql("dpsu/user_kept_lists_coded_tokens", schema=SCHEMA, target="t_kept"), params)
    rows_out = wh.con.sql(
        f"SELECT l.user_id, list_sort(list(c.item)) FROM (SELECT user_id, unnest(kept) AS code "
        f"FROM {SCHEMA}.t_kept) AS l JOIN {SCHEMA}.t_codes AS c USING (code) GROUP BY l.user_id"
    ).fetchall()
    return dict(rows_out)


def test_token_id_kept_lists_equal_the_plain_ones():
    """The vocabulary's kept lists built from the sentences' token ids and the dictionary keep, for
    every user and salt, exactly the items of the plain rule (sql/dpsu/user_kept_lists.sql over the
    string source), also for users over Delta, where the salted order decides."""
    rows = random_rows(6, users=40, vocab=200, max_len=30)
    wh = warehouse(rows)
    assert sum(len(own) > 4 for own in user_items(rows).values()) >= 20
    for salt in (5, 2**63 + 17):
        params = {"salt": salt, "max_contribution": 4}
        wh.execute(load_sql("dpsu/user_kept_lists", schema=SCHEMA, target="t_plain", source="src"), params)
        plain = dict(wh.con.sql(f"SELECT user_id, list_sort(kept) FROM {SCHEMA}.t_plain").fetchall())
        assert _token_kept_sets(rows, salt, 4) == plain


def test_a_new_users_tokens_renumber_the_ids_but_change_no_other_users_kept_set():
    """Neighbouring datasets: adding one user whose tokens are new and sort first gives most other
    tokens new ids (the dictionary numbers tokens in sorted order per batch). Every other user's kept
    set must stay the same, bit for bit: the rule hashes the tokens' text, not their ids. (Hashing
    the ids would change the kept sets of many users over Delta and break the sensitivity bound.)"""
    rows = random_rows(7, users=40, vocab=200, max_len=30)
    added = [("aaa-new-user", ["aaa0", "aaa1", "aaa2", "tok3", "aaa3", "aaa4", "aaa5"])]
    base, neighbour = warehouse(rows), warehouse(added + rows)
    ids = {}
    for name, wh in (("base", base), ("neighbour", neighbour)):
        ids[name] = dict(wh.con.sql(f"SELECT token, tid FROM {SCHEMA}.token_ids").fetchall())
    renumbered = sum(ids["base"][t] != ids["neighbour"][t] for t in ids["base"])
    assert renumbered > len(ids["base"]) // 2  # the neighbour really moves the ids
    for salt in (11, 2**62 + 5):
        before = _token_kept_sets(rows, salt, 4)
        after = _token_kept_sets(added + rows, salt, 4)
        assert sum(len(k) == 4 for k in before.values()) >= 20
        assert {u: k for u, k in after.items() if u != "aaa-new-user"} == before
        assert len(after["aaa-new-user"]) == 4
