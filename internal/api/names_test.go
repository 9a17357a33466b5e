package api_test

import (
	"strings"
	"testing"
)

// Names a client chooses refuse control characters and bidirectional
// overrides with a 400 naming the field: models' entity, project and name,
// an upload's filename and purpose, /log's split and metric names.
func TestNamesRefuseControlAndBidiCharacters(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, bad := range []string{"p\u0000x", "p\u0007x", "p\u202ex", "p\u2066x", "p\u200bx", "p\x1b[31mx", "p\u0085x"} {
		for _, field := range []string{"entity", "project", "name"} {
			body := map[string]any{"entity": "alice", "project": "p", "name": "m", "base_model": "test/base"}
			body[field] = bad
			r := e.do("POST", "/v1/preview/models", e.alice, body)
			if r.status != 400 || r.errParam() != field || r.errCode() != "invalid_value" {
				t.Errorf("%s=%q: %d %s", field, bad, r.status, r.raw)
			}
			if msg, _ := r.errField("message").(string); !strings.HasPrefix(msg, field+" ") || !strings.Contains(msg, "U+") {
				t.Errorf("%s=%q: message %q", field, bad, msg)
			}
		}
		// (C0 controls are already refused by the MIME header parser, as "file".)
		if r := upload(t, e, e.alice, "train"+bad+".jsonl", `{"messages": []}`+"\n"); r.status != 400 || r.errParam() != "filename" && r.errParam() != "file" {
			t.Errorf("filename %q: %d %s", bad, r.status, r.raw)
		}
	}
	// Readable names in any script stay allowed.
	e.must(e.do("POST", "/v1/preview/models", e.alice, map[string]any{"project": "проект", "name": "模型-1", "base_model": "test/base"}), 200)

	id := e.createModel("m")
	trajs := []any{map[string]any{"reward": 1, "messages_and_choices": []any{}, "metrics": map[string]any{"ok": 1}}}
	groups := []any{map[string]any{"trajectories": trajs}}
	e.must(e.do("POST", "/v1/preview/models/"+id+"/log", e.alice, map[string]any{"split": "val", "trajectory_groups": groups}), 200)
	if r := e.do("POST", "/v1/preview/models/"+id+"/log", e.alice, map[string]any{"split": "v\u202eal", "trajectory_groups": groups}); r.status != 400 || r.errParam() != "split" {
		t.Errorf("split: %d %s", r.status, r.raw)
	}
	trajs[0].(map[string]any)["metrics"] = map[string]any{"a\u0000b": 1}
	if r := e.do("POST", "/v1/preview/models/"+id+"/log", e.alice, map[string]any{"split": "val", "trajectory_groups": groups}); r.status != 400 ||
		!strings.HasSuffix(r.errParam().(string), "metrics.a\u0000b") {
		t.Errorf("metric name: %d %s", r.status, r.raw)
	}
}

// /v1/system-check answers without a key: it names no server path.
func TestSystemCheckShowsNoPaths(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.must(e.do("GET", "/v1/system-check", "", nil), 200)
	if strings.Contains(string(r.raw), e.dataDir) || strings.Contains(string(r.raw), "testdata") || strings.Contains(string(r.raw), `":"/`) {
		t.Errorf("system check shows server paths: %s", r.raw)
	}
	if r.body["engine"].(map[string]any)["base_models"] == nil {
		t.Errorf("system check lost its base models: %s", r.raw)
	}
}
