package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// Lists are the read-only listings the dashboard needs beyond the
// contract's routes: jobs across models, and one event type across a
// model's jobs (its per-gradient-step history). A Store that implements it
// serves GET /v1/preview/training-jobs and
// GET /v1/preview/models/{id}/events; both databases' stores do.
type Lists interface {
	// ListJobs lists a page of the jobs of the entities' models (of one
	// model when modelID is set), in creation order.
	ListJobs(ctx context.Context, entities []string, modelID string, page Page) ([]Job, bool, error)
	// ListModelEvents lists a page of the events of type typ of all the
	// model's jobs, in creation order.
	ListModelEvents(ctx context.Context, modelID string, typ EventType, page Page) ([]Event, bool, error)
}

var (
	_ Lists = (*SQLite)(nil)
	_ Lists = (*Postgres)(nil)
)

// ListJobs lists a page of the entities' jobs (of one model when modelID is set).
func (s *sqlDB) ListJobs(ctx context.Context, entities []string, modelID string, page Page) ([]Job, bool, error) {
	args := make([]any, 0, len(entities)+3)
	for _, e := range entities {
		args = append(args, e)
	}
	q := "SELECT " + jobCols + " FROM jobs WHERE model_id IN (SELECT id FROM models WHERE entity IN " + inList(len(entities)) + ")"
	if modelID != "" {
		q += " AND model_id = ?"
		args = append(args, modelID)
	}
	where, order, limit, pargs := pageClause(page, "")
	q += where + order + fmt.Sprintf(" LIMIT %d", limit+1)
	rows, err := s.db.QueryContext(ctx, q, append(args, pargs...)...)
	if err != nil {
		return nil, false, fmt.Errorf("list jobs: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, false, fmt.Errorf("list jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("list jobs: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// ListModelEvents lists a page of the events of one type across the model's jobs.
func (s *sqlDB) ListModelEvents(ctx context.Context, modelID string, typ EventType, page Page) ([]Event, bool, error) {
	where, order, limit, args := pageClause(page, "e")
	q := `SELECT e.id, e.job_id, e.type, e.data, e.created_at FROM job_events e
		WHERE e.job_id IN (SELECT id FROM jobs WHERE model_id = ?) AND e.type = ?` + where + order + fmt.Sprintf(" LIMIT %d", limit+1)
	rows, err := s.db.QueryContext(ctx, q, append([]any{modelID, typ}, args...)...)
	if err != nil {
		return nil, false, fmt.Errorf("list model events: %w", err)
	}
	return scanEvents(rows, limit, "list model events")
}

// scanEvents reads event rows (id, job_id, type, data, created_at), of
// which one past limit tells that more follow.
func scanEvents(rows *sql.Rows, limit int, what string) ([]Event, bool, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var data, created string
		if err := rows.Scan(&e.ID, &e.JobID, &e.Type, &data, &created); err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		e.Data = json.RawMessage(data)
		e.CreatedAt = parseTime(created)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}
