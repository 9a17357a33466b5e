// Package store persists flywheel's control-plane state: users, entities and
// API keys, models and their checkpoints, uploaded files, training jobs and
// their events. It only persists; it knows nothing of HTTP or training.
//
// Handlers and the job queue depend on the small interfaces below (Keys,
// Models, Files, Jobs, or Store for all of them). Two databases implement
// them with one code base (sqlDB and its dialects): SQLite, embedded, for
// one node, and PostgreSQL, shared by several nodes, where each claim of a
// job is a lease (Lease) that fences the writes of its run. Every lookup of
// a missing row returns an error wrapping ErrNotFound.
//
// The bytes the rows point at (checkpoints, request bodies, uploads) go
// through Storage; Layout names them under the data dir.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"flywheel/internal/auth"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrNotFound is returned when the requested row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a write collides with existing state
	// (a duplicate model name, deleting a checkpoint a job trains from, ...).
	ErrConflict = errors.New("conflict")
	// ErrUnauthorized is returned by Authenticate for a missing, unknown or
	// revoked key.
	ErrUnauthorized = errors.New("invalid API key")
	// ErrLeaseLost is returned by the writes of a run whose lease is no
	// longer the job's: the job ended (cancelled) or, its lease having
	// expired, another node claimed it again.
	ErrLeaseLost = errors.New("the job's lease was lost")
)

// JobStatus is a training job's state (api.md's "status"), as River's
// JobState: a job is QUEUED until a worker claims it, RUNNING while a lease
// holds it, and ends COMPLETED, FAILED or CANCELLED. The values are the
// wire's and the database's.
type JobStatus string

// Job statuses.
const (
	StatusQueued    JobStatus = "QUEUED"
	StatusRunning   JobStatus = "RUNNING"
	StatusCompleted JobStatus = "COMPLETED"
	StatusFailed    JobStatus = "FAILED"
	StatusCancelled JobStatus = "CANCELLED"
)

// JobStatuses lists every JobStatus, in the order a job goes through them.
var JobStatuses = []JobStatus{StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled}

// Ended reports whether a job in status s has ended (no worker runs it and
// none will).
func (s JobStatus) Ended() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// JobKind is what a training job trains (api.md's "kind").
type JobKind string

// Job kinds.
const (
	KindRL  JobKind = "rl"  // POST /v1/preview/training-jobs
	KindSFT JobKind = "sft" // POST /v1/preview/sft-training-jobs
)

// EventType is the type of a job event (api.md's job events, in the order
// a job emits them: training_started, gradient_step per step, then exactly
// one of training_ended or training_failed).
type EventType string

// Job event types. The trainer emits the first two; the store appends the
// last two when it ends the job.
const (
	EventTrainingStarted EventType = "training_started"
	EventGradientStep    EventType = "gradient_step"
	EventTrainingEnded   EventType = "training_ended"
	EventTrainingFailed  EventType = "training_failed"
)

// User is a person or service that holds API keys.
type User struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// APIKey is a key's metadata; the key itself is never stored.
type APIKey struct {
	ID        string
	UserID    string
	UserName  string
	Name      string
	Prefix    string // first characters of the key, for listings
	CreatedAt time.Time
	RevokedAt *time.Time
}

// LoRA is a model's adapter shape.
type LoRA struct {
	Rank          int      `json:"rank"`
	Alpha         float64  `json:"alpha"`
	TargetModules []string `json:"target_modules"`
}

// TrainedModel is the record of a model users train (the API's
// /v1/preview/models): a base model plus a LoRA adapter per step, its
// checkpoints.
type TrainedModel struct {
	ID         string
	Entity     string
	Project    string
	Name       string
	BaseModel  string // base model id, its path relative to the models dir
	LoRA       LoRA
	RunID      *string
	CreatedBy  string // user id
	CreatedAt  time.Time
	LatestStep int // step of the latest checkpoint, -1 when it has none
}

// Checkpoint is one saved step of a model.
type Checkpoint struct {
	ID        string
	ModelID   string
	Step      int
	Dir       string // absolute path of the checkpoint folder (PEFT adapter, optimizer state)
	Metrics   map[string]float64
	CreatedAt time.Time
}

// File is an uploaded file (SFT training data).
type File struct {
	ID        string // "file-..."
	UserID    string
	Filename  string
	Purpose   string
	Bytes     int64
	Path      string // absolute path of the stored bytes
	CreatedAt time.Time
}

// Job is a training job record.
type Job struct {
	ID           string
	ModelID      string
	Kind         JobKind
	Status       JobStatus
	RequestPath  string // absolute path of the stored request body
	RequestBytes int64
	FileID       string // SFT: the uploaded data file
	// ExperimentalConfig and Config (SFT; "{}" for RL) are the job's
	// config resolved at submission, every default filled in
	// (rl.ResolveJob): what the record shows and the trainer runs.
	ExperimentalConfig json.RawMessage
	Config             json.RawMessage
	ErrorMessage       string
	FromStep, ToStep   *int
	Metrics            map[string]any
	CreatedBy          string
	CreatedAt          time.Time
	TrainingStart      *time.Time
	TrainingEnd        *time.Time
	// Attempt counts the claims of the job; LeaseOwner is the node that
	// made the last one (see Lease).
	Attempt    int
	LeaseOwner string
}

