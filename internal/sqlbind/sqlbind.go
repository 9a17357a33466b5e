// Package sqlbind rewrites the placeholders of SQL written for SQLite (? and
// ?N) into PostgreSQL's ($N), so the store and the call store write each
// statement once for both databases.
package sqlbind

import (
	"strconv"
	"strings"
)

// Dollar rewrites SQLite placeholders as PostgreSQL's: ?N is $N, and a bare
// ? is one more than the largest number so far (SQLite's rule). Quoted text
// ('...', "...") is copied as is.
func Dollar(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 16)
	maxN := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch c {
		case '\'', '"':
			j := strings.IndexByte(q[i+1:], c)
			if j < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+j+2])
			i += j + 1
		case '?':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			n := maxN + 1
			if j > i+1 {
				n, _ = strconv.Atoi(q[i+1 : j])
			}
			maxN = max(maxN, n)
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
