package sqlbind

import "testing"

func TestDollar(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT ? , ?`, `SELECT $1 , $2`},
		{`WHERE a = ?1 AND b = ?2 OR c = ?1 LIMIT ?`, `WHERE a = $1 AND b = $2 OR c = $1 LIMIT $3`},
		{`x LIKE ? ESCAPE '\' AND y = '?' AND "q?" = ?`, `x LIKE $1 ESCAPE '\' AND y = '?' AND "q?" = $2`},
		{`?10 ?`, `$10 $11`},
	} {
		if got := Dollar(c.in); got != c.want {
			t.Errorf("Dollar(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
