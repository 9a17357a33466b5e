package train

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/engine/tiny"
)

// A checkpoint whose weights overflow the forward (B = 1e30 turns every
// LoRA output into ±Inf) gives a non-finite loss at the first step: the job
// fails naming the step and what diverged, before any update, and writes no
// checkpoint.
func TestNonFiniteLossFailsTheJob(t *testing.T) {
	e := newEnv(t, Options{})
	req, _ := rlRound(t, e, rand.New(rand.NewPCG(1, 2)), 2, 3, 4, 'e')

	ad := e.adapter()
	for _, layer := range ad.Layers {
		for _, p := range layer {
			for i := range p.B {
				p.B[i] = 1e30
			}
		}
	}
	if err := os.RemoveAll(e.dir(0)); err != nil {
		t.Fatal(err)
	}
	if err := ad.Save(e.dir(0), tiny.ID); err != nil {
		t.Fatal(err)
	}

	_, evs, err := e.run("rl", req, "")
	var de *DivergedError
	if !errors.As(err, &de) || de.Step != 1 {
		t.Fatalf("err = %v, want a DivergedError at step 1", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "gradient step 1") || !strings.Contains(msg, "no checkpoint was saved") {
		t.Errorf("message %q", msg)
	}
	for _, ev := range evs {
		if ev.Type == "gradient_step" {
			t.Errorf("a gradient_step event was emitted for a diverged step: %+v", ev)
		}
	}
	if e.step != 0 {
		t.Errorf("step advanced to %d", e.step)
	}
	out := filepath.Join(e.root, "work1")
	if _, err := os.Stat(filepath.Join(out, "adapter_model.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a checkpoint was written into the work folder: %v", err)
	}
}

func TestNonFiniteParam(t *testing.T) {
	ps := []param{{Name: "a", W: []float32{1, 2}}, {Name: "b", W: []float32{0, float32(math.Inf(1))}}}
	if name, ok := nonFiniteParam(ps); ok || name != "b" {
		t.Errorf("nonFiniteParam = %q %v", name, ok)
	}
	ps[1].W[1] = float32(math.NaN())
	if _, ok := nonFiniteParam(ps); ok {
		t.Error("NaN not found")
	}
	ps[1].W[1] = 3
	if _, ok := nonFiniteParam(ps); !ok {
		t.Error("finite weights reported")
	}
}
