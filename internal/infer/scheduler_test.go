package infer

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
)

var (
	tinyOnce  sync.Once
	tinyModel *engine.Model
	tinyErr   error
)

// tinyLM returns the built-in tiny model (random weights, real BPE
// tokenizer), written once into a temp folder.
func tinyLM(t testing.TB) *engine.Model {
	t.Helper()
	tinyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "infer-models-")
		if err != nil {
			tinyErr = err
			return
		}
		if tinyErr = tiny.Ensure(dir); tinyErr != nil {
			return
		}
		tinyModel, tinyErr = engine.NewRegistry(dir).Get(tiny.ID)
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyModel
}

func startScheduler(t *testing.T, m *engine.Model, opts Options) *Scheduler {
	t.Helper()
	s, err := NewScheduler(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func greedy(n int) []engine.SamplingParams { return make([]engine.SamplingParams, n) }

func wait(t *testing.T, g *Generation) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Fatal("generation did not end:", err)
	}
}

// engineGreedy decodes n tokens greedily with the engine alone.
func engineGreedy(t *testing.T, m *engine.Model, prompt []int, n int) []int {
	t.Helper()
	seq := m.NewSeq(nil)
	defer seq.Release()
	var out []int
	feed := prompt
	for range n {
		lg, err := m.Forward([]*engine.Seq{seq}, [][]int{feed})
		if err != nil {
			t.Fatal(err)
		}
		id, _, _ := engine.NewSampler(engine.SamplingParams{}).Sample(lg[0])
		out = append(out, id)
		feed = []int{id}
	}
	return out
}

func ids(toks []Token) []int {
	out := make([]int, len(toks))
	for i, t := range toks {
		out[i] = t.ID
	}
	return out
}

