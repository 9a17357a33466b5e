package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

const modelCols = `m.id, m.entity, m.project, m.name, m.base_model, m.lora, m.run_id, m.created_by, m.created_at,
	COALESCE((SELECT max(c.step) FROM checkpoints c WHERE c.model_id = m.id), -1)`

func scanModel(sc interface{ Scan(...any) error }) (TrainedModel, error) {
	var m TrainedModel
	var lora, created string
	var run sql.NullString
	if err := sc.Scan(&m.ID, &m.Entity, &m.Project, &m.Name, &m.BaseModel, &lora, &run, &m.CreatedBy, &created, &m.LatestStep); err != nil {
		return m, err
	}
	_ = json.Unmarshal([]byte(lora), &m.LoRA)
	if run.Valid {
		m.RunID = &run.String
	}
	m.CreatedAt = parseTime(created)
	return m, nil
}

// CreateModel inserts the model and its first checkpoint.
func (s *sqlDB) CreateModel(ctx context.Context, m TrainedModel, first Checkpoint) (TrainedModel, error) {
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now()
	}
	lora, err := json.Marshal(m.LoRA)
	if err != nil {
		return m, err
	}
	err = s.tx(ctx, func(tx *rtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO models (id, entity, project, name, base_model, lora, run_id, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, m.ID, m.Entity, m.Project, m.Name, m.BaseModel, string(lora), m.RunID, m.CreatedBy, FormatTime(m.CreatedAt))
		if err != nil {
			if s.d.isUnique(err) {
				return fmt.Errorf("model %s/%s/%s exists: %w", m.Entity, m.Project, m.Name, ErrConflict)
			}
			return fmt.Errorf("insert model: %w", err)
		}
		first.ModelID = m.ID
		return s.insertCheckpoint(ctx, tx, &first)
	})
	if err != nil {
		return m, err
	}
	m.LatestStep = first.Step
	return m, nil
}

