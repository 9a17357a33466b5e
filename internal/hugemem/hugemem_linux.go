package hugemem

import (
	"syscall"
	"unsafe"
)

// madvHugePage is MADV_HUGEPAGE (not in package syscall).
const madvHugePage = 14

func advise(p unsafe.Pointer, size uintptr) {
	lo, hi := alignedRange(uintptr(p), size)
	if hi == lo {
		return
	}
	// The advice is best effort: EINVAL where THP is compiled out.
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, madvHugePage)
}
