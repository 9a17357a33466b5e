// Package par is the project's one parallel-for: contiguous ranges for
// uniform work (Range) and tasks handed out one at a time for uneven work
// (Tasks). Both run on up to GOMAXPROCS goroutines, run serially when there
// is too little work to pay for goroutines, and re-raise a panic of f in the
// caller (a panic on a worker goroutine would otherwise kill the process
// past any recover of the caller's).
package par

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// MinWork is the total cost (Range's n·cost) under which Range runs f on the
// caller's goroutine: below it a goroutine costs more than it saves.
const MinWork = 1 << 15

// Range splits [0, n) into at most GOMAXPROCS contiguous chunks and runs
// f(lo, hi) on each concurrently. cost is a rough per-index amount of work
// (e.g. floats touched); with n·cost < MinWork the whole range runs serially.
// cost 0 always splits when there are several cores.
func Range(n, cost int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 || (cost > 0 && n*cost < MinWork) {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	var p panicked
	chunk := (n + w - 1) / w
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.catch()
			f(lo, hi)
		}()
	}
	func() {
		defer p.catch()
		f(0, min(chunk, n)) // the first chunk on the caller's goroutine
	}()
	wg.Wait()
	p.rethrow()
}

// Tasks runs f(worker, i) for every i in [0, n), handing indices out one at
// a time to up to GOMAXPROCS goroutines (tasks may differ in size). worker is
// in [0, Workers()) and no two concurrent calls share one, so f may use
// per-worker scratch. With serial set (too little work) everything runs on
// the caller's goroutine as worker 0.
func Tasks(n int, serial bool, f func(worker, i int)) {
	if n <= 0 {
		return
	}
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 || serial {
		for i := 0; i < n; i++ {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var p panicked
	work := func(wk int) {
		defer p.catch()
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			f(wk, i)
		}
	}
	for wk := 1; wk < w; wk++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(wk)
		}()
	}
	work(0) // worker 0 is the caller's goroutine
	wg.Wait()
	p.rethrow()
}

// Workers is the number of distinct worker indices Tasks may pass.
func Workers() int { return runtime.GOMAXPROCS(0) }

type panicked struct{ v atomic.Value }

func (p *panicked) catch() {
	if r := recover(); r != nil {
		p.v.CompareAndSwap(nil, fmt.Sprint(r))
	}
}

func (p *panicked) rethrow() {
	if r := p.v.Load(); r != nil {
		panic(fmt.Sprintf("par: panic in a worker: %v", r))
	}
}
