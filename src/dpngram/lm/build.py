"""Building a KenLM model ONLY from a run's released DP artifacts: the routes of step ``lm``.

Post-processing of DP outputs (no privacy spend, no access to the run's private schema): it reads
``released/trigram_dist.parquet`` (θ, Ramadan et al. Algorithm 1), ``released/vocabulary.parquet``
(DPSU), ``released/kgrams.parquet`` (DPNE), ``released/synthetic_sequences.parquet`` (Chen et al.,
when present), ``released/lm_counts.parquet`` (noisy counts, when present) and optionally the
public corpus (:class:`ReleasedInputs`). The routes (docs/lm.md):

* route A (``arpa``): top-order pseudo-counts M·θ + λ·public counts + κ per released k-gram of the
  model's order, smoothed by interpolated modified Kneser-Ney on fractional counts
  (:mod:`dpngram.lm.arpa`), written as ARPA;
* route B (``lmplz``): ``lmplz`` on the synthetic sequences of step ``synth`` (Chen et al.) when
  present, else on sentences sampled from θ (a trigram Markov chain; non-private randomness,
  post-processing);
* route ``mixture`` (open vocabulary): λ·Q + (1 − λ)·P, the public Kneser-Ney model P mixed with
  the model Q of the noisy counts of step ``lm_counts`` (:mod:`dpngram.lm.open_model`).

Every route writes ``model/model.arpa``; :func:`compile_binary` compiles it with ``build_binary``.
Step ``lm`` (:mod:`dpngram.stages.lm`) chooses the route, checks and evaluates the model, and
writes the model card and its report part.

Owns: the model-building routes, the released inputs they read, the comparison with the
public-only model.
Imports: dpngram.lm, dpngram.release.layout, dpngram.text, dpngram.config, dpngram.core; numpy,
polars, pyarrow.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.core.noise import simulation_rng
from dpngram.lm.arpa import BOS, EOS, kneser_ney, ngrams_of_sentences, read_arpa, write_arpa
from dpngram.lm.kenlm_bin import kenlm_binary
from dpngram.release.layout import KGRAMS, LM_COUNTS, SYNTHETIC_SEQUENCES, TRIGRAM_DIST, VOCABULARY

log = logging.getLogger(__name__)


STAGE = "lm"


ROUTES = ("arpa", "lmplz")


#: The open-vocabulary route (public model mixed with the noisy-count model); 'auto' picks it
#: whenever the run released noisy counts (step lm_counts).
MIXTURE_ROUTE = "mixture"


#: Route used by lm_route='auto' when no evaluation text is given: the one that measured better in
#: benchmarks/lm_bench.py (docs/lm.md, "Benchmark").
DEFAULT_ROUTE = "arpa"


MAX_SENTENCE_TOKENS = 200


PUBLIC_BATCH_SENTENCES = 100_000


class ReleasedInputs:
    """The DP artifacts step ``lm`` may read (paths in the staged release; files may be absent)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, relative: str) -> Path | None:
        p = self.root / relative
        return p if p.is_file() else None

    def vocabulary(self) -> list[str]:
        p = self._path(VOCABULARY)
        return [] if p is None else [t for t in pq.read_table(p, columns=["token"])["token"].to_pylist() if t]

    def kgrams(self, k: int) -> pl.DataFrame:
        p = self._path(KGRAMS)
        if p is None:
            return pl.DataFrame(schema={"ngram": pl.String})
        return pl.read_parquet(p, columns=["k", "ngram"]).filter(pl.col("k") == k).select("ngram")

    def theta(self) -> pl.DataFrame | None:
        p = self._path(TRIGRAM_DIST)
        return None if p is None else pl.read_parquet(p, columns=["w1", "w2", "w3", "prob"])

    def synthetic(self) -> Path | None:
        return self._path(SYNTHETIC_SEQUENCES)


# ----------------------------------------------------------------------------------------------
# Route A
# ----------------------------------------------------------------------------------------------
def _sentence_batches(path: str | os.PathLike[str], lowercase: bool) -> Iterator[list[list[str]]]:
    from dpngram.text.public import read_public_corpus

    batch: list[list[str]] = []
    for sentence in read_public_corpus(path, lowercase):
        batch.append(sentence)
        if len(batch) >= PUBLIC_BATCH_SENTENCES:
            yield batch
            batch = []
    if batch:
        yield batch


