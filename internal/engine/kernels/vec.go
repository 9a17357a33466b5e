package kernels

import (
	"fmt"
	"math"
)

// Vector helpers for the engine and trainer. All work on float32 slices in
// place where noted, use AVX2/FMA assembly for the bulk when the CPU has it,
// and panic (index out of range) when a second operand is shorter than the
// first. They are safe for concurrent use on disjoint data.

// Dot returns sum_i x[i]*y[i] over len(x); len(y) must be >= len(x).
func Dot(x, y []float32) float32 { return dotImpl(x, y) }

// Axpy does y[i] += alpha*x[i] for i < len(x).
func Axpy(alpha float32, x, y []float32) { axpyImpl(alpha, x, y) }

// Scale does x[i] *= alpha.
func Scale(alpha float32, x []float32) { scaleImpl(alpha, x) }

// Add does dst[i] += x[i] for i < len(dst) (a residual add).
func Add(dst, x []float32) { addImpl(dst, x) }

// Sum returns sum_i x[i].
func Sum(x []float32) float32 { return sumImpl(x) }

// ExpShift64 sets dst[i] = e^(z − shift), z = float64(x[i])·scale rounded
// to float64 (0 where z is NaN), for i < len(x) (dst at least as long),
// and returns the sum of dst in index order: softmax(x·scale)'s
// unnormalised terms and their total in float64, as the sampler draws
// from them. With AVX2 eight values at a time (expf64_amd64.s: a degree-13
// polynomial after the usual range reduction, within an ulp of e^x and
// two of math.Exp, TestExpShift64), the rare ones whose exponent lies
// outside [-708, 709] and not below math.Exp's underflow (subnormal
// results, overflow) by math.Exp; else math.Exp throughout.
func ExpShift64(dst []float64, x []float32, scale, shift float64) float64 {
	n := len(x)
	if n == 0 {
		return 0
	}
	_ = dst[n-1]
	i := 0
	var sum float64
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		var out int
		sum, out = expShift64AVX(i, &dst[0], &x[0], scale, shift)
		if out > 0 { // those lanes are 0, as no other in range is
			sum = 0
			for j, v := range x[:i] {
				if dst[j] == 0 {
					dst[j] = expShifted(v, scale, shift)
				}
				sum += dst[j]
			}
		}
	}
	for ; i < n; i++ {
		dst[i] = expShifted(x[i], scale, shift)
		sum += dst[i]
	}
	return sum
}

// expShifted is one term of ExpShift64 by math.Exp.
func expShifted(v float32, scale, shift float64) float64 {
	z := float64(float64(v) * scale)
	if math.IsNaN(z) {
		return 0
	}
	return math.Exp(z - shift)
}

// MatVec computes y = W·x for W [len(y), len(x)] row-major (a Linear layer
// for one token, the Sgemm(false, true, 1, out, in, ...) shape): each y[r]
// is the dot of row r with x. It is bandwidth-bound and runs on all cores
// when W is large. len(w) must be >= len(y)*len(x).
func MatVec(y, w, x []float32) {
	MatVecStride(y, w, len(x), x)
}

// MatVecStride is MatVec with an explicit row stride ldw >= len(x).
func MatVecStride(y, w []float32, ldw int, x []float32) {
	rows, cols := len(y), len(x)
	if rows == 0 {
		return
	}
	if ldw < cols || len(w) < (rows-1)*ldw+cols {
		panic(fmt.Sprintf("kernels: MatVec W too short: len %d, need %d rows of stride %d, %d cols", len(w), rows, ldw, cols))
	}
	gemvDot(rows, cols, w, ldw, x, y, 1, 1, 0)
}

// MatVecT computes y = Wᵀ·x for W [len(x), len(y)] row-major (the backward
// of MatVec with respect to its input): y[j] = sum_r x[r]*W[r,j].
func MatVecT(y, w, x []float32) {
	rows, cols := len(x), len(y)
	if cols == 0 {
		return
	}
	if len(w) < rows*cols {
		panic(fmt.Sprintf("kernels: MatVecT W too short: len %d, need %d", len(w), rows*cols))
	}
	if rows == 0 {
		clear(y)
		return
	}
	gemvAxpy(rows, cols, w, cols, x, y, 1, 1, 0)
}

// RMSNorm writes dst[i] = x[i] / sqrt(mean(x²) + eps) * weight[i]
// (weight nil means all ones). dst may alias x. It returns the inverse RMS
// 1/sqrt(mean(x²)+eps), which the backward pass needs.
func RMSNorm(dst, x, weight []float32, eps float32) float32 {
	n := len(x)
	if n == 0 {
		return 0
	}
	dst = dst[:n]
	ss := float64(dotImpl(x, x))
	inv := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
	i := 0
	if weight == nil {
		if haveAVX2 && n >= 8 {
			i = n &^ 7
			mulScaleAVX(i, &dst[0], &x[0], nil, inv)
		}
		for ; i < n; i++ {
			dst[i] = x[i] * inv
		}
		return inv
	}
	weight = weight[:n]
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		mulScaleAVX(i, &dst[0], &x[0], &weight[0], inv)
	}
	for ; i < n; i++ {
		dst[i] = x[i] * inv * weight[i]
	}
	return inv
}

