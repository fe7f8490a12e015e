"""Great Expectations (GX 1.x) validation of a run: private ingest tables and every released table.

Suites are defined in code and registered by name in :data:`SUITES` (:func:`register_suite`), so a
new release adds its own suite without touching the runner (step ``validation``,
:func:`dpngram.stages.validate.validate_run`). A suite
turns the run into one or more :class:`Batch` es: a pandas frame plus the expectations to check on
it. Two kinds of frames keep memory bounded however large the tables are:

* a bounded random sample (at most 200,000 rows, ``sql/validate/sample.sql``) for row-level
  expectations (non-null, lengths, ranges, exact column set);
* a one-row frame of whole-table violation counts computed in DuckDB SQL
  (``sql/validate/*_aggregates.sql``, ``sql/<stage>/validate_aggregates.sql``), validated as
  ``count == 0`` expectations. Downward closure of the DPNE output (DPNE paper §2, pruning with
  valid k-grams), token counts, vocabulary membership and uniqueness are checked this way over the
  whole table.

PRIVACY. Suites on the run's private tables (``private=True``; the ingest suite) are validated
with ``result_format="BOOLEAN_ONLY"``: their results, ``validation/results.json`` and the
published Data Docs hold pass/fail only, never a sampled value or a count of the private input;
their aggregate frame holds 0/1 violation flags, not counts. The GX batch fingerprint (an MD5 of the
validated frame) is removed from every stored result before Data Docs are built. Suites on
released tables (public data) use ``SUMMARY``.

GX notes (measured here): it is imported only when suites run (:func:`_import_gx`: 3.9 s); the
context is ephemeral; only pandas frames are validated (GX takes no polars frame, and its SQL
datasource fails on DuckDB), narrow numbers widened (:func:`widened`); Data Docs are built in GX's
temp directory and copied into ``validation/data_docs/``.

A failed expectation raises :class:`ValidationFailed` after the results and Data Docs are written
to the staged release, so the run is inspectable but never published
(:func:`dpngram.release.publish.publish_run` refuses a run whose 'validation' part did not pass).

Why one module (over 600 lines): the suite registry, the runner and the suites are the one
place a reader checks what is validated and under which privacy rule (private suites report
booleans only); the suites are short declarations that share the runner's batching.

Owns: the GX suites (:data:`SUITES`, :func:`register_suite`), the batches they check, running one
batch, scrubbing results, :func:`validate_model`.
Imports: dpngram.lm, dpngram.release, dpngram.engines, dpngram.text, dpngram.core; great_expectations,
pandas, numpy, duckdb, polars, pyarrow.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from dpngram.engines.sql import load_sql
from dpngram.release.context import RunContext, read_parts
from dpngram.release.layout import (
    KGRAMS,
    LM_COUNTS,
    MODEL_ARPA,
    MODEL_VALIDATION_RESULTS,
    NGRAM_COUNTS_NOISY,
    OOV_WORDS,
    SYNTHETIC_SEQUENCES,
    TRIGRAM_DIST,
    VOCABULARY,
    baseline_path,
    write_json_atomic,
)

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl

    from dpngram.engines.base import Engine
    from dpngram.lm.arpa_file import WrittenArpa
    from dpngram.lm.ngram_tables import ArpaModel

log = logging.getLogger(__name__)


PART = "validation"
_PRIVATE_FORMAT = "BOOLEAN_ONLY"
_PUBLIC_FORMAT = "SUMMARY"


@dataclass(frozen=True)
class Expect:
    """One expectation: a GX 1.x expectation class name and its keyword arguments."""

    type: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def zero(column: str) -> Expect:
    """The one-row aggregate frame's ``column`` (a violation count or flag) must be 0."""
    return Expect("ExpectColumnValuesToBeBetween", {"column": column, "min_value": 0, "max_value": 0})


@dataclass
class Batch:
    """A frame to validate under the GX suite ``suite`` (e.g. ``released.kgrams.rows``).

    ``problem`` marks a batch that could not be built (missing file, missing column): it is
    reported as a failure without running GX."""

    suite: str
    frame: pd.DataFrame | None
    expectations: list[Expect]
    private: bool
    problem: str | None = None


