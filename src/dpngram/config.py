"""Typed, validated run configuration.

One model, :class:`RunConfig`, is the single source of truth for run parameters: the CLI builds it
from flags, the Airflow DAG builds its Params (JSON schema, titles, descriptions) from
:meth:`RunConfig.param_schema`, and every stage reads it. Errors name the field and the rule
(:class:`ConfigError`), never a traceback.

Rules that void the privacy guarantee are refused here (epsilon <= 0, delta outside (0, 1),
Delta < 1, eta outside (0, 1)); the data-dependent rule ``delta < 1/n_users`` is checked by
:meth:`RunConfig.check_against_users` once ingest has counted users (the count itself is not
released: only the pass/fail decision is used to stop the run).

Owns: :class:`RunConfig` and its sections (``SECTIONS``), ``STAGES``, the flat flag names, the
validation rules of every run parameter and their error messages.
Imports: dpngram.core; pydantic.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError, ConfigError

if TYPE_CHECKING:  # the accountant (numpy, scipy: ~1.5 s) is imported only when a budget is planned,
    # not when the Airflow DAG file is parsed (docs/orchestration.md, "Task start-up cost")
    from dpngram.core.accounting import BudgetPlan, StagePrivacy

#: Stages that spend privacy budget, in run order. ``stage_budget`` splits (epsilon, delta) among
#: the ones that are enabled.
STAGES = ("dpne", "lm_counts", "bayes", "synth", "triehh")

#: The default ``stage_budget``: every stage the product promises (vocabulary and k-grams, the
#: language model's noisy counts, the Bayesian trigram distribution, synthetic text), so a run with
#: every default publishes a language model. ``dpngram demo`` uses the same split. Chosen by measuring
#: the model against the split (docs/lm.md, "Budget split: measured"): within 5% perplexity of the
#: best split that delivers every artifact at ε 4 and 1, with as many DPNE k-grams as the previous
#: default (dpne 0.4, lm_counts 0.3, bayes 0.15, synth 0.15, 5.1% worse at ε = 1).
DEFAULT_STAGE_BUDGET: dict[str, float] = {"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1}


_MEMORY_RE = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|KiB|MB|MiB|GB|GiB|TB|TiB)\s*$", re.IGNORECASE)


#: Units of ``memory_limit`` (DuckDB's meaning: KB/MB/GB powers of 1000, KiB/MiB/GiB of 1024).
_MEMORY_UNITS = {
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "tib": 1024**4,
}


#: The smallest ``memory_limit`` accepted (``0GB`` would leave DuckDB nothing to run in).
MIN_MEMORY_LIMIT = 1000**2


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
#: Dataset names that are names of the output layout (dpngram.release.layout.RESERVED_NAMES):
#: releases go to OUT/DATASET/runs and OUT/DATASET/latest, so a dataset is a directory name.
RESERVED_DATASET_NAMES = ("runs", "latest")
#: The same rule as a JSON-schema pattern (the trigger form refuses a bad name before a run exists).
DATASET_PATTERN = r"^(?!(?:runs|latest)$)[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class _Section(BaseModel):
    """A group of parameters. ``FLAGS`` maps each field to its flat name: the CLI flag (with '-')
    and the Airflow Param, unchanged from the flat configuration users already write."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    TITLE: ClassVar[str] = ""
    FLAGS: ClassVar[dict[str, str]] = {}


