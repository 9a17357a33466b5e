package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

const jobCols = `id, model_id, kind, status, request_path, request_bytes, file_id, experimental_config, config,
	error_message, from_step, to_step, metrics, created_by, created_at, training_start, training_end`

func scanJob(sc interface{ Scan(...any) error }) (Job, error) {
	var j Job
	var fileID, errMsg, created, start, end sql.NullString
	var from, to sql.NullInt64
	var exp, cfg, metrics string
	if err := sc.Scan(&j.ID, &j.ModelID, &j.Kind, &j.Status, &j.RequestPath, &j.RequestBytes, &fileID, &exp, &cfg,
		&errMsg, &from, &to, &metrics, &j.CreatedBy, &created, &start, &end); err != nil {
		return j, err
	}
	j.FileID = fileID.String
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
func (s *SQLite) CreateJob(ctx context.Context, j Job) (Job, error) {
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
		if strings.Contains(err.Error(), "FOREIGN KEY") {
			return j, fmt.Errorf("model %s: %w", j.ModelID, ErrNotFound)
		}
		return j, fmt.Errorf("insert job: %w", err)
	}
	return j, nil
}

// JobByID returns the job with that id.
func (s *SQLite) JobByID(ctx context.Context, id string) (Job, error) {
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
func (s *SQLite) ListEvents(ctx context.Context, jobID string, page Page) ([]Event, bool, error) {
	where, order, limit, args := pageClause(page, "")
	q := "SELECT id, job_id, type, data, created_at FROM job_events WHERE job_id = ?" + where + order + fmt.Sprintf(" LIMIT %d", limit+1)
	rows, err := s.db.QueryContext(ctx, q, append([]any{jobID}, args...)...)
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	return scanEvents(rows, limit, "list events")
}

// AppendEvent appends an event to the job's log.
func (s *SQLite) AppendEvent(ctx context.Context, jobID, typ string, data any) (Event, error) {
	return appendEvent(ctx, s.db, jobID, typ, data)
}

func appendEvent(ctx context.Context, q queryer, jobID, typ string, data any) (Event, error) {
	if data == nil {
		data = map[string]any{}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("event %s data: %w", typ, err)
	}
	e := Event{ID: NewID(), JobID: jobID, Type: typ, Data: b, CreatedAt: now()}
	if _, err := q.ExecContext(ctx, "INSERT INTO job_events (id, job_id, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
		e.ID, e.JobID, e.Type, string(b), FormatTime(e.CreatedAt)); err != nil {
		return e, fmt.Errorf("insert event: %w", err)
	}
	return e, nil
}

// ClaimNext marks the oldest runnable job RUNNING.
func (s *SQLite) ClaimNext(ctx context.Context, skip []string) (Job, bool, error) {
	var j Job
	var ok bool
	err := s.tx(ctx, func(tx *sql.Tx) error {
		args := make([]any, 0, len(skip))
		for _, id := range skip {
			args = append(args, id)
		}
		skipSQL := ""
		if len(skip) > 0 {
			skipSQL = " AND j.model_id NOT IN " + inList(len(skip))
		}
		var id string
		err := tx.QueryRowContext(ctx, `SELECT j.id FROM jobs j WHERE j.status = 'QUEUED'`+skipSQL+`
			AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.model_id = j.model_id AND r.status = 'RUNNING')
			AND NOT EXISTS (SELECT 1 FROM jobs e WHERE e.model_id = j.model_id AND e.status = 'QUEUED' AND e.id < j.id)
			ORDER BY j.id LIMIT 1`, args...).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim job: %w", err)
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET status = 'RUNNING', training_start = ?,
			from_step = (SELECT max(step) FROM checkpoints c WHERE c.model_id = jobs.model_id)
			WHERE id = ?`, FormatTime(now()), id)
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

// RequeueRunning re-queues every RUNNING job.
func (s *SQLite) RequeueRunning(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT id FROM jobs WHERE status = 'RUNNING' ORDER BY id")
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
			if err := requeue(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	return ids, err
}

// Requeue puts one RUNNING job back in the queue.
func (s *SQLite) Requeue(ctx context.Context, id string) error {
	return s.tx(ctx, func(tx *sql.Tx) error { return requeue(ctx, tx, id) })
}

func requeue(ctx context.Context, q queryer, id string) error {
	res, err := q.ExecContext(ctx, `UPDATE jobs SET status = 'QUEUED', training_start = NULL, from_step = NULL
		WHERE id = ? AND status = 'RUNNING'`, id)
	if err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("job %s is not running: %w", id, ErrConflict)
	}
	if _, err := q.ExecContext(ctx, "DELETE FROM job_events WHERE job_id = ?", id); err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	return nil
}

// CompleteJob records the job's checkpoint and ends it COMPLETED.
func (s *SQLite) CompleteJob(ctx context.Context, id string, ck Checkpoint, metrics map[string]any) (Checkpoint, error) {
	if metrics == nil {
		metrics = map[string]any{}
	}
	m, err := json.Marshal(metrics)
	if err != nil {
		return ck, fmt.Errorf("job metrics: %w", err)
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'COMPLETED', to_step = ?, metrics = ?, training_end = ?
			WHERE id = ? AND status = 'RUNNING'`, ck.Step, string(m), FormatTime(now()), id)
		if err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("job %s is not running: %w", id, ErrConflict)
		}
		if err := insertCheckpoint(ctx, tx, &ck); err != nil {
			return err
		}
		_, err = appendEvent(ctx, tx, id, "training_ended", map[string]any{"step": ck.Step, "checkpoint_id": ck.ID})
		return err
	})
	return ck, err
}

// FinishJob ends a QUEUED or RUNNING job FAILED or CANCELLED.
func (s *SQLite) FinishJob(ctx context.Context, id, status, message string) error {
	if status != StatusFailed && status != StatusCancelled {
		return fmt.Errorf("finish job: bad status %q", status)
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = ?, error_message = ?, training_end = ?
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
		_, err = appendEvent(ctx, tx, id, "training_failed", map[string]any{"error_message": message})
		return err
	})
}

// QueueStats reports queue depth and the oldest queued job's age.
func (s *SQLite) QueueStats(ctx context.Context) (QueueStats, error) {
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
func (s *SQLite) JobCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, count(*) FROM jobs GROUP BY status")
	if err != nil {
		return nil, fmt.Errorf("job counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int{StatusQueued: 0, StatusRunning: 0, StatusCompleted: 0, StatusFailed: 0, StatusCancelled: 0}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("job counts: %w", err)
		}
		out[st] = n
	}
	return out, rows.Err()
}
