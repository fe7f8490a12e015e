"""The budgeted stages, each declared once: name, label, default share, privacy shape, reads, writes.

A budgeted stage is one that spends the run's privacy budget (a share of ``stage_budget``). Its
:class:`BudgetedStage` here is the single place its name is written; everything that lists the
stages is derived from :data:`BUDGETED_STAGES`: ``STAGES``, the default split
``DEFAULT_STAGE_BUDGET`` and ``PUBLIC_READERS`` (:mod:`dpngram.config.budget_plan`), the privacy
shapes the joint calibration composes (:func:`BudgetedStage.privacy_shape`), the Airflow steps and
task labels (:mod:`dpngram.orchestration.plan`), the model card's source names and the audit's
mechanisms. tests/test_architecture.py fails on a second declaration (a literal collection of stage
names, or a constant holding one, anywhere else in src/).

Adding a mechanism: one mechanism module (calibration, release, its privacy events), one stage
module (read, call, write, charge), one declaration here, its SQL and its tests
(docs/architecture.md, "Adding a mechanism").

The privacy shape says how the stage's mechanism turns its (ε, δ) into privacy events: the kinds
are those of :class:`dpngram.core.accounting.StagePrivacy`; tests/test_budget_plan.py checks each
shape against the events its mechanism actually returns.

Owns: :class:`BudgetedStage`, :data:`BUDGETED_STAGES` and the stage constants (:data:`DPNE`,
:data:`LM_COUNTS`, :data:`BAYES`, :data:`SYNTH`, :data:`TRIEHH`).
Imports: dpngram.core (the accountant lazily: numpy and scipy only when a shape is asked for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # numpy/scipy: not when the Airflow DAG file is parsed
    from dpngram.core.accounting import StagePrivacy

#: How a stage's (ε, δ) becomes privacy events (see :meth:`BudgetedStage.privacy_shape`).
ShapeKind = Literal["dpne", "gaussian", "laplace", "triehh"]


@dataclass(frozen=True)
class BudgetedStage:
    """One budgeted stage.

    ``name``: the ``stage_budget`` key, the ledger's and the report's stage name, and (except for
    ``dpne``, whose steps are the vocabulary and the levels) the Airflow step and task id.
    ``label``: what the Airflow UI shows for it. ``default_share``: its fraction of the run's
    budget in the default split (0: not in it). ``shape``: its privacy shape's kind.
    ``reads_public``: whether it reads the public corpus; ``needs_public``: whether it cannot run
    without one. ``doc``: one line for the step. ``reads``/``writes``: the artifacts of its step
    (the DAG's dependencies are derived from them; empty for ``dpne``, declared per level in the
    plan). ``card``: what the model card calls its release. ``derivation``: where its privacy
    map is derived."""

    name: str
    label: str
    default_share: float
    shape: ShapeKind
    doc: str
    card: str
    derivation: str
    reads_public: bool = False
    needs_public: bool = False
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def privacy_shape(self, threshold_delta: float, vocabulary_method: str) -> StagePrivacy:
        """How this stage turns its (ε, δ) into privacy events, for the joint calibration."""
        from dpngram.core.accounting import GAUSSIAN_DELTA_MARGIN, TRIEHH_DELTA_SHARE_USED, StagePrivacy

        if self.shape == "dpne":
            # Thm. 2.1: the levels compose to one Gaussian; with a TrieHH vocabulary no DPSU level
            # runs, so no threshold delta is reserved and all of the dpne delta goes to the Gaussian.
            dpsu_vocabulary = vocabulary_method != "triehh"
            return StagePrivacy(
                "gaussian",
                gaussian_delta=1.0 - threshold_delta if dpsu_vocabulary else 1.0,
                threshold_delta=threshold_delta if dpsu_vocabulary else 0.0,
            )
        if self.shape == "gaussian":
            return StagePrivacy("gaussian", gaussian_delta=1.0 - GAUSSIAN_DELTA_MARGIN)
        if self.shape == "laplace":
            return StagePrivacy("laplace")
        return StagePrivacy("approx", approx_delta=TRIEHH_DELTA_SHARE_USED)


DPNE = BudgetedStage(
    "dpne",
    label="N-grams (DPNE)",
    default_share=0.4,
    shape="dpne",
    doc="vocabulary S_1 (DPSU) and the k-gram levels (DPNE)",
    card="DPSU vocabulary + DPNE k-gram sets (Kim et al.)",
    derivation="docs/dpne.md, docs/accounting.md",
)
LM_COUNTS = BudgetedStage(
    "lm_counts",
    label="LM counts",
    default_share=0.4,
    shape="gaussian",
    doc="noisy n-gram counts and the mixture weight",
    card="noisy n-gram counts + the mixture weight (this model's private evidence)",
    derivation="docs/lm_privacy.md",
    reads_public=True,
    # the count domain: the DP vocabulary and k-grams, and the public corpus
    reads=("tokens", "vocabulary", "kgrams"),
    writes=("lm_counts",),
)
BAYES = BudgetedStage(
    "bayes",
    label="Bayesian trigram distribution",
    default_share=0.1,
    shape="gaussian",
    doc="trigram distribution",
    card="Bayesian trigram distribution (Ramadan et al.)",
    derivation="docs/bayes_sensitivity.md",
    reads_public=True,
    needs_public=True,
    # the trigram space V3: public trigrams and the released ones
    reads=("tokens", "vocabulary", "kgrams"),
    writes=("trigram_dist",),
)
SYNTH = BudgetedStage(
    "synth",
    label="Synthetic text",
    default_share=0.1,
    shape="laplace",
    doc="synthetic text",
    card="synthetic sequences (Chen et al.)",
    derivation="docs/synth.md",
    # the exploration tree over the DP vocabulary only
    reads=("tokens", "vocabulary"),
    writes=("ngram_counts_noisy", "synthetic_sequences"),
)
TRIEHH = BudgetedStage(
    "triehh",
    label="Word discovery (LDP TrieHH)",
    default_share=0.0,
    shape="triehh",
    doc="LDP word discovery",
    card="words discovered by LDP TrieHH (Sun et al.)",
    derivation="docs/triehh.md",
    reads=("tokens",),
    writes=("oov_words",),
)

#: Every budgeted stage, in run order.
BUDGETED_STAGES: tuple[BudgetedStage, ...] = (DPNE, LM_COUNTS, BAYES, SYNTH, TRIEHH)
STAGE_BY_NAME: dict[str, BudgetedStage] = {stage.name: stage for stage in BUDGETED_STAGES}
