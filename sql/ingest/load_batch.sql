-- Append one parsed batch (registered frames) to the run's input tables.
INSERT INTO {schema}.raw_text (user_id, doc_id, text)
SELECT user_id, doc_id, text FROM {raw_batch};
INSERT INTO {schema}.sentences (user_id, doc_id, sent_id, tokens)
SELECT user_id, doc_id, sent_id, tokens FROM {sentence_batch};
INSERT INTO {schema}.quarantine (source, line_no, reason, raw)
SELECT source, line_no, reason, raw FROM {quarantine_batch};
