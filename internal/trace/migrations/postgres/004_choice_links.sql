-- See sqlite/004_choice_links.sql: which recorded call sampled a choice,
-- keyed by the choice's fingerprint (rl.ChoiceFingerprint).
CREATE TABLE trace_choice_links (
    fingerprint  TEXT    COLLATE "C" NOT NULL,
    project      BIGINT  NOT NULL REFERENCES trace_projects (id),
    call_id      TEXT    COLLATE "C" NOT NULL,
    choice_index INTEGER NOT NULL,
    created_at   BIGINT  NOT NULL
);
CREATE INDEX trace_choice_links_by_fingerprint ON trace_choice_links (fingerprint, created_at);