def public_ngram_counts(
    path: str | os.PathLike[str], order: int, vocabulary: set[str], lowercase: bool
) -> pl.DataFrame:
    """Top-order counts of the public corpus (tokenised like private text, <unk> mapping with the DP
    vocabulary). Streams the corpus in batches; only the aggregated counts are kept."""
    total: pl.DataFrame | None = None
    for batch in _sentence_batches(path, lowercase):
        counts = ngrams_of_sentences(pl.Series("toks", batch, dtype=pl.List(pl.String)), order, vocabulary)
        total = (
            counts
            if total is None
            else pl.concat([total, counts]).group_by("ngram").agg(pl.col("count").sum())
        )
    return total if total is not None else pl.DataFrame(schema={"ngram": pl.String, "count": pl.Float64})


def _theta_top(theta: pl.DataFrame, order: int) -> pl.DataFrame:
    from dpngram.lm.arpa import raw_marginals

    tri = theta.select(
        ngram=pl.concat_str(["w1", "w2", "w3"], separator=" "), count=pl.col("prob").cast(pl.Float64)
    )
    return tri if order == 3 else raw_marginals(tri, 3)[order]


def route_a_counts(inputs: ReleasedInputs, config: RunConfig) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Top-order pseudo-counts for route A: M·θ (or its order-n marginal) + λ·public counts + κ per
    released k-gram of the model's order. Returns (ngram, count) and a public description."""
    order = config.lm.order
    if order > 3:
        raise ConfigError(
            f"lm_order: route 'arpa' builds at most order 3 from the trigram distribution (got {order}); "
            "use lm_route='lmplz' for higher orders"
        )
    vocabulary = set(inputs.vocabulary())
    parts: list[pl.DataFrame] = []
    sources: dict[str, Any] = {}
    theta = inputs.theta()
    if theta is not None and theta.height:
        parts.append(_theta_top(theta, order).with_columns(pl.col("count") * config.lm.theta_tokens))
        sources["trigram_dist"] = {"pseudo_occurrences_M": config.lm.theta_tokens}
    if config.public and config.lm.public_weight > 0:
        pub = public_ngram_counts(config.public, order, vocabulary, config.lowercase)
        parts.append(pub.with_columns(pl.col("count") * config.lm.public_weight))
        sources["public_corpus"] = {"weight_lambda": config.lm.public_weight}
    if config.lm.kgram_count > 0 and order >= 2:
        grams = inputs.kgrams(order)
        if grams.height:
            parts.append(grams.with_columns(count=pl.lit(float(config.lm.kgram_count))))
            sources["kgrams"] = {"pseudo_count_kappa": config.lm.kgram_count}
    if not parts:
        raise ConfigError(
            "lm_route: route 'arpa' needs released/trigram_dist.parquet, a public corpus or released k-grams"
        )
    top = pl.concat(parts).group_by("ngram").agg(pl.col("count").sum())
    return top, sources


def build_route_a(inputs: ReleasedInputs, config: RunConfig, arpa_path: Path) -> dict[str, Any]:
    """Route A: pseudo-counts -> interpolated modified KN on fractional counts -> ARPA file."""
    top, sources = route_a_counts(inputs, config)
    vocabulary = inputs.vocabulary()
    model = kneser_ney(top, config.lm.order, vocabulary)
    counts = write_arpa(model, arpa_path)
    return {
        "route": "arpa",
        "sources": sources,
        "counts": counts,
        "smoothing": "interpolated modified Kneser-Ney on fractional pseudo-counts",
    }


# ----------------------------------------------------------------------------------------------
# Route mixture (open vocabulary; docs/lm.md, "Open-vocabulary model")
# ----------------------------------------------------------------------------------------------
def mixture_components(
    inputs: ReleasedInputs, config: RunConfig, part: dict[str, Any], public_part: str = "all"
) -> tuple[list[str], Any, Any]:
    """(V_LM, P, Q) from the released DP vocabulary and noisy counts, the lm_counts report part and
    the public corpus (``public_part='train'``: without the held-out public sentences)."""
    from dpngram.lm.open_model import noisy_count_model, open_public_model
    from dpngram.release.identity import public_cache_dir

    order = int(part["order"])
    vocabulary, _, public = open_public_model(
        inputs.vocabulary(),
        config.public,
        order=order,
        public_cap=config.lm.public_vocab_size,
        lowercase=config.lowercase,
        part=public_part,
        cache_dir=public_cache_dir(config),
    )
    private = noisy_count_model(
        pl.read_parquet(inputs.root / LM_COUNTS),
        public,
        order,
        threshold=float(part["threshold"]),
        discount=float(part["discount"]),
    )
    return vocabulary, public, private


