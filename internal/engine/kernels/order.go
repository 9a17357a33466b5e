package kernels

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// decodeTuner holds the setting of a family of decode kernels (AVX-512's,
// or AVX2's on machines without it; one activation row against groups of
// four weight rows, the product of batch-1 decode) that changes their
// speed only, never a result:
//
//   - the access order (float32/16-bit and block-quantized rows): row
//     order reads the four weight rows one after another, lockstep a
//     vector of each per step; both compute the same sums in the same
//     order;
//   - the software-prefetch distance of the kernels that read one stream
//     (row order, and the four-row layouts' kernels): how far ahead of
//     its loads, in bytes, a kernel prefetches;
//   - the task split of a product (streamSplit): guided from the start,
//     or front-loaded (one long run a worker, a guided tail). On the EPYC
//     (Zen 5) the calibration's own ratios put front-loaded at 1.02–1.07×
//     for the four-row layouts and 1.03–1.04× for block-quantized rows
//     (Q8_0), 0.98–1.02× for float32/16-bit rows (three processes each).
//
// Which setting streams fastest depends on the machine (its hardware
// prefetchers, memory latency, how many streams a core follows well), so
// it is not fixed: the first batch-1 calls of the process that stream at
// least calibMinBytes each run one of the family's candidates and are
// timed. Per weight size the candidates take turns in rounds, one call
// each in a fresh random order, so every candidate sees the same mix of
// matrices and no position in the model's sequence of products; a round
// gives each candidate's bandwidth over the default's (cands[0], the
// setting tuned on AMD Zen 5), a ratio of calls a few milliseconds apart
// on matrices of one size, which the load of the machine and the size
// move little. After calibRounds rounds each candidate's score is the
// median of its ratios (calls that another process interrupted do not
// count), and the best is kept unless it beats the default by less than
// calibMargin.
type decodeTuner struct {
	name   string
	orders bool            // whether the family has two access orders
	cands  []decodeSetting // cands[0]: the default, kept on a tie

	rows    atomic.Bool  // the setting in use: access order,
	pf      atomic.Int64 // prefetch distance
	front   atomic.Bool  // and task split
	decided atomic.Bool  // calibration done, or the setting was fixed

	mu     sync.Mutex
	rng    *rand.Rand
	rounds map[int]*calibRound // per bytes a call streams: its round in progress
	ratios [][]float64         // per candidate: its bandwidth over the default's, per round
}

// calibRound is a weight size's round in progress: the candidates still
// to run, in order, and the bandwidth (bytes/s) of each that ran, 0
// before.
type calibRound struct {
	left []int
	rate []float64
}

// decodeSetting is one candidate setting of a decode kernel family.
type decodeSetting struct {
	rows  bool // one weight row at a time (a four-row layout's kernel: always)
	pf    int  // prefetch distance of the one-stream kernels, bytes
	front bool // a product's tasks front-loaded (streamSplit), not guided from the start
}

// Prefetch is the software-prefetch distances, in bytes ahead in the
// weight stream, of the decode kernels that read one stream.
type Prefetch struct {
	Half     int // float32/16-bit weights, row order (dot1*R; AVX2: dot4R, hdot4*R)
	Quant    int // block-quantized rows, row order (qdot*R)
	Repacked int // the four-row layouts Q4_1x4, ..., Q5_1x4 (qdotQ4?X, qdot??V)
}

var (
	// defaultPrefetch is the distances in use until calibrated, and kept
	// on a tie: those tuned on AMD Zen 5 (the four-row kernels consume
	// their stream faster: in BenchmarkQuantRepack4 8 KiB streamed 5-10%
	// faster than 4 KiB and than 16 KiB there).
	defaultPrefetch = Prefetch{Half: 4 << 10, Quant: 4 << 10, Repacked: 8 << 10}
	// prefetchCands is the distances calibration tries.
	prefetchCands = []int{2 << 10, 4 << 10, 8 << 10, 16 << 10}

	// The AVX2 float32/16-bit kernels (no AVX-512: dot4R, hdot4*R) take
	// the same candidates (on AMD Zen 3, BenchmarkStreamPrefetch: 2-16 KiB
	// within 4% of one another, none 0.88x for BF16).
	halfTuner   = newDecodeTuner("float32/16-bit", true, true, defaultPrefetch.Half)       // dot1*Z / dot1*R, dot4 / dot4R
	quantTuner  = newDecodeTuner("block-quantized", true, true, defaultPrefetch.Quant)     // qdot*Z / qdot*R
	repackTuner = newDecodeTuner("four-row layout", false, true, defaultPrefetch.Repacked) // qdotQ4?X, qdot??V
)

const (
	calibMinBytes = 256 << 10 // calls that read fewer weight bytes are not timed
	calibRounds   = 64        // rounds (a timed call of each candidate) before deciding
	calibMargin   = 0.03      // how much faster than the default a candidate must be
)

// newDecodeTuner is a family's tuner: candidates row order (orders: and
// lockstep) with the default distance pf, (distances) the others of
// prefetchCands, and the default distance with front-loaded tasks.
func newDecodeTuner(name string, orders, distances bool, pf int) *decodeTuner {
	t := &decodeTuner{name: name, orders: orders, cands: []decodeSetting{{rows: true, pf: pf}},
		rng: rand.New(rand.NewPCG(1, 2)), rounds: map[int]*calibRound{}}
	for _, d := range prefetchCands {
		if distances && d != pf {
			t.cands = append(t.cands, decodeSetting{rows: true, pf: d})
		}
	}
	t.cands = append(t.cands, decodeSetting{rows: true, pf: pf, front: true})
	if orders {
		t.cands = append(t.cands, decodeSetting{rows: false, pf: pf})
	}
	t.ratios = make([][]float64, len(t.cands))
	t.set(t.cands[0])
	return t
}

