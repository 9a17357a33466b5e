//go:build amd64 && !noasm

package kernels

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"flywheel/internal/safetensors"
)

// haveVNNI reports whether the integer decode kernels of the four-row
// layouts (quantvnni_amd64.s: AVX-512 VNNI, BW and VL) may run; they are
// used only together with haveAVX512. FLYWHEEL_VNNI=0 keeps the float
// kernels (for comparisons).
var haveVNNI = cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && os.Getenv("FLYWHEEL_VNNI") != "0"

// haveIntY reports whether AVX2 machines decode the four-row layouts of
// Q4_1, Q4_0, Q5_0, Q5_1 and the K-quants with their integer kernels
// (quantavx2_amd64.s, qdot*YV: VPMADDUBSW, which every AVX2 CPU has);
// tests clear it to run the fallback, which dequantises four rows at a
// time.
var haveIntY = true

// haveVNNIY reports whether those integer kernels use AVX-VNNI's
// VPDPBUSD (VEX-encoded: Intel's client cores since 2021, AMD's since
// Zen 5; qdot*YN) in place of VPMADDUBSW and VPMADDWD. FLYWHEEL_VNNI=0
// turns it off as it does AVX-512 VNNI.
var haveVNNIY = cpu.X86.HasAVXVNNI && os.Getenv("FLYWHEEL_VNNI") != "0"

//go:noescape
func limbsPrepY(nb int, x *float32, limbs *byte, sc *float32)

//go:noescape
func qdotQ41YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ40YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ50YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ51YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ4KYV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ5KYV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ4KYN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ5KYN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func dequantQ4KYX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ5KYX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func qdotQ41YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ40YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ50YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ51YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ41Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)

//go:noescape
func qdotQ40Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)

//go:noescape
func qdotQ4KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)

//go:noescape
func qdotQ5KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)

//go:noescape
func qdotQ6KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)

//go:noescape
func qdotQ80Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)