// TestSchedulerGreedyMatchesEngine runs concurrent requests through one
// scheduler (prefill chunked across steps, n=3 sharing one prefill) and
// checks every choice against a greedy decode by the engine alone, with
// the text the tokenizer decodes.
func TestSchedulerGreedyMatchesEngine(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{PrefillChunk: 7})
	prompts := []string{"Once upon a time", "The quick brown fox jumps over", "hello"}
	gens := make([]*Generation, len(prompts))
	for i, p := range prompts {
		g, err := s.Submit(context.Background(), Request{Prompt: m.Tokenizer.Encode(p, false), Sampling: greedy(3), MaxTokens: 12, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		gens[i] = g
	}
	for i, g := range gens {
		wait(t, g)
		prompt := m.Tokenizer.Encode(prompts[i], false)
		want := engineGreedy(t, m, prompt, 12)
		for c := range g.N() {
			ev := g.Result(c)
			if ev.Err != nil || ev.Finish != FinishLength {
				t.Fatalf("prompt %d choice %d: finish %q err %v, want length", i, c, ev.Finish, ev.Err)
			}
			if got := ids(ev.Tokens); !slices.Equal(got, want) {
				t.Fatalf("prompt %d choice %d: tokens %v, engine alone %v", i, c, got, want)
			}
			if text := m.Tokenizer.Decode(want, true); ev.Text != text {
				t.Fatalf("prompt %d choice %d: text %q, want %q", i, c, ev.Text, text)
			}
		}
	}
	st := s.Stats()
	if want := int64(len(m.Tokenizer.Encode(prompts[0], false)) + len(m.Tokenizer.Encode(prompts[1], false)) + len(m.Tokenizer.Encode(prompts[2], false))); st.PromptTokens != want {
		t.Fatalf("prefilled %d prompt tokens, want %d (once per request)", st.PromptTokens, want)
	}
	if st.GenTokens != 3*3*12 || st.Active != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// forceSeq is a toy constraint: it allows only toks, in order, then only
// end, which ends the choice.
type forceSeq struct {
	toks []int
	end  int
	i    int
	buf  []float32
}

func (f *forceSeq) Mask(lg []float32) []float32 {
	want := f.end
	if f.i < len(f.toks) {
		want = f.toks[f.i]
	}
	f.buf = append(f.buf[:0], lg...)
	for i := range f.buf {
		if i != want {
			f.buf[i] = float32(math.Inf(-1))
		}
	}
	return f.buf
}

func (f *forceSeq) Advance(tok int) bool {
	if f.i < len(f.toks) {
		f.i++
		return false
	}
	return tok == f.end
}

func forcing(toks []int, end int) func() Constraint {
	return func() Constraint { return &forceSeq{toks: toks, end: end} }
}

// TestConstraintForcesTokens samples three choices at temperature 1 under a
// constraint that forces a token sequence and then an end token the
// constraint ends the choice with (ignore_eos notwithstanding): every choice
// is that sequence, with logprob 0 under the masked distribution, and the
// end token is in the tokens but not the text.
func TestConstraintForcesTokens(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{})
	forced := m.Tokenizer.Encode(" forced words", false)
	end := m.EOS()[0]
	sampling := []engine.SamplingParams{{Temperature: 1}, {Temperature: 1}, {Temperature: 1}}
	g, err := s.Submit(context.Background(), Request{Prompt: m.Tokenizer.Encode("Say something", false), Sampling: sampling,
		MaxTokens: 50, IgnoreEOS: true, NewConstraint: forcing(forced, end)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, g)
	want := append(append([]int(nil), forced...), end)
	for c := range g.N() {
		ev := g.Result(c)
		if ev.Finish != FinishStop || ev.Err != nil {
			t.Fatalf("choice %d: finish %q err %v, want stop", c, ev.Finish, ev.Err)
		}
		if got := ids(ev.Tokens); !slices.Equal(got, want) {
			t.Fatalf("choice %d: tokens %v, want %v", c, got, want)
		}
		if ev.Text != " forced words" {
			t.Fatalf("choice %d: text %q", c, ev.Text)
		}
		for k, tok := range ev.Tokens {
			if tok.Logprob != 0 {
				t.Fatalf("choice %d token %d: logprob %v under a one-token mask, want 0", c, k, tok.Logprob)
			}
		}
	}
}

// TestStopStringAcrossTokens forces a text whose stop string starts in one
// token and ends in the next: the output ends before the stop string, and
// no streamed piece ever showed part of it.
func TestStopStringAcrossTokens(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{})
	text := " the cat sat on the mat and then the dog"
	forced := m.Tokenizer.Encode(text, false)
	// a stop string from the last two bytes of one token to the first two
	// of the next, past the middle of the text
	k := len(forced) / 2
	a, b := string(m.Tokenizer.TokenBytes(forced[k])), string(m.Tokenizer.TokenBytes(forced[k+1]))
	if len(a) < 2 || len(b) < 2 {
		t.Skipf("tokens %q %q too short for this test", a, b)
	}
	stop := a[len(a)-2:] + b[:2]
	var full strings.Builder
	for _, id := range forced {
		full.Write(m.Tokenizer.TokenBytes(id))
	}
	at := len(a) - 2
	for _, id := range forced[:k] {
		at += len(m.Tokenizer.TokenBytes(id))
	}
	if strings.Index(full.String(), stop) != at {
		t.Skipf("stop %q occurs before token %d", stop, k)
	}
	prefix := full.String()[:at]
	g, err := s.Submit(context.Background(), Request{Prompt: m.Tokenizer.Encode("Go", false), Sampling: greedy(1), MaxTokens: 100,
		IgnoreEOS: true, Stop: []string{"never", stop}, NewConstraint: forcing(forced, m.EOS()[0])})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	for {
		ev := g.Poll(0)
		streamed.WriteString(ev.Text)
		if !strings.HasPrefix(prefix, streamed.String()) {
			t.Fatalf("streamed %q, beyond the text before the stop string %q", streamed.String(), prefix)
		}
		if ev.Done {
			if ev.Finish != FinishStop {
				t.Fatalf("finish %q, want stop", ev.Finish)
			}
			break
		}
		<-g.Changed()
	}
	if streamed.String() != prefix {
		t.Fatalf("output %q, want %q (up to the stop string %q)", streamed.String(), prefix, stop)
	}
	if got := len(g.Result(0).Tokens); got != k+2 {
		t.Fatalf("%d tokens, want %d (up to the one completing the stop string)", got, k+2)
	}
}

// TestHeldTextFlushedAtLength: text held back as a possible stop-string
// start is output when the choice ends by length.
func TestHeldTextFlushedAtLength(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{})
	text := " a small test"
	forced := m.Tokenizer.Encode(text, false)
	g, err := s.Submit(context.Background(), Request{Prompt: m.Tokenizer.Encode("Go", false), Sampling: greedy(1), MaxTokens: len(forced),
		Stop: []string{"st!"}, NewConstraint: forcing(forced, m.EOS()[0])})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, g)
	if ev := g.Result(0); ev.Finish != FinishLength || ev.Text != text {
		t.Fatalf("finish %q text %q, want length %q", ev.Finish, ev.Text, text)
	}
}