class DpneConfig(_Section):
    """DPSU vocabulary and DPNE k-gram levels."""

    TITLE: ClassVar[str] = "DPSU vocabulary and DPNE k-gram levels"
    FLAGS: ClassVar[dict[str, str]] = {
        "max_n": "max_n",
        "max_contribution": "max_contribution",
        "eta": "eta",
        "sigma_decay": "sigma_decay",
        "pruning": "pruning",
        "variant": "dpne_variant",
        "exact_max_valid": "exact_max_valid",
        "vocabulary_method": "vocabulary_method",
        "known_vocabulary": "known_vocabulary",
        "policy": "dpsu_policy",
        "policy_cap": "dpsu_policy_cap",
        "sips_rounds": "dpsu_sips_rounds",
        "sips_ratio": "dpsu_sips_ratio",
        "public_vocabulary": "dpne_public_vocabulary",
        "threshold_delta": "dpne_threshold_delta",
    }

    max_n: int = Field(
        5, ge=1, le=12, title="T (longest n-gram)", description="Extract k-grams for k = 1..T."
    )

    max_contribution: int = Field(
        100,
        ge=1,
        le=100_000,
        title="Delta0 (per-user contribution)",
        description="Each user contributes at most this many distinct items per level.",
    )

    eta: float = Field(0.01, gt=0, lt=1, title="eta", description="Tolerated fraction of spurious k-grams.")

    sigma_decay: float = Field(
        1.2,
        gt=0,
        le=10,
        title="sigma decay c",
        description="sigma_k = c * sigma_{k-1}: c > 1 spends more of the dpne budget on short n-grams "
        "(the default 1.2 was chosen on public text; the paper's even split is 1).",
    )

    pruning: Literal["both", "single"] = Field(
        "both", title="Pruning rule", description="Valid k-grams: both-side or single-side."
    )

    variant: Literal["auto", "exact", "scalable"] = Field(
        "auto",
        title="DPNE variant",
        description="exact materialises V_k; scalable samples it; auto picks by size.",
    )

    exact_max_valid: int = Field(
        5_000_000,
        ge=1,
        title="Exact-variant limit",
        description="With dpne_variant=auto, use the exact variant when |V_k| is at most this.",
    )

    vocabulary_method: Literal["dpsu", "triehh", "both"] = Field(
        "dpsu",
        title="Vocabulary method",
        description="S_1 from DPSU, from LDP TrieHH words (plus the known vocabulary), or their union "
        "('triehh'/'both' need stage_budget.triehh).",
    )

    policy: Literal["weighted", "policy-gaussian", "dp-sips"] = Field(
        "dp-sips",
        title="DPSU policy",
        description="How each user spreads its unit l2 weight over its items, for the vocabulary and every "
        "k-gram level: 'dp-sips' (default on every engine; Swanberg et al. 2023: dpsu_sips_rounds weighted "
        "rounds, each dropping the items released before; only SQL aggregations, scales out on Spark, one "
        "histogram pass per round); 'weighted' (1/sqrt(|U_i|) each; one pass, about 25% fewer n-grams); "
        "'policy-gaussian' (Gopi et al. 2020: users in a secret random order fill items up to a cap; "
        "sequential: every user's items stream through the driver, so it does not scale out on Spark, and "
        "at 1M users on DuckDB it is slower than dp-sips for about the same n-grams).",
    )

    policy_cap: float = Field(
        10.0,
        ge=0,
        le=20,
        title="Policy cap alpha",
        description="policy-gaussian only: an item's weight is filled up to rho + alpha * sigma (rho the "
        "level's threshold).",
    )

    sips_rounds: int = Field(
        2,
        ge=1,
        le=10,
        title="DP-SIPS rounds R",
        description="dp-sips only: rounds per release (vocabulary and each level); round r gets the share "
        "f_r of the Gaussian budget (sigma_r = sigma / sqrt(f_r)), of the threshold delta and of eta. "
        "1 equals 'weighted'. Default 2 (with ratio 16) chosen on public text.",
    )

    sips_ratio: float = Field(
        16.0,
        gt=0,
        le=1000,
        title="DP-SIPS budget ratio",
        description="dp-sips only: f_r is proportional to ratio^(r-1) (above 1: more budget on the later "
        "rounds; default 16 with 2 rounds: 1/17 of the budget clears the most frequent items first, "
        "chosen on public text).",
    )

    public_vocabulary: int = Field(
        100_000,
        ge=0,
        le=10_000_000,
        title="Public vocabulary domain",
        description="dp-sips with 2+ rounds and a public corpus only: the vocabulary treats this many of the "
        "public corpus's most frequent words as a public domain. From round 2 on, a held public word passes "
        "an eta threshold (like a k-gram level's) instead of the DPSU threshold, and public words nobody "
        "holds are released at the same rate (at most eta times the round-1 vocabulary, in expectation); "
        "same epsilon and delta. 0: off.",
    )

    threshold_delta: float = Field(
        0.1,
        gt=0,
        lt=1,
        title="Threshold share of delta",
        description="Fraction of the dpne delta spent by the vocabulary's DPSU threshold; the rest goes to "
        "the Gaussian noise (the paper uses 1/2; the default 0.1 was chosen on public text).",
    )

    known_vocabulary: str | None = Field(
        None,
        title="Known vocabulary (OOV mode)",
        description="Public word list (one word per line, .gz accepted); TrieHH then discovers only words "
        "outside it.",
    )


