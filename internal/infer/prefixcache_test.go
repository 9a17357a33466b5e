package infer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"flywheel/internal/engine"
)

// randPrompt is n pseudo-random token ids of m's vocabulary.
func randPrompt(m *engine.Model, n int, seed uint64) []int {
	out := make([]int, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = int(x % uint64(m.Config.VocabSize))
	}
	return out
}

// testAdapter is an adapter of m with non-zero B (so it changes the
// model's output), different for each seed.
func testAdapter(t *testing.T, m *engine.Model, seed uint64) *engine.Adapter {
	t.Helper()
	a, err := engine.NewAdapter(m.Config, engine.DefaultLoRAConfig(), seed)
	if err != nil {
		t.Fatal(err)
	}
	x := seed + 1
	for _, mods := range a.Layers {
		for _, p := range mods {
			for i := range p.B {
				x = x*6364136223846793005 + 1442695040888963407
				p.B[i] = float32(int64(x>>40)%2001-1000) * 1e-4
			}
		}
	}
	return a
}

// generate runs one request to its end and returns each choice's tokens.
func generate(t *testing.T, s *Scheduler, r Request) [][]Token {
	t.Helper()
	g, err := s.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, g)
	out := make([][]Token, g.N())
	for i := range out {
		ev := g.Result(i)
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		out[i] = ev.Tokens
	}
	return out
}

// sameTokens fails unless a and b have the same ids and logprobs, exactly
// (tol 0) or within tol.
func sameTokens(t *testing.T, what string, a, b [][]Token, tol float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d vs %d choices", what, len(a), len(b))
	}
	for c := range a {
		if len(a[c]) != len(b[c]) {
			t.Fatalf("%s: choice %d: %d vs %d tokens", what, c, len(a[c]), len(b[c]))
		}
		for i := range a[c] {
			x, y := a[c][i], b[c][i]
			if x.ID != y.ID || math.Abs(float64(x.Logprob-y.Logprob)) > tol || (tol == 0 && x.Logprob != y.Logprob) {
				t.Fatalf("%s: choice %d token %d: %d (%v) vs %d (%v)", what, c, i, x.ID, x.Logprob, y.ID, y.Logprob)
			}
		}
	}
}

func seeded(n int) []engine.SamplingParams {
	ps := make([]engine.SamplingParams, n)
	for i := range ps {
		seed := uint64(7 + i)
		ps[i] = engine.SamplingParams{Temperature: 1, TopP: 0.9, Seed: &seed}
	}
	return ps
}

// TestPrefixCacheExact: a prompt served from the cache gives exactly (bit
// for bit) the tokens and logprobs it gave the first time, and the tokens
// it gets without a cache (logprobs to float rounding: without a cache the
// prompt is prefilled in other passes), greedy and seeded (n = 3, sharing
// the prefill), on the base model and an adapter; all but the last partial
// block come from the cache.
func TestPrefixCacheExact(t *testing.T) {
	m := tinyLM(t)
	a := testAdapter(t, m, 1)
	off := startScheduler(t, m, Options{})
	on := startScheduler(t, m, Options{PrefixCache: NewPrefixCache(64 << 20)})
	k := uint64(0)
	for _, ad := range []*engine.Adapter{nil, a} {
		for _, sp := range [][]engine.SamplingParams{greedy(3), seeded(3)} {
			k++
			r := Request{Prompt: randPrompt(m, 101, k), Adapter: ad, Sampling: sp, MaxTokens: 12, IgnoreEOS: true}
			want := generate(t, off, r)
			before := on.Stats()
			first := generate(t, on, r)
			again := generate(t, on, r)
			st := on.Stats()
			sameTokens(t, "first request with the cache", first, want, 1e-5)
			sameTokens(t, "prompt from the cache", again, first, 0)
			if got := st.PrefixLookups - before.PrefixLookups; got != 2 {
				t.Fatalf("%d lookups, want 2", got)
			}
			if got := st.PrefixHits - before.PrefixHits; got != 1 {
				t.Fatalf("%d hits, want 1", got)
			}
			if got := st.PrefixHitTokens - before.PrefixHitTokens; got != 96 {
				t.Fatalf("%d tokens from the cache, want 96 (6 blocks of the 101-token prompt)", got)
			}
		}
	}
}

