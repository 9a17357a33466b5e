package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// attendRef is one head's softmax attention over n keys in float64: the
// scores' max m, l = Σ exp(s − m) and the unnormalised o = Σ exp(s − m)·V.
func attendRef(q []float32, d int, K, V []float32, rs, n int, scale float64) (m, l float64, o []float64) {
	s := make([]float64, n)
	m = math.Inf(-1)
	for p := range n {
		for i := range d {
			s[p] += float64(q[i]) * float64(K[p*rs+i])
		}
		s[p] *= scale
		m = max(m, s[p])
	}
	o = make([]float64, d)
	for p := range n {
		e := math.Exp(s[p] - m)
		l += e
		for i := range d {
			o[i] += e * float64(V[p*rs+i])
		}
	}
	return m, l, o
}

// AttendBlock's per-head state and MergeBlocks' output against float64, on
// every SIMD variant, for head sizes on and off the AVX-512 path (d a
// multiple of 16 or not), key counts on and off multiples of 4, strided
// rows, and blocks merged from uneven splits of the keys.
func TestAttendBlockAndMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forSIMD(t, func(t *testing.T) {
		for _, d := range []int{64, 128, 16, 24, 5} {
			for _, rep := range []int{1, 3, 4} {
				for _, n := range []int{1, 3, 4, 7, 31, 64, 65, 200} {
					for _, pad := range []int{0, 8} {
						rs := d + pad
						q := randSlice(r, rep*d)
						K, V := randSlice(r, n*rs), randSlice(r, n*rs)
						scale := float32(1 / math.Sqrt(float64(d)))
						o, ml, s := make([]float32, rep*d), make([]float32, 2*rep), make([]float32, rep*n)
						AttendBlock(q, rep, d, K, V, rs, n, scale, o, ml, s)
						for h := range rep {
							m, l, oRef := attendRef(q[h*d:(h+1)*d], d, K, V, rs, n, float64(scale))
							if math.Abs(float64(ml[2*h])-m) > 1e-5*(1+math.Abs(m)) || math.Abs(float64(ml[2*h+1])-l) > 1e-5*l {
								t.Fatalf("d=%d rep=%d n=%d rs=%d head %d: m, l = %g, %g, want %g, %g", d, rep, n, rs, h, ml[2*h], ml[2*h+1], m, l)
							}
							for i := range d {
								if math.Abs(float64(o[h*d+i])-oRef[i]) > 1e-5*l {
									t.Fatalf("d=%d rep=%d n=%d rs=%d head %d: o[%d] = %g, want %g", d, rep, n, rs, h, i, o[h*d+i], oRef[i])
								}
							}
						}
						// Uneven blocks merged: the normalised attention of all n keys.
						cuts := []int{0}
						for c := 0; c < n; {
							c = min(n, c+1+r.IntN(40))
							cuts = append(cuts, c)
						}
						nb := len(cuts) - 1
						stride := rep * (d + 2)
						part := make([]float32, nb*stride)
						for b := range nb {
							a, e := cuts[b], cuts[b+1]
							AttendBlock(q, rep, d, K[a*rs:], V[a*rs:], rs, e-a, scale, part[b*stride:b*stride+rep*d], part[b*stride+rep*d:(b+1)*stride], s)
						}
						for h := range rep {
							out := make([]float32, d)
							MergeBlocks(nb, d, part[h*d:], stride, part[rep*d+2*h:], stride, out)
							_, l, oRef := attendRef(q[h*d:(h+1)*d], d, K, V, rs, n, float64(scale))
							for i := range d {
								if want := oRef[i] / l; math.Abs(float64(out[i])-want) > 1e-5 {
									t.Fatalf("d=%d rep=%d n=%d blocks %v head %d: merged[%d] = %g, want %g", d, rep, n, cuts, h, i, out[i], want)
								}
							}
						}
					}
				}
			}
		}
	})
}

// The AVX-512 even/odd permutation matches its definition.
func TestEvenOdd(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	forSIMD(t, func(t *testing.T) {
		for _, n := range []int{32, 64, 576, 608} {
			x := randSlice(r, n+7)
			got := make([]float32, n)
			evenOdd(got, x)
			for b := 0; b < n; b += 32 {
				for i := range 16 {
					if got[b+i] != x[b+2*i] || got[b+16+i] != x[b+2*i+1] {
						t.Fatalf("n=%d block %d lane %d: got %g, %g, want %g, %g", n, b/32, i, got[b+i], got[b+16+i], x[b+2*i], x[b+2*i+1])
					}
				}
			}
		}
	})
}

