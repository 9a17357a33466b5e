package kernels

import "fmt"

// The four-row layouts (the …x4 types). Batch-1 decode of Q4_1 and Q4_0
// weights was bounded by the kernels' loads, not by memory (issue
// 22): a block of one row cost its nibbles, x's two halves and its
// scales. With four rows' blocks b side by side, one load gives all four
// rows' nibbles and x's halves serve the four rows (quant_amd64.s,
// qdotQ41X). Q8_0's layout is the one its integer kernel multiplies
// without rearranging (quantvnni_amd64.s, qdotQ80V): each row's four
// consecutive values in one dword, the values stored offset by 128 as
// unsigned bytes (q XOR 0x80). Q5_0's and Q5_1's (quantvnni_amd64.s,
// qdotQ5?V) is in the same order: each row's four consecutive nibble
// bytes in one dword, and the fifth bits as two 64-bit masks, bit p the
// fifth bit of the nibble at byte p (low nibbles, then high); the
// K-quants' per super-block, each 32-value sub-block's values as Q5_0's
// (k45Sub, q6kx4).
// A layout takes as many bytes as the plain rows, the same bits
// rearranged within each group of four rows (Q5's and the K-quants'
// packed differently), so a matrix is held in one layout only. Row
// slices at multiples of four rows (fused q/k/v and gate/up) are byte
// slices as before; a matrix whose rows are not a multiple of four stays
// plain.

// Repack4 writes the rows×cols Q4_1, Q4_0, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K
// or Q6_K matrix src (plain rows, rows a multiple of 4) into dst (as many bytes; src
// itself rearranges the matrix in place, any other overlap is not
// allowed) in the four-row layout, the matrix of type t.RepackedType():
// for each group of four rows and each block index, Q4_1 and Q4_0: 64
// bytes of the four rows' nibbles (byte 4i+j: byte i of row j's 16), then
// the four rows' scales (Q4_1: d, m; Q4_0: d; each row's as its block
// stores them); Q8_0: 128 bytes of values (byte 64h+16c+4j+i: row j's
// value 16h+4c+i, XOR 0x80), then the four rows' d; Q5_0 and Q5_1: 64
// bytes of nibbles (byte 16c+4j+i: byte 4c+i of row j's 16), the low
// nibbles' fifth bits (bit 16c+4j+i: row j's bit 4c+i of 32), the high
// nibbles' (bit 16+4c+i), 8 bytes each, then the four rows' scales (Q5_0:
// d; Q5_1: d, m); Q4_K, Q5_K and Q6_K: per 256-value super-block, as
// k45Sub and q6kx4 say.
func Repack4(t QuantType, dst, src []byte, rows, cols int) {
	if t.RepackedType() == QNone {
		panic(fmt.Sprintf("kernels: Repack4: %v has no four-row layout", t))
	}
	checkQuantMat("Repack4", t, rows, cols, src)
	if rows%4 != 0 || len(dst) != rows*t.RowBytes(cols) || len(src) != len(dst) {
		panic(fmt.Sprintf("kernels: Repack4: %d rows (want a multiple of 4) of %d values in %d bytes to %d",
			rows, cols, len(src), len(dst)))
	}
	bb := t.BlockBytes()
	rb, nb, sb := t.RowBytes(cols), cols/t.BlockElems(), bb-16
	grp := make([]byte, 4*rb) // the group's plain rows
	for g := 0; g < rows; g += 4 {
		copy(grp, src[g*rb:(g+4)*rb])
		for b := range nb {
			blk := dst[g*rb+4*b*bb : g*rb+4*(b+1)*bb]
			switch t {
			case Q5_0, Q5_1:
				clear(blk[64:80]) // the fifth bits are or-ed in below
			case Q4_K, Q5_K:
				clear(blk[k45Scales(t)+32 : k45Scales(t)+48]) // the high bits, or-ed in
				for k := range 8 {
					clear(blk[k45Sub(t)*k+64 : k45Sub(t)*(k+1)]) // Q5_K's fifth bits
				}
			case Q6_K:
				for k := range 8 {
					clear(blk[96*k+64 : 96*k+96]) // the high bits, or-ed in
				}
			}
			for j := range 4 {
				s := grp[j*rb+b*bb : j*rb+(b+1)*bb]
				switch t {
				case Q8_0:
					for v := range 32 {
						blk[q80x4Pos(j, v)] = s[2+v] ^ 0x80
					}
					copy(blk[128+2*j:130+2*j], s[:2])
					continue
				case Q5_0, Q5_1:
					qh, sc := q5High(s), bb-20 // scale bytes per row
					for i := range 16 {
						p := q80x4Pos(j, i)
						blk[p] = s[bb-16+i]
						blk[64+p/8] |= byte(qh>>i&1) << (p % 8)
						blk[72+p/8] |= byte(qh>>(i+16)&1) << (p % 8)
					}
					copy(blk[80+sc*j:80+sc*(j+1)], s[:sc])
					continue
				case Q4_K, Q5_K:
					repackK45(t, blk, j, s)
					continue
				case Q6_K:
					repackQ6K(blk, j, s)
					continue
				}
				for i := range 16 {
					blk[4*i+j] = s[sb+i]
				}
				copy(blk[64+sb*j:64+sb*(j+1)], s[:sb])
			}
		}
	}
}

