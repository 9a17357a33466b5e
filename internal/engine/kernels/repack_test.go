package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRepack4 checks the four-row layout against the plain rows it was
// made from (in place as into another buffer): DequantMat and DequantEmbedRow (AVX-512 and Go) give
// DequantRow's values bit for bit, for several group counts and row
// lengths of one block and more.
func TestRepack4(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	forSIMD(t, func(t *testing.T) {
		for _, xt := range allRepacked {
			qt := xt.plain()
			for _, rows := range []int{4, 8, 28} {
				for _, cols := range []int{32, 96, 576, 768} {
					if cols%qt.BlockElems() != 0 {
						continue
					}
					q, want := randQuant(r, qt, rows, cols)
					p := make([]byte, len(q))
					Repack4(qt, p, q, rows, cols)
					Repack4(qt, q, q, rows, cols) // in place
					for i := range p {
						if q[i] != p[i] {
							t.Fatalf("%v %dx%d: byte %d in place %#x, copied %#x", qt, rows, cols, i, q[i], p[i])
						}
					}
					got := make([]float32, len(want))
					DequantMat(xt, got, p, cols)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %dx%d: value %d = %g, DequantRow %g", xt, rows, cols, i, got[i], want[i])
						}
					}
					row := make([]float32, cols)
					for id := range rows {
						DequantEmbedRow(xt, row, p, id)
						for i, v := range row {
							if math.Float32bits(v) != math.Float32bits(want[id*cols+i]) {
								t.Fatalf("%v %dx%d: row %d value %d = %g, DequantRow %g", xt, rows, cols, id, i, v, want[id*cols+i])
							}
						}
					}
				}
			}
		}
	})
}

// TestRepackedGemm: QuantGemmNT (decode and prefill) and QuantGemmNN with
// four-row layouts against the float64 product, as TestQuantGemm (weight
// rows in groups of four: one group, several, several tasks; rows of A
// one, three — within every AVX2 integer kernel's maxM —, five and 17).
func TestRepackedGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	forSIMD(t, func(t *testing.T) {
		for _, qt := range allRepacked {
			for _, m := range []int{1, 3, 5, 17} {
				for _, n := range []int{4, 8, 68, 204} {
					for _, k := range []int{32, 96, 768} {
						if k%qt.BlockElems() != 0 {
							continue
						}
						for _, beta := range []float32{0, -0.5} {
							checkQuantGemm(t, r, qt, false, m, n, k, (m+n)%3, beta)
							if n <= 8 {
								checkQuantGemm(t, r, qt, true, m, k, n*qt.BlockElems(), (m+n)%3, beta)
							}
						}
					}
				}
			}
		}
	})
	checkQuantGemm(t, r, Q4_1x4, false, 20, halfBlockElems/64+36, 64, 1, 0)
}

