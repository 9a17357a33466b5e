package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"

	"flywheel/internal/auth"
	"flywheel/internal/engine"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
)

// samplePlan is a validated SamplingRequest: what chat completions and
// completions share.
type samplePlan struct {
	n              int
	maxTokens      int    // 0: the endpoint's default
	maxTokensParam string // the field max_tokens came in (errors)
	temperature    *float64
	topP           *float64
	topK           *int
	minP           *float64
	seed           *uint64
	stop           []string
	stopIDs        map[int]bool
	logprobs       bool // report logprobs
	topLogprobs    int  // alternatives per token
	asIDs          bool
	stream         bool
	includeUsage   bool
	ignoreEOS      bool
	penalties      *infer.Penalties // nil: none
	format         *jnode           // response_format's grammar; nil: free text
	promptLogprobs int              // vLLM's prompt_logprobs; -1: none
}

// parseSampling validates the shared fields. Every value the server cannot
// honour is an error that names it. maxParam names max_tokens in errors.
func parseSampling(req *SamplingRequest, opts *Options, maxParam string) (*samplePlan, error) {
	pl := &samplePlan{n: 1, maxTokensParam: maxParam, promptLogprobs: -1}
	var err error
	if err := checkSamplingLimits(req); err != nil {
		return nil, err
	}
	if req.N != nil {
		if *req.N < 1 || *req.N > opts.MaxN {
			return nil, unsupported("n", "n must be between 1 and %d, got %d", opts.MaxN, *req.N)
		}
		pl.n = *req.N
	}
	if mt := req.MaxTokens; mt != nil {
		if *mt < 1 {
			return nil, httpx.Invalid(maxParam, "invalid_value", "%s must be at least 1, got %d", maxParam, *mt)
		}
		pl.maxTokens = *mt
	}
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 2 || math.IsNaN(*t) {
			return nil, httpx.Invalid("temperature", "invalid_value", "temperature must be between 0 and 2, got %v", *t)
		}
		pl.temperature = t
	}
	if t := req.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return nil, httpx.Invalid("top_p", "invalid_value", "top_p must be in (0, 1], got %v", *t)
		}
		pl.topP = t
	}
	if t := req.TopK; t != nil {
		if *t < -1 {
			return nil, httpx.Invalid("top_k", "invalid_value", "top_k must be -1 (off), 0 (off) or positive, got %d", *t)
		}
		k := max(*t, 0)
		pl.topK = &k
	}
	if t := req.MinP; t != nil {
		if !(*t >= 0 && *t <= 1) {
			return nil, httpx.Invalid("min_p", "invalid_value", "min_p must be in [0, 1], got %v", *t)
		}
		pl.minP = t
	}
	if req.Seed != nil {
		v := uint64(*req.Seed)
		pl.seed = &v
	}
	if !isNull(req.Stop) {
		var one string
		var many []string
		if err := json.Unmarshal(req.Stop, &one); err == nil {
			many = []string{one}
		} else if err := json.Unmarshal(req.Stop, &many); err != nil {
			return nil, httpx.Invalid("stop", "invalid_type", "stop: expected a string or an array of strings")
		}
		if len(many) > 16 {
			return nil, unsupported("stop", "at most 16 stop strings are supported, got %d", len(many))
		}
		for _, s := range many {
			if err := checkStop(s); err != nil {
				return nil, err
			}
			if s != "" {
				pl.stop = append(pl.stop, s)
			}
		}
	}
	if len(req.StopTokenIDs) > 0 {
		pl.stopIDs = map[int]bool{}
		for _, id := range req.StopTokenIDs {
			pl.stopIDs[id] = true
		}
	}
	if req.ReturnTokensAsTokenIDs != nil {
		pl.asIDs = *req.ReturnTokensAsTokenIDs
	}
	if req.Stream != nil {
		pl.stream = *req.Stream
	}
	if req.StreamOptions != nil {
		if !pl.stream {
			return nil, httpx.Invalid("stream_options", "invalid_value", "stream_options is only allowed when stream is true")
		}
		pl.includeUsage = req.StreamOptions.IncludeUsage
	}
	if pl.format, err = parseResponseFormat(req.ResponseFormat); err != nil {
		return nil, err
	}
	if pl.penalties, err = parsePenalties(req.PresencePenalty, req.FrequencyPenalty, req.RepetitionPenalty, req.LogitBias); err != nil {
		return nil, err
	}
	if req.IgnoreEOS != nil {
		pl.ignoreEOS = *req.IgnoreEOS
	}
	if req.PromptLogprobs != nil {
		if *req.PromptLogprobs < 0 || *req.PromptLogprobs > opts.MaxTopLogprobs {
			return nil, unsupported("prompt_logprobs", "prompt_logprobs must be between 0 and %d, got %d", opts.MaxTopLogprobs, *req.PromptLogprobs)
		}
		pl.promptLogprobs = *req.PromptLogprobs
	}
	return pl, nil
}

