package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"flywheel/internal/par"
)

// Go is the pure-Go backend (Go plus Go assembly, no cgo): packed,
// cache-blocked GEMM around a register-blocked micro-kernel — 6x32 with
// AVX-512, 6x16 with AVX2+FMA, a plain Go 6x16 otherwise — parallel across
// GOMAXPROCS goroutines, with bandwidth-bound streaming paths for m == 1,
// n == 1 (GEMV shapes) and m <= 16 that skip packing. The zero value is
// ready to use.
type Go struct {
	// Threads bounds the goroutines one blocked product runs on (0:
	// GOMAXPROCS). Callers that already run many small products in
	// parallel (the attention) set 1, so each product runs on its caller's
	// goroutine instead of fanning out again.
	Threads int
}

// Name implements Backend.
func (Go) Name() string { return "go" }

// Blocking parameters (variables so tests can shrink them to exercise every
// loop edge on small shapes).
var (
	kcBlock = 256  // depth of a packed panel: B micro-panel kc*nr*4 = 16 or 32 KiB (L1)
	mcMax   = 144  // rows of a packed A block: 144*256*4 = 144 KiB (L2)
	ncBlock = 3072 // columns of a packed B block: 3 MiB (L3)
)

// parallel work thresholds (in multiply-adds / weight elements)
const (
	gemmParallelMin = 48 * 48 * 48
	gemvParallelMin = 1 << 15
)

func workers() int { return max(1, runtime.GOMAXPROCS(0)) }

// Sgemm implements Backend.
func (g Go) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkSgemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	switch {
	case m == 1:
		x := vecOf(a, k, transA, lda)
		if transB {
			gemvDot(n, k, b, ldb, x, c, 1, alpha, beta)
		} else {
			gemvAxpy(k, n, b, ldb, x, c, 1, alpha, beta)
		}
		return
	case n == 1:
		x := vecOf(b, k, !transB, ldb)
		if !transA {
			gemvDot(m, k, a, lda, x, c, ldc, alpha, beta)
		} else {
			gemvAxpy(k, m, a, lda, x, c, ldc, alpha, beta)
		}
		return
	}
	if m <= smallMDot && !(transA && !transB && stridedKernel()) {
		if transB {
			gemvDotMulti(transA, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		} else {
			gemvAxpyMulti(transA, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		}
		return
	}
	W := workers()
	if g.Threads > 0 {
		W = min(W, g.Threads)
	}
	gemm(W, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// checkSgemm panics with a clear message when a slice is too short or a
// stride too small for the described matrices.
func checkSgemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernels: Sgemm negative size m=%d n=%d k=%d", m, n, k))
	}
	need := func(name string, s []float32, rows, cols, ld int) {
		if rows == 0 || cols == 0 {
			return
		}
		if ld < cols {
			panic(fmt.Sprintf("kernels: Sgemm ld%s=%d < %d", name, ld, cols))
		}
		if len(s) < (rows-1)*ld+cols {
			panic(fmt.Sprintf("kernels: Sgemm len(%s)=%d < %d", name, len(s), (rows-1)*ld+cols))
		}
	}
	if transA {
		need("a", a, k, m, lda)
	} else {
		need("a", a, m, k, lda)
	}
	if transB {
		need("b", b, n, k, ldb)
	} else {
		need("b", b, k, n, ldb)
	}
	need("c", c, m, n, ldc)
}

// scaleC does C = beta*C (beta == 0 overwrites, so NaNs in C do not leak).
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
		} else {
			scaleImpl(beta, row)
		}
	}
}

// vecOf returns the k-vector v[p] = s[p*stride] (strided when str is true,
// contiguous otherwise), copying only when strided.
func vecOf(s []float32, k int, strided bool, stride int) []float32 {
	if !strided || stride == 1 {
		return s[:k]
	}
	v := make([]float32, k)
	for p := range v {
		v[p] = s[p*stride]
	}
	return v
}

// parallelFor runs f(0..parts-1) concurrently (inline when parts==1).
func parallelFor(parts int, f func(w int)) {
	par.Tasks(parts, false, func(_, i int) { f(i) })
}

