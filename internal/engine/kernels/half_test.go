package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"flywheel/internal/safetensors"
)

// randHalf returns n random half-precision values of type t (normal, with
// some subnormal and zero F16 values) and their float64 values.
func randHalf(r *rand.Rand, t HalfType, n int) ([]uint16, []float64) {
	h := make([]uint16, n)
	f := make([]float64, n)
	for i := range h {
		v := float32(r.NormFloat64())
		if i%17 == 3 {
			v *= 1e-6 // F16 subnormals
		}
		if i%29 == 5 {
			v = 0
		}
		if t == BF16 {
			h[i] = safetensors.F32ToBF16(v)
			f[i] = float64(math.Float32frombits(uint32(h[i]) << 16))
		} else {
			h[i] = safetensors.F32ToF16(v)
			f[i] = float64(safetensors.F16ToF32(h[i]))
		}
	}
	return h, f
}

// forSIMD runs f with every kernel variant this CPU has: AVX-512, AVX2
// and the pure-Go fallbacks.
func forSIMD(t *testing.T, f func(t *testing.T)) {
	h2, h5, hf, hv, hi, hn := haveAVX2, haveAVX512, haveF16C, haveVNNI, haveIntY, haveVNNIY
	defer func() { haveAVX2, haveAVX512, haveF16C, haveVNNI, haveIntY, haveVNNIY = h2, h5, hf, hv, hi, hn }()
	if h5 && hv {
		t.Run("avx512-vnni", f)
	}
	haveVNNI = false
	if h5 {
		t.Run("avx512", f)
	}
	haveAVX512 = false
	if h2 && hi && hn {
		t.Run("avx2-vnni", f)
	}
	haveVNNIY = false
	if h2 && hi {
		t.Run("avx2-int", f)
	}
	haveIntY = false
	if h2 {
		t.Run("avx2", f)
	}
	haveAVX2, haveF16C = false, false
	t.Run("go", f)
}

func TestHalfToFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forSIMD(t, func(t *testing.T) {
		for _, ty := range []HalfType{BF16, F16} {
			for _, n := range []int{0, 1, 7, 8, 9, 40, 64, 101, 120} {
				h, want := randHalf(r, ty, n)
				// every F16 bit pattern's class: inf, NaN, max, -0
				if ty == F16 && n > 4 {
					h[0], h[1], h[2], h[3] = 0x7c00, 0x7e01, 0x7bff, 0x8000
					for i := range 4 {
						want[i] = float64(safetensors.F16ToF32(h[i]))
					}
				}
				got := make([]float32, n)
				HalfToFloat32(ty, got, h)
				for i := range got {
					if float64(got[i]) != want[i] && !(math.IsNaN(want[i]) && math.IsNaN(float64(got[i]))) {
						t.Fatalf("%v n=%d: [%d] = %g, want %g", ty, n, i, got[i], want[i])
					}
				}
			}
		}
	})
}

// TestHalfGemm checks HalfGemmNT and HalfGemmNN against float64 products
// of the same half-precision values, on every SIMD variant, for decode
// (m <= 16, streamed) and blocked (m > 16) shapes, strides and beta.
func TestHalfGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ms := []int{1, 2, 5, 16, 17, 40}
	ns := []int{1, 3, 4, 9, 33, 70}
	ks := []int{0, 1, 7, 8, 16, 31, 33, 257}
	forSIMD(t, func(t *testing.T) {
		for _, ty := range []HalfType{BF16, F16} {
			for _, m := range ms {
				for _, n := range ns {
					for _, k := range ks {
						for _, beta := range []float32{0, 1, -0.5} {
							pad := (m + n + k) % 3
							checkHalfGemm(t, r, ty, false, m, n, k, pad, beta)
							checkHalfGemm(t, r, ty, true, m, n, k, pad, beta)
						}
					}
				}
			}
		}
	})
	// float32 weights, streamed (decode batches)
	forSIMD(t, func(t *testing.T) {
		for _, m := range ms[:4] {
			for _, n := range ns {
				for _, k := range ks {
					checkHalfGemm(t, r, 0, false, m, n, k, (m+n+k)%3, 0)
					checkHalfGemm(t, r, 0, false, m, n, k, (m+n+k)%3, -0.5)
				}
			}
		}
		checkHalfGemm(t, r, 0, false, 1, 4099, 576, 0, 0)
	})
	// Blocks: more weight rows than one widened block holds.
	t.Run("blocks", func(t *testing.T) {
		checkHalfGemm(t, r, BF16, false, 20, halfBlockElems/64+37, 64, 1, 0)
		checkHalfGemm(t, r, F16, true, 20, 64, halfBlockElems/64+37, 1, 1)
		checkHalfGemm(t, r, BF16, false, 3, 4099, 576, 0, 0)
	})
}

