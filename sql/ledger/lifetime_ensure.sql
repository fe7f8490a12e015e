-- The dataset's lifetime row (NULL limits: none set yet); the row is the dataset's lock.
INSERT INTO ledger.lifetime_budget (dataset, version) VALUES ($dataset, 0) ON CONFLICT DO NOTHING;
