package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refSgemm is a float64 reference; it also returns, per element of C, the
// magnitude scale alpha*sum|a||b| + |beta*c| used for the error bound.
func refSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (want, scale []float64) {
	want = make([]float64, m*n)
	scale = make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, sa float64
			for p := 0; p < k; p++ {
				var av, bv float64
				if transA {
					av = float64(a[p*lda+i])
				} else {
					av = float64(a[i*lda+p])
				}
				if transB {
					bv = float64(b[j*ldb+p])
				} else {
					bv = float64(b[p*ldb+j])
				}
				s += av * bv
				sa += math.Abs(av * bv)
			}
			w := float64(alpha) * s
			sc := math.Abs(float64(alpha)) * sa
			if beta != 0 {
				w += float64(beta) * float64(c[i*ldc+j])
				sc += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			want[i*n+j] = w
			scale[i*n+j] = sc
		}
	}
	return
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	pad            int // extra stride on lda/ldb/ldc
}

func (g gemmCase) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_m%d_n%d_k%d_a%g_b%g_pad%d", t(g.transA), t(g.transB), g.m, g.n, g.k, g.alpha, g.beta, g.pad)
}

// checkGemm runs one case on be and compares against the float64 reference.
func checkGemm(t *testing.T, be Backend, g gemmCase, r *rand.Rand) {
	t.Helper()
	ar, ac := g.m, g.k
	if g.transA {
		ar, ac = g.k, g.m
	}
	br, bc := g.k, g.n
	if g.transB {
		br, bc = g.n, g.k
	}
	lda, ldb, ldc := ac+g.pad, bc+g.pad, g.n+g.pad
	a := randSlice(r, max(0, ar*lda))
	b := randSlice(r, max(0, br*ldb))
	c := randSlice(r, max(0, g.m*ldc))
	if g.beta == 0 && len(c) > 0 {
		c[0] = float32(math.NaN()) // beta==0 must overwrite, not multiply
	}
	c0 := append([]float32(nil), c...)
	want, scale := refSgemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, c, ldc)
	be.Sgemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, c, ldc)
	tol := 1.2e-7 * float64(g.k+4)
	for i := 0; i < g.m; i++ {
		for j := 0; j < ldc; j++ {
			got := c[i*ldc+j]
			if j >= g.n {
				if got != c0[i*ldc+j] && !(math.IsNaN(float64(got)) && math.IsNaN(float64(c0[i*ldc+j]))) {
					t.Fatalf("%s %v: padding C[%d,%d] changed", be.Name(), g, i, j)
				}
				continue
			}
			w, s := want[i*g.n+j], scale[i*g.n+j]
			if math.IsNaN(float64(got)) || math.Abs(float64(got)-w) > tol*s+1e-30 {
				t.Fatalf("%s %v: C[%d,%d] = %g, want %g (scale %g)", be.Name(), g, i, j, got, w, s)
			}
		}
	}
}

func gemmCases(short bool) []gemmCase {
	var cs []gemmCase
	dims := []int{1, 2, 5, 6, 7, 16, 17, 33, 70}
	ks := []int{0, 1, 3, 8, 31, 64, 257}
	if short {
		dims = []int{1, 5, 7, 17}
		ks = []int{0, 1, 9, 33}
	}
	r := rand.New(rand.NewPCG(1, 2))
	ab := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {2, -1}, {0, 0.5}}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, m := range dims {
				for _, n := range dims {
					k := ks[r.IntN(len(ks))]
					x := ab[r.IntN(len(ab))]
					cs = append(cs, gemmCase{ta, tb, m, n, k, x[0], x[1], r.IntN(3) * 3})
				}
			}
			// larger shapes: blocking edges, parallel split, GEMV paths
			big := []gemmCase{
				{ta, tb, 150, 130, 300, 1, 0, 1},
				{ta, tb, 1, 600, 577, 1, 0, 0},
				{ta, tb, 1, 777, 300, 0.5, 1, 4},
				{ta, tb, 600, 1, 577, 1, 0, 2},
				{ta, tb, 333, 1, 129, 2, 0.5, 0},
				{ta, tb, 2, 300, 200, 1, 1, 0},
				{ta, tb, 97, 3, 130, 1, 0, 1},
			}
			if short {
				big = []gemmCase{
					{ta, tb, 40, 35, 70, 1, 0, 1},
					{ta, tb, 1, 300, 120, 1, 0, 0},
					{ta, tb, 130, 1, 90, 2, 0.5, 3},
				}
			}
			cs = append(cs, big...)
		}
	}
	return cs
}

func testBackend(t *testing.T, be Backend) {
	short := testing.Short() || raceEnabled
	r := rand.New(rand.NewPCG(3, 4))
	for _, g := range gemmCases(short) {
		checkGemm(t, be, g, r)
	}
}

func TestNaive(t *testing.T) { testBackend(t, Naive{}) }

