-- 0002_training_runs: the training-run API (internal/runs). A run is one
-- adapter trained by sequenced operations; an operation's body is stored as
-- sent (canonical JSON) with its fingerprint, so a replayed request_id is
-- recognised. Learner versions: projected counts admitted transitions
-- (optim_step, load_state), committed the ones applied. target_model is
-- the model a save_weights_for_sampler publishes into, resolved at admission. The run's lease
-- names the node executing its operations (lease_expires: ms since the
-- epoch on the database's clock).
CREATE TABLE training_runs (
    id                TEXT COLLATE "C" PRIMARY KEY,
    entity            TEXT COLLATE "C" NOT NULL REFERENCES entities(name),
    created_by        TEXT NOT NULL,
    request_id        TEXT COLLATE "C" NOT NULL,
    fingerprint       TEXT NOT NULL,
    run_name          TEXT COLLATE "C",
    spec              TEXT NOT NULL,
    initial_state     TEXT,
    status            TEXT NOT NULL,
    next_sequence_id  INTEGER NOT NULL DEFAULT 0,
    projected_version INTEGER NOT NULL DEFAULT 0,
    committed_version INTEGER NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_expires     BIGINT,
    created_at        TEXT NOT NULL,
    UNIQUE (entity, request_id)
);
CREATE INDEX training_runs_name ON training_runs(entity, run_name);

CREATE TABLE training_operations (
    id               TEXT COLLATE "C" PRIMARY KEY,
    run_id           TEXT COLLATE "C" NOT NULL REFERENCES training_runs(id) ON DELETE CASCADE,
    request_id       TEXT COLLATE "C" NOT NULL,
    fingerprint      TEXT NOT NULL,
    sequence_id      INTEGER NOT NULL,
    kind             TEXT NOT NULL,
    status           TEXT NOT NULL,
    parent_version   INTEGER NOT NULL,
    reserved_version INTEGER,
    body             TEXT NOT NULL,
    admitted_at      TEXT NOT NULL,
    started_at       TEXT,
    ended_at         TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    event_cursor     INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    result_released  INTEGER NOT NULL DEFAULT 0,
    error_code       TEXT,
    error_message    TEXT,
    target_model     TEXT,
    UNIQUE (run_id, request_id),
    UNIQUE (run_id, sequence_id)
);
CREATE INDEX training_operations_pending ON training_operations(status, run_id, sequence_id);
