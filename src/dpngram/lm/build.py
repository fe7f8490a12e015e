"""Building the run's KenLM model ONLY from its released DP artifacts: step ``lm``.

Post-processing of DP outputs (no privacy spend, no access to the run's private schema): it reads
``released/vocabulary.parquet`` (DPSU), ``released/lm_counts.parquet`` (the noisy counts of step
``lm_counts``) and the public corpus (:class:`ReleasedInputs`), and builds the open-vocabulary
mixture λ·Q + (1 − λ)·P′: the public Kneser-Ney model P (adapted to Q's unigrams, P′) mixed with the
model Q of the noisy counts (:mod:`dpngram.lm.open_model`; docs/lm.md, "Open-vocabulary model"),
written as ``model/model.arpa``; :class:`BinaryBuild` compiles it with ``build_binary``. Step
``lm`` (:mod:`dpngram.stages.lm`) checks and evaluates the model and writes the model card and its
report part.

The two earlier routes, ``arpa`` (Kneser-Ney on pseudo-counts from the Bayesian trigram
distribution θ) and ``lmplz`` (lmplz on Chen et al.'s synthetic text or on θ samples), were
retired on 2026-11-27: built from the two sources the measured ablation found adding
nothing (docs/lm-history.md, "Sources of the model: measured"), they were no better than the
public-only model, and with an ``lm_counts`` share the mixture supersedes them.

Owns: the model build (and the released model's cache entry), the released inputs it reads, the
comparison with the public-only model.
Imports: dpngram.lm, dpngram.release.layout, dpngram.release.identity, dpngram.config, dpngram.core;
numpy, polars, pyarrow.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.lm.arpa_file import WrittenArpa, write_arpa
from dpngram.lm.kenlm_bin import kenlm_binary
from dpngram.lm.ngram_tables import BOS, EOS, UNK
from dpngram.release.layout import LM_COUNTS, TRIGRAM_DIST, VOCABULARY

log = logging.getLogger(__name__)


STAGE = "lm"


#: The model's route (report part ``lm``, the model card): the one the product builds.
MIXTURE_ROUTE = "mixture"


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

    def theta(self) -> pl.DataFrame | None:
        """θ of step ``bayes`` (not a model input; benchmarks/studies/lm_sources_study.py measures it
        as one)."""
        p = self._path(TRIGRAM_DIST)
        return None if p is None else pl.read_parquet(p, columns=["w1", "w2", "w3", "prob"])


# ----------------------------------------------------------------------------------------------
# The mixture (open vocabulary; docs/lm.md, "Open-vocabulary model")
# ----------------------------------------------------------------------------------------------
def mixture_components(
    inputs: ReleasedInputs, config: RunConfig, part: dict[str, Any]
) -> tuple[list[str], Any, Any]:
    """(V_LM, P, Q) from the released DP vocabulary and noisy counts, the lm_counts report part and
    the public corpus (P without the held-out public sentences, as step ``lm_counts`` fits it)."""
    vocabulary, public = load_public(inputs, config, part)
    return vocabulary, public, noisy_counts_model(inputs, public, part)


def noisy_counts_model(inputs: ReleasedInputs, public: Any, part: dict[str, Any]) -> Any:
    """Q: the model of the released noisy counts (backing off to P), with the released threshold,
    discount and spread of the unresolved unigram mass (``public`` for a release that predates
    the key)."""
    from dpngram.lm.open_model import noisy_count_model

    return noisy_count_model(
        pl.read_parquet(inputs.root / LM_COUNTS),
        public,
        int(part["order"]),
        threshold=float(part["threshold"]),
        discount=float(part["discount"]),
        unresolved=unresolved_unigrams(part),
        sigma=float(part["sigma"]),
    )


#: The model card's words for each spread of Q's unresolved unigram mass.
UNRESOLVED_WORDS = {
    "public": "the unigram mass below the threshold in the public model's shape",
    "empirical_bayes": "the unigram mass below the threshold by empirical-Bayes counts",
}


def unresolved_unigrams(part: dict[str, Any]) -> str:
    """How report part ``lm_counts`` says Q spreads the unigram mass below the threshold."""
    return str(part.get("unresolved_unigrams", "public"))


def mixture_of(public: Any, inputs: ReleasedInputs, part: dict[str, Any]) -> Any:
    """M = λ·Q + (1 − λ)·P′ merged into one backoff model, with the released (β, λ)."""
    from dpngram.lm.mixture import mix_models

    private = noisy_counts_model(inputs, public, part)
    adapted = adapted_public(public, private, float(part.get("unigram_adaptation", 0.0)))
    return mix_models(adapted, private, float(part["mix_weight"]))


def adapted_public(public: Any, private: Any, strength: float) -> Any:
    """P adapted to Q's unigram distribution with strength β (``dpngram.lm.mixture.adapt_to_unigrams``);
    β = 0 is P itself."""
    from dpngram.lm.mixture import adapt_to_unigrams
    from dpngram.lm.ngram_tables import unigram_distribution

    return public if strength == 0 else adapt_to_unigrams(public, unigram_distribution(private), strength)


#: Public-model cache kinds (:mod:`dpngram.lm.public_cache`) of the released model M: its tables
#: and its row links, stored by step ``lm_counts`` (whose verdict scores M) for step ``lm``.
MIXTURE_KINDS = ("mixtures", "mixture_links")


def mixture_key(inputs: ReleasedInputs, config: RunConfig, part: dict[str, Any]) -> str:
    """The cache key of the released model M: everything M is computed from (the released DP
    vocabulary and noisy counts by content, the public corpus by content, the parameters and the
    selected (β, λ) of report part ``lm_counts``), so an entry is only ever read for the same M."""
    from dpngram.lm.open_model import RELEASED_PART, split_key
    from dpngram.lm.public_cache import entry_key, file_digest

    vocabulary = inputs.root / VOCABULARY
    return entry_key(
        "mixture",
        file_digest(inputs.root / LM_COUNTS),
        file_digest(vocabulary) if vocabulary.is_file() else None,
        file_digest(config.public) if config.public else None,
        split_key(RELEASED_PART),
        config.lowercase,
        config.lm.public_vocab_size,
        *(part[k] for k in ("order", "threshold", "discount", "mix_weight")),
        part.get("unigram_adaptation", 0.0),
        unresolved_unigrams(part),
        *((f"public pruned <= {config.lm.public_prune}",) if config.lm.public_prune else ()),
    )


def released_mixture(
    inputs: ReleasedInputs, config: RunConfig, part: dict[str, Any], build: Callable[[], Any]
) -> Any:
    """M through the public-model cache (``build()`` computes it on a miss, and it is stored). The
    tables and the row links are two entries of one key; links missing beside stored tables are
    derived from the strings and stored."""
    from dpngram.lm.ngram_tables import ArpaModel, NgramLinks
    from dpngram.lm.public_cache import cached_tables
    from dpngram.release.identity import public_cache_dir

    cache_dir = public_cache_dir(config)
    key = mixture_key(inputs, config, part)
    built: list[Any] = []  # the model, when this call builds it

    def tables_of_built() -> dict[int, pl.DataFrame]:
        built.append(build())
        return built[0].tables

    tables = cached_tables(cache_dir, MIXTURE_KINDS[0], key, tables_of_built)
    model = built[0] if built else ArpaModel(tables)

    def links() -> dict[int, pl.DataFrame]:
        return {
            n: pl.DataFrame({"context": k.context, "suffix": k.suffix, "word": k.word})
            for n, k in model.structure().items()
        }

    frames = cached_tables(cache_dir, MIXTURE_KINDS[1], key, links)
    if built or model.derived_structure() is not None:
        return model
    columns = ("context", "suffix", "word")
    links = {n: NgramLinks(*(f[c].to_numpy().astype(np.int64) for c in columns)) for n, f in frames.items()}
    return ArpaModel.with_structure(tables, links)


def load_public(inputs: ReleasedInputs, config: RunConfig, part: dict[str, Any]) -> tuple[list[str], Any]:
    """(V_LM, P) as every stage fits P (without the held-out public sentences)."""
    from dpngram.lm.open_model import RELEASED_PART, open_public_model
    from dpngram.release.identity import public_cache_dir

    vocabulary, _, public = open_public_model(
        inputs.vocabulary(),
        config.public,
        order=int(part["order"]),
        public_cap=config.lm.public_vocab_size,
        public_prune=config.lm.public_prune,
        lowercase=config.lowercase,
        part=RELEASED_PART,
        cache_dir=public_cache_dir(config),
    )
    return vocabulary, public


def build_route_mixture(
    part: dict[str, Any] | None,
    inputs: ReleasedInputs,
    config: RunConfig,
    arpa_path: Path,
    *,
    public: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """λ·Q + (1 − λ)·P: P is Kneser-Ney on the public corpus (but its held-out sentences) over V_LM
    (DP vocabulary ∪ public words), Q the model of the released noisy counts, λ the released weight
    (report part ``lm_counts``). M is read from the public-model cache when step ``lm_counts``
    stored it (:func:`released_mixture`). ``public``: returns P when the caller loads it (step
    ``lm`` does, in a thread, to score it), else P is loaded here when needed. Returns the build
    description; ``info['model']`` is the model written and ``info['written']`` it as written
    (:class:`dpngram.lm.arpa_file.WrittenArpa`, for the check); neither goes into the report."""
    counts_path = inputs.root / LM_COUNTS
    if part is None or not counts_path.is_file():
        raise ConfigError(
            "lm: the model is built from the noisy counts of stage lm_counts (set stage_budget.lm_counts)"
        )
    weight, adaptation = float(part["mix_weight"]), float(part.get("unigram_adaptation", 0.0))
    spread = UNRESOLVED_WORDS[unresolved_unigrams(part)]
    load = public or (lambda: load_public(inputs, config, part)[1])
    model = released_mixture(inputs, config, part, lambda: mixture_of(load(), inputs, part))
    digest = hashlib.sha256()
    counts = write_arpa(model, arpa_path, digest=digest)
    model_words = model.tables[1].filter(~pl.col("ngram").is_in([BOS, EOS, UNK])).height
    # Without a public corpus P is the uniform distribution over V_LM (= the DP vocabulary).
    public_part = "public Kneser-Ney" if config.public else "uniform (no public corpus)"
    if config.public and config.lm.public_prune:
        public_part += f" (its trigrams seen at most {config.lm.public_prune} times pruned)"
    sources: dict[str, Any] = (
        {"public_corpus": {"kneser_ney": True, "vocabulary_words": model_words}} if config.public else {}
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
            f"{weight:g} × noisy-count model (absolute discounting; {spread}) "
            f"+ {1 - weight:g} × {public_part} "
            f"adapted to the noisy unigrams with strength {adaptation:g}, "
            "merged into one backoff model"
        ),
        "mix_weight": weight,
        "model": model,
        "written": WrittenArpa(model, counts, digest.hexdigest()),
        "vocabulary": {
            "model": model_words,
            "dp": len(inputs.vocabulary()),
            "rule": f"DP vocabulary ∪ the {config.lm.public_vocab_size} most frequent public words",
        },
    }


class BinaryBuild:
    """``build_binary`` (probing structure) of ``arpa`` into ``binary``, running in its own process
    from construction on, so the caller can check and evaluate the model meanwhile (on SOTU's model
    it takes about 0.6 s, KenLM's process beside the Python one on the second core). :meth:`wait`
    renames the result into place (atomic) or raises; :meth:`cancel` stops it and leaves nothing."""

    def __init__(self, arpa: Path, binary: Path) -> None:
        self.binary = Path(binary)
        self.tmp = self.binary.with_name(self.binary.name + ".tmp")
        self._stderr = tempfile.TemporaryFile()
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [str(kenlm_binary("build_binary")), str(arpa), str(self.tmp)],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def wait(self) -> None:
        """Wait for it; rename the binary into place, or raise ``RuntimeError`` with KenLM's last line."""
        if self._proc is None:
            return
        code = self._proc.wait()
        self._proc = None
        self._stderr.seek(0)
        err = self._stderr.read().decode("utf-8", "replace")
        self._stderr.close()
        if code != 0:
            self.tmp.unlink(missing_ok=True)
            # KenLM ends with a line "ERROR" after the one that says what is wrong
            lines = [line for line in err.strip().splitlines() if line.strip() not in ("", "ERROR")]
            tail = (lines or ["no output"])[-1][:200]
            raise RuntimeError(f"build_binary failed (exit {code}): {tail}")
        os.replace(self.tmp, self.binary)

    def cancel(self) -> None:
        """Stop it (if still running) and remove its partial output."""
        if self._proc is None:
            return
        self._proc.kill()
        self._proc.wait()
        self._proc = None
        self._stderr.close()
        self.tmp.unlink(missing_ok=True)


def compile_binary(arpa: Path, binary: Path) -> None:
    """``build_binary`` (probing structure) into ``binary`` atomically; returns when it is done."""
    BinaryBuild(arpa, binary).wait()


COMPARED_METRICS = (
    "open_vocab_perplexity",
    "top1_accuracy",
    "top3_accuracy",
    "oov_rate",
    "perplexity",
    "tokens",
    "sentences",
)


#: Row names of the comparisons (report.json ``model.comparison``): the held-out public
#: sentences' row starts with the first (details follow in brackets); the second is the operator's
#: evaluation text. ``dpngram demo`` labels its output by them.
HELDOUT_PUBLIC_ROW = "held-out public sentences"
EVAL_TEXT_ROW = "lm_eval_text (operator-supplied, non-private evaluation data)"


def heldout_text(config: RunConfig, work: Path) -> Path | None:
    """The held-out public sentences as a text file, one tokenised sentence a line (from the
    public-model cache, written there on a corpus's first run; else into ``work``); None when the
    corpus has none."""
    from dpngram.lm.open_model import HELDOUT_EVERY, write_heldout_text
    from dpngram.lm.public_cache import cached_file, entry_key, file_digest
    from dpngram.release.identity import public_cache_dir

    assert config.public
    key = entry_key("heldout", file_digest(config.public), config.lowercase, HELDOUT_EVERY)
    path = cached_file(
        public_cache_dir(config),
        "heldout",
        key,
        "heldout.txt",
        lambda target: write_heldout_text(config.public, target, config.lowercase),
    )
    if path is None:
        path = work / "heldout.txt"
        write_heldout_text(config.public, path, config.lowercase)
    return path if path.stat().st_size > 0 else None


def heldout_public_metrics(model: Any, config: RunConfig, scorer: Any = None) -> dict[str, Any] | None:
    """One model's metrics (:data:`COMPARED_METRICS`) on the held-out public sentences (every
    ``HELDOUT_EVERY``-th line of the public corpus), scored from its tables (no ARPA file written
    and parsed back by KenLM), through ``scorer`` when the caller has built the model's
    :class:`~dpngram.lm.backoff_scorer.BackoffScorer`; None without a public corpus or held-out
    sentences."""
    from dpngram.lm.evaluate import evaluate_model

    if not config.public:
        return None
    with tempfile.TemporaryDirectory(prefix="dpngram-lmcmp-") as tmpdir:
        heldout = heldout_text(config, Path(tmpdir))
        if heldout is None:
            return None
        metrics = evaluate_model(model, heldout, config.lowercase, scorer)
    return {k: metrics.get(k) for k in COMPARED_METRICS}


def heldout_public_part(
    released: dict[str, Any] | None, public: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The two models' :func:`heldout_public_metrics` as the comparison holds them (and report part
    ``lm_counts`` stores them, for step ``lm``); None when there is nothing to compare."""
    if released is None or public is None:
        return None
    return {"released model": released, "public-only model": public}


def heldout_public_row(pair: dict[str, Any] | None) -> dict[str, Any]:
    """The comparison's held-out public row from :func:`heldout_public_part`: P, and so the
    mixture, is fitted on the other lines in every run, so neither model was trained on them. {}
    when there is nothing to compare."""
    from dpngram.lm.open_model import HELDOUT_EVERY

    if pair is None:
        return {}
    return {f"{HELDOUT_PUBLIC_ROW} (1 in {HELDOUT_EVERY}; neither model trained on them)": pair}


def compare_on_eval_text(binary: Path, inputs: ReleasedInputs, config: RunConfig) -> dict[str, Any]:
    """The released model's (its compiled ``binary``) and the public-only model's metrics on
    ``lm_eval_text`` (operator-supplied, non-private); {} without one. The public-only model here is
    P fitted on every public sentence, held-out ones included: the model an operator would build
    from the public corpus alone, so the comparison does not favour the released model."""
    from dpngram.lm.evaluate import evaluate_file
    from dpngram.lm.open_model import open_public_model
    from dpngram.release.identity import public_cache_dir

    if not config.lm.eval_text:
        return {}
    _, _, public_model = open_public_model(
        inputs.vocabulary(),
        config.public,
        order=config.lm.order,
        public_cap=config.lm.public_vocab_size,
        public_prune=config.lm.public_prune,
        lowercase=config.lowercase,
        part="all",
        cache_dir=public_cache_dir(config),
    )
    with tempfile.TemporaryDirectory(prefix="dpngram-lmcmp-") as tmpdir:
        tmp = Path(tmpdir)
        write_arpa(public_model, tmp / "public.arpa")
        compile_binary(tmp / "public.arpa", tmp / "public.binary")
        row = {}
        for name, path in (("released model", binary), ("public-only model", tmp / "public.binary")):
            m = evaluate_file(path, config.lm.eval_text, config.lowercase)
            row[name] = {k: m.get(k) for k in COMPARED_METRICS}
    return {EVAL_TEXT_ROW: row}
