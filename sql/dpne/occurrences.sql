-- Level-k surviving positions: candidate positions whose k-gram was released. Level k+1 is
-- formed only from these.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT c.uid, c.loc, s.gid
FROM {schema}.{candidates} AS c
JOIN {schema}.{level} AS s ON s.key = c.key
