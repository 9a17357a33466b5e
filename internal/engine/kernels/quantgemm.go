package kernels

import (
	"fmt"
	"sync"
	"unsafe"

	"flywheel/internal/par"
)

// Products with block-quantized weights (QuantType). The weight matrix is
// the tensor's bytes as a GGUF file stores them: rows of whole blocks,
// back to back (row stride t.RowBytes(cols) bytes); or, for the four-row
// layouts (Q4_1x4, ..., Q5_1x4), the same bytes interleaved by groups of
// four rows (repack.go).
//
// Arithmetic. Every product computes, in float32, the product of the
// activations with the dequantised weights — the values DequantRow gives,
// bit-identical to ggml's dequantize_row_*. Prefill and training
// (QuantGemmNT with more than StreamRows rows, QuantGemmNN) dequantise
// blocks of rows into the GEMM; the Go fallback of decode dequantises four
// rows into a buffer; the AVX-512 decode kernels (quant_amd64.s) keep the
// blocks in registers: Q4_0 and Q4_1 look each nibble's value up in the
// block's 16 values computed exactly as DequantRow computes them (so the
// product is the float32 product with the dequantised weights, summed in
// another order), the others rearrange the block algebra — Σ x·(d·q) =
// d·Σ x·q (Q8_0; the K-quants per sub-block with their scales and mins)
// — so all differ from dequantise-then-multiply by float32 rounding only
// (TestQuantDecodeExact: within 5e-7 of Σ|x·w| of the exact product).
// Sampling (decode and prefill) and training therefore compute the same
// model: their logprobs agree to float32 summation order (the engine tests
// hold them to 1e-5).
//
// llama.cpp differs: its CPU backend rounds every activation row to 8-bit
// blocks (Q8_1 for Q4_1, Q8_0 for Q8_0/Q4_0, Q8_K for the K-quants) and
// takes integer dot products. On SmolLM2-135M-Instruct.Q4_1.gguf that
// rounding moves llama.cpp's own top-20 logprobs by up to 0.7–0.9 from the
// exact product of the dequantised weights (llama.cpp on the file
// dequantised to F32 against llama.cpp on the Q4_1 file), and a
// re-implementation of the rounding here moved ours by as much again in a
// different direction: at this sensitivity a 2e-3 agreement needs
// llama.cpp's rounding bit for bit, summation order included. flywheel
// keeps the exact product (docs/benchmarks.md has the figures); against
// llama.cpp on the F32 dequantisation of the same file (F32 KV cache) its
// logprobs agree to 4e-5.