def adapted_public(public: Any, private: Any, strength: float) -> Any:
    """P adapted to Q's unigram distribution with strength β (``dpngram.lm.open_model.adapt_to_unigrams``);
    β = 0 is P itself."""
    from dpngram.lm.open_model import adapt_to_unigrams, unigram_distribution

    return public if strength == 0 else adapt_to_unigrams(public, unigram_distribution(private), strength)


def build_route_mixture(
    part: dict[str, Any] | None, inputs: ReleasedInputs, config: RunConfig, arpa_path: Path
) -> dict[str, Any]:
    """λ·Q + (1 − λ)·P: P is Kneser-Ney on the public corpus over V_LM (DP vocabulary ∪ public
    words), Q the model of the released noisy counts, λ the released weight (report part
    ``lm_counts``). Returns the build description; ``info['public_model']`` is P (for comparison)."""
    from dpngram.lm.open_model import mix_models

    counts_path = inputs.root / LM_COUNTS
    if part is None or not counts_path.is_file():
        raise ConfigError("lm_route: route 'mixture' needs the lm_counts stage (set stage_budget.lm_counts)")
    vocabulary, public, private = mixture_components(inputs, config, part)
    weight, adaptation = float(part["mix_weight"]), float(part.get("unigram_adaptation", 0.0))
    model = mix_models(adapted_public(public, private, adaptation), private, weight)
    counts = write_arpa(model, arpa_path)
    # Without a public corpus P is the uniform distribution over V_LM (= the DP vocabulary).
    public_part = "public Kneser-Ney" if config.public else "uniform (no public corpus)"
    sources: dict[str, Any] = (
        {"public_corpus": {"kneser_ney": True, "vocabulary_words": len(vocabulary)}} if config.public else {}
    )
    sources["lm_counts"] = {
        "mix_weight": weight,
        "unigram_adaptation": adaptation,
        "weight_selection": part["weight_selection"]["method"],
    }
    return {
        "route": MIXTURE_ROUTE,
        "sources": sources,
        "counts": counts,
        "smoothing": (
            f"{weight:g} × noisy-count model (absolute discounting) + {1 - weight:g} × {public_part} "
            f"adapted to the noisy unigrams with strength {adaptation:g}, "
            "merged into one backoff model"
        ),
        "mix_weight": weight,
        "public_model": public,
        "vocabulary": {
            "model": len(vocabulary),
            "dp": len(inputs.vocabulary()),
            "rule": f"DP vocabulary ∪ the {config.lm.public_vocab_size} most frequent public words",
        },
    }


