"""``model/MODEL_CARD.md``: what the language model is, its privacy guarantee in plain words, how
it was built, its size and metrics, and how to load it. Holds only public facts (parameters,
released-table sizes, the composed (ε, δ), metrics on public or user-supplied text).

Owns: rendering the model card (:func:`render_model_card`).
Imports: dpngram.config, dpngram.core.
"""

from __future__ import annotations

import math
from typing import Any

from dpngram.config import RunConfig
from dpngram.config.stages import BUDGETED_STAGES
from dpngram.core.accounting import privacy_summary

#: What the card calls each budgeted stage's release (declared with the stage).
_STAGE_NAMES = {stage.name: stage.card for stage in BUDGETED_STAGES}


def render_model_card(
    config: RunConfig, run_id: str, parts: dict[str, dict[str, Any]], part: dict[str, Any]
) -> str:
    """The card of run ``run_id`` from its report ``parts`` (every stage's public fragment) and the
    ``lm`` stage's own ``part``."""
    lines = [
        f"# Language model card — run `{run_id}` (dataset `{config.dataset}`)",
        "",
        *verdict_lines(part.get("private_domain")),
    ]
    lines += _privacy_lines(config, parts)
    lines += _build_lines(config, part)
    lines += _metrics_lines(part)
    lines += _LOADING_LINES
    return "\n".join(lines)


def verdict_lines(verdict: dict[str, Any] | None) -> list[str]:
    """The card's opening paragraph: :func:`verdict_line` and, when it cannot tell,
    :func:`users_needed_line`; then, when the verdict has estimates, how to read its perplexities
    (they weigh users, not tokens, so they differ from the perplexity over all tokens that
    ``dpngram evaluate`` or a benchmark reports on the same kind of text)."""
    needed = users_needed_line(verdict)
    lines = [verdict_line(verdict), *([needed] if needed else []), ""]
    if verdict and verdict.get("released_perplexity") is not None:
        lines += [
            "_How to read it: each perplexity is exp of the mean, over held-out users, of the user's "
            f"per-token log-loss (clipped at {verdict['loss_clip_nats']:g} nats): every user counts "
            "once however long their text, so it differs from a perplexity over all tokens. Compare "
            "the two models' numbers with each other (docs/lm_privacy.md, section 5a)._",
            "",
        ]
    return lines


def verdict_line(verdict: dict[str, Any] | None) -> str:
    """The card's opening line: the private-domain verdict (a DP estimate on held-out users of this
    dataset, released by stage lm_counts; docs/lm_privacy.md), or why there is none. It shows the
    interval the verdict is decided on: that of the perplexity ratio exp(d) of the paired per-user
    difference d, which excludes 1 exactly when the verdict can tell. The two perplexities'
    own intervals are wider (they are not paired) and stay in report.json only: beside the verdict
    they overlap even when it can tell, which reads as a contradiction."""
    if not verdict:
        return (
            "**Verdict:** none: this run released no private-domain verdict (it needs stage lm_counts "
            "and lm_verdict_holdout > 0); compare the models on your own held-out text."
        )
    level = f"{100 * verdict['interval']['level']:.0f}%"
    if verdict.get("released_perplexity") is None:
        return (
            f"**Verdict:** the data cannot tell: too few held-out users for a DP estimate at "
            f"ε = {verdict['epsilon']:.3g}."
        )
    head = (
        f"**Verdict:** on held-out users of this dataset (a DP estimate, ε = {verdict['epsilon']:.3g}): "
        f"perplexity {verdict['released_perplexity']:.0f} against "
        f"{verdict['public_only_perplexity']:.0f} for the public-only model"
    )
    ratio_interval = verdict["interval"].get("log_ratio")
    if verdict.get("log_ratio") is not None and ratio_interval:
        ratio_lo, ratio_hi = (math.exp(v) for v in ratio_interval)
        head += f", a ratio of {math.exp(verdict['log_ratio']):.2f} ({ratio_lo:.2f}–{ratio_hi:.2f}, {level})"
    else:  # a report from before 2026-12-06 that a consumer reads: no paired estimate recorded
        rel_lo, rel_hi = verdict["interval"]["released_perplexity"]
        head += f" (released: {rel_lo:.0f}–{rel_hi:.0f}, {level})"
    tail = {
        "released model better": ": prefer this model for text like your users'.",
        "public-only model better": ": the public-only model fits your users' text better; prefer it.",
    }.get(verdict["verdict"], ": the data cannot tell which model is better.")
    return head + tail


