package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

var vecLens = []int{0, 1, 3, 7, 8, 9, 15, 16, 31, 32, 33, 63, 100, 576, 1000}

// withAndWithoutAsm runs f with the assembly enabled (when the CPU has it)
// and with the pure-Go fallbacks.
func withAndWithoutAsm(t *testing.T, f func(t *testing.T)) {
	t.Run("asm", f)
	defer func(h bool) { haveAVX2 = h }(haveAVX2)
	haveAVX2 = false
	t.Run("go", f)
}

func close32(got float32, want, scale, tol float64) bool {
	return math.Abs(float64(got)-want) <= tol*scale+1e-30
}

func TestDotAxpyScaleAddSum(t *testing.T) {
	withAndWithoutAsm(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 1))
		for _, n := range vecLens {
			x, y := randSlice(r, n), randSlice(r, n+3)
			var want, scale, sum, sumAbs float64
			for i := range n {
				want += float64(x[i]) * float64(y[i])
				scale += math.Abs(float64(x[i]) * float64(y[i]))
				sum += float64(x[i])
				sumAbs += math.Abs(float64(x[i]))
			}
			tol := 1.2e-7 * float64(n+4)
			if got := Dot(x, y); !close32(got, want, scale, tol) {
				t.Fatalf("Dot n=%d: %g want %g", n, got, want)
			}
			if got := Sum(x); !close32(got, sum, sumAbs, tol) {
				t.Fatalf("Sum n=%d: %g want %g", n, got, sum)
			}
			y0 := append([]float32(nil), y...)
			Axpy(-1.5, x, y)
			for i := range y {
				w, sc := float64(y0[i]), math.Abs(float64(y0[i]))
				if i < n {
					w += -1.5 * float64(x[i])
					sc += 1.5 * math.Abs(float64(x[i]))
				}
				if !close32(y[i], w, sc, 2.4e-7) {
					t.Fatalf("Axpy n=%d i=%d: %g want %g", n, i, y[i], w)
				}
			}
			copy(y, y0)
			Scale(0.25, y[:n])
			for i := range y {
				w := float64(y0[i])
				if i < n {
					w *= 0.25
				}
				if float64(y[i]) != w {
					t.Fatalf("Scale n=%d i=%d: %g want %g", n, i, y[i], w)
				}
			}
			copy(y, y0)
			Add(y[:n], x)
			for i := range y {
				w := y0[i]
				if i < n {
					w += x[i]
				}
				if y[i] != w {
					t.Fatalf("Add n=%d i=%d: %g want %g", n, i, y[i], w)
				}
			}
		}
	})
}

func TestMatVec(t *testing.T) {
	withAndWithoutAsm(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(2, 2))
		shapes := [][2]int{{1, 1}, {3, 5}, {4, 8}, {7, 17}, {33, 64}, {130, 257}, {600, 70}}
		if !raceEnabled && !testing.Short() {
			shapes = append(shapes, [2]int{1000, 333})
		}
		for _, s := range shapes {
			rows, cols := s[0], s[1]
			for _, ldw := range []int{cols, cols + 5} {
				w := randSlice(r, rows*ldw)
				x := randSlice(r, cols)
				y := make([]float32, rows)
				MatVecStride(y, w, ldw, x)
				for i := range rows {
					var want, scale float64
					for j := range cols {
						p := float64(w[i*ldw+j]) * float64(x[j])
						want += p
						scale += math.Abs(p)
					}
					if !close32(y[i], want, scale, 1.2e-7*float64(cols+4)) {
						t.Fatalf("MatVec %dx%d ldw=%d row %d: %g want %g", rows, cols, ldw, i, y[i], want)
					}
				}
			}
			// MatVecT: W [rows, cols], x [rows], y [cols]
			w := randSlice(r, rows*cols)
			x := randSlice(r, rows)
			y := randSlice(r, cols)
			MatVecT(y, w, x)
			for j := range cols {
				var want, scale float64
				for i := range rows {
					p := float64(w[i*cols+j]) * float64(x[i])
					want += p
					scale += math.Abs(p)
				}
				if !close32(y[j], want, scale, 1.2e-7*float64(rows+4)) {
					t.Fatalf("MatVecT %dx%d col %d: %g want %g", rows, cols, j, y[j], want)
				}
			}
		}
	})
}

