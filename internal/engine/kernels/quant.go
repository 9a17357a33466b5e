package kernels

import (
	"fmt"
	"math"

	"flywheel/internal/safetensors"
)

// QuantType is a GGUF/ggml block-quantized format of weight rows: each
// block of BlockElems values is stored in BlockBytes bytes (scales and
// packed integers), exactly as ggml lays it out, so a GGUF tensor's bytes
// are used as they are.
type QuantType uint8

const (
	QNone QuantType = iota
	Q8_0            // ggml type 8:  32 values, f16 scale d + 32 int8
	Q4_0            // ggml type 2:  32 values, f16 d + 16 bytes of nibbles
	Q4_1            // ggml type 3:  32 values, f16 d, f16 m + 16 bytes
	Q4_K            // ggml type 12: 256 values (super-block)
	Q5_K            // ggml type 13
	Q6_K            // ggml type 14
	// Q4_1x4, Q4_0x4, Q8_0x4, Q5_0x4, Q5_1x4, Q4_Kx4, Q6_Kx4 and Q5_Kx4 are
	// Q4_1, ..., Q5_K matrices in the four-row layout of Repack4
	// (the same blocks, interleaved by groups of four rows), which the
	// AVX-512 decode kernels stream faster; no file stores them.
	Q4_1x4
	Q4_0x4
	Q8_0x4
	Q5_0   // ggml type 6:  32 values, f16 d, 4 bytes of fifth bits, 16 bytes of nibbles
	Q5_1   // ggml type 7:  32 values, f16 d, f16 m, 4 bytes of fifth bits, 16 bytes
	Q5_0x4 // (the numbers of the types above stay as they were)
	Q5_1x4
	Q4_Kx4
	Q6_Kx4
	Q5_Kx4
)

// qk is the super-block size of the K-quants (ggml's QK_K).
const qk = 256

var quantInfo = [...]struct {
	name          string
	ggml          uint32
	elems, nbytes int
}{
	QNone:  {"QNone", ^uint32(0), 0, 0},
	Q8_0:   {"Q8_0", 8, 32, 2 + 32},
	Q4_0:   {"Q4_0", 2, 32, 2 + 16},
	Q4_1:   {"Q4_1", 3, 32, 2 + 2 + 16},
	Q4_K:   {"Q4_K", 12, qk, 2 + 2 + 12 + qk/2},
	Q5_K:   {"Q5_K", 13, qk, 2 + 2 + 12 + qk/8 + qk/2},
	Q6_K:   {"Q6_K", 14, qk, qk/2 + qk/4 + qk/16 + 2},
	Q4_1x4: {"Q4_1x4", ^uint32(0), 32, 2 + 2 + 16},
	Q4_0x4: {"Q4_0x4", ^uint32(0), 32, 2 + 16},
	Q8_0x4: {"Q8_0x4", ^uint32(0), 32, 2 + 32},
	Q5_0:   {"Q5_0", 6, 32, 2 + 4 + 16},
	Q5_1:   {"Q5_1", 7, 32, 2 + 2 + 4 + 16},
	Q5_0x4: {"Q5_0x4", ^uint32(0), 32, 2 + 4 + 16},
	Q5_1x4: {"Q5_1x4", ^uint32(0), 32, 2 + 2 + 4 + 16},
	Q4_Kx4: {"Q4_Kx4", ^uint32(0), qk, 2 + 2 + 12 + qk/2},
	Q6_Kx4: {"Q6_Kx4", ^uint32(0), qk, qk/2 + qk/4 + qk/16 + 2},
	Q5_Kx4: {"Q5_Kx4", ^uint32(0), qk, 2 + 2 + 12 + qk/8 + qk/2},
}

// FileTypes is the block formats a GGUF file may hold that flywheel
// reads (not the four-row layouts), in the order of their declaration.
func FileTypes() []QuantType {
	var ts []QuantType
	for t := Q8_0; t.valid(); t++ {
		if !t.Repacked() {
			ts = append(ts, t)
		}
	}
	return ts
}

