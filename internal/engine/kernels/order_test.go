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
	o := halfOrder
	o.mu.Lock()
	o.decided.Store(false)
	o.calls, o.bytes, o.secs, o.n = 0, [2]float64{}, [2]float64{}, [2]int{}
	o.mu.Unlock()

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
		if o.decided.Load() {
			t.Fatalf("decided after %d calls, want %d", c, 2*calibCalls)
		}
		streamNT(1, n, k, a, k, w, 0, got, n, false)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("call %d: [%d] = %g, want %g", c, i, got[i], want[i])
			}
		}
	}
	if !o.decided.Load() || o.n != [2]int{calibCalls, calibCalls} {
		t.Fatalf("after %d calls: decided %v, timed calls %v", 2*calibCalls, o.decided.Load(), o.n)
	}
	rows := RowOrder()
	streamNT(1, n, k, a, k, w, 0, got, n, false)
	if RowOrder() != rows || o.n != [2]int{calibCalls, calibCalls} {
		t.Fatal("order changed after calibration")
	}
}

// TestQuantRowOrderBitIdentical checks that every quantized format's
// row-order kernel returns exactly its lockstep kernel's results.
func TestQuantRowOrderBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, qt := range []QuantType{Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K} {
		kern := quantKernel(qt)
		if kern == nil {
			t.Skipf("no %v kernel", qt)
		}
		// one block, odd and even numbers of blocks (the kernels take two
		// blocks per step and one at the end)
		for _, k := range []int{32, 96, 512, 768, 800} {
			if k%qt.BlockElems() != 0 {
				continue
			}
			const rows = 12
			x := randSlice(r, k)
			w, _ := randQuant(r, qt, rows, k)
			nb := k / qt.BlockElems()
			var prep []float32
			if kern.prep != nil {
				prep = make([]float32, kern.prepLen*nb)
				kern.prep(prep, x)
			}
			lock, row := make([]float32, rows), make([]float32, rows)
			kern.dots(nb, x, prep, w, qt.RowBytes(k), lock)
			kern.rowDots(nb, x, prep, w, qt.RowBytes(k), row)
			for i := range lock {
				if math.Float32bits(lock[i]) != math.Float32bits(row[i]) || lock[i] == 0 {
					t.Fatalf("%v k=%d row %d: row order %g, lockstep %g", qt, k, i, row[i], lock[i])
				}
			}
		}
	}
}