// q80x4Pos is where value v (< 32) of row j (< 4) of a block sits in
// Q8_0x4's 128 value bytes: half v/16's vector, lane (v%16)/4, dword j,
// byte v%4; for v < 16, also where Q5_0x4's and Q5_1x4's nibble byte v
// of row j sits.
func q80x4Pos(j, v int) int { return 64*(v/16) + 16*(v%16/4) + 4*j + v%4 }

// The layouts of Q4_Kx4 and Q5_Kx4, per group of four rows and 256-value
// super-block (576 and 704 bytes, the four rows' 144 and 176): at k·sub
// (sub: 64 and 80 bytes) the values of sub-block k (< 8) as Q5_0x4's
// (64 bytes of their low four bits, byte q80x4Pos(j, i): row j's values
// 32k+i and 32k+16+i, low and high nibble; Q5_K: the fifth bits after
// them, 8 bytes for the low nibbles, bit p that of byte p's, 8 for the
// high); at k45Scales the low four bits of the sub-blocks' 6-bit scales
// and mins (byte 4k+j: row j's scale of sub-block k, its min above it);
// 32 after it their high two bits, bits 2·(4k+j mod 16) of four dwords:
// the scales of k < 4, of k ≥ 4, the mins of k < 4, of k ≥ 4; 48 after it
// the rows' d and dmin. The integer kernels (qdotQ4KV, qdotQ5KV) widen
// the scales of a super-block at once, each from one byte and two bits in
// the places a vector shift finds them.

// k45Sub is the bytes of a sub-block's values in the layout of t
// (Q4_Kx4 or Q5_Kx4, or their plain formats).
func k45Sub(t QuantType) int {
	if t.plain() == Q5_K {
		return 80
	}
	return 64
}

// k45Scales is where a super-block's scales start in the layout of t.
func k45Scales(t QuantType) int { return 8 * k45Sub(t) }

// k45Values is Q4_K or Q5_K super-block s's 256 values (0..15 or 0..31),
// in order.
func k45Values(t QuantType, s []byte) (q [qk]byte) {
	qs, qh := s[16:144], []byte(nil)
	if t == Q5_K {
		qh, qs = s[16:48], s[48:176]
	}
	for m := range 4 { // ggml's order: 32 bytes, values 64m+l and 64m+32+l
		for l, v := range qs[32*m : 32*m+32] {
			lo, hi := v&15, v>>4
			if qh != nil {
				h := qh[l] >> (2 * m)
				lo, hi = lo|(h&1)<<4, hi|(h&2)<<3
			}
			q[64*m+l], q[64*m+32+l] = lo, hi
		}
	}
	return q
}

// repackK45 writes row j's Q4_K or Q5_K super-block s into the group's
// blk.
func repackK45(t QuantType, blk []byte, j int, s []byte) {
	q, sub, at := k45Values(t, s), k45Sub(t), k45Scales(t)
	for k := range 8 {
		b := blk[sub*k : sub*(k+1)]
		for i := range 16 {
			p := q80x4Pos(j, i)
			lo, hi := q[32*k+i], q[32*k+16+i]
			b[p] = lo&15 | hi<<4
			if sub == 80 {
				b[64+p/8] |= lo >> 4 << (p % 8)
				b[72+p/8] |= hi >> 4 << (p % 8)
			}
		}
		sc, m := scaleMinK4(k, s[4:16])
		e := 4*k + j
		blk[at+e] = sc&15 | m<<4
		h, bit := at+32+4*(k/4)+2*(e%16)/8, 2*(e%16)%8
		blk[h] |= sc >> 4 << bit
		blk[h+8] |= m >> 4 << bit
	}
	copy(blk[at+48+4*j:at+52+4*j], s[:4])
}