// valid reports whether t is one of the formats above (not QNone).
func (t QuantType) valid() bool { return t > QNone && int(t) < len(quantInfo) }

// String is ggml's name of the format ("Q4_1", ...).
func (t QuantType) String() string {
	if int(t) < len(quantInfo) {
		return quantInfo[t].name
	}
	return fmt.Sprintf("QuantType(%d)", uint8(t))
}

// GGML is t's ggml tensor type number, as GGUF files store it (the
// four-row layouts, which no file stores, have none: ^0).
func (t QuantType) GGML() uint32 {
	if !t.valid() {
		return ^uint32(0)
	}
	return quantInfo[t].ggml
}

// BlockElems is the number of values per block (32 or 256; 0 for QNone).
func (t QuantType) BlockElems() int {
	if !t.valid() {
		return 0
	}
	return quantInfo[t].elems
}

// BlockBytes is the bytes per block, as ggml stores it (0 for QNone).
func (t QuantType) BlockBytes() int {
	if !t.valid() {
		return 0
	}
	return quantInfo[t].nbytes
}

// Repacked reports whether t is a four-row layout (the …x4 types),
// whose rows come in groups of four and are read with the matrix's row
// length (DequantMat, DequantEmbedRow, the products), not one by one
// (DequantRow).
func (t QuantType) Repacked() bool { return t.valid() && quantInfo[t].ggml == ^uint32(0) }

// RepackedType is the four-row layout of t (Q4_1x4 for Q4_1, ..., Q6_Kx4
// for Q6_K), QNone for formats without one.
func (t QuantType) RepackedType() QuantType {
	switch t {
	case Q4_1:
		return Q4_1x4
	case Q4_0:
		return Q4_0x4
	case Q8_0:
		return Q8_0x4
	case Q5_0:
		return Q5_0x4
	case Q5_1:
		return Q5_1x4
	case Q4_K:
		return Q4_Kx4
	case Q6_K:
		return Q6_Kx4
	case Q5_K:
		return Q5_Kx4
	}
	return QNone
}

// RepackPays reports whether batch-1 decode streams t's matrices faster
// in its four-row layout than as plain rows on this machine: Q4_1 and
// Q4_0 always (their float kernels too gain from it); Q8_0 where its
// integer kernel runs (AVX-512 VNNI), the layout having no float kernel
// (its plain rows have one); the K-quants where theirs run (AVX-512
// VNNI, and AVX2's); Q5_0 and Q5_1 where AVX2 or AVX-512 runs (their
// AVX2 kernels, also used where AVX-512 runs without VNNI, stream the
// layout faster than the plain rows).
func (t QuantType) RepackPays() bool {
	switch t {
	case Q4_1, Q4_0:
		return true
	case Q8_0:
		return vnniRepacks()
	case Q4_K, Q5_K, Q6_K:
		return kRepacks()
	case Q5_0, Q5_1:
		return q5Repacks()
	}
	return false
}

// plain is the format of t's blocks: Q4_1 for Q4_1x4, ..., Q6_K for
// Q6_Kx4, t itself otherwise.
func (t QuantType) plain() QuantType {
	switch t {
	case Q4_1x4:
		return Q4_1
	case Q4_0x4:
		return Q4_0
	case Q8_0x4:
		return Q8_0
	case Q5_0x4:
		return Q5_0
	case Q5_1x4:
		return Q5_1
	case Q4_Kx4:
		return Q4_K
	case Q6_Kx4:
		return Q6_K
	case Q5_Kx4:
		return Q5_K
	}
	return t
}

// RowBytes is the bytes of n values (n a multiple of BlockElems).
func (t QuantType) RowBytes(n int) int { return n / t.BlockElems() * t.BlockBytes() }

// QuantTypeFromGGML maps a ggml tensor type number (as GGUF stores it) to
// its QuantType; ok is false for any type not listed above (including the
// float types F32/F16/BF16, which load as float Mats).
func QuantTypeFromGGML(ggmlType uint32) (QuantType, bool) {
	for t := Q8_0; t.valid(); t++ {
		if quantInfo[t].ggml == ggmlType && !t.Repacked() {
			return t, true
		}
	}
	return QNone, false
}

