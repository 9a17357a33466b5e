-- Call store tables. Times are Unix microseconds (UTC); JSON columns hold the
-- canonical text (see canonical.go); *_size columns are the byte lengths of
-- that text, computed at write time.
CREATE TABLE trace_projects (
    id         INTEGER PRIMARY KEY,
    entity     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (entity, name)
);

-- One row per call. A row whose started_at is NULL holds an end (or an
-- update) that arrived before its start; it is invisible to reads and
-- queries until the start is merged into it.
CREATE TABLE trace_calls (
    pk                    INTEGER PRIMARY KEY,
    project               INTEGER NOT NULL REFERENCES trace_projects (id),
    id                    TEXT    NOT NULL,
    op_name               TEXT,
    display_name          TEXT,
    trace_id              TEXT,
    parent_id             TEXT,
    thread_id             TEXT,
    turn_id               TEXT,
    started_at            INTEGER,
    ended_at              INTEGER,
    attributes            TEXT,
    inputs                TEXT,
    output                TEXT,
    exception             TEXT,
    summary               TEXT,
    platform_user_id      TEXT,
    platform_run_id       TEXT,
    platform_run_step     INTEGER,
    platform_run_step_end INTEGER,
    deleted_at            INTEGER,
    start_size            INTEGER NOT NULL DEFAULT 0,
    end_size              INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX trace_calls_by_id ON trace_calls (project, id);
-- by trace, covering the storage sizes so a root's total is an index-only sum
CREATE INDEX trace_calls_by_trace ON trace_calls (project, trace_id, start_size, end_size);
CREATE INDEX trace_calls_by_parent ON trace_calls (project, parent_id);
-- the default query order
CREATE INDEX trace_calls_by_start ON trace_calls (project, started_at, id);

-- Token prices. pricing_level 'default' (pricing_level_id 'default') or
-- 'project' (pricing_level_id = the project's external id entity/project).
CREATE TABLE trace_prices (
    id                         TEXT    PRIMARY KEY,
    pricing_level              TEXT    NOT NULL,
    pricing_level_id           TEXT    NOT NULL,
    provider_id                TEXT    NOT NULL,
    llm_id                     TEXT    NOT NULL,
    effective_date             INTEGER NOT NULL,
    prompt_token_cost          REAL    NOT NULL,
    completion_token_cost      REAL    NOT NULL,
    prompt_token_cost_unit     TEXT    NOT NULL,
    completion_token_cost_unit TEXT    NOT NULL,
    created_by                 TEXT,
    created_at                 INTEGER NOT NULL
);
CREATE INDEX trace_prices_by_model ON trace_prices (llm_id, pricing_level, pricing_level_id, effective_date);
