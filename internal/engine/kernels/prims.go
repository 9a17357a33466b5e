package kernels

import "unsafe"

// Low-level primitives: each dispatches to the AVX2 assembly for the
// multiple-of-8 body when available and finishes the tail in Go.

const (
	mr    = 6  // micro-tile rows
	nrMax = 32 // widest micro-tile (AVX-512); AVX2 and pure Go use 16
)

// tileN is the micro-tile width the GEMM packs B for: 32 with AVX-512,
// else 16.
func tileN() int {
	if haveAVX512 && haveAVX2 {
		return 32
	}
	return 16
}

// microKernel computes C[0:6,0:nr] += alpha * A·B over kc steps (= with
// set), where A[r][p] = ap[p*as + r*ar] and step p's B row is
// bp[p*bs : p*bs+nr]: packed panels have as = 6, ar = 1 and bs = nr; the
// GEMM passes operands in place (other strides: op(A) = Aᵀ with as = lda,
// ar = 1; a row-major A with as = 1, ar = lda; B with bs = ldb) only to
// the AVX-512 kernels (stridedKernel); the others fall back to plain Go.
func microKernel(kc, nr int, ap []float32, as, ar int, bp []float32, bs int, c []float32, ldc int, alpha float32, set bool) {
	_ = ap[as*(kc-1)+ar*(mr-1)]
	_ = bp[bs*(kc-1)+nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	if nr == 32 && haveAVX512 && haveAVX2 {
		if ar == 1 {
			sgemmKernel6x32(kc, &ap[0], as, &bp[0], bs, &c[0], ldc, alpha, set)
			return
		}
		if as == 1 {
			sgemmKernel6x32r(kc, &ap[0], ar, &bp[0], bs, &c[0], ldc, alpha, set)
			return
		}
	}
	if nr == 16 && haveAVX2 && as == mr && ar == 1 && bs == nr {
		sgemmKernel6x16(kc, &ap[0], &bp[0], &c[0], ldc, alpha, set)
		return
	}
	if set {
		for r := range mr {
			clear(c[r*ldc : r*ldc+nr])
		}
	}
	switch {
	case as != mr || ar != 1 || bs != nr:
		for r := range mr {
			crow := c[r*ldc : r*ldc+nr]
			for p := range kc {
				av := alpha * ap[p*as+r*ar]
				for j, bv := range bp[p*bs : p*bs+nr] {
					crow[j] += av * bv
				}
			}
		}
	default:
		microKernelGo(kc, nr, ap, bp, c, ldc, alpha)
	}
}

// stridedKernel reports whether the micro-kernel in use reads operands in
// place (the AVX-512 one).
func stridedKernel() bool { return tileN() == 32 }

// microKernelGo is the portable micro-kernel: 6x4 register blocks (24
// scalar accumulators, which arm64 keeps in registers) swept across the nr
// columns of the tile.
func microKernelGo(kc, nr int, ap, bp, c []float32, ldc int, alpha float32) {
	ap = ap[:mr*kc]
	bp = bp[:nr*kc]
	_ = c[(mr-1)*ldc+nr-1]
	for j0 := 0; j0 < nr; j0 += 4 {
		var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53 float32
		for p := 0; p < kc; p++ {
			a := (*[mr]float32)(ap[p*mr : p*mr+mr])
			b := (*[4]float32)(bp[p*nr+j0 : p*nr+j0+4])
			b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
			a0 := a[0]
			c00, c01, c02, c03 = c00+a0*b0, c01+a0*b1, c02+a0*b2, c03+a0*b3
			a1 := a[1]
			c10, c11, c12, c13 = c10+a1*b0, c11+a1*b1, c12+a1*b2, c13+a1*b3
			a2 := a[2]
			c20, c21, c22, c23 = c20+a2*b0, c21+a2*b1, c22+a2*b2, c23+a2*b3
			a3 := a[3]
			c30, c31, c32, c33 = c30+a3*b0, c31+a3*b1, c32+a3*b2, c33+a3*b3
			a4 := a[4]
			c40, c41, c42, c43 = c40+a4*b0, c41+a4*b1, c42+a4*b2, c43+a4*b3
			a5 := a[5]
			c50, c51, c52, c53 = c50+a5*b0, c51+a5*b1, c52+a5*b2, c53+a5*b3
		}
		cr0 := (*[4]float32)(c[0*ldc+j0 : 0*ldc+j0+4])
		cr0[0] += alpha * c00
		cr0[1] += alpha * c01
		cr0[2] += alpha * c02
		cr0[3] += alpha * c03
		cr1 := (*[4]float32)(c[1*ldc+j0 : 1*ldc+j0+4])
		cr1[0] += alpha * c10
		cr1[1] += alpha * c11
		cr1[2] += alpha * c12
		cr1[3] += alpha * c13
		cr2 := (*[4]float32)(c[2*ldc+j0 : 2*ldc+j0+4])
		cr2[0] += alpha * c20
		cr2[1] += alpha * c21
		cr2[2] += alpha * c22
		cr2[3] += alpha * c23
		cr3 := (*[4]float32)(c[3*ldc+j0 : 3*ldc+j0+4])
		cr3[0] += alpha * c30
		cr3[1] += alpha * c31
		cr3[2] += alpha * c32
		cr3[3] += alpha * c33
		cr4 := (*[4]float32)(c[4*ldc+j0 : 4*ldc+j0+4])
		cr4[0] += alpha * c40
		cr4[1] += alpha * c41
		cr4[2] += alpha * c42
		cr4[3] += alpha * c43
		cr5 := (*[4]float32)(c[5*ldc+j0 : 5*ldc+j0+4])
		cr5[0] += alpha * c50
		cr5[1] += alpha * c51
		cr5[2] += alpha * c52
		cr5[3] += alpha * c53
	}
}

func dotImpl(x, y []float32) float32 {
	n := len(x)
	y = y[:n]
	var s float32
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		s = dotAVX(i, &x[0], &y[0])
	}
	for ; i < n; i++ {
		s += x[i] * y[i]
	}
	return s
}

