-- Tables (datasets, evaluation rows), feedback (scores, reactions, notes):
-- what the Weave SDKs write for weave.Dataset, weave.Evaluation and
-- EvaluationLogger.

-- Table rows, content-addressed per project: digest is Weave's row digest
-- (see tables.go); val is the canonical JSON text of the row (an object).
CREATE TABLE trace_table_rows (
    project    INTEGER NOT NULL REFERENCES trace_projects (id),
    digest     TEXT    NOT NULL,
    val        TEXT    NOT NULL,
    size_bytes INTEGER NOT NULL,
    PRIMARY KEY (project, digest)
) WITHOUT ROWID;

-- Tables, content-addressed per project by their rows' digests in order.
CREATE TABLE trace_tables (
    project    INTEGER NOT NULL REFERENCES trace_projects (id),
    digest     TEXT    NOT NULL,
    row_count  INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project, digest)
) WITHOUT ROWID;

-- A table's rows in order: idx counts from 0, so a page is a range scan.
CREATE TABLE trace_table_members (
    project      INTEGER NOT NULL,
    table_digest TEXT    NOT NULL,
    idx          INTEGER NOT NULL,
    row_digest   TEXT    NOT NULL,
    PRIMARY KEY (project, table_digest, idx)
) WITHOUT ROWID;

-- Feedback on a ref (a call, an object): payload is canonical JSON text.
CREATE TABLE trace_feedback (
    project        INTEGER NOT NULL REFERENCES trace_projects (id),
    id             TEXT    NOT NULL,
    weave_ref      TEXT    NOT NULL,
    wb_user_id     TEXT    NOT NULL,
    creator        TEXT,
    created_at     INTEGER NOT NULL,
    feedback_type  TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    annotation_ref TEXT,
    runnable_ref   TEXT,
    call_ref       TEXT,
    trigger_ref    TEXT,
    PRIMARY KEY (project, id)
);
CREATE INDEX trace_feedback_by_ref ON trace_feedback (project, weave_ref);
CREATE INDEX trace_feedback_by_created ON trace_feedback (project, created_at);
