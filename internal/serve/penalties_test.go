package serve

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestPenaltiesLogprobsMatchReference samples with every penalty and a
// logit bias, then recomputes each step from the engine's logits with the
// penalties applied in float64 as vLLM and OpenAI define them: the
// reported logprob of each sampled token and of the top alternatives must
// be those of the penalised, temperature-scaled distribution.
func TestPenaltiesLogprobsMatchReference(t *testing.T) {
	env := newTestEnv(t, Options{})
	msgs := `[{"role":"user","content":"Tell me about flywheels and flywheels."}]`
	prompt := tokenizeMessages(t, env, msgs)
	const temp = 0.8
	for _, c := range []struct{ presence, frequency, repetition float64 }{{0.6, 0.9, 1.4}, {-1.5, -2, 0.7}} {
		checkPenalties(t, env, prompt, temp, c.presence, c.frequency, c.repetition)
	}
}

func checkPenalties(t *testing.T, env *testEnv, prompt []int, temp, presence, frequency, repetition float64) {
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	bias := map[int]float64{prompt[3]: 7, 40: -100, 41: 3}
	wireBias := map[string]int64{}
	for id, b := range bias {
		wireBias[strconv.Itoa(id)] = int64(b)
	}
	resp, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: tinyID, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about flywheels and flywheels.")},
		MaxTokens: openai.Int(24), Seed: openai.Int(11), Temperature: openai.Float(temp),
		PresencePenalty: openai.Float(presence), FrequencyPenalty: openai.Float(frequency), LogitBias: wireBias,
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(4),
	}, option.WithJSONSet("return_tokens_as_token_ids", true), option.WithJSONSet("repetition_penalty", repetition), option.WithJSONSet("ignore_eos", true))
	if err != nil {
		t.Fatal(err)
	}
	content := resp.Choices[0].Logprobs.Content
	if len(content) != 24 {
		t.Fatalf("%d tokens, want 24", len(content))
	}
	parse := func(s string) int {
		id, err := strconv.Atoi(strings.TrimPrefix(s, "token_id:"))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	seq := append([]int(nil), prompt...)
	for _, e := range content {
		seq = append(seq, parse(e.Token))
	}
	logits, err := m.Logits(nil, seq[:len(seq)-1])
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.VocabSize
	counts := map[int]int{}
	seen := map[int]bool{}
	for _, id := range prompt {
		seen[id] = true
	}
	repeats := 0
	for j, e := range content {
		pos := len(prompt) - 1 + j
		row := logits[pos*V : (pos+1)*V]
		z := make([]float64, V)
		for i, v := range row {
			l := float64(v) + bias[i]
			if seen[i] {
				if l > 0 {
					l /= repetition
				} else {
					l *= repetition
				}
			}
			l -= frequency * float64(counts[i])
			if counts[i] > 0 {
				l -= presence
			}
			z[i] = l / temp
		}
		mx := math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, v)
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(v - mx)
		}
		lse := mx + math.Log(sum)
		id := seq[len(prompt)+j]
		if want := z[id] - lse; math.Abs(want-e.Logprob) > 2e-4 {
			t.Fatalf("token %d (%d): logprob %v, reference %v", j, id, e.Logprob, want)
		}
		for _, alt := range e.TopLogprobs {
			a := parse(alt.Token)
			if want := z[a] - lse; math.Abs(want-alt.Logprob) > 2e-4 {
				t.Fatalf("token %d alternative %d: logprob %v, reference %v", j, a, alt.Logprob, want)
			}
		}
		if id == 40 {
			t.Fatalf("token 40 sampled despite a bias of -100")
		}
		if counts[id] > 0 {
			repeats++
		}
		counts[id]++
		seen[id] = true
	}
	t.Logf("presence %v frequency %v repetition %v: %d of 24 tokens repeated an earlier one", presence, frequency, repetition, repeats)
}
