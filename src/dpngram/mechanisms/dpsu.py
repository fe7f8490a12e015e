"""Differentially private set union (DPSU) with the weighted Gaussian policy: the vocabulary S_1.

Papers: Gopi, Gulhane, Kulkarni, Shen, Shokouhi & Yekhanin (2020), "Differentially private set
union" (GGK+20); DPNE (Kim, Gopi, Kulkarni & Yekhanin 2021) Algorithm 1 line 1, Theorem 2.1, and
its supplement, Algorithm 5.

Mechanism (supplement Alg. 5), run entirely in SQL except the noisy threshold:

1. every user's DISTINCT items U_i (``sql/dpsu/histogram.sql``);
2. contribution bound: if ``|U_i| > Delta`` keep ``Delta`` of them. The paper picks a uniformly
   random subset; we keep the ``Delta`` items with the smallest ``hash(item, salt)`` for a secret
   per-run salt from :meth:`NoiseSource.salt`. Any selection rule that depends only on the user's
   own items (and data-independent randomness) keeps the sensitivity bound below, which is all the
   privacy proof uses; the salted hash also makes the subset look random to an analyst;
3. weight ``1/sqrt(|U_i|)`` per kept item, so each user's contribution vector has l2 norm
   ``sqrt(|U_i| * 1/|U_i|) = 1``: the histogram has l2-sensitivity 1;
4. release the items with ``H[u] + N(0, sigma^2) > rho``, streaming the histogram out of DuckDB in
   Arrow record batches (:func:`threshold_histogram`). Items no user holds are never in the
   histogram and so never released (DPNE Prop. 2.2: no spurious 1-grams).

Privacy (GGK+20 Thm. 5.1 / DPNE Thm. 2.1): with ``rho = max_{1<=t<=Delta} 1/sqrt(t) +
sigma * Phi^-1((1 - delta_0)^(1/t))`` (:func:`dpngram.core.accounting.dpsu_threshold`) the release
is a Gaussian mechanism (sensitivity 1, noise sigma) composed with a (0, delta_0) event: delta_0
bounds the probability that an item held only by the added/removed user crosses the threshold.

Owns: the DPSU release over any ``(user_id, item)`` relation, the vocabulary S_1 and its
parameters, writing released keys (:func:`write_keys_parquet`).
Imports: dpngram.engines, dpngram.core; pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.core.accounting import PrivacyEvent, dpne_sigmas, dpsu_threshold
from dpngram.core.budget import Budget
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql, safe_identifier

VOCABULARY_STAGE = "dpne.k1"


VOCABULARY_TABLE = "dpne_s1_items"  # released S_1 (item column), private schema but DP output


BATCH_ROWS = 1 << 20


@dataclass(frozen=True)
class DpsuParameters:
    """Public parameters of one DPSU release (all data-independent)."""

    sigma: float
    threshold: float
    max_contribution: int
    threshold_delta: float

    def events(self, stage: str) -> list[PrivacyEvent]:
        """Gaussian (sensitivity 1) + the (0, delta_0) threshold event (DPNE Thm. 2.1 proof)."""
        return [
            PrivacyEvent(stage=stage, mechanism="gaussian", sigma=self.sigma),
            PrivacyEvent(
                stage=stage,
                mechanism="approx",
                epsilon=0.0,
                delta=self.threshold_delta,
                note="DPSU threshold",
            ),
        ]


def vocabulary_parameters(
    budget: Budget, max_n: int, sigma_decay: float, max_contribution: int
) -> DpsuParameters:
    """sigma_1 from DPNE Thm. 2.1 (``dpne_sigmas`` over ``max_n`` levels at the dpne ``budget``)
    and rho_1 at delta/2."""
    epsilon, delta = budget
    _, sigmas = dpne_sigmas(epsilon, delta, max_n, sigma_decay)
    sigma_1 = sigmas[0]
    return DpsuParameters(
        sigma=sigma_1,
        threshold=dpsu_threshold(sigma_1, delta / 2.0, max_contribution),
        max_contribution=max_contribution,
        threshold_delta=delta / 2.0,
    )


def threshold_histogram(
    wh: Engine,
    scan_sql: str,
    *,
    sigma: float,
    threshold: float,
    noise: NoiseSource,
    params: dict[str, Any] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> pa.Table:
    """Stream ``scan_sql`` (columns ``item``, ``weight``) and keep the items with
    ``weight + N(0, sigma^2) > threshold`` (supplement Alg. 5 lines 7-10 / Alg. 1 thresholding).

    Noise is drawn per record batch (vectorised); only the kept keys are held in memory, so
    memory follows the size of the release, not of the histogram. Returns a table with column
    ``item``."""
    kept: list[pa.RecordBatch] = []
    item_type = None
    for batch in wh.fetch_batches(scan_sql, params, batch_rows):
        item_type = batch.schema.field("item").type
        if batch.num_rows == 0:
            continue
        weights = batch.column("weight").to_numpy(zero_copy_only=False)
        mask = noise.above_threshold(weights, sigma, threshold)
        if mask.any():
            kept.append(batch.select(["item"]).filter(pa.array(mask)))
    schema = pa.schema([pa.field("item", item_type or pa.int64())])
    return pa.Table.from_batches(kept, schema=schema) if kept else schema.empty_table()


def dpsu_histogram(
    wh: Engine, schema: str, source: str, histogram: str, *, max_contribution: int, salt: int
) -> None:
    """Build the weighted-Gaussian histogram ``{schema}.{histogram}(item, weight)`` of the
    ``{schema}.{source}(user_id, item)`` relation (supplement Alg. 5 lines 1-6)."""
    if max_contribution < 1:
        raise ValueError(f"max_contribution: must be >= 1 (got {max_contribution})")
    wh.execute(
        load_sql("dpsu/histogram", schema=schema, source=source, histogram=histogram),
        {"salt": int(salt), "max_contribution": int(max_contribution)},
    )


def dpsu_release(
    wh: Engine,
    schema: str,
    source: str,
    target: str,
    *,
    sigma: float,
    threshold: float,
    max_contribution: int,
    noise: NoiseSource,
) -> int:
    """DPSU (weighted Gaussian policy) over any ``{schema}.{source}(user_id, item)`` relation.

    Writes the released items to ``{schema}.{target}(item)`` and returns how many were released
    (a DP count: the size of the release). The private histogram is dropped afterwards.
    ``sigma``/``threshold`` must come from the accountant (see :func:`vocabulary_parameters`).
    """
    histogram = safe_identifier(f"{target}_histogram")
    dpsu_histogram(wh, schema, source, histogram, max_contribution=max_contribution, salt=noise.salt())
    released = threshold_histogram(
        wh,
        load_sql("dpsu/histogram_scan", schema=schema, histogram=histogram),
        sigma=sigma,
        threshold=threshold,
        noise=noise,
    )
    _store_items(wh, schema, target, released)
    wh.drop(schema, histogram)
    return released.num_rows


def _store_items(wh: Engine, schema: str, target: str, items: pa.Table) -> None:
    view = "dpsu_released_batch"
    with wh.registered(**{view: items}):
        wh.execute(load_sql("dpsu/released", schema=schema, target=target, released=view))


def release_vocabulary(wh: Engine, schema: str, params: DpsuParameters, noise: NoiseSource) -> int:
    """S_1 = DPSU over each user's distinct tokens of ``{schema}.sentences``; stored as
    ``{schema}.dpne_s1_items(item)``. Returns |S_1|."""
    source = "dpsu_vocabulary_source"
    wh.execute(load_sql("dpsu/vocabulary_source", schema=schema, target=source))
    return dpsu_release(
        wh,
        schema,
        source,
        VOCABULARY_TABLE,
        sigma=params.sigma,
        threshold=params.threshold,
        max_contribution=params.max_contribution,
        noise=noise,
    )


def write_keys_parquet(table: pa.Table, path: Path, columns: dict[str, pa.DataType]) -> None:
    """Write released keys with exactly ``columns`` (names and types), nothing else."""
    arrays = [table.column(name).cast(dtype) for name, dtype in columns.items()]
    out = pa.Table.from_arrays(arrays, schema=pa.schema([pa.field(n, t) for n, t in columns.items()]))
    pq.write_table(out, path)
