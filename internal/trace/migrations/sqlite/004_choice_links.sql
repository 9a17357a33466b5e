-- Which recorded call sampled a choice: one row per choice of a traced chat
-- completion that carried logprobs, keyed by the choice's fingerprint
-- (rl.ChoiceFingerprint over its tokens and logprobs). A training job's
-- trajectories carry the same fingerprints, so a dashboard can go from a
-- trained-on choice to the call behind it. Identical samples (same tokens,
-- same logprobs) share a fingerprint; the latest call wins.
CREATE TABLE trace_choice_links (
    fingerprint  TEXT    NOT NULL,
    project      INTEGER NOT NULL REFERENCES trace_projects (id),
    call_id      TEXT    NOT NULL,
    choice_index INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX trace_choice_links_by_fingerprint ON trace_choice_links (fingerprint, created_at);
