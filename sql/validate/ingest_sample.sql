-- Validation (PRIVATE run schema): a bounded random sample of token rows for row-level checks
-- (non-null, non-empty user_id and token, non-negative pos). Sentences are sampled first (at most
-- 20,000, about 200,000 tokens), then unnested: sampling the unnested tokens view instead
-- unnested every sentence first (at 1M users: 100M rows, 45 CPU-seconds and 3 GB of spill for a
-- 200,000-row sample). Same columns as the tokens view (sql/ingest/tokens_view.sql). Results are
-- reported as pass/fail only (BOOLEAN_ONLY), so no sampled value ever leaves the schema.
-- The sample reads the ids and looks its tokens up in the dictionary (a LEFT JOIN: an id without
-- an entry shows as a NULL token and fails the check), so the view's decoding of every sentence
-- is not paid for 20,000 of them.
SELECT CAST(x.user_id AS VARCHAR)  AS user_id,
       t.token                     AS token,
       CAST(x.p - 1 AS INTEGER)    AS pos
FROM (
    SELECT s.user_id, g.p AS p, s.tids[g.p] AS tid
    FROM (SELECT user_id, tids FROM {schema}.sentences TABLESAMPLE (20000 ROWS)) AS s
    CROSS JOIN UNNEST(generate_series(1, array_length(s.tids))) AS g(p)
) AS x
LEFT JOIN {schema}.token_ids AS t ON t.tid = x.tid;
