//go:build darwin || freebsd || linux || netbsd

package kernels

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ebitengine/purego"
)

func loadOpenBLAS() (ob *OpenBLAS, err error) {
	names := OpenBLASLibs
	if p := os.Getenv("FLYWHEEL_OPENBLAS"); p != "" {
		names = append([]string{p}, names...)
	}
	// OpenBLAS starts its thread pool when the library loads, and its idle
	// threads spin on sched_yield for a long while before they sleep (8% of
	// a 2-core machine's CPU during a decode benchmark), even when the
	// library then runs single-threaded (the default split mode) or is not
	// chosen at all. Unless the user set a count, it starts with one
	// thread; openblas_set_num_threads raises it for
	// FLYWHEEL_OPENBLAS_THREADS. (Read by the library's constructor through
	// the C environment, which os.Setenv updates in cgo builds.)
	if os.Getenv("OPENBLAS_NUM_THREADS") == "" && os.Getenv("OMP_NUM_THREADS") == "" {
		_ = os.Setenv("OPENBLAS_NUM_THREADS", "1")
	}
	var lib uintptr
	var path string
	var errs []string
	for _, name := range names {
		h, e := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if e == nil {
			lib, path = h, name
			break
		}
		errs = append(errs, e.Error())
	}
	if lib == 0 {
		return nil, fmt.Errorf("kernels: OpenBLAS not found (install libopenblas0-pthread): %s", strings.Join(errs, "; "))
	}
	defer func() {
		if r := recover(); r != nil {
			ob, err = nil, fmt.Errorf("kernels: OpenBLAS at %s unusable: %v", path, r)
		}
	}()
	sym, e := purego.Dlsym(lib, "cblas_sgemm")
	if e != nil {
		return nil, fmt.Errorf("kernels: %s has no cblas_sgemm: %v", path, e)
	}
	o := &OpenBLAS{path: path}
	purego.RegisterFunc(&o.sgemm, sym)
	if s, e := purego.Dlsym(lib, "openblas_set_num_threads"); e == nil {
		purego.RegisterFunc(&o.setThreads, s)
		o.threads = 1
		o.split = true
		if v, e := strconv.Atoi(os.Getenv("FLYWHEEL_OPENBLAS_THREADS")); e == nil && v > 1 {
			o.threads, o.split = v, false
		}
		o.setThreads(int32(o.threads))
	}
	if s, e := purego.Dlsym(lib, "openblas_get_corename"); e == nil {
		var get func() string
		purego.RegisterFunc(&get, s)
		o.core = strings.TrimSpace(get())
	}
	if s, e := purego.Dlsym(lib, "openblas_get_config"); e == nil {
		var get func() string
		purego.RegisterFunc(&get, s)
		o.config = strings.TrimSpace(get())
	}
	return o, nil
}
