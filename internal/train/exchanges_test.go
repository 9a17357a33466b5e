package train

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/rl"
)

// artExchanges is the body ART 0.5.23 posts for trajectories of exchanges
// (rl's testdata/art_exchanges.json, written with ART's own classes), parsed,
// and the same conversations written as messages_and_choices by hand: per
// trajectory its messages and the choices of its calls, each history ART
// makes of it (rl.TestExchangeHistoriesAsART) in ART's order.
func artExchanges(t *testing.T) (exchanges, legacy []rl.TrajectoryGroup) {
	t.Helper()
	body, err := os.ReadFile("../rl/testdata/art_exchanges.json")
	if err != nil {
		t.Fatal(err)
	}
	req, err := rl.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		TrajectoryGroups []struct {
			Trajectories []struct {
				Exchanges struct {
					ChatCompletions []struct {
						Request struct {
							Messages []json.RawMessage `json:"messages"`
							Tools    []json.RawMessage `json:"tools"`
						} `json:"request"`
						Response struct {
							Choices []json.RawMessage `json:"choices"`
						} `json:"response"`
					} `json:"chat_completions"`
				} `json:"exchanges"`
			} `json:"trajectories"`
		} `json:"trajectory_groups"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	tr := wire.TrajectoryGroups[0].Trajectories
	a, b, c := tr[0].Exchanges.ChatCompletions, tr[1].Exchanges.ChatCompletions, tr[2].Exchanges.ChatCompletions
	// A: [system, user, tool call (call 0), tool result, answer]; the answer
	// of the call at 1 s (list position 2) first, then the one at 2 s.
	am := a[1].Request.Messages
	aHist := func(answer json.RawMessage) []json.RawMessage {
		return []json.RawMessage{am[0], am[1], a[0].Response.Choices[0], am[3], answer}
	}
	// B: choices 0 and 1 of one call (listed 1, 0).
	bHist := func(k int) []json.RawMessage {
		return []json.RawMessage{b[0].Request.Messages[0], b[0].Response.Choices[k]}
	}
	// C: the first answer alone, then the conversation that continued it.
	cm := c[1].Request.Messages
	legacyTraj := func(reward float64, tools []json.RawMessage, first []json.RawMessage, more ...[]json.RawMessage) rl.Trajectory {
		lt := rl.Trajectory{MessagesAndChoices: first, Tools: tools, Reward: reward}
		for _, h := range more {
			lt.AdditionalHistories = append(lt.AdditionalHistories, rl.History{MessagesAndChoices: h})
		}
		return lt
	}
	legacy = []rl.TrajectoryGroup{{Trajectories: []rl.Trajectory{
		legacyTraj(1, a[0].Request.Tools, aHist(a[2].Response.Choices[0]), aHist(a[1].Response.Choices[0])),
		legacyTraj(0, nil, bHist(1), bHist(0)),
		legacyTraj(0.25, nil, []json.RawMessage{cm[0], c[0].Response.Choices[0]},
			[]json.RawMessage{cm[0], c[0].Response.Choices[0], cm[2], c[1].Response.Choices[0]}),
	}}}
	return req.TrajectoryGroups, legacy
}

// runs are the [start, end) spans of true in m.
func runs(m []bool) [][2]int {
	var out [][2]int
	for i := 0; i < len(m); i++ {
		if m[i] && (i == 0 || !m[i-1]) {
			out = append(out, [2]int{i, i})
		}
		if m[i] {
			out[len(out)-1][1] = i + 1
		}
	}
	return out
}

// A trajectory of exchanges trains what the same conversations written as
// messages_and_choices train: the same token sequences with the same old
// logprobs; the one difference is ART's, that a sampled token is trained
// once per trajectory, where it first occurs, so a later history that
// repeats an earlier one's sampled turn (the regeneration of A, the
// continued conversation of C) trains only its own new choice, and B's
// second choice, which sampled the tokens of its first, trains nothing.
func TestExchangesTrainAsMessagesAndChoices(t *testing.T) {
	e := newEnv(t, Options{})
	c := &modelCodec{m: e.base}
	exGroups, legGroups := artExchanges(t)
	ex, err := prepareRL(c, exGroups, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	leg, err := prepareRL(c, legGroups, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(leg.Seqs) != 6 || len(ex.Seqs) != 5 || ex.NumTrajectories != 3 || ex.NumSkipped != 0 || ex.NumNoLogprobs != 0 {
		t.Fatalf("%d sequences (messages_and_choices %d), %+v", len(ex.Seqs), len(leg.Seqs), ex)
	}
	// The exchanges' sequences are the legacy ones less B's second.
	pairs := [][2]int{{0, 0}, {1, 1}, {2, 2}, {3, 4}, {4, 5}}
	cleared := map[int]int{1: 0, 4: 0} // exchanges sequence -> the run no longer trained
	for k, p := range pairs {
		s, l := ex.Seqs[p[0]], leg.Seqs[p[1]]
		if !slices.Equal(s.Tokens, l.Tokens) {
			t.Fatalf("sequence %d: tokens differ\n got %v\nwant %v", k, s.Tokens, l.Tokens)
		}
		if !slices.EqualFunc(s.OldLP, l.OldLP, func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }) {
			t.Fatalf("sequence %d: old logprobs differ", k)
		}
		want := slices.Clone(l.Mask)
		if r, ok := cleared[k]; ok {
			span := runs(l.Mask)[r]
			for i := span[0]; i < span[1]; i++ {
				want[i] = false
			}
		}
		if !slices.Equal(s.Mask, want) {
			t.Fatalf("sequence %d: mask\n got %v\nwant %v", k, s.Mask, want)
		}
		if s.A != l.A || s.Traj != l.Traj {
			t.Fatalf("sequence %d: advantage %v trajectory %d, want %v %d", k, s.A, s.Traj, l.A, l.Traj)
		}
	}
	// Each trajectory's weight counts the tokens it trains.
	near(t, "A's weight", ex.Seqs[0].W, rl.TrajectoryWeight(ex.Seqs[0].NTrain+ex.Seqs[1].NTrain))
	if ex.Seqs[1].NTrain != 3 {
		t.Fatalf("A's second history trains %d tokens, want its answer's 3", ex.Seqs[1].NTrain)
	}

	// B's first choice, explicitly: the template's tokens up to its content,
	// then the sampled ids 60 61 62 with their logprobs, trainable.
	b := ex.Seqs[2]
	text, err := e.base.Template.Render(chattmpl.Input{Messages: []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"Weather in Paris?"}`), json.RawMessage(`{"role":"assistant","content":"QQQ"}`)},
		ContinueFinalMessage: true})
	if err != nil {
		t.Fatal(err)
	}
	q := indexOf(text, "QQQ")
	if q < 0 || len(text) != q+3 {
		t.Fatalf("unexpected render %q", text)
	}
	pre := e.base.Tokenizer.Encode(text[:q], false)
	if want := append(slices.Clone(pre), 60, 61, 62); !slices.Equal(b.Tokens, want) {
		t.Fatalf("B's tokens\n got %v\nwant %v", b.Tokens, want)
	}
	for i := range b.Tokens {
		if b.Mask[i] != (i >= len(pre)) {
			t.Fatalf("B's mask %v", b.Mask)
		}
	}
	for k, lp := range []float64{-0.375, -0.385, -0.395} {
		if math.Abs(b.OldLP[len(pre)+k]-lp) > 1e-12 {
			t.Fatalf("B's old logprob %d = %v, want %v", k, b.OldLP[len(pre)+k], lp)
		}
	}
}

// A history's chat_template_kwargs (those of the calls it came from) are
// template variables when it is rendered for training, as when the calls
// were served.
func TestHistoryChatTemplateKwargs(t *testing.T) {
	e := newEnv(t, Options{})
	m := *e.base
	tmpl, err := chattmpl.Parse(`{% if enable_thinking is defined and not enable_thinking %}[no-think]{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	m.Template = tmpl
	c := &modelCodec{m: &m}
	ids := e.base.Tokenizer.Encode("4", false)
	h := rl.History{MessagesAndChoices: []json.RawMessage{msgJSON("user", "2+2?"), choiceJSON(ids, make([]float64, len(ids)), "4", nil)}}
	for _, kw := range []string{"", `{"enable_thinking": false}`} {
		h.ChatTemplateKwargs = nil
		if kw != "" {
			h.ChatTemplateKwargs = json.RawMessage(kw)
		}
		seq, _, err := tokenizeHistory(c, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		text := e.base.Tokenizer.Decode(seq.Tokens, false)
		if want := (kw != ""); (indexOf(text, "[no-think]") == 0) != want {
			t.Fatalf("kwargs %q: rendered %q", kw, text)
		}
	}
}
