-- Tables and feedback, PostgreSQL form of sqlite/005_tables_feedback.sql.
CREATE TABLE trace_table_rows (
    project    BIGINT NOT NULL REFERENCES trace_projects (id),
    digest     TEXT COLLATE "C" NOT NULL,
    val        TEXT COLLATE "C" NOT NULL,
    size_bytes BIGINT NOT NULL,
    PRIMARY KEY (project, digest)
);

CREATE TABLE trace_tables (
    project    BIGINT NOT NULL REFERENCES trace_projects (id),
    digest     TEXT COLLATE "C" NOT NULL,
    row_count  BIGINT NOT NULL,
    size_bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project, digest)
);

CREATE TABLE trace_table_members (
    project      BIGINT NOT NULL,
    table_digest TEXT COLLATE "C" NOT NULL,
    idx          BIGINT NOT NULL,
    row_digest   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (project, table_digest, idx)
);

CREATE TABLE trace_feedback (
    project        BIGINT NOT NULL REFERENCES trace_projects (id),
    id             TEXT COLLATE "C" NOT NULL,
    weave_ref      TEXT COLLATE "C" NOT NULL,
    wb_user_id     TEXT COLLATE "C" NOT NULL,
    creator        TEXT COLLATE "C",
    created_at     BIGINT NOT NULL,
    feedback_type  TEXT COLLATE "C" NOT NULL,
    payload        TEXT COLLATE "C" NOT NULL,
    annotation_ref TEXT COLLATE "C",
    runnable_ref   TEXT COLLATE "C",
    call_ref       TEXT COLLATE "C",
    trigger_ref    TEXT COLLATE "C",
    PRIMARY KEY (project, id)
);
CREATE INDEX trace_feedback_by_ref ON trace_feedback (project, weave_ref);
CREATE INDEX trace_feedback_by_created ON trace_feedback (project, created_at);