// Lease is one claim of a RUNNING job by a node. Attempt is the fencing
// token: each claim increments it, and every write of a run (events,
// completion, failure, re-queue) checks that it is still the job's, so a
// node that lost its lease (it stopped renewing it in time, and another
// node claimed the job again) can no longer change the job.
type Lease struct {
	JobID   string
	Owner   string
	Attempt int
}

// Lease returns the lease of the claim that returned j.
func (j Job) Lease() Lease { return Lease{JobID: j.ID, Owner: j.LeaseOwner, Attempt: j.Attempt} }

// Event is one entry of a job's event log.
type Event struct {
	ID        string
	JobID     string
	Type      EventType
	Data      json.RawMessage
	CreatedAt time.Time
}

// Page selects a window of an id-ordered list: items after the exclusive
// cursor After (an id), at most Limit of them, newest first when Desc.
type Page struct {
	After string
	Limit int
	Desc  bool
}

// QueueStats describes the job queue.
type QueueStats struct {
	Queued       int
	Running      int
	OldestQueued *time.Time
}

// Keys manages users, entities, memberships and API keys.
type Keys interface {
	// EnsureUser creates the user and its personal entity (same name) if
	// missing and returns the user.
	EnsureUser(ctx context.Context, name string) (User, error)
	// AddMembership makes the user a member of entity, creating the entity
	// if missing.
	AddMembership(ctx context.Context, userName, entity string) error
	// CreateKey stores a new key for the user. When key is empty a random
	// key is generated. It returns the key's record and the key in clear,
	// which is never retrievable again.
	CreateKey(ctx context.Context, userName, name, key string) (APIKey, string, error)
	// Bootstrap creates userName with the key (generated when empty) in one
	// transaction when the database holds no API key at all; ok is false
	// when it holds one. publish runs inside the transaction.
	Bootstrap(ctx context.Context, userName, keyName, key string, publish func(key string) error) (created string, ok bool, err error)
	// ListKeys lists keys, of one user or of all when userName is empty.
	ListKeys(ctx context.Context, userName string) ([]APIKey, error)
	// RevokeKey revokes the key with the given id or prefix.
	RevokeKey(ctx context.Context, idOrPrefix string) error
	// Authenticate resolves an API key to its principal, or ErrUnauthorized.
	Authenticate(ctx context.Context, key string) (*auth.Principal, error)
}

// Models manages models, checkpoints and their metrics.
type Models interface {
	// CreateModel inserts m and its first checkpoint; ErrConflict when a
	// model of that entity/project/name exists.
	CreateModel(ctx context.Context, m TrainedModel, first Checkpoint) (TrainedModel, error)
	// ModelByID returns the model with that id (ErrNotFound when missing).
	ModelByID(ctx context.Context, id string) (TrainedModel, error)
	// ModelByName returns the model entity/project/name (ErrNotFound when missing).
	ModelByName(ctx context.Context, entity, project, name string) (TrainedModel, error)
	// ListModels lists every model of the given entities, oldest first.
	ListModels(ctx context.Context, entities []string) ([]TrainedModel, error)
	// ListModelsPage is ListModels with cursor paging; it reports whether
	// more items follow.
	ListModelsPage(ctx context.Context, entities []string, page Page) ([]TrainedModel, bool, error)
	// DeleteModel deletes the model, its checkpoints, jobs and metrics and
	// returns the deleted checkpoints (whose folders the caller removes).
	// ErrConflict while a job of the model is running.
	DeleteModel(ctx context.Context, id string) ([]Checkpoint, error)
	// CheckpointByStep returns the model's checkpoint of that step
	// (ErrNotFound when missing).
	CheckpointByStep(ctx context.Context, modelID string, step int) (Checkpoint, error)
	// LatestCheckpoint returns the model's checkpoint of the highest step
	// (ErrNotFound when the model has none).
	LatestCheckpoint(ctx context.Context, modelID string) (Checkpoint, error)
	// ListCheckpoints lists a page of the model's checkpoints in step order.
	ListCheckpoints(ctx context.Context, modelID string, page Page) ([]Checkpoint, bool, error)
	// DeleteCheckpoints deletes the given steps and returns the deleted
	// checkpoints and the steps that did not exist. ErrConflict when one of
	// them is the step a running job trains from.
	DeleteCheckpoints(ctx context.Context, modelID string, steps []int) ([]Checkpoint, []int, error)
	// LogMetrics merges metrics into the latest checkpoint's metrics and
	// appends them to the model's metric history.
	LogMetrics(ctx context.Context, modelID, split string, metrics map[string]float64) (Checkpoint, error)
}

