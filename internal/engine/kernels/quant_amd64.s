//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// Decode kernels of block-quantized weights (AVX-512). Each call dots one
// float32 activation row x with rows weight rows (a multiple of 4, back to
// back, ldw bytes each) four at a time (R8..R11), one block per step, and
// writes the rows dots to out. Q8_0's and the K-quants' integers are
// widened to float32 in registers (VPMOVZXBD / VPMOVSXBD, VCVTDQ2PS),
// multiplied with the activations and the block's scale applied once per
// block; Q4_0's and Q4_1's nibbles index a register holding the block's 16
// dequantised values (NIBLUT). Blocks' f16 scales (and Q4_1's offset) are
// widened by looking them up in f16Table (tab, 2^16 float32 values: one
// scalar load and an embedded broadcast instead of three vector
// instructions). See quantgemm.go for the arithmetic. Only the quantized
// bytes are read from memory.

// Software prefetch distances, bytes ahead in each weight row: the
// lockstep kernels (four streams) by format; the row-order ones (one
// stream, running on into the rows that follow) and the four-row ones
// take theirs as the argument pf, calibrated per machine (order.go).
// Without a long distance the row-order kernels stall on memory: in
// BenchmarkQuantStream Q8_0 streamed 2-3x faster with 4 KiB than without.
#define PFQ4 256
#define PFQ8 512

// Row dequantisation (dequantQ*Z, at the end of the file):
// Arguments (nb int, dst *float32, src *byte, tab *float32); Z31 = 15.
#define DQSETUP \
	MOVQ nb+0(FP), CX \
	MOVQ dst+8(FP), DI \
	MOVQ src+16(FP), SI \
	MOVQ tab+24(FP), R15 \
	MOVL $15, AX \
	VPBROADCASTD AX, Z31

// The row loop: per block (size bytes, f16 d first), WIDEN leaves its 32
// integers as float32 in Z16/Z17, which are scaled by d, passed to POST,
// and stored.
#define DQRUN(lp, done, WIDEN, POST, size) \
	DQLOOP(lp, done, DQBLOCK(WIDEN, POST), SI, $size)

#define DQBLOCK(WIDEN, POST) \
	WIDEN \
	MOVWLZX          (SI), AX \
	VMULPS.BCST      (R15)(AX*4), Z16, Z16 \
	VMULPS.BCST      (R15)(AX*4), Z17, Z17 \
	POST \
	VMOVUPS          Z16, (DI) \
	VMOVUPS          Z17, 64(DI)

#define DQNONE

#define DQ41WIDEN \
	NIB(4(SI), Z16, Z17) \
	VCVTDQ2PS Z16, Z16 \
	VCVTDQ2PS Z17, Z17

// Q4_1's offset m, added after the rounded product.
#define DQ41POST \
	MOVWLZX     2(SI), BX \
	VADDPS.BCST (R15)(BX*4), Z16, Z16 \
	VADDPS.BCST (R15)(BX*4), Z17, Z17

#define DQ40WIDEN \
	NIB(2(SI), Z16, Z17) \
	VPSUBD    Z30, Z16, Z16 \
	VPSUBD    Z30, Z17, Z17 \
	VCVTDQ2PS Z16, Z16 \
	VCVTDQ2PS Z17, Z17

#define DQ80WIDEN \
	VPMOVSXBD 2(SI), Z16 \
	VPMOVSXBD 18(SI), Z17 \
	VCVTDQ2PS Z16, Z16 \
	VCVTDQ2PS Z17, Z17

// K-quant rows. Q4_K/Q5_K: per super-block, d·sc (0(SP)) and dmin·m
// (32(SP)) as DequantRow rounds them, then each sub-block's values as
// (d·sc)·q − dmin·m. Q6_K: d·sc per 16-value group (0(SP)), values
// (d·sc)·(q − 32).
#define DQKCHUNK(j, qs, FIFTH) \
	K45INTS(SI, j, qs, FIFTH) \
	VMULPS.BCST      (8*j)(SP), Z16, Z16 \
	VMULPS.BCST      (8*j)(SP), Z19, Z19 \
	VMULPS.BCST      (8*j+4)(SP), Z17, Z17 \
	VMULPS.BCST      (8*j+4)(SP), Z21, Z21 \
	VSUBPS.BCST      (32+8*j)(SP), Z16, Z16 \
	VSUBPS.BCST      (32+8*j)(SP), Z19, Z19 \
	VSUBPS.BCST      (32+8*j+4)(SP), Z17, Z17 \
	VSUBPS.BCST      (32+8*j+4)(SP), Z21, Z21 \
	VMOVUPS          Z16, (256*j)(DI) \
	VMOVUPS          Z19, (256*j+64)(DI) \
	VMOVUPS          Z17, (256*j+128)(DI) \
	VMOVUPS          Z21, (256*j+192)(DI)

#define DQK45(lp, done, qs, FIFTH, size) \
lp: \
	TESTQ CX, CX \
	JZ    done \
	KSCALES(SI) \
	MOVWLZX          (SI), AX \
	MOVWLZX          2(SI), BX \
	VMULPS.BCST      (R15)(AX*4), Z17, Z18 \
	VMULPS.BCST      (R15)(BX*4), Z17, Z19 \
	VMOVUPS          Z18, (SP) \
	VEXTRACTF64X4    $1, Z19, Y19 \
	VMOVUPS          Y19, 32(SP) \
	DQKCHUNK(0, qs, FIFTH) \
	DQKCHUNK(1, qs, FIFTH) \
	DQKCHUNK(2, qs, FIFTH) \
	DQKCHUNK(3, qs, FIFTH) \
	ADDQ             $size, SI \
	ADDQ             $1024, DI \
	DECQ             CX \
	JMP              lp \
done: \
	VZEROUPPER \
	RET

