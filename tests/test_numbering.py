"""User and sentence numbering without a global window (docs/engines.md "Numbering without a
global window"; sql/user_sentences.sql, sql/user_numbering.sql, sql/dpne_occurrences_level1.sql,
sql/triehh_users.sql), on DuckDB and on Spark (local[2]).

What must hold on every engine, for any number of hash buckets (more users than buckets, and
fewer):

* ``uid`` is exactly 1..N, N = the number of distinct users;
* ``first_sentence`` tiles the sentence numbers: listed in uid order, it is the running total of
  the earlier users' sentence counts (so user u's sentences are first_sentence + 1 .. + count);
* level-1 ``loc`` is unique, ``loc // stride`` (sentence_no) is exactly 1..S, each sentence number
  belongs to one user, its positions are 1..len consecutively, and a user's sentences are numbered
  in (doc_id, sent_id) order: decoding the occurrences gives back every user's sentences, in order;
* on Spark, the physical plans of the users statement and of the level-1 statement contain no
  ``SinglePartition`` exchange (the plan of the small offsets table does: the control that the
  check can see one).

The corpus is built deterministically (no randomness): 240 users with 1..17 sentences each and
three users with 700 sentences each, every sentence holding tokens unique to it, so a decoded
sentence identifies its source row.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import pyarrow as pa
import pytest

from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import add_token_ids
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import dpne_domain, triehh
from dpngram.mechanisms.dpne_domain import SENTENCE_STRIDE, USER_BUCKETS, number_users

SCHEMA = "run_numbering"
HEAVY_SENTENCES = 700
# 243 users: 7 buckets -> many users per bucket; USER_BUCKETS (16384) -> most buckets empty.
BUCKET_CASES = [pytest.param(7, id="more_users_than_buckets"), pytest.param(USER_BUCKETS, id="fewer_users")]


def _corpus() -> pa.Table:
    """sentences(user_id, doc_id, sent_id, tokens). Users ids are strings that do not sort like
    their creation order; doc_id/sent_id are interleaved so (doc_id, sent_id) order differs from
    insertion order; every token is unique to its sentence ("s<row>_<position>")."""
    rows: dict[str, list] = {"user_id": [], "doc_id": [], "sent_id": [], "tokens": []}
    users = [(f"user-{(i * 7919) % 1000:03d}-{i}", 1 + i % 17) for i in range(240)]
    users += [(f"heavy-{i}", HEAVY_SENTENCES) for i in range(3)]
    row = 0
    for index, (user, count) in enumerate(users):
        for j in reversed(range(count)):  # inserted in descending (doc_id, sent_id) order on purpose
            doc, sent = divmod(j, 4)
            rows["user_id"].append(user)
            rows["doc_id"].append(10 * doc + index % 3)
            rows["sent_id"].append(sent)
            rows["tokens"].append([f"s{row}_{p}" for p in range(1 + row % 5)])
            row += 1
    return pa.table(
        rows,
        schema=pa.schema(
            [
                ("user_id", pa.string()),
                ("doc_id", pa.int64()),
                ("sent_id", pa.int32()),
                ("tokens", pa.list_(pa.string())),
            ]
        ),
    )


CORPUS = _corpus()


def _load_corpus(engine) -> None:
    with engine.registered(numbering_corpus=CORPUS):
        engine.execute(
            f"CREATE OR REPLACE TABLE {SCHEMA}.sentences AS "
            "SELECT user_id, doc_id, sent_id, tokens FROM numbering_corpus"
        )
    add_token_ids(engine, SCHEMA)  # the token ids and dictionary ingest writes
    with engine.registered(numbering_corpus=CORPUS):
        # S_1 = every token: then every position has an occurrence row
        engine.execute(
            f"CREATE OR REPLACE TABLE {SCHEMA}.numbering_released AS "
            "SELECT DISTINCT unnest(tokens) AS item FROM numbering_corpus"
        )
    engine.execute(
        load_sql("dpne/level1_table", schema=SCHEMA, target="numbering_s1", released="numbering_released")
    )


def _level1(engine, users: str, target: str) -> None:
    engine.execute(
        load_sql(
            "dpne/occurrences_level1", schema=SCHEMA, target=target, users=users, vocabulary="numbering_s1"
        ),
        {"sentence_stride": SENTENCE_STRIDE},
    )


def _expected_sentences() -> dict[str, list[tuple[str, ...]]]:
    """Each user's sentences (token tuples) in (doc_id, sent_id) order."""
    rows = sorted(
        zip(*(CORPUS.column(c).to_pylist() for c in ("user_id", "doc_id", "sent_id", "tokens")), strict=True)
    )
    return {user: [tuple(r[3]) for r in group] for user, group in itertools.groupby(rows, key=lambda r: r[0])}