# ----------------------------------------------------------------------------------------------
# Route B
# ----------------------------------------------------------------------------------------------
def sample_from_theta(theta: pl.DataFrame, n_sentences: int, seed: int) -> Iterator[list[str]]:
    """Sentences from the trigram Markov chain of θ: the first trigram from θ(<s>, ·, ·), then
    w3 ~ θ(w1, w2, ·); a context without continuation in V backs off to Σ_{w1} θ(w1, w2, ·); a
    sentence ends at </s>, when neither exists, or after MAX_SENTENCE_TOKENS. Non-private
    randomness (``simulation_rng``): θ is a DP output and sampling is post-processing."""
    rng = simulation_rng(seed)
    tokens = pl.concat([theta["w1"], theta["w2"], theta["w3"]]).unique().sort()
    index = {t: i for i, t in enumerate(tokens.to_list())}
    vocab = tokens.to_list()
    size = len(vocab)
    w1 = np.array([index[t] for t in theta["w1"].to_list()], dtype=np.int64)
    w2 = np.array([index[t] for t in theta["w2"].to_list()], dtype=np.int64)
    w3 = np.array([index[t] for t in theta["w3"].to_list()], dtype=np.int64)
    prob = theta["prob"].to_numpy().astype(np.float64)

    def table(keys: np.ndarray, nxt: np.ndarray, p: np.ndarray):
        order = np.lexsort((nxt, keys))
        keys, nxt, p = keys[order], nxt[order], p[order]
        cum = np.cumsum(p)
        uniq, start = np.unique(keys, return_index=True)
        end = np.append(start[1:], keys.size)
        before = np.where(start > 0, cum[start - 1], 0.0)
        return uniq, start, end, before, cum, nxt, cum[end - 1] - before

    tri = table(w1 * size + w2, w3, prob)
    bi = table(w2, w3, prob)
    bos, eos = index.get(BOS), index.get(EOS)
    if bos is None:
        return
    starts = w1 == bos
    if not starts.any():
        return
    first_p = prob[starts] / prob[starts].sum()
    first_cum = np.cumsum(first_p)

    def draw(tab, keys: np.ndarray):
        uniq, start, end, before, cum, nxt, mass = tab
        pos = np.searchsorted(uniq, keys)
        pos_c = np.minimum(pos, uniq.size - 1)
        found = (pos < uniq.size) & (uniq[pos_c] == keys) & (mass[pos_c] > 0)
        u = rng.random(keys.size)
        target = before[pos_c] + u * mass[pos_c]
        idx = np.clip(np.searchsorted(cum, target, side="right"), start[pos_c], end[pos_c] - 1)
        return np.where(found, nxt[idx], -1)

    batch = 50_000
    done = 0
    while done < n_sentences:
        m = min(batch, n_sentences - done)
        pick = np.minimum(
            np.searchsorted(first_cum, rng.random(m) * first_cum[-1], side="right"), first_cum.size - 1
        )
        a, b = w2[starts][pick], w3[starts][pick]
        seqs = [[x] for x in a.tolist()]
        active = b != eos
        for i, y in enumerate(b.tolist()):
            if y != eos:
                seqs[i].append(y)
        prev2, prev1 = a.copy(), b.copy()
        for _ in range(MAX_SENTENCE_TOKENS):
            ids = np.flatnonzero(active)
            if ids.size == 0:
                break
            nxt = draw(tri, prev2[ids] * size + prev1[ids])
            missing = nxt < 0
            if missing.any():
                nxt[missing] = draw(bi, prev1[ids][missing])
            for i, w in zip(ids.tolist(), nxt.tolist(), strict=True):
                if w < 0 or w == eos:
                    active[i] = False
                else:
                    seqs[i].append(w)
            prev2[ids], prev1[ids] = prev1[ids], np.where(nxt < 0, eos, nxt)
        for s in seqs:
            yield [vocab[i] for i in s]
        done += m


def run_lmplz(text: Path, arpa: Path, order: int, memory: str, tmp: Path) -> None:
    """lmplz with explicit -S, --discount_fallback (small corpora) and --skip_symbols (a literal
    <unk> in the text is whitespace; lmplz estimates <unk> itself)."""
    cmd = [
        str(kenlm_binary("lmplz")),
        "-o",
        str(order),
        "-S",
        memory,
        "-T",
        str(tmp),
        "--discount_fallback",
        "--skip_symbols",
        "--text",
        str(text),
        "--arpa",
        str(arpa),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"lmplz failed (exit {done.returncode}): {tail}")


def build_route_b(inputs: ReleasedInputs, config: RunConfig, arpa_path: Path, seed: int) -> dict[str, Any]:
    """Route B: lmplz on the released synthetic sequences (Chen et al.), else on θ samples."""
    order = config.lm.order
    with tempfile.TemporaryDirectory(prefix="dpngram-lm-") as tmpdir:
        tmp = Path(tmpdir)
        text = tmp / "corpus.txt"
        synthetic = inputs.synthetic()
        lines = 0
        with open(text, "w", encoding="utf-8") as fh:
            if synthetic is not None:
                source = "synthetic_sequences"
                for batch in pq.ParquetFile(synthetic).iter_batches(columns=["text"], batch_size=65_536):
                    for value in batch.column(0).to_pylist():
                        if value and value.strip():
                            fh.write(value.replace("\n", " ").strip() + "\n")
                            lines += 1
            else:
                theta = inputs.theta()
                if theta is None:
                    raise ConfigError(
                        "lm_route: route 'lmplz' needs released/synthetic_sequences.parquet "
                        "or released/trigram_dist.parquet"
                    )
                source = "samples_from_trigram_dist"
                for sentence in sample_from_theta(theta, config.lm.sample_sentences, seed):
                    fh.write(" ".join(sentence) + "\n")
                    lines += 1
        if lines == 0:
            raise ConfigError("lm_route: route 'lmplz' has no text to train on (empty synthetic corpus)")
        run_lmplz(text, arpa_path, order, config.lm.memory, tmp)
    declared, _ = read_arpa(arpa_path)
    return {
        "route": "lmplz",
        "sources": {source: {"sentences": lines}},
        "counts": declared,
        "smoothing": "lmplz modified Kneser-Ney (--discount_fallback)",
    }