// f16 reads the little-endian IEEE half at b[0:2] as float32.
func f16(b []byte) float32 { return safetensors.F16ToF32(uint16(b[0]) | uint16(b[1])<<8) }

// putF16 stores f rounded to IEEE half (nearest even) at b[0:2].
func putF16(b []byte, f float32) {
	h := safetensors.F32ToF16(f)
	b[0], b[1] = byte(h), byte(h>>8)
}

// checkQuant panics unless src holds exactly the whole blocks of n values
// of a row format (not a four-row layout).
func checkQuant(op string, t QuantType, n, srcLen int) {
	if !t.valid() {
		panic(fmt.Sprintf("kernels: %s: not a quantized type: %v", op, t))
	}
	if t.Repacked() {
		panic(fmt.Sprintf("kernels: %s: %v interleaves groups of four rows: dequantise it with DequantMat", op, t))
	}
	if n%t.BlockElems() != 0 || srcLen != t.RowBytes(n) {
		panic(fmt.Sprintf("kernels: %s: %v: %d values in %d bytes (blocks of %d values in %d bytes)",
			op, t, n, srcLen, t.BlockElems(), t.BlockBytes()))
	}
}

// DequantRow writes the len(dst) values of the whole blocks in src
// (len(src) == len(dst)/BlockElems*BlockBytes) as float32, exactly as
// ggml's dequantize_row_* does: each product is rounded to float32 before
// the offset is added (no fused multiply-add), so the values are
// bit-identical to ggml's reference and to the gguf Python package's.
func DequantRow(t QuantType, dst []float32, src []byte) {
	checkQuant("DequantRow", t, len(dst), len(src))
	if dequantRowAsm(t, dst, src) {
		return
	}
	eachBlock("DequantRow", t, len(dst), len(src), func(v0, v1, b0, b1 int) {
		dequantBlock(t, dst[v0:v1], src[b0:b1])
	})
}

// eachBlock checks that n values of t take nbytes bytes and calls f with
// the value range [v0, v1) and byte range [b0, b1) of each block in turn.
func eachBlock(op string, t QuantType, n, nbytes int, f func(v0, v1, b0, b1 int)) {
	checkQuant(op, t, n, nbytes)
	e, nb := t.BlockElems(), t.BlockBytes()
	for b := 0; b < n/e; b++ {
		f(b*e, (b+1)*e, b*nb, (b+1)*nb)
	}
}

