package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"flywheel/internal/demo"
	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/tiny"
)

// firstLogprob is the log-probability of the first token model samples
// greedily for a fixed chat prompt.
func (c client) firstLogprob(model string) float64 {
	c.t.Helper()
	var r struct {
		Choices []struct {
			Logprobs struct {
				Content []struct{ Logprob float64 }
			}
		}
	}
	c.must("POST", "/v1/chat/completions", map[string]any{"model": model, "max_tokens": 1, "temperature": 0, "logprobs": true,
		"messages": []any{map[string]any{"role": "user", "content": "What is the password?"}}}, &r)
	if len(r.Choices) != 1 || len(r.Choices[0].Logprobs.Content) != 1 {
		c.t.Fatalf("%s: no logprobs: %+v", model, r)
	}
	return r.Choices[0].Logprobs.Content[0].Logprob
}

// A GGUF file in the models dir is a base model like a safetensors folder:
// flywheel/tiny written as a Q8_0 GGUF file (as llama.cpp's converter lays
// it out) is listed under its file name, serves chat completions, and
// models created on it train with an RL job and an SFT job (LoRA over the
// frozen quantized base), publish checkpoints whose sampling (":step{N}")
// differs from step 0, and keep their adapters as PEFT files naming the
// GGUF base.
func TestGGUFBaseOverHTTP(t *testing.T) {
	dir := t.TempDir()
	const base = "tiny.Q8_0.gguf"
	if err := tiny.WriteGGUF(filepath.Join(dir, "models", base), tiny.DefaultSpec(), gguf.Q8_0); err != nil {
		t.Fatal(err)
	}
	url, key := serverIn(t, dir)
	c := client{t, url, key}
	var models struct{ Data []struct{ ID string } }
	c.must("GET", "/v1/models", nil, &models)
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Contains(ids, base) {
		t.Fatalf("/v1/models lists %v, not %s", ids, base)
	}
	c.firstLogprob(base)

	// RL: two jobs through the demo client.
	var out bytes.Buffer
	res, err := demo.RunConfig(t.Context(), demo.Config{URL: url, APIKey: key, Project: "gguf", Name: "rl", BaseModel: base,
		Steps: 2, Groups: 2, PerGroup: 4, MaxTokens: 4, Temperature: 1, Target: 'e', Seed: 1}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var m struct {
		Entity, Project, Name string
		BaseModel             string `json:"base_model"`
	}
	c.must("GET", "/v1/preview/models/"+res.ModelID, nil, &m)
	if m.BaseModel != base {
		t.Errorf("model's base_model %q", m.BaseModel)
	}
	rlName := m.Entity + "/" + m.Project + "/" + m.Name
	if a, b := c.firstLogprob(rlName+":step0"), c.firstLogprob(rlName+":step2"); a == b {
		t.Errorf("RL: step 2 samples as step 0 (first-token logprob %v)", a)
	}

	// SFT: one job of 8 steps.
	code, file, raw := c.upload("fine-tune", sftData())
	if code != 200 {
		t.Fatalf("upload: %d %s", code, raw)
	}
	var sm struct{ ID, Entity, Project, Name string }
	c.must("POST", "/v1/preview/models", map[string]any{"project": "gguf", "name": "sft", "base_model": base}, &sm)
	jr := c.follow(c.sftJob(sm.ID, file, nil, map[string]any{"seed": 1}))
	if len(jr.Losses) == 0 || !(jr.Losses[len(jr.Losses)-1] < jr.Losses[0]) {
		t.Errorf("SFT losses %v: not falling", jr.Losses)
	}
	sftName := sm.Entity + "/" + sm.Project + "/" + sm.Name
	if a, b := c.firstLogprob(sftName+":step0"), c.firstLogprob(sftName+":step1"); a == b {
		t.Errorf("SFT: step 1 samples as step 0 (first-token logprob %v)", a)
	}

	// The checkpoints' adapters are PEFT files naming the GGUF base.
	var found int
	filepath.WalkDir(filepath.Join(dir, "data"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "adapter_config.json" {
			return nil
		}
		b, _ := os.ReadFile(p)
		var cfg struct {
			Base string `json:"base_model_name_or_path"`
			Type string `json:"peft_type"`
		}
		if json.Unmarshal(b, &cfg) != nil || cfg.Base != base || cfg.Type != "LORA" {
			t.Errorf("%s: %s", p, b)
		}
		found++
		return nil
	})
	if found < 5 { // steps 0..2 of the RL model, 0..1 of the SFT model
		t.Errorf("%d adapter_config.json files, want at least 5", found)
	}
}
