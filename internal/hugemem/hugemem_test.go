package hugemem

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

func TestAlignedRange(t *testing.T) {
	const M = HugePage
	for _, c := range []struct{ p, size, lo, hi uintptr }{
		{0, 3 * M, 0, 3 * M},
		{1, 3 * M, M, 3 * M},
		{M - 4096, 2 * M, M, 2 * M},
		{M + 1, M, 2 * M, 2 * M}, // no whole huge page
		{5 * M, 0, 5 * M, 5 * M},
	} {
		lo, hi := alignedRange(c.p, c.size)
		if lo != c.lo || hi != c.hi {
			t.Errorf("alignedRange(%#x, %#x) = [%#x, %#x), want [%#x, %#x)", c.p, c.size, lo, hi, c.lo, c.hi)
		}
	}
}

// vmFlags is the VmFlags line of the mapping of /proc/self/smaps that
// holds address a.
func vmFlags(t *testing.T, a uintptr) []string {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(strings.Fields(line)[0], "-") {
			in = lo <= a && a < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Fields(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	t.Fatalf("no mapping holds %#x", a)
	return nil
}

func has(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// On Linux with transparent huge pages, a large buffer's aligned interior
// is advised (its mapping carries the "hg" flag, MADV_HUGEPAGE), its
// values are zero and writable, and a small one is left alone.
func TestMakeAdvisesLargeBuffers(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("no transparent huge pages on this system")
	}
	big := Make[float32](3 * HugePage / 4) // 6 MiB: at least two whole huge pages
	lo, hi := alignedRange(uintptr(unsafe.Pointer(&big[0])), uintptr(len(big))*4)
	if hi-lo < HugePage {
		t.Fatalf("6 MiB buffer has %d bytes of whole huge pages", hi-lo)
	}
	for _, a := range []uintptr{lo, hi - 1} {
		if fl := vmFlags(t, a); !has(fl, "hg") {
			t.Errorf("mapping at %#x: VmFlags %v, want hg (MADV_HUGEPAGE)", a, fl)
		}
	}
	for i := range big {
		if big[i] != 0 {
			t.Fatalf("big[%d] = %v, want 0", i, big[i])
		}
		big[i] = 1
	}
	small := Make[byte](Threshold - 1)
	if len(small) != Threshold-1 || cap(small) != Threshold-1 {
		t.Fatalf("small: len %d cap %d", len(small), cap(small))
	}
	if got := Make[uint16](0); len(got) != 0 {
		t.Fatalf("Make(0) has %d values", len(got))
	}
}