class Sources:
    """What suites read: the run's private schema on the run's engine (opened on first use: a
    read-only DuckDB warehouse, or the Spark engine whose tables may live on a cluster path) and
    the released parquet files (views ``released_<name>`` in an in-memory DuckDB)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self._engine: Engine | None = None
        self._engine_cm: Any = None
        self.public = duckdb.connect(":memory:")

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            duck = self.ctx.config.engine.name == "duckdb"
            self._engine_cm = self.ctx.warehouse(read_only=True) if duck else self.ctx.engine()
            self._engine = self._engine_cm.__enter__()
        return self._engine

    def released(self, relative: str) -> Path:
        return self.ctx.release.root / relative

    def released_view(self, name: str, relative: str) -> str | None:
        """Create view ``released_<name>`` over a released parquet file; None if it is missing."""
        path = self.released(relative)
        if not path.is_file():
            return None
        view = f"released_{name}"
        self.public.read_parquet(str(path)).create_view(view, replace=True)
        return view

    def columns(self, view: str) -> list[str]:
        return [d[0] for d in self.public.execute(f"SELECT * FROM {view} LIMIT 0").description]

    def close(self) -> None:
        if self._engine_cm is not None:
            self._engine_cm.__exit__(None, None, None)
        self.public.close()


@dataclass(frozen=True)
class Suite:
    """A named group of batches. ``applies(ctx)`` says whether the run produced what it checks."""

    name: str
    private: bool
    applies: Callable[[RunContext], bool]
    batches: Callable[[Sources], list[Batch]]


#: Registry of every suite, by name, in registration order.
SUITES: dict[str, Suite] = {}


def register_suite(
    name: str, *, private: bool, applies: Callable[[RunContext], bool]
) -> Callable[[Callable[[Sources], list[Batch]]], Callable[[Sources], list[Batch]]]:
    """Decorator: register ``fn(sources) -> list[Batch]`` as suite ``name``.

    ``private=True`` for suites reading the run's private tables (validated BOOLEAN_ONLY)."""

    def wrap(fn: Callable[[Sources], list[Batch]]) -> Callable[[Sources], list[Batch]]:
        SUITES[name] = Suite(name, private, applies, fn)
        return fn

    return wrap


def _released_or_promised(relative: str) -> Callable[[RunContext], bool]:
    """A released-table suite applies when the file exists or some stage lists it as an output
    (then a missing file is a failure)."""

    def applies(ctx: RunContext) -> bool:
        if (ctx.release.root / relative).is_file():
            return True
        return any(relative in (part.get("outputs") or []) for part in read_parts(ctx).values())

    return applies


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
    return con.execute(sql, params or {}).df()


def _row_sample(src: Sources, view: str) -> pd.DataFrame:
    """The bounded random sample of a released view that row-level expectations see."""
    return _frame(src.public, load_sql("validate/sample", source=view))


# ----------------------------------------------------------------------------------------------
# Suites
# ----------------------------------------------------------------------------------------------
def _ingest_done(ctx: RunContext) -> bool:
    return "ingest" in read_parts(ctx)


@register_suite("ingest", private=True, applies=_ingest_done)
def ingest_suite(src: Sources) -> list[Batch]:
    """Private ingest tables: sampled row checks on ``tokens`` and whole-table consistency flags
    (read = loaded + quarantined; every document has a sentence, every sentence a document; no
    empty sentence or blank user id; token ids 1..n). PRIVATE: BOOLEAN_ONLY results."""
    engine = src.engine
    schema = src.ctx.schema
    missing = [
        t
        for t in ("sentences", "token_ids", "raw_text", "quarantine", "ingest_stats")
        if not engine.table_exists(schema, t)
    ]
    if missing:
        return [Batch("ingest", None, [], True, problem=f"private tables missing: {', '.join(missing)}")]
    sample = engine.fetch_arrow(load_sql("validate/ingest_sample", schema=schema)).to_pandas()
    aggregates = engine.fetch_arrow(load_sql("validate/ingest_aggregates", schema=schema)).to_pandas()
    rows = [
        Expect(
            "ExpectTableColumnsToMatchSet", {"column_set": ["user_id", "token", "pos"], "exact_match": True}
        ),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "user_id"}),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "user_id", "min_value": 1}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "token"}),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "token", "min_value": 1}),
        Expect("ExpectColumnValuesToNotMatchRegex", {"column": "token", "regex": r"\s"}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "pos"}),
        Expect("ExpectColumnValuesToBeBetween", {"column": "pos", "min_value": 0}),
    ]
    return [
        Batch("ingest.tokens_sample", sample, rows, True),
        Batch("ingest.consistency", aggregates, [zero(c) for c in aggregates.columns], True),
    ]