// k45ScaleMin is row j's 6-bit scale and min of sub-block k in the
// Q4_Kx4 or Q5_Kx4 super-block blk (scales at at).
func k45ScaleMin(blk []byte, at, k, j int) (sc, m uint8) {
	e := 4*k + j
	h, bit := at+32+4*(k/4)+2*(e%16)/8, 2*(e%16)%8
	return blk[at+e]&15 | (blk[h]>>bit&3)<<4, blk[at+e]>>4 | (blk[h+8]>>bit&3)<<4
}

// The layout of Q6_Kx4, per group of four rows and 256-value super-block
// (840 bytes, the four rows' 210): at 96k the values of sub-block k (< 8;
// 32 values, two of Q6_K's 16-value scale groups): 64 bytes of their low
// four bits as Q5_0x4's nibbles (byte p = q80x4Pos(j, i): row j's values
// 32k+i and 32k+16+i), then 32 bytes of their high two bits, byte p mod
// 32: bits 0-1 and 4-5 those of byte p < 32's low and high nibble, bits
// 2-3 and 6-7 those of byte p+32's (so that one 32-byte load broadcast to
// both halves of a vector and one word shift per half put each in place);
// at q6kx4Scales the groups' int8 scales (byte 4g+j: row j's of group
// g); at q6kx4D the rows' d.
const (
	q6kx4Scales = 768
	q6kx4D      = 832
)

// q6kValues is Q6_K super-block s's 256 six-bit values (0..63, the value
// plus 32), in order.
func q6kValues(s []byte) (q [qk]byte) {
	ql, qh := s[0:128], s[128:192]
	for n := range 2 { // ggml's order: halves of 128 values
		l0, h0 := ql[64*n:], qh[32*n:]
		for l := range 32 {
			h := h0[l]
			q[128*n+l] = l0[l]&15 | (h&3)<<4
			q[128*n+32+l] = l0[l+32]&15 | (h>>2&3)<<4
			q[128*n+64+l] = l0[l]>>4 | (h>>4&3)<<4
			q[128*n+96+l] = l0[l+32]>>4 | (h>>6&3)<<4
		}
	}
	return q
}

// repackQ6K writes row j's Q6_K super-block s into the group's blk.
func repackQ6K(blk []byte, j int, s []byte) {
	q := q6kValues(s)
	for k := range 8 {
		b := blk[96*k : 96*k+96]
		for i := range 16 {
			p := q80x4Pos(j, i)
			lo, hi := q[32*k+i], q[32*k+16+i]
			b[p] = lo&15 | hi<<4
			sh := 2 * (p / 32) // byte p+32's bits sit 2 above byte p's
			b[64+p%32] |= (lo>>4)<<sh | (hi>>4)<<(4+sh)
		}
	}
	for g := range 16 {
		blk[q6kx4Scales+4*g+j] = s[192+g]
	}
	copy(blk[q6kx4D+2*j:q6kx4D+2*j+2], s[208:210])
}

// q6kx4Value is row j's six-bit value i (< 32) of sub-block k in the
// Q6_Kx4 super-block blk.
func q6kx4Value(blk []byte, k, j, i int) byte {
	p, half := q80x4Pos(j, i%16), i/16
	b := blk[96*k:]
	nib := b[p] >> (4 * half) & 15
	return nib | (b[64+p%32]>>(2*(p/32)+4*half)&3)<<4
}

// q5High is the 32 fifth bits of a Q5_0 or Q5_1 block (bit i: value i's).
func q5High(blk []byte) uint32 {
	h := blk[len(blk)-20:]
	return uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16 | uint32(h[3])<<24
}

// DequantMat writes the values of the quantized matrix src of type t
// (rows of cols values, back to back) into dst, row after row: for a row
// format, DequantRow of the whole; for a four-row layout, each group's
// rows, bit-identical to DequantRow of the plain rows.
func DequantMat(t QuantType, dst []float32, src []byte, cols int) {
	if !t.Repacked() {
		DequantRow(t, dst, src)
		return
	}
	if cols <= 0 || len(dst)%cols != 0 {
		panic(fmt.Sprintf("kernels: DequantMat: %d values are not whole rows of %d", len(dst), cols))
	}
	rows := len(dst) / cols
	checkQuantMat("DequantMat", t, rows, cols, src)
	if len(src) != rows*t.RowBytes(cols) {
		panic(fmt.Sprintf("kernels: DequantMat: %d bytes for %d rows of %d %v values", len(src), rows, cols, t))
	}
	gb := 4 * t.RowBytes(cols)
	for g := range rows / 4 {
		dequantGroup(t, dst[4*g*cols:4*(g+1)*cols], cols, src[g*gb:(g+1)*gb])
	}
}