class LmConfig(_Section):
    """Language model (noisy counts, mixture and model building)."""

    TITLE: ClassVar[str] = "Language model (noisy counts, mixture and model building)"
    FLAGS: ClassVar[dict[str, str]] = {
        "route": "lm_route",
        "public_vocab_size": "lm_public_vocab_size",
        "count_domain": "lm_count_domain",
        "count_clip": "lm_count_clip",
        "count_threshold": "lm_count_threshold",
        "count_discount": "lm_count_discount",
        "mix_weight": "lm_mix_weight",
        "unigram_adaptation": "lm_unigram_adaptation",
        "holdout": "lm_holdout",
        "verdict_holdout": "lm_verdict_holdout",
        "order": "lm_order",
        "theta_tokens": "lm_theta_tokens",
        "public_weight": "lm_public_weight",
        "kgram_count": "lm_kgram_count",
        "sample_sentences": "lm_sample_sentences",
        "memory": "lm_memory",
        "eval_text": "lm_eval_text",
    }

    route: Literal["auto", "mixture", "arpa", "lmplz", "off"] = Field(
        "auto",
        title="LM: route",
        description="'mixture': the public model mixed with the model of the noisy counts (stage "
        "lm_counts); 'arpa': Kneser-Ney on pseudo-counts from the trigram distribution; 'lmplz': lmplz "
        "on synthetic/sampled text; 'auto': 'mixture' when the run has an lm_counts share, else the "
        "better of the others on lm_eval_text if given, else 'arpa'; 'off': no model.",
    )

    public_vocab_size: int = Field(
        100_000,
        ge=0,
        le=10_000_000,
        title="LM: public words in the model vocabulary",
        description="The model vocabulary is the DP vocabulary plus this many of the public corpus's most "
        "frequent words (0: DP vocabulary only). Public data: no privacy cost.",
    )

    count_domain: int = Field(
        200_000,
        ge=0,
        le=100_000_000,
        title="LM counts: public n-grams per order",
        description="Stage lm_counts counts, for each order 2..N, this many of the most frequent public "
        "n-grams plus the DPNE-released k-grams (every model word at order 1).",
    )

    count_clip: float = Field(
        1.0,
        gt=0,
        le=1e6,
        title="LM counts: per-user l2 bound C",
        description="Each user's n-gram count vector is scaled to l2 norm at most C (the sensitivity).",
    )

    count_threshold: float = Field(
        3.0,
        ge=0,
        le=100,
        title="LM counts: release threshold (in sigma)",
        description="Order >= 2 noisy counts below this many noise standard deviations are not released.",
    )

    count_discount: float = Field(
        1.0,
        ge=0,
        le=100,
        title="LM counts: absolute discount (in sigma)",
        description="The noisy-count model subtracts this many noise standard deviations from each count.",
    )

    mix_weight: float | Literal["auto"] = Field(
        "auto",
        title="LM: weight of the private model",
        description="'auto': chosen by report-noisy-max on held-out users (0 = public model alone is a "
        "candidate); or a fixed value in [0, 1].",
    )

    unigram_adaptation: float | Literal["auto"] = Field(
        "auto",
        title="LM: unigram adaptation of the public model",
        description="Strength beta in [0, 1] of adapting the public model to the noisy unigrams "
        "(p(w|h) * (q(w)/p(w))^beta, renormalised); 'auto': chosen with the weight (0 = none is a "
        "candidate).",
    )

    holdout: float = Field(
        0.1,
        gt=0,
        lt=1,
        title="LM: fraction of users for the weight selection",
        description="With lm_mix_weight or lm_unigram_adaptation 'auto', these users score the candidates "
        "and are not counted "
        "(disjoint users: no extra privacy cost).",
    )

    verdict_holdout: float = Field(
        0.05,
        ge=0,
        lt=1,
        title="LM: fraction of users for the private-domain verdict",
        description="These users are neither counted nor used for the selection: the model card's verdict "
        "(a DP estimate of their per-token log-loss under this model and the public-only one) is "
        "measured on them (disjoint users: no extra privacy cost). 0 turns the verdict off.",
    )

    order: int = Field(3, ge=1, le=6, title="LM: order", description="N-gram order (route arpa: at most 3).")

    theta_tokens: float = Field(
        30_000.0,
        ge=0,
        le=1e12,
        title="LM: M (pseudo-occurrences of the trigram distribution)",
        description="Route arpa: the trigram distribution counts as M trigram occurrences (M * prob).",
    )

    public_weight: float = Field(
        1.0,
        ge=0,
        le=1e6,
        title="LM: lambda (public-count weight)",
        description="Route arpa: public-corpus n-gram counts are added with this weight (0: not used).",
    )

    kgram_count: float = Field(
        1.0,
        ge=0,
        le=1e9,
        title="LM: kappa (pseudo-count per released k-gram)",
        description="Route arpa: each DPNE-released k-gram of the model's order adds this pseudo-count.",
    )

    sample_sentences: int = Field(
        200_000,
        ge=1,
        le=100_000_000,
        title="LM: sentences sampled from theta",
        description="Route lmplz without a synthetic corpus: sentences sampled from the trigram "
        "distribution.",
    )

    memory: str = Field("1G", title="LM: lmplz memory (-S)", description="e.g. 1G or 512M.")

    eval_text: str | None = Field(
        None,
        title="LM: evaluation text",
        description="Plain-text file the model card's metrics (and lm_route='auto') use; default: the "
        "public corpus. Treated as non-private: the metrics on it are published (report, model card), "
        "so never pass private users' text.",
    )

    @field_validator("mix_weight")
    @classmethod
    def _lm_mix_weight(cls, value: float | str) -> float | str:
        if value != "auto" and not 0.0 <= float(value) <= 1.0:
            raise ValueError("must be 'auto' or a number in [0, 1]")
        return value

    @field_validator("unigram_adaptation")
    @classmethod
    def _lm_unigram_adaptation(cls, value: float | str) -> float | str:
        if value != "auto" and not 0.0 <= float(value) <= 1.0:
            raise ValueError("must be 'auto' or a number in [0, 1]")
        return value

    @field_validator("memory")
    @classmethod
    def _lm_memory(cls, value: str) -> str:
        if not re.match(r"^\d+[KMGT%]?$", value.strip()):
            raise ValueError("must look like '1G', '512M' or '10%' (lmplz -S)")
        return value.strip()


