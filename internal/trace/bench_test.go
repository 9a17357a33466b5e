package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flywheel/internal/cputime"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Benchmarks of the call store over HTTP against a store seeded with
// FLYWHEEL_BENCH_CALLS calls (default 1,000,000) through /call/upsert_batch,
// on SQLite (BenchmarkCallStore) and on PostgreSQL
// (BenchmarkCallStorePostgres: a fresh database on the server named by
// FLYWHEEL_TEST_POSTGRES, see internal/pgtest).
//
//	go test -run '^$' -bench 'BenchmarkCallStore$' -benchtime 2000x -timeout 60m ./internal/trace
//	FLYWHEEL_TEST_POSTGRES=postgres://... go test -run '^$' -bench BenchmarkCallStorePostgres -benchtime 2000x -timeout 60m ./internal/trace
//
// The seed is made once per process and database and shared by the
// sub-benchmarks; its own throughput is reported (seed-calls/s) as the bulk
// upsert figure.

const (
	benchProject   = "alice/bench"
	benchBatch     = 500 // calls per upsert_batch request (a start and an end each: 1000 items)
	benchTraceSize = 10  // calls per trace: a root and 9 children
)

type benchStore struct {
	e         *env
	sample    []string // every 97th call id, for reads
	n         int
	seedTime  time.Duration
	seedCPU   time.Duration // process CPU time (server and client together)
	seedCalls int
}

var (
	benchMu     sync.Mutex
	benchStores = map[string]*benchStore{} // by dialect
)

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

func benchPost(b testing.TB, url string, body []byte) []byte {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("X-Test-User", "alice")
	resp, err := benchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %d %s", url, resp.StatusCode, out)
	}
	return out
}

// appendBenchBatch appends an upsert_batch body of n calls starting at call
// index first: realistic chat-completion-sized inputs, output and summary.
func appendBenchBatch(buf []byte, first, n int, base time.Time, ids func(i int) string) []byte {
	buf = append(buf, `{"batch": [`...)
	for k := 0; k < n; k++ {
		i := first + k
		root := i - i%benchTraceSize
		st := base.Add(time.Duration(i) * time.Millisecond)
		if k > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, `{"mode": "start", "req": {"project_id": "`+benchProject+`", "id": "`...)
		buf = append(buf, ids(i)...)
		buf = append(buf, `", "trace_id": "`...)
		buf = append(buf, ids(root)...)
		buf = append(buf, '"')
		if i != root {
			buf = append(buf, `, "parent_id": "`...)
			buf = append(buf, ids(root)...)
			buf = append(buf, '"')
		}
		buf = append(buf, `, "op_name": "weave:///alice/bench/op/generate:v1", "started_at": "`...)
		buf = st.AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, `", "attributes": {"weave": {"client_version": "0.51.0", "source": "python-sdk"}}, "inputs": {"model": "gpt-4o-mini", "temperature": 0.7, "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Question number `...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, `: what is the capital of France? Answer in one word."}]}}}, {"mode": "end", "req": {"project_id": "`+benchProject+`", "id": "`...)
		buf = append(buf, ids(i)...)
		buf = append(buf, `", "ended_at": "`...)
		buf = st.Add(350*time.Millisecond).AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, `", "output": {"role": "assistant", "content": "Paris."}, "summary": {"usage": {"gpt-4o-mini": {"requests": 1, "prompt_tokens": 31, "completion_tokens": 2, "total_tokens": 33}}, "status_counts": {"success": 1, "error": 0}}}}`...)
	}
	return append(buf, "]}"...)
}

