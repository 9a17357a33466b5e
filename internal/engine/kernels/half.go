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

// halfGemvNT is HalfGemmNT for few rows of A (see streamNT). For m > 1
// each group of 4 weight rows is widened once into a small float32 buffer
// (in L1) and dotted with every row of A by the float32 kernel.
func halfGemvNT(t HalfType, m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	streamNT(m, n, k, beta, c, ldc, func(j0, j1 int, put func(i, j int, d float32)) {
		var wf *buf
		if m > 1 {
			wf = getBuf(4 * k)
			defer putBuf(wf)
		}
		j := j0
		for ; j+4 <= j1; j += 4 {
			if m == 1 {
				put4(put, 0, j, hdot4(t, a[:k], w[j*ldw:], ldw))
				continue
			}
			if haveAVX512 && k >= 16 && (t == BF16 || haveF16C) {
				mdotRows(m, k, a, lda, func(i0, kk int, out *[16]float32) {
					if t == BF16 {
						mdotBF16Z(kk, &a[i0*lda], lda, &w[j*ldw], ldw, out)
					} else {
						mdotF16Z(kk, &a[i0*lda], lda, &w[j*ldw], ldw, out)
					}
				}, func(i int, p0 int) [4]float32 {
					var d [4]float32
					for p := p0; p < k; p++ {
						for r := range 4 {
							d[r] += a[i*lda+p] * t.Float32(w[(j+r)*ldw+p])
						}
					}
					return d
				}, func(i int) [4]float32 { return hdot4(t, a[i*lda:i*lda+k], w[j*ldw:], ldw) },
					func(i int, d [4]float32) { put4(put, i, j, d) })
				continue
			}
			f := wf.s[:4*k]
			for r := range 4 {
				HalfToFloat32(t, f[r*k:(r+1)*k], w[(j+r)*ldw:])
			}
			for i := range m {
				put4(put, i, j, sdot4Impl(a[i*lda:i*lda+k], f, k))
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

// GemvNT computes C = A·Wᵀ + beta·C for float32 weights W [n,k] (row
// stride ldw) and few rows of A [m,k] (decode batches, m <= 16): as
// HalfGemmNT's streaming path, each weight read once for all rows.
func GemvNT(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if len(w) < (n-1)*ldw+k {
		panic(fmt.Sprintf("kernels: GemvNT: w has %d elements, need %d", len(w), (n-1)*ldw+k))
	}
	checkHalf("GemvNT", m, n, k, a, lda, 0, nil, c, ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	streamNT(m, n, k, beta, c, ldc, func(j0, j1 int, put func(i, j int, d float32)) {
		j := j0
		for ; j+4 <= j1; j += 4 {
			if m > 1 && haveAVX512 && k >= 16 {
				mdotRows(m, k, a, lda, func(i0, kk int, out *[16]float32) {
					mdotF32Z(kk, &a[i0*lda], lda, &w[j*ldw], ldw, out)
				}, func(i int, p0 int) [4]float32 {
					var d [4]float32
					for p := p0; p < k; p++ {
						for r := range 4 {
							d[r] += a[i*lda+p] * w[(j+r)*ldw+p]
						}
					}
					return d
				}, func(i int) [4]float32 { return sdot4Impl(a[i*lda:i*lda+k], w[j*ldw:], ldw) },
					func(i int, d [4]float32) { put4(put, i, j, d) })
				continue
			}
			for i := range m {
				put4(put, i, j, sdot4Impl(a[i*lda:i*lda+k], w[j*ldw:], ldw))
			}
		}
		for ; j < j1; j++ {
			for i := range m {
				put(i, j, dotImpl(a[i*lda:i*lda+k], w[j*ldw:j*ldw+k]))
			}
		}
	})
}

// streamChunk is the weight elements per task of a streamed product: small
// enough that a worker that starts late (a goroutine wake-up on a busy
// machine) finds most of the work still to take, large enough that the
// hand-out costs nothing (64 KiB of float32 weights).
const streamChunk = 1 << 14

// streamNT runs rows(j0, j1, put) over the weight rows [0, n) in chunks of
// a multiple of 4 rows, handed out one at a time to the workers, so each
// weight row is read once (for all m rows of A) and the workers finish
// together; put stores C[i,j] = d + beta·C[i,j].
func streamNT(m, n, k int, beta float32, c []float32, ldc int, rows func(j0, j1 int, put func(i, j int, d float32))) {
	put := func(i, j int, d float32) {
		o := i*ldc + j
		if beta == 0 {
			c[o] = d
		} else {
			c[o] = d + beta*c[o]
		}
	}
	chunk := max(4, (streamChunk/k)&^3)
	tasks := (n + chunk - 1) / chunk
	par.Tasks(tasks, m*n*k < gemvParallelMin || tasks < 2, func(_, ti int) {
		rows(ti*chunk, min(n, (ti+1)*chunk), put)
	})
}

// mdotRows computes the dots of the m rows of A with one group of four
// weight rows: four rows of A at a time with the 4x4 kernel (kern, over the
// first k&^15 columns, plus tail for the rest), and the rows left over one
// at a time (one); each row's four dots go to store.
func mdotRows(m, k int, a []float32, lda int, kern func(i0, kk int, out *[16]float32),
	tail func(i, p0 int) [4]float32, one func(i int) [4]float32, store func(i int, d [4]float32)) {
	_ = a[(m-1)*lda+k-1]
	kk := k &^ 15
	i := 0
	var out [16]float32
	for ; i+4 <= m; i += 4 {
		kern(i, kk, &out)
		for q := range 4 {
			d := [4]float32{out[4*q], out[4*q+1], out[4*q+2], out[4*q+3]}
			if kk < k {
				t := tail(i+q, kk)
				for r := range 4 {
					d[r] += t[r]
				}
			}
			store(i+q, d)
		}
	}
	for ; i < m; i++ {
		store(i, one(i))
	}
}

func put4(put func(i, j int, d float32), i, j int, d [4]float32) {
	put(i, j, d[0])
	put(i, j+1, d[1])
	put(i, j+2, d[2])
	put(i, j+3, d[3])
}

// sdot4Impl is dot4Impl with the AVX-512 kernel where there is one.
func sdot4Impl(x, w []float32, ldw int) [4]float32 {
	n := len(x)
	if !haveAVX512 || n < 16 {
		return dot4Impl(x, w, ldw)
	}
	_ = w[3*ldw+n-1]
	var out [4]float32
	i := n &^ 15
	sdot4Z(i, &x[0], &w[0], ldw, &out)
	if i < n {
		t := dot4Impl(x[i:], w[i:], ldw)
		for r := range out {
			out[r] += t[r]
		}
	}
	return out
}