class BayesConfig(_Section):
    """Bayesian trigram distribution (Ramadan et al.)."""

    TITLE: ClassVar[str] = "Bayesian trigram distribution (Ramadan et al.)"
    FLAGS: ClassVar[dict[str, str]] = {
        "vocab_size": "bayes_vocab_size",
        "clip_count": "bayes_clip_count",
        "max_trigrams": "bayes_max_trigrams",
        "S": "bayes_S",
        "rho": "bayes_rho",
        "log_clip": "bayes_log_clip",
        "calibration": "bayes_calibration",
    }

    vocab_size: int = Field(
        50_000,
        ge=1,
        le=5_000_000,
        title="Bayes: |V| cap",
        description=(
            "Trigram vocabulary V = public trigrams + DPNE-released trigrams, capped at this size by "
            "public count."
        ),
    )

    clip_count: int = Field(
        1,
        ge=1,
        le=1000,
        title="Bayes: C (per-user count clamp)",
        description="Each user's count of a trigram is clamped to C (the paper uses 1 or 10).",
    )

    max_trigrams: int = Field(
        64,
        ge=1,
        le=100_000,
        title="Bayes: W (trigrams per user)",
        description="Each user contributes at most W distinct trigrams (a random subset).",
    )

    S: float | Literal["auto"] = Field(
        "auto",
        title="Bayes: S (decay slope)",
        description="w = min(1, S N / C); a number > 0, or 'auto' to choose it on public data "
        "(zero privacy cost).",
    )

    rho: float | Literal["auto"] = Field(
        "auto",
        title="Bayes: rho (private weight)",
        description="mu_ps = rho w x + (1 - rho) mu_p; a number in (0, 1), or 'auto' to choose it on "
        "public data.",
    )

    log_clip: float = Field(
        4.0,
        gt=0,
        le=50,
        title="Bayes: L (clip on the mean log-count)",
        description="Public clip on the centring constant mean(log(1 + c)); makes the sensitivity bound "
        "data-independent.",
    )

    calibration: Literal["global", "brute-force-NOT-DP"] = Field(
        "global",
        title="Bayes: noise calibration",
        description="'global': data-independent sensitivity bound (DP). 'brute-force-NOT-DP': the paper's "
        "data-dependent brute force, NOT differentially private, for comparison only.",
    )

    @field_validator("S")
    @classmethod
    def _bayes_s(cls, value: float | str) -> float | str:
        if value != "auto" and not (0 < float(value) <= 1e4):
            raise ValueError("must be 'auto' or a number in (0, 10000]")
        return value

    @field_validator("rho")
    @classmethod
    def _bayes_rho(cls, value: float | str) -> float | str:
        if value != "auto" and not (0 < float(value) < 1):
            raise ValueError("must be 'auto' or a number in (0, 1)")
        return value


class SynthConfig(_Section):
    """Synthetic sequences (Chen et al.)."""

    TITLE: ClassVar[str] = "Synthetic sequences (Chen et al.)"
    FLAGS: ClassVar[dict[str, str]] = {
        "n_max": "synth_n_max",
        "l_max": "synth_l_max",
        "allocation": "synth_allocation",
        "max_sequences": "synth_max_sequences",
        "max_nodes": "synth_max_nodes",
    }

    n_max: int = Field(
        5,
        ge=1,
        le=10,
        title="Synth: n_max (tree height)",
        description="Largest n-gram size explored by the exploration tree (Chen et al. Algorithm 1).",
    )

    l_max: int = Field(
        20,
        ge=1,
        le=1000,
        title="Synth: l_max (items per user)",
        description="Each user's token stream (sentences joined with '&') is truncated to l_max items; "
        "the Laplace sensitivity is l_max.",
    )

    allocation: Literal["adaptive", "uniform"] = Field(
        "adaptive",
        title="Synth: budget allocation",
        description=(
            "'adaptive': Markov-estimated per-node budgets (paper §4.3.2); 'uniform': epsilon/n_max "
            "per level."
        ),
    )

    max_sequences: int = Field(
        1_000_000,
        ge=1,
        le=100_000_000,
        title="Synth: most synthetic sentences",
        description="Upper bound on the rows of synthetic_sequences, whatever the noise (at a tiny epsilon "
        "the noisy counts, hence the number of sentences, are huge). More are never generated; fewer "
        "are a sample of the same distribution. Public: it does not depend on the data.",
    )

    max_nodes: int = Field(
        1_000_000,
        ge=1,
        le=100_000_000,
        title="Synth: most tree nodes",
        description="Upper bound on the exploration tree's released nodes; a level that would pass it "
        "keeps its largest noisy counts and the tree stops there (post-processing of noisy counts).",
    )


class TriehhConfig(_Section):
    """TrieHH word discovery (local DP)."""

    TITLE: ClassVar[str] = "TrieHH word discovery (local DP)"
    FLAGS: ClassVar[dict[str, str]] = {
        "max_depth": "triehh_max_depth",
        "max_words": "triehh_max_words",
        "users_per_layer": "triehh_users_per_layer",
        "max_prefixes": "triehh_max_prefixes",
        "passes": "triehh_passes",
        "sampling": "triehh_sampling",
        "epsilon0": "triehh_epsilon0",
        "alphabet": "triehh_alphabet",
        "end_symbol": "triehh_end_symbol",
        "spurious_rate": "triehh_spurious_rate",
    }

    max_depth: int = Field(
        12,
        ge=2,
        le=64,
        title="TrieHH: L (max depth)",
        description="Trie layers; words have at most L - 1 characters (plus the end symbol).",
    )

    max_words: int = Field(
        4,
        ge=1,
        le=1000,
        title="TrieHH: m (reports per user)",
        description="Each participating user sends m Subset Selection reports (padded with a dummy).",
    )

    users_per_layer: int = Field(
        1000,
        ge=1,
        le=1_000_000_000,
        title="TrieHH: n (users per layer)",
        description="Fresh users per layer; the input needs n x L x passes users.",
    )

    max_prefixes: int = Field(
        10,
        ge=1,
        le=100_000,
        title="TrieHH: k (prefixes kept per layer)",
        description="At most k prefixes with the most votes (and above the noise threshold) survive a layer.",
    )

    passes: int = Field(
        1, ge=1, le=10, title="TrieHH: passes", description="Tries built one after another on disjoint users."
    )

    sampling: Literal["greedy", "random"] = Field(
        "random",
        title="TrieHH: local sampler",
        description="greedy: a user's most frequent prefixes; random: uniform over its distinct prefixes.",
    )

    epsilon0: float | None = Field(
        None,
        gt=0,
        le=50,
        title="TrieHH: eps0 (per-report LDP)",
        description="Default: the largest eps0 whose user-level central epsilon after shuffling fits the "
        "triehh share.",
    )

    alphabet: str = Field(
        "abcdefghijklmnopqrstuvwxyz0123456789'-",
        min_length=1,
        max_length=1000,
        title="TrieHH: alphabet",
        description="Characters words may use (others make a word ineligible).",
    )

    end_symbol: str = Field(
        "$", min_length=1, max_length=1, title="TrieHH: end symbol", description="Not in the alphabet."
    )

    spurious_rate: float = Field(
        0.01,
        gt=0,
        lt=1,
        title="TrieHH: noise threshold rate",
        description="Per layer, probability bound that any unreported prefix passes the vote threshold.",
    )