// checkQuantMat panics with a clear message when a product's operands do
// not fit: cols a whole number of blocks, w at least rows rows, in groups
// of four for a four-row layout.
func checkQuantMat(op string, t QuantType, rows, cols int, w []byte) {
	if !t.valid() {
		panic(fmt.Sprintf("kernels: %s: not a quantized type: %v", op, t))
	}
	if t.Repacked() && rows%4 != 0 {
		panic(fmt.Sprintf("kernels: %s: %v holds groups of four rows, not %d rows", op, t, rows))
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
// cols values: DequantRow, in parallel over the rows (over the groups of
// four of a four-row layout: widenBlocks's blocks of rows are multiples
// of 16 rows, and the matrix's rows of 4).
func quantWiden(t QuantType, w []byte, cols int) func(dst []float32, r0, r1 int) {
	rb := t.RowBytes(cols)
	if t.Repacked() {
		return func(dst []float32, r0, r1 int) {
			par.Range((r1-r0)/4, 4*cols, func(lo, hi int) {
				for g := lo; g < hi; g++ {
					dequantGroup(t, dst[4*g*cols:4*(g+1)*cols], cols, w[(r0+4*g)*rb:(r0+4*g+4)*rb])
				}
			})
		}
	}
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
// streamNT), each chunk of 64 of a task's rows dotted with every row of A
// by the format's decode kernel (quantDots: AVX-512 or AVX2) or, without
// one (or beyond its maxM rows of A), dequantised four rows at a time
// into a buffer and dotted with every row of A by one dot4Rows call (each
// row's sums dot4Impl's), which prefetches the next four rows' blocks
// meanwhile. (Against a dot4Impl call a row of A, 8 sequences of the real
// Q4_K_M / Q5_K_M / Q4_1 files decoded 13% / 8% / 6% faster on a Zen 3;
// docs/benchmarks/zen3-avx2-2026-11-28.md.)
func quantStreamNT(t QuantType, m, n, k int, a []float32, lda int, w []byte, beta float32, c []float32, ldc int) {
	_ = a[(m-1)*lda+k-1]
	_ = c[(m-1)*ldc+n-1]
	rb := t.RowBytes(k)
	kern := quantKernel(t)
	if kern != nil && kern.maxM > 0 && m > kern.maxM {
		kern = nil // several rows of A: dequantising once for all of them is faster
	}
	var prep *buf // per-row precomputation of A for the kernel (quantCall.prepare)
	if kern != nil && kern.prepLen > 0 {
		prep = getBuf(m * kern.prepSize(k/t.BlockElems()))
		defer putBuf(prep)
	}
	// The kernel's access order, prefetch distance and task split
	// (order.go), timed while calibrating.
	var dots func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int)
	pf, front := 0, false
	if kern != nil {
		tuner := quantTuner
		if t.Repacked() {
			tuner = repackTuner // one access order
		}
		set, cand := tuner.pick(m, n*rb)
		if cand >= 0 {
			defer tuner.time(cand, n*rb)()
		}
		dots, pf, front = kern.dots, set.pf, set.front
		if set.rows {
			dots = kern.rowDots
		}
	}
	split := newStreamSplit(n, rb, front)
	tasks := split.tasks()
	qc := quantCalls.Get().(*quantCall)
	qc.quantArgs = quantArgs{t: t, m: m, k: k, a: a, lda: lda, w: w, beta: beta, c: c, ldc: ldc,
		rb: rb, kern: kern, prep: prep, dots: dots, pf: pf, split: split}
	var prepare func()
	if prep != nil {
		prepare = qc.prepFn // while the helpers wake up
	}
	par.TasksAfter(tasks, m*n*k < gemvParallelMin || tasks < 2, prepare, qc.run)
	qc.quantArgs = quantArgs{} // nothing kept past the call
	quantCalls.Put(qc)
}

// quantCall is one quantStreamNT call's arguments as its tasks read them.
// Calls come from a pool with task and prepare bound once, so that a
// product hands par.Tasks no new closure (batch-1 decode makes ~120 a
// token).
type quantCall struct {
	quantArgs
	run    func(worker, ti int) // task
	prepFn func()               // prepare
}

type quantArgs struct {
	t     QuantType
	m, k  int
	a     []float32
	lda   int
	w     []byte
	beta  float32
	c     []float32
	ldc   int
	rb    int
	kern  *quantDots
	prep  *buf
	dots  func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int)
	pf    int
	split streamSplit
}

var quantCalls = sync.Pool{New: func() any {
	qc := new(quantCall)
	qc.run, qc.prepFn = qc.task, qc.prepare
	return qc
}}

// prepare computes the kernel's per-row precomputation of A into prep.
func (qc *quantCall) prepare() {
	pl := qc.kern.prepSize(qc.k / qc.t.BlockElems())
	for i := range qc.m {
		qc.kern.prep(qc.prep.s[i*pl:(i+1)*pl], qc.a[i*qc.lda:i*qc.lda+qc.k])
	}
}

// task is quantStreamNT's task ti.
func (qc *quantCall) task(_, ti int) {
	t, m, k, a, lda, w, beta, c, ldc := qc.t, qc.m, qc.k, qc.a, qc.lda, qc.w, qc.beta, qc.c, qc.ldc
	rb, kern, prep, dots, pf, split := qc.rb, qc.kern, qc.prep, qc.dots, qc.pf, qc.split
	j0, j1 := split.task(ti)
	var f *buf // dequantised group of weight rows (no kernel for t)
	if kern == nil {
		f = getBuf(4 * k)
		defer putBuf(f)
	}
	j := j0
	if kern != nil {
		// Chunks of 64 weight rows (~40 KiB), each dotted with every
		// row of A while it is in cache.
		const chunk = 64
		g := (j1 - j0) &^ 3
		pl := kern.prepSize(k / t.BlockElems())
		var tmp *buf // a chunk's dots before beta·C is added (pooled: decode calls this ~200 times a token)
		if beta != 0 {
			tmp = getBuf(chunk)
			defer putBuf(tmp)
		}
		for r0 := j0; r0 < j0+g; r0 += chunk {
			r1 := min(r0+chunk, j0+g)
			for i := range m {
				var p []float32
				if prep != nil {
					p = prep.s[i*pl : (i+1)*pl]
				}
				cr := c[i*ldc+r0 : i*ldc+r1]
				if beta == 0 {
					dots(k/t.BlockElems(), a[i*lda:i*lda+k], p, w[r0*rb:r1*rb], rb, cr, pf)
					continue
				}
				d := tmp.s[:r1-r0]
				dots(k/t.BlockElems(), a[i*lda:i*lda+k], p, w[r0*rb:r1*rb], rb, d, pf)
				for r, v := range d {
					cr[r] = v + beta*cr[r]
				}
			}
		}
		j += g
	}
	var outs [4 * StreamRows]float32 // the group's dots, row by row of A (m <= StreamRows here)
	for ; kern == nil && j+4 <= j1; j += 4 {
		if t.Repacked() {
			dequantGroup(t, f.s, k, w[j*rb:(j+4)*rb])
		} else {
			for r := range 4 {
				DequantRow(t, f.s[r*k:(r+1)*k], w[(j+r)*rb:(j+r+1)*rb])
			}
		}
		// The next group's bytes, fetched while these are multiplied.
		var pf unsafe.Pointer
		pfn := (min(j+8, j1) - (j + 4)) * rb
		if pfn > 0 {
			pf = unsafe.Pointer(&w[(j+4)*rb])
		} else {
			pfn = 0
		}
		dot4Rows(m, k, a, lda, f.s, k, outs[:4*m], pf, pfn)
		for i := range m {
			store4(c, i*ldc+j, beta, [4]float32(outs[4*i:4*i+4]))
		}
	}
	if j < j1 { // rows left over (not of a four-row layout): plain dots
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
}

// quantDots is a format's decode kernel: dots sets out[r] to the dot of x
// (nb blocks of values) with weight row r of w (len(out) rows, a multiple
// of 4, ldw bytes each, back to back), using prep, the prepLen values per
// block that prep computed from x once per product (nil when prepLen is
// 0). A kernel that reads one stream of weight bytes prefetches pf bytes
// ahead in it; the others ignore pf.
type quantDots struct {
	prepLen int
	// prepPad is how many values the prep takes beyond prepLen per
	// block (the integer kernels align x's limbs to 64 bytes in it).
	prepPad int
	prep    func(dst, x []float32)
	dots    func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int)
	// rowDots is dots reading the weight rows one at a time instead of
	// four in lockstep: the same results (order.go picks one). A four-row
	// layout has one order: its dots and rowDots are one kernel.
	rowDots func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int)
	// maxM, when not 0, is the most rows of A the kernel is used for:
	// a float kernel that widens the weights for each row of A anew
	// (AVX2's) loses to dequantising four rows once into a buffer and
	// dotting them with every row of A (the AVX2 kernels at batch 8: 0.8x).
	maxM int
}

// prepSize is how many values the prep of x of nb blocks takes.
func (k *quantDots) prepSize(nb int) int {
	if k.prepLen == 0 {
		return 0
	}
	return k.prepLen*nb + k.prepPad
}

// DequantEmbedRow writes row id of a quantized [rows, len(dst)] matrix w
// into dst: an embedding lookup (of a four-row layout, the row's group is
// dequantised).
func DequantEmbedRow(t QuantType, dst []float32, w []byte, id int) {
	k := len(dst)
	rb := t.RowBytes(k)
	if !t.Repacked() {
		DequantRow(t, dst, w[id*rb:(id+1)*rb])
		return
	}
	g := getBuf(4 * k)
	defer putBuf(g)
	g0 := id &^ 3
	dequantGroup(t, g.s, k, w[g0*rb:(g0+4)*rb])
	copy(dst, g.s[(id-g0)*k:(id-g0+1)*k])
}
