package serve

import (
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/kernels"
)

// BenchmarkStructuredMask measures what a JSON-schema constraint costs per
// generated token next to a decode step of the SmolLM2-135M shape (one
// sequence): the constraint runs over GPT-2's real 50,257-token vocabulary
// (SmolLM2's is 49,152), driven through whole documents by random logits
// (Mask, then the best allowed token, then Advance), for the strict test
// schema and for json_object. Run with -benchtime=1x.
func BenchmarkStructuredMask(b *testing.B) {
	b.Logf("kernels: %s", kernels.Describe(kernels.Default()))
	// decode step of the 135M shape, batch 1
	m := smolLM2Shape(b)
	seq := m.NewSeq(nil)
	if _, err := m.Forward([]*engine.Seq{seq}, [][]int{{1, 2, 3, 4, 5, 6, 7, 8}}); err != nil {
		b.Fatal(err)
	}
	var steps []time.Duration
	for i := 0; i < 40; i++ {
		t0 := time.Now()
		if _, err := m.Forward([]*engine.Seq{seq}, [][]int{{9 + i}}); err != nil {
			b.Fatal(err)
		}
		steps = append(steps, time.Since(t0))
	}
	seq.Release()
	step := median(steps)

	vm := realVocabModel(b, "bench/gpt2-vocab", filepath.Join(tokTestdata, "gpt2.tokenizer.json.gz"), nil, []string{"<|endoftext|>"})
	lm, err := newLModel(vm, &Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer lm.sched.Close()
	lm.jsonVocab()
	strict, err := compileSchema([]byte(structuredSchema), true, "schema")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		root *jnode
	}{{"strict_schema", strict}, {"json_object", anyGrammar().object}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			V := vm.Config.VocabSize
			lg := make([]float32, V)
			var masks []time.Duration
			for i := 0; i < b.N; i++ {
				for doc := 0; doc < 20; doc++ {
					cons := newJSONConstraint(lm, c.root, 200)()
					for n := 0; n < 200; n++ {
						for j := range lg {
							lg[j] = float32(rng.NormFloat64())
						}
						t0 := time.Now()
						ml := cons.Mask(lg)
						best := -1
						for j, v := range ml {
							if best < 0 || v > ml[best] {
								best = j
							}
						}
						end := cons.Advance(best)
						masks = append(masks, time.Since(t0))
						if end {
							break
						}
					}
				}
			}
			sort.Slice(masks, func(i, j int) bool { return masks[i] < masks[j] })
			var total time.Duration
			for _, d := range masks {
				total += d
			}
			mean := total / time.Duration(len(masks))
			b.ReportMetric(float64(step.Microseconds())/1000, "decode_step_ms")
			b.ReportMetric(float64(mean.Microseconds())/1000, "mask_mean_ms")
			b.ReportMetric(float64(masks[len(masks)*99/100].Microseconds())/1000, "mask_p99_ms")
			b.ReportMetric(100*float64(mean)/float64(step), "%of_step")
		})
	}
}