func TestExp(t *testing.T) {
	worst := 0.0
	check := func(v float32) {
		got := Exp(v)
		want := math.Exp(float64(v))
		if want > math.MaxFloat32 {
			if !math.IsInf(float64(got), 1) {
				t.Fatalf("Exp(%g) = %g, want +Inf", v, got)
			}
			return
		}
		if want < 1.1754944e-38 { // denormal range: flushed to 0
			if math.Abs(float64(got)-want) > 1.2e-38 {
				t.Fatalf("Exp(%g) = %g, want %g", v, got, want)
			}
			return
		}
		rel := math.Abs(float64(got)-want) / want
		worst = max(worst, rel)
		if rel > 2e-7 {
			t.Fatalf("Exp(%g) = %g, want %g (rel %g)", v, got, want, rel)
		}
	}
	for v := float32(-104); v < 89; v += 0.0137 {
		check(v)
	}
	for _, v := range []float32{0, -0, 1, -1, 88.72, 88.7228, 88.73, -87.33, -87.34, -100, -103.9, -104, -200, 1e-8, -1e-8, float32(math.Inf(1)), float32(math.Inf(-1))} {
		check(v)
	}
	if g := Exp(float32(math.NaN())); g == g {
		t.Fatalf("Exp(NaN) = %g", g)
	}
	t.Logf("worst relative error %.3g", worst)
}

func TestRMSNorm(t *testing.T) { withAndWithoutAsm(t, testRMSNorm) }

func testRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, n := range vecLens[1:] {
		x, w := randSlice(r, n), randSlice(r, n)
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(n)+1e-5)
		dst := make([]float32, n)
		gotInv := RMSNorm(dst, x, w, 1e-5)
		if !close32(gotInv, inv, inv, 1e-6) {
			t.Fatalf("RMSNorm n=%d inv %g want %g", n, gotInv, inv)
		}
		for i := range n {
			want := float64(x[i]) * inv * float64(w[i])
			if !close32(dst[i], want, math.Abs(want), 1e-6) {
				t.Fatalf("RMSNorm n=%d i=%d: %g want %g", n, i, dst[i], want)
			}
		}
		RMSNorm(x, x, nil, 1e-5) // in place, no weight
		for i := range n {
			want := float64(dst[i]) / float64(w[i])
			if !close32(x[i], want, math.Abs(want), 1e-5) {
				t.Fatalf("RMSNorm nil weight n=%d i=%d: %g want %g", n, i, x[i], want)
			}
		}
	}
}

func TestSoftmaxAndLogSumExp(t *testing.T) { withAndWithoutAsm(t, testSoftmaxAndLogSumExp) }

func testSoftmaxAndLogSumExp(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, n := range vecLens[1:] {
		x := randSlice(r, n)
		for i := range x {
			x[i] *= 10
		}
		if n > 2 {
			x[1] = float32(math.Inf(-1)) // masked
		}
		mx := math.Inf(-1)
		for _, v := range x {
			mx = max(mx, float64(v))
		}
		var sum float64
		for _, v := range x {
			sum += math.Exp(float64(v) - mx)
		}
		if got, want := LogSumExp(x), mx+math.Log(sum); !close32(got, want, math.Abs(want)+1, 1e-6) {
			t.Fatalf("LogSumExp n=%d: %g want %g", n, got, want)
		}
		orig := append([]float32(nil), x...)
		Softmax(x)
		var total float64
		for i, v := range x {
			want := math.Exp(float64(orig[i])-mx) / sum
			if !close32(v, want, want, 1e-5) {
				t.Fatalf("Softmax n=%d i=%d: %g want %g", n, i, v, want)
			}
			total += float64(v)
		}
		if math.Abs(total-1) > 1e-5 {
			t.Fatalf("Softmax n=%d sums to %g", n, total)
		}
	}
	Softmax(nil)
}

func TestSiLUSwiGLU(t *testing.T) { withAndWithoutAsm(t, testSiLUSwiGLU) }

func testSiLUSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	for _, n := range vecLens {
		g, u := randSlice(r, n), randSlice(r, n)
		for i := range g {
			g[i] *= 8
		}
		if n > 3 {
			g[0], g[1], g[2] = -120, 120, 0
		}
		if n > 9 {
			g[8], g[9] = -88.5, 88.5
		}
		dst := make([]float32, n)
		SwiGLU(dst, g, u)
		for i := range n {
			want := silu(float64(g[i])) * float64(u[i])
			if !close32(dst[i], want, math.Abs(want), 1e-6) {
				t.Fatalf("SwiGLU n=%d i=%d g=%g: %g want %g", n, i, g[i], dst[i], want)
			}
		}
		orig := append([]float32(nil), g...)
		SiLU(g)
		for i := range n {
			want := silu(float64(orig[i]))
			if !close32(g[i], want, math.Abs(want), 1e-6) {
				t.Fatalf("SiLU n=%d i=%d x=%g: %g want %g", n, i, orig[i], g[i], want)
			}
		}
	}
	if s := Sigmoid(0); s != 0.5 {
		t.Fatalf("Sigmoid(0) = %g", s)
	}
}

