package trace

import "testing"

// Call-store projects are created on first use: their names refuse control
// and bidirectional-override characters like every other name.
func TestProjectIDRefusesControlCharacters(t *testing.T) {
	for _, bad := range []string{"alice/p\u0000x", "alice/p\u0007x", "alice/p\u202ex", "ali\u2066ce/p"} {
		if _, _, err := splitProjectID(bad, "project_id"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if e, p, err := splitProjectID("alice/évals", "project_id"); err != nil || e != "alice" || p != "évals" {
		t.Errorf("valid id: %q %q %v", e, p, err)
	}
}
