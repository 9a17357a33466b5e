// Package hugemem allocates the large, long-lived buffers that decode
// streams from memory (model weights, the read-bandwidth probe) so that
// the kernel may back them with transparent huge pages.
//
// Batch-1 decode reads every weight once per token, so its speed is the
// machine's read bandwidth. On 4 KiB pages a 500 MB matrix stream crosses
// a page, and misses the TLB, every 4 KiB; on 2 MiB pages 512 times less
// often. On an AMD EPYC (Zen 5, 2 vCPUs) the all-core read probe streamed
// 41–42 GB/s from a plain Go slice and 48–49 GB/s from the same slice
// advised as huge pages (internal/engine/kernels BenchmarkReadBandwidth;
// see docs/benchmarks.md).
//
// Make returns ordinary Go memory (the garbage collector owns it, as any
// slice); on Linux the 2 MiB-aligned part of it is advised with
// madvise(MADV_HUGEPAGE) before it is first written, which is what the
// kernel's default THP mode ("madvise") waits for. Where the advice is
// refused (THP "never", another OS) the buffer is an ordinary slice.
package hugemem

import "unsafe"

// Threshold is the smallest buffer Make advises: smaller ones (norms,
// biases) would hold at most a huge page or two, not worth a system call.
const Threshold = 4 << 20

// HugePage is the size of the huge pages advised for (x86-64's 2 MiB).
const HugePage = 2 << 20

// Make returns a zeroed slice of n values, its 2 MiB-aligned interior
// advised for huge pages when it spans Threshold bytes or more. It must be
// called before the slice is written: pages already touched stay small.
func Make[T any](n int) []T {
	s := make([]T, n)
	if n == 0 {
		return s
	}
	var zero T
	size := uintptr(n) * unsafe.Sizeof(zero)
	if size < Threshold {
		return s
	}
	advise(unsafe.Pointer(&s[0]), size)
	return s
}

// alignedRange is the part [lo, hi) of [p, p+size) made of whole huge
// pages (lo == hi when there is none).
func alignedRange(p, size uintptr) (lo, hi uintptr) {
	lo = (p + HugePage - 1) &^ (HugePage - 1)
	hi = (p + size) &^ (HugePage - 1)
	if hi < lo {
		hi = lo
	}
	return lo, hi
}
