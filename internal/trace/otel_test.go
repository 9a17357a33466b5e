package trace

import (
	"bytes"
	"math"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// pbMsg builds a protobuf message from (field, value) pairs: a []byte or
// string is a bytes field, a uint64 a varint, a float64 a fixed64 double, a
// fixed64 a fixed64.
type fixed64 uint64

func pbMsg(fields ...any) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 2 {
		num := protowire.Number(fields[i].(int))
		switch v := fields[i+1].(type) {
		case []byte:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, v)
		case string:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, v)
		case uint64:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		case float64:
			b = protowire.AppendTag(b, num, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(v))
		case fixed64:
			b = protowire.AppendTag(b, num, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, uint64(v))
		}
	}
	return b
}

// kv is an OTLP KeyValue {key = 1, value = 2: AnyValue}.
func kv(key string, value []byte) []byte { return pbMsg(1, key, 2, value) }

func TestOtelExport(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		traceID := bytes.Repeat([]byte{0xab}, 16)
		rootID, childID := []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{9, 9, 9, 9, 9, 9, 9, 9}
		const t0 = 1_767_225_600_000_000_000 // 2026-01-01T00:00:00Z in ns
		root := pbMsg(1, traceID, 2, rootID, 5, "agent.run", 7, fixed64(t0), 8, fixed64(t0+1_500_000_000),
			9, kv("llm.model", pbMsg(1, "gpt-4")), 9, kv("n", pbMsg(3, uint64(3))), 9, kv("ok", pbMsg(2, uint64(1))),
			9, kv("p", pbMsg(4, 0.25)), 9, kv("tags", pbMsg(5, pbMsg(1, pbMsg(1, "a"), 1, pbMsg(3, uint64(2))))))
		child := pbMsg(1, traceID, 2, childID, 4, rootID, 5, "tool.call", 7, fixed64(t0+100_000_000), 8, fixed64(t0+200_000_000),
			15, pbMsg(2, "boom", 3, uint64(2)))
		req := pbMsg(1, pbMsg(1, pbMsg(1, kv("service.name", pbMsg(1, "svc"))), 2, pbMsg(2, root, 2, child)))
		post := func(user, project, ctype string, body []byte) (int, []byte) {
			r, _ := http.NewRequest("POST", e.srv.URL+"/otel/v1/traces", bytes.NewReader(body))
			r.Header.Set("Content-Type", ctype)
			if project != "" {
				r.Header.Set("project_id", project)
			}
			return e.do(user, r)
		}
		if st, out := post("alice", proj, "application/x-protobuf", req); st != 200 || len(out) != 0 {
			t.Fatalf("export: %d %q", st, out)
		}
		c := e.read("alice", proj, "0102030405060708", nil)
		if c == nil || c["op_name"] != "agent.run" || c["trace_id"] != strings.Repeat("ab", 16) || c["parent_id"] != nil ||
			c["started_at"] != "2026-01-01T00:00:00.000000Z" || platform(c)["latency_ms"] != 1500.0 || platform(c)["status"] != "success" {
			t.Fatalf("root: %v", c)
		}
		attrs := c["attributes"].(map[string]any)
		if attrs["llm.model"] != "gpt-4" || attrs["n"] != 3.0 || attrs["ok"] != true || attrs["p"] != 0.25 ||
			len(attrs["tags"].([]any)) != 2 || attrs["otel.resource"].(map[string]any)["service.name"] != "svc" {
			t.Fatalf("attributes: %v", attrs)
		}
		k := e.read("alice", proj, "0909090909090909", nil)
		if k == nil || k["parent_id"] != "0102030405060708" || k["exception"] != "boom" || platform(k)["status"] != "error" {
			t.Fatalf("child: %v", k)
		}
		if st, _ := post("bob", proj, "application/x-protobuf", req); st != 403 {
			t.Fatalf("bob: %d", st)
		}
		if st, _ := post("alice", "", "application/x-protobuf", req); st != 400 {
			t.Fatalf("no project: %d", st)
		}
		if st, _ := post("alice", proj, "application/json", []byte("{}")); st != 400 {
			t.Fatalf("json: %d", st)
		}
		if st, out := post("alice", proj, "application/x-protobuf", []byte{0x0a, 0xff}); st != 400 || !strings.Contains(string(out), "OTLP") {
			t.Fatalf("malformed: %d %s", st, out)
		}
		bad := pbMsg(1, pbMsg(2, pbMsg(2, pbMsg(1, []byte{1}, 2, rootID, 5, "x", 7, fixed64(t0)))))
		if st, out := post("alice", proj, "application/x-protobuf", bad); st != 400 || !strings.Contains(string(out), "spans[0]") {
			t.Fatalf("short trace id: %d %s", st, out)
		}
	})
}

// FuzzDecodeOtel: any bytes decode to spans or an error, never a panic or
// a hang (the body is hostile input).
func FuzzDecodeOtel(f *testing.F) {
	span := pbMsg(1, bytes.Repeat([]byte{1}, 16), 2, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 5, "x", 7, fixed64(1),
		9, kv("a", pbMsg(5, pbMsg(1, pbMsg(6, pbMsg(1, kv("b", pbMsg(4, 1.5))))))))
	f.Add(pbMsg(1, pbMsg(1, pbMsg(1, kv("service.name", pbMsg(1, "svc"))), 2, pbMsg(2, span))))
	f.Add([]byte{0x0a, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, err := decodeOtel(b)
		if err == nil {
			for _, sp := range spans {
				if _, err := Canonicalize(sp.attrs); err != nil {
					t.Fatalf("attributes %q: %v", sp.attrs, err)
				}
			}
		}
	})
}