// TestPrefixCacheMultiTurn: the next turn of a conversation (the previous
// prompt, the tokens generated for it and new tokens) takes the previous
// turn's prompt and generated tokens from the cache and prefills only the
// rest; its output is the one without the cache (same tokens, logprobs to
// float rounding: the cached keys and values of the generated tokens were
// computed while decoding, which rounds differently from a prefill).
func TestPrefixCacheMultiTurn(t *testing.T) {
	m := tinyLM(t)
	off := startScheduler(t, m, Options{})
	on := startScheduler(t, m, Options{PrefixCache: NewPrefixCache(64 << 20)})
	conv := randPrompt(m, 90, 2)
	for turn := range 4 {
		r := Request{Prompt: conv, Sampling: greedy(1), MaxTokens: 20, IgnoreEOS: true}
		want := generate(t, off, r)
		before := on.Stats()
		got := generate(t, on, r)
		sameTokens(t, fmt.Sprintf("turn %d", turn), got, want, 1e-4)
		st := on.Stats()
		prefilled := st.PromptTokens - before.PromptTokens
		if turn > 0 && prefilled > 50+16 {
			t.Fatalf("turn %d prefilled %d of its %d prompt tokens, want only the new ones (50) and a partial block", turn, prefilled, len(conv))
		}
		t.Logf("turn %d: %d prompt tokens, %d prefilled, %d from the cache", turn, len(conv), prefilled, st.PrefixHitTokens-before.PrefixHitTokens)
		conv = append(conv, ids(got[0])...)
		conv = append(conv, randPrompt(m, 30, uint64(10+turn))...)
	}
}

// TestPrefixCacheAdapters: blocks cached for one adapter are never used for
// another adapter or the base model, nor for the same adapter folder loaded
// again (another *engine.Adapter); whose blocks they are does not change
// the output.
func TestPrefixCacheAdapters(t *testing.T) {
	m := tinyLM(t)
	a, b := testAdapter(t, m, 1), testAdapter(t, m, 2)
	aAgain := testAdapter(t, m, 1)
	off := startScheduler(t, m, Options{})
	on := startScheduler(t, m, Options{PrefixCache: NewPrefixCache(64 << 20)})
	prompt := randPrompt(m, 70, 3)
	req := func(ad *engine.Adapter) Request {
		return Request{Prompt: prompt, Adapter: ad, Sampling: seeded(2), MaxTokens: 8, IgnoreEOS: true}
	}
	generate(t, on, req(a))
	for i, ad := range []*engine.Adapter{b, nil, aAgain} {
		before := on.Stats().PrefixHitTokens
		got := generate(t, on, req(ad))
		if hit := on.Stats().PrefixHitTokens - before; hit != 0 {
			t.Fatalf("adapter %d: %d tokens from blocks of another adapter", i, hit)
		}
		sameTokens(t, fmt.Sprintf("adapter %d", i), got, generate(t, off, req(ad)), 1e-5)
	}
	before := on.Stats().PrefixHitTokens
	generate(t, on, req(a))
	if hit := on.Stats().PrefixHitTokens - before; hit != 64 {
		t.Fatalf("adapter a again: %d tokens from the cache, want 64", hit)
	}
}

// TestPrefixCacheScopes: a request reuses only the blocks of requests of its
// own CacheScope (the server's user), so another tenant's prompt is never a
// hit; the same scope hits as before.
func TestPrefixCacheScopes(t *testing.T) {
	m := tinyLM(t)
	on := startScheduler(t, m, Options{PrefixCache: NewPrefixCache(64 << 20)})
	prompt := randPrompt(m, 70, 4)
	req := func(scope string) Request {
		return Request{Prompt: prompt, Sampling: seeded(1), MaxTokens: 4, IgnoreEOS: true, CacheScope: scope}
	}
	generate(t, on, req("alice"))
	for _, c := range []struct {
		scope string
		want  int64
	}{{"bob", 0}, {"", 0}, {"alicebob", 0}, {"alice", 64}, {"bob", 64}} {
		before := on.Stats().PrefixHitTokens
		generate(t, on, req(c.scope))
		if hit := on.Stats().PrefixHitTokens - before; hit != c.want {
			t.Fatalf("scope %q: %d tokens from the cache, want %d", c.scope, hit, c.want)
		}
	}
}

