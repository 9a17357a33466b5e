package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestOrderCalibrates checks the start-up calibration of the one-row
// kernels' access order: calls that stream enough weight bytes alternate
// the two orders, each result bit-identical to the lockstep kernel's, and
// after calibCalls timed calls of each the order is decided and stays.
func TestOrderCalibrates(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	defer SetRowOrder(SetRowOrder(true))
	order.mu.Lock()
	order.decided.Store(false)
	order.calls, order.bytes, order.secs, order.n = 0, [2]float64{}, [2]float64{}, [2]int{}
	order.mu.Unlock()

	const n, k = 256, 256 // 256 KiB of float32 weights: timed
	r := rand.New(rand.NewPCG(7, 8))
	a := make([]float32, k)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	w := &wrows{ld: k, f: make([]float32, n*k)}
	for i := range w.f {
		w.f[i] = float32(r.NormFloat64())
	}
	want := make([]float32, n)
	for j := 0; j < n; j += 4 {
		var d [4]float32
		dot1F32Z(k, &a[0], &w.f[j*k], k, &d)
		copy(want[j:], d[:])
	}
	got := make([]float32, n)
	for c := range 2 * calibCalls {
		if order.decided.Load() {
			t.Fatalf("decided after %d calls, want %d", c, 2*calibCalls)
		}
		streamNT(1, n, k, a, k, w, 0, got, n, false)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("call %d: [%d] = %g, want %g", c, i, got[i], want[i])
			}
		}
	}
	if !order.decided.Load() || order.n != [2]int{calibCalls, calibCalls} {
		t.Fatalf("after %d calls: decided %v, timed calls %v", 2*calibCalls, order.decided.Load(), order.n)
	}
	rows := RowOrder()
	streamNT(1, n, k, a, k, w, 0, got, n, false)
	if RowOrder() != rows || order.n != [2]int{calibCalls, calibCalls} {
		t.Fatal("order changed after calibration")
	}
}
