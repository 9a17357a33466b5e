package engine

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"testing"
)

// TestRealGGUFMatchesLlamaCpp checks flywheel on a real GGUF model against
// references on the same file, written by .ci/gguf_ref.py (llama.cpp
// through llama-cpp-python) and, optionally, .ci/gguf_f64.py (an
// independent numpy float64 forward pass over the weights dequantised by
// llama.cpp's gguf package). It runs only when FLYWHEEL_GGUF_MODEL (the
// .gguf file) and FLYWHEEL_GGUF_REF (the reference JSON) are set, as
// .ci/gguf.sh does; plain `go test` skips it (no downloads, no Python).
//
// For each prompt the tokenizer gives llama.cpp's tokens exactly. Then:
//
//   - With FLYWHEEL_GGUF_LLAMA_EXACT=1 (a file llama.cpp computes without
//     rounding: F32/F16 weights, such as the Q4_1 model dequantised by
//     gguf_dequant.py): the next-token log-probabilities of llama.cpp's
//     top 20 equal llama.cpp's within 2e-3 and the greedy continuation of
//     64 tokens is llama.cpp's.
//   - Decoding through the KV cache (what sampling reports) gives the
//     logprobs of one prefill of the same tokens (what training
//     recomputes) within 2e-4 over the top 20 at every greedy step.
//   - With the float64 reference in the JSON: the same two checks against it
//     (2e-3, identical greedy tokens). Against llama.cpp on a quantized file
//     the log-probabilities differ by up to ~0.4 on this model, and the
//     greedy continuations part after a few tokens: llama.cpp's CPU backend
//     rounds the input of every quantized product to 8 bits per block of 32
//     (quantize_row_q8_1), which moves this model's log-probabilities by as
//     much (gguf_f64.py's "top_q8" emulates that rounding on the float64
//     reference; the test logs both gaps). There the test holds llama.cpp
//     to that measured size (0.5), not to 2e-3, and says so.
func TestRealGGUFMatchesLlamaCpp(t *testing.T) {
	model, refPath := os.Getenv("FLYWHEEL_GGUF_MODEL"), os.Getenv("FLYWHEEL_GGUF_REF")
	if model == "" || refPath == "" {
		t.Skip("FLYWHEEL_GGUF_MODEL and FLYWHEEL_GGUF_REF not set (.ci/gguf.sh sets them)")
	}
	exact := os.Getenv("FLYWHEEL_GGUF_LLAMA_EXACT") == "1"
	data, err := os.ReadFile(refPath)
	if err != nil {
		t.Fatal(err)
	}
	var refs []struct {
		Prompt    string       `json:"prompt"`
		Tokens    []int        `json:"tokens"`
		Top       [][2]float64 `json:"top"`
		TopF64    [][2]float64 `json:"top_f64"`
		TopQ8     [][2]float64 `json:"top_q8"`
		Greedy    []int        `json:"greedy"`
		GreedyF64 []int        `json:"greedy_f64"`
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	m, err := Load(model)
	if err != nil {
		t.Fatal(err)
	}
	const tol, roundedTol, trainTol = 2e-3, 0.5, 2e-4
	// maxGap is the largest |a - b| over the tokens of a, b by token.
	maxGap := func(a [][2]float64, b func(id int) float64) float64 {
		d := 0.0
		for _, e := range a {
			d = math.Max(d, math.Abs(e[1]-b(int(e[0]))))
		}
		return d
	}
	same := func(a, b []int) int {
		k := 0
		for k < len(a) && k < len(b) && a[k] == b[k] {
			k++
		}
		return k
	}
	for _, r := range refs {
		name := r.Prompt
		if len(name) > 40 {
			name = "..." + name[len(name)-37:]
		}
		haveF64 := len(r.TopF64) == len(r.Top) && len(r.TopQ8) == len(r.Top) && len(r.GreedyF64) == len(r.Greedy)
		if !haveF64 && !exact {
			t.Fatalf("%q: the reference lacks gguf_f64.py's outputs and FLYWHEEL_GGUF_LLAMA_EXACT is not set: nothing to hold flywheel to", name)
		}
		if got := m.Tokenizer.Encode(r.Prompt, true); !reflect.DeepEqual(got, r.Tokens) {
			t.Errorf("%q: tokens\n got %v\nwant %v (llama.cpp)", name, got, r.Tokens)
		}
		V := m.Config.VocabSize
		logits, err := m.Logits(nil, r.Tokens)
		if err != nil {
			t.Fatal(err)
		}
		last := logits[(len(r.Tokens)-1)*V:]
		ours := func(id int) float64 { return logSoftmax64(last, id) }
		// Greedy decode through the KV cache, as serving does.
		s := m.NewSeq(nil)
		out, err := m.Forward([]*Seq{s}, [][]int{r.Tokens})
		if err != nil {
			t.Fatal(err)
		}
		var greedy []int
		var steps [][]float32 // each step's logits, as the sampler sees them
		for len(greedy) < len(r.Greedy) {
			steps = append(steps, append([]float32(nil), out[0]...))
			next := argmax(out[0])
			greedy = append(greedy, next)
			if out, err = m.Forward([]*Seq{s}, [][]int{{next}}); err != nil {
				t.Fatal(err)
			}
		}
		// The sampler's logprobs (decode through the KV cache, the
		// streamed products) against the trainer's (one prefill of the
		// same tokens, dequantised blocks into the GEMM): what RL relies on.
		all, err := m.Logits(nil, append(append([]int(nil), r.Tokens...), greedy[:len(greedy)-1]...))
		if err != nil {
			t.Fatal(err)
		}
		dTrain := 0.0
		for i, st := range steps {
			pre := all[(len(r.Tokens)-1+i)*V : (len(r.Tokens)+i)*V]
			for _, id := range topIDs(pre, 20) {
				dTrain = math.Max(dTrain, math.Abs(logSoftmax64(st, id)-logSoftmax64(pre, id)))
			}
		}
		t.Logf("%q: max |Δ logprob| decode vs prefill over the top 20 of %d steps: %.1e", name, len(steps), dTrain)
		if dTrain > trainTol {
			t.Errorf("%q: decode's logprobs differ from the prefill's by %.2e > %.0e", name, dTrain, trainTol)
		}
		dLlama := maxGap(r.Top, ours)
		t.Logf("%q: greedy %q", name, m.Tokenizer.Decode(greedy, false))
		if exact {
			t.Logf("%q: max |Δ logprob| vs llama.cpp over its top 20: %.1e; greedy: %d/%d tokens as llama.cpp", name, dLlama, same(greedy, r.Greedy), len(greedy))
			if dLlama > tol {
				t.Errorf("%q: max |Δ logprob| vs llama.cpp %.2e > %.0e", name, dLlama, tol)
			}
			if k := same(greedy, r.Greedy); k < len(greedy) {
				t.Errorf("%q: greedy continuation differs from llama.cpp's at token %d", name, k)
			}
		}
		if haveF64 {
			f64 := map[int]float64{}
			for _, e := range r.TopF64 {
				f64[int(e[0])] = e[1]
			}
			d64 := maxGap(r.TopF64, ours)
			dQ8 := maxGap(r.TopQ8, func(id int) float64 { return f64[id] })
			t.Logf("%q: max |Δ logprob| over the top 20: vs float64 %.1e, vs llama.cpp %.2f (8-bit rounding alone moves float64 by %.2f); greedy: %d/%d tokens as float64, %d/%d as llama.cpp",
				name, d64, dLlama, dQ8, same(greedy, r.GreedyF64), len(greedy), same(greedy, r.Greedy), len(greedy))
			if d64 > tol {
				t.Errorf("%q: max |Δ logprob| vs the float64 reference %.2e > %.0e", name, d64, tol)
			}
			if k := same(greedy, r.GreedyF64); k < len(greedy) {
				t.Errorf("%q: greedy continuation differs from the float64 reference's at token %d", name, k)
			}
			// llama.cpp's distance from the exact model is its 8-bit
			// rounding's (dQ8: the rounding alone, on float64; 0.2–0.7
			// on the real model's Q4_K_M and Q5_K_M): more than twice that, and more
			// than roundedTol, is a difference of ours.
			if lim := math.Max(roundedTol, 2*dQ8); !exact && dLlama > lim {
				t.Errorf("%q: max |Δ logprob| vs llama.cpp %.2f > %.2f, more than its 8-bit rounding explains", name, dLlama, lim)
			}
		}
	}
}

// topIDs is the ids of the k largest values of x, largest first.
func topIDs(x []float32, k int) []int {
	var ids []int
	for i, v := range x {
		j := len(ids)
		for j > 0 && x[ids[j-1]] < v {
			j--
		}
		if j < k {
			ids = append(ids[:j], append([]int{i}, ids[j:]...)...)
			ids = ids[:min(len(ids), k)]
		}
	}
	return ids
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
