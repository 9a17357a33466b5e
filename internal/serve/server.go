// Package serve is flywheel's OpenAI-compatible inference server: chat
// completions (plain and streamed, with logprobs, tool calls and structured
// outputs), completions (/v1/completions: text or token-id prompts, echo,
// legacy logprobs) and responses (/v1/responses, on the chat path, see
// responses.go) on base models and trained LoRA checkpoints, GET
// /v1/models and /v1/models/{id}, and the vLLM-style /tokenize and
// /detokenize endpoints. vLLM's prompt_logprobs (the model's logprobs of
// the prompt tokens, temperature 1) come from the scheduler's prefill
// (infer.Request.PromptLogits).
//
// # Wiring
//
//	srv := serve.New(registry, serve.NewStoreResolver(st), traceService, serve.Options{Logger: log})
//	srv.Register(rt) // in httpx.OpenAIAPI: behind the Bearer-auth middleware
//	defer srv.Close()
//
// # Model addressing
//
// A request's model is a base model id of the registry, or a trained model
// "entity/project/name" (latest step) or "entity/project/name:step{N}",
// optionally behind an artifact-URI prefix "<scheme>:///", which is ignored.
// A model that does not exist (an unknown id, a trained model of an entity
// the caller is not a member of, a missing step) is OpenAI's 404
// model_not_found (ModelNotFound), which the SDKs raise as NotFoundError.
//
// # Inference
//
// Generation runs in internal/infer: one continuous-batching scheduler per
// base model (created on the model's first request), sequences of different
// LoRA checkpoints in the same batch, adapters in an LRU cache. Options
// carries its settings (MaxBatch, MaxQueue, PrefillChunk, AdapterCacheSize,
// PrefixCacheMB). Prompts' KV blocks are kept across requests in one prefix
// cache (infer.PrefixCache, a memory budget shared by all base models), so a
// multi-turn conversation that re-sends its history prefills only the new
// tokens.
// This package turns a request into an infer.Request: the chat template
// renders the messages and the tokenizer encodes the prompt; temperature (0
// = greedy), top_p, top_k, min_p and seed (choice i of n uses seed+i) select
// engine.Sampler's settings, those a request leaves out taken from the
// model's generation_config.json; stop, stop_token_ids, ignore_eos and
// max_tokens pass through; presence_penalty, frequency_penalty,
// repetition_penalty and logit_bias become infer.Penalties (applied before
// temperature, so logprobs are of the penalised logits); a forced tool
// choice becomes an infer.Constraint. The model's EOS tokens include the token its chat
// template ends assistant turns with. A full queue is 429 with retry-after;
// a request whose prompt plus max_tokens exceeds the context length is a
// 400. A client that goes away cancels its request.
//
// # Logprobs
//
// The logprob of each sampled token is under the distribution it was
// sampled from (see infer and engine.Sampler). With
// return_tokens_as_token_ids the token is written "token_id:N"; bytes are
// the token's exact bytes. The end-of-turn token that ends a choice is
// included in logprobs (its text is not in the content).
//
// # Tool calls
//
// Tools go to the chat template. The generated text is parsed back into
// message.tool_calls in the model's syntax: the Hermes/Qwen form
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> (templates that
// mention <tool_call>) or the Llama-3.1 JSON form {"name": ..., "parameters":
// {...}} (optionally after <|python_tag|>, several separated by ";").
// finish_reason is then "tool_calls".
//
// A forced tool choice ("required" or a named function) is structural, so
// it works even on a model with random weights: generation runs under the
// JSON grammar of structured outputs (below) for one call in the model's
// syntax (the <tool_call> opener included), the function name one of the
// allowed ones, the arguments following the function's parameters schema
// (strict: true: the structured-outputs subset, checked up front, forced or
// not; otherwise keywords outside it are ignored). Tool-call markers that are
// added tokens (<tool_call>, </tool_call>) are produced as those single
// tokens, as the template renders it, and never inside the JSON; once the call
// is complete only the end-of-turn token is allowed.
//
// # Structured outputs
//
// response_format json_object (any JSON object) and json_schema (the strict
// subset of jsonschema.go; a schema outside it is a 400 naming the schema
// path) run under a byte-level JSON grammar compiled from the schema
// (jsongrammar.go), an infer.Constraint: at each step every token whose
// bytes would leave the grammar is masked to -Inf, so the output is valid
// for the schema under any sampling settings, even for untrained weights.
// A token is also masked when the shortest valid completion after it would
// no longer fit in the tokens max_tokens leaves, so the document is always
// complete (max_tokens below the shortest valid output is a 400). Output
// uses json.dumps spacing and the schema's property order. Logprobs of
// constrained steps are those of the constrained distribution (the masked
// logits renormalised), which is what the tokens were sampled from.
//
// # Streaming
//
// SSE chunks: one role chunk per choice, content deltas (with their logprobs),
// tool calls as whole deltas once parsed, a finish chunk per choice, a usage
// chunk (choices: []) with stream_options.include_usage, then data: [DONE].
// Text that might begin a <tool_call> is held back here until it is decided
// (infer holds back text that might begin a stop string).
//
// # Tracing
//
// Every completion is recorded through the CallRecorder as a call in the
// model's entity/project (base models: the caller's personal entity, project
// "inference"), inputs = the request body, output = the response (for a
// stream, the response the chunks assemble to), summary = {"usage": {model:
// {requests, prompt_tokens, completion_tokens, total_tokens}}}. The call id is
// the x-call-id response header (for a stream, an HTTP trailer, since the
// call is recorded when the stream ends). A recording failure is logged and
// never fails the completion.
package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/engine"
	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
	"flywheel/internal/store"
)

