package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// StoredResponse is a Responses-API response kept so that
// previous_response_id continues it (internal/serve): the response object
// as answered and the conversation it ends, both JSON, owned by one user.
type StoredResponse struct {
	ID        string
	UserID    string
	Response  []byte
	History   []byte
	CreatedAt time.Time
}

// Responses keeps stored responses in the database, so that every node of
// a shared database and a restarted one continue them.
type Responses interface {
	// PutResponse stores r, then prunes: the user's responses beyond the
	// newest keep, and everyone's older than maxAge.
	PutResponse(ctx context.Context, r StoredResponse, keep int, maxAge time.Duration) error
	// ResponseByID returns the user's response id younger than maxAge
	// (ErrNotFound when missing, older or another user's).
	ResponseByID(ctx context.Context, userID, id string, maxAge time.Duration) (StoredResponse, error)
	// DeleteResponse deletes the user's response id (ErrNotFound when
	// missing or another user's).
	DeleteResponse(ctx context.Context, userID, id string) error
}

var _ Responses = (*sqlDB)(nil)

// PutResponse implements Responses.
func (s *sqlDB) PutResponse(ctx context.Context, r StoredResponse, keep int, maxAge time.Duration) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now()
	}
	// Expired rows go first, everyone's, one pruner at a time (concurrent
	// deletes of overlapping rows could deadlock on PostgreSQL).
	if err := s.tx(ctx, func(tx *rtx) error {
		if err := s.d.serialize(ctx, tx, "responses"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM responses WHERE created_at < ?`, FormatTime(now().Add(-maxAge))); err != nil {
			return fmt.Errorf("prune responses: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	// Then the user's stores, one at a time per user: insert, keep the
	// newest keep.
	return s.tx(ctx, func(tx *rtx) error {
		if err := s.d.serialize(ctx, tx, "responses:"+r.UserID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO responses (id, user_id, response, history, created_at) VALUES (?, ?, ?, ?, ?)`,
			r.ID, r.UserID, string(r.Response), string(r.History), FormatTime(r.CreatedAt)); err != nil {
			return fmt.Errorf("insert response: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM responses WHERE user_id = ? AND id NOT IN (
			SELECT id FROM responses WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?)`, r.UserID, r.UserID, keep); err != nil {
			return fmt.Errorf("prune responses: %w", err)
		}
		return nil
	})
}

// ResponseByID implements Responses.
func (s *sqlDB) ResponseByID(ctx context.Context, userID, id string, maxAge time.Duration) (StoredResponse, error) {
	r := StoredResponse{ID: id, UserID: userID}
	var resp, hist, created string
	err := s.db.QueryRowContext(ctx, `SELECT response, history, created_at FROM responses WHERE id = ? AND user_id = ? AND created_at >= ?`,
		id, userID, FormatTime(now().Add(-maxAge))).Scan(&resp, &hist, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("response %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("get response: %w", err)
	}
	r.Response, r.History, r.CreatedAt = []byte(resp), []byte(hist), parseTime(created)
	return r, nil
}

// DeleteResponse implements Responses.
func (s *sqlDB) DeleteResponse(ctx context.Context, userID, id string) error {
	res, err := s.db.ExecContext(ctx, "DELETE FROM responses WHERE id = ? AND user_id = ?", id, userID)
	if err != nil {
		return fmt.Errorf("delete response: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete response: %w", err)
	} else if n == 0 {
		return fmt.Errorf("response %s: %w", id, ErrNotFound)
	}
	return nil
}
