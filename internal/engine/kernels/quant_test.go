package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// allQuant is every file format; allRepacked every four-row layout.
var allQuant, allRepacked = FileTypes(), repackedTypes()

func repackedTypes() []QuantType {
	var ts []QuantType
	for _, t := range FileTypes() {
		if r := t.RepackedType(); r != QNone {
			ts = append(ts, r)
		}
	}
	return ts
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestDequantGGUF compares DequantRow bit for bit with the gguf Python
// package's dequantize on the blocks testdata/quant/gen.py wrote, with
// the AVX-512 row kernels and in Go.
func TestDequantGGUF(t *testing.T) {
	forSIMD(t, testDequantGGUF)
}

func testDequantGGUF(t *testing.T) {
	for _, qt := range allQuant {
		dir := filepath.Join("testdata", "quant")
		q, err := os.ReadFile(filepath.Join(dir, qt.String()+".q"))
		if err != nil {
			t.Fatal(err)
		}
		want := readF32(t, filepath.Join(dir, qt.String()+".f32"))
		if len(q) != qt.RowBytes(len(want)) {
			t.Fatalf("%v: %d bytes for %d values", qt, len(q), len(want))
		}
		got := make([]float32, len(want))
		DequantRow(qt, got, q)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v: value %d = %g, gguf %g", qt, i, got[i], want[i])
			}
		}
	}
}

// TestQuantizeGGUF checks that QuantizeRow writes the same bytes as the
// gguf package's quantize (ggml's reference rounding) for Q8_0, Q4_0,
// Q4_1, Q5_0 and Q5_1.
func TestQuantizeGGUF(t *testing.T) {
	for _, qt := range []QuantType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1} {
		dir := filepath.Join("testdata", "quant")
		src := readF32(t, filepath.Join(dir, qt.String()+".src.f32"))
		want, err := os.ReadFile(filepath.Join(dir, qt.String()+".q"))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, qt.RowBytes(len(src)))
		QuantizeRow(qt, got, src)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: byte %d (block %d) = %#x, gguf %#x", qt, i, i/qt.BlockBytes(), got[i], want[i])
			}
		}
	}
}

// TestQuantRoundTrip quantizes random rows and checks each dequantised
// value is within the format's step of the original.
func TestQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, qt := range allQuant {
		n := 4 * 256
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		q := make([]byte, qt.RowBytes(n))
		QuantizeRow(qt, q, x)
		y := make([]float32, n)
		DequantRow(qt, y, q)
		var amax float64
		for _, v := range x {
			amax = max(amax, math.Abs(float64(v)))
		}
		// relative step: 4 bits ~ 1/15 of the range, 5 bits 1/31, 6 bits 1/63, 8 bits 1/127.
		tol := map[QuantType]float64{Q8_0: 1.0 / 127, Q4_0: 1.0 / 7, Q4_1: 2.0 / 15, Q4_K: 2.0 / 15, Q5_K: 2.0 / 31, Q6_K: 1.0 / 31, Q5_0: 1.0 / 15, Q5_1: 2.0 / 31}[qt] * amax
		var worst float64
		for i := range x {
			worst = max(worst, math.Abs(float64(x[i]-y[i])))
		}
		if worst > tol {
			t.Errorf("%v: worst round-trip error %g > %g", qt, worst, tol)
		}
	}
}

