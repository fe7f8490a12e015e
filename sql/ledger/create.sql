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
-- 'pending': charged (an upper bound) before the stage drew its noise; 'final': the exact charge,
-- written after the noisy output was persisted. Older ledgers have only final rows.
ALTER TABLE ledger.privacy_spend ADD COLUMN IF NOT EXISTS status VARCHAR DEFAULT 'final';
-- A dataset's lifetime budget: set once (by the first run that names one, or `dpngram budget`),
-- changed only by `dpngram budget`. `version` is bumped by every check-and-spend, so two
-- concurrent transactions on one dataset conflict instead of both passing the check.
CREATE TABLE IF NOT EXISTS ledger.lifetime_budget (
    dataset          VARCHAR PRIMARY KEY,
    lifetime_epsilon DOUBLE,
    lifetime_delta   DOUBLE,
    updated_at       TIMESTAMP,
    version          BIGINT NOT NULL DEFAULT 0
);
-- A run's identity (fingerprint of its parameters and input: sizes, times, hashes; no content) and
-- its reservation: while a run is 'open' it counts against the lifetime budget as
-- max(reserved, charged); once 'closed' (published, or abandoned via `dpngram gc`) as charged.
CREATE TABLE IF NOT EXISTS ledger.runs (
    run_id           VARCHAR PRIMARY KEY,
    dataset          VARCHAR   NOT NULL,
    fingerprint      VARCHAR   NOT NULL,
    reserved_epsilon DOUBLE    NOT NULL,
    reserved_delta   DOUBLE    NOT NULL,
    state            VARCHAR   NOT NULL,
    created_at       TIMESTAMP NOT NULL
);
-- Where the run stages its release (the resolved OUT/runs/RUN_ID.staging): a resume from another
-- OUT is refused, and `dpngram gc` finds the run whatever happened to OUT. 'suspended': a run that
-- failed before drawing any noise released its reservation; a resume reserves again.
ALTER TABLE ledger.runs ADD COLUMN IF NOT EXISTS staging VARCHAR;
-- This warehouse's identity: a random id and a secret (keys only, no data). A staging directory
-- carries the id and a keyed digest of its run's fingerprint, so a resume with another warehouse
-- is refused (dpngram.release.identity.check_staging).
CREATE TABLE IF NOT EXISTS ledger.warehouse_identity (
    id         VARCHAR   NOT NULL,
    secret     VARCHAR   NOT NULL,
    created_at TIMESTAMP NOT NULL
);
