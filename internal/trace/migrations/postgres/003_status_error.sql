-- See sqlite/003_status_error.sql: 1 when summary.status_counts.error is a
-- number > 0, computed at write time.
ALTER TABLE trace_calls ADD COLUMN status_error INTEGER NOT NULL DEFAULT 0;