def check_users(engine, users: str) -> None:
    table = engine.fetch_arrow(f"SELECT user_id, uid, first_sentence FROM {SCHEMA}.{users}")
    assert table.schema.field("uid").type == pa.int32()
    assert table.schema.field("first_sentence").type == pa.int64()
    counts = defaultdict(int)
    for user in CORPUS.column("user_id").to_pylist():
        counts[user] += 1
    rows = sorted(
        zip(*(table.column(c).to_pylist() for c in ("uid", "user_id", "first_sentence")), strict=True)
    )
    assert [uid for uid, _, _ in rows] == list(range(1, len(counts) + 1))
    assert sorted(user for _, user, _ in rows) == sorted(counts)
    running = 0
    for _, user, first in rows:  # in uid order: the running total of earlier users' sentences
        assert first == running
        running += counts[user]
    assert running == CORPUS.num_rows


def check_level1(engine, users: str, occurrences: str) -> None:
    table = engine.fetch_arrow(
        f"SELECT u.user_id, o.uid, o.loc, s.ngram FROM {SCHEMA}.{occurrences} AS o "
        f"JOIN {SCHEMA}.numbering_s1 AS s ON s.gid = o.gid "
        f"JOIN {SCHEMA}.{users} AS u ON u.uid = o.uid"
    )
    assert (
        engine.fetch_arrow(f"SELECT loc FROM {SCHEMA}.{occurrences} LIMIT 1").schema.field("loc").type
        == pa.int64()
    )
    locs = table.column("loc").to_pylist()
    assert len(set(locs)) == len(locs) == sum(len(t) for t in CORPUS.column("tokens").to_pylist())
    sentences: dict[int, list[tuple[int, str]]] = defaultdict(list)
    owner: dict[int, str] = {}
    for user, loc, token in zip(
        *(table.column(c).to_pylist() for c in ("user_id", "loc", "ngram")), strict=True
    ):
        number, pos = divmod(loc, SENTENCE_STRIDE)
        sentences[number].append((pos, token))
        assert owner.setdefault(number, user) == user  # a sentence number belongs to one user
    assert sorted(sentences) == list(range(1, CORPUS.num_rows + 1))
    decoded: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for number in sorted(sentences):
        positions = sorted(sentences[number])
        assert [p for p, _ in positions] == list(range(1, len(positions) + 1))  # consecutive
        decoded[owner[number]].append(tuple(t for _, t in positions))
    assert dict(decoded) == _expected_sentences()


# ----------------------------------------------------------------------------------------------
# DuckDB
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("numbering") / "wh.duckdb", memory_limit="1GB")
    wh.create_schema(SCHEMA)
    _load_corpus(wh)
    yield wh
    wh.close()


@pytest.mark.parametrize("buckets", BUCKET_CASES)
def test_duckdb_uid_dense_and_sentences_unique(duck, buckets) -> None:
    number_users(duck, SCHEMA, "num_users", buckets)
    check_users(duck, "num_users")
    _level1(duck, "num_users", "num_occ1")
    check_level1(duck, "num_users", "num_occ1")
    for leftover in ("num_users_per_user", "num_users_buckets"):  # working tables are dropped
        assert duck.object_type(SCHEMA, leftover) is None


