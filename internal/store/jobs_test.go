package store_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// pgNodes opens n stores on the PostgreSQL database dsn, as n nodes would.
func pgNodes(t testing.TB, dsn string, n int) []*store.Postgres {
	t.Helper()
	var nodes []*store.Postgres
	for range n {
		st, err := store.OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		nodes = append(nodes, st)
	}
	return nodes
}

func newModel(t *testing.T, st store.Database, name string) store.TrainedModel {
	t.Helper()
	ctx := context.Background()
	if _, err := st.EnsureUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	m, err := st.CreateModel(ctx, store.TrainedModel{ID: store.NewID(), Entity: "ann", Project: "p", Name: name, BaseModel: "b"}, store.Checkpoint{Step: 0, Dir: "/d/0"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// claimedJob creates model "m" and an RL job of it, and claims the job as
// node-a (attempt 1, running), for an hour.
func claimedJob(t *testing.T, st store.Database) (store.TrainedModel, store.Job, store.Job) {
	t.Helper()
	ctx := context.Background()
	m := newModel(t, st, "m")
	job, err := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	a, ok, err := st.ClaimNext(ctx, "node-a", time.Hour, nil)
	if err != nil || !ok || a.ID != job.ID || a.Attempt != 1 || a.LeaseOwner != "node-a" || a.Status != store.StatusRunning {
		t.Fatalf("claim: %+v %v %v", a, ok, err)
	}
	return m, job, a
}

// A lease that expires is claimed again by another node, and every write of
// the run that lost it is refused: events, renewal, completion, failure,
// re-queue. The new run's completion yields the one new step.
func TestLeaseExpiryAndFencing(t *testing.T) { backends(t, testLeaseExpiryAndFencing) }

func testLeaseExpiryAndFencing(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	m, job, a := claimedJob(t, st)
	if _, err := st.AppendEvent(ctx, a.Lease(), store.NewID(), "training_started", map[string]any{"num_sequences": 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.RenewLease(ctx, a.Lease(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := st.ClaimNext(ctx, "node-b", time.Hour, nil); ok {
		t.Fatal("a live lease was claimed")
	}
	// Node a stops renewing; once its lease has expired (set in the past on
	// the database's clock, not waited for) node b takes over.
	if err := st.RenewLease(ctx, a.Lease(), -time.Second); err != nil {
		t.Fatal(err)
	}
	b, ok, err := st.ClaimNext(ctx, "node-b", time.Hour, nil)
	if err != nil || !ok || b.ID != job.ID || b.Attempt != 2 || b.LeaseOwner != "node-b" || *b.FromStep != 0 {
		t.Fatalf("reclaim: %+v %v %v", b, ok, err)
	}
	if evs, _, _ := st.ListEvents(ctx, job.ID, store.Page{}); len(evs) != 0 {
		t.Errorf("the lost run's %d events survive its reclaim", len(evs))
	}
	lost := a.Lease()
	if _, err := st.AppendEvent(ctx, lost, store.NewID(), "gradient_step", nil); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("event of a lost lease: %v", err)
	}
	if err := st.RenewLease(ctx, lost, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("renew a lost lease: %v", err)
	}
	if _, err := completeJob(ctx, st, lost, store.Checkpoint{ModelID: m.ID, Step: 1, Dir: "/a/1"}, nil); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("complete with a lost lease: %v", err)
	}
	if err := st.FailJob(ctx, lost, "x"); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("fail with a lost lease: %v", err)
	}
	if err := st.Requeue(ctx, lost); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("requeue with a lost lease: %v", err)
	}
	if _, err := st.AppendEvent(ctx, b.Lease(), store.NewID(), "training_started", map[string]any{"num_sequences": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := completeJob(ctx, st, b.Lease(), store.Checkpoint{ModelID: m.ID, Step: 1, Dir: "/b/1"}, nil); err != nil {
		t.Fatal(err)
	}
	cks, _, _ := st.ListCheckpoints(ctx, m.ID, store.Page{Limit: -1})
	if len(cks) != 2 || cks[1].Step != 1 || cks[1].Dir != "/b/1" {
		t.Errorf("checkpoints %+v", cks)
	}
	evs, _, _ := st.ListEvents(ctx, job.ID, store.Page{})
	if len(evs) != 2 || evs[0].Type != "training_started" || evs[1].Type != "training_ended" {
		t.Errorf("events %+v", evs)
	}
	// Ended: no lease of it is current any more, not even the last one.
	if _, err := st.AppendEvent(ctx, b.Lease(), store.NewID(), "gradient_step", nil); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("event after the end: %v", err)
	}
	// A user's cancel ends a running job; its run's lease is lost with it.
	j2, _ := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r2"})
	c, ok, _ := st.ClaimNext(ctx, "node-a", time.Hour, nil)
	if !ok || c.ID != j2.ID || *c.FromStep != 1 {
		t.Fatalf("claim after completion: %+v", c)
	}
	if err := st.FinishJob(ctx, j2.ID, store.StatusCancelled, "cancelled"); err != nil {
		t.Fatal(err)
	}
	if err := st.RenewLease(ctx, c.Lease(), time.Hour); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("renew a cancelled job's lease: %v", err)
	}
}

// At start-up a shared database re-queues only the jobs whose lease
// expired (their node is gone), SQLite every RUNNING job (one node).
func TestRequeueRunning(t *testing.T) { backends(t, testRequeueRunning) }

func testRequeueRunning(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	live := newModel(t, st, "live")
	dead := newModel(t, st, "dead")
	jl, _ := st.CreateJob(ctx, store.Job{ModelID: live.ID, Kind: store.KindRL, RequestPath: "/r"})
	jd, _ := st.CreateJob(ctx, store.Job{ModelID: dead.ID, Kind: store.KindRL, RequestPath: "/r"})
	if _, ok, _ := st.ClaimNext(ctx, "node-a", time.Hour, []string{dead.ID}); !ok {
		t.Fatal("no claim")
	}
	if _, ok, _ := st.ClaimNext(ctx, "node-b", time.Millisecond, []string{live.ID}); !ok {
		t.Fatal("no claim")
	}
	time.Sleep(20 * time.Millisecond)
	ids, err := st.RequeueRunning(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{jd.ID}
	if !st.Shared() {
		want = []string{jl.ID, jd.ID}
		sort.Strings(want)
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("re-queued %v, want %v", ids, want)
	}
	if j, _ := st.JobByID(ctx, jl.ID); st.Shared() && (j.Status != store.StatusRunning || j.LeaseOwner != "node-a") {
		t.Errorf("a live node's job was re-queued: %+v", j)
	}
}

// Nodes competing for jobs (four store instances on one database, several
// claimers each) never run one job twice, never run two jobs of a model at
// once, and run each model's jobs in submission order.
func TestConcurrentClaims(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testConcurrentClaims(t, []store.Database{tempSQLite(t)})
	})
	t.Run("postgres", func(t *testing.T) {
		testConcurrentClaims(t, pgNodes(t, pgtest.DSN(t), 4))
	})
}

func testConcurrentClaims[S store.Database](t *testing.T, nodes []S) {
	ctx := context.Background()
	const models, perModel = 6, 8
	var ms []store.TrainedModel
	order := map[string][]string{} // model -> job ids in submission order
	for i := range models {
		m := newModel(t, nodes[0], fmt.Sprintf("m%d", i))
		ms = append(ms, m)
	}
	for range perModel {
		for _, m := range ms {
			j, err := nodes[0].CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
			if err != nil {
				t.Fatal(err)
			}
			order[m.ID] = append(order[m.ID], j.ID)
		}
	}
	var mu sync.Mutex
	running := map[string]string{} // model -> job running
	var done []store.Job
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for n, st := range nodes {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("node-%d-%d", n, w)
				for idle := 0; idle < 50; {
					j, ok, err := st.ClaimNext(ctx, owner, time.Hour, nil)
					if err != nil {
						errc <- err
						return
					}
					if !ok {
						idle++
						time.Sleep(2 * time.Millisecond)
						continue
					}
					idle = 0
					mu.Lock()
					if other, busy := running[j.ModelID]; busy {
						errc <- fmt.Errorf("job %s claimed while %s of its model runs", j.ID, other)
					}
					running[j.ModelID] = j.ID
					done = append(done, j)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					delete(running, j.ModelID)
					mu.Unlock()
					if _, err := completeJob(ctx, st, j.Lease(), store.Checkpoint{ModelID: j.ModelID, Step: *j.FromStep + 1, Dir: "/d"}, nil); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if len(done) != models*perModel {
		t.Fatalf("%d claims of %d jobs", len(done), models*perModel)
	}
	got := map[string][]string{}
	for _, j := range done {
		got[j.ModelID] = append(got[j.ModelID], j.ID)
	}
	for _, m := range ms {
		if fmt.Sprint(got[m.ID]) != fmt.Sprint(order[m.ID]) {
			t.Errorf("model %s ran %v, submitted %v", m.Name, got[m.ID], order[m.ID])
		}
		if latest, _ := nodes[0].LatestCheckpoint(ctx, m.ID); latest.Step != perModel {
			t.Errorf("model %s at step %d, want %d", m.Name, latest.Step, perModel)
		}
	}
}

// Nodes starting together on an empty database migrate it once.
func TestPostgresConcurrentMigrations(t *testing.T) {
	dsn := pgtest.DSN(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := store.OpenPostgres(context.Background(), dsn)
			if err == nil {
				_, _, err = st.Bootstrap(context.Background(), "admin", "bootstrap", "", nil)
				st.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := st.ListKeys(context.Background(), "")
	if err != nil || len(keys) != 1 {
		t.Errorf("%d bootstrap keys after concurrent starts (%v)", len(keys), err)
	}
}

// A completion holds the job's row: while it publishes, another node's
// claim skips the job even though its lease expired, so the step cannot be
// published twice.
func TestPostgresLockLeaseExcludesReclaim(t *testing.T) {
	ctx := context.Background()
	nodes := pgNodes(t, pgtest.DSN(t), 2)
	a, b := nodes[0], nodes[1]
	m := newModel(t, a, "m")
	if _, err := a.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"}); err != nil {
		t.Fatal(err)
	}
	j, ok, err := a.ClaimNext(ctx, "node-a", 50*time.Millisecond, nil)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	lt, err := a.LockLease(ctx, j.Lease())
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Rollback()
	time.Sleep(100 * time.Millisecond) // expired, but held
	if c, ok, err := b.ClaimNext(ctx, "node-b", time.Hour, nil); ok || err != nil {
		t.Fatalf("claimed a job under completion: %+v %v", c, err)
	}
	if _, err := lt.Complete(ctx, store.Checkpoint{ModelID: m.ID, Step: 1, Dir: "/a/1"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.ClaimNext(ctx, "node-b", time.Hour, nil); ok {
		t.Error("claimed a completed job")
	}
}

// A job queued on one node wakes the queues of the others at once.
func TestPostgresJobWakeups(t *testing.T) {
	ctx := context.Background()
	nodes := pgNodes(t, pgtest.DSN(t), 2)
	a, b := nodes[0], nodes[1]
	m := newModel(t, a, "m")
	wake := b.JobWakeups()
	select { // the wake-up every (re)connection sends
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up on LISTEN")
	}
	if _, err := a.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("a job queued on node a did not wake node b")
	}
}

// A failure message is stored whatever bytes it quotes (PostgreSQL refuses
// NUL and invalid UTF-8 in text): the job ends.
func TestFailureMessageAnyBytes(t *testing.T) { backends(t, testFailureMessageAnyBytes) }

func testFailureMessageAnyBytes(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	m := newModel(t, st, "m")
	j1, _ := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
	c, _, _ := st.ClaimNext(ctx, "node-a", time.Hour, nil)
	if err := st.FailJob(ctx, c.Lease(), "bad token \x00 in \xff\xfe"); err != nil {
		t.Fatal(err)
	}
	j2, _ := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
	if err := st.FinishJob(ctx, j2.ID, store.StatusCancelled, "\x00"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{j1.ID: "bad token \uFFFD in \uFFFD", j2.ID: "\uFFFD"} {
		if j, _ := st.JobByID(ctx, id); j.ErrorMessage != want || (j.Status != store.StatusFailed && j.Status != store.StatusCancelled) {
			t.Errorf("job %s %q, want %q", j.Status, j.ErrorMessage, want)
		}
	}
}

// The dashboard's listings answer the same on both databases.
func TestLists(t *testing.T) { backends(t, testLists) }

func testLists(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	lists, ok := st.(store.Lists)
	if !ok {
		t.Fatalf("%s store has no dashboard listings", st.Dialect())
	}
	m := newModel(t, st, "m")
	j1, _ := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
	j2, _ := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
	c, _, _ := st.ClaimNext(ctx, "node-a", time.Hour, nil)
	for range 3 {
		if _, err := st.AppendEvent(ctx, c.Lease(), store.NewID(), "gradient_step", map[string]any{"loss": 1}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, more, err := lists.ListJobs(ctx, []string{"ann"}, "", store.Page{Limit: 1})
	if err != nil || !more || len(jobs) != 1 || jobs[0].ID != j1.ID {
		t.Errorf("ListJobs page 1: %v %v %v", jobs, more, err)
	}
	jobs, more, _ = lists.ListJobs(ctx, []string{"ann"}, m.ID, store.Page{Limit: 1, After: j1.ID})
	if more || len(jobs) != 1 || jobs[0].ID != j2.ID {
		t.Errorf("ListJobs page 2: %v %v", jobs, more)
	}
	if jobs, _, _ := lists.ListJobs(ctx, []string{"bo"}, "", store.Page{}); len(jobs) != 0 {
		t.Errorf("another entity lists %d jobs", len(jobs))
	}
	evs, more, err := lists.ListModelEvents(ctx, m.ID, "gradient_step", store.Page{Limit: 2})
	if err != nil || !more || len(evs) != 2 {
		t.Errorf("ListModelEvents: %d %v %v", len(evs), more, err)
	}
}

// The queue is fair between users: among runnable QUEUED jobs, those of the
// user with the fewest RUNNING jobs go first, so a user who queued many jobs
// first does not hold back another's; QueuedJobs counts a user's queue.
func TestClaimFairBetweenUsers(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testClaimFair(t, tempSQLite(t)) })
	t.Run("postgres", func(t *testing.T) {
		testClaimFair(t, pgNodes(t, pgtest.DSN(t), 1)[0])
	})
}

func testClaimFair[S store.Database](t *testing.T, st S) {
	ctx := context.Background()
	var users []string
	for i, user := range []string{"a", "a", "a", "b"} {
		m := newModel(t, st, fmt.Sprintf("fair%d", i))
		if _, err := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r", CreatedBy: user}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.QueuedJobs(ctx, "a"); err != nil || n != 3 {
		t.Fatalf("QueuedJobs(a) = %d, %v; want 3", n, err)
	}
	for range 4 {
		j, ok, err := st.ClaimNext(ctx, "node", time.Hour, nil)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		users = append(users, j.CreatedBy)
	}
	if got := strings.Join(users, ""); got != "abaa" {
		t.Fatalf("claimed in the order %s, want abaa (b's job before a's second)", got)
	}
	if n, err := st.QueuedJobs(ctx, "a"); err != nil || n != 0 {
		t.Fatalf("QueuedJobs(a) = %d, %v; want 0", n, err)
	}
}

// tempSQLite opens a fresh SQLite database, closed when t ends.
func tempSQLite(t *testing.T) *store.SQLite {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), t.TempDir()+"/flywheel.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// An event appended again under its id (a retry after a transient failure
// whose commit went through) is in the job's log once, with its first
// data; an event of a lost lease is refused as any.
func TestAppendEventSameID(t *testing.T) { backends(t, testAppendEventSameID) }

func testAppendEventSameID(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	_, job, a := claimedJob(t, st)
	id := store.NewID()
	for i := range 2 {
		if _, err := st.AppendEvent(ctx, a.Lease(), id, "gradient_step", map[string]any{"try": i}); err != nil {
			t.Fatal(err)
		}
	}
	evs, _, err := st.ListEvents(ctx, job.ID, store.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].ID != id || string(evs[0].Data) != `{"try":0}` {
		t.Fatalf("events %+v, want the one of id %s with its first data", evs, id)
	}
	lost := a.Lease()
	lost.Attempt++
	if _, err := st.AppendEvent(ctx, lost, store.NewID(), "gradient_step", nil); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("append under a lost lease: %v, want ErrLeaseLost", err)
	}
}
