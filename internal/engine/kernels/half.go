package kernels

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

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
	halfToFloat32(t, dst, src, int(halfTuner.pf.Load()))
}

// halfToFloat32 is HalfToFloat32 prefetching pf bytes ahead in src.
func halfToFloat32(t HalfType, dst []float32, src []uint16, pf int) {
	n := len(dst)
	src = src[:n]
	i := 0
	if n >= 8 {
		switch {
		case t == BF16 && haveAVX2:
			i = n &^ 7
			cvtBF16Y(i, &dst[0], &src[0], pf)
		case t == F16 && haveF16C:
			i = n &^ 7
			cvtF16Y(i, &dst[0], &src[0], pf)
		}
	}
	for ; i < n; i++ {
		dst[i] = t.Float32(src[i])
	}
}

// hdot4 returns the dots of x with the four half-precision rows
// w[r*ldw : r*ldw+len(x)], r = 0..3.
// rows selects the AVX2 kernels' access order, pf their prefetch distance
// in row order (order.go): the same result.
func hdot4(t HalfType, x []float32, w []uint16, ldw int, rows bool, pf int) [4]float32 {
	n := len(x)
	_ = w[3*ldw+n-1]
	var out [4]float32
	i := 0
	switch {
	case haveAVX2 && n >= 8 && t == BF16 && rows:
		i = n &^ 7
		hdot4BF16R(i, &x[0], &w[0], ldw, &out, pf)
	case haveAVX2 && n >= 8 && t == BF16:
		i = n &^ 7
		hdot4BF16Y(i, &x[0], &w[0], ldw, &out)
	case haveF16C && n >= 8 && t == F16 && rows:
		i = n &^ 7
		hdot4F16R(i, &x[0], &w[0], ldw, &out, pf)
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

// StreamRows is the most rows of A for which a product streams the
// weights once for all rows (HalfGemmNT's decode path, and what GemvNT is
// for): decode batches. More rows go through Sgemm (half weights widened
// in blocks).
const StreamRows = 16

// halfBlockElems is the size of the float32 blocks weights are widened into
// for the matrix-matrix products (4 MiB, in L3 while Sgemm packs it). Each
// block is one Sgemm call, which packs the activations again: with 1 MiB
// blocks a 512-token BF16 prefill ran at 745–781 tok/s, with 4 MiB 858–898
// (float32: 929–980); 16 MiB measured the same as 4.
const halfBlockElems = 1 << 20

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
	if m <= StreamRows {
		halfGemvNT(t, m, n, k, a, lda, w, ldw, beta, c, ldc)
		return
	}
	blocksNT(m, n, k, a, lda, halfWiden(t, w, ldw, k), beta, c, ldc)
}

// blocksNT is C = A·Wᵀ + beta·C with the n rows of W [n,k] widened to
// float32 by widen in blocks (widenBlocks), each multiplied with
// kernels.Default()'s Sgemm.
func blocksNT(m, n, k int, a []float32, lda int, widen func(dst []float32, r0, r1 int), beta float32, c []float32, ldc int) {
	be := Default()
	widenBlocks(n, k, widen, func(j0, j1 int, blk []float32) {
		be.Sgemm(false, true, m, j1-j0, k, 1, a, lda, blk, k, beta, c[j0:], ldc)
	})
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
	blocksNN(m, n, k, a, lda, halfWiden(t, w, ldw, n), beta, c, ldc)
}

// blocksNN is C = A·W + beta·C with the k rows of W [k,n] widened to
// float32 by widen in blocks (widenBlocks), each multiplied with
// kernels.Default()'s Sgemm.
func blocksNN(m, n, k int, a []float32, lda int, widen func(dst []float32, r0, r1 int), beta float32, c []float32, ldc int) {
	be := Default()
	widenBlocks(k, n, widen, func(p0, p1 int, blk []float32) {
		b := beta
		if p0 > 0 {
			b = 1
		}
		be.Sgemm(false, false, m, n, p1-p0, 1, a[p0:], lda, blk, n, b, c, ldc)
	})
}

// widenBlocks widens the rows rows of cols values of a weight matrix
// block by block (about halfBlockElems values, a multiple of 16 rows) into
// one reused float32 buffer, widen(dst, r0, r1) writing rows [r0, r1) into
// dst (row stride cols), and calls f with each block's rows [r0, r1), in
// order.
func widenBlocks(rows, cols int, widen func(dst []float32, r0, r1 int), f func(r0, r1 int, blk []float32)) {
	rb := max(16, halfBlockElems/cols) &^ 15
	wf := getBuf(min(rb, rows) * cols)
	defer putBuf(wf)
	for r0 := 0; r0 < rows; r0 += rb {
		r1 := min(r0+rb, rows)
		blk := wf.s[:(r1-r0)*cols]
		widen(blk, r0, r1)
		f(r0, r1, blk)
	}
}

// halfWiden is the widen function of widenBlocks for half values w (row
// stride ldw) of rows of cols values: in parallel over the rows.
func halfWiden(t HalfType, w []uint16, ldw, cols int) func(dst []float32, r0, r1 int) {
	return func(dst []float32, r0, r1 int) {
		par.Range(r1-r0, cols, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				HalfToFloat32(t, dst[r*cols:(r+1)*cols], w[(r0+r)*ldw:])
			}
		})
	}
}

