package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

const jobCols = `id, model_id, kind, status, request_path, request_bytes, file_id, experimental_config, config,
	error_message, from_step, to_step, metrics, created_by, created_at, training_start, training_end, attempt, lease_owner`

func scanJob(sc interface{ Scan(...any) error }) (Job, error) {
	var j Job
	var fileID, errMsg, created, start, end, owner sql.NullString
	var from, to sql.NullInt64
	var exp, cfg, metrics string
	if err := sc.Scan(&j.ID, &j.ModelID, &j.Kind, &j.Status, &j.RequestPath, &j.RequestBytes, &fileID, &exp, &cfg,
		&errMsg, &from, &to, &metrics, &j.CreatedBy, &created, &start, &end, &j.Attempt, &owner); err != nil {
		return j, err
	}
	j.FileID = fileID.String
	j.LeaseOwner = owner.String
	j.ErrorMessage = errMsg.String
	j.ExperimentalConfig = json.RawMessage(exp)
	j.Config = json.RawMessage(cfg)
	if from.Valid {
		v := int(from.Int64)
		j.FromStep = &v
	}
	if to.Valid {
		v := int(to.Int64)
		j.ToStep = &v
	}
	j.Metrics = map[string]any{}
	_ = json.Unmarshal([]byte(metrics), &j.Metrics)
	j.CreatedAt = parseTime(created.String)
	j.TrainingStart = parseTimePtr(start)
	j.TrainingEnd = parseTimePtr(end)
	return j, nil
}

func rawOr(b json.RawMessage, def string) string {
	if len(b) == 0 {
		return def
	}
	return string(b)
}

