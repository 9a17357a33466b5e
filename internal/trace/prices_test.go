package trace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDefaultPriceReplaced: a default price set twice for the same model,
// provider and date is one price, seen by a second service on the same
// database (as `flywheel prices set` writes it from another process).
func TestDefaultPriceReplaced(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		db := dt.open(t)
		svc, err := New(db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		eff := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		for range 2 {
			if err := svc.SetProviderPrice(t.Context(), "default", "gpt-4", 3e-05, 6e-05, eff); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := New(db, Options{}); err != nil {
			t.Fatal(err)
		}
		p, _ := DefaultPrices(t.Context(), db)
		if len(p) != 1 || p[0].PromptTokenCost != 3e-05 {
			t.Fatalf("DefaultPrices = %+v", p)
		}
		if pc, cc, et := p[0].Text(); pc != "3e-05" || cc != "6e-05" || et != "2024-01-01T00:00:00.000000Z" {
			t.Fatalf("Text() = %s %s %s", pc, cc, et)
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
		cli, err := New(e.db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.SetDefaultPrice(t.Context(), "gpt-4", 3e-05, 6e-05, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(priceTTL + 100*time.Millisecond)
		costs, _ := platform(e.read("alice", proj, id, allFlags))["costs"].(map[string]any)
		if costs == nil || costs["gpt-4"].(map[string]any)["prompt_tokens_total_cost"] != 60.0 {
			t.Fatalf("CLI price not used after %s: %v", priceTTL, costs)
		}
	})
}
