package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesCreate: a text input through the SDK's responses.New is
// the chat completion of that message (same seed, same text), with the
// Responses shape, recorded as op "responses".
func TestResponsesCreate(t *testing.T) {
	env := newTestEnv(t, Options{})
	ctx := context.Background()
	r, err := env.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: tinyID, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello there")},
		Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0.8),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") || len(r.Output) != 1 || r.Output[0].Type != "message" {
		t.Fatalf("response %s", r.RawJSON())
	}
	if r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens || r.Usage.OutputTokens == 0 {
		t.Fatalf("usage %s", r.RawJSON())
	}
	if r.Status != "completed" && !(r.Status == "incomplete" && r.IncompleteDetails.Reason == "max_output_tokens") {
		t.Fatalf("status %s", r.RawJSON())
	}
	call, ok := env.rec.last()
	if !ok || call.Op != "responses" || !strings.Contains(string(call.Output), r.ID) {
		t.Fatalf("recorded %+v", call)
	}
	// the input as the chat template renders it
	sys, user := "Be brief.", "Hello there"
	want := tokenizeMessages(t, env, `[{"role":"system","content":"`+sys+`"},{"role":"user","content":"`+user+`"}]`)
	if int(r.Usage.InputTokens) != len(want) {
		t.Fatalf("input tokens %d, chat template gives %d", r.Usage.InputTokens, len(want))
	}
}

// TestResponsesToolsAcrossTurns: a forced function call, its output sent
// back with previous_response_id, and the continuation rendering the whole
// conversation; another user's previous_response_id is a 404.
func TestResponsesToolsAcrossTurns(t *testing.T) {
	env := newTestEnv(t, Options{})
	tool := `{"type":"function","name":"get_weather","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}`
	r := postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":[{"role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]}],"tools":[`+tool+`],"tool_choice":{"type":"function","name":"get_weather"},"max_output_tokens":60,"temperature":1.5,"seed":1}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var first Response
	if err := json.Unmarshal([]byte(r.body), &first); err != nil {
		t.Fatal(err)
	}
	if len(first.Output) != 1 || first.Output[0]["type"] != "function_call" || first.Output[0]["name"] != "get_weather" {
		t.Fatalf("output %s", r.body)
	}
	var args struct{ City *string }
	if err := json.Unmarshal([]byte(first.Output[0]["arguments"].(string)), &args); err != nil || args.City == nil {
		t.Fatalf("arguments %v", first.Output[0]["arguments"])
	}
	callID := first.Output[0]["call_id"].(string)
	next := `{"model":"flywheel/tiny","previous_response_id":"` + first.ID + `","input":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call_output","call_id":"` + callID + `","output":"sunny"}],"tools":[` + tool + `],"max_output_tokens":3}`
	r = postJSON(t, env, "/v1/responses", next)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var second Response
	if err := json.Unmarshal([]byte(r.body), &second); err != nil {
		t.Fatal(err)
	}
	// the continued conversation: user, assistant call, tool output
	hist := `[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":"` + callID + `","type":"function","function":{"name":"get_weather","arguments":` + mustString(first.Output[0]["arguments"].(string)) + `}}]},{"role":"tool","tool_call_id":"` + callID + `","content":"sunny"}]`
	rt := postJSON(t, env, "/tokenize", `{"model":"flywheel/tiny","messages":`+hist+`,"tools":[{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}}]}`)
	var tr TokenizeResponse
	if err := json.Unmarshal([]byte(rt.body), &tr); err != nil {
		t.Fatal(err)
	}
	if second.Usage.InputTokens != tr.Count {
		t.Fatalf("continued input: %d tokens, the conversation renders to %d", second.Usage.InputTokens, tr.Count)
	}
	// another user cannot continue it
	other := *testPrincipal
	other.UserID = "u2"
	saved := *testPrincipal
	*testPrincipal = other
	r = postJSON(t, env, "/v1/responses", next)
	*testPrincipal = saved
	if r.status != 404 || !strings.Contains(r.body, "previous_response_id") {
		t.Fatalf("other user: %d %s", r.status, r.body)
	}
	r = postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":[{"type":"image_generation_call"}]}`)
	if r.status != 400 || !strings.Contains(r.body, `"param":"input[0].type"`) {
		t.Fatalf("unknown item: %d %s", r.status, r.body)
	}
}

