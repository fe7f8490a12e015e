-- Stage lm_counts (docs/lm.md, "Noisy n-gram counts"): per-user bounded n-gram counts over a
-- public domain, summed. PRIVATE (exact weighted sums): the result never leaves the process
-- except with Gaussian noise added by pipeline/lm_counts.py.
-- Input {occurrences}(user_id, w1, w2, w3): the sentence-bounded trigram occurrences of
-- sql/bayes_occurrences.sql (one <s> before and one </s> after every sentence, tokens outside
-- the model vocabulary already '<unk>'). Every sentence's first row is (<s>, t1, t2 or </s>), so
-- the order-1 and order-2 occurrences are the last one / two tokens of every row plus, on first
-- rows, the leading <s> and (<s>, t1).
-- {domain}(gid, n, ngram) is public (public-corpus n-grams, released DP outputs).
-- Users whose keyed hash falls below $holdout_per_mille are left out: they are the disjoint
-- selection users of the mixture weight (parallel composition).
-- Each user's count vector x_u over the domain (all orders together) is scaled by
-- min(1, $clip / ||x_u||_2), so one user changes the summed vector by at most $clip in l2 norm.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH occ AS (
    SELECT user_id, w1, w2, w3
    FROM {schema}.{occurrences}
    WHERE abs(hash(xor(hash(user_id), CAST($salt AS UBIGINT))) % 1000) >= $holdout_per_mille
),
grams AS (
    SELECT user_id, 3 AS n, concat_ws(' ', w1, w2, w3) AS ngram FROM occ
    UNION ALL
    SELECT user_id, 2 AS n, concat_ws(' ', w2, w3) AS ngram FROM occ
    UNION ALL
    SELECT user_id, 2 AS n, concat_ws(' ', w1, w2) AS ngram FROM occ WHERE w1 = '<s>'
    UNION ALL
    SELECT user_id, 1 AS n, w3 AS ngram FROM occ
    UNION ALL
    SELECT user_id, 1 AS n, w2 AS ngram FROM occ WHERE w1 = '<s>'
    UNION ALL
    SELECT user_id, 1 AS n, w1 AS ngram FROM occ WHERE w1 = '<s>'
),
counted AS (
    SELECT g.user_id, d.gid, CAST(count(*) AS DOUBLE) AS c
    FROM grams AS g
    JOIN {schema}.{domain} AS d ON d.n = g.n AND d.ngram = g.ngram
    GROUP BY g.user_id, d.gid
),
norms AS (
    SELECT user_id, sqrt(sum(c * c)) AS norm
    FROM counted
    GROUP BY user_id
)
SELECT c.gid, sum(c.c * least(1.0, $clip / n.norm)) AS weighted
FROM counted AS c
JOIN norms AS n ON n.user_id = c.user_id
GROUP BY c.gid