func (s *sqlDB) insertCheckpoint(ctx context.Context, q queryer, c *Checkpoint) error {
	if c.ID == "" {
		c.ID = NewID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now()
	}
	if c.Metrics == nil {
		c.Metrics = map[string]float64{}
	}
	metrics, err := json.Marshal(c.Metrics)
	if err != nil {
		return fmt.Errorf("checkpoint metrics: %w", err)
	}
	_, err = q.ExecContext(ctx, `INSERT INTO checkpoints (id, model_id, step, dir, metrics, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		c.ID, c.ModelID, c.Step, c.Dir, string(metrics), FormatTime(c.CreatedAt))
	if err != nil {
		if s.d.isUnique(err) {
			return fmt.Errorf("checkpoint step %d exists: %w", c.Step, ErrConflict)
		}
		return fmt.Errorf("insert checkpoint: %w", err)
	}
	return nil
}

// ModelByID returns the model with that id.
func (s *sqlDB) ModelByID(ctx context.Context, id string) (TrainedModel, error) {
	m, err := scanModel(s.db.QueryRowContext(ctx, "SELECT "+modelCols+" FROM models m WHERE m.id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return m, fmt.Errorf("model %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("get model: %w", err)
	}
	return m, nil
}

// ModelByName returns the model entity/project/name.
func (s *sqlDB) ModelByName(ctx context.Context, entity, project, name string) (TrainedModel, error) {
	m, err := scanModel(s.db.QueryRowContext(ctx, "SELECT "+modelCols+" FROM models m WHERE m.entity = ? AND m.project = ? AND m.name = ?", entity, project, name))
	if errors.Is(err, sql.ErrNoRows) {
		return m, fmt.Errorf("model %s/%s/%s: %w", entity, project, name, ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("get model: %w", err)
	}
	return m, nil
}

func inList(n int) string {
	if n == 0 {
		return "(NULL)"
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?,", n), ",") + ")"
}

// ListModels lists all models of the entities, oldest first.
func (s *sqlDB) ListModels(ctx context.Context, entities []string) ([]TrainedModel, error) {
	out, _, err := s.listModels(ctx, entities, Page{Limit: -1})
	return out, err
}

// ListModelsPage lists a page of the entities' models.
func (s *sqlDB) ListModelsPage(ctx context.Context, entities []string, page Page) ([]TrainedModel, bool, error) {
	return s.listModels(ctx, entities, page)
}

func (s *sqlDB) listModels(ctx context.Context, entities []string, page Page) ([]TrainedModel, bool, error) {
	args := make([]any, 0, len(entities)+2)
	for _, e := range entities {
		args = append(args, e)
	}
	q := "SELECT " + modelCols + " FROM models m WHERE m.entity IN " + inList(len(entities))
	all := page.Limit < 0
	where, order, limit, pargs := pageClause(page, "m")
	q += where + order
	args = append(args, pargs...)
	if !all {
		q += fmt.Sprintf(" LIMIT %d", limit+1)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list models: %w", err)
	}
	defer rows.Close()
	var out []TrainedModel
	for rows.Next() {
		m, err := scanModel(rows)
		if err != nil {
			return nil, false, fmt.Errorf("list models: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("list models: %w", err)
	}
	more := false
	if !all && len(out) > limit {
		out, more = out[:limit], true
	}
	return out, more, nil
}

// DeleteModel deletes the model and everything that hangs off it.
func (s *sqlDB) DeleteModel(ctx context.Context, id string) ([]Checkpoint, error) {
	var cks []Checkpoint
	err := s.tx(ctx, func(tx *rtx) error {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM models WHERE id = ?", id).Scan(&n); err != nil {
			return fmt.Errorf("delete model: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("model %s: %w", id, ErrNotFound)
		}
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM jobs WHERE model_id = ? AND status = 'RUNNING'", id).Scan(&n); err != nil {
			return fmt.Errorf("delete model: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("a training job of model %s is running; cancel it first: %w", id, ErrConflict)
		}
		var err error
		cks, err = listCheckpoints(ctx, tx, id, Page{Limit: -1})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM models WHERE id = ?", id); err != nil {
			return fmt.Errorf("delete model: %w", err)
		}
		return nil
	})
	return cks, err
}

const checkpointCols = "id, model_id, step, dir, metrics, created_at"

func scanCheckpoint(sc interface{ Scan(...any) error }) (Checkpoint, error) {
	var c Checkpoint
	var metrics, created string
	if err := sc.Scan(&c.ID, &c.ModelID, &c.Step, &c.Dir, &metrics, &created); err != nil {
		return c, err
	}
	c.Metrics = map[string]float64{}
	_ = json.Unmarshal([]byte(metrics), &c.Metrics)
	c.CreatedAt = parseTime(created)
	return c, nil
}

// CheckpointByStep returns the model's checkpoint of that step.
func (s *sqlDB) CheckpointByStep(ctx context.Context, modelID string, step int) (Checkpoint, error) {
	c, err := scanCheckpoint(s.db.QueryRowContext(ctx, "SELECT "+checkpointCols+" FROM checkpoints WHERE model_id = ? AND step = ?", modelID, step))
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("model %s step %d: %w", modelID, step, ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("get checkpoint: %w", err)
	}
	return c, nil
}

// LatestCheckpoint returns the model's checkpoint of the highest step.
func (s *sqlDB) LatestCheckpoint(ctx context.Context, modelID string) (Checkpoint, error) {
	return latestCheckpoint(ctx, s.db, modelID, "")
}

// latestCheckpoint reads the model's latest checkpoint, locking its row
// with lock (a dialect's forUpdate, or "").
func latestCheckpoint(ctx context.Context, q queryer, modelID, lock string) (Checkpoint, error) {
	c, err := scanCheckpoint(q.QueryRowContext(ctx, "SELECT "+checkpointCols+" FROM checkpoints WHERE model_id = ? ORDER BY step DESC LIMIT 1"+lock, modelID))
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("model %s has no checkpoint: %w", modelID, ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("latest checkpoint: %w", err)
	}
	return c, nil
}

// ListCheckpoints lists a page of the model's checkpoints by creation (and
// so step) order.
func (s *sqlDB) ListCheckpoints(ctx context.Context, modelID string, page Page) ([]Checkpoint, bool, error) {
	cks, err := listCheckpoints(ctx, s.db, modelID, page)
	if err != nil || page.Limit < 0 {
		return cks, false, err
	}
	limit := page.Limit
	if limit <= 0 {
		limit = 20
	}
	if len(cks) > limit {
		return cks[:limit], true, nil
	}
	return cks, false, nil
}

// listCheckpoints fetches up to page.Limit+1 rows (all when Limit < 0).
func listCheckpoints(ctx context.Context, q queryer, modelID string, page Page) ([]Checkpoint, error) {
	where, order, limit, args := pageClause(page, "")
	query := "SELECT " + checkpointCols + " FROM checkpoints WHERE model_id = ?" + where + order
	if page.Limit >= 0 {
		query += fmt.Sprintf(" LIMIT %d", limit+1)
	}
	rows, err := q.QueryContext(ctx, query, append([]any{modelID}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer rows.Close()
	var out []Checkpoint
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteCheckpoints deletes the given steps of a model.
func (s *sqlDB) DeleteCheckpoints(ctx context.Context, modelID string, steps []int) ([]Checkpoint, []int, error) {
	var deleted []Checkpoint
	notFound := []int{}
	err := s.tx(ctx, func(tx *rtx) error {
		seen := map[int]bool{}
		for _, step := range steps {
			if seen[step] {
				continue
			}
			seen[step] = true
			c, err := scanCheckpoint(tx.QueryRowContext(ctx, "SELECT "+checkpointCols+" FROM checkpoints WHERE model_id = ? AND step = ?", modelID, step))
			if errors.Is(err, sql.ErrNoRows) {
				notFound = append(notFound, step)
				continue
			}
			if err != nil {
				return fmt.Errorf("delete checkpoints: %w", err)
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM jobs WHERE model_id = ? AND status = 'RUNNING' AND from_step = ?", modelID, step).Scan(&n); err != nil {
				return fmt.Errorf("delete checkpoints: %w", err)
			}
			if n > 0 {
				return fmt.Errorf("step %d is being trained from by a running job: %w", step, ErrConflict)
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM checkpoints WHERE id = ?", c.ID); err != nil {
				return fmt.Errorf("delete checkpoints: %w", err)
			}
			deleted = append(deleted, c)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return deleted, notFound, nil
}

// LogMetrics merges metrics into the latest checkpoint and the history.
func (s *sqlDB) LogMetrics(ctx context.Context, modelID, split string, metrics map[string]float64) (Checkpoint, error) {
	var c Checkpoint
	err := s.tx(ctx, func(tx *rtx) error {
		var err error
		c, err = latestCheckpoint(ctx, tx, modelID, s.d.forUpdate) // concurrent /log calls merge in turn
		if err != nil {
			return err
		}
		for k, v := range metrics {
			c.Metrics[k] = v
		}
		merged, err := json.Marshal(c.Metrics)
		if err != nil {
			return fmt.Errorf("log metrics: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE checkpoints SET metrics = ? WHERE id = ?", string(merged), c.ID); err != nil {
			return fmt.Errorf("log metrics: %w", err)
		}
		logged, err := json.Marshal(metrics)
		if err != nil {
			return fmt.Errorf("log metrics: %w", err)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO model_metrics (model_id, step, split, metrics, created_at) VALUES (?, ?, ?, ?, ?)",
			modelID, c.Step, split, string(logged), FormatTime(now()))
		if err != nil {
			return fmt.Errorf("log metrics: %w", err)
		}
		return nil
	})
	return c, err
}
