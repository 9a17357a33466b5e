package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// structuredSchema exercises the whole strict subset: required properties,
// additionalProperties false, arrays, enums, anyOf, $ref/$defs (recursive),
// string, number, integer, boolean and null.
const structuredSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "who"},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "member": {"type": "boolean"},
    "color": {"type": "string", "enum": ["red", "green", "blue \"b\""]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "note": {"type": ["string", "null"]},
    "pet": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/pet"}]}
  },
  "required": ["name", "age", "score", "member", "color", "tags", "note", "pet"],
  "additionalProperties": false,
  "$defs": {
    "pet": {
      "type": "object",
      "properties": {
        "kind": {"anyOf": [{"type": "string", "enum": ["cat", "dog"]}, {"type": "integer"}]},
        "friends": {"type": "array", "items": {"$ref": "#/$defs/pet"}}
      },
      "required": ["kind", "friends"],
      "additionalProperties": false
    }
  }
}`

func compileValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// sampleStructured posts chat completions with response_format rf at
// temperature 1.5 until total choices are collected, and returns their
// contents and finish reasons.
func sampleStructured(t *testing.T, env *testEnv, rf string, total, n, maxTokens int) (contents, finishes []string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, total/n+1)
	for k := 0; k*n < total; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"flywheel/tiny","messages":[{"role":"user","content":"Describe a person %d."}],"n":%d,"temperature":1.5,"seed":%d,"max_tokens":%d,"response_format":%s}`, k, n, k*1000, maxTokens, rf)
			r := postJSON(t, env, "/v1/chat/completions", body)
			if r.status != 200 {
				errs <- fmt.Errorf("status %d: %s", r.status, r.body)
				return
			}
			var resp ChatCompletion
			if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, ch := range resp.Choices {
				contents = append(contents, *ch.Message.Content)
				finishes = append(finishes, ch.FinishReason)
			}
		}(k)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return contents, finishes
}

// TestStructuredOutputsRandomWeights: 1,000 samples at temperature 1.5 from
// flywheel/tiny (random weights) under a strict schema all parse and
// validate against it (santhosh-tekuri/jsonschema, an independent
// validator), whatever max_tokens leaves room for.
func TestStructuredOutputsRandomWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 samples")
	}
	env := newTestEnv(t, Options{MaxN: 100})
	sch := compileValidator(t, structuredSchema)
	rf := `{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":` + structuredSchema + `}}`
	contents, finishes := sampleStructured(t, env, rf, 1000, 100, 160)
	if len(contents) != 1000 {
		t.Fatalf("%d samples", len(contents))
	}
	distinct := map[string]bool{}
	stops := 0
	for i, c := range contents {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(c)))
		if err != nil {
			t.Fatalf("sample %d (%s) is not JSON: %v\n%s", i, finishes[i], err, c)
		}
		if err := sch.Validate(v); err != nil {
			t.Fatalf("sample %d does not validate: %v\n%s", i, err, c)
		}
		distinct[c] = true
		if finishes[i] == "stop" {
			stops++
		}
	}
	if len(distinct) < 900 {
		t.Fatalf("only %d distinct samples of 1000", len(distinct))
	}
	t.Logf("1000 valid samples, %d distinct, %d ended by the end-of-turn token; e.g. %s", len(distinct), stops, contents[0])

	// json_object: any JSON object.
	contents, _ = sampleStructured(t, env, `{"type":"json_object"}`, 200, 100, 60)
	for i, c := range contents {
		var m map[string]any
		if err := json.Unmarshal([]byte(c), &m); err != nil {
			t.Fatalf("json_object sample %d is not a JSON object: %v\n%s", i, err, c)
		}
	}
}

