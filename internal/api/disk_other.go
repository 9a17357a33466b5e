//go:build !unix

package api

import "errors"

func freeBytes(string) (uint64, error) {
	return 0, errors.New("free space is not available on this platform")
}
