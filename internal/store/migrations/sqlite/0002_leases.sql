-- 0002_leases: each claim of a job is a lease (see store.Lease). attempt
-- counts the claims and fences the writes of a run; lease_expires is in
-- milliseconds since the Unix epoch.
ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN lease_owner TEXT;
ALTER TABLE jobs ADD COLUMN lease_expires INTEGER;