class EngineConfig(_Section):
    """Engine (DuckDB or Spark)."""

    TITLE: ClassVar[str] = "Engine (DuckDB or Spark)"
    FLAGS: ClassVar[dict[str, str]] = {
        "name": "engine",
        "memory_limit": "memory_limit",
        "threads": "threads",
        "spark_master": "spark_master",
        "spark_warehouse": "spark_warehouse",
        "spark_conf": "spark_conf",
    }

    name: Literal["duckdb", "spark"] = Field(
        "duckdb",
        title="Engine",
        description="Where ingest, the vocabulary and the DPNE levels run: 'duckdb' (embedded, one "
        "machine) or 'spark' (a SparkSession; see spark_master). Noise is drawn on the driver either way.",
    )

    memory_limit: str = Field(
        "4GB", title="DuckDB memory limit", description="e.g. 4GB; larger work spills to disk."
    )

    threads: int | None = Field(
        None,
        ge=1,
        le=256,
        title="DuckDB threads",
        description="Worker threads of DuckDB; default: one per CPU core.",
    )

    spark_master: str = Field(
        "local[2]",
        title="Spark master",
        description="With engine=spark: local[N] (one machine) or a cluster URL (spark://host:7077, yarn, "
        "k8s://...). One Spark session per task.",
    )

    spark_warehouse: str | None = Field(
        None,
        title="Spark table directory",
        description="With engine=spark: where the run's private Parquet tables live (any Hadoop path: "
        "hdfs://, s3a://, local). Default: next to the warehouse file (WAREHOUSE.spark).",
    )

    spark_conf: str | None = Field(
        None,
        title="Spark settings",
        description="With engine=spark: extra Spark settings as KEY=VALUE pairs separated by commas, e.g. "
        "spark.executor.memory=8g,spark.sql.shuffle.partitions=400.",
    )

    @field_validator("spark_conf")
    @classmethod
    def _spark_conf(cls, value: str | None) -> str | None:
        if value is None:
            return value
        for item in filter(None, (p.strip() for p in value.split(","))):
            key, sep, setting = item.partition("=")
            if not sep or not re.match(r"^spark\.[A-Za-z0-9_.\-]+$", key.strip()) or not setting.strip():
                raise ValueError("must be spark.KEY=VALUE pairs separated by commas")
        return value

    def spark_settings(self) -> dict[str, str]:
        """``spark_conf`` as a dict (validated)."""
        pairs = (p.strip().partition("=") for p in (self.spark_conf or "").split(",") if p.strip())
        return {key.strip(): setting.strip() for key, _, setting in pairs}

    @field_validator("memory_limit")
    @classmethod
    def _memory(cls, value: str) -> str:
        match = _MEMORY_RE.match(value)
        if not match:
            raise ValueError("must look like '4GB' or '512MB'")
        number = float(value.strip()[: match.start(2)].strip())
        if number * _MEMORY_UNITS[match.group(2).lower()] < MIN_MEMORY_LIMIT:
            raise ValueError("must be at least 1MB (DuckDB cannot run without memory)")
        return value.replace(" ", "")


