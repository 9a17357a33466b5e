package kernels

import (
	"fmt"

	"flywheel/internal/par"
)

// Products with block-quantized weights (QuantType). The weight matrix is
// the tensor's bytes as a GGUF file stores them: rows of whole blocks,
// back to back (row stride t.RowBytes(cols) bytes).
//
// Arithmetic. Prefill, training (QuantGemmNT with more than StreamRows
// rows, QuantGemmNN) and the Go fallback of decode dequantise the weights
// with DequantRow, bit-identical to ggml's dequantize_row_*, and multiply
// in float32: the result is that of the float32 model whose weights are
// the dequantised values, up to float32 summation order. The AVX-512
// decode kernels (quant_amd64.s) compute the same dots in float32 with the
// block algebra rearranged: Σ x·(d·q) = d·Σ x·q for Q8_0/Q4_0, and
// Σ x·(d·q + m) = d·Σ x·q + m·Σ x for Q4_1, so the weights are never
// rounded to float32 one by one; the difference from the dequantise-then-
// multiply result is float32 rounding (relative ~1e-7 per product term),
// far below the 2e-3 logprob agreement with llama.cpp that the real-model
// check asks for. The activations stay float32 throughout (llama.cpp
// instead rounds them to 8-bit blocks for its integer dot products), so
// sampling and training logprobs are those of the same dequantised model
// and agree to float32 rounding.

// checkQuantMat panics with a clear message when a product's operands do
// not fit: cols a whole number of blocks, w at least rows rows.
func checkQuantMat(op string, t QuantType, rows, cols int, w []byte) {
	if !t.valid() {
		panic(fmt.Sprintf("kernels: %s: not a quantized type: %v", op, t))
	}
	if cols%t.BlockElems() != 0 {
		panic(fmt.Sprintf("kernels: %s: %v rows of %d values are not whole blocks of %d", op, t, cols, t.BlockElems()))
	}
	if need := rows * t.RowBytes(cols); len(w) < need {
		panic(fmt.Sprintf("kernels: %s: w has %d bytes, need %d", op, len(w), need))
	}
}

// quantWork checks the operands of a product with W [rows, cols] and
// reports whether there is a product to compute (m, n, k > 0; with k = 0,
// C is only scaled by beta).
func quantWork(op string, t QuantType, m, n, k, rows, cols int, a []float32, lda int, w []byte, beta float32, c []float32, ldc int) bool {
	if m == 0 || n == 0 {
		return false
	}
	checkQuantMat(op, t, rows, cols, w)
	checkHalf(op, m, n, k, a, lda, 0, nil, c, ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return false
	}
	return true
}

// QuantGemmNT computes C = A·Wᵀ + beta·C: A [m,k] float32 (row stride
// lda), W [n,k] quantized as t (a linear layer's weight in the [out, in]
// layout; k a multiple of t.BlockElems()), C [m,n] (row stride ldc). Up to
// StreamRows rows of A (decode) stream W once, dequantising in registers
// (or, without a kernel for t here, four rows at a time into a small
// buffer); more rows (prefill) dequantise W in blocks of rows and multiply
// each block with kernels.Default()'s Sgemm.
func QuantGemmNT(t QuantType, m, n, k int, a []float32, lda int, w []byte, beta float32, c []float32, ldc int) {
	if !quantWork("QuantGemmNT", t, m, n, k, n, k, a, lda, w, beta, c, ldc) {
		return
	}
	if m <= StreamRows {
		quantStreamNT(t, m, n, k, a, lda, w, beta, c, ldc)
		return
	}
	blocksNT(m, n, k, a, lda, quantWiden(t, w, k), beta, c, ldc)
}

// QuantGemmNN computes C = A·W + beta·C: A [m,k] float32 (row stride lda),
// W [k,n] quantized as t (n a multiple of t.BlockElems()), C [m,n] (row
// stride ldc): the input gradient dx = dy·W of a linear layer. W is
// dequantised in blocks of rows, each multiplied with kernels.Default()'s
// Sgemm.
func QuantGemmNN(t QuantType, m, n, k int, a []float32, lda int, w []byte, beta float32, c []float32, ldc int) {
	if !quantWork("QuantGemmNN", t, m, n, k, k, n, a, lda, w, beta, c, ldc) {
		return
	}
	blocksNN(m, n, k, a, lda, quantWiden(t, w, n), beta, c, ldc)
}

