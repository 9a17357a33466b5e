package serve

import (
	"encoding/json"
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
