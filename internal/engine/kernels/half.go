package kernels

import (
	"fmt"
	"math"

	"flywheel/internal/par"
	"flywheel/internal/safetensors"
)

// HalfType names a 16-bit float format in which weights are kept as a
// model file stores them: products read the 16-bit values and compute in
// float32, so decoding streams half the bytes of float32 weights.
type HalfType uint8

const (
	BF16 HalfType = iota + 1 // bfloat16: the high 16 bits of a float32
	F16                      // IEEE 754 half precision
)

// String is the safetensors dtype name.
func (t HalfType) String() string {
	switch t {
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	}
	return fmt.Sprintf("HalfType(%d)", uint8(t))
}

// Float32 widens one value (exact).
func (t HalfType) Float32(h uint16) float32 {
	if t == BF16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	return safetensors.F16ToF32(h)
}

// HalfToFloat32 widens src into dst (len(dst) values; exact).
func HalfToFloat32(t HalfType, dst []float32, src []uint16) {
	n := len(dst)
	src = src[:n]
	i := 0
	if n >= 8 {
		switch {
		case t == BF16 && haveAVX2:
			i = n &^ 7
			cvtBF16Y(i, &dst[0], &src[0])
		case t == F16 && haveF16C:
			i = n &^ 7
			cvtF16Y(i, &dst[0], &src[0])
		}
	}
	for ; i < n; i++ {
		dst[i] = t.Float32(src[i])
	}
}

// hdot4 returns the dots of x with the four half-precision rows
// w[r*ldw : r*ldw+len(x)], r = 0..3.
func hdot4(t HalfType, x []float32, w []uint16, ldw int) [4]float32 {
	n := len(x)
	_ = w[3*ldw+n-1]
	var out [4]float32
	i := 0
	switch {
	case haveAVX512 && n >= 16 && t == BF16:
		i = n &^ 15
		hdot4BF16Z(i, &x[0], &w[0], ldw, &out)
	case haveAVX512 && n >= 16 && t == F16 && haveF16C:
		i = n &^ 15
		hdot4F16Z(i, &x[0], &w[0], ldw, &out)
	case haveAVX2 && n >= 8 && t == BF16:
		i = n &^ 7
		hdot4BF16Y(i, &x[0], &w[0], ldw, &out)
	case haveF16C && n >= 8 && t == F16:
		i = n &^ 7
		hdot4F16Y(i, &x[0], &w[0], ldw, &out)
	}
	for ; i < n; i++ {
		xv := x[i]
		out[0] += xv * t.Float32(w[i])
		out[1] += xv * t.Float32(w[ldw+i])
		out[2] += xv * t.Float32(w[2*ldw+i])
		out[3] += xv * t.Float32(w[3*ldw+i])
	}
	return out
}

// hdot returns the dot of x with one half-precision row w.
func hdot(t HalfType, x []float32, w []uint16) float32 {
	var s float32
	for i, xv := range x {
		s += xv * t.Float32(w[i])
	}
	return s
}

// halfSmallM is the largest m for which HalfGemmNT streams the weights
// once without converting them in blocks for Sgemm (decode batches).
const halfSmallM = 16

// halfBlockElems is the size of the float32 blocks weights are widened into
// for the matrix-matrix products (1 MiB: stays in L2/L3 while Sgemm uses it).
const halfBlockElems = 1 << 18

// checkHalf panics with a clear message when a slice is too short for the
// described matrices.
func checkHalf(op string, m, n, k int, a []float32, lda int, wNeed int, w []uint16, c []float32, ldc int) {
	if m > 0 && k > 0 && len(a) < (m-1)*lda+k {
		panic(fmt.Sprintf("kernels: %s: a has %d elements, need %d", op, len(a), (m-1)*lda+k))
	}
	if len(w) < wNeed {
		panic(fmt.Sprintf("kernels: %s: w has %d elements, need %d", op, len(w), wNeed))
	}
	if m > 0 && n > 0 && len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("kernels: %s: c has %d elements, need %d", op, len(c), (m-1)*ldc+n))
	}
}