// TestStopIDsAndEOS: a stop id ends the choice (in the tokens, not the
// text), and so does an EOS token unless IgnoreEOS.
func TestStopIDsAndEOS(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{})
	forced := m.Tokenizer.Encode(" one two three four", false)
	for _, c := range []struct {
		name     string
		req      Request
		wantToks []int
	}{
		{"stop id", Request{StopIDs: map[int]bool{forced[2]: true}}, forced[:3]},
		{"eos", Request{}, append(append([]int(nil), forced...), m.EOS()[0])},
	} {
		r := c.req
		r.Prompt, r.Sampling, r.MaxTokens, r.NewConstraint = m.Tokenizer.Encode("Go", false), greedy(1), 50, forcing(forced, m.EOS()[0])
		g, err := s.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, g)
		ev := g.Result(0)
		wantText := m.Tokenizer.Decode(c.wantToks[:len(c.wantToks)-1], true)
		if got := ids(ev.Tokens); ev.Finish != FinishStop || !slices.Equal(got, c.wantToks) || ev.Text != wantText {
			t.Fatalf("%s: finish %q, tokens %v text %q; want stop, %v, %q", c.name, ev.Finish, got, ev.Text, c.wantToks, wantText)
		}
	}
}

// TestCancel cancels a running request and a queued one: both end
// FinishCancelled and the batch empties.
func TestCancel(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{MaxBatch: 2})
	long := Request{Prompt: m.Tokenizer.Encode("Go on and on", false), Sampling: greedy(2), MaxTokens: 1500, IgnoreEOS: true}
	ctx1, cancel1 := context.WithCancel(context.Background())
	running, err := s.Submit(ctx1, long)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	queued, err := s.Submit(ctx2, long)
	if err != nil {
		t.Fatal(err)
	}
	for running.TokenCount() == 0 {
		<-running.Changed()
	}
	if st := s.Stats(); st.Active != 2 || st.Queued != 1 {
		t.Fatalf("stats %+v, want 2 active, 1 queued", st)
	}
	cancel2()
	cancel1()
	wait(t, running)
	wait(t, queued)
	for _, g := range []*Generation{running, queued} {
		for c := range g.N() {
			if ev := g.Result(c); ev.Finish != FinishCancelled || ev.Err != nil {
				t.Fatalf("finish %q err %v, want cancelled", ev.Finish, ev.Err)
			}
		}
	}
	if n := len(queued.Result(0).Tokens); n != 0 {
		t.Fatalf("the queued request generated %d tokens", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := s.Stats(); st.Active != 0 || st.Queued != 0; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v after cancel", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSubmitErrors: a full queue, an invalid request, a closed scheduler.
func TestSubmitErrors(t *testing.T) {
	m := tinyLM(t)
	s := newScheduler(m, Options{MaxBatch: 1, MaxQueue: 1}) // loop not started: nothing is admitted
	r := Request{Prompt: []int{1, 2}, Sampling: greedy(1), MaxTokens: 4}
	if _, err := s.Submit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), r); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second request: %v, want ErrQueueFull", err)
	}
	for _, bad := range []Request{{Sampling: greedy(1), MaxTokens: 1}, {Prompt: []int{1}, MaxTokens: 1}, {Prompt: []int{1}, Sampling: greedy(1)}, {Prompt: []int{1}, Sampling: greedy(1), MaxTokens: 1, Stop: []string{""}}} {
		if _, err := s.Submit(context.Background(), bad); err == nil || errors.Is(err, ErrQueueFull) {
			t.Fatalf("%+v: %v, want a validation error", bad, err)
		}
	}

	s2 := startScheduler(t, m, Options{})
	g, err := s2.Submit(context.Background(), Request{Prompt: []int{1, 2}, Sampling: greedy(1), MaxTokens: 1500, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if ev := g.Result(0); !ev.Done || !errors.Is(ev.Err, ErrClosed) {
		t.Fatalf("after Close: done %v err %v, want ErrClosed", ev.Done, ev.Err)
	}
	if _, err := s2.Submit(context.Background(), r); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after Close: %v", err)
	}
}

