-- Privacy ledger: one row per (dataset, run, stage) that spent budget. Lives in the warehouse
-- database, outside any run schema, so it survives runs. Keys only; no data-derived statistics.
CREATE SCHEMA IF NOT EXISTS ledger;
CREATE TABLE IF NOT EXISTS ledger.privacy_spend (
    dataset      VARCHAR   NOT NULL,
    run_id       VARCHAR   NOT NULL,
    stage        VARCHAR   NOT NULL,
    epsilon      DOUBLE    NOT NULL,
    delta        DOUBLE    NOT NULL,
    events       VARCHAR   NOT NULL,   -- JSON list of PrivacyEvent (mechanism parameters only)
    recorded_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (dataset, run_id, stage)
);