// HalfGemmNT computes C = A·Wᵀ + beta·C: A [m,k] float32 (row stride lda),
// W [n,k] in half precision t (row stride ldw; a linear layer's weight in
// the Hugging Face [out, in] layout), C [m,n] (row stride ldc). Up to 16
// rows (decode) stream W once, widening in registers, with all rows of A
// per weight row; more rows (prefill, training) widen W in blocks of rows
// and multiply each block with kernels.Default()'s Sgemm. Each weight is
// read once per call either way.
func HalfGemmNT(t HalfType, m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkHalf("HalfGemmNT", m, n, k, a, lda, (n-1)*ldw+k, w, c, ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if m <= halfSmallM {
		halfGemvNT(t, m, n, k, a, lda, w, ldw, beta, c, ldc)
		return
	}
	be := Default()
	nb := max(16, halfBlockElems/k) &^ 15
	wf := getBuf(min(nb, n) * k)
	defer putBuf(wf)
	for j0 := 0; j0 < n; j0 += nb {
		j1 := min(j0+nb, n)
		blk := wf.s[:(j1-j0)*k]
		widenRows(t, blk, k, w[j0*ldw:], ldw, j1-j0)
		be.Sgemm(false, true, m, j1-j0, k, 1, a, lda, blk, k, beta, c[j0:], ldc)
	}
}

// HalfGemmNN computes C = A·W + beta·C: A [m,k] float32 (row stride lda),
// W [k,n] in half precision t (row stride ldw), C [m,n] (row stride ldc):
// the input gradient dx = dy·W of a linear layer. W is widened in blocks of
// rows, each multiplied with kernels.Default()'s Sgemm.
func HalfGemmNN(t HalfType, m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkHalf("HalfGemmNN", m, n, k, a, lda, (k-1)*ldw+n, w, c, ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	be := Default()
	kb := max(16, halfBlockElems/n) &^ 15
	wf := getBuf(min(kb, k) * n)
	defer putBuf(wf)
	for p0 := 0; p0 < k; p0 += kb {
		p1 := min(p0+kb, k)
		blk := wf.s[:(p1-p0)*n]
		widenRows(t, blk, n, w[p0*ldw:], ldw, p1-p0)
		b := beta
		if p0 > 0 {
			b = 1
		}
		be.Sgemm(false, false, m, n, p1-p0, 1, a[p0:], lda, blk, n, b, c, ldc)
	}
}

// widenRows widens rows rows of cols values (row stride ldw) into dst
// (row stride cols), in parallel.
func widenRows(t HalfType, dst []float32, cols int, w []uint16, ldw, rows int) {
	par.Range(rows, cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			HalfToFloat32(t, dst[r*cols:(r+1)*cols], w[r*ldw:])
		}
	})
}

// halfGemvNT is HalfGemmNT for few rows of A: the rows of W are split
// across workers in groups of 4; each group is dotted with every row of A
// (one pass over the weights). For m > 1 the group is widened once into a
// small float32 buffer (in L1) and dotted with the float32 kernel.
func halfGemvNT(t HalfType, m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	parts := 1
	if m*n*k >= gemvParallelMin && n >= 8 {
		parts = min(workers(), n/4)
	}
	put := func(i, j int, d float32) {
		o := i*ldc + j
		if beta == 0 {
			c[o] = d
		} else {
			c[o] = d + beta*c[o]
		}
	}
	parallelFor(parts, func(p int) {
		j0 := (n * p / parts) &^ 3
		j1 := (n * (p + 1) / parts) &^ 3
		if p == parts-1 {
			j1 = n
		}
		var wf *buf
		if m > 1 {
			wf = getBuf(4 * k)
			defer putBuf(wf)
		}
		j := j0
		for ; j+4 <= j1; j += 4 {
			if m == 1 {
				d := hdot4(t, a[:k], w[j*ldw:], ldw)
				put(0, j, d[0])
				put(0, j+1, d[1])
				put(0, j+2, d[2])
				put(0, j+3, d[3])
				continue
			}
			f := wf.s[:4*k]
			for r := range 4 {
				HalfToFloat32(t, f[r*k:(r+1)*k], w[(j+r)*ldw:])
			}
			for i := range m {
				d := dot4Impl(a[i*lda:i*lda+k], f, k)
				put(i, j, d[0])
				put(i, j+1, d[1])
				put(i, j+2, d[2])
				put(i, j+3, d[3])
			}
		}
		for ; j < j1; j++ {
			row := w[j*ldw : j*ldw+k]
			for i := range m {
				put(i, j, hdot(t, a[i*lda:i*lda+k], row))
			}
		}
	})
}
