package kernels

import (
	"time"

	"flywheel/internal/hugemem"
	"flywheel/internal/par"
)

// SumParallel returns the sum of x, split across GOMAXPROCS goroutines (the
// memory read-bandwidth probe: it streams x once with AVX2 loads).
func SumParallel(x []float32) float32 {
	W := workers()
	if len(x) < 1<<16 {
		W = 1
	}
	sums := make([]float32, W)
	par.Tasks(W, false, func(_, w int) {
		sums[w] = sumImpl(x[len(x)*w/W : len(x)*(w+1)/W])
	})
	var s float32
	for _, v := range sums {
		s += v
	}
	return s
}

// MeasureReadBandwidth estimates main-memory read bandwidth in GB/s (1e9
// bytes/s) by summing a float32 buffer of the given size (256 MiB if
// size <= 0) with all cores, best of reps passes (at least 1). It allocates
// and touches the buffer first; expect about 0.1 s per 256 MiB pass.
func MeasureReadBandwidth(size, reps int) float64 {
	if size <= 0 {
		size = 256 << 20
	}
	x := hugemem.Make[float32](size / 4)
	for i := range x {
		x[i] = 1
	}
	best := 0.0
	for range max(reps, 1) {
		t := time.Now()
		SumParallel(x)
		if gbs := float64(len(x)*4) / time.Since(t).Seconds() / 1e9; gbs > best {
			best = gbs
		}
	}
	return best
}
