"""``model/MODEL_CARD.md``: what the language model is, its privacy guarantee in plain words, how
it was built, its size and metrics, and how to load it. Holds only public facts (parameters,
released-table sizes, the composed (ε, δ), metrics on public or user-supplied text)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_model_card", "write_model_card"]

_STAGE_NAMES = {
    "dpne": "DPSU vocabulary + DPNE k-gram sets (Kim et al.)",
    "bayes": "Bayesian trigram distribution (Ramadan et al.)",
    "synth": "synthetic sequences (Chen et al.)",
}


def _privacy(ctx: Any) -> dict[str, Any]:
    from pipeline.report import privacy_summary
    from pipeline.run import read_parts

    return privacy_summary(read_parts(ctx), ctx.config.delta, ctx.config.epsilon)


def render_model_card(ctx: Any, part: dict[str, Any]) -> str:
    config = ctx.config
    privacy = _privacy(ctx)
    total = privacy.get("total", {})
    eps, delta = float(total.get("epsilon", 0.0)), float(total.get("delta", 0.0))
    not_dp = any(p.get("differentially_private") is False for p in _parts(ctx).values())
    lines = [
        f"# Language model card — run `{ctx.run_id}` (dataset `{config.dataset}`)",
        "",
        "## Privacy guarantee",
        "",
    ]
    if not_dp:
        lines.append(
            "**NO differential-privacy guarantee**: a stage of this run used a comparison setting "
            "that is not differentially private (see report.json). Do not share this model."
        )
    else:
        lines.append(
            f"This model satisfies **user-level ({eps:.4g}, {delta:.3g})-differential privacy**. The unit of "
            "privacy is the user: whether or not any one person's entire text was in the training data "
            f"changes the probability of obtaining this model by at most a factor e^{eps:.4g} "
            f"(about {_factor(eps)}), except with probability at most {delta:.3g}. The model was built only "
            "from the run's released differentially private outputs (post-processing, no extra privacy "
            "cost) and, optionally, a public corpus; it never read the private text."
        )
    lines += [
        "",
        f"Total composed with `{total.get('method', 'n/a')}` over every stage of the run "
        f"(run budget ε = {config.epsilon:g}, δ = {config.delta:g}).",
        "",
        "Per stage, what the privacy ledger was charged: the levels of one stage are charged the",
        "increment of their exact composition, so the rows add up to at least the composed total.",
        "",
        "| stage | what it released | ε charged | δ charged |",
        "|---|---|---|---|",
    ]
    for name, stage in privacy.get("stages", {}).items():
        label = _STAGE_NAMES.get(name.split(".")[0], name)
        eps = float(stage.get("charged_epsilon", stage["epsilon"]))
        delta = float(stage.get("charged_delta", stage.get("delta")) or 0)
        lines.append(f"| {name} | {label} | {eps:.4g} | {delta:.3g} |")
    lines += [
        "| lm | this model | 0 (post-processing) | 0 |",
        "",
        "## How it was built",
        "",
        f"- route: **{part['route']}** ({part['route_selection']})",
        f"- smoothing: {part['smoothing']}",
        f"- inputs: {', '.join(f'{k} {v}' for k, v in part['sources'].items())}",
        f"- order: {part['order']}; vocabulary: {part['vocabulary_size']} unigrams (DP vocabulary, markers "
        "`<s>`, `</s>`, `<unk>`); tokens outside it are scored as `<unk>`",
        f"- tokenizer: the pipeline's (NFKC, lower-case = {config.lowercase}; docs/tokenizer.md)",
        "- parameters: "
        + ", ".join(
            f"{k} = {getattr(config, k)}"
            for k in ("max_n", "max_contribution", "lm_theta_tokens", "lm_public_weight", "lm_kgram_count")
        ),
        "",
        "| order | n-grams |",
        "|---|---|",
        *(f"| {n} | {c} |" for n, c in part["counts"].items()),
        "",
        "## Metrics",
        "",
    ]
    metrics = part.get("metrics")
    if metrics:
        lines += [
            f"On {metrics['text']} text only ({metrics['sentences']} sentences, {metrics['tokens']} tokens; "
            "never on the private data)"
            + (
                ". Caution: the public corpus is also a training input of route arpa, so this is an "
                "in-sample, optimistic number; pass held-out text as lm_eval_text."
                if metrics["text"] == "public corpus"
                else ":"
            ),
            "",
            f"- perplexity (OOVs scored as `<unk>`): {metrics['perplexity']:.2f}",
            f"- perplexity without OOVs: {metrics['perplexity_without_oov']:.2f}",
            f"- OOV rate: {metrics['oov_rate']:.4f}",
        ]
    else:
        lines.append("No evaluation text was given (set `lm_eval_text` or `public`).")
    lines += [
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
        "Tokenise input with the pipeline's tokenizer (`pipeline.ingest.tokenize_texts`).",
        "",
    ]
    return "\n".join(lines)


def _factor(eps: float) -> str:
    import math

    return f"{math.exp(eps):.3g}×" if eps < 50 else "a very large factor"


def _parts(ctx: Any) -> dict[str, dict[str, Any]]:
    from pipeline.run import read_parts

    return read_parts(ctx)


def write_model_card(ctx: Any, part: dict[str, Any]) -> str:
    from lm.build import MODEL_CARD

    text = render_model_card(ctx, part)
    with ctx.release.writing(MODEL_CARD) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return MODEL_CARD
