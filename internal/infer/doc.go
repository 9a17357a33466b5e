// Package infer is flywheel's inference core: it turns prompts (token ids)
// into sampled tokens and text for one base model and any of its LoRA
// adapters. It knows nothing of HTTP, chat messages, tools or the call
// store; internal/serve puts the OpenAI-compatible API on top of it.
//
// # Use
//
//	s, err := infer.NewScheduler(m, infer.Options{MaxBatch: 32})
//	gen, err := s.Submit(ctx, infer.Request{Prompt: ids, Sampling: params, MaxTokens: 64})
//	for {
//		ev := gen.Poll(0) // new tokens and text of choice 0
//		...
//		if ev.Done {
//			break
//		}
//		<-gen.Changed()
//	}
//
// Cancelling ctx ends the request's choices before the next step
// (FinishCancelled); Scheduler.Close fails whatever is still running.
//
// # Scheduling
//
// Each Scheduler runs one goroutine with a continuous-batching loop: every
// step is one engine.Model.Forward over all running sequences, decode rows
// (one token) and prefill chunks (up to Options.PrefillChunk prompt tokens
// per step across sequences) together, sequences of different LoRA adapters
// and of the base model in the same batch. Requests that arrive join at the
// next step while the batch has room (Options.MaxBatch sequences); beyond it
// they wait in a queue of Options.MaxQueue requests, and past that Submit
// answers ErrQueueFull. The n choices of a request prefill the prompt once:
// the other n-1 start from a copy of the prefilled sequence
// (engine.Seq.Clone) and sample their first token from the prompt's final
// logits with their own samplers, as if each had prefilled it; they count
// against MaxBatch from admission. Sampling runs in parallel across the
// batch (internal/par). A panic in a step (an engine bug) fails the running
// requests, not the process.
//
// # Sampling and logprobs
//
// A choice samples with an engine.Sampler of its Request.Sampling entry
// (temperature, top-p, top-k, min-p, seed). The logprob of each sampled
// token is under the distribution it was sampled from (see engine.Sampler);
// under a Constraint it is the masked distribution. Request.Penalties
// (logit bias, repetition, frequency and presence penalties) change the
// logits before the constraint and the sampler, so logprobs are those of
// the penalised distribution.
//
// # Prompt logits
//
// A Request with PromptLogits gets the model's logits at every prompt
// position (vLLM's prompt_logprobs): its prompt is prefilled in full, in
// passes of its own of at most PromptLogitsChunk tokens
// (engine.Model.LogitsAt), never from the prefix cache, and the blocks it
// prefills go to the cache like any other prompt's.
//
// # Output processing
//
// Tokens are detokenised incrementally (tokenizer.StreamDecoder: bytes of a
// character split across tokens are held back until complete); special
// tokens produce no text except those Rules keep (the tool-call markers).
// A choice ends with FinishStop on an end token (Rules.EOS, unless
// Request.IgnoreEOS), on one of Request.StopIDs, or on a stop string
// (Request.Stop): the text up to the stop string is output, the stop string
// and what follows are not. Text that may begin a stop string is held back
// until it is decided (HeldPrefix). A choice ends with FinishLength after
// Request.MaxTokens tokens or at the context length (Rules.MaxLen); held-back text is then
// output after all. Every sampled token, the one that ends the choice
// included, is in the choice's Tokens.
//
// # Constraints
//
// A Request may carry a Constraint per choice (Request.NewConstraint): before
// each sampling step it masks the logits of the tokens it forbids, and it
// advances on the token sampled. The scheduler only calls that interface;
// serve's JSON grammar (structured outputs, forced tool calls) is one
// implementation.
//
// # Prefix cache
//
// With Options.PrefixCache (a PrefixCache, which several schedulers may
// share), the keys and values of prompts are kept across requests in
// blocks of PrefixBlockTokens positions, keyed by the base model, the
// adapter (the loaded *engine.Adapter) and a SHA-256 hash chain of the
// whole token prefix up to the block's end. Before each step a prefilling
// sequence copies in the cached blocks that continue its prompt from where
// it is (engine.Seq.AppendKV) and skips prefilling them, so a multi-turn
// conversation that re-sends its history prefills only the new tokens, and
// concurrent requests with a common prefix take it from the first that
// prefilled it. The prompt's last token is always prefilled (its logits
// are needed), so at most len(prompt)-1 tokens come from the cache. Blocks
// are added as prefill completes them and, when a sequence ends, for the
// tokens it generated too; the least recently used are evicted to stay
// within the cache's byte budget. Stats counts lookups, hits and the
// tokens taken from the cache.
//
// The engine's kernels round differently for passes of different numbers
// of rows, so outputs are bit-identical only for the same passes. The
// scheduler with a cache therefore prefills the tail of a prompt after its
// last full block before the final token in a pass of its own, hit or miss:
// a prompt seen before then gets exactly the tokens and logprobs it got the
// first time (without a cache nothing is split, and results equal the
// cache's to float rounding). When the cached part was computed differently (the
// tokens a previous turn generated were decoded one by one, not
// prefilled), the output is the same to float rounding, as it is under
// batching.
//
// # Adapters
//
// AdapterCache keeps loaded LoRA adapters in an LRU cache keyed by folder
// and weights file (size and modification time, so a checkpoint rewritten
// in place is loaded afresh); concurrent requests for one adapter load it
// once.
package infer