@register_suite("released.vocabulary", private=False, applies=_released_or_promised(VOCABULARY))
def vocabulary_suite(src: Sources) -> list[Batch]:
    """Released vocabulary S_1: exactly the columns ``token`` and ``kgram_seed``; tokens non-null,
    non-empty, without whitespace (k-grams are space-joined) and unique; ``kgram_seed`` non-null."""
    view = src.released_view("vocabulary", VOCABULARY)
    if view is None:
        return [Batch("released.vocabulary", None, [], False, problem=f"{VOCABULARY} is missing")]
    rows = [
        Expect("ExpectTableColumnsToMatchSet", {"column_set": ["token", "kgram_seed"], "exact_match": True}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "token"}),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "token", "min_value": 1}),
        Expect("ExpectColumnValuesToNotMatchRegex", {"column": "token", "regex": r"\s"}),
        Expect("ExpectColumnValuesToBeUnique", {"column": "token"}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "kgram_seed"}),
    ]
    batches = [
        Batch(
            "released.vocabulary.rows",
            _frame(src.public, load_sql("validate/sample", source=view)),
            rows,
            False,
        )
    ]
    if "token" in src.columns(view):
        aggregates = _frame(src.public, load_sql("validate/vocabulary_aggregates"))
        batches.append(
            Batch("released.vocabulary.table", aggregates, [zero(c) for c in aggregates.columns], False)
        )
    return batches


def _kgrams_expected(ctx: RunContext) -> bool:
    """k-grams are expected once any DPNE level k >= 2 ran (or the merged file exists)."""
    if (ctx.release.root / KGRAMS).is_file():
        return True
    return any(re.fullmatch(r"dpne\.k\d+", name) and name != "dpne.k1" for name in read_parts(ctx))


@register_suite("released.kgrams", private=False, applies=_kgrams_expected)
def kgrams_suite(src: Sources) -> list[Batch]:
    """Released k-grams (DPNE levels k = 2..T): exactly the columns ``k`` (integer in 2..T) and
    ``ngram`` (k tokens joined by single spaces); ngrams unique; every token in the vocabulary;
    downward closed under the run's pruning rule (DPNE §2: both (k-1)-subgrams, or the prefix for
    single-side pruning, released at level k-1)."""
    config = src.ctx.config
    view = src.released_view("kgrams", KGRAMS)
    if view is None:
        return [Batch("released.kgrams", None, [], False, problem=f"{KGRAMS} is missing")]
    rows = [
        Expect("ExpectTableColumnsToMatchSet", {"column_set": ["k", "ngram"], "exact_match": True}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "k"}),
        Expect(
            "ExpectColumnValuesToBeInTypeList",
            {
                "column": "k",
                "type_list": ["int8", "int16", "int32", "int64", "Int8", "Int16", "Int32", "Int64"],
            },
        ),
        Expect(
            "ExpectColumnValuesToBeBetween", {"column": "k", "min_value": 2, "max_value": config.dpne.max_n}
        ),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "ngram"}),
        Expect("ExpectColumnValuesToBeUnique", {"column": "ngram"}),
    ]
    batches = [
        Batch(
            "released.kgrams.rows", _frame(src.public, load_sql("validate/sample", source=view)), rows, False
        )
    ]
    columns = set(src.columns(view))
    if {"k", "ngram"} <= columns:
        vocab = src.released_view("vocabulary", VOCABULARY)
        if vocab is None:
            batches.append(
                Batch(
                    "released.kgrams.table",
                    None,
                    [],
                    False,
                    problem=f"{VOCABULARY} is missing (needed for closure checks)",
                )
            )
        else:
            aggregates = _frame(
                src.public,
                load_sql("validate/kgrams_aggregates"),
                {"both_sides": config.dpne.pruning == "both"},
            )
            batches.append(
                Batch("released.kgrams.table", aggregates, [zero(c) for c in aggregates.columns], False)
            )
    return batches