// Target is a resolved model address: the base model to run and, for a
// trained model, the LoRA checkpoint to apply.
type Target struct {
	Name       string // canonical address, e.g. "alice/proj/m:step3" or the base id
	BaseModel  string // base model id in the engine registry
	AdapterDir string // PEFT adapter folder; "" for the base model
	Step       int    // checkpoint step; -1 for the base model
	Entity     string // owner of a trained model; "" for a base model
	Project    string
	ModelName  string // trained model name; "" for a base model
	Created    time.Time
}

// Resolver resolves trained-model addresses for a caller. The server
// handles base model ids itself and strips the artifact-URI prefix first.
type Resolver interface {
	// Resolve resolves "entity/project/name" (latest step) or
	// "entity/project/name:step{N}". A model the caller cannot see, or a
	// missing step, is an *httpx.Error 404.
	Resolve(ctx context.Context, p *auth.Principal, model string) (Target, error)
	// List returns the caller's trained models at their latest step.
	List(ctx context.Context, p *auth.Principal) ([]Target, error)
}

// CallRecorder records completions in the call store (implemented by
// *trace.Service). A recorder that is also a trace.ChoiceLinker links each
// recorded call's choices to it.
type CallRecorder interface {
	RecordCall(ctx context.Context, p *auth.Principal, projectID, opName string, startedAt, endedAt time.Time, inputs, output, summary json.RawMessage, exception string) (callID string, err error)
}

// DefaultAdapterCacheSize is how many LoRA adapters are kept loaded when
// Options.AdapterCacheSize is zero.
const DefaultAdapterCacheSize = 16

// DefaultPrefixCacheMB is the prefix cache's budget in MiB when
// Options.PrefixCacheMB is zero.
const DefaultPrefixCacheMB = 512

