"""The sections of the run configuration: one pydantic model per stage's parameters.

Each section has a ``TITLE`` (the trigger form's section and the ``--help`` group) and ``FLAGS``
(field -> flat name: the CLI flag and the Airflow Param). :class:`dpngram.config.run.RunConfig`
holds one of each (``SECTIONS``).

Why one module (over 600 lines): it is six declarative models whose fields are mostly
descriptions (the trigger form's and ``--help``'s text), with no logic beyond per-field
validators; split up, a reader would have no single place to look a parameter up.

Owns: :class:`Section`, the six section models (``DpneConfig``, ``LmConfig``, ``BayesConfig``,
``SynthConfig``, ``TriehhConfig``, ``EngineConfig``), ``SECTIONS``, ``MIN_MEMORY_LIMIT``.
Imports: pydantic.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


#: Choices retired on 2026-11-27, refused with their reason: flat name -> {value: why}.
RETIRED_CHOICES: dict[str, dict[str, str]] = {
    "lm_route": {
        route: f"route '{route}' was retired (2026-11-27): it was no better than the public-only model "
        "(docs/lm.md, 'Retired routes'); use 'auto' or 'mixture' with an lm_counts share, or 'off'"
        for route in ("arpa", "lmplz")
    }
}


#: Flat parameters retired with those routes -> why (a saved configuration or an Airflow trigger
#: that still passes one is told this instead of "unknown parameter").
RETIRED_PARAMS: dict[str, str] = {
    name: "retired with lm_route 'arpa'/'lmplz' (2026-11-27, docs/lm.md, 'Retired routes'): remove it"
    for name in ("lm_theta_tokens", "lm_public_weight", "lm_kgram_count", "lm_sample_sentences", "lm_memory")
}


class Section(BaseModel):
    """A group of parameters. ``FLAGS`` maps each field to its flat name: the CLI flag (with '-')
    and the Airflow Param, unchanged from the flat configuration users already write."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    TITLE: ClassVar[str] = ""
    FLAGS: ClassVar[dict[str, str]] = {}