// halfGemvNT is HalfGemmNT for few rows of A (see streamNT).
func halfGemvNT(t HalfType, m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	streamNT(m, n, k, a, lda, &wrows{h: w, t: t, ld: ldw}, beta, c, ldc, false)
}

// GemvNT computes C = A·Wᵀ + beta·C for float32 weights W [n,k] (row
// stride ldw) and few rows of A [m,k] (decode batches, m <= StreamRows): as
// HalfGemmNT's streaming path, each weight read once for all rows.
func GemvNT(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	gemvNT("GemvNT", m, n, k, a, lda, w, ldw, beta, c, ldc, false)
}

// GemvNTSerial is GemvNT on the calling goroutine alone: for products
// that are themselves tasks of a parallel step (a decode step's LoRA
// updates), where a nested fan-out would only add hand-offs.
func GemvNTSerial(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	gemvNT("GemvNTSerial", m, n, k, a, lda, w, ldw, beta, c, ldc, true)
}

func gemvNT(op string, m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int, serial bool) {
	if m == 0 || n == 0 {
		return
	}
	if len(w) < (n-1)*ldw+k {
		panic(fmt.Sprintf("kernels: %s: w has %d elements, need %d", op, len(w), (n-1)*ldw+k))
	}
	checkHalf(op, m, n, k, a, lda, 0, nil, c, ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	streamNT(m, n, k, a, lda, &wrows{f: w, ld: ldw}, beta, c, ldc, serial)
}

// wrows is the weight matrix of a streamed product: float32 values f, or
// half-precision values h of type t; row stride ld.
type wrows struct {
	f  []float32
	h  []uint16
	t  HalfType
	ld int
}

// zCols is how many leading columns (of k) the AVX-512 kernels cover (a
// multiple of 16, of 32 for BF16), 0 when they do not run here.
func (w *wrows) zCols(k int) int {
	switch {
	case !haveAVX512:
		return 0
	case w.h == nil:
		return k &^ 15
	case w.t == BF16:
		return k &^ 31
	case haveF16C:
		return k &^ 15
	}
	return 0
}

// elemSize is the bytes per weight.
func (w *wrows) elemSize() int {
	if w.h != nil {
		return 2
	}
	return 4
}

// ahead is the four weight rows after the group at row j, up to row j1, as
// a prefetch range (nil, 0: none): what a decode product reads next.
func (w *wrows) ahead(j, j1 int) (unsafe.Pointer, int) {
	r := min(j+8, j1) - (j + 4)
	if r <= 0 {
		return nil, 0
	}
	o := (j + 4) * w.ld
	if w.h != nil {
		return unsafe.Pointer(&w.h[o]), 2 * min(r*w.ld, len(w.h)-o)
	}
	return unsafe.Pointer(&w.f[o]), 4 * min(r*w.ld, len(w.f)-o)
}

// at is the value at row j, column p.
func (w *wrows) at(j, p int) float32 {
	if w.h != nil {
		return w.t.Float32(w.h[j*w.ld+p])
	}
	return w.f[j*w.ld+p]
}

// evenOdd copies the first len(dst) (a multiple of 32) values of x into
// dst permuted per block of 32: the block's even-indexed values, then its
// odd-indexed ones, the order in which the BF16 kernels widen a 64-byte
// line of weights (one shift gives the even values, one AND the odd ones).
func evenOdd(dst, x []float32) {
	if haveAVX512 && len(dst) >= 32 {
		_ = x[len(dst)&^31-1]
		evenOddZ(len(dst)/32, &dst[0], &x[0])
		return
	}
	for b := 0; b+32 <= len(dst); b += 32 {
		for i := range 16 {
			dst[b+i] = x[b+2*i]
			dst[b+16+i] = x[b+2*i+1]
		}
	}
}

// streamMinChunk is the fewest weight bytes of a streamed product's task
// (but the last): the tail tasks that let the workers finish together.
// Fixed-size tasks were worse both ways: 64 KiB tasks made a decode step
// ~15% slower (a task's first rows are not prefetched, and each is a
// hand-out), 256 KiB tasks leave one worker idle at a product's end (BF16
// weights streamed at 0.9 of float32's bytes/s; guided, at 0.95–1.0).
const streamMinChunk = 32 << 10

// streamSplit is how a streamed product's n weight rows (rowBytes each)
// are cut into tasks (guided scheduling): each task takes 1/(2·workers)
// of the rows left, at least streamMinChunk bytes, in multiples of 4 rows,
// so the first tasks are long (a worker's prefetches run ahead within its
// own rows, and hand-outs are few) and the last ones short (the workers
// finish together). Front-loaded (front > 0), the first task of each
// worker takes front rows (together 4/5 of the product), and only the
// last fifth is guided: each worker streams one long run. For the small
// products of a quantized model's layers (0.2–1 MB) that streamed ~5–12 %
// faster on AMD Zen 5, for large float ones no faster; which split a
// machine streams faster is a calibrated setting (order.go), never a
// result: every row's dot is the same kernel's.
type streamSplit struct{ n, minRows, div, front, frontEnd int }

func newStreamSplit(n, rowBytes int, front bool) streamSplit {
	s := streamSplit{n: n, minRows: max(4, (streamMinChunk/rowBytes)&^3), div: 2 * workers()}
	if front {
		s.front = max(s.minRows, (4*n/(5*workers()))&^3)
		s.frontEnd = min(n, workers()*s.front)
	}
	return s
}

// next is the end of the task that starts at row j.
func (s streamSplit) next(j int) int {
	if j < s.frontEnd {
		return min(s.frontEnd, j+s.front)
	}
	return min(s.n, j+max(s.minRows, ((s.n-j)/s.div)&^3))
}

// tasks is the number of tasks.
func (s streamSplit) tasks() int {
	t := 0
	for j := 0; j < s.n; j = s.next(j) {
		t++
	}
	return t
}

// task is the rows [j0, j1) of task ti.
func (s streamSplit) task(ti int) (j0, j1 int) {
	for range ti {
		j0 = s.next(j0)
	}
	return j0, s.next(j0)
}

// streamNT computes C = A·Wᵀ + beta·C for few rows of A by streaming the
// weight rows once, in tasks of a multiple of 4 rows handed out one at a
// time to the workers (streamSplit): each group of 4 weight
// rows is dotted with every row of A. With AVX-512, four rows of A at a
// time go through the register-blocked 4x4 kernel and the rest through its
// one-row twin, which sums in the same order, so a row's results do not
// depend on the batch; else each row of A goes through the AVX2 or Go dot
// of four weight rows (half weights widened once per group when m > 1,
// which sums as the one-row half kernel does). The one-row kernels (and
// the AVX2 ones) read the four weight rows in lockstep or one at a time,
// and the AVX-512 ones in row order prefetch some distance ahead, as
// calibrated for this machine (order.go); the results are the same.
func streamNT(m, n, k int, a []float32, lda int, w *wrows, beta float32, c []float32, ldc int, serial bool) {
	_ = a[(m-1)*lda+k-1]
	_ = c[(m-1)*ldc+n-1]
	kz := w.zCols(k)
	if kz == 0 && w.h == nil && haveAVX2 && k%8 == 0 && k <= shortRowsMaxK && w.ld == k && (beta == 0 || beta == 1) {
		shortRowsNT(m, n, k, a, lda, w.f, beta, c, ldc, serial || m*n*k < gemvParallelMin)
		return
	}
	xa, ldx := a, lda // the rows of A as the AVX-512 kernels read them
	if kz > 0 && w.h != nil && w.t == BF16 {
		p := getBuf(m * kz)
		defer putBuf(p)
		for i := range m {
			evenOdd(p.s[i*kz:(i+1)*kz], a[i*lda:])
		}
		xa, ldx = p.s, kz
	}
	// The one-row kernels' access order, prefetch distance and task split
	// (order.go), timed while calibrating.
	var set decodeSetting
	if kz == 0 && haveAVX2 || m%4 != 0 {
		var cand int
		if set, cand = halfTuner.pick(m, n*k*w.elemSize()); cand >= 0 {
			defer halfTuner.time(cand, n*k*w.elemSize())()
		}
	}
	split := newStreamSplit(n, k*w.elemSize(), set.front)
	tasks := split.tasks()
	rows, pf := set.rows, set.pf
	hc := halfCalls.Get().(*halfCall)
	hc.halfArgs = halfArgs{m: m, k: k, a: a, lda: lda, w: *w, beta: beta, c: c, ldc: ldc,
		kz: kz, xa: xa, ldx: ldx, rows: rows, pf: pf, split: split}
	par.Tasks(tasks, serial || m*n*k < gemvParallelMin || tasks < 2, hc.run)
	hc.halfArgs = halfArgs{} // nothing kept past the call
	halfCalls.Put(hc)
}

// shortRowsMaxK is the longest weight rows shortRowsNT takes.
const shortRowsMaxK = 64

// shortRowsNT is streamNT, where the AVX-512 kernels do not take the rows
// (AVX2 machines; rows of 8 values on AVX-512 ones), for float32 weight
// rows of few values (k ≤ shortRowsMaxK, a multiple of 8, back to back)
// and beta 0 or 1: a LoRA B factor, rows of rank r values, in decode. The four-row
// kernels pay a call, a setup and four horizontal sums for every four
// such rows (6 GB/s from L3 at r = 16); shortDots8 takes eight rows a
// step and sums them in one tree. Each output on its own, so a row's
// results depend neither on the batch nor on the split into tasks (of
// whole groups of eight weight rows; the rows past the last eight go in
// order with the last task).
func shortRowsNT(m, n, k int, a []float32, lda int, w []float32, beta float32, c []float32, ldc int, serial bool) {
	w = w[:n*k]
	groups := n / 8
	tasks := 1
	if !serial {
		tasks = max(1, min(workers(), groups))
	}
	if tasks == 1 { // a decode step's LoRA update: no closure to allocate
		shortRowsTask(0, 1, m, n, k, a, lda, w, beta, c, ldc)
		return
	}
	par.Tasks(tasks, false, func(_, t int) { shortRowsTask(t, tasks, m, n, k, a, lda, w, beta, c, ldc) })
}

// shortRowsTask is shortRowsNT's task t of tasks.
func shortRowsTask(t, tasks, m, n, k int, a []float32, lda int, w []float32, beta float32, c []float32, ldc int) {
	groups := n / 8
	g0, g1 := groups*t/tasks, groups*(t+1)/tasks
	o1 := 8 * g1
	if t == tasks-1 {
		o1 = n
	}
	for i := range m {
		x, y := a[i*lda:i*lda+k], c[i*ldc:i*ldc+n]
		if g1 > g0 {
			shortDots8(g1-g0, k, &x[0], &w[8*g0*k], &y[8*g0], beta != 0)
		}
		for o := 8 * g1; o < o1; o++ {
			var d float32
			for p, v := range x {
				d += v * w[o*k+p]
			}
			if beta != 0 {
				d += y[o]
			}
			y[o] = d
		}
	}
}

// halfCall is one streamNT call's arguments as its tasks read them. Calls
// come from a pool with task bound to run once, so that a product hands
// par.Tasks no new closure (batch-1 decode makes ~120 a token).
type halfCall struct {
	halfArgs
	run func(worker, ti int) // task
}

type halfArgs struct {
	m, k  int
	a     []float32
	lda   int
	w     wrows // a copy: the caller's does not escape
	beta  float32
	c     []float32
	ldc   int
	kz    int
	xa    []float32
	ldx   int
	rows  bool
	pf    int
	split streamSplit
}

var halfCalls = sync.Pool{New: func() any {
	hc := new(halfCall)
	hc.run = hc.task
	return hc
}}

// task is streamNT's task ti.
func (hc *halfCall) task(_, ti int) {
	m, k, a, lda, w, beta, c, ldc := hc.m, hc.k, hc.a, hc.lda, &hc.w, hc.beta, hc.c, hc.ldc
	kz, xa, ldx, rows, pf, split := hc.kz, hc.xa, hc.ldx, hc.rows, hc.pf, hc.split
	j0, j1 := split.task(ti)
	var wide *buf // widened group of half weights (m > 1 without AVX-512)
	if m > 1 && w.h != nil && kz == 0 {
		wide = getBuf(4 * k)
		defer putBuf(wide)
	}
	var out [16]float32
	var outs [64]float32
	inL1 := func(i0 int, f []float32, ld, j int) { // rows [i0, m) of A against four rows f in L1
		pf, pfn := w.ahead(j, j1) // the next group's rows, fetched meanwhile
		for ; i0 < m; i0 += 16 {
			mm := min(16, m-i0)
			dot4Rows(mm, k, a[i0*lda:], lda, f, ld, outs[:4*mm], pf, pfn)
			pfn = 0
			for q := range mm {
				store4(c, (i0+q)*ldc+j, beta, [4]float32(outs[4*q:4*q+4]))
			}
		}
	}
	tail := func(i, j int, d *[4]float32) { // columns [kz, k), in order
		for p := kz; p < k; p++ {
			x := a[i*lda+p]
			for r := range 4 {
				d[r] += x * w.at(j+r, p)
			}
		}
	}
	j := j0
	for ; j+4 <= j1; j += 4 {
		i := 0
		if kz > 0 {
			for ; i+4 <= m; i += 4 {
				switch {
				case w.h == nil:
					mdotF32Z(kz, &xa[i*ldx], ldx, &w.f[j*w.ld], w.ld, &out)
				case w.t == BF16:
					mdotBF16Z(kz, &xa[i*ldx], ldx, &w.h[j*w.ld], w.ld, &out)
				default:
					mdotF16Z(kz, &xa[i*ldx], ldx, &w.h[j*w.ld], w.ld, &out)
				}
				for q := range 4 {
					d := [4]float32{out[4*q], out[4*q+1], out[4*q+2], out[4*q+3]}
					tail(i+q, j, &d)
					store4(c, (i+q)*ldc+j, beta, d)
				}
			}
			for ; i < m; i++ {
				var d [4]float32
				switch {
				case w.h == nil && rows:
					dot1F32R(kz, &xa[i*ldx], &w.f[j*w.ld], w.ld, &d, pf)
				case w.h == nil:
					dot1F32Z(kz, &xa[i*ldx], &w.f[j*w.ld], w.ld, &d)
				case w.t == BF16 && rows:
					dot1BF16R(kz, &xa[i*ldx], &w.h[j*w.ld], w.ld, &d, pf)
				case w.t == BF16:
					dot1BF16Z(kz, &xa[i*ldx], &w.h[j*w.ld], w.ld, &d)
				case rows:
					dot1F16R(kz, &xa[i*ldx], &w.h[j*w.ld], w.ld, &d, pf)
				default:
					dot1F16Z(kz, &xa[i*ldx], &w.h[j*w.ld], w.ld, &d)
				}
				tail(i, j, &d)
				store4(c, i*ldc+j, beta, d)
			}
			continue
		}
		switch {
		case w.h == nil:
			// The first row of A streams the four weight rows in the
			// calibrated order; the others find them in L1, where one call
			// of the lockstep kernel for all of them outruns row order's two
			// sums at a time (each FMA waits for the last). Same results.
			store4(c, j, beta, dot4Ordered(a[:k], w.f[j*w.ld:], w.ld, rows, pf))
			inL1(1, w.f[j*w.ld:], w.ld, j)
		case wide != nil:
			f := wide.s[:4*k]
			for r := range 4 {
				halfToFloat32(w.t, f[r*k:(r+1)*k], w.h[(j+r)*w.ld:], pf)
			}
			inL1(0, f, k, j)
		default:
			store4(c, j, beta, hdot4(w.t, a[:k], w.h[j*w.ld:], w.ld, rows, pf))
		}
	}
	for ; j < j1; j++ { // rows left over: plain dots
		for i := range m {
			o := i*ldc + j
			var d float32
			if w.h != nil {
				d = hdot(w.t, a[i*lda:i*lda+k], w.h[j*w.ld:j*w.ld+k])
			} else {
				d = dotImpl(a[i*lda:i*lda+k], w.f[j*w.ld:j*w.ld+k])
			}
			if beta == 0 {
				c[o] = d
			} else {
				c[o] = d + beta*c[o]
			}
		}
	}
}

// store4 sets c[o+r] = d[r] + beta·c[o+r], r < 4.
func store4(c []float32, o int, beta float32, d [4]float32) {
	c = c[o : o+4]
	if beta == 0 {
		c[0], c[1], c[2], c[3] = d[0], d[1], d[2], d[3]
		return
	}
	for r := range 4 {
		c[r] = d[r] + beta*c[r]
	}
}
