-- 0001_init: users, entities, API keys, models, checkpoints, files, jobs, events.
-- Timestamps are RFC 3339 UTC text with microseconds; ids are UUIDv7 text,
-- so ordering by id is ordering by creation time.

CREATE TABLE users (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

CREATE TABLE entities (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

CREATE TABLE memberships (
    user_id   TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    PRIMARY KEY (user_id, entity_id)
);

-- API keys are stored as SHA-256 hashes; prefix is the first characters of
-- the key, kept in clear to find candidates and to show in listings.
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name       TEXT NOT NULL DEFAULT '',
    prefix     TEXT NOT NULL,
    key_hash   BLOB NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
CREATE INDEX api_keys_prefix ON api_keys(prefix);

CREATE TABLE models (
    id         TEXT PRIMARY KEY,
    entity     TEXT NOT NULL REFERENCES entities(name),
    project    TEXT NOT NULL,
    name       TEXT NOT NULL,
    base_model TEXT NOT NULL,
    lora       TEXT NOT NULL,
    run_id     TEXT,
    created_by TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    UNIQUE (entity, project, name)
);
CREATE INDEX models_entity ON models(entity, id);

CREATE TABLE checkpoints (
    id         TEXT PRIMARY KEY,
    model_id   TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    dir        TEXT NOT NULL,
    metrics    TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    UNIQUE (model_id, step)
);

-- Every /log call, in order: the model's metric history.
CREATE TABLE model_metrics (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    model_id   TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    split      TEXT NOT NULL,
    metrics    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX model_metrics_model ON model_metrics(model_id, seq);

CREATE TABLE files (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    filename   TEXT NOT NULL,
    purpose    TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    path       TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE jobs (
    id                  TEXT PRIMARY KEY,
    model_id            TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    kind                TEXT NOT NULL CHECK (kind IN ('rl', 'sft')),
    status              TEXT NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED')),
    request_path        TEXT NOT NULL,
    request_bytes       INTEGER NOT NULL DEFAULT 0,
    file_id             TEXT,
    experimental_config TEXT NOT NULL DEFAULT '{}',
    config              TEXT NOT NULL DEFAULT '{}',
    error_message       TEXT,
    from_step           INTEGER,
    to_step             INTEGER,
    metrics             TEXT NOT NULL DEFAULT '{}',
    created_by          TEXT NOT NULL DEFAULT '',
    created_at          TEXT NOT NULL,
    training_start      TEXT,
    training_end        TEXT
);
CREATE INDEX jobs_status ON jobs(status, id);
CREATE INDEX jobs_model ON jobs(model_id, status, id);

CREATE TABLE job_events (
    id         TEXT PRIMARY KEY,
    job_id     TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    type       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX job_events_job ON job_events(job_id, id);
