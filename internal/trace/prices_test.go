package trace

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPricesCommand(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		db := dt.open(t)
		var out bytes.Buffer
		if err := PricesCommand([]string{"set", "--model", "gpt-4", "--prompt", "3e-05", "--completion", "6e-05", "--effective", "2024-01-01T00:00:00Z"}, db, &out); err != nil {
			t.Fatal(err)
		}
		// same model, provider and date: replaced, not duplicated
		if err := PricesCommand([]string{"set", "--model", "gpt-4", "--prompt", "3e-05", "--completion", "6e-05", "--effective", "2024-01-01T00:00:00Z"}, db, &out); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := PricesCommand([]string{"list"}, db, &out); err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "gpt-4") ||
			!strings.Contains(lines[1], "3e-05") || !strings.Contains(lines[1], "2024-01-01T00:00:00.000000Z") {
			t.Fatalf("prices list:\n%s", out.String())
		}
		for _, bad := range [][]string{nil, {"set", "--model", "x"}, {"frobnicate"}, {"set", "--model", "x", "--prompt", "1", "--completion", "1", "--effective", "soon"}} {
			if err := PricesCommand(bad, db, &out); err == nil {
				t.Errorf("PricesCommand(%v) succeeded", bad)
			}
		}
		// a service on the same database sees them (migrations are idempotent)
		if _, err := New(db, Options{}); err != nil {
			t.Fatal(err)
		}
		p, _ := DefaultPrices(t.Context(), db)
		if len(p) != 1 || p[0].PromptTokenCost != 3e-05 {
			t.Fatalf("DefaultPrices = %+v", p)
		}
	})
}

func TestPricesFile(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		dir := t.TempDir()
		obj := filepath.Join(dir, "prices.json")
		os.WriteFile(obj, []byte(`{"gpt-4": {"prompt_token_cost": 3e-05, "completion_token_cost": 6e-05},
			"gpt-4o": {"prompt_token_cost": 2.5e-06, "completion_token_cost": 1e-05, "provider_id": "openai", "effective_date": "2024-05-13T00:00:00Z"}}`), 0o644)
		arr := filepath.Join(dir, "prices-list.json")
		os.WriteFile(arr, []byte(`[{"model_id": "claude", "prompt_token_cost": 3e-06, "completion_token_cost": 1.5e-05}]`), 0o644)
		db := dt.open(t)
		svc, err := New(db, Options{PricesFile: obj})
		if err != nil {
			t.Fatal(err)
		}
		// loading again (a restart) changes nothing
		if _, err := New(db, Options{PricesFile: obj}); err != nil {
			t.Fatal(err)
		}
		if n, err := svc.LoadPricesFile(t.Context(), arr); err != nil || n != 1 {
			t.Fatalf("LoadPricesFile(array) = %d, %v", n, err)
		}
		prices, _ := DefaultPrices(t.Context(), db)
		if len(prices) != 3 {
			t.Fatalf("default prices = %d, want 3", len(prices))
		}
		for _, p := range prices {
			if p.LLMID == "gpt-4" && p.EffectiveDate != 0 {
				t.Errorf("no effective_date in the file should mean the epoch, got %s", formatTime(p.EffectiveDate))
			}
			if p.LLMID == "gpt-4o" && (p.ProviderID != "openai" || formatTime(p.EffectiveDate) != "2024-05-13T00:00:00.000000Z") {
				t.Errorf("gpt-4o price = %+v", p)
			}
		}
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, []byte(`{"gpt-4": {"prompt_token_cost": "cheap"}}`), 0o644)
		if _, err := New(db, Options{PricesFile: bad}); err == nil {
			t.Fatal("a bad prices file was accepted")
		}
		if _, err := New(db, Options{PricesFile: filepath.Join(dir, "missing.json")}); err == nil {
			t.Fatal("a missing prices file was accepted")
		}
		// SetDefaultPrice with a zero time takes effect now
		if err := svc.SetDefaultPrice(t.Context(), "new-model", 1, 2, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if err := svc.SetDefaultPrice(t.Context(), "", 1, 2, time.Time{}); err == nil {
			t.Fatal("empty model accepted")
		}
	})
}

func TestServedModels(t *testing.T) {
	s := &Service{opts: Options{BaseModels: []string{"Qwen/Qwen2.5-0.5B-Instruct"}}}
	for m, want := range map[string]bool{"Qwen/Qwen2.5-0.5B-Instruct": true, "alice/p/m": true, "alice/p/m:step12": true,
		"wandb-artifact:///alice/p/m:step3": true, "gpt-4": false, "openai/gpt-4": false, "alice/p/m:latest": false, "a//m": false} {
		if got := s.isServedModel(m); got != want {
			t.Errorf("isServedModel(%q) = %v, want %v", m, got, want)
		}
	}
}

func TestCLIPriceSeenByRunningService(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		id, _ := e.start("alice", startReqMap(nil))
		e.end("alice", map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:06Z", "summary": gpt4Usage})
		if _, has := platform(e.read("alice", proj, id, allFlags))["costs"]; has {
			t.Fatal("costs before any price")
		}
		// another process (the CLI) writes a default price into the same database
		if err := PricesCommand([]string{"set", "--model", "gpt-4", "--prompt", "3e-05", "--completion", "6e-05", "--effective", "2024-01-01T00:00:00Z"}, e.db, io.Discard); err != nil {
			t.Fatal(err)
		}
		time.Sleep(priceTTL + 100*time.Millisecond)
		costs, _ := platform(e.read("alice", proj, id, allFlags))["costs"].(map[string]any)
		if costs == nil || costs["gpt-4"].(map[string]any)["prompt_tokens_total_cost"] != 60.0 {
			t.Fatalf("CLI price not used after %s: %v", priceTTL, costs)
		}
	})
}