#: Beyond this multiple of the dataset's users the estimated difference is too close to zero (under
#: 1% of the interval's near half-width) for the multiple to mean anything: the card says so.
MAX_USERS_MULTIPLE = 100.0


def users_multiple(verdict: dict[str, Any] | None) -> float | None:
    """How many times this dataset's users the verdict would need before its interval of the log
    ratio d excluded 0, if the difference stayed the size this run estimates (d̂): w/|d̂|, w the
    interval's half-width on the side of 0 (docs/lm_privacy.md, section 5a, "Users needed"). A
    function of released DP values only (post-processing). None when the verdict can tell, has no
    estimate, or d̂ is about 0 (the multiple would exceed :data:`MAX_USERS_MULTIPLE`)."""
    if not verdict or verdict.get("verdict") != "cannot tell" or verdict.get("log_ratio") is None:
        return None
    estimate = float(verdict["log_ratio"])
    low, high = verdict["interval"]["log_ratio"]
    near = high - estimate if estimate < 0 else estimate - low
    if near >= MAX_USERS_MULTIPLE * abs(estimate):
        return None
    return max(near / abs(estimate), 1.0)


def users_needed_line(verdict: dict[str, Any] | None) -> str | None:
    """The sentence under a verdict that cannot tell: about how many times this dataset's users it
    would need to tell (:func:`users_multiple`), or that this run cannot estimate it. None when the
    verdict can tell or has no estimate (its line already says why)."""
    if not verdict or verdict.get("verdict") != "cannot tell":
        return None
    if verdict.get("released_perplexity") is None or verdict.get("log_ratio") is None:
        return None
    multiple = users_multiple(verdict)
    if multiple is None:
        return (
            "How many users it would need to tell cannot be estimated from this run: its estimate of "
            "the difference between the two models is about zero (docs/lm_privacy.md, section 5a)."
        )
    return (
        f"The verdict would need about {_about(multiple)}× as many users as this dataset to tell, if the "
        "difference between the two models stays the size estimated here (docs/lm_privacy.md, "
        "section 5a)."
    )


def _about(multiple: float) -> str:
    """A multiple rounded up to what the estimate supports: 1.3 below 2, else a whole number."""
    if multiple < 2:
        return f"{math.ceil(multiple * 10 - 1e-9) / 10:.1f}"
    return f"{math.ceil(multiple - 1e-9)}"


def _privacy_lines(config: RunConfig, parts: dict[str, dict[str, Any]]) -> list[str]:
    """Section "Privacy guarantee": the run's composed guarantee in plain words, and what the ledger
    was charged per stage."""
    privacy = privacy_summary(parts, config.delta, config.epsilon)
    total = privacy.get("total", {})
    eps, delta = float(total.get("epsilon", 0.0)), float(total.get("delta", 0.0))
    not_dp = any(p.get("differentially_private") is False for p in parts.values())
    lines = [
        "## Privacy guarantee",
        "",
        _guarantee_text(not_dp, eps, delta),
    ]
    lines += [
        "",
        f"Total composed with `{total.get('method', 'n/a')}` over every stage of the run "
        f"(run budget ε = {config.epsilon:g}, δ = {config.delta:g}).",
        "",
        "Per stage, what the privacy ledger was charged: each stage is charged what it added to the",
        "run's composed ε, so the rows add up to the composed total.",
        "",
        "| stage | what it released | ε charged | δ charged |",
        "|---|---|---|---|",
    ]
    for name, stage in privacy.get("stages", {}).items():
        label = _STAGE_NAMES.get(name.split(".")[0], name)
        eps = float(stage.get("charged_epsilon", stage["epsilon"]))
        delta = float(stage.get("charged_delta", stage.get("delta")) or 0)
        lines.append(f"| {name} | {label} | {eps:.4g} | {delta:.3g} |")
    lines.append("| lm | this model | 0 (post-processing) | 0 |")
    return lines


def _guarantee_text(not_dp: bool, eps: float, delta: float) -> str:
    """The guarantee in plain words (or the warning that the run is not differentially private)."""
    if not_dp:
        return (
            "**NO differential-privacy guarantee**: a stage of this run used a comparison setting "
            "that is not differentially private (see report.json). Do not share this model."
        )
    return (
        f"This model satisfies **user-level ({eps:.4g}, {delta:.3g})-differential privacy**. The unit of "
        "privacy is the user: whether or not any one person's entire text was in the training data "
        f"changes the probability of obtaining this model by at most a factor e^{eps:.4g} "
        f"(about {_factor(eps)}), except with probability at most {delta:.3g}. The model was built only "
        "from the run's released differentially private outputs (post-processing, no extra privacy "
        "cost) and, optionally, a public corpus; it never read the private text."
    )