func TestQuantTypeInfo(t *testing.T) {
	want := map[uint32]struct {
		t            QuantType
		name         string
		elems, bytes int
	}{
		8: {Q8_0, "Q8_0", 32, 34}, 2: {Q4_0, "Q4_0", 32, 18}, 3: {Q4_1, "Q4_1", 32, 20},
		12: {Q4_K, "Q4_K", 256, 144}, 13: {Q5_K, "Q5_K", 256, 176}, 14: {Q6_K, "Q6_K", 256, 210},
		6: {Q5_0, "Q5_0", 32, 22}, 7: {Q5_1, "Q5_1", 32, 24},
	}
	for g, w := range want {
		qt, ok := QuantTypeFromGGML(g)
		if !ok || qt != w.t || qt.String() != w.name || qt.BlockElems() != w.elems || qt.BlockBytes() != w.bytes {
			t.Errorf("ggml %d: %v %v %q %d %d", g, qt, ok, qt.String(), qt.BlockElems(), qt.BlockBytes())
		}
	}
	for _, g := range []uint32{0, 1, 30, 10, 11, 99, math.MaxUint32} {
		if qt, ok := QuantTypeFromGGML(g); ok {
			t.Errorf("ggml %d: got %v", g, qt)
		}
	}
	if QNone.BlockElems() != 0 || QuantType(200).BlockBytes() != 0 {
		t.Error("invalid types have block sizes")
	}
}

func TestDequantRowPanicsOnBadLength(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	DequantRow(Q4_1, make([]float32, 32), make([]byte, 19))
}

// randQuant returns rows rows of cols random values quantized as t and
// their dequantised values.
// A four-row layout's are quantized as its block format, then repacked.
func randQuant(r *rand.Rand, t QuantType, rows, cols int) ([]byte, []float32) {
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	p := t.plain()
	q := make([]byte, p.RowBytes(len(x)))
	QuantizeRow(p, q, x)
	DequantRow(p, x, q)
	if t.Repacked() {
		rq := make([]byte, len(q))
		Repack4(p, rq, q, rows, cols)
		q = rq
	}
	return q, x
}

// TestQuantGemm checks QuantGemmNT (streamed decode rows, and blocked
// prefill) and QuantGemmNN against a float64 product with the dequantised
// weights, for every format and kernel variant: weight rows of one block
// and of several, tasks of one to several 64-row chunks, odd row counts
// (tails of the 4-row groups), strided A and C, and beta 0, -0.5 (1 in
// the blocked case).
func TestQuantGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	forSIMD(t, func(t *testing.T) {
		for _, qt := range allQuant {
			for _, m := range []int{1, 2, 5, 16, 17} {
				for _, n := range []int{1, 3, 4, 9, 70, 203} {
					for _, k := range []int{32, 96, 256, 768} {
						if k%qt.BlockElems() != 0 || (n == 203 && m > 5) {
							continue
						}
						for _, beta := range []float32{0, -0.5} {
							checkQuantGemm(t, r, qt, false, m, n, k, (m+n)%3, beta)
							if k == 256 && n <= 9 {
								checkQuantGemm(t, r, qt, true, m, k, n*qt.BlockElems(), (m+n)%3, beta)
							}
						}
					}
				}
			}
		}
	})
	// more weight rows than one dequantised block holds
	checkQuantGemm(t, r, Q4_1, false, 20, halfBlockElems/64+37, 64, 1, 0)
	checkQuantGemm(t, r, Q8_0, true, 20, 64, halfBlockElems/64+37*32, 1, 1)
}

func checkQuantGemm(t *testing.T, r *rand.Rand, qt QuantType, nn bool, m, n, k, pad int, beta float32) {
	t.Helper()
	wr, wc := n, k // NT: W [n,k]; NN: W [k,n]
	if nn {
		wr, wc = k, n
	}
	lda, ldc := k+pad, n+pad
	a := randSlice(r, m*lda)
	c := randSlice(r, m*ldc)
	w, wf := randQuant(r, qt, wr, wc)
	want := make([]float64, len(c))
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				wv := wf[j*k+p]
				if nn {
					wv = wf[p*n+j]
				}
				s += float64(a[i*lda+p]) * float64(wv)
			}
			want[i*ldc+j] = s + float64(beta)*float64(c[i*ldc+j])
		}
	}
	if nn {
		QuantGemmNN(qt, m, n, k, a, lda, w, beta, c, ldc)
	} else {
		QuantGemmNT(qt, m, n, k, a, lda, w, beta, c, ldc)
	}
	for i := range m {
		for j := range n {
			o := i*ldc + j
			if d := math.Abs(float64(c[o]) - want[o]); d > 1e-4*math.Sqrt(float64(k))*(1+math.Abs(want[o])) {
				t.Fatalf("%v nn=%v m=%d n=%d k=%d beta=%g: c[%d,%d] = %g, want %g", qt, nn, m, n, k, beta, i, j, c[o], want[o])
			}
		}
	}
}

