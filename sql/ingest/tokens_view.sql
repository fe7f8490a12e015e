-- One row per token: pos is the 0-based position within the sentence.
-- (tokens[p] is 1-based here; the Spark engine rewrites it to element_at(tokens, p).)
CREATE OR REPLACE VIEW {schema}.tokens AS
SELECT s.user_id,
       s.doc_id,
       s.sent_id,
       CAST(g.p - 1 AS INTEGER) AS pos,
       s.tokens[g.p]            AS token
FROM {schema}.sentences AS s
CROSS JOIN UNNEST(generate_series(1, array_length(s.tokens))) AS g(p);