// TestFinishLeaderEndsClones checks that ending a group leader before its
// prompt is prefilled (cancellation, a failed prefill, shutdown) ends the
// choices waiting to clone it with the same reason or error.
func TestFinishLeaderEndsClones(t *testing.T) {
	s := &Scheduler{}
	for _, c := range []struct {
		reason string
		err    error
	}{{FinishCancelled, nil}, {"", errors.New("prefill failed")}} {
		g := newGeneration(context.Background(), Request{Sampling: greedy(4)})
		var sts []*seqState
		for _, o := range g.outs {
			sts = append(sts, &seqState{gen: g, out: o})
		}
		lead := sts[0]
		lead.clones = sts[1:]
		s.active = []*seqState{lead}
		if s.running() != 4 {
			t.Fatalf("running %d, want 4", s.running())
		}
		s.finish(lead, c.reason, c.err)
		if !g.Done() {
			t.Fatal("clones not finished with their leader")
		}
		for i := range g.N() {
			if ev := g.Result(i); ev.Finish != c.reason || ev.Err != c.err {
				t.Fatalf("choice %d: finish %q err %v, want %q %v", i, ev.Finish, ev.Err, c.reason, c.err)
			}
		}
		s.removeDone()
		if s.running() != 0 || len(lead.clones) != 0 {
			t.Fatalf("running %d after finish", s.running())
		}
	}
}

// TestAdapterCache: an adapter is loaded once however often it is asked
// for; a failed load is not cached.
func TestAdapterCache(t *testing.T) {
	m := tinyLM(t)
	dir := filepath.Join(t.TempDir(), "step-0")
	a, err := engine.NewAdapter(m.Config, engine.DefaultLoRAConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Save(dir, tiny.ID); err != nil {
		t.Fatal(err)
	}
	c := NewAdapterCache(2)
	for range 3 {
		if _, err := c.Get(tiny.ID, dir, m.Config); err != nil {
			t.Fatal(err)
		}
	}
	if c.Loads() != 1 {
		t.Fatalf("%d loads, want 1", c.Loads())
	}
	missing := filepath.Join(t.TempDir(), "nope")
	for range 2 {
		if _, err := c.Get(tiny.ID, missing, m.Config); err == nil {
			t.Fatal("missing adapter loaded")
		}
	}
	if c.Loads() != 3 {
		t.Fatalf("%d loads, want 3 (failures are not cached)", c.Loads())
	}
}