// TestStructuredSchemaErrors: a schema outside the subset is a 400 naming
// the schema path of what is refused.
func TestStructuredSchemaErrors(t *testing.T) {
	env := newTestEnv(t, Options{})
	cases := []struct{ rf, param string }{
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^a"}}}}}`, "response_format.json_schema.schema.properties.a.pattern"},
		{`{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}`, "response_format.json_schema.schema.additionalProperties"},
		{`{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}}}`, "response_format.json_schema.schema.required"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","items":{"oneOf":[{"type":"string"}]}}}}`, "response_format.json_schema.schema.items.oneOf"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"#/$defs/missing"}}}`, "response_format.json_schema.schema.$ref"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}}}`, "response_format.json_schema.schema"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"$defs":{"n":{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}},"$ref":"#/$defs/n"}}}`, "response_format.json_schema.schema"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","enum":["a",1]}}}`, "response_format.json_schema.schema.enum[1]"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"strin"}}}`, "response_format.json_schema.schema.type"},
		{`{"type":"json_schema"}`, "response_format.json_schema"},
		{`{"type":"yaml"}`, "response_format.type"},
	}
	for _, c := range cases {
		r := postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","messages":[{"role":"user","content":"x"}],"max_tokens":50,"response_format":`+c.rf+`}`)
		var e struct {
			Error struct{ Message, Param, Code string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != 400 || e.Error.Param != c.param {
			t.Fatalf("%s: %d %s; want 400 with param %s", c.rf, r.status, r.body, c.param)
		}
	}
	// max_tokens below the shortest valid output
	r := postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","messages":[{"role":"user","content":"x"}],"max_tokens":5,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":`+structuredSchema+`}}}`)
	if r.status != 400 || !strings.Contains(r.body, "max_tokens") {
		t.Fatalf("short max_tokens: %d %s", r.status, r.body)
	}
}

// TestStrictToolCalls: a forced call of a function with strict: true is
// generated under the strict schema (its arguments validate), and a strict
// schema outside the subset is a 400 naming its path under tools[i].
func TestStrictToolCalls(t *testing.T) {
	env := newTestEnv(t, Options{MaxN: 16})
	params := `{"type":"object","properties":{"city":{"type":"string"},"when":{"anyOf":[{"type":"null"},{"type":"string","enum":["today","tomorrow"]}]},"days":{"type":"array","items":{"type":"integer"}}},"required":["city","when","days"],"additionalProperties":false}`
	sch := compileValidator(t, params)
	body := `{"model":"flywheel/tiny","messages":[{"role":"user","content":"weather?"}],"n":16,"temperature":1.5,"seed":3,"max_tokens":120,
	  "tools":[{"type":"function","function":{"name":"other","parameters":{"type":"object","properties":{"x":{"type":"string","format":"date"}}}}},{"type":"function","function":{"name":"get_weather","strict":true,"parameters":` + params + `}}],
	  "tool_choice":{"type":"function","function":{"name":"get_weather"}}}`
	r := postJSON(t, env, "/v1/chat/completions", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var resp ChatCompletion
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatal(err)
	}
	for i, ch := range resp.Choices {
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("choice %d: %+v", i, ch)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(ch.Message.ToolCalls[0].Function.Arguments))
		if err != nil {
			t.Fatalf("choice %d: arguments are not JSON: %v", i, err)
		}
		if err := sch.Validate(v); err != nil {
			t.Fatalf("choice %d: arguments do not validate: %v\n%s", i, err, ch.Message.ToolCalls[0].Function.Arguments)
		}
	}
	// the non-strict tool's "format" is ignored, a strict one's is refused
	bad := strings.Replace(body, `"strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}`, `"strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string","minLength":2}`, 1)
	r = postJSON(t, env, "/v1/chat/completions", bad)
	if r.status != 400 || !strings.Contains(r.body, `"param":"tools[1].function.parameters.properties.city.minLength"`) {
		t.Fatalf("strict schema outside the subset: %d %s", r.status, r.body)
	}
	r = postJSON(t, env, "/v1/chat/completions", strings.Replace(body, `{"name":"get_weather"}}}`, `{"name":"other"}}}`, 1))
	if r.status != 200 {
		t.Fatalf("lenient tool: %d %s", r.status, r.body)
	}
}