// A streamed product's tasks cover its rows once, in order, in multiples
// of 4 rows (but the last), no shorter than streamMinChunk bytes (but the
// last), and get shorter towards the end; front-loaded, the workers' first
// tasks (one each) cover at least 4/5 of the rows, less 4 a worker, when
// the product has that many tasks.
func TestStreamSplit(t *testing.T) {
	for _, front := range []bool{false, true} {
		for _, n := range []int{1, 4, 37, 576, 960, 3072, 49152} {
			for _, rowBytes := range []int{64, 1152, 2304, 8192, 1 << 16} {
				s := newStreamSplit(n, rowBytes, front)
				tasks := s.tasks()
				j, prev := 0, math.MaxInt
				for ti := range tasks {
					j0, j1 := s.task(ti)
					if j0 != j || j1 <= j0 || j1 > n {
						t.Fatalf("n=%d rowBytes=%d front=%v: task %d is [%d, %d) after %d", n, rowBytes, front, ti, j0, j1, j)
					}
					if j1 < n && ((j1-j0)%4 != 0 || (j1-j0)*rowBytes < min(streamMinChunk, 4*rowBytes)) {
						t.Fatalf("n=%d rowBytes=%d front=%v: task %d has %d rows", n, rowBytes, front, ti, j1-j0)
					}
					if j1 < n && j1-j0 > prev {
						t.Fatalf("n=%d rowBytes=%d front=%v: task %d (%d rows) longer than the one before (%d)", n, rowBytes, front, ti, j1-j0, prev)
					}
					if front && ti == workers()-1 && j1 < 4*n/5-4*workers() {
						t.Fatalf("n=%d rowBytes=%d: the workers' first tasks end at row %d", n, rowBytes, j1)
					}
					prev, j = j1-j0, j1
				}
				if j != n {
					t.Fatalf("n=%d rowBytes=%d front=%v: tasks end at %d", n, rowBytes, front, j)
				}
			}
		}
	}
}

// With AVX2 AttendBlock's kernels (scoresY, axpyRowsY) give attendLoop's
// results bit for bit (attendLoop then runs the AVX2 dot4 and axpy4 four
// keys at a time; without AVX2 AttendBlock is attendLoop): head sizes with
// and without a 16-element step and an 8-element tail, key counts on and
// off multiples of 4, strided rows. The AVX-512 kernels sum in their own
// order (TestAttendBlockAndMerge checks them against float64).
func TestAttendBlockAVX2Identical(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	forSIMD(t, func(t *testing.T) {
		if haveAVX512 {
			t.Skip("the AVX-512 kernels")
		}
		for _, d := range []int{64, 128, 8, 24, 40, 72} {
			for _, rep := range []int{1, 3} {
				for _, n := range []int{1, 3, 4, 7, 16, 33, 144} {
					rs := d + 8
					q, K, V := randSlice(r, rep*d), randSlice(r, n*rs), randSlice(r, n*rs)
					o1, o2 := make([]float32, rep*d), make([]float32, rep*d)
					ml1, ml2 := make([]float32, 2*rep), make([]float32, 2*rep)
					s1, s2 := make([]float32, rep*n), make([]float32, rep*n)
					AttendBlock(q, rep, d, K, V, rs, n, 0.125, o1, ml1, s1)
					attendLoop(q, rep, d, K, V, rs, n, 0.125, o2, ml2, s2)
					for i := range o1 {
						if o1[i] != o2[i] {
							t.Fatalf("d=%d rep=%d n=%d: o[%d] = %g, the four-key loop's %g", d, rep, n, i, o1[i], o2[i])
						}
					}
					for i := range ml1 {
						if ml1[i] != ml2[i] {
							t.Fatalf("d=%d rep=%d n=%d: m, l [%d] = %g, the four-key loop's %g", d, rep, n, i, ml1[i], ml2[i])
						}
					}
				}
			}
		}
	})
}