// Store the 16 six-bit values in dst (minus 32) times scale s at x
// offset off of the super-block.
#define Q6KDQ(dst, off, s, unused) \
	VPSUBD           Z24, dst, dst \
	VCVTDQ2PS        dst, dst \
	VMULPS.BCST      (4*(s))(SP), dst, dst \
	VMOVUPS          dst, (4*(off))(DI)

// Arguments common to the kernels:
// (nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
#define QSETUP \
	MOVQ x+8(FP), R14 \
	MOVQ w+24(FP), R8 \
	MOVQ ldw+32(FP), DX \
	MOVQ rows+40(FP), R12 \
	SHRQ $2, R12 \
	MOVQ out+48(FP), R13 \
	MOVQ tab+56(FP), R15 \
	MOVL $15, AX \
	VPBROADCASTD AX, Z31

// The arguments of the four-row kernels into their registers (x R14, w
// R8, groups R12, out R13, tab R15, pf R10) and NIBLUT's level constants.
#define XSETUP \
	MOVQ x+8(FP), R14 \
	MOVQ w+16(FP), R8 \
	MOVQ groups+24(FP), R12 \
	MOVQ out+32(FP), R13 \
	MOVQ tab+40(FP), R15 \
	MOVQ pf+48(FP), R10 \
	NIBCONST

// The arguments of the four-row dequantisers (nb CX, dst DI, ldd R12,
// src R8, tab R15).
#define XDQSETUP \
	MOVQ nb+0(FP), CX \
	MOVQ dst+8(FP), DI \
	MOVQ ldd+16(FP), R12 \
	MOVQ src+24(FP), R8 \
	MOVQ tab+32(FP), R15

// Start a group of four rows at R8: the other rows' pointers, x and xs
// from their starts, zero accumulators.
#define QGROUP \
	MOVQ nb+0(FP), CX \
	MOVQ R14, SI \
	MOVQ xs+16(FP), DI \
	LEAQ (R8)(DX*1), R9 \
	LEAQ (R9)(DX*1), R10 \
	LEAQ (R10)(DX*1), R11 \
	ZEROZ

// End a group: out[0..3] = the four sums (Z0..Z3 plus Z4..Z7), out += 4;
// the next group starts where the fourth row ended (R11).
#define QSTORE \
	VADDPS Z4, Z0, Z0 \
	VADDPS Z5, Z1, Z1 \
	VADDPS Z6, Z2, Z2 \
	VADDPS Z7, Z3, Z3 \
	MOVQ   R13, DI \
	RED4(Z0, Y0, X0, Z1, Y1, X1, Z2, Y2, X2, Z3, Y3, X3, 0) \
	ADDQ   $16, R13 \
	MOVQ   R11, R8 \
	DECQ   R12

// lo, hi = the low and high nibbles of the 16 bytes at src, as dwords
// (Z31 holds 15 in each lane).
#define NIB(src, lo, hi) \
	VPMOVZXBD    src, lo \
	VPSRLD       $4, lo, hi \
	VPANDD       Z31, lo, lo

// The kernel's body: groups of four rows (R12 of them), each nb steps of
// STEP (one block of the four rows), then stored.
#define QRUN(grp, lp, done, STEP) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	QGROUP \
lp: \
	STEP \
	DECQ CX \
	JNZ  lp \
	QSTORE \
	JMP  grp \
done: \
	VZEROUPPER \
	RET

// Row-order twin of QRUN: in each group of four rows, all nb blocks of
// the first row (STEP1 with its accumulators), then the second, and so on,
// x and the prep restarting per row: the same sums in the same order as
// QRUN (each accumulator takes the same FMAs in sequence, RED4 reduces each
// row on its own), but one stream of weight bytes instead of four.
#define QRESET \
	MOVQ nb+0(FP), CX \
	MOVQ R14, SI \
	MOVQ xs+16(FP), DI

// QGROUP for the row-order kernels, which hold their prefetch distance
// (the argument pf) in DX, ldw's register, once the group's row pointers
// are set.
#define QGROUPR \
	MOVQ ldw+32(FP), DX \
	QGROUP \
	MOVQ pf+64(FP), DX

#define QRUNR(grp, l0, l1, l2, l3, done, STEP1, m0, m1, m2, m3) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	QGROUPR \
l0: \
	STEP1(R8, Z0, m0) \
	DECQ CX \
	JNZ  l0 \
	QRESET \
l1: \
	STEP1(R9, Z1, m1) \
	DECQ CX \
	JNZ  l1 \
	QRESET \
l2: \
	STEP1(R10, Z2, m2) \
	DECQ CX \
	JNZ  l2 \
	QRESET \
l3: \
	STEP1(R11, Z3, m3) \
	DECQ CX \
	JNZ  l3 \
	QSTORE \
	JMP  grp \
done: \
	VZEROUPPER \
	RET

// Runners of the 32-value formats (Q4_1, Q4_0, Q8_0): a row's blocks go
// round four accumulators (block b to set b mod 4: Z0..Z3, Z4..Z7,
// Z8..Z11, Z12..Z15 for the four rows), so the chain of dependent adds of
// each is a quarter as long — in row order one row's adds would otherwise
// wait on each other block after block — and the sets are added before
// the reduction. QRUN4 (lockstep) and QRUNR4 (row order) give each
// accumulator the same adds in the same sequence and reduce the same way,
// so the two orders stay bit-identical.
#define QGROUP4 \
	QGROUP \
	ZEROZ4

#define QGROUPR4 \
	QGROUPR \
	ZEROZ4

// End a group of the four-set runners: set 3 into set 2, that into set 0,
// then QSTORE (set 1 into set 0, reduce, store).
#define QSTORE4 \
	VADDPS Z12, Z8, Z8 \
	VADDPS Z13, Z9, Z9 \
	VADDPS Z14, Z10, Z10 \
	VADDPS Z15, Z11, Z11 \
	VADDPS Z8, Z0, Z0 \
	VADDPS Z9, Z1, Z1 \
	VADDPS Z10, Z2, Z2 \
	VADDPS Z11, Z3, Z3 \
	QSTORE