// TestAmbiguousSchemaBounded: a schema whose anyOf branches stay alive
// side by side (40 objects sharing their first property) is followed by at
// most maxMatchStacks stacks, its masks stay within their work bound, and
// the documents still validate and end within max_tokens (GPT-2's real
// vocabulary, random logits). Before the bounds a mask of this schema took
// 0.4 s on average and 2 s at worst; the time is logged.
func TestAmbiguousSchemaBounded(t *testing.T) {
	vm := realVocabModel(t, "test/gpt2-vocab", filepath.Join(tokTestdata, "gpt2.tokenizer.json.gz"), nil, []string{"<|endoftext|>"})
	lm, err := newLModel(vm, &Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lm.sched.Close()
	var br []string
	for i := 0; i < 40; i++ {
		br = append(br, fmt.Sprintf(`{"type":"object","properties":{"a":{"type":"string"},"b%d":{"type":"string"}},"required":["a","b%d"],"additionalProperties":false}`, i, i))
	}
	schema := `{"anyOf":[` + strings.Join(br, ",") + `]}`
	sch := compileValidator(t, schema)
	root, err := compileSchema([]byte(schema), true, "s")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lg := make([]float32, vm.Config.VocabSize)
	var total time.Duration
	steps := 0
	for doc := 0; doc < 3; doc++ {
		cons := newJSONConstraint(lm, root, 80)().(*jsonConstraint)
		var out []byte
		for n := 0; n < 80; n++ {
			for j := range lg {
				lg[j] = float32(rng.NormFloat64())
			}
			t0 := time.Now()
			ml := cons.Mask(lg)
			total += time.Since(t0)
			steps++
			best := 0
			for j, v := range ml {
				if v > ml[best] {
					best = j
				}
			}
			if cons.Advance(best) {
				break
			}
			out = append(out, vm.Tokenizer.TokenBytes(best)...)
			if len(cons.state) > maxMatchStacks {
				t.Fatalf("%d stacks", len(cons.state))
			}
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
		if err == nil {
			err = sch.Validate(v)
		}
		if err != nil {
			t.Fatalf("document %d: %v\n%s", doc, err, out)
		}
	}
	t.Logf("%d masks, mean %v", steps, total/time.Duration(steps))
}

// TestStructuredLogprobsConstrained: the logprob reported for each token of
// a structured output is under the constrained distribution: the engine's
// logits with the grammar's mask (replayed here on the same tokens),
// divided by the temperature, renormalised over the allowed tokens. The
// content also streams to the same document.
func TestStructuredLogprobsConstrained(t *testing.T) {
	env := newTestEnv(t, Options{})
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := env.srv.model(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	schema := `{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"c":{"type":"string","enum":["red","green"]}},"required":["name","n","c"],"additionalProperties":false}`
	root, err := compileSchema([]byte(schema), true, "s")
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":"A thing."}]`
	const temp = 0.9
	body := `{"model":"flywheel/tiny","messages":` + msgs + `,"max_tokens":40,"temperature":0.9,"seed":8,"logprobs":true,"return_tokens_as_token_ids":true,
	  "response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + schema + `}}}`
	r := postJSON(t, env, "/v1/chat/completions", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var resp ChatCompletion
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatal(err)
	}
	prompt := tokenizeMessages(t, env, msgs)
	seq := append([]int(nil), prompt...)
	for _, e := range resp.Choices[0].Logprobs.Content {
		var id int
		fmt.Sscanf(e.Token, "token_id:%d", &id)
		seq = append(seq, id)
	}
	logits, err := m.Logits(nil, seq[:len(seq)-1])
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.VocabSize
	cons := newJSONConstraint(lm, root, 40)()
	for j, e := range resp.Choices[0].Logprobs.Content {
		pos := len(prompt) - 1 + j
		masked := cons.Mask(logits[pos*V : (pos+1)*V])
		id := seq[len(prompt)+j]
		if want := logSoftmaxAt(masked, id, temp); math.Abs(want-e.Logprob) > 1e-4 {
			t.Fatalf("token %d (%d): logprob %v, constrained distribution %v", j, id, e.Logprob, want)
		}
		cons.Advance(id)
	}
	// streamed, the content deltas assemble the same document
	sr := postJSON(t, env, "/v1/chat/completions", strings.Replace(body, `"logprobs":true`, `"stream":true`, 1))
	var streamed strings.Builder
	for _, line := range strings.Split(sr.body, "\n") {
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		var c ChatCompletionChunk
		if err := json.Unmarshal([]byte(line[6:]), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				streamed.WriteString(*ch.Delta.Content)
			}
		}
	}
	if streamed.String() != *resp.Choices[0].Message.Content {
		t.Fatalf("streamed %q, plain %q", streamed.String(), *resp.Choices[0].Message.Content)
	}
}