// Softmax replaces x with exp(x - max) / sum, in place. -Inf entries (masked
// positions) become 0. An empty slice is left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := maxOf(x)
	sum := expSum(x, mx)
	scaleImpl(1/sum, x)
}

// maxOf returns the largest element of a non-empty x.
func maxOf(x []float32) float32 {
	mx := x[0]
	i := 1
	if haveAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		mx = maxAVX(i, &x[0])
	}
	for _, v := range x[i:] {
		if v > mx {
			mx = v
		}
	}
	return mx
}

// expSum does x[i] = exp(x[i]-shift) and returns the sum.
func expSum(x []float32, shift float32) float32 {
	var sum float32
	i := 0
	if haveAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		sum = expSumAVX(i, &x[0], shift)
	}
	for ; i < len(x); i++ {
		e := Exp(x[i] - shift)
		x[i] = e
		sum += e
	}
	return sum
}

// LogSumExp returns log(sum_i exp(x[i])) computed stably (for cross-entropy).
func LogSumExp(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	mx := maxOf(x)
	if math.IsInf(float64(mx), 0) {
		return mx
	}
	t := getBuf(len(x))
	copy(t.s, x)
	sum := expSum(t.s, mx)
	putBuf(t)
	return mx + float32(math.Log(float64(sum)))
}

// Sigmoid returns 1/(1+exp(-v)).
func Sigmoid(v float32) float32 { return 1 / (1 + Exp(-v)) }

// SiLU replaces x[i] with x[i]*sigmoid(x[i]), in place.
func SiLU(x []float32) {
	i := 0
	if haveAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		swigluAVX(i, &x[0], &x[0], nil)
	}
	for ; i < len(x); i++ {
		v := x[i]
		x[i] = v / (1 + Exp(-v))
	}
}

// SwiGLU writes dst[i] = silu(gate[i]) * up[i] for i < len(dst) (the
// LLaMA MLP activation). dst may alias gate or up.
func SwiGLU(dst, gate, up []float32) {
	n := len(dst)
	gate, up = gate[:n], up[:n]
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		swigluAVX(i, &dst[0], &gate[0], &up[0])
	}
	for ; i < n; i++ {
		g := gate[i]
		dst[i] = g / (1 + Exp(-g)) * up[i]
	}
}

// ExpShiftDot sets x[i] = exp(d_i) with d_i = x[i] − shift and returns
// Σ exp(d_i) and Σ exp(d_i)·d_i, both accumulated in float64: a
// log-softmax's normaliser and the sum its entropy needs, in one pass.
func ExpShiftDot(x []float32, shift float32) (sum, sumED float64) {
	i := 0
	if haveAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		sum, sumED = expSumDotAVX(i, &x[0], shift)
	}
	for ; i < len(x); i++ {
		d := x[i] - shift
		e := Exp(d)
		x[i] = e
		sum += float64(e)
		sumED += float64(e) * float64(d)
	}
	return sum, sumED
}

// SwiGLUBackward is SwiGLU's backward: with s = σ(gate[i]),
// dUp[i] = dh[i]·gate[i]·s and dGate[i] = dh[i]·up[i]·s·(1 + gate[i]·(1−s)).
func SwiGLUBackward(dGate, dUp, gate, up, dh []float32) {
	n := len(dh)
	dGate, dUp, gate, up = dGate[:n], dUp[:n], gate[:n], up[:n]
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		swigluBackAVX(i, &dGate[0], &dUp[0], &gate[0], &up[0], &dh[0])
	}
	for ; i < n; i++ {
		x := gate[i]
		s := 1 / (1 + Exp(-x))
		dUp[i] = dh[i] * x * s
		dGate[i] = dh[i] * up[i] * s * (1 + x*(1-s))
	}
}

// Exp is a fast float32 e^v (relative error below 2e-7 over the float32
// range): Cody-Waite reduction v = n·ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for e^r, and 2^n built in the exponent bits. It returns +Inf
// above 88.72, 0 below -87.34 (no denormal results), and NaN for NaN. The
// AVX2 vector form used by Softmax, SiLU and SwiGLU computes the same
// function (it may round to +Inf slightly earlier, above 88.38).
func Exp(v float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	switch {
	case v != v:
		return v
	case v > 88.72283:
		return float32(math.Inf(1))
	case v < -87.33654:
		return 0
	}
	n := float32(math.Floor(float64(v*log2e + 0.5)))
	r := v - n*ln2hi - n*ln2lo
	// e^r on [-ln2/2, ln2/2] (Cephes expf coefficients)
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	ni := int32(n)
	if ni == 128 {
		// 2^128 overflows the exponent field; split it
		return p * 2 * math.Float32frombits(uint32(127+127)<<23)
	}
	return p * math.Float32frombits(uint32(ni+127)<<23)
}

// Max returns the largest element of a non-empty x (AVX2 when available).
func Max(x []float32) float32 { return maxOf(x) }

// ExpShift sets x[i] = exp(x[i] - shift) (the vectorised Exp) and returns
// their float32 sum.
func ExpShift(x []float32, shift float32) float32 { return expSum(x, shift) }
