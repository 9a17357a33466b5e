package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// CreateFile records an uploaded file whose bytes are already at f.Path.
func (s *sqlDB) CreateFile(ctx context.Context, f File) error {
	if f.CreatedAt.IsZero() {
		f.CreatedAt = now()
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO files (id, user_id, filename, purpose, bytes, path, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, f.ID, f.UserID, f.Filename, f.Purpose, f.Bytes, f.Path, FormatTime(f.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert file: %w", err)
	}
	return nil
}

// FileByID returns the file record with that id.
func (s *sqlDB) FileByID(ctx context.Context, id string) (File, error) {
	var f File
	var created string
	err := s.db.QueryRowContext(ctx, "SELECT id, user_id, filename, purpose, bytes, path, created_at FROM files WHERE id = ?", id).
		Scan(&f.ID, &f.UserID, &f.Filename, &f.Purpose, &f.Bytes, &f.Path, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return f, fmt.Errorf("file %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return f, fmt.Errorf("get file: %w", err)
	}
	f.CreatedAt = parseTime(created)
	return f, nil
}

// ListFiles lists a page of the user's files in id (creation) order; with
// purpose set, only the files of that purpose.
func (s *sqlDB) ListFiles(ctx context.Context, userID, purpose string, page Page) ([]File, bool, error) {
	where, order, limit, args := pageClause(page, "")
	query := "SELECT id, user_id, filename, purpose, bytes, path, created_at FROM files WHERE user_id = ?"
	qargs := []any{userID}
	if purpose != "" {
		query += " AND purpose = ?"
		qargs = append(qargs, purpose)
	}
	query += where + order + fmt.Sprintf(" LIMIT %d", limit+1)
	rows, err := s.db.QueryContext(ctx, query, append(qargs, args...)...)
	if err != nil {
		return nil, false, fmt.Errorf("list files: %w", err)
	}
	defer rows.Close()
	var out []File
	for rows.Next() {
		var f File
		var created string
		if err := rows.Scan(&f.ID, &f.UserID, &f.Filename, &f.Purpose, &f.Bytes, &f.Path, &created); err != nil {
			return nil, false, fmt.Errorf("list files: %w", err)
		}
		f.CreatedAt = parseTime(created)
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("list files: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// DeleteFile deletes a file's record (ErrNotFound when missing); the caller
// removes its bytes.
func (s *sqlDB) DeleteFile(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, "DELETE FROM files WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("delete file: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("file %s: %w", id, ErrNotFound)
	}
	return nil
}