func mustString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestResponsesStreamAndFormat: streamed events in order (created,
// in_progress, output_item.added, content_part.added, output_text.delta...,
// output_text.done, content_part.done, output_item.done, completed), deltas
// assembling the final text, which under text.format json_schema is valid.
func TestResponsesStreamAndFormat(t *testing.T) {
	env := newTestEnv(t, Options{})
	body := `{"model":"flywheel/tiny","input":"A person","stream":true,"max_output_tokens":60,"temperature":1.5,
	  "text":{"format":{"type":"json_schema","name":"p","strict":true,"schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}}}}`
	req, _ := http.NewRequest("POST", env.http.URL+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	var text strings.Builder
	var final Response
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Type     string          `json:"type"`
			Seq      int             `json:"sequence_number"`
			Delta    string          `json:"delta"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Seq != len(types) {
			t.Fatalf("sequence_number %d at event %d", ev.Seq, len(types))
		}
		types = append(types, ev.Type)
		text.WriteString(ev.Delta)
		if ev.Type == "response.completed" {
			if err := json.Unmarshal(ev.Response, &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	seq := strings.Join(types, " ")
	if !strings.HasPrefix(seq, "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta") ||
		!strings.HasSuffix(seq, "response.output_text.done response.content_part.done response.output_item.done response.completed") {
		t.Fatalf("events: %s", seq)
	}
	content := final.Output[0]["content"].([]any)[0].(map[string]any)["text"].(string)
	var v struct {
		Name *string
		Age  *int
	}
	if content != text.String() || json.Unmarshal([]byte(content), &v) != nil || v.Name == nil || v.Age == nil {
		t.Fatalf("final %q, deltas %q", content, text.String())
	}
	r := postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":"x","text":{"format":{"type":"json_schema","name":"p","schema":{"type":"string","format":"date"}}}}`)
	if r.status != 400 || !strings.Contains(r.body, `"param":"text.format.schema.format"`) {
		t.Fatalf("schema error: %d %s", r.status, r.body)
	}
}

// do sends method path with the test key and returns the answer.
func do(t *testing.T, env *testEnv, method, path string) rawResp {
	t.Helper()
	req, _ := http.NewRequest(method, env.http.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{resp.StatusCode, string(b), resp.Header, resp.Trailer}
}

// TestResponsesGetDeleteAndBound: GET /v1/responses/{id} answers the stored
// response as created, another user's is a 404 (GET and DELETE), DELETE
// removes it (then previous_response_id is a 404), store:false keeps
// nothing, and a conversation over MaxStoredResponseBytes is a 413 naming
// input.
func TestResponsesGetDeleteAndBound(t *testing.T) {
	env := newTestEnv(t, Options{MaxStoredResponseBytes: 400})
	r := postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":"Hello","max_output_tokens":4}`)
	var created Response
	if err := json.Unmarshal([]byte(r.body), &created); r.status != 200 || err != nil || !created.Store {
		t.Fatalf("%d %s %v", r.status, r.body, err)
	}
	got := do(t, env, "GET", "/v1/responses/"+created.ID)
	if got.status != 200 || got.body != strings.TrimSpace(r.body) {
		t.Fatalf("GET: %d %s\nwant %s", got.status, got.body, r.body)
	}
	saved := *testPrincipal
	testPrincipal.UserID = "u2"
	otherGet, otherDel := do(t, env, "GET", "/v1/responses/"+created.ID), do(t, env, "DELETE", "/v1/responses/"+created.ID)
	*testPrincipal = saved
	if otherGet.status != 404 || otherDel.status != 404 || !strings.Contains(otherGet.body, `"code":"not_found"`) {
		t.Fatalf("another user's: GET %d %s, DELETE %d %s", otherGet.status, otherGet.body, otherDel.status, otherDel.body)
	}
	del := do(t, env, "DELETE", "/v1/responses/"+created.ID)
	if del.status != 200 || del.body != `{"id":"`+created.ID+`","object":"response","deleted":true}`+"\n" {
		t.Fatalf("DELETE: %d %q", del.status, del.body)
	}
	if r := postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":"x","previous_response_id":"`+created.ID+`"}`); r.status != 404 {
		t.Fatalf("continuing a deleted response: %d %s", r.status, r.body)
	}
	r = postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":"Hello","max_output_tokens":2,"store":false}`)
	var unstored Response
	if err := json.Unmarshal([]byte(r.body), &unstored); err != nil || unstored.Store {
		t.Fatalf("store false: %s", r.body)
	}
	if got := do(t, env, "GET", "/v1/responses/"+unstored.ID); got.status != 404 {
		t.Fatalf("an unstored response: %d %s", got.status, got.body)
	}
	r = postJSON(t, env, "/v1/responses", `{"model":"flywheel/tiny","input":"`+strings.Repeat("a", 500)+`","max_output_tokens":2}`)
	if r.status != 413 || !strings.Contains(r.body, `"param":"input"`) || !strings.Contains(r.body, "over the limit of 400") {
		t.Fatalf("over the bound: %d %s", r.status, r.body)
	}
}