@register_suite("released.trigram_dist", private=False, applies=_released_or_promised(TRIGRAM_DIST))
def trigram_dist_suite(src: Sources) -> list[Batch]:
    """Released Bayesian trigram distribution (step ``bayes``): exactly the columns w1, w2, w3,
    prob; no nulls; prob in [0, 1] summing to 1 (within 1e-6); unique trigrams; every token in the
    released vocabulary or a marker (<s> first, </s> last, <unk>)."""
    view = src.released_view("trigram_dist", TRIGRAM_DIST)
    if view is None:
        return [Batch("released.trigram_dist", None, [], False, problem=f"{TRIGRAM_DIST} is missing")]
    rows = [
        Expect(
            "ExpectTableColumnsToMatchSet", {"column_set": ["w1", "w2", "w3", "prob"], "exact_match": True}
        ),
        *(Expect("ExpectColumnValuesToNotBeNull", {"column": c}) for c in ("w1", "w2", "w3", "prob")),
        Expect("ExpectColumnValuesToBeBetween", {"column": "prob", "min_value": 0, "max_value": 1}),
    ]
    batches = [
        Batch(
            "released.trigram_dist.rows",
            _frame(src.public, load_sql("validate/sample", source=view)),
            rows,
            False,
        )
    ]
    if {"w1", "w2", "w3", "prob"} <= set(src.columns(view)):
        if src.released_view("vocabulary", VOCABULARY) is None:
            batches.append(
                Batch(
                    "released.trigram_dist.table",
                    None,
                    [],
                    False,
                    problem=f"{VOCABULARY} is missing (needed for the token check)",
                )
            )
        else:
            aggregates = _frame(src.public, load_sql("bayes/validate_aggregates"), {"sum_tolerance": 1e-6})
            batches.append(
                Batch("released.trigram_dist.table", aggregates, [zero(c) for c in aggregates.columns], False)
            )
    return batches


def _baseline_files(ctx: RunContext) -> list[Path]:
    return sorted((ctx.release.root / baseline_path("x")).parent.glob(Path(baseline_path("*")).name))


@register_suite("released.baselines", private=False, applies=lambda ctx: bool(_baseline_files(ctx)))
def baseline_suite(src: Sources) -> list[Batch]:
    """Released DPSU baselines (DPNE §3.1.2; ``released/baseline_<method>.parquet``): exactly the
    columns ``k`` (1..T) and ``ngram`` (k space-joined tokens), unique. Not downward closed."""
    config = src.ctx.config
    batches = []
    for path in _baseline_files(src.ctx):
        name = path.stem  # baseline_<method>
        view = src.released_view(
            re.sub(r"[^A-Za-z0-9_]", "_", name), path.relative_to(src.ctx.release.root).as_posix()
        )
        assert view is not None
        rows = [
            Expect("ExpectTableColumnsToMatchSet", {"column_set": ["k", "ngram"], "exact_match": True}),
            Expect("ExpectColumnValuesToNotBeNull", {"column": "k"}),
            Expect(
                "ExpectColumnValuesToBeBetween",
                {"column": "k", "min_value": 1, "max_value": config.dpne.max_n},
            ),
            Expect("ExpectColumnValuesToNotBeNull", {"column": "ngram"}),
            Expect("ExpectColumnValuesToBeUnique", {"column": "ngram"}),
        ]
        suite = f"released.{name}"
        batches.append(
            Batch(f"{suite}.rows", _frame(src.public, load_sql("validate/sample", source=view)), rows, False)
        )
        if {"k", "ngram"} <= set(src.columns(view)):
            aggregates = _frame(src.public, load_sql("validate/baseline_aggregates", source=view))
            batches.append(Batch(f"{suite}.table", aggregates, [zero(c) for c in aggregates.columns], False))
    return batches