// gemvDot: y[r*incy] = alpha*dot(W[r,:cols], x) + beta*y[r*incy] for r < rows.
func gemvDot(rows, cols int, w []float32, ldw int, x, y []float32, incy int, alpha, beta float32) {
	x = x[:cols]
	parts := 1
	if rows*cols >= gemvParallelMin && rows >= 8 {
		parts = min(workers(), rows/4)
	}
	put := func(r int, d float32) {
		if beta == 0 {
			y[r*incy] = alpha * d
		} else {
			y[r*incy] = alpha*d + beta*y[r*incy]
		}
	}
	parallelFor(parts, func(p int) {
		// split rows in multiples of 4
		r0 := (rows * p / parts) &^ 3
		r1 := (rows * (p + 1) / parts) &^ 3
		if p == parts-1 {
			r1 = rows
		}
		r := r0
		for ; r+4 <= r1; r += 4 {
			d := dot4Impl(x, w[r*ldw:], ldw)
			put(r, d[0])
			put(r+1, d[1])
			put(r+2, d[2])
			put(r+3, d[3])
		}
		for ; r < r1; r++ {
			put(r, dotImpl(x, w[r*ldw:r*ldw+cols]))
		}
	})
}

// gemvAxpy: y[j*incy] = alpha*sum_r x[r]*W[r,j] + beta*y[j*incy] for j < cols.
func gemvAxpy(rows, cols int, w []float32, ldw int, x, y []float32, incy int, alpha, beta float32) {
	x = x[:rows]
	parts := 1
	if rows*cols >= gemvParallelMin && cols >= 64 {
		parts = min(workers(), cols/32)
	}
	parallelFor(parts, func(p int) {
		j0 := (cols * p / parts) &^ 7
		j1 := (cols * (p + 1) / parts) &^ 7
		if p == parts-1 {
			j1 = cols
		}
		width := j1 - j0
		if width <= 0 {
			return
		}
		acc := getBuf(width)
		t := acc.s[:width]
		clear(t)
		r := 0
		for ; r+4 <= rows; r += 4 {
			a4 := [4]float32{x[r], x[r+1], x[r+2], x[r+3]}
			axpy4Impl(&a4, w[r*ldw+j0:], ldw, t)
		}
		for ; r < rows; r++ {
			axpyImpl(x[r], w[r*ldw+j0:r*ldw+j1], t)
		}
		for j, v := range t {
			o := (j0 + j) * incy
			if beta == 0 {
				y[o] = alpha * v
			} else {
				y[o] = alpha*v + beta*y[o]
			}
		}
		putBuf(acc)
	})
}

// smallMDot is the largest m for which GEMM skips packing and streams B
// once: for transB each group of 4 B rows (hot in L1) is dotted with every
// row of op(A); otherwise each group of 4 B rows is axpy'd into every C row
// (hot in L2). Packing B costs about as much as the whole product below
// this size. Variable for tests and benchmarks.
var smallMDot = 16

// rowsOf returns the m rows of op(A) (k long) as slices, gathering them
// when A is transposed.
func rowsOf(transA bool, m, k int, a []float32, lda int) [][]float32 {
	xs := make([][]float32, m)
	if transA {
		flat := make([]float32, m*k)
		for p := 0; p < k; p++ {
			row := a[p*lda : p*lda+m]
			for i, v := range row {
				flat[i*k+p] = v
			}
		}
		for i := range xs {
			xs[i] = flat[i*k : (i+1)*k]
		}
		return xs
	}
	for i := range xs {
		xs[i] = a[i*lda : i*lda+k]
	}
	return xs
}

// gemvAxpyMulti: C[i,:] = alpha*op(A)[i,:]·B + beta*C[i,:] with B stored
// [k,n] (not transposed), for small m. Columns are split across workers.
func gemvAxpyMulti(transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	xs := rowsOf(transA, m, k, a, lda)
	parts := 1
	if m*n*k >= gemvParallelMin && n >= 64 {
		parts = min(workers(), n/32)
	}
	parallelFor(parts, func(p int) {
		j0 := (n * p / parts) &^ 7
		j1 := (n * (p + 1) / parts) &^ 7
		if p == parts-1 {
			j1 = n
		}
		width := j1 - j0
		if width <= 0 {
			return
		}
		acc := getBuf(m * width)
		t := acc.s[:m*width]
		clear(t)
		r := 0
		for ; r+4 <= k; r += 4 {
			w := b[r*ldb+j0:]
			for i, x := range xs {
				a4 := [4]float32{x[r], x[r+1], x[r+2], x[r+3]}
				axpy4Impl(&a4, w, ldb, t[i*width:(i+1)*width])
			}
		}
		for ; r < k; r++ {
			w := b[r*ldb+j0 : r*ldb+j1]
			for i, x := range xs {
				axpyImpl(x[r], w, t[i*width:(i+1)*width])
			}
		}
		for i := range m {
			crow := c[i*ldc+j0 : i*ldc+j1]
			ti := t[i*width : (i+1)*width]
			for j, v := range ti {
				if beta == 0 {
					crow[j] = alpha * v
				} else {
					crow[j] = alpha*v + beta*crow[j]
				}
			}
		}
		putBuf(acc)
	})
}

