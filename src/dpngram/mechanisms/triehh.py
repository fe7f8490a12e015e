"""Out-of-vocabulary word discovery with local DP: LDP TrieHH with Subset Selection, federated
simulation on the ingested corpus, and the shuffle-model (central) privacy accounting.

Papers (symbols reconstructed; see ``docs/triehh.md`` for the reconstruction and every deviation):

* Sun, Kairouz, Sun, Gascon & Suresh (2024), "Private federated discovery of out-of-vocabulary
  words for Gboard" (``../shared/papers/gboard_ldp_triehh_oov.md``): Algorithm 1 (Subset Selection
  randomizer), Algorithm 2 (LDP TrieHH), the local samplers (GreedySampling / RandomSampling), the
  multi-pass variant, Theorems 1-2.
* Zhu, Kairouz, McMahan, Sun & Li (2020), "Federated heavy hitters discovery with differential
  privacy" (TrieHH): the trie built layer by layer over fresh groups of users, end symbol ``$``.
* Wang et al. (2016) / Ye & Barg (2017): Subset Selection, subset size s = ceil(d / (e^eps0 + 1)).
* Feldman, McMillan & Talwar (2021), "Hiding among the clones" (FMT21): Theorem 3.1 (closed form)
  and the numerical bound of its Appendix E (reduction to two distributions over the number of
  "clones", binary search on epsilon).

Protocol simulated here, per pass and per layer l = 1..L (Alg. 2):

1. the server draws a fresh group of ``n`` users that never took part before (a uniformly random
   ordering of all users from :class:`NoiseSource`, cut into consecutive disjoint groups), and
   broadcasts the heavy prefixes H_{l-1} (H_0 = {empty prefix});
2. each user forms the length-l prefixes of its words (word + end symbol) whose (l-1)-prefix is
   in H_{l-1} (SQL, ``sql/triehh/layer_prefixes.sql``), selects m of them (GreedySampling: the
   most frequent; RandomSampling: uniform over the distinct ones), pads to m with the dummy ⊥, and
   randomizes each through Subset Selection over the domain X_l = (H_{l-1} x (alphabet ∪ {$})) ∪ {⊥};
3. the server sums the vote vectors and keeps the at most k prefixes with the most votes whose
   votes also exceed a data-independent noise threshold; prefixes ending with $ are words.

Privacy (derivation in ``docs/triehh.md``): each report is eps0-LDP (item level, Thm. 1). A user
sends m reports in the one layer it takes part in, so its message is (m eps0)-LDP at user level.
The server sees only the sum of a group's vote vectors (a post-processing of the shuffled
messages), so by FMT21 each layer is (eps, delta)-DP at user level with eps from the numerical
amplification bound for n users of (m eps0)-LDP randomizers. Groups are disjoint and fixed by
data-independent randomness, so across layers and passes the guarantee is the maximum over the
layers (parallel composition), not the sum.

Why one module (over 600 lines): the randomizer, the trie simulation and the shuffle-model
accounting are one protocol whose parameters (eps0, subset size, users per layer) are chosen
together; the accounting is only meaningful next to the randomizer it bounds.

Owns: the Subset Selection randomizer, the trie protocol simulation, the shuffle-model accounting
(FMT21 bounds, ε0 for a budget, the stage's privacy plan and event), merging discovered words
into S_1.
Imports: dpngram.mechanisms.dpne_domain, dpngram.engines, dpngram.core; numpy, scipy, pyarrow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats

from dpngram.core.accounting import TRIEHH_DELTA_SHARE_USED, PrivacyEvent
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.dpne_domain import number_users

DEFAULT_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789'-"


#: The amplification bound is computed at this fraction of the stage's delta share: the
#: accountant needs a strictly positive remainder when it composes the stage's events.
DELTA_SHARE_USED = TRIEHH_DELTA_SHARE_USED  # shared with the joint calibration's shape


USERS_TABLE, WORDS_TABLE, KNOWN_TABLE, LEARNED_TABLE = (
    "triehh_users",
    "triehh_user_words",
    "triehh_known",
    "triehh_learned",
)


_DENSE_CELLS = 1 << 22  # rows x domain cells per dense Subset Selection chunk (32 MB of float64)


# ----------------------------------------------------------------------------------------------
# Subset Selection (Sun et al. Alg. 1; Wang et al. 2016; Ye & Barg 2017)
# ----------------------------------------------------------------------------------------------
def subset_size(d: int, epsilon0: float) -> int:
    """s = ceil(d / (e^eps0 + 1)) (Alg. 1 line 2; Ye & Barg's optimal size), at least 1."""
    if d < 2:
        raise ValueError(f"Subset Selection needs a domain of at least 2 items (got {d})")
    _check_epsilon0(epsilon0)
    return max(1, min(d - 1, math.ceil(d / (math.exp(epsilon0) + 1.0))))


def subset_selection_probabilities(d: int, epsilon0: float) -> tuple[int, float, float]:
    """(s, p, q): subset size; probability that the true item is in the output,
    p = s e^eps0 / (s e^eps0 + d - s) (Alg. 1 line 5); probability that a given other item is,
    q = (s - p) / (d - 1)."""
    s = subset_size(d, epsilon0)
    weight = s * math.exp(epsilon0)
    p = weight / (weight + d - s)
    return s, p, (s - p) / (d - 1)


def subset_probability(subset: Sequence[int], item: int, d: int, epsilon0: float) -> float:
    """Exact probability that Subset Selection outputs ``subset`` on input ``item``:
    p / C(d-1, s-1) if the item is in it, (1 - p) / C(d-1, s) if not, 0 for another size."""
    s, p, _ = subset_selection_probabilities(d, epsilon0)
    chosen = set(int(i) for i in subset)
    if len(chosen) != s:
        return 0.0
    if item in chosen:
        return p / math.comb(d - 1, s - 1)
    return (1.0 - p) / math.comb(d - 1, s)


def subset_selection_reports(
    items: np.ndarray, d: int, epsilon0: float, noise: NoiseSource, *, path: str = "auto"
) -> np.ndarray:
    """Randomize each input item (integers in [0, d)) with Subset Selection; returns a boolean
    (len(items), d) membership matrix, one row per report (Alg. 1).

    Each row holds the true item with probability p, plus uniformly random distinct other items
    to a total of s. ``path`` 'sparse' draws the other items one by one with rejection of repeats
    (cheap for small s), 'dense' takes the s (or s - 1) smallest of d random keys; 'auto' picks."""
    items = _check_items(items, d)
    s, p, _ = subset_selection_probabilities(d, epsilon0)
    out = np.zeros((items.size, d), dtype=bool)
    for start, chunk in _chunks(items, d):
        include = noise.uniform(chunk.size) < p
        if _use_sparse(path, s, d):
            chosen = _sparse_others(chunk, include, s, d, noise)
            rows = np.repeat(np.arange(chunk.size), s)
            valid = chosen.ravel() >= 0
            out[start + rows[valid], chosen.ravel()[valid]] = True
        else:
            out[start : start + chunk.size] = _dense_others(chunk, include, s, d, noise)
        out[start + np.flatnonzero(include), chunk[include]] = True
    return out


def subset_selection_votes(
    items: np.ndarray, d: int, epsilon0: float, noise: NoiseSource, *, path: str = "auto"
) -> np.ndarray:
    """Sum over all reports of the Subset Selection outputs (Alg. 2 line 21), computed in
    chunks with the same sampler as :func:`subset_selection_reports`; int64 array of length d."""
    items = _check_items(items, d)
    s, p, _ = subset_selection_probabilities(d, epsilon0)
    votes = np.zeros(d, dtype=np.int64)
    for _, chunk in _chunks(items, d):
        include = noise.uniform(chunk.size) < p
        if _use_sparse(path, s, d):
            chosen = _sparse_others(chunk, include, s, d, noise).ravel()
            votes += np.bincount(chosen[chosen >= 0], minlength=d)
        else:
            votes += _dense_others(chunk, include, s, d, noise).sum(axis=0)
        votes += np.bincount(chunk[include], minlength=d)
    return votes


def _check_items(items: np.ndarray, d: int) -> np.ndarray:
    items = np.asarray(items, dtype=np.int64).ravel()
    if items.size and (items.min() < 0 or items.max() >= d):
        raise ValueError(f"Subset Selection inputs must lie in [0, {d})")
    return items


def _chunks(items: np.ndarray, d: int):
    rows = max(1, _DENSE_CELLS // d)
    for start in range(0, items.size, rows):
        yield start, items[start : start + rows]


def _use_sparse(path: str, s: int, d: int) -> bool:
    if path not in ("auto", "sparse", "dense"):
        raise ValueError(f"path must be 'auto', 'sparse' or 'dense' (got {path!r})")
    return path == "sparse" or (path == "auto" and s <= 16 and 4 * s <= d)


def _sparse_others(x: np.ndarray, include: np.ndarray, s: int, d: int, noise: NoiseSource) -> np.ndarray:
    """(rows, s) matrix of distinct items other than x (-1 = unused slot): s - include[r] of
    them per row, drawn one after another uniformly among the items not yet chosen."""
    chosen = np.full((x.size, s), -1, dtype=np.int64)
    wanted = s - include.astype(np.int64)
    for j in range(s):
        todo = np.flatnonzero(wanted > j)
        while todo.size:
            draw = noise.integers(0, d - 1, todo.size)
            draw = draw + (draw >= x[todo])  # uniform over [0, d) without the true item
            repeat = (chosen[todo, :j] == draw[:, None]).any(axis=1)
            accepted = todo[~repeat]
            chosen[accepted, j] = draw[~repeat]
            todo = todo[repeat]
    return chosen


def _dense_others(x: np.ndarray, include: np.ndarray, s: int, d: int, noise: NoiseSource) -> np.ndarray:
    """Boolean (rows, d): the s - include[r] items other than x with the smallest random keys."""
    rows = np.arange(x.size)
    keys = noise.uniform(x.size * d).reshape(x.size, d)
    keys[rows, x] = 2.0  # never among the smallest: keys are in [0, 1)
    smallest = np.sort(np.partition(keys, s - 1, axis=1)[:, :s], axis=1)
    below = smallest[:, s - 2] if s >= 2 else np.full(x.size, -1.0)
    cut = np.where(include, below, smallest[:, s - 1])
    return keys <= cut[:, None]


def debias_votes(votes: np.ndarray, reports: int, d: int, epsilon0: float) -> np.ndarray:
    """Unbiased frequency estimates from aggregated Subset Selection votes:
    f_j = (V_j - N q) / (p - q) with N reports (E[V_j] = f_j p + (N - f_j) q)."""
    _, p, q = subset_selection_probabilities(d, epsilon0)
    return (np.asarray(votes, dtype=np.float64) - reports * q) / (p - q)


def noise_vote_threshold(reports: int, d: int, epsilon0: float, spurious_rate: float) -> int:
    """Smallest vote count t such that an item nobody reported reaches t with probability at most
    ``spurious_rate / d`` (its votes are exactly Binomial(N, q)); by the union bound, all of a
    layer's unreported candidates stay below t except with probability ``spurious_rate``.
    Depends only on public design parameters (N = n m reports, d, eps0)."""
    if not 0 < spurious_rate < 1:
        raise ValueError(f"spurious_rate must be in (0, 1) (got {spurious_rate})")
    _, _, q = subset_selection_probabilities(d, epsilon0)
    # P(V >= t) = sf(t - 1); isf gives the smallest k with sf(k) <= alpha, so t = k + 1.
    return int(stats.binom.isf(spurious_rate / d, reports, q)) + 1


# ----------------------------------------------------------------------------------------------
# Amplification by shuffling (Feldman, McMillan & Talwar 2021)
# ----------------------------------------------------------------------------------------------
def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """FMT21 Theorem 3.1 (the arXiv form implemented by the authors' reference code): for
    eps0 <= log(n / (16 log(4/delta))), shuffling n eps0-LDP reports is (eps, delta)-DP with
    a = 8 sqrt(e^eps0 log(4/delta) / n), c = 8 e^eps0 / n, eps1 = log(1 + a + c),
    eps = log(1 + (1 - e^-eps0) / (1 + e^(-eps0 - eps1)) (a + c)). Outside that regime: eps0."""
    _check_shuffle_args(epsilon0, n, delta)
    if epsilon0 > math.log(n / (16.0 * math.log(4.0 / delta))):
        return epsilon0
    a = 8.0 * math.sqrt(math.exp(epsilon0) * math.log(4.0 / delta) / n)
    c = 8.0 * math.exp(epsilon0) / n
    eps1 = math.log1p(a + c)
    factor = -math.expm1(-epsilon0) / (1.0 + math.exp(-epsilon0 - eps1))
    return min(epsilon0, math.log1p(factor * (a + c)))


def shuffle_delta(epsilon: float, epsilon0: float, n: int, *, tail: float = 1e-18) -> float:
    """Upper bound on the smallest delta for which shuffling n eps0-LDP reports is
    (epsilon, delta)-DP (FMT21, Thm. 3.2 reduction / Appendix E).

    With C ~ Bin(n - 1, e^-eps0) clones, A ~ Bin(C, 1/2) and alpha = e^eps0 / (e^eps0 + 1),
    the shuffled outputs on neighbouring inputs are post-processings of
    P_c = alpha Bin(c, 1/2) + (1 - alpha)(Bin(c, 1/2) + 1) and Q_c (alpha and 1 - alpha swapped),
    mixed over C = c. So delta = sum_c Pr[C = c] D_{e^eps}(P_c || Q_c) (Q_c is P_c mirrored, so
    the other direction is equal). P_c(a) / Q_c(a) decreases in a, hence the divergence is
    P_c(a <= t) - e^eps Q_c(a <= t) with t the last a where P_c > e^eps Q_c; exactly the terms
    with c in the central range of C carrying all but ``2 tail`` of its mass are summed and the
    left-out mass is added (each term is at most 1), which keeps the result an upper bound."""
    _check_shuffle_args(epsilon0, n, 0.5)
    return _mixture_delta(epsilon, epsilon0, _clone_mixture(epsilon0, n, tail))


def _clone_mixture(epsilon0: float, n: int, tail: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(c values, Pr[C = c], left-out mass) for C ~ Bin(n - 1, e^-eps0)."""
    if n == 1:
        return np.zeros(1), np.ones(1), 0.0
    clone = math.exp(-epsilon0)
    # A central window of C (z standard deviations plus a skew margin); the mass outside it is
    # computed exactly below and added to delta, so the window only affects tightness.
    z = float(stats.norm.isf(tail))
    mean, sd = (n - 1) * clone, math.sqrt((n - 1) * clone * (1 - clone))
    lo = max(0, math.floor(mean - z * sd - z * z))
    hi = min(n - 1, math.ceil(mean + z * sd + z * z))
    c = np.arange(lo, hi + 1, dtype=np.float64)
    left_out = float(stats.binom.cdf(lo - 1, n - 1, clone) + stats.binom.sf(hi, n - 1, clone))
    return c, stats.binom.pmf(c, n - 1, clone), left_out


def _mixture_delta(epsilon: float, epsilon0: float, mixture: tuple[np.ndarray, np.ndarray, float]) -> float:
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0 (got {epsilon})")
    if epsilon >= epsilon0:
        return 0.0
    c, weight, left_out = mixture
    alpha = 1.0 / (1.0 + math.exp(-epsilon0))
    e_eps = math.exp(epsilon)
    # P_c(a) > e^eps Q_c(a)  <=>  a / (c + 1 - a) < r (solve the linear equation in b(a-1)/b(a))
    r = (alpha - e_eps * (1.0 - alpha)) / (e_eps * alpha - (1.0 - alpha))
    beta = r / (1.0 + r)
    t = np.ceil(beta * (c + 1.0)) - 1.0  # largest integer a with a < beta (c + 1)
    cdf_t = stats.binom.cdf(t, c, 0.5)
    cdf_t1 = stats.binom.cdf(t - 1.0, c, 0.5)
    p_le = alpha * cdf_t + (1.0 - alpha) * cdf_t1
    q_le = (1.0 - alpha) * cdf_t + alpha * cdf_t1
    inner = np.clip(p_le - e_eps * q_le, 0.0, 1.0)
    return float(min(1.0, np.dot(weight, inner) + left_out))


def numerical_epsilon(epsilon0: float, n: int, delta: float, *, iterations: int = 44) -> float:
    """Smallest eps (to within 2^-iterations of the start interval, rounded up) with
    :func:`shuffle_delta` <= delta: binary search from [0, min(eps0, closed form)] (FMT21 App. E)."""
    _check_shuffle_args(epsilon0, n, delta)
    mixture = _clone_mixture(epsilon0, n, 1e-18)
    hi = min(epsilon0, closed_form_epsilon(epsilon0, n, delta))
    if _mixture_delta(hi, epsilon0, mixture) > delta:  # the closed form is an upper bound; be safe anyway
        hi = epsilon0
    lo = 0.0
    if _mixture_delta(lo, epsilon0, mixture) <= delta:
        return 0.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if _mixture_delta(mid, epsilon0, mixture) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def epsilon0_for_budget(epsilon: float, delta: float, n: int, reports_per_user: int) -> float:
    """Largest per-report eps0 such that n users, each sending ``reports_per_user`` eps0-LDP
    reports (so (m eps0)-LDP per user), are (epsilon, delta)-DP at user level after shuffling
    (numerical FMT21 bound): binary search on eps_user = m eps0, the bound being increasing in it.
    Rounded down, so the returned eps0 always satisfies the budget."""
    if not (epsilon > 0 and 0 < delta < 1 and n >= 1 and reports_per_user >= 1):
        raise ValueError("epsilon0_for_budget needs epsilon > 0, 0 < delta < 1, n >= 1, m >= 1")
    lo, hi = epsilon, epsilon  # eps_user = epsilon is always within budget (shuffling never hurts)
    while numerical_epsilon(hi * 2.0, n, delta) <= epsilon and hi < 64:
        hi *= 2.0
    hi = min(hi * 2.0, 128.0)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if numerical_epsilon(mid, n, delta, iterations=30) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo / reports_per_user


def shuffle_privacy_plan(
    epsilon: float, delta: float, *, users_per_layer: int, max_words: int, epsilon0: float | None
) -> dict[str, float]:
    """The per-report ε0 and the guarantees it gives, from the stage's share (ε, δ) (public).

    Privacy map: each user sends ``max_words`` ε0-LDP reports in one layer only, so is
    (m ε0)-LDP; after shuffling groups of ``users_per_layer`` the layer is (central ε, δ')-DP at
    user level by FMT21's numerical bound, with δ' = δ · :data:`DELTA_SHARE_USED`, and layers on
    disjoint users compose in parallel (derivation in docs/triehh.md). ``epsilon0`` None: the
    largest ε0 within the share; a given ε0 above it is refused."""
    delta_used = delta * DELTA_SHARE_USED
    n, m = users_per_layer, max_words
    epsilon0 = epsilon0_for_budget(epsilon, delta_used, n, m) if epsilon0 is None else float(epsilon0)
    central = numerical_epsilon(m * epsilon0, n, delta_used)
    if central > epsilon * (1 + 1e-9):
        raise ConfigError(
            f"triehh_epsilon0: {epsilon0:g} gives user-level central epsilon {central:.4g} after "
            f"shuffling groups of {n}, above the triehh share {epsilon:.4g}; lower it or leave it unset"
        )
    return {
        "epsilon0": epsilon0,
        "user_ldp_epsilon": m * epsilon0,
        "central_epsilon": central,
        "central_delta": delta_used,
        "central_epsilon_closed_form": closed_form_epsilon(m * epsilon0, n, delta_used),
        "item_level_central_epsilon": numerical_epsilon(epsilon0, n * m, delta_used),
        "budget_epsilon": epsilon,
        "budget_delta": delta,
    }


def plan_events(plan: dict[str, float], stage: str) -> list[PrivacyEvent]:
    """The stage's privacy event: one user-level (central ε, δ') event of
    :func:`shuffle_privacy_plan`'s ``plan`` (an approximate-DP event: composed by basic composition)."""
    return [
        PrivacyEvent(
            stage=stage,
            mechanism="approx",
            epsilon=plan["central_epsilon"],
            delta=plan["central_delta"],
            note="LDP TrieHH: user-level central (eps, delta) after shuffling (FMT21 numerical)",
        )
    ]


def _check_shuffle_args(epsilon0: float, n: int, delta: float) -> None:
    _check_epsilon0(epsilon0)
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1 (got {n!r})")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1) (got {delta})")


def _check_epsilon0(epsilon0: float) -> None:
    if not (isinstance(epsilon0, (int, float)) and math.isfinite(epsilon0) and epsilon0 > 0):
        raise ValueError(f"epsilon0 must be a finite number > 0 (got {epsilon0!r})")


# ----------------------------------------------------------------------------------------------
# The federated protocol (Alg. 2 and the multi-pass variant)
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrieParameters:
    """Public design parameters of LDP TrieHH (Alg. 2 inputs)."""

    epsilon0: float  # per-report LDP parameter
    users_per_layer: int  # n
    max_depth: int  # L (the end symbol counts: words have at most L - 1 characters)
    max_words: int = 4  # m, reports per user
    max_prefixes: int = 10  # k, heavy prefixes kept per layer
    passes: int = 1
    sampling: Literal["greedy", "random"] = "random"
    alphabet: str = DEFAULT_ALPHABET
    end_symbol: str = "$"
    spurious_rate: float = 0.01

    def __post_init__(self) -> None:
        _check_epsilon0(self.epsilon0)
        for name in ("users_per_layer", "max_depth", "max_words", "max_prefixes", "passes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.max_depth < 2:
            raise ValueError("max_depth must be >= 2 (one character plus the end symbol)")
        if self.sampling not in ("greedy", "random"):
            raise ValueError(f"sampling must be 'greedy' or 'random' (got {self.sampling!r})")
        _check_alphabet(self.alphabet, self.end_symbol)

    @property
    def users_needed(self) -> int:
        return self.users_per_layer * self.max_depth * self.passes


@dataclass
class LayerReport:
    """Public record of one layer: its candidates, threshold and kept prefixes (all
    post-processing of the noisy votes or design parameters)."""

    pass_index: int
    depth: int
    domain_size: int  # d, including the dummy
    subset_size: int
    vote_threshold: int
    kept_prefixes: int
    words_found: int


@dataclass
class TrieResult:
    """Output of :func:`run_trie`. ``words`` is the DP output; ``groups`` (the user indices
    of each (pass, layer) group that reported) stays private (tests check disjointness)."""

    words: list[str]
    layers: list[LayerReport]
    groups: list[np.ndarray] = field(default_factory=list, repr=False)


#: fetch(group_uidx, broadcast_prefixes, depth, learned_words) -> (positions in group, prefixes, counts)
LayerFetch = Callable[[np.ndarray, list[str], int, list[str]], tuple[np.ndarray, list[str], np.ndarray]]


def assign_groups(n_users: int, params: TrieParameters, noise: NoiseSource) -> np.ndarray:
    """Disjoint groups (Alg. 2 line 7): a uniformly random ordering of the user indices 0..N-1,
    cut into passes x max_depth consecutive groups of ``users_per_layer``. Shape
    (passes, max_depth, n). Raises ConfigError if the population is too small (the message does
    not state its size)."""
    if params.users_needed > n_users:
        raise ConfigError(
            "triehh_users_per_layer: the input has fewer users than triehh_users_per_layer x "
            "triehh_max_depth x triehh_passes (every layer needs a fresh group); lower them"
        )
    order = noise.sample_without_replacement(n_users, params.users_needed)
    return order.reshape(params.passes, params.max_depth, params.users_per_layer)


def select_prefixes(
    positions: np.ndarray,
    prefix_index: np.ndarray,
    counts: np.ndarray,
    n: int,
    m: int,
    dummy: int,
    sampling: str,
    noise: NoiseSource,
) -> np.ndarray:
    """Local data selection (Alg. 2 line 13, GreedySampling / RandomSampling), vectorised over a
    group: rows (position in group, candidate index, user's count) with distinct (position,
    candidate). Each user keeps m distinct candidates (greedy: largest count, ties at random;
    random: uniform), padded with ``dummy``. Returns the (n * m,) report inputs."""
    out = np.full((n, m), dummy, dtype=np.int64)
    if positions.size:
        tie = noise.uniform(positions.size)
        if sampling == "greedy":
            order = np.lexsort((tie, -np.asarray(counts, dtype=np.float64), positions))
        else:
            order = np.lexsort((tie, positions))
        pos_sorted = positions[order]
        first = np.searchsorted(pos_sorted, pos_sorted, side="left")
        rank = np.arange(pos_sorted.size) - first
        keep = rank < m
        out[pos_sorted[keep], rank[keep]] = prefix_index[order][keep]
    return out.ravel()


def _candidates(broadcast: list[str], alphabet: str, end: str) -> list[str]:
    """X_l without the dummy: every broadcast prefix extended by one symbol (alphabet or end);
    the empty word (the end symbol alone) is not a word."""
    out = [p + ch for p in broadcast for ch in alphabet + end]
    return [c for c in out if c != end]


def run_trie(fetch: LayerFetch, n_users: int, params: TrieParameters, noise: NoiseSource) -> TrieResult:
    """LDP TrieHH (Alg. 2), multi-pass (§3): returns the discovered words (end symbol removed)."""
    groups = assign_groups(n_users, params, noise)
    end = params.end_symbol
    learned: list[str] = []
    layers: list[LayerReport] = []
    used: list[np.ndarray] = []
    m, n = params.max_words, params.users_per_layer
    for pass_index in range(params.passes):
        broadcast = [""]
        for depth in range(1, params.max_depth + 1):
            candidates = _candidates(broadcast, params.alphabet, end)
            d = len(candidates) + 1  # + the dummy (padding) item
            dummy = d - 1
            group = groups[pass_index, depth - 1]
            used.append(group)
            positions, prefixes, counts = fetch(group, broadcast, depth, learned)
            index = {c: i for i, c in enumerate(candidates)}
            prefix_index = np.fromiter(
                (index.get(p, -1) for p in prefixes), dtype=np.int64, count=len(prefixes)
            )
            valid = prefix_index >= 0  # the SQL only returns extensions of broadcast prefixes
            reports = select_prefixes(
                np.asarray(positions, dtype=np.int64)[valid],
                prefix_index[valid],
                np.asarray(counts)[valid],
                n,
                m,
                dummy,
                params.sampling,
                noise,
            )
            votes = subset_selection_votes(reports, d, params.epsilon0, noise)
            threshold = noise_vote_threshold(reports.size, d, params.epsilon0, params.spurious_rate)
            kept = _top_prefixes(votes[:dummy], threshold, params.max_prefixes, noise)
            kept_prefixes = [candidates[i] for i in kept]
            words = [p[:-1] for p in kept_prefixes if p.endswith(end)]
            learned.extend(words)
            broadcast = sorted(p for p in kept_prefixes if not p.endswith(end))
            layers.append(
                LayerReport(
                    pass_index=pass_index,
                    depth=depth,
                    domain_size=d,
                    subset_size=subset_size(d, params.epsilon0),
                    vote_threshold=threshold,
                    kept_prefixes=len(kept_prefixes),
                    words_found=len(words),
                )
            )
            if not broadcast:
                break
    return TrieResult(words=sorted(set(learned)), layers=layers, groups=used)


def _top_prefixes(votes: np.ndarray, threshold: int, k: int, noise: NoiseSource) -> np.ndarray:
    """Indices of at most k candidates with the most votes (ties in random order) among those
    with votes >= threshold (Alg. 2 lines 22-23 plus the noise threshold)."""
    eligible = np.flatnonzero(votes >= threshold)
    if eligible.size == 0:
        return eligible
    tie = noise.uniform(eligible.size)
    order = np.lexsort((tie, -votes[eligible]))
    return np.sort(eligible[order[:k]])


def _check_alphabet(alphabet: str, end_symbol: str) -> None:
    if not alphabet or len(set(alphabet)) != len(alphabet) or any(ch.isspace() for ch in alphabet):
        raise ValueError("alphabet must be non-empty, without repeated or whitespace characters")
    if len(end_symbol) != 1 or end_symbol in alphabet or end_symbol.isspace():
        raise ValueError("end_symbol must be one non-space character that is not in the alphabet")


# ----------------------------------------------------------------------------------------------
# Engine side (private tables in the run schema)
# ----------------------------------------------------------------------------------------------
class WarehouseSource:
    """Serves :data:`LayerFetch` from ``{schema}.triehh_user_words`` (uidx, word, cnt); words
    learned in earlier passes are kept in ``{schema}.triehh_learned``."""

    def __init__(self, wh: Engine, schema: str, end_symbol: str) -> None:
        self.wh, self.schema, self.end = wh, schema, end_symbol
        self._learned_count = -1
        self._set_learned([])

    def _set_learned(self, words: list[str]) -> None:
        if len(words) == self._learned_count:
            return
        with self.wh.registered(triehh_learned_source=pa.table({"word": pa.array(words, pa.string())})):
            self.wh.execute(
                load_sql(
                    "triehh/words_table",
                    schema=self.schema,
                    target=LEARNED_TABLE,
                    source="triehh_learned_source",
                )
            )
        self._learned_count = len(words)

    def n_users(self) -> int:
        return int(
            self.wh.fetch_scalar(load_sql("triehh/count_users", schema=self.schema, users=USERS_TABLE))
        )

    def __call__(
        self, group: np.ndarray, broadcast: list[str], depth: int, learned: list[str]
    ) -> tuple[np.ndarray, list[str], np.ndarray]:
        self._set_learned(learned)
        group_table = pa.table(
            {"uidx": pa.array(group, pa.int64()), "pos": pa.array(np.arange(group.size), pa.int64())}
        )
        broadcast_table = pa.table({"prefix": pa.array(broadcast, pa.string())})
        with self.wh.registered(triehh_group=group_table, triehh_broadcast=broadcast_table):
            result = self.wh.fetch_arrow(
                load_sql(
                    "triehh/layer_prefixes",
                    schema=self.schema,
                    words=WORDS_TABLE,
                    group="triehh_group",
                    broadcast="triehh_broadcast",
                    learned=LEARNED_TABLE,
                ),
                {"end_symbol": self.end, "depth": depth},
            )
        return (
            result.column("pos").to_numpy().astype(np.int64),
            result.column("prefix").to_pylist(),
            result.column("cnt").to_numpy().astype(np.int64),
        )


def prepare_user_words(wh: Engine, schema: str, known: list[str], params: TrieParameters) -> None:
    """Private tables: ``triehh_users`` (population with integer ids), ``triehh_known`` and
    ``triehh_user_words`` (eligible words per user with counts)."""
    numbering = f"{USERS_TABLE}_numbering"
    number_users(wh, schema, numbering)
    wh.execute(load_sql("triehh/users", schema=schema, target=USERS_TABLE, numbering=numbering))
    wh.drop(schema, numbering)
    with wh.registered(triehh_known_source=pa.table({"word": pa.array(known, pa.string())})):
        wh.execute(
            load_sql("triehh/words_table", schema=schema, target=KNOWN_TABLE, source="triehh_known_source")
        )
    wh.execute(
        load_sql(
            "triehh/user_words", schema=schema, target=WORDS_TABLE, users=USERS_TABLE, known=KNOWN_TABLE
        ),
        {"max_length": params.max_depth - 1, "alphabet": params.alphabet},
    )


def drop_work_tables(wh: Engine, schema: str) -> None:
    wh.drop(schema, USERS_TABLE, WORDS_TABLE, KNOWN_TABLE, LEARNED_TABLE)


def discovered_words(path: Path) -> pa.Table:
    """The released OOV words (column ``word``) of the file ``path``; empty if it is absent."""
    if not path.is_file():
        return pa.table({"word": pa.array([], pa.string())})
    return pq.read_table(path, columns=["word"])


def merged_vocabulary_events(stage: str) -> list[PrivacyEvent]:
    """The events of an S_1 made of TrieHH's released words alone (``vocabulary_method='triehh'``):
    post-processing of stage ``triehh``'s release (charged there), so no noise is drawn and the
    privacy map is zero; one zero event keeps the stage's marker format."""
    return [PrivacyEvent(stage, "approx", note="S_1 from TrieHH (stage triehh)")]


def merge_into_vocabulary(
    wh: Engine, schema: str, items_table: str, words: list[str], *, replace: bool
) -> None:
    """S_1 (``items_table``) becomes ``words`` (``replace``: vocabulary_method triehh) or DPSU's
    release ∪ ``words`` (both). ``words`` are the released TrieHH words and the public known
    vocabulary: only DP outputs and public data."""
    if replace:
        wh.execute(load_sql("triehh/vocabulary_empty", schema=schema, target=items_table))
    with wh.registered(triehh_vocabulary_extra=pa.table({"word": pa.array(words, pa.string())})):
        wh.execute(
            load_sql(
                "triehh/vocabulary_union",
                schema=schema,
                target=items_table,
                extra="triehh_vocabulary_extra",
            )
        )