// TestExpVector checks the vector exp (Softmax's kernel) lane by lane over
// the float32 range, against float64, with and without the assembly.
func TestExpVector(t *testing.T) {
	withAndWithoutAsm(t, func(t *testing.T) {
		var xs []float32
		for v := float32(-104); v < 88.3; v += 0.0173 {
			xs = append(xs, v)
		}
		xs = append(xs, float32(math.Inf(-1)), 0, -87.33, -87.34, float32(math.NaN()))
		got := append([]float32(nil), xs...)
		sum := expSum(got, 0)
		for i, v := range xs {
			w := math.Exp(float64(v))
			if math.IsNaN(float64(v)) {
				if g := got[i]; g == g {
					t.Fatalf("exp(NaN) = %g", g)
				}
				continue
			}
			if w < 1.1754944e-38 {
				if float64(got[i]) > 1.2e-38 {
					t.Fatalf("exp(%g) = %g, want ~0", v, got[i])
				}
				continue
			}
			if rel := math.Abs(float64(got[i])-w) / w; rel > 2e-7 {
				t.Fatalf("exp(%g) = %g, want %g (rel %g)", v, got[i], w, rel)
			}
		}
		if s := float64(sum); s == s { // NaN lane makes the sum NaN
			t.Fatalf("sum with a NaN lane = %g, want NaN", s)
		}
	})
}

func TestSumParallelAndBandwidth(t *testing.T) {
	x := make([]float32, 1<<17+5)
	for i := range x {
		x[i] = float32(i % 7)
	}
	var want float64
	for _, v := range x {
		want += float64(v)
	}
	if got := SumParallel(x); math.Abs(float64(got)-want) > 1e-5*want {
		t.Fatalf("SumParallel = %g, want %g", got, want)
	}
	if bw := MeasureReadBandwidth(4<<20, 1); !(bw > 0) {
		t.Fatalf("MeasureReadBandwidth = %g", bw)
	}
}

func TestMaxOf(t *testing.T) {
	withAndWithoutAsm(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(6, 6))
		for _, n := range vecLens[1:] {
			for _, pos := range []int{0, n / 2, n - 1} {
				x := randSlice(r, n)
				for i := range x {
					x[i] -= 10
				}
				x[pos] = 5
				if got := maxOf(x); got != 5 {
					t.Fatalf("maxOf n=%d pos=%d = %g", n, pos, got)
				}
			}
		}
		x := []float32{float32(math.Inf(-1)), float32(math.Inf(-1)), 1, -3, 0, 0, 0, 0, -1}
		if got := maxOf(x); got != 1 {
			t.Fatalf("maxOf = %g", got)
		}
	})
}

// TestSwiGLUBackward checks both gradients against float64, with the
// assembly and with the Go fallback.
func TestSwiGLUBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	for _, n := range vecLens {
		g, u, dh := randSlice(r, n), randSlice(r, n), randSlice(r, n)
		for i := range g {
			g[i] *= 8
		}
		if n > 3 {
			g[0], g[1], g[2] = -120, 120, 0
		}
		var outs [2][2][]float32
		for v, asm := range []bool{true, false} {
			func() {
				defer func(h bool) { haveAVX2 = h }(haveAVX2)
				haveAVX2 = haveAVX2 && asm
				dg, du := make([]float32, n), make([]float32, n)
				SwiGLUBackward(dg, du, g, u, dh)
				outs[v] = [2][]float32{dg, du}
			}()
		}
		for i := range n {
			x, s := float64(g[i]), sig(float64(g[i]))
			wdu := float64(dh[i]) * x * s
			wdg := float64(dh[i]) * float64(u[i]) * s * (1 + x*(1-s))
			scale := math.Abs(float64(dh[i])) * (1 + math.Abs(float64(u[i]))) * (1 + math.Abs(x))
			for v := range outs {
				if !close32(outs[v][1][i], wdu, scale, 1e-6) || !close32(outs[v][0][i], wdg, scale, 1e-6) {
					t.Fatalf("n=%d i=%d g=%g: du %g dg %g, want %g %g", n, i, g[i], outs[v][1][i], outs[v][0][i], wdu, wdg)
				}
			}
		}
	}
}

