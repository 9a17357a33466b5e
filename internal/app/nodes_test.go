package app_test

import (
	"net/http"
	"testing"
	"time"

	"flywheel/internal/app"
	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
)

// Two nodes built by app.New on one PostgreSQL database and one data dir:
// a key revoked through one node stops working on the other within the
// auth cache's 5 seconds; an API-only node (Workers < 0) serves but runs no
// job.
func TestTwoNodesShareKeys(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	a := newApp(t, app.Config{DataDir: dir, Database: dsn, NodeID: "a", Workers: jobs.DefaultWorkers})
	defer a.Close()
	b := newApp(t, app.Config{DataDir: dir, Database: dsn, NodeID: "b", Workers: 0})
	defer b.Close()
	if b.Queue.Workers() != 0 {
		t.Errorf("API-only node has %d workers", b.Queue.Workers())
	}
	urlA, key := serveApp(t, a)
	urlB, _ := serveApp(t, b)
	mustDo(t, urlB, key, "GET", "/v1/models", "") // a key made on A works on B (and is cached there)

	if err := a.Store.RevokeKey(t.Context(), key[:11]); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	status := func(url string) int {
		req, _ := http.NewRequest("GET", url+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for status(urlB) != http.StatusUnauthorized {
		if time.Since(revoked) > 6*time.Second {
			t.Fatal("a key revoked on node A still works on node B after 6 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("revocation reached node B after %.1f s", time.Since(revoked).Seconds())
	if st := status(urlA); st != http.StatusUnauthorized {
		t.Errorf("revoked key on node A: %d", st)
	}
}
