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
	"time"
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
	if Serial(n, cost) {
		f(0, n)
		return
	}
	w := min(runtime.GOMAXPROCS(0), n)
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

// Serial reports whether Range(n, cost, f) runs f(0, n) on the caller's
// goroutine (one index, one core, or too little work). A caller on a hot
// path checks it first and calls its loop directly, because a closure
// passed to Range is allocated on the heap wherever it is created: batch-1
// decode makes ~300 such calls a token.
func Serial(n, cost int) bool {
	return n <= 1 || (cost > 0 && n*cost < MinWork) || runtime.GOMAXPROCS(0) <= 1
}

// Tasks runs f(worker, i) for every i in [0, n), handing indices out one at
// a time to up to GOMAXPROCS goroutines (tasks may differ in size). worker is
// in [0, Workers()) and no two concurrent calls share one, so f may use
// per-worker scratch. With serial set (too little work) everything runs on
// the caller's goroutine as worker 0. Workers other than the caller are
// long-lived helpers (see helper) when free, else fresh goroutines.
func Tasks(n int, serial bool, f func(worker, i int)) { TasksAfter(n, serial, nil, f) }

// TasksAfter is Tasks with a first step: prepare (when not nil) runs on
// the caller's goroutine after the other workers have been handed the job
// and before any task starts, so that their wake-up — the few hundred
// nanoseconds a helper takes to see a job, on the critical path of each of
// a decode step's ~150 products — overlaps it. For work every task reads,
// such as a product's activations laid out for its kernel; it should take
// microseconds, as the workers spin while it runs. A panic in prepare is
// re-raised in the caller as a task's is, and then no task runs.
func TasksAfter(n int, serial bool, prepare func(), f func(worker, i int)) {
	if n <= 0 {
		return
	}
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 || serial {
		if prepare != nil {
			prepare()
		}
		for i := 0; i < n; i++ {
			f(0, i)
		}
		return
	}
	// A decoded token makes ~200 Tasks calls; the job (its channel and
	// bookkeeping) comes from a pool so that they allocate nothing here.
	j := jobs.Get().(*job)
	if cap(j.done) < w-1 {
		j.done = make(chan struct{}, w-1)
	}
	j.f, j.n, j.lent = f, int64(n), j.lent[:0]
	j.next.Store(0)
	j.ready.Store(prepare == nil)
	for wk := 1; wk < w; wk++ {
		if h := lend(wk, j); h != nil {
			j.lent = append(j.lent, h)
			continue
		}
		j.wg.Add(1)
		go func() { // no idle helper for this slot (nested or concurrent calls)
			defer j.wg.Done()
			j.run(wk)
		}()
	}
	if prepare != nil {
		func() {
			defer j.p.catch()
			prepare()
		}()
		if j.p.v.Load() != nil {
			j.n = 0 // no task runs (the workers read n only once ready)
		}
		j.ready.Store(true)
	}
	j.run(0)   // worker 0 is the caller's goroutine
	taken := 0 // helpers that took j and have yet to say done
	for _, h := range j.lent {
		if !h.box.CompareAndSwap(j, nil) {
			taken++
		}
	}
	for ; taken > 0; taken-- {
		// The caller ran out of tasks, so each helper has at most its
		// last task left: spin briefly before parking on done.
		for spins := 0; spins < 1<<14 && len(j.done) == 0; spins++ {
		}
		<-j.done
	}
	j.wg.Wait()
	// Nothing refers to j now: every helper that took it has sent on done
	// (received above, so done is empty) and the others had it taken back.
	msg := j.p.take()
	j.f = nil
	clear(j.lent)
	jobs.Put(j)
	if msg != nil {
		panic(fmt.Sprintf("par: panic in a worker: %v", *msg))
	}
}

var jobs = sync.Pool{New: func() any { return new(job) }}