// TestExpShiftDot checks the exponentials and both sums against float64.
func TestExpShiftDot(t *testing.T) {
	withAndWithoutAsm(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 7))
		for _, n := range append(vecLens, 49152) {
			x := randSlice(r, n)
			for i := range x {
				x[i] *= 6
			}
			const shift = 3.5
			orig := append([]float32(nil), x...)
			sum, sed := ExpShiftDot(x, shift)
			var ws, wsed, scale float64
			for i, v := range orig {
				d := float64(v - shift)
				e := math.Exp(d)
				if rel := math.Abs(float64(x[i])-e) / e; rel > 2e-7 {
					t.Fatalf("n=%d exp(%g) = %g, want %g", n, d, x[i], e)
				}
				ws, wsed, scale = ws+e, wsed+e*d, scale+math.Abs(e*d)
			}
			if math.Abs(sum-ws) > 1e-6*ws || math.Abs(sed-wsed) > 1e-6*scale+1e-300 {
				t.Fatalf("n=%d: sums %g, %g, want %g, %g", n, sum, sed, ws, wsed)
			}
		}
	})
}

// TestExpShift64 checks ExpShift64 against math.Exp, with and without the
// assembly: each term within two ulps of math.Exp's (each is within an ulp
// of e^x: 0.82 at most against a 60-digit reference on 6000 values, where
// math.Exp was 1.39) over [-708, 709], equal to it outside (subnormal
// results, math.Exp's underflow to 0, NaN products, ±Inf), and the sum
// exactly the terms' in index order — with and without terms out of the
// fast path's range, on lengths that end in a partial group of four.
func TestExpShift64(t *testing.T) {
	withAndWithoutAsm(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(4, 4))
		var xs []float32
		for v := float32(-700); v < 700; v += 0.0137 {
			xs = append(xs, v)
		}
		for range 60000 {
			xs = append(xs, float32(-40*r.Float64()), float32(-1e-3*r.Float64()), float32(16*r.NormFloat64()))
		}
		// Terms the fast path sets to 0 itself (a NaN product, exponents
		// below math.Exp's underflow), and ones it leaves to math.Exp.
		zeros := []float32{-746, -760, float32(math.Inf(-1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1))}
		slow := []float32{-720, -745.1, float32(math.Inf(1))}
		for _, c := range []struct {
			scale, shift float64
			odd          []float32
		}{{1, 0, nil}, {1.000123, -0.37, nil}, {1 / 0.7, 3.25, nil}, {1, 0, zeros}, {1, 0, slow}, {2, 11.5, append(zeros, slow...)}} {
			x := append(append([]float32(nil), c.odd...), xs...)
			for _, n := range []int{len(x), len(x) - 1, len(x) - 3, 3, 0} {
				dst := make([]float64, n+1)
				dst[n] = 42
				sum := ExpShift64(dst, x[:n], c.scale, c.shift)
				var seq float64
				worst := 0.0
				for i, v := range x[:n] {
					seq += dst[i]
					z := float64(float64(v) * c.scale)
					w := 0.0
					if !math.IsNaN(z) {
						w = math.Exp(z - c.shift)
					}
					e := z - c.shift
					switch {
					case math.IsNaN(w):
						if !math.IsNaN(dst[i]) {
							t.Fatalf("%+v: exp(%g) = %g, want NaN", c, e, dst[i])
						}
					case !(e >= -708 && e <= 709):
						if dst[i] != w {
							t.Fatalf("%+v: exp(%g) = %g, want math.Exp's %g", c, e, dst[i], w)
						}
					default:
						ulp := math.Abs(dst[i]-w) / (math.Nextafter(w, math.Inf(1)) - w)
						worst = max(worst, ulp)
						if ulp > 2 {
							t.Fatalf("%+v: exp(%v) = %v, math.Exp %v: %g ulp", c, e, dst[i], w, ulp)
						}
					}
				}
				if math.Float64bits(sum) != math.Float64bits(seq) && !(math.IsNaN(sum) && math.IsNaN(seq)) {
					t.Fatalf("%+v n %d: sum %v, the terms' in order %v", c, n, sum, seq)
				}
				if dst[n] != 42 {
					t.Fatalf("%+v n %d: wrote past the end", c, n)
				}
				if n == len(x) {
					t.Logf("%+v: largest difference from math.Exp %g ulp", c, worst)
				}
			}
		}
	})
}
