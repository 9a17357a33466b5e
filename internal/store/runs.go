package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The training-run API's state (internal/runs): runs and their sequenced
// operations. The store admits operations atomically (idempotency by
// request id, strict sequence order, learner versions reserved at
// admission) and fences the executor's writes with the run's lease.

// Training-run statuses.
const (
	RunOpen    = "open"
	RunClosing = "closing"
	RunClosed  = "closed"
	RunFailed  = "failed"
)

// Training-operation statuses.
const (
	OpAdmitted  = "admitted"
	OpRunning   = "running"
	OpSucceeded = "succeeded"
	OpFailed    = "failed"
	OpCancelled = "cancelled"
)

// Errors of admission. Test with errors.Is / errors.As.
var (
	// ErrRequestReplayed: the request id was used before with other content.
	ErrRequestReplayed = errors.New("request_id was already used with different content")
	// ErrRunNotOpen: the run is closing, closed or failed.
	ErrRunNotOpen = errors.New("the training run is not open")
)

// SequenceError is returned by AdmitOperation for a sequence id other than
// the run's next one.
type SequenceError struct{ Expected, Got int }

func (e *SequenceError) Error() string {
	return fmt.Sprintf("sequence_id must be %d, the run's next sequence id, got %d", e.Expected, e.Got)
}

// TrainingRun is one run of the training-run API.
type TrainingRun struct {
	ID, Entity, CreatedBy  string
	RequestID, Fingerprint string // of the resolve that created it
	RunName                *string
	Spec                   json.RawMessage // as echoed to the client
	InitialState           json.RawMessage // nil: none
	Status                 string
	NextSequence           int
	ProjectedVersion       int
	CommittedVersion       int
	CreatedAt              time.Time
}

// TrainingOperation is one admitted command of a run.
type TrainingOperation struct {
	ID, RunID, RequestID, Fingerprint string
	Sequence                          int
	Kind, Status                      string
	ParentVersion                     int
	ReservedVersion                   *int
	Body                              json.RawMessage
	AdmittedAt                        time.Time
	StartedAt, EndedAt                *time.Time
	CancelRequested                   bool
	EventCursor                       int
	Result                            json.RawMessage // nil: none (or released)
	ResultReleased                    bool
	ErrorCode, ErrorMessage           string
	// TargetModel is the model a publication goes to (resolved at
	// admission, with the caller's rights).
	TargetModel string
}

// OperationOutcome is how an executed operation ended (FinishOperation).
type OperationOutcome struct {
	RunID, OperationID string
	Status             string // OpSucceeded or OpFailed
	Result             json.RawMessage
	ErrorCode, Message string
	// CommitVersion, when set, becomes the run's committed learner version.
	CommitVersion *int
	// FailRun marks the run failed and fails its later operations (a
	// failed learner transition: their parent versions no longer exist).
	FailRun bool
	// Checkpoint, when set, is inserted as a model checkpoint in the same
	// transaction (ErrConflict when the model has that step).
	Checkpoint *Checkpoint
}