// dequantGroup writes the four rows of the repacked group src (rows of
// cols values) to dst (row j at j·cols), as dequantBlock computes each
// block's values.
func dequantGroup(t QuantType, dst []float32, cols int, src []byte) {
	_ = dst[4*cols-1]
	_ = src[4*t.RowBytes(cols)-1]
	if dequantGroupAsm(t, dst, cols, src) {
		return
	}
	bb := t.BlockBytes()
	sb := bb - 16 // scale bytes per row
	for b := range cols / t.BlockElems() {
		s := src[4*b*bb : 4*(b+1)*bb]
		if t == Q6_Kx4 {
			for j := range 4 {
				d := f16(s[q6kx4D+2*j:])
				for g := range 16 {
					ds := d * float32(int8(s[q6kx4Scales+4*g+j]))
					y := dst[j*cols+256*b+16*g : j*cols+256*b+16*g+16]
					for i := range y {
						y[i] = ds * float32(int(q6kx4Value(s, g/2, j, 16*(g%2)+i))-32)
					}
				}
			}
			continue
		}
		if t == Q4_Kx4 || t == Q5_Kx4 {
			sub, at := k45Sub(t), k45Scales(t)
			for j := range 4 {
				d, dmin := f16(s[at+48+4*j:]), f16(s[at+50+4*j:])
				for k := range 8 {
					sc, m := k45ScaleMin(s, at, k, j)
					d1, o1 := d*float32(sc), dmin*float32(m)
					y := dst[j*cols+256*b+32*k : j*cols+256*b+32*k+32]
					bk := s[sub*k : sub*(k+1)]
					for i := range 16 {
						p := q80x4Pos(j, i)
						lo, hi := bk[p]&15, bk[p]>>4
						if sub == 80 {
							lo |= bk[64+p/8] >> (p % 8) & 1 << 4
							hi |= bk[72+p/8] >> (p % 8) & 1 << 4
						}
						y[i] = float32(d1*float32(lo)) - o1
						y[i+16] = float32(d1*float32(hi)) - o1
					}
				}
			}
			continue
		}
		if t == Q5_0x4 || t == Q5_1x4 {
			sc := bb - 20 // scale bytes per row
			for j := range 4 {
				y, d := dst[j*cols+32*b:j*cols+32*(b+1)], f16(s[80+sc*j:])
				for i := range 16 {
					p := q80x4Pos(j, i)
					l0, l1 := s[p]&15|(s[64+p/8]>>(p%8)&1)<<4, s[p]>>4|(s[72+p/8]>>(p%8)&1)<<4
					if t == Q5_0x4 {
						y[i] = float32(int(l0)-16) * d
						y[i+16] = float32(int(l1)-16) * d
						continue
					}
					m := f16(s[82+sc*j:])
					y[i] = float32(float32(l0)*d) + m
					y[i+16] = float32(float32(l1)*d) + m
				}
			}
			continue
		}
		if t == Q8_0x4 {
			for j := range 4 {
				y, d := dst[j*cols+32*b:j*cols+32*(b+1)], f16(s[128+2*j:])
				for v := range y {
					y[v] = float32(int8(s[q80x4Pos(j, v)]^0x80)) * d
				}
			}
			continue
		}
		for j := range 4 {
			y, sc := dst[j*cols+32*b:j*cols+32*(b+1)], s[64+sb*j:]
			if t == Q4_1x4 {
				d, m := f16(sc), f16(sc[2:])
				for i := range 16 {
					q := s[4*i+j]
					y[i] = float32(float32(q&15)*d) + m
					y[i+16] = float32(float32(q>>4)*d) + m
				}
				continue
			}
			d := f16(sc)
			for i := range 16 {
				q := s[4*i+j]
				y[i] = float32(int(q&15)-8) * d
				y[i+16] = float32(int(q>>4)-8) * d
			}
		}
	}
}
