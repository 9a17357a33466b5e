package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// CreateFile records an uploaded file whose bytes are already at f.Path.
func (s *SQLite) CreateFile(ctx context.Context, f File) error {
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
func (s *SQLite) FileByID(ctx context.Context, id string) (File, error) {
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