// Options tune the server. Zero values take the defaults.
type Options struct {
	MaxBatch         int           // sequences decoded per step per base model (default 32)
	MaxQueue         int           // requests waiting for a batch slot before 429 (default 256)
	MaxN             int           // largest n (default 16)
	MaxModelLen      int           // cap on the context length (default: the model's)
	PrefillChunk     int           // prompt tokens fed per step across sequences (default 512)
	AdapterCacheSize int           // LoRA adapters kept loaded (default 16)
	MaxTopLogprobs   int           // largest top_logprobs (default 20)
	RetryAfter       time.Duration // retry-after of a 429 (default 1s)
	// MaxInflightPerKey bounds the inference requests one API key has in
	// flight (default DefaultMaxInflightPerKey; negative: no limit); past
	// it, 429 with retry-after.
	MaxInflightPerKey int
	OpName            string // call-store op name (default "chat.completions")
	// PrefixCacheMB is the memory budget, in MiB, of the prefix cache that
	// keeps prompts' KV blocks across requests (infer.PrefixCache), shared
	// by all base models: 0 takes DefaultPrefixCacheMB, a negative value
	// turns the cache off.
	PrefixCacheMB int
	Logger        *slog.Logger

	// TemplateLimits bound each chat-template render (zero fields:
	// chattmpl.DefaultLimits). Chat templates come from model folders and
	// are treated as untrusted code.
	TemplateLimits chattmpl.Limits
	// MaxPromptBytesPerToken bounds a prompt before it is tokenized: the
	// messages, tools and template kwargs of a request (and the rendered
	// prompt) may hold at most the context length times this many bytes
	// (default DefaultMaxPromptBytesPerToken).
	MaxPromptBytesPerToken int
	// MaxRecordBytes bounds the inputs and the output recorded in the call
	// store for one completion; larger ones are recorded as a stub saying
	// their size (default DefaultMaxRecordBytes).
	MaxRecordBytes int
	// MaxStoredResponses bounds the responses kept per user for
	// previous_response_id (default DefaultMaxStoredResponses).
	MaxStoredResponses int
	// MaxStoredResponseBytes bounds the conversation a stored response
	// continues (default DefaultMaxStoredResponseBytes).
	MaxStoredResponseBytes int
	// Responses keeps stored responses (the database); nil: responses are
	// not stored and previous_response_id is refused.
	Responses store.Responses
}

