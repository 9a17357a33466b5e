package rl

import (
	"bytes"
	"encoding/json"
	"flywheel/internal/cputime"
	"fmt"
	"testing"
)

// BenchmarkValidateRL measures the scanner alone on a ~8 MB payload.
func BenchmarkValidateRL(b *testing.B) {
	data := benchPayload()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Used()
	for i := 0; i < b.N; i++ {
		if _, err := Validate(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data))*float64(b.N)/1e6/(cputime.Used()-cpu0).Seconds(), "MB/cpu-s")
}

// BenchmarkStdlibValid is the reference: encoding/json's syntax-only
// check of the same payload.
func BenchmarkStdlibValid(b *testing.B) {
	data := benchPayload()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := cputime.Used()
	for i := 0; i < b.N; i++ {
		json.Valid(data)
	}
	b.ReportMetric(float64(len(data))*float64(b.N)/1e6/(cputime.Used()-cpu0).Seconds(), "MB/cpu-s")
}

// benchPayload is an ~8 MB RL request body.
func benchPayload() []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"model_id": "m", "trajectory_groups": [`)
	for g := 0; buf.Len() < 8<<20; g++ {
		if g > 0 {
			buf.WriteString(", ")
		}
		buf.WriteString(`{"trajectories": [{"messages_and_choices": [{"role": "user", "content": "What is 2 + 2? Please answer briefly."}, {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "four four four four four four four four"}, "logprobs": {"content": [`)
		for t := 0; t < 48; t++ {
			if t > 0 {
				buf.WriteString(", ")
			}
			fmt.Fprintf(&buf, `{"token": "token_id:%d", "logprob": -0.%04d, "bytes": [116, 104], "top_logprobs": []}`, 1000+t, t*37)
		}
		buf.WriteString(`]}}], "reward": 0.5}]}`)
	}
	buf.WriteString("]}")
	return buf.Bytes()
}