// gemvDotMulti: C[i,j] = alpha*dot(op(A)[i,:], B[j,:]) + beta*C[i,j] with B
// stored [n,k] (transB), for small m.
func gemvDotMulti(transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	xs := rowsOf(transA, m, k, a, lda)
	parts := 1
	if m*n*k >= gemvParallelMin && n >= 8 {
		parts = min(workers(), n/4)
	}
	put := func(i, j int, d float32) {
		o := i*ldc + j
		if beta == 0 {
			c[o] = alpha * d
		} else {
			c[o] = alpha*d + beta*c[o]
		}
	}
	parallelFor(parts, func(p int) {
		j0 := (n * p / parts) &^ 3
		j1 := (n * (p + 1) / parts) &^ 3
		if p == parts-1 {
			j1 = n
		}
		j := j0
		for ; j+4 <= j1; j += 4 {
			w := b[j*ldb:]
			for i, x := range xs {
				d := dot4Impl(x, w, ldb)
				put(i, j, d[0])
				put(i, j+1, d[1])
				put(i, j+2, d[2])
				put(i, j+3, d[3])
			}
		}
		for ; j < j1; j++ {
			w := b[j*ldb : j*ldb+k]
			for i, x := range xs {
				put(i, j, dotImpl(x, w))
			}
		}
	})
}

type buf struct{ s []float32 }

var bufPool sync.Pool

func getBuf(n int) *buf {
	if v, ok := bufPool.Get().(*buf); ok && cap(v.s) >= n {
		v.s = v.s[:n]
		return v
	}
	return &buf{s: make([]float32, n, n+64)}
}

func putBuf(b *buf) { bufPool.Put(b) }

// Operands read in place by the strided micro-kernels instead of packed:
// A (either layout) when the product has at most directAMaxN columns, and
// B (not transposed) when it has at most directBMaxM rows. Packing an operand costs about 4/(the other
// dimension) of the product; for these skinny shapes (the LoRA and
// attention gradients) that is most of it. Variables for tests.
var (
	directAMaxN = 128
	directBMaxM = 64
)

