package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/pgtest"
)

// TestPricesCommand runs `flywheel prices` as a user does: set (twice: the
// same model, provider and date is replaced, not duplicated), load, list,
// and the mistakes it refuses; on SQLite, and on PostgreSQL when
// FLYWHEEL_TEST_POSTGRES names a server.
func TestPricesCommand(t *testing.T) {
	stores := map[string][]string{"sqlite": {"--data-dir", t.TempDir()}}
	if os.Getenv("FLYWHEEL_TEST_POSTGRES") != "" {
		stores["postgres"] = []string{"--data-dir", t.TempDir(), "--database", pgtest.DSN(t)}
	}
	for name, data := range stores {
		t.Run(name, func(t *testing.T) {
			prices := func(args ...string) (string, int) {
				var out, errOut bytes.Buffer
				rc := run(append(append([]string{"prices"}, data...), args...), &out, &errOut)
				return out.String() + errOut.String(), rc
			}
			set := []string{"set", "--model", "gpt-4", "--prompt", "3e-05", "--completion", "6e-05", "--effective", "2024-01-01T00:00:00Z"}
			for range 2 {
				if out, rc := prices(set...); rc != 0 || out != "set default price for gpt-4: prompt 3e-05, completion 6e-05 USD/token, effective 2024-01-01T00:00:00.000000Z\n" {
					t.Fatalf("prices set: rc %d, %q", rc, out)
				}
			}
			file := filepath.Join(t.TempDir(), "prices.json")
			if err := os.WriteFile(file, []byte(`{"gpt-4o": {"prompt_token_cost": 2.5e-06, "completion_token_cost": 1e-05, "provider_id": "openai", "effective_date": "2024-05-13"}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, rc := prices("load", file); rc != 0 || out != "loaded 1 default prices from "+file+"\n" {
				t.Fatalf("prices load: rc %d, %q", rc, out)
			}
			out, rc := prices("list")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if rc != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "MODEL") {
				t.Fatalf("prices list: rc %d\n%s", rc, out)
			}
			for _, want := range [][]string{{"gpt-4 ", "3e-05", "6e-05", "USD", "default", "2024-01-01T00:00:00.000000Z"},
				{"gpt-4o", "2.5e-06", "1e-05", "openai", "2024-05-13T00:00:00.000000Z"}} {
				found := false
				for _, l := range lines[1:] {
					ok := true
					for _, w := range want {
						ok = ok && strings.Contains(l, w)
					}
					found = found || ok
				}
				if !found {
					t.Errorf("prices list has no line with %q:\n%s", want, out)
				}
			}
			for _, bad := range [][]string{nil, {"set", "--model", "x"}, {"frobnicate"}, {"load"},
				{"set", "--model", "x", "--prompt", "1", "--completion", "1", "--effective", "soon"}} {
				if out, rc := prices(bad...); rc == 0 {
					t.Errorf("prices %v succeeded: %s", bad, out)
				}
			}
		})
	}
}