def test_duckdb_single_bucket_and_deterministic(duck) -> None:
    number_users(duck, SCHEMA, "num_users_one", 1)  # every user in one bucket: still 1..N
    check_users(duck, "num_users_one")
    tables = []
    for attempt in ("a", "b"):
        number_users(duck, SCHEMA, f"num_det_{attempt}")
        _level1(duck, f"num_det_{attempt}", f"num_det_occ_{attempt}")
        tables.append(
            (
                duck.fetch_arrow(f"SELECT * FROM {SCHEMA}.num_det_{attempt} ORDER BY user_id"),
                duck.fetch_arrow(f"SELECT * FROM {SCHEMA}.num_det_occ_{attempt} ORDER BY loc"),
            )
        )
    assert tables[0][0].equals(tables[1][0]) and tables[0][1].equals(tables[1][1])
    assert tables[0][1].num_rows > 0


def test_bucket_count_must_be_positive(duck) -> None:
    with pytest.raises(ValueError, match="buckets: must be a positive integer"):
        number_users(duck, SCHEMA, "num_bad", 0)


def test_install_vocabulary_and_triehh_use_the_shared_numbering(duck) -> None:
    assert dpne_domain.install_vocabulary(duck, SCHEMA, "numbering_released") == duck.fetch_scalar(
        f"SELECT count(*) FROM {SCHEMA}.numbering_released"
    )
    check_users(duck, "dpne_users")
    assert duck.object_type(SCHEMA, "dpne_occ1") is None  # built only where a level needs it
    assert dpne_domain.level1_occurrences(duck, SCHEMA) == "dpne_occ1"
    check_level1(duck, "dpne_users", "dpne_occ1")
    params = triehh.TrieParameters(epsilon0=1.0, users_per_layer=10, max_depth=6)
    triehh.prepare_user_words(duck, SCHEMA, [], params)
    uidx = dict(duck.con.execute(f"SELECT user_id, uidx FROM {SCHEMA}.triehh_users").fetchall())
    dpne_uid = dict(duck.con.execute(f"SELECT user_id, uid FROM {SCHEMA}.dpne_users").fetchall())
    assert sorted(uidx.values()) == list(range(len(dpne_uid)))
    assert uidx == {user: uid - 1 for user, uid in dpne_uid.items()}  # same numbering, 0-based
    assert duck.object_type(SCHEMA, "triehh_users_numbering") is None


def check_level2_pairs(engine) -> None:
    """sql/dpne/candidates_level2.sql (a view: pairs read from the sentences) gives exactly the rows of
    sql/dpne/candidates_both.sql over the level-1 positions, with an S_1 that lacks every third
    position's token (so tokens outside S_1 break pairs) and sentences of 1..5 tokens (so a pair
    never runs past a sentence's end)."""
    engine.execute(
        f"CREATE OR REPLACE TABLE {SCHEMA}.pairs_released AS "
        f"SELECT item FROM {SCHEMA}.numbering_released WHERE item NOT LIKE '%\\_2' ESCAPE '\\'"
    )
    engine.execute(load_sql("dpne/level1_table", schema=SCHEMA, target="pairs_s1", released="pairs_released"))
    number_users(engine, SCHEMA, "pairs_users")
    params = {"sentence_stride": SENTENCE_STRIDE}
    engine.execute(
        load_sql(
            "dpne/occurrences_level1",
            schema=SCHEMA,
            target="pairs_occ1",
            users="pairs_users",
            vocabulary="pairs_s1",
        ),
        params,
    )
    engine.execute(
        load_sql("dpne/candidates_both", schema=SCHEMA, target="pairs_window", previous="pairs_occ1")
    )
    engine.execute(
        load_sql(
            "dpne/candidates_level2",
            schema=SCHEMA,
            target="pairs_direct",
            users="pairs_users",
            vocabulary="pairs_s1",
        )  # a view: no parameters; its literal stride must be SENTENCE_STRIDE for the locs to agree
    )
    rows = {
        name: sorted(engine.fetch_arrow(f"SELECT uid, loc, key FROM {SCHEMA}.{name}").to_pylist(), key=str)
        for name in ("pairs_window", "pairs_direct")
    }
    expected = sum(
        sum(1 for a, b in itertools.pairwise(t) if not a.endswith("_2") and not b.endswith("_2"))
        for t in CORPUS.column("tokens").to_pylist()
    )
    assert len(rows["pairs_direct"]) == expected > 0
    assert rows["pairs_direct"] == rows["pairs_window"]
    engine.drop(
        SCHEMA, "pairs_released", "pairs_s1", "pairs_users", "pairs_occ1", "pairs_window", "pairs_direct"
    )


