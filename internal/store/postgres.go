package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// Postgres is the implementation of Store shared by several flywheel
// nodes: the same queries as SQLite over github.com/jackc/pgx/v5's
// database/sql driver, with row locks where SQLite's single writer
// serialised (claims take jobs FOR UPDATE SKIP LOCKED), leases compared on
// the database server's clock, and NOTIFY on the queue's changes so other
// nodes' queues wake at once (see JobWakeups).
type Postgres struct {
	*sqlDB
	dsn string

	mu       sync.Mutex
	wakeups  chan struct{}
	stop     context.CancelFunc
	listened chan struct{}
}

var _ Database = (*Postgres)(nil)

// jobsChannel is the NOTIFY channel of the job queue.
const jobsChannel = "flywheel_jobs"

var postgresDialect = &dialect{
	name:       "postgres",
	dollar:     true,
	forUpdate:  " FOR UPDATE",
	forShare:   " FOR SHARE",
	skipLocked: " FOR UPDATE SKIP LOCKED",
	nowMS:      "(extract(epoch from clock_timestamp()) * 1000)::bigint",
	lock:       "SELECT pg_advisory_xact_lock(hashtext(?))",
	isUnique:   func(err error) bool { return pgCode(err) == "23505" },
	isForeignKey: func(err error) bool {
		return pgCode(err) == "23503"
	},
	notify: func(ctx context.Context, q queryer) error {
		_, err := q.ExecContext(ctx, "SELECT pg_notify('"+jobsChannel+"', '')")
		return err
	},
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// MaxPostgresConns is the size of a node's connection pool. Each node
// holds at most this many connections (and one more to LISTEN), so N nodes
// need the server's max_connections above N*(MaxPostgresConns+1).
const MaxPostgresConns = 16

// OpenPostgres connects to the PostgreSQL database dsn (a postgres:// URL or
// keyword/value string that pgx understands) and applies pending
// migrations, under an advisory lock so that nodes starting together apply
// each one once.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(MaxPostgresConns)
	db.SetMaxIdleConns(MaxPostgresConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(cctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: connect to %s@%s:%d/%s: %w", cfg.User, cfg.Host, cfg.Port, cfg.Database, err)
	}
	s := &Postgres{sqlDB: newSQLDB(db, postgresDialect), dsn: dsn}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return s, nil
}

// JobWakeups returns a channel that receives when another node (or this
// one) queued or ended a job: a job may have become runnable. It LISTENs on
// a connection of its own, reconnecting after errors; a wake-up lost
// meanwhile is caught by the queue's polling.
func (s *Postgres) JobWakeups() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wakeups == nil {
		s.wakeups = make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		s.listened = make(chan struct{})
		go s.listen(ctx)
	}
	return s.wakeups
}

func (s *Postgres) listen(ctx context.Context) {
	defer close(s.listened)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		slog.Warn("postgres: LISTEN for job wake-ups failed; polling meanwhile", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (s *Postgres) listenOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+jobsChannel); err != nil {
		return err
	}
	connected()
	s.wake() // what changed while not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		s.wake()
	}
}

func (s *Postgres) wake() {
	select {
	case s.wakeups <- struct{}{}:
	default:
	}
}

// Close stops listening and closes the database.
func (s *Postgres) Close() error {
	s.mu.Lock()
	stop, listened := s.stop, s.listened
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-listened
	}
	return s.sqlDB.Close()
}