// RowOrder reports whether the float32/16-bit one-row decode kernels read
// one weight row at a time (true) or four in lockstep.
func RowOrder() bool { return halfTuner.rows.Load() }

// SetRowOrder fixes the access order of every decode kernel family that
// has two (true: one weight row at a time), ending their calibration
// (their prefetch distances stay as they are), and returns the previous
// order of the float32/16-bit kernels. Results do not change.
func SetRowOrder(rows bool) bool {
	quantTuner.decided.Store(true)
	quantTuner.rows.Store(rows)
	halfTuner.decided.Store(true)
	return halfTuner.rows.Swap(rows)
}

// Prefetching returns the prefetch distances in use.
func Prefetching() Prefetch {
	return Prefetch{Half: int(halfTuner.pf.Load()), Quant: int(quantTuner.pf.Load()), Repacked: int(repackTuner.pf.Load())}
}

// SetPrefetch fixes the prefetch distances (bytes, not negative), ending
// every family's calibration (their access orders stay as they are), and
// returns the previous ones. Results do not change.
func SetPrefetch(p Prefetch) Prefetch {
	if p.Half < 0 || p.Quant < 0 || p.Repacked < 0 {
		panic(fmt.Sprintf("kernels: negative prefetch distance %+v", p))
	}
	old := Prefetching()
	for _, f := range []struct {
		t  *decodeTuner
		pf int
	}{{halfTuner, p.Half}, {quantTuner, p.Quant}, {repackTuner, p.Repacked}} {
		f.t.decided.Store(true)
		f.t.pf.Store(int64(f.pf))
	}
	return old
}

func (t *decodeTuner) setting() decodeSetting {
	return decodeSetting{rows: t.rows.Load(), pf: int(t.pf.Load()), front: t.front.Load()}
}

func (t *decodeTuner) set(s decodeSetting) {
	t.rows.Store(s.rows)
	t.pf.Store(int64(s.pf))
	t.front.Store(s.front)
}

// pick returns the setting for a call with m activation rows that streams
// bytes weight bytes and, while calibrating, the candidate it is (to time
// with time), else -1.
func (t *decodeTuner) pick(m, bytes int) (decodeSetting, int) {
	if t.decided.Load() || m != 1 || bytes < calibMinBytes {
		return t.setting(), -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rounds[bytes]
	if r == nil {
		r = &calibRound{rate: make([]float64, len(t.cands))}
		t.rounds[bytes] = r
	}
	if len(r.left) == 0 {
		r.left = t.rng.Perm(len(t.cands))
	}
	c := r.left[0]
	r.left = r.left[1:]
	return t.cands[c], c
}

// time starts timing a call of candidate c that streams bytes weight
// bytes; the returned function ends it (record).
func (t *decodeTuner) time(c, bytes int) func() {
	start := time.Now()
	return func() { t.record(c, bytes, time.Since(start)) }
}

// record counts a call of candidate c (picked by pick) that streamed
// bytes in d, and decides after calibRounds rounds.
func (t *decodeTuner) record(c, bytes int, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rounds[bytes]
	if t.decided.Load() || r == nil || d <= 0 {
		return
	}
	r.rate[c] = float64(bytes) / d.Seconds()
	if slices.Contains(r.rate, 0) {
		return
	}
	for c, v := range r.rate {
		t.ratios[c] = append(t.ratios[c], v/r.rate[0])
	}
	clear(r.rate)
	if len(t.ratios[0]) < calibRounds {
		return
	}
	score := make([]float64, len(t.cands))
	best := 0
	var tried strings.Builder
	for c, r := range t.ratios {
		slices.Sort(r)
		score[c] = r[len(r)/2]
		if score[c] > score[best] {
			best = c
		}
		if c > 0 {
			tried.WriteString(", ")
		}
		fmt.Fprintf(&tried, "%s %.3f", t.describe(t.cands[c]), score[c])
	}
	if score[best] < 1+calibMargin {
		best = 0
	}
	t.set(t.cands[best])
	t.decided.Store(true)
	slog.Info("kernels: decode kernels calibrated", "kernels", t.name, "setting", t.describe(t.cands[best]),
		"speed_vs_default", tried.String())
}

// SetDecodeSetting fixes the setting of the decode kernel family named
// kernels to the one named setting, both as the calibration logs them
// ("kernels: decode kernels calibrated" kernels=… setting=…), ending that
// family's calibration: so a benchmark can run its own kernels as a
// server it started calibrated them. Results do not change. An unknown
// family, or a setting that is not one of the family's candidates, is an
// error.
func SetDecodeSetting(kernels, setting string) error {
	for _, t := range []*decodeTuner{halfTuner, quantTuner, repackTuner} {
		if t.name != kernels {
			continue
		}
		for _, c := range t.cands {
			if t.describe(c) == setting {
				t.set(c)
				t.decided.Store(true)
				return nil
			}
		}
		return fmt.Errorf("kernels: %s decode kernels have no setting %q", kernels, setting)
	}
	return fmt.Errorf("kernels: no decode kernel family %q", kernels)
}

// describe names a setting of t's family: "lockstep" or the distance
// (for the families with two orders, "row order" first; "front-loaded"
// after it for that split).
func (t *decodeTuner) describe(s decodeSetting) string {
	d := fmt.Sprintf("prefetch %d KiB", s.pf>>10)
	switch {
	case !s.rows:
		return "lockstep"
	case t.orders:
		d = "row order, " + d
	}
	if s.front {
		d += ", front-loaded"
	}
	return d
}