// TestPrefixCacheEviction: the cache stays within its budget, evicting the
// least recently used blocks, the later blocks of a prefix before the
// earlier ones.
func TestPrefixCacheEviction(t *testing.T) {
	m := tinyLM(t)
	block := int64(4 * PrefixBlockTokens * m.KVFloatsPerToken())
	pc := NewPrefixCache(6 * block)
	s := startScheduler(t, m, Options{PrefixCache: pc})
	x, y := randPrompt(m, 65, 4), randPrompt(m, 65, 5) // 4 full blocks each
	run := func(p []int) int64 {
		before := s.Stats().PrefixHitTokens
		generate(t, s, Request{Prompt: p, Sampling: greedy(1), MaxTokens: 1})
		if st := pc.Stats(); st.Bytes > st.Budget || st.Bytes != int64(st.Blocks)*block {
			t.Fatalf("cache holds %d bytes in %d blocks, budget %d", st.Bytes, st.Blocks, st.Budget)
		}
		return s.Stats().PrefixHitTokens - before
	}
	run(x)
	if st := pc.Stats(); st.Blocks != 4 || st.Evictions != 0 {
		t.Fatalf("after x: %+v", st)
	}
	run(y) // needs 2 of x's blocks: its last two go
	if st := pc.Stats(); st.Blocks != 6 || st.Evictions != 2 {
		t.Fatalf("after y: %+v", st)
	}
	if hit := run(x); hit != 32 {
		t.Fatalf("x again: %d tokens from the cache, want its first two blocks (32)", hit)
	}
	if NewPrefixCache(0) != nil || NewPrefixCache(-1) != nil {
		t.Fatal("a cache with no budget")
	}
	tiny := NewPrefixCache(block - 1) // not even one block: nothing cached
	s2 := startScheduler(t, m, Options{PrefixCache: tiny})
	generate(t, s2, Request{Prompt: x, Sampling: greedy(1), MaxTokens: 1})
	if st := tiny.Stats(); st.Blocks != 0 || st.Bytes != 0 {
		t.Fatalf("cache below one block: %+v", st)
	}
}

// TestPrefixCacheConcurrent: concurrent requests sharing a long prefix
// (different endings, different adapters) take it from one another's
// blocks as soon as one has prefilled it, and each gets the output it gets
// alone without the cache (same tokens, logprobs to float rounding, as for
// any batching).
func TestPrefixCacheConcurrent(t *testing.T) {
	m := tinyLM(t)
	a := testAdapter(t, m, 1)
	off := startScheduler(t, m, Options{})
	on := startScheduler(t, m, Options{PrefillChunk: 64, PrefixCache: NewPrefixCache(64 << 20)})
	shared := randPrompt(m, 200, 6)
	const N = 8
	reqs := make([]Request, N)
	for i := range reqs {
		p := append(append([]int(nil), shared...), randPrompt(m, 5+3*i, uint64(20+i))...)
		var ad *engine.Adapter
		if i%2 == 1 {
			ad = a
		}
		reqs[i] = Request{Prompt: p, Adapter: ad, Sampling: greedy(1), MaxTokens: 10, IgnoreEOS: true}
	}
	got := make([][][]Token, N)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = generate(t, on, reqs[i]) }()
	}
	wg.Wait()
	for i := range reqs {
		sameTokens(t, fmt.Sprintf("request %d", i), got[i], generate(t, off, reqs[i]), 1e-4)
	}
	st := on.Stats()
	// All but the first of each adapter find the shared prefix (12 blocks),
	// from where their prefill has got to.
	if st.PrefixHits < N-2 || st.PrefixHitTokens < (N-2)*128 {
		t.Fatalf("%d of %d requests took %d tokens from the cache, want all but the first of each adapter, most of 192 each", st.PrefixHits, N, st.PrefixHitTokens)
	}
	t.Logf("%d of %d requests took %d tokens from the cache", st.PrefixHits, N, st.PrefixHitTokens)
}
