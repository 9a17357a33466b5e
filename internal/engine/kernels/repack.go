package kernels

import "fmt"

// The four-row layout (Q4_1x4, Q4_0x4, Q8_0x4). Batch-1 decode of Q4_1
// and Q4_0 weights was bounded by the kernels' loads, not by memory (issue
// 22): a block of one row cost its nibbles, x's two halves and its
// scales. With four rows' blocks b side by side, one load gives all four
// rows' nibbles and x's halves serve the four rows (quant_amd64.s,
// qdotQ41X). Q8_0's layout is the one its integer kernel multiplies
// without rearranging (quantvnni_amd64.s, qdotQ80V): each row's four
// consecutive values in one dword, the values stored offset by 128 as
// unsigned bytes (q XOR 0x80).
// The layout holds the same bytes as the plain rows, rearranged within
// each group of four rows, so a matrix is held in one layout only. Row
// slices at multiples of four rows (fused q/k/v and gate/up) are byte
// slices as before; a matrix whose rows are not a multiple of four stays
// plain.

// Repack4 writes the rows×cols Q4_1, Q4_0 or Q8_0 matrix src (plain
// rows, rows a multiple of 4) into dst (as many bytes; src itself
// rearranges the matrix in place, any other overlap is not allowed) in
// the four-row layout, the matrix of type t.RepackedType(): for each
// group of four rows and each block index, Q4_1 and Q4_0: 64 bytes of
// the four rows' nibbles (byte 4i+j: byte i of row j's 16), then the four
// rows' scales (Q4_1: d, m; Q4_0: d; each row's as its block stores
// them); Q8_0: 128 bytes of values (byte 64h+16c+4j+i: row j's value
// 16h+4c+i, XOR 0x80), then the four rows' d.
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
	rb, nb, sb := t.RowBytes(cols), cols/32, bb-16
	grp := make([]byte, 4*rb) // the group's plain rows
	for g := 0; g < rows; g += 4 {
		copy(grp, src[g*rb:(g+4)*rb])
		for b := range nb {
			blk := dst[g*rb+4*b*bb : g*rb+4*(b+1)*bb]
			for j := range 4 {
				s := grp[j*rb+b*bb : j*rb+(b+1)*bb]
				if t == Q8_0 {
					for v := range 32 {
						blk[q80x4Pos(j, v)] = s[2+v] ^ 0x80
					}
					copy(blk[128+2*j:130+2*j], s[:2])
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
// byte v%4.
func q80x4Pos(j, v int) int { return 64*(v/16) + 16*(v%16/4) + 4*j + v%4 }

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
	for b := range cols / 32 {
		s := src[4*b*bb : 4*(b+1)*bb]
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
