package engine

import (
	"unsafe"

	"flywheel/internal/hugemem"
)

// arena is the one buffer that holds a model's weight matrices, back to
// back, each starting 64-byte aligned. It is allocated with hugemem, so the
// kernel backs it with 2 MiB pages: batch-1 decode streams every matrix
// once per token, and per-matrix slices (most under 4 MiB, so on 4 KiB
// pages) cost it a TLB miss every 4 KiB. Interleaved in one process on an
// AMD EPYC (Zen 5, 2 vCPUs), the SmolLM2-135M shape decoded 4–5% (float32,
// BF16) and 6–9% (Q4_1) faster from one arena than from separate slices.
// Norms and biases (small) are not in it. The arena is ordinary Go memory:
// it lives while any of its matrices is referenced.
type arena struct {
	buf []byte
	off int
}

const arenaAlign = 64

// arenaBytes is the space a matrix of size bytes takes in an arena.
func arenaBytes(size int) int { return (size + arenaAlign - 1) &^ (arenaAlign - 1) }

// newArena allocates an arena of size bytes (a sum of arenaBytes).
func newArena(size int) *arena { return &arena{buf: hugemem.Make[byte](size)} }

// take returns the next n bytes (zero). An arena sized too small is a bug
// in its caller's sum, so it panics.
func (a *arena) take(n int) []byte {
	if a.off+n > len(a.buf) {
		panic("engine: weight arena too small")
	}
	b := a.buf[a.off : a.off+n : a.off+n]
	a.off += arenaBytes(n)
	return b
}

// mat returns a zeroed matrix of n values of like's type (float32, like's
// half type, or like's quantized type) from the arena.
func (a *arena) mat(like Mat, n int) Mat { return matOver(like, a.take(matBytes(like, n))) }

// matBytes is the bytes of n values of like's type.
func matBytes(like Mat, n int) int { return like.byteOff(n) }

// matOver views b (aligned for the type) as a matrix of like's type.
func matOver(like Mat, b []byte) Mat {
	switch like.kind() {
	case 2:
		return Mat{Quant: b, QuantType: like.QuantType}
	case 1:
		if len(b) == 0 {
			return Mat{Half: []uint16{}, HalfType: like.HalfType}
		}
		return Mat{Half: unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), HalfType: like.HalfType}
	}
	if len(b) == 0 {
		return Mat{F32: []float32{}}
	}
	return Mat{F32: unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)}
}

// arenaFor sizes an arena for the matrices mapMats would pass to its
// function, each taking size(m) bytes.
func (w *Weights) arenaFor(size func(Mat) int) *arena {
	total := 0
	w.mapMats(func(m Mat) Mat {
		total += arenaBytes(size(m))
		return m
	})
	return newArena(total)
}
