package kernels

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// accessOrder is the access order of a family of AVX-512 decode kernels
// (one activation row against groups of four weight rows, the product of
// batch-1 decode): row order reads the four weight rows one after another,
// lockstep reads a vector of each per step. Both compute the same sums in
// the same order, so the choice changes speed only, never a result. Which
// order streams faster depends on the machine (its hardware prefetchers,
// how many streams a core follows well, whether the single accumulator
// chain of the row order keeps up), so it is not fixed: the first batch-1
// calls of the process that stream at least calibMinBytes time both
// orders, alternating call by call on the model's own weights, and the
// faster is kept.
type accessOrder struct {
	name    string
	rows    atomic.Bool // the order in use
	decided atomic.Bool // calibration done, or the order was set

	mu    sync.Mutex
	calls int
	bytes [2]float64 // [lockstep, rows]
	secs  [2]float64
	n     [2]int
}

var (
	halfOrder  = newAccessOrder("float32/16-bit")  // dot1*Z / dot1*R
	quantOrder = newAccessOrder("block-quantized") // qdot*Z / qdot*R
)

const (
	calibMinBytes = 256 << 10 // calls that read fewer weight bytes are not timed
	calibCalls    = 256       // timed calls per order before deciding
)

func newAccessOrder(name string) *accessOrder {
	o := &accessOrder{name: name}
	o.rows.Store(true)
	return o
}

// RowOrder reports whether the float32/16-bit one-row decode kernels read
// one weight row at a time (true) or four in lockstep.
func RowOrder() bool { return halfOrder.rows.Load() }

// SetRowOrder fixes every decode kernel family's access order (true: one
// weight row at a time), ending calibration, and returns the previous
// order of the float32/16-bit kernels. Results do not change.
func SetRowOrder(rows bool) bool {
	quantOrder.decided.Store(true)
	quantOrder.rows.Store(rows)
	halfOrder.decided.Store(true)
	return halfOrder.rows.Swap(rows)
}

// pick returns the order for a call with m activation rows that streams
// bytes weight bytes and, while calibrating, whether to time it (with
// time).
func (o *accessOrder) pick(m, bytes int) (rows, timed bool) {
	if o.decided.Load() || m != 1 || bytes < calibMinBytes {
		return o.rows.Load(), false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	return o.calls%2 == 1, true
}

// time starts timing a call that pick said to time; the returned function
// ends it and decides the order once both have calibCalls calls.
func (o *accessOrder) time(rows bool, bytes int) func() {
	start := time.Now()
	return func() {
		d := time.Since(start)
		i := 0
		if rows {
			i = 1
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.decided.Load() {
			return
		}
		o.bytes[i] += float64(bytes)
		o.secs[i] += d.Seconds()
		o.n[i]++
		if o.n[0] < calibCalls || o.n[1] < calibCalls {
			return
		}
		lock, row := o.bytes[0]/o.secs[0], o.bytes[1]/o.secs[1]
		o.rows.Store(row >= lock)
		o.decided.Store(true)
		slog.Info("kernels: decode access order calibrated", "kernels", o.name, "row_order", row >= lock,
			"lockstep_GBps", lock/1e9, "row_GBps", row/1e9)
	}
}
