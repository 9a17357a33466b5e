package kernels

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The access order of the AVX-512 one-row decode kernels (dot1*: one
// activation row against groups of four weight rows, the product of
// batch-1 decode): row order reads the four weight rows one after another
// (the *R kernels), lockstep reads 64 bytes of each per step (the *Z
// kernels). Both compute the same sums in the same order, so the choice
// changes speed only, never a result. Which order streams faster depends on
// the machine (its hardware prefetchers, how many streams a core follows
// well, whether the single accumulator chain of the row order keeps up), so
// it is not fixed: the first calls of the process time both orders,
// alternating call by call on the model's own weights, and keep the faster
// (order.pick). Only calls that stream at least calibMinBytes count.
var order struct {
	rows    atomic.Bool // the order in use (after calibration)
	decided atomic.Bool // calibration done, or the order was set

	mu    sync.Mutex
	calls int
	bytes [2]float64 // [lockstep, rows]
	secs  [2]float64
	n     [2]int
}

const (
	calibMinBytes = 256 << 10 // calls that read fewer weight bytes are not timed
	calibCalls    = 256       // timed calls per order before deciding
)

func init() { order.rows.Store(true) }

// RowOrder reports whether the one-row decode kernels read one weight row
// at a time (true) or four in lockstep.
func RowOrder() bool { return order.rows.Load() }

// SetRowOrder fixes the one-row decode kernels' access order (true: one
// weight row at a time), ending any calibration, and returns the previous
// order. Results do not change.
func SetRowOrder(rows bool) bool {
	order.decided.Store(true)
	return order.rows.Swap(rows)
}

// pickOrder returns the order for a call that streams bytes weight bytes
// and, while calibrating, whether to time it (then record must follow).
func pickOrder(bytes int) (rows, timed bool) {
	if order.decided.Load() || bytes < calibMinBytes {
		return order.rows.Load(), false
	}
	order.mu.Lock()
	defer order.mu.Unlock()
	order.calls++
	return order.calls%2 == 1, true
}

// recordOrder adds a timed call of pickOrder and decides the order once
// both have calibCalls calls.
func recordOrder(rows bool, bytes int, d time.Duration) {
	o := 0
	if rows {
		o = 1
	}
	order.mu.Lock()
	defer order.mu.Unlock()
	if order.decided.Load() {
		return
	}
	order.bytes[o] += float64(bytes)
	order.secs[o] += d.Seconds()
	order.n[o]++
	if order.n[0] < calibCalls || order.n[1] < calibCalls {
		return
	}
	lock, row := order.bytes[0]/order.secs[0], order.bytes[1]/order.secs[1]
	order.rows.Store(row >= lock)
	order.decided.Store(true)
	slog.Info("kernels: decode access order calibrated", "row_order", row >= lock,
		"lockstep_GBps", lock/1e9, "row_GBps", row/1e9)
}