def test_duckdb_level2_pairs_from_sentences(duck) -> None:
    check_level2_pairs(duck)


# ----------------------------------------------------------------------------------------------
# Spark
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark_engine(spark, tmp_path_factory):
    from dpngram.engines.spark import SparkEngine

    engine = SparkEngine(spark, str(tmp_path_factory.mktemp("numbering_spark") / "tables"))
    engine.create_schema(SCHEMA)
    _load_corpus(engine)
    yield engine
    engine.drop(SCHEMA, "sentences", "numbering_released", "numbering_s1")


def _plan(spark, duckdb_sql: str, params: dict | None = None) -> dict[str, str]:
    """Physical plan of each statement of ``duckdb_sql`` (transpiled as the engine runs it),
    keyed by target table; the plan is Spark's executed plan (with AQE: its initial plan)."""
    from dpngram.engines.spark import to_spark

    plans = {}
    for kind, body in to_spark(duckdb_sql):
        df = spark.sql(body, args={k: v for k, v in (params or {}).items() if f":{k}" in body} or None)
        plans[kind.replace("`", "").split(".")[-1]] = df._jdf.queryExecution().executedPlan().toString()
    return plans


@pytest.mark.spark
@pytest.mark.parametrize("buckets", BUCKET_CASES)
def test_spark_uid_dense_and_sentences_unique(spark_engine, buckets) -> None:
    number_users(spark_engine, SCHEMA, "num_users", buckets)
    check_users(spark_engine, "num_users")
    _level1(spark_engine, "num_users", "num_occ1")
    check_level1(spark_engine, "num_users", "num_occ1")


@pytest.mark.spark
def test_spark_level2_pairs_from_sentences(spark_engine) -> None:
    check_level2_pairs(spark_engine)


@pytest.mark.spark
def test_spark_plans_have_no_single_partition(spark, spark_engine) -> None:
    """The users statement and the level-1 statement shuffle by bucket / user, never into one
    partition; the offsets statement (one row per bucket) is the only global window."""
    per_user = load_sql("numbering/sentences", schema=SCHEMA, target="plan_per_user", sentences="sentences")
    assert "SinglePartition" not in _plan(spark, per_user, {"buckets": USER_BUCKETS})["plan_per_user"]
    spark_engine.execute(per_user, {"buckets": USER_BUCKETS})
    numbering = load_sql("numbering/users", schema=SCHEMA, target="plan_users", per_user="plan_per_user")
    spark_engine.execute(numbering)  # plans need the tables each statement reads
    plans = _plan(spark, numbering)
    assert sorted(plans) == ["plan_users", "plan_users_buckets"]
    assert "SinglePartition" in plans["plan_users_buckets"]  # control: the check sees a global window
    assert "Window" in plans["plan_users"] and "hashpartitioning" in plans["plan_users"]
    assert "SinglePartition" not in plans["plan_users"]
    level1 = load_sql(
        "dpne/occurrences_level1",
        schema=SCHEMA,
        target="plan_occ1",
        users="plan_users",
        vocabulary="numbering_s1",
    )
    level1_plan = _plan(spark, level1, {"sentence_stride": SENTENCE_STRIDE})["plan_occ1"]
    assert "Window" in level1_plan and "SinglePartition" not in level1_plan
    spark_engine.drop(SCHEMA, "plan_per_user", "plan_users_buckets", "plan_users")
