package train

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestRLSweep measures how reliably TestRLLearnsOnTiny's loop lifts the
// reward: for the sampling seeds 1..SEEDS it runs STEPS RL jobs at
// learning rate LR (0: the default) on flywheel/tiny (BF16=1: stored in
// BF16) and counts the runs whose reward rises by rlRise (first two rounds
// against the last three, as the test does). V=1 logs each job's metrics.
// It is skipped unless FLYWHEEL_RL_SWEEP is set:
//
//	FLYWHEEL_RL_SWEEP=1 SEEDS=64 STEPS=25 LR=0 BF16= go test ./internal/train -run TestRLSweep -v
func TestRLSweep(t *testing.T) {
	if os.Getenv("FLYWHEEL_RL_SWEEP") == "" {
		t.Skip("a measurement: set FLYWHEEL_RL_SWEEP=1 (and SEEDS, STEPS, LR, BF16, V)")
	}
	seeds := int(sweepNum(t, "SEEDS", 64))
	steps := int(sweepNum(t, "STEPS", 25))
	lr := sweepNum(t, "LR", 0)
	if steps < 2 {
		t.Fatal("STEPS must be at least 2")
	}
	reg := tinyRegistry
	if os.Getenv("BF16") != "" {
		reg = bf16Registry
	}
	var logf func(string, ...any)
	if os.Getenv("V") != "" {
		logf = t.Logf
	}
	pass, minRise := 0, 1.0
	for seed := 1; seed <= seeds; seed++ {
		e := newEnvOn(t, reg(t), Options{})
		e.rlLR = lr
		r := rlCurve(t, e, uint64(seed), steps, logf)
		first, last := rlFirstLast(r)
		if last >= first+rlRise {
			pass++
		}
		minRise = min(minRise, last-first)
		var line []string
		for _, v := range r {
			line = append(line, fmt.Sprintf("%.2f", v))
		}
		t.Logf("seed %2d: %.3f -> %.3f (rise %.3f): %s", seed, first, last, last-first, strings.Join(line, " "))
	}
	t.Logf("%d of %d seeds rise by %.2f; smallest rise %.3f (lr %v, %d jobs)", pass, seeds, rlRise, minRise, lr, steps)
}

// sweepNum is the number in the environment variable name, def when it is
// unset; a value that does not parse fails the test (a misspelt setting
// must not measure zero runs).
func sweepNum(t *testing.T, name string, def float64) float64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return x
}