// quantWiden is the widen function of widenBlocks for quantized rows of
// cols values: DequantRow, in parallel over the rows.
func quantWiden(t QuantType, w []byte, cols int) func(dst []float32, r0, r1 int) {
	rb := t.RowBytes(cols)
	return func(dst []float32, r0, r1 int) {
		par.Range(r1-r0, cols, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				DequantRow(t, dst[r*cols:(r+1)*cols], w[(r0+r)*rb:(r0+r+1)*rb])
			}
		})
	}
}

// quantStreamNT is QuantGemmNT for few rows of A: the weight rows are
// streamed once in tasks of a multiple of 4 rows (streamSplit, as
// streamNT), each group of 4 dotted with every row of A by the format's
// AVX-512 kernel (quantDot4) or, without one, dequantised into a buffer
// and dotted with dot4Impl.
func quantStreamNT(t QuantType, m, n, k int, a []float32, lda int, w []byte, beta float32, c []float32, ldc int) {
	_ = a[(m-1)*lda+k-1]
	_ = c[(m-1)*ldc+n-1]
	rb := t.RowBytes(k)
	kern := quantKernel(t)
	var prep *buf // per-row precomputation of A for the kernel
	if kern != nil && kern.prepLen > 0 {
		pl := kern.prepLen * k / t.BlockElems()
		prep = getBuf(m * pl)
		defer putBuf(prep)
		for i := range m {
			kern.prep(prep.s[i*pl:(i+1)*pl], a[i*lda:i*lda+k])
		}
	}
	split := newStreamSplit(n, rb)
	tasks := split.tasks()
	par.Tasks(tasks, m*n*k < gemvParallelMin || tasks < 2, func(_, ti int) {
		j0, j1 := split.task(ti)
		var f *buf // dequantised group of weight rows (no kernel for t)
		if kern == nil {
			f = getBuf(4 * k)
			defer putBuf(f)
		}
		j := j0
		for ; j+4 <= j1; j += 4 {
			if kern != nil {
				for i := range m {
					var p []float32
					if prep != nil {
						pl := kern.prepLen * k / t.BlockElems()
						p = prep.s[i*pl : (i+1)*pl]
					}
					var d [4]float32
					kern.dot4(k/t.BlockElems(), a[i*lda:i*lda+k], p, w[j*rb:(j+4)*rb], rb, &d)
					store4(c, i*ldc+j, beta, d)
				}
				continue
			}
			for r := range 4 {
				DequantRow(t, f.s[r*k:(r+1)*k], w[(j+r)*rb:(j+r+1)*rb])
			}
			for i := range m {
				store4(c, i*ldc+j, beta, dot4Impl(a[i*lda:i*lda+k], f.s, k))
			}
		}
		if j < j1 { // rows left over: plain dots
			row := getBuf(k)
			defer putBuf(row)
			for ; j < j1; j++ {
				DequantRow(t, row.s, w[j*rb:(j+1)*rb])
				for i := range m {
					o := i*ldc + j
					d := dotImpl(a[i*lda:i*lda+k], row.s)
					if beta == 0 {
						c[o] = d
					} else {
						c[o] = d + beta*c[o]
					}
				}
			}
		}
	})
}

// quantDot4 is a format's decode kernel: dot4 sets out[r] to the dot of x
// (nb blocks of values) with the four weight rows w[r*ldw:], using prep,
// the prepLen values per block that prep computed from x once per product
// (nil when prepLen is 0).
type quantDot4 struct {
	prepLen int
	prep    func(dst, x []float32)
	dot4    func(nb int, x, prep []float32, w []byte, ldw int, out *[4]float32)
}

// DequantEmbedRow writes row id of a quantized [rows, len(dst)] matrix w
// into dst: an embedding lookup.
func DequantEmbedRow(t QuantType, dst []float32, w []byte, id int) {
	rb := t.RowBytes(len(dst))
	DequantRow(t, dst, w[id*rb:(id+1)*rb])
}