// Runs persists the training-run API's runs and operations.
type Runs interface {
	// ResolveRun returns the run created by r.RequestID in r.Entity
	// (ErrRequestReplayed when its fingerprint differs), else the open run
	// of r.Entity named *r.RunName (ErrConflict when its spec differs),
	// else inserts r.
	ResolveRun(ctx context.Context, r TrainingRun) (TrainingRun, error)
	// TrainingRunByID returns a run (ErrNotFound when missing).
	TrainingRunByID(ctx context.Context, id string) (TrainingRun, error)
	// AdmitOperation admits op (ID, RunID, RequestID, Fingerprint,
	// Sequence, Kind, Body) or returns the operation of the same request id
	// (ErrRequestReplayed when its fingerprint differs). transition
	// reserves the next learner version. Errors: ErrRunNotOpen,
	// *SequenceError, ErrNotFound.
	AdmitOperation(ctx context.Context, op TrainingOperation, transition bool) (TrainingOperation, error)
	// TrainingOperationByID returns an operation of a run.
	TrainingOperationByID(ctx context.Context, runID, id string) (TrainingOperation, error)
	// TrainingOperations lists a run's operations with from ≤ sequence < to, in order.
	TrainingOperations(ctx context.Context, runID string, from, to int) ([]TrainingOperation, error)
	// NextPendingOperation is the run's admitted or running operation of
	// the lowest sequence id (ok false: none).
	NextPendingOperation(ctx context.Context, runID string) (TrainingOperation, bool, error)
	// RunsWithPendingOperations lists runs with admitted or running
	// operations whose lease is free, expired or owner's.
	RunsWithPendingOperations(ctx context.Context, owner string, limit int) ([]string, error)
	// AcquireRunLease takes the run's lease for owner when free, expired or
	// already owner's.
	AcquireRunLease(ctx context.Context, runID, owner string, ttl time.Duration) (bool, error)
	// RenewRunLeases extends every lease owner holds.
	RenewRunLeases(ctx context.Context, owner string, ttl time.Duration) error
	// ReleaseRunLease gives the lease back.
	ReleaseRunLease(ctx context.Context, runID, owner string) error
	// ClearRunLeases drops every run lease (one node, at start-up: they
	// belong to a dead process).
	ClearRunLeases(ctx context.Context) error
	// StartOperation marks an operation running, fenced by owner's lease
	// (ErrLeaseLost).
	StartOperation(ctx context.Context, owner, runID, id string) (TrainingOperation, error)
	// FinishOperation records an operation's end, fenced by owner's lease.
	FinishOperation(ctx context.Context, owner string, o OperationOutcome) error
	// CancelOperation cancels an admitted operation (ErrConflict for a
	// learner transition) or flags a running one.
	CancelOperation(ctx context.Context, runID, id string) (TrainingOperation, error)
	// ReleaseResult drops a succeeded operation's result.
	ReleaseResult(ctx context.Context, runID, id string) (TrainingOperation, error)
	// CloseRun closes a run: closed when nothing is pending, else closing.
	CloseRun(ctx context.Context, runID string) (TrainingRun, error)
}

const runCols = `id, entity, created_by, request_id, fingerprint, run_name, spec, initial_state, status,
	next_sequence_id, projected_version, committed_version, created_at`

func scanRun(sc interface{ Scan(...any) error }) (TrainingRun, error) {
	var r TrainingRun
	var name, init sql.NullString
	var spec, created string
	if err := sc.Scan(&r.ID, &r.Entity, &r.CreatedBy, &r.RequestID, &r.Fingerprint, &name, &spec, &init, &r.Status,
		&r.NextSequence, &r.ProjectedVersion, &r.CommittedVersion, &created); err != nil {
		return r, err
	}
	if name.Valid {
		n := name.String
		r.RunName = &n
	}
	r.Spec = json.RawMessage(spec)
	if init.Valid {
		r.InitialState = json.RawMessage(init.String)
	}
	r.CreatedAt = parseTime(created)
	return r, nil
}

const opCols = `id, run_id, request_id, fingerprint, sequence_id, kind, status, parent_version, reserved_version, body,
	admitted_at, started_at, ended_at, cancel_requested, event_cursor, result, result_released, error_code, error_message, target_model`

