// Package cputime reads the CPU time this process has used (user + system,
// all threads). Tests and benchmarks measure with it where wall time is at
// the mercy of other work on the machine: on a shared 2-core machine at load
// 20 a render or a benchmark's wall time grows tenfold, its CPU time does not.
package cputime

import "time"

// Process returns the user+system CPU time this process has used, and
// false where the platform does not report it.
func Process() (time.Duration, bool) { return process() }

// Used is Process without the flag: 0 where the platform does not report
// CPU time (figures derived from it then read as zero or infinite, which a
// benchmark's reader sees at once).
func Used() time.Duration {
	d, _ := process()
	return d
}
