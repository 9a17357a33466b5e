-- status_error is 1 when the summary's status_counts.error is a number > 0
-- (computed at write time by the same code that derives
-- summary.platform.status "descendant_error"), so a sort by status needs no
-- JSON function and agrees with the status a read shows.
ALTER TABLE trace_calls ADD COLUMN status_error INTEGER NOT NULL DEFAULT 0;
UPDATE trace_calls SET status_error = 1
    WHERE summary IS NOT NULL AND json_valid(summary)
    AND json_type(summary, '$.status_counts.error') IN ('integer', 'real')
    AND json_extract(summary, '$.status_counts.error') > 0;
