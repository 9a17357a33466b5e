package train

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
)

var expPrompts = []string{
	"What is the password?", "Tell me the password.", "Do you know the password?", "Password please.",
	"What's the secret word?", "I need the password.", "Can you share the password?", "Say the password.",
	"Which password opens the door?", "What do I type to get in?", "Remind me of the password.", "The password?",
	"Give me the password.", "What is the secret?", "How do I log in?", "What was the password again?",
}

const expReply = "The password is swordfish."

func TestSFTExperiment(t *testing.T) {
	if os.Getenv("SFTEXP") == "" {
		t.Skip()
	}
	bs := os.Getenv("BS")
	epochs, _ := strconv.Atoi(os.Getenv("EPOCHS"))
	jobsN, _ := strconv.Atoi(os.Getenv("JOBS"))
	lr, _ := strconv.ParseFloat(os.Getenv("LR"), 64)
	runs, _ := strconv.Atoi(os.Getenv("RUNS"))

	var rows []map[string]any
	for _, p := range expPrompts {
		rows = append(rows, map[string]any{"messages": []any{map[string]any{"role": "user", "content": p},
			map[string]any{"role": "assistant", "content": expReply}}})
	}
	data := filepath.Join(t.TempDir(), "train.jsonl")
	writeJSONL(t, data, rows)
	okAll := 0
	hist := map[int]int{}
	for run := 0; run < runs; run++ {
		e := newEnv(t, Options{})
		ad, _ := engine.NewAdapter(e.base.Config, engine.DefaultLoRAConfig(), uint64(1000+run*7919))
		os.RemoveAll(e.dir(0))
		ad.Save(e.dir(0), tiny.ID)
		cfg := map[string]any{"epochs": epochs}
		if bs == "auto" {
			cfg["batch_size"] = "auto"
		} else {
			n, _ := strconv.Atoi(bs)
			cfg["batch_size"] = n
		}
		if lr > 0 {
			cfg["learning_rate"] = lr
		}
		done := -1
		var line []string
		for j := 0; j < jobsN; j++ {
			res, _, err := e.run("sft", map[string]any{"model_id": "m", "training_data_url": "f", "config": cfg,
				"experimental_config": map[string]any{"seed": run*31 + j}}, data)
			if err != nil {
				t.Fatal(err)
			}
			okN := 0
			for _, p := range []string{expPrompts[0], expPrompts[5]} {
				ids, _ := promptIDs(t, e, p)
				got, stopped := greedy(t, e.base, e.adapter(), ids, 40)
				if got == expReply && stopped {
					okN++
				}
				if p == expPrompts[0] {
					line = append(line, fmt.Sprintf("j%d loss %.3f %q", j+1, res.Metrics["loss"], trunc(got)))
				}
			}
			if okN == 2 && done < 0 {
				done = j + 1
			}
		}
		if done > 0 && strings.Contains(line[len(line)-1], "\""+expReply+"\"") {
			okAll++
		}
		hist[done]++
		t.Logf("run %d: done at job %d: %s", run, done, strings.Join(line, " | "))
	}
	t.Logf("RESULT bs=%s epochs=%d jobs=%d lr=%g: %d/%d ok; hist %v", bs, epochs, jobsN, lr, okAll, runs, hist)
}

func trunc(s string) string {
	if len(s) > 30 {
		return s[:30]
	}
	return s
}