func (o *Options) defaults() {
	// MaxBatch, MaxQueue and PrefillChunk take infer's defaults there.
	if o.MaxN <= 0 {
		o.MaxN = 16
	}
	if o.AdapterCacheSize <= 0 {
		o.AdapterCacheSize = DefaultAdapterCacheSize
	}
	if o.PrefixCacheMB == 0 {
		o.PrefixCacheMB = DefaultPrefixCacheMB
	}
	if o.MaxTopLogprobs <= 0 {
		o.MaxTopLogprobs = 20
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.MaxInflightPerKey == 0 {
		o.MaxInflightPerKey = DefaultMaxInflightPerKey
	}
	if o.MaxPromptBytesPerToken <= 0 {
		o.MaxPromptBytesPerToken = DefaultMaxPromptBytesPerToken
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxStoredResponses <= 0 {
		o.MaxStoredResponses = DefaultMaxStoredResponses
	}
	if o.MaxStoredResponseBytes <= 0 {
		o.MaxStoredResponseBytes = DefaultMaxStoredResponseBytes
	}
	if o.OpName == "" {
		o.OpName = "chat.completions"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server serves inference over HTTP.
type Server struct {
	reg      *engine.Registry
	resolver Resolver
	recorder CallRecorder
	opts     Options
	log      *slog.Logger
	adapters *infer.AdapterCache
	prefix   *infer.PrefixCache // nil: off
	inflight *keyLimiter        // inference requests in flight per key

	mu     sync.Mutex
	models map[string]*servedModel
	closed bool

	baseMu    sync.Mutex
	baseIDs   map[string]bool
	baseAt    time.Time
	baseOrder []string
}

// New returns a server over the models of reg. resolver (trained models)
// and recorder (call store) may be nil.
func New(reg *engine.Registry, resolver Resolver, recorder CallRecorder, opts Options) *Server {
	opts.defaults()
	return &Server{
		reg: reg, resolver: resolver, recorder: recorder, opts: opts, log: opts.Logger,
		adapters: infer.NewAdapterCache(opts.AdapterCacheSize),
		prefix:   infer.NewPrefixCache(int64(opts.PrefixCacheMB) << 20),
		models:   map[string]*servedModel{},
		inflight: &keyLimiter{max: opts.MaxInflightPerKey},
	}
}

// Register mounts the handlers in the Bearer-authenticated OpenAI group.
func (s *Server) Register(rt *httpx.Routes) {
	mux := rt.In(httpx.OpenAIAPI)
	mux.Route("POST /v1/chat/completions", s.perKey(s.handleChat))
	mux.Route("POST /v1/chat/completions/", s.perKey(s.handleChat))
	mux.Route("POST /v1/completions", s.perKey(s.handleCompletions))
	mux.Route("POST /v1/responses", s.perKey(s.handleResponses))
	mux.Route("GET /v1/responses/{id}", s.handleGetResponse)
	mux.Route("DELETE /v1/responses/{id}", s.handleDeleteResponse)
	mux.Route("GET /v1/models", s.handleModels)
	mux.Route("GET /v1/models/{model...}", s.handleModel)
	mux.Route("POST /tokenize", s.handleTokenize)
	mux.Route("POST /detokenize", s.handleDetokenize)
}

// Close stops every scheduler; running requests fail.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	ms := make([]*servedModel, 0, len(s.models))
	for _, m := range s.models {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	for _, m := range ms {
		m.sched.Close()
	}
}

// Stats describes the scheduler of a base model (tests, metrics).
type Stats = infer.Stats

// Stats returns the scheduler statistics of a loaded base model.
func (s *Server) Stats(baseModel string) Stats {
	s.mu.Lock()
	m := s.models[baseModel]
	s.mu.Unlock()
	if m == nil {
		return Stats{}
	}
	return m.sched.Stats()
}

// model returns the loaded base model with its scheduler.
func (s *Server) model(id string) (*servedModel, error) {
	s.mu.Lock()
	if m, ok := s.models[id]; ok {
		s.mu.Unlock()
		return m, nil
	}
	if s.closed {
		s.mu.Unlock()
		return nil, httpx.Errorf(http.StatusServiceUnavailable, "server is shutting down")
	}
	s.mu.Unlock()
	em, err := s.reg.Get(id)
	if err != nil {
		s.log.Error("serve: load base model", "model", id, "err", err)
		return nil, &httpx.Error{Status: http.StatusInternalServerError, Message: "base model " + id + " could not be loaded", Code: "model_load_failed"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.models[id]; ok {
		return m, nil
	}
	lm, err := newLModel(em, &s.opts, s.prefix)
	if err != nil {
		s.log.Error("serve: start base model", "model", id, "err", err)
		return nil, &httpx.Error{Status: http.StatusInternalServerError, Message: "base model " + id + " cannot be served", Code: "model_load_failed"}
	}
	s.models[id] = lm
	return lm, nil
}

// baseModels returns the servable base model ids (cached for a few seconds).
func (s *Server) baseModels() (map[string]bool, []string) {
	s.baseMu.Lock()
	defer s.baseMu.Unlock()
	if s.baseIDs != nil && time.Since(s.baseAt) < 5*time.Second {
		return s.baseIDs, s.baseOrder
	}
	ids, err := s.reg.List()
	if err != nil {
		s.log.Error("serve: list base models", "err", err)
	}
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	s.baseIDs, s.baseOrder, s.baseAt = set, ids, time.Now()
	return set, ids
}

// StripArtifactPrefix removes an artifact-URI prefix "<scheme>:///" from a
// model address.
func StripArtifactPrefix(model string) string {
	if i := strings.Index(model, ":///"); i >= 0 && !strings.ContainsAny(model[:i], "/") {
		return model[i+4:]
	}
	return model
}

// ModelRef is a parsed trained-model address.
type ModelRef struct {
	Entity, Project, Name string
	Step                  int // -1: latest
}

// ParseModelRef parses "entity/project/name" or "entity/project/name:step{N}"
// (after StripArtifactPrefix). ok is false for any other shape.
func ParseModelRef(model string) (ModelRef, bool) {
	ref := ModelRef{Step: -1}
	base := model
	if i := strings.LastIndex(model, ":"); i >= 0 {
		suffix := model[i+1:]
		if !strings.HasPrefix(suffix, "step") {
			return ref, false
		}
		n, err := strconv.Atoi(suffix[4:])
		if err != nil || n < 0 || strings.HasPrefix(suffix[4:], "+") {
			return ref, false
		}
		ref.Step = n
		base = model[:i]
	}
	parts := strings.Split(base, "/")
	if len(parts) != 3 {
		return ref, false
	}
	for _, p := range parts {
		if p == "" {
			return ref, false
		}
	}
	ref.Entity, ref.Project, ref.Name = parts[0], parts[1], parts[2]
	return ref, true
}

// resolveModel maps a request's model to its target and the loaded base
// model the target runs on: the first step of every inference route.
func (s *Server) resolveModel(ctx context.Context, p *auth.Principal, model string) (Target, *servedModel, error) {
	target, err := s.resolve(ctx, p, model)
	if err != nil {
		return Target{}, nil, err
	}
	lm, err := s.model(target.BaseModel)
	if err != nil {
		return Target{}, nil, err
	}
	return target, lm, nil
}

// resolve maps a request's model to a target.
func (s *Server) resolve(ctx context.Context, p *auth.Principal, model string) (Target, error) {
	if strings.TrimSpace(model) == "" {
		return Target{}, httpx.Invalid("model", "missing_field", "model is required")
	}
	addr := StripArtifactPrefix(model)
	bases, _ := s.baseModels()
	if bases[addr] {
		return Target{Name: addr, BaseModel: addr, Step: -1}, nil
	}
	if _, ok := ParseModelRef(addr); ok {
		if s.resolver == nil {
			return Target{}, ModelNotFound("model %q not found", model)
		}
		t, err := s.resolver.Resolve(ctx, p, addr)
		if err != nil {
			return Target{}, err
		}
		return t, nil
	}
	return Target{}, ModelNotFound("model %q does not exist or you do not have access to it: use a base model id (see GET /v1/models) or a trained model entity/project/name[:step{N}]", model)
}

// ModelNotFound is OpenAI's answer for a model that does not exist or that
// the caller cannot see: 404, type invalid_request_error, code
// model_not_found (the SDKs raise NotFoundError).
func ModelNotFound(format string, args ...any) *httpx.Error {
	return &httpx.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf(format, args...)}
}

// fingerprint is the completion's system_fingerprint: it names the
// configuration that produced it (base model, adapter checkpoint, kernel
// backend), so seeded requests that share it are comparable.
func (t Target) fingerprint() string {
	h := sha256.Sum256([]byte(t.BaseModel + "\x00" + t.Name + "\x00" + strconv.Itoa(t.Step) + "\x00" + kernels.Default().Name()))
	return "fp_" + hex.EncodeToString(h[:5])
}

// handleModel is GET /v1/models/{model}: one model card, or 404
// model_not_found. The id may be a base model, a trained model (latest
// step or :step{N}) or either behind an artifact-URI prefix; slashes may
// come escaped (the SDKs escape the id as one path segment).
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) error {
	p, err := httpx.Principal(r)
	if err != nil {
		return err
	}
	id := r.PathValue("model")
	t, err := s.resolve(r.Context(), p, id)
	if err != nil {
		return err
	}
	card := ModelCard{ID: id, Object: "model", OwnedBy: "flywheel", Root: t.BaseModel}
	if t.Entity == "" {
		s.mu.Lock()
		if lm, ok := s.models[t.BaseModel]; ok {
			card.MaxModelLen = lm.maxLen()
		}
		s.mu.Unlock()
	} else {
		parent := t.BaseModel
		card.Created, card.OwnedBy, card.Parent = t.Created.Unix(), t.Entity, &parent
	}
	httpx.WriteJSON(w, http.StatusOK, card)
	return nil
}

// handleModels is GET /v1/models.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) error {
	p, err := httpx.Principal(r)
	if err != nil {
		return err
	}
	_, ids := s.baseModels()
	list := ModelList{Object: "list", Data: []ModelCard{}}
	for _, id := range ids {
		card := ModelCard{ID: id, Object: "model", OwnedBy: "flywheel", Root: id}
		s.mu.Lock()
		if lm, ok := s.models[id]; ok {
			card.MaxModelLen = lm.maxLen()
		}
		s.mu.Unlock()
		list.Data = append(list.Data, card)
	}
	if s.resolver != nil {
		ts, err := s.resolver.List(r.Context(), p)
		if err != nil {
			return err
		}
		for _, t := range ts {
			parent := t.BaseModel
			list.Data = append(list.Data, ModelCard{ID: t.Name, Object: "model", Created: t.Created.Unix(), OwnedBy: t.Entity, Root: t.BaseModel, Parent: &parent})
		}
	}
	httpx.WriteJSON(w, http.StatusOK, list)
	return nil
}

// rawField returns the raw JSON of a top-level field of body.
func rawField(body []byte, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	return m[name]
}