func checkHalfGemm(t *testing.T, r *rand.Rand, ty HalfType, nn bool, m, n, k, pad int, beta float32) {
	t.Helper()
	// NT: W [n,k]; NN: W [k,n].
	wr, wc := n, k
	if nn {
		wr, wc = k, n
	}
	lda, ldw, ldc := k+pad, wc+pad, n+pad
	a := randSlice(r, m*lda)
	var w []uint16
	var wf []float64
	var w32 []float32
	if ty == 0 { // float32 weights: GemvNT
		w32 = randSlice(r, wr*ldw)
		for _, v := range w32 {
			wf = append(wf, float64(v))
		}
	} else {
		w, wf = randHalf(r, ty, wr*ldw)
	}
	c := randSlice(r, m*ldc)
	if beta == 0 && len(c) > 0 {
		c[0] = float32(math.NaN())
	}
	c0 := append([]float32(nil), c...)
	switch {
	case ty == 0:
		GemvNT(m, n, k, a, lda, w32, ldw, beta, c, ldc)
	case nn:
		HalfGemmNN(ty, m, n, k, a, lda, w, ldw, beta, c, ldc)
	default:
		HalfGemmNT(ty, m, n, k, a, lda, w, ldw, beta, c, ldc)
	}
	name := fmt.Sprintf("%v nn=%v m=%d n=%d k=%d pad=%d beta=%g", ty, nn, m, n, k, pad, beta)
	for i := 0; i < m; i++ {
		for j := 0; j < ldc; j++ {
			got := c[i*ldc+j]
			if j >= n {
				if got != c0[i*ldc+j] {
					t.Fatalf("%s: padding C[%d,%d] changed", name, i, j)
				}
				continue
			}
			var s, sa float64
			for p := 0; p < k; p++ {
				var wv float64
				if nn {
					wv = wf[p*ldw+j]
				} else {
					wv = wf[j*ldw+p]
				}
				s += float64(a[i*lda+p]) * wv
				sa += math.Abs(float64(a[i*lda+p]) * wv)
			}
			if beta != 0 {
				s += float64(beta) * float64(c0[i*ldc+j])
				sa += math.Abs(float64(beta) * float64(c0[i*ldc+j]))
			}
			if d := math.Abs(float64(got) - s); math.IsNaN(float64(got)) || d > 1.2e-7*float64(k+4)*sa+1e-30 {
				t.Fatalf("%s: C[%d,%d] = %g, want %g (scale %g)", name, i, j, got, s, sa)
			}
		}
	}
}

// TestStreamedRowsIndependentOfBatch: a decode row's products are
// bit-identical whether it runs alone or in a batch of up to 16 rows (the
// n choices of a request must equal separate requests), for float32 and
// half weights on every SIMD variant.
func TestStreamedRowsIndependentOfBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	forSIMD(t, func(t *testing.T) {
		for _, ty := range []HalfType{0, BF16, F16} {
			for _, k := range []int{576, 70, 40, 33, 8} {
				const n, m = 37, 9
				a := randSlice(r, m*k)
				w32 := randSlice(r, n*k)
				w, _ := randHalf(r, max(ty, BF16), n*k)
				run := func(rows int, a []float32, c []float32) {
					if ty == 0 {
						GemvNT(rows, n, k, a, k, w32, k, 0, c, n)
					} else {
						HalfGemmNT(ty, rows, n, k, a, k, w, k, 0, c, n)
					}
				}
				all := make([]float32, m*n)
				run(m, a, all)
				for i := range m {
					one := make([]float32, n)
					run(1, a[i*k:(i+1)*k], one)
					for j := range one {
						if one[j] != all[i*n+j] {
							t.Fatalf("%v k=%d: row %d col %d alone %g, in a batch of %d %g", ty, k, i, j, one[j], m, all[i*n+j])
						}
					}
				}
			}
		}
	})
}

