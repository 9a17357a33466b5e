// Package engine is flywheel's pure-Go transformer engine: it loads Hugging
// Face model folders (config.json + safetensors) of the Llama family
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM), runs the forward pass in float32 with a KV cache over
// batches of sequences, applies LoRA adapters unmerged, and samples tokens.
//
// # Loading
//
// Registry (NewRegistry(modelsDir)) lists the model folders below a models
// dir (List) and loads each base model once, shared by training and serving
// (Get). Load(dir) loads one folder: ReadConfig, LoadWeights (matrices
// copied from the memory-mapped file into one huge-page arena in their
// stored precision, F32 as float32 and F16/BF16 as 16-bit values the
// kernels widen as they multiply, or widened once when the folder's
// flywheel.json asks for float32;
// sharded model.safetensors.index.json supported; tied or separate
// lm_head), the tokenizer, the chat template (Template nil and TemplateErr
// set when the folder has none) and generation_config.json (Gen; EOS()).
// NewModel and RandomWeights build models in memory for tests and
// benchmarks. Which tensors a model has, their names (Hugging Face and
// GGUF), shapes and initialisation are listed once, in package params
// (Config.Params); LoadWeights, LoadGGUF, RandomWeights and Weights.Check
// iterate that list. Loaded weights are read-only: never write into them.
//
// # Forward
//
// A Seq is one sequence being decoded: its KV cache, its length and its
// adapter (NewSeq(adapter), nil for the base). Forward(seqs, tokens)
// appends tokens[i] to seqs[i] for all i in one batched pass: all new rows
// of all sequences are stacked into one activation matrix, so each weight
// matrix is read once per step (GEMM, not GEMV), whatever mix of prefill
// and decode, positions and adapters the batch holds. LoRA is applied
// unmerged per adapter group, y += (alpha/r)·(x·Aᵀ)·Bᵀ; an adapter with B = 0
// gives exactly the base model's logits. Forward returns each sequence's
// logits at its last new position; those slices belong to the sequences
// and are overwritten by their next Forward. Logits(adapter, tokens)
// returns all positions' logits of a fresh sequence (for parity checks and
// the trainer). Going past max_position_embeddings is an error and leaves
// the sequences unchanged. A Model is safe for concurrent use; a Seq is
// not (use each from one goroutine, once per batch).
//
// Supported features: GQA and MHA, Qwen2 q/k/v biases, Qwen3 per-head q/k
// RMSNorm before RoPE, RoPE in the HF rotate_half convention with rope
// theta and the "linear" and "llama3" scalings, Mistral's sliding window,
// SwiGLU MLPs, tied embeddings. Matrix products go through
// kernels.Default(), except decode batches (streamed: kernels.GemvNT,
// kernels.HalfGemmNT) and half-precision weights (kernels.HalfGemm*).
//
// # Sampling
//
// NewSampler(SamplingParams) makes a per-request sampler: temperature
// (0 = greedy), top-k, top-p, min-p, optional seed (same seed and logits,
// same tokens) and top-N alternatives. The logprob reported for a token is
// under the distribution it was sampled from: softmax(logits/temperature)
// after temperature and before the top-k/top-p/min-p truncation; for greedy
// decoding it is the temperature-1 distribution, log_softmax(logits). Stop
// strings and max tokens are the caller's; EOS() gives the end-of-sequence ids
// the files declare (infer.Rules decides which tokens end a choice).
package engine
