//go:build unix

package kernels

import "syscall"

// cpuSeconds is the process's user+system CPU time: on a shared machine it
// moves far less with the neighbours' load than wall time does.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
