package serve

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomDoc drives the matcher with random bytes among those it allows
// (printable ASCII and a few multi-byte characters), closing the document
// once budget bytes are spent, as the constraint does.
func randomDoc(t *testing.T, root *jnode, rng *rand.Rand, budget int) string {
	t.Helper()
	js := jstate{push(nil, root)}
	var out []byte
	var alphabet []byte
	for b := byte(0x20); b < 0x7f; b++ {
		alphabet = append(alphabet, b)
	}
	alphabet = append(alphabet, '\n')
	alphabet = append(alphabet, "é"...)
	var st stepper
	for steps := 0; ; steps++ {
		if js.complete() && (rng.IntN(4) == 0 || js.closed()) {
			return string(out)
		}
		if steps > 10000 {
			t.Fatalf("no end after %q", out)
		}
		left := budget - len(out) - 1
		var ok []jstate
		var oks []byte
		for _, b := range alphabet {
			next := js.feedByte(&st, b)
			if len(next) > 0 && next.minCost() <= max(left, 0) {
				ok = append(ok, next)
				oks = append(oks, b)
			}
		}
		if len(ok) == 0 {
			t.Fatalf("dead end after %q (cost %d)", out, js.minCost())
		}
		k := rng.IntN(len(ok))
		js = ok[k]
		out = append(out, oks[k])
	}
}

func TestJSONGrammarRandomDocs(t *testing.T) {
	schemas := []string{
		`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","enum":["a","b\"c"]}},"pet":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/pet"}]}},"required":["name","age","tags","pet"],"additionalProperties":false,
		  "$defs":{"pet":{"type":"object","properties":{"kind":{"type":["string","null"]},"weight":{"type":"number"},"friends":{"type":"array","items":{"$ref":"#/$defs/pet"}}},"required":["kind","weight","friends"],"additionalProperties":false}}}`,
		`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"const":{"x":[1,2]}},"c":{"type":"object","properties":{"d":{"type":"number"}}}},"required":["b"]}`,
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for si, sc := range schemas {
		root, err := compileSchema(json.RawMessage(sc), si == 0, "schema")
		if err != nil {
			t.Fatalf("schema %d: %v", si, err)
		}
		for i := 0; i < 300; i++ {
			doc := randomDoc(t, root, rng, root.minCost+rng.IntN(200))
			var v any
			if err := json.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatalf("schema %d: %q is not JSON: %v", si, doc, err)
			}
			if si == 0 && !strings.HasPrefix(doc, `{"name": "`) {
				t.Fatalf("schema %d: %q", si, doc)
			}
		}
	}
	obj := anyGrammar().object
	for i := 0; i < 300; i++ {
		doc := randomDoc(t, obj, rng, 10+rng.IntN(100))
		var v map[string]any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%q is not a JSON object: %v", doc, err)
		}
	}
}

// TestLargeChoices: an enum of 300 values sharing a prefix and a forced
// call among 40 tools sharing one are literal choices, not alternatives
// followed side by side, so every value and every tool stays reachable.
func TestLargeChoices(t *testing.T) {
	var vals []string
	for i := 0; i < 300; i++ {
		vals = append(vals, fmt.Sprintf(`"code_%03d"`, i))
	}
	root, err := compileSchema(json.RawMessage(`{"type":"string","enum":[`+strings.Join(vals, ",")+`]}`), true, "s")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[string]bool{}
	for i := 0; i < 2000; i++ {
		doc := randomDoc(t, root, rng, root.minCost+5)
		var v string
		if err := json.Unmarshal([]byte(doc), &v); err != nil || !strings.HasPrefix(v, "code_") || len(v) != 8 {
			t.Fatalf("%q", doc)
		}
		seen[v] = true
	}
	if len(seen) < 250 {
		t.Fatalf("%d of 300 enum values reached", len(seen))
	}
	var fns []ToolFunction
	var index []int
	for i := 0; i < 40; i++ {
		fns = append(fns, ToolFunction{Name: fmt.Sprintf("get_item_%02d", i), Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)})
		index = append(index, i)
	}
	g, err := toolCallGrammar(fns, index, fmtHermes)
	if err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{}
	for i := 0; i < 400; i++ {
		doc := randomDoc(t, g, rng, g.minCost+20)
		_, calls := parseToolCalls(doc, fmtHermes)
		if len(calls) != 1 {
			t.Fatalf("%q", doc)
		}
		called[calls[0].Function.Name] = true
	}
	if len(called) < 35 {
		t.Fatalf("%d of 40 tools called", len(called))
	}
}