def _build_lines(config: RunConfig, part: dict[str, Any]) -> list[str]:
    """Section "How it was built": route, smoothing, inputs, vocabulary, parameters, n-gram counts."""
    flat = config.flat()
    return [
        "",
        "## How it was built",
        "",
        f"- route: **{part['route']}** ({part['route_selection']})",
        f"- smoothing: {part['smoothing']}",
        f"- inputs: {', '.join(f'{k} {v}' for k, v in part['sources'].items())}",
        _vocabulary_line(part),
        f"- tokenizer: the pipeline's (NFKC, lower-case = {config.lowercase}; docs/tokenizer.md)",
        "- parameters: " + ", ".join(f"{k} = {flat[k]}" for k in _PARAMETERS),
        "",
        "| order | n-grams |",
        "|---|---|",
        *(f"| {n} | {c} |" for n, c in part["counts"].items()),
    ]


def _metrics_lines(part: dict[str, Any]) -> list[str]:
    """Section "Metrics": the comparison with the public-only model, or why there is none."""
    lines = [
        "",
        "## Metrics",
        "",
    ]
    comparison = part.get("comparison")
    if comparison:
        lines += _comparison_lines(comparison)
    else:
        lines.append("No evaluation text was given (set `public` or `lm_eval_text`).")
    return lines


# Section "How to load it" (the same for every model).
_LOADING_LINES = [
    "",
    "## How to load it",
    "",
    "```python",
    "import kenlm",
    "model = kenlm.Model('model/model.binary')  # or model/model.arpa",
    "model.score('a tokenised sentence', bos=True, eos=True)  # log10 probability",
    "```",
    "",
    "Command line: `dpngram evaluate --model model/model.binary --text FILE [--json]`. "
    "Tokenise input with the pipeline's tokenizer (`dpngram.text.tokenizer.tokenize_texts`).",
    "",
]


#: The parameters the card lists (the ones the model's build and the count release depend on).
_PARAMETERS = (
    "max_n",
    "max_contribution",
    "lm_public_vocab_size",
    "lm_public_prune",
    "lm_count_domain",
    "lm_count_clip",
    "lm_count_power",
    "lm_count_threshold",
    "lm_count_discount",
    "lm_mix_weight",
    "lm_holdout",
)


def _vocabulary_line(part: dict[str, Any]) -> str:
    vocab = part["vocabulary"]
    return (
        f"- order: {part['order']}; vocabulary: {vocab['model']} words = {vocab['rule']} "
        f"({vocab['dp']} DP words), plus `<s>`, `</s>`, `<unk>`; only words outside it are `<unk>`"
    )


def _fmt(value: Any, pattern: str) -> str:
    return "n/a" if value is None else format(value, pattern)


def _comparison_lines(comparison: dict[str, Any]) -> list[str]:
    lines = [
        "Compared with the model a team could build from the public corpus alone (the same Kneser-Ney",
        "recipe, no private data). Never measured on the private data.",
        "",
        "- open-vocabulary perplexity: an unknown word costs p(`<unk>`) times a fixed spelling model",
        "  shared by every model (docs/lm_evaluation.md), so a small vocabulary cannot look good;",
        "- top-1 / top-3: how often the next word is the model's first / among its first three",
        "  guesses (an unknown word is a miss), the keyboard use case.",
        "",
    ]
    for text, row in comparison.items():
        lines += [
            f"**{text}**",
            "",
            "| model | open-vocab perplexity | top-1 | top-3 | OOV rate | perplexity (OOV as `<unk>`) |",
            "|---|---|---|---|---|---|",
        ]
        for name, m in row.items():
            lines.append(
                f"| {name} | {_fmt(m.get('open_vocab_perplexity'), '.2f')} "
                f"| {_fmt(m.get('top1_accuracy'), '.3f')} "
                f"| {_fmt(m.get('top3_accuracy'), '.3f')} | {_fmt(m.get('oov_rate'), '.4f')} "
                f"| {_fmt(m.get('perplexity'), '.2f')} |"
            )
        lines.append("")
    return lines


def _factor(eps: float) -> str:
    return f"{math.exp(eps):.3g}×" if eps < 50 else "a very large factor"
