package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// BenchmarkClaims4Nodes measures the job queue's claim path with four
// nodes competing: four store instances on one database (four connection
// pools, as four processes would have), two claimers each (the default
// --workers 2), over b.N queued jobs spread on 64 models. Each claim is
// followed by the job's completion (a checkpoint row, the job COMPLETED,
// training_ended), which frees its model for the next job: what a node does
// around a training run, without the training. Reported: claims/s.
func BenchmarkClaims4Nodes(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "flywheel.db")
		var nodes []store.Database
		for range 4 {
			st, err := store.OpenSQLite(context.Background(), path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			nodes = append(nodes, st)
		}
		benchClaims(b, nodes)
	})
	b.Run("postgres", func(b *testing.B) {
		var nodes []store.Database
		for _, st := range pgNodes(b, pgtest.DSN(b), 4) {
			nodes = append(nodes, st)
		}
		benchClaims(b, nodes)
	})
}

func benchClaims(b *testing.B, nodes []store.Database) {
	ctx := context.Background()
	st := nodes[0]
	if _, err := st.EnsureUser(ctx, "ann"); err != nil {
		b.Fatal(err)
	}
	var models []string
	for i := range 64 {
		m, err := st.CreateModel(ctx, store.TrainedModel{ID: store.NewID(), Entity: "ann", Project: "p", Name: fmt.Sprint("m", i), BaseModel: "b"}, store.Checkpoint{Step: 0, Dir: "/d"})
		if err != nil {
			b.Fatal(err)
		}
		models = append(models, m.ID)
	}
	for i := range b.N {
		if _, err := st.CreateJob(ctx, store.Job{ModelID: models[i%len(models)], Kind: store.KindRL, RequestPath: "/r"}); err != nil {
			b.Fatal(err)
		}
	}
	var claimed atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	b.ResetTimer()
	start := time.Now()
	for n, node := range nodes {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("node-%d-%d", n, w)
				for claimed.Load() < int64(b.N) {
					j, ok, err := node.ClaimNext(ctx, owner, time.Minute, nil)
					if err != nil {
						errc <- err
						return
					}
					if !ok {
						time.Sleep(time.Millisecond) // every runnable model is taken
						continue
					}
					claimed.Add(1)
					if _, err := completeJob(ctx, node, j.Lease(), store.Checkpoint{ModelID: j.ModelID, Step: *j.FromStep + 1, Dir: "/d"}, nil); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	b.StopTimer()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
}
