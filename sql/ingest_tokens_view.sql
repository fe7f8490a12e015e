-- One row per token: pos is the 0-based position within the sentence.
-- (Spark note: tokens[p] is 1-based here; a Spark translation must use element_at(tokens, p).)
CREATE OR REPLACE VIEW {schema}.tokens AS
SELECT s.user_id,
       s.doc_id,
       s.sent_id,
       CAST(g.p - 1 AS INTEGER) AS pos,
       s.tokens[g.p]            AS token
FROM {schema}.sentences AS s
CROSS JOIN UNNEST(generate_series(1, len(s.tokens))) AS g(p);