func getBenchStore(b *testing.B, dt testDialect) *benchStore {
	benchMu.Lock()
	defer benchMu.Unlock()
	if st := benchStores[dt.name]; st != nil {
		return st
	}
	{
		n := 1_000_000
		if v := os.Getenv("FLYWHEEL_BENCH_CALLS"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < benchBatch {
				b.Fatalf("FLYWHEEL_BENCH_CALLS=%q: want an integer >= %d", v, benchBatch)
			}
		}
		n -= n % benchBatch
		e := newEnvDB(b, dt.openService(b), Options{})
		if err := e.svc.SetDefaultPrice(b.Context(), "gpt-4o-mini", 1.5e-07, 6e-07, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
			b.Fatal(err)
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = NewUUIDv7()
		}
		base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		url := e.srv.URL + "/call/upsert_batch"
		const workers = 2
		next := make(chan int)
		var wg sync.WaitGroup
		start, cpu0 := time.Now(), cputime.Used()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var buf []byte
				for first := range next {
					buf = appendBenchBatch(buf[:0], first, benchBatch, base, func(i int) string { return ids[i] })
					benchPost(b, url, buf)
				}
			}()
		}
		for first := 0; first < n; first += benchBatch {
			if first%(100*benchBatch) == 0 && first > 0 {
				fmt.Fprintf(os.Stderr, "seeded %d calls, %.0f calls/s\n", first, float64(first)/time.Since(start).Seconds())
			}
			next <- first
		}
		close(next)
		wg.Wait()
		st := &benchStore{e: e, n: n, seedTime: time.Since(start), seedCPU: cputime.Used() - cpu0, seedCalls: n}
		if dt.name == DialectPostgres {
			// What autovacuum does within a minute or so of a bulk load (the
			// planner's statistics, the visibility map of index-only scans),
			// done at once so the figures below are of the steady state.
			t0 := time.Now()
			if _, err := e.db.Exec(`VACUUM ANALYZE trace_calls`); err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(os.Stderr, "VACUUM ANALYZE trace_calls: %s\n", time.Since(t0).Round(time.Millisecond))
		}
		for i := 0; i < n; i += 97 {
			st.sample = append(st.sample, ids[i])
		}
		fmt.Fprintf(os.Stderr, "seeded %d calls in %s: %.0f calls/s (%.0f items/s); process CPU %s = %.0f calls per CPU-second\n", n, st.seedTime.Round(time.Millisecond),
			float64(n)/st.seedTime.Seconds(), 2*float64(n)/st.seedTime.Seconds(), st.seedCPU.Round(time.Millisecond), float64(n)/st.seedCPU.Seconds())
		var dbBytes int64
		if dt.name == DialectPostgres {
			e.db.QueryRow(`SELECT pg_database_size(current_database())`).Scan(&dbBytes)
		} else {
			e.db.QueryRow(`SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&dbBytes)
		}
		fmt.Fprintf(os.Stderr, "%s database size %.0f MiB\n", dt.name, float64(dbBytes)/(1<<20))
		benchStores[dt.name] = st
		return st
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func BenchmarkCallStore(b *testing.B) { benchCallStore(b, testDialects[0]) }

func BenchmarkCallStorePostgres(b *testing.B) { benchCallStore(b, testDialects[1]) }

func benchCallStore(b *testing.B, dt testDialect) {
	st := getBenchStore(b, dt)
	b.Run("seed_upsert_batch", func(b *testing.B) {
		b.ReportMetric(float64(st.seedCalls)/st.seedTime.Seconds(), "calls/s")
		b.ReportMetric(float64(st.seedCalls)/st.seedCPU.Seconds(), "calls/CPU-s")
		b.ReportMetric(float64(st.seedCalls), "calls")
	})

	b.Run("read_all_includes", func(b *testing.B) {
		url := st.e.srv.URL + "/call/read"
		rng := rand.New(rand.NewPCG(1, 2))
		lat := make([]time.Duration, 0, b.N)
		bodies := make([][]byte, b.N)
		for i := range bodies {
			id := st.sample[rng.IntN(len(st.sample))]
			bodies[i] = []byte(`{"project_id": "` + benchProject + `", "id": "` + id + `", "include_costs": true, "include_storage_size": true, "include_total_storage_size": true}`)
		}
		benchPost(b, url, bodies[0]) // warm the connection
		b.ResetTimer()
		c0 := cputime.Used()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			out := benchPost(b, url, bodies[i])
			lat = append(lat, time.Since(t0))
			if len(out) < 100 {
				b.Fatalf("short read: %s", out)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64((cputime.Used()-c0).Microseconds())/float64(b.N), "CPU-µs/read")
		b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(percentile(lat, 0.90).Microseconds())/1000, "p90-ms")
		b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	})

	b.Run("upsert_batch_500", func(b *testing.B) {
		// further batches into the seeded store (new traces appended)
		url := st.e.srv.URL + "/call/upsert_batch"
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		newIDs := make([]string, b.N*benchBatch)
		for i := range newIDs {
			newIDs[i] = NewUUIDv7()
		}
		var buf []byte
		b.ResetTimer()
		t0, c0 := time.Now(), cputime.Used()
		for i := 0; i < b.N; i++ {
			buf = appendBenchBatch(buf[:0], i*benchBatch, benchBatch, base, func(k int) string { return newIDs[k] })
			benchPost(b, url, buf)
		}
		el := time.Since(t0)
		b.ReportMetric(float64(b.N*benchBatch)/el.Seconds(), "calls/s")
		b.ReportMetric(float64(b.N*benchBatch)/(cputime.Used()-c0).Seconds(), "calls/CPU-s")
	})

	b.Run("stream_query_100k", func(b *testing.B) {
		url := st.e.srv.URL + "/calls/stream_query"
		body := []byte(`{"project_id": "` + benchProject + `", "limit": 100000, "include_storage_size": true}`)
		rows := 0
		b.ResetTimer()
		t0, c0 := time.Now(), cputime.Used()
		for i := 0; i < b.N; i++ {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("X-Test-User", "alice")
			resp, err := benchClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				rows++
			}
			resp.Body.Close()
		}
		el := time.Since(t0)
		b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
		b.ReportMetric(float64(rows)/(cputime.Used()-c0).Seconds(), "rows/CPU-s")
	})
}

// BenchmarkTableQuery pages through a table of FLYWHEEL_BENCH_TABLE_ROWS rows
// (default 100,000; a Weave dataset of ~200-byte rows) with /table/query,
// 100 rows a page at random offsets, one request at a time over HTTP, on
// SQLite (the service's settings) and on PostgreSQL (skipped without
// FLYWHEEL_TEST_POSTGRES). It reports the page latency's p50/p99 and the
// table's creation time (one /table/create of all rows).
//
//	go test -run '^$' -bench BenchmarkTableQuery -benchtime 2000x ./internal/trace
func BenchmarkTableQuery(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FLYWHEEL_BENCH_TABLE_ROWS")); err == nil && v > 0 {
		n = v
	}
	for _, dt := range testDialects {
		b.Run(dt.name, func(b *testing.B) {
			e := newEnvDB(b, dt.openService(b), Options{})
			var body bytes.Buffer
			body.WriteString(`{"table": {"project_id": "` + benchProject + `", "rows": [`)
			for i := 0; i < n; i++ {
				if i > 0 {
					body.WriteString(", ")
				}
				fmt.Fprintf(&body, `{"input": {"question": "What is %d plus %d?", "context": "arithmetic, row %d of the benchmark set"}, "expected": %d, "id": %d}`, i, i+1, i, 2*i+1, i)
			}
			body.WriteString("]}}")
			t0 := time.Now()
			out := benchPost(b, e.srv.URL+"/table/create", body.Bytes())
			created := time.Since(t0)
			var res struct{ Digest string }
			if err := json.Unmarshal(out, &res); err != nil || res.Digest == "" {
				b.Fatalf("table/create: %s", out)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := rng.IntN(n - 100)
				q := fmt.Sprintf(`{"project_id": %q, "digest": %q, "limit": 100, "offset": %d}`, benchProject, res.Digest, off)
				t := time.Now()
				page := benchPost(b, e.srv.URL+"/table/query", []byte(q))
				lat = append(lat, time.Since(t))
				if !bytes.Contains(page, []byte(`"original_index": `+strconv.Itoa(off+99)+"}")) {
					b.Fatalf("page at %d: %.200s", off, page)
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(created.Seconds(), "create-s")
		})
	}
}