// STEP(a0, a1, a2, a3): one block of the four rows into those
// accumulators (x and the rows advanced).
#define QRUN4(grp, lp, tail, end, done, STEP) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	QGROUP4 \
lp: \
	CMPQ CX, $4 \
	JLT  tail \
	STEP(Z0, Z1, Z2, Z3) \
	STEP(Z4, Z5, Z6, Z7) \
	STEP(Z8, Z9, Z10, Z11) \
	STEP(Z12, Z13, Z14, Z15) \
	SUBQ $4, CX \
	JMP  lp \
tail: \
	TESTQ CX, CX \
	JZ    end \
	STEP(Z0, Z1, Z2, Z3) \
	DECQ  CX \
	JZ    end \
	STEP(Z4, Z5, Z6, Z7) \
	DECQ  CX \
	JZ    end \
	STEP(Z8, Z9, Z10, Z11) \
end: \
	QSTORE4 \
	JMP  grp \
done: \
	VZEROUPPER \
	RET

// x's halves for block i of a step (x at SI) into Z20/Z21.
#define XLOAD(i) \
	VMOVUPS (128*i)(SI), Z20 \
	VMOVUPS (128*i+64)(SI), Z21

// All nb blocks of row r into a0..a3 (block b into a(b mod 4)), four per
// loop step: B(r, offset, acc) dots the block of size bytes at offset(r)
// with x in Z20/Z21; PF prefetches the step's 4·size bytes pf ahead.
// The pointer updates, loop control and prefetches are paid once per four
// blocks. Then x restarts and r is at the row's end.
#define QROW4(r, lp, tail, end, B, size, PF, a0, a1, a2, a3) \
lp: \
	CMPQ CX, $4 \
	JLT  tail \
	XLOAD(0) \
	B(r, 0, a0) \
	XLOAD(1) \
	B(r, size, a1) \
	XLOAD(2) \
	B(r, (2*size), a2) \
	XLOAD(3) \
	B(r, (3*size), a3) \
	PF(r) \
	ADDQ $(4*size), r \
	ADDQ $512, SI \
	SUBQ $4, CX \
	JMP  lp \
tail: \
	TESTQ CX, CX \
	JZ    end \
	XLOAD(0) \
	B(r, 0, a0) \
	ADDQ  $size, r \
	DECQ  CX \
	JZ    end \
	XLOAD(1) \
	B(r, 0, a1) \
	ADDQ  $size, r \
	DECQ  CX \
	JZ    end \
	XLOAD(2) \
	B(r, 0, a2) \
	ADDQ  $size, r \
end: \
	QRESET

// The prefetches of a step pf ahead, about one per 64-byte line of the
// step's 80 (Q4_1), 72 (Q4_0) or 136 (Q8_0) bytes: a line now and then
// is left to the hardware prefetcher, which streamed no slower than
// covering every line (BenchmarkQuantStream, Q8_0 1.08x).
#define PF1(r) \
	PREFETCHT0 (r)(DX*1)

#define PF2(r) \
	PREFETCHT0 (r)(DX*1) \
	PREFETCHT0 64(r)(DX*1)

// The row-order kernel; the labels: the group loop, its end, and per row
// QROW4's loop, tail and end.
#define QRUNR4(grp, done, a0, t0, e0, a1, t1, e1, a2, t2, e2, a3, t3, e3, B, size, PF) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	QGROUPR4 \
	QROW4(R8, a0, t0, e0, B, size, PF, Z0, Z4, Z8, Z12) \
	QROW4(R9, a1, t1, e1, B, size, PF, Z1, Z5, Z9, Z13) \
	QROW4(R10, a2, t2, e2, B, size, PF, Z2, Z6, Z10, Z14) \
	QROW4(R11, a3, t3, e3, B, size, PF, Z3, Z7, Z11, Z15) \
	QSTORE4 \
	JMP  grp \
done: \
	VZEROUPPER \
	RET

// The 4-bit formats (Q4_1, Q4_0) by lookup: a block's 16 possible values
// are computed once per block exactly as DequantRow computes them — Q4_1
// float32(l·d) + m, Q4_0 (l − 8)·d, for the levels l = 0..15 (Z29: 0..15,
// Z28: −8..7, as float32) — into a zmm (Z18), and VPERMPS picks each
// nibble's value from it (it reads only the low four bits of each index
// lane, so the low nibbles need no mask). The weights are thus
// bit-identical to DequantRow's, the product differs from the float32
// product with the dequantised matrix only by summation order, and a
// block costs one multiply (and Q4_1's add), a multiply, an FMA and an
// add instead of two conversions and four multiplies. The low nibbles are
// values 0..15 of the block (x's first half in Z20), the high ones 16..31
// (Z21); acc += their products.
#define NIBLUT(src, acc) \
	VPMOVZXBD    src, Z16 \
	VPSRLD       $4, Z16, Z17 \
	VPERMPS      Z18, Z16, Z16 \
	VPERMPS      Z18, Z17, Z17 \
	VMULPS       Z20, Z16, Z16 \
	VFMADD231PS  Z21, Z17, Z16 \
	VADDPS       Z16, acc, acc

// One Q4_1 block at o(r) (f16 d, f16 m, 16 bytes of nibbles).
#define Q41B(r, o, acc) \
	MOVL         o(r), AX \
	MOVWLZX      AX, BX \
	SHRL         $16, AX \
	VMULPS.BCST  (R15)(BX*4), Z29, Z18 \
	VADDPS.BCST  (R15)(AX*4), Z18, Z18 \
	NIBLUT((o+4)(r), acc)

// One Q4_1 row: the block at r, prefetch, next block.
#define Q41ROW(r, acc, pf) \
	Q41B(r, 0, acc) \
	PREFETCHT0   pf(r) \
	ADDQ         $20, r

