-- Fragment: the CTE sort_keys(tid, sort_key) over V = {schema}.{space}: the keyed hash
-- hash(hash(w1 w2 w3) XOR $salt) by which a user over W trigrams keeps the W smallest (ties by
-- tid; bayes/_bounded_counts.sql states the rule). Included before bayes/_bounded_counts.sql by
-- bayes/user_counts.sql and bayes/private_user_counts.sql, and by bayes/trigram_sort_keys.sql
-- for the DuckDB engine's in-process bounding (dpngram.mechanisms.bayes_user_counts.private_count_sums).
sort_keys AS (
    SELECT tid, hash(xor(hash(concat_ws(' ', w1, w2, w3)), CAST($salt AS UBIGINT))) AS sort_key
    FROM {schema}.{space}
)