@register_suite(
    "released.synth",
    private=False,
    applies=lambda ctx: any(_released_or_promised(p)(ctx) for p in (SYNTHETIC_SEQUENCES, NGRAM_COUNTS_NOISY)),
)
def synth_suite(src: Sources) -> list[Batch]:
    """Synthetic sequences and noisy variable-length n-gram counts (step ``synth``, Chen et al.
    2012): exact column sets; no nulls; non-empty sequences; every token in the item universe I
    (released vocabulary or <unk>; '&' only as an n-gram's last item); noisy counts >= 0 after
    consistency; unique keys (``sql/synth/validate_aggregates.sql``)."""
    seq_view = src.released_view("synthetic_sequences", SYNTHETIC_SEQUENCES)
    counts_view = src.released_view("ngram_counts_noisy", NGRAM_COUNTS_NOISY)
    missing = [
        p for p, v in ((SYNTHETIC_SEQUENCES, seq_view), (NGRAM_COUNTS_NOISY, counts_view)) if v is None
    ]
    if missing:
        return [Batch("released.synth", None, [], False, problem=f"{', '.join(missing)} missing")]
    sequences = [
        Expect("ExpectTableColumnsToMatchSet", {"column_set": ["seq_id", "text"], "exact_match": True}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "text"}),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "text", "min_value": 1}),
    ]
    counts = [
        Expect("ExpectTableColumnsToMatchSet", {"column_set": ["ngram", "noisy_count"], "exact_match": True}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "ngram"}),
        Expect("ExpectColumnValuesToBeBetween", {"column": "noisy_count", "min_value": 0}),
    ]
    batches = [
        Batch("released.synth.sequences.rows", _row_sample(src, seq_view), sequences, False),
        Batch("released.synth.counts.rows", _row_sample(src, counts_view), counts, False),
    ]
    if {"seq_id", "text"} <= set(src.columns(seq_view)) and {"ngram", "noisy_count"} <= set(
        src.columns(counts_view)
    ):
        if src.released_view("vocabulary", VOCABULARY) is None:
            problem = f"{VOCABULARY} is missing (needed for the token check)"
            batches.append(Batch("released.synth.table", None, [], False, problem=problem))
        else:
            aggregates = _frame(src.public, load_sql("synth/validate_aggregates"))
            batches.append(
                Batch("released.synth.table", aggregates, [zero(c) for c in aggregates.columns], False)
            )
    return batches


@register_suite("released.lm_counts", private=False, applies=_released_or_promised(LM_COUNTS))
def lm_counts_suite(src: Sources) -> list[Batch]:
    """The language model's noisy n-gram counts (step ``lm_counts``): exact column set, no
    nulls, orders 1..3, unique (n, ngram), n tokens per n-gram, markers in place
    (``sql/lm_counts/validate_aggregates.sql``)."""
    view = src.released_view("lm_counts", LM_COUNTS)
    if view is None:
        return [Batch("released.lm_counts", None, [], False, problem=f"{LM_COUNTS} missing")]
    batches = [
        Batch(
            "released.lm_counts.rows",
            _frame(src.public, load_sql("validate/sample", source=view)),
            [
                Expect(
                    "ExpectTableColumnsToMatchSet",
                    {"column_set": ["n", "ngram", "noisy_count"], "exact_match": True},
                ),
                Expect("ExpectColumnValuesToNotBeNull", {"column": "ngram"}),
                Expect("ExpectColumnValuesToBeBetween", {"column": "n", "min_value": 1, "max_value": 3}),
            ],
            False,
        )
    ]
    if {"n", "ngram", "noisy_count"} <= set(src.columns(view)):
        aggregates = _frame(src.public, load_sql("lm_counts/validate_aggregates"))
        batches.append(
            Batch("released.lm_counts.table", aggregates, [zero(c) for c in aggregates.columns], False)
        )
    return batches


#: Rows the row-level expectations see (evenly spaced; the aggregates cover every row). GX 0.39 s on SOTU.
MODEL_SAMPLE_ROWS = 50_000


