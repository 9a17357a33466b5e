//go:build !(darwin || freebsd || linux || netbsd)

package kernels

import "errors"

func loadOpenBLAS() (*OpenBLAS, error) {
	return nil, errors.New("kernels: OpenBLAS loading is not supported on this OS")
}
