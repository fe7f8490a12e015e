"""Airflow DAG ``dpngram_consume_lm``: the pattern a downstream team copies to use dpngram's
language model of ONE dataset, scored on text the model never saw.

Subscribing: releases are kept apart per dataset, and so are their assets. This DAG is scheduled
on the language-model asset of one dataset, ``OUT/DATASET/latest/model`` (name
``dpngram_DATASET_language_model``; ``OUT`` = ``DPNGRAM_OUT``, ``DATASET`` =
``DPNGRAM_CONSUMER_DATASET``, default ``default``), which ``dpngram_release``'s ``publish_lm`` task
emits whenever a release of that dataset includes a KenLM model. Releases of other datasets never
trigger it. A team in another repository copies this file and declares the asset by name and URI
only, e.g. ``Asset(name="dpngram_chats_language_model", uri="s3://releases/dpngram/chats/latest/model")``.

Reading the model: the event's ``extra["release"]`` names the release (a URL on object storage, or
a directory); :func:`dpngram.release.storage.fetch_verified` downloads ``model/model.binary`` and
``report.json`` into ``DPNGRAM_CONSUMER_CACHE`` (read in place for a local release) and checks each
against the SHA-256 the release's ``MANIFEST.json`` records, so the task fails with one line rather
than score a corrupted or substituted file. The task runs on the Celery queue
``DPNGRAM_CONSUMER_QUEUE`` (default ``default``): the team's own workers, which need to share
nothing with dpngram's but the object store.

What it records (:func:`dpngram.lm.consumer.score_heldout`): the model's perplexity and OOV rate
on the team's own held-out text (Param ``eval_text``, one sentence a line, ``.gz`` accepted;
default ``DPNGRAM_CONSUMER_TEXT``, else the demo's held-out users, who are never ingested), the
text's path, SHA-256, sentences and tokens, how many of its sentences occur verbatim in the public
corpus the model was trained on (the event's ``extra["training_corpus"]``), and the release's own
private-domain verdict (report.json ``model.private_domain``: a DP estimate on held-out users)
beside it. If more than 1% of the text's sentences are in the training corpus the task fails with
one line (the score would measure memorisation); the overlap is recorded either way:

* the task's return value (XCom);
* ``DPNGRAM_CONSUMER_OUT/<release run_id>.json`` (default
  ``<DPNGRAM_OUT>/../consumer-output/dpngram_consume_lm``).

The model is differentially private (built only from DP releases) and the evaluation text is the
team's non-private text, so the score is safe to log. A manual trigger without an asset event
scores the dataset's latest release (through ``latest.json`` or the ``latest`` link; training
corpus: Param ``training_corpus``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, task

# parse-time: the standard library only (dpngram.release.layout)
from dpngram.release.layout import asset_key

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = Path(os.environ.get("DPNGRAM_DEMO_DIR", str(REPO / ".dpngram"))).resolve()
#: Where the releases are published: a directory, or a URL on object storage (s3://...).
OUT = os.environ.get("DPNGRAM_OUT", str(REPO / "demo-output"))
_LOCAL_OUT = (
    Path(OUT.removeprefix("file://")).resolve() if "://" not in OUT or OUT.startswith("file://") else None
)
CONSUMER_OUT = Path(
    os.environ.get(
        "DPNGRAM_CONSUMER_OUT",
        str((_LOCAL_OUT.parent if _LOCAL_OUT else DEMO_DIR) / "consumer-output" / "dpngram_consume_lm"),
    )
).resolve()
#: Where downloaded models are kept (by release run id), each checked against its release's manifest.
MODEL_CACHE = Path(os.environ.get("DPNGRAM_CONSUMER_CACHE", str(CONSUMER_OUT / "models"))).resolve()
#: The team's held-out text: never the public corpus the model was built from.
EVAL_TEXT = os.environ.get("DPNGRAM_CONSUMER_TEXT", str(DEMO_DIR / "sample" / "heldout_users.txt"))
log = logging.getLogger("dpngram")
#: The Celery queue the scoring task runs on (``DPNGRAM_CONSUMER_QUEUE``): the downstream team's own
#: workers, which share nothing with dpngram's but the object store; Airflow's default queue unset.
QUEUE = os.environ.get("DPNGRAM_CONSUMER_QUEUE") or "default"
#: The one dataset this consumer follows.
DATASET = os.environ.get("DPNGRAM_CONSUMER_DATASET", "default")

#: The dataset's language-model asset (dpngram.release.layout.asset_key: the published interface):
#: name ``dpngram_DATASET_language_model``, URI ``OUT/DATASET/latest/model``.
LM_ASSET = Asset(*asset_key(DATASET, "language_model", OUT))


def _newer_release(release: str) -> str | None:
    """The dataset's latest release under ``OUT`` when it was published after ``release``, else
    None (also when ``OUT`` holds no release of the dataset: the event came from another OUT)."""
    from dpngram.release.storage import latest_release, read_manifest

    try:
        latest = latest_release(OUT, DATASET)
        if latest.rstrip("/") == release.rstrip("/"):
            return None
        newer = read_manifest(latest)["published_at"] > read_manifest(release)["published_at"]
    except (FileNotFoundError, KeyError, ValueError):
        return None
    return latest if newer else None


@dag(
    dag_id="dpngram_consume_lm",
    description=f"Example consumer: perplexity of each new '{DATASET}' language model on held-out text",
    schedule=[LM_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    # Unpaused from the start: asset events produced while a consumer is paused never reach it.
    is_paused_upon_creation=False,
    max_active_runs=1,
    params={
        "eval_text": Param(
            EVAL_TEXT,
            type="string",
            minLength=1,
            title="Held-out text",
            description="Text the model never saw (one sentence a line, .gz accepted): your own held-out "
            "text, not the public corpus. Refused if more than 1% of its sentences are in the training "
            "corpus.",
        ),
        "training_corpus": Param(
            None,
            type=["null", "string"],
            title="Training corpus",
            description="The public corpus the model was built from; default: the asset event's "
            "training_corpus (set it for a manual trigger).",
        ),
    },
    tags=["dpngram", "consumer"],
    doc_md=__doc__,
)
def dpngram_consume_lm() -> None:
    @task(multiple_outputs=False, task_display_name="Score on held-out text", queue=QUEUE)
    def perplexity(**context: Any) -> dict[str, Any]:
        """Score the triggering release's model on held-out text, after checking that the text is
        not in the training corpus; record it beside the release's private-domain verdict."""
        from airflow.sdk.exceptions import AirflowFailException

        from dpngram.lm.consumer import TrainingOverlapError, score_heldout
        from dpngram.release.layout import write_json_atomic
        from dpngram.release.storage import fetch_verified, join, latest_release

        events = (
            context["triggering_asset_events"].get(LM_ASSET)
            if context.get("triggering_asset_events")
            else None
        )
        params = context["params"]
        if events:
            extra = dict(events[-1].extra)  # the newest model if several releases queued up
            run_id, release = extra["run_id"], extra["release"]
            corpus = params["training_corpus"] or extra.get("training_corpus")
            # Airflow may fold two close events into one run, or drop the later one's run (seen
            # with two releases 50 ms apart): score the dataset's newest release if it is newer
            newer = _newer_release(release)
            if newer is not None:
                log.info(
                    "the event names %s; the dataset's newest release is %s: scoring that", release, newer
                )
                run_id, release = newer.rstrip("/").rsplit("/", 1)[-1], newer
        else:  # manual trigger: the dataset's latest published release
            release = latest_release(OUT, DATASET)
            run_id = release.rstrip("/").rsplit("/", 1)[-1]
            corpus = params["training_corpus"]
        # downloaded (object storage) or read in place, and checked against the release's manifest
        model = fetch_verified(release, "model/model.binary", MODEL_CACHE)
        report = fetch_verified(release, "report.json", MODEL_CACHE)
        log.info("scoring the model of %s (%s, SHA-256 checked)", join(release, "model/model.binary"), model)
        try:
            record = score_heldout(str(model), params["eval_text"], corpus, str(report))
            failure = None
        except TrainingOverlapError as err:
            record, failure = err.record, str(err)
        result = {
            "run_id": run_id,
            "dataset": DATASET,
            "release": release,
            **record,
            "refused": failure,
        }
        write_json_atomic(CONSUMER_OUT / f"{run_id}.json", result)
        if failure:
            raise AirflowFailException(failure)
        return result

    perplexity()


dpngram_consume_lm()