func axpyImpl(alpha float32, x, y []float32) {
	n := len(x)
	y = y[:n]
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		axpyAVX(i, alpha, &x[0], &y[0])
	}
	for ; i < n; i++ {
		y[i] += alpha * x[i]
	}
}

// dot4Impl returns the dots of x with the four rows w[r*ldw : r*ldw+len(x)].
func dot4Impl(x, w []float32, ldw int) [4]float32 { return dot4Ordered(x, w, ldw, false, 0) }

// dot4Ordered is dot4Impl reading the four rows one at a time (the AVX2
// kernel dot4R, prefetching pf bytes ahead) when rows: the same result,
// another access order (order.go).
func dot4Ordered(x, w []float32, ldw int, rows bool, pf int) [4]float32 {
	n := len(x)
	_ = w[3*ldw+n-1]
	var out [4]float32
	i := 0
	switch {
	case haveAVX2 && n >= 8 && rows:
		i = n &^ 7
		dot4R(i, &x[0], &w[0], ldw, &out, pf)
	case haveAVX2 && n >= 8:
		i = n &^ 7
		dot4(i, &x[0], &w[0], ldw, &out)
	}
	for ; i < n; i++ {
		xv := x[i]
		out[0] += xv * w[i]
		out[1] += xv * w[ldw+i]
		out[2] += xv * w[2*ldw+i]
		out[3] += xv * w[3*ldw+i]
	}
	return out
}

// dot4Rows stores in out[4i+r] the dots of the rows i < m of a (stride
// lda, length n) with the four rows w[r*ldw : r*ldw+n]: for each row what
// dot4Impl returns, bit for bit, in one kernel call for all of them (the
// AVX2 kernel dot4M). Meanwhile it prefetches the pfn bytes at pf (the
// weights the caller reads next; pfn 0: none), which changes no result.
func dot4Rows(m, n int, a []float32, lda int, w []float32, ldw int, out []float32, pf unsafe.Pointer, pfn int) {
	_ = a[(m-1)*lda+n-1]
	_ = w[3*ldw+n-1]
	_ = out[4*m-1]
	if !haveAVX2 || n < 8 {
		for i := range m {
			d := dot4Impl(a[i*lda:i*lda+n], w, ldw)
			copy(out[4*i:], d[:])
		}
		return
	}
	n8 := n &^ 7
	dot4M(n8, &a[0], lda, m, &w[0], ldw, &out[0], pf, pfn)
	for i := range m {
		o := out[4*i : 4*i+4]
		for p := n8; p < n; p++ { // dot4Ordered's tail, in its order
			xv := a[i*lda+p]
			o[0] += xv * w[p]
			o[1] += xv * w[ldw+p]
			o[2] += xv * w[2*ldw+p]
			o[3] += xv * w[3*ldw+p]
		}
	}
}

// axpy4Impl does y[i] += sum_r a[r]*w[r*ldw+i] for i < len(y).
func axpy4Impl(a *[4]float32, w []float32, ldw int, y []float32) {
	n := len(y)
	_ = w[3*ldw+n-1]
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		axpy4(i, a, &w[0], ldw, &y[0])
	}
	for ; i < n; i++ {
		y[i] += a[0]*w[i] + a[1]*w[ldw+i] + a[2]*w[2*ldw+i] + a[3]*w[3*ldw+i]
	}
}

func scaleImpl(alpha float32, x []float32) {
	n := len(x)
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		scaleAVX(i, alpha, &x[0])
	}
	for ; i < n; i++ {
		x[i] *= alpha
	}
}

func addImpl(dst, x []float32) {
	n := len(dst)
	x = x[:n]
	i := 0
	if haveAVX2 && n >= 8 {
		i = n &^ 7
		addAVX(i, &dst[0], &x[0])
	}
	for ; i < n; i++ {
		dst[i] += x[i]
	}
}

func sumImpl(x []float32) float32 {
	n := len(x)
	var s float32
	i := 0
	if haveAVX2 && n >= 32 {
		i = n &^ 31
		s = sumAVX(i, &x[0])
	}
	for ; i < n; i++ {
		s += x[i]
	}
	return s
}
