"""Airflow DAG ``dpngram_consume_lm``: the pattern a downstream team copies to use dpngram's
language model.

Scheduled on the asset ``dpngram://release/language-model`` (emitted by ``dpngram_release``'s
``publish_lm`` task whenever a release includes a KenLM model), it reads the triggering asset
event's ``extra`` (run_id, epsilon, delta, paths, ...: see
:func:`pipeline.run.release_asset_metadata`), loads ``paths.binary`` with ``kenlm`` and records the
model's perplexity on a public text:

* the task's return value (XCom): run_id, model path, text path, perplexity, OOV rate;
* ``DPNGRAM_CONSUMER_OUT/<release run_id>.json`` (default
  ``<DPNGRAM_OUT>/../consumer-output/dpngram_consume_lm``): the same, as a small JSON file.

The model is differentially private (built only from DP releases) and the text is public, so
the score is safe to log. A manual trigger without an asset event scores ``OUT/latest``'s model.
Param ``public_text`` (default ``DPNGRAM_CONSUMER_TEXT`` or the demo's sample public corpus) is
the text to score.

A team in another repository copies this file and declares the asset by its URI:
``Asset(name="dpngram_language_model", uri="dpngram://release/language-model")``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, task

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = Path(os.environ.get("DPNGRAM_DEMO_DIR", str(REPO / ".dpngram"))).resolve()
OUT_DIR = Path(os.environ.get("DPNGRAM_OUT", str(REPO / "demo-output"))).resolve()
CONSUMER_OUT = Path(
    os.environ.get("DPNGRAM_CONSUMER_OUT", str(OUT_DIR.parent / "consumer-output" / "dpngram_consume_lm"))
).resolve()
PUBLIC_TEXT = os.environ.get("DPNGRAM_CONSUMER_TEXT", str(DEMO_DIR / "sample" / "public.txt.gz"))

#: Must equal dags/dpngram_release.py's LM_ASSET (the published interface: name and URI).
LM_ASSET = Asset(name="dpngram_language_model", uri="dpngram://release/language-model")


@dag(
    dag_id="dpngram_consume_lm",
    description="Example consumer: perplexity of each new dpngram language model on a public text",
    schedule=[LM_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    # Unpaused from the start: asset events produced while a consumer is paused never reach it.
    is_paused_upon_creation=False,
    max_active_runs=1,
    params={
        "public_text": Param(
            PUBLIC_TEXT,
            type="string",
            minLength=1,
            title="Public text",
            description="Plain text (one sentence per line, .gz accepted) to score the model on.",
        )
    },
    tags=["dpngram", "consumer"],
    doc_md=__doc__,
)
def dpngram_consume_lm() -> None:
    @task(multiple_outputs=False)
    def perplexity(**context: Any) -> dict[str, Any]:
        """Load the triggering release's model with kenlm and score the public text."""
        from dpngram.lm.evaluate import evaluate_file
        from dpngram.release.layout import write_json_atomic

        events = (
            context["triggering_asset_events"].get(LM_ASSET)
            if context.get("triggering_asset_events")
            else None
        )
        if events:
            extra = dict(events[-1].extra)  # the newest model if several releases queued up
            run_id, model = extra["run_id"], extra["paths"]["binary"]
        else:  # manual trigger: the latest published release
            release = (OUT_DIR / "latest").resolve()
            run_id, model = release.name, str(release / "model" / "model.binary")
        text = context["params"]["public_text"]
        metrics = evaluate_file(model, text)
        result = {
            "run_id": run_id,
            "model": model,
            "text": text,
            "perplexity": metrics["perplexity"],
            "perplexity_without_oov": metrics["perplexity_without_oov"],
            "oov_rate": metrics["oov_rate"],
            "order": metrics["order"],
        }
        write_json_atomic(CONSUMER_OUT / f"{run_id}.json", result)
        return result

    perplexity()


dpngram_consume_lm()