def compile_binary(arpa: Path, binary: Path) -> None:
    """``build_binary`` (probing structure) into ``binary`` atomically."""
    tmp = binary.with_name(binary.name + ".tmp")
    done = subprocess.run(
        [str(kenlm_binary("build_binary")), str(arpa), str(tmp)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"build_binary failed (exit {done.returncode}): {tail}")
    os.replace(tmp, binary)


# ----------------------------------------------------------------------------------------------
# Used by step lm (dpngram.stages.lm)
# ----------------------------------------------------------------------------------------------
def route_seed(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"lm:{run_id}".encode()).digest()[:8], "big")


def build_route(
    route: str, inputs: ReleasedInputs, config: RunConfig, arpa: Path, seed: int
) -> dict[str, Any]:
    if route == "arpa":
        return build_route_a(inputs, config, arpa)
    return build_route_b(inputs, config, arpa, seed)


COMPARED_METRICS = (
    "open_vocab_perplexity",
    "top1_accuracy",
    "top3_accuracy",
    "oov_rate",
    "perplexity",
    "tokens",
    "sentences",
)


#: Row names of :func:`compare_with_public` (report.json ``model.comparison``): the held-out public
#: sentences' row starts with the first (details follow in brackets); the second is the operator's
#: evaluation text. ``dpngram demo`` labels its output by them.
HELDOUT_PUBLIC_ROW = "held-out public sentences"
EVAL_TEXT_ROW = "lm_eval_text (operator-supplied, non-private evaluation data)"


def compare_with_public(
    part: dict[str, Any], inputs: ReleasedInputs, binary: Path, public_model: Any, config: RunConfig
) -> dict[str, Any]:
    """Metrics of the released model and of the public-only model P (the trivial alternative):

    * on the held-out public sentences (every ``HELDOUT_EVERY``-th line of the public corpus): the
      released model trained on them, so both numbers come from stand-ins built by the same recipe
      without those sentences (the same released noisy counts and weight);
    * on ``lm_eval_text`` when given (operator-supplied, non-private): the released model itself.

    Never on the private data."""
    from dpngram.lm.evaluate import evaluate_file
    from dpngram.lm.open_model import HELDOUT_EVERY, mix_models, write_heldout_text

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dpngram-lmcmp-") as tmpdir:
        tmp = Path(tmpdir)
        if config.public and write_heldout_text(config.public, tmp / "heldout.txt", config.lowercase):
            _, p_train, q_train = mixture_components(inputs, config, part, "train")
            models = {
                "released model": mix_models(
                    adapted_public(p_train, q_train, float(part.get("unigram_adaptation", 0.0))),
                    q_train,
                    float(part["mix_weight"]),
                ),
                "public-only model": p_train,
            }
            row = {}
            for name, model in models.items():
                path = tmp / f"standin_{len(row)}.arpa"
                write_arpa(model, path)
                # scored from the ARPA file: KenLM parses it once either way, and compiling a
                # binary first (build_binary) would parse it too
                m = evaluate_file(path, tmp / "heldout.txt", config.lowercase, arpa_model=model)
                row[name] = {k: m.get(k) for k in COMPARED_METRICS}
            out[f"{HELDOUT_PUBLIC_ROW} (1 in {HELDOUT_EVERY}; stand-ins trained without them)"] = row
        if config.lm.eval_text:
            write_arpa(public_model, tmp / "public.arpa")
            compile_binary(tmp / "public.arpa", tmp / "public.binary")
            row = {}
            for name, path in (("released model", binary), ("public-only model", tmp / "public.binary")):
                m = evaluate_file(path, config.lm.eval_text, config.lowercase)
                row[name] = {k: m.get(k) for k in COMPARED_METRICS}
            out[EVAL_TEXT_ROW] = row
    return out