// TestShortRows: products with weight rows of a few values (a LoRA B
// factor's rank, shortRowsNT on AVX2) against a float64 computation, for
// row lengths 8..64, row counts around the kernel's groups of eight, beta
// 0 and 1, serial and parallel (the same bits), on every SIMD variant.
func TestShortRows(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	forSIMD(t, func(t *testing.T) {
		for _, k := range []int{8, 16, 24, 64} {
			for _, n := range []int{1, 7, 8, 9, 37, 4096} {
				const m = 3
				a, w := randSlice(r, m*k), randSlice(r, n*k)
				c0 := randSlice(r, m*n)
				for _, beta := range []float32{0, 1} {
					serial := append([]float32(nil), c0...)
					GemvNTSerial(m, n, k, a, k, w, k, beta, serial, n)
					parallel := append([]float32(nil), c0...)
					GemvNT(m, n, k, a, k, w, k, beta, parallel, n)
					for i := range m {
						for o := range n {
							want, mag := float64(beta)*float64(c0[i*n+o]), math.Abs(float64(beta)*float64(c0[i*n+o]))
							for p := range k {
								v := float64(a[i*k+p]) * float64(w[o*k+p])
								want += v
								mag += math.Abs(v)
							}
							got := serial[i*n+o]
							// k+1 float32 roundings at most (the products are exact
							// in the FMAs or rounded once; the sums in any order)
							if math.Abs(float64(got)-want) > float64(k+2)*0x1p-24*mag {
								t.Fatalf("k=%d n=%d beta %g: c[%d][%d] = %g, want %g", k, n, beta, i, o, got, want)
							}
							if parallel[i*n+o] != got {
								t.Fatalf("k=%d n=%d beta %g: c[%d][%d] = %g serial, %g parallel", k, n, beta, i, o, got, parallel[i*n+o])
							}
						}
					}
				}
			}
		}
	})
}

// GemvNTSerial is GemvNT on one goroutine: the same sums, bit for bit, and
// the same checks.
func TestGemvNTSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	forSIMD(t, func(t *testing.T) {
		for _, s := range []struct{ m, n, k int }{{1, 576, 16}, {1, 16, 576}, {8, 1536, 16}, {3, 37, 33}, {16, 640, 64}} {
			a, w := randSlice(r, s.m*s.k), randSlice(r, s.n*s.k)
			c0, c1 := randSlice(r, s.m*s.n), make([]float32, s.m*s.n)
			copy(c1, c0)
			GemvNT(s.m, s.n, s.k, a, s.k, w, s.k, 1, c0, s.n)
			GemvNTSerial(s.m, s.n, s.k, a, s.k, w, s.k, 1, c1, s.n)
			for i := range c0 {
				if c0[i] != c1[i] {
					t.Fatalf("%+v: c[%d] = %g serial, %g parallel", s, i, c1[i], c0[i])
				}
			}
		}
	})
	defer func() {
		if recover() == nil {
			t.Fatal("GemvNTSerial with a short w did not panic")
		}
	}()
	GemvNTSerial(1, 4, 8, make([]float32, 8), 8, make([]float32, 31), 8, 0, make([]float32, 4), 4)
}

// TestRowOrderBitIdentical checks that the row-at-a-time decode kernels
// return exactly the lockstep kernels' results (same sums, same order), for
// fp32, BF16 and F16 weights, batches 1..9 and odd sizes and strides, on
// the AVX-512 and the AVX2 kernels.
func TestRowOrderBitIdentical(t *testing.T) {
	defer SetRowOrder(SetRowOrder(true))
	r := rand.New(rand.NewPCG(5, 6))
	forSIMD(t, func(t *testing.T) { testRowOrderBitIdentical(t, r) })
}

func testRowOrderBitIdentical(t *testing.T, r *rand.Rand) {
	for _, ty := range []string{"f32", "bf16", "f16"} {
		for _, m := range []int{1, 2, 4, 5, 9} {
			for _, sz := range [][2]int{{20, 64}, {37, 96}, {64, 200}, {13, 33}} {
				n, k := sz[0], sz[1]
				ld := k + 3
				a := make([]float32, m*k)
				for i := range a {
					a[i] = float32(r.NormFloat64())
				}
				w := &wrows{ld: ld}
				switch ty {
				case "f32":
					w.f = make([]float32, n*ld)
					for i := range w.f {
						w.f[i] = float32(r.NormFloat64())
					}
				default:
					w.t = BF16
					if ty == "f16" {
						w.t = F16
					}
					w.h, _ = randHalf(r, w.t, n*ld)
				}
				var got [2][]float32
				for o, rows := range []bool{false, true} {
					SetRowOrder(rows)
					got[o] = make([]float32, m*n)
					streamNT(m, n, k, a, k, w, 0, got[o], n, true)
				}
				for i := range got[0] {
					if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
						t.Fatalf("%s m=%d n=%d k=%d: [%d] row order %g, lockstep %g", ty, m, n, k, i, got[1][i], got[0][i])
					}
				}
			}
		}
	}
}