// job is one Tasks call as its workers see it: tasks [0, n) of f, handed
// out one at a time from next. A helper that takes the job sends on done
// once it has run out of tasks.
type job struct {
	f     func(worker, i int)
	n     int64
	ready atomic.Bool // the caller's prepare is done (TasksAfter)
	next  atomic.Int64
	p     panicked
	done  chan struct{}
	lent  []*helper      // helpers handed the job
	wg    sync.WaitGroup // goroutines started for slots without an idle helper
}

func (j *job) run(worker int) {
	for !j.ready.Load() { // the caller's prepare (TasksAfter): microseconds
	}
	defer j.p.catch()
	for {
		i := j.next.Add(1) - 1
		if i >= j.n {
			return
		}
		j.f(worker, int(i))
	}
}

// helper is a long-lived worker goroutine for one worker index of Tasks
// calls. Decoding a token is ~150 short parallel products back to back; a
// fresh goroutine for each waits for an idle thread to wake (tens of µs on
// a busy machine, a large part of a 100 µs product). A helper instead
// spins briefly after each job, so the next one starts at once, and parks
// when no work comes (it costs nothing while idle).
type helper struct {
	slot   int
	box    atomic.Pointer[job] // a job handed over and not yet taken
	parked atomic.Bool
	wake   chan struct{} // a token when parked and handed a job
}

// helperSpin is how long a helper waits for its next job before parking.
const helperSpin = 20 * time.Microsecond

var helpers struct {
	mu sync.Mutex
	hs []*helper // hs[i] serves worker index i+1
}

// The helpers start with the package (parked, they cost nothing), so the
// process's goroutine count does not grow on first use; more start if
// GOMAXPROCS grows.
func init() {
	helpers.mu.Lock()
	defer helpers.mu.Unlock()
	addHelpers(runtime.GOMAXPROCS(0) - 1)
}

// addHelpers starts helpers up to worker index n; helpers.mu is held.
func addHelpers(n int) {
	for len(helpers.hs) < n {
		h := &helper{slot: len(helpers.hs) + 1, wake: make(chan struct{}, 1)}
		helpers.hs = append(helpers.hs, h)
		go h.loop()
	}
}

// lend hands j to the helper for worker index slot; nil when that helper
// holds another job (nested or concurrent calls; the caller then starts a
// goroutine instead).
func lend(slot int, j *job) *helper {
	helpers.mu.Lock()
	addHelpers(slot)
	h := helpers.hs[slot-1]
	helpers.mu.Unlock()
	if !h.box.CompareAndSwap(nil, j) {
		return nil
	}
	if h.parked.CompareAndSwap(true, false) {
		h.wake <- struct{}{}
	}
	return h
}

func (h *helper) loop() {
	for {
		j := h.wait()
		if !h.box.CompareAndSwap(j, nil) { // its caller took it back
			continue
		}
		j.run(h.slot)
		j.done <- struct{}{}
	}
}

// wait returns the job in h's box: spinning for helperSpin, then parked.
func (h *helper) wait() *job {
	start := time.Now()
	for spins := 1; ; spins++ {
		if j := h.box.Load(); j != nil {
			return j
		}
		if spins&255 == 0 && time.Since(start) > helperSpin {
			break
		}
	}
	for {
		h.parked.Store(true)
		if j := h.box.Load(); j != nil {
			if !h.parked.CompareAndSwap(true, false) {
				<-h.wake // the lender saw h parked and sent a token
			}
			return j
		}
		<-h.wake
	}
}

// Workers is the number of distinct worker indices Tasks may pass.
func Workers() int { return runtime.GOMAXPROCS(0) }

// panicked keeps the first panic of a parallel call's workers.
type panicked struct{ v atomic.Pointer[string] }

func (p *panicked) catch() {
	if r := recover(); r != nil {
		msg := fmt.Sprint(r)
		p.v.CompareAndSwap(nil, &msg)
	}
}

func (p *panicked) rethrow() {
	if msg := p.take(); msg != nil {
		panic(fmt.Sprintf("par: panic in a worker: %v", *msg))
	}
}

// take returns the panic caught (nil: none) and clears it.
func (p *panicked) take() *string { return p.v.Swap(nil) }