class DpneConfig(Section):
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
        "sips_admission": "dpsu_sips_admission",
        "sips_admission_floor": "dpsu_sips_admission_floor",
        "sips_admission_ratio": "dpsu_sips_admission_ratio",
        "sips_admission_max_n": "dpsu_sips_admission_max_n",
        "public_vocabulary": "dpne_public_vocabulary",
        "threshold_delta": "dpne_threshold_delta",
        "new_words": "dpsu_new_words",
        "new_words_share": "dpsu_new_words_share",
        "new_words_funding": "dpsu_new_words_funding",
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
        "1 equals 'weighted'. Default 2, chosen on public text.",
    )

    sips_ratio: float = Field(
        16.0,
        gt=0,
        le=1000,
        title="DP-SIPS budget ratio",
        description="dp-sips only: f_r is proportional to ratio^(r-1) (above 1: more budget on the later "
        "rounds; default 16 with 2 rounds: 1/17 of the budget clears the most frequent items first, "
        "chosen on public text). Releases with admission use dpsu_sips_admission_ratio instead.",
    )

    sips_admission: bool = Field(
        True,
        title="DP-SIPS admission",
        description="dp-sips with 2+ rounds only: rounds 2..R keep only the items whose round-1 noisy weight "
        "reached the admission floor (the rest are judged hopeless and their users' weight goes to the "
        "others), and every user keeps its round-1 subset (one salt). Same epsilon and delta: the admission "
        "is a function of round 1's Gaussian output. Off: plain DP-SIPS. Limits: on a nearly saturated "
        "vocabulary it can release a few % fewer words (the bigrams gain more); the admitted keys (per "
        "item) are held on the driver, about 16% of round 1's support at floor 1.",
    )

    sips_admission_floor: float = Field(
        1.0,
        ge=-10,
        le=10,
        title="DP-SIPS admission floor z",
        description="dp-sips admission only: an item goes on to round 2 if its round-1 noisy weight is at "
        "least z * sigma_1 (default 1, chosen on public text; higher: fewer items, each with more "
        "weight).",
    )

    sips_admission_ratio: float = Field(
        3.0,
        gt=0,
        le=1000,
        title="DP-SIPS admission budget ratio",
        description="dp-sips admission only: the budget ratio of the releases with admission (default 3: a "
        "quarter of the budget in round 1, which must measure well enough to tell close items from "
        "hopeless ones; chosen on public text).",
    )

    sips_admission_max_n: int = Field(
        2,
        ge=1,
        le=12,
        title="DP-SIPS admission: longest level",
        description="dp-sips admission only: the vocabulary (k = 1) and the levels k <= this use admission; "
        "longer levels run plain DP-SIPS (their candidates are already pruned by released sub-grams, so few "
        "are hopeless and a weaker round 2 costs more than admission saves; default 2, chosen on public "
        "text).",
    )

    def sips_plan(self, k: int) -> tuple[float, float | None]:
        """DP-SIPS's (budget ratio, admission floor z or None) for the release of level ``k``
        (1: the vocabulary)."""
        if self.sips_admission and k <= self.sips_admission_max_n:
            return self.sips_admission_ratio, self.sips_admission_floor
        return self.sips_ratio, None

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

    new_words: int = Field(
        10,
        ge=0,
        le=10_000,
        title="New-words round: words per user m (0: off)",
        description="When the vocabulary has a public domain (a public corpus and dpne_public_vocabulary "
        "above 0), one more DPSU round after the vocabulary's release: each user offers its m most "
        "frequent words that are neither released nor public, so words many users write but the public "
        "corpus lacks (chat and mail slang, product names) can enter the vocabulary and the language "
        "model. Same epsilon and delta: the round takes a share of the DPNE budget "
        "(dpsu_new_words_share, dpsu_new_words_funding), so the vocabulary's other words and the k-gram "
        "levels are somewhat fewer (docs/dpne.md, 'New words'; the language model per corpus: "
        "docs/lm.md, 'Benchmark'). Without a public domain the round does not run. 0: off.",
    )

    new_words_share: float = Field(
        0.25,
        gt=0,
        lt=1,
        title="New-words round: budget share",
        description="Only used when the new-words round runs: its share of the vocabulary's budget (its "
        "Gaussian noise is sigma_1 / sqrt(share), sigma_1 the vocabulary's without the round, and it "
        "takes that share of the threshold delta). A larger share tends to release more new words and "
        "fewer others (who pays: dpsu_new_words_funding); epsilon and delta stay the same.",
    )

    new_words_funding: Literal["dpne", "vocabulary"] = Field(
        "dpne",
        title="New-words round: who pays",
        description="Only used when the new-words round runs. 'dpne' (default): every DPNE level pays "
        "in proportion, the vocabulary included (each level's noise grows by the same factor, 4.9% "
        "with the defaults). 'vocabulary': the vocabulary's other rounds alone pay (their noise grows "
        "by 1 / sqrt(1 - share), 15.5% with the defaults), which keeps more k-grams and fewer words. "
        "The round itself is the same either way; so are epsilon and delta.",
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


class LmConfig(Section):
    """Language model (noisy counts, mixture and model building)."""

    TITLE: ClassVar[str] = "Language model (noisy counts, mixture and model building)"
    FLAGS: ClassVar[dict[str, str]] = {
        "route": "lm_route",
        "public_vocab_size": "lm_public_vocab_size",
        "public_prune": "lm_public_prune",
        "count_domain": "lm_count_domain",
        "count_clip": "lm_count_clip",
        "count_power": "lm_count_power",
        "count_threshold": "lm_count_threshold",
        "count_discount": "lm_count_discount",
        "mix_weight": "lm_mix_weight",
        "unigram_adaptation": "lm_unigram_adaptation",
        "holdout": "lm_holdout",
        "verdict_holdout": "lm_verdict_holdout",
        "order": "lm_order",
        "eval_text": "lm_eval_text",
    }

    route: Literal["auto", "mixture", "off"] = Field(
        "auto",
        title="LM: route",
        description="'mixture': the public model mixed with the model of the noisy counts (stage "
        "lm_counts; an error without an lm_counts share); 'auto': 'mixture' when the run has an "
        "lm_counts share, else no model; 'off': no model. The routes 'arpa' and 'lmplz' were retired "
        "(no better than the public-only model; docs/lm.md).",
    )

    public_vocab_size: int = Field(
        100_000,
        ge=0,
        le=10_000_000,
        title="LM: public words in the model vocabulary",
        description="The model vocabulary is the DP vocabulary plus this many of the public corpus's most "
        "frequent words (0: DP vocabulary only). Public data: no privacy cost.",
    )

    public_prune: int = Field(
        0,
        ge=0,
        le=1_000_000,
        title="LM: prune the public model (opt-in)",
        description="0 (default): the public model keeps every top-order n-gram (trigram). K > 0: those "
        "seen at most K times in the public corpus are left out and their mass goes to the backoff, as "
        "KenLM's lmplz --prune 0 0 K. With K = 1 Brown's model keeps 572k of its 1.33M n-grams and the LM "
        "stages take about 1 s less a run; the model was as good on real chat and mail text, and 1.5-3.8% "
        "worse in perplexity on SOTU and a generated corpus (docs/lm.md, 'A pruned public model'): a trade "
        "for small private corpora. Public data: no privacy cost.",
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

    count_power: float = Field(
        0.5,
        ge=0,
        le=1,
        title="LM counts: power of a user's counts",
        description="A user's count c of an n-gram enters their vector as c^p before the l2 bound: 1 counts "
        "every occurrence, 0.5 (square roots) keeps a user's repeats from drowning other users' words, "
        "0 counts presence only. Any p keeps the sensitivity C.",
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

    order: int = Field(
        3,
        ge=1,
        le=6,
        title="LM: order",
        description="N-gram order of the model: at most 3 while stage lm_counts has a budget share (its "
        "noisy counts go up to trigrams), which every model is built from.",
    )

    eval_text: str | None = Field(
        None,
        title="LM: evaluation text",
        description="Plain-text file the model card also compares the model and the public-only model "
        "on (beside the held-out public sentences). Treated as non-private: the metrics on it are "
        "published (report, model card), so never pass private users' text.",
    )

    @field_validator("route", mode="before")
    @classmethod
    def _lm_route(cls, value: Any) -> Any:
        if value in RETIRED_CHOICES["lm_route"]:
            raise ValueError(RETIRED_CHOICES["lm_route"][value])
        return value

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


class BayesConfig(Section):
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


class SynthConfig(Section):
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


class TriehhConfig(Section):
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


class EngineConfig(Section):
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
        title="Threads",
        description=(
            "Worker threads of DuckDB, and of ingest's tokenizer (at most 4); default: one per CPU core."
        ),
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


#: The sections of :class:`RunConfig`, by attribute name.
SECTIONS: dict[str, type[Section]] = {
    "dpne": DpneConfig,
    "bayes": BayesConfig,
    "lm": LmConfig,
    "synth": SynthConfig,
    "triehh": TriehhConfig,
    "engine": EngineConfig,
}
