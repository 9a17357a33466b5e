package kernels

import "fmt"

// AttendBlock is one block of a decode step's attention (split-K, as
// FlashDecoding): rep query heads q [rep, d] (contiguous, the heads sharing
// one kv head) against the n keys and values K, V (row p at p*rs, d values;
// a KV cache's rows). For each head h it writes the block's softmax state,
// unnormalised:
//
//	s_p = scale·q_h·K_p, m_h = max_p s_p, l_h = Σ_p exp(s_p − m_h),
//	o_h = Σ_p exp(s_p − m_h)·V_p                       (o [rep, d])
//
// to o and ml [rep, 2] (m_h, l_h). Blocks are merged with MergeBlocks. s is
// scratch of at least rep·n values. Per head it reads K and V once for all
// rep heads (the block's rows stay in L1 across heads). With AVX-512 the
// scores and the value sums are assembly loops (scores16Z sixteen keys at
// a time, scoresZ four for the keys left; axpyRowsZ, prefetching eight
// rows ahead); with AVX2 likewise, scoresY and axpyRowsY, whose sums are
// attendLoop's bit for bit, in one call a head; else attendLoop.
func AttendBlock(q []float32, rep, d int, K, V []float32, rs, n int, scale float32, o, ml, s []float32) {
	if rep <= 0 || n <= 0 || d <= 0 {
		panic(fmt.Sprintf("kernels: AttendBlock: rep %d, n %d, d %d", rep, n, d))
	}
	_ = q[rep*d-1]
	_ = K[(n-1)*rs+d-1]
	_ = V[(n-1)*rs+d-1]
	_, _, _ = o[rep*d-1], ml[2*rep-1], s[rep*n-1]
	if z := haveAVX512 && d%16 == 0; z || haveAVX2 && d%8 == 0 {
		n16, n4 := n&^15, n&^3
		if !z {
			n16 = 0
		}
		for h := range rep {
			qh, sh := q[h*d:(h+1)*d], s[h*n:(h+1)*n]
			if n16 > 0 {
				scores16Z(n16/16, d, &qh[0], &K[0], rs, &sh[0], scale)
			}
			switch {
			case n4 > n16 && z:
				scoresZ((n4-n16)/4, d, &qh[0], &K[n16*rs], rs, &sh[n16], scale)
			case n4 > 0 && !z:
				scoresY(n4/4, d, &qh[0], &K[0], rs, &sh[0], scale)
			}
			for p := n4; p < n; p++ {
				sh[p] = scale * dotImpl(qh, K[p*rs:p*rs+d])
			}
			m := maxOf(sh)
			ml[2*h], ml[2*h+1] = m, expSum(sh, m)
		}
		clear(o[:rep*d])
		for h := range rep {
			if z {
				axpyRowsZ(n, d, &s[h*n], &V[0], rs, &o[h*d])
			} else {
				axpyRowsY(n, d, &s[h*n], &V[0], rs, &o[h*d])
			}
		}
		return
	}
	attendLoop(q, rep, d, K, V, rs, n, scale, o, ml, s)
}

// attendLoop is AttendBlock four keys at a time through dot4Impl and
// axpy4Impl (with AVX2 the dot4 and axpy4 kernels): the path of head sizes
// that are not a multiple of 8, and of CPUs without AVX2.
func attendLoop(q []float32, rep, d int, K, V []float32, rs, n int, scale float32, o, ml, s []float32) {
	for h := range rep {
		qh := q[h*d : (h+1)*d]
		sh := s[h*n : (h+1)*n]
		p := 0
		for ; p+4 <= n; p += 4 {
			out := dot4Impl(qh, K[p*rs:], rs)
			sh[p], sh[p+1], sh[p+2], sh[p+3] = scale*out[0], scale*out[1], scale*out[2], scale*out[3]
		}
		for ; p < n; p++ {
			sh[p] = scale * dotImpl(qh, K[p*rs:p*rs+d])
		}
		m := maxOf(sh)
		ml[2*h], ml[2*h+1] = m, expSum(sh, m)
	}
	clear(o[:rep*d])
	p := 0
	for ; p+4 <= n; p += 4 {
		w := V[p*rs:]
		for h := range rep {
			a := [4]float32{s[h*n+p], s[h*n+p+1], s[h*n+p+2], s[h*n+p+3]}
			axpy4Impl(&a, w, rs, o[h*d:(h+1)*d])
		}
	}
	for ; p < n; p++ {
		for h := range rep {
			axpyImpl(s[h*n+p], V[p*rs:p*rs+d], o[h*d:(h+1)*d])
		}
	}
}

// MergeBlocks combines the states of nb blocks of one head written by
// AttendBlock (o of block b at o[b*ldo:], its m, l at ml[b*ldm:]) into the
// head's attention output out [d] = Σ_b e^{m_b−M}·o_b / Σ_b e^{m_b−M}·l_b,
// M = max_b m_b.
func MergeBlocks(nb, d int, o []float32, ldo int, ml []float32, ldm int, out []float32) {
	M := ml[0]
	for b := 1; b < nb; b++ {
		M = max(M, ml[b*ldm])
	}
	var l float32
	clear(out[:d])
	for b := range nb {
		w := Exp(ml[b*ldm] - M)
		l += w * ml[b*ldm+1]
		axpyImpl(w, o[b*ldo:b*ldo+d], out[:d])
	}
	scaleImpl(1/l, out[:d])
}