func TestGo(t *testing.T) {
	testBackend(t, Go{})
	testBackend(t, Go{Threads: 1})
}

// kernelVariants runs f once per micro-kernel this CPU can run (avx512,
// avx2, pure go), restoring the detected flags afterwards.
func kernelVariants(t *testing.T, f func(t *testing.T)) {
	h2, h5 := haveAVX2, haveAVX512
	defer func() { haveAVX2, haveAVX512 = h2, h5 }()
	if h5 {
		t.Run("avx512", f)
	}
	haveAVX512 = false
	if h2 {
		t.Run("avx2", f)
	}
	haveAVX2 = false
	t.Run("go", f)
}

// TestGoSmallBlocks shrinks the cache blocks so small shapes cross every
// kc/mc/nc boundary, for every micro-kernel variant, with operands always
// packed and always read in place where the kernel can.
func TestGoSmallBlocks(t *testing.T) {
	defer func(k, m, n, s int) { kcBlock, mcMax, ncBlock, smallMDot = k, m, n, s }(kcBlock, mcMax, ncBlock, smallMDot)
	defer func(a, b int) { directAMaxN, directBMaxM = a, b }(directAMaxN, directBMaxM)
	kcBlock, mcMax, ncBlock, smallMDot = 20, 12, 80, 0
	for _, direct := range []int{0, 1 << 30} {
		directAMaxN, directBMaxM = direct, direct
		t.Run(fmt.Sprint("direct=", direct > 0), testSmallBlocks)
	}
}

func testSmallBlocks(t *testing.T) {
	kernelVariants(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, g := range []gemmCase{
					{ta, tb, 50, 110, 45, 1, 0, 2},
					{ta, tb, 13, 97, 41, -1, 0.5, 0},
					{ta, tb, 7, 33, 61, 1.5, 1, 1},
					{ta, tb, 2, 40, 30, 1, 0, 0},
				} {
					checkGemm(t, Go{}, g, r)
				}
			}
		}
	})
}

// TestGoKernels runs the standard cases through every micro-kernel variant.
func TestGoKernels(t *testing.T) {
	kernelVariants(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		for _, g := range gemmCases(true) {
			checkGemm(t, Go{}, g, r)
		}
	})
}

func TestSgemmPanicsOnShortSlice(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic on short C")
		}
	}()
	Go{}.Sgemm(false, false, 4, 4, 4, 1, make([]float32, 16), 4, make([]float32, 16), 4, 0, make([]float32, 15), 4)
}

// TestGemmSlabsBitIdentical checks that a product split into slabs of
// columns or of rows (gemmSlabs), and one through the shared
// decomposition, give one worker's results bit for bit, padding untouched,
// for every micro-kernel variant, both layouts of each operand and beta
// 0, 1 and another.
func TestGemmSlabsBitIdentical(t *testing.T) {
	kernelVariants(t, func(t *testing.T) {
		nr := tileN()
		r := rand.New(rand.NewPCG(9, 10))
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, g := range []gemmCase{
					{ta, tb, 40, 2*slabPanels*nr + 5, 70, 1, 0, 1},  // column slabs
					{ta, tb, 2*slabPanels*mr + 7, 50, 300, 1, 1, 0}, // row slabs
					{ta, tb, 3 * slabPanels * mr, 3*slabPanels*nr + 9, 45, -0.5, 0.5, 2},
					// a LoRA gradient's shape (dB = dyᵀ·xa): k shorter than
					// the second slab's first row, A and B exactly as long
					// as they must be
					{ta, tb, 200, 16, 60, 1, 0, 3},
					{ta, tb, 16, 2*slabPanels*nr + 3, 5, 1, 0, 0},
				} {
					ar, ac := g.m, g.k
					if ta {
						ar, ac = g.k, g.m
					}
					br, bc := g.k, g.n
					if tb {
						br, bc = g.n, g.k
					}
					lda, ldb, ldc := ac+g.pad, bc+g.pad, g.n+g.pad
					a, b := randSlice(r, (ar-1)*lda+ac), randSlice(r, (br-1)*ldb+bc)
					c0 := randSlice(r, g.m*ldc)
					want := append([]float32(nil), c0...)
					gemm(1, ta, tb, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, want, ldc)
					for _, way := range []string{"slabs", "gemm", "shared"} {
						c := append([]float32(nil), c0...)
						switch way {
						case "slabs":
							if !gemmSlabs(2, ta, tb, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, c, ldc) {
								t.Fatalf("%v: no slabs", g)
							}
						case "gemm":
							gemm(2, ta, tb, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, c, ldc)
						case "shared":
							old := slabPanels
							slabPanels = 1 << 30
							gemm(2, ta, tb, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, c, ldc)
							slabPanels = old
						}
						for i := range c {
							if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%v %s: C[%d,%d] = %g, one worker's %g", g, way, i/ldc, i%ldc, c[i], want[i])
							}
						}
					}
				}
			}
		}
	})
}
