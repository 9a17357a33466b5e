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
		for _, qt := range []QuantType{Q4_1, Q4_0} {
			for _, rows := range []int{4, 8, 28} {
				for _, cols := range []int{32, 96, 576} {
					q, want := randQuant(r, qt, rows, cols)
					p := make([]byte, len(q))
					Repack4(qt, p, q, rows, cols)
					Repack4(qt, q, q, rows, cols) // in place
					for i := range p {
						if q[i] != p[i] {
							t.Fatalf("%v %dx%d: byte %d in place %#x, copied %#x", qt, rows, cols, i, q[i], p[i])
						}
					}
					xt := qt.RepackedType()
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
// rows in groups of four: one group, several, several tasks).
func TestRepackedGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	forSIMD(t, func(t *testing.T) {
		for _, qt := range []QuantType{Q4_1x4, Q4_0x4} {
			for _, m := range []int{1, 2, 5, 17} {
				for _, n := range []int{4, 8, 68, 204} {
					for _, k := range []int{32, 96, 768} {
						for _, beta := range []float32{0, -0.5} {
							checkQuantGemm(t, r, qt, false, m, n, k, (m+n)%3, beta)
							if n <= 8 {
								checkQuantGemm(t, r, qt, true, m, k, n*32, (m+n)%3, beta)
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