@register_suite("model.arpa", private=False, applies=lambda ctx: (ctx.release.root / MODEL_ARPA).is_file())
def model_arpa_suite(src: Sources, written: WrittenArpa | None = None) -> list[Batch]:
    """The language model's ARPA file (step ``lm``), parsed into a table (order, ngram, logprob,
    backoff): row-level checks on an evenly spaced sample (log10 probabilities <= 0, no nulls),
    and whole-file aggregates that must be 0 (per order: rows differ from the \\data\\ count;
    positive log-probabilities; backoff present on the top order; missing contexts/suffixes;
    missing <s>, </s>, <unk>). Post-processing of DP outputs only: public.

    ``written`` (step ``lm``): the tables write_arpa has just written are checked instead of the file
    parsed again (0.7 s on SOTU), and the file must have the SHA-256 of the bytes written."""
    import polars as pl

    from dpngram.core.errors import ArpaError
    from dpngram.lm.arpa_file import read_arpa
    from dpngram.lm.public_cache import file_digest

    path = src.released(MODEL_ARPA)
    if not path.is_file():
        return [Batch("model.arpa", None, [], False, problem=f"{MODEL_ARPA} is missing")]
    if written is not None:
        declared, model = written.declared, written.model
        differs = int(file_digest(path) != written.sha256)
    else:
        try:
            (declared, model), differs = read_arpa(path), 0
        except ArpaError as err:
            return [Batch("model.arpa", None, [], False, problem=f"{MODEL_ARPA} is malformed: {err}")]
    frames = [t.with_columns(order=pl.lit(n, pl.Int32)) for n, t in model.tables.items()]
    schema = {"ngram": pl.String, "logprob": pl.Float64, "backoff": pl.Float64, "order": pl.Int32}
    rows = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
    step = max(1, rows.height // MODEL_SAMPLE_ROWS)
    sample = rows.gather_every(step).to_pandas()
    top = max(model.tables) if model.tables else 0
    aggregates = _arpa_aggregates(model, declared, rows, top, differs)
    row_expectations = [
        Expect("ExpectColumnValuesToNotBeNull", {"column": "ngram"}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "logprob"}),
        Expect("ExpectColumnValuesToBeBetween", {"column": "logprob", "max_value": 0}),
        Expect(
            "ExpectColumnValuesToBeBetween", {"column": "order", "min_value": 1, "max_value": max(top, 1)}
        ),
    ]
    return [
        Batch("model.arpa.rows", sample, row_expectations, False),
        Batch("model.arpa.table", aggregates, [zero(c) for c in aggregates.columns], False),
    ]


def _arpa_aggregates(
    model: ArpaModel, declared: dict[int, int], rows: pl.DataFrame, top: int, differs: int
) -> pd.DataFrame:
    """:func:`model_arpa_suite`'s one-row frame of whole-file violations (each must be 0); ``top``:
    the model's highest order."""
    import pandas as pd
    import polars as pl

    from dpngram.core.errors import ArpaError
    from dpngram.lm.arpa_file import check_model

    orders = sorted(set(declared) | set(model.tables))
    try:
        check_model(model, links=False)
        closure_problems = 0
    except ArpaError:
        closure_problems = 1
    return pd.DataFrame(
        [
            {
                "orders_with_count_mismatch": sum(
                    declared.get(n, -1) != (model.tables[n].height if n in model.tables else -1)
                    for n in orders
                ),
                "positive_logprobs": int(rows.filter(pl.col("logprob") > 0).height),
                "top_order_backoffs": int(model.tables[top]["backoff"].is_not_null().sum()) if top else 1,
                "arpa_rule_violations": closure_problems,
                "missing_orders": int(not orders or orders != list(range(1, top + 1))),
                "file_differs_from_checked_tables": differs,
            }
        ]
    )


