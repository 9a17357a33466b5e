package trace

import (
	"flywheel/internal/cputime"
	"fmt"
	"strconv"
	"testing"
	"time"

	"flywheel/internal/jsonlex"
)

// Micro-benchmarks of the call store's ingest without the database: the
// single-pass decode of an upsert_batch body (what handleUpsertBatch does
// before apply) and the canonicaliser on its own. They isolate the JSON
// work that BenchmarkCallStore's upsert_batch_500 measures through HTTP and
// SQLite, so an A/B of the JSON code is not lost in the store's noise.
//
//	go test -run '^$' -bench 'Ingest' ./internal/trace

func benchIngestBatch() []byte {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return appendBenchBatch(nil, 0, benchBatch, base, func(i int) string {
		return "0190f4d2-1c2b-7cc3-8a3e-" + strconv.FormatInt(100000000000+int64(i), 10)
	})
}

// decodeBenchBatch decodes body as handleUpsertBatch does ({"batch":
// [{"mode", "req"}]}, mode before req) and returns the number of requests.
func decodeBenchBatch(b *testing.B, body []byte) int {
	d := newDec(body)
	n := 0
	err := d.object("", func(k string) error {
		return d.array("batch", func(i int) error {
			prefix := string(jsonlex.Path("batch").Index(i))
			var mode *string
			return d.object(prefix, func(k string) error {
				switch k {
				case "mode":
					var err error
					mode, err = d.optString(prefix + ".mode")
					return err
				case "req":
					n++
					if *mode == "start" {
						_, err := d.decodeStartReq(prefix+".req", true)
						return err
					}
					_, err := d.decodeEndReq(prefix+".req", true)
					return err
				}
				return d.skip()
			})
		})
	})
	if err == nil {
		err = d.finish()
	}
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// benchIngest runs op over body b.N times and reports the process's CPU
// time per op besides wall time (steadier on a shared machine).
func benchIngest(b *testing.B, body []byte, op func(body []byte) error) {
	b.SetBytes(int64(len(body)))
	c0, n := cputime.Used(), 0
	for b.Loop() {
		n++
		if err := op(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cputime.Used()-c0).Microseconds())/float64(n), "cpu-µs/op")
}

func BenchmarkIngestDecodeUpsertBatch(b *testing.B) {
	benchIngest(b, benchIngestBatch(), func(body []byte) error {
		if n := decodeBenchBatch(b, body); n != 2*benchBatch {
			return fmt.Errorf("decoded %d requests", n)
		}
		return nil
	})
}

func BenchmarkIngestCanonicalize(b *testing.B) {
	// the batch as one value: objects, arrays, strings, numbers, literals;
	// plus escapes and non-ASCII text, as model outputs carry
	body := benchIngestBatch()
	body = append(body[:len(body)-1], `, "text": "caf\u00e9 \ud83d\ude00 \"quoted\"\n日本語 line\ttab", "nums": [1, -0, 2.5, 1e-05, 123456789.125, 3e300]}`...)
	benchIngest(b, body, func(body []byte) error { _, err := Canonicalize(body); return err })
}

func BenchmarkIngestCanonicalSorted(b *testing.B) {
	benchIngest(b, benchIngestBatch(), func(body []byte) error { _, err := canonicalSorted(body); return err })
}