// checkVocab checks the token ids the plan names against lm's vocabulary.
func (pl *samplePlan) checkVocab(lm *servedModel) error {
	for id := range pl.stopIDs {
		if id < 0 || id >= lm.m.Config.VocabSize {
			return httpx.Invalid("stop_token_ids", "invalid_value", "stop_token_ids: token id %d is out of range [0, %d)", id, lm.m.Config.VocabSize)
		}
	}
	return checkLogitBias(pl.penalties, lm)
}

// inferRequest builds the scheduler request of prompt under the plan:
// max_tokens (0: defaultMax, -1 for the rest of the context) checked against
// the context length (promptParam names the prompt in errors), sampling,
// stops, penalties, response_format's constraint, the adapter.
func (s *Server) inferRequest(ctx context.Context, p *auth.Principal, pl *samplePlan, target Target, lm *servedModel, prompt []int, promptParam string, defaultMax int) (infer.Request, error) {
	maxTokens := pl.maxTokens
	if maxTokens == 0 {
		maxTokens = defaultMax
		if maxTokens <= 0 {
			maxTokens = lm.rules.Room(len(prompt))
		}
	}
	if len(prompt)+maxTokens > lm.maxLen() || maxTokens < 1 {
		param := promptParam
		if pl.maxTokens > 0 {
			param = pl.maxTokensParam
		}
		return infer.Request{}, &httpx.Error{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
			Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
				lm.maxLen(), len(prompt)+max(maxTokens, 0), len(prompt), promptParam, max(maxTokens, 0), promptParam)}
	}
	ir := infer.Request{
		Prompt:     prompt,
		Sampling:   pl.sampling(lm),
		MaxTokens:  maxTokens,
		Stop:       pl.stop,
		StopIDs:    pl.stopIDs,
		IgnoreEOS:  pl.ignoreEOS,
		Penalties:  pl.penalties,
		CacheScope: p.UserID, // a user's requests share cached prefixes; tenants never do
		Tenant:     tenantOf(p),
	}
	if pl.format != nil {
		if maxTokens < pl.format.minCost {
			return infer.Request{}, httpx.Invalid(pl.maxTokensParam, "invalid_value", "%s %d is below the %d tokens the shortest output valid for response_format may need", pl.maxTokensParam, maxTokens, pl.format.minCost)
		}
		ir.NewConstraint = newJSONConstraint(lm, pl.format, maxTokens)
	}
	if target.AdapterDir != "" {
		a, err := s.adapters.Get(target.BaseModel, target.AdapterDir, lm.m.Config)
		if err != nil {
			s.log.Error("serve: load adapter", "model", target.Name, "dir", target.AdapterDir, "err", err)
			return infer.Request{}, &httpx.Error{Status: http.StatusInternalServerError, Message: "the checkpoint of " + target.Name + " could not be loaded", Code: "adapter_load_failed"}
		}
		ir.Adapter = a
	}
	return ir, nil
}

// sampling builds the per-choice sampling parameters, defaults from the
// model's generation config.
func (pl *samplePlan) sampling(lm *servedModel) []engine.SamplingParams {
	g := lm.m.Gen
	base := engine.SamplingParams{Temperature: g.Temperature, TopP: g.TopP, TopK: g.TopK, MinP: g.MinP}
	if pl.temperature != nil {
		base.Temperature = *pl.temperature
	}
	if pl.topP != nil {
		base.TopP = *pl.topP
	}
	if pl.topK != nil {
		base.TopK = *pl.topK
	}
	if pl.minP != nil {
		base.MinP = *pl.minP
	}
	base.TopLogprobs = pl.topLogprobs
	out := make([]engine.SamplingParams, pl.n)
	seeds := make([]uint64, pl.n)
	for i := range out {
		out[i] = base
		if pl.seed != nil {
			seeds[i] = *pl.seed + uint64(i)
		} else {
			seeds[i] = rand.Uint64()
		}
		out[i].Seed = &seeds[i]
	}
	return out
}
