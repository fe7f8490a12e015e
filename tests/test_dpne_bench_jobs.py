"""benchmarks/dpne/jobs.py (``make bench``'s dpne_bench.py): a job that clones an earlier job's
ingest instead of ingesting again runs DPNE to the end. The clone once copied the sentences but not
the token dictionary their ids index, and every cloned job then failed in the vocabulary stage."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from dpne import jobs  # noqa: E402  (benchmarks/ is not a package)

from dpngram.stages.ingest import run_ingest  # noqa: E402
from dpngram.text.sample import write_sample  # noqa: E402


def test_a_job_on_a_cloned_ingest_runs_dpne_and_reads_the_same_sentences(tmp_path):
    files = write_sample(tmp_path / "sample", n_users=300, seed=5, vocab_size=200, public_sentences=200)
    source = jobs.new_context(tmp_path / "work", "source", str(files["users"]), 3, "1GB")
    run_ingest(source)
    clone = jobs.new_context(tmp_path / "work", "clone", str(files["users"]), 3, "1GB")
    jobs.clone_sentences(clone, {"warehouse": str(source.config.run_warehouse), "schema": source.schema})
    seen: list[str] = []
    jobs.run_dpne_steps(clone, seen.append)
    assert seen[0] == "dpne.k1" and seen[-1] == "dpne.kgrams"
    query = "SELECT user_id, doc_id, sent_id, tokens, tids FROM {}.sentences ORDER BY doc_id, sent_id"
    with source.warehouse() as wh:
        original = wh.con.execute(query.format(source.schema)).fetchall()
    with clone.warehouse() as wh:
        cloned = wh.con.execute(query.format(clone.schema)).fetchall()
        dictionary = dict(wh.con.execute(f"SELECT tid, token FROM {clone.schema}.token_ids").fetchall())
    assert cloned == original and len(cloned) > 300
    assert all([dictionary[t] for t in tids] == tokens for _, _, _, tokens, tids in cloned)
