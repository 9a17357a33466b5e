package cputime

import (
	"runtime"
	"testing"
	"time"
)

// A busy loop of 50 ms of wall time uses CPU time; sleeping does not add
// more than a little.
func TestProcess(t *testing.T) {
	c0, ok := Process()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no CPU time on Linux")
		}
		t.Skip("no CPU time on " + runtime.GOOS)
	}
	x := 0
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	c1, _ := Process()
	if c1 <= c0 {
		t.Fatalf("CPU time did not grow over a busy loop: %v then %v (%d)", c0, c1, x)
	}
}