// TestQuantDecodeExact holds batch-1 decode products (the in-register
// kernels, both access orders, the integer kernels of the four-row
// layouts where the CPU has VNNI, and the Go fallback) to the exact
// product of the activations with the dequantised weights: the error of
// each output, relative to Σ|x·w| over its row, stays within float32
// summation-order noise. The logprobs RL trains on come from these
// products and the trainer recomputes them with the dequantised float
// weights, so a kernel that rounds the activations to 8 bits (as
// llama.cpp's integer dots do) or the weights differently fails here.
// With outliers in x (a few values 100 times the rest, as real
// activations have) the bound is at each block's scale: the integer
// kernels round x to 2^-24 of its 32-value block's largest |x|, so the
// error stays within 2e-7 of Σ over blocks of max|x|·Σ|w| (measured:
// 7e-8, over 200 seeds).
func TestQuantDecodeExact(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	defer SetRowOrder(SetRowOrder(true))
	forSIMD(t, func(t *testing.T) {
		for _, qt := range append(allQuant, allRepacked...) {
			for _, k := range []int{800, 1536, 2304} {
				if k%qt.BlockElems() != 0 {
					continue
				}
				const n = 16
				x := randSlice(r, k)
				w, wf := randQuant(r, qt, n, k)
				xo := append([]float32(nil), x...) // with outliers
				for i := range 3 {
					xo[(i*7919+k/3)%k] *= 100
				}
				for _, rows := range []bool{false, true} {
					SetRowOrder(rows)
					c, co := make([]float32, n), make([]float32, n)
					QuantGemmNT(qt, 1, n, k, x, k, w, 0, c, n)
					QuantGemmNT(qt, 1, n, k, xo, k, w, 0, co, n)
					// x scaled by tiny and huge powers of two: the outputs scale
					// exactly (every kernel's arithmetic commutes with it)
					for _, e := range []int{-110, 100} {
						xe, ce := make([]float32, k), make([]float32, n)
						for p, v := range x {
							xe[p] = float32(math.Ldexp(float64(v), e))
						}
						QuantGemmNT(qt, 1, n, k, xe, k, w, 0, ce, n)
						for j := range n {
							if got := math.Ldexp(float64(ce[j]), -e); got != float64(c[j]) {
								t.Errorf("%v k=%d row order %v, x·2^%d: out[%d]·2^%d = %g, unscaled %g", qt, k, rows, e, j, -e, got, c[j])
							}
						}
					}
					for j := range n {
						var want, mag, wantO, magO float64
						for b := 0; b < k; b += 32 {
							var xmax, wsum float64
							for p := b; p < b+32; p++ {
								v := float64(x[p]) * float64(wf[j*k+p])
								want += v
								mag += math.Abs(v)
								wantO += float64(xo[p]) * float64(wf[j*k+p])
								xmax = max(xmax, math.Abs(float64(xo[p])))
								wsum += math.Abs(float64(wf[j*k+p]))
							}
							magO += xmax * wsum
						}
						if rel := math.Abs(float64(c[j])-want) / mag; rel > 5e-7 {
							t.Errorf("%v k=%d row order %v: out[%d] = %g, exact %g: error %.2g of Σ|x·w|", qt, k, rows, j, c[j], want, rel)
						}
						if rel := math.Abs(float64(co[j])-wantO) / magO; rel > 2e-7 {
							t.Errorf("%v k=%d row order %v, outliers: out[%d] = %g, exact %g: error %.2g of Σ max|x|·Σ|w| per block", qt, k, rows, j, co[j], wantO, rel)
						}
					}
				}
			}
		}
	})
}