// CreateJob inserts a QUEUED job.
func (s *sqlDB) CreateJob(ctx context.Context, j Job) (Job, error) {
	if j.ID == "" {
		j.ID = NewID()
	}
	j.Status = StatusQueued
	if j.CreatedAt.IsZero() {
		j.CreatedAt = now()
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO jobs (id, model_id, kind, status, request_path, request_bytes, file_id,
		experimental_config, config, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		j.ID, j.ModelID, j.Kind, j.Status, j.RequestPath, j.RequestBytes, nullString(j.FileID),
		rawOr(j.ExperimentalConfig, "{}"), rawOr(j.Config, "{}"), j.CreatedBy, FormatTime(j.CreatedAt))
	if err != nil {
		if s.d.isForeignKey(err) {
			return j, fmt.Errorf("model %s: %w", j.ModelID, ErrNotFound)
		}
		return j, fmt.Errorf("insert job: %w", err)
	}
	if s.d.notify != nil {
		// Wakes the other nodes' queues; the job is safe in its table
		// whatever happens to the wake-up (they also poll).
		_ = s.d.notify(ctx, s.db)
	}
	return j, nil
}

// JobByID returns the job with that id.
func (s *sqlDB) JobByID(ctx context.Context, id string) (Job, error) {
	j, err := scanJob(s.db.QueryRowContext(ctx, "SELECT "+jobCols+" FROM jobs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return j, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return j, fmt.Errorf("get job: %w", err)
	}
	return j, nil
}

// ListEvents lists a page of the job's events in creation order.
func (s *sqlDB) ListEvents(ctx context.Context, jobID string, page Page) ([]Event, bool, error) {
	where, order, limit, args := pageClause(page, "")
	q := "SELECT id, job_id, type, data, created_at FROM job_events WHERE job_id = ?" + where + order + fmt.Sprintf(" LIMIT %d", limit+1)
	rows, err := s.db.QueryContext(ctx, q, append([]any{jobID}, args...)...)
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	return scanEvents(rows, limit, "list events")
}

// AppendEvent appends the event id to the log of the job l leases,
// unless the log has it.
func (s *sqlDB) AppendEvent(ctx context.Context, l Lease, id string, typ EventType, data any) (Event, error) {
	var e Event
	err := s.tx(ctx, func(tx *rtx) error {
		// Shares the job's row with other appends and excludes a claim or
		// an end of the job until commit: no event follows the final one,
		// and none of a lost run survives the claim that discards them.
		if err := s.holdLease(ctx, tx, l, s.d.forShare); err != nil {
			return err
		}
		var err error
		e, err = insertEvent(ctx, tx, id, l.JobID, typ, data)
		return err
	})
	return e, err
}

// holdLease checks that l is the lease of its RUNNING job, locking the
// job's row with lock (a dialect's forUpdate or forShare) until tx ends.
func (s *sqlDB) holdLease(ctx context.Context, tx *rtx, l Lease, lock string) error {
	var attempt int
	err := tx.QueryRowContext(ctx, "SELECT attempt FROM jobs WHERE id = ? AND status = 'RUNNING' AND attempt = ?"+lock, l.JobID, l.Attempt).Scan(&attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("job %s attempt %d: %w", l.JobID, l.Attempt, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("check lease of job %s: %w", l.JobID, err)
	}
	return nil
}

func appendEvent(ctx context.Context, q queryer, jobID string, typ EventType, data any) (Event, error) {
	return insertEvent(ctx, q, NewID(), jobID, typ, data)
}

// insertEvent inserts the event id of the job, unless the log has it.
func insertEvent(ctx context.Context, q queryer, id, jobID string, typ EventType, data any) (Event, error) {
	if data == nil {
		data = map[string]any{}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("event %s data: %w", typ, err)
	}
	e := Event{ID: id, JobID: jobID, Type: typ, Data: b, CreatedAt: now()}
	if _, err := q.ExecContext(ctx, "INSERT INTO job_events (id, job_id, type, data, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
		e.ID, e.JobID, e.Type, string(b), FormatTime(e.CreatedAt)); err != nil {
		return e, fmt.Errorf("insert event: %w", err)
	}
	return e, nil
}

// QueuedJobs counts createdBy's QUEUED jobs.
func (s *sqlDB) QueuedJobs(ctx context.Context, createdBy string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM jobs WHERE created_by = ? AND status = 'QUEUED'", createdBy).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queued jobs: %w", err)
	}
	return n, nil
}

// ClaimNext claims the oldest runnable job for owner (fewest RUNNING jobs
// of its user first among the QUEUED).
func (s *sqlDB) ClaimNext(ctx context.Context, owner string, ttl time.Duration, skip []string) (Job, bool, error) {
	var j Job
	var ok bool
	err := s.tx(ctx, func(tx *rtx) error {
		args := make([]any, 0, len(skip))
		for _, id := range skip {
			args = append(args, id)
		}
		skipSQL := ""
		if len(skip) > 0 {
			skipSQL = " AND j.model_id NOT IN " + inList(len(skip))
		}
		// A job whose node died first: it is older than every QUEUED job
		// of its model, which waits for it.
		var id string
		reclaimed := true
		err := tx.QueryRowContext(ctx, `SELECT j.id FROM jobs j WHERE j.status = 'RUNNING' AND j.lease_expires < `+s.d.nowMS+skipSQL+`
			ORDER BY j.id LIMIT 1`+s.d.skipLocked, args...).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			reclaimed = false
			err = tx.QueryRowContext(ctx, `SELECT j.id FROM jobs j WHERE j.status = 'QUEUED'`+skipSQL+`
				AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.model_id = j.model_id AND r.status = 'RUNNING')
				AND NOT EXISTS (SELECT 1 FROM jobs e WHERE e.model_id = j.model_id AND e.status = 'QUEUED' AND e.id < j.id)
				ORDER BY (SELECT count(*) FROM jobs u WHERE u.created_by = j.created_by AND u.status = 'RUNNING'), j.id LIMIT 1`+s.d.skipLocked, args...).Scan(&id)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim job: %w", err)
		}
		if reclaimed {
			// The dead run's events go, as at a restart: the job starts over.
			if _, err := tx.ExecContext(ctx, "DELETE FROM job_events WHERE job_id = ?", id); err != nil {
				return fmt.Errorf("claim job: %w", err)
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET status = 'RUNNING', training_start = ?, attempt = attempt + 1,
			lease_owner = ?, lease_expires = `+s.d.nowMS+` + ?,
			from_step = (SELECT max(step) FROM checkpoints c WHERE c.model_id = jobs.model_id)
			WHERE id = ?`, FormatTime(now()), owner, ttl.Milliseconds(), id)
		if err != nil {
			return fmt.Errorf("claim job: %w", err)
		}
		j, err = scanJob(tx.QueryRowContext(ctx, "SELECT "+jobCols+" FROM jobs WHERE id = ?", id))
		if err != nil {
			return fmt.Errorf("claim job: %w", err)
		}
		ok = true
		return nil
	})
	return j, ok, err
}

// RenewLease extends l by ttl from the database's now.
func (s *sqlDB) RenewLease(ctx context.Context, l Lease, ttl time.Duration) error {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET lease_expires = `+s.d.nowMS+` + ?
		WHERE id = ? AND status = 'RUNNING' AND attempt = ?`, ttl.Milliseconds(), l.JobID, l.Attempt)
	if err != nil {
		return fmt.Errorf("renew lease of job %s: %w", l.JobID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("job %s attempt %d: %w", l.JobID, l.Attempt, ErrLeaseLost)
	}
	return nil
}

// RecordJobConfig sets the job's configs, fenced by its lease.
func (s *sqlDB) RecordJobConfig(ctx context.Context, l Lease, experimentalConfig, config json.RawMessage) error {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET experimental_config = ?, config = ?
		WHERE id = ? AND status = 'RUNNING' AND attempt = ?`, rawOr(experimentalConfig, "{}"), rawOr(config, "{}"), l.JobID, l.Attempt)
	if err != nil {
		return fmt.Errorf("record config of job %s: %w", l.JobID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("job %s attempt %d: %w", l.JobID, l.Attempt, ErrLeaseLost)
	}
	return nil
}

// RequeueRunning re-queues the RUNNING jobs no live node runs.
func (s *sqlDB) RequeueRunning(ctx context.Context) ([]string, error) {
	var ids []string
	cond := ""
	if !s.d.requeueAll {
		cond = " AND lease_expires < " + s.d.nowMS
	}
	err := s.tx(ctx, func(tx *rtx) error {
		rows, err := tx.QueryContext(ctx, "SELECT id FROM jobs WHERE status = 'RUNNING'"+cond+" ORDER BY id"+s.d.skipLocked)
		if err != nil {
			return fmt.Errorf("requeue: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("requeue: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			if err := s.requeue(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	return ids, err
}

// Requeue puts the job l leases back in the queue.
func (s *sqlDB) Requeue(ctx context.Context, l Lease) error {
	return s.tx(ctx, func(tx *rtx) error {
		if err := s.holdLease(ctx, tx, l, s.d.forUpdate); err != nil {
			return err
		}
		return s.requeue(ctx, tx, l.JobID)
	})
}

func (s *sqlDB) requeue(ctx context.Context, tx *rtx, id string) error {
	res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'QUEUED', training_start = NULL, from_step = NULL,
		lease_owner = NULL, lease_expires = NULL WHERE id = ? AND status = 'RUNNING'`, id)
	if err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("job %s is not running: %w", id, ErrConflict)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM job_events WHERE job_id = ?", id); err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	return s.wake(ctx, tx)
}

// wake notifies the other nodes' queues at commit (PostgreSQL).
func (s *sqlDB) wake(ctx context.Context, tx *rtx) error {
	if s.d.notify == nil {
		return nil
	}
	return s.d.notify(ctx, tx)
}

// LeaseTx is the transaction that completes a leased job (see
// Jobs.LockLease).
type LeaseTx interface {
	// Complete records ck as the job's checkpoint, marks the job COMPLETED
	// and appends training_ended, and commits. On error the transaction
	// stays open (the row stays locked) until Rollback.
	Complete(ctx context.Context, ck Checkpoint, metrics map[string]any) (Checkpoint, error)
	// Rollback ends the transaction without completing the job (a no-op
	// after Complete committed), so defer it.
	Rollback()
}

// leaseTx is the LeaseTx of sqlDB.
type leaseTx struct {
	s    *sqlDB
	tx   *rtx
	l    Lease
	done bool
}

// LockLease locks the job l leases after checking the lease.
func (s *sqlDB) LockLease(ctx context.Context, l Lease) (LeaseTx, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.holdLease(ctx, tx, l, s.d.forUpdate); err != nil {
		_ = tx.tx.Rollback()
		return nil, err
	}
	return &leaseTx{s: s, tx: tx, l: l}, nil
}

// Complete implements LeaseTx.
func (t *leaseTx) Complete(ctx context.Context, ck Checkpoint, metrics map[string]any) (Checkpoint, error) {
	if t.done {
		return ck, errors.New("lease transaction already ended")
	}
	if metrics == nil {
		metrics = map[string]any{}
	}
	m, err := json.Marshal(metrics)
	if err != nil {
		return ck, fmt.Errorf("job metrics: %w", err)
	}
	id := t.l.JobID
	_, err = t.tx.ExecContext(ctx, `UPDATE jobs SET status = 'COMPLETED', to_step = ?, metrics = ?, training_end = ?,
		lease_expires = NULL WHERE id = ?`, ck.Step, string(m), FormatTime(now()), id)
	if err != nil {
		return ck, fmt.Errorf("complete job: %w", err)
	}
	if err := t.s.insertCheckpoint(ctx, t.tx, &ck); err != nil {
		return ck, err
	}
	if _, err := appendEvent(ctx, t.tx, id, EventTrainingEnded, map[string]any{"step": ck.Step, "checkpoint_id": ck.ID}); err != nil {
		return ck, err
	}
	if err := t.s.wake(ctx, t.tx); err != nil {
		return ck, err
	}
	t.done = true
	if err := t.tx.tx.Commit(); err != nil {
		return ck, fmt.Errorf("complete job: commit: %w", err)
	}
	return ck, nil
}

// Rollback implements LeaseTx.
func (t *leaseTx) Rollback() {
	if !t.done {
		t.done = true
		_ = t.tx.tx.Rollback()
	}
}

// FinishJob ends a QUEUED or RUNNING job FAILED or CANCELLED.
func (s *sqlDB) FinishJob(ctx context.Context, id string, status JobStatus, message string) error {
	if status != StatusFailed && status != StatusCancelled {
		return fmt.Errorf("finish job: bad status %q", status)
	}
	return s.tx(ctx, func(tx *rtx) error {
		message := storableText(message)
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = ?, error_message = ?, training_end = ?, lease_expires = NULL
			WHERE id = ? AND status IN ('QUEUED', 'RUNNING')`, status, message, FormatTime(now()), id)
		if err != nil {
			return fmt.Errorf("finish job: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var st string
			if err := tx.QueryRowContext(ctx, "SELECT status FROM jobs WHERE id = ?", id).Scan(&st); errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("job %s: %w", id, ErrNotFound)
			}
			return fmt.Errorf("job %s is already %s: %w", id, st, ErrConflict)
		}
		if _, err := appendEvent(ctx, tx, id, EventTrainingFailed, map[string]any{"error_message": message}); err != nil {
			return err
		}
		return s.wake(ctx, tx)
	})
}

// FailJob ends the job l leases FAILED.
func (s *sqlDB) FailJob(ctx context.Context, l Lease, message string) error {
	return s.tx(ctx, func(tx *rtx) error {
		if err := s.holdLease(ctx, tx, l, s.d.forUpdate); err != nil {
			return err
		}
		message := storableText(message)
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'FAILED', error_message = ?, training_end = ?, lease_expires = NULL
			WHERE id = ?`, message, FormatTime(now()), l.JobID); err != nil {
			return fmt.Errorf("fail job: %w", err)
		}
		if _, err := appendEvent(ctx, tx, l.JobID, EventTrainingFailed, map[string]any{"error_message": message}); err != nil {
			return err
		}
		return s.wake(ctx, tx)
	})
}

// storableText is s as both databases store text: valid UTF-8 without NUL
// (PostgreSQL refuses both), each NUL and each run of invalid bytes
// replaced by U+FFFD. A failure message may quote what a client sent; it
// must never be the reason a job cannot end.
func storableText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// ModelTraining reports whether a job of the model is RUNNING.
func (s *sqlDB) ModelTraining(ctx context.Context, modelID string) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM jobs WHERE model_id = ? AND status = 'RUNNING'", modelID).Scan(&n); err != nil {
		return false, fmt.Errorf("jobs of model %s: %w", modelID, err)
	}
	return n > 0, nil
}

// QueueStats reports queue depth and the oldest queued job's age.
func (s *sqlDB) QueueStats(ctx context.Context) (QueueStats, error) {
	var st QueueStats
	var oldest sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM jobs WHERE status = 'QUEUED'),
		(SELECT count(*) FROM jobs WHERE status = 'RUNNING'),
		(SELECT min(created_at) FROM jobs WHERE status = 'QUEUED')`).Scan(&st.Queued, &st.Running, &oldest)
	if err != nil {
		return st, fmt.Errorf("queue stats: %w", err)
	}
	st.OldestQueued = parseTimePtr(oldest)
	return st, nil
}

// JobCounts counts jobs per status.
func (s *sqlDB) JobCounts(ctx context.Context) (map[JobStatus]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, count(*) FROM jobs GROUP BY status")
	if err != nil {
		return nil, fmt.Errorf("job counts: %w", err)
	}
	defer rows.Close()
	out := make(map[JobStatus]int, len(JobStatuses))
	for _, st := range JobStatuses {
		out[st] = 0
	}
	for rows.Next() {
		var st JobStatus
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("job counts: %w", err)
		}
		out[st] = n
	}
	return out, rows.Err()
}