// One block of the four rows for the 4-bit kernels: x's halves loaded,
// ROW applied to each row.
#define NIBSTEP(ROW, a0, a1, a2, a3) \
	XLOAD(0) \
	ROW(R8, a0, PFQ4) \
	ROW(R9, a1, PFQ4) \
	ROW(R10, a2, PFQ4) \
	ROW(R11, a3, PFQ4) \
	ADDQ $128, SI

#define Q41STEP(a0, a1, a2, a3) NIBSTEP(Q41ROW, a0, a1, a2, a3)

// The level constants of NIBLUT: Z29 = 0..15, Z28 = −8..7 (float32).
DATA nibLevels<>+0(SB)/4, $0.0
DATA nibLevels<>+4(SB)/4, $1.0
DATA nibLevels<>+8(SB)/4, $2.0
DATA nibLevels<>+12(SB)/4, $3.0
DATA nibLevels<>+16(SB)/4, $4.0
DATA nibLevels<>+20(SB)/4, $5.0
DATA nibLevels<>+24(SB)/4, $6.0
DATA nibLevels<>+28(SB)/4, $7.0
DATA nibLevels<>+32(SB)/4, $8.0
DATA nibLevels<>+36(SB)/4, $9.0
DATA nibLevels<>+40(SB)/4, $10.0
DATA nibLevels<>+44(SB)/4, $11.0
DATA nibLevels<>+48(SB)/4, $12.0
DATA nibLevels<>+52(SB)/4, $13.0
DATA nibLevels<>+56(SB)/4, $14.0
DATA nibLevels<>+60(SB)/4, $15.0
GLOBL nibLevels<>(SB), RODATA|NOPTR, $64

#define NIBCONST \
	VMOVUPS      nibLevels<>(SB), Z29 \
	MOVL         $0x41000000, AX \
	VPBROADCASTD AX, Z28 \
	VSUBPS       Z28, Z29, Z28

// func qdotQ41Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// xs is unused.
TEXT ·qdotQ41Z(SB), NOSPLIT, $0-64
	QSETUP
	NIBCONST
	QRUN4(q41group, q41, q41tail, q41end, q41done, Q41STEP)

// One Q4_0 block at o(r) (f16 d, 16 bytes of nibbles).
#define Q40B(r, o, acc) \
	MOVWLZX      o(r), AX \
	VMULPS.BCST  (R15)(AX*4), Z28, Z18 \
	NIBLUT((o+2)(r), acc)

#define Q40ROW(r, acc, pf) \
	Q40B(r, 0, acc) \
	PREFETCHT0   pf(r) \
	ADDQ         $18, r

#define Q40STEP(a0, a1, a2, a3) NIBSTEP(Q40ROW, a0, a1, a2, a3)

// func qdotQ40Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// xs is unused.
TEXT ·qdotQ40Z(SB), NOSPLIT, $0-64
	QSETUP
	NIBCONST
	QRUN4(q40group, q40, q40tail, q40end, q40done, Q40STEP)

// One Q8_0 block at o(r) (f16 d, 32 int8).
#define Q80B(r, o, acc) \
	VPMOVSXBD    (o+2)(r), Z16 \
	VPMOVSXBD    (o+18)(r), Z17 \
	VCVTDQ2PS    Z16, Z16 \
	VCVTDQ2PS    Z17, Z17 \
	VMULPS       Z20, Z16, Z16 \
	VFMADD231PS  Z21, Z17, Z16 \
	MOVWLZX      o(r), AX \
	VFMADD231PS.BCST (R15)(AX*4), Z16, acc

#define Q80ROW(r, acc, pf) \
	Q80B(r, 0, acc) \
	PREFETCHT0   pf(r) \
	ADDQ         $34, r

#define Q80STEP(a0, a1, a2, a3) \
	XLOAD(0) \
	Q80ROW(R8, a0, PFQ8) \
	Q80ROW(R9, a1, PFQ8) \
	Q80ROW(R10, a2, PFQ8) \
	Q80ROW(R11, a3, PFQ8) \
	ADDQ $128, SI

// func qdotQ80Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// xs is unused.
TEXT ·qdotQ80Z(SB), NOSPLIT, $0-64
	QSETUP
	QRUN4(q80group, q80, q80tail, q80end, q80done, Q80STEP)

// Q4_K (super-blocks of 256 values, 144 bytes: d, dmin, 12 bytes of 6-bit
// sub-block scales and mins, 128 bytes of nibbles; value = d·sc·q −
// dmin·m per 32-value sub-block). Per super-block of a row: the scales
// and mins are unpacked with vector integer ops into 16 floats on the
// stack (sc 0..7 at 0(SP), m 0..7 at 32(SP)); each 64 values (32 bytes:
// low nibbles sub-block 2j, high 2j+1) are dotted with x (read from
// memory) and added with their scale into Z18; then acc += d·Z18 and
// accm −= dmin·Σ m·(sub-block sums of x, prep at DI).
//
// Constants: Z31 = 15, X29 = 0x3f bytes, X28 = dword shifts [0,4,0,4],
// X27 = 0x0f bytes, X26 = 0x03 bytes.
// End a K-quant super-block of row r (size bytes): acc += d·Z18 (d, f16
// at doff), prefetch (PF(r)), next super-block.
#define KEND(r, doff, acc, size, PF) \
	MOVWLZX          doff(r), AX \
	VFMADD231PS.BCST (R15)(AX*4), Z18, acc \
	PF(r) \
	ADDQ             $size, r

// The K-quant prefetches: the lockstep kernels' PFQ8 ahead, the row-order
// ones' pf (DX) ahead.
#define KPF3(r) \
	PREFETCHT0       PFQ8(r) \
	PREFETCHT0       PFQ8+64(r) \
	PREFETCHT0       PFQ8+128(r)