func scanOp(sc interface{ Scan(...any) error }) (TrainingOperation, error) {
	var o TrainingOperation
	var reserved sql.NullInt64
	var body, admitted string
	var started, ended, result, code, msg, target sql.NullString
	var cancel, released int
	if err := sc.Scan(&o.ID, &o.RunID, &o.RequestID, &o.Fingerprint, &o.Sequence, &o.Kind, &o.Status, &o.ParentVersion,
		&reserved, &body, &admitted, &started, &ended, &cancel, &o.EventCursor, &result, &released, &code, &msg, &target); err != nil {
		return o, err
	}
	if reserved.Valid {
		v := int(reserved.Int64)
		o.ReservedVersion = &v
	}
	o.Body = json.RawMessage(body)
	o.AdmittedAt = parseTime(admitted)
	o.StartedAt = parseTimePtr(started)
	o.EndedAt = parseTimePtr(ended)
	o.CancelRequested = cancel != 0
	if result.Valid {
		o.Result = json.RawMessage(result.String)
	}
	o.ResultReleased = released != 0
	o.ErrorCode, o.ErrorMessage, o.TargetModel = code.String, msg.String, target.String
	return o, nil
}

func nullRaw(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// ResolveRun finds or creates a run.
func (s *sqlDB) ResolveRun(ctx context.Context, r TrainingRun) (TrainingRun, error) {
	var out TrainingRun
	err := s.tx(ctx, func(tx *rtx) error {
		if err := s.d.serialize(ctx, tx, "resolve-run:"+r.Entity); err != nil {
			return err
		}
		got, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM training_runs WHERE entity = ? AND request_id = ?", r.Entity, r.RequestID))
		if err == nil {
			if got.Fingerprint != r.Fingerprint {
				return fmt.Errorf("resolve %s: %w", r.RequestID, ErrRequestReplayed)
			}
			out = got
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("resolve run: %w", err)
		}
		if r.RunName != nil {
			got, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM training_runs WHERE entity = ? AND run_name = ? AND status = 'open' ORDER BY id DESC LIMIT 1", r.Entity, *r.RunName))
			if err == nil {
				if string(got.Spec) != string(r.Spec) {
					return fmt.Errorf("the open run named %q has another spec: %w", *r.RunName, ErrConflict)
				}
				out = got
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("resolve run: %w", err)
			}
		}
		if r.ID == "" {
			r.ID = NewID()
		}
		if r.CreatedAt.IsZero() {
			r.CreatedAt = now()
		}
		r.Status = RunOpen
		var name any
		if r.RunName != nil {
			name = *r.RunName
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO training_runs (id, entity, created_by, request_id, fingerprint, run_name, spec,
			initial_state, status, next_sequence_id, projected_version, committed_version, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?)`, r.ID, r.Entity, r.CreatedBy, r.RequestID, r.Fingerprint, name,
			string(r.Spec), nullRaw(r.InitialState), r.Status, FormatTime(r.CreatedAt))
		if err != nil {
			return fmt.Errorf("insert run: %w", err)
		}
		out = r
		return nil
	})
	return out, err
}

// TrainingRunByID returns a run.
func (s *sqlDB) TrainingRunByID(ctx context.Context, id string) (TrainingRun, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, "SELECT "+runCols+" FROM training_runs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("training run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("training run %s: %w", id, err)
	}
	return r, nil
}

// AdmitOperation admits an operation in sequence.
func (s *sqlDB) AdmitOperation(ctx context.Context, op TrainingOperation, transition bool) (TrainingOperation, error) {
	var out TrainingOperation
	err := s.tx(ctx, func(tx *rtx) error {
		run, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM training_runs WHERE id = ?"+s.d.forUpdate, op.RunID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("training run %s: %w", op.RunID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("admit: %w", err)
		}
		prev, err := scanOp(tx.QueryRowContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE run_id = ? AND request_id = ?", op.RunID, op.RequestID))
		if err == nil {
			if prev.Fingerprint != op.Fingerprint {
				return fmt.Errorf("request %s: %w", op.RequestID, ErrRequestReplayed)
			}
			out = prev
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("admit: %w", err)
		}
		if run.Status != RunOpen {
			return fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrRunNotOpen)
		}
		if op.Sequence != run.NextSequence {
			return &SequenceError{Expected: run.NextSequence, Got: op.Sequence}
		}
		if op.ID == "" {
			op.ID = NewID()
		}
		op.Status = OpAdmitted
		op.AdmittedAt = now()
		op.ParentVersion = run.ProjectedVersion
		op.ReservedVersion = nil
		projected := run.ProjectedVersion
		var reserved any
		if transition {
			v := projected + 1
			op.ReservedVersion = &v
			reserved = v
			projected = v
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO training_operations (id, run_id, request_id, fingerprint, sequence_id, kind,
			status, parent_version, reserved_version, body, admitted_at, target_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			op.ID, op.RunID, op.RequestID, op.Fingerprint, op.Sequence, op.Kind, op.Status, op.ParentVersion, reserved,
			string(op.Body), FormatTime(op.AdmittedAt), nullString(op.TargetModel)); err != nil {
			return fmt.Errorf("insert operation: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE training_runs SET next_sequence_id = ?, projected_version = ? WHERE id = ?",
			run.NextSequence+1, projected, run.ID); err != nil {
			return fmt.Errorf("admit: %w", err)
		}
		out = op
		return nil
	})
	return out, err
}

// TrainingOperationByID returns an operation of a run.
func (s *sqlDB) TrainingOperationByID(ctx context.Context, runID, id string) (TrainingOperation, error) {
	o, err := scanOp(s.db.QueryRowContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE run_id = ? AND id = ?", runID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return o, fmt.Errorf("operation %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return o, fmt.Errorf("operation %s: %w", id, err)
	}
	return o, nil
}

// TrainingOperations lists a run's operations in a sequence range.
func (s *sqlDB) TrainingOperations(ctx context.Context, runID string, from, to int) ([]TrainingOperation, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE run_id = ? AND sequence_id >= ? AND sequence_id < ? ORDER BY sequence_id", runID, from, to)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	defer rows.Close()
	var out []TrainingOperation
	for rows.Next() {
		o, err := scanOp(rows)
		if err != nil {
			return nil, fmt.Errorf("list operations: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// NextPendingOperation returns the run's next operation to execute.
func (s *sqlDB) NextPendingOperation(ctx context.Context, runID string) (TrainingOperation, bool, error) {
	o, err := scanOp(s.db.QueryRowContext(ctx, "SELECT "+opCols+` FROM training_operations WHERE run_id = ?
		AND status IN ('admitted', 'running') ORDER BY sequence_id LIMIT 1`, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return o, false, nil
	}
	if err != nil {
		return o, false, fmt.Errorf("next operation: %w", err)
	}
	return o, true, nil
}

// RunsWithPendingOperations lists runs this node may execute.
func (s *sqlDB) RunsWithPendingOperations(ctx context.Context, owner string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT r.id FROM training_runs r WHERE
		(r.lease_owner IS NULL OR r.lease_owner = ? OR r.lease_expires < `+s.d.nowMS+`)
		AND EXISTS (SELECT 1 FROM training_operations o WHERE o.run_id = r.id AND o.status IN ('admitted', 'running'))
		ORDER BY r.id LIMIT ?`, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("pending runs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("pending runs: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// AcquireRunLease takes a run's lease.
func (s *sqlDB) AcquireRunLease(ctx context.Context, runID, owner string, ttl time.Duration) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE training_runs SET lease_owner = ?, lease_expires = `+s.d.nowMS+` + ?
		WHERE id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_expires < `+s.d.nowMS+`)`,
		owner, ttl.Milliseconds(), runID, owner)
	if err != nil {
		return false, fmt.Errorf("lease run %s: %w", runID, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// RenewRunLeases extends owner's leases.
func (s *sqlDB) RenewRunLeases(ctx context.Context, owner string, ttl time.Duration) error {
	_, err := s.db.ExecContext(ctx, `UPDATE training_runs SET lease_expires = `+s.d.nowMS+` + ? WHERE lease_owner = ?`, ttl.Milliseconds(), owner)
	if err != nil {
		return fmt.Errorf("renew run leases: %w", err)
	}
	return nil
}

// ReleaseRunLease gives a lease back.
func (s *sqlDB) ReleaseRunLease(ctx context.Context, runID, owner string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE training_runs SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_owner = ?`, runID, owner)
	if err != nil {
		return fmt.Errorf("release run lease: %w", err)
	}
	return nil
}

// ClearRunLeases drops every lease.
func (s *sqlDB) ClearRunLeases(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `UPDATE training_runs SET lease_owner = NULL, lease_expires = NULL WHERE lease_owner IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("clear run leases: %w", err)
	}
	return nil
}

// holdRunLease checks, locking the run's row, that owner holds its lease.
func (s *sqlDB) holdRunLease(ctx context.Context, tx *rtx, runID, owner string) (TrainingRun, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM training_runs WHERE id = ? AND lease_owner = ? AND lease_expires >= "+s.d.nowMS+s.d.forUpdate, runID, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("training run %s: %w", runID, ErrLeaseLost)
	}
	if err != nil {
		return r, fmt.Errorf("check lease of run %s: %w", runID, err)
	}
	return r, nil
}

// StartOperation marks an operation running.
func (s *sqlDB) StartOperation(ctx context.Context, owner, runID, id string) (TrainingOperation, error) {
	var out TrainingOperation
	err := s.tx(ctx, func(tx *rtx) error {
		if _, err := s.holdRunLease(ctx, tx, runID, owner); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE training_operations SET status = 'running', started_at = COALESCE(started_at, ?),
			event_cursor = event_cursor + 1 WHERE run_id = ? AND id = ? AND status IN ('admitted', 'running')`, FormatTime(now()), runID, id); err != nil {
			return fmt.Errorf("start operation: %w", err)
		}
		o, err := scanOp(tx.QueryRowContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE run_id = ? AND id = ?", runID, id))
		if err != nil {
			return fmt.Errorf("start operation: %w", err)
		}
		out = o
		return nil
	})
	return out, err
}

// FinishOperation records an operation's end.
func (s *sqlDB) FinishOperation(ctx context.Context, owner string, o OperationOutcome) error {
	return s.tx(ctx, func(tx *rtx) error {
		run, err := s.holdRunLease(ctx, tx, o.RunID, owner)
		if err != nil {
			return err
		}
		if o.Checkpoint != nil {
			if err := s.insertCheckpoint(ctx, tx, o.Checkpoint); err != nil {
				return err
			}
		}
		end := FormatTime(now())
		var code, msg any
		if o.Status != OpSucceeded {
			code, msg = o.ErrorCode, o.Message
		}
		if _, err := tx.ExecContext(ctx, `UPDATE training_operations SET status = ?, ended_at = ?, result = ?, error_code = ?,
			error_message = ?, event_cursor = event_cursor + 1 WHERE run_id = ? AND id = ?`,
			o.Status, end, nullRaw(o.Result), code, msg, o.RunID, o.OperationID); err != nil {
			return fmt.Errorf("finish operation: %w", err)
		}
		if o.CommitVersion != nil {
			if _, err := tx.ExecContext(ctx, "UPDATE training_runs SET committed_version = ? WHERE id = ?", *o.CommitVersion, run.ID); err != nil {
				return fmt.Errorf("finish operation: %w", err)
			}
			// The bodies before a committed version are never read again
			// (the learner is rebuilt from that version on): only their
			// fingerprints stay, for replayed request ids.
			if _, err := tx.ExecContext(ctx, "UPDATE training_operations SET body = '' WHERE run_id = ? AND sequence_id < (SELECT sequence_id FROM training_operations WHERE id = ?) AND body <> ''",
				run.ID, o.OperationID); err != nil {
				return fmt.Errorf("finish operation: %w", err)
			}
		}
		if o.FailRun {
			if _, err := tx.ExecContext(ctx, `UPDATE training_operations SET status = 'failed', ended_at = ?, error_code = 'run_failed',
				error_message = 'an earlier learner transition of the run failed', event_cursor = event_cursor + 1
				WHERE run_id = ? AND status IN ('admitted', 'running')`, end, run.ID); err != nil {
				return fmt.Errorf("fail run: %w", err)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE training_runs SET status = 'failed' WHERE id = ?", run.ID); err != nil {
				return fmt.Errorf("fail run: %w", err)
			}
			return nil
		}
		return s.settleClosing(ctx, tx, run.ID)
	})
}

// settleClosing closes a closing run that has nothing pending.
func (s *sqlDB) settleClosing(ctx context.Context, tx *rtx, runID string) error {
	_, err := tx.ExecContext(ctx, `UPDATE training_runs SET status = 'closed' WHERE id = ? AND status = 'closing'
		AND NOT EXISTS (SELECT 1 FROM training_operations o WHERE o.run_id = ? AND o.status IN ('admitted', 'running'))`, runID, runID)
	if err != nil {
		return fmt.Errorf("close run: %w", err)
	}
	return nil
}

// CancelOperation cancels or flags an operation.
func (s *sqlDB) CancelOperation(ctx context.Context, runID, id string) (TrainingOperation, error) {
	var out TrainingOperation
	err := s.tx(ctx, func(tx *rtx) error {
		o, err := scanOp(tx.QueryRowContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE run_id = ? AND id = ?"+s.d.forUpdate, runID, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("operation %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		switch {
		case o.Status == OpAdmitted && o.ReservedVersion != nil:
			return fmt.Errorf("operation %s reserves learner version %d, which later operations build on: %w", id, *o.ReservedVersion, ErrConflict)
		case o.Status == OpAdmitted:
			if _, err := tx.ExecContext(ctx, `UPDATE training_operations SET status = 'cancelled', cancel_requested = 1, ended_at = ?,
				event_cursor = event_cursor + 1 WHERE id = ?`, FormatTime(now()), id); err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
			if err := s.settleClosing(ctx, tx, runID); err != nil {
				return err
			}
		case o.Status == OpRunning:
			if _, err := tx.ExecContext(ctx, `UPDATE training_operations SET cancel_requested = 1 WHERE id = ?`, id); err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
		}
		out, err = scanOp(tx.QueryRowContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE id = ?", id))
		return err
	})
	return out, err
}

// ReleaseResult drops a succeeded operation's result.
func (s *sqlDB) ReleaseResult(ctx context.Context, runID, id string) (TrainingOperation, error) {
	var out TrainingOperation
	err := s.tx(ctx, func(tx *rtx) error {
		o, err := scanOp(tx.QueryRowContext(ctx, "SELECT "+opCols+" FROM training_operations WHERE run_id = ? AND id = ?"+s.d.forUpdate, runID, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("operation %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		if o.Status != OpSucceeded {
			return fmt.Errorf("operation %s is %s and has no result: %w", id, o.Status, ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE training_operations SET result = NULL, result_released = 1 WHERE id = ?", id); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		o.Result, o.ResultReleased = nil, true
		out = o
		return nil
	})
	return out, err
}

// CloseRun closes a run.
func (s *sqlDB) CloseRun(ctx context.Context, runID string) (TrainingRun, error) {
	var out TrainingRun
	err := s.tx(ctx, func(tx *rtx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE training_runs SET status = 'closing' WHERE id = ? AND status = 'open'", runID); err != nil {
			return fmt.Errorf("close run: %w", err)
		}
		if err := s.settleClosing(ctx, tx, runID); err != nil {
			return err
		}
		r, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM training_runs WHERE id = ?", runID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("training run %s: %w", runID, ErrNotFound)
		}
		out = r
		return err
	})
	return out, err
}

var _ Runs = (*sqlDB)(nil)