class RunConfig(BaseModel):
    """Everything a run needs. Field descriptions become the Airflow trigger-form help text."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # -- data --------------------------------------------------------------------------------
    dataset: str = Field(
        "default",
        title="Dataset name",
        description="Key of the privacy ledger (runs on the same dataset share its lifetime budget) and "
        "the release directory OUT/DATASET. Allowed: 1-64 letters, digits, '_', '.', '-' (not 'runs', "
        "'latest').",
        json_schema_extra={"pattern": DATASET_PATTERN},
    )
    input: str = Field(
        ...,
        title="Input path",
        description=(
            "JSONL, CSV or Parquet file (.gz accepted), or a directory of .txt files (one user per file)."
        ),
    )
    input_format: Literal["auto", "jsonl", "csv", "parquet", "textdir"] = Field(
        "auto",
        title="Input format",
        description="'auto' picks from the file name or directory.",
    )
    input_extensions: str = Field(
        ".txt",
        title="Text-directory extensions",
        description="With a directory input: read only files with these extensions (comma-separated, "
        "e.g. .txt,.md; a .gz after one is allowed); other files are quarantined, not read.",
    )
    follow_external_symlinks: bool = Field(
        False,
        title="Follow symlinks out of the input directory",
        description="With a directory input: also read files whose symbolic link resolves outside the "
        "directory (off: they are quarantined, not read). The report records the setting.",
    )
    max_quarantine_fraction: float = Field(
        0.05,
        ge=0,
        le=1,
        title="Max quarantined fraction",
        description="Refuse the run at ingest, before any noise is drawn (its budget reservation is "
        "released), when more than this fraction of the input's rows is quarantined as malformed; "
        "1 never refuses.",
    )
    user_field: str = Field("user_id", title="User-id field", description="Column/key holding the user id.")
    text_field: str = Field("text", title="Text field", description="Column/key holding the text.")
    public: str | None = Field(
        None,
        title="Public corpus",
        description="Plain-text public corpus (one sentence per line, .gz accepted) used as a prior.",
    )
    out: str = Field(
        ...,
        title="Output directory",
        description="Releases go to OUT/DATASET/runs/RUN_ID; OUT/DATASET/latest points to the "
        "dataset's newest.",
    )
    warehouse: str = Field(
        ".dpngram/warehouse.duckdb",
        title="Warehouse database",
        description="DuckDB file holding private working tables (never published) and the privacy ledger.",
    )
    run_id: str | None = Field(None, title="Run id", description="Defaults to a timestamped id.")

    # -- tokenizer ---------------------------------------------------------------------------
    lowercase: bool = Field(
        True, title="Lower-case tokens", description="Fold case after NFKC normalisation."
    )

    # -- privacy ------------------------------------------------------------------------------
    epsilon: float = Field(
        4.0, gt=0, le=100, title="Epsilon", description="Total privacy loss of the run (epsilon > 0)."
    )
    delta: float = Field(
        1e-7,
        gt=0,
        lt=1,
        title="Delta",
        description="Total failure probability of the run; must also be below 1/number of users.",
    )
    stage_budget: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_STAGE_BUDGET),
        title="Budget split",
        description="Fractions of (epsilon, delta) per stage, as JSON; a stage runs only with a share and "
        "the fractions sum to at most 1. Stages: dpne (vocabulary and k-grams), lm_counts (noisy counts "
        "for the language model), bayes (trigram distribution), synth (synthetic text), triehh (LDP "
        "words). The default runs every stage the product releases, language model included.",
        # the trigger form / REST API refuse unknown stages and fractions outside (0, 1] before a
        # run is created (Airflow validates Params with this JSON schema); the sum is checked by
        # _budget (privacy_precheck)
        json_schema_extra={
            "propertyNames": {"enum": list(STAGES)},
            "additionalProperties": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        },
    )
    lifetime_epsilon: float | None = Field(
        None,
        gt=0,
        title="Lifetime epsilon",
        description="Refuse the run if the dataset's recorded spend plus this run would exceed it.",
    )
    lifetime_delta: float | None = Field(
        None,
        gt=0,
        lt=1,
        title="Lifetime delta",
        description="Refuse the run if the dataset's recorded delta plus this run's would exceed it.",
    )
    budget_calibration: Literal["joint", "per-stage"] = Field(
        "joint",
        title="Budget calibration",
        description="'joint': the stages' noise is scaled together so that their composed total is exactly "
        "the run's epsilon; 'per-stage': each stage is calibrated to its share alone (composes to less).",
    )

    # -- one section per stage (flat names, as CLI flags and Params: ``SECTION.FLAGS``) ----------
    dpne: DpneConfig = Field(default_factory=DpneConfig)
    bayes: BayesConfig = Field(default_factory=BayesConfig)
    lm: LmConfig = Field(default_factory=LmConfig)
    synth: SynthConfig = Field(default_factory=SynthConfig)
    triehh: TriehhConfig = Field(default_factory=TriehhConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)

    # -- validators ---------------------------------------------------------------------------
    @field_validator("dataset")
    @classmethod
    def _dataset_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError(
                "must be 1-64 characters of letters, digits, '_', '.', '-', starting with a letter or digit"
            )
        if value in RESERVED_DATASET_NAMES:
            raise ValueError(f"'{value}' is reserved (a name of the output layout, OUT/DATASET/{value})")
        return value

    @field_validator("input_extensions")
    @classmethod
    def _extensions(cls, value: str) -> str:
        items = [p.strip() for p in value.split(",") if p.strip()]
        if not items or any(not re.match(r"^\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$", e) for e in items):
            raise ValueError("must be extensions with their dot, separated by commas, e.g. '.txt,.md'")
        if any(e.lower() == ".gz" for e in items):
            raise ValueError("'.gz' is not an extension of its own: name the one before it (.txt.gz -> .txt)")
        return ",".join(items)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,127}$", value):
            raise ValueError("must be 1-128 characters of letters, digits, '_', '.', ':', '+', '-'")
        return value

    @field_validator("stage_budget")
    @classmethod
    def _budget(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(STAGES))
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {list(STAGES)}")
        if any(not (0 < f <= 1) for f in value.values()):
            raise ValueError("every fraction must be in (0, 1]")
        if sum(value.values()) > 1 + 1e-9:
            raise ValueError(f"fractions sum to {sum(value.values()):.4g} > 1")
        return value

    @model_validator(mode="after")
    def _triehh(self) -> RunConfig:
        alphabet, end = self.triehh.alphabet, self.triehh.end_symbol
        if len(set(alphabet)) != len(alphabet) or any(ch.isspace() for ch in alphabet):
            raise ValueError("triehh_alphabet: must not repeat characters or contain whitespace")
        if end in alphabet or end.isspace():
            raise ValueError("triehh_end_symbol: must be a non-space character outside triehh_alphabet")
        method = self.dpne.vocabulary_method
        uses_triehh = method in ("triehh", "both")
        if uses_triehh and self.stage_budget.get("triehh", 0) <= 0:
            raise ValueError(f"vocabulary_method: '{method}' needs a budget share stage_budget.triehh")
        if not uses_triehh and "triehh" in self.stage_budget:
            raise ValueError("stage_budget: 'triehh' has a share but vocabulary_method is 'dpsu'")
        if method == "triehh" and self.dpne.max_n == 1 and "dpne" in self.stage_budget:
            raise ValueError(
                "stage_budget: with vocabulary_method 'triehh' and max_n 1 no dpne level draws noise, so "
                "the dpne share would buy nothing; drop it or raise max_n"
            )
        return self

    @model_validator(mode="after")
    def _lifetime(self) -> RunConfig:
        if self.lifetime_epsilon is not None and self.lifetime_epsilon < self.epsilon:
            raise ValueError(
                f"lifetime_epsilon ({self.lifetime_epsilon}) is below this run's epsilon ({self.epsilon})"
            )
        if self.lifetime_delta is not None and self.lifetime_delta < self.delta:
            raise ValueError(
                f"lifetime_delta ({self.lifetime_delta}) is below this run's delta ({self.delta})"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_names(cls, values: Any) -> Any:
        """Accept the flat names (``bayes_clip_count``, ``max_n``, ``engine`` ...) that the CLI flags,
        Airflow Params and saved parameters use, and put each into its section."""
        if not isinstance(values, dict):
            return values
        nested: dict[str, Any] = {}
        for key, value in values.items():
            where = FLAT_NAMES.get(key)
            if where is None:
                nested[key] = value
            else:
                section, field = where
                current = nested.setdefault(section, {})
                if isinstance(current, dict):
                    current[field] = value
        return nested

    def text_extensions(self) -> tuple[str, ...]:
        """``input_extensions`` as lower-case extensions with their dot."""
        return tuple(e.strip().lower() for e in self.input_extensions.split(",") if e.strip())

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def build(cls, **values: Any) -> RunConfig:
        """Validate ``values`` by flat name (None means 'use the default'), raising
        :class:`ConfigError` with one line per problem."""
        cleaned = {k: v for k, v in values.items() if v is not None}
        try:
            return cls(**cleaned)
        except ValidationError as err:
            raise ConfigError(format_errors(err)) from None

    def with_values(self, **values: Any) -> RunConfig:
        """A validated copy with ``values`` (flat names) changed."""
        return RunConfig.build(**{**self.flat(), **values})

    def flat(self) -> dict[str, Any]:
        """Every parameter by its flat name (JSON types), in :func:`flat_fields` order."""
        dumped = self.model_dump(mode="json")
        out: dict[str, Any] = {}
        for name, section, field, _ in flat_fields():
            out[name] = dumped[field] if section is None else dumped[section][field]
        return out

    @property
    def budget(self) -> Budget:
        """The run's (epsilon, delta)."""
        return Budget(self.epsilon, self.delta)

    def nominal_share(self, stage: str) -> Budget:
        """``stage``'s fraction of the run's (epsilon, delta), as ``stage_budget`` gives it."""
        fraction = self.stage_budget.get(stage, 0.0)
        if fraction <= 0:
            raise ConfigError(f"stage_budget: stage '{stage}' has no budget (set stage_budget.{stage})")
        return self.budget * fraction

    def stage_share(self, stage: str) -> Budget:
        """The (epsilon, delta) ``stage`` calibrates its noise to (unpacks as ``epsilon, delta``):
        its nominal share with epsilon scaled by the joint calibration's factor, so that all the
        stages together compose to exactly the run's budget (:meth:`budget_plan`)."""
        self.nominal_share(stage)  # refuses a stage without a share
        calibrated = self.budget_plan().calibrated
        if stage not in calibrated:
            raise ConfigError(f"stage_budget: stage '{stage}' does not run: {self.stage_skip_reason(stage)}")
        return calibrated[stage]

    def stage_skip_reason(self, stage: str) -> str | None:
        """Why a budgeted stage will not run (None when it runs): no share, or a missing input it
        needs (the Bayesian stage's prior is the public corpus). A stage that does not run gets no
        budget: the running stages share the run's budget (:meth:`budget_plan`)."""
        if stage not in self.stage_budget:
            return f"stage_budget has no '{stage}' share"
        if stage == "bayes" and self.public is None:
            return "no public corpus (the prior of the bayes stage): set public to run it"
        return None

    def budget_plan(self) -> BudgetPlan:
        """Every running budgeted stage's calibrated budget
        (:func:`dpngram.core.accounting.joint_calibration`). Stages that will not run
        (:meth:`stage_skip_reason`) get nothing: their fractions go to the running stages in
        proportion, so no budget is reserved for work that does not run. Pure function of the
        privacy parameters; computed once per distinct set of them."""
        running = {s: f for s, f in self.stage_budget.items() if self.stage_skip_reason(s) is None}
        if running:  # the shares of stages that do not run go to the others, proportionally
            scale = sum(self.stage_budget.values()) / sum(running.values())
            running = {s: min(1.0, f * scale) for s, f in running.items()}
        return _budget_plan(
            tuple(sorted(running.items())),
            self.epsilon,
            self.delta,
            self.dpne.threshold_delta,
            self.dpne.vocabulary_method,
            self.budget_calibration,
        )

    def check_against_users(self, n_users: int) -> None:
        """Refuse parameters that void the guarantee for a dataset of ``n_users`` users."""
        if n_users > 0 and self.delta >= 1.0 / n_users:
            raise ConfigError(
                f"delta: must be < 1/number of users for a meaningful guarantee (got {self.delta:g}; "
                f"the input has too few users for it — lower delta)"
            )

    def to_json(self) -> str:
        """The parameters by flat name, as the report's ``parameters`` part records them."""
        return json.dumps(self.flat(), sort_keys=True)

    @classmethod
    def param_schema(cls) -> dict[str, dict[str, Any]]:
        """JSON-schema fragments per flat name (type, bounds, enum, title, description, default,
        section), in the form Airflow ``Param(default, **schema)`` takes."""
        out: dict[str, dict[str, Any]] = {}
        schemas: dict[str | None, dict[str, Any]] = {None: cls.model_json_schema()}
        for name, section, field, info in flat_fields():
            if section not in schemas:
                schemas[section] = SECTIONS[section].model_json_schema()
            frag = _schema_fragment(schemas[section]["properties"][field], name)
            if not info.is_required():
                frag["default"] = info.get_default(call_default_factory=True)
            if section is not None:
                frag["section"] = SECTIONS[section].TITLE
            out[name] = frag
        return out


