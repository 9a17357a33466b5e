package par

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRangeCoversEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 100, 1001} {
		for _, cost := range []int{0, 1, 1 << 20} {
			hits := make([]int32, n)
			Range(n, cost, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					atomic.AddInt32(&hits[i], 1)
				}
			})
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("n=%d cost=%d: index %d visited %d times", n, cost, i, h)
				}
			}
		}
	}
}

func TestTasksCoversEachIndexOnceWithDistinctWorkers(t *testing.T) {
	for _, serial := range []bool{false, true} {
		n := 500
		hits := make([]int32, n)
		busy := make([]int32, Workers())
		Tasks(n, serial, func(w, i int) {
			if atomic.AddInt32(&busy[w], 1) != 1 {
				t.Errorf("worker %d used by two goroutines at once", w)
			}
			atomic.AddInt32(&hits[i], 1)
			atomic.AddInt32(&busy[w], -1)
		})
		for i, h := range hits {
			if h != 1 {
				t.Fatalf("serial=%v: index %d visited %d times", serial, i, h)
			}
		}
	}
}

func TestPanicReachesCaller(t *testing.T) {
	for name, run := range map[string]func(){
		"Range": func() { Range(64, 0, func(lo, hi int) { panic("boom") }) },
		"Tasks": func() { Tasks(64, false, func(w, i int) { panic("boom") }) },
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), "boom") {
					t.Errorf("%s: recovered %v, want the worker's panic", name, r)
				}
			}()
			run()
		}()
	}
}

// TestTasksConcurrentAndNested runs Tasks from several goroutines at once,
// each task running a nested Tasks, and checks every index of every call is
// visited once with no worker index of one call in use twice at a time (the
// helpers are shared by all calls).
func TestTasksConcurrentAndNested(t *testing.T) {
	const callers, n, inner = 4, 64, 8
	done := make(chan struct{})
	for range callers {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20 {
				hits := make([]int32, n*inner)
				busy := make([]int32, Workers())
				Tasks(n, false, func(w, i int) {
					if atomic.AddInt32(&busy[w], 1) != 1 {
						t.Errorf("worker %d used by two goroutines at once", w)
					}
					Tasks(inner, false, func(_, k int) { atomic.AddInt32(&hits[i*inner+k], 1) })
					atomic.AddInt32(&busy[w], -1)
				})
				for i, h := range hits {
					if h != 1 {
						t.Errorf("index %d visited %d times", i, h)
						return
					}
				}
			}
		}()
	}
	for range callers {
		<-done
	}
}

// TestTasksAfterPanic: a job's panic does not outlive its call (jobs are
// reused), and a call after it runs every task.
func TestTasksAfterPanic(t *testing.T) {
	for range 8 {
		func() {
			defer func() { _ = recover() }()
			Tasks(16, false, func(w, i int) {
				if i == 3 {
					panic("boom")
				}
			})
		}()
		var n atomic.Int64
		Tasks(16, false, func(w, i int) { n.Add(1) })
		if n.Load() != 16 {
			t.Fatalf("ran %d tasks after a panicking call, want 16", n.Load())
		}
	}
}

// TestTasksAllocatesNothing: decode calls Tasks ~200 times a token, so the
// call itself (with a func value made once) must not allocate.
func TestTasksAllocatesNothing(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps")
	}
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	var n atomic.Int64
	f := func(w, i int) { n.Add(1) }
	if a := testing.AllocsPerRun(200, func() { Tasks(8, false, f) }); a != 0 {
		t.Errorf("Tasks allocates %v times a call, want 0", a)
	}
}

// TestTasksAfterPrepare: prepare runs once, on the caller, before every
// task (each task sees its write), parallel or serial; a panic in prepare
// reaches the caller and no task runs, and the next call runs them all.
func TestTasksAfterPrepare(t *testing.T) {
	for _, serial := range []bool{false, true} {
		for range 50 {
			var prepared, calls, early atomic.Int64
			var prepG, taskG atomic.Int64
			TasksAfter(64, serial, func() {
				// Long enough for the helpers to see the job first.
				for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
				}
				prepared.Store(1)
				calls.Add(1)
				prepG.Store(goid())
			}, func(w, i int) {
				if prepared.Load() == 0 {
					early.Add(1)
				}
				if w == 0 {
					taskG.Store(goid())
				}
			})
			if calls.Load() != 1 || early.Load() != 0 {
				t.Fatalf("serial=%v: prepare ran %d times, %d tasks started before it", serial, calls.Load(), early.Load())
			}
			if taskG.Load() != 0 && prepG.Load() != taskG.Load() {
				t.Fatalf("serial=%v: prepare ran on goroutine %d, worker 0 on %d", serial, prepG.Load(), taskG.Load())
			}
		}
		var ran atomic.Int64
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "prep boom") {
					t.Errorf("serial=%v: recovered %v, want the prepare's panic", serial, r)
				}
			}()
			TasksAfter(64, serial, func() { panic("prep boom") }, func(w, i int) { ran.Add(1) })
		}()
		if ran.Load() != 0 {
			t.Errorf("serial=%v: %d tasks ran after prepare panicked", serial, ran.Load())
		}
		TasksAfter(64, serial, func() {}, func(w, i int) { ran.Add(1) })
		if ran.Load() != 64 {
			t.Errorf("serial=%v: the next call ran %d tasks, want 64", serial, ran.Load())
		}
	}
}

// goid is the calling goroutine's id, from its stack trace's header.
func goid() int64 {
	var buf [32]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, _ := strconv.ParseInt(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}
