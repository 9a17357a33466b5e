-- Object and file store (what the Weave SDKs write before an op's first call:
-- the op's code as a file, the op as an object). Both are content-addressed
-- per project: the digest is computed from the value or the bytes.

-- One row per object version. val is the canonical JSON text (keys in the
-- order received); digest is over the key-sorted form (see objects.go).
-- version_index counts the object's versions from 0 in creation order; the
-- latest version is the one with the highest version_index.
CREATE TABLE trace_objects (
    pk                INTEGER PRIMARY KEY,
    project           INTEGER NOT NULL REFERENCES trace_projects (id),
    object_id         TEXT    NOT NULL,
    digest            TEXT    NOT NULL,
    version_index     INTEGER NOT NULL,
    kind              TEXT    NOT NULL,
    base_object_class TEXT,
    leaf_object_class TEXT,
    val               TEXT    NOT NULL,
    size_bytes        INTEGER NOT NULL,
    created_by        TEXT,
    created_at        INTEGER NOT NULL,
    deleted_at        INTEGER
);
CREATE UNIQUE INDEX trace_objects_by_digest ON trace_objects (project, object_id, digest);
CREATE UNIQUE INDEX trace_objects_by_version ON trace_objects (project, object_id, version_index);
CREATE INDEX trace_objects_by_created ON trace_objects (project, created_at);

-- File contents, stored once per (project, digest).
CREATE TABLE trace_files (
    project    INTEGER NOT NULL REFERENCES trace_projects (id),
    digest     TEXT    NOT NULL,
    size_bytes INTEGER NOT NULL,
    content    BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project, digest)
);