// dequantBlock dequantises one block.
func dequantBlock(t QuantType, y []float32, x []byte) {
	switch t {
	case Q8_0:
		d := f16(x)
		for i, q := range x[2:34] {
			y[i] = float32(int8(q)) * d
		}
	case Q4_0:
		d := f16(x)
		for i, q := range x[2:18] {
			y[i] = float32(int(q&15)-8) * d
			y[i+16] = float32(int(q>>4)-8) * d
		}
	case Q4_1:
		d, m := f16(x), f16(x[2:])
		for i, q := range x[4:20] {
			y[i] = float32(float32(q&15)*d) + m
			y[i+16] = float32(float32(q>>4)*d) + m
		}
	case Q5_0, Q5_1: // bit i of the 32 in qh: value i's fifth
		qh, d, m := q5High(x), f16(x), float32(0)
		if t == Q5_1 {
			m = f16(x[2:])
		}
		for i, q := range x[len(x)-16:] {
			l0, l1 := q&15|byte(qh>>i&1)<<4, q>>4|byte(qh>>(i+16)&1)<<4
			if t == Q5_0 {
				y[i] = float32(int(l0)-16) * d
				y[i+16] = float32(int(l1)-16) * d
				continue
			}
			y[i] = float32(float32(l0)*d) + m
			y[i+16] = float32(float32(l1)*d) + m
		}
	case Q4_K, Q5_K: // (d·scale)·q − dmin·min per 32-value sub-block
		q, d, dmin := k45Values(t, x), f16(x), f16(x[2:])
		for k := range 8 {
			sc, m := scaleMinK4(k, x[4:16])
			d1, o1 := d*float32(sc), dmin*float32(m)
			for i, v := range q[32*k : 32*k+32] {
				y[32*k+i] = float32(d1*float32(v)) - o1
			}
		}
	case Q6_K: // (d·scale)·(q − 32), scales per 16 values
		q, d := q6kValues(x), f16(x[208:])
		for g := range 16 {
			ds := d * float32(int8(x[192+g]))
			for i := range 16 {
				y[16*g+i] = ds * float32(int(q[16*g+i])-32)
			}
		}
	}
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j (0..7) from a
// Q4_K/Q5_K super-block's 12 scale bytes (ggml's get_scale_min_k4).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&15 | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// QuantizeRow writes the values of src (a multiple of t's BlockElems) into
// dst (t.RowBytes(len(src)) bytes) in format t. Q8_0, Q4_0, Q4_1, Q5_0
// and Q5_1 round exactly as ggml's reference quantize_row_*_ref (and the
// gguf Python package) do; the K-quants use a plain per-sub-block min/max fit (not
// ggml's searched scales), which gives valid blocks of those formats for
// tests and benchmarks.
func QuantizeRow(t QuantType, dst []byte, src []float32) {
	eachBlock("QuantizeRow", t, len(src), len(dst), func(v0, v1, b0, b1 int) {
		quantBlock(t, dst[b0:b1], src[v0:v1])
	})
}

func quantBlock(t QuantType, y []byte, x []float32) {
	switch t {
	case Q8_0:
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		id := inv(d)
		putF16(y, d)
		for i, v := range x {
			y[2+i] = byte(int8(math.Round(float64(v * id))))
		}
	case Q4_0, Q4_1, Q5_0, Q5_1:
		quantLevels(t, y, x)
	case Q4_K, Q5_K:
		quantK45(t, y, x)
	case Q6_K:
		quantK6(y, x)
	}
}

// quantLevels writes block x as Q4_0, Q4_1, Q5_0 or Q5_1, rounded as
// ggml's reference does: Q4_0/Q5_0 symmetric, d = vmax / −(levels+1)/2
// (vmax the value of largest magnitude), each value int8(x/d + (levels+1)/2
// + 0.5) capped at levels; Q4_1/Q5_1 from the minimum m, d = (max − m) /
// levels, each value (x − m)/d + 0.5 truncated (levels 15 or 31); then
// the values' low four bits as nibbles (value i and i+16 in byte i) and,
// for Q5, their fifth bits after the scales.
func quantLevels(t QuantType, y []byte, x []float32) {
	levels := 15
	if t == Q5_0 || t == Q5_1 {
		levels = 31
	}
	var q [32]uint8
	if t == Q4_0 || t == Q5_0 {
		var amax, vmax float32
		for _, v := range x {
			if amax < abs32(v) {
				amax, vmax = abs32(v), v
			}
		}
		half := float32(levels+1) / 2
		d := vmax / -half
		id, off := inv(d), half+0.5
		putF16(y, d)
		for i, v := range x {
			q[i] = uint8(min(int8(levels), int8(float32(v*id)+off)))
		}
	} else {
		lo, hi := x[0], x[0]
		for _, v := range x {
			lo, hi = min(lo, v), max(hi, v)
		}
		d := (hi - lo) / float32(levels)
		id := inv(d)
		putF16(y, d)
		putF16(y[2:], lo)
		for i, v := range x {
			q[i] = min(uint8(levels), uint8(float32((v-lo)*id)+0.5))
		}
	}
	qs := y[len(y)-16:]
	var qh uint32
	for i := range 16 {
		qs[i] = q[i]&15 | q[i+16]<<4
		qh |= uint32(q[i]>>4)<<i | uint32(q[i+16]>>4)<<(i+16)
	}
	if levels == 31 {
		h := y[len(y)-20:]
		h[0], h[1], h[2], h[3] = byte(qh), byte(qh>>8), byte(qh>>16), byte(qh>>24)
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// quantK45 fits each 32-value sub-block of a Q4_K/Q5_K super-block with
// its min/max (levels 0..15 or 0..31), quantizes the sub-block scales and
// mins to 6 bits against the super-block's d and dmin, and the values
// against the quantized scales.
func quantK45(t QuantType, y []byte, x []float32) {
	levels := float32(15)
	if t == Q5_K {
		levels = 31
	}
	var scale, mn [8]float32
	var smax, mmax float32
	for j := range 8 {
		lo, hi := float32(0), float32(0) // the min is ≤ 0 (stored as -dmin·m)
		for _, v := range x[32*j : 32*j+32] {
			lo, hi = min(lo, v), max(hi, v)
		}
		scale[j], mn[j] = (hi-lo)/levels, -lo
		smax, mmax = max(smax, scale[j]), max(mmax, mn[j])
	}
	d, dmin := smax/63, mmax/63
	putF16(y, d)
	putF16(y[2:], dmin)
	d, dmin = f16(y), f16(y[2:]) // quantize against the stored values
	var ls, lm [8]uint8
	for j := range 8 {
		ls[j] = uint8(min(63, math.Round(float64(scale[j]*inv(d)))))
		lm[j] = uint8(min(63, math.Round(float64(mn[j]*inv(dmin)))))
	}
	sc := y[4:16]
	for j := range 4 {
		sc[j] = ls[j] | (ls[j+4]>>4)<<6
		sc[j+4] = lm[j] | (lm[j+4]>>4)<<6
		sc[j+8] = ls[j+4]&15 | (lm[j+4]&15)<<4
	}
	var q [qk]uint8
	for j := range 8 {
		s, m := scaleMinK4(j, sc)
		ds, dm := d*float32(s), dmin*float32(m)
		id := inv(ds)
		for l := range 32 {
			v := math.Round(float64((x[32*j+l] + dm) * id))
			q[32*j+l] = uint8(max(0, min(float64(levels), v)))
		}
	}
	if t == Q4_K {
		qs := y[16:144]
		for j := range 4 {
			for l := range 32 {
				qs[32*j+l] = q[64*j+l] | q[64*j+32+l]<<4
			}
		}
		return
	}
	qh, qs := y[16:48], y[48:176]
	clear(qh)
	for j := range 4 {
		for l := range 32 {
			a, b := q[64*j+l], q[64*j+32+l]
			qs[32*j+l] = a&15 | (b&15)<<4
			qh[l] |= (a>>4)<<(2*j) | (b>>4)<<(2*j+1)
		}
	}
}

// quantK6 fits each 16-value sub-block of a Q6_K super-block symmetrically
// (levels -32..31), with int8 sub-block scales against the super-block d.
func quantK6(y []byte, x []float32) {
	var scale [16]float32
	var smax float32
	for j := range 16 {
		var amax float32
		for _, v := range x[16*j : 16*j+16] {
			amax = max(amax, abs32(v))
		}
		scale[j] = amax / 31
		smax = max(smax, scale[j])
	}
	d := smax / 127
	putF16(y[208:], d)
	d = f16(y[208:])
	sc := y[192:208]
	var q [qk]uint8
	for j := range 16 {
		s := int8(min(127, math.Round(float64(scale[j]*inv(d)))))
		sc[j] = byte(s)
		id := inv(d * float32(s))
		for l := range 16 {
			v := math.Round(float64(x[16*j+l] * id))
			q[16*j+l] = uint8(max(-32, min(31, v)) + 32)
		}
	}
	ql, qh := y[0:128], y[128:192]
	clear(qh)
	for n := range 2 {
		for l := range 32 {
			a, b, c, e := q[128*n+l], q[128*n+32+l], q[128*n+64+l], q[128*n+96+l]
			ql[64*n+l] = a&15 | (c&15)<<4
			ql[64*n+32+l] = b&15 | (e&15)<<4
			qh[32*n+l] = a>>4 | (b>>4)<<2 | (c>>4)<<4 | (e>>4)<<6
		}
	}
}