// Files manages uploaded files.
type Files interface {
	// CreateFile records an uploaded file whose bytes are at f.Path.
	CreateFile(ctx context.Context, f File) error
	// FileByID returns the file record (ErrNotFound when missing).
	FileByID(ctx context.Context, id string) (File, error)
	// ListFiles lists a page of the user's files (of one purpose when
	// purpose is set) in creation order.
	ListFiles(ctx context.Context, userID, purpose string, page Page) ([]File, bool, error)
	// DeleteFile deletes a file's record (ErrNotFound when missing).
	DeleteFile(ctx context.Context, id string) error
}

// Jobs manages training jobs, their events and the durable queue.
type Jobs interface {
	// CreateJob inserts j as QUEUED (ErrNotFound when its model is missing).
	CreateJob(ctx context.Context, j Job) (Job, error)
	// JobByID returns the job (ErrNotFound when missing).
	JobByID(ctx context.Context, id string) (Job, error)
	// ListEvents lists a job's events in creation order after the cursor.
	ListEvents(ctx context.Context, jobID string, page Page) ([]Event, bool, error)
	// AppendEvent appends the event id (the caller's NewID) to the log
	// of the job l leases (ErrLeaseLost when l is no longer its lease),
	// unless the log has it: an append retried under its id after a
	// transient failure whose commit went through (its answer lost)
	// writes nothing again.
	AppendEvent(ctx context.Context, l Lease, id string, typ EventType, data any) (Event, error)
	// ClaimNext claims the oldest runnable job for node owner with a lease
	// of ttl and returns it RUNNING: a RUNNING job whose lease expired
	// (its node died; its partial events are discarded), else the oldest
	// QUEUED job of a model that has no RUNNING job and no older QUEUED
	// job, skipping the models in skip. ok is false when none is runnable.
	// FromStep is the step of the model's latest checkpoint. Concurrent
	// claims (other nodes) never return the same job.
	// Among the QUEUED jobs, those of the user (CreatedBy) with the fewest
	// RUNNING jobs go first, so one user's burst does not hold the queue.
	ClaimNext(ctx context.Context, owner string, ttl time.Duration, skip []string) (j Job, ok bool, err error)
	// QueuedJobs counts the QUEUED jobs createdBy submitted (the per-user
	// queue limit).
	QueuedJobs(ctx context.Context, createdBy string) (int, error)
	// RenewLease extends l by ttl from now (ErrLeaseLost when l is no
	// longer the job's lease).
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) error
	// RecordJobConfig sets the experimental_config and config of the job l
	// leases (ErrLeaseLost when l is no longer its lease): a job recorded
	// without its resolved config by an older version gets it at claim.
	RecordJobConfig(ctx context.Context, l Lease, experimentalConfig, config json.RawMessage) error
	// RequeueRunning puts back to QUEUED the RUNNING jobs that no live node
	// runs, discarding their partial events, and returns their ids. Used at
	// start-up. On SQLite (one node) that is every RUNNING job; on a shared
	// database only those whose lease expired.
	RequeueRunning(ctx context.Context) ([]string, error)
	// Requeue puts the job l leases back to QUEUED (shutdown mid-run).
	Requeue(ctx context.Context, l Lease) error
	// LockLease begins the transaction that completes the job l leases: it
	// holds the job's row until Complete or Rollback, after checking that
	// l is still its lease (ErrLeaseLost otherwise). Publishing a
	// checkpoint happens under it, so no other node can claim the job again
	// meanwhile.
	LockLease(ctx context.Context, l Lease) (LeaseTx, error)
	// FinishJob ends a QUEUED or RUNNING job with status FAILED or
	// CANCELLED and appends training_failed carrying message, in one
	// transaction, whoever runs it (a user's cancel). A job already ended
	// is left alone and ErrConflict returned.
	FinishJob(ctx context.Context, id string, status JobStatus, message string) error
	// FailJob ends the job l leases FAILED with training_failed carrying
	// message (ErrLeaseLost when l is no longer its lease).
	FailJob(ctx context.Context, l Lease, message string) error
	// ModelTraining reports whether a job of the model is RUNNING.
	ModelTraining(ctx context.Context, modelID string) (bool, error)
	QueueStats(ctx context.Context) (QueueStats, error)
	// JobCounts returns the number of jobs per status.
	JobCounts(ctx context.Context) (map[JobStatus]int, error)
}

// Store is the whole persistence layer.
type Store interface {
	Keys
	Models
	Files
	Jobs
	// Ping checks the database connection.
	Ping(ctx context.Context) error
	Close() error
}

// NewID returns a new UUIDv7: unique, and sorting by creation time.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// TimeFormat is the wire and storage format of timestamps: RFC 3339 UTC with
// microseconds.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// FormatTime formats t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