#define KPF4(r) \
	KPF3(r) \
	PREFETCHT0       PFQ8+192(r)

// A super-block is 144 (Q4_K), 176 (Q5_K) or 210 (Q6_K) bytes: the
// kernels prefetch each of its lines (with one a super-block,
// the rest left to the hardware prefetcher, Q6_K streamed 11 GB/s from
// memory, a third of what it does from L2: BenchmarkQuantBound).
#define KPFR3(r) \
	PREFETCHT0       (r)(DX*1) \
	PREFETCHT0       64(r)(DX*1) \
	PREFETCHT0       128(r)(DX*1)

#define KPFR4(r) \
	KPFR3(r) \
	PREFETCHT0       192(r)(DX*1)

// One super-block of the four rows: ROW on each (its accumulators: Z0..Z3
// and, as ymm, Y4..Y7), then x and the prep (prepBytes a super-block)
// advanced.
#define KSTEP(ROW, prepBytes, PF) \
	ROW(R8, Z0, Y4, PF) \
	ROW(R9, Z1, Y5, PF) \
	ROW(R10, Z2, Y6, PF) \
	ROW(R11, Z3, Y7, PF) \
	ADDQ $1024, SI \
	ADDQ $prepBytes, DI

// The 64 values j of a Q4_K (qs at 16) or Q5_K (qs at 48, FIFTH adds
// the fifth bits) super-block: low nibbles sub-block 2j (Z16: values
// 0..15, Z19: 16..31), high ones 2j+1 (Z17, Z21).
#define K45CHUNK(r, j, qs, FIFTH) \
	K45INTS(r, j, qs, FIFTH) \
	VMULPS           (256*j)(SI), Z16, Z16 \
	VFMADD231PS      (256*j+64)(SI), Z19, Z16 \
	VMULPS           (256*j+128)(SI), Z17, Z17 \
	VFMADD231PS      (256*j+192)(SI), Z21, Z17 \
	VFMADD231PS.BCST (8*j)(SP), Z16, Z18 \
	VFMADD231PS.BCST (8*j+4)(SP), Z17, Z23

// The 64 values j as float32 in Z16, Z19 (sub-block 2j) and Z17, Z21
// (2j+1).
#define K45INTS(r, j, qs, FIFTH) \
	NIB((qs+32*j)(r), Z16, Z17) \
	NIB((qs+16+32*j)(r), Z19, Z21) \
	FIFTH(r, j) \
	VCVTDQ2PS        Z16, Z16 \
	VCVTDQ2PS        Z17, Z17 \
	VCVTDQ2PS        Z19, Z19 \
	VCVTDQ2PS        Z21, Z21

#define NOFIFTH(r, j)

// Bit s of the qh bytes at src (as dwords), moved to bit 4, into dst.
#define QHBIT(src, s, dst) \
	VPMOVZXBD        src, Z22 \
	VPSRLD           $(s), Z22, Z22 \
	VPSLLD           $4, Z22, Z22 \
	VPANDD           Z30, Z22, Z22 \
	VPORD            Z22, dst, dst

// Q5_K's fifth bits of the 64 values j: bit 2j of qh (16 bytes at 16)
// for sub-block 2j, bit 2j+1 for 2j+1.
#define Q5FIFTH(r, j) \
	QHBIT(16(r), 2*j, Z16) \
	QHBIT(32(r), 2*j, Z19) \
	QHBIT(16(r), 2*j+1, Z17) \
	QHBIT(32(r), 2*j+1, Z21)

// Z17 = the 8 sub-block scales then the 8 mins of the Q4_K/Q5_K
// super-block at r, as float32 (6-bit fields of its 12 scale bytes).
#define KSCALES(r) \
	VMOVDQU32        4(r), X16 \
	VPANDD           X29, X16, X17 \
	VPSHUFD          $0xaa, X16, X18 \
	VPSRLVD          X28, X18, X18 \
	VPANDD           X27, X18, X18 \
	VPSRLD           $6, X16, X19 \
	VPANDD           X26, X19, X19 \
	VPSLLD           $4, X19, X19 \
	VPORD            X19, X18, X18 \
	VPUNPCKLDQ       X18, X17, X17 \
	VPMOVZXBD        X17, Z17 \
	VCVTDQ2PS        Z17, Z17

// One super-block of a Q4_K or Q5_K row (qs: offset of the nibbles,
// FIFTH: the fifth bits, size: bytes).
#define K45ROW(r, acc, accmy, qs, FIFTH, size, pf) \
	KSCALES(r) \
	VMOVUPS          Z17, (SP) \
	VEXTRACTF64X4    $1, Z17, Y18 \
	VMULPS           (DI), Y18, Y18 \
	MOVWLZX          2(r), BX \
	VFNMADD231PS.BCST (R15)(BX*4), Y18, accmy \
	VPXORD           Z18, Z18, Z18 \
	VPXORD           Z23, Z23, Z23 \
	K45CHUNK(r, 0, qs, FIFTH) \
	K45CHUNK(r, 1, qs, FIFTH) \
	K45CHUNK(r, 2, qs, FIFTH) \
	K45CHUNK(r, 3, qs, FIFTH) \
	VADDPS           Z23, Z18, Z18 \
	KEND(r, 0, acc, size, pf)

#define Q4KROW(r, acc, accmy, pf) K45ROW(r, acc, accmy, 16, NOFIFTH, 144, pf)
#define Q5KROW(r, acc, accmy, pf) K45ROW(r, acc, accmy, 48, Q5FIFTH, 176, pf)

#define Q4KSTEP KSTEP(Q4KROW, 32, KPF3)
#define Q5KSTEP KSTEP(Q5KROW, 32, KPF3)

#define K45SETUP \
	QSETUP \
	K45CONST

