package store

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Unavailable reports whether err says the database server cannot be
// reached or is restarting: a connection refused or broken, PostgreSQL's
// connection-exception class 08 or its shutdown and startup states 57P01,
// 57P02, 57P03, a connection the driver saw close. The chaos soak
// (internal/chaos) restarts the server under load; a request failing so is
// answered 503 (httpx.AsError), to be retried once the server is back.
func Unavailable(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		c := st.SQLState()
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03"
	}
	// pgx marks its connection-level failures (a connection closed or
	// broken mid-query by a server restart) with SafeToRetry.
	var conn interface{ SafeToRetry() bool }
	var op *net.OpError
	// A connection the server closed mid-reply surfaces as pgconn's
	// ErrConnClosed or a bare io.ErrUnexpectedEOF.
	return errors.As(err, &conn) || errors.As(err, &op) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Transient reports whether err is a failure of the database rather than
// of the write: Unavailable, a PostgreSQL transaction aborted to break a
// deadlock or a serialization conflict (40P01, 40001), or SQLite still busy
// or locked by another connection after its busy timeout. The same write
// may succeed when run again; but one whose answer was lost may have
// committed, so a caller that runs it again must first learn whether it did
// (the job queue's completion does, under the run's lease). Constraint
// violations, ErrNotFound, ErrConflict and ErrLeaseLost are not transient.
func Transient(err error) bool {
	if Unavailable(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff // the primary result code of an extended one
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}
