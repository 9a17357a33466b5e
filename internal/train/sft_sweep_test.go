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

// sweepPrompts and sweepReply are the memorisation case of issue 16 (the
// e2e test's, in process): 16 questions, one reply.
var sweepPrompts = []string{
	"What is the password?", "Tell me the password.", "Do you know the password?", "Password please.",
	"What's the secret word?", "I need the password.", "Can you share the password?", "Say the password.",
	"Which password opens the door?", "What do I type to get in?", "Remind me of the password.", "The password?",
	"Give me the password.", "What is the secret?", "How do I log in?", "What was the password again?",
}

const sweepReply = "The password is swordfish."

// TestSFTSweep measures how reliably SFT memorises the reply (docs/sft.md):
// RUNS runs, each from another random LoRA initialisation with other
// seeds, of JOBS jobs with config batch_size BS (an integer or "auto"),
// epochs EPOCHS and learning_rate LR (0: the default); a run succeeds when,
// after its last job, greedy decoding gives the reply for two of the
// questions. It is skipped unless FLYWHEEL_SFT_SWEEP is set:
//
//	FLYWHEEL_SFT_SWEEP=1 BS=auto EPOCHS=4 JOBS=1 LR=0 RUNS=60 go test ./internal/train -run TestSFTSweep -v
func TestSFTSweep(t *testing.T) {
	if os.Getenv("FLYWHEEL_SFT_SWEEP") == "" {
		t.Skip("a measurement: set FLYWHEEL_SFT_SWEEP=1 (and BS, EPOCHS, JOBS, LR, RUNS)")
	}
	bs := os.Getenv("BS")
	epochs := int(sweepNum(t, "EPOCHS", 4))
	jobsN := int(sweepNum(t, "JOBS", 1))
	lr := sweepNum(t, "LR", 0)
	runs := int(sweepNum(t, "RUNS", 60))

	var rows []map[string]any
	for _, p := range sweepPrompts {
		rows = append(rows, map[string]any{"messages": []any{map[string]any{"role": "user", "content": p},
			map[string]any{"role": "assistant", "content": sweepReply}}})
	}
	data := filepath.Join(t.TempDir(), "train.jsonl")
	writeJSONL(t, data, rows)
	ok, first := 0, map[int]int{} // first: the job after which the reply first came back (-1: never)
	for run := range runs {
		e := newEnv(t, Options{})
		ad, err := engine.NewAdapter(e.base.Config, engine.DefaultLoRAConfig(), uint64(1000+run*7919))
		if err != nil {
			t.Fatal(err)
		}
		if err := ad.Save(e.dir(0), tiny.ID); err != nil {
			t.Fatal(err)
		}
		cfg := map[string]any{"epochs": epochs, "batch_size": bs}
		if n, err := strconv.Atoi(bs); err == nil {
			cfg["batch_size"] = n
		}
		if lr > 0 {
			cfg["learning_rate"] = lr
		}
		done, last := -1, false
		var line []string
		for j := range jobsN {
			res, _, err := e.run("sft", map[string]any{"model_id": "m", "training_data_url": "f", "config": cfg,
				"experimental_config": map[string]any{"seed": run*31 + j}}, data)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for k, p := range []string{sweepPrompts[0], sweepPrompts[5]} {
				ids, _ := promptIDs(t, e, p)
				got, stopped := greedy(t, e.base, e.adapter(), ids, 40)
				if got == sweepReply && stopped {
					n++
				}
				if k == 0 {
					line = append(line, fmt.Sprintf("job %d: loss %.3f %q", j+1, res.Metrics["loss"], got[:min(len(got), 30)]))
				}
			}
			if last = n == 2; last && done < 0 {
				done = j + 1
			}
		}
		if last {
			ok++
		}
		first[done]++
		t.Logf("run %d: %s", run, strings.Join(line, " | "))
	}
	t.Logf("RESULT batch_size=%s epochs=%d jobs=%d lr=%g: %d/%d runs give the reply after the last job; first given after job n: %v",
		bs, epochs, jobsN, lr, ok, runs, first)
}
