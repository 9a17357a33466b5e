package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// multiTurnBodies returns the streamed requests of a 4-turn conversation
// on the SmolLM2-135M shape: a ≈400-token first prompt, each later turn
// re-sending the whole conversation plus an assistant reply and a user
// message (≈50 tokens). id makes the conversation unique from its first
// token, so no other conversation's blocks match it.
func multiTurnBodies(model string, id int) []string {
	msgs := []map[string]string{{"role": "user", "content": fmt.Sprintf("%d. ", id) +
		strings.Repeat("Sample a group of completions for reinforcement learning. ", 16)}}
	var bodies []string
	for turn := range 4 {
		if turn > 0 {
			msgs = append(msgs,
				map[string]string{"role": "assistant", "content": fmt.Sprintf("Answer %d, in brief.", turn)},
				map[string]string{"role": "user", "content": fmt.Sprintf("Turn %d: expand on the second point, in a few more words.", turn+1)})
		}
		m, _ := json.Marshal(msgs)
		bodies = append(bodies, fmt.Sprintf(`{"model":%q,"max_tokens":8,"ignore_eos":true,"stream":true,"logprobs":true,"temperature":0,"messages":%s}`, model, m))
	}
	return bodies
}

// BenchmarkPrefixCacheMultiTurn measures the time to first token of each
// turn of a 4-turn conversation (≈400-token history, ≈50 tokens added per
// turn) on the SmolLM2-135M shape, with the prefix cache (turns 2-4 take
// the history from it) and without it, conversations alternating between
// the two servers so both see the same background load. It reports the
// median TTFT of each turn, the prompt tokens prefilled per turn, and the
// ratio turn 2 / turn 1 with the cache (issue 10: ≤ 0.3). Run with
// -benchtime=5x.
func BenchmarkPrefixCacheMultiTurn(b *testing.B) {
	m := smolLM2Shape(b)
	on, hsOn := benchServer(b, m, Options{})
	off, hsOff := benchServer(b, m, Options{PrefixCacheMB: -1})
	ttft := func(url, body string) time.Duration {
		r, err := streamOnce(context.Background(), url, body)
		if err != nil {
			b.Fatal(err)
		}
		return r.first.Sub(r.start)
	}
	// warm up both
	for _, url := range []string{hsOn.URL, hsOff.URL} {
		ttft(url, multiTurnBodies(m.ID, -1)[0])
	}
	var with, without [4][]time.Duration
	var prefilled, fromCache [4]int64
	var prompt [4]int
	b.ResetTimer()
	for i := range b.N {
		for k, body := range multiTurnBodies(m.ID, i) {
			s0 := on.Stats(m.ID)
			with[k] = append(with[k], ttft(hsOn.URL, body))
			s1 := on.Stats(m.ID)
			prefilled[k] += s1.PromptTokens - s0.PromptTokens
			fromCache[k] += s1.PrefixHitTokens - s0.PrefixHitTokens
		}
		for k, body := range multiTurnBodies(m.ID, i) {
			s0 := off.Stats(m.ID)
			without[k] = append(without[k], ttft(hsOff.URL, body))
			prompt[k] = int(off.Stats(m.ID).PromptTokens - s0.PromptTokens)
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for k := range 4 {
		b.ReportMetric(ms(median(with[k])), fmt.Sprintf("ttft%d_ms", k+1))
		b.ReportMetric(ms(median(without[k])), fmt.Sprintf("ttft%d_nocache_ms", k+1))
		b.ReportMetric(float64(prefilled[k])/float64(b.N), fmt.Sprintf("prefilled%d", k+1))
		b.ReportMetric(float64(fromCache[k])/float64(b.N), fmt.Sprintf("cached%d", k+1))
		b.ReportMetric(float64(prompt[k]), fmt.Sprintf("prompt%d", k+1))
	}
	b.ReportMetric(float64(median(with[1]))/float64(median(with[0])), "ttft2/ttft1")
	b.ReportMetric(float64(median(with[1]))/float64(median(without[1])), "ttft2/nocache")
}
