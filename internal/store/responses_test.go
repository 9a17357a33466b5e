package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"flywheel/internal/store"
)

// TestResponses: a stored response is its user's only, survives reopening
// the database, and is pruned to the newest N per user and a maximum age.
func TestResponses(t *testing.T) {
	backends(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		st := open(t).(store.Responses)
		const keep, age = 3, time.Hour
		put := func(id, user string, at time.Time) {
			t.Helper()
			if err := st.PutResponse(ctx, store.StoredResponse{ID: id, UserID: user, Response: []byte(`{"id":"` + id + `"}`),
				History: []byte(`[{"role":"user","content":"hi"}]`), CreatedAt: at}, keep, age); err != nil {
				t.Fatal(err)
			}
		}
		put("resp_a", "u1", time.Now())
		got, err := st.ResponseByID(ctx, "u1", "resp_a", age)
		if err != nil || string(got.Response) != `{"id":"resp_a"}` || string(got.History) != `[{"role":"user","content":"hi"}]` {
			t.Fatalf("got %+v, %v", got, err)
		}
		if _, err := st.ResponseByID(ctx, "u2", "resp_a", age); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another user's response: %v, want ErrNotFound", err)
		}
		if err := st.DeleteResponse(ctx, "u2", "resp_a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another user's delete: %v, want ErrNotFound", err)
		}
		// reopened (a restart, or another node on PostgreSQL)
		again := open(t).(store.Responses)
		if _, err := again.ResponseByID(ctx, "u1", "resp_a", age); err != nil {
			t.Fatalf("after reopening: %v", err)
		}
		// the newest keep per user stay; other users' are untouched
		put("resp_other", "u2", time.Now())
		base := time.Now().Add(time.Second)
		for i := range 4 {
			put(fmt.Sprintf("resp_n%d", i), "u1", base.Add(time.Duration(i)*time.Millisecond))
		}
		for id, want := range map[string]bool{"resp_a": false, "resp_n0": false, "resp_n1": true, "resp_n3": true} {
			if _, err := st.ResponseByID(ctx, "u1", id, age); (err == nil) != want {
				t.Errorf("%s kept: %v, want %v", id, err == nil, want)
			}
		}
		if _, err := st.ResponseByID(ctx, "u2", "resp_other", age); err != nil {
			t.Errorf("u2's response pruned by u1's: %v", err)
		}
		// older than the maximum age: not found, and pruned by the next put
		put("resp_old", "u3", time.Now().Add(-2*age))
		if _, err := st.ResponseByID(ctx, "u3", "resp_old", age); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an expired response was answered: %v", err)
		}
		put("resp_new", "u4", time.Now())
		if _, err := st.ResponseByID(ctx, "u3", "resp_old", 3*age); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an expired response was not pruned by the next store: %v", err)
		}
		// concurrent stores (other nodes on PostgreSQL) all succeed and keep
		// the bound
		errs := make(chan error, 16)
		for i := range 16 {
			go func() {
				errs <- st.PutResponse(ctx, store.StoredResponse{ID: fmt.Sprintf("resp_c%d", i), UserID: fmt.Sprintf("c%d", i%2),
					Response: []byte(`{}`), History: []byte(`[]`)}, keep, age)
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent store: %v", err)
			}
		}
		for _, user := range []string{"c0", "c1"} {
			n := 0
			for i := range 16 {
				if _, err := st.ResponseByID(ctx, user, fmt.Sprintf("resp_c%d", i), age); err == nil {
					n++
				}
			}
			if n != keep {
				t.Errorf("user %s keeps %d responses, want %d", user, n, keep)
			}
		}
		if err := st.DeleteResponse(ctx, "u1", "resp_n3"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ResponseByID(ctx, "u1", "resp_n3", age); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a deleted response: %v", err)
		}
	})
}