@register_suite("released.oov_words", private=False, applies=_released_or_promised(OOV_WORDS))
def oov_words_suite(src: Sources) -> list[Batch]:
    """Released TrieHH words (step ``triehh``): exactly one column ``word``; words non-null, non-empty,
    unique, at most triehh_max_depth - 1 characters (the end symbol takes the last trie level),
    and in OOV mode none of them in the known vocabulary."""
    import pyarrow as pa

    from dpngram.text.public import load_known_vocabulary

    config = src.ctx.config
    view = src.released_view("oov_words", OOV_WORDS)
    if view is None:
        return [Batch("released.oov_words", None, [], False, problem=f"{OOV_WORDS} is missing")]
    max_length = config.triehh.max_depth - 1
    rows = [
        Expect("ExpectTableColumnsToMatchSet", {"column_set": ["word"], "exact_match": True}),
        Expect("ExpectColumnValuesToNotBeNull", {"column": "word"}),
        Expect(
            "ExpectColumnValueLengthsToBeBetween", {"column": "word", "min_value": 1, "max_value": max_length}
        ),
        Expect("ExpectColumnValuesToBeUnique", {"column": "word"}),
    ]
    batches = [
        Batch(
            "released.oov_words.rows",
            _frame(src.public, load_sql("validate/sample", source=view)),
            rows,
            False,
        )
    ]
    if "word" in src.columns(view):
        known = load_known_vocabulary(config.dpne.known_vocabulary, config.lowercase)
        src.public.register("triehh_known_words", pa.table({"word": pa.array(known, pa.string())}))
        aggregates = _frame(
            src.public,
            load_sql("triehh/validate_oov_words", known="triehh_known_words"),
            {"max_length": max_length},
        )
        batches.append(
            Batch("released.oov_words.table", aggregates, [zero(c) for c in aggregates.columns], False)
        )
    return batches


def validate_model(ctx: RunContext, *, written: WrittenArpa | None = None) -> dict[str, Any]:
    """Run the ``model.arpa`` suite on the staged model (step ``lm`` runs after step
    ``validation``, so it calls this itself, with the tables it wrote: ``written``). Writes
    ``validation/model_results.json``; returns {success, suites: [...], failures: [...]} without
    raising (the caller decides)."""
    sources = Sources(ctx)
    try:
        batches = model_arpa_suite(sources, written)
    finally:
        sources.close()
    with gx_context() as (gx, context, _docs_dir):
        results = [run_batch(gx, context, batch) for batch in batches]
    failures = [f"{r['suite']}: {line}" for r in results for line in r["failures"]]
    write_json_atomic(
        ctx.release.path(MODEL_VALIDATION_RESULTS), {"success": not failures, "suites": results}
    )
    return {
        "success": not failures,
        "suites": [{k: r[k] for k in ("suite", "success", "evaluated", "failed")} for r in results],
        "failures": failures,
        "results": MODEL_VALIDATION_RESULTS,
    }


#: GX's optional integrations (Spark, SQL datasources), imported eagerly when installed: 2.4 s of
#: its 6.3 s import. The suites validate pandas frames only, so GX is imported without them unless
#: the process already has them (a Spark run, an Airflow worker); GX falls back as if not installed.
GX_SKIPPED_INTEGRATIONS = ("pyspark", "sqlalchemy")


def _import_gx() -> Any:
    """``import great_expectations`` with the :data:`GX_SKIPPED_INTEGRATIONS` this process has not
    loaded hidden during that import only (they stay importable afterwards)."""
    loaded = set(sys.modules)
    hidden = [] if "great_expectations" in loaded else [m for m in GX_SKIPPED_INTEGRATIONS if m not in loaded]
    sys.modules.update(dict.fromkeys(hidden))  # type: ignore[arg-type]  # "import m" raises ImportError
    try:
        import great_expectations as gx
    finally:
        for name in (m for m in hidden if sys.modules.get(m, 0) is None):
            del sys.modules[name]
    return gx


