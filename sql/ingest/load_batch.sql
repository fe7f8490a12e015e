-- Append one parsed batch (registered frames) to the run's input tables.
INSERT INTO {schema}.raw_text (user_id, doc_id, text)
SELECT user_id, doc_id, text FROM {raw_batch};
INSERT INTO {schema}.sentence_ids (user_id, doc_id, sent_id, tids)
SELECT user_id, doc_id, sent_id, tids FROM {sentence_batch};
INSERT INTO {schema}.token_ids (token, tid)
SELECT token, tid FROM {token_batch};
INSERT INTO {schema}.quarantine (source, line_no, reason, raw)
SELECT source, line_no, reason, raw FROM {quarantine_batch};