// TestRepackedRefused: the row-at-a-time entry points refuse a four-row
// layout, and its products refuse rows that are not whole groups.
func TestRepackedRefused(t *testing.T) {
	for name, f := range map[string]func(){
		"DequantRow":  func() { DequantRow(Q4_1x4, make([]float32, 32), make([]byte, 20)) },
		"QuantizeRow": func() { QuantizeRow(Q4_0x4, make([]byte, 18), make([]float32, 32)) },
		"QuantGemmNT": func() {
			QuantGemmNT(Q4_1x4, 1, 6, 32, make([]float32, 32), 32, make([]byte, 6*20), 0, make([]float32, 6), 6)
		},
		"Repack4": func() { Repack4(Q4_1, make([]byte, 6*20), make([]byte, 6*20), 6, 32) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	if _, ok := QuantTypeFromGGML(math.MaxUint32); ok {
		t.Error("a four-row layout maps from a ggml type")
	}
}

// extremeX is the activations of the integer kernels' extreme tests, value
// i by name: each block at its largest values, of one sign or alternating.
// (A list, not a map: the same draws from r in every run.)
func extremeX(r *rand.Rand) []struct {
	name string
	x    func(i int) float32
} {
	return []struct {
		name string
		x    func(i int) float32
	}{
		{"max", func(int) float32 { return 1 }},
		{"near max", func(int) float32 { return 1 - float32(r.Float64())/64 }},
		{"alternating", func(i int) float32 { return float32(1-2*(i%2)) * (1 - float32(r.Float64())/64) }},
		{"negative", func(int) float32 { return -1 + float32(r.Float64())/1024 }},
	}
}

// checkExtremes repacks the rows×k matrix q of type qt and holds the
// integer kernel of its layout (skipped where it does not run) to within
// 5e-7 of Σ|x·w| of the exact product with its dequantised values, for
// each of extremeX's activations.
func checkExtremes(t *testing.T, r *rand.Rand, qt QuantType, q []byte, rows, k int) {
	t.Helper()
	rt := qt.RepackedType()
	if quantKernel(rt) == nil {
		t.Logf("%v: no integer kernel here", rt)
		return
	}
	wf := make([]float32, rows*k)
	DequantRow(qt, wf, q)
	w := make([]byte, len(q))
	Repack4(qt, w, q, rows, k)
	for _, e := range extremeX(r) {
		name := e.name
		x := make([]float32, k)
		for i := range x {
			x[i] = e.x(i)
		}
		c := make([]float32, rows)
		QuantGemmNT(rt, 1, rows, k, x, k, w, 0, c, rows)
		for j := range c {
			var want, mag float64
			for i := range k {
				want += float64(x[i]) * float64(wf[j*k+i])
				mag += math.Abs(float64(x[i]) * float64(wf[j*k+i]))
			}
			if d := math.Abs(float64(c[j]) - want); d > 5e-7*mag {
				t.Errorf("%v %s: row %d = %g, exact %g: error %.2g of Σ|x·w| %g", rt, name, j, c[j], want, d/mag, mag)
			}
		}
	}
}

// TestQ80x4Extremes: Q8_0x4's integer kernel (where it runs) at the ends
// of its ranges — every weight −128 or 127, x at its blocks' largest
// values, of one sign or alternating — stays within float32 noise of the
// exact product (its int32 sums would overflow without the split into
// two parts).
func TestQ80x4Extremes(t *testing.T) {
	const rows, k = 8, 256
	r := rand.New(rand.NewPCG(31, 32))
	q := make([]byte, rows*Q8_0.RowBytes(k))
	for row := range rows {
		for b := range k / 32 {
			blk := q[(row*k/32+b)*34:]
			blk[0], blk[1] = 0x00, 0x3c // d = 1
			for i := range 32 {
				v := int8(127)
				switch row % 4 {
				case 1:
					v = -128
				case 2:
					if i%2 == 1 {
						v = -128
					}
				case 3:
					v = int8(r.IntN(256) - 128)
				}
				blk[2+i] = byte(v)
			}
		}
	}
	checkExtremes(t, r, Q8_0, q, rows, k)
}

// TestQ5x4Extremes: the integer kernels of Q5_0x4 and Q5_1x4, and of
// Q4_0x4 and Q4_1x4 (where they run: AVX-512 VNNI, and AVX2's, which sum
// twice as many values a dword), with every value at its largest (31,
// 15: the bounds their int32 sums are exact to), at 0, or mixed, against
// x at its blocks' largest values: within float32 noise of the exact
// product.
func TestQ5x4Extremes(t *testing.T) {
	const rows, k = 8, 256
	r := rand.New(rand.NewPCG(33, 34))
	forSIMD(t, func(t *testing.T) {
		for _, qt := range []QuantType{Q5_0, Q5_1, Q4_0, Q4_1} {
			bb, vb := qt.BlockBytes(), 20 // a block's bytes, those of its values (the fifth bits and the nibbles)
			if qt == Q4_0 || qt == Q4_1 {
				vb = 16
			}
			q := make([]byte, rows*qt.RowBytes(k))
			for row := range rows {
				for b := range k / 32 {
					blk := q[(row*k/32+b)*bb : (row*k/32+b+1)*bb]
					blk[0], blk[1] = 0x00, 0x3c // d = 1
					if qt == Q5_1 || qt == Q4_1 {
						blk[2], blk[3] = 0x00, 0xbc // m = -1
					}
					for i := range vb {
						switch row % 4 {
						case 0:
							blk[bb-vb+i] = 0xff // every value at its largest (31, 15)
						case 2:
							blk[bb-vb+i] = 0x0f // largest, 15, 0, mixed
						case 3:
							blk[bb-vb+i] = byte(r.IntN(256))
						}
					}
				}
			}
			checkExtremes(t, r, qt, q, rows, k)
		}
	})
}

// TestKx4Extremes: the integer kernels of Q4_Kx4, Q5_Kx4 and Q6_Kx4
// (where they run: AVX-512 VNNI, and AVX2's, which sum 16 values a
// dword for Q4_Kx4 and Q5_Kx4 and 8 for Q6_Kx4) with every value,
// scale and min at its largest (Q6_K: q = 63, the bound its int32 sums
// are exact to; scales 127 or −128) or random, against x at its blocks'
// largest values: within float32 noise of the exact product.
func TestKx4Extremes(t *testing.T) {
	const rows, k = 8, 512
	r := rand.New(rand.NewPCG(35, 36))
	forSIMD(t, func(t *testing.T) {
		for _, qt := range []QuantType{Q4_K, Q5_K, Q6_K} {
			if quantKernel(qt.RepackedType()) == nil {
				t.Logf("%v: no integer kernel here", qt.RepackedType())
				continue
			}
			bb := qt.BlockBytes()
			q := make([]byte, rows*qt.RowBytes(k))
			for i := range q {
				q[i] = 0xff
			}
			for row := range rows {
				for b := range k / qk {
					blk := q[(row*k/qk+b)*bb : (row*k/qk+b+1)*bb]
					switch row % 4 {
					case 1:
						if qt == Q6_K {
							for g := range 16 {
								blk[192+g] = 0x80 // scale −128
							}
						}
					case 3:
						for i := range blk {
							blk[i] = byte(r.IntN(256))
						}
					}
					if qt == Q6_K {
						blk[208], blk[209] = 0x00, 0x3c // d = 1
					} else {
						blk[0], blk[1], blk[2], blk[3] = 0x00, 0x3c, 0x00, 0x38 // d = 1, dmin = 0.5
					}
				}
			}
			checkExtremes(t, r, qt, q, rows, k)
		}
	})
}
