-- A level's candidates as a DPSU (user_id, item) relation, for the shared histogram SQL.
CREATE OR REPLACE VIEW {schema}.{target} AS
SELECT uid AS user_id, key AS item
FROM {schema}.{candidates}