#define K45CONST \
	MOVL $0x3f3f3f3f, AX \
	VPBROADCASTD AX, X29 \
	MOVQ $0x0000000400000000, AX \
	VMOVQ AX, X28 \
	VPBROADCASTQ X28, X28 \
	MOVL $0x0f0f0f0f, AX \
	VPBROADCASTD AX, X27 \
	MOVL $0x03030303, AX \
	VPBROADCASTD AX, X26

// func qdotQ4KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// nb super-blocks; xs holds per super-block the 8 sums of x over its
// 32-value sub-blocks.
TEXT ·qdotQ4KZ(SB), NOSPLIT, $64-64
	K45SETUP
	QRUN(q4kgroup, q4k, q4kdone, Q4KSTEP)

// func qdotQ5KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// As qdotQ4KZ.
TEXT ·qdotQ5KZ(SB), NOSPLIT, $64-64
	K45SETUP
	MOVL $16, AX
	VPBROADCASTD AX, Z30
	QRUN(q5kgroup, q5k, q5kdone, Q5KSTEP)

// Q6_K (super-blocks of 256 values, 210 bytes: ql 128, qh 64, 16 int8
// scales, f16 d; value = d·sc·(q − 32) per 16-value group). Per
// super-block of a row: the 16 scales as floats on the stack (0(SP)) and
// Z18 = scales ⊙ prep (prep, at DI: −32 × the sums of x over the 16-value
// groups); each zmm of 16 six-bit values (low 4 bits from ql, high 2 from
// qh) is multiplied by x and added into Z18 with its group's scale; then
// acc += d·Z18. Constants: Z31 = 15, Z25 = 0x30.
// The 16 values in dst times x[off:], into Z18 with scale s.
#define Q6KQ(dst, off, s, acc) \
	VCVTDQ2PS        dst, dst \
	VMULPS           (4*(off))(SI), dst, dst \
	VFMADD231PS.BCST (4*(s))(SP), dst, acc

// One 64-value part (n: 128-value half, h: 16-value quarter of it): its
// four zmm of six-bit values, each passed to USE(dst, x offset, scale).
#define Q6KPART(r, n, h, USE) \
	VPMOVZXBD        (64*n+16*h)(r), Z16 \
	VPMOVZXBD        (64*n+32+16*h)(r), Z17 \
	VPMOVZXBD        (128+32*n+16*h)(r), Z19 \
	VPANDD           Z31, Z16, Z21 \
	VPSLLD           $4, Z19, Z22 \
	VPANDD           Z25, Z22, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+16*h, 8*n+h, Z18) \
	VPANDD           Z31, Z17, Z21 \
	VPSLLD           $2, Z19, Z22 \
	VPANDD           Z25, Z22, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+32+16*h, 8*n+2+h, Z23) \
	VPSRLD           $4, Z16, Z21 \
	VPANDD           Z25, Z19, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+64+16*h, 8*n+4+h, Z12) \
	VPSRLD           $4, Z17, Z21 \
	VPSRLD           $2, Z19, Z22 \
	VPANDD           Z25, Z22, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+96+16*h, 8*n+6+h, Z13)

#define Q6KROW(r, acc, unused, pf) \
	VPMOVSXBD        192(r), Z20 \
	VCVTDQ2PS        Z20, Z20 \
	VMOVUPS          Z20, (SP) \
	VMULPS           (DI), Z20, Z18 \
	VPXORD           Z23, Z23, Z23 \
	VPXORD           Z12, Z12, Z12 \
	VPXORD           Z13, Z13, Z13 \
	Q6KPART(r, 0, 0, Q6KQ) \
	Q6KPART(r, 0, 1, Q6KQ) \
	Q6KPART(r, 1, 0, Q6KQ) \
	Q6KPART(r, 1, 1, Q6KQ) \
	VADDPS           Z23, Z18, Z18 \
	VADDPS           Z13, Z12, Z12 \
	VADDPS           Z12, Z18, Z18 \
	KEND(r, 208, acc, 210, pf)

#define Q6KSTEP KSTEP(Q6KROW, 64, KPF4)

// func qdotQ6KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// nb super-blocks; xs holds per super-block −32 × the 16 sums of x over
// its 16-value groups.
TEXT ·qdotQ6KZ(SB), NOSPLIT, $64-64
	QSETUP
	MOVL $0x30, AX
	VPBROADCASTD AX, Z25
	QRUN(q6kgroup, q6k, q6kdone, Q6KSTEP)

// Dequantisation of whole rows (prefill and training widen weights with
// it): each block's integers widened in registers and scaled exactly as
// DequantRow's Go code does (a product rounded to float32, then Q4_1's
// offset added: no fused multiply-add), so the values are bit-identical.

// func dequantQ41Z(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ41Z(SB), NOSPLIT, $0-32
	DQSETUP
	DQRUN(dq41, dq41done, DQ41WIDEN, DQ41POST, 20)

// func dequantQ40Z(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ40Z(SB), NOSPLIT, $0-32
	DQSETUP
	MOVL $8, AX
	VPBROADCASTD AX, Z30
	DQRUN(dq40, dq40done, DQ40WIDEN, DQNONE, 18)

// func dequantQ80Z(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ80Z(SB), NOSPLIT, $0-32
	DQSETUP
	DQRUN(dq80, dq80done, DQ80WIDEN, DQNONE, 34)

// func dequantQ4KZ(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ4KZ(SB), NOSPLIT, $64-32
	DQSETUP
	K45CONST
	DQK45(dq4k, dq4kdone, 16, NOFIFTH, 144)

// func dequantQ5KZ(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ5KZ(SB), NOSPLIT, $64-32
	DQSETUP
	K45CONST
	MOVL $16, AX
	VPBROADCASTD AX, Z30
	DQK45(dq5k, dq5kdone, 48, Q5FIFTH, 176)

