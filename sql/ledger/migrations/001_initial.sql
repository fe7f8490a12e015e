-- The privacy ledger, schema `ledger`: what each dataset has spent, its lifetime budget, every
-- run's identity and reservation, and the ledger's own identity. Keys and mechanism parameters
-- only: no data-derived statistic. Written in DuckDB's dialect; PostgreSQL runs it transpiled.
CREATE TABLE IF NOT EXISTS ledger.privacy_spend (
    dataset      VARCHAR   NOT NULL,
    run_id       VARCHAR   NOT NULL,
    stage        VARCHAR   NOT NULL,
    epsilon      DOUBLE    NOT NULL,
    delta        DOUBLE    NOT NULL,
    events       VARCHAR   NOT NULL,   -- JSON list of PrivacyEvent (mechanism parameters only)
    recorded_at  TIMESTAMP NOT NULL,
    -- 'pending': charged (an upper bound) before the stage drew its noise; 'final': the exact
    -- charge, written after the noisy output was persisted.
    status       VARCHAR   NOT NULL DEFAULT 'final',
    PRIMARY KEY (dataset, run_id, stage)
);
-- A dataset's lifetime budget: set once (by the first run that names one, or `dpngram budget`),
-- changed only by `dpngram budget`. The row is the dataset's lock: every check-and-spend updates
-- it first (`version`), so two concurrent transactions on one dataset are serialised (PostgreSQL:
-- the second waits for the first's commit) or conflict and retry (DuckDB).
CREATE TABLE IF NOT EXISTS ledger.lifetime_budget (
    dataset          VARCHAR PRIMARY KEY,
    lifetime_epsilon DOUBLE,
    lifetime_delta   DOUBLE,
    updated_at       TIMESTAMP,
    version          BIGINT NOT NULL DEFAULT 0
);
-- A run's identity (fingerprint of its parameters and input: sizes, times, hashes; no content),
-- its reservation and where it keeps its files. While a run is 'open' it counts against the
-- lifetime budget as max(reserved, charged); once 'closed' (published, or abandoned via
-- `dpngram gc`) as charged; 'suspended': it failed before drawing any noise and released its
-- reservation (a resume reserves again). `staging`: where the run stages its release (a resume
-- from elsewhere is refused; `dpngram gc` finds it). `warehouse`: the directory of its private
-- tables on the machine that registered it.
CREATE TABLE IF NOT EXISTS ledger.runs (
    run_id           VARCHAR PRIMARY KEY,
    dataset          VARCHAR   NOT NULL,
    fingerprint      VARCHAR   NOT NULL,
    reserved_epsilon DOUBLE    NOT NULL,
    reserved_delta   DOUBLE    NOT NULL,
    state            VARCHAR   NOT NULL,
    created_at       TIMESTAMP NOT NULL,
    staging          VARCHAR,
    warehouse        VARCHAR
);
-- The ledger's identity: a random id and a secret (keys only, no data). A staging directory
-- carries the id and a keyed digest of its run's fingerprint, so a resume against another ledger
-- is refused (dpngram.release.identity.check_staging).
CREATE TABLE IF NOT EXISTS ledger.identity (
    id         VARCHAR   NOT NULL,
    secret     VARCHAR   NOT NULL,
    created_at TIMESTAMP NOT NULL
);
