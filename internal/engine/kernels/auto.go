package kernels

import (
	"log/slog"
	"os"
	"strings"
)

// EnvKernels names the environment variable that forces a backend:
// "go", "openblas" or "naive". Unset or "auto" means Auto's choice.
const EnvKernels = "FLYWHEEL_KERNELS"

// Auto picks a backend: the one FLYWHEEL_KERNELS names, else OpenBLAS when
// its shared library loads and runs vector kernels at least as wide as the
// Go backend's (an OpenBLAS that fell back to SSE-era kernels on an AVX2
// machine is passed over, with a log line), else the Go backend. When
// FLYWHEEL_KERNELS=openblas but the library cannot be loaded, it logs a
// warning and returns Go.
func Auto() Backend {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvKernels))); v {
	case "go":
		return Go{}
	case "naive":
		return Naive{}
	case "openblas":
		ob, err := LoadOpenBLAS()
		if err != nil {
			slog.Warn("kernels: "+EnvKernels+"=openblas but OpenBLAS is unavailable; using go", "err", err)
			return Go{}
		}
		return ob
	case "", "auto":
	default:
		slog.Warn("kernels: unknown "+EnvKernels+" value; choosing automatically", "value", v)
	}
	if ob, err := LoadOpenBLAS(); err == nil {
		if !haveAVX2 || ob.vectorCore() {
			return ob
		}
		slog.Info("kernels: OpenBLAS runs "+ob.Core()+" kernels on this CPU; using the Go backend (set "+EnvKernels+"=openblas to override)", "openblas", ob.Path())
	}
	return Go{}
}

// Describe returns a one-line description of a backend for logs and
// /v1/system-check style reports, e.g. "go (avx512, 2 threads)".
func Describe(b Backend) string {
	switch v := b.(type) {
	case Go:
		simd := "pure-go"
		if haveAVX512 && haveAVX2 {
			simd = "avx512"
		} else if haveAVX2 {
			simd = "avx2+fma"
		}
		return "go (" + simd + ", " + itoa(workers()) + " threads)"
	case *OpenBLAS:
		s := "openblas (" + v.Path()
		if v.split {
			s += ", 1 thread x " + itoa(workers()) + " goroutines"
		} else if v.Threads() > 0 {
			s += ", " + itoa(v.Threads()) + " threads"
		}
		if v.Config() != "" {
			s += ", " + v.Config()
		}
		return s + ")"
	}
	return b.Name()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}