// func dequantQ6KZ(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ6KZ(SB), NOSPLIT, $64-32
	DQSETUP
	MOVL $0x30, AX
	VPBROADCASTD AX, Z25
	MOVL $32, AX
	VPBROADCASTD AX, Z24
dq6k:
	TESTQ CX, CX
	JZ    dq6kdone
	VPMOVSXBD        192(SI), Z20
	VCVTDQ2PS        Z20, Z20
	MOVWLZX          208(SI), AX
	VMULPS.BCST      (R15)(AX*4), Z20, Z20
	VMOVUPS          Z20, (SP)
	Q6KPART(SI, 0, 0, Q6KDQ)
	Q6KPART(SI, 0, 1, Q6KDQ)
	Q6KPART(SI, 1, 0, Q6KDQ)
	Q6KPART(SI, 1, 1, Q6KDQ)
	ADDQ             $210, SI
	ADDQ             $1024, DI
	DECQ             CX
	JMP              dq6k
dq6kdone:
	VZEROUPPER
	RET

// Row-order kernels (QRUNR4, QRUNR): the same arguments and results as
// their *Z twins. One K-quant super-block of one row, x and prep advanced:
#define KSTEP1(ROW, prepBytes, PF, r, acc, accmy) \
	ROW(r, acc, accmy, PF) \
	ADDQ $1024, SI \
	ADDQ $prepBytes, DI

#define Q4KSTEP1(r, acc, accmy) KSTEP1(Q4KROW, 32, KPFR3, r, acc, accmy)
#define Q5KSTEP1(r, acc, accmy) KSTEP1(Q5KROW, 32, KPFR3, r, acc, accmy)
#define Q6KSTEP1(r, acc, accmy) KSTEP1(Q6KROW, 64, KPFR4, r, acc, accmy)

// func qdotQ41R(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ41R(SB), NOSPLIT, $0-72
	QSETUP
	NIBCONST
	QRUNR4(q41rg, q41rdone, q41ra0, q41rt0, q41re0, q41ra1, q41rt1, q41re1, q41ra2, q41rt2, q41re2, q41ra3, q41rt3, q41re3, Q41B, 20, PF1)

// func qdotQ40R(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ40R(SB), NOSPLIT, $0-72
	QSETUP
	NIBCONST
	QRUNR4(q40rg, q40rdone, q40ra0, q40rt0, q40re0, q40ra1, q40rt1, q40re1, q40ra2, q40rt2, q40re2, q40ra3, q40rt3, q40re3, Q40B, 18, PF1)

// func qdotQ80R(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ80R(SB), NOSPLIT, $0-72
	QSETUP
	QRUNR4(q80rg, q80rdone, q80ra0, q80rt0, q80re0, q80ra1, q80rt1, q80re1, q80ra2, q80rt2, q80re2, q80ra3, q80rt3, q80re3, Q80B, 34, PF2)

// func qdotQ4KR(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ4KR(SB), NOSPLIT, $64-72
	K45SETUP
	QRUNR(q4krg, q4kr0, q4kr1, q4kr2, q4kr3, q4krdone, Q4KSTEP1, Y4, Y5, Y6, Y7)

// func qdotQ5KR(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ5KR(SB), NOSPLIT, $64-72
	K45SETUP
	MOVL $16, AX
	VPBROADCASTD AX, Z30
	QRUNR(q5krg, q5kr0, q5kr1, q5kr2, q5kr3, q5krdone, Q5KSTEP1, Y4, Y5, Y6, Y7)

// func qdotQ6KR(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ6KR(SB), NOSPLIT, $64-72
	QSETUP
	MOVL $0x30, AX
	VPBROADCASTD AX, Z25
	QRUNR(q6krg, q6kr0, q6kr1, q6kr2, q6kr3, q6krdone, Q6KSTEP1, Y4, Y5, Y6, Y7)

// Repacked 4-bit kernels (qdotQ41X, qdotQ40X; Q4_1x4, Q4_0x4): the weights
// in Repack4's layout, where a block of four rows is 64 bytes of nibbles —
// dword i holds byte i of each row's 16, row j in byte j — then the four
// rows' f16 scales (Q4_1: d, m per row; Q4_0: d). One load (Z24) thus
// holds the indices of all four rows: shifted right by 8j, row j's values
// 0..15 in the low nibbles of the lanes, by 8j+4 its values 16..31
// (VPERMPS reads only the low four bits of each lane). A block of the four
// rows costs one nibble load, x's halves (shared by the rows) and two
// scale loads, and per row a lookup table, two shifts (one for row 0), two
// VPERMPS and two FMAs straight into the accumulators (Z0..Z3: the rows'
// low halves, Z4..Z7: the high ones): 13 loads where the row-order kernels
// take 24. On Zen 5 the loads, more than the arithmetic, set the pace —
// four unaligned nibble loads (one per row) instead of the shifts by 8j
// streamed a sixth slower from L2, and the scale lookups alone cost a
// third of the time — and in BenchmarkQuantRepack4 the repacked kernel
// streams about 1.2x faster than qdotQ41R from memory, 1.45x from L2.
// Q4_1's table is one FMA, l·d + m: l·d is exact in float32 (a 4-bit
// integer times an 11-bit f16 significand), so the fused add rounds as
// DequantRow's float32(l·d) + m does and the values stay bit-identical to
// it.

// Row j of a repacked block: its 32 values from the table in Z18 and the
// nibbles in Z24, into Z16 (values 0..15) and Z17 (16..31), passed to
// USE(a, b).
#define XVALS(j, USE, a, b) \
	VPSRLD           $(8*j), Z24, Z16 \
	VPSRLD           $(8*j+4), Z24, Z17 \
	VPERMPS          Z18, Z16, Z16 \
	VPERMPS          Z18, Z17, Z17 \
	USE(a, b)

// XVALS of row 0, whose low nibbles need no shift.
#define XVALS0(j, USE, a, b) \
	VPSRLD           $4, Z24, Z17 \
	VPERMPS          Z18, Z24, Z16 \
	VPERMPS          Z18, Z17, Z17 \
	USE(a, b)