@contextmanager
def gx_context() -> Iterator[tuple[Any, Any, Path]]:
    """An ephemeral GX context with progress bars off; yields (gx module, context, docs dir)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gx = _import_gx()
        from great_expectations.data_context.types.base import ProgressBarsConfig

        # GX sets this module's logger to INFO on import; its only INFO line names a temp dir.
        logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
        context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    docs_dir = Path(context.variables.data_docs_sites["local_site"]["store_backend"]["base_directory"])
    try:
        yield gx, context, docs_dir
    finally:
        if docs_dir.is_dir() and docs_dir.is_relative_to(tempfile.gettempdir()):
            shutil.rmtree(docs_dir, ignore_errors=True)


def run_batch(gx: Any, context: Any, batch: Batch) -> dict[str, Any]:
    """Validate one batch; a dict with per-expectation results and one line per failure."""
    out: dict[str, Any] = {"suite": batch.suite, "private": batch.private}
    if batch.problem is not None:
        return {
            **out,
            "success": False,
            "evaluated": 0,
            "failed": 1,
            "failures": [batch.problem],
            "expectations": [],
        }
    assert batch.frame is not None
    source = context.data_sources.add_or_update_pandas(name=f"dpngram.{batch.suite}")
    asset = source.add_dataframe_asset(name=batch.suite)
    definition = asset.add_batch_definition_whole_dataframe(name="whole")
    suite = context.suites.add(gx.ExpectationSuite(name=batch.suite))
    for expect in batch.expectations:
        suite.add_expectation(getattr(gx.expectations, expect.type)(**expect.kwargs))
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=batch.suite, data=definition, suite=suite)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = validation.run(
            batch_parameters={"dataframe": widened(batch.frame)},
            result_format=_PRIVATE_FORMAT if batch.private else _PUBLIC_FORMAT,
        )
    expectations, failures = [], []
    for item in result.results:
        kwargs = {k: v for k, v in item.expectation_config.kwargs.items() if k != "batch_id"}
        entry: dict[str, Any] = {
            "expectation": item.expectation_config.type,
            "kwargs": kwargs,
            "success": bool(item.success),
        }
        if not batch.private:
            entry["result"] = _jsonable(item.result)
        if item.exception_info and item.exception_info.get("raised_exception"):
            entry["error"] = "the expectation raised an error (see Data Docs)"
        expectations.append(entry)
        if not item.success:
            failures.append(_describe(item.expectation_config.type, kwargs))
    return {
        **out,
        "success": bool(result.success),
        "evaluated": len(expectations),
        "failed": len(failures),
        "failures": failures,
        "expectations": expectations,
    }


def widened(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its narrow numeric columns as int64 / float64 (same values): GX compares only
    those dtypes as arrays and calls Python once per row for the others (an int32 ``pos`` column
    of the 200,000-row ingest sample: 0.2 s)."""
    kinds = {"i": "int64", "u": "int64", "f": "float64"}  # numpy dtypes only (never a nullable one)
    narrow = [(c, t) for c, t in frame.dtypes.items() if isinstance(t, np.dtype) and t.itemsize < 8]
    wide = {c: kinds[t.kind] for c, t in narrow if t.kind in kinds}
    return frame.astype(wide) if wide else frame


def _describe(expectation: str, kwargs: dict[str, Any]) -> str:
    """``expect_x on column c (bounds)``: names only, no data values."""
    where = kwargs.get("column") or kwargs.get("column_list") or kwargs.get("column_set")
    text = expectation
    if where is not None:
        text += f" on {'column' if 'column' in kwargs else 'columns'} {where}"
    bounds = {k: _plain(kwargs[k]) for k in ("min_value", "max_value") if kwargs.get(k) is not None}
    if "min_value" in bounds and bounds.get("min_value") == bounds.get("max_value"):
        text += f" (expected {bounds['min_value']})"
    elif bounds:
        text += " (" + ", ".join(f"{k}={v}" for k, v in bounds.items()) + ")"
    return text


def _plain(value: Any) -> Any:
    """GX stores bounds as floats: show 0.0 as 0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def scrub_fingerprints(context: Any) -> None:
    """Drop the batch fingerprint (an MD5 of the validated frame) from every stored result, so
    Data Docs carry nothing computed from private rows."""
    store = context.validation_results_store
    for key in store.list_keys():
        stored = store.get(key)
        markers = stored.meta.get("batch_markers") or {}
        if "pandas_data_fingerprint" in markers:
            markers.pop("pandas_data_fingerprint")
            store.set(key, stored)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, float):
        return value if value == value else None  # NaN -> null
    try:
        return value.item()  # numpy scalars
    except AttributeError:
        return str(value)