def stage_privacy_shapes(threshold_delta: float, vocabulary_method: str) -> dict[str, StagePrivacy]:
    """How each budgeted stage turns its (epsilon, delta) into privacy events: what the stages' own
    calibrations do (tests/test_budget_plan.py checks each against them)."""
    from dpngram.core.accounting import GAUSSIAN_DELTA_MARGIN, TRIEHH_DELTA_SHARE_USED, StagePrivacy

    dpsu_vocabulary = vocabulary_method != "triehh"
    gaussian = StagePrivacy("gaussian", gaussian_delta=1.0 - GAUSSIAN_DELTA_MARGIN)
    return {
        # Thm. 2.1: the levels compose to one Gaussian; with a TrieHH vocabulary no DPSU level runs,
        # so no threshold delta is reserved and all of the dpne delta goes to the Gaussian.
        "dpne": StagePrivacy(
            "gaussian",
            gaussian_delta=1.0 - threshold_delta if dpsu_vocabulary else 1.0,
            threshold_delta=threshold_delta if dpsu_vocabulary else 0.0,
        ),
        "lm_counts": gaussian,
        "bayes": gaussian,
        "synth": StagePrivacy("laplace"),
        "triehh": StagePrivacy("approx", approx_delta=TRIEHH_DELTA_SHARE_USED),
    }


