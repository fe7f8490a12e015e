-- One TrieHH layer (Sun et al. 2024, Alg. 2 lines 11-12): for the users of this layer's group
-- {group}(uidx, pos), the length-$depth prefixes of their words (word + end symbol) whose
-- length-($depth - 1) prefix was broadcast {broadcast}(prefix), with the user's total count per
-- prefix. Words learned in earlier passes {learned}(word) no longer take part (multi-pass, §3).
SELECT pos, prefix, sum(cnt) AS cnt
FROM (
    SELECT
        g.pos,
        substr(w.word || $end_symbol, 1, $depth) AS prefix,
        w.cnt
    FROM {schema}.{words} AS w
    JOIN {group} AS g
        ON g.uidx = w.uidx
    JOIN {broadcast} AS b
        ON b.prefix = substr(w.word || $end_symbol, 1, $depth - 1)
    LEFT JOIN {schema}.{learned} AS l
        ON l.word = w.word
    WHERE l.word IS NULL
      AND length(w.word) + 1 >= $depth
) AS layer_prefixes
GROUP BY pos, prefix