//go:noescape
func qdotQ41R(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ40R(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ4KR(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ5KR(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ6KR(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ80R(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func dequantQ41Z(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantQ40Z(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantQ80Z(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantQ4KZ(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantQ5KZ(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantQ6KZ(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func qdotQ41X(nb int, x *float32, w *byte, groups int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ40X(nb int, x *float32, w *byte, groups int, out *float32, tab *float32, pf int)

//go:noescape
func limbsPrep(nb int, x *float32, limbs *byte, sc *float32, corr int)

//go:noescape
func qdotQ41V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ50V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ4KV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ5KV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ6KV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ51V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ40V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func qdotQ80V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func dequantQ80X(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ50X(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ51X(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ4KX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ5KX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ6KX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ41X(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ80Y(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func qdotQ80Y(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ50Y(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ51Y(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func dequantQ50YX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ51YX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func qdotQ4KY(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ5KY(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func qdotQ6KYV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)

//go:noescape
func dequantQ6KYX(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func qdotQ6KY(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

//go:noescape
func dequantQ50Y(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantK4Y(qs *byte, qh *byte, sc *float32, dst *float32)

//go:noescape
func dequantK5Y(qs *byte, qh *byte, sc *float32, dst *float32)

//go:noescape
func dequantK6Y(qs *byte, qh *byte, sc *float32, dst *float32)

//go:noescape
func dequantQ51Y(nb int, dst *float32, src *byte, tab *float32)

//go:noescape
func dequantQ41Y(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ40Y(nb int, dst *float32, ldd int, src *byte, tab *float32)

//go:noescape
func dequantQ40X(nb int, dst *float32, ldd int, src *byte, tab *float32)

// dequantRowAsm dequantises the whole blocks of src into dst with the
// AVX-512 kernels, or on AVX2 machines the AVX2 ones (bit-identical to
// dequantBlock), and reports whether it did: false for formats without
// one here.
func dequantRowAsm(t QuantType, dst []float32, src []byte) bool {
	if !haveF16C || len(dst) == 0 {
		return false
	}
	f := (func(nb int, dst *float32, src *byte, tab *float32))(nil)
	switch {
	case haveAVX512 && int(t) < len(dequantAsm) && dequantAsm[t] != nil:
		f = dequantAsm[t]
	case t == Q8_0: // AVX2 (haveF16C implies it)
		f = dequantQ80Y
	case t == Q5_0: // and with AVX-512 too: Q5 has no AVX-512 row kernel
		f = dequantQ50Y
	case t == Q5_1:
		f = dequantQ51Y
	case t == Q4_K || t == Q5_K || t == Q6_K: // AVX2
		dequantKY(t, dst, src)
		return true
	}
	if f == nil {
		return false
	}
	f(len(dst)/t.BlockElems(), &dst[0], &src[0], &f16Table()[0])
	return true
}

// dequantKY dequantises K-quant rows on AVX2: each super-block's scale
// products in Go (16 a super-block, as dequantBlock computes them), its
// values in assembly (dequantK?Y).
func dequantKY(t QuantType, dst []float32, src []byte) {
	bb := t.BlockBytes()
	var sc [16]float32
	for b := range len(dst) / qk {
		x, y := src[b*bb:(b+1)*bb], dst[b*qk:(b+1)*qk]
		if t == Q6_K {
			d := f16(x[208:])
			for g := range 16 {
				sc[g] = d * float32(int8(x[192+g]))
			}
			dequantK6Y(&x[0], &x[128], &sc[0], &y[0])
			continue
		}
		d, dmin := f16(x), f16(x[2:])
		for k := range 8 {
			s, m := scaleMinK4(k, x[4:16])
			sc[k], sc[8+k] = d*float32(s), dmin*float32(m)
		}
		if t == Q4_K {
			dequantK4Y(&x[16], &x[16], &sc[0], &y[0])
		} else {
			dequantK5Y(&x[48], &x[16], &sc[0], &y[0])
		}
	}
}

// dequantAsm is each format's row kernel.
var dequantAsm = [...]func(nb int, dst *float32, src *byte, tab *float32){
	Q4_1: dequantQ41Z, Q4_0: dequantQ40Z, Q8_0: dequantQ80Z,
	Q4_K: dequantQ4KZ, Q5_K: dequantQ5KZ, Q6_K: dequantQ6KZ,
}

// asmQdot is a row-layout decode kernel: the row-order ones prefetch pf
// bytes ahead.
type asmQdot func(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)

// lockstep is a lockstep kernel as asmQdot: its prefetch distances are
// fixed per format, so it ignores pf.
func lockstep(f func(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)) asmQdot {
	return func(nb int, x, xs *float32, w *byte, ldw, rows int, out, tab *float32, _ int) {
		f(nb, x, xs, w, ldw, rows, out, tab)
	}
}

// scaledSums is a prep of sums of x: dst[s] = scale × the sum of x over
// its s-th run of n values.
func scaledSums(n int, scale float32) func(dst, x []float32) {
	return func(dst, x []float32) {
		for s := range len(x) / n {
			dst[s] = scale * sumImpl(x[n*s:n*s+n])
		}
	}
}

var (
	// subSums: per 32-value block (of a K-quant super-block: its
	// sub-blocks, which carry the mins) the sum of x.
	subSums = scaledSums(32, 1)
	// q6Sums: −32 × the sum of x over each 16-value group (the offset of
	// Q6_K's six-bit values).
	q6Sums = scaledSums(16, -32)
	// q50Sums: −16 × the sum of x over each 32-value block (the offset of
	// Q5_0's five-bit values, for its AVX2 kernel).
	q50Sums = scaledSums(32, -16)
)

// asmDots wraps an assembly kernel for blocks of elems values with
// prepLen prep values per block as quantDots.dots, checking the bounds
// the assembly relies on.
func asmDots(f asmQdot, elems, prepLen int) func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int) {
	return func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int) {
		rows := len(out)
		if rows == 0 {
			return
		}
		if rows%4 != 0 || nb == 0 || ldw != len(w)/rows {
			panic("kernels: quantized dots: rows not a multiple of 4 or not back to back")
		}
		_ = x[elems*nb-1]
		_ = w[rows*ldw-1]
		var xs *float32
		if prepLen > 0 {
			_ = prep[prepLen*nb-1]
			xs = &prep[0]
		}
		f(nb, &x[0], xs, &w[0], ldw, rows, &out[0], &f16Table()[0], pf)
	}
}

// repackedDots wraps the decode kernel of a four-row layout (blocks of
// size bytes) as quantDots.dots, checking the bounds the assembly relies
// on.
func repackedDots(f func(nb int, x *float32, w *byte, groups int, out *float32, tab *float32, pf int), size int) func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int) {
	return func(nb int, x, _ []float32, w []byte, ldw int, out []float32, pf int) {
		if g := groupsOf(out, nb, size, w, ldw); g > 0 {
			_ = x[32*nb-1]
			f(nb, &x[0], &w[0], g, &out[0], &f16Table()[0], pf)
		}
	}
}

// groupsOf is how many groups of four rows of a four-row layout a
// product writes to out, checking that w holds exactly them: rows of nb
// blocks of size bytes, ldw bytes each.
func groupsOf(out []float32, nb, size int, w []byte, ldw int) int {
	rows := len(out)
	if rows > 0 && (rows%4 != 0 || nb == 0 || ldw != nb*size || len(w) != rows*ldw) {
		panic("kernels: repacked quantized dots: not whole groups of four rows")
	}
	return rows / 4
}

// The integer kernels' prep per 32-value block of x: 384 bytes of limbs
// (three signed bytes per value, each 16 values' replicated over a
// vector's four lanes; Q8_0x4's 512, with its offset corrections) and the
// floats s, Σx four times over; then one float, the power of two x was
// scaled by (quantvnni_amd64.s).
const (
	limbFloats  = 384 / 4
	limb8Floats = 512 / 4
)

// limbSplit is the prep p of nb blocks as the integer kernels read it
// (lf floats of limbs a block): the limbs from p's first 64-byte
// boundary, the scales after them (and 2^e after those).
func limbSplit(p []float32, nb, lf int) (limbs *byte, sc *float32) {
	off := int(-uintptr(unsafe.Pointer(&p[0]))%64) / 4
	_ = p[off+(lf+8)*nb] // and 2^e after the scales
	return (*byte)(unsafe.Pointer(&p[off])), &p[off+lf*nb]
}

// vnniPrep is the nibble formats' integer kernels' prep: x's limbs and
// scales.
func vnniPrep(dst, x []float32) {
	nb := len(x) / 32
	l, sc := limbSplit(dst, nb, limbFloats)
	limbsPrep(nb, &x[0], l, sc, 0)
}

// vnniPrepY is vnniPrep on AVX2 machines (limbsPrepY: the same layout).
func vnniPrepY(dst, x []float32) {
	nb := len(x) / 32
	l, sc := limbSplit(dst, nb, limbFloats)
	limbsPrepY(nb, &x[0], l, sc)
}

// q6vPrep is Q6_Kx4's prep: vnniPrep's, with each block's sum of x
// (scaled as the limbs) replaced by the sums of its two 16-value halves
// (at sc + 8b + 1 and + 2), Q6_K's scale groups.
func q6vPrep(dst, x []float32) {
	vnniPrep(dst, x)
	q6HalfSums(dst, x)
}

// q6vPrepY is q6vPrep on AVX2 machines (vnniPrepY's limbs).
func q6vPrepY(dst, x []float32) {
	vnniPrepY(dst, x)
	q6HalfSums(dst, x)
}

// q6HalfSums writes the half sums of q6vPrep into the prep dst of x.
func q6HalfSums(dst, x []float32) {
	nb := len(x) / 32
	_, scp := limbSplit(dst, nb, limbFloats)
	sc := unsafe.Slice(scp, 8*nb+1)
	inv := 1 / sc[8*nb] // 2^-e, exact
	for b := range nb {
		for h := range 2 {
			var s float32
			for _, v := range x[32*b+16*h : 32*b+16*h+16] {
				s += v
			}
			sc[8*b+1+h] = s * inv
		}
	}
}

// vnni8Prep is Q8_0x4's prep: x's limbs with the offset corrections, and
// scales.
func vnni8Prep(dst, x []float32) {
	nb := len(x) / 32
	l, sc := limbSplit(dst, nb, limb8Floats)
	limbsPrep(nb, &x[0], l, sc, 1)
}

// vnniDots wraps an integer kernel of a four-row layout (blocks of size
// bytes, lf floats of limbs a block in the prep) as quantDots.dots,
// checking the bounds the assembly relies on.
func vnniDots(f func(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int), size, lf int) func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int) {
	return func(nb int, _, prep []float32, w []byte, ldw int, out []float32, pf int) {
		if g := groupsOf(out, nb, size, w, ldw); g > 0 {
			l, sc := limbSplit(prep, nb, lf)
			f(nb, l, sc, &w[0], g, &out[0], pf)
		}
	}
}

// limbKernel is the integer kernel f of a four-row layout (blocks of size
// bytes, lf floats of limbs a block in the prep) as quantDots: one access
// order, at most maxM rows of A (0: any).
func limbKernel(prep func(dst, x []float32), f func(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int), size, lf, maxM int) *quantDots {
	d := vnniDots(f, size, lf)
	return &quantDots{prepLen: lf + 8, prepPad: 16, prep: prep, dots: d, rowDots: d, maxM: maxM}
}

// limbKKernel is the integer kernel f of a K-quant four-row layout (size
// bytes a row's super-block) as quantDots, as limbKernel.
func limbKKernel(prep func(dst, x []float32), f func(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int), size, maxM int) *quantDots {
	d := vnniKDots(f, size)
	return &quantDots{prepLen: 8 * (limbFloats + 8), prepPad: 16, prep: prep, dots: d, rowDots: d, maxM: maxM}
}

// vnniKDots wraps a K-quant four-row layout's integer kernel (blocks of
// size bytes a row) as quantDots.dots: nb super-blocks, eight 32-value
// blocks of x's prep each.
func vnniKDots(f func(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int), size int) func(nb int, x, prep []float32, w []byte, ldw int, out []float32, pf int) {
	return func(nb int, _, prep []float32, w []byte, ldw int, out []float32, pf int) {
		if g := groupsOf(out, nb, size, w, ldw); g > 0 {
			l, sc := limbSplit(prep, 8*nb, limbFloats)
			f(8*nb, l, sc, &w[0], g, &out[0], pf)
		}
	}
}

// vnniRepacks reports whether Q8_0 and the K-quants' matrices are held
// in their four-row layouts (QuantType.RepackPays): where their integer
// kernels (qdotQ80V, qdotQ?KV) run.
func vnniRepacks() bool { return haveAVX512 && haveF16C && haveVNNI }

// kRepacks reports whether the K-quants' matrices are held in their
// four-row layouts (QuantType.RepackPays): where their integer kernels
// run, AVX-512 VNNI's (qdotQ?KV) or AVX2's (qdotQ?KY?).
func kRepacks() bool { return vnniRepacks() || (haveF16C && !haveAVX512 && haveIntY) }

// q5Repacks reports whether Q5_0 and Q5_1 matrices are held in their
// four-row layouts (QuantType.RepackPays): where their decode kernels and
// group dequantisers run (AVX-512, or AVX2's).
func q5Repacks() bool { return haveF16C }

var (
	q41vKernel = limbKernel(vnniPrep, qdotQ41V, 20, limbFloats, 0)
	q40vKernel = limbKernel(vnniPrep, qdotQ40V, 18, limbFloats, 0)
	q80vKernel = limbKernel(vnni8Prep, qdotQ80V, 34, limb8Floats, 0)
	q50vKernel = limbKernel(vnniPrep, qdotQ50V, 22, limbFloats, 0)
	q51vKernel = limbKernel(vnniPrep, qdotQ51V, 24, limbFloats, 0)
	q4KvKernel = limbKKernel(vnniPrep, qdotQ4KV, 144, 0)
	q5KvKernel = limbKKernel(vnniPrep, qdotQ5KV, 176, 0)
	q6KvKernel = limbKKernel(q6vPrep, qdotQ6KV, 210, 0)
	q41xKernel = &quantDots{dots: repackedDots(qdotQ41X, 20), rowDots: repackedDots(qdotQ41X, 20)}
	q40xKernel = &quantDots{dots: repackedDots(qdotQ40X, 18), rowDots: repackedDots(qdotQ40X, 18)}
	q41Kernel  = &quantDots{dots: asmDots(lockstep(qdotQ41Z), 32, 0), rowDots: asmDots(qdotQ41R, 32, 0)}
	q40Kernel  = &quantDots{dots: asmDots(lockstep(qdotQ40Z), 32, 0), rowDots: asmDots(qdotQ40R, 32, 0)}
	q80Kernel  = &quantDots{dots: asmDots(lockstep(qdotQ80Z), 32, 0), rowDots: asmDots(qdotQ80R, 32, 0)}
	q4KKernel  = &quantDots{prepLen: 8, prep: subSums, dots: asmDots(lockstep(qdotQ4KZ), qk, 8), rowDots: asmDots(qdotQ4KR, qk, 8)}
	q5KKernel  = &quantDots{prepLen: 8, prep: subSums, dots: asmDots(lockstep(qdotQ5KZ), qk, 8), rowDots: asmDots(qdotQ5KR, qk, 8)}
	q6KKernel  = &quantDots{prepLen: 16, prep: q6Sums, dots: asmDots(lockstep(qdotQ6KZ), qk, 16), rowDots: asmDots(qdotQ6KR, qk, 16)}

	// AVX2 (quantavx2_amd64.s): one access order each. The integer
	// kernels' prep is x's limbs (limbsPrepY), the float ones' Σx per
	// 32-value block where the format has a min or an offset. Beyond maxM
	// rows of A, dequantising four rows once for all of them (one
	// dot4Rows call) is faster: the float kernels from 2 rows; on a Zen 3
	// the integer kernels' CPU speed over that path at their maxM, from L2
	// / memory, Q4_Kx4 (4) 1.18 / 1.05, Q5_0x4 (4) 1.12 / 1.03, Q5_Kx4 (3)
	// 1.08 / 1.10, Q6_Kx4 (3) 1.02 / 1.19, and the Q4 layouts' ahead up
	// to 16 rows (1.05–1.09 there); the Q5 layouts crossed earlier on an
	// older EPYC, so the values sit at or below these crossings
	// (docs/benchmarks/zen3-avx2-2026-11-28.md). Constants, not a
	// start-up measurement as the access order is: the kernels and the
	// dequantising path differ in their last bits (summation order), so a
	// measured switch would make results depend on the timing of the
	// process.
	q41yvKernel = limbKernel(vnniPrepY, qdotQ41YV, 20, limbFloats, 0)
	q40yvKernel = limbKernel(vnniPrepY, qdotQ40YV, 18, limbFloats, 0)
	q50yvKernel = limbKernel(vnniPrepY, qdotQ50YV, 22, limbFloats, 4)
	q51yvKernel = limbKernel(vnniPrepY, qdotQ51YV, 24, limbFloats, 4)
	q41ynKernel = limbKernel(vnniPrepY, qdotQ41YN, 20, limbFloats, 0)
	q40ynKernel = limbKernel(vnniPrepY, qdotQ40YN, 18, limbFloats, 0)
	q50ynKernel = limbKernel(vnniPrepY, qdotQ50YN, 22, limbFloats, 4)
	q51ynKernel = limbKernel(vnniPrepY, qdotQ51YN, 24, limbFloats, 4)
	q4KyvKernel = limbKKernel(vnniPrepY, qdotQ4KYV, 144, 4)
	q5KyvKernel = limbKKernel(vnniPrepY, qdotQ5KYV, 176, 3)
	q4KynKernel = limbKKernel(vnniPrepY, qdotQ4KYN, 144, 4)
	q5KynKernel = limbKKernel(vnniPrepY, qdotQ5KYN, 176, 3)
	q6KyvKernel = limbKKernel(q6vPrepY, qdotQ6KYV, 210, 3)
	q80yKernel  = &quantDots{dots: asmDots(qdotQ80Y, 32, 0), rowDots: asmDots(qdotQ80Y, 32, 0), maxM: 1}
	q50yKernel  = &quantDots{prepLen: 1, prep: q50Sums, dots: asmDots(qdotQ50Y, 32, 1), rowDots: asmDots(qdotQ50Y, 32, 1), maxM: 1}
	q51yKernel  = &quantDots{prepLen: 1, prep: subSums, dots: asmDots(qdotQ51Y, 32, 1), rowDots: asmDots(qdotQ51Y, 32, 1), maxM: 1}
	q4KyKernel  = &quantDots{prepLen: 8, prep: subSums, dots: asmDots(qdotQ4KY, qk, 8), rowDots: asmDots(qdotQ4KY, qk, 8), maxM: 1}
	q5KyKernel  = &quantDots{prepLen: 8, prep: subSums, dots: asmDots(qdotQ5KY, qk, 8), rowDots: asmDots(qdotQ5KY, qk, 8), maxM: 1}
	q6KyKernel  = &quantDots{prepLen: 16, prep: q6Sums, dots: asmDots(qdotQ6KY, qk, 16), rowDots: asmDots(qdotQ6KY, qk, 16), maxM: 1}
)

// quantKernelY is t's AVX2 decode kernel (machines without AVX-512, and
// Q5's four-row layouts where AVX-512 runs without VNNI), nil when there
// is none: the four-row layouts of Q4_1, Q4_0, Q5_0, Q5_1 and the
// K-quants (integer kernels: AVX-VNNI's VPDPBUSD where the CPU has it,
// else VPMADDUBSW; Q6_Kx4 VPMADDUBSW's on both), the rows of Q8_0, Q5_0,
// Q5_1 and the K-quants (float kernels; the K-quants' where tests turn
// the integer kernels off). Where
// AVX-512 runs without VNNI, Q4's layouts keep their AVX-512 float
// kernels (EPYC, VNNI off: 53–61 GB/s from L2 against these 43), Q5's
// take these (29 against the AVX2 float kernels' 20, since removed).
func quantKernelY(t QuantType) *quantDots {
	switch t {
	case Q4_1x4:
		return intKernelY(q41ynKernel, q41yvKernel)
	case Q4_0x4:
		return intKernelY(q40ynKernel, q40yvKernel)
	case Q8_0:
		return q80yKernel
	case Q5_0:
		return q50yKernel
	case Q5_1:
		return q51yKernel
	case Q5_0x4:
		return intKernelY(q50ynKernel, q50yvKernel)
	case Q5_1x4:
		return intKernelY(q51ynKernel, q51yvKernel)
	case Q4_Kx4:
		return intKernelY(q4KynKernel, q4KyvKernel)
	case Q5_Kx4:
		return intKernelY(q5KynKernel, q5KyvKernel)
	case Q6_Kx4:
		return intKernelY(q6KyvKernel, q6KyvKernel) // VPMADDUBSW's with AVX-VNNI too
	case Q4_K:
		return q4KyKernel
	case Q5_K:
		return q5KyKernel
	case Q6_K:
		return q6KyKernel
	}
	return nil
}

// intKernelY is an AVX2 integer kernel: yn (AVX-VNNI) where the CPU has
// AVX-VNNI, else yv; none when the tests turn them off.
func intKernelY(yn, yv *quantDots) *quantDots {
	switch {
	case !haveIntY:
		return nil
	case haveVNNIY:
		return yn
	}
	return yv
}

// quantKernel is t's decode kernel (AVX-512, or without it AVX2's), nil
// when there is none for t: the caller then dequantises rows into a
// buffer.
func quantKernel(t QuantType) *quantDots {
	if t == QNone || !haveF16C {
		return nil
	}
	if !haveAVX512 {
		return quantKernelY(t)
	}
	switch t {
	case Q4_1:
		return q41Kernel
	case Q4_0:
		return q40Kernel
	case Q4_1x4:
		if haveVNNI {
			return q41vKernel
		}
		return q41xKernel
	case Q4_0x4:
		if haveVNNI {
			return q40vKernel
		}
		return q40xKernel
	case Q8_0x4:
		if haveVNNI {
			return q80vKernel
		}
		return nil // no float kernel of the layout: RepackPays keeps Q8_0 plain there
	case Q5_0x4:
		if haveVNNI {
			return q50vKernel
		}
		return quantKernelY(t) // the AVX2 one (up to its maxM rows of A; more dequantise four rows at a time)
	case Q5_1x4:
		if haveVNNI {
			return q51vKernel
		}
		return quantKernelY(t)
	case Q4_Kx4:
		if haveVNNI {
			return q4KvKernel
		}
		return nil
	case Q6_Kx4:
		if haveVNNI {
			return q6KvKernel
		}
		return nil
	case Q5_Kx4:
		if haveVNNI {
			return q5KvKernel
		}
		return nil
	case Q8_0:
		return q80Kernel
	case Q4_K:
		return q4KKernel
	case Q5_K:
		return q5KKernel
	case Q6_K:
		return q6KKernel
	}
	return nil
}

// f16Table is every IEEE half's float32 value, indexed by its bits
// (256 KiB, built on first use): the decode kernels widen a block's scale
// with one load from it. A model's scales take few distinct values, so
// the lines in use stay in cache.
var f16Table = sync.OnceValue(func() []float32 {
	t := make([]float32, 1<<16)
	for i := range t {
		t[i] = safetensors.F16ToF32(uint16(i))
	}
	return t
})

// dequantGroupAsm dequantises a repacked group of four rows with the
// AVX-512 kernels, or on AVX2 machines (Q4_1x4, Q4_0x4, Q5_0x4, Q5_1x4
// and the K-quants') the AVX2 ones, and reports whether it did.
func dequantGroupAsm(t QuantType, dst []float32, cols int, src []byte) bool {
	if !haveF16C || int(t) >= len(groupDequantZ) {
		return false
	}
	f := groupDequantZ[t]
	if !haveAVX512 { // AVX2 (haveF16C implies it): the layouts held there
		switch f = nil; t {
		case Q4_1x4:
			f = dequantQ41Y
		case Q4_0x4:
			f = dequantQ40Y
		case Q5_0x4:
			f = dequantQ50YX
		case Q5_1x4:
			f = dequantQ51YX
		case Q4_Kx4:
			f = dequantQ4KYX
		case Q5_Kx4:
			f = dequantQ5KYX
		case Q6_Kx4:
			f = dequantQ6KYX
		}
	}
	if f == nil {
		return false
	}
	f(cols/32, &dst[0], 4*cols, &src[0], &f16Table()[0])
	return true
}

// groupDequantZ is each four-row layout's AVX-512 group dequantiser.
var groupDequantZ = [...]func(nb int, dst *float32, ldd int, src *byte, tab *float32){
	Q4_1x4: dequantQ41X, Q4_0x4: dequantQ40X, Q8_0x4: dequantQ80X, Q5_0x4: dequantQ50X,
	Q5_1x4: dequantQ51X, Q4_Kx4: dequantQ4KX, Q5_Kx4: dequantQ5KX, Q6_Kx4: dequantQ6KX,
}