@functools.lru_cache(maxsize=64)
def _budget_plan(
    fractions: tuple[tuple[str, float], ...],
    epsilon: float,
    delta: float,
    threshold_delta: float,
    vocabulary_method: str,
    calibration: str,
) -> BudgetPlan:
    from dpngram.core.accounting import joint_calibration

    shapes = stage_privacy_shapes(threshold_delta, vocabulary_method)
    try:
        return joint_calibration(
            shapes, dict(fractions), Budget(epsilon, delta), joint=calibration == "joint"
        )
    except BudgetError as err:
        raise ConfigError(f"stage_budget: {err}") from None


#: The sections of :class:`RunConfig`, by attribute name.
SECTIONS: dict[str, type[_Section]] = {
    "dpne": DpneConfig,
    "bayes": BayesConfig,
    "lm": LmConfig,
    "synth": SynthConfig,
    "triehh": TriehhConfig,
    "engine": EngineConfig,
}

#: flat name -> (section, field) for every sectioned parameter.
FLAT_NAMES: dict[str, tuple[str, str]] = {
    flat: (section, field) for section, model in SECTIONS.items() for field, flat in model.FLAGS.items()
}


def flat_fields() -> list[tuple[str, str | None, str, Any]]:
    """(flat name, section or None, field, pydantic FieldInfo) for every parameter: the top-level
    fields first, then each section's, in declaration order."""
    out: list[tuple[str, str | None, str, Any]] = [
        (name, None, name, info) for name, info in RunConfig.model_fields.items() if name not in SECTIONS
    ]
    for section, model in SECTIONS.items():
        out += [(model.FLAGS[field], section, field, info) for field, info in model.model_fields.items()]
    return out


def _schema_fragment(prop: dict[str, Any], name: str) -> dict[str, Any]:
    frag: dict[str, Any] = {}
    if "anyOf" in prop:  # Optional[...]: allow null
        frag["type"] = [p.get("type") for p in prop["anyOf"] if p.get("type")]
        for p in prop["anyOf"]:
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if key in p:
                    frag[key] = p[key]
    else:
        for key in ("type", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"):
            if key in prop:
                frag[key] = prop[key]
        for key in ("additionalProperties", "propertyNames"):
            if key in prop:
                frag[key] = prop[key]
    frag["title"] = prop.get("title", name)
    if "description" in prop:
        frag["description"] = prop["description"]
    return frag


def format_errors(err: ValidationError) -> str:
    """One line per problem: ``name: rule (got value)``, with the flat name users type."""
    lines = []
    for problem in err.errors():
        loc = [str(p) for p in problem["loc"]]
        if len(loc) >= 2 and loc[0] in SECTIONS and loc[1] in SECTIONS[loc[0]].FLAGS:
            loc = [SECTIONS[loc[0]].FLAGS[loc[1]], *loc[2:]]
        where = ".".join(loc) or "config"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown parameter"
        elif problem["type"] == "missing":
            message = "is required"
        got = problem.get("input")
        shown = "" if problem["type"] in ("missing",) or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{where}: {message}{shown}")
    return "; ".join(lines)