// gemm: C = alpha*op(A)*op(B) + beta*C, on up to W goroutines.
func gemm(W int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	nr := tileN()
	strided := stridedKernel()
	// Every micro-kernel overwrites C with set (beta 0, the first k block),
	// so C is scaled beforehand only for another beta.
	if beta != 0 && beta != 1 {
		scaleC(m, n, beta, c, ldc)
		beta = 1
	}
	if strided && transA && !transB && n < nr && m >= nr {
		gemmTransposed(W, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m*n*k < gemmParallelMin {
		W = 1
	}
	if W > 1 && gemmSlabs(W, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	// A blocks: choose mc so the number of blocks balances across workers.
	nIC := (m + mcMax - 1) / mcMax
	if W > 1 && nIC%W != 0 && m > mr*W {
		nIC += W - nIC%W
	}
	mc := ((m+nIC-1)/nIC + mr - 1) / mr * mr
	nIC = (m + mc - 1) / mc
	directA := strided && n <= directAMaxN
	directB := strided && !transB && m <= directBMaxM

	ncb := min(ncBlock, n)
	// equal k blocks (576 = 3×192, not 256+256+64: a short last block pays
	// the micro-kernel's C loads and stores for little work)
	nPC := (k + kcBlock - 1) / kcBlock
	kcb := (k + nPC - 1) / nPC
	bPack := getBuf(kcb * ((ncb + nr - 1) / nr * nr))
	defer putBuf(bPack)

	for jc := 0; jc < n; jc += ncb {
		nCur := min(ncb, n-jc)
		nPanels := (nCur + nr - 1) / nr
		// column chunks when there are too few A blocks to feed the workers
		nJC := 1
		if nIC < W {
			nJC = min(W, nPanels)
		}
		for pc := 0; pc < k; pc += kcb {
			kCur := min(kcb, k-pc)
			set := beta == 0 && pc == 0
			bp := bPack.s[:kCur*nPanels*nr]
			B := operand{packed: bp}
			if directB {
				// in place, but for a last partial panel
				full := nCur / nr
				B = operand{direct: b[pc*ldb+jc:], ld: ldb, full: full}
				if full < nPanels {
					packB(bp, nr, b, ldb, transB, pc, kCur, jc, nCur, full, full+1)
					B.edge = bp[full*kCur*nr : (full+1)*kCur*nr]
				}
			} else {
				// pack B in parallel, panels split across workers
				parts := min(W, nPanels)
				parallelFor(parts, func(w int) {
					p0, p1 := nPanels*w/parts, nPanels*(w+1)/parts
					packB(bp, nr, b, ldb, transB, pc, kCur, jc, nCur, p0, p1)
				})
			}
			// macro-kernel tasks: (A block, column chunk)
			nTasks := nIC * nJC
			var next atomic.Int64
			parallelFor(min(W, nTasks), func(int) {
				aBuf := getBuf(mc * kCur)
				defer putBuf(aBuf)
				packed := -1
				for {
					t := int(next.Add(1) - 1)
					if t >= nTasks {
						return
					}
					ib, jb := t/nJC, t%nJC
					i0 := ib * mc
					mCur := min(mc, m-i0)
					var A operand
					if directA {
						full := mCur / mr
						if transA {
							A = operand{direct: a[pc*lda+i0:], ld: lda, full: full}
						} else {
							A = operand{direct: a[i0*lda+pc:], ld: lda, rows: true, full: full}
						}
						if full*mr < mCur {
							A.edge = aBuf.s[:mr*kCur]
							packA(A.edge, a, lda, transA, i0+full*mr, mCur-full*mr, pc, kCur)
						}
					} else {
						A.packed = aBuf.s[:(mCur+mr-1)/mr*mr*kCur]
						if packed != ib {
							packA(A.packed, a, lda, transA, i0, mCur, pc, kCur)
							packed = ib
						}
					}
					q0, q1 := nPanels*jb/nJC, nPanels*(jb+1)/nJC
					macroKernel(&A, &B, nr, mCur, kCur, q0, q1, nCur, alpha, c[i0*ldc+jc:], ldc, set)
				}
			})
		}
	}
}

// slabPanels is the fewest micro-tiles (column panels or row panels) each
// worker's slab must hold for gemmSlabs to split a product: fewer, and the
// slabs' one-tile differences unbalance the workers. slabMaxWorkers bounds
// the workers it splits for: each packs the other operand whole, a cost
// that grows with their number (measured with two; more keep the shared
// decomposition).
var (
	slabPanels     = 8
	slabMaxWorkers = 4
)

// gemmSlabs multiplies C in W slabs of whole micro-tiles, each by one
// worker alone (gemm with W = 1: its own packing, no hand-out or barrier
// inside the product), and reports whether the product had the tiles for
// it. Slabs of columns when op(A) is the operand to pack twice (m <= n),
// else of rows (op(B) packed twice). Each element's sum is the same
// micro-kernel's over the same k blocks either way, so the results are
// those of one worker, bit for bit (TestGemmSlabsBitIdentical).
//
// The shared decomposition below (A blocks and column chunks as tasks
// over one B packed in parallel) meets at a barrier twice per k block; on
// a two-core AMD EPYC (Zen 3) a 512-token prefill's products ran 0–4%
// faster in slabs (512×192: 18%), those of 30 to 100 rows 11–37%
// (alternated in one process; docs/benchmarks/zen3-avx2-2026-11-28.md).
func gemmSlabs(W int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	if W > slabMaxWorkers {
		return false
	}
	nr := tileN()
	cols := m <= n && n >= slabPanels*W*nr
	if !cols && m < slabPanels*W*mr {
		return false
	}
	parallelFor(W, func(w int) {
		if cols {
			j0, j1 := n*w/W/nr*nr, n*(w+1)/W/nr*nr
			if w == W-1 {
				j1 = n
			}
			var bs []float32 // op(B)'s columns j0..: B's rows when transposed
			if transB {
				bs = b[j0*ldb:]
			} else {
				bs = b[j0:]
			}
			gemm(1, transA, transB, m, j1-j0, k, alpha, a, lda, bs, ldb, beta, c[j0:], ldc)
			return
		}
		i0, i1 := m*w/W/mr*mr, m*(w+1)/W/mr*mr
		if w == W-1 {
			i1 = m
		}
		var as []float32 // op(A)'s rows i0..: A's columns when transposed
		if transA {
			as = a[i0:]
		} else {
			as = a[i0*lda:]
		}
		gemm(1, transA, transB, i1-i0, n, k, alpha, as, lda, b, ldb, beta, c[i0*ldc:], ldc)
	})
	return true
}

// gemmTransposed computes C = alpha*Aᵀ·B + beta*C (beta 0 or 1) for a
// product with fewer columns than a micro-tile (the LoRA gradient dB =
// dyᵀ·xa, 16 columns) as Cᵀ = Bᵀ·A: full micro-tiles, both operands read in
// place, then Cᵀ added into C.
func gemmTransposed(W, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	t := getBuf(n * m)
	defer putBuf(t)
	gemm(W, true, false, n, m, k, alpha, b, ldb, a, lda, 0, t.s, m)
	for i := range m {
		crow := c[i*ldc : i*ldc+n]
		for j := range crow {
			if beta == 0 {
				crow[j] = t.s[j*m+i]
			} else {
				crow[j] += t.s[j*m+i]
			}
		}
	}
}

// operand is one side of a macro-kernel's product: micro-panels packed back
// to back (kc·w floats each), or read in place.
type operand struct {
	packed []float32
	direct []float32 // in place: panel i at direct[i*w:], steps ld apart
	ld     int
	rows   bool      // in place, row-major A: panel i at direct[i*w*ld:], its rows ld apart, steps 1 apart
	full   int       // in place: panels before full; panel full is edge
	edge   []float32 // the packed partial last panel
}

// panel is micro-panel i (w wide, kc steps), its step stride and the
// stride of its w lanes.
func (o *operand) panel(i, kc, w int) ([]float32, int, int) {
	switch {
	case o.direct == nil:
		return o.packed[i*kc*w : (i+1)*kc*w], w, 1
	case i >= o.full:
		return o.edge, w, 1
	case o.rows:
		return o.direct[i*w*o.ld:], 1, o.ld
	default:
		return o.direct[i*w:], o.ld, 1
	}
}

// macroKernel multiplies A's micro-panels (mCur rows, kCur deep) by B's
// panels q0..q1 into C (c points at the block's top-left element), adding
// to C or, with set, overwriting it.
func macroKernel(A, B *operand, nr, mCur, kCur, q0, q1, nCur int, alpha float32, c []float32, ldc int, set bool) {
	var tmp [mr * nrMax]float32
	for q := q0; q < q1; q++ {
		j := q * nr
		nw := min(nr, nCur-j)
		bq, bs, _ := B.panel(q, kCur, nr)
		for i := 0; i < mCur; i += mr {
			mw := min(mr, mCur-i)
			aq, as, ar := A.panel(i/mr, kCur, mr)
			if mw == mr && nw == nr {
				microKernel(kCur, nr, aq, as, ar, bq, bs, c[i*ldc+j:], ldc, alpha, set)
				continue
			}
			microKernel(kCur, nr, aq, as, ar, bq, bs, tmp[:], nr, alpha, true)
			for r := 0; r < mw; r++ {
				crow := c[(i+r)*ldc+j : (i+r)*ldc+j+nw]
				t := tmp[r*nr : r*nr+nw]
				if set {
					copy(crow, t)
					continue
				}
				for jj := range crow {
					crow[jj] += t[jj]
				}
			}
		}
	}
}

// packA packs op(A)[i0:i0+mCur, p0:p0+kCur] into 6-row micro-panels:
// dst[(panel*kCur + p)*6 + r], zero-padding the last panel.
func packA(dst, a []float32, lda int, transA bool, i0, mCur, p0, kCur int) {
	for ip := 0; ip*mr < mCur; ip++ {
		rows := min(mr, mCur-ip*mr)
		d := dst[ip*kCur*mr : (ip+1)*kCur*mr]
		ib := i0 + ip*mr
		if transA {
			// op(A)[i][p] = a[p*lda+i]: 6 contiguous values per p
			if rows == mr && haveAVX2 {
				_ = a[(p0+kCur-1)*lda+ib+mr-1]
				packA6T(kCur, &a[p0*lda+ib], lda, &d[0])
				continue
			}
			if rows == mr {
				for p := 0; p < kCur; p++ {
					o := (p0+p)*lda + ib
					*(*[mr]float32)(d[p*mr:]) = *(*[mr]float32)(a[o : o+mr])
				}
				continue
			}
			for p := 0; p < kCur; p++ {
				src := a[(p0+p)*lda+ib : (p0+p)*lda+ib+rows]
				dd := d[p*mr : p*mr+mr]
				copy(dd, src)
				clear(dd[rows:])
			}
			continue
		}
		if rows == mr {
			p := 0
			if haveAVX2 && kCur >= 8 {
				n8 := kCur / 8
				_ = a[(ib+mr-1)*lda+p0+n8*8-1]
				packA6(n8, &a[ib*lda+p0], lda, &d[0])
				p = n8 * 8
			}
			if p == kCur {
				continue
			}
			r0 := a[ib*lda+p0 : ib*lda+p0+kCur]
			r1 := a[(ib+1)*lda+p0 : (ib+1)*lda+p0+kCur]
			r2 := a[(ib+2)*lda+p0 : (ib+2)*lda+p0+kCur]
			r3 := a[(ib+3)*lda+p0 : (ib+3)*lda+p0+kCur]
			r4 := a[(ib+4)*lda+p0 : (ib+4)*lda+p0+kCur]
			r5 := a[(ib+5)*lda+p0 : (ib+5)*lda+p0+kCur]
			for ; p < kCur; p++ {
				dd := (*[mr]float32)(d[p*mr : p*mr+mr])
				dd[0], dd[1], dd[2], dd[3], dd[4], dd[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
			}
			continue
		}
		for r := 0; r < mr; r++ {
			if r >= rows {
				for p := 0; p < kCur; p++ {
					d[p*mr+r] = 0
				}
				continue
			}
			src := a[(ib+r)*lda+p0 : (ib+r)*lda+p0+kCur]
			for p, v := range src {
				d[p*mr+r] = v
			}
		}
	}
}

// packB packs micro-panels q0..q1 of op(B)[p0:p0+kCur, j0:j0+nCur] as
// dst[(q*kCur + p)*nr + j], zero-padding the last panel.
func packB(dst []float32, nr int, b []float32, ldb int, transB bool, p0, kCur, j0, nCur, q0, q1 int) {
	for q := q0; q < q1; q++ {
		cols := min(nr, nCur-q*nr)
		d := dst[q*kCur*nr : (q+1)*kCur*nr]
		jb := j0 + q*nr
		if !transB {
			switch {
			case cols == 16 && nr == 16:
				for p := 0; p < kCur; p++ {
					o := (p0+p)*ldb + jb
					*(*[16]float32)(d[p*16:]) = *(*[16]float32)(b[o : o+16])
				}
			case cols == 32 && nr == 32:
				for p := 0; p < kCur; p++ {
					o := (p0+p)*ldb + jb
					*(*[32]float32)(d[p*32:]) = *(*[32]float32)(b[o : o+32])
				}
			default:
				for p := 0; p < kCur; p++ {
					src := b[(p0+p)*ldb+jb : (p0+p)*ldb+jb+cols]
					dd := d[p*nr : p*nr+nr]
					copy(dd, src)
					clear(dd[cols:])
				}
			}
			continue
		}
		// op(B)[p][j] = b[j*ldb+p]: transpose 8x8 blocks, then the tails
		if cols < nr {
			clear(d)
		}
		j, p8 := 0, 0
		if haveAVX2 && kCur >= 8 {
			n8 := kCur / 8
			p8 = n8 * 8
			for ; j+8 <= cols; j += 8 {
				_ = b[(jb+j+7)*ldb+p0+p8-1]
				packBT8(n8, &b[(jb+j)*ldb+p0], ldb, &d[j], nr)
			}
			for jj := 0; jj < j; jj++ {
				src := b[(jb+jj)*ldb+p0+p8 : (jb+jj)*ldb+p0+kCur]
				for p, v := range src {
					d[(p8+p)*nr+jj] = v
				}
			}
		}
		for ; j < cols; j++ {
			src := b[(jb+j)*ldb+p0 : (jb+j)*ldb+p0+kCur]
			for p, v := range src {
				d[p*nr+j] = v
			}
		}
	}
}
