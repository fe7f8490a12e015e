-- Steps 2 and 3 of the two-level user numbering (docs/engines.md "Numbering without a global
-- window"), over {per_user}(user_id, bucket, sentences) from user_sentences.sql. A global
-- row_number() OVER (ORDER BY user_id) would move every row into one Spark partition; here the
-- only global window runs over the small per-bucket table (one row per bucket), and the
-- per-user numbering is a window PARTITION BY bucket, which Spark spreads over its partitions.
--
-- {target}_buckets: per bucket, the users and sentences held by all EARLIER buckets (in bucket
-- order), i.e. the offsets at which the bucket's own numbers start.
CREATE OR REPLACE TABLE {schema}.{target}_buckets AS
SELECT bucket,
       CAST(sum(users) OVER (ORDER BY bucket ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - users
            AS BIGINT) AS first_uid,
       CAST(sum(sentences) OVER (ORDER BY bucket ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - sentences
            AS BIGINT) AS first_sentence
FROM (
    SELECT bucket, count(*) AS users, sum(sentences) AS sentences
    FROM {schema}.{per_user}
    GROUP BY bucket
) AS per_bucket;

-- {target}(user_id, uid, first_sentence): uid is dense 1..N (bucket offset + rank of user_id in
-- its bucket); first_sentence is the number of sentences of all users before this one in the
-- same (bucket, user_id) order, so the user's sentences can be numbered first_sentence + 1, ...
-- without another global window (dpne_occurrences_level1.sql).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT p.user_id,
       CAST(b.first_uid + row_number() OVER (PARTITION BY p.bucket ORDER BY p.user_id) AS INTEGER) AS uid,
       CAST(b.first_sentence
            + sum(p.sentences) OVER (
                PARTITION BY p.bucket ORDER BY p.user_id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
              )
            - p.sentences AS BIGINT) AS first_sentence
FROM {schema}.{per_user} AS p
JOIN {schema}.{target}_buckets AS b ON b.bucket = p.bucket