// Dot: a += the low half's products with x (Z20), b += the high half's
// (Z21).
#define XDOT(a, b) \
	VFMADD231PS      Z20, Z16, a \
	VFMADD231PS      Z21, Z17, b

// Dequantise: the values to a (0..15) and b (16..31).
#define XSTORE(a, b) \
	VMOVUPS          Z16, a \
	VMOVUPS          Z17, b

// Row j of a repacked Q4_1 block: table l·d + m (d, m: the f16 pair in
// the low 32 bits of s, widened by f16Table), then XVALS. Widening the
// block's eight scales with one VCVTPH2PS and broadcasting them with
// VPERMPS streamed slower (BenchmarkQuantRepack4, L2: 1.09x qdotQ41R
// against 1.40x; d by VPERMPS, m from the table: 1.21x): the shuffles
// cost more than the loads.
#define X41ROW(s, VALS, j, USE, a, b) \
	MOVWLZX          s, BX \
	MOVL             s, R9 \
	SHRL             $16, R9 \
	VBROADCASTSS     (R15)(BX*4), Z18 \
	VFMADD213PS.BCST (R15)(R9*4), Z29, Z18 \
	VALS(j, USE, a, b)

// The four rows of the repacked Q4_1 block at r (its scales at 64, read
// two rows at a time), row j's values to USE(aj, bj).
#define X41ROWS(r, USE, a0, b0, a1, b1, a2, b2, a3, b3) \
	VMOVDQU32        (r), Z24 \
	MOVQ             64(r), AX \
	MOVQ             72(r), DX \
	X41ROW(AX, XVALS0, 0, USE, a0, b0) \
	SHRQ             $32, AX \
	X41ROW(AX, XVALS, 1, USE, a1, b1) \
	X41ROW(DX, XVALS, 2, USE, a2, b2) \
	SHRQ             $32, DX \
	X41ROW(DX, XVALS, 3, USE, a3, b3)

// Row j of a repacked Q4_0 block: table (l − 8)·d (d: the f16 in the low
// 16 bits of AX), then XVALS.
#define X40ROW(VALS, j, USE, a, b) \
	MOVWLZX          AX, BX \
	VMULPS.BCST      (R15)(BX*4), Z28, Z18 \
	VALS(j, USE, a, b)

// The four rows of the repacked Q4_0 block at r (its scales at 64).
#define X40ROWS(r, USE, a0, b0, a1, b1, a2, b2, a3, b3) \
	VMOVDQU32        (r), Z24 \
	MOVQ             64(r), AX \
	X40ROW(XVALS0, 0, USE, a0, b0) \
	SHRQ             $16, AX \
	X40ROW(XVALS, 1, USE, a1, b1) \
	SHRQ             $16, AX \
	X40ROW(XVALS, 2, USE, a2, b2) \
	SHRQ             $16, AX \
	X40ROW(XVALS, 3, USE, a3, b3)

// The decode kernel's body: for each group of four rows (R12 of them, at
// R8), all nb blocks (size bytes each) against x, then out[0..3] = the
// rows' dots, out += 4; the next group starts where this one ended; a
// prefetch pf (R10) ahead per block (80 or 72 bytes: most lines, the
// hardware prefetcher takes the rest).
#define XRUN(grp, lp, done, ROWS, size) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	MOVQ  nb+0(FP), CX \
	MOVQ  R14, SI \
	ZEROZ \
lp: \
	VMOVUPS          (SI), Z20 \
	VMOVUPS          64(SI), Z21 \
	ROWS(R8, XDOT, Z0, Z4, Z1, Z5, Z2, Z6, Z3, Z7) \
	PREFETCHT0       (R8)(R10*1) \
	ADDQ             $size, R8 \
	ADDQ             $128, SI \
	DECQ             CX \
	JNZ              lp \
	VADDPS           Z4, Z0, Z0 \
	VADDPS           Z5, Z1, Z1 \
	VADDPS           Z6, Z2, Z2 \
	VADDPS           Z7, Z3, Z3 \
	MOVQ             R13, DI \
	RED4(Z0, Y0, X0, Z1, Y1, X1, Z2, Y2, X2, Z3, Y3, X3, 0) \
	ADDQ             $16, R13 \
	DECQ             R12 \
	JMP              grp \
done: \
	VZEROUPPER \
	RET

// func qdotQ41X(nb int, x *float32, w *byte, groups int, out *float32, tab *float32, pf int)
TEXT ·qdotQ41X(SB), NOSPLIT, $0-56
	XSETUP
	XRUN(x41g, x41, x41done, X41ROWS, 80)

// func qdotQ40X(nb int, x *float32, w *byte, groups int, out *float32, tab *float32, pf int)
TEXT ·qdotQ40X(SB), NOSPLIT, $0-56
	XSETUP
	XRUN(x40g, x40, x40done, X40ROWS, 72)

// Dequantisation of one group of four repacked rows (nb blocks): row j's
// values to dst + j·ldd bytes (DI; R12 = ldd, R13 = 3·ldd).
#define XDQRUN(lp, done, ROWS, size) \
	LEAQ (R12)(R12*2), R13 \
	NIBCONST \
	DQLOOP(lp, done, ROWS(R8, XSTORE, (DI), 64(DI), (DI)(R12*1), 64(DI)(R12*1), (DI)(R12*2), 64(DI)(R12*2), (DI)(R13*1), 64(DI)(R13*1)), R8, $size)

// func dequantQ41X(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ41X(SB), NOSPLIT, $0-40
	XDQSETUP
	XDQRUN(dx41, dx41done, X41ROWS, 80)

// func dequantQ40X(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ40X(SB), NOSPLIT, $0-40
	XDQSETUP
	XDQRUN(dx40, dx40done, X40ROWS, 72)
