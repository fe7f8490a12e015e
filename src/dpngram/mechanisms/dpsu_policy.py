"""The policy Gaussian of DPSU (GGK+20 §5; ``dpsu_policy='policy-gaussian'``) and the secret
histogram every DPSU policy builds (weighted or policy): users visited one after the other in a
secret random order, each adding the projection of ``(cap - H)_+`` on its kept items onto the unit
l2 ball. Derivation: docs/dpne.md, "Policy Gaussian"; the release around it is
:mod:`dpngram.mechanisms.dpsu`.

Owns: the policy names, the fill level, the sequential update (numpy, then compiled:
:mod:`dpngram.mechanisms.policy_kernel`), the user stream, :func:`secret_histogram` and the one
thresholding rule every DPSU and DPNE release streams its histogram through
(:func:`threshold_histogram`; re-exported by :mod:`dpngram.mechanisms.dpsu`).
Imports: dpngram.mechanisms.policy_kernel (lazily), dpngram.engines, dpngram.core; numpy, pyarrow.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine, list_arrays
from dpngram.engines.sql import load_sql, safe_identifier

Policy = Literal["weighted", "policy-gaussian", "dp-sips"]


POLICIES: tuple[str, ...] = ("weighted", "policy-gaussian", "dp-sips")


#: Rows per record batch when a histogram streams to the noisy threshold.
BATCH_ROWS = 1 << 20


def threshold_histogram(
    wh: Engine,
    scan_sql: str,
    *,
    sigma: float,
    threshold: float,
    noise: NoiseSource,
    params: dict[str, Any] | None = None,
    batch_rows: int = BATCH_ROWS,
    admit_floor: float | None = None,
    admitted: list[pa.Array] | None = None,
) -> pa.Table:
    """Stream ``scan_sql`` (columns ``item``, ``weight``) and keep the items with
    ``weight + N(0, sigma^2) > threshold`` (supplement Alg. 5 lines 7-10 / Alg. 1 thresholding).

    Noise is drawn per record batch (vectorised); only the kept keys are held in memory, so
    memory follows the size of the release, not of the histogram. Returns a table with column
    ``item``. With ``admit_floor`` (DP-SIPS admission), the same noisy values also decide the
    items with ``admit_floor <= weight + noise <= threshold``, appended to ``admitted`` (keys only;
    private: a run-internal table, never released)."""
    if (admit_floor is None) != (admitted is None):
        raise ValueError("admit_floor and admitted go together")
    kept: list[pa.RecordBatch] = []
    item_type = None
    for batch in wh.fetch_batches(scan_sql, params, batch_rows):
        item_type = batch.schema.field("item").type
        if batch.num_rows == 0:
            continue
        weights = batch.column("weight").to_numpy(zero_copy_only=False)
        if admit_floor is None:
            mask = noise.above_threshold(weights, sigma, threshold)
        else:
            assert admitted is not None
            mask, admit = noise.threshold_bands(weights, sigma, threshold, admit_floor)
            if admit.any():
                admitted.append(batch.column("item").filter(pa.array(admit)))
        if mask.any():
            kept.append(batch.select(["item"]).filter(pa.array(mask)))
    schema = pa.schema([pa.field("item", item_type or pa.int64())])
    return pa.Table.from_batches(kept, schema=schema) if kept else schema.empty_table()


def check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ConfigError(f"dpsu_policy: must be one of {list(POLICIES)} (got {policy!r})")


def policy_fill_level(policy: Policy, rho: float, sigma: float, alpha: float) -> float | None:
    """The policy Gaussian's cap Gamma = rho + alpha * sigma (GGK+20 §5.2); None for the other
    policies ('weighted', 'dp-sips': every round of DP-SIPS is a weighted histogram).
    Public: it depends on public parameters and, in DPNE levels, on released set sizes only."""
    check_policy(policy)
    if policy != "policy-gaussian":
        return None
    if not (alpha >= 0 and np.isfinite(alpha)):
        raise ConfigError(f"dpsu_policy_cap: must be a finite number >= 0 (got {alpha!r})")
    if not (np.isfinite(rho) and np.isfinite(sigma)):  # the update needs a finite fill level
        raise ValueError(f"the policy's fill level needs a finite rho and sigma (got {rho!r}, {sigma!r})")
    return float(rho + alpha * sigma)


def policy_gaussian_update(weights: np.ndarray, items: np.ndarray, cap: float) -> None:
    """One user's policy-Gaussian update, in place: ``weights[items] += P((cap - weights[items])_+)``
    where P projects onto the unit l2 ball (GGK+20 §5.2). ``items`` are distinct indices."""
    gap = cap - weights[items]
    np.maximum(gap, 0.0, out=gap)
    norm = float(np.sqrt(gap @ gap))
    if norm > 1.0:
        gap *= 1.0 / norm
    weights[items] += gap


def policy_gaussian_weights(users: Iterable[np.ndarray], n_items: int, cap: float) -> np.ndarray:
    """The policy-Gaussian histogram over item ids 0..n_items-1 for users visited in the given
    order, each an array of its distinct kept item ids."""
    weights = np.zeros(n_items, dtype=np.float64)
    for items in users:
        policy_gaussian_update(weights, items, cap)
    return weights


#: Users streamed through the plain numpy update before switching to the compiled one (unless it
#: is already loaded in this process): loading numba costs about 2 s a process (measured here),
#: the numpy update about 13 us a user, so small inputs (SOTU's 13k users) never pay the load and
#: large ones pay it once. Both give the same weights (tests/test_dpsu_policy.py).
COMPILED_AFTER_USERS = 50_000


def policy_histogram_from_stream(
    batches: Iterable[pa.RecordBatch], n_items: int, cap: float, compiled_after: int | None = None
) -> np.ndarray:
    """The policy-Gaussian histogram from a stream of users in visiting order (one row per user, a
    list column ``iids`` of its distinct item ids), batch after batch: the numpy update for the
    first ``compiled_after`` users, then the compiled one (:mod:`dpngram.mechanisms.policy_kernel`).
    None: :data:`COMPILED_AFTER_USERS`, or 0 when the compiled update is already loaded."""
    weights = np.zeros(n_items, dtype=np.float64)
    seen = 0
    if compiled_after is None:  # loaded by an earlier level: no cost to use it from the start
        loaded = "dpngram.mechanisms.policy_kernel" in sys.modules
        compiled_after = 0 if loaded else COMPILED_AFTER_USERS
    for batch in batches:
        if batch.num_rows == 0:
            continue
        offsets, items = list_arrays(batch.column("iids"))
        if seen + batch.num_rows <= compiled_after:
            for start, end in zip(offsets[:-1], offsets[1:], strict=True):
                policy_gaussian_update(weights, items[start:end], cap)
        else:
            from dpngram.mechanisms.policy_kernel import policy_gaussian_fill

            policy_gaussian_fill(weights, offsets, items, float(cap))
        seen += batch.num_rows
    return weights


def dpsu_histogram(
    wh: Engine,
    schema: str,
    source: str,
    histogram: str,
    *,
    max_contribution: int,
    salt: int,
    cap: float | None = None,
    order_salt: int | None = None,
) -> None:
    """Build the DPSU histogram ``{schema}.{histogram}(item, weight)`` of the
    ``{schema}.{source}(user_id, item)`` relation: weighted Gaussian (supplement Alg. 5 lines 1-6)
    when ``cap`` is None, else the policy Gaussian filling items up to ``cap``, users visited in the
    order of ``hash(user_id) XOR order_salt``. Both salts are secret per run."""
    if max_contribution < 1:
        raise ValueError(f"max_contribution: must be >= 1 (got {max_contribution})")
    if cap is None:
        wh.execute(
            load_sql("dpsu/histogram", schema=schema, source=source, histogram=histogram),
            {"salt": int(salt), "max_contribution": int(max_contribution)},
        )
        return
    if order_salt is None:
        raise ValueError("the policy Gaussian needs an order salt")
    pairs = safe_identifier(f"{histogram}_pairs")
    wh.execute(
        load_sql("dpsu/policy_items", schema=schema, source=source, target=pairs),
        {"salt": int(salt), "order_salt": int(order_salt), "max_contribution": int(max_contribution)},
    )
    support = _column(wh.fetch_arrow(load_sql("dpsu/policy_support", schema=schema, pairs=pairs)), "item")
    stream = wh.fetch_batches(
        load_sql("dpsu/policy_stream", schema=schema, pairs=pairs), None, POLICY_STREAM_ROWS
    )
    weights = policy_histogram_from_stream(_dense_ids(stream, support), len(support), cap)
    view = "dpsu_policy_weights"
    with wh.registered(**{view: pa.table({"item": support, "weight": weights})}):
        wh.execute(load_sql("dpsu/policy_histogram", schema=schema, histogram=histogram, weights=view))
    wh.drop(schema, pairs)


#: Users per batch of the policy stream: the driver holds one batch's kept items (at most Delta0
#: per user; about 60 at 1M users) and their dense ids at a time, so this bounds its memory (about
#: 250 MB a batch at level 2), and each batch rebuilds the support's hash table once.
POLICY_STREAM_ROWS = 250_000


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.combine_chunks() if column.num_chunks else pa.array([], type=column.type)


def _dense_ids(batches: Iterable[pa.RecordBatch], support: pa.Array) -> Iterator[pa.RecordBatch]:
    """Each user's kept items (list column ``kept``) as their ids in the sorted ``support`` (list
    column ``iids``): Arrow's vectorised hash lookup per batch (``index_in``: at 1M users, level 2,
    30M items against a 20M-item support in about 6 CPU-seconds, where a binary search took 44), so
    SQL never joins or regroups the (user, item) pairs. Items of other types (the DPSU baselines'
    token lists, comparison only) go through a Python dict."""
    nested = pa.types.is_list(support.type) or pa.types.is_large_list(support.type)
    lookup = {tuple(v): i for i, v in enumerate(support.to_pylist())} if nested else None
    for batch in batches:
        lists = batch.column("kept")
        if isinstance(lists, pa.ChunkedArray):
            lists = lists.combine_chunks()
        values = lists.flatten()
        if lookup is not None:
            ids = np.array([lookup[tuple(v)] for v in values.to_pylist()], dtype=np.int64)
        else:
            ids = pc.index_in(values, value_set=support).to_numpy(zero_copy_only=False)
        offsets = pa.array(lists.offsets.to_numpy(zero_copy_only=False) - lists.offsets[0].as_py())
        iids = pa.ListArray.from_arrays(offsets, pa.array(ids, type=pa.int64()))
        yield pa.RecordBatch.from_arrays([iids], names=["iids"])


def secret_histogram(
    wh: Engine,
    schema: str,
    source: str,
    histogram: str,
    *,
    max_contribution: int,
    cap: float | None,
    noise: NoiseSource,
) -> None:
    """:func:`dpsu_histogram` with its secret salts drawn from ``noise``: the subset salt, and the
    visiting-order salt when the policy Gaussian runs (``cap`` given). Selection salts (the
    sensitivity bound holds for any salt): the stage is charged at its first noise draw, after
    this SQL, so running out of memory here charges nothing (docs/faults.md, "Selection salts")."""
    dpsu_histogram(
        wh,
        schema,
        source,
        histogram,
        max_contribution=max_contribution,
        salt=noise.selection_salt(),
        cap=cap,
        order_salt=noise.selection_salt() if cap is not None else None,
    )
