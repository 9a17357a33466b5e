package par

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
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
